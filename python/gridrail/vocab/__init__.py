"""Tokenizer adapters: each token id's byte spelling, EOS ids, alias classes, byte completeness.

``Vocabulary.from_file`` (HF ``tokenizer.json``), ``.from_hf`` (transformers),
``.from_tiktoken`` and ``.from_gguf`` all reduce a tokenizer to the same object; see
``gridrail.vocab.vocabulary`` for the conventions.
"""

from gridrail.vocab.vocabulary import (
    END_OF_GENERATION_NAMES,
    ByteCompletenessWarning,
    Vocabulary,
    VocabularyError,
)

__all__ = [
    "END_OF_GENERATION_NAMES",
    "ByteCompletenessWarning",
    "Vocabulary",
    "VocabularyError",
]

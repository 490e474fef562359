"""tiktoken adapter: a ``tiktoken.Encoding``'s mergeable ranks are already byte strings.

The rank of a byte string is its token id. Special tokens (``<|endoftext|>``, ...) have no
spelling; ``<|endoftext|>`` is the primary EOS when the encoding has it. ``tiktoken`` itself is
not imported: any object with ``_mergeable_ranks`` / ``_special_tokens`` (or
``decode_single_token_bytes`` and ``special_tokens_set``) works.
"""

from __future__ import annotations

from collections.abc import Sequence

from gridrail.vocab.vocabulary import (
    Vocabulary,
    VocabularyError,
    assemble,
    check_id_span,
    read_token_id,
)


def vocabulary_from_tiktoken(
    encoding, *, size: int | None, eos_token_ids: int | Sequence[int] | None
) -> Vocabulary:
    source = f"tiktoken:{getattr(encoding, 'name', type(encoding).__name__)}"
    specials = getattr(encoding, "_special_tokens", None)
    if specials is None:
        names = getattr(encoding, "special_tokens_set", None)
        if names is None:
            raise VocabularyError(
                f"{source}: not a tiktoken Encoding (no _special_tokens / special_tokens_set)"
            )
        specials = {name: encoding.encode_single_token(name) for name in names}
    specials = {
        str(name): read_token_id(token_id, f"special token {name!r}", source)
        for name, token_id in specials.items()
    }

    ranks = getattr(encoding, "_mergeable_ranks", None)
    if ranks is not None:
        by_id: dict[int, bytes] = {}
        for spelling, rank in ranks.items():
            token_id = read_token_id(rank, f"token {spelling!r:.40}", source)
            if token_id in by_id:
                raise VocabularyError(
                    f"{source}: rank {token_id} is given to two tokens, {by_id[token_id]!r:.40} "
                    f"and {spelling!r:.40}"
                )
            by_id[token_id] = bytes(spelling)
    else:
        by_id = _ranks_by_decoding(encoding, set(specials.values()), source)
    ids = set(by_id) | set(specials.values())
    if not ids:
        raise VocabularyError(f"{source}: the encoding has no tokens")
    n_vocab = getattr(encoding, "n_vocab", 0) or 0
    width = max(max(ids), read_token_id(n_vocab, "n_vocab", source) - 1) + 1
    check_id_span(width - 1, len(ids), source)
    spellings: list[bytes | None] = [None] * width
    for token_id, spelling in by_id.items():
        spellings[token_id] = spelling
    special_names = {token_id: name for name, token_id in specials.items()}
    for token_id in special_names:
        spellings[token_id] = None
    declared = [specials["<|endoftext|>"]] if "<|endoftext|>" in specials else []
    return assemble(
        spellings,
        special_names,
        declared,
        source=source,
        size=size,
        eos_token_ids=eos_token_ids,
        dummy_prefix=False,
    )


def _ranks_by_decoding(encoding, special_ids: set[int], source: str) -> dict[int, bytes]:
    try:
        count = read_token_id(encoding.n_vocab, "n_vocab", source)
        decode = encoding.decode_single_token_bytes
    except AttributeError as error:
        raise VocabularyError(
            f"{source}: not a tiktoken Encoding (no _mergeable_ranks, n_vocab or "
            "decode_single_token_bytes)"
        ) from error
    by_id: dict[int, bytes] = {}
    for token_id in range(count):
        if token_id in special_ids:
            continue
        try:
            by_id[token_id] = bytes(decode(token_id))
        except KeyError:  # an unassigned id
            check_id_span(token_id, len(by_id) + len(special_ids), source)
    return by_id

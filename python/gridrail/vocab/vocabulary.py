"""The vocabulary as byte strings: what each token id spells (paper §2, "Tokens are byte strings").

One definition of a token's spelling serves the token trie, the fast mask path and the reference
oracle, so every adapter (``tokenizer.json``, transformers, tiktoken, GGUF) reduces its source to
the same thing: a tuple ``token_bytes`` indexed by id, where ``None`` marks an id that spells
nothing and is permanently masked (special, control, unknown and unused tokens, unassigned ids,
and the end-of-sequence ids, which enter masks only through the EOS gate).

What a tokenizer file says about ids is checked before any table is sized by it: an id is a
non-negative integer (never a float, a string or a bool), one token per id, and the ids are
nearly dense — at most ``MAX_UNASSIGNED_IDS`` unassigned ids below the highest one or below
``size`` — so a corrupt file is a ``VocabularyError`` naming the id, not a gigabyte table.
"""

from __future__ import annotations

import hashlib
import operator
import os
import struct
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence

from gridrail.errors import GridrailError, UsageError

__all__ = [
    "END_OF_GENERATION_NAMES",
    "MAX_UNASSIGNED_IDS",
    "ByteCompletenessWarning",
    "Vocabulary",
    "VocabularyError",
]

#: Special tokens that end generation when a tokenizer has them, whatever its configuration
#: says (the same names llama.cpp treats as end-of-generation, plus ``</s>`` and ``<eos>``).
#: Only tokens that are special (HF ``special: true``, GGUF control, tiktoken special) count.
END_OF_GENERATION_NAMES = frozenset(
    {
        "<|endoftext|>",
        "<|end_of_text|>",
        "<|eot_id|>",
        "<|eom_id|>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",
        "<end_of_turn>",
        "<end_of_utterance>",
        "<EOT>",
        "<|end▁of▁sentence|>",
        "<｜end▁of▁sentence｜>",
        "</s>",
        "<eos>",
    }
)

#: Token ids must be nearly dense: at most this many ids below ``size`` may be unassigned (no
#: token, or padding up to a model's logits width). Real tokenizers leave none or a few hundred
#: (models pad their logits to a multiple of 64 or 128); a corrupt id such as 1e9 is then an
#: error naming it, not a gigabyte table.
MAX_UNASSIGNED_IDS = 1 << 16

_NO_SPELLING = 0xFFFFFFFF
_NEVER_IN_UTF8 = frozenset({0xC0, 0xC1, *range(0xF5, 0x100)})
_FINGERPRINT_DOMAIN = b"gridrail.vocab.v1\x00"


class VocabularyError(GridrailError):
    """A tokenizer file or object cannot be read as a vocabulary (unreadable, truncated, or of a
    kind gridrail does not support). The message names the file and what to do about it."""


class ByteCompletenessWarning(UserWarning):
    """The vocabulary cannot spell every byte string: some byte value is not the full spelling
    of any token. Masks stay sound, but completeness (no dead ends) is void for this vocabulary."""


class Vocabulary:
    """A tokenizer vocabulary reduced to byte strings: the input of the token trie.

    ``Vocabulary(token_bytes, eos_token_ids)`` builds one directly (tests, tiny vocabularies);
    the ``from_*`` constructors adapt real tokenizers. ``token_bytes[i]`` is the spelling of id
    ``i`` or ``None`` (no spelling: permanently masked). ``eos_token_ids`` is one id or a
    sequence of ids; the first is the primary ``eos_token_id``. EOS ids never have a spelling
    (their entries are set to ``None``), and neither does a token whose spelling is empty (it
    could never make progress). ``size`` (the logits width) pads ``token_bytes`` with ``None``.
    """

    def __init__(
        self,
        token_bytes: Sequence[bytes | None],
        eos_token_ids: int | Sequence[int],
        *,
        size: int | None = None,
        dummy_prefix: bool = False,
        source: str = "<vocabulary>",
    ) -> None:
        self._source = source
        spellings: list[bytes | None] = []
        for token_id, spelling in enumerate(token_bytes):
            if spelling is None:
                spellings.append(None)
            elif isinstance(spelling, (bytes, bytearray, memoryview)):
                spellings.append(bytes(spelling) or None)  # an empty spelling is no spelling
            else:
                raise UsageError(
                    f"{source}: token {token_id} is spelled {spelling!r:.60}; "
                    "a spelling is bytes or None"
                )
        if size is None:
            size = len(spellings)
        elif isinstance(size, bool) or not isinstance(size, int):
            raise UsageError(f"{source}: size must be an integer, not {type(size).__name__}")
        elif size < len(spellings):
            raise VocabularyError(
                f"{source}: size={size} is smaller than the vocabulary, whose highest id is "
                f"{len(spellings) - 1} (size must be at least {len(spellings)})"
            )
        elif size - len(spellings) > MAX_UNASSIGNED_IDS:
            raise VocabularyError(
                f"{source}: size={size} pads the {len(spellings)} ids of the vocabulary with "
                f"{size - len(spellings)} unassigned ones, more than {MAX_UNASSIGNED_IDS}: "
                "pass the model's logits width"
            )
        spellings.extend([None] * (size - len(spellings)))
        if size == 0:
            raise VocabularyError(f"{source}: the vocabulary is empty")

        eos = _id_list(eos_token_ids, source)
        if not eos:
            raise VocabularyError(
                f"{source}: no end-of-sequence token; pass eos_token_ids=[...] naming the id(s) "
                "that end generation"
            )
        for token_id in eos:
            if not 0 <= token_id < size:
                raise VocabularyError(
                    f"{source}: end-of-sequence id {token_id!r} is not a token id "
                    f"(ids are 0..{size - 1})"
                )
            spellings[token_id] = None
        self._eos_token_id = eos[0]
        self._eos_token_ids = tuple(sorted(set(eos)))
        self._bytes: tuple[bytes | None, ...] = tuple(spellings)
        self._dummy_prefix = bool(dummy_prefix)

        by_spelling: dict[bytes, list[int]] = {}
        special: list[int] = []
        for token_id, spelling in enumerate(self._bytes):
            if spelling is None:
                special.append(token_id)
            else:
                by_spelling.setdefault(spelling, []).append(token_id)
        self._special_ids = frozenset(special)
        self._by_spelling = {spelling: tuple(ids) for spelling, ids in by_spelling.items()}
        self._alias_classes = tuple(
            sorted((ids for ids in self._by_spelling.values() if len(ids) > 1), key=lambda c: c[0])
        )
        self._missing_bytes = frozenset(
            value for value in range(256) if bytes((value,)) not in self._by_spelling
        )
        self._fingerprint = _fingerprint(self._bytes, self._eos_token_ids)
        if self._missing_bytes:
            warnings.warn(
                ByteCompletenessWarning(_missing_bytes_message(source, self._missing_bytes)),
                stacklevel=_caller_stacklevel(),
            )

    # ----- constructors (adapters) -----------------------------------------------------------

    @classmethod
    def from_file(
        cls,
        path,
        *,
        size: int | None = None,
        eos_token_ids: int | Sequence[int] | None = None,
    ) -> Vocabulary:
        """Read a Hugging Face ``tokenizer.json`` (or a folder holding one) with the standard
        library only. ``tokenizer_config.json`` and ``generation_config.json`` beside it, when
        present, name the end-of-sequence token(s)."""
        from gridrail.vocab.huggingface import vocabulary_from_file

        return vocabulary_from_file(path, size=size, eos_token_ids=eos_token_ids)

    @classmethod
    def from_hf(
        cls,
        tokenizer,
        *,
        size: int | None = None,
        eos_token_ids: int | Sequence[int] | None = None,
    ) -> Vocabulary:
        """Adapt a ``transformers`` tokenizer object (fast: its backend ``tokenizer.json``;
        slow: ``convert_ids_to_tokens`` and the byte-level / SentencePiece conventions)."""
        from gridrail.vocab.huggingface import vocabulary_from_hf

        return vocabulary_from_hf(tokenizer, size=size, eos_token_ids=eos_token_ids)

    @classmethod
    def from_tiktoken(
        cls,
        encoding,
        *,
        size: int | None = None,
        eos_token_ids: int | Sequence[int] | None = None,
    ) -> Vocabulary:
        """Adapt a ``tiktoken.Encoding`` (its mergeable ranks; special tokens are masked)."""
        from gridrail.vocab.tiktoken_encoding import vocabulary_from_tiktoken

        return vocabulary_from_tiktoken(encoding, size=size, eos_token_ids=eos_token_ids)

    @classmethod
    def from_gguf(
        cls,
        path,
        *,
        size: int | None = None,
        eos_token_ids: int | Sequence[int] | None = None,
    ) -> Vocabulary:
        """Read the vocabulary of a GGUF file (versions 2 and 3, little-endian) from its
        metadata; no tensor data is read and no ``gguf`` package is needed."""
        from gridrail.vocab.gguf_file import vocabulary_from_gguf

        return vocabulary_from_gguf(path, size=size, eos_token_ids=eos_token_ids)

    # ----- the vocabulary --------------------------------------------------------------------

    @property
    def size(self) -> int:
        """The logits width: highest id + 1 (unassigned ids in between have no spelling)."""
        return len(self._bytes)

    def __len__(self) -> int:
        return len(self._bytes)

    def token_bytes(self, token_id: int) -> bytes | None:
        """The spelling of ``token_id``, or ``None`` when it has none (permanently masked)."""
        if not 0 <= token_id < len(self._bytes):
            raise IndexError(f"token id {token_id} is outside 0..{len(self._bytes) - 1}")
        return self._bytes[token_id]

    @property
    def all_token_bytes(self) -> tuple[bytes | None, ...]:
        """Every id's spelling, indexed by id (``None``: no spelling)."""
        return self._bytes

    @property
    def eos_token_id(self) -> int:
        """The primary end-of-sequence id (the one the tokenizer's configuration names)."""
        return self._eos_token_id

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """Every id that ends generation, ascending. Each enters a mask only through the EOS
        gate (iff the output is a sentence of the language)."""
        return self._eos_token_ids

    @property
    def special_ids(self) -> frozenset[int]:
        """Every id without a spelling: special / control / unknown / unused tokens, the EOS
        ids, and unassigned ids. These are never in a mask except EOS through the gate."""
        return self._special_ids

    @property
    def dummy_prefix(self) -> bool:
        """True when the tokenizer prepends a space to the text it encodes (SentencePiece's
        dummy prefix, or byte-level ``add_prefix_space``) and its decoder drops it again: the
        token bytes of ``encode(text)`` then spell ``b" " + text``."""
        return self._dummy_prefix

    @property
    def source(self) -> str:
        """Where this vocabulary was read from (for messages)."""
        return self._source

    def aliases(self, spelling: bytes) -> tuple[int, ...]:
        """All ids spelled exactly ``spelling``, ascending (empty when none is)."""
        return self._by_spelling.get(bytes(spelling), ())

    @property
    def alias_classes(self) -> tuple[tuple[int, ...], ...]:
        """The groups of two or more ids that share one spelling, ordered by their lowest id.
        Masks are over ids, so a trie node admits every id of its class."""
        return self._alias_classes

    @property
    def missing_bytes(self) -> frozenset[int]:
        """Byte values ``b`` such that no token is spelled exactly ``bytes([b])``."""
        return self._missing_bytes

    @property
    def byte_complete(self) -> bool:
        """Every byte value is the full spelling of some token, so any byte string can be
        spelled (precondition (a) of completeness, paper Proposition 8)."""
        return not self._missing_bytes

    @property
    def fingerprint(self) -> str:
        """BLAKE2b-128 (hex) of the canonical encoding: a domain tag, ``size`` (u64 LE), then per
        id either ``0xFFFFFFFF`` (no spelling) or its length (u32 LE) and bytes, then the count
        of EOS ids and each EOS id, ascending (u32 LE)."""
        return self._fingerprint

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return (
            self._fingerprint == other._fingerprint
            and self._eos_token_id == other._eos_token_id
            and self._dummy_prefix == other._dummy_prefix
        )

    def __hash__(self) -> int:
        return hash((self._fingerprint, self._eos_token_id, self._dummy_prefix))

    def __repr__(self) -> str:
        return (
            f"Vocabulary(size={self.size}, eos_token_ids={self._eos_token_ids}, "
            f"special={len(self._special_ids)}, alias_classes={len(self._alias_classes)}, "
            f"byte_complete={self.byte_complete}, fingerprint={self._fingerprint[:12]}…, "
            f"source={self._source!r})"
        )


def read_token_id(value: object, what: str, source: str) -> int:
    """``value`` as a token id read from a file: a non-negative integer, never a bool, a float
    or a string (which the file's format does not allow and a lax reading would round)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise VocabularyError(
            f"{source}: {what} has the id {value!r:.40}, which is not an integer; "
            "is the file corrupt?"
        )
    if value < 0:
        raise VocabularyError(f"{source}: {what} has the negative id {value}")
    return value


def check_id_span(highest: int, count: int, source: str) -> None:
    """``count`` distinct ids up to ``highest`` leave at most MAX_UNASSIGNED_IDS unassigned
    (checked before a table of ``highest + 1`` entries is made)."""
    unassigned = highest + 1 - count
    if unassigned > MAX_UNASSIGNED_IDS:
        raise VocabularyError(
            f"{source}: token id {highest} leaves {unassigned} ids unassigned below it (the "
            f"source has {count} tokens; at most {MAX_UNASSIGNED_IDS} may be missing): is the "
            "file corrupt?"
        )


def _id_list(ids, source: str) -> list[int]:
    """One id or a sequence of ids (anything with ``__index__`` but a bool) as a list of ints."""
    try:
        return [_index(ids)]
    except TypeError:
        pass
    try:
        return [_index(token_id) for token_id in ids]
    except TypeError as error:
        raise VocabularyError(
            f"{source}: end-of-sequence ids must be integers, got {ids!r:.80}"
        ) from error


def _index(value) -> int:
    if isinstance(value, bool):  # an int to Python, never a token id
        raise TypeError("a bool is not a token id")
    return operator.index(value)


def _byte_ranges(values: Iterable[int]) -> str:
    """``0x00-0x1F, 0x7F``: sorted byte values with runs collapsed."""
    runs: list[list[int]] = []
    for value in sorted(values):
        if runs and value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return ", ".join(
        f"0x{low:02X}" if low == high else f"0x{low:02X}-0x{high:02X}" for low, high in runs
    )


def _missing_bytes_message(source: str, missing: frozenset[int]) -> str:
    never_utf8 = missing & _NEVER_IN_UTF8
    note = f"; of these, {_byte_ranges(never_utf8)} never occur in UTF-8 text" if never_utf8 else ""
    return (
        f"{source}: the vocabulary is not byte complete: no token spells the single byte "
        f"value(s) {_byte_ranges(missing)}{note}. Byte strings containing them cannot be written: "
        "masks stay sound, but completeness (no dead ends) is void for this vocabulary."
    )


def _caller_stacklevel() -> int:
    """The stacklevel of the first caller outside this package (the user's construction)."""
    package = os.path.dirname(os.path.abspath(__file__))
    frame = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame = frame.f_back
        level += 1
    return level


def _fingerprint(spellings: tuple[bytes | None, ...], eos_ids: tuple[int, ...]) -> str:
    parts = [_FINGERPRINT_DOMAIN, struct.pack("<Q", len(spellings))]
    pack = struct.Struct("<I").pack
    no_spelling = pack(_NO_SPELLING)
    for spelling in spellings:
        if spelling is None:
            parts.append(no_spelling)
        else:
            parts.append(pack(len(spelling)))
            parts.append(spelling)
    parts.append(pack(len(eos_ids)))
    parts.extend(pack(token_id) for token_id in eos_ids)
    return hashlib.blake2b(b"".join(parts), digest_size=16).hexdigest()


def assemble(
    spellings: Sequence[bytes | None],
    special_names: Mapping[int, str],
    declared_eos: Iterable[int],
    *,
    source: str,
    size: int | None,
    eos_token_ids: int | Sequence[int] | None,
    dummy_prefix: bool,
) -> Vocabulary:
    """Apply the end-of-sequence rule shared by every adapter and build the vocabulary.

    Unless ``eos_token_ids`` overrides it, the EOS ids are the ids the source declares (its
    configuration's EOS first: that one is the primary) followed by every special token named
    in ``END_OF_GENERATION_NAMES``. ``special_names`` maps each special id to its text.
    """
    if eos_token_ids is not None:
        eos = _id_list(eos_token_ids, source)
    else:
        eos = []
        for token_id in declared_eos:
            if token_id not in eos:
                eos.append(token_id)
        for token_id in sorted(special_names):
            if special_names[token_id] in END_OF_GENERATION_NAMES and token_id not in eos:
                eos.append(token_id)
        if not eos:
            raise VocabularyError(
                f"{source}: no end-of-sequence token: the source declares none and no special "
                f"token has one of the names {sorted(END_OF_GENERATION_NAMES)}; pass "
                "eos_token_ids=[...] naming the id(s) that end generation"
            )
    return Vocabulary(spellings, eos, size=size, dummy_prefix=dummy_prefix, source=source)

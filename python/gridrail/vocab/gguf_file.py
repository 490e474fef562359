"""GGUF adapter: the vocabulary in a GGUF file's metadata, read with the standard library.

The layout (little-endian, versions 2 and 3; version 1 counted in 32 bits and is not read):
``"GGUF"``, version u32, tensor count u64, metadata count u64, then per metadata entry a key
(string), a value type u32 and the value. A string is a u64 byte length and UTF-8 bytes; an
array is an element type u32, a count u64 and the elements. Reading stops after the metadata:
no tensor data is touched.

Token spellings follow llama.cpp's ``token_to_piece`` per ``tokenizer.ggml.token_type``:

* 1 normal: ``tokenizer.ggml.model`` "gpt2" (byte-level BPE) inverts GPT-2's byte table;
  "llama" / "t5" (SentencePiece) read ``▁`` as a space.
* 6 byte: ``<0xNN>`` is that byte.
* 4 user-defined: the text as it is (llama.cpp emits it verbatim).
* 2 unknown, 3 control, 5 unused (llama.cpp emits nothing for it; qwen2's ``[PADnnnnnn]``), and
  any other type: no spelling.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Collection, Sequence
from pathlib import Path

from gridrail.vocab.spelling import byte_fallback_value, byte_level_bytes, metaspace_bytes
from gridrail.vocab.vocabulary import Vocabulary, VocabularyError, assemble

SUPPORTED_VERSIONS = (2, 3)
BYTE_LEVEL_MODELS = ("gpt2",)
SENTENCEPIECE_MODELS = ("llama", "t5")

# token types (llama.cpp's llama_token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# metadata value types
_STRING, _ARRAY = 8, 9
_SCALARS = {
    0: "B",  # uint8
    1: "b",  # int8
    2: "H",  # uint16
    3: "h",  # int16
    4: "I",  # uint32
    5: "i",  # int32
    6: "f",  # float32
    7: "?",  # bool
    10: "Q",  # uint64
    11: "q",  # int64
    12: "d",  # float64
}
_WIDTH = {code: struct.calcsize("<" + fmt) for code, fmt in _SCALARS.items()}
_NO_TOKEN = (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF, -1)  # how files write "no such token"
MAX_ARRAY_NESTING = 16  # arrays of arrays are read recursively; real files nest one level

_WANTED = (
    "tokenizer.ggml.model",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id",
    "tokenizer.ggml.add_space_prefix",
)


class _Reader:
    """Bounds-checked little-endian reads from a buffer; every overrun is a clear error."""

    def __init__(self, buffer, source: str) -> None:
        self.buffer = buffer
        self.end = len(buffer)
        self.pos = 0
        self.source = source

    def take(self, count: int, what: str) -> int:
        start = self.pos
        if count < 0 or start + count > self.end:
            raise VocabularyError(
                f"{self.source}: truncated GGUF file: it ends at byte {self.end} while reading "
                f"{what}, which needs {count} bytes from byte {start}; the file is incomplete "
                "(an interrupted download?) or corrupt"
            )
        self.pos = start + count
        return start

    def scalar(self, code: int, what: str):
        start = self.take(_WIDTH[code], what)
        return struct.unpack_from("<" + _SCALARS[code], self.buffer, start)[0]

    def u32(self, what: str) -> int:
        return self.scalar(4, what)

    def u64(self, what: str) -> int:
        return self.scalar(10, what)

    def string(self, what: str) -> str:
        length = self.u64(what)
        start = self.take(length, what)
        return bytes(self.buffer[start : start + length]).decode("utf-8", "surrogateescape")

    def skip_string(self, what: str) -> None:
        self.take(self.u64(what), what)

    def value(self, kind: int, what: str, keep: bool, depth: int = 0):
        """Read (keep=True) or skip (keep=False, returns None) one value of type ``kind``."""
        if kind in _SCALARS:
            value = self.scalar(kind, what)
            return value if keep else None
        if kind == _STRING:
            if keep:
                return self.string(what)
            self.skip_string(what)
            return None
        if kind == _ARRAY:
            element = self.u32(what)
            count = self.u64(what)
            if element in _SCALARS:
                start = self.take(count * _WIDTH[element], what)
                if not keep:
                    return None
                return list(struct.unpack_from(f"<{count}{_SCALARS[element]}", self.buffer, start))
            if element == _STRING:
                if keep:
                    return [self.string(what) for _ in range(count)]
                for _ in range(count):
                    self.skip_string(what)
                return None
            if element == _ARRAY:
                if depth >= MAX_ARRAY_NESTING:
                    raise VocabularyError(
                        f"{self.source}: corrupt GGUF metadata: {what} nests arrays more than "
                        f"{MAX_ARRAY_NESTING} deep"
                    )
                items = [self.value(_ARRAY, what, keep, depth + 1) for _ in range(count)]
                return items if keep else None
            raise VocabularyError(
                f"{self.source}: corrupt GGUF metadata: {what} is an array of unknown "
                f"type {element}"
            )
        raise VocabularyError(
            f"{self.source}: corrupt GGUF metadata: {what} has unknown value type {kind}"
        )


def read_gguf_metadata(path, keys: Collection[str] | None = None) -> tuple[int, dict]:
    """``(version, {key: value})`` for the metadata of a GGUF file: every key, or only
    ``keys`` (the rest are skipped, not decoded). Strings are ``str`` (undecodable bytes kept
    as surrogate escapes), arrays are lists, numbers are ``int`` / ``float`` / ``bool``."""
    source = str(path)
    try:
        with open(path, "rb") as file:
            length = os.fstat(file.fileno()).st_size
            if length < 8:
                head = file.read()
                _check_header(head, source, length)
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as buffer:
                return _read_metadata(buffer, source, keys)
    except OSError as error:
        raise VocabularyError(
            f"cannot read {source}: {error.strerror or error}; expected a GGUF file"
        ) from error
    except ValueError as error:  # mmap of something that is not a regular file
        raise VocabularyError(f"cannot read {source} as a GGUF file: {error}") from error


def _check_header(head: bytes, source: str, length: int) -> int:
    if head[:4] != b"GGUF":
        if head[:4] in (b"lmgg", b"fmgg", b"tjgg", b"algg"):
            raise VocabularyError(
                f"{source} is a legacy GGML/GGJT model file, not GGUF: convert it to GGUF with "
                "llama.cpp's conversion scripts"
            )
        if length < 4:
            raise VocabularyError(
                f"{source}: truncated GGUF file: {length} bytes, too short to hold the header"
            )
        raise VocabularyError(
            f"{source} is not a GGUF file: it starts with {head[:4]!r}, not b'GGUF'"
            + (" (it looks like JSON: use Vocabulary.from_file)" if head[:1] == b"{" else "")
        )
    if len(head) < 8:
        raise VocabularyError(
            f"{source}: truncated GGUF file: {length} bytes, too short to hold the header"
        )
    (version,) = struct.unpack_from("<I", head, 4)
    if version in SUPPORTED_VERSIONS:
        return version
    if version & 0xFFFF == 0 and (version >> 24) in (1, 2, 3):
        raise VocabularyError(
            f"{source} is a big-endian GGUF file (version {version >> 24}); gridrail reads "
            "little-endian GGUF only: convert it on a little-endian machine"
        )
    if version == 1:
        raise VocabularyError(
            f"{source} is GGUF version 1, which gridrail does not read (it counts in 32 bits); "
            "re-convert it with a current llama.cpp to get version 3"
        )
    raise VocabularyError(
        f"{source}: unsupported GGUF version {version}; gridrail reads versions "
        f"{' and '.join(map(str, SUPPORTED_VERSIONS))}"
    )


def _read_metadata(buffer, source: str, keys: Collection[str] | None) -> tuple[int, dict]:
    version = _check_header(bytes(buffer[:8]), source, len(buffer))
    reader = _Reader(buffer, source)
    reader.pos = 8
    reader.u64("the tensor count")
    entries = reader.u64("the metadata count")
    metadata: dict = {}
    for index in range(entries):
        key = reader.string(f"metadata key #{index}")
        kind = reader.u32(f"the type of {key!r}")
        keep = keys is None or key in keys
        value = reader.value(kind, repr(key), keep)
        if keep:
            metadata[key] = value
    return version, metadata


def vocabulary_from_gguf(
    path, *, size: int | None, eos_token_ids: int | Sequence[int] | None
) -> Vocabulary:
    source = str(Path(path))
    _, metadata = read_gguf_metadata(path, _WANTED)
    model = metadata.get("tokenizer.ggml.model")
    tokens = metadata.get("tokenizer.ggml.tokens")
    if model is None or tokens is None:
        raise VocabularyError(
            f"{source}: the GGUF file holds no vocabulary (no tokenizer.ggml.model / "
            "tokenizer.ggml.tokens metadata)"
        )
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise VocabularyError(f"{source}: tokenizer.ggml.tokens is not an array of strings")
    types = metadata.get("tokenizer.ggml.token_type")
    if types is None:
        types = [NORMAL] * len(tokens)
    if not isinstance(types, list) or len(types) != len(tokens):
        raise VocabularyError(
            f"{source}: tokenizer.ggml.token_type does not have one entry per token "
            f"({len(types) if isinstance(types, list) else types!r} for {len(tokens)} tokens)"
        )
    if model in BYTE_LEVEL_MODELS:
        spell_normal = byte_level_bytes
        dummy_prefix = bool(metadata.get("tokenizer.ggml.add_space_prefix", False))
    elif model in SENTENCEPIECE_MODELS:

        def spell_normal(text: str) -> bytes:
            return metaspace_bytes(text, byte_fallback=False)

        dummy_prefix = bool(metadata.get("tokenizer.ggml.add_space_prefix", True))
    else:
        supported = ", ".join(repr(m) for m in (*BYTE_LEVEL_MODELS, *SENTENCEPIECE_MODELS))
        raise VocabularyError(
            f"{source}: tokenizer model {model!r} is not supported; gridrail reads the GGUF "
            f"tokenizer models {supported}"
        )

    spellings: list[bytes | None] = [None] * len(tokens)
    special_names: dict[int, str] = {}
    for token_id, (text, kind) in enumerate(zip(tokens, types, strict=True)):
        if kind == NORMAL:
            spellings[token_id] = spell_normal(text)
        elif kind == BYTE:
            value = byte_fallback_value(text)
            if value is None:
                raise VocabularyError(
                    f"{source}: token {token_id} has type byte but is spelled {text!r}, not <0xNN>"
                )
            spellings[token_id] = bytes((value,))
        elif kind == USER_DEFINED:
            spellings[token_id] = text.encode("utf-8", "surrogateescape")
        elif kind in (CONTROL, UNKNOWN):
            special_names[token_id] = text
    declared = []
    for key in ("eos_token_id", "eot_token_id", "eom_token_id"):
        token_id = metadata.get(f"tokenizer.ggml.{key}")
        if token_id is None or (type(token_id) is int and token_id in _NO_TOKEN):
            continue
        if type(token_id) is not int or not 0 <= token_id < len(tokens):
            raise VocabularyError(
                f"{source}: tokenizer.ggml.{key} = {token_id!r} is not a token id "
                f"(the file has {len(tokens)} tokens); pass eos_token_ids=[...]"
            )
        declared.append(token_id)
    return assemble(
        spellings,
        special_names,
        declared,
        source=source,
        size=size,
        eos_token_ids=eos_token_ids,
        dummy_prefix=dummy_prefix,
    )

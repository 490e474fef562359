"""The spelling conventions tokenizers use to write byte strings as token text.

* Byte-level BPE (GPT-2 and its descendants) writes each byte as one printable character: the
  ``bytes_to_unicode`` table. Inverting it gives the token's bytes. A token that uses a character
  outside that alphabet is spelled by its own UTF-8 (this is what the ``tokenizers`` ByteLevel
  decoder and transformers' GGUF loader do).
* SentencePiece writes a space as ``▁`` (U+2581), so ``▁foo`` spells ``b" foo"``: the canonical
  bytes keep the space. Whether the tokenizer also prepends a space to the text it encodes (the
  dummy prefix, which its decoder strips again) is a property of the whole tokenizer, not of a
  token: see ``Vocabulary.dummy_prefix``.
* Byte fallback writes byte ``0xNN`` as the token ``<0xNN>``.
"""

from __future__ import annotations

import re

METASPACE = "\u2581"
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table: byte value -> the printable character byte-level BPE writes it as."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {value: chr(value) for value in printable}
    extra = 0
    for value in range(256):
        if value not in table:
            table[value] = chr(256 + extra)
            extra += 1
    return table


BYTE_LEVEL_ALPHABET = frozenset(bytes_to_unicode().values())

# str.translate table: alphabet character -> the latin-1 character of its byte; a character below
# U+0100 that is *not* in the alphabet maps to U+FFFF so that the latin-1 encode fails for it too.
_TO_LATIN1: dict[int, str] = {ord(char): chr(value) for value, char in bytes_to_unicode().items()}
for _code in range(256):
    _TO_LATIN1.setdefault(_code, "\uffff")


def byte_level_bytes(piece: str) -> bytes:
    """The bytes of a byte-level BPE token (its own UTF-8 if it is not in the byte alphabet;
    undecodable bytes a reader kept as surrogate escapes are those bytes again). A lone
    surrogate spells nothing: UnicodeEncodeError, which the adapters report by token."""
    try:
        return piece.translate(_TO_LATIN1).encode("latin-1")
    except UnicodeEncodeError:
        return piece.encode("utf-8", "surrogateescape")


def byte_fallback_value(piece: str) -> int | None:
    """The byte a ``<0xNN>`` byte-fallback token stands for, or None for any other token."""
    match = _BYTE_FALLBACK.fullmatch(piece)
    return int(match.group(1), 16) if match else None


def metaspace_bytes(piece: str, *, byte_fallback: bool) -> bytes:
    """The bytes of a SentencePiece-style token: ``▁`` is a space, ``<0xNN>`` is that byte."""
    if byte_fallback:
        value = byte_fallback_value(piece)
        if value is not None:
            return bytes((value,))
    return piece.replace(METASPACE, " ").encode("utf-8", "surrogateescape")

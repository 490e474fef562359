"""Token masks in the ecosystem's layout: int32 words, ceil(V/32) per row, bit i % 32 of word
i // 32 set = token i allowed (the layout of XGrammar, llguidance and vLLM)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def words_per_row(vocab_size: int) -> int:
    return (vocab_size + 31) // 32


def allocate_bitmask(batch_size: int, vocab_size: int) -> np.ndarray:
    """A zeroed (batch_size, ceil(vocab_size / 32)) int32 array."""
    if batch_size < 1 or vocab_size < 1:
        raise ValueError(f"batch_size and vocab_size must be positive ({batch_size}, {vocab_size})")
    return np.zeros((batch_size, words_per_row(vocab_size)), dtype=np.int32)


class TokenSet:
    """A set of token ids as a little-endian bit string, cheap to build one id at a time and
    to turn into a bitmask row."""

    __slots__ = ("bits", "vocab_size")

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self.bits = bytearray(words_per_row(vocab_size) * 4)

    def add(self, token_id: int) -> None:
        self.bits[token_id >> 3] |= 1 << (token_id & 7)

    def add_all(self, token_ids) -> None:
        bits = self.bits
        for token_id in token_ids:
            bits[token_id >> 3] |= 1 << (token_id & 7)

    def update(self, tokens: bytes | Iterable[int]) -> None:
        """Add another set's bits (same vocabulary size: one OR) or an iterable of ids."""
        if isinstance(tokens, bytes):
            mine = np.frombuffer(self.bits, dtype=np.uint8)
            np.bitwise_or(mine, np.frombuffer(tokens, dtype=np.uint8), out=mine)
        else:
            self.add_all(tokens)

    def __contains__(self, token_id: int) -> bool:
        return bool(self.bits[token_id >> 3] >> (token_id & 7) & 1)

    def ids(self) -> list[int]:
        words = np.frombuffer(bytes(self.bits), dtype=np.uint8)
        return np.flatnonzero(np.unpackbits(words, bitorder="little")).tolist()

    def count(self) -> int:
        return int(np.unpackbits(np.frombuffer(bytes(self.bits), dtype=np.uint8)).sum())

    def words(self) -> np.ndarray:
        return np.frombuffer(bytes(self.bits), dtype="<i4")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenSet) and self.bits == other.bits

    __hash__ = None  # type: ignore[assignment]  # mutable

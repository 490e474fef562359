"""Token masks in the ecosystem's layout: int32 words, ceil(V/32) per row, bit i % 32 of word
i // 32 set = token i allowed (the layout of XGrammar, llguidance and vLLM)."""

from __future__ import annotations

import weakref
import zlib
from array import array
from collections.abc import Iterable

import numpy as np

from gridrail.errors import UsageError
from gridrail.kernels import write_mask_row

# From this many ids on, setting them with numpy beats one interpreted bit operation per id
# (measured break-even: ~50 on the development host); so a frozen set of fewer is its ids.
_NUMPY_FROM = FROZEN_IDS_BELOW = 48


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

    __slots__ = ("__weakref__", "_words", "bits", "vocab_size")

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self.bits = bytearray(words_per_row(vocab_size) * 4)
        self._words: np.ndarray | None = None  # an int32 view of `bits`, made on first copy

    def add(self, token_id: int) -> None:
        self.bits[token_id >> 3] |= 1 << (token_id & 7)

    def add_all(self, token_ids: Iterable[int]) -> None:
        if isinstance(token_ids, array) and len(token_ids) >= _NUMPY_FROM:
            # Many ids (a sparse walk result or CD residue): set them in a flag array and pack
            # it, instead of one interpreted bit operation per id.
            flags = np.zeros(len(self.bits) * 8, dtype=bool)
            flags[np.frombuffer(token_ids, dtype=token_ids.typecode)] = True
            mine = np.frombuffer(self.bits, dtype=np.uint8)
            np.bitwise_or(mine, np.packbits(flags, bitorder="little"), out=mine)
            return
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

    def is_empty(self) -> bool:
        return not np.count_nonzero(np.frombuffer(self.bits, dtype=np.uint8))

    def frozen(self) -> bytes | array:
        """An immutable copy in the form `update` adds fastest: an array of its ids when they
        are few (set one by one), else its bits (one vectorized OR)."""
        positions = np.flatnonzero(self._flags())
        if len(positions) >= FROZEN_IDS_BELOW:
            return bytes(self.bits)
        ids = array("I")
        ids.frombytes(positions.astype(ids.typecode).tobytes())
        return ids

    def __contains__(self, token_id: int) -> bool:
        return bool(self.bits[token_id >> 3] >> (token_id & 7) & 1)

    def ids(self) -> list[int]:
        return self.id_array().tolist()

    def id_array(self) -> np.ndarray:
        """The ids, ascending, as an int64 array (no list of Python ints in between)."""
        return np.flatnonzero(self._flags())

    def without(self, token_ids: Iterable[int]) -> TokenSet:
        """A new set: this one less `token_ids` (one vectorized pass, however many)."""
        flags = self._flags()
        flags[np.fromiter(token_ids, dtype=np.int64)] = 0
        out = TokenSet(self.vocab_size)
        out.bits[:] = np.packbits(flags, bitorder="little").tobytes()
        return out

    def _flags(self) -> np.ndarray:
        """One uint8 flag per id of the set's width (a new array)."""
        return np.unpackbits(np.frombuffer(self.bits, dtype=np.uint8), bitorder="little")

    def count(self) -> int:
        return int.from_bytes(self.bits, "little").bit_count()  # 3x unpackbits + sum

    def write_row(self, bitmask: np.ndarray, row: int) -> None:
        """Copy the set into row `row` of an int32 bitmask: one copy, no intermediate bytes."""
        if write_mask_row is not None and write_mask_row(bitmask, row, self.bits):
            return
        words = self._words
        if words is None:
            words = self._words = np.frombuffer(self.bits, dtype="<i4")
        bitmask[row] = words

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenSet) and self.bits == other.bits

    __hash__ = None  # type: ignore[assignment]  # mutable


class DistinctMasks:
    """One set per distinct content among the masks a guide hands out. Masks of different
    configurations are often equal (a replay of bench/statements.sql: 650 mask objects, 217
    contents), and a warm step is mostly the copy of its row, which is faster from a row that
    stays in the CPU's caches (bench/RESULTS.md, "Session 23"). Weak: a set lives as long as a
    cache holds it. Sets handed out are shared, so nothing may change them."""

    def __init__(self) -> None:
        self._by_checksum: weakref.WeakValueDictionary[int, TokenSet] = (
            weakref.WeakValueDictionary()
        )

    @staticmethod
    def checksum(bits: bytearray) -> int:
        return zlib.crc32(bits)  # a few µs per row, on the path that computed the mask

    def intern(self, mask: TokenSet) -> TokenSet:
        """The set already held with `mask`'s content, else `mask` (held from now on). Two
        contents with one checksum are not merged: the second stays its own object."""
        held = self._by_checksum.setdefault(self.checksum(mask.bits), mask)
        return held if held.bits == mask.bits else mask


def bitmask_array(bitmask: object, vocab_size: int) -> np.ndarray:
    """`bitmask` as the NumPy array to write masks into: an int32 array of shape (batch,
    ceil(vocab_size / 32)), or a CPU torch tensor of that dtype and shape (its NumPy view, the
    same memory: no copy). Anything else is a UsageError."""
    width = words_per_row(vocab_size)
    if type(bitmask).__module__.startswith("torch") and hasattr(bitmask, "numpy"):
        if getattr(bitmask, "device", None) is not None and bitmask.device.type != "cpu":
            raise UsageError(
                f"bitmask is a tensor on {bitmask.device}: fill a CPU tensor, then move it"
            )
        bitmask = bitmask.numpy()  # shares the tensor's memory
    if not isinstance(bitmask, np.ndarray):
        raise UsageError(
            f"bitmask must be a NumPy int32 array (or a CPU torch int32 tensor) of shape "
            f"(batch, {width}), not {type(bitmask).__name__} (use gridrail.allocate_bitmask)"
        )
    if bitmask.ndim != 2 or bitmask.shape[1] != width or bitmask.dtype != np.int32:
        raise UsageError(
            f"bitmask must be an int32 array of shape (batch, {width}); "
            f"got {bitmask.dtype} {bitmask.shape} (use gridrail.allocate_bitmask)"
        )
    if not bitmask.flags.writeable:
        raise UsageError("bitmask is read-only")
    return bitmask


def allow_only(bitmask: np.ndarray, row: int, token_id: int) -> None:
    """Row `row` of `bitmask` allows `token_id` alone."""
    bitmask[row, :] = 0
    bitmask[row, token_id >> 5] = np.int32(np.uint32(1 << (token_id & 31)).view(np.int32))

"""Refusing a runaway: the token that would make the output end with the same block written
`repeats` times in a row (by default twice: `c.custid, c.custid`), or open a parenthesis
deeper than `max_depth`.

A small model whose every continuation the mask keeps legal can repeat a select item
(`c.custid, c.custid, …`), nest `CASE WHEN (CASE WHEN (…` or `FROM (SELECT x FROM (SELECT x …`
until the budget ends and the reserve writes the end: 60 of the 72 truncated answers on 200
Spider training questions held a block written three times in a row (bench/RESULTS.md, "Loop
guard"). The language cannot refuse that (SQL is full of legitimate repetition and nesting),
but a choice among allowed tokens can. The guard only
narrows the model's choice among the tokens the mask allowed and never refuses all of them, so
every guarantee of the mask (soundness, completeness, the budget reserve) is untouched.

Blocks are compared as SQL reads them: a token's *key* is its spelling with ASCII case folded
and whitespace removed, and tokens of whitespace alone are skipped, so `FROM (SELECT` and
`FROM (\\n  SELECT` are one block. A block of one key repeated (`)))`, `000`) is never refused:
parentheses close in runs and digits repeat. Of the 7,000 Spider training gold queries, 6 write
a block of 3 keys or more twice in a row (`T1.booking_start_date, T1.booking_start_date`) and
none nests parentheses deeper than 3 (keys of gpt2's tokens; bench/RESULTS.md, "Loop guard":
a guard that counted
repeated n-grams anywhere, as `no_repeat_ngram_size` does, would refuse 1,102 of them at n = 4).

The check reads the last `repeats * max_block` keys and one depth counter, so its cost per token
is flat in the output's length.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from gridrail.vocab.vocabulary import Vocabulary

_QUOTES = frozenset(b"'\"`")
_CLOSING_QUOTE = {ord("'"): ord("'"), ord('"'): ord('"'), ord("`"): ord("`"), ord("["): ord("]")}


@dataclass(frozen=True)
class LoopGuard:
    """Refuse a token that completes the `repeats`-th consecutive copy of a block of
    `min_block` to `max_block` keys (two distinct keys at least), or that opens a parenthesis
    past depth `max_depth` (None: no bound)."""

    repeats: int = 2
    min_block: int = 3
    max_block: int = 32
    max_depth: int | None = 4

    def __post_init__(self) -> None:
        if self.repeats < 2:
            raise ValueError(f"a loop is at least 2 copies of a block, got repeats={self.repeats}")
        if not 2 <= self.min_block <= self.max_block:
            raise ValueError(
                f"blocks are 2 keys or longer, min_block <= max_block: got {self.min_block}, "
                f"{self.max_block}"
            )
        if self.max_depth is not None and self.max_depth < 1:
            raise ValueError(f"max_depth must be at least 1 (or None), got {self.max_depth}")

    @property
    def window(self) -> int:
        """How many of the last keys the repetition check reads."""
        return self.repeats * self.max_block

    @property
    def description(self) -> str:
        depth = "" if self.max_depth is None else f", depth <= {self.max_depth}"
        return f"{self.repeats} copies of {self.min_block}-{self.max_block} keys{depth}"

    def refused(self, keys: Iterable[int]) -> set[int]:
        """The keys that, appended to `keys` (the output's last keys, at least `window` of
        them when there are that many), would end it with `repeats` copies of one block."""
        tail = list(keys)[-self.window :]
        n = len(tail)
        out: set[int] = set()
        for block in range(self.min_block, self.max_block + 1):
            span = self.repeats * block - 1  # the copies but their last key
            if span > n:
                break
            seen = tail[n - span :]
            # periodic with period `block`, and the block not one key over and over
            if seen[:-block] == seen[block:] and len(set(seen[-block:])) > 1:
                out.add(seen[-block])  # the key that continues the period
        return out

    def follow(self, vocab: Vocabulary) -> GuardedOutput:
        """A tracker of one output in `vocab`'s tokens, to feed and to narrow choices with."""
        return GuardedOutput(self, vocab)


class GuardedOutput:
    """One output as the guard sees it: its last keys, its parenthesis depth and whether it is
    inside a quoted string or name."""

    def __init__(self, guard: LoopGuard, vocab: Vocabulary):
        self.guard = guard
        self.vocab = vocab
        self._key_of, self._rise = _vocabulary_tables(vocab)
        self._keys: deque[int] = deque(maxlen=guard.window)
        self._depth = 0
        self._quote: int | None = None  # the byte that closes the open quote

    def feed(self, tokens: Iterable[int]) -> None:
        """Append accepted tokens (EOS and special tokens spell nothing)."""
        for token in tokens:
            spelled = self.vocab.token_bytes(token)
            if not spelled:
                continue
            if self._key_of[token] >= 0:
                self._keys.append(int(self._key_of[token]))
            for byte in spelled:
                if self._quote is not None:
                    if byte == self._quote:
                        self._quote = None
                elif byte in _CLOSING_QUOTE:
                    self._quote = _CLOSING_QUOTE[byte]
                elif byte == 0x28:  # (
                    self._depth += 1
                elif byte == 0x29:  # )
                    self._depth = max(0, self._depth - 1)

    def narrow(self, allowed: np.ndarray) -> np.ndarray:
        """`allowed` (a boolean vector over token ids) without the refused tokens — unchanged
        when that would leave none."""
        size = min(len(allowed), len(self._key_of))
        refuse = np.zeros(len(allowed), dtype=bool)
        for key in self.guard.refused(self._keys):
            refuse[:size] |= self._key_of[:size] == key
        if self.guard.max_depth is not None and self._quote is None:
            refuse[:size] |= self._depth + self._rise[:size] > self.guard.max_depth
        if not (allowed & refuse).any():
            return allowed
        narrowed = allowed & ~refuse
        return narrowed if narrowed.any() else allowed


@lru_cache(maxsize=4)
def _vocabulary_tables(vocab: Vocabulary) -> tuple[np.ndarray, np.ndarray]:
    """Per token id: its key's number (-1: whitespace alone, or no spelling) and its rise, the
    most parentheses it opens at any point of its spelling (counted up to a quote in it)."""
    numbers: dict[bytes, int] = {}
    key_of = np.full(vocab.size, -1, dtype=np.int64)
    rise = np.zeros(vocab.size, dtype=np.int64)
    for token, spelled in enumerate(vocab.all_token_bytes):
        if not spelled:
            continue
        key = b"".join(spelled.lower().split())
        if key:
            key_of[token] = numbers.setdefault(key, len(numbers))
        depth = highest = 0
        for byte in spelled:
            if byte in _QUOTES or byte == 0x5B:  # [
                break
            depth += (byte == 0x28) - (byte == 0x29)
            highest = max(highest, depth)
        rise[token] = highest
    return key_of, rise

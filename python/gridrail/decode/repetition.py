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

Blocks are compared as SQL reads them, on the output's *text*: its bytes with ASCII case folded
and whitespace removed, so `FROM (SELECT` and `FROM (\\n  SELECT` are one block, and so are
`order_id` and `order_iD` however the tokens split them. (Comparing token by token let a model
refused the token `id` write `i` and `D`: 362 of 1,600 Spider candidates of session 35 held a
block of 6 bytes or more twice in a row.) A token is refused if its text, repeating what the
output wrote a block before byte for byte, makes the output end with `repeats` copies of a block
of `min_block` to `max_block` bytes holding two distinct bytes: `)))` and `000` are never
refused, as parentheses close in runs and digits repeat. Of the 7,000 Spider training gold
queries, 6 write a block of 6 bytes or more twice in a row (`T1.booking_start_date,
T1.booking_start_date`; bench/loop_guard_gold.py).

The check keeps, per block length, how far the output's text already repeats the block before
it, updated byte by byte, and looks the continuations that would close a loop up in the sorted
texts of the vocabulary: its cost per token is flat in the output's length.
"""

from __future__ import annotations

from bisect import bisect_left
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
    `min_block` to `max_block` bytes of text (two distinct bytes at least; case folded,
    whitespace removed), or that opens a parenthesis past depth `max_depth` (None: no bound)."""

    repeats: int = 2
    min_block: int = 6
    max_block: int = 128
    max_depth: int | None = 4

    def __post_init__(self) -> None:
        if self.repeats < 2:
            raise ValueError(f"a loop is at least 2 copies of a block, got repeats={self.repeats}")
        if not 2 <= self.min_block <= self.max_block:
            raise ValueError(
                f"blocks are 2 bytes or longer, min_block <= max_block: got {self.min_block}, "
                f"{self.max_block}"
            )
        if self.max_depth is not None and self.max_depth < 1:
            raise ValueError(f"max_depth must be at least 1 (or None), got {self.max_depth}")

    @property
    def description(self) -> str:
        depth = "" if self.max_depth is None else f", depth <= {self.max_depth}"
        return f"{self.repeats} copies of {self.min_block}-{self.max_block} bytes{depth}"

    def follow(self, vocab: Vocabulary) -> GuardedOutput:
        """A tracker of one output in `vocab`'s tokens, to feed and to narrow choices with."""
        return GuardedOutput(self, vocab)


class LoopText:
    """The output's text as the guard reads it (`text_of`), and per block length L how many of
    its last bytes equal the bytes L before them (`runs[L]`): the text ends with k copies of a
    block of L bytes where that run is at least (k - 1) * L."""

    def __init__(self, guard: LoopGuard):
        self.guard = guard
        # before[L]: the byte L before the next one, -1 where the text is shorter (index 0 unused)
        self.before = np.full(guard.max_block + 1, -1, dtype=np.int64)
        self.runs = np.zeros(guard.max_block + 1, dtype=np.int64)  # index: block length

    def extend(self, text: bytes) -> None:
        before, runs = self.before, self.runs
        for byte in text:
            runs += 1
            runs[before != byte] = 0
            before[2:] = before[1:-1]  # numpy copies overlapping slices as if buffered
            before[1] = byte

    def closing(self, longest: int) -> set[bytes]:
        """The texts (of at most `longest` bytes) whose every extension closes a loop: for each
        block length, the shortest continuation of the period that makes `repeats` copies.
        (A run at lag L is at most the text's length - L long, so each continuation found is
        preceded by enough text for its copies.)"""
        guard = self.guard
        known = self.before[1:]
        tail = bytes(known[known >= 0][::-1].astype(np.uint8))  # the last bytes, newest last
        lengths = np.arange(guard.min_block, min(guard.max_block, len(tail)) + 1)
        needed = np.maximum((guard.repeats - 1) * lengths - self.runs[lengths], 1)
        fits = needed <= longest
        out: set[bytes] = set()
        for length, count in zip(lengths[fits].tolist(), needed[fits].tolist(), strict=True):
            period = tail[-length:]
            continuation = (period * (count // length + 1))[:count]
            if len(set((period + continuation)[-length:])) > 1:
                out.add(continuation)
        return out


def text_of(spelled: bytes) -> bytes:
    """A token's text as the guard reads it: ASCII case folded, whitespace removed."""
    return b"".join(spelled.lower().split())


class GuardedOutput:
    """One output as the guard sees it: its text, its parenthesis depth and whether it is
    inside a quoted string or name."""

    def __init__(self, guard: LoopGuard, vocab: Vocabulary):
        self.guard = guard
        self.vocab = vocab
        self._texts, self._rise = _vocabulary_tables(vocab)
        self._text = LoopText(guard)
        self._depth = 0
        self._quote: int | None = None  # the byte that closes the open quote

    def feed(self, tokens: Iterable[int]) -> None:
        """Append accepted tokens (EOS and special tokens spell nothing)."""
        for token in tokens:
            spelled = self.vocab.token_bytes(token)
            if not spelled:
                continue
            self._text.extend(text_of(spelled))
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

    def refused(self) -> np.ndarray:
        """The token ids that would close a loop: those whose text begins with a text
        `LoopText.closing` names."""
        texts = self._texts
        found = [texts.starting_with(t) for t in self._text.closing(texts.longest)]
        return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)

    def narrow(self, allowed: np.ndarray) -> np.ndarray:
        """`allowed` (a boolean vector over token ids) without the refused tokens — unchanged
        when that would leave none."""
        size = min(len(allowed), len(self._rise))
        refuse = np.zeros(len(allowed), dtype=bool)
        looping = self.refused()
        refuse[looping[looping < size]] = True
        if self.guard.max_depth is not None and self._quote is None:
            refuse[:size] |= self._depth + self._rise[:size] > self.guard.max_depth
        if not (allowed & refuse).any():
            return allowed
        narrowed = allowed & ~refuse
        return narrowed if narrowed.any() else allowed


class TokenTexts:
    """The vocabulary's tokens by their text (`text_of`), sorted, to find those that begin
    with a given text by bisection."""

    def __init__(self, vocab: Vocabulary):
        by_text: dict[bytes, list[int]] = {}
        for token, spelled in enumerate(vocab.all_token_bytes):
            text = text_of(spelled) if spelled else b""
            if text:
                by_text.setdefault(text, []).append(token)
        self.texts = sorted(by_text)
        self.longest = max(map(len, self.texts), default=0)
        self.ids = np.array([t for text in self.texts for t in by_text[text]], dtype=np.int64)
        counts = [len(by_text[text]) for text in self.texts]
        self.starts = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)

    def starting_with(self, prefix: bytes) -> np.ndarray:
        """The ids of the tokens whose text begins with `prefix` (non-empty)."""
        low = bisect_left(self.texts, prefix)
        after = _successor(prefix)
        high = len(self.texts) if after is None else bisect_left(self.texts, after, lo=low)
        return self.ids[self.starts[low] : self.starts[high]]


def _successor(prefix: bytes) -> bytes | None:
    """The least byte string after every string that begins with `prefix` (None: none)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes((stripped[-1] + 1,))


@lru_cache(maxsize=4)
def _vocabulary_tables(vocab: Vocabulary) -> tuple[TokenTexts, np.ndarray]:
    """The tokens by their text, and per token id its rise: the most parentheses it opens at any
    point of its spelling (counted up to a quote in it)."""
    rise = np.zeros(vocab.size, dtype=np.int64)
    for token, spelled in enumerate(vocab.all_token_bytes):
        depth = highest = 0
        for byte in spelled or b"":
            if byte in _QUOTES or byte == 0x5B:  # [
                break
            depth += (byte == 0x28) - (byte == 0x29)
            highest = max(highest, depth)
        rise[token] = highest
    return TokenTexts(vocab), rise

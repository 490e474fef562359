"""Refusing a degenerate loop: the token that would make the output end with the same block of
tokens `repeats` times in a row.

A small model whose every continuation the mask keeps legal can repeat a select item
(`c.custid, c.custid, …`), `CASE WHEN (` or `EXCEPT SELECT …` until the budget ends: 60 of the
72 truncated answers on 200 Spider training questions did (bench/RESULTS.md). The language
cannot refuse that (SQL is full of legitimate repetition), but a choice among allowed tokens
can, as `no_repeat_ngram_size` samplers do. The guard only narrows the model's choice among
the tokens the mask allowed and never refuses all of them, so every guarantee of the mask
(soundness, completeness, the budget reserve) is untouched.

A block of one token repeated (`)))`, `000`) is never refused: closing parentheses and digits
legitimately run. The check reads the last `repeats * max_block` tokens only, so its cost per
token is flat in the output's length.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LoopGuard:
    """Refuse a token that completes the `repeats`-th consecutive copy of a block of 2 to
    `max_block` tokens (a block of at least two distinct tokens)."""

    repeats: int = 3
    max_block: int = 32

    def __post_init__(self) -> None:
        if self.repeats < 2:
            raise ValueError(f"a loop is at least 2 copies of a block, got repeats={self.repeats}")
        if self.max_block < 2:
            raise ValueError(f"max_block must be at least 2 tokens, got {self.max_block}")

    @property
    def window(self) -> int:
        """How many of the last tokens the check reads."""
        return self.repeats * self.max_block

    @property
    def description(self) -> str:
        return f"{self.repeats} copies of up to {self.max_block} tokens"

    def refused(self, tail: Iterable[int]) -> set[int]:
        """The tokens that, appended to `tail` (the output's last tokens, at least `window`
        of them when there are that many), would end it with `repeats` copies of one block."""
        tail = list(tail)[-self.window :]
        n = len(tail)
        out: set[int] = set()
        for block in range(2, self.max_block + 1):
            span = self.repeats * block - 1  # the copies but their last token
            if span > n:
                break
            seen = tail[n - span :]
            # periodic with period `block`, and the block not one token over and over
            if seen[:-block] == seen[block:] and len(set(seen[-block:])) > 1:
                out.add(seen[-block])  # the token that continues the period
        return out

    def narrow(self, allowed: np.ndarray, tail: Iterable[int]) -> np.ndarray:
        """`allowed` without the refused tokens — unchanged when that would leave none."""
        refused = [t for t in self.refused(tail) if t < len(allowed) and allowed[t]]
        if not refused:
            return allowed
        narrowed = allowed.copy()
        narrowed[refused] = False
        return narrowed if narrowed.any() else allowed

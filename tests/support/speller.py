"""A model-free exhaustive speller: can any token sequence through the masks write a target?

From a configuration, the speller explores every segmentation of the target's bytes into tokens
that the guide's mask allows at each step (the configuration after a given number of target
bytes does not depend on how they were cut into tokens, so offsets are the search states). A
name counts as *spelled as* a terminal when the name and a space can be fed and, the pending
lexeme closed, the name is shifted as that terminal. Used by the policy tests: forbidden targets
must never be spelled, allowed ones (the positive controls) must be.
"""

from __future__ import annotations

from dataclasses import dataclass

import gridrail as gr
from gridrail.parse.oracle import Configuration


@dataclass
class Speller:
    guide: gr.Guide

    def __post_init__(self) -> None:
        self._masks: dict[Configuration, gr.mask.bitmask.TokenSet] = {}

    def mask(self, cfg: Configuration):
        mask = self._masks.get(cfg)
        if mask is None:
            mask = self._masks[cfg] = self.guide.mask(cfg)
        return mask

    def reach(self, start: Configuration, target: bytes) -> Configuration | None:
        """The configuration after writing `target` through allowed tokens, or None."""
        trie, vocab, oracle = self.guide.trie, self.guide.vocab, self.guide.oracle
        frontier: dict[int, Configuration] = {0: start}
        done: set[int] = set()
        while frontier:
            offset = min(frontier)
            cfg = frontier.pop(offset)
            done.add(offset)
            if offset == len(target):
                return cfg
            mask = self.mask(cfg)
            node = 0
            for end in range(offset, len(target)):
                node = trie.child(node, target[end])
                if node < 0:
                    break
                if any(t in mask for t in trie.ids_at(node)):
                    nxt = end + 1
                    if nxt not in done and nxt not in frontier:
                        token = vocab.token_bytes(trie.ids_at(node)[0])
                        frontier[nxt] = oracle.feed(cfg, token)  # allowed: cannot fail
        return None

    def spells_as(self, start: Configuration, word: bytes, terminal: int) -> bool:
        """Can `word` and a space be written from `start`, with `word` shifted as `terminal`?
        The pending lexeme is closed as the end of input would close it: the space alone may
        not end it (`total ` can still become the call `total (`)."""
        cfg = self.reach(start, word + b" ")
        if cfg is None:
            return False
        stack = self.guide.oracle.finalize(cfg)
        return stack is not None and stack.symbol == terminal

    def writes(self, start: Configuration, text: bytes) -> bool:
        """Can `text` be written from `start` at all?"""
        return self.reach(start, text) is not None

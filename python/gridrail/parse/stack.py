"""The persistent LALR(1) parser stack: immutable nodes, structurally shared between forks.

A node is one stack entry; its ``parent`` is the entry below. Pushing allocates one node, popping
follows parent pointers, and copying a configuration copies one reference. Each node carries the
rolling configuration hash (an O(1) mix of its parent's hash, never a rehash of the stack) and
memo slots for facts that depend only on the stack from this node down. Facts that also depend
on something else (the mask at a configuration) go to the guide's bounded memo, keyed by the
node among other things (`Configuration.mask_key`).
"""

from __future__ import annotations

import hashlib
import struct

_PACK = struct.Struct("<QII").pack


class StackNode:
    __slots__ = (
        "accept_ok",
        "allowed",
        "children",
        "depth",
        "finish",
        "fits",
        "hash",
        "load",
        "parent",
        "state",
        "symbol",
    )

    def __init__(self, state: int, symbol: int, parent: StackNode | None, weight: int = 1):
        self.state = state
        self.symbol = symbol  # the grammar symbol shifted or reduced to reach `state`
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        # the entries' weights under the grammar's stack bound (gridrail.parse.depth)
        self.load = 0 if parent is None else parent.load + weight
        if parent is None:
            self.hash = 0
        else:  # H(node) = low64 BLAKE2b-128(H(parent) || u32 state || u32 symbol)
            digest = hashlib.blake2b(
                _PACK(parent.hash, state, symbol & 0xFFFFFFFF), digest_size=16
            ).digest()
            self.hash = int.from_bytes(digest[:8], "little")
        # Memo slots (filled on first use; valid forever because nodes never change):
        self.allowed: int | None = None  # bit mask of terminals shiftable from this stack
        self.accept_ok: bool | None = None  # can $END reach ACCEPT from this stack
        self.finish: dict | None = None  # cheapest completions from this node + a state above
        self.fits: bool | None = None  # can the stack bound still be kept (parse.depth)
        self.children: dict[int, StackNode] | None = None  # interned pushes: see `push`

    def push(self, state: int, symbol: int, weight: int) -> StackNode:
        """The node for `state` on top of this one, interned: equal stacks built from the same
        parent are one object, so their memo slots are filled once for every fork and every
        trial feed. An LR state has a single accessing symbol, so the state alone is the key
        (and `weight`, the weight of the state's entry, one per state); the table is bounded
        by the number of LR states."""
        children = self.children
        if children is None:
            children = self.children = {}
        node = children.get(state)
        if node is None:
            node = children[state] = StackNode(state, symbol, self, weight)
        return node

    def states(self) -> list[int]:
        """Bottom-to-top states; O(depth) — for debugging and tests, never on the hot path."""
        out = []
        node: StackNode | None = self
        while node is not None:
            out.append(node.state)
            node = node.parent
        return out[::-1]

    def __repr__(self) -> str:
        return f"StackNode(states={self.states()})"


def root(start_state: int) -> StackNode:
    return StackNode(start_state, -1, None)

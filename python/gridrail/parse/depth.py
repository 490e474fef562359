"""The stack bound (`StackBound`): which LR stacks can still be finished without any stack of
the parse weighing more than the limit.

A stack's *load* is the sum of its entries' weights (`StackNode.load`). A sentence is in the
bounded language when the stack after each of its shifts has load <= limit, so a prefix is
viable when some completion keeps that. Every LR(0) kernel item of the top state is valid for
the prefix (as the completer relies on), so a stack *fits* when one of its items [A → α•β] can
be finished — load + peak(β) <= limit, where peak(β) is the least, over derivations of β, of
the highest load a shift reaches above the stack while deriving it — and the stack left once
A is reduced fits too. peak(·) comes from the symbols' least heights, a fixpoint over the
grammar. Every stack within `margin` of the limit's far side fits (the largest of the states'
cheapest item peaks: each reduction leaves a stack no heavier than the one it came from), so
only stacks near the limit are ever looked at.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gridrail.grammar.lalr import LalrTables
from gridrail.grammar.model import StackBound
from gridrail.parse.stack import StackNode


class StackLimit:
    """A grammar's stack bound over its LR tables (none: every stack fits)."""

    __slots__ = (
        "_augmented",
        "_goto",
        "_items",
        "_lhs",
        "_nonterminal_base",
        "entry",
        "heaviest",
        "heights",
        "limit",
        "lowest",
        "margin",
        "weights",
    )

    def __init__(
        self, tables: LalrTables, bound: StackBound | None, unscanned: frozenset[int] = frozenset()
    ):
        """`unscanned`: terminals no input ever holds (%declare'd), which no completion uses."""
        end = tables.end
        named = dict(bound.weights) if bound is not None else {}
        # the weight of each symbol's stack entry ($END is never pushed)
        self.entry = [named.get(name, 1) for name in tables.terminal_names[:end]]
        self.entry += [0] + [1] * len(tables.nonterminal_names)
        self.heaviest = max(self.entry[:end], default=1)
        self.weights = _entry_weights(tables, self.entry)  # per LR state
        self.limit = math.inf if bound is None else bound.limit
        self._goto = tables.goto
        self._lhs = [lhs for lhs, _ in tables.productions]
        self._augmented = tables.augmented_production
        self._nonterminal_base = end + 1
        self.heights: list[float] = []
        self.lowest: dict[int, int] = {}
        self._items: list[tuple[tuple[int, int, float], ...]] = []
        self.margin = 0.0
        if bound is None:
            return  # every stack fits: nothing below is ever read
        self.heights, self.lowest = _least_heights(tables, self.entry, unscanned)
        self._items = [
            tuple((p, dot, self.peak(tables.rhs_symbols[p][dot:])) for p, dot in kernel)
            for kernel in tables.kernels
        ]
        self.margin = max((min(peak for _, _, peak in items) for items in self._items), default=0)

    @classmethod
    def of(
        cls, tables: LalrTables, bound: StackBound | None, unscanned: frozenset[int]
    ) -> StackLimit:
        """One per tables and bound, kept with the tables: roles over other schemas share them
        (read-only once built; racing threads build equal ones, either is kept)."""
        memo = tables.__dict__.setdefault("_stack_limits", {})
        key = (bound, unscanned)
        found = memo.get(key)
        if found is None:
            found = memo.setdefault(key, cls(tables, bound, unscanned))
        return found

    @property
    def bounded(self) -> bool:
        return self.limit != math.inf

    @property
    def near_load(self) -> float:
        """Above this load, a stack may take a shift after which it no longer fits (a
        terminal's entry and the margin on top of it): the shift is looked at closer."""
        return self.limit - self.margin - self.heaviest

    def peak(self, symbols: Sequence[int]) -> float:
        """The least peak load above a stack while `symbols` are derived on it."""
        return derivation_peak(symbols, self.heights, self.entry)

    def fits(self, node: StackNode) -> bool:
        """Can the stack `node` be finished with every later stack's load within the limit?
        (memoized on the node)."""
        if node.load + self.margin <= self.limit:
            return True
        if node.load > self.limit:
            return False
        found = node.fits
        if found is None:
            node.fits = False  # while it is looked at: a cycle of reductions never fits
            found = node.fits = self._fits(node)
        return found

    def _fits(self, node: StackNode) -> bool:
        for production, dot, peak in self._items[node.state]:
            if node.load + peak > self.limit:
                continue
            if production == self._augmented:
                return True
            below = node
            for _ in range(dot):
                below = below.parent  # type: ignore[assignment]
            lhs = self._lhs[production]
            goto = self._goto[below.state][lhs]
            if self.fits(below.push(goto, self._nonterminal_base + lhs, self.weights[goto])):
                return True
        return False


def _entry_weights(tables: LalrTables, entry: Sequence[int]) -> list[int]:
    """Per LR state, the weight of its entry: its accessing symbol's (one per state)."""
    weights = [0] * len(tables.action)  # the initial state is never pushed
    for row in tables.action:
        for terminal, move in row.items():
            if move >= 0:
                weights[move] = entry[terminal]
    for row in tables.goto:
        for target in row.values():
            weights[target] = 1
    return weights


def _least_heights(
    tables: LalrTables, entry: Sequence[int], unscanned: frozenset[int]
) -> tuple[list[float], dict[int, int]]:
    """Per symbol, the least peak load above a stack while it is derived (a terminal: its own
    entry; $END: 0, never pushed), and per nonterminal the production that gives it. A
    worklist: a production is looked at again only when a height in its rhs fell."""
    end = tables.end
    heights = [math.inf if t in unscanned else float(w) for t, w in enumerate(entry[:end])]
    heights.append(0.0)
    heights += [math.inf] * len(tables.nonterminal_names)
    lowest: dict[int, int] = {}
    heads = [end + 1 + lhs for lhs, _ in tables.productions]
    users: dict[int, list[int]] = {}
    for p, rhs in enumerate(tables.rhs_symbols):
        for s in set(rhs):
            users.setdefault(s, []).append(p)
    pending = list(range(len(heads) - 1, -1, -1))
    queued = set(pending)
    while pending:
        p = pending.pop()
        queued.discard(p)
        top = derivation_peak(tables.rhs_symbols[p], heights, entry)
        head = heads[p]
        if top < heights[head]:
            heights[head], lowest[head] = top, p
            fresh = [q for q in users.get(head, ()) if q not in queued]
            queued.update(fresh)
            pending += fresh
    return heights, lowest


def derivation_peak(
    symbols: Sequence[int], heights: Sequence[float], entry: Sequence[int]
) -> float:
    """The highest load above the stack while `symbols` are derived on it, each by a
    derivation of the given height: the entries of those before it, then its own height."""
    below, top = 0, 0.0
    for s in symbols:
        top = max(top, below + heights[s])
        below += entry[s]
    return top

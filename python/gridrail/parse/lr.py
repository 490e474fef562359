"""LALR(1) moves on the persistent stack: the shiftable-terminal set by simulation, and shifts.

Rows list LALR(1) lookaheads, and a lookahead can still lead to an error after a reduce chain
(LALR state merging), so "which terminals may come next" is answered by *simulating* the chain on a
virtual overlay — never by reading a row. The answer depends only on the stack, so it is memoized
on the top node and shared by every configuration that shares that node.
"""

from __future__ import annotations

from gridrail.grammar.lalr import ACCEPT, LalrTables
from gridrail.parse.depth import StackLimit
from gridrail.parse.stack import StackNode


class LRMachine:
    """The parser half of the oracle: immutable tables, pure functions of stack nodes."""

    __slots__ = (
        "_action",
        "_all_terminals",
        "_goto",
        "_productions",
        "_reductions",
        "_shift_mask",
        "_weights",
        "end",
        "nonterminal_base",
        "stack_limit",
    )

    def __init__(self, tables: LalrTables, stack_limit: StackLimit | None = None):
        self._action = tables.action
        self._goto = tables.goto
        self._productions = tables.productions
        self.end = tables.end
        self.nonterminal_base = tables.end + 1  # stack symbols: terminals, $END, then nonterminals
        self._all_terminals = (1 << tables.end) - 1  # $END is never "allowed": see accepts_end
        self._shift_mask, self._reductions = tables.move_masks
        self.stack_limit = StackLimit(tables, None) if stack_limit is None else stack_limit
        self._weights = self.stack_limit.weights

    def can_shift(self, node: StackNode, terminal: int) -> bool:
        """Would `terminal` be shifted (or, for $END, accepted) after the reduce chain?"""
        action, goto, productions = self._action, self._goto, self._productions
        start = node
        overlay: list[int] = []  # states pushed above `node` by virtual reductions
        while True:
            state = overlay[-1] if overlay else node.state
            move = action[state].get(terminal)
            if move is None:
                return False
            if move >= 0:
                limit = self.stack_limit
                return not limit.bounded or limit.fits(self.shift(start, terminal))
            if move == ACCEPT:
                return True
            lhs, length = productions[-1 - move]
            for _ in range(length):
                if overlay:
                    overlay.pop()
                else:
                    node = node.parent  # type: ignore[assignment]
            below = overlay[-1] if overlay else node.state
            overlay.append(goto[below][lhs])

    def allowed_mask(self, node: StackNode) -> int:
        """Bit mask of the terminals that can be shifted from this stack (memoized on the node)."""
        mask = node.allowed
        if mask is None:
            mask = node.allowed = self._shiftable(node)
        return mask

    def refused_by_bound(self, node: StackNode) -> int:
        """Terminals the tables would shift from this stack but the stack bound refuses (for
        messages; not memoized)."""
        return self._shiftable(node, bounded=False) & ~self.allowed_mask(node)

    def _shiftable(self, node: StackNode, bounded: bool = True) -> int:
        """Simulate the reduce chains of all terminals at once: terminals that take the same
        reduction share one pop-and-goto, so each distinct path is walked once. A worklist,
        not recursion: a chain is as long as the nesting it closes (`NOT NOT ... 1`), and depth
        may bound the cost, never the call stack. Under a stack bound, a terminal whose shift
        lands near the limit is shifted for real and kept only if the stack still fits
        (`bounded=False`: the tables' set, the bound aside; an unbounded grammar's is that)."""
        limit = self.stack_limit
        near_load, bounded = limit.near_load, bounded and limit.bounded
        start = node
        mask = near = 0
        # (stack below the overlay, states pushed above it by virtual reductions, terminals)
        pending: list[tuple[StackNode, list[int], int]] = [(node, [], self._all_terminals)]
        while pending:
            node, overlay, wanted = pending.pop()
            state = overlay[-1] if overlay else node.state
            shifts = self._shift_mask[state] & wanted
            mask |= shifts
            if (
                bounded
                and shifts
                and node.load + sum([self._weights[s] for s in overlay]) > near_load
            ):
                near |= shifts
            for move, group in self._reductions[state]:
                group &= wanted
                if not group:
                    continue
                lhs, length = self._productions[-1 - move]
                below_overlay = overlay[: max(0, len(overlay) - length)]
                below = node
                for _ in range(length - (len(overlay) - len(below_overlay))):
                    below = below.parent  # type: ignore[assignment]
                top = below_overlay[-1] if below_overlay else below.state
                pending.append((below, [*below_overlay, self._goto[top][lhs]], group))
        while near:
            terminal = near.bit_length() - 1
            near ^= 1 << terminal
            if not limit.fits(self.shift(start, terminal)):
                mask &= ~(1 << terminal)
        return mask

    def accepts_end(self, node: StackNode) -> bool:
        """Does $END reach ACCEPT through the reduce chain (memoized on the node)?"""
        ok = node.accept_ok
        if ok is None:
            ok = node.accept_ok = self.can_shift(node, self.end)
        return ok

    def shift(self, node: StackNode, terminal: int) -> StackNode:
        """Run the reduce chain for `terminal`, then push it. The caller checked `can_shift`."""
        action, goto, productions = self._action, self._goto, self._productions
        while True:
            move = action[node.state][terminal]
            if move >= 0:
                return node.push(move, terminal, self._weights[move])
            lhs, length = productions[-1 - move]
            top = node
            for _ in range(length):
                top = top.parent  # type: ignore[assignment]
            target = goto[top.state][lhs]
            node = top.push(target, self.nonterminal_base + lhs, self._weights[target])

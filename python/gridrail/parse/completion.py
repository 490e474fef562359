"""Shortest legal completions: bytes that turn a viable prefix into a sentence (paper §5,
Proposition 9: the budget trigger writes them, never a bare EOS away from ACCEPT).

Derived once from the compiled grammar:
* a short lexeme per terminal that the scanner reads back as that terminal: the shortest string
  of the union DFA whose accept set has the terminal in its top shadowing class;
* the cheapest derivation of every symbol (cost = lexeme bytes plus one separator per terminal);
* the cheapest way to finish an LR stack: every LR(0) kernel item of a state is valid for the
  prefix, so finishing [A → α•β] costs cost(β) and continues from goto(stack − |α|, A) — a
  recurrence down the stack, memoized on the stack nodes like the allowed sets.
A completion is always fed back through the oracle; one that does not read back as a sentence
raises CompletionError rather than being used.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Generator, Mapping
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from gridrail.errors import GridrailError
from gridrail.parse.depth import derivation_peak
from gridrail.parse.oracle import Configuration, Oracle
from gridrail.parse.stack import StackNode

_SEPARATORS = (b" ", b"\n", b"\t", b"")


class CompletionError(GridrailError):
    """A viable prefix for which no completion could be built (a grammar the completer cannot
    serve); never papered over with an EOS away from ACCEPT."""


class Plan(NamedTuple):
    """A cheapest way to finish a stack: its cost, the terminals that finish the top item, and
    the plan of the stack that remains once the item's rule is reduced. Linked rather than
    flattened, so the plans memoized down a deep stack share their tails (a tuple per stack
    node would copy the whole remainder at every level: quadratic in the depth)."""

    cost: float
    terminals: tuple[int, ...]
    after: Plan | None


_NO_PLAN = Plan(math.inf, (), None)
_PlanSteps = Generator[tuple[StackNode, int], Plan, Plan]


class Completer:
    def __init__(self, oracle: Oracle):
        self.oracle = oracle
        tables = oracle.compiled.tables
        self._kernels = tables.kernels
        self._goto = tables.goto
        self._lhs = [lhs for lhs, _ in tables.productions]
        self._augmented = tables.augmented_production
        self._end = tables.end
        self.lexeme = _lexemes_of(oracle)
        self._rhs = tables.rhs_symbols
        self._cost, self._best = self._cheapest_derivations()
        # the stack bound: how high the cheapest derivations reach, for the plans near it
        self._limit = oracle.lr.stack_limit
        self._reach = self._heights_of(self._best) if self._limit.bounded else None

    # -- grammar-level tables
    def _cheapest_derivations(self) -> tuple[dict[int, float], dict[int, int]]:
        # symbols are ids below end + 1 + nonterminals: costs in a list, inf where unknown
        size = self._end + 1 + len(self.oracle.compiled.tables.nonterminal_names)
        costs = [math.inf] * size
        for t, x in self.lexeme.items():
            costs[t] = len(x) + 1  # +1: the separator after it
        heads = [self._end + 1 + lhs for lhs in self._lhs]
        best: dict[int, int] = {}
        changed = True
        while changed:  # productions in order, pass after pass, until no cost falls
            changed = False
            for p, rhs in enumerate(self._rhs):
                total = sum([costs[s] for s in rhs])
                head = heads[p]
                if total < costs[head]:
                    costs[head], best[head] = total, p
                    changed = True
        return {s: c for s, c in enumerate(costs) if c != math.inf}, best

    def _heights_of(self, choice: Mapping[int, int]) -> list[float]:
        """Per symbol, the peak load above a stack while it is derived by the productions
        `choice` names (the least heights' recurrence, with the choice fixed)."""
        limit = self._limit
        heights = list(limit.heights)  # terminals as there; nonterminals recomputed
        for symbol in choice:
            heights[symbol] = math.inf
        changed = True
        while changed:  # the choice is acyclic: each pass settles one more level
            changed = False
            for symbol, p in choice.items():
                height = derivation_peak(self._rhs[p], heights, limit.entry)
                if height < heights[symbol]:
                    heights[symbol] = height
                    changed = True
        return heights

    def _expand(
        self, symbols: tuple[int, ...], choice: Mapping[int, int] | None = None
    ) -> tuple[int, ...]:
        """The terminals of the derivations of `symbols` by `choice` (default: the cheapest),
        left to right."""
        choice = self._best if choice is None else choice
        out: list[int] = []
        pending = list(reversed(symbols))
        while pending:
            symbol = pending.pop()
            if symbol < self._end:
                out.append(symbol)
            else:
                pending.extend(reversed(self._rhs[choice[symbol]]))
        return tuple(out)

    def _derivation(self, load: float, rest: tuple[int, ...]) -> tuple[float, tuple[int, ...]]:
        """The cost and terminals of deriving `rest` on a stack of `load`: the cheapest way,
        unless it would go past the stack bound, then the lowest way; (inf, ()) if that goes
        past it too."""
        limit = self._limit
        if (
            self._reach is None
            or load + derivation_peak(rest, self._reach, limit.entry) <= limit.limit
        ):
            return sum(self._cost[s] for s in rest), ()
        if load + limit.peak(rest) > limit.limit:
            return math.inf, ()
        terminals = self._expand(rest, limit.lowest)
        return sum(self._cost.get(t, math.inf) for t in terminals), terminals

    # -- stack-level plans
    def plan(self, node: StackNode) -> tuple[int, ...]:
        """Terminals that finish the stack `node` as cheaply as the tables allow."""
        # (the initial stack, without a parent: derive the start symbol)
        plan: Plan | None = self._finish(node.parent, node.state)
        terminals: list[int] = []
        while plan is not None:
            terminals.extend(plan.terminals)
            plan = plan.after
        return tuple(terminals)

    def _finish(self, base: StackNode | None, top: int) -> Plan:
        """Cheapest plan for the stack `base` with the state `top` pushed on it.

        A plan may need the plan of the stack below, down to the bottom: the steps of each are
        a generator, run from a list rather than by nested calls, so a deep stack costs time
        in proportion, never Python's call stack."""
        frames: list[_PlanSteps] = [self._finish_steps(base, top)]
        result: Plan | None = None  # what the top frame asked for (None to start a frame)
        while True:
            try:
                request = frames[-1].send(result)  # type: ignore[arg-type]
            except StopIteration as done:
                frames.pop()
                result = done.value
                if not frames:
                    return result
                continue
            frames.append(self._finish_steps(*request))
            result = None

    def _finish_steps(self, base: StackNode | None, top: int) -> _PlanSteps:
        """`_finish` for one stack: yields (stack, state) for each plan it needs below."""
        memo = None
        if base is not None:
            memo = base.finish if base.finish is not None else {}
            base.finish = memo
            if top in memo:
                return memo[top]
            memo[top] = _NO_PLAN  # guard: a cycle is never the cheapest way out
        best = _NO_PLAN
        load = (0 if base is None else base.load) + self._limit.weights[top]
        for production, dot in self._kernels[top]:
            rest = self._rhs[production][dot:]
            cost, low = self._derivation(load, rest)  # low: the terminals, if not the cheapest
            if production == self._augmented:
                if cost < best.cost:
                    best = Plan(cost, low or self._expand(rest), None)
                continue
            if cost >= best.cost:
                continue
            below = base
            for _ in range(dot - 1):  # `top` is the last of the `dot` symbols before the dot
                below = below.parent  # type: ignore[union-attr]
            assert below is not None  # only the augmented item sits on the initial state
            after = yield below, self._goto[below.state][self._lhs[production]]
            if cost + after.cost < best.cost:
                best = Plan(cost + after.cost, low or self._expand(rest), after)
        if memo is not None:
            memo[top] = best
        return best

    # -- bytes
    def complete(self, cfg: Configuration) -> bytes:
        """Bytes w such that the prefix followed by w is a sentence (checked by the oracle)."""
        oracle = self.oracle
        head = b"" if oracle.finalize(cfg) is not None else self._close_lexeme(cfg)
        closed = oracle.try_feed(cfg, head) if head else cfg
        stack = None if closed is None else oracle.finalize(closed)
        if closed is None or stack is None:
            raise CompletionError(f"cannot close the pending lexeme of {cfg.lexeme_length} bytes")
        pieces = [self.lexeme[t] for t in self.plan(stack)]
        # The pending lexeme is parted from the body by the separator; failing that, by nothing
        # (pending layout that one more byte of layout would make too long: a bounded WS).
        for leads in (True, False):
            for sep in _SEPARATORS:
                body = sep.join(pieces)
                lead = sep if leads and closed.lexeme_length and body else b""
                done = oracle.try_feed(closed, lead + body)
                if done is not None and oracle.eos_ok(done):
                    return head + lead + body
        raise CompletionError(
            f"the planned completion {b' '.join(pieces)!r} does not read back as a sentence"
        )

    def _close_lexeme(self, cfg: Configuration) -> bytes:
        """Shortest bytes that bring the pending lexeme to an accepting state whose winner is
        allowed (a BFS over the union DFA through states still live for the allowed set)."""
        oracle = self.oracle
        trans, live, _ = oracle.scanner_tables()
        v = oracle.allowed_mask(cfg) | oracle.ignored_mask
        seen = {cfg.scan_state}
        queue: deque[tuple[int, bytes]] = deque([(cfg.scan_state, b"")])
        while queue:
            state, path = queue.popleft()
            for byte in range(256):
                nxt = trans[state * 256 + byte]
                if nxt < 0 or nxt in seen or not live[nxt] & v:
                    continue
                if oracle.winner_in(nxt, v) >= 0:
                    return path + bytes((byte,))
                seen.add(nxt)
                queue.append((nxt, path + bytes((byte,))))
        raise CompletionError("the pending lexeme cannot be completed")


def _lexemes_of(oracle: Oracle) -> Mapping[int, bytes]:
    """`_shortest_lexemes(oracle)`, kept with the scanner for what else it reads (the terminals
    wanted, the shadowing classes): roles of a dialect whose terminals agree share a scanner,
    and so their planners' lexemes (read-only: shared)."""
    compiled = oracle.compiled
    grammar = compiled.grammar
    wanted = frozenset(t.index for t in grammar.terminals if t.name not in grammar.declared)
    memo = compiled.scanner.derived
    key = ("shortest lexemes", wanted, compiled.classes)
    found = memo.get(key)
    if found is None:  # racing threads compute equal values; either one is kept
        found = memo.setdefault(key, MappingProxyType(_shortest_lexemes(oracle)))
    return found  # type: ignore[return-value]


def _shortest_lexemes(oracle: Oracle) -> dict[int, bytes]:
    """Per terminal, the shortest string the scanner reads back as it (when not ignored).

    Breadth first over the scanner, one level (string length) at a time with the whole level
    stepped at once: a level's successors in (parent, byte) order, first occurrences kept, so
    each state is first reached by its shortest, then smallest, string — as a FIFO walk in
    byte order finds them. A state where no terminal still missing is live is not stepped (what
    follows it can only be lexemes of terminals found already: a schema's names once one of
    each is found). Stops once every terminal has its string."""
    compiled = oracle.compiled
    scanner = compiled.scanner
    table = np.frombuffer(scanner.transitions, dtype=f"i{scanner.transitions.itemsize}")
    table = table.reshape(scanner.num_states, 256)
    accept, live = scanner.accept_mask, scanner.live_mask
    wanted = sum(1 << t.index for t in compiled.grammar.terminals) & ~sum(
        1 << compiled.grammar.terminal(name).index for name in compiled.grammar.declared
    )
    found: dict[int, bytes] = {}
    seen = np.zeros(scanner.num_states, dtype=bool)
    seen[scanner.start] = True
    # each reached state's parent and the byte from it (a string is read back only when found)
    parent_of = np.full(scanner.num_states, -1, dtype=np.int64)
    byte_of = np.zeros(scanner.num_states, dtype=np.uint8)
    level = np.array([scanner.start], dtype=np.int64)
    missing = wanted
    while level.size and missing:
        targets = table[level].reshape(-1)  # parent-major, then byte order
        order = np.flatnonzero(targets >= 0)
        order = order[~seen[targets[order]]]  # most moves lead to states seen already
        states, first = np.unique(targets[order], return_index=True)
        first = order[first]
        by_discovery = np.argsort(first, kind="stable")
        states, first = states[by_discovery], first[by_discovery]
        seen[states] = True
        parent_of[states] = level[first >> 8]
        byte_of[states] = first & 0xFF
        listed = states.tolist()
        # only a state accepting a missing terminal can add one (`missing` only shrinks)
        for state in [state for state in listed if accept[state] & missing]:
            candidates = accept[state]
            top = max(compiled.classes[t] for t in _bits(candidates))
            for t in _bits(candidates):
                if compiled.classes[t] == top and t not in found:
                    found[t] = _path(state, parent_of, byte_of)
                    missing &= ~(1 << t)
        level = np.array([state for state in listed if live[state] & missing], dtype=np.int64)
    return found


def _path(state: int, parent_of: np.ndarray, byte_of: np.ndarray) -> bytes:
    """The bytes from the scanner's start to `state` along the recorded parents."""
    out = bytearray()
    while parent_of[state] >= 0:
        out.append(byte_of[state])
        state = int(parent_of[state])
    return bytes(reversed(out))


def _bits(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if (mask >> i) & 1]

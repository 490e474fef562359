"""Regex AST → byte-level NFA (UTF-8) → DFA (subset construction) → minimal DFA (Hopcroft).

Automata here read bytes, not code points: each :class:`CharSet` becomes the UTF-8 encodings of
its code points, so a byte string that is not valid UTF-8 is never accepted. Transitions are
stored flat, ``transitions[state * 256 + byte]``, with -1 for "no string can continue this way".
"""

from __future__ import annotations

import functools
import itertools
from array import array
from collections import defaultdict, deque
from collections.abc import Callable, Hashable, Iterable, Sequence

from gridrail.errors import RegexTooLargeError
from gridrail.grammar.regex_syntax import (
    Alternation,
    CharSet,
    Concat,
    Excluding,
    Node,
    Ranges,
    Repeat,
    parse_regex,
    quote_pattern,
)

DEAD = -1
# Bounds on one pattern's automata, so that a pattern too large to compile fails with a
# RegexError in seconds instead of exhausting time or memory. The Thompson NFA is linear in
# the pattern ("\w{1000}" still fits). The subset construction can be exponential: the DFA of
# "(a|b)*a(a|b){20}" has 2^21 states. Its work (the NFA states its closures visit plus the
# edges it splits) grows with the DFA's states times their sizes and bounds its time (about a
# second) and the memory of its subsets; the state bound caps the transition tables (1 KiB per
# state). A schema lexicon at the NFA bound (some 2,500 SQLite names, each in four spellings)
# takes half that work and two thirds of those states.
MAX_NFA_STATES = 250_000
MAX_DFA_STATES = 100_000
MAX_SUBSET_WORK = 1_000_000

# A byte range (inclusive) and the state it leads to.
Edge = tuple[int, int, int]


class ByteDFA:
    """A deterministic automaton over bytes. Treat instances as immutable (they are cached).

    A minimized ByteDFA has no dead state: every state reaches an accepting one. The empty
    language is the one exception to having a start state: ``start == -1``, ``num_states == 0``.
    """

    __slots__ = ("accepting", "live", "num_states", "start", "transitions")

    def __init__(self, start: int, transitions: array, accepting: Sequence[bool]):
        self.start = start
        self.transitions = transitions
        self.accepting: tuple[bool, ...] = tuple(accepting)
        self.num_states = len(self.accepting)
        # Per state: some accepting state is reachable (all True once minimized).
        self.live: tuple[bool, ...] = tuple(_reaches_accept(transitions, self.accepting))

    def run(self, data: bytes, state: int | None = None) -> int:
        """The state after reading ``data`` from ``state`` (default: start); -1 once it dies."""
        q = self.start if state is None else state
        table = self.transitions
        for byte in data:
            if q < 0:
                break
            q = table[(q << 8) | byte]
        return q

    def fullmatch(self, data: bytes) -> bool:
        """Whether ``data`` is in the language."""
        q = self.run(data)
        return q >= 0 and self.accepting[q]

    def is_live_prefix(self, data: bytes) -> bool:
        """Whether ``data`` is a prefix of some string in the language."""
        q = self.run(data)
        return q >= 0 and self.live[q]


@functools.lru_cache(maxsize=4096)
def compile_regex(pattern: str, flags: str = "", *, minimize: bool = True) -> ByteDFA:
    """The byte-level DFA of Python regex ``pattern`` (fullmatch semantics on UTF-8 text, with
    ``re.ASCII``: ASCII ``\\w \\d \\s`` and ASCII-only case folding; docs/semantics.md).

    ``flags`` holds single-letter flags ("i", "s", "x"). ``minimize=False`` returns the raw subset
    construction (it may contain dead states); it exists for tests and diagnostics.
    """
    tree = parse_regex(pattern, flags)
    try:
        if isinstance(tree, Excluding):
            rows, accepting = _without_prefixes(
                _determinize(tree.keep), _determinize(tree.prefix), whole=tree.whole
            )
        else:
            rows, accepting = _determinize(tree)
    except _TooLarge as too_large:
        raise RegexTooLargeError(
            f"{too_large} (in {quote_pattern(pattern)})", str(too_large)
        ) from None
    class_of, table = _class_table(rows)
    num_classes = class_of[-1] + 1
    if not minimize:
        identity = list(range(len(rows)))
        return ByteDFA(0, expand_table(table, class_of, identity, identity), accepting)
    state_map, representatives = minimize_table(
        len(rows), num_classes, table, accepting, start=0, dead_label=False
    )
    if not representatives:
        return ByteDFA(DEAD, array("i"), ())
    transitions = expand_table(table, class_of, representatives, state_map)
    return ByteDFA(0, transitions, [accepting[r] for r in representatives])


# ---------------------------------------------------------------------------------------------
# UTF-8


@functools.lru_cache(maxsize=1024)
def utf8_sequences(ranges: Ranges) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Byte-range sequences whose concatenations are exactly the UTF-8 encodings of ``ranges``.

    Each sequence is a tuple of inclusive byte ranges, one per encoded byte. ``ranges`` must not
    contain surrogates. (The splitting scheme is the classic one from RE2/Go's utf8 ranges.)
    """
    out: list[tuple[tuple[int, int], ...]] = []
    for lo, hi in ranges:
        _split_utf8(lo, hi, out)
    return tuple(out)


def _split_utf8(lo: int, hi: int, out: list[tuple[tuple[int, int], ...]]) -> None:
    # First split where the encoded length changes.
    for boundary in (0x7F, 0x7FF, 0xFFFF):
        if lo <= boundary < hi:
            _split_utf8(lo, boundary, out)
            _split_utf8(boundary + 1, hi, out)
            return
    if hi <= 0x7F:
        out.append(((lo, hi),))
        return
    # Then split until every continuation byte position spans either one value or a full
    # 0x80-0xBF run, so the range is a product of per-byte ranges.
    for i in (1, 2, 3):
        mask = (1 << (6 * i)) - 1
        if lo & ~mask != hi & ~mask:
            if lo & mask:
                _split_utf8(lo, lo | mask, out)
                _split_utf8((lo | mask) + 1, hi, out)
                return
            if hi & mask != mask:
                _split_utf8(lo, (hi & ~mask) - 1, out)
                _split_utf8(hi & ~mask, hi, out)
                return
    out.append(tuple(zip(chr(lo).encode(), chr(hi).encode(), strict=True)))


# ---------------------------------------------------------------------------------------------
# Thompson NFA


class _TooLarge(Exception):
    """A bound on the automata was reached; the message says which."""


class _NFA:
    """States with byte-range edges and epsilon edges; one start and one final state."""

    def __init__(self) -> None:
        self.edges: list[list[Edge]] = []
        self.eps: list[list[int]] = []

    def state(self) -> int:
        if len(self.edges) >= MAX_NFA_STATES:
            raise _TooLarge(f"pattern expands to more than {MAX_NFA_STATES} automaton states")
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1

    def build(self, node: Node) -> tuple[int, int]:
        """Add a fragment for ``node``; return its (entry, exit) states."""
        if isinstance(node, CharSet):
            return self._char_set(node.ranges)
        start = end = self.state()
        if isinstance(node, Concat):
            for item in node.items:
                end = self._then(end, item)
        elif isinstance(node, Alternation):
            end = self.state()
            for option in node.options:
                entry, exit_ = self.build(option)
                self.eps[start].append(entry)
                self.eps[exit_].append(end)
        elif isinstance(node, Repeat):
            for _ in range(node.min):
                end = self._then(end, node.item)
            if node.max is None:
                entry, exit_ = self.build(node.item)
                self.eps[end].append(entry)
                self.eps[exit_].append(end)
            else:
                # Each optional copy may be skipped straight to the fragment's exit.
                skip = self.state()
                for _ in range(node.max - node.min):
                    self.eps[end].append(skip)
                    end = self._then(end, node.item)
                self.eps[end].append(skip)
                end = skip
        return start, end

    def _then(self, end: int, item: Node) -> int:
        entry, exit_ = self.build(item)
        self.eps[end].append(entry)
        return exit_

    def _char_set(self, ranges: Ranges) -> tuple[int, int]:
        # Sequences share common suffixes (mostly runs of continuation bytes), which keeps large
        # Unicode classes small; the first byte fans out from the entry state.
        start, end = self.state(), self.state()
        suffix_state: dict[tuple[int, int, int], int] = {}
        for sequence in utf8_sequences(ranges):
            target = end
            for lo, hi in reversed(sequence[1:]):
                key = (lo, hi, target)
                if key not in suffix_state:
                    suffix_state[key] = self.state()
                    self.edges[suffix_state[key]].append(key)
                target = suffix_state[key]
            lo, hi = sequence[0]
            self.edges[start].append((lo, hi, target))
        return start, end


# ---------------------------------------------------------------------------------------------
# Subset construction


def _determinize(tree: Node) -> tuple[list[list[Edge]], list[bool]]:
    """DFA rows (sorted disjoint byte-range edges per state; state 0 is the start) and accepts."""
    nfa = _NFA()
    entry, final = nfa.build(tree)
    # Only states with byte edges, and the final state, tell DFA states apart.
    important = [bool(edges) for edges in nfa.edges]
    important[final] = True
    closures: dict[frozenset[int], frozenset[int]] = {}
    work = 0

    def spend(steps: int) -> None:
        nonlocal work
        work += steps
        if work > MAX_SUBSET_WORK:
            raise _TooLarge(
                f"the pattern's DFA blows up: building it takes more than {MAX_SUBSET_WORK} "
                "steps (a bounded repeat after an unbounded one, as in (a|b)*a(a|b){20}, can "
                "need 2^21 states)"
            )

    def closure(states: frozenset[int]) -> frozenset[int]:
        found = closures.get(states)
        if found is None:
            seen = set(states)
            stack = list(states)
            while stack:
                for nxt in nfa.eps[stack.pop()]:
                    if nxt not in seen:
                        seen.add(nxt)
                        stack.append(nxt)
            spend(len(seen))
            found = closures[states] = frozenset(q for q in seen if important[q])
        return found

    keys = [closure(frozenset((entry,)))]
    ids = {keys[0]: 0}
    rows: list[list[Edge]] = []
    for key in keys:  # grows while iterating
        if len(keys) > MAX_DFA_STATES:
            raise _TooLarge(f"the pattern's DFA has more than {MAX_DFA_STATES} states")
        row: list[Edge] = []
        edges = [e for q in key for e in nfa.edges[q]]
        spend(len(edges))
        for lo, hi, targets in _segments(edges):
            target_key = closure(targets)
            if not target_key:
                continue
            target = ids.get(target_key)
            if target is None:
                target = ids[target_key] = len(keys)
                keys.append(target_key)
            if row and row[-1][2] == target and row[-1][1] + 1 == lo:
                row[-1] = (row[-1][0], hi, target)
            else:
                row.append((lo, hi, target))
        rows.append(row)
    return rows, [final in key for key in keys]


def _without_prefixes(
    keep: tuple[list[list[Edge]], list[bool]],
    prefix: tuple[list[list[Edge]], list[bool]],
    whole: bool = False,
) -> tuple[list[list[Edge]], list[bool]]:
    """The rows of keep's strings that start with none of prefix's (``(?!prefix)keep``): the
    product of the two automata, where a pair dies once prefix's side accepts and prefix's side
    drops out (-1) once it dies. With ``whole`` a pair where prefix's side accepts only stops
    accepting (``(?!prefix\\Z)keep``: keep minus prefix). Rows as ``_determinize`` returns."""
    keep_rows, keep_accepting = keep
    prefix_rows, prefix_accepting = prefix
    if prefix_accepting[0] and not whole:  # "" is a prefix of everything: nothing is left
        return [[]], [False]
    keys = [(0, 0)]
    ids = {keys[0]: 0}
    rows: list[list[Edge]] = []
    for a, b in keys:  # grows while iterating
        if len(keys) > MAX_DFA_STATES:
            raise _TooLarge(f"the pattern's DFA has more than {MAX_DFA_STATES} states")
        row: list[Edge] = []
        cuts = _cuts(keep_rows[a]) | (_cuts(prefix_rows[b]) if b >= 0 else set())
        for lo, end in itertools.pairwise(sorted(cuts | {0, 256})):
            next_a = _target(keep_rows[a], lo)
            next_b = _target(prefix_rows[b], lo) if b >= 0 else DEAD
            if next_a < 0 or (next_b >= 0 and prefix_accepting[next_b] and not whole):
                continue
            target = ids.setdefault((next_a, next_b), len(keys))
            if target == len(keys):
                keys.append((next_a, next_b))
            if row and row[-1][2] == target and row[-1][1] + 1 == lo:
                row[-1] = (row[-1][0], end - 1, target)
            else:
                row.append((lo, end - 1, target))
        rows.append(row)
    return rows, [keep_accepting[a] and not (b >= 0 and prefix_accepting[b]) for a, b in keys]


def _cuts(row: list[Edge]) -> set[int]:
    """The bytes where ``row``'s target may change."""
    return {lo for lo, _, _ in row} | {hi + 1 for _, hi, _ in row}


def _target(row: list[Edge], byte: int) -> int:
    """Where ``row``'s edges lead on ``byte`` (DEAD where none does)."""
    for lo, hi, target in row:
        if lo <= byte <= hi:
            return target
    return DEAD


def _segments(edges: list[Edge]) -> Iterable[tuple[int, int, frozenset[int]]]:
    """Split possibly overlapping edges into disjoint byte ranges, each with its target set."""
    events = sorted([(lo, 1, t) for lo, _, t in edges] + [(hi + 1, -1, t) for _, hi, t in edges])
    active: dict[int, int] = defaultdict(int)
    i = 0
    while i < len(events):
        pos = events[i][0]
        while i < len(events) and events[i][0] == pos:
            _, delta, target = events[i]
            active[target] += delta
            if not active[target]:
                del active[target]
            i += 1
        if active:
            yield pos, events[i][0] - 1, frozenset(active)


# ---------------------------------------------------------------------------------------------
# Byte classes and minimization


def _class_table(rows: list[list[Edge]]) -> tuple[list[int], list[int]]:
    """Group bytes that no state tells apart into classes (runs of consecutive bytes).

    Returns ``class_of`` (byte → class) and the transition table
    ``table[state * num_classes + class]`` (-1 for dead).
    """
    cuts = {0}
    for row in rows:
        for lo, hi, _ in row:
            cuts.add(lo)
            cuts.add(hi + 1)
    class_of: list[int] = []
    current = -1  # byte 0 is a cut, so the first class is 0
    for byte in range(256):
        if byte in cuts:
            current += 1
        class_of.append(current)
    width = current + 1
    table = [DEAD] * (len(rows) * width)
    for state, row in enumerate(rows):
        base = state * width
        for lo, hi, target in row:
            for k in range(class_of[lo], class_of[hi] + 1):
                table[base + k] = target
    return class_of, table


def expand_table(
    table: Sequence[int],
    class_of: Sequence[int],
    representatives: Iterable[int],
    state_map: Sequence[int],
) -> array:
    """The flat 256-wide table of a class-compressed one, keeping the states ``representatives``
    (old ids, in new order) and renaming targets by ``state_map`` (-1 stays dead)."""
    width = max(class_of) + 1
    out = array("i")
    for old in representatives:
        row = [DEAD if t < 0 else state_map[t] for t in table[old * width : (old + 1) * width]]
        out.extend(row[k] for k in class_of)
    return out


def minimize_table(
    num_states: int,
    num_classes: int,
    table: Sequence[int],
    labels: Sequence[Hashable],
    start: int,
    dead_label: Hashable,
) -> tuple[list[int], list[int]]:
    """Hopcroft's partition refinement over a class-compressed DFA.

    ``table[state * num_classes + k]`` is the target on class k (-1 for dead) and ``labels``
    the initial partition (e.g. "accepting" or the set of accepted terminals); ``dead_label``
    is the label of a rejecting state. States equivalent to the dead state are dropped.

    Returns ``state_map`` (old state → new state, or -1 when dead or unreachable) and
    ``representatives`` (new state → one old state of its block). New states are numbered in
    breadth-first order from ``start``, which becomes 0, so the result is deterministic.
    """
    sink = num_states  # an explicit dead state, so that "-1" takes part in the refinement
    incoming: list[list[int]] = [[] for _ in range(num_states + 1)]  # entries: source*K + class
    for source in range(num_states):
        base = source * num_classes
        for k in range(num_classes):
            target = table[base + k]
            incoming[sink if target < 0 else target].append(base + k)
    incoming[sink].extend(range(sink * num_classes, (sink + 1) * num_classes))

    block_of = [0] * (num_states + 1)
    blocks: list[set[int]] = []
    by_label: dict[Hashable, int] = {}
    for state in range(num_states + 1):
        label = dead_label if state == sink else labels[state]
        if label not in by_label:
            by_label[label] = len(blocks)
            blocks.append(set())
        blocks[by_label[label]].add(state)
        block_of[state] = by_label[label]

    pending = list(range(len(blocks)))
    is_pending = set(pending)
    while pending:
        splitter = pending.pop()
        is_pending.discard(splitter)
        sources_by_class: dict[int, set[int]] = defaultdict(set)
        for state in blocks[splitter]:
            for code in incoming[state]:
                sources_by_class[code % num_classes].add(code // num_classes)
        for sources in sources_by_class.values():
            hit: dict[int, list[int]] = defaultdict(list)
            for state in sources:
                hit[block_of[state]].append(state)
            for block, members in hit.items():
                if len(members) == len(blocks[block]):
                    continue
                new = len(blocks)
                moved = set(members)
                blocks[block] -= moved
                blocks.append(moved)
                for state in members:
                    block_of[state] = new
                # Both halves must be splitters if the block was one; otherwise the smaller
                # half suffices (the classic O(n log n) argument).
                if block in is_pending or len(moved) <= len(blocks[block]):
                    pending.append(new)
                    is_pending.add(new)
                else:
                    pending.append(block)
                    is_pending.add(block)

    dead_block = block_of[sink]
    new_id: dict[int, int] = {}
    representatives: list[int] = []
    if block_of[start] != dead_block:
        new_id[block_of[start]] = 0
        representatives.append(start)
        for old in representatives:  # grows while iterating
            base = old * num_classes
            for k in range(num_classes):
                target = table[base + k]
                if target < 0:
                    continue
                block = block_of[target]
                if block != dead_block and block not in new_id:
                    new_id[block] = len(representatives)
                    representatives.append(target)
    state_map = [new_id.get(block_of[state], DEAD) for state in range(num_states)]
    return state_map, representatives


def outside(inner: ByteDFA, outer: ByteDFA, outer_state: int | None = None) -> str | None:
    """A shortest string of `inner`'s language that `outer` rejects (None: inclusion holds);
    with `outer_state`, that `outer` rejects when read from that state (-1: dead)."""
    if inner.start < 0:
        return None
    table = inner.transitions

    def moves(p: int) -> Iterable[tuple[int, int]]:
        row = p << 8
        return ((b, t) for b in range(256) if (t := table[row | b]) >= 0)

    return shortest_outside((inner.start,), moves, inner.accepting, outer, outer_state)


def shortest_outside(
    starts: Iterable[int],
    moves: Callable[[int], Iterable[tuple[int, int]]],
    accepting: Sequence[bool],
    outer: ByteDFA,
    outer_state: int | None = None,
) -> str | None:
    """A shortest string an automaton accepts and `outer` rejects (read from `outer_state`,
    default its start; -1: dead), None if there is none. The automaton is given by its start
    positions, `moves(p)` (the (byte, position) pairs out of p) and `accepting`: a DFA, or an
    NFA whose positions are each deterministic — breadth first over (position, outer state)
    pairs, each reached by the strings that reach both."""
    start = outer.start if outer_state is None else outer_state
    table = outer.transitions
    seen = {(p, start): b"" for p in starts}
    queue = deque(seen)
    while queue:
        p, q = queue.popleft()
        path = seen[(p, q)]
        if accepting[p] and (q < 0 or not outer.accepting[q]):
            return path.decode("utf-8", "backslashreplace")
        for byte, p2 in moves(p):
            q2 = table[(q << 8) | byte] if q >= 0 else -1
            if (p2, q2) not in seen:
                seen[(p2, q2)] = path + bytes((byte,))
                queue.append((p2, q2))
    return None


def _reaches_accept(transitions: array, accepting: Sequence[bool]) -> list[bool]:
    """Per state: whether some accepting state is reachable (the state itself included)."""
    n = len(accepting)
    predecessors: list[set[int]] = [set() for _ in range(n)]
    for state in range(n):
        for target in set(transitions[state * 256 : (state + 1) * 256]):
            if target >= 0:
                predecessors[target].add(state)
    live = list(accepting)
    stack = [q for q in range(n) if live[q]]
    while stack:
        for p in predecessors[stack.pop()]:
            if not live[p]:
                live[p] = True
                stack.append(p)
    return live

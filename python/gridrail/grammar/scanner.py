"""The union scanner automaton: one minimal DFA over bytes that tracks every terminal at once.

A scanner state stands for the bytes of the lexeme in progress. ``accepts[q]`` holds the terminal
indices whose language contains those bytes, ``live[q]`` those for which they are still a prefix
of some lexeme. The contextual lexer intersects both with the terminals allowed at this point
(``live_mask[q] & allowed_mask``), so one automaton serves every parser state.

Terminals are identified by ``TerminalDef.index`` (bit i of a mask is terminal index i), never by
position in the sequence given, so a subset of a grammar's terminals keeps its numbering.

A state also has a scanner-independent identity (`ScannerAutomaton.identity`): what the state is,
whichever scanner it was numbered in. The mask cache's cross-family tier keys on it (see
`gridrail.mask.normal_form`).
"""

from __future__ import annotations

import functools
import hashlib
import struct
from array import array
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import InitVar, dataclass, field, replace
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import numpy as np

from gridrail.errors import GrammarError, LexiconError, RegexError
from gridrail.grammar.dfa import (
    DEAD,
    ByteDFA,
    compile_regex,
    expand_table,
    minimize_table,
)
from gridrail.grammar.model import TerminalDef
from gridrail.grammar.regex_syntax import quote_pattern

if TYPE_CHECKING:
    from gridrail._kernels import ScanTable
    from gridrail.grammar.names import NameAutomaton
    from gridrail.kernels import NameRows, ScanResult, ScanRunner, UnionRows

T = TypeVar("T")

IDENTITY_ENCODING = b"gridrail-scanner-state-v1"  # bump when the canonical encoding changes
# Bounds on the union automaton (as dfa.py bounds each terminal's): terminals that are small
# alone can multiply, e.g. /(aa)+/, /(aaa)+/, /(a{5})+/, ... have a union as large as the product
# of their periods. Its states are bounded at two lexicons of the largest size one pattern may
# have; its work, the part states stepped per byte class, at three times that of a schema of
# 2,000 names (12M, about 25 s; the bundled grammar alone takes 0.4M).
MAX_SCANNER_STATES = 200_000
MAX_SCANNER_WORK = 40_000_000
# The product with the name automata has a dense row (1 KiB) per state: about one state per
# state of the names' minimal automaton (spellings share beginnings and endings). Bounded at
# 512 MiB of rows.
MAX_NAME_STATES = 500_000


@dataclass(frozen=True, eq=False)
class StateIdentity:
    """A scanner state's identity independently of the scanner that numbers it: the
    sub-automaton reachable from the state, its states numbered breadth-first with successors
    taken in byte order, each labelled with its accept and live sets (terminal indices, which
    are frozen at L1 across projections and lexicons).

    Two states with the same `digest` are the roots of isomorphic labelled sub-automata, and
    canonical number i names the corresponding states of the two (the states reached by the
    same bytes): from there on, the two scanners answer every question about those bytes — the
    next state, a death, the accept and live sets — identically.
    """

    digest: bytes  # BLAKE2b-128 of the canonical encoding
    states: tuple[int, ...]  # this scanner's state ids in canonical order (states[0]: the root)
    numbers: Mapping[int, int]  # this scanner's state id -> canonical number
    terminals: int  # every terminal live or accepted in the sub-automaton (the root's live set)


class ScannerLabels(NamedTuple):
    """A scanner's states grouped by their (accept, live) sets: per state the number of its
    group (`index`, int64), and per group the accept and live masks. States share their sets
    (tens of thousands of states, a few hundred groups), so per-state tables are built per
    group and gathered (`gridrail.kernels.make_mask_runners`). Groups need not be distinct."""

    index: np.ndarray
    accept: tuple[int, ...]
    live: tuple[int, ...]

    @classmethod
    def of(cls, accept_mask: Sequence[int], live_mask: Sequence[int]) -> ScannerLabels:
        groups = dict.fromkeys(zip(accept_mask, live_mask, strict=True), 0)
        for number, pair in enumerate(groups):
            groups[pair] = number
        index = np.fromiter(
            map(groups.__getitem__, zip(accept_mask, live_mask, strict=True)),
            np.int64,
            len(accept_mask),
        )
        return cls(index, tuple(a for a, _ in groups), tuple(v for _, v in groups))


@dataclass(frozen=True, eq=False)
class ScannerAutomaton:
    """Minimal DFA whose states are labelled with accepted and still-live terminal sets.

    ``transitions[state * 256 + byte]`` is the next state, or -1 when no terminal is live after
    that byte: an int32 array, or a read-only int32 view (a scanner with names). Every state
    except possibly the start has a non-empty ``live`` set; the start's is empty only when no
    terminal can match anything. Do not mutate ``transitions``.
    """

    start: int
    num_states: int
    transitions: array | memoryview = field(repr=False)
    accepts: tuple[frozenset[int], ...] = field(repr=False)
    live: tuple[frozenset[int], ...] = field(repr=False)
    # The sets as bit masks: computed from them unless given (a builder that has them).
    accept_mask: tuple[int, ...] = field(default=(), repr=False)
    live_mask: tuple[int, ...] = field(default=(), repr=False)
    # The states' sets grouped: computed from the masks unless given (a builder that has them).
    labels: ScannerLabels | None = field(default=None, repr=False)
    # The Rust table (None without the kernels) and the fastest available implementation of
    # `run`: its `run` when there is one.
    kernel_table: ScanTable | None = field(init=False, repr=False)
    fast_run: ScanRunner = field(init=False, repr=False)
    # Memo of `identity` (computed on demand: only the states a cache asks about).
    _identities: dict[int, StateIdentity] = field(default_factory=dict, init=False, repr=False)
    # Facts its users derive from the scanner alone and their own keys (a scanner never
    # changes, and roles and schemas share one): e.g. the planner's shortest lexemes.
    derived: dict[Hashable, object] = field(default_factory=dict, init=False, repr=False)
    # The Rust table of `transitions` where the builder made it (`transitions` is then a view
    # of its entries: a catalog's table is neither copied nor checked once more).
    kernel: InitVar[ScanTable | None] = None
    # The regex scanner this one extends with names (`_with_names`: its states come first,
    # numbered, labelled and wired as there); None for a scanner without names.
    base: ScannerAutomaton | None = field(default=None, repr=False)

    def __post_init__(self, kernel: ScanTable | None) -> None:
        from gridrail.kernels import make_scan_table

        masks: dict[frozenset[int], int] = {}  # states share their sets: one mask per set
        for field_name, sets in (("accept_mask", self.accepts), ("live_mask", self.live)):
            if len(getattr(self, field_name)) == self.num_states:
                continue
            values = [masks.get(s) for s in sets]
            for i, value in enumerate(values):
                if value is None:
                    values[i] = masks[sets[i]] = _mask(sets[i])
            object.__setattr__(self, field_name, tuple(values))
        if self.labels is None:
            object.__setattr__(self, "labels", ScannerLabels.of(self.accept_mask, self.live_mask))
        table = make_scan_table(self) if kernel is None else kernel
        object.__setattr__(self, "kernel_table", table)
        object.__setattr__(self, "fast_run", self.run if table is None else table.run)

    def step(self, state: int, byte: int) -> int:
        """The state after one byte, or -1 when no terminal is live any more."""
        return self.transitions[(state << 8) | byte]

    def run(self, state: int, data: bytes) -> ScanResult:
        """Consume ``data`` from ``state`` until the next byte would be dead.

        Returns ``(state, consumed, accept_end, accept_state)``: the state reached, the number of
        bytes consumed, and the last accepting position passed on the way: the largest
        ``accept_end`` in 1..consumed whose state ``accept_state`` accepts some terminal (both -1
        if none; ``state`` itself, before any byte, never counts). This is the reference
        semantics of the Rust kernel ``ScanTable.run``.
        """
        if not 0 <= state < self.num_states:
            raise ValueError(f"state {state} out of range for {self.num_states} states")
        table = self.transitions
        accept_mask = self.accept_mask
        accept_end = accept_state = -1
        for consumed, byte in enumerate(data):
            nxt = table[(state << 8) | byte]
            if nxt < 0:
                return state, consumed, accept_end, accept_state
            state = nxt
            if accept_mask[state]:
                accept_end = consumed + 1
                accept_state = state
        return state, len(data), accept_end, accept_state

    def identity(self, state: int) -> StateIdentity:
        """The scanner-independent identity of `state` (see `StateIdentity`), memoized.

        Canonical encoding: the number of states, then per state in canonical order its 256
        successors as canonical numbers (-1: dead), then per state its accept and live masks.
        Breadth-first numbering from one root with successors in byte order is a bijection
        between a deterministic automaton's reachable states and 0..n-1 that depends only on
        the automaton's shape, so equal encodings mean isomorphic labelled sub-automata."""
        found = self._identities.get(state)
        if found is None:  # racing threads compute equal values; either one is kept
            found = self._identities.setdefault(state, self._canonical_identity(state))
        return found

    def canonical_order(self, root: int) -> list[int]:
        """The states reachable from `root`, breadth first, each state's successors in the order
        of the first byte that reaches them: a state's canonical number is its index here. The
        reference semantics of the Rust kernel ``ScanTable.canonical_order``."""
        if not 0 <= root < self.num_states:
            raise ValueError(f"state {root} out of range for {self.num_states} states")
        table = self.transitions
        order = [root]
        seen = {root}
        for state in order:  # grows while iterating: breadth first
            for target in table[state << 8 : (state + 1) << 8]:
                if target >= 0 and target not in seen:
                    seen.add(target)
                    order.append(target)
        return order

    def _canonical_identity(self, root: int) -> StateIdentity:
        from gridrail.kernels import canonical_order  # as `__post_init__` imports it

        table = np.frombuffer(self.transitions, dtype=f"i{self.transitions.itemsize}")
        table = table.reshape(self.num_states, 256)
        order = canonical_order(self, root)
        numbers = {state: number for number, state in enumerate(order)}
        # One spare slot at the end stays -1, so that dead transitions (-1) map to -1.
        renumber = np.full(self.num_states + 1, -1, dtype="<i4")
        renumber[order] = np.arange(len(order), dtype="<i4")
        digest = hashlib.blake2b(IDENTITY_ENCODING, digest_size=16)
        digest.update(struct.pack("<I", len(order)))
        digest.update(renumber[table[order]].tobytes())
        terminals = 0
        for state in order:
            accept, live = self.accept_mask[state], self.live_mask[state]
            digest.update(_framed_mask(accept))
            digest.update(_framed_mask(live))
            terminals |= accept | live
        return StateIdentity(digest.digest(), tuple(order), numbers, terminals)


def build_scanner(
    terminals: Sequence[TerminalDef], exclude: Collection[str] = ()
) -> ScannerAutomaton:
    """The union automaton of ``terminals``.

    Terminals named in ``exclude`` take no part (e.g. declared terminals that no lexer rule
    produces); so do terminals whose pattern matches nothing. A terminal whose pattern matches the
    empty string is a :class:`GrammarError`: a lexeme must be non-empty.

    The regex terminals (and the `rest` of terminals spelled from names) form the *base*
    scanner, minimized and memoized: every schema of one dialect and role has the same base,
    built once. Terminals spelled from names (`TerminalDef.names`, the schema lexicons) are
    then added by a product with their name automata (`_with_names`), which is linear in the
    spellings: its states are the base's, numbered as in the base, and one state per distinct
    (base state, name positions) pair a prefix of a spelling reaches.
    """
    kept = [t for t in terminals if t.name not in exclude]
    base = _base_scanner(tuple(part for t in kept if (part := _regex_part(t)) is not None))
    named = [t for t in kept if t.names is not None and t.names.spellings]
    return _with_names(base, named) if named else base


def _regex_part(terminal: TerminalDef) -> TerminalDef | None:
    """The part of `terminal` a regex spells: all of it, or its name set's `rest` (None: none)."""
    if terminal.names is None:
        return terminal
    rest = terminal.names.rest_pattern
    return replace(terminal, pattern=rest, flags="", names=None) if rest else None


@functools.lru_cache(maxsize=16)
def _base_scanner(terminals: tuple[TerminalDef, ...]) -> ScannerAutomaton:
    """The minimal union automaton of regex terminals (see `build_scanner`): the Rust kernel
    `union_scanner` when enabled, else `_union_scanner`."""
    from gridrail import kernels

    parts: list[tuple[int, ByteDFA]] = []
    for terminal in terminals:
        dfa = _terminal_dfa(terminal)
        if dfa.start != DEAD:
            parts.append((terminal.index, dfa))
    if kernels.KERNELS_ENABLED:
        built = kernels.union_scanner(parts, MAX_SCANNER_STATES, MAX_SCANNER_WORK)
    else:
        built = _union_scanner(parts, MAX_SCANNER_STATES, MAX_SCANNER_WORK)
    if built is None:
        raise GrammarError(
            f"the terminals together need a scanner automaton beyond its bounds "
            f"({MAX_SCANNER_STATES} states, {MAX_SCANNER_WORK} steps to build): terminals "
            "whose lexemes overlap in many ways multiply each other's states"
        )
    transitions, accepts, live = built
    if not accepts:  # nothing can match: a lone start state without transitions
        return ScannerAutomaton(0, 1, array("i", [DEAD] * 256), (frozenset(),), (frozenset(),))
    return ScannerAutomaton(0, len(accepts), transitions, tuple(accepts), tuple(live))


def _union_scanner(
    parts: Sequence[tuple[int, ByteDFA]], max_states: int, max_work: int
) -> UnionRows | None:
    """The minimal union automaton of `parts` (terminal index, its DFA), the reference
    semantics of the Rust kernel `union_scanner`: the subset construction over bytes grouped
    into classes, minimized (`minimize_table`), states numbered breadth first from the start
    in class order; no state when nothing can match; None past `max_states` subset states or
    `max_work` part states stepped per class."""
    class_of, representatives = _union_byte_classes([dfa for _, dfa in parts])
    num_classes = len(representatives)
    tables = [dfa.transitions for _, dfa in parts]

    # Subset construction over the (deterministic) parts: a union state is the tuple of
    # (part, part state) pairs still alive.
    start = tuple((i, dfa.start) for i, (_, dfa) in enumerate(parts))
    keys: list[tuple[tuple[int, int], ...]] = [start]
    ids = {start: 0}
    table: list[int] = []
    work = 0
    for key in keys:  # grows while iterating
        work += len(key) * num_classes
        if len(keys) > max_states or work > max_work:
            return None
        for byte in representatives:
            nxt = tuple((i, t) for i, q in key if (t := tables[i][(q << 8) | byte]) >= 0)
            if not nxt:
                table.append(DEAD)
                continue
            target = ids.get(nxt)
            if target is None:
                target = ids[nxt] = len(keys)
                keys.append(nxt)
            table.append(target)
    accepts = [frozenset(parts[i][0] for i, q in key if parts[i][1].accepting[q]) for key in keys]

    state_map, kept = minimize_table(len(keys), num_classes, table, accepts, 0, frozenset())
    transitions = expand_table(table, class_of, kept, state_map)
    # Every part state is live (parts are minimal), so a union state's live set is its parts.
    live = [frozenset(parts[i][0] for i, _ in keys[old]) for old in kept]
    return transitions, [accepts[old] for old in kept], live


def _with_names(base: ScannerAutomaton, named: Sequence[TerminalDef]) -> ScannerAutomaton:
    """`base` with the terminals spelled from names added (see `build_scanner` and
    `_name_rows`, which the Rust kernel computes when enabled)."""
    from gridrail import kernels

    name_sets = [t.names for t in named]
    try:
        if kernels.KERNELS_ENABLED:
            rows = kernels.name_rows(base, name_sets, MAX_NAME_STATES)  # type: ignore[arg-type]
        else:
            automata = [names.automaton for names in name_sets]  # type: ignore[union-attr]
            rows = _name_rows(base, automata, MAX_NAME_STATES)
    except OverflowError:
        raise LexiconError(
            f"the names of {', '.join(t.name for t in named)} need more than "
            f"{MAX_NAME_STATES} scanner states for their spellings: let the role see fewer "
            "tables or columns"
        ) from None
    table_entries, base_of, accepted, alive = rows
    table = memoryview(table_entries).cast("i")  # read-only, and not a copy of megabytes
    groups, labels = _new_labels(base, base_of, accepted, alive, [t.index for t in named])
    per_group = list(zip(*labels, strict=True)) or [(), (), (), ()]
    accepts, live, accept_mask, live_mask = (_gathered(values, groups) for values in per_group)
    base_labels = base.labels
    assert base_labels is not None  # every scanner has them after construction
    return ScannerAutomaton(
        base.num_states,
        base.num_states + len(groups),
        table,
        (*base.accepts, *accepts),
        (*base.live, *live),
        (*base.accept_mask, *accept_mask),
        (*base.live_mask, *live_mask),
        ScannerLabels(
            np.concatenate((base_labels.index, groups + len(base_labels.accept))),
            base_labels.accept + tuple(per_group[2]),
            base_labels.live + tuple(per_group[3]),
        ),
        None if isinstance(table_entries, bytes) else table_entries,
        base,
    )


# A group of new states' (accept set, live set, accept mask, live mask).
_Label = tuple[frozenset[int], frozenset[int], int, int]


def _new_labels(
    base: ScannerAutomaton,
    base_of: array,
    accepted: array,
    alive: array,
    indices: list[int],
) -> tuple[np.ndarray, list[_Label]]:
    """The product's new states grouped by (base state, accepting slots, live slots): per state
    its group, and per group its label — the base state's sets (none for -1) with the
    terminals of the slots added."""
    columns = (
        np.frombuffer(base_of, np.int32),
        np.frombuffer(accepted, np.uint64),
        np.frombuffer(alive, np.uint64),
    )
    # sorted by (base state, accepting, live); a group starts where one of them changes
    order = np.lexsort(columns[::-1])
    same = np.ones(max(len(order) - 1, 0), dtype=bool)  # as the state sorted before it
    for column in columns:
        ranked = column[order]
        same &= ranked[1:] == ranked[:-1]
    starts = np.concatenate(([len(order) > 0], ~same)).astype(bool)[: len(order)]
    groups = np.empty(len(order), dtype=np.int64)
    groups[order] = np.cumsum(starts) - 1
    firsts = order[starts]
    labels = []
    for b, accept_slots, live_slots in zip(*(c[firsts].tolist() for c in columns), strict=True):
        named = [
            [index for k, index in enumerate(indices) if (slots >> k) & 1]
            for slots in (accept_slots, live_slots)
        ]
        sets = [
            (own[b] if b >= 0 else frozenset()) | set(terminals)
            for own, terminals in zip((base.accepts, base.live), named, strict=True)
        ]
        masks = [
            (own[b] if b >= 0 else 0) | _mask(terminals)
            for own, terminals in zip((base.accept_mask, base.live_mask), named, strict=True)
        ]
        labels.append((sets[0], sets[1], masks[0], masks[1]))
    return groups, labels


def _gathered(values: Sequence[T], groups: np.ndarray) -> list[T]:
    """Per state its group's value: gathered by numpy (a catalog's tens of thousands of new
    states fall into a few hundred groups), each value put in one by one so that none is read
    as a sequence."""
    table = np.empty(len(values), dtype=object)
    for g, value in enumerate(values):
        table[g] = value
    return table[groups].tolist()


def _name_rows(base: ScannerAutomaton, automata: Sequence[NameAutomaton], bound: int) -> NameRows:
    """The states the name automata (one per slot: a terminal spelled from names) add to
    `base`, the reference semantics of the Rust kernel `name_rows`.

    A state is (base state or -1, per slot a set of positions of its name automaton); with no
    position left it *is* the base state (same id, same row: the base's states and rows come
    first, unchanged), otherwise it gets the next id, breadth first from the start in byte
    order, so the numbering is a function of the terminals alone. A row is the base state's
    row with the bytes that move some name position overridden. Returns the whole table (the
    base's rows, then the new states'), the new states' base states, and the slots that accept
    there and that are live, as bit masks; OverflowError past `bound` states."""
    slots = range(len(automata))
    nothing: frozenset[int] = frozenset()
    dead_row = array("i", [DEAD]) * 256
    base_table = base.transitions
    table, base_of, accepted, alive = array("i", base_table), array("i"), array("Q"), array("Q")
    start_key = (base.start, tuple(a.start for a in automata))
    ids = {start_key: base.num_states}
    keys = [start_key]
    for b, positions in keys:  # grows while iterating: breadth first
        if len(keys) > bound:
            raise OverflowError(f"the names need more than {bound} scanner states")
        row = base_table[b << 8 : (b + 1) << 8] if b >= 0 else dead_row[:]
        accepting = live = 0
        moved: dict[int, dict[int, frozenset[int]]] = {}  # byte -> slot -> positions after it
        for k in slots:
            here = positions[k]
            if not here:
                continue
            live |= 1 << k
            if automata[k].accepts(here):
                accepting |= 1 << k
            for byte, after in automata[k].successors(here).items():
                moved.setdefault(byte, {})[k] = after
        for byte in sorted(moved):
            after = moved[byte]
            key = (
                base_table[(b << 8) | byte] if b >= 0 else DEAD,
                tuple(after.get(k, nothing) for k in slots),
            )
            target = ids.get(key)
            if target is None:
                target = ids[key] = base.num_states + len(keys)
                keys.append(key)
            row[byte] = target
        table.extend(row)
        base_of.append(b)
        accepted.append(accepting)
        alive.append(live)
    return table.tobytes(), base_of, accepted, alive


def _terminal_dfa(terminal: TerminalDef) -> ByteDFA:
    try:
        dfa = compile_regex(terminal.pattern, terminal.flags)
    except RegexError as err:
        raise RegexError(f"terminal {terminal.name}: {err.message}") from None
    if dfa.start != DEAD and dfa.accepting[dfa.start]:
        raise GrammarError(
            f"terminal {terminal.name} matches the empty string "
            f"({quote_pattern(terminal.pattern)}); "
            "a lexeme must be non-empty"
        )
    return dfa


def _union_byte_classes(dfas: Sequence[ByteDFA]) -> tuple[list[int], list[int]]:
    """Bytes that no part tells apart share a class: returns byte → class and one byte per class."""
    # Column b of a flat table (every state's target on byte b) identifies byte b's behaviour.
    columns = [[dfa.transitions[b::256].tobytes() for b in range(256)] for dfa in dfas]
    class_ids: dict[tuple[bytes, ...], int] = {}
    class_of = []
    representatives = []
    for byte in range(256):
        signature = tuple(column[byte] for column in columns)
        if signature not in class_ids:
            class_ids[signature] = len(representatives)
            representatives.append(byte)
        class_of.append(class_ids[signature])
    return class_of, representatives


def _framed_mask(mask: int) -> bytes:
    data = mask.to_bytes((mask.bit_length() + 7) // 8, "little")
    return struct.pack("<I", len(data)) + data


def _mask(indices: Iterable[int]) -> int:
    mask = 0
    for index in indices:
        mask |= 1 << index
    return mask

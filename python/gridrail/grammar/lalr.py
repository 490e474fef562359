"""LALR(1) parse tables for a grammar model.

The LR(0) automaton is built over integer-coded items; its lookaheads come from DeRemer and
Pennello's relations (direct reads, reads, includes, lookback), each solved with their Digraph
algorithm over terminal sets held as int bitsets. There is no precedence or associativity:
every conflict raises ``GrammarConflict``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

from gridrail import kernels
from gridrail.errors import GrammarConflict, GrammarError
from gridrail.grammar.model import Grammar, Production
from gridrail.grammar.reduce import empty_language, productive_nonterminals

ACCEPT = -(1 << 30)
"""The action on ``$END`` in the state holding ``$START -> start •``."""

END = "$END"
"""Name of the end-of-input terminal; its id is ``len(grammar.terminals)``."""

AUGMENTED_START = "$START"
"""Name of the augmented start symbol S' of the production ``$START -> start``."""


@dataclass(frozen=True)
class LalrTables:
    """Integer-coded LALR(1) tables, pure data for a table-driven parser.

    Terminal ids are ``TerminalDef.index`` followed by ``$END`` (id ``end``). Nonterminal ids
    follow ``Grammar.nonterminals`` (the start symbol is 0) followed by ``$START``. Production
    ``p`` is ``grammar.productions[p]``; the augmented ``$START -> start`` comes last.

    ``action[state][terminal]`` is ``>= 0`` to shift to that state, ``-1 - p`` to reduce by
    production ``p``, or ``ACCEPT``. A missing entry is an error: there are no default
    reductions, so a row lists exactly the LALR(1) lookaheads of its state.
    """

    terminal_names: tuple[str, ...]
    nonterminal_names: tuple[str, ...]
    productions: tuple[tuple[int, int], ...]
    """Per production: (lhs nonterminal id, rhs length)."""
    production_rhs: tuple[tuple[str, ...], ...]
    """Per production: the rhs symbol names, for rendering items."""
    action: tuple[dict[int, int], ...]
    goto: tuple[dict[int, int], ...]
    kernels: tuple[tuple[tuple[int, int], ...], ...]
    """Per state: its LR(0) kernel items as (production, dot position)."""
    start_state: int = 0

    @cached_property
    def move_masks(self) -> tuple[list[int], list[tuple[tuple[int, int], ...]]]:
        """Per state: the terminals it shifts, and per reduction the terminals it reduces on,
        as bit masks (the parser's view of `action`). Computed once per table object: grammars
        that differ only in their terminals' lexemes (a role over another schema) share it."""
        shift_masks: list[int] = []
        reductions: list[tuple[tuple[int, int], ...]] = []
        for row in self.action:
            shifts = 0
            groups: dict[int, int] = {}
            for terminal, move in row.items():
                if move >= 0:
                    shifts |= 1 << terminal
                elif move != ACCEPT:
                    groups[move] = groups.get(move, 0) | 1 << terminal
            shift_masks.append(shifts)
            reductions.append(tuple(sorted(groups.items())))
        return shift_masks, reductions

    @cached_property
    def rhs_symbols(self) -> tuple[tuple[int, ...], ...]:
        """Per production: its rhs as symbol ids — terminals, then $END (``end``), then the
        nonterminals from ``end + 1`` (the ids of stack entries)."""
        ids = {name: i for i, name in enumerate(self.terminal_names)}
        ids.update({name: self.end + 1 + i for i, name in enumerate(self.nonterminal_names)})
        return tuple(tuple(ids[name] for name in rhs) for rhs in self.production_rhs)

    @property
    def end(self) -> int:
        """The terminal id of ``$END``."""
        return len(self.terminal_names) - 1

    @property
    def augmented_production(self) -> int:
        """The production id of ``$START -> start``."""
        return len(self.productions) - 1

    def item_text(self, production: int, dot: int) -> str:
        """``lhs -> a b • c`` for the item with the dot before rhs position ``dot``."""
        lhs = self.nonterminal_names[self.productions[production][0]]
        return _item_text(lhs, self.production_rhs[production], dot)

    def items_of(self, state: int) -> list[str]:
        """The kernel items of ``state``, rendered for messages and debugging."""
        return [self.item_text(production, dot) for production, dot in self.kernels[state]]


def build_lalr(grammar: Grammar) -> LalrTables:
    """The LALR(1) tables of ``grammar``, augmented with ``$START -> start`` and ``$END``.

    Raises ``GrammarError`` if a nonterminal used in a rule has no productions or the start
    symbol derives no terminal string, and ``GrammarConflict`` if the grammar is not LALR(1).
    """
    _check_symbols(grammar)
    if grammar.start not in productive_nonterminals(grammar):
        raise empty_language(grammar)
    coded = _CodedGrammar(grammar)
    # the Rust kernel builds the same tables (a parity test binds them); a grammar that is not
    # LALR(1) takes the path below, which names the conflict
    built = kernels.lalr_tables(coded) if kernels.KERNELS_ENABLED else None
    if built is not None:
        kernel_items, goto, action = built
    else:
        automaton = _Lr0Automaton(coded)
        lookaheads = _lalr_lookaheads(coded, automaton)
        action = _action_table(coded, automaton, lookaheads)
        goto = tuple(
            {
                symbol - coded.n_terminals: target
                for symbol, target in row.items()
                if coded.is_nonterminal(symbol)
            }
            for row in automaton.transitions
        )
        kernel_items = tuple(
            tuple((coded.item_production[item], coded.item_dot[item]) for item in kernel)
            for kernel in automaton.kernels
        )
    return LalrTables(
        terminal_names=coded.terminal_names,
        nonterminal_names=coded.nonterminal_names,
        productions=tuple(zip(coded.lhs, map(len, coded.rhs), strict=True)),
        production_rhs=coded.rhs_names,
        action=action,
        goto=goto,
        kernels=kernel_items,
    )


# --- grammar analyses on names ------------------------------------------------------------


def _check_symbols(grammar: Grammar) -> None:
    """Reject what the loader should have caught, so the integer coding below cannot fail."""
    defined = {p.lhs for p in grammar.productions}
    for name in (END, AUGMENTED_START):
        if grammar.is_terminal(name) or name in defined:
            raise GrammarError(f"the symbol name {name!r} is reserved", source=grammar.name)
    if grammar.is_terminal(grammar.start):
        raise GrammarError(f"the start symbol {grammar.start!r} is a terminal", source=grammar.name)
    for position, terminal in enumerate(grammar.terminals):
        if terminal.index != position:
            raise GrammarError(
                f"terminal {terminal.name!r} has index {terminal.index}, expected {position}: "
                "terminal indices must be 0..n-1 in order",
                source=grammar.name,
            )
    for position, production in enumerate(grammar.productions):
        if production.index != position:
            raise GrammarError(
                f"production {_production_text(production)!r} has index {production.index}, "
                f"expected {position}: production indices must be 0..n-1 in order",
                source=grammar.name,
            )
        if grammar.is_terminal(production.lhs):
            raise GrammarError(
                f"terminal {production.lhs!r} is used as the lhs of a rule", source=grammar.name
            )
        for symbol in production.rhs:
            if not grammar.is_terminal(symbol) and symbol not in defined:
                raise GrammarError(
                    f"nonterminal {symbol!r} has no productions "
                    f"(used in {_production_text(production)!r})",
                    source=grammar.name,
                )


def _production_text(production: Production) -> str:
    return " ".join([production.lhs, "->", *production.rhs])


def _item_text(lhs: str, rhs: tuple[str, ...], dot: int) -> str:
    return " ".join([lhs, "->", *rhs[:dot], "•", *rhs[dot:]])


# --- integer coding -----------------------------------------------------------------------


class _CodedGrammar:
    """The augmented grammar over integer symbols and items.

    A symbol code below ``n_terminals`` is a terminal id; code ``n_terminals + a`` is
    nonterminal ``a``. An item code is ``item_base[p] + dot``, so advancing the dot is ``+ 1``.
    """

    def __init__(self, grammar: Grammar):
        self.source = grammar.name
        self.terminal_names = (*(t.name for t in grammar.terminals), END)
        self.end = len(grammar.terminals)
        self.n_terminals = self.end + 1
        self.nonterminal_names = (*grammar.nonterminals, AUGMENTED_START)
        self.augmented = len(grammar.productions)

        code = {t.name: t.index for t in grammar.terminals}
        code.update((name, self.n_terminals + a) for a, name in enumerate(self.nonterminal_names))
        self.start_code = code[grammar.start]
        self.rhs_names = (*(p.rhs for p in grammar.productions), (grammar.start,))
        self.lhs = [code[p.lhs] - self.n_terminals for p in grammar.productions]
        self.lhs.append(len(self.nonterminal_names) - 1)
        self.rhs = [tuple(code[s] for s in names) for names in self.rhs_names]

        self.productions_of: list[list[int]] = [[] for _ in self.nonterminal_names]
        for p, a in enumerate(self.lhs):
            self.productions_of[a].append(p)
        self.nullable = self._nullable()
        # nullable_from[p]: the least i such that rhs[i:] derives the empty string
        self.nullable_from = [self._nullable_suffix_start(rhs) for rhs in self.rhs]

        self.item_base: list[int] = []
        self.item_production: list[int] = []
        self.item_dot: list[int] = []
        self.item_next: list[int] = []  # the symbol after the dot, -1 for a complete item
        for p, rhs in enumerate(self.rhs):
            self.item_base.append(len(self.item_production))
            for dot in range(len(rhs) + 1):
                self.item_production.append(p)
                self.item_dot.append(dot)
                self.item_next.append(rhs[dot] if dot < len(rhs) else -1)

    def is_nonterminal(self, symbol: int) -> bool:
        return symbol >= self.n_terminals

    def _nullable(self) -> list[bool]:
        nullable = [False] * len(self.nonterminal_names)
        changed = True
        while changed:
            changed = False
            for p, rhs in enumerate(self.rhs):
                a = self.lhs[p]
                if not nullable[a] and all(
                    s >= self.n_terminals and nullable[s - self.n_terminals] for s in rhs
                ):
                    nullable[a] = True
                    changed = True
        return nullable

    def _nullable_suffix_start(self, rhs: tuple[int, ...]) -> int:
        i = len(rhs)
        while (
            i > 0
            and self.is_nonterminal(rhs[i - 1])
            and self.nullable[rhs[i - 1] - self.n_terminals]
        ):
            i -= 1
        return i

    def render_item(self, item: int) -> str:
        p = self.item_production[item]
        lhs = self.nonterminal_names[self.lhs[p]]
        return _item_text(lhs, self.rhs_names[p], self.item_dot[item])


# --- LR(0) automaton ----------------------------------------------------------------------


class _Lr0Automaton:
    """The canonical LR(0) item sets, numbered breadth-first from the augmented start item.

    Successor kernels are created in increasing symbol-code order and stored as sorted item
    tuples, so the numbering depends only on the grammar, never on hashing.
    """

    def __init__(self, coded: _CodedGrammar):
        self._coded = coded
        self._predicted = self._predictions()
        self.kernels: list[tuple[int, ...]] = [(coded.item_base[coded.augmented],)]
        self.closures: list[tuple[int, ...]] = []
        self.transitions: list[dict[int, int]] = []
        state_of = {self.kernels[0]: 0}
        while len(self.closures) < len(self.kernels):
            closure = self._closure(self.kernels[len(self.closures)])
            self.closures.append(closure)
            successors: dict[int, list[int]] = {}
            for item in closure:
                symbol = coded.item_next[item]
                if symbol >= 0:
                    successors.setdefault(symbol, []).append(item + 1)
            row: dict[int, int] = {}
            for symbol in sorted(successors):
                kernel = tuple(sorted(successors[symbol]))
                target = state_of.get(kernel)
                if target is None:
                    target = state_of[kernel] = len(self.kernels)
                    self.kernels.append(kernel)
                row[symbol] = target
            self.transitions.append(row)

    def _predictions(self) -> list[tuple[int, ...]]:
        """Per nonterminal A: the initial items a dot before A adds to a closure (sorted)."""
        coded = self._coded
        predicted = []
        for a in range(len(coded.nonterminal_names)):
            # left-corner closure: A, and every nonterminal that begins a production of one
            corner = {a}
            pending = [a]
            while pending:
                for p in coded.productions_of[pending.pop()]:
                    rhs = coded.rhs[p]
                    if rhs and coded.is_nonterminal(rhs[0]):
                        b = rhs[0] - coded.n_terminals
                        if b not in corner:
                            corner.add(b)
                            pending.append(b)
            predicted.append(
                tuple(sorted(coded.item_base[p] for b in corner for p in coded.productions_of[b]))
            )
        return predicted

    def _closure(self, kernel: tuple[int, ...]) -> tuple[int, ...]:
        coded = self._coded
        expected = {
            coded.item_next[item] - coded.n_terminals
            for item in kernel
            if coded.is_nonterminal(coded.item_next[item])
        }
        added: set[int] = set()
        for a in expected:
            added.update(self._predicted[a])
        # kernel items have the dot past position 0 (or are the augmented item, which no rule
        # predicts), so they never coincide with predicted items
        return kernel + tuple(sorted(added))


# --- LALR(1) lookaheads (DeRemer & Pennello) ----------------------------------------------


def _lalr_lookaheads(coded: _CodedGrammar, automaton: _Lr0Automaton) -> dict[tuple[int, int], int]:
    """LA(q, p) as a terminal bitset for each state q holding the complete item of production p.

    Over the nonterminal transitions x = (state, A):
      Read(x)   = DR(x) ∪ ⋃ {Read(y) | x reads y}
      Follow(x) = Read(x) ∪ ⋃ {Follow(y) | x includes y}
      LA(q, p)  = ⋃ {Follow(x) | (q, p) lookback x}
    """
    transitions = automaton.transitions
    transition_id: dict[tuple[int, int], int] = {}
    sources: list[int] = []
    symbols: list[int] = []
    targets: list[int] = []
    for state, row in enumerate(transitions):
        for symbol, target in row.items():
            if coded.is_nonterminal(symbol):
                transition_id[(state, symbol)] = len(sources)
                sources.append(state)
                symbols.append(symbol)
                targets.append(target)

    direct_reads: list[int] = []
    reads: list[list[int]] = []
    for target in targets:
        terminals = 0
        nullable_successors = []
        for symbol in transitions[target]:
            if not coded.is_nonterminal(symbol):
                terminals |= 1 << symbol
            elif coded.nullable[symbol - coded.n_terminals]:
                nullable_successors.append(transition_id[(target, symbol)])
        direct_reads.append(terminals)
        reads.append(nullable_successors)
    # the augmented rule S' -> start $END shifts $END after start from the start state
    direct_reads[transition_id[(0, coded.start_code)]] |= 1 << coded.end
    read_sets = _digraph(reads, direct_reads)

    includes: list[list[int]] = [[] for _ in sources]
    lookback: dict[tuple[int, int], list[int]] = {}
    for x, (source, symbol) in enumerate(zip(sources, symbols, strict=True)):
        for p in coded.productions_of[symbol - coded.n_terminals]:
            state = source
            for i, s in enumerate(coded.rhs[p]):
                if coded.is_nonterminal(s) and i + 1 >= coded.nullable_from[p]:
                    includes[transition_id[(state, s)]].append(x)
                state = transitions[state][s]
            lookback.setdefault((state, p), []).append(x)
    follow_sets = _digraph(includes, read_sets)

    lookaheads = {}
    for key, xs in lookback.items():
        terminals = 0
        for x in xs:
            terminals |= follow_sets[x]
        lookaheads[key] = terminals
    return lookaheads


def _digraph(relation: list[list[int]], initial: list[int]) -> list[int]:
    """F(x) = initial(x) ∪ ⋃ {F(y) | x R y}, by DeRemer and Pennello's Digraph algorithm.

    An iterative Tarjan traversal: every strongly connected component of R gets one common
    set. Iterative because relation chains in real grammars outgrow Python's recursion limit.
    """
    done = len(relation) + 1  # above every stack depth
    result = list(initial)
    depth = [0] * len(relation)  # 0: unvisited; stack depth on entry; `done` when finished
    low = [0] * len(relation)
    stack: list[int] = []
    for root in range(len(relation)):
        if depth[root]:
            continue
        stack.append(root)
        depth[root] = low[root] = len(stack)
        work = [(root, 0)]
        while work:
            x, next_edge = work[-1]
            successors = relation[x]
            if next_edge < len(successors):
                work[-1] = (x, next_edge + 1)
                y = successors[next_edge]
                if depth[y] == 0:
                    stack.append(y)
                    depth[y] = low[y] = len(stack)
                    work.append((y, 0))
                else:
                    low[x] = min(low[x], low[y])
                    result[x] |= result[y]
                continue
            work.pop()
            if low[x] == depth[x]:
                while True:
                    member = stack.pop()
                    depth[member] = low[member] = done
                    result[member] = result[x]
                    if member == x:
                        break
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[x])
                result[parent] |= result[x]
    return result


# --- action table -------------------------------------------------------------------------


def _action_table(
    coded: _CodedGrammar, automaton: _Lr0Automaton, lookaheads: dict[tuple[int, int], int]
) -> tuple[dict[int, int], ...]:
    rows = []
    for state, closure in enumerate(automaton.closures):
        row = {
            symbol: target
            for symbol, target in automaton.transitions[state].items()
            if not coded.is_nonterminal(symbol)
        }
        reductions: dict[int, list[int]] = {}
        for item in closure:
            if coded.item_next[item] == -1:
                p = coded.item_production[item]
                terminals = 1 << coded.end if p == coded.augmented else lookaheads[(state, p)]
                for terminal in _bits(terminals):
                    reductions.setdefault(terminal, []).append(p)
        for terminal in sorted(reductions):
            productions = reductions[terminal]
            if terminal in row or len(productions) > 1:
                raise _conflict(coded, state, closure, terminal, productions, terminal in row)
            p = productions[0]
            row[terminal] = ACCEPT if p == coded.augmented else -1 - p
        rows.append(dict(sorted(row.items())))
    return tuple(rows)


def _conflict(
    coded: _CodedGrammar,
    state: int,
    closure: tuple[int, ...],
    terminal: int,
    productions: list[int],
    shifts: bool,
) -> GrammarConflict:
    shift_items = [item for item in closure if coded.item_next[item] == terminal]
    reduce_items = [coded.item_base[p] + len(coded.rhs[p]) for p in productions]
    return GrammarConflict(
        state,
        [coded.render_item(item) for item in shift_items + reduce_items],
        coded.terminal_names[terminal],
        "shift/reduce" if shifts else "reduce/reduce",
        source=coded.source,
    )


def _bits(mask: int) -> Iterator[int]:
    """The positions of the set bits of ``mask``, lowest first."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low

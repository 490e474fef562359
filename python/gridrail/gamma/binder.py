"""The binder: Γ carried through decoding, and the Γ-slots it puts on the mask (issue 15, part 1).

The byte-level oracle decides L (the role's language); no context-free mask can decide which
names a statement has declared (the GRID paper's Proposition 11). The binder reads the same
lexemes the oracle reads — maximal munch, the contextual winner — with an LR driver over the
same tables and the same interned stack nodes, and runs semantic actions on the reductions
that declare names (FROM items, select-list aliases, CTEs, derived tables), keeping Γ
(`gamma.environment`) beside the parser stack. Its state is immutable, so a matcher's history
holds one per token and rollback pops it.

L_Γ ⊆ L: the sentences of L whose names bind, by the dialect's rules, to what the role may
see. In a SELECT block:
* names in ON, WHERE, GROUP BY, HAVING, ORDER BY and LIMIT are *slots* once the FROM clause
  has closed (ON: the items declared so far, of its parenthesized join if that join is not
  the clause's first item — SQLite reads such a join as a subquery): only names that bind
  are allowed;
* names in the select list come before their FROM clause, and bare names in ON are bound by
  SQLite against the whole FROM list: they are *obligations* (`gamma.obligations`), each
  allowed only while the FROM clause can still discharge all of them, and the FROM clause's
  tables, aliases and its end are allowed only on that condition (where SQLite binds an
  ON's bare names to the items before it only, they must be columns of those; after an ON
  that owes a later item a name, no RIGHT or FULL join: `_obliges`);
* outside every block (a VALUES row) nothing is bound.
An INSERT / UPDATE / DELETE is a block too: its target is a table the role may write, and
once named it is the block's one binding — an INSERT's column list and an UPDATE's SET
columns are its visible columns, SET values, WHERE and RETURNING bind to it (RETURNING under
the table's own name, as SQLite binds it). L_Γ has no UPDATE … FROM: its SET values, written
before the FROM items, could be made ambiguous by them (a later part).

The mask under Γ is the mask of L without the tokens after which the output is no longer a
viable prefix of L_Γ: a token whose lexemes put a name at a slot that does not bind, or end a
FROM clause that leaves an obligation, or leave a pending lexeme that no allowed name (and no
terminal Γ does not judge) can complete. Every allowed name is a complete lexeme and every
obligation can be discharged, so each Γ-viable prefix has a completion (`repair` builds one).
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from gridrail.errors import GrammarError
from gridrail.gamma.catalog import NameCatalog
from gridrail.gamma.environment import (
    Binding,
    Block,
    Cell,
    Column,
    Phase,
    ResultItem,
    bare_columns,
    cells,
    columns_by_key,
    expand_result,
    innermost,
    qualified_columns,
    qualifiers,
)
from gridrail.gamma.obligations import MAX_FROM_ITEMS, Catalog, discharged, plan, witnessed
from gridrail.gamma.tokens import SlotScan, TokenShapes
from gridrail.grammar.lalr import ACCEPT
from gridrail.lru import BoundedLRU, SameObject
from gridrail.parse.oracle import Configuration, Oracle
from gridrail.parse.stack import StackNode
from gridrail.policy.binding import CLAUSE_REACH, Reach
from gridrail.policy.lexicon import DECLARED_BY

# The grammar's rule and alias names the binder acts on (checked against the grammar).
LABELS = (
    "select_core",
    "from_clause",
    "on",
    "table",
    "table_alias",
    "subquery_table",
    "expr_column",
    "column_ref",
    "function_call",
    "aggregate_arguments",
    "distinct_argument",
    "over_clause",
    "all_columns",
    "table_all_columns",
    "compound",
    "select_stmt",
    "with_clause",
    "common_table_expr",
    "cte_column_list",
    "order_by_clause",
    "group_by_clause",
    "having_clause",
    "limit_clause",
    "values_clause",
    "subquery_table",
    "parenthesized_join",
    "where_clause",
    "returning_clause",
    "insert_stmt",
    "update_stmt",
    "delete_stmt",
    "assignment",
    "column_name_list",
    "join_operator",
    "left",
    "right",
    "full",
    "collate",
    "primary",
)
# The terminals of name slots and of the names the binder records.
QUALIFIER, COLUMN_NAME, TABLE_NAME = "QUALIFIER", "COLUMN_NAME", "TABLE_NAME"
TABLE_ALIAS, COLUMN_ALIAS, CTE_NAME = "TABLE_ALIAS", "COLUMN_ALIAS", "CTE_NAME"
# The terminals whose text the semantic actions read; the others' tokens keep no text, so
# states that differ only in a literal or a keyword's case share the memos (`content_key`)
NAMED = frozenset((QUALIFIER, COLUMN_NAME, TABLE_NAME, TABLE_ALIAS, COLUMN_ALIAS, CTE_NAME))
WRITES = ("insert_stmt", "update_stmt", "delete_stmt")
WRITE_CLAUSES = ("set", "where_clause", "returning_clause")  # where a write's names bind
# Joins that merge columns by name (NATURAL, USING): L_Γ has none in a SELECT block — which
# names they merge, and when SQLite finds them ambiguous, is left to a later part.
MERGING_JOINS = ("NATURAL", "USING")
# Joins after which every ON of the clause must name only items before it (SQLite: "ON clause
# references tables to its right"); refused once an ON owes a name a later item must provide
RIGHTWARD_JOINS = ("RIGHT", "FULL")
# Calls SQLite refuses where rows are filtered, grouped or joined or a write returns them, and
# inside an aggregate's own arguments ("misuse of aggregate function"): the aggregates
# (`max(` / `min(` included, aggregates with one argument) and the window functions, which
# HAVING refuses as well ("misuse of window function"). Candidates for a question about an
# unseen database nested them (`GROUP_CONCAT(GROUP_CONCAT(...))`) until none of them ran
# (bench/RESULTS.md).
AGGREGATE_CALLS = ("AGGREGATE_1", "AGGREGATE_2", "AGGREGATE_1_2", "COUNT_OPEN", "MIN_MAX")
WINDOW_CALLS = ("WINDOW_0", "WINDOW_1", "WINDOW_2", "WINDOW_1_3")
# The calls refused in the innermost clause (an event of `Binder._state_events`, or a rule of
# `CALL_RULES`) that a call is written in; a clause not named here leaves it to the one around
# it. A window's ORDER BY is its OVER's (SQLite refuses a window function in a window).
ALL_CALLS = AGGREGATE_CALLS + WINDOW_CALLS
CALLS_REFUSED: dict[str, tuple[str, ...]] = {
    "select": (),  # the select list
    "order_by_clause": (),
    "having_clause": WINDOW_CALLS,
    "over_clause": WINDOW_CALLS,
    **dict.fromkeys(("where_clause", "group_by_clause", "on", "values", "set"), ALL_CALLS),
    **dict.fromkeys(("limit_clause", "filter_clause", "arguments"), ALL_CALLS),
    "returning_clause": ALL_CALLS,  # a write's RETURNING (its subqueries take them)
}
# Rules whose first symbol opens such a context: an aggregate's arguments (after its "("),
# FILTER (WHERE ...) and OVER (...)
CALL_RULES = {
    "aggregate_arguments": "arguments",
    "distinct_argument": "arguments",
    "filter_clause": "filter_clause",
    "over_clause": "over_clause",
}


class GammaState(NamedTuple):
    """Γ at a lexeme boundary, plus the pending lexeme's bytes."""

    node: StackNode  # the LR stack after the last emitted lexeme (the oracle's own node)
    values: Cell | None  # semantic values, one per stack symbol above the root
    block: Block | None  # the innermost open block
    pending: bytes  # the lexeme in progress
    # BLAKE2b-128 chained over the lexemes read (Γ is a function of them): what an audit
    # record's configuration hash adds for Γ, in O(1) per lexeme
    digest: bytes = bytes(16)


class Failure(NamedTuple):
    """A lexeme that breaks Γ: where it starts in the text, its terminal, and the state it
    met (to choose an allowed name in its place)."""

    start: int
    terminal: int
    state: GammaState


class Token(NamedTuple):
    terminal: str
    text: str


class Slot(NamedTuple):
    """What Γ allows at a name slot: `names` (key -> spelling), and with `fresh`, also every
    name of the terminal whose key is not in `fresh` and that `fresh_test` accepts (a new
    alias)."""

    names: dict[str, str]
    fresh: frozenset[str] | None = None
    fresh_test: Callable[[str], bool] | None = None

    def allows(self, key: str) -> bool:
        if key in self.names:
            return True
        if self.fresh is None or key in self.fresh:
            return False
        return self.fresh_test is None or self.fresh_test(key)


class PrefixJudge(NamedTuple):
    """`pending_verdict` for many pending lexemes where the live terminals are names: a lexeme
    passes if empty, if (ASCII case folded with `fold`) it is one of `prefixes` (of the lexemes
    Γ allows), or, with `fresh`, if `fresh` finds it a new alias's start."""

    prefixes: frozenset[bytes]
    fold: bool
    fresh: Callable[[bytes], bool] | None

    def __call__(self, pendings: Sequence[bytes]) -> list[bool]:
        keys = [p.lower() for p in pendings] if self.fold else pendings
        found = self.prefixes.intersection(keys)
        out = [not p or k in found for p, k in zip(pendings, keys, strict=True)]
        if self.fresh is not None:
            for i, pending in enumerate(pendings):
                out[i] = out[i] or self.fresh(pending)
        return out

    def tokens(
        self, shapes: TokenShapes, ids: np.ndarray, starts: np.ndarray, pending: bytes
    ) -> np.ndarray:
        """The verdicts (a bool array) on the lexemes the tokens `ids` leave pending
        (`TokenShapes.pending_lexemes`). Where the prefixes are fewer than the tokens, from
        their side: a token passes if its bytes from its start (0, 1), or `pending` and its
        bytes, are a prefix — looked up in the vocabulary's `by_rest` index, one lookup per
        prefix instead of one lexeme built per token. The rest as `__call__` judges them."""
        out = np.zeros(len(ids), dtype=bool)
        rest = np.ones(len(ids), dtype=bool)
        if self.fresh is None and len(self.prefixes) < len(ids):
            passing = np.zeros(len(shapes.lengths), dtype=bool)
            lengths = shapes.lengths[ids]
            for start in (-1, 0, 1):
                chosen = (starts == start) & (lengths > start)
                if not chosen.any():
                    continue
                index = shapes.by_rest(max(start, 0), self.fold)
                if start >= 0:
                    found = [t for p in self.prefixes for t in index.get(p, ())]
                else:  # the pending lexeme grows: the prefixes that go on from it
                    head = pending.lower() if self.fold else pending
                    found = [
                        t
                        for p in self.prefixes
                        if p.startswith(head)
                        for t in index.get(p[len(head) :], ())
                    ]
                passing[found] = True
                out[chosen] = passing[ids[chosen]]
                passing[found] = False
                rest &= ~chosen
        if rest.any():
            out[rest] = self(shapes.pending_lexemes(ids[rest], starts[rest], pending))
        return out


class _Refused(Exception):
    """A reduction Γ refuses (a FROM item or a FROM clause that breaks an obligation)."""


# Keywords `_alive` follows past a shifted one (`LEFT` OUTER JOIN <table>), where at most
# FEW_FOLLOWERS terminals may come next: a chain of keywords, not an expression's many.
LOOKAHEAD, FEW_FOLLOWERS = 3, 8

# Fresh aliases the reserve may write, in order of preference.
FRESH_ALIASES = tuple(f"t{i}" for i in range(10)) + tuple("abcdefghijklmnopqrsuvwxyz")


class Binder:
    """Γ for one guide: the grammar's tables, the schema as the role sees it."""

    def __init__(self, oracle: Oracle, names: NameCatalog):
        compiled = oracle.compiled
        grammar = compiled.grammar
        self.oracle = oracle
        self.names = names
        self.rules = names.rules
        tables = compiled.tables
        self._action, self._goto = tables.action, tables.goto
        self._weights = oracle.lr.stack_limit.weights
        self._lengths = [length for _, length in tables.productions]
        self._lhs = [lhs for lhs, _ in tables.productions]
        self._nonterminal_base = tables.end + 1
        self._labels = [p.alias or p.lhs for p in grammar.productions]
        # the EBNF helper rules of a CTE's column list (`("," COLUMN_ALIAS)*`): its names
        self._column_list_helpers = {
            p.lhs
            for p in grammar.productions
            if p.origin == "cte_column_list" and p.lhs != "cte_column_list"
        }
        self._origins = [p.origin for p in grammar.productions]
        self._ignored = compiled.ignored_mask
        self._names = compiled.terminal_names
        self._index = {name: i for i, name in enumerate(compiled.terminal_names)}
        scanner = compiled.scanner
        self._run, self._start = scanner.fast_run, scanner.start
        self._trans, self._live, self._accept = oracle.scanner_tables()
        missing = set(LABELS) - {p.alias or p.lhs for p in oracle.compiled.grammar.productions}
        if "select_core" not in missing and missing & _CORE_LABELS:
            raise GrammarError(
                "names declared in the statement (Γ) need the grammar's rules "
                f"{', '.join(sorted(_CORE_LABELS))}; {grammar.name} has no "
                f"{', '.join(sorted(missing & _CORE_LABELS))}"
            )
        self._joins = "join" not in missing
        # a SELECT block may end without FROM (then its obligations refuse its end)
        self._from_optional = any(
            (p.alias or p.lhs) == "select_core" and "from_clause" not in p.rhs
            for p in oracle.compiled.grammar.productions
        )
        self._aliases = "table_alias" not in missing
        slot_names = (QUALIFIER, COLUMN_NAME, TABLE_NAME, TABLE_ALIAS, CTE_NAME)
        self._restricted = {self._index[n] for n in slot_names if n in self._index}
        # Name terminals whose language also spells the names a statement declares: Γ keeps
        # them to the role's words wherever it does not judge the slot (`with_declared_names`)
        self._widened = {
            self._index[n]
            for n, _ in DECLARED_BY
            if n in self._index and getattr(grammar.terminal(n).names, "rest", "")
        }
        self._words: dict[int, dict[str, str]] = {}
        # per (key, name, terminal): its lexemes and their prefixes (`_name_lexemes`)
        self._name_forms: dict[tuple[str, str, int], tuple[tuple[bytes, ...], tuple[bytes, ...]]]
        self._name_forms = {}
        self._merging = {self._index[n] for n in MERGING_JOINS if n in self._index}
        self._rightward = {self._index[n] for n in RIGHTWARD_JOINS if n in self._index}
        # `*`: a star's reduction is refused where it would read a column the role may not see
        self._stars = {self._index[n] for n in ("STAR", "__ANON_STAR") if n in self._index}
        # FROM: an UPDATE's is refused (its SET values could not be bound before its items)
        updates = "update_stmt" not in missing
        self._from = {self._index[n] for n in ("FROM",) if n in self._index and updates}
        self._opens, self._slots = self._state_events(tables.kernels, tables.production_rhs)
        self._calls = {self._index[n] for n in ALL_CALLS if n in self._index}
        self._aggregate_calls = {self._index[n] for n in AGGREGATE_CALLS if n in self._index}
        # HAVING: only in an aggregate query (SQLite: "HAVING clause on a non-aggregate query")
        self._having = {self._index[n] for n in ("HAVING",) if n in self._index}
        self._call_event = self._call_events(tables.kernels)
        self._refused_calls = {
            event: {self._index[n] for n in names if n in self._index}
            for event, names in CALLS_REFUSED.items()
        }
        self._tables = {self.rules.catalog_key(name): (name, cols) for name, cols in names.tables}
        self._writes = {self.rules.catalog_key(name): name for name in names.writes}
        self._target_slot = Slot(dict(self._writes))
        # an INSERT's rows without a column list write every column: where a writable table
        # has one the role may not see, the keywords that start them may be refused
        hidden = any(not seen for key in self._writes for _, seen in self._tables[key][1])
        starts = ("SELECT", "VALUES", "WITH") if hidden else ()
        self._source_starts = {self._index[n] for n in starts if n in self._index}
        refusable = (
            self._merging
            | self._rightward
            | self._stars
            | self._from
            | self._source_starts
            | self._calls
            | self._having
        )
        slot_bits = sum(1 << t for t in self._restricted | refusable)
        every = (1 << len(self._names)) - 1
        layout = [
            (w := compiled.winner(accept, every)) >= 0 and bool((self._ignored >> w) & 1)
            for accept in self._accept
        ]
        self.slot_scan = SlotScan(
            self._trans, self._live, self._accept, self._start, slot_bits, layout,
            scanner.kernel_table,
        )  # fmt: skip
        self._prefixes: BoundedLRU[frozenset[bytes]] = BoundedLRU(4096, 1 << 30)
        self._unions: BoundedLRU[frozenset[bytes]] = BoundedLRU(1024, 1 << 30)  # of prefixes
        self._table_columns: dict[str, dict[str, Column]] = {}
        self._candidates: BoundedLRU[Slot] = BoundedLRU(4096, 1 << 30)
        self._catalog: Catalog | None = None
        self._scoped: BoundedLRU[Catalog] = BoundedLRU(1024, 1 << 30)  # with CTEs in scope
        self._after: BoundedLRU[tuple] = BoundedLRU(1 << 16, 1 << 30)
        self._shifts: BoundedLRU[tuple] = BoundedLRU(1 << 15, 1 << 30)
        # judges by the terminals live (most scanner states of a step share a few live sets);
        # a judge holds shared prefix sets (`_union`), so many are cheap to keep
        self._judges: BoundedLRU[tuple | object] = BoundedLRU(1 << 16, 1 << 30)
        self._verdicts: BoundedLRU[bool] = BoundedLRU(1 << 15, 1 << 30)
        self._winning: dict[tuple[int, int], bool] = {}  # bounded: scanner states x terminals
        self._paths: dict[tuple[int, int, int], tuple[tuple[bytes, ...], bool]] = {}
        self.initial = GammaState(oracle.initial.stack, None, None, b"")

    def _state_events(
        self, kernels: tuple, rhs: tuple[tuple[str, ...], ...]
    ) -> tuple[dict[int, str], dict[int, str]]:
        """Per LR state reached by a shift: the block event it starts ("select", "from", "on",
        "with", "values", "set", or a clause of `CLAUSE_REACH`), and the name slot it fills
        ("qualifier", "column", "qualified column", "table", "alias", "target", "target
        column", "cte")."""
        opens: dict[int, str] = {}
        slots: dict[int, str] = {}
        starts = {
            "select_core": "select",
            "from_clause": "from",
            "on": "on",
            "with_clause": "with",
            "values_clause": "values",
            **{label: label for label in CLAUSE_REACH},  # their events are their rules' names
        }
        for state, items in enumerate(kernels):
            for production, dot in items:
                label = self._labels[production] if production < len(self._labels) else ""
                if dot == 1 and label in starts:
                    opens[state] = starts[label]
                symbols = rhs[production] if production < len(rhs) else ()
                if label == "column_ref" and dot >= 1:
                    if symbols[dot - 1] == QUALIFIER:
                        slots[state] = "qualifier"
                    elif symbols[dot - 1] == COLUMN_NAME:
                        slots[state] = "qualified column" if dot == 2 else "column"
                if label == "table" and dot == 1 and symbols[0] == TABLE_NAME:
                    slots[state] = "table"
                if label == "table_alias" and dot >= 1 and symbols[dot - 1] == TABLE_ALIAS:
                    slots[state] = "alias"
                if label == "common_table_expr" and dot == 1 and symbols[0] == CTE_NAME:
                    slots[state] = "cte"
                if label in ("subquery_table", "parenthesized_join") and dot == 1:
                    opens[state] = "item paren"
                written = symbols[dot - 1] if dot >= 1 else None
                if label in WRITES and written == TABLE_NAME:
                    slots[state] = "target"
                if label == "update_stmt" and written == "SET":
                    opens[state] = "set"
                origin = self._origins[production] if production < len(self._origins) else ""
                listed = label == "assignment" or "column_name_list" in (label, origin)
                if written == COLUMN_NAME and listed:  # SET's, or INSERT's column list
                    slots[state] = "target column"
        return opens, slots

    def _call_events(self, kernels: tuple) -> dict[int, str]:
        """Per LR state that starts a clause of `CALLS_REFUSED`: its name there."""
        events = {state: e for state, e in self._opens.items() if e in CALLS_REFUSED}
        for state, items in enumerate(kernels):
            for production, dot in items:
                label = self._labels[production] if production < len(self._labels) else ""
                if dot == 1 and label in CALL_RULES:
                    events[state] = CALL_RULES[label]
        return events

    def _refused_call(self, node: StackNode | None, terminal: int, block: Block | None) -> bool:
        """Is the call `terminal` refused on `node` (Γ `block`): by the innermost clause or
        aggregate's arguments the stack is in (`CALLS_REFUSED`), or as an aggregate in the
        ORDER BY of a query that aggregates nothing (SQLite: "misuse of aggregate")?"""
        clause = self._call_clause(node)
        if clause is None:
            return False
        event, below = clause
        if event == "order_by_clause":
            around = self._call_clause(below)
            if around is not None and around[0] == "over_clause":
                event = "over_clause"  # a window's ORDER BY
            elif terminal in self._aggregate_calls and not _aggregating(block):
                return True
        return terminal in self._refused_calls[event]

    def _call_clause(self, node: StackNode | None) -> tuple[str, StackNode | None] | None:
        """The innermost `CALLS_REFUSED` clause on the stack from `node` down, and the stack
        below its start."""
        while node is not None:
            event = self._call_event.get(node.state)
            if event is not None:
                return event, node.parent
            node = node.parent
        return None

    def _outside_aggregates(self, inner: Block | None, below: StackNode) -> bool:
        """Is a column reference reduced on `below` the first of `inner`'s select list outside
        every aggregate call's arguments (and FILTER)? A `max(` whose arguments turn out to be
        two (the scalar max) counts as an aggregate: L_Γ then asks for no GROUP BY."""
        if inner is None or inner.phase is not Phase.COLUMNS or inner.ungrouped is not None:
            return False
        clause = self._call_clause(below)
        return clause is None or clause[0] not in ("arguments", "filter_clause")

    def owes(self, state: GammaState) -> bool:
        """Is the innermost block still in its select list (whose names, some perhaps owed
        only once the pending lexeme ends, the FROM clause will owe)?"""
        inner = innermost(state.block)
        return inner is not None and inner.phase is Phase.COLUMNS

    def closing(self, state: GammaState) -> bool:
        """Is `state` inside a FROM clause that still owes names (its select list's, its ON
        clauses' bare ones), or that holds as many items as a block may (where any token —
        `;`, `)`, WHERE, `(` — may be refused, not only names)? Inside a FROM subquery of such
        a clause too: one token (`));`) can end the subquery and the clause."""
        ending = (*_FROM_PHASES, Phase.COLUMNS) if self._from_optional else _FROM_PHASES
        inner = innermost(state.block)
        while inner is not None:
            if _full(inner) or (inner.obligations and inner.phase in ending):
                return True
            if _ungrouped(inner) and inner.phase in (*ending, Phase.AFTER):
                return True  # any token that ends the block is refused (`_action_for`)
            inner = innermost(inner.outer)
        return False

    def _no_item_paren(self, block: Block | None) -> bool:
        """Is a `(` that opens a FROM item (a subquery, a parenthesized join) refused: where
        the FROM clause holds as many items as a block may, or where the select list owes a
        bare name or a star (whatever the subquery's columns, they could make the name
        ambiguous or be read by the star), or owes qualified names the tables could no longer
        discharge with one item fewer? A subquery item either takes the name of an owed
        qualifier whose columns it has (`_subquery_alias` allows no other owed one) or a name
        nothing owes: `SELECT t.dept FROM (SELECT dept FROM employees) AS t`, `SELECT e.name
        FROM employees AS e JOIN (SELECT …) AS o ON …`."""
        inner = innermost(block)
        if inner is None:
            return False
        if _full(inner):
            return True
        owed = inner.obligations
        if not owed:
            return False
        if owed.bare or owed.stars:
            return True
        # the item, as if it discharged nothing (a plan of no items: all are discharged already)
        own = (*cells(inner.declared), Binding(None, {}))  # type: ignore[misc]
        return plan(owed, own, inner.outer, self.catalog(inner), True) is None

    def _subquery_alias(self, inner: Block, values: Cell | None) -> Slot:
        """A FROM subquery's alias: a name no other item has, and no qualifier the select list
        owes unless the subquery's columns include (visible) every column owed under it."""
        taken = {b.key for b in cells(inner.declared) if b.key}  # type: ignore[union-attr]
        result = _subquery_result(values)
        columns = columns_by_key(result.columns if result else (), self._catalog_key)
        for qualifier, owed in inner.obligations.qualified.items():
            if not all(c in columns and columns[c].visible for c in owed):
                taken.add(qualifier)
        return Slot({}, frozenset(taken))

    # -- reading lexemes
    def advance(self, state: GammaState, data: bytes, after: Configuration) -> GammaState | None:
        """Γ after `data` (bytes the oracle took from `state`'s configuration to `after`), or
        None if they leave L_Γ."""
        found = self._read(state, data, after)
        return found if isinstance(found, GammaState) else None

    def admits(self, state: GammaState, data: bytes, after: Configuration) -> bool:
        """Does `advance` find Γ after `data`? Memoized by Γ's content (`content_key`) and the
        pending bytes: a mask's tokens of several lexemes, met again at equal states."""
        key = (state.node, *content_key(state), state.pending, data, after)
        return self._verdicts.memo(key, lambda: self.advance(state, data, after) is not None)

    def ends(self, state: GammaState, cfg: Configuration) -> bool:
        """May the output stop here (the oracle says it may): do the last lexeme and the
        reductions at the end keep every name bound (the FROM clauses close)?"""
        finished = Configuration(cfg.stack, self._start, 0, -1, b"")
        read = self._read(state, b"", finished)
        if not isinstance(read, GammaState):
            return False
        try:
            return self._reduce_for(read, self._nonterminal_base - 1) is not None  # $END
        except _Refused:
            return False

    def _reduce_for(
        self, state: GammaState, terminal: int
    ) -> tuple[StackNode, Cell | None, Block | None, int] | None:
        """The reduce chain `terminal` causes as the lookahead at `state`'s boundary, with the
        semantic actions: (stack, values, Γ, the move it then makes: a shift's state, or
        ACCEPT); None if the tables have no move for it; `_Refused` if Γ refuses a reduction."""
        node, values, block = state.node, state.values, state.block
        while True:
            move = self._action[node.state].get(terminal)
            if move is None:
                return None
            if move >= 0 or move == ACCEPT:
                return node, values, block, move
            node, values, block = self._reduce(node, values, block, -1 - move)

    def _read(self, state: GammaState, data: bytes, after: Configuration) -> GammaState | Failure:
        text = state.pending + data
        cut = len(text) - after.lexeme_length
        position = 0
        node, values, block, digest = state.node, state.values, state.block, state.digest
        while position < cut:
            _, _, length, accept_state = self._run(self._start, text[position:])
            allowed = self.oracle.lr.allowed_mask(node) | self._ignored
            terminal = self.oracle.winner_in(accept_state, allowed)
            end = position + length
            if not (self._ignored >> terminal) & 1:
                before = GammaState(node, values, block, text[position:end], digest)
                shifted = self._shift(before, terminal, text[position:end])
                if shifted is None:
                    return Failure(position, terminal, before)
                node, values, block, digest = shifted
            position = end
        nxt = GammaState(node, values, block, text[cut:], digest)
        return nxt if self._pending_ok(nxt, after) else Failure(cut, -1, nxt)

    def _shift(
        self, state: GammaState, terminal: int, lexeme: bytes
    ) -> tuple[StackNode, Cell | None, Block | None, bytes] | None:
        """Reduce, check the lexeme at its slot, shift; None if Γ refuses it. A shift from
        one Γ (`content_key`) is computed once: the tokens of a mask that share their first
        lexemes, the candidates of a question, the same predicate at another position."""
        key = (state.node, *content_key(state), terminal, lexeme)
        found = self._shifts.memo(key, lambda: (self._shift_now(state, terminal, lexeme),))[0]
        if found is None:
            return None
        chained = hashlib.blake2b(
            state.digest + terminal.to_bytes(4, "little") + lexeme, digest_size=16
        ).digest()
        return (*found, chained)

    def _shift_now(
        self, state: GammaState, terminal: int, lexeme: bytes
    ) -> tuple[StackNode, Cell | None, Block | None] | None:
        try:
            found = self._reduce_for(state, terminal)
        except _Refused:
            return None
        if found is None:
            raise RuntimeError("the binder disagrees with the oracle; please report it")
        node, values, block, move = found
        text = lexeme.decode("utf-8", "surrogateescape")
        slot_kind = self._slots.get(move)
        if terminal in self._restricted:
            slot = self._slot(slot_kind, block, values)
            key = self._key(text, self._names[terminal])
            if slot is not None and not slot.allows(key):
                return None
            if slot is None and not self._is_word(terminal, key):
                return None  # a declared name where Γ does not judge names: not the role's
            block = self._oblige(slot_kind, block, values, key)
            if slot_kind == "target":
                block = self._target(block, key)
            if slot_kind == "cte":  # its body follows (`Block.defining`)
                block = replace(block, defining=key)  # type: ignore[arg-type]
        block = self._admitted(node, move, terminal, block, values)
        if block is _REFUSED:
            return None
        kept = text if self._names[terminal] in NAMED else ""
        pushed, values, block = self._pushed(node, move, terminal, kept, block, values)
        if terminal not in self._restricted and not self._alive(pushed, values, block):
            return None  # nothing could follow it: a dead end
        return pushed, _shaped(values), block

    def _admitted(
        self, node: StackNode, move: int, terminal: int, block: Block | None, values: Cell | None
    ) -> Block | object | None:
        """Γ's refusals of a shift to `move` that are not a name's — a NATURAL / USING join in
        FROM, an aggregate or window call where SQLite refuses it (`CALLS_REFUSED`), a clause
        `_refused_event` refuses, a parenthesized join inside another: _REFUSED,
        else Γ as `_joined` leaves it (what `_shift` and `_slot_if` both apply)."""
        if terminal in self._merging and self._in_from(block):
            return _REFUSED
        if terminal in self._rightward and self._owes_a_later_item(block):
            return _REFUSED
        if terminal in self._calls and self._refused_call(node, terminal, block):
            return _REFUSED
        if terminal in self._having and (not _aggregating(block) or _ungrouped(block)):
            return _REFUSED  # HAVING without GROUP BY could not be followed by one
        if self._refused_event(self._opens.get(move), block, values):
            return _REFUSED
        return self._joined(node, move, block)

    def _pushed(
        self,
        node: StackNode,
        move: int,
        terminal: int,
        text: str,
        block: Block | None,
        values: Cell | None,
    ) -> tuple[StackNode, Cell, Block | None]:
        """The stack, the values and Γ once `terminal` (kept as `text`) is shifted to `move`,
        the clause it starts opened."""
        pushed = node.push(move, terminal, self._weights[move])
        values = Cell(Token(self._names[terminal], text), values)
        inner = innermost(block) if terminal in self._aggregate_calls else None
        if inner is not None and inner.phase is Phase.COLUMNS and not inner.aggregates:
            # an aggregate in the select list: an aggregate query
            block = _replace_inner(block, replace(inner, aggregates=True))
        event = self._opens.get(move)
        if event is not None and event != "item paren":
            block = self._open(event, block, node, values)
        return pushed, values, block

    def _target(self, block: Block | None, key: str) -> Block:
        """Γ once a write's target table is named: a block whose one binding it is."""
        binding = Binding(key, self._columns_of(self._writes[key], None))
        return Block(Phase.TARGET, block, bindings=(binding,), target=binding)

    def _oblige(self, slot: str | None, block: Block | None, values: Cell | None, key: str):
        """Γ after a column reference in a select list (before its FROM), or a bare one in ON
        (bound against the whole FROM list): one more obligation."""
        inner = innermost(block)
        if inner is None or not _obliges(inner, slot):
            return block
        qualifier = self._qualifier_before(values) if slot == "qualified column" else None
        grown = inner.obligations.with_column(qualifier, key)
        # a bare name in ON that no item before it has: a later item will (`forward`)
        ahead = inner.phase is Phase.ON and not any(
            key in b.columns for b in inner.visible_bindings()
        )
        return _replace_inner(
            block, replace(inner, obligations=grown, forward=inner.forward or ahead)
        )

    def _qualifier_before(self, values: Cell | None) -> str | None:
        token = _last_token(values, QUALIFIER)
        return None if token is None else self._key(token.text, QUALIFIER)

    def _key(self, written: str, terminal: str) -> str:
        if terminal == QUALIFIER:
            written = written[:-1]
        name, quoted = self.rules.unquote(written)
        return self.rules.key(name, quoted)

    def _slot(self, slot: str | None, block: Block | None, values: Cell | None) -> Slot | None:
        """What Γ allows at a name slot of kind `slot` (None: a slot Γ does not judge)."""
        if slot is None:
            return None
        inner = innermost(block)
        qualifier = self._qualifier_before(values) if slot == "qualified column" else None
        if slot == "qualified column" and qualifier is None:
            return None
        if slot == "target":  # a write's: the tables the role may write (never a CTE)
            return self._target_slot
        if slot == "cte":
            return self._candidates.memo((block, slot), lambda: self._cte_slot(block))
        if slot == "target column":  # INSERT's column list, UPDATE's SET: the target's
            if inner is None or inner.target is None:
                return None  # USING lists
            target = inner.target
            return self._candidates.memo(
                ("target column", SameObject(target)), lambda: Slot(_visible_names(target))
            )
        table = None
        if slot in ("table", "alias"):
            if inner is None or inner.phase is not Phase.FROM:
                return None  # a write target's alias: any name
            if slot == "alias":
                table = self._aliased_table(values)
                if table is None:  # a subquery's alias
                    return self._subquery_alias(inner, values)
        elif inner is not None and inner.phase is Phase.FROM:
            return None  # USING lists; derived tables have blocks of their own

        def build() -> Slot:
            if inner is not None and inner.phase is Phase.COLUMNS and slot == "qualifier":
                return self._obliging_qualifier(inner)
            if inner is not None and _obliges(inner, slot):
                return self._obliging_slot(inner, slot, qualifier)  # type: ignore[arg-type]
            if slot == "table":
                return self._table_slot(inner, block)  # type: ignore[arg-type]
            if slot == "alias":
                return self._alias_slot(inner, table)  # type: ignore[arg-type]
            if slot == "qualifier":  # one whose columns the grammar can spell after it
                return Slot({q: q for q in qualifiers(block) if self._spelled_after(block, q)})
            if slot == "column":
                return Slot(bare_columns(block))
            return Slot(qualified_columns(block, qualifier))  # type: ignore[arg-type]

        return self._candidates.memo((block, slot, qualifier, table), build)

    def _spelled_after(self, block: Block | None, qualifier: str) -> bool:
        """Can some column `qualifier` reaches be written as a COLUMN_NAME? A derived table's
        or CTE's column named by an alias is no lexicon word, and only a language that spells
        declared names spells it: elsewhere a qualifier that reaches only such columns would
        be a dead end (`FROM (SELECT id AS n FROM t) AS c WHERE c.`)."""
        column = self._index.get(COLUMN_NAME)
        names = qualified_columns(block, qualifier)
        return column is None or next(self._lexemes(names, column), None) is not None

    def catalog(self, block: Block | None = None) -> Catalog:
        """The tables a FROM clause at `block` may add, for the obligations' search: the
        schema's (built once) and, where the language spells declared names, the CTEs in
        scope (a CTE shadows a table of its name, as in SQLite)."""
        if self._catalog is None:
            alias = self._index.get(TABLE_ALIAS)
            tables = {key: self._columns_of(name, None) for key, (name, _) in self._tables.items()}
            self._catalog = Catalog(
                tables,
                self._joins,
                self._aliases and alias is not None,
                lambda name: alias is not None and self._reads_as(name.encode(), alias),
            )
        base, ctes, defining = self._catalog, self._ctes_in_scope(block), _defining(block)
        if not ctes and not defining:
            return base
        key = (tuple((k, SameObject(columns)) for k, columns in ctes.items()), defining)
        tables = {k: t for k, t in {**base.tables, **ctes}.items() if k not in defining}
        return self._scoped.memo(key, lambda: replace(base, tables=tables))

    def _ctes_in_scope(self, block: Block | None) -> dict[str, dict[str, Column]]:
        """Key -> columns of each CTE a FROM item at `block` may name (the innermost of a
        name): every CTE where the language spells declared names, else those named as a
        table is (the name a FROM item writes then reads the CTE, which shadows the table)."""
        found: dict[str, dict[str, Column]] = {}
        spelled = self._index.get(TABLE_NAME) in self._widened
        scope = block
        while scope is not None:
            for cte_key, columns in cells(scope.ctes):  # type: ignore[misc]
                if spelled or cte_key in self._tables:
                    found.setdefault(cte_key, columns)
            scope = scope.outer
        return found

    def _obliging_slot(self, inner: Block, slot: str, qualifier: str | None) -> Slot:
        """A column in a select list, or a bare one in ON: the names that keep the
        obligations dischargeable."""
        catalog = self.catalog(inner)
        if qualifier is None and inner.on_left:  # `Block.on_left`: an item it sees has it
            seen = inner.visible_bindings()
            candidates = {k: c.name for b in seen for k, c in b.columns.items() if c.visible}
        elif qualifier is None:
            candidates = {
                k: c.name for t in catalog.tables.values() for k, c in t.items() if c.visible
            }
            candidates.update(bare_columns(inner.outer))
        else:
            candidates = {
                k: c.name
                for key in catalog.named(qualifier, frozenset())
                for k, c in catalog.tables[key].items()
                if c.visible
            }
            candidates.update(qualified_columns(inner.outer, qualifier))
        keeps = self._keeps_dischargeable(inner, catalog)
        return Slot({key: name for key, name in candidates.items() if keeps(qualifier, key)})

    def _keeps_dischargeable(
        self, inner: Block, catalog: Catalog
    ) -> Callable[[str | None, str | None], bool]:
        """Whether the block's obligations with one more reference, `qualifier.column` (a
        bare column: qualifier None; `qualifier.` alone: column None), stay dischargeable.
        The plan that discharges them so far is found once: one more reference most often
        needs at most one more table (`witnessed`), and only the rest a search of its own."""
        own = tuple(cells(inner.declared))  # type: ignore[arg-type]
        base = plan(inner.obligations, own, inner.outer, catalog, True)
        items = (
            None
            if base is None
            else (*own, *(Binding(name, dict(catalog.tables[t])) for t, name in base))
        )

        def keeps(qualifier: str | None, column: str | None) -> bool:
            grown = inner.obligations.with_column(qualifier, column)
            if items is not None and witnessed(
                grown, items, inner.outer, catalog, qualifier, column
            ):
                return True
            return plan(grown, own, inner.outer, catalog, True) is not None

        return keeps

    def _obliging_qualifier(self, inner: Block) -> Slot:
        """A qualifier in a select list: one that some FROM item can still be named after
        (with the obligations so far kept dischargeable) — `q.*` needs no more."""
        catalog = self.catalog(inner)
        known = set(inner.obligations.qualified) | set(catalog.tables)
        keeps = self._keeps_dischargeable(inner, catalog)

        def fine(qualifier: str) -> bool:
            return keeps(qualifier, None)

        names = {q: q for q in known if fine(q)}
        probe = next((a for a in FRESH_ALIASES if a not in known and catalog.alias_name(a)), None)
        if probe is None or not fine(probe):
            return Slot(names)
        return Slot(names, frozenset(known), catalog.alias_name)

    def _table_slot(self, inner: Block, block: Block | None) -> Slot:
        """A FROM item's table: those under some name (its own, an obligation's qualifier, a
        fresh alias) no other item of the FROM clause has, that keep the obligations
        dischargeable."""
        catalog = self.catalog(inner)
        own = tuple(cells(inner.declared))  # type: ignore[arg-type]
        allowed: dict[str, str] = {}
        if _full(inner):
            return Slot(allowed)
        for key, written in self._tables_in_scope(block).items():
            columns = self._columns_of(written, block)
            for name in self._names_for(inner, key):
                binding = Binding(name, dict(columns))
                if plan(inner.obligations, (*own, binding), inner.outer, catalog, True) is not None:
                    allowed[key] = written
                    break
        return Slot(allowed)

    def _tables_in_scope(self, block: Block | None) -> dict[str, str]:
        """Key -> spelling of what a FROM item may name at `block`: the tables the role sees
        and the CTEs in scope (`_ctes_in_scope`), but no CTE whose body this is (`_defining`)."""
        found = {key: written for key, (written, _) in self._tables.items()}
        for cte_key in self._ctes_in_scope(block):
            found.setdefault(cte_key, cte_key)
        for key in _defining(block):
            found.pop(key, None)
        return found

    def _cte_slot(self, block: Block | None) -> Slot:
        """A CTE's name: any but one of its WITH's, and after the WITH's first CTE, none that
        a FROM item could already name — SQLite lets every body read every CTE of its WITH,
        so an earlier body that named a table would read the later CTE instead."""
        if block is None or block.ctes is None:
            return Slot({}, frozenset())
        taken = {key for key, _ in cells(block.ctes)}  # type: ignore[misc]
        return Slot({}, frozenset(taken | set(self._tables_in_scope(block))))

    def _names_for(self, inner: Block, table: str) -> list[str | None]:
        """Names an item of `table` could take: its own, each obligation's qualifier, a fresh
        alias (None)."""
        taken = {b.key for b in cells(inner.declared)}  # type: ignore[union-attr]
        names: list[str | None] = [table] if table not in taken else []
        if self.catalog(inner).aliases:
            names += [
                q
                for q in inner.obligations.qualified
                if q not in taken and self.catalog(inner).may_name(table, q)
            ]
            names.append(None)
        return names

    def _alias_slot(self, inner: Block, table: str) -> Slot:
        """A FROM item's alias: an obligation's qualifier, or a fresh name, where the item under
        that name keeps the obligations dischargeable."""
        catalog = self.catalog(inner)
        own = tuple(cells(inner.declared))  # type: ignore[arg-type]
        columns = dict(catalog.tables.get(table, {}))

        def fine(name: str | None) -> bool:
            binding = Binding(name, columns)
            return plan(inner.obligations, (*own, binding), inner.outer, catalog, True) is not None

        taken = frozenset(inner.obligations.qualified) | {b.key for b in own if b.key}
        declared = {b.key for b in own}
        named = {
            q: q
            for q in inner.obligations.qualified
            if q not in declared and catalog.alias_name(q) and fine(q)
        }
        return Slot(named, taken if fine(None) else None)

    def _aliased_table(self, values: Cell | None) -> str | None:
        """The table whose alias is being written (the TABLE_NAME before `[AS] alias`)."""
        cell = values
        for _ in range(2):
            if cell is None:
                return None
            head = cell.head
            if isinstance(head, Token) and head.terminal == TABLE_NAME:
                return self._key(head.text, TABLE_NAME)
            cell = cell.tail
        return None

    # -- Γ's updates
    def _open(
        self, event: str, block: Block | None, below: StackNode, values: Cell
    ) -> Block | None:
        inner = innermost(block)
        if event == "select":
            return Block(Phase.COLUMNS, block)
        if event == "with":
            return Block(Phase.WITH, block, depth=below.depth)
        if event == "values":
            return Block(Phase.NO_NAMES, block)
        reach = CLAUSE_REACH.get(event)  # the clauses whose reach SQLite's rules set
        if inner is not None and inner.target is not None and event in WRITE_CLAUSES:
            # a write's target: under its alias, and under its table name only for RETURNING
            bindings = (inner.target,) if reach is Reach.TARGET else inner.bindings
            return _replace_inner(block, replace(inner, phase=Phase.AFTER, bindings=bindings))
        if reach is Reach.NONE:
            return Block(Phase.NO_NAMES, block)
        if reach is Reach.ENCLOSING:  # HAVING: the block GROUP BY narrowed reaches out again
            return block.outer if block is not None and block.local else block
        if reach is Reach.OWN:
            return self._own(event, inner, block, values)
        if inner is None or inner.phase not in (Phase.COLUMNS, Phase.FROM):
            return block  # ON outside a SELECT block
        if event == "from" and inner.phase is Phase.COLUMNS:
            aliases = frozenset(
                item.alias
                for item in cells(inner.items)
                if item.alias is not None  # type: ignore[union-attr]
            )
            return _replace_inner(block, replace(inner, phase=Phase.FROM, aliases=aliases))
        if event == "on" and inner.phase is Phase.FROM:
            # the values end with the join's operator, its right-hand item and the ON
            operator = values.tail.tail.head if values.tail and values.tail.tail else None
            left = operator is _OUTER_JOIN or inner.join_base is not None or inner.right_joined
            return _replace_inner(block, replace(inner, phase=Phase.ON, on_left=left))
        return block

    def _own(
        self, event: str, inner: Block | None, block: Block | None, values: Cell
    ) -> Block | None:
        """Γ as a GROUP BY or ORDER BY opens (`Reach.OWN`): its query's names only — a
        compound's ORDER BY its result's names; a window's ORDER BY is no query's clause."""
        if event == "group_by_clause":
            if inner is None or inner.phase is not Phase.AFTER:
                return block
            core = replace(inner, aggregates=True, ungrouped=None)  # an aggregate query
            return _own_names(core, _replace_inner(block, core))
        result = _nearest_result(values)
        if result is None:  # a window's ORDER BY: names as in the block around it
            return Block(Phase.WITH, block, depth=-1)
        if result.core is None:
            columns = columns_by_key(result.columns, self._catalog_key)
            return Block(Phase.RESULT, block, result=columns, local=True)
        return _own_names(result.core, block)

    def _reduce(
        self,
        node: StackNode,
        values: Cell | None,
        block: Block | None,
        production: int,
    ) -> tuple[StackNode, Cell | None, Block | None]:
        """One reduction with its semantic action (`_Refused` if Γ refuses it)."""
        length = self._lengths[production]
        children: list[object] = []
        for _ in range(length):
            children.append(values.head)  # type: ignore[union-attr]
            values = values.tail  # type: ignore[union-attr]
            node = node.parent  # type: ignore[assignment]
        children.reverse()
        value, block = self._action_for(self._labels[production], children, block, node)
        goto = self._goto[node.state][self._lhs[production]]
        return (
            node.push(goto, self._nonterminal_base + self._lhs[production], self._weights[goto]),
            Cell(value, values),
            block,
        )

    def _action_for(
        self,
        label: str,
        children: list[object],
        block: Block | None,
        below: StackNode,
    ) -> tuple[object, Block | None]:
        """The semantic value of a reduction, and Γ after it."""
        inner = innermost(block)
        bound = inner is not None and bool(inner.obligations)
        if label == "column_ref":
            name = _token(children, COLUMN_NAME)
            if self._outside_aggregates(inner, below):
                written = (_token(children, QUALIFIER) or "") + (name or "")
                block = _replace_inner(block, replace(inner, ungrouped=written))  # type: ignore[arg-type]
            return _ColumnRef(name), block
        if label in ("aggregate_arguments", "distinct_argument"):
            return _AGGREGATE, block
        if label == "over_clause":
            return _WINDOW, block
        if label == "function_call" and _called(children, _AGGREGATE, not_with=_WINDOW):
            if inner is not None and inner.phase is Phase.COLUMNS and not inner.tallies:
                block = _replace_inner(block, replace(inner, tallies=True))
            return None, block
        if label == "expr_column" and inner is not None and inner.phase is Phase.COLUMNS:
            alias = _token(children, COLUMN_ALIAS)
            first = children[0] if children else None
            name = alias or (first.name if isinstance(first, _ColumnRef) else None)
            key = self._key(alias, COLUMN_ALIAS) if alias else None
            item = ResultItem(self._unquoted(name) if name else None, key)
            return None, _replace_inner(block, replace(inner, items=Cell(item, inner.items)))
        if label in ("all_columns", "table_all_columns") and inner is not None:
            qualifier = _token(children, QUALIFIER)
            key = self._key(qualifier, QUALIFIER) if qualifier else None
            item = ResultItem(None, None, True, key)
            obligations = inner.obligations
            if inner.target is not None and not _all_visible(inner.target):
                raise _Refused  # RETURNING *: it reads every column of the target
            ungrouped = inner.ungrouped
            if inner.phase is Phase.COLUMNS:
                # `*` / `q.*`: q in this FROM, and every column the star reads visible
                obligations = obligations.with_star(key)
                own = tuple(cells(inner.declared))  # type: ignore[arg-type]
                if plan(obligations, own, inner.outer, self.catalog(inner), True) is None:
                    raise _Refused
                ungrouped = "''" if ungrouped is None else ungrouped  # GROUP BY '': one group
            grown = replace(
                inner, items=Cell(item, inner.items), obligations=obligations, ungrouped=ungrouped
            )
            return None, _replace_inner(block, grown)
        if label == "table_alias":
            alias = _token(children, TABLE_ALIAS)
            if inner is not None and inner.phase is Phase.TARGET and alias is not None:
                renamed = Binding(self._key(alias, TABLE_ALIAS), inner.target.columns)  # type: ignore[union-attr]
                block = _replace_inner(block, replace(inner, bindings=(renamed,)))
            return _Alias(alias), block
        if label == "table" and inner is not None and inner.phase is Phase.FROM:
            name = _token(children, TABLE_NAME) or ""
            alias = next((c.text for c in children if isinstance(c, _Alias)), None)
            binding = Binding(self._key(alias or name, TABLE_NAME), self._columns_of(name, block))
            if any(b.key == binding.key for b in cells(inner.declared)):  # type: ignore[union-attr]
                raise _Refused  # two FROM items of one name: every reference to it is ambiguous
            if bound:
                own = (*cells(inner.declared), binding)  # type: ignore[misc]
                if plan(inner.obligations, own, inner.outer, self.catalog(inner), True) is None:
                    raise _Refused  # under this name the item leaves an obligation undischarged
            return None, _declare(block, inner, binding)
        if label == "subquery_table" and inner is not None and inner.phase is Phase.FROM:
            result = next((c for c in children if isinstance(c, _Result)), None)
            alias = next((c.text for c in children if isinstance(c, _Alias)), None)
            columns = columns_by_key(result.columns if result else (), self._catalog_key)
            binding = Binding(self._key(alias, TABLE_NAME) if alias else None, columns)
            declared = {b.key for b in cells(inner.declared)}  # type: ignore[union-attr]
            if binding.key is not None and binding.key in declared:
                raise _Refused  # two FROM items of one name
            return None, _declare(block, inner, binding)
        if label == "parenthesized_join" and inner is not None and inner.in_join:
            if inner.join_base is not None and inner.declared.tail is inner.join_base:  # type: ignore[union-attr]
                # one item in the parentheses of a later FROM item: SQLite drops its alias
                # (`a, (b AS t)` declares b, not t), so L_Γ has none
                raise _Refused
            closed = replace(inner, in_join=False, join_base=None)  # `_joined`
            return None, _replace_inner(block, closed)
        if label == "on" and inner is not None and inner.phase is Phase.ON:
            return None, _replace_inner(block, replace(inner, phase=Phase.FROM, on_left=False))
        if label in _OUTER_JOINS:
            if label != "left" and inner is not None and inner.phase is Phase.FROM:
                block = _replace_inner(block, replace(inner, right_joined=True))
            return _OUTER_JOIN, block
        if label == "join_operator" and _OUTER_JOIN in children:
            return _OUTER_JOIN, block
        if label == "from_clause" and inner is not None and inner.phase is Phase.FROM:
            bindings = tuple(reversed(list(cells(inner.declared))))
            if bound and not discharged(inner.obligations, bindings, inner.outer):  # type: ignore[arg-type]
                raise _Refused  # the FROM clause may not end before its obligations are met
            done = replace(inner, phase=Phase.AFTER, bindings=bindings, declared=None)
            return None, _replace_inner(block, done)  # type: ignore[arg-type]
        if label == "select_core" and bound and inner.phase is Phase.COLUMNS:  # type: ignore[union-attr]
            raise _Refused  # a select list that names columns and no FROM clause
        if label == "select_core" and inner is not None and inner.phase in _CORE_PHASES:
            if _ungrouped(inner):
                raise _Refused  # an aggregate beside a column, and no GROUP BY
            items = list(reversed(list(cells(inner.items))))
            columns = expand_result(items, inner.bindings)  # type: ignore[arg-type]
            return _Result(columns, inner), _pop_inner(block)
        if label == "compound":
            first = next((c for c in children if isinstance(c, _Result)), None)
            return _Result(first.columns if first else (), None), block
        if label == "select_stmt":
            result = next((c for c in children if isinstance(c, _Result)), None)
            if block is not None and block.phase is Phase.WITH and block.depth == below.depth:
                block = block.outer
            return result, block
        if label in ("order_by_clause", "limit_clause", "values_clause") and block is not None:
            return None, block.outer  # the block its keyword opened
        if label == "group_by_clause" and block is not None and block.local:
            return None, block.outer  # GROUP BY's, where no HAVING closed it
        if label == "cte_column_list" or label in self._column_list_helpers:
            names: list[str] = []
            for child in children:  # the first name, and the helper's value for the rest
                if isinstance(child, Token) and child.terminal == COLUMN_ALIAS:
                    names.append(child.text)
                elif isinstance(child, _Names):
                    names.extend(child.names)
            return _Names(tuple(names)), block
        if label == "common_table_expr" and block is not None and block.phase is Phase.WITH:
            name = _token(children, CTE_NAME) or ""
            listed = next((c for c in children if isinstance(c, _Names)), None)
            result = next((c for c in children if isinstance(c, _Result)), None)
            if listed is not None:
                columns = tuple(Column(self._unquoted(n), True) for n in listed.names)
            else:
                columns = result.columns if result else ()
            cte = (self._key(name, CTE_NAME), columns_by_key(columns, self._catalog_key))
            return None, replace(block, ctes=Cell(cte, block.ctes), defining=None)
        if len(children) == 1 and isinstance(children[0], _ColumnRef | _Result):
            return children[0], block  # unit rules pass a column reference or a result up
        if label in ("collate", "primary") and len(children) > 1:
            # SQLite names a result column past COLLATE and parentheses: `(t.x) COLLATE c` is x
            inner_value = children[0] if label == "collate" else children[1]
            if isinstance(inner_value, _ColumnRef):
                return inner_value, block
        return None, block

    def _columns_of(self, written: str, block: Block | None) -> dict[str, Column]:
        """A table reference's columns: a CTE in scope of that name, else the schema's table
        (each column visible or not to the role); unknown: none."""
        key = self._key(written, TABLE_NAME)
        scope = block
        while scope is not None:
            for cte_key, columns in cells(scope.ctes):  # type: ignore[misc]
                if cte_key == key:
                    return columns
            scope = scope.outer
        found = self._table_columns.get(key)
        if found is None:
            _, columns = self._tables.get(key, ("", ()))
            found = {self._catalog_key(c): Column(c, visible) for c, visible in columns}
            self._table_columns[key] = found
        return found

    def _catalog_key(self, name: str) -> str:
        return self.rules.catalog_key(name)

    def _unquoted(self, written: str) -> str:
        return self.rules.unquote(written)[0]

    # -- the pending lexeme
    def _pending_ok(self, state: GammaState, cfg: Configuration) -> bool:
        """Can the pending lexeme still become a lexeme Γ allows (or one it does not judge)?"""
        if not state.pending:
            return True
        return self.pending_verdict(state, cfg.scan_state, state.pending)

    def pending_verdict(self, state: GammaState, scan_state: int, pending: bytes) -> bool:
        """Can a lexeme `pending` (at `scan_state`) written at `state`'s boundary still become
        a lexeme Γ allows, or one of a terminal Γ does not judge there?"""
        judge = self.pending_judge(state, scan_state)
        return judge is None or judge((pending,))[0]

    def pending_judge(
        self, state: GammaState, scan_state: int
    ) -> Callable[[Sequence[bytes]], list[bool]] | None:
        """`pending_verdict` at `scan_state` and `state`'s boundary, for many pending lexemes:
        None when Γ allows every one of them (a terminal it does not judge is live), else a
        function from the pending lexemes to their verdicts — what the live terminals' slots
        allow is found once per Γ (`content_key`, as in `_shift`) and set of live
        terminals, so a lexeme costs a few set lookups. A judge is a function of the
        terminals live, unless a fresh alias may start (its extensions are walked from the
        scanner state itself): such a judge is kept per scanner state."""
        return self.pending_judges(state, (scan_state,))[0]

    def pending_judges(
        self, state: GammaState, scan_states: Sequence[int]
    ) -> list[Callable[[Sequence[bytes]], list[bool]] | None]:
        """`pending_judge` at each of `scan_states`, at one boundary (a mask's groups). The
        states of one live set share a judge (found once per call), unless it is kept per
        scanner state."""
        allowed = self.oracle.lr.allowed_mask(state.node) | self._ignored
        head = (state.node, *content_key(state))
        judges, live_of = self._judges, self._live
        shared: dict[int, Callable[[Sequence[bytes]], list[bool]] | None] = {}
        out = []
        for scan_state in scan_states:
            live = live_of[scan_state] & allowed
            if live in shared:
                out.append(shared[live])
                continue
            key = (*head, live)
            found = judges.get(key)
            per_state = found is _PER_SCAN_STATE
            if per_state:
                found = judges.get((*key, scan_state))
            if found is not None:
                judge = found[0]  # type: ignore[index]
            else:
                judge = self._judge_of_live(state, scan_state, allowed, live)
                per_state = isinstance(judge, PrefixJudge) and judge.fresh is not None
                if per_state:
                    judges.setdefault(key, _PER_SCAN_STATE, 0)
                    key = (*key, scan_state)
                judges.setdefault(key, (judge,), 0)
            if not per_state:
                shared[live] = judge
            out.append(judge)
        return out

    def _judge_of_live(
        self, state: GammaState, scan_state: int, allowed: int, live: int
    ) -> Callable[[Sequence[bytes]], list[bool]] | None:
        if not live:  # rule (ii): only an emission at the last accept can continue
            return lambda pendings: [not p or self._cut_back(state, p, allowed) for p in pendings]
        prefix_sets: list[frozenset[bytes]] = []
        fresh: list[tuple[int, Slot]] = []
        for terminal in _bits(live):
            if (self._ignored >> terminal) & 1:
                return None
            at = self._slot_after(state, terminal)
            if at is None:
                continue  # Γ refuses the reductions this terminal would make
            slot, prefixes = at
            if slot is None and terminal in self._widened:
                prefix_sets.append(self._word_prefixes(terminal))
                continue
            if terminal not in self._restricted or slot is None:
                return None  # a lexeme Γ does not judge here
            prefix_sets.append(prefixes)
            if slot.fresh is not None:
                fresh.append((terminal, slot))

        def fresh_start(pending: bytes) -> bool:
            return any(
                self._fresh_extension(pending, scan_state, terminal, slot)
                for terminal, slot in fresh
            )

        return PrefixJudge(
            self._union(prefix_sets), self.rules.case_insensitive, fresh_start if fresh else None
        )

    def _union(self, prefix_sets: list[frozenset[bytes]]) -> frozenset[bytes]:
        """The union of `prefix_sets` (the `_prefixes` memo's sets), one object per
        combination: the judges of many states share it rather than each holding a copy of a
        large catalog's prefixes."""
        if len(prefix_sets) == 1:
            return prefix_sets[0]
        key = tuple(SameObject(p) for p in prefix_sets)
        return self._unions.memo(key, lambda: frozenset().union(*prefix_sets))

    def _cut_back(self, state: GammaState, pending: bytes, allowed: int) -> bool:
        """Rule (ii): the pending bytes can only go on as the lexeme up to their last accept
        (the oracle found a byte that ends it there) and the bytes after it, rescanned: does Γ
        allow that lexeme, and then what the rest can become?"""
        _, _, length, accept_state = self._run(self._start, pending)
        if length <= 0:
            return True
        terminal = self.oracle.winner_in(accept_state, allowed)
        if terminal < 0 or (self._ignored >> terminal) & 1:
            after = state
        else:
            shifted = self._shift(state, terminal, pending[:length])
            if shifted is None:
                return False
            node, values, block, digest = shifted
            after = GammaState(node, values, block, b"", digest)
        rest = pending[length:]
        return self.pending_verdict(after, self._run(self._start, rest)[0], rest)

    def after_pending(self, state: GammaState, cfg: Configuration) -> GammaState | None:
        """Γ once the pending lexeme of `cfg` (no bytes after its last accept) has ended there,
        as the next byte that cannot extend it ends it; None if Γ refuses that lexeme."""
        if not state.pending:
            return state
        allowed = self.oracle.lr.allowed_mask(state.node) | self._ignored
        terminal = self.oracle.winner_in(cfg.accept_state, allowed)
        if terminal < 0:
            return None
        if (self._ignored >> terminal) & 1:
            return state._replace(pending=b"")
        shifted = self._shift(state, terminal, state.pending)
        if shifted is None:
            return None
        node, values, block, digest = shifted
        return GammaState(node, values, block, b"", digest)

    def _slot_after(
        self, state: GammaState, terminal: int
    ) -> tuple[Slot | None, frozenset[bytes]] | None:
        """If `terminal` came next at `state`'s boundary: what Γ allows there (None: not
        judged) and every prefix of every lexeme of it that Γ allows (case folded where the
        dialect ignores case). None if the reductions it causes are refused."""
        memo_key = (state.node, *content_key(state), terminal)
        slot = self._after.memo(memo_key, lambda: (self._slot_if(state, terminal),))[0]
        if slot is None or slot is _REFUSED:
            return None if slot is _REFUSED else (None, frozenset())

        return slot, self._prefixes.memo(
            (SameObject(slot), terminal), lambda: self._prefix_set(slot.names, terminal)
        )

    def _prefix_set(self, names: dict[str, str], terminal: int) -> frozenset[bytes]:
        """Every prefix of every lexeme of `terminal` that spells one of `names` (case folded
        where the dialect ignores case). A slot of every table, or of every column, the role
        sees (a select list's first column over a catalog of thousands) shares the role's
        words' set rather than building its own."""
        if self._names[terminal] in (TABLE_NAME, COLUMN_NAME) and names == self._word_names(
            terminal
        ):
            return self._word_prefixes(terminal)
        return self._spelled_prefixes(names, terminal)

    def _spelled_prefixes(self, names: dict[str, str], terminal: int) -> frozenset[bytes]:
        out: set[bytes] = set()
        for key, name in names.items():
            out.update(self._name_lexemes(key, name, terminal)[1])
        return frozenset(out)

    def _word_names(self, terminal: int) -> dict[str, str]:
        """The role's words of a widened terminal (key -> spelling): the tables it sees, or
        the columns it may read — what the terminal's lexicon spells."""
        found = self._words.get(terminal)
        if found is None:
            if self._names[terminal] == TABLE_NAME:
                found = {key: written for key, (written, _) in self._tables.items()}
            else:
                key = self._catalog_key
                found = {
                    key(c): c for _, columns in self.names.tables for c, seen in columns if seen
                }
            self._words[terminal] = found
        return found

    def _is_word(self, terminal: int, key: str) -> bool:
        return terminal not in self._widened or key in self._word_names(terminal)

    def _word_prefixes(self, terminal: int) -> frozenset[bytes]:
        return self._prefixes.memo(
            ("words", terminal),
            lambda: self._spelled_prefixes(self._word_names(terminal), terminal),
        )

    def _slot_if(
        self, state: GammaState, terminal: int, look: int = LOOKAHEAD
    ) -> Slot | object | None:
        """The slot `terminal` would fill next at `state`'s boundary (None: not judged;
        _REFUSED: the reductions it causes are refused, or — with `look` > 0, for a terminal
        that is not a name — every lexeme that could follow it is, `_alive`)."""
        try:
            found = self._reduce_for(state, terminal)
        except _Refused:
            return _REFUSED
        if found is None:
            return _REFUSED
        node, values, block, move = found
        block = self._admitted(node, move, terminal, block, values)
        if block is _REFUSED:
            return _REFUSED  # as `_shift` refuses it
        if terminal not in self._restricted:
            if look > 0:
                pushed, values, block = self._pushed(node, move, terminal, "", block, values)
                if not self._alive(pushed, values, block, look - 1):
                    return _REFUSED
            return None
        return self._slot(self._slots.get(move), block, values)

    def joins(self, state: GammaState) -> bool:
        """Is the innermost block in its FROM clause, where a `(` may open a parenthesized
        join (which `_joined` refuses inside another)?"""
        return self._in_from(state.block)

    @staticmethod
    def _in_from(block: Block | None) -> bool:
        inner = innermost(block)
        return inner is not None and inner.phase in _FROM_PHASES

    @staticmethod
    def _owes_a_later_item(block: Block | None) -> bool:
        """In a FROM clause where an ON owes a bare name to an item not written yet
        (`Block.forward`)?"""
        inner = innermost(block)
        return inner is not None and inner.phase in _FROM_PHASES and inner.forward

    def _joined(self, node: StackNode, move: int, block: Block | None) -> Block | object | None:
        """Γ after a shift from `node` to state `move`: where it is a table name or a `(` right
        after a FROM item's `(`, that `(` opens a parenthesized join (a subquery would start
        with SELECT, WITH or VALUES), which its block notes until it closes; _REFUSED inside
        one already. SQLite 3.40 refuses some joins nested so over one table twice
        with an "ambiguous column name" of its own rewrite (`FROM o JOIN (employees JOIN
        (employees AS b))`), so L_Γ nests none: a subquery may still follow that `(`."""
        if self._opens.get(node.state) != "item paren" or not (
            self._slots.get(move) == "table" or self._opens.get(move) == "item paren"
        ):
            return block
        inner = innermost(block)
        if inner is None:
            return block
        if inner.in_join:
            return _REFUSED
        # not the FROM clause's first item: SQLite reads the join as a subquery (`join_base`)
        return _replace_inner(block, replace(inner, in_join=True, join_base=inner.declared))

    def _refused_event(self, event: str | None, block: Block | None, values: Cell | None) -> bool:
        """Is the clause a shift would start refused: a `(` opening a FROM item where
        `_no_item_paren` says so, an UPDATE's FROM (L_Γ has none: module docstring), or an
        INSERT's rows right after a target with a column the role may not see (without a
        column list they write every column)?"""
        if event is None:
            return False
        if event == "item paren":
            return self._no_item_paren(block)
        inner = innermost(block)
        if inner is None or inner.target is None:
            return False
        if event == "from":
            return True
        return (
            event in ("select", "values", "with")
            and inner.phase is Phase.TARGET
            and _last_token(values, TABLE_NAME) is not None
            and not _all_visible(inner.target)
        )

    def _alive(
        self, node: StackNode, values: Cell | None, block: Block | None, look: int = 0
    ) -> bool:
        """Can some lexeme follow a lexeme just shifted (`node`)? Not where every terminal
        that may come next is a name Γ allows none of, or one whose reductions Γ refuses —
        after `AS` in a FROM item, or `JOIN`, when no table or alias keeps the select list's
        names dischargeable. Where few terminals may come next (a chain of keywords: `LEFT
        OUTER JOIN`), those that are no name are followed `look` lexemes further: Spider's
        `LEFT OUTER` was a dead end when no table could be joined."""
        allowed = self.oracle.lr.allowed_mask(node)
        if not allowed:
            return True  # only the end: `ends` judges it
        probe = GammaState(node, values, block, b"")
        further = look if allowed.bit_count() <= FEW_FOLLOWERS else 0
        for terminal in _bits(allowed):
            found = self._slot_if(probe, terminal, look=further)
            if found is _REFUSED:
                continue
            if found is None or found.fresh is not None:  # type: ignore[union-attr]
                return True
            if next(self._lexemes(found.names, terminal), None) is not None:  # type: ignore[union-attr]
                return True
        return False

    def _fresh_extension(self, pending: bytes, scan_state: int, terminal: int, slot: Slot) -> bool:
        """Does the pending lexeme extend to a lexeme of `terminal` (an alias) whose key is
        not taken (`slot.fresh`)? Over a bounded number of extensions, shortest first: the
        taken names are few, so a short extension is found at once."""
        for lexeme in self._extensions(pending, scan_state, terminal):
            if slot.allows(
                self._key(lexeme.decode("utf-8", "surrogateescape"), self._names[terminal])
            ):
                return True
        return False

    def _extensions(self, pending: bytes, scan_state: int, terminal: int) -> Iterator[bytes]:
        """Lexemes of `terminal` that extend `pending` (at `scan_state`), shortest first: over
        the first 64 scanner states reached, then — only if asked for more — up to 2,000."""
        seen = 0
        for bound in (64, 2000):
            paths, complete = self._extension_paths(scan_state, terminal, bound)
            for path in paths[seen:]:
                if path or pending:
                    yield pending + path
            if complete:
                return
            seen = len(paths)

    def _extension_paths(
        self, scan_state: int, terminal: int, bound: int
    ) -> tuple[tuple[bytes, ...], bool]:
        """The byte strings that take the scanner from `scan_state` to a state where
        `terminal` wins, shortest first, breadth first over at most `bound` states, and
        whether that search was complete: a function of the scanner state alone, so found
        once per state (bounded: states × terminals × two bounds)."""
        key = (scan_state, terminal, bound)
        found = self._paths.get(key)
        if found is not None:
            return found
        queue: deque[tuple[int, bytes]] = deque([(scan_state, b"")])
        bit, left, paths = 1 << terminal, bound, []
        while queue and left > 0:
            current, path = queue.popleft()
            left -= 1
            if self._accept[current] & bit and self._wins(current, terminal):
                paths.append(path)
            for byte in range(256):
                nxt = self._trans[current * 256 + byte]
                if nxt >= 0 and self._live[nxt] & bit:
                    queue.append((nxt, path + bytes((byte,))))
        return self._paths.setdefault(key, (tuple(paths), not queue))

    def _lexemes(self, names: dict[str, str], terminal: int) -> Iterator[bytes]:
        """The lexemes of `terminal` that spell one of `names` (key -> spelling), each in its
        every form, as the scanner reads them (case as the catalog spells it)."""
        for key, name in names.items():
            yield from self._name_lexemes(key, name, terminal)[0]

    def _name_lexemes(
        self, key: str, name: str, terminal: int
    ) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
        """The lexemes of `terminal` that spell the name `name` (of key `key`), and all their
        prefixes (case folded where the dialect ignores case): kept per name, as every slot of
        a catalog of thousands of names would otherwise scan each of them again."""
        memo_key = (key, name, terminal)
        found = self._name_forms.get(memo_key)
        if found is not None:
            return found
        suffix = "." if self._names[terminal] == QUALIFIER else ""
        lexemes = []
        for form in self._forms(name):
            spelled = (form + suffix).encode("utf-8")
            written = spelled.decode("utf-8")
            if (
                self._reads_as(spelled, terminal)
                and self._key(written, self._names[terminal]) == key
            ):
                lexemes.append(spelled)
        prefixes = set()
        for spelled in lexemes:
            folded = spelled.lower() if self.rules.case_insensitive else spelled
            prefixes.update(folded[:i] for i in range(1, len(folded) + 1))
        return self._name_forms.setdefault(memo_key, (tuple(lexemes), tuple(prefixes)))

    def _discharging(self, state: GammaState) -> Iterator[bytes]:
        """Text that, written at `state`'s boundary inside a FROM clause, lets its block go on:
        a subquery's SELECT where no table may come (`_joined`), an alias for the item just
        written (whose own name another item has, or under which
        it leaves an obligation), else the items of a plan that discharges the obligations
        (joined with a comma, or JOIN). After an INSERT's target: a column list of one column
        the role may see (DEFAULT VALUES if none), where rows without one are refused. Where
        nothing is owed but a GROUP BY (`Block.ungrouped`): one over the column it names."""
        inner = innermost(state.block)
        if inner is not None and inner.phase is Phase.TARGET:  # an INSERT's column list
            visible = _visible_names(inner.target)  # type: ignore[arg-type]
            column = min(self._lexemes(visible, self._index[COLUMN_NAME]), key=len, default=None)
            yield b" DEFAULT VALUES" if column is None else b" (" + column + b")"
        if inner is None or inner.phase not in _FROM_PHASES:
            yield from _grouping(inner)
            return
        if inner.in_join and self._opens.get(state.node.state) == "item paren":
            yield b"SELECT"  # a `(` in a parenthesized join opens a subquery only (`_joined`)
            return
        catalog = self.catalog(inner)
        declared = tuple(cells(inner.declared))  # type: ignore[arg-type]
        item = self._pending_item(state.values)
        own = declared
        if item is not None:
            table, name = item
            columns = dict(catalog.tables.get(table, {}))
            own = (*declared, Binding(name, columns))
            duplicate = any(b.key == name for b in declared)
            if name == table and (
                duplicate or plan(inner.obligations, own, inner.outer, catalog, True) is None
            ):
                for other in self._names_for(inner, table):
                    renamed = (*declared, Binding(other, columns))
                    if (
                        other != table
                        and plan(inner.obligations, renamed, inner.outer, catalog, True) is not None
                    ):
                        yield b" AS " + self._alias_text(other, inner)
                        return
        items = plan(inner.obligations, own, inner.outer, catalog, True)
        if not items:
            yield from _grouping(inner)
            return
        taken = set(inner.obligations.qualified) | {b.key for b in own if b.key}
        written = []
        for table, name in items:
            spelled = min(
                self._lexemes({table: self._tables[table][0]}, self._index[TABLE_NAME]), key=len
            )
            if name == table:
                written.append(spelled)
                continue
            alias = self._alias_text(name, inner, taken)
            taken.add(alias.decode())
            written.append(spelled + b" AS " + alias)
        for joiner in (b", ", b" JOIN "):
            yield joiner + joiner.join(written)

    def _alias_text(self, name: str | None, inner: Block, taken: set[str] | None = None) -> bytes:
        """`name` as an alias, or (None) a fresh alias no name of the block takes."""
        if name is not None:
            return name.encode()
        if taken is None:
            declared = {b.key for b in cells(inner.declared) if b.key}  # type: ignore[union-attr]
            taken = set(inner.obligations.qualified) | declared
        alias = self._index[TABLE_ALIAS]
        return next(
            a.encode()
            for a in FRESH_ALIASES
            if a not in taken and self._reads_as(a.encode(), alias)
        )

    def _pending_item(self, values: Cell | None) -> tuple[str, str] | None:
        """(table, name) of a FROM item written but not reduced yet: `T` or `T [AS] a`."""
        if (named := _last_token(values, TABLE_NAME)) is not None:
            key = self._key(named.text, TABLE_NAME)
            return key, key
        if (alias := _last_token(values, TABLE_ALIAS)) is not None:
            table = self._aliased_table(values.tail)  # type: ignore[union-attr]
            return (table, self._key(alias.text, TABLE_ALIAS)) if table else None
        return None

    def _close_unjudged(self, state: GammaState, scan_state: int) -> bytes | None:
        """The pending bytes extended to the shortest lexeme of a terminal Γ does not judge
        here (a breadth-first walk of the scanner through states still live for V)."""
        allowed = self.oracle.lr.allowed_mask(state.node) | self._ignored
        judged = sum(1 << t for t in self._restricted)
        seen = {scan_state}
        queue: deque[tuple[int, bytes]] = deque([(scan_state, b"")])
        while queue:
            current, path = queue.popleft()
            for byte in range(256):
                nxt = self._trans[current * 256 + byte]
                if nxt < 0 or nxt in seen or not self._live[nxt] & allowed:
                    continue
                winner = self.oracle.winner_in(nxt, allowed)
                if (
                    winner >= 0
                    and not (judged >> winner) & 1
                    and self._slot_if(state, winner) is not _REFUSED
                ):
                    return state.pending + path + bytes((byte,))
                seen.add(nxt)
                queue.append((nxt, path + bytes((byte,))))
        return None

    def _any_lexeme(self, state: GammaState, scan_state: int) -> bytes | None:
        """The shortest lexeme Γ allows at `state`'s boundary that extends its pending bytes
        (`scan_state`: the scanner after them), of any terminal: a name, or a lexeme of a
        terminal Γ does not judge here."""
        options = [
            lexeme
            for terminal in sorted(self._restricted)
            for lexeme in self._completions(state, terminal)
        ]
        other = self._close_unjudged(state, scan_state)
        options += [] if other is None else [other]
        return min(options, key=lambda lexeme: (len(lexeme), lexeme), default=None)

    def _completions(self, state: GammaState, terminal: int) -> list[bytes]:
        """Lexemes of `terminal` Γ allows at `state`'s boundary that extend its pending bytes,
        shortest first (the pending bytes' case kept); a few fresh aliases where any new name
        will do."""
        at = self._slot_after(state, terminal)
        if at is None:
            return []
        slot = at[0]
        if slot is None:  # a slot Γ does not judge: a widened terminal spells the role's words
            if terminal not in self._widened:
                return []
            slot = Slot(self._word_names(terminal))
        pending = state.pending
        fold = self.rules.case_insensitive
        out = []
        spellings = list(self._lexemes(slot.names, terminal))
        if slot.fresh is not None:
            suffix = b"." if self._names[terminal] == QUALIFIER else b""
            spellings += [
                a.encode() + suffix
                for a in FRESH_ALIASES
                if slot.allows(a) and self._reads_as(a.encode() + suffix, terminal)
            ]
            if pending:  # new names that go on from the bytes written so far
                scan_state = self._run(self._start, pending)[0]
                extended = self._extensions(pending, scan_state, terminal)
                spellings += [
                    lexeme
                    for lexeme in extended
                    if slot.allows(
                        self._key(lexeme.decode("utf-8", "surrogateescape"), self._names[terminal])
                    )
                ][:4]
        for spelled in spellings:
            head = spelled[: len(pending)]
            if len(spelled) >= len(pending) and (
                head == pending or (fold and head.lower() == pending.lower())
            ):
                out.append(pending + spelled[len(pending) :])
        return sorted(set(out), key=lambda lexeme: (len(lexeme), lexeme))

    def _forms(self, name: str) -> Iterator[str]:
        yield name
        for style in self.rules.quote_styles:
            quoted = style.quote(name)
            if quoted is not None:
                yield quoted

    def _reads_as(self, lexeme: bytes, terminal: int) -> bool:
        _, _, length, accept_state = self._run(self._start, lexeme)
        return length == len(lexeme) and self._wins(accept_state, terminal)

    def _wins(self, state: int, terminal: int) -> bool:
        """Does a lexeme ending at scanner state `state` read as `terminal` where it is allowed
        (it is in the top shadowing class there: a keyword does not take it)?"""
        key = (state, terminal)
        found = self._winning.get(key)
        if found is None:
            found = self._winning[key] = (
                self.oracle.compiled.winner(self._accept[state], 1 << terminal) == terminal
            )
        return found

    # -- completions
    def repair(
        self,
        state: GammaState,
        cfg: Configuration,
        completion: bytes,
        complete: Callable[[Configuration], bytes],
    ) -> bytes | None:
        """A completion from (cfg, state) whose names Γ allows: `completion` (the grammar's
        shortest) with each name Γ refuses replaced by the shortest allowed spelling at its
        slot, the grammar completing the rest. None if no such repair is found."""
        oracle = self.oracle
        for _ in range(64):
            done = oracle.try_feed(cfg, completion)
            if done is None or not oracle.eos_ok(done):
                return None
            found = self._read(state, completion, done)
            if isinstance(found, GammaState):
                if self.ends(found, done):
                    return completion
                # the last lexeme (or the end itself) leaves an obligation: fix before it
                last = len(state.pending) + len(completion) - len(found.pending)
                allowed = self.oracle.lr.allowed_mask(found.node) | self._ignored
                terminal = self.oracle.winner_in(done.accept_state, allowed)
                found = Failure(last, terminal, found)
            text = state.pending + completion
            fixed = (
                text[found.start : len(state.pending)] if found.start < len(state.pending) else b""
            )
            at = found.state._replace(pending=fixed)
            if fixed:  # the pending lexeme may end as any terminal, judged or not
                best = self._any_lexeme(at, cfg.scan_state)
            else:
                best = next(iter(self._completions(at, found.terminal)), None)
            head = (
                text[len(state.pending) : found.start] if found.start >= len(state.pending) else b""
            )
            if best is not None:
                body = head + best[len(fixed) :]
            else:  # a FROM item or the FROM clause's end that leaves an obligation
                kept = head.rstrip(b" \t\r\n")
                body = next(
                    (
                        kept + written
                        for inserted in self._discharging(found.state)
                        for written in (inserted, inserted.lstrip())  # after layout, no space
                        if oracle.try_feed(cfg, kept + written) is not None
                    ),
                    None,
                )
                if body is None and not fixed:  # e.g. RETURNING `*` the role may not read
                    other = self._any_lexeme(at, self._start)
                    body = None if other is None else head + other
                if body is None:
                    return None
            mid = oracle.try_feed(cfg, body)
            if mid is None:
                return None
            completion = body + complete(mid)
        return None


def _ungrouped(block: Block | None) -> bool:
    """Does the innermost block's select list call an aggregate beside a column outside it,
    with no GROUP BY (`Block.ungrouped`)? Then L_Γ lets the block end only after a GROUP BY."""
    inner = innermost(block)
    return inner is not None and inner.tallies and inner.ungrouped is not None


def _grouping(inner: Block | None) -> Iterator[bytes]:
    """A GROUP BY over the column an ungrouped block's select list names (`_ungrouped`)."""
    if _ungrouped(inner):
        yield b" GROUP BY " + inner.ungrouped.encode("utf-8", "surrogateescape")  # type: ignore[union-attr]


def _called(children: list[object], part: object, not_with: object) -> bool:
    """Do a call's children hold `part` and not `not_with` (markers, compared by identity)?"""
    return any(c is part for c in children) and not any(c is not_with for c in children)


def _aggregating(block: Block | None) -> bool:
    """Is the innermost block (a query's, or its GROUP BY's or ORDER BY's) of an aggregate
    query?"""
    inner = innermost(block)
    return inner is not None and inner.aggregates


def _own_names(core: Block, block: Block | None) -> Block:
    """The block a GROUP BY or ORDER BY of `core` opens above `block`: `core`'s bindings and
    aliases, and no name from further out (SQLite binds those terms in their query only)."""
    phase = Phase.AFTER if core.phase is Phase.AFTER else Phase.COLUMNS
    return Block(
        phase,
        block,
        bindings=core.bindings,
        aliases=core.aliases,
        local=True,
        aggregates=core.aggregates,
    )


_CORE_PHASES = (Phase.COLUMNS, Phase.FROM, Phase.ON, Phase.AFTER)
_CORE_LABELS = frozenset({"select_core", "from_clause", "column_ref", "table", "expr_column"})
_REFUSED = object()
_PER_SCAN_STATE = object()  # a judge memo's mark: its judges are kept per scanner state
_COLUMN_SLOTS = ("column", "qualified column")


def _obliges(inner: Block, slot: str | None) -> bool:
    """Is a name at `slot` an obligation of `inner`: a column in its select list, or a bare
    column in ON? SQLite binds the latter against the whole FROM list, items after the ON
    included (`a JOIN b ON x = 1 JOIN c` may take `x` from `c`), so it is owed until the FROM
    clause ends — except where SQLite takes it only from the items the ON sees
    (`Block.on_left`), and a later item must not have it too. A qualified one in ON names an
    item declared before it."""
    if inner.phase is Phase.COLUMNS:
        return slot in _COLUMN_SLOTS
    return inner.phase is Phase.ON and slot == "column"


def content_key(state: GammaState) -> tuple[bytes, int]:
    """What Γ's memos name `state` by, with its stack node: its semantic values' content and
    its block object (Γ is a function of the three). Only states the binder reached by its
    shifts have shaped values; a lookahead's probe is never a key."""
    values = state.values
    shape = b"" if values is None else values.shape
    if shape is None:
        raise RuntimeError("a Γ state without shaped values used as a memo key")
    return shape, 0 if state.block is None else state.block.serial


def _shaped(values: Cell | None) -> Cell | None:
    """`values` with a shape on each cell the reductions just pushed (the ones below, from
    the state shifted from, have theirs): BLAKE2b-128 chained over the heads' content."""
    fresh: list[object] = []
    while values is not None and values.shape is None:
        fresh.append(values.head)
        values = values.tail
    for head in reversed(fresh):
        below = b"" if values is None else values.shape
        data = below + _head_content(head)  # type: ignore[operator]
        values = Cell(head, values, hashlib.blake2b(data, digest_size=16).digest())
    return values


def _head_content(head: object) -> bytes:
    """A semantic value's content as bytes (reprs of tuples of strings, which name their
    type; a result's block by its serial), what `_shaped` digests."""
    if isinstance(head, _Result):
        serial = 0 if head.core is None else head.core.serial
        return f"_Result({head.columns!r}, {serial})".encode("utf-8", "backslashreplace")
    if head is None or isinstance(
        head, Token | _ColumnRef | _Alias | _Names | _JoinKind | _CallPart
    ):
        return repr(head).encode("utf-8", "backslashreplace")
    raise TypeError(f"no content for a semantic value of type {type(head).__name__}")


class _ColumnRef(NamedTuple):
    name: str | None


class _Alias(NamedTuple):
    text: str | None


class _JoinKind(NamedTuple):
    """A join operator's kind, passed up to its ON (only outer joins are marked)."""

    outer: bool


_OUTER_JOIN = _JoinKind(True)  # LEFT, RIGHT or FULL: its ON may not name the items after it
_OUTER_JOINS = ("left", "right", "full")  # the grammar's labels of those join kinds


class _CallPart(NamedTuple):
    """A call's arguments or window, passed up to the call (aggregate and OVER are marked)."""

    part: str


_AGGREGATE = _CallPart("aggregate arguments")  # an aggregate's own: a query's aggregate
_WINDOW = _CallPart("over")  # unless an OVER follows


class _Result(NamedTuple):
    columns: tuple[Column, ...]
    core: Block | None  # the block, when the select is a single core


def _subquery_result(values: Cell | None) -> _Result | None:
    """The result of the subquery whose alias is being written (before `)` and `AS`)."""
    cell = values
    for _ in range(3):
        if cell is None:
            return None
        if isinstance(cell.head, _Result):
            return cell.head
        cell = cell.tail
    return None


class _Names(NamedTuple):
    names: tuple[str, ...]


def _token(children: list[object], terminal: str) -> str | None:
    return next((c.text for c in children if isinstance(c, Token) and c.terminal == terminal), None)


def _nearest_result(values: Cell | None) -> _Result | None:
    """The result of the select an ORDER BY follows: the value just below the ORDER keyword."""
    cell = values.tail if values is not None else None
    return cell.head if cell is not None and isinstance(cell.head, _Result) else None


def _last_token(values: Cell | None, terminal: str) -> Token | None:
    """The last symbol read, if it is a lexeme of `terminal`."""
    head = values.head if values is not None else None
    return head if isinstance(head, Token) and head.terminal == terminal else None


def _visible_names(binding: Binding) -> dict[str, str]:
    """Key -> spelling of the binding's columns the role may see."""
    return {key: column.name for key, column in binding.columns.items() if column.visible}


def _all_visible(binding: Binding) -> bool:
    return all(column.visible for column in binding.columns.values())


_FROM_PHASES = (Phase.FROM, Phase.ON)


def _full(inner: Block) -> bool:
    """Does a FROM clause being written hold as many items as a block may?"""
    if inner.phase not in _FROM_PHASES:
        return False
    return sum(1 for _ in cells(inner.declared)) >= MAX_FROM_ITEMS


def _defining(block: Block | None) -> tuple[str, ...]:
    """The CTEs whose bodies enclose `block` (`Block.defining`), innermost first."""
    found = []
    while block is not None:
        if block.defining is not None:
            found.append(block.defining)
        block = block.outer
    return tuple(found)


def _replace_inner(block: Block | None, inner: Block) -> Block:
    """`block` with its innermost non-WITH block replaced (WITH blocks above it rebuilt)."""
    if block is None or block.phase is not Phase.WITH:
        return inner
    return replace(block, outer=_replace_inner(block.outer, inner))


def _pop_inner(block: Block | None) -> Block | None:
    inner = innermost(block)
    if block is inner:
        return inner.outer if inner is not None else None
    return replace(block, outer=_pop_inner(block.outer))  # type: ignore[arg-type]


def _declare(block: Block | None, inner: Block, binding: Binding) -> Block:
    return _replace_inner(block, replace(inner, declared=Cell(binding, inner.declared)))


def _bits(mask: int) -> Iterator[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low

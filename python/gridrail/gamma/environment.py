"""Γ, the environment of names a statement declares: query blocks, their FROM bindings, their
select-list aliases, and the CTEs in scope — and what a name written at a slot may denote.

Every value here is immutable, so an environment is shared by every configuration that reached
it (rollback and forks copy a reference). Lists that grow with the statement (bindings,
result columns) are linked cells while they grow and become dicts once, when their clause
closes, so a step never reads state proportional to the output's length.

Resolution follows SQLite (resolve.c, as `gridrail.check.scopes` does for finished
statements), restricted to scopes already declared: a block whose FROM clause is still open is
not looked into, so a name is only allowed where its binding can no longer change.

* A qualified name `q.c` binds in the innermost visible block that has a binding named `q`
  with a column `c` (an inner alias does not hide an outer one of the same name); two such
  bindings in that block make it ambiguous.
* A bare name `c` binds in the innermost visible block where some binding has the column:
  exactly one binding (else ambiguous); failing that, that block's select-list alias `c`
  (SQLite reads aliases in WHERE, GROUP BY, HAVING and ORDER BY); failing that, further out.
* GROUP BY and ORDER BY terms of a query block, and subqueries inside them, bind in that block
  only: SQLite does not look into outer queries there (HAVING and WHERE it does).
* A column the role may not see is never allowed, even where SQLite would bind it: the policy
  is decided by the binding, so the mask enforces it.
* An INSERT / UPDATE / DELETE is a block whose one binding is its target (under its alias, if
  it has one): SET values and WHERE see it, and subqueries there see it as an outer query.
  RETURNING sees the target under its table name only (an alias does not reach it, nor does
  an UPDATE's FROM item); an INSERT's SELECT does not see it at all.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple


class Phase(Enum):
    """Where a block is: what its names may refer to."""

    COLUMNS = "columns"  # the select list, before FROM: names are not resolved (open)
    FROM = "from"  # inside the FROM clause, outside ON: derived tables cannot see the block
    ON = "on"  # an ON expression: the bindings declared so far (of its parenthesized join)
    AFTER = "after"  # WHERE, GROUP BY, HAVING: every binding and the select-list aliases
    RESULT = "result"  # ORDER BY of a compound select: the result column names only
    NO_NAMES = "no-names"  # LIMIT / OFFSET: no column at all (SQLite refuses them)
    WITH = "with"  # a WITH clause: holds CTEs, transparent to column names
    TARGET = "target"  # an INSERT / UPDATE / DELETE before its SET, WHERE or RETURNING:
    # its target is named, no name binds yet (an INSERT's SELECT does not see the target)


# Block kinds whose names the slots resolve; the others are left open (today's lexicon rung).
RESOLVED = frozenset({Phase.ON, Phase.AFTER, Phase.RESULT, Phase.NO_NAMES})


class Column(NamedTuple):
    name: str  # as the catalog (or the select list that made it) spells it
    visible: bool  # may the role read it


@dataclass(frozen=True, eq=False)
class Binding:
    """One FROM item: the name a qualifier writes to reach it and its columns by key."""

    key: str | None  # alias, else table or CTE name (key form); None: a subquery without alias
    columns: dict[str, Column]


@dataclass(frozen=True)
class Obligations:
    """References a block's select list made before its FROM clause (keys)."""

    qualified: Mapping[str, frozenset[str]]  # qualifier -> columns (empty: `q.*` alone)
    bare: frozenset[str]
    # stars: "" for `*` (every item's columns read), a qualifier for `q.*` (that item's)
    stars: frozenset[str] = frozenset()

    def with_column(self, qualifier: str | None, column: str | None) -> Obligations:
        if qualifier is None:
            return Obligations(self.qualified, self.bare | {column}, self.stars) if column else self
        columns = self.qualified.get(qualifier, frozenset())
        merged = dict(self.qualified)
        merged[qualifier] = columns | {column} if column else columns
        return Obligations(merged, self.bare, self.stars)

    def with_star(self, qualifier: str | None) -> Obligations:
        """`*` (None) or `q.*`: every column the star reads must be one the role may see."""
        grown = self if qualifier is None else self.with_column(qualifier, None)
        return Obligations(grown.qualified, grown.bare, self.stars | {qualifier or ""})

    def __bool__(self) -> bool:
        return bool(self.qualified or self.bare or self.stars)


NO_OBLIGATIONS = Obligations({}, frozenset())


class Cell(NamedTuple):
    """A persistent list cell (newest first)."""

    head: object
    tail: Cell | None
    # the binder's semantic-value stack: a digest of the list's content, so that equal stacks
    # met at different positions share the binder's memos (None: a cell not so named)
    shape: bytes | None = None


def cells(cell: Cell | None) -> Iterator[object]:
    """The items of a cell list, newest first."""
    while cell is not None:
        yield cell.head
        cell = cell.tail


_serials = itertools.count(1)


@dataclass(frozen=True, eq=False)
class Block:
    """One query block (or a WITH clause, an ORDER BY or a LIMIT: `phase` says which)."""

    phase: Phase
    outer: Block | None
    depth: int = 0  # LR stack depth where it opened (a WITH: to close it with its statement)
    declared: Cell | None = None  # bindings, newest first, while FROM is open
    bindings: tuple[Binding, ...] = ()  # every binding, once FROM has closed
    items: Cell | None = None  # result columns while the select list grows (see `ResultItem`)
    aliases: frozenset[str] = frozenset()  # select-list alias keys, once FROM has opened
    result: dict[str, Column] | None = None  # RESULT: names an ORDER BY of a compound may use
    ctes: Cell | None = None  # WITH: (key, columns) of each CTE declared so far
    # WITH: the key of the CTE whose body is being written — a FROM item of that name there
    # would be the CTE itself (SQLite: circular, or recursive), which L_Γ has not
    defining: str | None = None
    obligations: Obligations = NO_OBLIGATIONS  # names the select list used before FROM
    local: bool = False  # GROUP BY / ORDER BY terms: no name binds further out than here
    target: Binding | None = None  # an INSERT / UPDATE / DELETE: the table it writes
    in_join: bool = False  # inside a parenthesized join of its FROM clause (L_Γ nests none)
    # the bindings declared before the open parenthesized join, where it is not the FROM
    # clause's first item: SQLite reads such a join as a subquery, so an ON inside it sees
    # only the join's own items (None: no such join open)
    join_base: Cell | None = None
    # in ON: its bare names bind only to the items it sees (`visible_bindings`) — an outer
    # join's ON, one inside `join_base`'s join, or any once the clause has a RIGHT or FULL
    # join (SQLite: "ON clause references tables to its right")
    on_left: bool = False
    forward: bool = False  # an ON of the clause owes a bare name no item before it has
    right_joined: bool = False  # the FROM clause has a RIGHT or FULL join
    # an aggregate query (SQLite): its select list calls an aggregate, or it has GROUP BY —
    # what HAVING, and an aggregate in its ORDER BY, need
    aggregates: bool = False
    # the select list calls an aggregate outside a window: one row for all its rows, unless
    # GROUP BY groups them
    tallies: bool = False
    # the select list's first column outside every aggregate call, as written (a star: `''`),
    # until GROUP BY opens: beside `tallies` it takes an arbitrary row's value — SQLite runs it,
    # PostgreSQL and DuckDB refuse it, and no Spider candidate so written was right — so L_Γ
    # asks for GROUP BY there, which the reserve writes over it (docs/names.md)
    ungrouped: str | None = None
    # names this block object in memo keys: never reused (`replace` draws a new one), unlike
    # an id, so a key that outlives its block cannot be taken for another's
    serial: int = field(init=False, repr=False, default_factory=_serials.__next__)

    def visible_bindings(self) -> tuple[Binding, ...]:
        if self.phase is not Phase.ON:
            return self.bindings
        seen = []
        cell = self.declared
        while cell is not None and cell is not self.join_base:
            seen.append(cell.head)
            cell = cell.tail
        return tuple(seen)  # type: ignore[arg-type]


class ResultItem(NamedTuple):
    """A select-list item as its result column: a name (alias or column) or a star."""

    name: str | None  # None: an expression SQLite names by its text (unreferenceable here)
    alias: str | None = None  # the alias's key, when the item has one
    star: bool = False
    qualifier: str | None = None  # for `q.*` (key form)


def chain(block: Block | None) -> Iterator[Block]:
    """The blocks a name at `block` may see, innermost first: WITH clauses are skipped, and the
    walk stops at the first block that is not resolved (an open FROM or select list)."""
    while block is not None:
        if block.phase is not Phase.WITH:
            if block.phase not in RESOLVED:
                return
            yield block
            if block.phase is Phase.NO_NAMES or block.local:
                return
        block = block.outer


def innermost(block: Block | None) -> Block | None:
    """The innermost block that is not a WITH clause."""
    while block is not None and block.phase is Phase.WITH:
        block = block.outer
    return block


def is_resolved(block: Block | None) -> bool:
    """Do names at `block` go through the slots (else: open, today's lexicon rung)? Outside
    every block (a VALUES row of a SELECT statement) nothing is bound: resolved, and empty."""
    inner = innermost(block)
    return inner is None or inner.phase in RESOLVED


def qualified_columns(block: Block | None, qualifier: str) -> dict[str, str]:
    """Column key -> spelling of each `qualifier.column` that binds to a column the role may
    see (empty: the qualifier binds nothing here)."""
    out: dict[str, str] = {}
    decided: set[str] = set()
    for scope in chain(block):
        if scope.phase is Phase.RESULT or scope.phase is Phase.NO_NAMES:
            continue
        named = [b for b in scope.visible_bindings() if b.key == qualifier]
        counts: dict[str, int] = {}
        for binding in named:
            for key in binding.columns:
                counts[key] = counts.get(key, 0) + 1
        for binding in named:
            for key, column in binding.columns.items():
                if key in decided:
                    continue
                if counts[key] == 1 and column.visible:
                    out[key] = column.name
        decided.update(counts)
    return out


def bare_columns(block: Block | None) -> dict[str, str]:
    """Column key -> spelling of each bare column name that binds to something the role may
    see (a column or a select-list alias)."""
    out: dict[str, str] = {}
    decided: set[str] = set()
    for scope in chain(block):
        if scope.phase is Phase.NO_NAMES:
            break
        if scope.phase is Phase.ON:
            break  # SQLite binds ON names against the whole FROM list, which is still open
        if scope.phase is Phase.RESULT:
            for key, column in (scope.result or {}).items():
                if column.visible:
                    out.setdefault(key, column.name)
            break
        counts: dict[str, int] = {}
        for binding in scope.bindings:
            for key in binding.columns:
                counts[key] = counts.get(key, 0) + 1
        for binding in scope.bindings:
            for key, column in binding.columns.items():
                if key not in decided and counts[key] == 1 and column.visible:
                    out[key] = column.name
        decided.update(counts)
        for alias in scope.aliases:
            if alias not in decided:
                out[alias] = alias
                decided.add(alias)
    return out


def qualifiers(block: Block | None) -> set[str]:
    """Keys of the bindings a qualifier may name here (those through which a visible column
    binds)."""
    names: set[str] = set()
    for scope in chain(block):
        if scope.phase in (Phase.RESULT, Phase.NO_NAMES):
            continue
        names.update(b.key for b in scope.visible_bindings() if b.key is not None)
    return {q for q in names if qualified_columns(block, q)}


def expand_result(items: list[ResultItem], bindings: tuple[Binding, ...]) -> tuple[Column, ...]:
    """The result columns of a block (what a derived table or a CTE over it offers), stars
    expanded over its bindings."""
    out: list[Column] = []
    for item in items:
        if not item.star:
            if item.name is not None:
                out.append(Column(item.name, True))
            continue
        for binding in bindings:
            if item.qualifier is None or binding.key == item.qualifier:
                out.extend(binding.columns.values())
    return tuple(out)


def columns_by_key(columns: tuple[Column, ...], key: Callable[[str], str]) -> dict[str, Column]:
    """Result columns as a binding's columns. A name given twice is kept once, not visible:
    SQLite reads the first, and the checker owns that case."""
    out: dict[str, Column] = {}
    for column in columns:
        k = key(column.name)
        out[k] = Column(column.name, False) if k in out else column
    return out

"""Name scopes: what a table qualifier or a bare column name can bind to, as SQLite binds it.

A `Scope` is one SELECT core (or the target of INSERT / UPDATE / DELETE): the FROM items it
reads (`Source`s) and, once its result columns are known, their aliases. Scopes chain outwards
through enclosing queries, so a correlated subquery sees the columns of the query around it.
Names are compared by key (`IdentifierRules.key`): two names denote the same object iff their
keys are equal.

SQLite's order (resolve.c, lookupName): a bare name is looked up in the sources of the innermost
scope, then among that scope's result-column aliases, then one scope further out; two sources of
one scope having the column make it ambiguous. A qualified name binds in the innermost scope
that has a source of that name (the alias if the FROM item has one, else the table or CTE name)
with that column, so an inner alias does not hide an outer one of the same name.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Iterator
from dataclasses import dataclass, field

from gridrail.parse.tree import Tree
from gridrail.policy.schema import Table

ROWID_KEYS = frozenset({"rowid", "oid", "_rowid_"})
"""SQLite's implicit row key, a column of every table and view unless a real column has the name
(the schema does not say which tables are WITHOUT ROWID)."""


@dataclass(eq=False)
class Source:
    """One FROM item as names see it.

    ``columns`` maps each column's key to its name (catalog spelling for a table, the name a
    subquery or CTE gives it otherwise), in order; None when it cannot be known (the table does
    not exist or may not be read: that was reported, and a lookup succeeds silently rather
    than report every column of it again).
    """

    key: str | None  # what a qualifier must denote; None: a subquery without an alias
    name: str | None  # that qualifier as messages write it (the alias, else the table name)
    origin: str  # what the item reads: a table or CTE name as written, or "subquery"
    table: Table | None  # a schema table or view: reading its columns is under policy
    columns: dict[str, str] | None
    has_rowid: bool = False  # a SQLite table or view: `rowid` is one of its columns
    hidden: set[str] = field(default_factory=set)  # keys merged into a left source by USING

    @property
    def label(self) -> str:
        """`employees AS e`, `employees`, `subquery AS s`: the item as messages name it."""
        return self.origin if self.name in (None, self.origin) else f"{self.origin} AS {self.name}"

    @property
    def is_known(self) -> bool:
        return self.columns is not None

    def column(self, key: str) -> str | None:
        """The name of the column with this key, if this source has it (an unknown source has
        every column, named as looked up)."""
        if self.columns is None:
            return key
        name = self.columns.get(key)
        if name is None and self.has_rowid and key in ROWID_KEYS:
            return key
        return name

    def exposes(self, key: str) -> bool:
        """Can a bare name bind here (a column merged by USING / NATURAL binds to the left)?"""
        return key not in self.hidden and self.column(key) is not None


@dataclass(eq=False)
class Cte:
    """A common table expression of a WITH. Its body is bound the first time the CTE is needed,
    which may be before its turn: a body may read a CTE defined after it. While its own body is
    being bound (recursion), its columns are the declared ones, or unknown."""

    query: Tree
    declared: dict[str, str] | None  # the column list `name(a, b)`, if given
    outer: Scope | None  # the scope the WITH's statement is nested in
    ctes: ChainMap[str, Cte]  # the CTEs its body sees: its WITH's, and enclosing ones
    columns: dict[str, str] | None = None  # once bound
    binding: bool = False
    bound: bool = False


@dataclass(frozen=True)
class Lookup:
    """Where a bare name binds: one source, several (ambiguous), a result alias, or nowhere."""

    sources: tuple[Source, ...] = ()
    alias: bool = False


@dataclass(eq=False)
class Scope:
    """The names visible in one SELECT core, chained to the scope of the enclosing query."""

    parent: Scope | None
    ctes: ChainMap[str, Cte]  # the CTEs visible here, by key
    sources: list[Source] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)  # set once the result columns are

    def local(self) -> Scope:
        """This scope cut from the enclosing ones: SQLite binds GROUP BY and ORDER BY terms
        (and subqueries inside them) without looking into outer queries."""
        return Scope(None, self.ctes, self.sources, self.aliases)

    def levels(self) -> Iterator[Scope]:
        """This scope, then each enclosing one."""
        scope: Scope | None = self
        while scope is not None:
            yield scope
            scope = scope.parent

    def qualifier(self, key: str, column: str) -> tuple[Source, ...]:
        """The sources a qualified column `key.column` can bind to: those named `key` in the
        innermost scope where one of them has the column; failing that, those of the innermost
        scope that has any (they lack the column); () when no scope has the name."""
        named = [
            found
            for scope in self.levels()
            if (found := tuple(s for s in scope.sources if s.key == key))
        ]
        having = [found for found in named if any(s.column(column) for s in found)]
        return (having or named or [()])[0]

    def lookup(self, key: str) -> Lookup:
        """Bind a bare column name. A source that could not be known takes a name only when no
        known source of its scope does, so one unknown table causes one report, not many."""
        for scope in self.levels():
            found = [s for s in scope.sources if s.exposes(key)]
            known = tuple(s for s in found if s.is_known)
            if known or found:
                return Lookup(known or (found[0],))
            if key in scope.aliases:
                return Lookup(alias=True)
        return Lookup()

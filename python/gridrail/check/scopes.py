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

SQLite's row key (`rowid`, `oid`, `_rowid_`, where no real column has the name) is a column of a
table or view that has one (the snapshot says which: not a WITHOUT ROWID table) and, in some
SQLite versions, of a FROM subquery; never of a CTE. A row key name binds in the innermost scope
where some source has a row key, if exactly one source there has; with several, only a real
column further out can still take it (SQLite counts the row keys it passes), failing which it is
refused. Where no source has one, the name binds outwards like any other.

Names also bind as the role sees them (`seen`): a column of a table the role may not see is then
absent. SQLite binds to it all the same, and the checker judges what SQLite binds; but where that
is a hidden column, what it reports is what a name no table has would get, which the role's
binding says (a table the role may not see is no source of known columns at all, as one the
schema lacks).
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Iterator
from dataclasses import dataclass, field

from gridrail.parse.tree import Tree
from gridrail.policy.schema import ROW_KEY_NAMES, Table

ROWID_KEYS = frozenset(ROW_KEY_NAMES)


@dataclass(eq=False)
class Source:
    """One FROM item as names see it.

    ``columns`` maps each column's key to its name (catalog spelling for a table, the name a
    subquery or CTE gives it otherwise), in order; None when it cannot be known (the role may
    see no table of that name, a CTE is read circularly: that was reported, and a lookup
    succeeds silently rather than report every column of it again).
    """

    key: str | None  # what a qualifier must denote; None: a subquery without an alias
    name: str | None  # that qualifier as messages write it (the alias, else the table name)
    origin: str  # what the item reads: a table or CTE name as written, or "subquery"
    table: Table | None  # a schema table or view: reading its columns is under policy
    columns: dict[str, str] | None
    has_rowid: bool = False  # SQLite: `rowid` is one of its columns (where no real one is)
    # ...but that is a guess: a schema written by hand does not say which tables are WITHOUT
    # ROWID, and whether this SQLite gives a FROM subquery one depends on its version. Then
    # the name binds here or outwards, and both are judged.
    rowid_uncertain: bool = False
    merged: set[str] = field(default_factory=set)  # keys merged into a left source by USING
    # keys of a table's columns the role may not see: SQLite binds them, the role's binding
    # does not (`seen`), and no message lists them
    hidden: frozenset[str] = frozenset()

    @property
    def label(self) -> str:
        """`employees AS e`, `employees`, `subquery AS s`: the item as messages name it."""
        return self.origin if self.name in (None, self.origin) else f"{self.origin} AS {self.name}"

    @property
    def is_known(self) -> bool:
        return self.columns is not None

    def column(self, key: str, seen: bool = False) -> str | None:
        """The name of the column with this key, if this source has it (an unknown source has
        every column, named as looked up; `seen`: as the role sees it, without hidden ones)."""
        if self.columns is None:
            return key
        if seen and key in self.hidden:
            return None
        name = self.columns.get(key)
        if name is None and self.has_rowid and key in ROWID_KEYS:
            return key
        return name

    def exposes(self, key: str, seen: bool = False) -> bool:
        """Can a bare name bind here (a column merged by USING / NATURAL binds to the left)?"""
        return key not in self.merged and self.column(key, seen) is not None

    def has_column(self, key: str, seen: bool = False) -> bool:
        """A real column (not the row key) of a known source."""
        if seen and key in self.hidden:
            return False
        return self.columns is not None and key in self.columns


@dataclass(eq=False)
class Cte:
    """A common table expression of a WITH. As SQLite does, its body is bound where a FROM item
    reads it, as a FROM subquery there (so names it does not bind bind in the queries around
    that FROM), once for each scope it is read in; never, if nothing reads it. A body may read
    a CTE defined after it.

    While its own body is being bound, SQLite lets it be read only by its recursive SELECTs
    (the rightmost cores of a UNION [ALL] compound, joined by the operator of the last one,
    that name it in their own FROM), once each; those are bound after the anchor (the cores
    before them), whose first core names the columns unless the CTE declares them. Any other
    reference from inside is circular, an error."""

    key: str  # its name's key
    query: Tree
    declared: dict[str, str] | None  # the column list `name(a, b)`, if given
    ctes: ChainMap[str, Cte]  # the CTEs its body sees: its WITH's, and enclosing ones
    columns: dict[str, str] | None = None  # once the anchor is bound
    binding: bool = False  # its body is being bound
    # its columns, by the scope its body was bound in (that of each FROM that reads it)
    bound: dict[Scope | None, dict[str, str] | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Lookup:
    """Where a bare name binds: one source, several (ambiguous), a result alias, or nowhere."""

    sources: tuple[Source, ...] = ()
    alias: bool = False
    seen: bool = False  # the role's binding, in place of SQLite's (a column it may not see)


@dataclass(eq=False)
class Scope:
    """The names visible in one SELECT core, chained to the scope of the enclosing query."""

    parent: Scope | None
    ctes: ChainMap[str, Cte]  # the CTEs visible here, by key
    sources: list[Source] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)  # set once the result columns are
    # a recursive SELECT of this CTE: a FROM item of its name reads it (SQLite matches the name,
    # whatever a WITH inside declares), once
    recursive: Cte | None = None
    recursion_read: bool = False

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

    def qualifier(self, key: str, column: str, seen: bool = False) -> tuple[Source, ...]:
        """The sources a qualified column `key.column` can bind to: those named `key` in the
        innermost scope where one of them has the column; failing that, those of the innermost
        scope that has any (they lack the column); () when no scope has the name."""
        named = [
            found
            for scope in self.levels()
            if (found := tuple(s for s in scope.sources if s.key == key))
        ]
        having = [found for found in named if any(s.column(column, seen) for s in found)]
        return (having or named or [()])[0]

    def lookup(self, key: str, seen: bool = False) -> Lookup:
        """Bind a bare column name. A source that could not be known takes a name only when no
        known source of its scope does, so one unknown table causes one report, not many (it
        is not known because it was reported). A real column wins over a row key. A row key
        name binds where the first source with a row key is, if it is the only one there;
        with several, no row key further out binds it any more, only a real column, and
        failing one the name is ambiguous (SQLite counts them: "no such column")."""
        crowded: tuple[Source, ...] = ()  # sources with a row key, several in one scope
        for scope in self.levels():
            found = [s for s in scope.sources if s.exposes(key, seen)]
            known = tuple(s for s in found if s.is_known)
            real = tuple(s for s in known if s.has_column(key, seen))
            if real:
                return Lookup(real)
            if found and not known:
                return Lookup((found[0],))
            if known and not crowded:  # row keys
                if len(known) == 1:
                    return Lookup(known)
                crowded = known
            if key in scope.aliases:
                return Lookup(alias=True)
        return Lookup(crowded)

    def row_key_candidates(self, key: str) -> list[Source]:
        """Every source a row key name may bind to, whichever of the guessed row keys
        (`rowid_uncertain`) exist; `lookup` takes them all to exist."""
        candidates: list[Source] = []
        row_keys_bind = True  # until a scope has several for certain
        for scope in self.levels():
            found = [s for s in scope.sources if s.exposes(key)]
            real = [s for s in found if s.has_column(key)]
            if real or any(not s.is_known for s in found):
                return candidates + real
            sure = [s for s in found if not s.rowid_uncertain]
            maybe = [s for s in found if s.rowid_uncertain]
            if row_keys_bind and len(sure) == 1:  # it binds here, unless a guessed one is too
                candidates.append(sure[0])
                if not maybe:
                    return candidates
            elif row_keys_bind and not sure:
                candidates += maybe  # each may be the only one
            row_keys_bind = row_keys_bind and not sure
            if key in scope.aliases:
                return candidates
        return candidates

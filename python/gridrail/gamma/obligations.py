"""Obligations: names a select list uses before its FROM clause declares them (issue 15 item 3).

`SELECT e.name, total` names a binding `e` and a column `total` that only the FROM clause
after it can provide. Each such reference is an obligation of its block. The FROM clause may
close only once every obligation is discharged — resolved as a name after FROM would be
(`gamma.environment`) — and until then every step keeps them *dischargeable*: some choice of
further FROM items discharges them all. That is what makes the mask exact rather than a
trap: a select list, a table or an alias is allowed only if the statement can still be
finished with its names bound.

Discharging is decided by a search over the tables the role sees, each added as a FROM item
under its own name or an alias. A select list's names are discharged by table (or CTE)
items; a FROM subquery may follow once they are (the binder's `_no_item_paren`), but it is
not planned for: L_Γ asks each name the select list uses to be a column of a table the role
sees, as SQL written by hand almost always does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property

from gridrail.gamma.environment import (
    Binding,
    Block,
    Column,
    Obligations,
    bare_columns,
    qualified_columns,
)

# Tables tried per search level: past this, a search that has not found a plan stops and the
# answer is "not dischargeable" — never "dischargeable" without a plan.
SEARCH_BOUND = 100_000
# FROM items per query block (L_Γ has no more): Spider's 10,169 gold query blocks have at most
# 7, and an item list is otherwise an open channel (a K = 8 candidate wrote 25 comma-joined
# items, a cross join the database had to stop)
MAX_FROM_ITEMS = 8


@dataclass(frozen=True)
class Catalog:
    """What FROM items may be added: the tables (key -> columns), whether a block may hold
    more than one item (joins in the language) and how many, and which names an added item
    may take (its own name; an alias, if the language has them and the name is one)."""

    tables: Mapping[str, Mapping[str, Column]]
    joins: bool
    aliases: bool  # may a FROM item be renamed at all
    alias_name: Callable[[str], bool]  # is this (key) a name an alias can spell

    def may_name(self, table: str, name: str) -> bool:
        return name == table or (self.aliases and self.alias_name(name))

    @cached_property
    def providers(self) -> Mapping[str, tuple[str, ...]]:
        """Per column key, the tables (keys, in catalog order) with a visible column of it: a
        search step asks for those, not every table of a catalog of thousands."""
        found: dict[str, list[str]] = {}
        for key, table in self.tables.items():
            for column_key, column in table.items():
                if column.visible:
                    found.setdefault(column_key, []).append(key)
        return {column_key: tuple(keys) for column_key, keys in found.items()}

    def named(self, name: str, columns: frozenset[str]) -> tuple[str, ...]:
        """The tables (catalog order) that a FROM item named `name` may be — the table of that
        name, or any where `name` can be an alias — and that have a visible column of each of
        `columns`."""
        if self.aliases and self.alias_name(name):
            keys = self.providers.get(min(columns), ()) if columns else tuple(self.tables)
        else:
            keys = (name,) if name in self.tables else ()
        return tuple(
            k
            for k in keys
            if all(c in self.tables[k] and self.tables[k][c].visible for c in columns)
        )


def discharged(obligations: Obligations, own: tuple[Binding, ...], outer: Block | None) -> bool:
    """Are the obligations discharged by the block's bindings `own` (its FROM closed), or by
    the blocks around it, as SQLite binds names?"""
    for qualifier, columns in obligations.qualified.items():
        named = [b for b in own if b.key == qualifier]
        if len(named) > 1 or (not columns and not named):
            return False  # two items of one name; `q.*` needs q in this very FROM clause
        for column in columns:
            if named and column in named[0].columns:
                if not named[0].columns[column].visible:
                    return False
            elif column not in qualified_columns(outer, qualifier):
                return False  # (an item named q without the column: SQLite looks outwards)
    for star in obligations.stars:  # a star reads every column of what it names
        named = own if not star else [b for b in own if b.key == star]
        if not all(_readable(b) for b in named):
            return False
    outside: dict[str, str] | None = None
    for column in obligations.bare:
        providers = [b.columns[column] for b in own if column in b.columns]
        if len(providers) > 1 or (providers and not providers[0].visible):
            return False
        if not providers:
            outside = bare_columns(outer) if outside is None else outside
            if column not in outside:
                return False
    return True


def plan(
    obligations: Obligations,
    own: tuple[Binding, ...],
    outer: Block | None,
    catalog: Catalog,
    may_add: bool,
) -> tuple[tuple[str, str | None], ...] | None:
    """FROM items — (table key, name: None for a fresh alias or the table's own name where
    aliases cannot be written) — that, added to a block whose FROM clause holds `own` so far,
    discharge its obligations (() if nothing is needed); None if none can (with tables of
    `catalog`, and only if `may_add`)."""
    if discharged(obligations, own, outer):
        return ()
    if not may_add or (own and not catalog.joins):
        return None
    return _Search(obligations, own, outer, catalog).run()


# Tables that have a bare name `witnessed` tries, in catalog order, before it leaves the
# question to the search.
WITNESS_TRIES = 8


def witnessed(
    obligations: Obligations,
    items: tuple[Binding, ...],
    outer: Block | None,
    catalog: Catalog,
    qualifier: str | None,
    column: str | None,
) -> bool:
    """Do `items` — a FROM clause's own items and the plan that discharged its obligations
    before they gained one, `qualifier.column` (`qualifier.` alone: column None; a bare
    `column`: qualifier None) — discharge `obligations` as they are, or with one more table
    (one that has the column, under that qualifier)? A plan, found without the search; where
    this finds none, `plan` decides. A select list's slots ask this of every column and table
    of a catalog of thousands, most of which one more table provides."""
    if discharged(obligations, items, outer):
        return True
    if len(items) >= MAX_FROM_ITEMS or not (catalog.joins or not items):
        return False
    taken = {b.key for b in items}
    if qualifier is not None:
        if qualifier in taken:
            return False  # the item of that name lacks the column (or another item owes it)
        owed = frozenset(obligations.qualified.get(qualifier, ()))
        found = [(key, qualifier) for key in catalog.named(qualifier, owed)[:WITNESS_TRIES]]
    elif column is not None:
        keys = catalog.providers.get(column, ())[:WITNESS_TRIES]
        found = [(key, None if catalog.aliases else key) for key in keys]
    else:
        return False
    for key, name in found:
        if name is not None and name in taken:
            continue  # its own name is taken and no alias can rename it
        binding = Binding(name, dict(catalog.tables[key]))
        if discharged(obligations, (*items, binding), outer):
            return True
    return False


def dischargeable(
    obligations: Obligations,
    own: tuple[Binding, ...],
    outer: Block | None,
    catalog: Catalog,
    may_add: bool,
) -> bool:
    """Can further FROM items (tables of `catalog`, if `may_add`) discharge the obligations
    of a block whose FROM clause holds `own` so far?"""
    return plan(obligations, own, outer, catalog, may_add) is not None


def _readable(binding: Binding) -> bool:
    """May the role read every column of the item (what a star over it reads)?"""
    return all(column.visible for column in binding.columns.values())


class _Search:
    """Backtracking: first a table for each qualifier no item is named after yet, then a
    table for each bare name nothing provides; an added table must not provide a bare name a
    second time (that would make it ambiguous)."""

    def __init__(self, obligations: Obligations, own: tuple[Binding, ...], outer, catalog):
        self.obligations, self.outer, self.catalog = obligations, outer, catalog
        self.own = own
        taken = {b.key for b in own}
        self.unbound = [q for q in obligations.qualified if q not in taken]
        self.budget = SEARCH_BOUND
        self.outside_bare = bare_columns(outer) if obligations.bare else {}
        self.added: list[tuple[str, str | None]] = []

    def run(self) -> tuple[tuple[str, str | None], ...] | None:
        # sorted: the plan (and the reserve's text) must not depend on the process's hash seed
        counts = {c: sum(c in b.columns for b in self.own) for c in sorted(self.obligations.bare)}
        return tuple(self.added) if self._qualifiers(0, self.own, counts) else None

    def _room(self, items: tuple[Binding, ...]) -> bool:
        return len(items) < MAX_FROM_ITEMS and (self.catalog.joins or not items)

    def _with(self, items: tuple[Binding, ...], counts: dict[str, int], binding: Binding):
        """(items, counts) with `binding` added, or None if it provides a bare name twice."""
        new_counts = dict(counts)
        for column in self.obligations.bare:
            if column in binding.columns:
                if new_counts[column]:
                    return None
                new_counts[column] = 1
        return (*items, binding), new_counts

    def _try(self, items, counts, binding: Binding, table: str, then) -> bool:
        grown = self._with(items, counts, binding)
        if grown is None:
            return False
        self.added.append((table, binding.key))
        if then(*grown):
            return True
        self.added.pop()
        return False

    def _qualifiers(self, index: int, items: tuple[Binding, ...], counts: dict[str, int]) -> bool:
        self.budget -= 1
        if self.budget < 0:
            return False
        if index == len(self.unbound):
            return self._bare(items, counts)
        qualifier = self.unbound[index]
        columns = self.obligations.qualified[qualifier]
        outside = qualified_columns(self.outer, qualifier)
        if (
            columns
            and all(c in outside for c in columns)
            and self._qualifiers(index + 1, items, counts)
        ):
            return True
        if not self._room(items):
            return False
        for key in self.catalog.named(qualifier, columns):
            binding = Binding(qualifier, dict(self.catalog.tables[key]))
            if (
                qualifier in self.obligations.stars or "" in self.obligations.stars
            ) and not _readable(binding):
                continue
            then = lambda i, c: self._qualifiers(index + 1, i, c)  # noqa: E731
            if self._try(items, counts, binding, key, then):
                return True
        return False

    def _bare(self, items: tuple[Binding, ...], counts: dict[str, int]) -> bool:
        self.budget -= 1
        if self.budget < 0:
            return False
        missing = next((c for c, n in counts.items() if not n and c not in self.outside_bare), None)
        if missing is None:
            return discharged(self.obligations, items, self.outer)
        if not self._room(items):
            return False
        taken = {b.key for b in items}
        for key in self.catalog.providers.get(missing, ()):
            table = self.catalog.tables[key]
            if key in taken and not self.catalog.aliases:
                continue  # its own name is taken and no alias can rename it
            binding = Binding(None if self.catalog.aliases else key, dict(table))
            if "" in self.obligations.stars and not _readable(binding):
                continue
            if self._try(items, counts, binding, key, self._bare):
                return True
        return False

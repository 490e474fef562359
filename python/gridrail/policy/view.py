"""What a role sees of a schema: its visible tables, their visible columns, its functions, and
what it may do with them (read at all, write which tables).

One place answers "may this role see table t / column c of t", for the lexicon builder (which
makes the rest unspellable) and for the semantic checker (which names what the mask cannot
enforce). Policy names are matched to catalog names with the dialect's identifier rules.

It also says how a message to the role may name a table or column (`disclosed`, `naming`): only
by a name it may see, so that nothing it is told names a hidden table or column, or says that
one exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from gridrail.policy.role import ColumnRule, Role
from gridrail.policy.schema import Column, Schema, Table


@dataclass(frozen=True)
class SchemaView:
    schema: Schema
    role: Role | None  # None: everything in the schema is visible

    @cached_property
    def tables(self) -> tuple[Table, ...]:
        """Visible tables, in catalog order."""
        return tuple(t for t in self.schema.tables if self.may_see_table(t.name))

    def may_see_table(self, catalog_name: str) -> bool:
        if self.role is None or self.role.tables is None:
            return True
        return self._key(catalog_name) in self._listed_tables

    @property
    def may_read(self) -> bool:
        """May the role read tables and columns at all (it holds select)? Without it, every
        read is a violation, in any statement: a WHERE, a SET value, RETURNING, a subquery."""
        return self.role is None or self.role.reads

    def may_hold(self, kind: str) -> bool:
        """May the role write a statement of this kind (select, insert, ...)?"""
        return self.role is None or kind in self.role.statements

    def may_write_table(self, catalog_name: str) -> bool:
        """May the role's INSERT / UPDATE / DELETE target this (visible) table?"""
        if not self.may_see_table(catalog_name):
            return False
        if self.role is None or self.role.writes is None:
            return True
        return self._key(catalog_name) in self._written_tables

    @cached_property
    def writable_tables(self) -> tuple[Table, ...]:
        """Tables the role's write statements may target, in catalog order."""
        return tuple(t for t in self.schema.tables if self.may_write_table(t.name))

    def columns(self, table: Table) -> tuple[Column, ...]:
        """Columns of a visible table that the role may see."""
        if not self.may_see_table(table.name):
            return ()
        rule = self._column_rule(table.name)
        if rule is None:
            return tuple(table.columns)
        return tuple(c for c in table.columns if self._allows(rule, c.name))

    def may_see_column(self, table_name: str, column_name: str) -> bool:
        if not self.may_see_table(table_name):
            return False
        rule = self._column_rule(table_name)
        return rule is None or self._allows(rule, column_name)

    def _allows(self, rule: ColumnRule, column_name: str) -> bool:
        allowed, denied = self._rule_keys[rule]
        column = self._key(column_name)
        return (allowed is None or column in allowed) and column not in denied

    def disclosed(
        self, table: str | None, column: str | None = None
    ) -> tuple[str | None, str | None]:
        """A table and its column (catalog spelling; no column, or "": the table itself) as a
        message to the role may name them: each only where the role may see it, else None."""
        if table is None or not self.may_see_table(table):
            return None, None
        if column and not self.may_see_column(table, column):
            return table, None
        return table, column or None

    def naming(self, table: str, column: str | None = None) -> str:
        """`disclosed` in words: `column "c" of table "t"`, `a column of table "t"` (one the
        role may not see), `table "t"`, or `a table` (one it may not see)."""
        shown, shown_column = self.disclosed(table, column)
        if shown is None:
            return "a table"
        if not column:
            return f'table "{shown}"'
        if shown_column is None:
            return f'a column of table "{shown}"'
        return f'column "{shown_column}" of table "{shown}"'

    def may_call(self, function: str) -> bool:
        """`function` lower case, as the grammar's function terminal spells it."""
        return self.role is None or self.role.may_call(function)

    def _column_rule(self, table_name: str) -> ColumnRule | None:
        if self.role is None or not self.role.columns:
            return None
        return self._rules_by_key.get(self._key(table_name))

    # The policy's names by the dialect's key of a catalog name, each list keyed once: a role
    # of an enterprise catalog lists thousands of tables, and every table and column asks.

    def _key(self, name: str) -> str:
        return self.schema.rules.catalog_key(name)

    @cached_property
    def _listed_tables(self) -> frozenset[str]:
        assert self.role is not None and self.role.tables is not None
        return frozenset(map(self._key, self.role.tables))

    @cached_property
    def _written_tables(self) -> frozenset[str]:
        assert self.role is not None and self.role.writes is not None
        return frozenset(map(self._key, self.role.writes))

    @cached_property
    def _rules_by_key(self) -> dict[str, ColumnRule]:
        """Each table's column rule by its key (the first rule of a key: a policy names a
        table once, `Policy.check_against_schema`)."""
        assert self.role is not None
        by_key: dict[str, ColumnRule] = {}
        for name, rule in self.role.columns.items():
            by_key.setdefault(self._key(name), rule)
        return by_key

    @cached_property
    def _rule_keys(self) -> dict[ColumnRule, tuple[frozenset[str] | None, frozenset[str]]]:
        """Per column rule: its allow-list's keys (None: every column) and its deny-list's."""
        assert self.role is not None
        return {
            rule: (
                None if rule.allow is None else frozenset(map(self._key, rule.allow)),
                frozenset(map(self._key, rule.deny)),
            )
            for rule in self.role.columns.values()
        }

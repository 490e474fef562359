"""What a role sees of a schema: its visible tables, their visible columns, its functions.

One place answers "may this role see table t / column c of t", for the lexicon builder (which
makes the rest unspellable) and for the semantic checker (which names what the mask cannot
enforce). Policy names are matched to catalog names with the dialect's identifier rules.
"""

from __future__ import annotations

from dataclasses import dataclass

from gridrail.policy.role import ColumnRule, Role
from gridrail.policy.schema import Column, Schema, Table


@dataclass(frozen=True)
class SchemaView:
    schema: Schema
    role: Role | None  # None: everything in the schema is visible

    @property
    def tables(self) -> tuple[Table, ...]:
        """Visible tables, in catalog order."""
        return tuple(t for t in self.schema.tables if self.may_see_table(t.name))

    def may_see_table(self, catalog_name: str) -> bool:
        if self.role is None or self.role.tables is None:
            return True
        key = self.schema.rules.catalog_key(catalog_name)
        return any(self.schema.rules.catalog_key(t) == key for t in self.role.tables)

    def columns(self, table: Table) -> tuple[Column, ...]:
        """Columns of a visible table that the role may see."""
        return tuple(c for c in table.columns if self.may_see_column(table.name, c.name))

    def may_see_column(self, table_name: str, column_name: str) -> bool:
        if not self.may_see_table(table_name):
            return False
        rule = self._column_rule(table_name)
        if rule is None:
            return True
        key = self.schema.rules.catalog_key
        column = key(column_name)
        if rule.allow is not None and all(key(c) != column for c in rule.allow):
            return False
        return all(key(c) != column for c in rule.deny)

    def may_call(self, function: str) -> bool:
        """`function` lower case, as the grammar's function terminal spells it."""
        return self.role is None or self.role.functions is None or function in self.role.functions

    def _column_rule(self, table_name: str) -> ColumnRule | None:
        if self.role is None:
            return None
        key = self.schema.rules.catalog_key
        wanted = key(table_name)
        for name, rule in self.role.columns.items():
            if key(name) == wanted:
                return rule
        return None

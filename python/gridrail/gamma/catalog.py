"""The names Γ resolves against: each table the role sees and, per column, whether the role
may read it, and the tables its writes may target — what the binder needs of a schema view, as
data that an archive can hold (so a log written under Γ replays without the database)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property

from gridrail.canonical import canonical_json
from gridrail.errors import UsageError
from gridrail.policy.dialect import RULES, IdentifierRules
from gridrail.policy.view import SchemaView

FORMAT = "gridrail-names-v2"  # v2: the tables writes may target


@dataclass(frozen=True)
class NameCatalog:
    dialect: str
    tables: tuple[tuple[str, tuple[tuple[str, bool], ...]], ...]  # (table, ((column, visible),))
    writes: tuple[str, ...] = ()  # tables an INSERT / UPDATE / DELETE may target (of `tables`)

    @classmethod
    def from_view(cls, view: SchemaView) -> NameCatalog:
        tables = tuple(
            (
                table.name,
                tuple((c.name, view.may_see_column(table.name, c.name)) for c in table.columns),
            )
            for table in view.tables
        )
        writer = view.role is None or bool(view.role.write_kinds)
        writes = tuple(t.name for t in view.writable_tables) if writer else ()
        return cls(view.schema.dialect, tables, writes)

    @property
    def rules(self) -> IdentifierRules:
        return RULES[self.dialect]

    def to_json(self) -> str:
        """The canonical text (what the fingerprint is of)."""
        doc = {
            "format": FORMAT,
            "dialect": self.dialect,
            "tables": [[t, [[c, v] for c, v in columns]] for t, columns in self.tables],
            "writes": list(self.writes),
        }
        return canonical_json(doc)

    @classmethod
    def from_json(cls, text: str) -> NameCatalog:
        """Read `to_json`'s text back (UsageError on anything else)."""
        try:
            doc = json.loads(text)
            if doc.get("format") != FORMAT or doc["dialect"] not in RULES:
                raise ValueError("not a name catalog")
            tables = tuple(
                (str(t), tuple((str(c), bool(v)) for c, v in columns))
                for t, columns in doc["tables"]
            )
            writes = tuple(str(t) for t in doc["writes"])
        except (ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"not a {FORMAT} name catalog: {exc}") from None
        return cls(doc["dialect"], tables, writes)

    @cached_property
    def fingerprint(self) -> str:
        return hashlib.blake2b(self.to_json().encode(), digest_size=16).hexdigest()

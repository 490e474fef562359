"""A role: what one kind of caller may say (statement kinds, constructs, tables, the tables it
may write, columns, functions, the rung of the names ladder). Loaded from a policy bundle
(`gridrail.policy.bundle`); names are catalog spellings, compared with the dialect's identifier
rules."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gridrail.errors import PolicyError

READ_KIND = "select"
"""The statement kind that grants reading: a role without it may not read any table or column,
in any statement (catalogues name their reading capability's requirement so)."""

NAME_RUNGS = ("bound", "open")
"""The rungs of the names ladder a role may stand on (docs/names.md): "bound" — a name is
allowed only where it binds, by the dialect's rules, to what the role may see (Γ); "open" —
any of the role's words at every name position (the lexicons alone)."""


@dataclass(frozen=True)
class ColumnRule:
    """Columns of one table a role may see: an allow-list (None: every column) minus a
    deny-list. A policy gives one of the two lists, never both."""

    allow: frozenset[str] | None = None
    deny: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Role:
    name: str
    statements: frozenset[str]  # statement kinds of the grammar's catalogue: select, insert, ...
    banned: frozenset[str] = frozenset()  # construct names of the grammar's catalogue
    tables: frozenset[str] | None = None  # visible tables; None: every table of the schema
    columns: Mapping[str, ColumnRule] = field(default_factory=dict)  # by table name
    functions: frozenset[str] | None = None  # callable functions (lower case); None: all
    line: int = 0  # where the role is defined in its policy file (for error messages)
    writes: frozenset[str] | None = None  # tables its write kinds may target; None: visible ones
    names: str | None = None  # its rung of the names ladder (`NAME_RUNGS`); None: the caller's
    # functions its banned constructs are under another spelling (`like(…)` of a role that bans
    # pattern_matching: `ConstructCatalogue.construct_functions`): never callable
    barred: frozenset[str] = frozenset()

    def may_call(self, function: str) -> bool:
        """`function` lower case, as the grammar's function terminal spells it."""
        listed = self.functions is None or function in self.functions
        return listed and function not in self.barred

    @property
    def reads(self) -> bool:
        """May it read tables and columns at all (does it hold select)?"""
        return READ_KIND in self.statements

    @property
    def write_kinds(self) -> frozenset[str]:
        """The statement kinds it holds that change data."""
        return self.statements - {READ_KIND}


def binds_names(role: Role | None, requested: bool | None, default: bool) -> bool:
    """Does a guide for `role` track the names its statements declare (Γ, the "bound" rung)?
    The caller's choice (`requested`) where it gives one, else the role's rung, else `default`
    — but a caller may only tighten: a role whose policy says "bound" is never compiled
    open (PolicyError)."""
    rung = None if role is None else role.names
    if requested is False and role is not None and rung == "bound":
        raise PolicyError(
            f'role {role.name!r} binds its names (names = "bound" in its policy): a guide for '
            "it tracks them (gamma=True, or leave it to the policy; the CLI's --bound-names)",
            line=role.line,
        )
    if requested is not None:
        return requested
    return default if rung is None else rung == "bound"

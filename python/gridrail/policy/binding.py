"""Which names each clause of a statement can reach, as SQLite binds them: one table read by the
semantic checker (`gridrail.check.checker`, on finished statements) and by Γ
(`gridrail.gamma.binder`, at the mask), so the two cannot drift apart — the GROUP BY / ORDER BY
rule was once in the checker and missing from Γ.

Keys are the grammar's rule names for the clauses; a clause not listed (the select list, WHERE
of a SELECT, ON, SET values) reaches its query's names and the queries around it.
tests/test_gamma.py binds every row to SQLite itself (an outer name in each clause)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum


class Reach(Enum):
    ENCLOSING = "enclosing"  # its query's names, then the queries around it (correlation)
    OWN = "own"  # its query's names only: SQLite does not look into outer queries there
    NONE = "none"  # no column name at all
    TARGET = "target"  # a write's target under its table name, nothing else


CLAUSE_REACH: Mapping[str, Reach] = {
    "where_clause": Reach.ENCLOSING,
    "having_clause": Reach.ENCLOSING,
    "group_by_clause": Reach.OWN,  # its terms and the subqueries inside them
    "order_by_clause": Reach.OWN,
    "limit_clause": Reach.NONE,  # LIMIT and OFFSET
    "returning_clause": Reach.TARGET,  # an alias of the target does not reach it either
}

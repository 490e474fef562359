"""Chat prompts for SQL generation, built from what the role sees of the schema — never from
the rest of it: a table or column the role may not see is not even named to the model."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gridrail.check.checker import Violation
from gridrail.policy.view import SchemaView

_DIALECT_NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL", "duckdb": "DuckDB"}
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def schema_text(view: SchemaView) -> str:
    """The visible tables as CREATE TABLE statements with their visible columns."""
    rules = view.schema.rules
    lines = []
    for table in view.tables:
        columns = ", ".join(
            f"{_name(c.name, rules.bare_may_denote)} {c.type}".rstrip() for c in view.columns(table)
        )
        lines.append(f"CREATE TABLE {_name(table.name, rules.bare_may_denote)} ({columns});")
    return "\n".join(lines)


def question_messages(view: SchemaView, question: str) -> list[dict[str, str]]:
    """System and user messages asking for one statement that answers `question`."""
    dialect = _DIALECT_NAMES.get(view.schema.dialect, view.schema.dialect)
    kinds = sorted(view.role.statements) if view.role is not None else ["any"]
    system = (
        f"You write {dialect} SQL. Answer with exactly one SQL statement and nothing else.\n"
        f"Statements you may write: {', '.join(k.upper() for k in kinds)}.\n"
        f"The database:\n{schema_text(view)}"
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


def repair_messages(
    messages: Sequence[dict[str, str]], sql: str, violations: Sequence[Violation]
) -> list[dict[str, str]]:
    """`messages` followed by the rejected answer and the violations quoted back, asking for a
    corrected statement (the one repair retry)."""
    problems = "\n".join(f"- {v.message}" for v in violations)
    return [
        *messages,
        {"role": "assistant", "content": sql},
        {
            "role": "user",
            "content": f"That statement is not allowed:\n{problems}\n"
            "Write a corrected statement that answers the question.",
        },
    ]


def _name(name: str, bare_may_denote) -> str:
    if _PLAIN.fullmatch(name) and bare_may_denote(name):
        return name
    return '"' + name.replace('"', '""') + '"'

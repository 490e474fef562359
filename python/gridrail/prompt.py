"""Chat prompts for SQL generation, built from what the role sees of the schema — never from
the rest of it: a table or column the role may not see is not even named to the model.

The prompt ends where the statement begins: the assistant's turn is opened with a ```sql fence
(`ANSWER_PREFIX`), so the first token the model samples is SQL, not the prose opening of a chat
answer ("In this query…"), which the mask would otherwise steer into a keyword.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from gridrail.policy.dialect import DATABASE_NAMES
from gridrail.policy.schema import Table
from gridrail.policy.view import SchemaView

ANSWER_PREFIX = "```sql\n"
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_VALUE_CHARS = 40  # a sample value longer than this is cut: rows show shape, not documents

Samples = Mapping[str, Sequence[tuple]]
"""Per visible table (catalog name), a few of its rows over its visible columns, in order."""


def schema_text(
    view: SchemaView, samples: Samples | None = None, tables: Sequence[Table] | None = None
) -> str:
    """The visible tables (or those of them in `tables`) as CREATE TABLE statements with their
    visible columns, each followed by its sample rows when `samples` has some."""
    rules = view.schema.rules
    lines = []
    for table in view.tables if tables is None else tables:
        visible = view.columns(table)
        columns = ", ".join(
            f"{_name(c.name, rules.bare_may_denote)} {c.type}".rstrip() for c in visible
        )
        lines.append(f"CREATE TABLE {_name(table.name, rules.bare_may_denote)} ({columns});")
        rows = (samples or {}).get(table.name, ())
        if rows:
            lines.append(f"/* {len(rows)} rows of {table.name}:")
            lines.append("\t".join(c.name for c in visible))
            lines.extend("\t".join(_value(v) for v in row) for row in rows)
            lines.append("*/")
    return "\n".join(lines)


def question_messages(
    view: SchemaView,
    question: str,
    samples: Samples | None = None,
    tables: Sequence[Table] | None = None,
    examples: Sequence[tuple[str, str]] = (),
) -> list[dict[str, str]]:
    """System and user messages asking for one statement that answers `question`, showing the
    visible tables (those of `tables`, when given: `linking.link_tables`), after `examples`
    (question, statement) as earlier turns of the chat (`worked_examples`)."""
    dialect = DATABASE_NAMES.get(view.schema.dialect, view.schema.dialect)
    kinds = sorted(view.role.statements) if view.role is not None else ["any"]
    system = (
        f"You write {dialect} SQL. Answer with exactly one SQL statement and nothing else.\n"
        f"Statements you may write: {', '.join(k.upper() for k in kinds)}.\n"
        f"The database:\n{schema_text(view, samples, tables)}"
    )
    turns = []
    for asked, sql in examples:
        turns.append({"role": "user", "content": asked})
        turns.append({"role": "assistant", "content": f"{ANSWER_PREFIX}{sql}\n```"})
    return [{"role": "system", "content": system}, *turns, {"role": "user", "content": question}]


def worked_examples(
    view: SchemaView, tables: Sequence[Table] | None = None, count: int = 3
) -> list[tuple[str, str]]:
    """Up to `count` (question, statement) pairs over the shown tables (`tables`, else every
    visible one) — in turn a count, a count per group, a superlative, each over the next table
    that has the columns it needs — built from what the role sees, so a small model has seen
    the shapes of common answers (GROUP BY for "each") on this very schema. The caller drops
    those its role's language does not hold."""
    shown = [t for t in (view.tables if tables is None else tables) if view.columns(t)]
    out: list[tuple[str, str]] = []
    for i in range(count if shown else 0):
        turn = i % len(shown)
        for table in shown[turn:] + shown[:turn]:
            made = _example(view, table, i % 3)
            if made is not None and made not in out:
                out.append(made)
                break
    return out


def _example(view: SchemaView, table: Table, shape: int) -> tuple[str, str] | None:
    """A question of `shape` (0 count, 1 count per group, 2 superlative) over `table`, with
    its statement; None if the table lacks the columns the shape needs."""
    spell = view.schema.rules.bare_may_denote
    columns = [c for c in view.columns(table) if c.name != table.rowid_column]
    name, label = _name(table.name, spell), _words(table.name)
    if shape == 0:
        return f"How many {label} are there?", f"SELECT COUNT(*) FROM {name};"
    group = next((c for c in columns if _is_text(c.type)), None)
    if group is None:
        return None
    g = _name(group.name, spell)
    if shape == 1:
        asked = f"How many {label} are there for each {_words(group.name)}?"
        return asked, f"SELECT {g}, COUNT(*) FROM {name} GROUP BY {g};"
    number = next((c for c in columns if _is_number(c.type)), None)
    if number is None:
        return None
    n = _name(number.name, spell)
    asked = f"Which {_words(group.name)} has the highest {_words(number.name)}?"
    return asked, f"SELECT {g} FROM {name} ORDER BY {n} DESC LIMIT 1;"


def repair_messages(
    messages: Sequence[dict[str, str]], sql: str, problems: Sequence[str]
) -> list[dict[str, str]]:
    """`messages` followed by the rejected answer and its `problems` (the checker's violations,
    or the database's error) quoted back, asking for a corrected statement (the one retry)."""
    listed = "\n".join(f"- {p}" for p in problems)
    return [
        *messages,
        {"role": "assistant", "content": f"{ANSWER_PREFIX}{sql}\n```"},
        {
            "role": "user",
            "content": f"That statement is not allowed or does not run:\n{listed}\n"
            "Write a corrected statement that answers the question.",
        },
    ]


def _words(name: str) -> str:
    return name.replace("_", " ").strip().lower() or name


def _is_text(declared: str) -> bool:
    upper = declared.upper()  # SQLite's affinity rules; other dialects' text types read alike
    return any(k in upper for k in ("CHAR", "TEXT", "CLOB", "STRING")) or not upper


def _is_number(declared: str) -> bool:
    upper = declared.upper()
    return any(k in upper for k in ("INT", "REAL", "FLOA", "DOUB", "NUM", "DEC"))


def _value(value: object) -> str:
    text = "NULL" if value is None else str(value)
    text = text.replace("\t", " ").replace("\n", " ")
    return text if len(text) <= _MAX_VALUE_CHARS else text[: _MAX_VALUE_CHARS - 1] + "…"


def _name(name: str, bare_may_denote) -> str:
    if _PLAIN.fullmatch(name) and bare_may_denote(name):
        return name
    return '"' + name.replace('"', '""') + '"'

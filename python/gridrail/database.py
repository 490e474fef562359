"""The database a question is about: recognised from `--db`, snapshotted for the lexicons and
used to run the answer (`gridrail ask --execute`).

`--db` is a SQLite file (any name), a DuckDB file (`.duckdb`, `.ddb`) or a PostgreSQL DSN
(`postgresql://…` or libpq `key=value` words). Statements run read-only unless the role may
write, so even a statement the checker missed cannot change data it was not allowed to.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from gridrail.errors import GridrailError
from gridrail.policy.schema import Schema


class DatabaseError(GridrailError):
    """A database cannot be opened, or a statement failed on it (the message has the
    database's own words)."""


@dataclass(frozen=True)
class QueryResult:
    columns: tuple[str, ...]  # empty for a statement that returns no rows
    rows: tuple[tuple, ...]
    changed: int  # rows changed by a write (-1 when the database does not say)


@dataclass(frozen=True)
class Database:
    kind: str  # "sqlite" | "duckdb" | "postgres"
    location: str  # a file path or a DSN

    @classmethod
    def open(cls, ref: str) -> Database:
        if ref.startswith(("postgresql://", "postgres://")) or "=" in ref:
            return cls("postgres", ref)
        path = Path(ref)
        if not path.is_file():
            raise DatabaseError(f"no such database file: {ref}")
        kind = "duckdb" if path.suffix.lower() in (".duckdb", ".ddb") else "sqlite"
        return cls(kind, str(path))

    def schema(self) -> Schema:
        if self.kind == "postgres":
            return Schema.from_postgres(self.location)
        if self.kind == "duckdb":
            return Schema.from_duckdb(self.location)
        return Schema.from_sqlite(self.location)

    def execute(self, sql: str, *, read_only: bool = True) -> QueryResult:
        runner = {"sqlite": _sqlite, "duckdb": _duckdb, "postgres": _postgres}[self.kind]
        return runner(self.location, sql, read_only)


def _sqlite(path: str, sql: str, read_only: bool) -> QueryResult:
    uri = f"{Path(path).resolve().as_uri()}?mode={'ro' if read_only else 'rw'}"
    try:
        with closing(sqlite3.connect(uri, uri=True)) as db:
            cursor = db.execute(sql)
            result = _result(cursor.description, cursor.fetchall(), cursor.rowcount)
            db.commit()
            return result
    except sqlite3.Error as exc:
        raise DatabaseError(f"SQLite: {exc}") from None


def _duckdb(path: str, sql: str, read_only: bool) -> QueryResult:
    import duckdb

    try:
        with duckdb.connect(path, read_only=read_only) as conn:
            cursor = conn.execute(sql)
            rows = cursor.fetchall() if cursor.description else []
            return _result(cursor.description, rows, -1)
    except duckdb.Error as exc:
        raise DatabaseError(f"DuckDB: {exc}") from None


def _postgres(dsn: str, sql: str, read_only: bool) -> QueryResult:
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            conn.read_only = read_only
            cursor = conn.execute(sql)
            rows = cursor.fetchall() if cursor.description else []
            return _result(cursor.description, rows, cursor.rowcount)
    except psycopg.Error as exc:
        raise DatabaseError(f"PostgreSQL: {str(exc).strip()}") from None


def _result(description, rows: Sequence[tuple], changed: int) -> QueryResult:
    columns = tuple(d[0] for d in description) if description else ()
    return QueryResult(columns, tuple(tuple(r) for r in rows), changed if not columns else -1)


def format_table(result: QueryResult, max_rows: int = 50) -> str:
    """The rows as an aligned text table (at most `max_rows`, then a count of the rest)."""
    if not result.columns:
        return f"{result.changed} row(s) changed" if result.changed >= 0 else "done"
    shown = [tuple("NULL" if v is None else str(v) for v in row) for row in result.rows[:max_rows]]
    widths = [max([len(c), *(len(r[i]) for r in shown)]) for i, c in enumerate(result.columns)]
    line = "  ".join

    def cells(values: Sequence[str]) -> str:
        return line(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()

    out = [cells(result.columns), line("-" * w for w in widths)]
    out += [cells(r) for r in shown]
    rest = len(result.rows) - len(shown)
    out.append(
        f"({len(result.rows)} row{'s' if len(result.rows) != 1 else ''}"
        + (f", {rest} not shown)" if rest else ")")
    )
    return "\n".join(out)

"""Schema snapshots: the tables and columns of a live catalog, read once and then held fixed.

The schema lexicon (L3) is compiled from a snapshot, so the snapshot must say exactly what the
catalog holds (names in the catalog's own spelling, columns in the order `SELECT *` returns them)
and carry a fingerprint that changes whenever that content does: a compiled guide is valid for
one fingerprint. Readers exist for SQLite files, PostgreSQL servers and DuckDB files; each opens
the catalog read-only and turns every way it can fail into a `SchemaError` that names the source.
Names are matched to what SQL text writes with the dialect's identifier rules
(`gridrail.policy.dialect`).
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from gridrail.errors import SchemaError
from gridrail.policy.dialect import IdentifierRules, identifier_rules

_FINGERPRINT_FORMAT = "gridrail.schema.v1"


@dataclass(frozen=True)
class Column:
    name: str  # catalog spelling
    type: str  # declared type as the catalog reports it ("" if none)


@dataclass(frozen=True)
class Table:
    name: str  # catalog spelling
    columns: tuple[Column, ...]  # catalog order
    is_view: bool = False

    def column(self, written: str, rules: IdentifierRules) -> Column | None:
        """The column that `written` (an identifier as SQL text writes it, quotes allowed)
        denotes under `rules`, or None."""
        return next((c for c in self.columns if rules.denotes(written, c.name)), None)


@dataclass(frozen=True)
class Schema:
    dialect: str  # "sqlite" | "postgres" | "duckdb"
    tables: tuple[Table, ...]  # catalog order; by name where the catalog has none
    source: str  # where it was read: a file path, or a DSN without its password

    def __post_init__(self) -> None:
        rules = self.rules  # also rejects an unknown dialect
        _require_distinct((t.name for t in self.tables), rules, f"{self.source}: tables")
        for table in self.tables:
            where = f"{self.source}: columns of table {table.name!r}"
            _require_distinct((c.name for c in table.columns), rules, where)

    @property
    def rules(self) -> IdentifierRules:
        return identifier_rules(self.dialect)

    def table(self, written: str) -> Table | None:
        """The table or view that `written` (as SQL text writes it, quotes allowed) denotes."""
        return next((t for t in self.tables if self.rules.denotes(written, t.name)), None)

    @property
    def fingerprint(self) -> str:
        """BLAKE2b-128 (hex) of the canonical encoding: compact JSON (sorted keys, ASCII) of
        ``{"format": "gridrail.schema.v1", "dialect": ..., "tables": [[name, is_view,
        [[column, type], ...]], ...]}`` with tables sorted by name (code points) and columns in
        catalog order. Column order is part of the language (`SELECT *`), table order is not;
        `source` is left out, so one catalog read through two paths or DSNs fingerprints alike.
        """
        doc = {
            "format": _FINGERPRINT_FORMAT,
            "dialect": self.dialect,
            "tables": [
                [t.name, t.is_view, [[c.name, c.type] for c in t.columns]]
                for t in sorted(self.tables, key=lambda t: t.name)
            ],
        }
        text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()

    @classmethod
    def from_tables(cls, dialect: str, tables: Mapping[str, Sequence[str]]) -> Schema:
        """A schema written out by hand (tests, examples): table name → column names, in order;
        every column's type is ""."""
        built = [Table(name, tuple(Column(c, "") for c in cols)) for name, cols in tables.items()]
        return _snapshot(dialect, built, "<tables>", "give at least one table")

    @classmethod
    def from_sqlite(cls, path: str | Path) -> Schema:
        """Tables and views of a SQLite file, in `sqlite_master` order (SQLite's internal
        `sqlite_*` tables left out). The file is opened read-only, so reading never creates or
        changes a database. Columns come from `pragma table_xinfo`, which, unlike
        `table_info`, includes generated columns; the hidden columns of virtual tables are left
        out, as `SELECT *` leaves them out."""
        file = Path(path)
        source = str(path)
        _require_file(file, source, "SQLite")
        uri = f"{file.resolve().as_uri()}?mode=ro"
        try:
            with closing(sqlite3.connect(uri, uri=True)) as db:
                objects = _sqlite_objects(db)
                tables = [_sqlite_table(db, name, kind, source) for name, kind in objects]
        except sqlite3.Error as e:
            raise SchemaError(
                f"{source}: cannot read the SQLite catalog ({e}); is it a SQLite database file?"
            ) from None
        return _snapshot("sqlite", tables, source, "is it the database you meant?")

    @classmethod
    def from_postgres(cls, dsn: str, schema: str = "public") -> Schema:
        """Tables and views of one PostgreSQL schema (`schema` in catalog spelling), from
        `information_schema`, in a read-only session. Tables are sorted by name, columns are
        in `ordinal_position` order; a column of a user-defined type reports that type's name.
        `information_schema` lists only what the connecting role holds some privilege on, and
        no materialized views."""
        psycopg = _require_module("psycopg", "psycopg[binary]", "PostgreSQL")
        params = _conninfo(psycopg, dsn)
        shown = {k: v for k, v in params.items() if k != "password"}
        source = psycopg.conninfo.make_conninfo(**shown) or "<libpq defaults>"
        params.setdefault("connect_timeout", "10")
        try:
            with psycopg.connect(psycopg.conninfo.make_conninfo(**params)) as conn:
                conn.read_only = True
                rows = _postgres_rows(conn, schema, source)
        except psycopg.Error as e:
            raise SchemaError(
                f"{source}: cannot read the PostgreSQL catalog ({str(e).strip()}); "
                "check that the server runs and the DSN's host, port, user and dbname"
            ) from None
        hint = f"is {schema!r} the schema you meant, and may this role read its tables?"
        return _snapshot("postgres", _group(rows), source, hint)

    @classmethod
    def from_duckdb(cls, path: str | Path, schema: str = "main") -> Schema:
        """Tables and views of one schema (`schema` in catalog spelling) of a DuckDB file,
        opened read-only, from `information_schema`: tables sorted by name, columns in
        `ordinal_position` order."""
        duckdb = _require_module("duckdb", "duckdb", "DuckDB")
        source = str(path)
        _require_file(Path(path), source, "DuckDB")
        try:
            with duckdb.connect(source, read_only=True) as conn:
                rows = _duckdb_rows(conn, schema, source)
        except duckdb.Error as e:
            raise SchemaError(
                f"{source}: cannot read the DuckDB catalog ({e}); is it a DuckDB database file "
                "that no other process has open for writing?"
            ) from None
        return _snapshot("duckdb", _group(rows), source, f"is {schema!r} the schema you meant?")


def _snapshot(dialect: str, tables: list[Table], source: str, hint: str) -> Schema:
    """A `Schema`, refusing an empty one: a lexicon without table names admits no query, which
    is never what the caller meant."""
    if not tables:
        raise SchemaError(f"{source}: the catalog has no tables or views; {hint}")
    return Schema(dialect, tuple(tables), source)


def _require_distinct(names: Iterable[str], rules: IdentifierRules, what: str) -> None:
    """Two names that one identifier could denote make every reference to either ambiguous."""
    seen: dict[str, str] = {}
    for name in names:
        key = rules.catalog_key(name)
        if key in seen:
            raise SchemaError(
                f"{what} {seen[key]!r} and {name!r} are the same name in {rules.dialect}; "
                "rename one of them"
            )
        seen[key] = name


def _require_file(path: Path, source: str, kind: str) -> None:
    """Check before connecting: the drivers' own "unable to open" does not say why."""
    if not path.is_file():
        problem = "not a file" if path.exists() else "no such file"
        raise SchemaError(f"{source}: {problem}; give the path of a {kind} database file")


def _require_module(module: str, package: str, what: str) -> ModuleType:
    """Import a database driver only when its catalog is read: each is an optional extra."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise SchemaError(
            f"reading a {what} catalog needs the {package!r} package: pip install '{package}'"
        ) from None


def _sqlite_objects(db: sqlite3.Connection) -> list[tuple[str, str]]:
    return db.execute(
        "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')"
        " AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid"
    ).fetchall()


def _sqlite_table(db: sqlite3.Connection, name: str, kind: str, source: str) -> Table:
    """One table or view; a view over a dropped table has no columns to read."""
    try:
        rows = db.execute(
            "SELECT name, type FROM pragma_table_xinfo(?) WHERE hidden != 1 ORDER BY cid", (name,)
        ).fetchall()
    except sqlite3.Error as e:
        raise SchemaError(
            f"{source}: cannot read the columns of {kind} {name!r} ({e}); fix or drop it"
        ) from None
    return Table(name, tuple(Column(n, t) for n, t in rows), is_view=kind == "view")


def _conninfo(psycopg: ModuleType, dsn: str) -> dict[str, str]:
    """The DSN's parameters (key=value or URI form), so the password can be left out of every
    message and `source`."""
    try:
        return psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error as e:
        raise SchemaError(f"cannot parse the PostgreSQL DSN ({str(e).strip()})") from None


# (table, is view, column, type) rows; a table without columns has one row with column NULL.
_POSTGRES_COLUMNS = """
SELECT t.table_name, t.table_type = 'VIEW', c.column_name,
       CASE c.data_type WHEN 'USER-DEFINED' THEN c.udt_name ELSE c.data_type END
FROM information_schema.tables t
LEFT JOIN information_schema.columns c
  ON c.table_schema = t.table_schema AND c.table_name = t.table_name
WHERE t.table_schema = %s
ORDER BY t.table_name COLLATE "C", c.ordinal_position
"""


def _postgres_rows(conn: Any, schema: str, source: str) -> list[tuple]:
    """Reject a schema that does not exist (rather than report it empty), then read it."""
    found = conn.execute("SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = %s", (schema,))
    if found.fetchone() is None:
        raise SchemaError(f"{source}: schema {schema!r} does not exist; give its catalog spelling")
    return conn.execute(_POSTGRES_COLUMNS, (schema,)).fetchall()


_DUCKDB_COLUMNS = """
SELECT t.table_name, t.table_type = 'VIEW', c.column_name, c.data_type
FROM information_schema.tables t
LEFT JOIN information_schema.columns c
  ON c.table_catalog = t.table_catalog AND c.table_schema = t.table_schema
     AND c.table_name = t.table_name
WHERE t.table_catalog = current_database() AND t.table_schema = ?
ORDER BY t.table_name, c.ordinal_position
"""


def _duckdb_rows(conn: Any, schema: str, source: str) -> list[tuple]:
    found = conn.execute(
        "SELECT 1 FROM information_schema.schemata"
        " WHERE catalog_name = current_database() AND schema_name = ?",
        (schema,),
    )
    if found.fetchone() is None:
        raise SchemaError(f"{source}: schema {schema!r} does not exist; give its catalog spelling")
    return conn.execute(_DUCKDB_COLUMNS, (schema,)).fetchall()


def _group(rows: list[tuple]) -> list[Table]:
    """Tables from (table, is view, column, type) rows ordered by table, then column."""
    return [
        Table(
            name,
            tuple(Column(col, typ or "") for _, _, col, typ in group if col is not None),
            is_view=bool(is_view),
        )
        for (name, is_view), group in itertools.groupby(rows, key=lambda r: (r[0], r[1]))
    ]

"""Schema snapshots read from real catalogs: Spider's SQLite files, DuckDB files built here, and a
throwaway PostgreSQL server (tests/postgres_server.py). No mocks: every reader meets the driver
and the catalog it is written for."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import duckdb
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from assets import asset
from gridrail.errors import SchemaError
from gridrail.policy.dialect import ascii_lower
from gridrail.policy.schema import Column, Schema, Table
from postgres_server import free_port


def spider(db: str) -> Path:
    return asset("data", "spider", "database", db, f"{db}.sqlite")


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def make_sqlite(path: Path, script: str) -> Path:
    with closing(sqlite3.connect(path)) as db:
        db.executescript("PRAGMA synchronous = OFF;" + script)  # a test file: no fsync
    return path


# ----- SQLite ---------------------------------------------------------------------------------

# aircraft: `%_Change_2007`; perpetrator: `Home Town`; tracking_grants_for_research: `eg Agree
# Objectives`; chinook_1: CamelCase tables; sakila_1: many tables, untyped columns.
SPIDER_DBS = ["aircraft", "perpetrator", "tracking_grants_for_research", "chinook_1", "sakila_1"]


@pytest.mark.parametrize("db", SPIDER_DBS)
def test_sqlite_snapshot_is_what_sqlite_reports(db: str) -> None:
    path = spider(db)
    schema = Schema.from_sqlite(path)
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as conn:
        names = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_schema WHERE type IN ('table', 'view') ORDER BY rowid"
            )
            if not name.startswith("sqlite_")
        ]
        assert [t.name for t in schema.tables] == names
        for table in schema.tables:
            # what `SELECT *` returns, and the declared types `table_info` reports
            star = conn.execute(f"SELECT * FROM {quote(table.name)} LIMIT 0").description
            assert [c.name for c in table.columns] == [d[0] for d in star]
            info = conn.execute("SELECT name, type FROM pragma_table_info(?)", (table.name,))
            assert table.columns == tuple(Column(n, t) for n, t in info)
            assert not table.is_view
    assert schema.dialect == "sqlite"
    assert schema.source == str(path)


def test_sqlite_reading_leaves_the_file_untouched() -> None:
    path = spider("perpetrator")
    before = hashlib.blake2b(path.read_bytes()).digest()
    Schema.from_sqlite(path)
    assert hashlib.blake2b(path.read_bytes()).digest() == before


def test_sqlite_names_match_case_insensitively_in_every_quote_style() -> None:
    schema = Schema.from_sqlite(spider("perpetrator"))
    for written in ["people", "PEOPLE", '"people"', '"PeOpLe"', "[people]", "`People`"]:
        assert schema.table(written) is schema.tables[1], written
    people = schema.tables[1]
    for written in ['"Home Town"', '"home town"', "[HOME TOWN]", "`Home Town`"]:
        assert people.column(written, schema.rules) == Column("Home Town", "TEXT"), written
    assert people.column("Name", schema.rules) == Column("Name", "TEXT")
    assert schema.table("persons") is None
    assert schema.table('"people') is None  # an unclosed quote is part of the name
    assert people.column('"Home_Town"', schema.rules) is None


def test_sqlite_names_that_need_quoting() -> None:
    schema = Schema.from_sqlite(spider("aircraft"))
    airport = schema.table("AIRPORT")
    assert airport is not None
    assert airport.column('"%_change_2007"', schema.rules) == Column("%_Change_2007", "TEXT")
    chinook = Schema.from_sqlite(spider("chinook_1"))
    assert chinook.table("invoiceline").name == "InvoiceLine"


def test_sqlite_views_generated_columns_and_untyped_columns(tmp_path: Path) -> None:
    path = make_sqlite(
        tmp_path / "db.sqlite",
        """
        CREATE TABLE staff (id INTEGER PRIMARY KEY, "Full Name" VARCHAR(40), note,
                            tag TEXT GENERATED ALWAYS AS ('#' || id));
        CREATE VIEW named AS SELECT id, "Full Name", id + 1 AS next FROM staff;
        CREATE TABLE log (id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT);
        """,
    )
    schema = Schema.from_sqlite(path)
    assert schema.tables == (
        Table(
            "staff",
            (
                Column("id", "INTEGER"),
                Column("Full Name", "VARCHAR(40)"),
                Column("note", ""),
                Column("tag", "TEXT"),
            ),
            has_rowid=True,
            rowid_column="id",  # rowid is its INTEGER PRIMARY KEY
        ),
        Table(
            "named",
            (Column("id", "INTEGER"), Column("Full Name", "VARCHAR(40)"), Column("next", "")),
            is_view=True,
            has_rowid=_views_have_rowid(),
        ),
        Table(  # no sqlite_sequence
            "log",
            (Column("id", "INTEGER"), Column("at", "TEXT")),
            has_rowid=True,
            rowid_column="id",
        ),
    )
    assert [ddl.split("(")[0] for ddl in schema.ddl] == ["CREATE TABLE staff ", "CREATE TABLE log "]


def _views_have_rowid() -> bool:
    """Does this SQLite give a view a row key (NULL)? Versions differ."""
    with closing(sqlite3.connect(":memory:")) as db:
        db.execute("CREATE VIEW v AS SELECT 1 AS a")
        try:
            db.execute("SELECT rowid FROM v")
        except sqlite3.OperationalError:
            return False
    return True


def test_sqlite_fingerprint_follows_content_not_path(tmp_path: Path) -> None:
    path = make_sqlite(tmp_path / "a.sqlite", "CREATE TABLE t (a INTEGER, b TEXT);")
    first = Schema.from_sqlite(path)
    assert Schema.from_sqlite(path).fingerprint == first.fingerprint
    copy = shutil.copy(path, tmp_path / "b.sqlite")
    assert Schema.from_sqlite(copy).fingerprint == first.fingerprint
    make_sqlite(path, "ALTER TABLE t ADD COLUMN c REAL;")
    changed = Schema.from_sqlite(path)
    assert changed.fingerprint != first.fingerprint
    assert len(first.fingerprint) == 32 and int(first.fingerprint, 16) >= 0


def test_fingerprints_keep_their_values() -> None:
    """Audit logs and archives name schemas by fingerprint: the encoding may get faster (the Rust
    canonical JSON, tuples for columns), its text may not change. Values from 3f86445."""
    hr = Schema.from_sqlite(Path(__file__).resolve().parent.parent / "examples" / "hr.sqlite")
    assert hr.fingerprint == "d9d74f392281e6227355359fa8d2c1a0"
    odd = Schema.from_tables("sqlite", {'Quarterly "Results"': ["naïve", "ẞ😀", "a\\b"]})
    assert odd.fingerprint == "30583d542a264a256f41e841e6ae1731"


def test_sqlite_fingerprint_sees_types_and_views(tmp_path: Path) -> None:
    prints = {
        Schema.from_sqlite(make_sqlite(tmp_path / f"{i}.sqlite", script)).fingerprint
        for i, script in enumerate(
            [
                "CREATE TABLE t (a INTEGER);",
                "CREATE TABLE t (a TEXT);",
                "CREATE TABLE u (a INTEGER); CREATE VIEW t AS SELECT a FROM u;",
                "CREATE TABLE u (a INTEGER); CREATE TABLE t (a INTEGER);",
            ]
        )
    }
    assert len(prints) == 4


def test_sqlite_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.sqlite"
    with pytest.raises(SchemaError, match=r"missing\.sqlite: no such file"):
        Schema.from_sqlite(missing)
    assert not missing.exists()  # read-only: nothing created
    with pytest.raises(SchemaError, match="not a file"):
        Schema.from_sqlite(tmp_path)


def test_sqlite_not_a_database(tmp_path: Path) -> None:
    text = tmp_path / "notes.sqlite"
    text.write_text("SELECT 1; -- just text\n" * 100)
    with pytest.raises(SchemaError, match=r"notes\.sqlite: .*not a database"):
        Schema.from_sqlite(text)


def test_sqlite_empty_database(tmp_path: Path) -> None:
    (tmp_path / "zero.sqlite").touch()
    with pytest.raises(SchemaError, match=r"zero\.sqlite: the catalog has no tables or views"):
        Schema.from_sqlite(tmp_path / "zero.sqlite")
    path = make_sqlite(tmp_path / "dropped.sqlite", "CREATE TABLE t (a); DROP TABLE t;")
    with pytest.raises(SchemaError, match="no tables or views"):
        Schema.from_sqlite(path)


def test_sqlite_view_over_a_dropped_table(tmp_path: Path) -> None:
    script = "CREATE TABLE t (a); CREATE VIEW v AS SELECT * FROM t; DROP TABLE t;"
    path = make_sqlite(tmp_path / "broken.sqlite", script)
    with pytest.raises(SchemaError, match="cannot read the columns of view 'v'"):
        Schema.from_sqlite(path)


# ----- names the dialect cannot tell apart ----------------------------------------------------


def test_names_one_identifier_denotes_are_refused() -> None:
    with pytest.raises(SchemaError, match="tables 'Staff' and 'staff' are the same name"):
        Schema.from_tables("sqlite", {"Staff": ["a"], "staff": ["b"]})
    with pytest.raises(SchemaError, match="columns of table 't' 'ID' and 'id'"):
        Schema.from_tables("duckdb", {"t": ["ID", "id"]})
    # PostgreSQL tells them apart (only a quoted name can spell "Staff")
    schema = Schema.from_tables("postgres", {"Staff": ["a"], "staff": ["b"]})
    assert schema.table("STAFF").name == "staff"
    assert schema.table('"Staff"').name == "Staff"


def test_from_tables() -> None:
    schema = Schema.from_tables("sqlite", {"t": ["a", "b"]})
    assert schema == Schema("sqlite", (Table("t", (Column("a", ""), Column("b", ""))),), "<tables>")
    with pytest.raises(SchemaError, match="no tables"):
        Schema.from_tables("sqlite", {})
    with pytest.raises(SchemaError, match=r"unknown SQL dialect 'oracle' \(known: duckdb, "):
        Schema.from_tables("oracle", {"t": ["a"]})


# ----- properties -----------------------------------------------------------------------------

# Any name SQLite can store: quoted, every character but NUL, not in SQLite's reserved namespace.
names = st.text(
    st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), min_size=1, max_size=8
).filter(lambda n: not ascii_lower(n).startswith("sqlite_"))
types = st.sampled_from(["", "INTEGER", "TEXT", "VARCHAR(20)", "NUMERIC(10, 2)", "BLOB"])
columns = st.lists(
    st.tuples(names, types), min_size=1, max_size=4, unique_by=lambda c: ascii_lower(c[0])
)
catalogs = st.lists(
    st.tuples(names, columns), min_size=1, max_size=4, unique_by=lambda t: ascii_lower(t[0])
)
Catalog = list[tuple[str, list[tuple[str, str]]]]


def as_tables(catalog: Catalog) -> list[Table]:
    return [Table(t, tuple(Column(c, ty) for c, ty in cols)) for t, cols in catalog]


@given(catalogs)
def test_any_sqlite_catalog_reads_back_exactly(catalog: Catalog) -> None:
    """Whatever SQLite can hold, the snapshot reports as SQLite holds it, and each name is found
    again through its quoted spelling."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "db.sqlite"
        script = "".join(
            f"CREATE TABLE {quote(t)} ({', '.join(f'{quote(c)} {ty}' for c, ty in cols)});"
            for t, cols in catalog
        )
        make_sqlite(path, script)
        schema = Schema.from_sqlite(path)
    expected = tuple(replace(t, has_rowid=_row_key_reachable(t)) for t in as_tables(catalog))
    assert schema.tables == expected
    for table in expected:
        assert schema.table(quote(table.name)) == table
        for column in table.columns:
            assert table.column(quote(column.name), schema.rules) == column


def _row_key_reachable(table: Table) -> bool:
    """Without a PRIMARY KEY a table has the implicit row key, which a name reaches unless real
    columns take all three of its names."""
    return not {"rowid", "oid", "_rowid_"} <= {ascii_lower(c.name) for c in table.columns}


@given(catalogs)
def test_fingerprint_ignores_table_order_but_not_column_order(catalog: Catalog) -> None:
    def fingerprint(tables: list[Table]) -> str:
        return Schema("sqlite", tuple(tables), "<test>").fingerprint

    tables = as_tables(catalog)
    assert fingerprint(tables) == fingerprint(tables[::-1])
    first = tables[0]
    if len(first.columns) > 1:
        swapped = Table(first.name, first.columns[::-1])
        assert fingerprint([swapped, *tables[1:]]) != fingerprint(tables)


# ----- DuckDB ---------------------------------------------------------------------------------


@pytest.fixture
def duckdb_file(tmp_path: Path) -> Path:
    path = tmp_path / "shop.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute(
            """
            CREATE TABLE "OrderLines" (id INTEGER, "Unit Price" DECIMAL(10, 2), note VARCHAR);
            CREATE TABLE customers (id INTEGER, name VARCHAR);
            CREATE VIEW big_lines AS SELECT id FROM "OrderLines" WHERE "Unit Price" > 100;
            CREATE SCHEMA archive;
            CREATE TABLE archive.old_orders (id BIGINT);
            CREATE SCHEMA nothing_here;
            """
        )
    return path


def test_duckdb_snapshot(duckdb_file: Path) -> None:
    schema = Schema.from_duckdb(duckdb_file)
    assert schema.dialect == "duckdb"
    assert schema.source == str(duckdb_file)
    assert schema.tables == (
        Table(
            "OrderLines",
            (
                Column("id", "INTEGER"),
                Column("Unit Price", "DECIMAL(10,2)"),
                Column("note", "VARCHAR"),
            ),
        ),
        Table("big_lines", (Column("id", "INTEGER"),), is_view=True),
        Table("customers", (Column("id", "INTEGER"), Column("name", "VARCHAR"))),
    )
    archive = Schema.from_duckdb(duckdb_file, schema="archive")
    assert archive.tables == (Table("old_orders", (Column("id", "BIGINT"),)),)
    assert Schema.from_duckdb(duckdb_file).fingerprint == schema.fingerprint


def test_duckdb_names_match_case_insensitively_quoted_or_not(duckdb_file: Path) -> None:
    schema = Schema.from_duckdb(duckdb_file)
    for written in ["orderlines", "ORDERLINES", '"OrderLines"', '"orderlines"']:
        assert schema.table(written).name == "OrderLines", written
    assert schema.table("[OrderLines]") is None  # DuckDB quotes with "..." only
    lines = schema.tables[0]
    assert lines.column('"UNIT PRICE"', schema.rules).name == "Unit Price"


def test_duckdb_errors(duckdb_file: Path, tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="schema 'sales' does not exist"):
        Schema.from_duckdb(duckdb_file, schema="sales")
    with pytest.raises(SchemaError, match="no tables or views; is 'nothing_here' the schema"):
        Schema.from_duckdb(duckdb_file, schema="nothing_here")
    with pytest.raises(SchemaError, match="no such file"):
        Schema.from_duckdb(tmp_path / "missing.duckdb")
    assert not (tmp_path / "missing.duckdb").exists()
    not_db = tmp_path / "text.duckdb"
    not_db.write_text("hello\n" * 1000)
    with pytest.raises(SchemaError, match=r"text\.duckdb: cannot read the DuckDB catalog"):
        Schema.from_duckdb(not_db)


# ----- PostgreSQL -----------------------------------------------------------------------------

POSTGRES_CATALOG = """
CREATE TABLE "Employees" (id integer PRIMARY KEY, name text NOT NULL,
                          "Salary Amount" numeric(10, 2));
CREATE TABLE orders (id serial, employee_id integer, placed date);
CREATE VIEW big_earners AS SELECT name FROM "Employees" WHERE "Salary Amount" > 1000;
CREATE TYPE mood AS ENUM ('calm', 'cross');
CREATE TABLE moods (m mood, tags text[]);
CREATE TABLE nothing ();
CREATE SCHEMA hr;
CREATE TABLE hr."People" (pid integer);
CREATE TABLE hr.people (pid integer, "PID" integer);
CREATE SCHEMA empty;
"""


@pytest.fixture(scope="module")
def pg(postgres_dsn: str) -> Iterator[str]:
    """The server's database with `POSTGRES_CATALOG` in it (dropped again afterwards)."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(POSTGRES_CATALOG)
    yield postgres_dsn
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            "DROP SCHEMA public CASCADE; CREATE SCHEMA public; DROP SCHEMA hr, empty CASCADE"
        )


def test_postgres_snapshot(pg: str) -> None:
    schema = Schema.from_postgres(pg)
    assert schema.dialect == "postgres"
    assert schema.tables == (  # by name, byte order: upper case first
        Table(
            "Employees",
            (Column("id", "integer"), Column("name", "text"), Column("Salary Amount", "numeric")),
        ),
        Table("big_earners", (Column("name", "text"),), is_view=True),
        Table("moods", (Column("m", "mood"), Column("tags", "ARRAY"))),
        Table("nothing", ()),
        Table(
            "orders",
            (Column("id", "integer"), Column("employee_id", "integer"), Column("placed", "date")),
        ),
    )
    assert Schema.from_postgres(pg).fingerprint == schema.fingerprint


def test_postgres_case_rules(pg: str) -> None:
    schema = Schema.from_postgres(pg)
    assert schema.table("employees") is None  # folds to employees: not "Employees"
    assert schema.table("Employees") is None
    assert schema.table('"Employees"').name == "Employees"
    assert schema.table("ORDERS").name == "orders"
    assert schema.table('"ORDERS"') is None
    employees = schema.table('"Employees"')
    assert employees.column('"Salary Amount"', schema.rules).name == "Salary Amount"
    assert employees.column('"salary amount"', schema.rules) is None
    assert employees.column("NAME", schema.rules).name == "name"


def test_postgres_other_schema_keeps_names_that_differ_in_case(pg: str) -> None:
    hr = Schema.from_postgres(pg, schema="hr")
    assert [t.name for t in hr.tables] == ["People", "people"]
    people = hr.table("people")
    assert [c.name for c in people.columns] == ["pid", "PID"]
    assert people.column("PID", hr.rules).name == "pid"
    assert people.column('"PID"', hr.rules).name == "PID"


def test_postgres_source_and_uri_dsn_leave_the_password_out(pg: str) -> None:
    params = psycopg.conninfo.conninfo_to_dict(pg)
    schema = Schema.from_postgres(pg + " password=hunter2")  # trust auth ignores it
    assert "hunter2" not in schema.source
    assert f"port={params['port']}" in schema.source
    uri = f"postgresql://postgres:hunter2@127.0.0.1:{params['port']}/{params['dbname']}"
    from_uri = Schema.from_postgres(uri)
    assert "hunter2" not in from_uri.source
    assert from_uri.fingerprint == schema.fingerprint


def test_postgres_fingerprint_changes_with_the_catalog(pg: str) -> None:
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA scratch; CREATE TABLE scratch.t (a integer)")
        before = Schema.from_postgres(pg, schema="scratch").fingerprint
        conn.execute("ALTER TABLE scratch.t ADD COLUMN b text")
        after = Schema.from_postgres(pg, schema="scratch").fingerprint
        conn.execute("DROP SCHEMA scratch CASCADE")
    assert before != after


def test_postgres_missing_and_empty_schema(pg: str) -> None:
    with pytest.raises(SchemaError, match="schema 'payroll' does not exist"):
        Schema.from_postgres(pg, schema="payroll")
    with pytest.raises(SchemaError, match="schema 'HR' does not exist"):
        Schema.from_postgres(pg, schema="HR")  # catalog spelling: hr
    with pytest.raises(SchemaError, match="no tables or views; is 'empty' the schema"):
        Schema.from_postgres(pg, schema="empty")


def test_postgres_refused_connection() -> None:
    dsn = f"host=127.0.0.1 port={free_port()} user=postgres password=hunter2 dbname=x"
    with pytest.raises(SchemaError, match="cannot read the PostgreSQL catalog") as caught:
        Schema.from_postgres(dsn)
    assert "refused" in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_postgres_malformed_dsn() -> None:
    with pytest.raises(SchemaError, match="cannot parse the PostgreSQL DSN"):
        Schema.from_postgres("host=127.0.0.1 port")

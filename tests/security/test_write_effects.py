"""What a write does beyond its target's rows is a capability too (session 38's policy review,
two silent fail-opens): a table whose constraints say ON CONFLICT REPLACE turns a plain INSERT
or UPDATE into a REPLACE, which deletes the rows it conflicts with — hidden columns included —
though the role holds no delete; and a foreign key's ON DELETE CASCADE (or SET NULL, ON UPDATE
CASCADE) changes the rows of a table the role may neither see nor write (PostgreSQL runs the
action as the table's owner, so no privilege of the judging role stops it)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import gridrail as gr
from gridrail.database import Database
from gridrail.serve.app import BYTE_VOCABULARY

REPLACING = """
CREATE TABLE acct (id INTEGER PRIMARY KEY ON CONFLICT REPLACE, owner TEXT, secret TEXT);
CREATE TABLE tags (id INTEGER PRIMARY KEY, tag TEXT UNIQUE ON CONFLICT REPLACE, note TEXT);
CREATE TABLE plain (id INTEGER PRIMARY KEY, note TEXT);
"""
REFERENCING = """
CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE pay (person INTEGER REFERENCES people ON DELETE CASCADE, amount INT);
CREATE TABLE desks (person INTEGER REFERENCES people (id) ON UPDATE SET NULL, room TEXT);
"""
POLICY = """
[roles.inserter]
statements = ["select", "insert"]
[roles.inserter.columns]
acct = { deny = ["secret"] }
[roles.updater]
statements = ["select", "update"]
[roles.keeper]
statements = ["select", "insert", "update", "delete"]
[roles.clerk]
statements = ["select", "update", "delete"]
tables = ["people", "desks"]
writes = ["people"]
[roles.office]
statements = ["select", "update", "delete"]
tables = ["people", "desks"]
writes = ["people", "desks"]
[roles.admin]
statements = ["select", "insert", "update", "delete"]
"""


def _guide(tmp_path: Path, ddl: str, role: str, name: str = "db.sqlite") -> gr.Guide:
    path = tmp_path / name
    if not path.exists():
        with sqlite3.connect(path) as db:
            db.executescript(ddl)
    schema = Database.open(str(path)).schema()
    policy = gr.Policy.from_text(POLICY)
    return gr.compile(
        gr.Grammar.bundled("sqlite"), BYTE_VOCABULARY, schema=schema, policy=policy, role=role
    )


def _kinds(guide: gr.Guide, sql: str) -> list[str]:
    return [v.kind for v in guide.check(sql)]


@pytest.mark.parametrize(
    ("role", "sql"),
    [
        ("inserter", "INSERT INTO acct (id, owner) VALUES (1, 'mallory');"),
        ("inserter", "INSERT INTO tags (tag) VALUES ('red');"),
        ("updater", "UPDATE tags SET tag = 'red' WHERE id = 2;"),
        ("updater", "UPDATE acct SET owner = 'x';"),
    ],
)
def test_a_plain_write_takes_its_tables_replace(tmp_path: Path, role: str, sql: str) -> None:
    guide = _guide(tmp_path, REPLACING, role)
    assert _kinds(guide, sql) == ["conflict_not_allowed"], sql
    message = guide.check(sql)[0].message
    assert "ON CONFLICT REPLACE" in message and "OR ABORT" in message
    # a resolution the statement names overrides the table's; a table without one is plain
    verb = "INSERT OR ABORT" if sql.startswith("INSERT") else "UPDATE OR ABORT"
    assert _kinds(guide, sql.replace(sql.split(" ")[0], verb, 1)) == []
    assert _kinds(guide, "INSERT INTO plain (note) VALUES ('x');" if role == "inserter" else
                  "UPDATE plain SET note = 'x';") == []  # fmt: skip


def test_a_role_that_may_delete_and_update_may_replace(tmp_path: Path) -> None:
    guide = _guide(tmp_path, REPLACING, "keeper")
    assert _kinds(guide, "INSERT INTO tags (tag) VALUES ('red');") == []
    assert _kinds(guide, "UPDATE tags SET tag = 'red' WHERE id = 2;") == []


def test_the_replace_the_checker_refuses_deletes_rows(tmp_path: Path) -> None:
    """What the refusal prevents: SQLite deletes the conflicting row (its hidden secret with it)."""
    guide = _guide(tmp_path, REPLACING, "keeper")
    db = Database.open(str(tmp_path / "db.sqlite"))
    db.execute("INSERT INTO acct VALUES (1, 'alice', 's3cr3t');", read_only=False)
    db.execute("INSERT INTO acct (id, owner) VALUES (1, 'mallory');", read_only=False)
    assert db.execute("SELECT * FROM acct;").rows == ((1, "mallory", None),)
    assert guide.view is not None and guide.view.schema.table("acct").replaces_on_conflict


def test_a_delete_that_cascades_needs_the_referencing_tables(tmp_path: Path) -> None:
    clerk = _guide(tmp_path, REFERENCING, "clerk")
    # `pay` is hidden from the clerk: the message does not name it
    (violation,) = clerk.check("DELETE FROM people WHERE id = 1;")
    assert violation.kind == "cascade_not_allowed" and "pay" not in violation.message
    assert "a table it may not see" in violation.message
    # changing the key sets `desks.person` to NULL: desks is visible, not writable
    (violation,) = clerk.check("UPDATE people SET id = 5 WHERE id = 1;")
    assert violation.kind == "cascade_not_allowed" and '"desks"' in violation.message
    assert _kinds(clerk, "UPDATE people SET name = 'x';") == []  # no key changed
    office = _guide(tmp_path, REFERENCING, "office")
    assert _kinds(office, "UPDATE people SET id = 5 WHERE id = 1;") == []
    assert _kinds(office, "DELETE FROM people WHERE id = 1;") == ["cascade_not_allowed"]
    admin = _guide(tmp_path, REFERENCING, "admin")
    assert _kinds(admin, "DELETE FROM people WHERE id = 1;") == []


def test_schemas_without_write_effects_keep_their_fingerprint(tmp_path: Path) -> None:
    guide = _guide(tmp_path, "CREATE TABLE plain (id INTEGER PRIMARY KEY, note TEXT);", "admin")
    assert guide.view is not None
    (plain,) = guide.view.schema.tables
    assert not plain.replaces_on_conflict and plain.cascades == ()
    with_effects = _guide(tmp_path, REFERENCING, "admin", "refs.sqlite")
    assert with_effects.view is not None
    people = with_effects.view.schema.table("people")
    assert people is not None and {(c.table, c.event, c.does) for c in people.cascades} == {
        ("pay", "delete", "delete"),
        ("desks", "update", "update"),
    }


@pytest.fixture
def pg_refs(postgres_dsn: str) -> Iterator[str]:
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA effects; CREATE SCHEMA payroll")
        conn.execute("CREATE TABLE effects.people (id int PRIMARY KEY, name text)")
        conn.execute(
            "CREATE TABLE payroll.pay (person int REFERENCES effects.people (id) "
            "ON DELETE CASCADE, amount int)"
        )
        conn.execute("INSERT INTO effects.people VALUES (1, 'Ada'), (2, 'Bob')")
        conn.execute("INSERT INTO payroll.pay VALUES (1, 100), (2, 200)")
    yield f"{postgres_dsn} options='-csearch_path=effects'"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("DROP SCHEMA effects, payroll CASCADE")


def test_a_postgres_cascade_into_another_schema_is_refused(pg_refs: str) -> None:
    schema = gr.Schema.from_postgres(pg_refs, "effects")
    policy = gr.Policy.from_text(POLICY)
    guide = gr.compile(
        gr.Grammar.bundled("sqlite"), BYTE_VOCABULARY, schema=schema, policy=policy, role="admin"
    )
    (violation,) = guide.check("DELETE FROM people WHERE id = 1;")
    assert violation.kind == "cascade_not_allowed" and "payroll" not in violation.message
    assert _kinds(guide, "UPDATE people SET name = 'x';") == []

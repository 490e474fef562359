"""A statement runs only on the catalog it was judged against (session 38's policy review: a
guide built before `ALTER TABLE people ADD COLUMN ssn` called `SELECT *` clean under an
allow-list of id and name, and running it returned the new column)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import gridrail as gr
from gridrail.ask import Attempt, Candidate, _run
from gridrail.database import Database
from gridrail.serve.app import BYTE_VOCABULARY

POLICY = (
    '[roles.r]\nstatements = ["select"]\n[roles.r.columns]\npeople = { allow = ["id", "name"] }\n'
)


@pytest.fixture
def people(tmp_path: Path) -> Path:
    path = tmp_path / "people.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO people VALUES (1, 'Ada')")
    return path


def _guide(path: Path) -> gr.Guide:
    return gr.compile(
        gr.Grammar.bundled("sqlite"), BYTE_VOCABULARY, schema=Database.open(str(path)).schema(),
        policy=gr.Policy.from_text(POLICY), role="r",
    )  # fmt: skip


def test_a_statement_judged_on_an_older_catalog_is_not_run(people: Path) -> None:
    guide = _guide(people)
    assert guide.view is not None and guide.check("SELECT * FROM people;") == []
    with sqlite3.connect(people) as db:
        db.execute("ALTER TABLE people ADD COLUMN ssn TEXT DEFAULT '123-45-6789'")
    db = Database.open(str(people))
    with pytest.raises(gr.SchemaChangedError, match="schema changed after the statement"):
        db.execute("SELECT * FROM people;", judged_on=guide.view.schema)
    # what ask runs is judged on its guide's snapshot: not run, and said why
    ran = _run(Candidate(Attempt("SELECT * FROM people;", [], None, 0)), guide, db, 5.0, 10, 5.0)  # type: ignore[arg-type]
    assert not ran.runs and ran.error is not None and "schema changed" in ran.error
    # a guide of the catalog as it is now refuses the `*` (it reads ssn), and runs the rest
    fresh = _guide(people)
    assert fresh.view is not None
    assert [v.kind for v in fresh.check("SELECT * FROM people;")] == ["column_not_visible"]
    rows = db.execute("SELECT id, name FROM people;", judged_on=fresh.view.schema).rows
    assert rows == ((1, "Ada"),)


def test_equal_snapshots_of_one_catalog_stay_equal(people: Path) -> None:
    """The version is not content: a snapshot equals one read later of the same catalog, even
    after a change that was undone (its version moved on)."""
    before = Database.open(str(people)).schema()
    with sqlite3.connect(people) as db:
        db.execute("CREATE TABLE scratch (x)")
        db.execute("DROP TABLE scratch")
    after = Database.open(str(people)).schema()
    assert after == before and after.fingerprint == before.fingerprint
    assert after.version != before.version

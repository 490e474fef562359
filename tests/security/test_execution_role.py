"""A statement runs on PostgreSQL as the role it was judged as (session 39's review of what
session 38 left open): before, `ask` judged a statement as the generated judging role
(`check.postgres_judge`) and then ran it as the DSN's user, so the database's own privilege
check stood at judgment only. A function that runs SQL of its own at execution
(`query_to_xml('SELECT amount FROM salaries', …)`) would have read a hidden table with the
connecting user's rights had the checker's function list missed it. Now the statement runs
under `SET LOCAL ROLE <judging role>` too (`Database.acting_as`, `ask.acting_as_judged`).

The tests use the throwaway server of tests/postgres_server.py, their own schema and roles."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import gridrail as gr
from gridrail.ask import acting_as_judged, ask
from gridrail.check.postgres_judge import PostgresJudge
from gridrail.database import Database, DatabaseError
from gridrail.errors import UsageError
from gridrail.policy.view import SchemaView
from postgres_server import throwaway_schema
from test_ask import ScriptedModel
from test_walk_arm import _small_vocab

PG_SCHEMA = "exec_as"
ROLES = ("exec_stranger", "exec_login")
POLICY = gr.Policy.from_text(
    """
[roles.analyst]
statements = ["select"]
tables = ["staff", "notes"]
[roles.analyst.columns]
staff = { deny = ["pay"] }

[roles.clerk]
statements = ["select", "insert"]
tables = ["staff", "tickets"]
writes = ["staff", "tickets"]
"""
)
SETUP = (
    "CREATE TABLE staff (id serial PRIMARY KEY, name text NOT NULL, pay int)",
    "CREATE TABLE salaries (staff_id int, amount int)",
    "CREATE TABLE notes (id int, body text)",
    # a default naming a sequence the column does not own (no `serial`)
    "CREATE SEQUENCE ticket_numbers",
    "CREATE TABLE tickets (id int DEFAULT nextval('ticket_numbers') PRIMARY KEY, what text)",
    "INSERT INTO staff (name, pay) VALUES ('ann', 100), ('bob', 200)",
    "INSERT INTO salaries VALUES (1, 100), (2, 200)",
    "INSERT INTO notes VALUES (1, 'a'), (2, 'b'), (3, 'c')",
    # rows no role but a superuser (the DSN's user here) sees: which role ran a statement
    # shows in its count
    "ALTER TABLE notes ENABLE ROW LEVEL SECURITY",
)


@pytest.fixture(scope="module")
def dsn(postgres_dsn: str) -> Iterator[str]:
    """A DSN whose search path is the module's own schema (as a user's DSN names theirs)."""
    roles = (
        "CREATE ROLE exec_stranger NOLOGIN",
        "CREATE ROLE exec_login LOGIN",  # no superuser: SET ROLE needs membership
    )
    with throwaway_schema(postgres_dsn, PG_SCHEMA, (*SETUP, *roles), ROLES):
        yield f"{postgres_dsn} options='-csearch_path={PG_SCHEMA}'"


def _judge(dsn: str, role: str) -> PostgresJudge:
    view = SchemaView(gr.Schema.from_postgres(dsn, schema=PG_SCHEMA), POLICY.role(role))
    return PostgresJudge.provision(dsn, view, POLICY.fingerprint, pg_schema=PG_SCHEMA)


def test_sql_a_function_runs_is_checked_as_the_judging_role(dsn: str) -> None:
    """The hole this layer closes: `query_to_xml` runs its query at execution, where EXPLAIN
    never looks; as the DSN's user it reads the hidden table, as the judging role it is
    refused by the server."""
    sql = "SELECT query_to_xml('SELECT amount FROM salaries', true, false, '')"
    database = Database.open(dsn)
    (row,) = database.execute(sql).rows
    assert "<amount>200</amount>" in row[0]  # what the connecting user may read
    acting = database.acting_as(_judge(dsn, "analyst").database_role)
    with pytest.raises(DatabaseError, match="permission denied for table salaries"):
        acting.execute(sql)
    with pytest.raises(DatabaseError, match="permission denied for table staff"):
        acting.execute("SELECT query_to_xml('SELECT pay FROM staff', true, false, '')")
    assert acting.execute("SELECT name FROM staff ORDER BY id").rows == (("ann",), ("bob",))


def test_ask_runs_its_answer_as_the_role_it_judged_it_as(dsn: str) -> None:
    """`ask` with PostgreSQL's judge runs the chosen statement as the judging role: row-level
    security (which the superuser DSN bypasses) filters what it counts."""
    database = Database.open(dsn)
    schema = gr.Schema.from_postgres(dsn, schema=PG_SCHEMA)
    guide = gr.compile(
        gr.Grammar.bundled("sqlite"), _small_vocab(), schema=schema, policy=POLICY, role="analyst"
    )
    judge = PostgresJudge.provision(
        dsn, guide.view, POLICY.fingerprint, pg_schema=PG_SCHEMA
    ).judge  # what `database_judge` builds for a DSN's `public` schema
    sql = "SELECT count(*) FROM notes;"
    assert database.execute(sql).rows == ((3,),)
    model = ScriptedModel("scripted", None, None, _small_vocab(), (sql,))
    answer = ask(
        "How many notes?", guide, model, database=database, judge=judge, audit=False, repair=False
    )
    assert answer.sql == sql and answer.result is not None
    assert answer.result.rows == ((0,),)  # the judging role sees no row of notes


def test_a_writer_runs_as_its_role_and_may_use_its_tables_serial_defaults(dsn: str) -> None:
    """The clerk's INSERT leaves `id` to its `serial` default: as the judging role it needs
    USAGE on that sequence, which provisioning grants with the table's INSERT."""
    clerk = _judge(dsn, "clerk")
    acting = acting_as_judged(Database.open(dsn), clerk.judge)
    assert acting.role == clerk.database_role
    inserted = acting.execute(
        "INSERT INTO staff (name) VALUES ('cy') RETURNING name", read_only=False
    )
    assert inserted.rows == (("cy",),)
    ticket = "INSERT INTO tickets (what) VALUES ('late') RETURNING id"
    assert acting.execute(ticket, read_only=False).rows == ((1,),)
    with pytest.raises(DatabaseError, match="permission denied for table notes"):
        acting.execute("INSERT INTO notes VALUES (4, 'd')", read_only=False)


def test_acting_as_fails_closed(dsn: str, tmp_path) -> None:
    login = Database.open(dsn.replace("user=postgres", "user=exec_login"))
    assert login.execute("SELECT current_user").rows == (("exec_login",),)
    with pytest.raises(DatabaseError, match=r"must be a member of it\. It was not run"):
        login.acting_as("exec_stranger").execute("SELECT 1")
    sqlite = tmp_path / "x.sqlite"
    sqlite.write_bytes(b"")
    with pytest.raises(UsageError, match="only PostgreSQL"):
        Database.open(str(sqlite)).acting_as("anyone")
    # a judge of another kind (DuckDB's, SQLite's None) leaves the database as it is
    assert acting_as_judged(Database.open(str(sqlite)), None) == Database.open(str(sqlite))

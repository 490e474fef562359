"""Execution limits (security review, finding D6): every statement `Database.execute` runs —
and so `gridrail ask --execute` — is stopped at a time limit, a row limit and a result limit
(the memory its rows take) on SQLite, DuckDB and PostgreSQL, says which limit it hit, and keeps
nothing it did; read-only roles run read-only on every path, and a statement reaches no file but
the database.

Each statement that would run (or stream rows) forever without the limits runs in a child
process under a watchdog: if the limits fail to stop it, the test fails after WATCHDOG_S
instead of hanging the suite. Bounded statements run here."""

from __future__ import annotations

import io
import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from gridrail import database
from gridrail.cli import main
from gridrail.database import (
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    Database,
    DatabaseError,
    ExecutionLimitError,
    QueryResult,
)
from gridrail.errors import UsageError
from gridrail.policy.schema import Schema

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HR_DB = EXAMPLES / "hr.sqlite"
HR_POLICY = EXAMPLES / "hr_policy.toml"

LIMIT_S = 1.0  # the statements' own time limit in these tests
WATCHDOG_S = 60  # what a statement gets before the test gives up on the limits

FOREVER = {  # statements that run (practically) forever, in each dialect
    "recursive count": "WITH RECURSIVE c AS (SELECT 1 AS id UNION ALL SELECT id + 1 FROM c) "
    "SELECT count(*) FROM c;",
    "10-way cross join": "SELECT count(*) FROM "
    + ", ".join(f"employees e{n}" for n in range(10))
    + ";",
}
CROSS_JOIN_ROWS = "SELECT e0.id FROM " + ", ".join(f"employees e{n}" for n in range(5)) + ";"

_CHILD = """
import json, sys, time
from gridrail.database import Database, ExecutionLimitError
ref, sql, options = json.loads(sys.argv[1])
started = time.monotonic()
try:
    result = Database.open(ref).execute(sql, **options)
    outcome = {"returned": len(result.rows)}
except ExecutionLimitError as exc:
    outcome = {"limit": exc.limit, "message": str(exc)}
outcome["seconds"] = time.monotonic() - started
print(json.dumps(outcome))
"""


def _stopped_in_child(ref: str | Path, sql: str, **options: object) -> dict:
    """Run `Database.open(ref).execute(sql, **options)`, which must raise ExecutionLimitError,
    in a child process under the watchdog; what it raised, and after how long."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, json.dumps([str(ref), sql, options])],
            capture_output=True,
            text=True,
            timeout=WATCHDOG_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {WATCHDOG_S} s (limits {options}): {sql}")
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert "limit" in outcome, f"not stopped: {outcome}"
    return outcome


def _assert_time_limit(ref: str | Path, sql: str, **options: object) -> None:
    outcome = _stopped_in_child(ref, sql, timeout_s=LIMIT_S, **options)
    assert outcome["limit"] == "time", outcome
    assert f"ran longer than {LIMIT_S:g} s (the time limit)" in outcome["message"]
    assert "nothing it did was kept" in outcome["message"] and "--timeout" in outcome["message"]
    assert LIMIT_S * 0.9 <= outcome["seconds"] < WATCHDOG_S / 2, outcome


def _row_message(max_rows: int) -> str:
    return f"returned more than {max_rows} rows \\(the row limit\\).*--max-rows"


def _assert_row_limit(ref: str | Path, sql: str, limit: int, **options: object) -> None:
    """A bounded statement past the row limit `limit` (here: it cannot hang)."""
    with pytest.raises(ExecutionLimitError, match=_row_message(limit)) as caught:
        Database.open(str(ref)).execute(sql, **options)
    assert caught.value.limit == "rows"


def _count(ref: str | Path, sql: str, **options: object) -> int:
    """The number of rows `sql` returns (its one column named `id`)."""
    result = Database.open(str(ref)).execute(sql, **options)
    assert result.columns == ("id",)
    return len(result.rows)


@pytest.fixture
def hr_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "hr.sqlite"
    copy.write_bytes(HR_DB.read_bytes())
    return copy


def _sqlite_rows(path: Path, sql: str) -> list[tuple]:
    with closing(sqlite3.connect(path)) as db:
        return db.execute(sql).fetchall()


# -- SQLite


@pytest.mark.parametrize("name", sorted(FOREVER))
def test_sqlite_statements_that_run_forever_are_stopped(hr_copy: Path, name: str) -> None:
    _assert_time_limit(hr_copy, FOREVER[name])


def test_sqlite_row_limit_default_and_boundary(hr_copy: Path) -> None:
    # 8^5 rows: past the default limit, which bounds what is fetched
    _assert_row_limit(hr_copy, CROSS_JOIN_ROWS, DEFAULT_MAX_ROWS)
    sql = "SELECT id FROM employees ORDER BY id;"  # 8 rows
    assert _count(hr_copy, sql, max_rows=8) == 8
    _assert_row_limit(hr_copy, sql, 7, max_rows=7)


def test_sqlite_a_stopped_write_keeps_nothing(hr_copy: Path) -> None:
    before = _sqlite_rows(hr_copy, "SELECT * FROM orders ORDER BY id")
    endless_insert = (
        "INSERT INTO orders (employee_id, total) WITH RECURSIVE c(n) AS "
        "(SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT n, 1.0 FROM c;"
    )
    _assert_time_limit(hr_copy, endless_insert, read_only=False)
    # a statement Python's sqlite3 would have autocommitted (it does not start with DELETE)
    delete_all = (
        "WITH doomed AS (SELECT id FROM orders) "
        "DELETE FROM orders WHERE id IN (SELECT id FROM doomed) RETURNING id;"
    )
    _assert_row_limit(hr_copy, delete_all, 1, read_only=False, max_rows=1)
    assert _sqlite_rows(hr_copy, "SELECT * FROM orders ORDER BY id") == before


# Session 37's review: one instruction could take most of a second (`hex(zeroblob(50000000))`),
# and the deadline was checked every 1,000 instructions, so a statement over a few hundred rows
# ran 26 s past a 1 s limit; a row of a few such values exhausted memory within the row limit.
SLOW_STEPS = (
    "SELECT max(length(hex(zeroblob(5000000 + e.id + f.id)))) "
    "FROM employees AS e, employees AS f, employees AS g, employees AS h;"
)


def test_sqlite_slow_instructions_are_stopped_at_the_deadline(hr_copy: Path) -> None:
    _assert_time_limit(hr_copy, SLOW_STEPS)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT max(length(hex(zeroblob(50000000 + e.id)))) FROM employees AS e;",
        "SELECT hex(zeroblob(300000000 + id)), hex(zeroblob(300000000)) FROM employees LIMIT 1;",
        "SELECT group_concat(hex(zeroblob(2000000))) FROM employees AS e, employees AS f;",
    ],
)
def test_sqlite_values_are_bounded(hr_copy: Path, sql: str) -> None:
    with pytest.raises(ExecutionLimitError, match="value longer than 16,777,216 bytes") as caught:
        Database.open(str(hr_copy)).execute(sql, timeout_s=WATCHDOG_S)
    assert caught.value.limit == "value"


def test_running_out_of_memory_is_an_execution_limit(
    hr_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def exhausted(*_: object) -> list:
        raise MemoryError

    monkeypatch.setattr(database, "_result", exhausted)
    with pytest.raises(ExecutionLimitError, match="did not fit in memory") as caught:
        Database.open(str(hr_copy)).execute("SELECT id FROM employees;")
    assert caught.value.limit == "memory"


def test_sqlite_read_only_roles_run_query_only(hr_copy: Path) -> None:
    db = Database.open(str(hr_copy))
    assert db.execute("PRAGMA query_only;").rows == ((1,),)
    assert db.execute("PRAGMA query_only;", read_only=False).rows == ((0,),)


@pytest.mark.parametrize("read_only", [True, False])
def test_sqlite_statements_reach_no_other_file(
    hr_copy: Path, tmp_path: Path, read_only: bool
) -> None:
    """VACUUM INTO wrote a full copy of the database (salaries included) to any path, even in
    mode=ro; ATTACH creates files."""
    db = Database.open(str(hr_copy))
    for sql in (f"VACUUM INTO '{tmp_path / 'copy.sqlite'}';", f"ATTACH '{tmp_path / 'x'}' AS x;"):
        with pytest.raises(DatabaseError, match="SQLite: "):
            db.execute(sql, read_only=read_only)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hr.sqlite"]


def test_limits_must_be_positive_and_finite(hr_copy: Path) -> None:
    db = Database.open(str(hr_copy))
    for options in (
        {"timeout_s": 0},
        {"timeout_s": -1.0},
        {"timeout_s": float("inf")},
        {"timeout_s": float("nan")},
        {"max_rows": 0},
        {"max_rows": 2.5},
    ):
        with pytest.raises(UsageError, match="must be a positive"):
            db.execute("SELECT 1;", **options)


# -- DuckDB


@pytest.fixture
def duck(tmp_path: Path) -> Path:
    import duckdb

    path = tmp_path / "hr.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE employees AS SELECT range AS id FROM range(8)")
    return path


def test_duckdb_statements_that_run_forever_are_stopped(duck: Path) -> None:
    _assert_time_limit(duck, "SELECT count(*) FROM range(100000000) a, range(100000000) b;")


def test_duckdb_row_limit_and_rollback(duck: Path) -> None:
    _assert_row_limit(duck, "SELECT * FROM range(100000);", DEFAULT_MAX_ROWS)
    assert _count(duck, "SELECT * FROM employees;", max_rows=8) == 8
    _assert_row_limit(duck, "DELETE FROM employees RETURNING id;", 1, read_only=False, max_rows=1)
    assert _count(duck, "SELECT * FROM employees;") == 8


def test_duckdb_statements_reach_no_other_file(duck: Path, tmp_path: Path) -> None:
    """A read_only DuckDB connection still wrote files (COPY ... TO) and read any file
    (read_csv); with external access off it does neither."""
    db, target = Database.open(str(duck)), tmp_path / "out.csv"
    for read_only in (True, False):
        with pytest.raises(DatabaseError, match="Permission"):
            db.execute(f"COPY (SELECT 1) TO '{target}';", read_only=read_only)
    assert not target.exists()
    with pytest.raises(DatabaseError, match="Permission"):
        db.execute(f"SELECT * FROM read_csv('{HR_POLICY}');")


# -- PostgreSQL


@pytest.fixture(scope="module")
def pg(postgres_dsn: str) -> Iterator[str]:
    """A DSN whose search path is a scratch schema with a small table (dropped afterwards)."""
    import psycopg

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA gridrail_limits")
        conn.execute("CREATE TABLE gridrail_limits.employees AS SELECT generate_series(1, 8) AS id")
    yield f"{postgres_dsn} options='-csearch_path=gridrail_limits'"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("DROP SCHEMA gridrail_limits CASCADE")


@pytest.mark.parametrize("sql", [FOREVER["recursive count"], "SELECT pg_sleep(600);"])
def test_postgres_statements_that_run_forever_are_stopped(pg: str, sql: str) -> None:
    _assert_time_limit(pg, sql)


def test_postgres_row_limit_streams_and_rolls_back(pg: str) -> None:
    # endless rows: only the limit (+1) is fetched, then the rest is cancelled
    endless = (
        "WITH RECURSIVE c AS (SELECT 1 AS id UNION ALL SELECT id + 1 FROM c) SELECT id FROM c;"
    )
    outcome = _stopped_in_child(pg, endless, max_rows=100)
    assert outcome["limit"] == "rows" and re.search(_row_message(100), outcome["message"])
    assert _count(pg, "SELECT id FROM employees;", max_rows=8) == 8
    _assert_row_limit(pg, "DELETE FROM employees RETURNING id;", 1, read_only=False, max_rows=1)
    assert Database.open(pg).execute("SELECT count(*) FROM employees;").rows == ((8,),)


def test_postgres_runs_read_only_with_the_statement_timeout(pg: str) -> None:
    db = Database.open(pg)
    assert db.execute("SHOW transaction_read_only;").rows == (("on",),)
    assert db.execute("SHOW transaction_read_only;", read_only=False).rows == (("off",),)
    assert db.execute("SHOW statement_timeout;", timeout_s=2.5).rows == (("2500ms",),)
    with pytest.raises(DatabaseError, match="read-only transaction"):
        db.execute("DELETE FROM employees;")


def test_postgres_runs_a_write_that_returns_no_rows(pg: str) -> None:
    """A write without RETURNING returns no rows, which psycopg's row stream refused ("the
    operation in stream() didn't produce a result": session 38's review): it runs, its count is
    the answer, and it is kept."""
    db = Database.open(pg)
    result = db.execute("DELETE FROM employees WHERE id > 6;", read_only=False)
    assert result.columns == () and result.rows == () and result.changed == 2
    assert db.execute("UPDATE employees SET id = id;", read_only=False).changed == 6
    assert db.execute("SELECT count(*) FROM employees;").rows == ((6,),)
    inserted = db.execute("INSERT INTO employees VALUES (7), (8);", read_only=False)
    assert inserted.changed == 2  # the module's table as it was
    with pytest.raises(DatabaseError, match="syntax error"):  # described before it runs
        db.execute("DELETE FROM employees WHERE;", read_only=False)


# -- the result limit, on every database (a review finding: on DuckDB and PostgreSQL nothing
# bounded a result's values, so `SELECT repeat('x', 2000000) FROM range(10000)` took the process
# past 20 GB within the row and time limits), and DuckDB's memory limit

RESULT_BYTES = 1_000_000  # the result limit in these tests (not 64 MiB: no test builds that)
LONG_TEXT = {  # the SQL for a text of N characters, by the fixture that makes each database
    "hr_copy": "hex(zeroblob({} / 2))",
    "duck": "repeat('x', {})",
    "pg": "repeat('x', {})",
}
ENDLESS_TEXT = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT {} FROM c;"


@pytest.fixture
def small_results(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(database, "MAX_RESULT_BYTES", RESULT_BYTES)


def _assert_result_limit(ref: str | Path, sql: str, **options: object) -> None:
    message = r"took more than 1,000,000 bytes \(the result limit\).*nothing it did was kept"
    with pytest.raises(ExecutionLimitError, match=message) as caught:
        Database.open(str(ref)).execute(sql, **options)
    assert caught.value.limit == "result"


@pytest.mark.parametrize("fixture", sorted(LONG_TEXT))
def test_result_limit_boundary_and_rollback(
    fixture: str, request: pytest.FixtureRequest, small_results: None
) -> None:
    ref, text = request.getfixturevalue(fixture), LONG_TEXT[fixture]
    # 8 rows of 120,000 characters: 960,776 bytes in Python (str and tuple headers included)
    rows = Database.open(str(ref)).execute(f"SELECT {text.format(120_000)} FROM employees;").rows
    assert [len(value) for (value,) in rows] == [120_000] * 8
    # 140,000 characters: the eighth row passes the limit
    _assert_result_limit(ref, f"SELECT {text.format(140_000)} FROM employees;", max_rows=100)
    # a write whose rows pass the limit keeps nothing
    delete = f"DELETE FROM employees RETURNING id, {text.format(140_000)};"
    _assert_result_limit(ref, delete, read_only=False)
    assert _count(ref, "SELECT id FROM employees;") == 8


@pytest.mark.parametrize(
    ("fixture", "sql"),
    [
        ("hr_copy", ENDLESS_TEXT.format("hex(zeroblob(5000))")),
        ("duck", "SELECT repeat('x', 10000) FROM range(1000000000);"),
        ("pg", ENDLESS_TEXT.format("repeat('x', 10000)")),
    ],
)
def test_result_limit_counts_rows_as_they_arrive(
    fixture: str, sql: str, request: pytest.FixtureRequest
) -> None:
    """Endless rows of 10,000 characters, at the default limits: the result limit (64 MiB, at
    about 6,700 rows) stops them before the row limit, and before they are all fetched."""
    outcome = _stopped_in_child(request.getfixturevalue(fixture), sql)
    assert outcome["limit"] == "result", outcome
    assert "took more than 67,108,864 bytes (the result limit)" in outcome["message"]


@pytest.mark.parametrize(
    ("fixture", "sql"),
    [("duck", "SELECT range(200000);"), ("pg", "SELECT array(SELECT generate_series(1, 200000));")],
)
def test_result_limit_counts_what_a_list_holds(
    fixture: str, sql: str, request: pytest.FixtureRequest, small_results: None
) -> None:
    _assert_result_limit(request.getfixturevalue(fixture), sql)


def test_duckdb_memory_limit(duck: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DuckDB refuses to build a value its memory limit does not hold (`string_agg`), instead of
    taking gigabytes before the result limit can count it."""
    monkeypatch.setattr(database, "DUCKDB_MEMORY_BYTES", 32 * 1024 * 1024)
    db = Database.open(str(duck))
    sql = "SELECT length(string_agg(repeat('x', 1000000))) FROM range({});"
    assert db.execute(sql.format(8)).rows == ((8_000_007,),)
    message = r"more than 33,554,432 bytes of DuckDB's memory \(the memory limit\).*kept"
    with pytest.raises(ExecutionLimitError, match=message) as caught:
        db.execute(sql.format(64))
    assert caught.value.limit == "memory"


# -- the command line: --timeout and --max-rows reach the database


def _ask_with(monkeypatch: pytest.MonkeyPatch, sql: str, *options: str) -> tuple[int, str]:
    """`gridrail ask --execute` as the analyst, the model scripted to write `sql`, one candidate
    (the answer is executed after it is chosen, with the role's rights and the given limits)."""
    from test_ask import _scripted

    monkeypatch.setattr("gridrail.models.load_model", lambda *_args: _scripted(sql))
    out = io.StringIO()
    argv = ["ask", "--db", str(HR_DB), "--policy", str(HR_POLICY), "--role", "analyst"]
    return main(
        [*argv, "--execute", "--candidates", "1", *options, "question"], out
    ), out.getvalue()


ANSWER = "SELECT count(*) FROM orders;"  # a statement of the analyst's (profile) language


def test_cli_limits_reach_execute(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[dict] = []

    def spy(self: Database, sql: str, **options: object) -> QueryResult:
        if sql == ANSWER:  # the answer, not the prompt's sample rows
            judged_on = options.pop("judged_on")  # the snapshot the answer was judged on
            assert isinstance(judged_on, Schema) and judged_on.version is not None
            seen.append(options)
        return QueryResult(("n",), ((1,),), -1)

    monkeypatch.setattr(Database, "execute", spy)
    assert _ask_with(monkeypatch, ANSWER)[0] == 0
    assert _ask_with(monkeypatch, ANSWER, "--timeout", "2.5", "--max-rows", "7")[0] == 0
    assert seen == [
        {"read_only": True, "timeout_s": DEFAULT_TIMEOUT_S, "max_rows": DEFAULT_MAX_ROWS},
        {"read_only": True, "timeout_s": 2.5, "max_rows": 7},
    ]
    for bad in (
        ["--timeout", "0"],
        ["--timeout", "nan"],
        ["--max-rows", "-1"],
        ["--max-rows", "x"],
    ):
        with pytest.raises(SystemExit) as done:
            _ask_with(monkeypatch, "SELECT 1;", *bad)
        assert done.value.code == 2
        assert "not a positive" in capsys.readouterr().err


def test_cli_row_limit_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _ask_with(monkeypatch, "SELECT name FROM employees;", "--max-rows", "3")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and out.strip() == "SELECT name FROM employees;"
    assert err[-1].startswith("gridrail: error: the statement returned more than 3 rows")

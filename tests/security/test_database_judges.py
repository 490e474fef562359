"""Security review, issue 11: the database's own binder as the judge of column reads, on
PostgreSQL (its privilege check, run by EXPLAIN as a judging role generated from the policy) and
DuckDB (its unoptimized logical plan). Each judge must refuse the reads the SQLite review's
bypasses make — a hidden column through a subquery, a CTE, a recursive CTE, NATURAL JOIN, `*`,
a whole-row reference — without running the statement, fail closed where it cannot judge, and
block `ask` like a checker violation. The PostgreSQL tests use the throwaway server of
tests/postgres_server.py and their own schema and roles; every statement is bounded by a
statement or lock timeout."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path

import duckdb
import psycopg
import pytest

import gridrail as gr
from gridrail.ask import ask, database_judge
from gridrail.check.duckdb_judge import DuckDBJudge, _PlanJudge
from gridrail.check.postgres_judge import PostgresJudge, grants_for, judging_role_name
from gridrail.cli import build_parser
from gridrail.database import Database
from gridrail.policy.view import SchemaView
from postgres_server import throwaway_schema
from test_ask import ScriptedModel
from test_walk_arm import _small_vocab

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HR_POLICY = gr.Policy.from_file(EXAMPLES / "hr_policy.toml")
PG_SCHEMA = "judge_hr"
TIMEOUT_S = 2.0

# Reads of the analyst's hidden employees.salary that the SQLite review used to get past the
# checker, written so both DuckDB and PostgreSQL accept them.
HIDDEN_READS = {
    "select list": "SELECT salary FROM employees",
    "star": "SELECT * FROM employees",
    "where": "SELECT name FROM employees WHERE salary > 100000",
    "order by": "SELECT name FROM employees ORDER BY salary LIMIT 1",
    "aggregate": "SELECT dept, avg(salary) FROM employees GROUP BY dept",
    "window": "SELECT name, rank() OVER (ORDER BY salary) FROM employees",
    "scalar subquery": "SELECT (SELECT max(salary) FROM employees)",
    "exists": "SELECT name FROM employees e WHERE EXISTS "
    "(SELECT 1 FROM employees x WHERE x.salary > e.id)",
    "cte": "WITH c AS (SELECT salary FROM employees) SELECT count(*) FROM c",
    "recursive cte": "WITH RECURSIVE r(x) AS (SELECT salary FROM employees "
    "UNION SELECT x FROM r WHERE false) SELECT count(*) FROM r",
    "star under count": "SELECT count(*) FROM (SELECT * FROM employees) AS t",
    "natural join": "SELECT * FROM employees NATURAL JOIN employees_public",
    "whole row": "SELECT e FROM employees e",
    "double-quoted": 'SELECT "salary" FROM employees',
    "union": "SELECT name FROM employees_public UNION SELECT CAST(salary AS TEXT) FROM employees",
    "second statement": "SELECT 1; SELECT salary FROM employees",
}
CLEAN_READS = (
    "SELECT name, dept FROM employees",
    "SELECT count(*) FROM employees",
    "SELECT e.name, o.total FROM employees e JOIN orders o ON o.employee_id = e.id",
    "SELECT 'salary' FROM employees",  # a string, not the column
    "SELECT name FROM employees WHERE id IN (SELECT employee_id FROM orders)",
    # a CTE nothing references is not planned, so not read at execution either
    "WITH c AS (SELECT salary FROM employees) SELECT 1",
)


def _hr_script() -> list[str]:
    lines = (EXAMPLES / "hr.sql").read_text().splitlines()
    script = "\n".join(line for line in lines if not line.startswith("--"))
    return [s for s in script.split(";") if s.strip()]


def _view(schema: gr.Schema, role: str, policy: gr.Policy = HR_POLICY) -> SchemaView:
    return SchemaView(schema, policy.role(role))


def _kinds(violations: list[gr.Violation]) -> list[tuple[str, str | None, str | None]]:
    return [(v.kind, v.table, v.column) for v in violations]


# -- DuckDB: the unoptimized logical plan ------------------------------------------------------


@pytest.fixture(scope="module")
def hr_duckdb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/hr.sql as a DuckDB file, plus a view that shows two columns of employees."""
    path = tmp_path_factory.mktemp("judge") / "hr.duckdb"
    with duckdb.connect(str(path)) as conn:
        for statement in _hr_script():
            conn.execute(statement)
        conn.execute("CREATE VIEW staff AS SELECT id, name FROM employees")
    return path


@pytest.fixture(scope="module")
def duck_analyst(hr_duckdb: Path) -> DuckDBJudge:
    return DuckDBJudge(_view(gr.Schema.from_duckdb(hr_duckdb), "analyst"))


@pytest.mark.parametrize("sql", HIDDEN_READS.values(), ids=HIDDEN_READS.keys())
def test_duckdb_binder_sees_every_read_of_a_hidden_column(duck_analyst: DuckDBJudge, sql: str):
    found = duck_analyst.judge(sql)
    assert ("database_denied", "employees", None) in _kinds(found)
    assert not any("salary" in v.message for v in found)  # the hidden column is not named


@pytest.mark.parametrize("sql", CLEAN_READS)
def test_duckdb_binder_passes_what_the_role_may_read(duck_analyst: DuckDBJudge, sql: str):
    assert duck_analyst.judge(sql) == []


def test_duckdb_a_hidden_table_may_not_even_be_counted(duck_analyst: DuckDBJudge) -> None:
    (counted,) = duck_analyst.judge("SELECT count(*) FROM salaries")
    assert _kinds([counted]) == [("database_denied", None, None)]  # nor the hidden table
    assert "salaries" not in counted.message


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM duckdb_tables()",
        "SELECT column_name FROM information_schema.columns",
        "SELECT * FROM sqlite_master",
        "DESCRIBE employees",  # the binder answers it from the catalog: names the hidden column
        "SELECT * FROM read_csv('/etc/passwd')",
    ],
)
def test_duckdb_reads_outside_the_schema_are_refused(duck_analyst: DuckDBJudge, sql: str):
    violations = duck_analyst.judge(sql)
    assert violations and {v.kind for v in violations} <= {"database_denied", "database_rejected"}


def test_duckdb_planning_runs_nothing(
    duck_analyst: DuckDBJudge, hr_duckdb: Path, tmp_path: Path
) -> None:
    """The plan is made on an in-memory copy with external access off: no file appears, the
    database is unchanged, and what is not a read or write is rejected."""
    for sql in (
        f"ATTACH '{tmp_path / 'other.db'}' AS other",
        f"COPY employees TO '{tmp_path / 'leak.csv'}'",
        "CREATE TABLE leak AS SELECT name FROM employees",
        "SET threads = 1",
        "DROP TABLE employees",
    ):
        assert [v.kind for v in duck_analyst.judge(sql)] == ["database_rejected"], sql
    assert list(tmp_path.iterdir()) == []
    assert duck_analyst.judge("SELECT name FROM employees") == []  # the copy still has it
    with duckdb.connect(str(hr_duckdb), read_only=True) as conn:
        found = conn.execute("SELECT table_name FROM information_schema.tables").fetchall()
        tables = {name for (name,) in found}
        assert tables == {"employees", "employees_public", "orders", "salaries", "staff"}


def test_duckdb_a_view_is_judged_by_its_own_columns(hr_duckdb: Path) -> None:
    policy = gr.Policy.from_text('[roles.desk]\nstatements = ["select"]\ntables = ["staff"]\n')
    judge = DuckDBJudge(_view(gr.Schema.from_duckdb(hr_duckdb), "desk", policy))
    assert judge.judge("SELECT * FROM staff") == []
    assert _kinds(judge.judge("SELECT name FROM employees")) == [("database_denied", None, None)]


def test_duckdb_writes_are_judged_against_the_tables_the_role_may_write(hr_duckdb: Path) -> None:
    schema = gr.Schema.from_duckdb(hr_duckdb)
    clerk = DuckDBJudge(_view(schema, "clerk"))  # select, insert, update on orders
    assert clerk.judge("INSERT INTO orders (id, total) VALUES (100, 2.5)") == []
    assert clerk.judge("UPDATE orders SET total = 1 WHERE id = 1") == []
    assert ("database_denied", "orders", None) in _kinds(clerk.judge("DELETE FROM orders"))
    analyst = DuckDBJudge(_view(schema, "analyst"))
    updated = analyst.judge("UPDATE employees SET salary = 1 WHERE id = 1")
    assert [m for m in (v.message for v in updated) if "sets a column of" in m]  # the salary
    assert any("updates into" in v.message for v in updated)  # analysts do not update
    assert set(_kinds(updated)) == {("database_denied", "employees", None)}
    # RETURNING of a DELETE reads the stored row: every column, the hidden one too
    admin_policy = gr.Policy.from_text(
        '[roles.purger]\nstatements = ["select", "delete"]\n'
        '[roles.purger.columns]\nemployees = { deny = ["salary"] }\n'
    )
    purger = DuckDBJudge(_view(schema, "purger", admin_policy))
    assert purger.judge("DELETE FROM employees WHERE dept = 'ops'") == []
    returning = purger.judge("DELETE FROM employees WHERE id = 1 RETURNING name")
    assert ("database_denied", "employees", None) in _kinds(returning)


def test_duckdb_a_statement_it_cannot_bind_is_rejected_with_where(duck_analyst) -> None:
    (violation,) = duck_analyst.judge("SELECT nosuch FROM employees")
    assert violation.kind == "database_rejected" and violation.start == 7


def test_duckdb_a_plan_it_cannot_read_fails_closed(hr_duckdb: Path) -> None:
    view = _view(gr.Schema.from_duckdb(hr_duckdb), "analyst")
    unknown = [{"type": "LOGICAL_SOMETHING_NEW", "children": []}]
    assert [v.kind for v in _PlanJudge(view, "x").judge(unknown)] == ["database_rejected"]
    renamed = [{"type": "LOGICAL_GET", "children": [], "qname": {"path": ["seq_scan"]}}]
    with pytest.raises(gr.JudgeError, match="plan format is not supported"):
        _PlanJudge(view, "x").judge(renamed)


def test_duckdb_judge_needs_the_catalogs_types() -> None:
    untyped = gr.Schema.from_tables("duckdb", {"employees": ["id", "salary"]})
    with pytest.raises(gr.JudgeError, match="without a type"):
        DuckDBJudge(SchemaView(untyped, None))
    with pytest.raises(gr.JudgeError, match="DuckDB schema snapshot"):
        DuckDBJudge(SchemaView(gr.Schema.from_sqlite(EXAMPLES / "hr.sqlite"), None))


# -- PostgreSQL: the privilege check, run by EXPLAIN as a judging role --------------------------


@pytest.fixture(scope="module")
def pg(postgres_dsn: str) -> Iterator[str]:
    """The HR example in its own schema, and a login role that may not create roles."""
    plain = (
        "CREATE ROLE judge_plain LOGIN",
        f"GRANT USAGE ON SCHEMA {PG_SCHEMA} TO judge_plain",
    )
    with throwaway_schema(
        postgres_dsn, PG_SCHEMA, (*_hr_script(), *plain), ("judge_plain", "judge_narrow")
    ):
        yield postgres_dsn


@cache
def _pg_schema(dsn: str) -> gr.Schema:
    return gr.Schema.from_postgres(dsn, schema=PG_SCHEMA)


def _pg_judge(dsn: str, role: str, policy: gr.Policy = HR_POLICY) -> PostgresJudge:
    view = _view(_pg_schema(dsn), role, policy)
    return PostgresJudge.provision(
        dsn, view, policy.fingerprint, pg_schema=PG_SCHEMA, timeout_s=TIMEOUT_S
    )


def test_postgres_explain_checks_column_privileges_and_prepare_does_not(pg: str) -> None:
    """Why the judge runs EXPLAIN: PostgreSQL checks privileges when the executor starts
    (ExecCheckPermissions), which EXPLAIN does without running the plan; PREPARE only parses
    and rewrites."""
    role = _pg_judge(pg, "analyst").database_role
    with psycopg.connect(pg) as conn:
        conn.execute(f'SET LOCAL search_path TO {PG_SCHEMA}; SET LOCAL ROLE "{role}"')
        conn.execute("PREPARE p AS SELECT salary FROM employees")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="employees"):
            conn.execute("EXPLAIN SELECT salary FROM employees")
        conn.rollback()


def test_postgres_generated_role_holds_exactly_the_view(pg: str) -> None:
    judge = _pg_judge(pg, "analyst")
    assert judge.database_role == judging_role_name(HR_POLICY.fingerprint, judge.view, PG_SCHEMA)
    assert len(judge.database_role.encode()) <= 63  # PostgreSQL's name limit
    assert _pg_judge(pg, "analyst").database_role == judge.database_role  # again: a no-op
    assert {(g.privilege, g.table) for g in grants_for(judge.view)} == {
        ("SELECT", "employees"),
        ("SELECT", "employees_public"),
        ("SELECT", "orders"),
    }
    with psycopg.connect(pg) as conn:
        held = conn.execute(
            "SELECT table_name, column_name, privilege_type FROM information_schema."
            "column_privileges WHERE grantee = %s",
            (judge.database_role,),
        ).fetchall()
        login = conn.execute(
            "SELECT rolcanlogin FROM pg_roles WHERE rolname = %s", (judge.database_role,)
        ).fetchone()
    assert ("employees", "salary", "SELECT") not in held and ("employees", "name", "SELECT") in held
    assert not any(table == "salaries" for table, _, _ in held)
    assert {p for _, _, p in held} == {"SELECT"} and login == (False,)


@pytest.mark.parametrize("sql", HIDDEN_READS.values(), ids=HIDDEN_READS.keys())
def test_postgres_refuses_every_read_of_a_hidden_column(pg: str, sql: str) -> None:
    (violation,) = _pg_judge(pg, "analyst").judge(sql)
    if sql.startswith("SELECT 1;"):  # the extended protocol refuses a second statement
        assert violation.kind == "database_rejected"
    else:
        assert (violation.kind, violation.table) == ("database_denied", "employees")
        assert "id, name, dept, manager_id" in violation.message  # what it may use instead


@pytest.mark.parametrize("sql", CLEAN_READS)
def test_postgres_passes_what_the_role_may_read(pg: str, sql: str) -> None:
    assert _pg_judge(pg, "analyst").judge(sql) == []


def test_postgres_hidden_tables_and_privileged_functions(pg: str) -> None:
    analyst = _pg_judge(pg, "analyst")
    (counted,) = analyst.judge("SELECT count(*) FROM salaries")
    assert _kinds([counted]) == [("database_denied", None, None)]  # the hidden table unnamed
    assert "salaries" not in counted.message
    (call,) = analyst.judge("SELECT pg_read_file('/etc/passwd')")
    assert call.kind == "database_denied" and "pg_read_file" in call.message
    (system,) = analyst.judge("SELECT ctid FROM employees")  # system columns: table privilege
    assert system.kind == "database_denied"


def test_postgres_judging_runs_nothing(pg: str) -> None:
    """A second statement is refused before anything runs, and what is judged is planned
    only, in a read-only transaction that is rolled back."""
    admin = _pg_judge(pg, "admin")
    assert [v.kind for v in admin.judge("SELECT 1; CREATE TABLE pwned (x int)")] == [
        "database_rejected"
    ]
    assert admin.judge("DELETE FROM orders") == []
    assert admin.judge("INSERT INTO orders (id, total) VALUES (99, 1)") == []
    with psycopg.connect(pg) as conn:
        assert conn.execute(f"SELECT count(*) FROM {PG_SCHEMA}.orders").fetchone() == (8,)
        found = conn.execute("SELECT to_regclass(%s)", (f"{PG_SCHEMA}.pwned",)).fetchone()
        assert found == (None,)


@pytest.mark.parametrize(
    "sql",
    [
        "ANALYZE SELECT pg_sleep(30)",  # EXPLAIN ANALYZE would run it
        "(ANALYZE) SELECT pg_sleep(30)",
        "CREATE TABLE leak AS SELECT name FROM employees",  # EXPLAIN plans it: not a query
        "/* /* */ SELECT */ CREATE TABLE leak AS SELECT name FROM employees",  # comments nest
        "DECLARE c CURSOR FOR SELECT name FROM employees",
    ],
)
def test_postgres_judges_queries_and_writes_only(pg: str, sql: str) -> None:
    (violation,) = _pg_judge(pg, "admin").judge(sql)
    assert violation.kind == "database_rejected"


def test_postgres_writes_are_judged_against_the_tables_the_role_may_write(pg: str) -> None:
    clerk = _pg_judge(pg, "clerk")
    assert clerk.judge("UPDATE orders SET total = 1 WHERE id = 1") == []
    assert _kinds(clerk.judge("DELETE FROM orders")) == [("database_denied", "orders", None)]
    assert _kinds(clerk.judge("UPDATE employees SET dept = 'x'")) == [  # hidden from clerks
        ("database_denied", None, None)
    ]


def test_postgres_a_statement_it_cannot_plan_is_rejected_with_where(pg: str) -> None:
    (violation,) = _pg_judge(pg, "analyst").judge("SELECT nosuch FROM employees")
    assert violation.kind == "database_rejected" and violation.start == 7
    assert 'column "nosuch" does not exist' in violation.message


def test_postgres_a_locked_table_times_out_instead_of_hanging(pg: str) -> None:
    judge = _pg_judge(pg, "analyst")
    with psycopg.connect(pg) as holder:
        holder.execute(f"LOCK TABLE {PG_SCHEMA}.employees IN ACCESS EXCLUSIVE MODE")
        (violation,) = judge.judge("SELECT name FROM employees")
        holder.rollback()
    assert violation.kind == "database_rejected" and "not planned within 2 s" in violation.message


def test_postgres_without_createrole_it_fails_closed_and_says_what_is_needed(pg: str) -> None:
    plain = pg.replace("user=postgres", "user=judge_plain")
    view = _view(_pg_schema(pg), "analyst")
    with pytest.raises(gr.JudgeError, match="CREATEROLE") as caught:
        PostgresJudge.provision(plain, view, HR_POLICY.fingerprint, pg_schema=PG_SCHEMA)
    assert "--judge-role" in str(caught.value)


def test_postgres_a_pre_provisioned_role_may_be_narrower_never_wider(pg: str) -> None:
    plain = pg.replace("user=postgres", "user=judge_plain")
    view = _view(_pg_schema(pg), "analyst")
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS judge_narrow")
        conn.execute("CREATE ROLE judge_narrow NOLOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA {PG_SCHEMA} TO judge_narrow")
        conn.execute(f"GRANT SELECT (id, name) ON {PG_SCHEMA}.employees TO judge_narrow")
        conn.execute("GRANT judge_narrow TO judge_plain")
    judge = PostgresJudge(plain, view, "judge_narrow", pg_schema=PG_SCHEMA, timeout_s=TIMEOUT_S)
    assert judge.judge("SELECT name FROM employees") == []
    assert [v.kind for v in judge.judge("SELECT dept FROM employees")] == ["database_denied"]
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(f"GRANT SELECT ON {PG_SCHEMA}.salaries TO PUBLIC")  # someone else's grant
    try:
        with pytest.raises(gr.JudgeError, match=r"holds SELECT on salaries\.employee_id"):
            judge.judge("SELECT name FROM employees")  # checked again at every judgment
        with pytest.raises(gr.JudgeError, match="PUBLIC"):
            _pg_judge(pg, "analyst")
    finally:
        with psycopg.connect(pg, autocommit=True) as conn:
            conn.execute(f"REVOKE SELECT ON {PG_SCHEMA}.salaries FROM PUBLIC")


# -- ask: a judge's violation blocks the answer like the checker's ------------------------------


def test_ask_does_not_pass_what_the_database_judge_refuses(hr_duckdb: Path) -> None:
    """`total()` is SQLite's: the checker passes it, DuckDB's binder cannot bind it, so the
    answer is not clean (not executed) until the repair writes what DuckDB can judge."""
    schema = gr.Schema.from_duckdb(hr_duckdb)
    guide = gr.compile(
        gr.Grammar.bundled("sqlite"), _small_vocab(), schema=schema, policy=HR_POLICY, role="clerk"
    )
    judge = database_judge(Database.open(str(hr_duckdb)), guide.view, HR_POLICY.fingerprint)
    assert isinstance(judge.__self__, DuckDBJudge)
    sqlite_only, portable = "SELECT total(total) FROM orders;", "SELECT sum(total) FROM orders;"
    assert guide.check(sqlite_only) == []
    model = ScriptedModel("scripted", None, None, _small_vocab(), (sqlite_only, portable))
    answer = ask("How much was ordered?", guide, model, judge=judge, audit=False)
    assert [v.kind for v in answer.attempts[0].violations] == ["database_rejected"]
    assert answer.sql == portable and answer.violations == []
    unrepaired = ask("q", guide, model, judge=judge, repair=False, audit=False)
    assert unrepaired.violations and unrepaired.sql == sqlite_only


def test_database_judge_per_kind(pg: str, hr_duckdb: Path) -> None:
    sqlite = Database.open(str(EXAMPLES / "hr.sqlite"))
    view = _view(gr.Schema.from_sqlite(EXAMPLES / "hr.sqlite"), "analyst")
    assert database_judge(sqlite, view, HR_POLICY.fingerprint) is None  # inside guide.check
    with pytest.raises(gr.JudgeError, match="PostgreSQL role"):
        database_judge(sqlite, view, HR_POLICY.fingerprint, judge_role="someone")
    args = build_parser().parse_args(["ask", "--db", "x", "--role", "r", "--judge-role", "j", "q"])
    assert args.judge_role == "j"
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.employees (id int)")
    try:
        pg_view = _view(gr.Schema.from_postgres(pg), "auditor")  # the public schema
        judge = database_judge(Database.open(pg), pg_view, HR_POLICY.fingerprint)
        assert isinstance(judge.__self__, PostgresJudge) and judge("SELECT id FROM employees") == []
    finally:
        with psycopg.connect(pg, autocommit=True) as conn:
            conn.execute("DROP TABLE public.employees")

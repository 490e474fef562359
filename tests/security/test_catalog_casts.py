"""Security finding: on PostgreSQL a CAST was an existence oracle. PostgreSQL looks a CAST's
type name up in its catalogs, where every table has a row type of its own name, and the OID
alias types (regclass, regtype, regproc, regrole, ...) look the cast value up as a table, type,
function or role name, with no privilege check. So for the HR analyst, who may not see
`salaries`, `SELECT CAST('salaries' AS regclass);` and `SELECT CAST(NULL AS salaries);` passed
the mask, the checker and PostgreSQL's judge (EXPLAIN as the judging role: the lookup needs no
privilege) and ran, while the same statements naming a table that does not exist were refused
by the judge ("relation ... does not exist"); and `CAST(CAST(<oid> AS regclass) AS text)` named
the hidden table outright.

Now, over a PostgreSQL schema, a CAST may name only a built-in type that looks nothing up
(`policy.dialect.CAST_TYPES`), for every role: anything else is a `cast_not_allowed` that quotes
only the type as written, so a hidden table and an absent one get the same answer, through
`guide.check` with PostgreSQL's judge as `ask` and /v1/check use it. SQLite and DuckDB keep
every type name: neither looks a table up by one (checked here on DuckDB's judge)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path

import duckdb
import psycopg
import pytest

import gridrail as gr
from gridrail.check.duckdb_judge import DuckDBJudge
from gridrail.check.postgres_judge import PostgresJudge
from gridrail.database import Database
from gridrail.policy.dialect import CAST_TYPES, cast_type_key, identifier_rules
from gridrail.serve.app import _violation
from postgres_server import throwaway_schema

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
POLICY = gr.Policy.from_file(EXAMPLES / "hr_policy.toml")
PG_SCHEMA = "cast_hr"
HIDDEN, ABSENT = "salaries", "salariez"  # the analyst may not see salaries; salariez is nowhere
# "@" is the table's name
ORACLES = [
    "SELECT CAST('@' AS regclass);",
    "SELECT CAST('@' AS REGCLASS);",
    "SELECT CAST('cast_hr.@' AS regclass);",
    "SELECT name FROM employees WHERE CAST('@' AS regclass) IS NOT NULL;",
    "SELECT CAST(CAST(CAST('@' AS regclass) AS oid) AS integer);",
    "SELECT CAST('@' AS regtype);",
    "SELECT CAST(NULL AS @);",  # the table's row type
    "SELECT CAST('(1,2,x)' AS @);",
]
# PostgreSQL's types whose input looks a name up in the catalogs without a privilege check
OID_ALIASES = (
    "regclass", "regtype", "regproc", "regprocedure", "regoper", "regoperator",
    "regnamespace", "regrole", "regcollation", "regconfig", "regdictionary",
)  # fmt: skip


def _vocab() -> gr.Vocabulary:
    return gr.Vocabulary([*(bytes((b,)) for b in range(256)), None], eos_token_ids=256)


def _hr_script() -> list[str]:
    lines = (EXAMPLES / "hr.sql").read_text().splitlines()
    script = "\n".join(line for line in lines if not line.startswith("--"))
    return [s for s in script.split(";") if s.strip()]


@cache
def _guide(schema: gr.Schema, role: str) -> gr.Guide:
    return gr.compile(
        gr.Grammar.bundled("sqlite"), _vocab(), schema=schema, policy=POLICY, role=role
    )


@pytest.fixture(scope="module")
def pg(postgres_dsn: str) -> Iterator[str]:
    """The HR example in its own schema; the DSN's search path is that schema."""
    with throwaway_schema(postgres_dsn, PG_SCHEMA, _hr_script()):
        yield f"{postgres_dsn} options='-csearch_path={PG_SCHEMA}'"


@pytest.fixture(scope="module")
def analyst(pg: str) -> tuple[gr.Guide, PostgresJudge]:
    guide = _guide(gr.Schema.from_postgres(pg, schema=PG_SCHEMA), "analyst")
    judge = PostgresJudge.provision(pg, guide.view, POLICY.fingerprint, pg_schema=PG_SCHEMA)
    return guide, judge


def _told(guide: gr.Guide, sql: str, judge) -> list[dict]:
    """What /v1/check (and `ask`'s repair prompt) tells the role of `sql`."""
    return [_violation(v) for v in guide.check(sql, judge)]


def _assert_indistinguishable(guide: gr.Guide, judge, statement: str) -> None:
    told = _told(guide, statement.replace("@", HIDDEN), judge)
    other = _told(guide, statement.replace("@", ABSENT), judge)
    back = [
        {k: v.replace(ABSENT, HIDDEN) if isinstance(v, str) else v for k, v in found.items()}
        for found in other
    ]
    assert told, "a statement that looks the hidden table up is refused"
    assert told == back


@pytest.mark.parametrize("statement", ORACLES)
def test_postgres_a_cast_does_not_tell_whether_a_hidden_table_exists(
    analyst: tuple[gr.Guide, PostgresJudge], statement: str
) -> None:
    guide, judge = analyst
    _assert_indistinguishable(guide, judge.judge, statement)
    found = guide.check(statement.replace("@", HIDDEN), judge.judge)
    assert {v.kind for v in found} == {"cast_not_allowed"}


def test_postgres_a_cast_of_an_oid_does_not_name_a_hidden_table(
    pg: str, analyst: tuple[gr.Guide, PostgresJudge]
) -> None:
    """regclass's output looks the OID up too: a number cast to it names the table."""
    guide, judge = analyst
    with psycopg.connect(pg) as conn:
        (oid,) = conn.execute("SELECT CAST(CAST('salaries' AS regclass) AS oid)").fetchone()
    sql = f"SELECT CAST(CAST({oid} AS regclass) AS text);"
    assert Database.open(pg).execute(sql).rows == (("salaries",),)  # what it would tell
    assert [v.kind for v in guide.check(sql, judge.judge)] == ["cast_not_allowed"]


@pytest.mark.parametrize("role", ["analyst", "admin"])
@pytest.mark.parametrize("type_name", OID_ALIASES)
def test_postgres_every_oid_alias_type_is_refused_to_every_role(
    analyst: tuple[gr.Guide, PostgresJudge], role: str, type_name: str
) -> None:
    guide = _guide(analyst[0].view.schema, role)
    for written in (type_name, type_name.upper()):
        (violation,) = guide.check(f"SELECT CAST('x' AS {written});")
        assert violation.kind == "cast_not_allowed"
        assert f'"{written}"' in violation.message and "integer" in violation.message
        assert "salaries" not in violation.message


def test_postgres_built_in_casts_pass_and_run(
    pg: str, analyst: tuple[gr.Guide, PostgresJudge]
) -> None:
    guide, judge = analyst
    sql = (
        "SELECT CAST(total AS numeric(10, 2)), CAST(id AS double precision), "
        "CAST(placed_on AS date), CAST(employee_id AS TEXT), CAST(total AS int) "
        "FROM orders WHERE id = 1;"
    )
    assert guide.check(sql, judge.judge) == []
    database = Database.open(pg).acting_as(judge.database_role)
    (row,) = database.execute(sql).rows
    assert [str(value) for value in row] == ["19.50", "1.0", "2026-01-03", "2", "20"]


def test_every_listed_postgres_type_is_a_built_in_one(pg: str) -> None:
    """Each name `CAST_TYPES` lets a CAST write resolves to a pg_catalog type that is no OID
    alias type (whose input would look a name up)."""
    allowed = CAST_TYPES["postgres"]
    assert allowed is not None and not allowed & set(OID_ALIASES)
    with psycopg.connect(pg) as conn:
        for name in sorted(allowed):
            found = conn.execute(
                "SELECT n.nspname, t.typinput::text FROM pg_catalog.pg_type t JOIN "
                "pg_catalog.pg_namespace n ON n.oid = t.typnamespace "
                f"WHERE t.oid = pg_catalog.pg_typeof(CAST(NULL AS {name}))"
            ).fetchone()
            assert found is not None and found[0] == "pg_catalog", name
            assert not found[1].startswith("reg"), name


def test_a_type_name_is_listed_by_its_words_unquoted() -> None:
    rules = identifier_rules("postgres")
    assert cast_type_key(rules, ["Double", "PRECISION"]) == "double precision"
    assert cast_type_key(rules, ['"integer"']) is None  # quoted: not the keyword
    assert cast_type_key(rules, ["pg_catalog.regclass"]) is None


def test_sqlite_and_duckdb_take_any_type_name(tmp_path: Path) -> None:
    """Neither looks a table up by a type name: over DuckDB, with its judge, a hidden table and
    an absent one still get one answer, and SQLite reads an affinity off any words."""
    sqlite = _guide(gr.Schema.from_sqlite(EXAMPLES / "hr.sqlite"), "analyst")
    assert sqlite.check("SELECT CAST(total AS regclass) FROM orders;") == []
    path = tmp_path / "hr.duckdb"
    with duckdb.connect(str(path)) as conn:
        for statement in _hr_script():
            conn.execute(statement)
    guide = _guide(gr.Schema.from_duckdb(path), "analyst")
    judge = DuckDBJudge(guide.view)
    for statement in ("SELECT CAST(NULL AS @);", "SELECT CAST('@' AS regclass);"):
        _assert_indistinguishable(guide, judge.judge, statement)
    assert guide.check("SELECT CAST(total AS integer) FROM orders;", judge.judge) == []

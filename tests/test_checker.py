"""The SemanticChecker: the table-driven fixtures (tests/fixtures/checker/cases.sql), name binding
against SQLite itself, and the Spider gold statements against their own databases."""

from __future__ import annotations

import random
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from assets import asset, spider_gold
from gridrail.check import SemanticChecker, Violation
from gridrail.errors import ParseError
from gridrail.grammar.compiled import CompiledGrammar, compile_grammar
from gridrail.grammar.model import Grammar
from gridrail.parse.tree import parse_tree
from gridrail.policy.bundle import Policy
from gridrail.policy.role import ColumnRule, Role
from gridrail.policy.schema import Schema
from gridrail.policy.view import SchemaView
from support.hr_example import HR_DB
from support.name_probes import join_statement

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "checker"
KINDS = {
    "unknown_table",
    "unknown_column",
    "column_not_visible",
    "ambiguous_column",
    "unbound_qualifier",
    "function_not_allowed",
    "double_quoted_column",
    "circular_reference",
    "statement_too_complex",
}
NAME_ERRORS = {"unknown_table", "unknown_column", "ambiguous_column", "unbound_qualifier"}
SQLITE_NAME_ERRORS = (  # phrases of SQLite's messages for a name it cannot bind
    "no such table",
    "no such column",
    "ambiguous column name",
    "cannot join using column",
    "has no column named",
)

# Gold lines (1-based) that are not SQLite (ORDER BY/LIMIT before INTERSECT): ParseError.
GOLD_NOT_SQLITE = {5939, 5940}
# Gold statements that are wrong for their database, as SQLite agrees (it cannot prepare
# them): the violations the checker reports, as (kind, offending text).
GOLD_ERRORS = {
    4398: [  # assets_maintenance has no Ref_Company_Types, Third_Party_Companies no such column
        ("unknown_table", "Ref_Company_Types"),
        ("unknown_column", "T1.company_type_code"),
    ],
}
MUTATIONS = 1500


@dataclass(frozen=True)
class Case:
    name: str
    schema: str  # "hr" or "spider:<db>"
    role: str | None
    expect: tuple[tuple[str, str | None], ...]  # (kind, offending text or None: any)
    sql: str


def _read_cases(path: Path) -> list[Case]:
    """Parse cases.sql (its header says the format)."""
    cases: list[Case] = []
    fields: dict[str, str] = {}
    lines: list[str] = []

    def finish() -> None:
        if fields:
            expect = fields["expect"]
            items = [] if expect == "clean" else [e.strip() for e in expect.split(",")]
            cases.append(
                Case(
                    fields["case"],
                    fields.get("schema", "hr"),
                    None if fields.get("role", "none") == "none" else fields["role"],
                    tuple((k, t or None) for k, _, t in (i.partition("@") for i in items)),
                    "\n".join(lines).strip(),
                )
            )

    for line in path.read_text(encoding="utf-8").splitlines():
        key, sep, value = line[3:].partition(": ")
        if line.startswith("-- ") and sep and key in ("case", "schema", "role", "expect"):
            if key == "case":
                finish()
                fields, lines = {}, []
            fields[key] = value.strip()
        elif fields and not line.startswith("--"):
            lines.append(line)
    finish()
    return cases


CASES = _read_cases(FIXTURES / "cases.sql")


@cache
def _compiled() -> CompiledGrammar:
    return compile_grammar(Grammar.bundled("sqlite"))


@cache
def _policy() -> Policy:
    return Policy.from_file(FIXTURES / "policy.toml")


@pytest.fixture(scope="module")
def hr_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("checker") / "hr.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.executescript((FIXTURES / "hr.sql").read_text())
    return path


@cache
def _spider_schema(db: str) -> Schema:
    return Schema.from_sqlite(asset("data", "spider", "database", db, f"{db}.sqlite"))


def _schema(name: str, hr_database: Path) -> Schema:
    if name == "hr":
        return Schema.from_sqlite(hr_database)
    return _spider_schema(name.removeprefix("spider:"))


def _checker(schema: Schema, role: str | None) -> SemanticChecker:
    return SemanticChecker(_compiled(), SchemaView(schema, _policy().role(role) if role else None))


def _covered(sql: str, v: Violation) -> str:
    return sql.encode()[v.start : v.end].decode()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fixture(case: Case, hr_database: Path) -> None:
    found = _checker(_schema(case.schema, hr_database), case.role).check(case.sql)
    messages = "\n".join(v.message for v in found)
    assert [v.kind for v in found] == [kind for kind, _ in case.expect], messages
    for (_, text), violation in zip(case.expect, found, strict=True):
        assert text in (None, _covered(case.sql, violation)), messages


def test_fixtures_cover_every_kind_and_clean_statements() -> None:
    kinds = {kind for case in CASES for kind, _ in case.expect}
    assert kinds == KINDS
    assert sum(not case.expect for case in CASES) >= 15
    assert len({case.name for case in CASES}) == len(CASES)


def test_fixture_statements_bind_like_sqlite(hr_database: Path) -> None:
    """Without a role, the checker finds a name error exactly when SQLite cannot prepare the
    statement for one."""
    checker = _checker(_schema("hr", hr_database), None)
    with closing(sqlite3.connect(f"file:{hr_database}?mode=ro", uri=True)) as db:
        for case in (c for c in CASES if c.schema == "hr"):
            ours = {v.kind for v in checker.check(case.sql)} & NAME_ERRORS
            theirs = _sqlite_name_error(db, case.sql)
            assert bool(ours) == (theirs is not None), f"{case.name}: {ours} vs {theirs}"


def _is_name_error(message: str) -> bool:
    return any(phrase in message for phrase in SQLITE_NAME_ERRORS)


def _sqlite_name_error(db: sqlite3.Connection, sql: str) -> str | None:
    """SQLite's message if it cannot prepare `sql` because of a name, else None."""
    try:
        db.execute("EXPLAIN " + sql.rstrip().rstrip(";"))
    except sqlite3.Error as exc:
        return str(exc) if _is_name_error(str(exc)) else None
    return None


def test_messages_say_what_to_do(hr_database: Path) -> None:
    checker = _checker(_schema("hr", hr_database), "analyst")
    sql = "SELECT name, salary FROM employees AS e WHERE upper(e.nme) = 'X';"
    hidden, function, unknown = checker.check(sql)
    assert hidden == Violation(  # as a column no table has: its name is all the role learns
        "unknown_column",
        'no table in scope has a column "salary" that role "analyst" may use; columns in '
        "scope: employees AS e: id, name, dept_id, manager_id",
        13,
        19,
        None,
        "salary",
    )
    assert function.message.startswith('function "upper" is not allowed for role "analyst"')
    assert function.message.endswith("count, lower, max, min, round, sum")
    assert (unknown.kind, unknown.table, unknown.column) == ("unknown_column", "employees", "nme")
    assert unknown.message == (
        'employees AS e has no column "nme" that role "analyst" may use; its columns: id, name, '
        "dept_id, manager_id"
    )
    (qualifier,) = checker.check("SELECT x.name FROM employees AS e, departments;")
    assert qualifier.message == (
        '"x" is not a table or alias in scope; qualifiers in scope: e (employees), departments'
    )
    (ambiguous,) = checker.check("SELECT id FROM employees AS e JOIN departments AS d ON 1;")
    assert (ambiguous.column, ambiguous.message) == (
        "id",
        'column "id" is ambiguous: employees AS e and departments AS d both have it; qualify '
        "it with the table or alias it should read",
    )
    (table,) = checker.check("SELECT entry FROM audit_log;")
    assert (table.kind, table.table) == ("unknown_table", "audit_log")
    assert table.message == (
        'no table or view named "audit_log" that role "analyst" may use; tables it may use: '
        "departments, employees, projects, payroll, staff"
    )


def test_a_statement_that_is_not_a_sentence_raises(hr_database: Path) -> None:
    checker = _checker(_schema("hr", hr_database), None)
    with pytest.raises(ParseError) as err:
        checker.check("SELECT name FROM employees")
    assert err.value.offset == len("SELECT name FROM employees")


def test_long_operator_chains_do_not_exhaust_the_stack(hr_database: Path) -> None:
    checker = _checker(_schema("hr", hr_database), "analyst")
    chain = " OR ".join(["id = 1"] * 3000)
    assert (
        checker.check(f"SELECT name FROM employees WHERE {chain} OR ssn = '';")[0].column == "ssn"
    )


def test_names_compare_with_the_dialects_rules() -> None:
    """PostgreSQL folds unquoted names to lower case and matches quoted ones exactly."""
    schema = Schema.from_tables("postgres", {"people": ["id", "Name"]})
    checker = SemanticChecker(_compiled(), SchemaView(schema, Role("r", frozenset({"select"}))))
    assert checker.check("SELECT id FROM PEOPLE;") == []
    assert checker.check('SELECT p."Name" FROM people AS p;') == []
    assert [v.kind for v in checker.check("SELECT p.Name FROM people AS p;")] == ["unknown_column"]
    # hidden, "Name" is as absent as name
    role = Role(
        "r", frozenset({"select"}), columns={"people": ColumnRule(deny=frozenset({"Name"}))}
    )
    hiding = SemanticChecker(_compiled(), SchemaView(schema, role))
    assert [v.kind for v in hiding.check('SELECT p."Name" FROM people AS p;')] == ["unknown_column"]


@cache
def _gold() -> tuple[tuple[int, str, str], ...]:
    """(line number, statement with its ";", db_id) for every gold line."""
    out = []
    with open(spider_gold(), encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            sql, db = line.rstrip("\n").split("\t")
            sql = sql.strip()
            out.append((number, sql if sql.endswith(";") else sql + ";", db))
    return tuple(out)


def _spider_database(db: str) -> Path | None:
    path = spider_gold().parent / "database" / db / f"{db}.sqlite"
    return path if path.exists() else None  # baseball_1 and soccer_1 are not shipped


@cache
def _gold_checker(db: str) -> SemanticChecker:
    return _checker(_spider_schema(db), None)


def test_spider_gold_is_clean_against_its_own_databases() -> None:
    """Every gold statement, no role: clean, except the ones SQLite rejects too."""
    errors = {}
    for number, sql, db in _gold():
        if number in GOLD_NOT_SQLITE or _spider_database(db) is None:
            continue
        found = _gold_checker(db).check(sql)
        if found:
            errors[number] = [(v.kind, _covered(sql, v)) for v in found]
    assert errors == GOLD_ERRORS


def test_spider_gold_reads_exactly_what_sqlite_reads() -> None:
    """The policy half, against SQLite's authorizer: for a role that may read no column at all
    (it sees them all, but holds no select: each read is reported by name), the (table,
    column) pairs the checker reports are exactly those SQLite asks to read (SQLITE_READ)
    while preparing the statement, gold statement by gold statement."""
    mismatches = []
    for number, sql, db in _gold():
        if number in GOLD_NOT_SQLITE | set(GOLD_ERRORS) or _spider_database(db) is None:
            continue
        flagged = {
            (v.table.lower(), v.column.lower())
            for v in _blind_checker(db).check(sql)
            if v.table and v.column
        }
        reads = _sqlite_reads(_spider_database(db), sql)
        if flagged != reads:
            mismatches.append(
                f"{number}: ours only {flagged - reads}, SQLite only {reads - flagged}"
            )
    assert not mismatches, "\n".join(mismatches[:10])


@cache
def _blind_checker(db: str) -> SemanticChecker:
    view = SchemaView(_spider_schema(db), Role("blind", frozenset()))
    return SemanticChecker(_compiled(), view)


@cache
def _read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)


def _sqlite_reads(path: Path, sql: str) -> set[tuple[str, str]]:
    """The columns SQLite's authorizer is asked about (an empty column name means a table
    read without a column, as for count(*))."""
    reads = set()

    def authorize(action: int, table: str, column: str, *_: object) -> int:
        if action == sqlite3.SQLITE_READ and column:
            reads.add((table.lower(), column.lower()))
        return sqlite3.SQLITE_OK

    database = _read_only(path)
    database.set_authorizer(authorize)
    try:
        database.execute("EXPLAIN " + sql.rstrip(";"))
    finally:
        database.set_authorizer(None)
    return reads


@dataclass(frozen=True)
class _Corpus:
    """Statements to mutate, each with the schema, checker and database it is judged against."""

    statements: list[str]
    schema: Schema
    checker: SemanticChecker
    database: sqlite3.Connection


def test_mutated_gold_binds_like_sqlite() -> None:
    """Replace one name of a gold statement (a column, qualifier, table or alias) by another
    name of its database or statement: the checker reports a name error iff SQLite cannot
    prepare the statement for one."""
    gold: dict[str, list[str]] = {}
    for number, sql, db in _gold():
        if number not in GOLD_NOT_SQLITE | set(GOLD_ERRORS):
            gold.setdefault(db, []).append(sql)
    corpora = [
        _Corpus(statements, _spider_schema(db), _gold_checker(db), _read_only(path))
        for db, statements in sorted(gold.items())
        if (path := _spider_database(db)) is not None
    ]
    assert not _binding_disagreements(corpora, random.Random(20240611))


def test_mutated_fixtures_bind_like_sqlite(hr_database: Path) -> None:
    """The same on the hr fixtures, which reach CTEs, USING, NATURAL, compounds and DML."""
    schema = _schema("hr", hr_database)
    statements = [c.sql for c in CASES if c.schema == "hr"]
    with closing(sqlite3.connect(f"file:{hr_database}?mode=ro", uri=True)) as database:
        corpus = _Corpus(statements, schema, _checker(schema, None), database)
        assert not _binding_disagreements([corpus], random.Random(7))


def _binding_disagreements(corpora: list[_Corpus], rng: random.Random) -> list[str]:
    """Mutants on which the checker and SQLite disagree about a name error (mutants SQLite
    rejects for another reason -- a correlated aggregate, `CAST.x` -- are left out)."""
    disagreements = []
    compared = 0
    while compared < MUTATIONS:
        corpus = rng.choice(corpora)
        mutant = _mutate(rng.choice(corpus.statements), corpus.schema, rng)
        try:
            ours = {v.kind for v in corpus.checker.check(mutant)} & NAME_ERRORS
        except ParseError:
            continue
        try:
            corpus.database.execute("EXPLAIN " + mutant.rstrip().rstrip(";"))
            theirs = None
        except sqlite3.Error as exc:
            theirs = str(exc)
            if not _is_name_error(theirs):
                continue
        compared += 1
        if bool(ours) != (theirs is not None):
            disagreements.append(f"{mutant}\n  ours: {sorted(ours)}\n  SQLite: {theirs}")
    return disagreements


def _mutate(sql: str, schema: Schema, rng: random.Random) -> str:
    names = ("COLUMN_NAME", "QUALIFIER", "TABLE_NAME", "TABLE_ALIAS", "COLUMN_ALIAS")
    tokens = [t for t in parse_tree(_compiled(), sql).tokens() if t.terminal in names]
    if not tokens:
        return sql
    token = rng.choice(tokens)
    columns = [c.name for t in schema.tables for c in t.columns]
    if token.terminal == "COLUMN_NAME":
        column = rng.choice(columns)
        replacement = rng.choice([column, f'"{column}"'])
    elif token.terminal == "QUALIFIER":
        qualifiers = [t.text for t in tokens if t.terminal == "QUALIFIER"]
        qualifiers += [f"{t.text}." for t in tokens if t.terminal in ("TABLE_NAME", "TABLE_ALIAS")]
        replacement = rng.choice([*qualifiers, ""])
    elif token.terminal == "TABLE_NAME":
        replacement = rng.choice([t.name for t in schema.tables])
    else:
        replacement = rng.choice([t.text for t in tokens if t.terminal != "QUALIFIER"])
    data = sql.encode()
    return (data[: token.start] + replacement.encode() + data[token.end :]).decode()


def test_an_on_that_sqlite_refuses_for_its_names_is_flagged() -> None:
    """A differential against SQLite on random FROM clauses of joins
    (`support.name_probes.join_statement`, over the HR example): SQLite binds an ON inside a
    parenthesized join that is not the FROM clause's first item against that join's items
    only, and refuses an ON that reads an item after its join in an outer join or in a clause
    with a RIGHT or FULL join. The checker bound every
    ON against the whole FROM clause and passed such statements (found in session 29). Now
    every statement SQLite refuses for a name is flagged, and every one the checker passes
    prepares. (The checker may flag more: SQLite turns a LEFT JOIN into an inner join where a
    later ON rejects its NULL row, and then lets its ON read later items.)"""
    schema = Schema.from_sqlite(HR_DB)
    checker = SemanticChecker(_compiled(), SchemaView(schema, None))
    rng, flagged = random.Random(29), 0
    with closing(sqlite3.connect(f"file:{HR_DB}?mode=ro", uri=True)) as db:
        for _ in range(400):
            sql = join_statement(rng)
            try:
                db.execute("EXPLAIN " + sql)
                refused = None
            except sqlite3.Error as exc:
                refused = str(exc)
            names = [v for v in checker.check(sql) if v.kind in _NAME_KINDS]
            flagged += bool(names)
            assert names or refused is None, (sql, refused)
    assert 50 < flagged < 350  # both verdicts are common in the sample


_NAME_KINDS = ("unknown_column", "ambiguous_column", "unbound_qualifier")

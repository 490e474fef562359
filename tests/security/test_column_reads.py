"""Security review, issue 11, C1 and C2: column reads the checker did not see, and SQLite's own
binder as the judge of column reads (`gridrail.check.sqlite_judge`). Each test reproduces a
finding of the review, or a disagreement between the checker and SQLite that the differential
run (bench/checker_differential.py) found; each failed before the fix. SQLite's verdict is the
oracle throughout: what it reads is what the authorizer hears while it prepares the statement."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

import gridrail as gr
from gridrail.check import SemanticChecker
from gridrail.check.sqlite_judge import SqliteJudge
from gridrail.grammar.compiled import CompiledGrammar, compile_grammar
from gridrail.policy.bundle import Policy
from gridrail.policy.role import ColumnRule, Role
from gridrail.policy.schema import Schema
from gridrail.policy.view import SchemaView
from test_schema import _views_have_rowid

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# people.ssn is the INTEGER PRIMARY KEY, so `rowid` reads it; w has no row key at all
PEOPLE = """
CREATE TABLE people (ssn INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE w (k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID;
CREATE TABLE quirk (id INTEGER PRIMARY KEY DESC, name TEXT);
CREATE TABLE keyed (a INTEGER, b TEXT, PRIMARY KEY (a));
CREATE TABLE shadow (rowid TEXT, oid TEXT, _rowid_ TEXT);
CREATE TABLE plain (x TEXT);
CREATE VIEW pv AS SELECT name FROM people;
"""
SALARY_HIDDEN = (
    '[roles.r]\nstatements = ["select"]\n[roles.r.columns]\nemployees = { deny = ["salary"] }\n'
)


@cache
def _dialect() -> CompiledGrammar:
    return compile_grammar(gr.Grammar.bundled("sqlite"))


@cache
def _hr() -> Schema:
    return Schema.from_sqlite(EXAMPLES / "hr.sqlite")


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> Schema:
    path = tmp_path_factory.mktemp("column_reads") / "people.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.executescript(PEOPLE)
    return Schema.from_sqlite(path)


@cache
def _guide(policy: str, role: str) -> gr.Guide:
    vocab = gr.Vocabulary([*(bytes((b,)) for b in range(256)), None], eos_token_ids=256)
    return gr.compile(
        gr.Grammar.bundled("sqlite"),
        vocab,
        schema=_hr(),
        policy=Policy.from_text(policy),
        role=role,
    )


def _deny(schema: Schema, table: str, *columns: str) -> SchemaView:
    rule = ColumnRule(deny=frozenset(columns))
    return SchemaView(schema, Role("r", frozenset({"select"}), columns={table: rule}))


def _found(view: SchemaView, sql: str) -> list[tuple[str, str | None, str | None]]:
    return [(v.kind, v.table, v.column) for v in SemanticChecker(_dialect(), view).check(sql)]


def _reads(view: SchemaView, sql: str) -> set[tuple[str, str]]:
    """The (table, column) reads SQLite reports preparing `sql` (it must prepare it)."""
    prepared = SqliteJudge(view).prepare(sql)
    assert prepared.error is None, prepared.error
    return {(a.table, a.name) for a in prepared.accesses if a.action == "read" and a.name}


# ----- C1: recursive CTEs --------------------------------------------------------------------

C1_SUBQUERY = (
    'SELECT name, (WITH RECURSIVE orders AS (SELECT 0 AS id UNION ALL SELECT "salary" FROM orders'
    " WHERE id = 0) SELECT max(id) FROM orders) FROM employees;"
)
C1_NATURAL = (
    "WITH RECURSIVE orders AS (SELECT 120000 AS salary, 1 AS id UNION ALL SELECT 0, 2 FROM orders"
    " NATURAL JOIN employees) SELECT count(*) FROM orders;"
)


def test_c1_a_recursive_select_does_not_hide_an_outer_column() -> None:
    """The recursive SELECT's columns are the anchor's ({id}), so "salary" binds to the outer
    employees, as SQLite binds it: before, the CTE's own columns were unknown and took it."""
    view = _deny(_hr(), "employees", "salary")
    assert ("employees", "salary") in _reads(view, C1_SUBQUERY)
    assert _found(view, C1_SUBQUERY) == [("double_quoted_column", None, None)]
    assert _kinds_of(C1_SUBQUERY) == ["double_quoted_column"]


def test_c1_a_recursive_select_natural_join_compares_the_hidden_column() -> None:
    """The yes/no oracle: the anchor names a column salary, so NATURAL JOIN employees compares
    employees.salary (SQLite builds that comparison without telling the authorizer: only the
    checker can see it)."""
    view = _deny(_hr(), "employees", "salary")
    assert ("column_not_visible", "employees", None) in _found(view, C1_NATURAL)
    assert "column_not_visible" in _kinds_of(C1_NATURAL)


@pytest.mark.parametrize(
    "sql",
    [
        # a subquery of the body reads it: SQLite says "circular reference"
        "WITH c AS (SELECT 1 AS x UNION ALL SELECT (SELECT x FROM c) FROM people) SELECT x FROM c;",
        # the anchor reads it
        "WITH c AS (SELECT x FROM c UNION ALL SELECT 1 AS x) SELECT x FROM c;",
        # a core before the recursive ones, joined by another operator, reads it
        "WITH c AS (SELECT 1 AS x UNION SELECT 2 FROM c UNION ALL SELECT 3 FROM c)"
        " SELECT x FROM c;",
        # two bodies read each other
        "WITH a AS (SELECT x FROM b), b AS (SELECT x FROM a) SELECT x FROM a;",
        # a recursive SELECT reads it twice ("multiple references to recursive table")
        "WITH c(x) AS (SELECT 1 UNION ALL SELECT 2 FROM c, c AS d) SELECT x FROM c;",
    ],
)
def test_c1_a_cte_read_where_sqlite_refuses_it_is_reported(people: Schema, sql: str) -> None:
    """Such a reference has no columns to bind names to: it is reported, never silently taken
    for a source that absorbs every name."""
    assert SqliteJudge(SchemaView(people, None)).prepare(sql).error is not None
    assert ("circular_reference", None, None) in _found(SchemaView(people, None), sql)


def test_c1_recursive_selects_sqlite_accepts_are_clean(people: Schema) -> None:
    view = SchemaView(people, None)
    for sql in [
        "WITH c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3) SELECT x FROM c;",
        "WITH c AS (SELECT 1 AS x UNION ALL SELECT 2 FROM c UNION ALL SELECT 3 FROM c)"
        " SELECT x FROM c;",
        "WITH c AS (SELECT 1 AS x UNION ALL SELECT 2 FROM (people JOIN c)) SELECT x FROM c;",
        "WITH c AS (VALUES (1) UNION ALL SELECT column1 + 1 FROM c WHERE column1 < 3)"
        " SELECT * FROM c;",
    ]:
        assert SqliteJudge(view).prepare(sql).error is None, sql
        assert _found(view, sql) == [], sql


def test_a_cte_body_binds_where_it_is_read() -> None:
    """Found by reasoning from the differential's CTE cases, confirmed in SQLite: a CTE's body
    is bound as a FROM subquery where it is read, so a name its own FROM lacks binds in the
    queries around that read. Before, the body was bound once, where the WITH stands, so
    "salary" was a string there and the hidden column was read unseen."""
    sql = 'WITH c AS (SELECT "salary" AS s FROM orders) SELECT (SELECT s FROM c) FROM employees;'
    view = _deny(_hr(), "employees", "salary")
    assert ("employees", "salary") in _reads(view, sql)
    assert _found(view, sql) == [("double_quoted_column", None, None)]
    # ... and a body nothing reads is not bound at all (SQLite does not look at it)
    assert _found(view, "WITH c AS (SELECT salary FROM employees) SELECT 1;") == []


def test_a_recursive_select_reads_its_cte_whatever_a_with_inside_declares(
    people: Schema,
) -> None:
    """Found by the differential run: SQLite takes a FROM item of the CTE's name in a recursive
    SELECT for the CTE itself, by name, even where a WITH inside the body declares a CTE of that
    name; the checker bound the inner one, whose column took "ssn"."""
    sql = (
        "SELECT name, (WITH c AS (WITH c AS (SELECT 0 AS ssn) SELECT 1 AS n UNION ALL"
        " SELECT ssn FROM w, c WHERE n < 2) SELECT max(n) FROM c) FROM people;"
    )
    view = _deny(people, "people", "ssn")
    assert ("people", "ssn") in _reads(view, sql)
    assert _found(view, sql) == [("unknown_column", None, "ssn")]  # as a column no table has


def test_t_star_expands_every_from_item_of_that_name(people: Schema) -> None:
    """Found by the differential run: with a subquery and a table both named `people`,
    `people.*` expands both (the checker expanded the first only)."""
    sql = "SELECT people.* FROM (VALUES (1)) AS people NATURAL JOIN people;"
    view = _deny(people, "people", "ssn")
    assert ("people", "ssn") in _reads(view, sql)
    assert ("column_not_visible", "people", None) in _found(view, sql)


def test_a_hidden_table_is_one_the_schema_lacks() -> None:
    """A table the role may not see is a source of unknown columns, as a table the schema lacks
    is: a name it does not have is taken by it (the differential run once found that SQLite
    binds such a name outwards, to a hidden employees.salary; the statement is refused all the
    same, and what else it says must not tell the two tables apart)."""
    view = SchemaView(_hr(), Policy.from_file(EXAMPLES / "hr_policy.toml").role("analyst"))
    checker = SemanticChecker(_dialect(), view)
    sql = 'SELECT name FROM employees WHERE (SELECT "salary" FROM {}) > 0;'
    assert ("employees", "salary") in _reads(SchemaView(_hr(), None), sql.format("salaries"))
    found = checker.check(sql.format("salaries"))
    assert _found(view, sql.format("salaries")) == [("unknown_table", "salaries", None)]
    missing = checker.check(sql.format("salariex"))
    assert [v.message.replace("salariex", "salaries") for v in missing] == [
        v.message for v in found
    ]
    unknown = checker.check("SELECT nosuch FROM salaries;")
    assert [v.kind for v in unknown] == ["unknown_table"]  # its columns are not listed


def test_cte_bindings_are_bounded() -> None:
    """Each read binds a CTE's body again, so CTEs that read each other from nested queries
    take exponentially many bindings (SQLite too): past the bound, the statement is refused,
    quickly, and SQLite is not asked to prepare it."""
    ctes = ["c0 AS (SELECT 1 AS x)"]
    ctes += [f"c{i} AS (SELECT (SELECT x FROM c{i - 1}) AS x FROM c{i - 1})" for i in range(1, 30)]
    sql = "WITH " + ", ".join(ctes) + " SELECT x FROM c29;"
    result: list[list[str]] = []
    worker = threading.Thread(target=lambda: result.append(_kinds_of(sql)), daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert result == [["statement_too_complex"]]


def _kinds_of(sql: str) -> list[str]:
    """The kinds `guide.check` reports, but for its language (the role cannot spell them)."""
    return [v.kind for v in _guide(SALARY_HIDDEN, "r").check(sql) if v.kind != "outside_language"]


# ----- C2: the row key -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["rowid", '"rowid"', "_rowid_", '"_rowid_"', "oid", '"oid"'])
def test_c2_a_without_rowid_table_passes_the_row_key_name_outwards(
    people: Schema, name: str
) -> None:
    """w has no row key, so the name binds to people's, which is ssn (the review: clean, and
    SQLite returned every ssn)."""
    sql = f"SELECT name, (SELECT {name} FROM w) FROM people;"
    view = _deny(people, "people", "ssn")
    assert ("people", "ssn") in _reads(view, sql)
    quoted = name.startswith('"')
    found = (
        [("double_quoted_column", None, None)]
        if quoted
        else [("column_not_visible", "people", None)]
    )
    assert _found(view, sql) == found


def test_the_snapshot_records_each_row_key_as_sqlite_binds_it(people: Schema) -> None:
    keys = {t.name: (t.has_rowid, t.rowid_column) for t in people.tables}
    assert keys == {
        "people": (True, "ssn"),
        "w": (False, None),
        "quirk": (True, None),  # INTEGER PRIMARY KEY DESC is no alias (SQLite's quirk)
        "keyed": (True, "a"),  # a table constraint makes one too
        "shadow": (False, None),  # real columns take all three names
        "plain": (True, None),
        "pv": (_views_have_rowid(), None),  # a view's row key is NULL, where it has one
    }
    assert [ddl.split(" (")[0] for ddl in people.ddl] == [
        f"CREATE TABLE {t}" for t in ("people", "w", "quirk", "keyed", "shadow", "plain")
    ]


def test_the_fingerprint_sees_row_keys_and_ddl(people: Schema) -> None:
    """They change what a statement reads, so they are part of what a guide is valid for."""
    first = people.tables[0]
    changed = [
        replace(people, tables=(replace(first, has_rowid=False), *people.tables[1:])),
        replace(people, tables=(replace(first, rowid_column=None), *people.tables[1:])),
        replace(people, ddl=people.ddl[1:]),
    ]
    assert len({people.fingerprint, *(s.fingerprint for s in changed)}) == 4


def test_row_key_rules_follow_sqlite(people: Schema) -> None:
    """Found by the differential run: a real column named rowid wins over another table's row
    key (and NATURAL JOIN on it crashed the checker); a scope with several row keys passes the
    name to a real column further out; USING cannot name the row key; a row key name that two
    tables have is refused, and as a double-quoted string it is a string."""
    view = _deny(people, "shadow", "rowid")
    real = "SELECT rowid FROM people, shadow;"
    assert _reads(view, real) == {("shadow", "rowid")}
    # SQLite's binding is the hidden column, the role's people's row key: refused, unnamed
    assert _found(view, real) == [("column_not_visible", None, None)]
    assert _found(view, "SELECT * FROM people NATURAL JOIN shadow;") == [
        ("column_not_visible", "shadow", None)
    ]
    # several row keys in one scope: a real column further out still takes the name
    outer = "SELECT (SELECT oid FROM people, plain) FROM shadow;"
    assert _reads(view, outer) == {("shadow", "oid")}
    assert _found(view, outer) == []
    using = SemanticChecker(_dialect(), view).check(
        "SELECT 1 FROM people JOIN keyed USING (rowid);"
    )
    assert [v.kind for v in using] == ["unknown_column"]  # SQLite: cannot join using rowid
    assert [k for k, *_ in _found(view, "SELECT rowid FROM people, plain;")] == ["ambiguous_column"]
    assert _found(view, 'SELECT "rowid" FROM people, plain;') == []
    # a string where a table in scope hides a column is refused: it may be a hidden one's name
    assert _found(view, 'SELECT "rowid" FROM people, shadow;') == [
        ("double_quoted_column", None, None)
    ]


def test_the_implicit_row_key_is_hidden_by_an_allow_list(people: Schema) -> None:
    view = SchemaView(
        people,
        Role("r", frozenset({"select"}), columns={"plain": ColumnRule(allow=frozenset({"x"}))}),
    )
    assert _reads(view, "SELECT oid FROM plain;") == {("plain", "ROWID")}
    assert _found(view, "SELECT oid FROM plain;") == [("column_not_visible", "plain", None)]
    assert _found(view, "SELECT rowid FROM quirk;") == []  # no column rule there


# Session 37's review: SQLite reads a parenthesized join that is not its FROM clause's first
# item as a subquery `(SELECT * FROM <join>)`, so its authorizer hears every column read; the
# checker saw no read (the judge's `database_denied`, a checker miss, was the only report).
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT o.id FROM orders AS o, (employees AS e JOIN employees_public AS p);",
        "SELECT e.name FROM orders AS o JOIN (employees AS e JOIN employees_public AS p "
        "ON e.id = p.id) ON o.employee_id = e.id;",
    ],
)
def test_a_parenthesized_join_after_the_first_item_reads_every_column(sql: str) -> None:
    view = _deny(_hr(), "employees", "salary")
    assert ("employees", "salary") in _reads(view, sql)
    assert _found(view, sql) == [("column_not_visible", "employees", None)]
    assert _found(SchemaView(_hr(), None), sql) == []
    first = "SELECT o.id FROM (employees AS e JOIN employees_public AS p), orders AS o;"
    assert ("employees", "salary") not in _reads(view, first) and _found(view, first) == []


# Session 37's review: in an INSERT, last_insert_rowid() returns the row key of the row written
# last: of a multi-row VALUES, the row before, so `VALUES ('x'), (last_insert_rowid() - 1)` stored
# max(ssn) in a visible column, and RETURNING returned it.
LAST_ROWID = [
    "INSERT INTO people (name) VALUES ('x'), (last_insert_rowid() - 1);",
    "INSERT INTO people (name) VALUES ('y') RETURNING last_insert_rowid() - 1;",
    "INSERT INTO people (name) SELECT (SELECT last_insert_rowid()) FROM plain;",
    "WITH k AS (SELECT last_insert_rowid() AS n) INSERT INTO people (name) SELECT n FROM k;",
]


@pytest.mark.parametrize("sql", LAST_ROWID)
def test_last_insert_rowid_in_an_insert_reads_the_targets_row_key(people: Schema, sql: str) -> None:
    role = Role(
        "r",
        frozenset({"select", "insert"}),
        columns={"people": ColumnRule(deny=frozenset({"ssn"}))},
    )
    assert ("column_not_visible", "people", None) in _found(SchemaView(people, role), sql)
    assert _found(SchemaView(people, replace(role, columns={})), sql) == []  # ssn visible


def test_last_insert_rowid_leaks_the_key_as_the_review_found(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.executescript(PEOPLE + "INSERT INTO people VALUES (987654321, 'bob');")
        db.execute(LAST_ROWID[0])
        assert ("987654321",) in db.execute("SELECT name FROM people").fetchall()
        assert db.execute(LAST_ROWID[1]).fetchall() == [(987654323,)]  # the largest key before


def test_last_insert_rowid_outside_an_insert_reads_nothing(people: Schema) -> None:
    role = Role("r", frozenset({"select"}), columns={"people": ColumnRule(deny=frozenset({"ssn"}))})
    assert _found(SchemaView(people, role), "SELECT last_insert_rowid() FROM people;") == []


def test_a_hand_written_schema_judges_the_row_key_wherever_it_may_bind() -> None:
    """`Schema.from_tables` does not say which tables are WITHOUT ROWID: `rowid` in w may be
    w's (readable only if all of w is) or, if w has none, people's, which may be ssn."""
    schema = Schema.from_tables("sqlite", {"people": ["ssn", "name"], "w": ["k"]})
    view = _deny(schema, "people", "ssn")
    assert _found(view, "SELECT name, (SELECT rowid FROM w) FROM people;") == [
        ("column_not_visible", "people", None)
    ]
    assert _found(view, "SELECT rowid FROM w;") == []


# ----- the judge -----------------------------------------------------------------------------


def test_what_the_checker_misses_the_judge_reports() -> None:
    """Given no checker violations, the judge names each denied read, spanning the statement
    (the checker's violations that name the read cover it)."""
    view = _deny(_hr(), "employees", "salary")
    judge = SqliteJudge(view)
    sql = "SELECT name FROM employees WHERE salary > 0;"
    (missed,) = judge.violations(sql, [])
    assert (missed.kind, missed.table, missed.column) == ("database_denied", "employees", None)
    assert (missed.start, missed.end) == (0, len(sql))
    assert "did not report it" in missed.message
    assert 'reads a column of table "employees"' in missed.message  # never the hidden one
    assert judge.violations(sql, SemanticChecker(_dialect(), view).check(sql)) == []


def test_guide_check_adds_what_the_checker_missed(monkeypatch: pytest.MonkeyPatch) -> None:
    guide = _guide(SALARY_HIDDEN, "r")
    sql = "SELECT name FROM employees WHERE salary > 0;"
    assert _kinds_of(sql) == ["unknown_column"]
    monkeypatch.setattr(guide._checker, "check", lambda _sql: [])  # a checker that misses it
    judged = [(v.kind, v.table) for v in guide.check(sql) if v.kind != "outside_language"]
    assert judged == [("database_denied", "employees")]


def test_the_judge_names_what_sqlite_refuses() -> None:
    judge = SqliteJudge(SchemaView(_hr(), None))
    (rejected,) = judge.violations("SELECT max(max(id)) FROM employees;", [])
    assert rejected.kind == "database_rejected"
    assert (
        rejected.message
        == "SQLite cannot prepare the statement: misuse of aggregate function max()"
    )
    # a name the checker already named: SQLite says the same, so nothing is added
    unknown = SemanticChecker(_dialect(), SchemaView(_hr(), None)).check("SELECT x FROM orders;")
    assert judge.violations("SELECT x FROM orders;", unknown) == []


def test_the_judge_judges_calls_and_writes_not_operators() -> None:
    role = Role(
        "r",
        frozenset({"select", "update"}),
        functions=frozenset({"count"}),
        writes=frozenset({"orders"}),
    )
    judge = SqliteJudge(SchemaView(_hr(), role))
    kinds = {
        (v.kind, v.table, v.column)
        for v in judge.violations("SELECT upper(name) FROM employees WHERE name LIKE 'a%';", [])
    }
    assert kinds == {("database_denied", None, None)}  # upper(), not LIKE
    writes = judge.violations("UPDATE employees SET name = 'x';", [])
    assert [(v.kind, v.table) for v in writes] == [("database_denied", "employees")]


def test_an_update_of_the_row_key_is_an_update_of_its_alias(people: Schema) -> None:
    """Found by the differential run: SQLite's authorizer names the column `SET rowid = ...`
    writes "ROWID" even where the row key is an alias; the checker names the alias (ssn)."""
    rule = {"people": ColumnRule(deny=frozenset({"ssn"}))}
    view = SchemaView(people, Role("r", frozenset({"select", "update"}), columns=rule))
    sql = "UPDATE people SET rowid = 5;"
    found = SemanticChecker(_dialect(), view).check(sql)
    assert [(v.kind, v.table, v.column) for v in found] == [("column_not_visible", "people", None)]
    assert SqliteJudge(view).violations(sql, found) == []
    (missed,) = SqliteJudge(view).violations(sql, [])
    assert (missed.table, missed.column) == ("people", None)  # ssn, which the role may not see
    assert "ssn" not in missed.message


def test_the_judge_never_runs_a_statement() -> None:
    """abs() of the least integer overflows when it runs; preparing it does not. And the copy
    stays empty whatever it is asked to prepare."""
    judge = SqliteJudge(SchemaView(_hr(), None))
    assert judge.prepare("SELECT abs(-9223372036854775808);").error is None
    for _ in range(2):  # twice: a cached statement would not be prepared (nor heard) again
        inserted = judge.prepare("INSERT INTO orders (total) VALUES (1);")
        assert [a.action for a in inserted.accesses] == ["insert"]
    counted = judge.prepare(
        "SELECT count(*) FROM orders WHERE (SELECT abs(-9223372036854775808) FROM orders);"
    )
    assert counted.error is None


def test_views_and_hand_written_tables_get_stand_ins(people: Schema) -> None:
    """A view is judged as itself (not as the tables its definition reads); a schema written
    by hand gets tables of its columns."""
    view = _deny(people, "pv", "name")
    assert _reads(view, "SELECT name FROM pv;") == {("pv", "name")}
    hand = Schema.from_tables("sqlite", {"t": ["a", "b"]})
    assert _reads(SchemaView(hand, None), "SELECT a, rowid FROM t;") == {("t", "a"), ("t", "ROWID")}


def test_the_judge_is_for_sqlite_schemas() -> None:
    duck = Schema.from_tables("duckdb", {"t": ["a"]})
    with pytest.raises(gr.JudgeError, match="judges statements over a SQLite schema"):
        SqliteJudge(SchemaView(duck, None))


def test_the_judge_may_be_shared_by_threads() -> None:
    judge = SqliteJudge(_deny(_hr(), "employees", "salary"))
    statements = ["SELECT salary FROM employees;", "SELECT name FROM employees;"] * 50
    expected = [len(judge.violations(sql, [])) for sql in statements]
    results: list[list[int]] = []

    def work() -> None:
        results.append([len(judge.violations(sql, [])) for sql in statements])

    workers = [threading.Thread(target=work) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert results == [expected] * 4


# ----- session 36's review: result columns named as SQLite names them; operators that call ---

# The review's statement (the shipped example, its analyst): the inner CTE's first column is
# `"salary" COLLATE binary`, which SQLite names salary (COLLATE skipped, a double-quoted name
# that binds nothing still names the column), so NATURAL JOIN compares employees.salary with
# every generated number, and the join returns each employee's salary to the nearest 1,000.
# The checker named the column by its text and saw no shared column; SQLite's authorizer never
# hears NATURAL/USING comparisons, so the judge could not see it either.
NATURAL_BY_NAME = (
    "WITH employees_public AS (WITH orders(id) AS (VALUES (0),(1),(2),(3),(4),(5),(6),(7),(8),"
    "(9)), employees_public AS (SELECT a.id * 100000 + b.id * 10000 + c.id * 1000 AS salary"
    ' FROM orders AS a, orders AS b, orders AS c) SELECT "salary" COLLATE binary, "salary"'
    " AS total FROM employees_public) SELECT employees.name, employees_public.total FROM"
    " employees NATURAL JOIN employees_public;"
)


def test_a_natural_join_on_a_column_named_past_collate_reads_the_hidden_column() -> None:
    guide = _guide((EXAMPLES / "hr_policy.toml").read_text(), "analyst")
    matcher = guide.matcher()
    assert matcher.accept_tokens(list(NATURAL_BY_NAME.encode())) and matcher.accept_tokens([256])
    with closing(sqlite3.connect(f"file:{EXAMPLES / 'hr.sqlite'}?mode=ro", uri=True)) as db:
        leaked = dict(db.execute(NATURAL_BY_NAME).fetchall())
        salaries = dict(db.execute("SELECT name, salary FROM employees").fetchall())
    assert leaked == {name: round(salary, -3) for name, salary in salaries.items()}
    found = [(v.kind, v.table, v.column) for v in guide.check(NATURAL_BY_NAME)]
    assert ("column_not_visible", "employees", None) in found


def _sqlite_name(expression: str) -> str:
    """The name SQLite gives a subquery's column `expression` (over orders), read back from a
    view of it."""
    with closing(sqlite3.connect(":memory:")) as db:
        db.executescript(
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL);"
            f"CREATE VIEW v AS SELECT * FROM (SELECT {expression} FROM orders);"
        )
        ((name,),) = db.execute("SELECT name FROM pragma_table_info('v')").fetchall()
    return name


@pytest.mark.parametrize(
    "expression",
    [
        '"salary" COLLATE binary',
        '("salary")',
        '(("salary")) COLLATE nocase COLLATE binary',
        '("salary" COLLATE binary)',
        "orders.id COLLATE binary AS salary",
        "(orders.id) AS salary",
        # named otherwise: the controls
        '+"salary"',
        "'salary'",
        "\"salary\" || ''",
        "(orders.id)",
        "orders.total COLLATE nocase",
    ],
)
def test_result_columns_are_named_as_sqlite_names_them(expression: str) -> None:
    """The differential against SQLite: a subquery's column that SQLite names salary is one
    NATURAL JOIN employees compares with the hidden employees.salary, and the checker reports
    exactly then."""
    view = _deny(_hr(), "employees", "salary")
    sql = f"SELECT employees.name FROM employees NATURAL JOIN (SELECT {expression} FROM orders);"
    reported = ("column_not_visible", "employees", None) in _found(view, sql)
    assert reported == (_sqlite_name(expression).lower() == "salary")


@pytest.mark.parametrize("operator", ["->", "->>"])
def test_json_operators_are_calls_a_role_must_list(operator: str) -> None:
    """`j -> p` and `j ->> p` are SQLite's functions -> and ->> (json_extract's twins; the
    authorizer names them): the review wrote them for the analyst, whose functions list has no
    JSON function. Now a role calls them only if it lists them: the language of one that does
    not lacks them, and the checker names the call."""
    sql = f"SELECT '{{\"a\":[1,2]}}' {operator} '$.a' FROM orders;"
    analyst = _guide((EXAMPLES / "hr_policy.toml").read_text(), "analyst")
    assert not analyst.matcher().accept_tokens(list(sql.encode()))
    assert "function_not_allowed" in [v.kind for v in analyst.check(sql)]
    listed = '[roles.r]\nstatements = ["select"]\nfunctions = ["count", "->", "->>"]\n'
    for policy in (listed, '[roles.r]\nstatements = ["select"]\n'):
        guide = _guide(policy, "r")
        assert guide.matcher().accept_tokens([*sql.encode(), 256])
        assert guide.check(sql) == []
    # and the judge, should the checker miss one: SQLite's authorizer names the call
    judge = SqliteJudge(SchemaView(_hr(), Role("r", frozenset({"select"}), functions=frozenset())))
    assert [v.kind for v in judge.violations(sql, [])] == ["database_denied"]


def test_glob_is_no_call_of_regexp() -> None:
    """`match_operator` is GLOB, REGEXP or MATCH; only REGEXP calls regexp. The checker took
    every match_operator for regexp and refused `name GLOB 'A*'` for a role that may not call
    it, though the role's language holds it."""
    role = Role("r", frozenset({"select"}), functions=frozenset({"count"}))
    view = SchemaView(_hr(), role)
    assert _found(view, "SELECT name FROM employees WHERE name GLOB 'A*';") == []
    assert _found(view, "SELECT name FROM employees WHERE name REGEXP 'A';") == [
        ("function_not_allowed", None, None)
    ]


# FTS3/FTS4 (session 36's second review): `title MATCH 'body:secret'` searches the column body,
# which the authorizer never hears of; through a subquery or CTE SQLite flattens the match into
# the full-text table all the same.
FTS = """
CREATE VIRTUAL TABLE docs USING fts4(title, body);
INSERT INTO docs VALUES ('memo one', 'nothing here'), ('memo two', 'the secret layoff plan');
CREATE VIEW doc_titles AS SELECT rowid AS id, title FROM docs;
"""
FTS_POLICY = """
[roles.reader]
statements = ["select"]
[roles.reader.columns]
docs = { deny = ["body"] }
[roles.titles]
statements = ["select"]
tables = ["doc_titles"]
[roles.all]
statements = ["select"]
"""


@pytest.fixture(scope="module")
def fts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fts") / "fts.sqlite"
    with closing(sqlite3.connect(path)) as db:
        try:
            db.executescript(FTS)
        except sqlite3.OperationalError as exc:  # a SQLite built without FTS3/4
            pytest.skip(f"this SQLite has no fts4: {exc}")
    return path


@pytest.mark.parametrize("gamma", [False, True])
@pytest.mark.parametrize(
    "sql, kind",
    [
        ("SELECT title FROM docs WHERE title MATCH 'body:secret';", "column_not_visible"),
        ("SELECT d.title FROM docs AS d WHERE (d.title) MATCH 'body:sec*';", "column_not_visible"),
        (
            "SELECT t FROM (SELECT title AS t FROM docs) AS s WHERE t MATCH 'body:secret';",
            "full_text_query",
        ),
        (
            "WITH c AS (SELECT title FROM docs) SELECT title FROM c"
            " WHERE title MATCH 'body:secret';",
            "full_text_query",
        ),
    ],
)
def test_a_full_text_match_reads_every_column_of_its_table(
    fts: Path, sql: str, kind: str, gamma: bool
) -> None:
    guide = _fts_guide(fts, "reader", gamma)
    with closing(sqlite3.connect(f"file:{fts}?mode=ro", uri=True)) as db:
        assert db.execute(sql).fetchall() == [("memo two",)]  # what body holds, leaked
    assert kind in [v.kind for v in guide.check(sql)]
    if kind == "column_not_visible":
        assert ("docs", None) in [(v.table, v.column) for v in guide.check(sql)]
    everything = _fts_guide(fts, "all", gamma)
    if kind == "column_not_visible":  # nothing hidden: the match is the role's to make
        assert everything.check(sql) == []


def _fts_guide(fts: Path, role: str, gamma: bool) -> gr.Guide:
    vocab = gr.Vocabulary([*(bytes((b,)) for b in range(256)), None], eos_token_ids=256)
    return gr.compile(gr.Grammar.bundled("sqlite"), vocab, schema=Schema.from_sqlite(fts),
                      policy=Policy.from_text(FTS_POLICY), role=role, gamma=gamma)  # fmt: skip


@pytest.mark.parametrize("gamma", [False, True])
def test_a_full_text_match_through_a_view_is_refused(fts: Path, gamma: bool) -> None:
    # session 37's review: SQLite flattens the view into docs and FTS searches body
    sql = "SELECT title FROM doc_titles WHERE title MATCH 'body:secret';"
    with closing(sqlite3.connect(f"file:{fts}?mode=ro", uri=True)) as db:
        assert db.execute(sql).fetchall() == [("memo two",)]
    assert [v.kind for v in _fts_guide(fts, "titles", gamma).check(sql)] == ["full_text_query"]


def test_shadow_tables_are_not_in_the_schema(fts: Path) -> None:
    # session 37's review: docs_content holds body as c1body, readable by a role that hides
    # docs.body but lists no tables
    sql = "SELECT c1body FROM docs_content;"
    with closing(sqlite3.connect(f"file:{fts}?mode=ro", uri=True)) as db:
        assert ("the secret layoff plan",) in db.execute(sql).fetchall()
        listed = db.execute("SELECT name FROM pragma_table_list WHERE type = 'shadow'")
        shadow = {name for (name,) in listed}
    assert "docs_content" in shadow
    schema = Schema.from_sqlite(fts)
    assert [t.name for t in schema.tables] == ["docs", "doc_titles"]
    assert schema.ddl == ("CREATE VIRTUAL TABLE docs USING fts4(title, body)",)
    guide = _fts_guide(fts, "reader", False)
    assert "unknown_table" in [v.kind for v in guide.check(sql)]
    tokens = guide.trie.tokenize(b"SELECT c1body FROM docs_")
    matcher = guide.matcher()
    assert not all(matcher.accept_tokens([t]) for t in tokens)  # not even spellable

"""Security finding: the checker's violations were an existence oracle. A caller acting as a role
(`gridrail serve`'s /v1/check, `gridrail ask`'s violations and repair prompt) told
`column_not_visible` from `unknown_column` and `table_not_visible` from `unknown_table`, and
`SELECT *` named the hidden columns it reads: so it learnt the names, or at least the existence,
of tables and columns the role may not see.

Now a statement that names a hidden table or column gets exactly the violations the same
statement gets naming instead one that does not exist (of the same length, so that offsets
agree): kind by kind, message by message, offsets and the fields a caller receives too, once the
name is written back into them. Through `guide.check`, which /v1/check serves: the language
(`outside_language`), the checker and SQLite's judge. (The language knows only visible names,
so where a statement leaves it depends on them alone: each absent name below shares no longer
prefix with a visible name than its hidden one does.) A read the statement does not spell (`*`,
a row key) is still refused, without naming the hidden column."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from functools import cache
from pathlib import Path

import pytest

import gridrail as gr
from gridrail.serve.app import _violation

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HR_EDITOR = """
[roles.editor]
statements = ["select", "insert", "update", "delete"]
[roles.editor.columns]
employees = { deny = ["salary"] }
"""
WARD = """
CREATE TABLE patients (id INTEGER PRIMARY KEY, name TEXT, ward TEXT, diagnosis TEXT, ssn TEXT);
CREATE TABLE visits (id INTEGER PRIMARY KEY, patient_id INTEGER, ward TEXT, notes TEXT);
CREATE TABLE billing (patient_id INTEGER, amount REAL, card TEXT);
CREATE TABLE cards (card_no INTEGER PRIMARY KEY, holder TEXT, ssn TEXT);
CREATE VIEW ward_list AS SELECT id, name, ward FROM patients;
"""
WARD_POLICY = """
[roles.nurse]
statements = ["select", "insert", "update"]
tables = ["patients", "visits", "cards", "ward_list"]
writes = ["visits"]
[roles.nurse.columns]
patients = { deny = ["diagnosis", "ssn"] }
visits = { allow = ["id", "patient_id", "ward"] }
cards = { deny = ["card_no"] }
"""

# (role, hidden name, a name of the same length that nothing has, statements: "@" is the name)
HR_CASES = [
    (
        "analyst",
        "salary",
        "salarq",
        [
            "SELECT @ FROM employees;",
            "SELECT name, @ FROM employees WHERE id = 1;",
            "SELECT name FROM employees WHERE @ > 100;",
            "SELECT e.@ FROM employees AS e;",
            "SELECT employees.@ FROM employees;",
            "SELECT o.total FROM orders AS o JOIN employees AS e ON e.@ > o.total;",
            "SELECT name FROM employees ORDER BY @;",
            "SELECT dept, max(@) FROM employees GROUP BY dept HAVING max(@) > 1;",
            "SELECT @ FROM employees, orders;",
            "SELECT name FROM employees WHERE EXISTS (SELECT 1 FROM orders WHERE total > @);",
            "SELECT s.x FROM (SELECT @ AS x FROM employees) AS s;",
            "WITH c AS (SELECT @ FROM employees) SELECT * FROM c;",
            'SELECT name FROM employees WHERE name = "@";',
            "SELECT name FROM employees JOIN employees_public USING (@);",
            "SELECT count(*) FROM employees AS e WHERE e.@ IS NULL;",
        ],
    ),
    (
        "analyst",
        "salaries",
        "salariez",
        [
            "SELECT amount FROM @;",
            "SELECT * FROM @;",
            "SELECT s.amount, e.name FROM @ AS s JOIN employees AS e ON e.id = s.employee_id;",
            "SELECT name FROM employees WHERE id IN (SELECT employee_id FROM @);",
            "SELECT @.amount FROM @;",
            "SELECT name FROM employees NATURAL JOIN @;",
            "SELECT count(*) FROM @ WHERE nosuch = 1;",
            "WITH c AS (SELECT * FROM @) SELECT amount FROM c;",
            "SELECT (SELECT amount FROM @) FROM employees;",
            'SELECT name FROM employees WHERE (SELECT "salary" FROM @) > 0;',
        ],
    ),
    (
        "clerk",
        "salaries",
        "salariez",
        [
            "INSERT INTO @ (amount) VALUES (1);",
            "UPDATE @ SET amount = 1 WHERE employee_id = 1;",
            "UPDATE orders SET total = 1 WHERE employee_id IN (SELECT employee_id FROM @);",
            "INSERT INTO orders (employee_id) SELECT employee_id FROM @;",
            "DELETE FROM @ WHERE amount > 0;",
            "SELECT o.total FROM orders AS o JOIN @ AS s ON s.employee_id = o.employee_id;",
        ],
    ),
    (
        "editor",
        "salary",
        "salarq",
        [
            "UPDATE employees SET @ = 1;",
            "UPDATE employees SET name = 'x' WHERE @ > 1 RETURNING id;",
            "UPDATE employees SET name = 'x' RETURNING @;",
            "INSERT INTO employees (id, @) VALUES (1, 2);",
            "DELETE FROM employees WHERE @ > 1;",
            "INSERT INTO employees (id, name) SELECT id, name FROM employees WHERE @ > 0;",
            "UPDATE employees SET (name, @) = ('x', 1);",
            'DELETE FROM employees WHERE name = "@";',
        ],
    ),
]
WARD_CASES = [
    (
        "nurse",
        "diagnosis",
        "diagnosiq",
        [
            "SELECT @ FROM patients;",
            "SELECT p.@ FROM patients AS p JOIN visits AS v ON v.patient_id = p.id;",
            "SELECT v.ward FROM visits AS v JOIN patients AS p ON p.@ = v.ward;",
            "SELECT name FROM patients WHERE id IN (SELECT patient_id FROM visits WHERE @ = 1);",
            "WITH w AS (SELECT id, @ FROM patients) SELECT w.id FROM w;",
            "SELECT name FROM patients AS p WHERE EXISTS "
            "(SELECT 1 FROM visits AS v WHERE v.patient_id = p.id AND p.@ IS NOT NULL);",
            'SELECT name FROM patients WHERE ward = "@";',
            "SELECT s.@ FROM (SELECT * FROM patients) AS s;",
            "SELECT @ FROM (SELECT * FROM patients);",
            "SELECT name FROM patients ORDER BY @ DESC;",
            "SELECT @ FROM patients, visits;",
            "SELECT w.@ FROM patients AS w WHERE w.id IN (SELECT 1 FROM visits AS w);",
        ],
    ),
    (
        "nurse",
        "notes",
        "noteq",
        [
            "INSERT INTO visits (patient_id, @) VALUES (1, 'x');",
            "UPDATE visits SET @ = 'x' WHERE id = 1;",
            "UPDATE visits SET ward = 'a' WHERE @ = 'x' RETURNING id;",
            "SELECT ward FROM visits GROUP BY ward HAVING count(@) > 1;",
            "SELECT p.name FROM patients AS p JOIN visits USING (@);",
            "SELECT name FROM patients WHERE EXISTS (SELECT 1 FROM visits WHERE @ = name);",
        ],
    ),
    (
        "nurse",
        "billing",
        "billinq",
        [
            "SELECT amount FROM @;",
            "SELECT p.name, b.amount FROM patients AS p JOIN @ AS b ON b.patient_id = p.id;",
            "SELECT name FROM patients WHERE id IN (SELECT patient_id FROM @);",
            "WITH b AS (SELECT * FROM @) SELECT amount FROM b;",
            "INSERT INTO @ (patient_id) VALUES (1);",
            "UPDATE @ SET amount = 0;",
            "INSERT INTO visits (patient_id) SELECT patient_id FROM @;",
            "SELECT * FROM patients NATURAL JOIN @;",
            "SELECT @.card FROM @;",
        ],
    ),
]


def _vocab() -> gr.Vocabulary:
    return gr.Vocabulary([*(bytes((b,)) for b in range(256)), None], eos_token_ids=256)


@cache
def _hr() -> gr.Schema:
    return gr.Schema.from_sqlite(EXAMPLES / "hr.sqlite")


@cache
def _guide(schema: gr.Schema, policy: str, role: str, gamma: bool = False) -> gr.Guide:
    """`gamma`: names bound as the role sees them in the mask too (what `serve` compiles)."""
    return gr.compile(gr.Grammar.bundled("sqlite"), _vocab(), schema=schema,
                      policy=gr.Policy.from_text(policy), role=role, gamma=gamma)  # fmt: skip


def _hr_guide(role: str, gamma: bool = False) -> gr.Guide:
    policy = (EXAMPLES / "hr_policy.toml").read_text() + HR_EDITOR
    return _guide(_hr(), policy, role, gamma)


@pytest.fixture(scope="module")
def ward_schema(tmp_path_factory: pytest.TempPathFactory) -> gr.Schema:
    path = tmp_path_factory.mktemp("oracle") / "ward.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.executescript(WARD)
    return gr.Schema.from_sqlite(path)


@pytest.fixture(scope="module")
def ward(ward_schema: gr.Schema) -> gr.Guide:
    return _guide(ward_schema, WARD_POLICY, "nurse")


def _told(guide: gr.Guide, sql: str) -> list[dict]:
    """What /v1/check returns for `sql`: its violations, serialized."""
    return [_violation(v) for v in guide.check(sql)]


def _assert_indistinguishable(guide: gr.Guide, statement: str, hidden: str, absent: str) -> None:
    schema = guide.view.schema
    names = {t.name.lower() for t in schema.tables}
    names |= {c.name.lower() for t in schema.tables for c in t.columns}
    assert absent.lower() not in names and len(absent) == len(hidden)
    told = _told(guide, statement.replace("@", hidden))
    other = _told(guide, statement.replace("@", absent))
    back = [
        {key: value.replace(absent, hidden) if isinstance(value, str) else value
         for key, value in violation.items()}
        for violation in other
    ]  # fmt: skip
    assert told, "a hidden name is still refused"
    assert told == back


@pytest.mark.parametrize("gamma", [False, True])
@pytest.mark.parametrize(
    "role, hidden, absent, statement",
    [(r, h, a, s) for r, h, a, statements in HR_CASES for s in statements],
)
def test_hr_hidden_names_are_told_as_names_nothing_has(
    role: str, hidden: str, absent: str, statement: str, gamma: bool
) -> None:
    _assert_indistinguishable(_hr_guide(role, gamma), statement, hidden, absent)


@pytest.mark.parametrize("gamma", [False, True])
@pytest.mark.parametrize(
    "hidden, absent, statement",
    [(h, a, s) for _, h, a, statements in WARD_CASES for s in statements],
)
def test_ward_hidden_names_are_told_as_names_nothing_has(
    ward_schema: gr.Schema, hidden: str, absent: str, statement: str, gamma: bool
) -> None:
    guide = _guide(ward_schema, WARD_POLICY, "nurse", gamma)
    _assert_indistinguishable(guide, statement, hidden, absent)


def test_a_double_quoted_string_is_refused_where_it_might_name_a_hidden_column(
    ward: gr.Guide,
) -> None:
    """Over a table with hidden columns any double-quoted string that binds no visible column
    is refused alike; where no table in scope hides one it is a string, as SQLite reads it."""
    refused = ward.check('SELECT name FROM patients WHERE ward = "west";')
    assert [v.kind for v in refused] == ["double_quoted_column"]
    assert "'west'" in refused[0].message  # the advice: single quotes
    assert ward.check('SELECT name FROM ward_list WHERE ward = "west";') == []
    assert ward.check("SELECT name FROM patients WHERE \"ward\" = 'west';") == []


@pytest.mark.parametrize(
    "guide_role, statement, hidden",
    [
        ("analyst", "SELECT * FROM employees;", "salary"),
        ("analyst", "SELECT e.* FROM employees AS e;", "salary"),
        ("analyst", "SELECT * FROM employees NATURAL JOIN employees_public;", "salary"),
        ("editor", "INSERT INTO employees VALUES (1, 'x', 'd', 2, 3);", "salary"),
        ("editor", "DELETE FROM employees RETURNING *;", "salary"),
        ("nurse", "SELECT * FROM patients;", "diagnosis"),
        ("nurse", "SELECT * FROM patients;", "ssn"),
        ("nurse", "INSERT INTO visits VALUES (1, 2, 'a', 'b');", "notes"),
        ("nurse", "SELECT rowid FROM cards;", "card_no"),
        ("nurse", "SELECT holder FROM cards WHERE _rowid_ = 1;", "card_no"),
        ("nurse", "SELECT v.* FROM visits AS v, (patients JOIN ward_list);", "diagnosis"),
    ],
)
def test_a_read_the_statement_does_not_spell_never_names_the_hidden_column(
    ward: gr.Guide, guide_role: str, statement: str, hidden: str
) -> None:
    guide = ward if guide_role == "nurse" else _hr_guide(guide_role)
    told = _told(guide, statement)
    kinds = {v["kind"] for v in told}
    assert "column_not_visible" in kinds, told
    assert not any(hidden in str(value) for v in told for value in v.values()), told


def test_a_hidden_column_that_takes_a_visible_name_is_refused_without_more(ward: gr.Guide) -> None:
    """Where SQLite binds a name to a hidden column and the role's binding would take one it
    sees (a result alias; a column of an outer query), the statement must be refused, and that
    much no answer can hide: the violation says only what the statement wrote."""
    for sql in (
        "SELECT ward AS diagnosis FROM patients WHERE diagnosis = 'x';",
        "SELECT holder FROM cards WHERE EXISTS (SELECT 1 FROM patients WHERE ssn = holder);",
    ):
        (shadowed,) = [v for v in _told(ward, sql) if v["kind"] != "outside_language"]
        assert shadowed["kind"] == "column_not_visible"
        assert (shadowed["table"], shadowed["column"]) == (None, None)
        assert "patients" not in shadowed["message"] and "cards" not in shadowed["message"]

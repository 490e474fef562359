"""Security review, issue 11, H1–H4: policy that was silently not enforced, and statements that
did more than the role names. Each test is a reproduction from the review; it failed before the
fix. "The mask" is checked by driving a matcher byte by byte over a byte vocabulary (each byte is
a token, so a statement is writable iff every byte is in the mask and EOS is at the end), "the
checker" through `guide.check` and a `SemanticChecker` on the dialect (statements from
elsewhere)."""

from __future__ import annotations

import inspect
import random
from functools import cache
from pathlib import Path

import pytest

import gridrail as gr
from gridrail.archive import save_guide
from gridrail.audit import AuditLog, replay
from gridrail.grammar.loader import bundled_grammar_text
from gridrail.policy.bundle import Policy
from gridrail.policy.view import SchemaView

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EOS = 256


@cache
def _sqlite() -> gr.Grammar:
    return gr.Grammar.bundled("sqlite")


@cache
def _bytes() -> gr.Vocabulary:
    return gr.Vocabulary([*(bytes((b,)) for b in range(256)), None], eos_token_ids=EOS)


@cache
def _hr() -> gr.Schema:
    return gr.Schema.from_sqlite(EXAMPLES / "hr.sqlite")


@cache
def _hr_policy() -> Policy:
    return Policy.from_file(EXAMPLES / "hr_policy.toml")


def _writable(guide: gr.Guide, sql: str) -> bool:
    """Can a generation under `guide`'s masks write exactly `sql`?"""
    matcher = guide.matcher()
    return all(matcher.accept_tokens([b]) for b in sql.encode()) and matcher.accept_tokens([EOS])


def _kinds(guide: gr.Guide, sql: str) -> list[str]:
    return [v.kind for v in guide.check(sql)]


def _guide(policy_text: str, role: str, schema: gr.Schema | None = None) -> gr.Guide:
    return gr.compile(
        _sqlite(), _bytes(), schema=schema, policy=Policy.from_text(policy_text), role=role
    )


# -- H1: a policy without a schema --------------------------------------------------------------


def test_column_rules_without_a_schema_are_refused_not_dropped() -> None:
    with pytest.raises(gr.PolicyError, match=r"column rules.*needs a schema") as err:
        gr.compile(_sqlite(), _bytes(), policy=_hr_policy(), role="analyst")
    assert err.value.line == 12  # [roles.analyst.columns]


def test_writes_without_a_schema_are_refused() -> None:
    policy = "[roles.c]\nstatements = ['select', 'insert']\nwrites = ['orders']\n"
    with pytest.raises(gr.PolicyError, match=r"writes.*schema") as err:
        _guide(policy, "c")
    assert err.value.line == 3


def test_table_and_function_lists_are_enforced_without_a_schema() -> None:
    guide = _guide(
        "[roles.a]\nstatements = ['select']\ntables = ['orders']\nfunctions = ['count']\n", "a"
    )
    for sql in ("SELECT amount FROM salaries;", "SELECT random() FROM orders;"):
        assert not _writable(guide, sql), sql
        assert _kinds(guide, sql) == ["outside_language"], sql
    for sql in ("SELECT count(*) FROM orders;", 'SELECT total FROM "ORDERS";'):
        assert _writable(guide, sql), sql
        assert guide.check(sql) == [], sql


def test_functions_spelled_as_keywords_are_functions_too() -> None:
    """Session 8, a sampled candidate of the demo: the analyst (functions count, sum, ...) wrote
    `CURRENT_DATE`, which the grammar spells as a keyword and SQLite calls as the function
    current_date — the mask allowed it, the checker passed it, only SQLite's authorizer refused
    it. A role with a functions list may write CURRENT_DATE / _TIME / _TIMESTAMP only if it
    lists them."""
    counting = "[roles.a]\nstatements = ['select']\nfunctions = ['count']\n"
    dating = "[roles.a]\nstatements = ['select']\nfunctions = ['count', 'current_date']\n"
    anything = "[roles.a]\nstatements = ['select']\n"
    schema = _hr()
    sql = "SELECT count(*) FROM orders WHERE placed_on < CURRENT_DATE;"
    later = "SELECT CURRENT_TIMESTAMP FROM orders;"
    guide = _guide(counting, "a", schema)
    for text in (sql, later):
        assert not _writable(guide, text), text
        assert _kinds(guide, text) == ["function_not_allowed", "outside_language"], text
    for policy in (dating, anything):
        allowed = _guide(policy, "a", schema)
        assert _writable(allowed, sql) and not allowed.check(sql)
    assert not _writable(_guide(dating, "a", schema), later)
    # statements from elsewhere: the checker on the dialect's parse says which function
    view = SchemaView(schema, Policy.from_text(counting).role("a"))
    checker = gr.SemanticChecker(gr.compile(_sqlite(), _bytes()).compiled, view)
    assert [v.kind for v in checker.check(later)] == ["function_not_allowed"]


# -- H2: names in policy files resolve by the dialect's rules -----------------------------------


def test_a_second_spelling_of_a_column_rule_is_an_error_naming_both() -> None:
    text = (
        "[roles.a]\nstatements = ['select']\n\n[roles.a.columns]\n"
        "employees = { deny = ['salary'] }\nEMPLOYEES = { deny = ['name'] }\n"
    )
    with pytest.raises(gr.PolicyError, match="'employees' and 'EMPLOYEES'") as err:
        Policy.from_text(text, source="p.toml")
    assert err.value.line == 6
    assert str(err.value).startswith("p.toml:6: ")


DUPLICATES = [
    ("tables = ['orders', 'Orders']", "tables names 'Orders' and 'orders'"),
    ("writes = ['orders', 'ORDERS']", "writes names 'ORDERS' and 'orders'"),
    ("functions = ['count', 'COUNT']", "functions names 'COUNT' and 'count'"),
    ("[roles.a.columns]\norders = { deny = ['total', 'Total'] }", "'Total' and 'total'"),
    ("[roles.a.columns]\norders = { allow = ['id', 'ID'] }", "'ID' and 'id'"),
]


@pytest.mark.parametrize("line, message", DUPLICATES, ids=[d[1] for d in DUPLICATES])
def test_duplicates_under_the_dialect_rules_are_errors(line: str, message: str) -> None:
    text = f"[roles.a]\nstatements = ['select', 'insert']\n{line}\n"
    with pytest.raises(gr.PolicyError, match=message) as err:
        Policy.from_text(text)
    assert err.value.line >= 3


def test_a_column_rule_may_spell_its_table_another_way() -> None:
    text = (
        "[roles.a]\nstatements = ['select']\ntables = ['EMPLOYEES']\n\n"
        "[roles.a.columns]\nemployees = { deny = ['salary'] }\n"
    )
    guide = _guide(text, "a", _hr())
    assert guide.check("SELECT name FROM employees;") == []
    assert "unknown_column" in _kinds(guide, "SELECT salary FROM employees;")  # hidden: as absent


# -- H3: statement kinds are not capabilities ---------------------------------------------------

INSERT_ONLY = "[roles.w]\nstatements = ['insert']\n"
BLIND_WRITER = "[roles.w]\nstatements = ['insert', 'update', 'delete']\n"


def test_update_or_replace_needs_delete() -> None:
    manager = gr.compile(_sqlite(), _bytes(), schema=_hr(), policy=_hr_policy(), role="manager")
    sql = "UPDATE OR REPLACE employees SET id = 2 WHERE id = 1;"
    assert not _writable(manager, sql)
    assert "conflict_not_allowed" in _kinds(manager, sql)
    fine = "UPDATE OR IGNORE employees SET dept = 'ops' WHERE id = 1;"
    assert _writable(manager, fine) and manager.check(fine) == []
    admin = gr.compile(_sqlite(), _bytes(), schema=_hr(), policy=_hr_policy(), role="admin")
    assert _writable(admin, sql) and admin.check(sql) == []


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT OR REPLACE INTO orders (id) VALUES (1);",
        "REPLACE INTO orders (id) VALUES (1);",
    ],
)
def test_insert_cannot_overwrite_rows(sql: str) -> None:
    guide = _guide(INSERT_ONLY, "w", _hr())
    assert not _writable(guide, sql)
    assert "conflict_not_allowed" in _kinds(guide, sql)
    # delete alone is not enough: an INSERT that replaces writes over the row, as UPDATE does
    deleter = _guide("[roles.w]\nstatements = ['insert', 'delete']\n", "w", _hr())
    assert not _writable(deleter, sql)


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO orders (id) VALUES (9) RETURNING (SELECT group_concat(name) FROM employees);",
        "INSERT INTO orders (id) SELECT id FROM employees RETURNING *;",
        "INSERT INTO orders (id) VALUES ((SELECT max(salary) FROM employees));",
    ],
)
def test_a_role_without_select_reads_nothing_inside_an_insert(sql: str) -> None:
    guide = _guide(INSERT_ONLY, "w", _hr())
    assert not _writable(guide, sql)
    found = guide.check(sql)
    reads = [v for v in found if v.kind == "read_not_allowed"]
    assert reads and "needs select" in reads[0].message, found


BLIND_READS = [
    "UPDATE orders SET total = 1 WHERE employee_id = 2;",
    "UPDATE orders SET total = total * 2;",
    'UPDATE orders SET placed_on = "total";',  # SQLite reads "total" as the column
    "DELETE FROM orders WHERE total > 100;",
]
BLIND_WRITES = [
    "INSERT INTO orders (id, total) VALUES (9, 1.5);",
    "INSERT INTO orders VALUES (9, 1, 2.5, '2026-05-01');",
    "UPDATE orders SET total = 0;",
    "DELETE FROM orders;",
]


def test_a_role_without_select_writes_blind() -> None:
    guide = _guide(BLIND_WRITER, "w", _hr())
    for sql in BLIND_READS:
        assert not _writable(guide, sql), sql
        assert "read_not_allowed" in _kinds(guide, sql), sql
    for sql in BLIND_WRITES:  # writing names columns, but does not read them
        assert _writable(guide, sql), sql
        assert guide.check(sql) == [], sql


def test_the_checker_judges_statements_from_elsewhere() -> None:
    """A SemanticChecker on the dialect grammar (no mask in front of it) names each
    capability the statement needs and the role lacks."""
    compiled = gr.compile_grammar(_sqlite())
    policy = Policy.from_text(
        "[roles.reader]\nstatements = ['select']\n\n"
        "[roles.updater]\nstatements = ['select', 'update']\n\n" + INSERT_ONLY
    )

    def kinds(role: str, sql: str) -> list[str]:
        checker = gr.SemanticChecker(compiled, SchemaView(_hr(), policy.role(role)))
        return [v.kind for v in checker.check(sql)]

    assert kinds("reader", "DELETE FROM orders;") == ["statement_not_allowed"]
    assert kinds("updater", "UPDATE OR REPLACE orders SET id = 1;") == ["conflict_not_allowed"]
    assert kinds("w", "REPLACE INTO orders (id) VALUES (1);") == ["conflict_not_allowed"]
    assert kinds("w", "INSERT INTO orders (id) SELECT id FROM employees;") == [
        "read_not_allowed",  # the table
        "read_not_allowed",  # its column
    ]
    assert kinds("w", "INSERT INTO orders (id, total) VALUES (1, 2);") == []


def test_writes_limits_the_tables_a_role_changes() -> None:
    clerk = gr.compile(_sqlite(), _bytes(), schema=_hr(), policy=_hr_policy(), role="clerk")
    assert _hr_policy().role("clerk").writes == {"orders"}
    (found,) = clerk.check("UPDATE employees_public SET name = 'x' WHERE id = 1;")
    assert found.kind == "table_not_writable" and found.table == "employees_public"
    assert "orders" in found.message
    assert clerk.check("UPDATE orders SET total = 1 WHERE id = 1;") == []
    # reading the read-only table inside a write to the writable one is fine
    sql = "INSERT INTO orders (id, employee_id) SELECT 9, id FROM employees_public WHERE id = 1;"
    assert clerk.check(sql) == []


BAD_WRITES = [
    ("statements = ['select']\nwrites = ['orders']", "holds no statement kind that writes", 3),
    ("statements = ['insert']\ntables = ['orders']\nwrites = ['employees']", "cannot see", 4),
    ("statements = ['insert']\nwrites = []", "writes is empty", 3),
    ("statements = ['insert']\nwrites = 'orders'", "writes must be a list", 3),
]


@pytest.mark.parametrize("body, message, line", BAD_WRITES, ids=[b[1] for b in BAD_WRITES])
def test_bad_writes_are_named_errors(body: str, message: str, line: int) -> None:
    with pytest.raises(gr.PolicyError, match=message) as err:
        Policy.from_text(f"[roles.a]\n{body}\n", source="p.toml")
    assert err.value.line == line, str(err.value)


def test_writes_names_tables_of_the_schema_and_enters_the_fingerprint() -> None:
    text = "[roles.a]\nstatements = ['insert']\nwrites = ['order']\n"
    with pytest.raises(gr.PolicyError, match="names table 'order', which") as err:
        _guide(text, "a", _hr())
    assert err.value.line == 3
    plain = Policy.from_text("[roles.a]\nstatements = ['insert']\n")
    limited = Policy.from_text("[roles.a]\nstatements = ['insert']\nwrites = ['orders']\n")
    assert plain.fingerprint != limited.fingerprint


# -- H4: catalogues are chosen explicitly, projection fails closed ------------------------------


@cache
def _with_drop_table() -> gr.Grammar:
    """A user grammar that happens to be called sqlite.lark, with one more statement kind."""
    text = bundled_grammar_text("sqlite")
    edited = text.replace(
        "          | delete_stmt\n", "          | delete_stmt\n          | drop_stmt\n"
    )
    assert edited != text
    return gr.Grammar.from_lark(
        edited + '\ndrop_stmt: "drop"i "table"i TABLE_NAME\n', "sqlite.lark"
    )


READER = "[roles.r]\nstatements = ['select']\n"


def test_a_user_grammar_gets_no_catalogue_by_its_file_name() -> None:
    grammar = _with_drop_table()
    with pytest.raises(gr.PolicyError, match="catalogue="):
        gr.compile(grammar, _bytes(), policy=Policy.from_text(READER), role="r")
    with pytest.raises(gr.PolicyError, match="catalogue="):
        Policy.from_text(READER, grammar)
    # the message names parameters that exist
    for function in (gr.compile, Policy.from_text, Policy.from_file):
        assert "catalogue" in inspect.signature(function).parameters


def test_a_statement_kind_the_catalogue_does_not_name_is_dropped() -> None:
    grammar = _with_drop_table()
    catalogue = gr.ConstructCatalogue.bundled("sqlite", grammar)
    policy = Policy.from_text(READER, catalogue=catalogue)
    guide = gr.compile(grammar, _bytes(), policy=policy, role="r", catalogue=catalogue)
    assert not _writable(guide, "DROP TABLE orders;")
    assert _kinds(guide, "DROP TABLE orders;") == ["outside_language"]
    assert _writable(guide, "SELECT 1;")


def test_a_catalogue_for_another_grammar_is_refused(tmp_path: Path) -> None:
    bundled = gr.ConstructCatalogue.for_grammar(_sqlite())
    with pytest.raises(gr.PolicyError, match="built for another grammar"):
        gr.compile(
            _with_drop_table(),
            _bytes(),
            policy=Policy.from_text(READER),
            role="r",
            catalogue=bundled,
        )
    path = tmp_path / "mine.constructs.toml"
    path.write_text('dialect = "sqlite"\n[statements]\nselect = ["statement: select_stmt"]\n')
    mine = gr.ConstructCatalogue.from_file(path, _with_drop_table())
    assert mine.statements and not mine.capabilities


BAD_CATALOGUES = [
    ('[statements]\nselect = ["statement: select_stmt"]\n', "name the dialect"),
    (
        'dialect = "sqlite"\n[statements]\nselect = ["statement: select_stmt"]\n'
        '[capabilities.x]\nrequires = ["drop"]\nproductions = ["column_ref"]\n',
        "'drop' is not a statement kind",
    ),
    (
        'dialect = "sqlite"\n[capabilities.x]\nrequires = []\nproductions = ["column_ref"]\n',
        "requires must list statement kinds",
    ),
]


@pytest.mark.parametrize("text, message", BAD_CATALOGUES, ids=[c[1] for c in BAD_CATALOGUES])
def test_bad_catalogues_are_named_errors(text: str, message: str) -> None:
    with pytest.raises(gr.PolicyError, match=message):
        gr.ConstructCatalogue.from_text(text, _sqlite(), "c.toml")


def test_a_guide_with_an_explicit_catalogue_replays(tmp_path: Path) -> None:
    grammar = _with_drop_table()
    catalogue = gr.ConstructCatalogue.bundled("sqlite", grammar)
    guide = gr.compile(
        grammar,
        _bytes(),
        policy=Policy.from_text(READER, catalogue=catalogue),
        role="r",
        catalogue=catalogue,
    )
    log = AuditLog()
    matcher = guide.matcher(audit=log)
    rng = random.Random(11)
    for _ in range(12):  # a few sampled bytes, then the shortest way to a sentence
        allowed = [t for t in guide.mask(matcher.configuration).ids() if t != EOS]
        if allowed:
            matcher.accept_tokens([rng.choice(allowed)])
    assert matcher.accept_tokens(matcher.completion(), kind="forced")
    log.seal("eos", save_guide(guide, tmp_path))
    assert replay(log, tmp_path) == len(log.records)

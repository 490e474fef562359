"""Schema lexicons (L3): what can be spelled where, per dialect, and the paper's §7.1 example."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

import gridrail as gr
from assets import asset
from gridrail.errors import LexiconError, PolicyError
from gridrail.grammar.compiled import compile_grammar
from gridrail.policy.bundle import Policy
from gridrail.policy.constructs import ConstructCatalogue
from gridrail.policy.language import role_language
from gridrail.policy.lexicon import build_lexicons
from gridrail.policy.schema import Schema
from gridrail.policy.view import SchemaView

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
HR_TABLES = {
    "employees": ["id", "name", "dept", "salary", "manager_id"],
    "employees_public": ["id", "name", "dept"],
    "orders": ["id", "employee_id", "total", "placed_on"],
    "salaries": ["employee_id", "amount", "since"],
}


@cache
def _sqlite() -> gr.Grammar:
    return gr.Grammar.bundled("sqlite")


@cache
def _policy() -> Policy:
    return Policy.from_file(EXAMPLES / "hr_policy.toml")


def _oracle(schema: Schema, role: str | None = None) -> gr.Oracle:
    policy = _policy() if role else None
    grammar, _, _ = role_language(_sqlite(), policy, role, schema)
    return gr.Oracle(gr.compile_grammar(grammar))


@cache
def _hr_oracle(dialect: str, role: str | None) -> gr.Oracle:
    return _oracle(Schema.from_tables(dialect, HR_TABLES), role)


def _vocab(words: list[str]) -> gr.Vocabulary:
    spellings = [bytes((b,)) for b in range(256)] + [w.encode() for w in words]
    return gr.Vocabulary([*spellings, None], eos_token_ids=len(spellings))


# -- the paper's worked example (§7.1), verbatim ------------------------------------------------

WORDS_7_1 = ["yees", "y", "yees where", "yer", "sal", "insert", "update", "delete", "select"]


@pytest.fixture(scope="module")
def analyst_guide() -> gr.Guide:
    schema = Schema.from_tables("sqlite", HR_TABLES)
    return gr.compile(_sqlite(), _vocab(WORDS_7_1), schema=schema, policy=_policy(), role="analyst")


def _tid(guide: gr.Guide, word: str) -> int:
    return guide.vocab.aliases(word.encode())[0]


def test_worked_example_7_1(analyst_guide: gr.Guide) -> None:
    guide, oracle = analyst_guide, analyst_guide.oracle
    at_emplo = oracle.feed(oracle.initial, b"select * from emplo")
    mask = guide.mask(at_emplo)
    assert _tid(guide, "yees") in mask  # completes `employees`, a TABLE_NAME boundary
    assert _tid(guide, "y") in mask  # `employ`: a live prefix of an allowed word
    assert _tid(guide, "yees where") in mask  # boundary-crossing, decided on the live stack
    assert _tid(guide, "yer") not in mask  # `employer` is no allowed word's prefix
    assert guide.vocab.eos_token_id not in mask  # the grammar requires the closing ";"

    at_from = oracle.feed(oracle.initial, b"select * from ")
    mask = guide.mask(at_from)
    assert _tid(guide, "sal") not in mask  # only a prefix of `salaries`, which analyst cannot see
    assert ord("s") not in mask  # no visible table starts with "s"
    assert ord("e") in mask and ord("o") in mask

    head = guide.mask(oracle.initial)
    for verb in ("insert", "update", "delete"):
        assert _tid(guide, verb) not in head, verb
        assert oracle.first_error(verb.encode() + b" ") is not None
    assert _tid(guide, "select") in head

    done = oracle.feed(oracle.initial, b"select * from employees;")
    assert guide.vocab.eos_token_id in guide.mask(done)


def test_a_generic_identifier_grammar_would_have_admitted_sal() -> None:
    """The control for the example: without the lexicon `sal` is a fine table-name prefix —
    the lexicon, not the grammar, is what blocks it."""
    guide = gr.compile(_sqlite(), _vocab(WORDS_7_1))
    at_from = guide.oracle.feed(guide.oracle.initial, b"select * from ")
    assert _tid(guide, "sal") in guide.mask(at_from)


# -- lexicon forms per dialect -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        (b"select name from employees;", True),
        (b"SELECT NAME FROM EMPLOYEES;", True),  # SQLite ignores ASCII case
        (b'select "name" from [employees];', True),
        (b"select `NaMe` from `Employees`;", True),
        # column-to-table binding is beyond any left-to-right mask (Prop. 11): `amount` is a
        # column of salaries, spellable wherever a column may stand; the checker names it
        (b"select amount from employees;", True),
        (b"select nam from employees;", False),
        (b"select name from salary;", False),
        (b"select x from employees;", False),
        (b"select count(*) from orders;", True),
    ],
)
def test_sqlite_lexicon_without_role(text: bytes, ok: bool) -> None:
    assert _hr_oracle("sqlite", None).accepts(text) is ok


def test_analyst_sees_only_its_tables_columns_and_functions() -> None:
    oracle = _hr_oracle("sqlite", "analyst")
    assert oracle.accepts(b"select name, dept from employees where id = 1;")
    assert oracle.accepts(b"select count(*), max(total) from orders;")
    assert not oracle.accepts(b"select * from salaries;")
    # salary is denied in employees, the only visible table that has it: unspellable
    assert not oracle.accepts(b"select salary from employees;")
    # functions outside the role's list are not function names any more
    assert not oracle.accepts(b"select length(name) from employees;")
    assert not oracle.accepts(b"delete from orders;")


def test_only_the_functions_the_database_has_are_spellable() -> None:
    """A SQLite file's schema carries its library's functions (`pragma function_list`): the
    language offers no call SQLite would refuse ("no such function: CONCAT", 15 of 584 Spider
    candidates under SQLite 3.40); a role's list narrows them further."""
    read = Schema.from_sqlite(EXAMPLES / "hr.sqlite")
    assert read.functions is not None and {"count", "upper", "lower"} <= read.functions
    lacking = replace(read, functions=read.functions - {"upper"})
    assert lacking.fingerprint != read.fingerprint
    assert not _oracle(lacking).accepts(b"select upper(name) from employees;")
    assert _oracle(lacking).accepts(b"select lower(name) from employees;")
    assert _oracle(replace(read, functions=None)).accepts(b"select upper(name) from employees;")
    # the analyst may call count and max only: of those, what the database has
    assert not _oracle(replace(read, functions=read.functions - {"max"}), "analyst").accepts(
        b"select max(total) from orders;"
    )
    assert _oracle(read, "analyst").accepts(b"select max(total) from orders;")


def test_postgres_case_rules() -> None:
    schema = Schema.from_tables(
        "postgres", {"orders": ["id", "Total Amount"], "Employees": ["id", "Name"]}
    )
    oracle = _oracle(schema)
    assert oracle.accepts(b"select id from orders;")
    assert oracle.accepts(b"select ID from ORDERS;")  # unquoted names fold to lower case
    assert oracle.accepts(b'select "id" from "orders";')
    assert not oracle.accepts(b'select id from "ORDERS";')  # quoted names match exactly
    assert oracle.accepts(b'select "Name" from "Employees";')
    assert not oracle.accepts(b"select id from Employees;")  # folds to employees: no such table
    # where an expression may stand "name" is a string; in a column list it must be a column
    assert oracle.accepts(b'insert into "Employees" ("Name") values (1);')
    assert not oracle.accepts(b'insert into "Employees" ("name") values (1);')
    assert oracle.accepts(b'select "Total Amount" from orders;')
    assert not oracle.accepts(b"select [id] from orders;")  # not a PostgreSQL quote


def test_duckdb_case_rules() -> None:
    oracle = _oracle(Schema.from_tables("duckdb", {"Orders": ["Id"]}))
    assert oracle.accepts(b"select id from orders;")
    assert oracle.accepts(b'select "ID" from "ORDERS";')  # quoted or not, case is ignored
    assert not oracle.accepts(b"select `id` from orders;")


def test_names_the_bare_regex_cannot_spell_are_reachable_quoted() -> None:
    schema = Schema.from_tables(
        "sqlite",
        {
            "order": ["group", "Official_ratings_(millions)", "with space", 'say "hi"', "é中"],
            "t]x": ["a"],
        },
    )
    oracle = _oracle(schema)
    assert oracle.accepts(b'select "group" from "order";')
    assert oracle.accepts(b"select [Official_ratings_(millions)] from [order];")
    assert oracle.accepts(b'select "with space", "say ""hi""" from `order`;')
    assert oracle.accepts('select é中 from "order";'.encode())
    assert oracle.accepts(b'select a from "t]x";')  # [..] cannot hold "]", quotes can
    assert not oracle.accepts(b"select a from [t]x];")
    assert not oracle.accepts(b"select group from order;")  # reserved words: quoted only


def test_real_spider_schema_with_parenthesized_column() -> None:
    """Like the paper's first real W_c ⊆ R_c violation (a Spider column with parentheses): a
    Spider column the bare identifier regex cannot spell (`%_Change_2007`) must be reachable
    quoted, never silently dropped."""
    db = asset("data", "spider", "database", "aircraft", "aircraft.sqlite")
    schema = Schema.from_sqlite(db)
    names = {c.name for t in schema.tables for c in t.columns}
    weird = sorted(n for n in names if not (n[0].isalpha() or n[0] == "_"))
    assert weird, "expected a column that needs quoting in aircraft"
    oracle = _oracle(schema)
    table = next(t.name for t in schema.tables if any(c.name == weird[0] for c in t.columns))
    assert oracle.accepts(f'select "{weird[0]}" from {table};'.encode())
    assert not oracle.accepts(f"select {weird[0]} from {table};".encode())


def test_lexicon_words_and_the_inclusion_check() -> None:
    schema = Schema.from_tables("sqlite", HR_TABLES)
    view = SchemaView(schema, _policy().role("analyst"))
    catalogue = ConstructCatalogue.for_grammar(_sqlite())
    lexicons = {lex.category.terminal: lex for lex in build_lexicons(_sqlite(), catalogue, view)}
    assert set(lexicons["TABLE_NAME"].words) == {"employees", "employees_public", "orders"}
    assert "salary" not in lexicons["COLUMN_NAME"].words
    assert "amount" not in lexicons["COLUMN_NAME"].words
    # the role's functions, each in the terminal of its call shape; a terminal all of whose
    # functions the role may call keeps its L1 regex (no lexicon)
    called = {
        t: set(lexicons[t].words) if t in lexicons else set(names)
        for t, names in catalogue.function_terminals.items()
    }
    assert set().union(*called.values()) == set(_policy().role("analyst").functions or ())
    assert "COUNT_OPEN" not in lexicons and "MIN_MAX" not in lexicons
    assert called["COUNT_OPEN"] == {"count"} and called["MIN_MAX"] == {"max", "min"}
    assert called["FUNCTION_1_2"] == {"round"} and called["WINDOW_0"] == set()


def test_column_words_are_each_name_once_in_its_first_spelling() -> None:
    catalogue = ConstructCatalogue.for_grammar(_sqlite())

    def words(tables: dict[str, list[str]]) -> tuple[str, ...]:
        view = SchemaView(Schema.from_tables("sqlite", tables), None)
        lexicons = build_lexicons(_sqlite(), catalogue, view)
        return next(lex for lex in lexicons if lex.category.terminal == "COLUMN_NAME").words

    # names that are their own keys: each once, in catalog order
    assert words({"a": ["x", "y"], "b": ["y", "z"]}) == ("x", "y", "z")
    # SQLite ignores case: one word per key, spelled as it was first met
    assert words({"a": ["id", "Name"], "b": ["NAME", "id", "total"]}) == ("id", "Name", "total")


def test_a_word_no_form_can_spell_is_an_error() -> None:
    # a grammar whose identifiers cannot be quoted and cannot contain spaces
    text = (EXAMPLES / ".." / "python" / "gridrail" / "grammars" / "sqlite.lark").read_text()
    narrow = text.replace(
        "TABLE_NAME: /(?:[A-Za-z_]|[^\\x00-\\x7f])(?:[A-Za-z0-9_$]|[^\\x00-\\x7f])*|"
        '"(?:[^"\\x00]|"")+"|`(?:[^`\\x00]|``)+`|\\[[^\\]\\x00]+\\]/',
        "TABLE_NAME: /[a-z_]+/",
    )
    assert narrow != text
    grammar = gr.Grammar.from_lark(narrow, "sqlite.lark")
    schema = Schema.from_tables("sqlite", {"two words": ["a"]})
    catalogue = ConstructCatalogue.bundled("sqlite", grammar)  # an edited copy: given
    with pytest.raises(LexiconError, match="'two words' cannot be written"):
        role_language(grammar, schema=schema, catalogue=catalogue)


def test_names_past_the_scanner_bound_are_a_short_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the bound on the scanner's name states, lowered so that 60 columns meet it (their shared
    # beginnings and endings merge); the message names the terminals and the size, never a name
    from gridrail.grammar import scanner

    monkeypatch.setattr(scanner, "MAX_NAME_STATES", 20)
    columns = [f"column_number_{i}" for i in range(60)]
    schema = Schema.from_tables("sqlite", {"wide": columns})
    language, _, _ = role_language(_sqlite(), schema=schema)
    with pytest.raises(LexiconError) as error:
        compile_grammar(language)
    message = str(error.value)
    assert message.startswith("the names of TABLE_NAME, COLUMN_NAME need more than 20 scanner")
    assert "column_number" not in message
    assert len(message) < 300


def test_policy_names_checked_against_the_schema(tmp_path: Path) -> None:
    db = tmp_path / "hr.sqlite"
    with sqlite3.connect(db) as conn:
        conn.executescript((EXAMPLES / "hr.sql").read_text())
    schema = Schema.from_sqlite(db)
    bad = _policy().text.replace('deny = ["salary"]', 'deny = ["wage"]')
    policy = Policy.from_text(bad, source="bad.toml")
    with pytest.raises(PolicyError, match="table 'employees' has no column 'wage'") as err:
        gr.compile(_sqlite(), _vocab([]), schema=schema, policy=policy, role="analyst")
    assert err.value.line == 13
    other = Schema.from_tables("sqlite", {"orders": ["id"]})
    with pytest.raises(PolicyError, match="names table 'employees', which"):
        gr.compile(_sqlite(), _vocab([]), schema=other, policy=_policy(), role="analyst")


def test_a_role_that_sees_no_usable_name_is_rejected() -> None:
    schema = Schema.from_tables("sqlite", {"orders": ["id"]})
    # update needs a SET column, and the role may see none of the only table's columns
    policy = Policy.from_text(
        "[roles.ghost]\nstatements = ['update']\ntables = ['orders']\n\n"
        "[roles.ghost.columns]\norders = { allow = [] }\n"
    )
    with pytest.raises(PolicyError, match="role 'ghost' can say nothing"):
        role_language(_sqlite(), policy, "ghost", schema)


# -- guide.check: the language first, then what no mask can enforce ---------------------------


def test_guide_check_names_violations(analyst_guide: gr.Guide) -> None:
    assert analyst_guide.check("select name, dept from employees where id = 1;") == []

    head, kind = analyst_guide.check("delete from orders;")
    assert head.kind == "outside_language" and head.start == 0  # no role statement starts "d"
    assert "SELECT" in head.message
    assert kind.kind == "statement_not_allowed" and "DELETE" in kind.message

    kinds = [(v.kind, v.column) for v in analyst_guide.check("select salary from employees;")]
    assert sorted(kinds, key=str) == [("outside_language", None), ("unknown_column", "salary")]

    # column policy through an alias: spellable (`salary` is no column of a visible table the
    # mask could tell apart), caught by the checker
    sql = "select o.total from employees as o;"
    assert [v.kind for v in analyst_guide.check(sql)] == ["unknown_column"]

    (incomplete,) = analyst_guide.check("select name from employees")
    assert incomplete.kind == "outside_language" and "SEMICOLON" in incomplete.message


def test_guide_check_without_schema_is_the_grammar_only() -> None:
    guide = gr.compile(_sqlite(), _vocab([]))
    assert guide.check("select anything from anywhere;") == []
    assert [v.kind for v in guide.check("select from;")] == ["outside_language"]

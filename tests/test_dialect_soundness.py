"""The bundled SQLite grammar's language is a subset of what SQLite accepts (issue 13, item 3):
sentences of several roles' languages under real schemas -- walk-arm generations and the reserve's
shortest completions -- are prepared by SQLite on the real databases and never refused for a
grammar reason (bench/dialect_soundness.py has the generator, the settings and the classes).
Name-binding refusals (an invented qualifier, a column of a table not in FROM) are counted, not
asserted: they are the checker's business. A short run here; the long one prepares 10,000
(1,500 in the reduced long tier)."""

from __future__ import annotations

import dataclasses
import random
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

import pytest

import gridrail as gr
from assets import asset
from gridrail.grammar.loader import bundled_grammar_text
from gridrail.policy.language import role_language
from support.long_tier import long_size

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))
import dialect_soundness  # noqa: E402  (the generator lives with the benchmark)


def _assert_sound(counts: dialect_soundness.Counts, sentences: int) -> None:
    assert counts.sentences >= sentences
    # "function": a function the engine lacks (the language holds only those it has);
    # "other": a message nobody classified yet
    for name in ("grammar", "function", "other"):
        found = [e for kind, kept in counts.examples.items() if kind.startswith(name) for e in kept]
        assert counts.refused[name] == 0, "\n".join(found[:10])
    # the sentences reach SQLite's binder: some name an invented qualifier (the control that
    # refusals are seen at all)
    assert counts.refused["name"] > 0


def test_sqlite_refuses_no_sentence_for_a_grammar_reason() -> None:
    asset("data", "spider", "database")  # the Spider settings are part of the run
    sentences = 400
    _assert_sound(dialect_soundness.run(sentences, seed=5, real_tokenizer=True), sentences)


@pytest.mark.long
def test_sqlite_refuses_no_sentence_for_a_grammar_reason_long() -> None:
    asset("data", "spider", "database")
    sentences = long_size(10_000, 1_500)
    _assert_sound(dialect_soundness.run(sentences, seed=0, real_tokenizer=True), sentences)


def test_every_settings_shortest_completion_prepares() -> None:
    for setting in dialect_soundness.settings():
        sql = dialect_soundness.text(setting.guide, setting.guide.matcher().completion())
        with closing(dialect_soundness.read_only(setting.database)) as db:
            assert dialect_soundness.sqlite_refusal(db, sql) is None, (setting.name, sql)


# SQLite's keywords (https://sqlite.org/lang_keywords.html, 3.40: 147 words)
SQLITE_KEYWORDS = [
    "ABORT",
    "ACTION",
    "ADD",
    "AFTER",
    "ALL",
    "ALTER",
    "ALWAYS",
    "ANALYZE",
    "AND",
    "AS",
    "ASC",
    "ATTACH",
    "AUTOINCREMENT",
    "BEFORE",
    "BEGIN",
    "BETWEEN",
    "BY",
    "CASCADE",
    "CASE",
    "CAST",
    "CHECK",
    "COLLATE",
    "COLUMN",
    "COMMIT",
    "CONFLICT",
    "CONSTRAINT",
    "CREATE",
    "CROSS",
    "CURRENT",
    "CURRENT_DATE",
    "CURRENT_TIME",
    "CURRENT_TIMESTAMP",
    "DATABASE",
    "DEFAULT",
    "DEFERRABLE",
    "DEFERRED",
    "DELETE",
    "DESC",
    "DETACH",
    "DISTINCT",
    "DO",
    "DROP",
    "EACH",
    "ELSE",
    "END",
    "ESCAPE",
    "EXCEPT",
    "EXCLUDE",
    "EXCLUSIVE",
    "EXISTS",
    "EXPLAIN",
    "FAIL",
    "FILTER",
    "FIRST",
    "FOLLOWING",
    "FOR",
    "FOREIGN",
    "FROM",
    "FULL",
    "GENERATED",
    "GLOB",
    "GROUP",
    "GROUPS",
    "HAVING",
    "IF",
    "IGNORE",
    "IMMEDIATE",
    "IN",
    "INDEX",
    "INDEXED",
    "INITIALLY",
    "INNER",
    "INSERT",
    "INSTEAD",
    "INTERSECT",
    "INTO",
    "IS",
    "ISNULL",
    "JOIN",
    "KEY",
    "LAST",
    "LEFT",
    "LIKE",
    "LIMIT",
    "MATCH",
    "MATERIALIZED",
    "NATURAL",
    "NO",
    "NOT",
    "NOTHING",
    "NOTNULL",
    "NULL",
    "NULLS",
    "OF",
    "OFFSET",
    "ON",
    "OR",
    "ORDER",
    "OTHERS",
    "OUTER",
    "OVER",
    "PARTITION",
    "PLAN",
    "PRAGMA",
    "PRECEDING",
    "PRIMARY",
    "QUERY",
    "RAISE",
    "RANGE",
    "RECURSIVE",
    "REFERENCES",
    "REGEXP",
    "REINDEX",
    "RELEASE",
    "RENAME",
    "REPLACE",
    "RESTRICT",
    "RETURNING",
    "RIGHT",
    "ROLLBACK",
    "ROW",
    "ROWS",
    "SAVEPOINT",
    "SELECT",
    "SET",
    "TABLE",
    "TEMP",
    "TEMPORARY",
    "THEN",
    "TIES",
    "TO",
    "TRANSACTION",
    "TRIGGER",
    "UNBOUNDED",
    "UNION",
    "UNIQUE",
    "UPDATE",
    "USING",
    "VACUUM",
    "VALUES",
    "VIEW",
    "VIRTUAL",
    "WHEN",
    "WHERE",
    "WINDOW",
    "WITH",
    "WITHOUT",
]
# Where a keyword can stand as a qualifier or as a bare name (`{}` is the keyword)
KEYWORD_PLACES = (
    "SELECT {}.id FROM employees;",
    "SELECT id FROM employees WHERE {}.id = 1;",
    "SELECT id FROM employees ORDER BY {}.id;",
    "SELECT {} FROM employees;",
    "SELECT id AS {} FROM employees;",
    "SELECT id FROM employees {};",
)


def test_every_sqlite_keyword_as_a_name_is_in_the_language_only_if_sqlite_prepares_it() -> None:
    """A differential against SQLite itself, word by word: each keyword as a qualifier, a
    column, an alias, in lower and upper case. What SQLite refuses for its syntax the grammar
    must refuse too (soundness; the bare qualifier leaves those words out of its regex); what
    SQLite reads as a name the grammar may still refuse (a keyword it uses), never the reverse."""
    assert len(SQLITE_KEYWORDS) == 147
    oracle = gr.Oracle(gr.compile_grammar(gr.Grammar.bundled("sqlite")))
    unsound = []
    with closing(dialect_soundness.read_only(dialect_soundness.HR)) as db:
        for word in SQLITE_KEYWORDS:
            for place in KEYWORD_PLACES:
                for spelled in (word.lower(), word):
                    sql = place.format(spelled)
                    message = dialect_soundness.sqlite_refusal(db, sql)
                    refused = message is not None and (
                        dialect_soundness.classify(message)[0] == "grammar"
                    )
                    if refused and oracle.accepts(sql.encode()):
                        unsound.append(f"{sql} -> {message}")
    assert unsound == []


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT * ;", "grammar"),  # the reserve's completion before the fix
        ("SELECT SELECT.name FROM employees;", "grammar"),
        ("SELECT 1AND 2;", "grammar"),
        ("SELECT 'a\x00';", "grammar"),
        ("SELECT upper(name, dept) FROM employees;", "grammar"),  # a call's shape
        ("SELECT rank() FILTER (WHERE 1) OVER () FROM employees;", "grammar"),
        ("SELECT upper(name) OVER () FROM employees;", "grammar"),
        ("SELECT T1.name FROM employees;", "name"),
        ("SELECT dept FROM employees WHERE count(*) > 1;", "semantic"),
        # a walk under Γ wrote both (compound VALUES rows of two widths; likelihood's weight)
        ("VALUES (1) INTERSECT VALUES (1, 2);", "semantic"),
        ("SELECT likelihood(1, 2);", "semantic"),
        ("SELECT unhex('00');", "function"),  # SQLite 3.41; "semantic" is a newer build's
    ],
)
def test_refusals_are_classified_by_sqlites_message(sql: str, expected: str) -> None:
    with closing(dialect_soundness.read_only(dialect_soundness.HR)) as db:
        message = dialect_soundness.sqlite_refusal(db, sql)
    if message is None:  # a newer SQLite has the function
        assert expected == "function"
        return
    assert dialect_soundness.classify(message)[0] == expected, message


def test_the_differential_finds_a_grammar_defect() -> None:
    """Positive control: with the star forms allowed without FROM again, the differential's
    first sentence (the shortest completion, `SELECT * ;`) is a grammar-class refusal."""
    text = bundled_grammar_text("sqlite")
    strict = '"select"i [set_quantifier] starred_columns from_clause'
    assert strict in text
    grammar = gr.Grammar.from_lark(
        text.replace(strict, strict.replace("from_clause", "[from_clause]"))
    )
    schema = gr.Schema.from_sqlite(dialect_soundness.HR)
    guide = gr.compile(grammar, dialect_soundness.vocabulary(schema))
    setting = dialect_soundness.Setting("star without FROM", dialect_soundness.HR, guide)
    sql = next(dialect_soundness.sentences(setting, random.Random(0)))
    with closing(dialect_soundness.read_only(setting.database)) as db:
        message = dialect_soundness.sqlite_refusal(db, sql)
    assert message is not None and dialect_soundness.classify(message)[0] == "grammar", sql


def test_the_checker_reports_what_sqlite_refuses_for_a_semantic_reason() -> None:
    """Aggregates in WHERE are left to the checker, which prepares with SQLite."""
    policy = gr.Policy.from_file(dialect_soundness.HR_POLICY)
    schema = gr.Schema.from_sqlite(dialect_soundness.HR)
    vocab = dialect_soundness.vocabulary(schema)
    guide = gr.compile(
        gr.Grammar.bundled("sqlite"), vocab, schema=schema, policy=policy, role="auditor"
    )
    found = guide.check("SELECT dept FROM employees WHERE count(*) > 1;")
    assert [v.kind for v in found] == ["database_rejected"]
    assert "misuse of aggregate" in found[0].message


def test_a_read_only_connection_runs_no_write() -> None:
    with closing(dialect_soundness.read_only(dialect_soundness.HR)) as db:
        before = db.execute("SELECT count(*) FROM orders").fetchone()
        assert dialect_soundness.sqlite_refusal(db, "DELETE FROM orders;") is None  # prepared
        assert db.execute("SELECT count(*) FROM orders").fetchone() == before
        with pytest.raises(sqlite3.OperationalError):
            db.execute("DELETE FROM orders")


def _calls(function: str) -> list[tuple[str, bool]]:
    """Calls of `function` in every shape the grammar has a word for: 0-4 arguments, `*`, with
    DISTINCT, FILTER, OVER and their combinations; each with whether the grammar may refuse it
    although SQLite prepares it (DISTINCT but on an aggregate's one argument, `*` in any
    function but count: nonsense SQLite tolerates, which the language leaves out)."""
    catalogue = gr.ConstructCatalogue.for_grammar(gr.Grammar.bundled("sqlite"))
    aggregate = function in (
        catalogue.function_terminals["AGGREGATE_1"]
        | catalogue.function_terminals["AGGREGATE_2"]
        | catalogue.function_terminals["AGGREGATE_1_2"]
        | catalogue.function_terminals["MIN_MAX"]
        | catalogue.function_terminals["COUNT_OPEN"]
    )
    out = []
    # (0.5: likelihood's second argument must be a constant in [0, 1])
    for arguments in ["", "*", "id", "id, 0.5", "id, 0.5, 3", "id, 0.5, 3, 4"]:
        for distinct in ("", "DISTINCT "):
            if distinct and arguments in ("", "*"):
                continue
            for after in ("", " FILTER (WHERE id > 1)", " OVER ()", " FILTER (WHERE 1) OVER ()"):
                star = arguments == "*" and function != "count"
                one = "," not in arguments
                narrowed = bool(distinct and not (aggregate and one)) or star
                sql = f"SELECT {function}({distinct}{arguments}){after} FROM employees;"
                out.append((sql, narrowed))
    return out


def test_the_call_shapes_are_those_sqlite_prepares() -> None:
    """Every function of the grammar, in every call shape: the language holds a call only if
    SQLite prepares it, and every call SQLite prepares (but the narrowed nonsense of `_calls`)
    — so the function terminals' argument counts, FILTER, OVER and DISTINCT are SQLite's."""
    oracle = gr.Oracle(gr.compile_grammar(gr.Grammar.bundled("sqlite")))
    catalogue = gr.ConstructCatalogue.for_grammar(gr.Grammar.bundled("sqlite"))
    engine = gr.Schema.from_sqlite(dialect_soundness.HR).functions
    assert engine is not None
    unsound, incomplete, checked = [], [], 0
    with closing(dialect_soundness.read_only(dialect_soundness.HR)) as db:
        for function in sorted(catalogue.functions & engine):
            for sql, narrowed in _calls(function):
                refused = dialect_soundness.sqlite_refusal(db, sql)
                held = oracle.accepts(sql.encode())
                checked += 1
                if held and refused is not None:
                    unsound.append(f"{sql}  ({refused})")
                elif not held and refused is None and not narrowed:
                    incomplete.append(sql)
    assert checked > 3000
    assert not unsound, "\n".join(unsound[:20])
    assert not incomplete, "\n".join(incomplete[:20])


def test_the_pattern_operators_take_escape_only_where_sqlite_does() -> None:
    """`a LIKE b ESCAPE c` is SQLite's like(b, a, c); GLOB and MATCH are glob() and match() of
    two arguments, so with ESCAPE they are refused ("wrong number of arguments"): a walk under Γ
    wrote `… MATCH … ESCAPE …`. The grammar holds each form exactly when SQLite prepares it."""
    oracle = gr.Oracle(gr.compile_grammar(gr.Grammar.bundled("sqlite")))
    checked = 0
    with closing(dialect_soundness.read_only(dialect_soundness.HR)) as db:
        for operator in ("LIKE", "GLOB", "MATCH"):
            for negated in ("", "NOT "):
                for escape in ("", " ESCAPE '!'"):
                    sql = f"SELECT name FROM employees WHERE name {negated}{operator} 'a'{escape};"
                    refused = dialect_soundness.sqlite_refusal(db, sql)
                    assert oracle.accepts(sql.encode()) == (refused is None), (sql, refused)
                    checked += refused is not None
    assert checked == 4  # GLOB and MATCH with ESCAPE, negated or not


def test_regexp_is_in_the_language_only_where_the_engine_has_it() -> None:
    """`x REGEXP y` is SQLite's call regexp(y, x), which SQLite itself does not ship: a
    schema read from a SQLite file knows its engine's functions and drops the operator; one
    whose engine has regexp keeps it; one that does not say keeps it too (nothing to judge)."""
    sql = b"SELECT name FROM employees WHERE name REGEXP 'a';"
    read = gr.Schema.from_sqlite(dialect_soundness.HR)
    assert read.functions is not None and "regexp" not in read.functions
    with closing(dialect_soundness.read_only(dialect_soundness.HR)) as db:
        assert "no such function: REGEXP" in dialect_soundness.sqlite_refusal(db, sql.decode())
    with_regexp = dataclasses.replace(read, functions=read.functions | {"regexp"})
    unknown = dataclasses.replace(read, functions=None)
    held = {}
    for name, schema in (("read", read), ("with", with_regexp), ("unknown", unknown)):
        language, _, _ = role_language(gr.Grammar.bundled("sqlite"), schema=schema)
        oracle = gr.Oracle(gr.compile_grammar(language))
        held[name] = oracle.accepts(sql)
        assert oracle.accepts(sql.replace(b"REGEXP", b"LIKE"))  # the control
    assert held == {"read": False, "with": True, "unknown": True}

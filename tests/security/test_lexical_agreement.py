"""Every database reads a statement of the language as gridrail reads it: the text between its
tokens is layout and comments to each of them (session 38's review, critical: PostgreSQL and
DuckDB end a `--` comment at a carriage return and nest block comments, so text the grammar read
as a comment ran as code — `SELECT 1 --\\r, query_to_xml('SELECT * FROM salaries', true, false,
'')\\n;` was called clean by /v1/check over PostgreSQL and returned the hidden table).

The differential: random layout and comment pieces between two tokens; wherever the grammar takes
the text, SQLite, DuckDB and PostgreSQL give the same outcome for it as for its tokens alone,
joined by single spaces (what gridrail checked)."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable

import duckdb
import psycopg
import pytest

import gridrail as gr
from gridrail.parse.tree import parse_tree

# pieces that are layout, comment delimiters, or code a comment may hide
PIECES = ("--", "/*", "*/", "-", "\r", "\n", "\r\n", " ", "7", "+", "*")
TEXTS = 600

# the review's statements: each reads a hidden table or column where a database reads the text
# between `--` and the newline, or after a nested `/*`, as code
DESYNCED = [
    "SELECT 1 --\r, query_to_xml('SELECT * FROM salaries', true, false, '')\n;",
    "SELECT count(*) --\r, table_to_xml('employees', true, false, '')\nFROM orders;",
    "SELECT 2 /* /* */ * 3 */* 5, query_to_xml('SELECT name, salary FROM employees', true, "
    "false, ''), 7 - /* */ 4;",
    "SELECT 1; --\rSELECT name FROM employees;\n",
]


@pytest.fixture(scope="module")
def compiled() -> gr.CompiledGrammar:
    return gr.compile_grammar(gr.Grammar.bundled("sqlite"))


@pytest.mark.parametrize("sql", DESYNCED)
def test_text_a_database_reads_otherwise_is_outside_the_language(
    compiled: gr.CompiledGrammar, sql: str
) -> None:
    assert not gr.Oracle(compiled).accepts(sql.encode()), sql


def _texts(compiled: gr.CompiledGrammar) -> list[tuple[str, str]]:
    """(text, its tokens joined by spaces) for the random texts the grammar takes."""
    oracle, rng, out = gr.Oracle(compiled), random.Random(38), []
    for _ in range(TEXTS):
        gap = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 7)))
        text = f"SELECT 1{gap}+ 2;"
        if oracle.accepts(text.encode()):
            tokens = [t.text for t in parse_tree(compiled, text).tokens()]
            out.append((text, " ".join(tokens)))
    return out


def _outcome(run: Callable[[str], list], sql: str) -> object:
    try:
        return [tuple(float(v) for v in row) for row in run(sql)]
    except Exception as exc:  # each database's own error type: only "it failed" is compared
        return f"error ({type(exc).__name__})"


def _agree(run: Callable[[str], list], compiled: gr.CompiledGrammar) -> None:
    texts = _texts(compiled)
    assert len(texts) >= 100, "the random texts exercise the grammar's layout"
    assert any("--" in t and "\r\n" in t for t, _ in texts), "a comment before CR LF is taken"
    for text, tokens in texts:
        assert _outcome(run, text) == _outcome(run, tokens), (text, tokens)


def test_sqlite_reads_the_text_between_tokens_as_gridrail_does(
    compiled: gr.CompiledGrammar,
) -> None:
    db = sqlite3.connect(":memory:")
    _agree(lambda sql: db.execute(sql).fetchall(), compiled)


def test_duckdb_reads_the_text_between_tokens_as_gridrail_does(
    compiled: gr.CompiledGrammar,
) -> None:
    db = duckdb.connect()
    _agree(lambda sql: db.execute(sql).fetchall(), compiled)


def test_postgres_reads_the_text_between_tokens_as_gridrail_does(
    compiled: gr.CompiledGrammar, postgres_dsn: str
) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        _agree(lambda sql: db.execute(sql).fetchall(), compiled)

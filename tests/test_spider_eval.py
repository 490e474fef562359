"""bench/spider_eval.py: the pure parts (SQL extraction, ORDER BY detection, execution and the
result-comparison rule, name judging, metric aggregation) without a model; and one long
end-to-end smoke run on two Spider questions with the default model."""

from __future__ import annotations

import json
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

import pytest

import gridrail as gr
from assets import asset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import spider_eval as ev

# ----------------------------------------------------------------------------------------------
# SQL extraction from free text
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "sql"),
    [
        # a ```sql fence wins, whatever comes before it
        (
            "Use SELECT like this:\n```sql\nSELECT name FROM t\n```\nThat is all.",
            "SELECT name FROM t;",
        ),
        ("```SQL\nselect 1;\n```", "select 1;"),
        ("```sql\nSELECT a FROM t WHERE", "SELECT a FROM t WHERE;"),  # unclosed: to the end
        # else from the first upper-case statement keyword, cut after the first ";"
        ("Here it is: SELECT a FROM t; and more text", "SELECT a FROM t;"),
        (
            "The query with WITH x AS (SELECT 1) SELECT * FROM x",
            "WITH x AS (SELECT 1) SELECT * FROM x;",
        ),
        ("DELETE FROM t WHERE a = 1", "DELETE FROM t WHERE a = 1;"),
        # prose "with" is not a keyword; lower-case select is the fallback
        ("answer with select a from t", "select a from t;"),
        # a ";" inside quotes or a comment does not end the statement
        (
            "SELECT 'a;b' FROM t -- x;y\n WHERE c = \"d;\"; tail",
            "SELECT 'a;b' FROM t -- x;y\n WHERE c = \"d;\";",
        ),
        ("SELECT 'it''s;' FROM t", "SELECT 'it''s;' FROM t;"),
        # no statement at all
        ("The answer is 42.", ""),
        ("```sql\n\n```", ""),
        ("SELECTED works", ""),  # whole words only
    ],
)
def test_extract_sql(text: str, sql: str) -> None:
    assert ev.extract_sql(text) == sql


# ----------------------------------------------------------------------------------------------
# ORDER BY and the comparison rule
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "ordered"),
    [
        ("SELECT a FROM t ORDER BY a", True),
        ("select a from t order\n  by a desc limit 1", True),
        ("SELECT a FROM t WHERE b = (SELECT b FROM u ORDER BY c LIMIT 1)", False),
        ("SELECT a FROM t WHERE b = 'order by'", False),
        ("SELECT a FROM t -- ORDER BY a", False),
        ("SELECT border_by FROM t", False),
        ("SELECT a FROM (SELECT a FROM t ORDER BY a) ORDER BY a", True),
    ],
)
def test_top_level_order_by(sql: str, ordered: bool) -> None:
    assert ev.has_top_level_order_by(sql) is ordered


def test_results_match_multiset_unless_ordered() -> None:
    gold = [(1, "a"), (2, "b"), (2, "b")]
    assert ev.results_match(gold, [(2, "b"), (1, "a"), (2, "b")], ordered=False)
    assert not ev.results_match(gold, [(2, "b"), (1, "a"), (2, "b")], ordered=True)
    assert ev.results_match(gold, list(gold), ordered=True)
    # multiplicity counts, columns are not permuted, 1 == 1.0
    assert not ev.results_match(gold, [(1, "a"), (2, "b")], ordered=False)
    assert not ev.results_match([(1, "a")], [("a", 1)], ordered=False)
    assert ev.results_match([(1,)], [(1.0,)], ordered=False)
    assert ev.results_match([], [], ordered=False)


@pytest.fixture
def tiny_db(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.executescript(
            "CREATE TABLE head (head_id INTEGER, name TEXT, age INTEGER);"
            "INSERT INTO head VALUES (1, 'Ann', 60), (2, 'Bob', 50), (3, 'Cy', 70);"
        )
        db.commit()
    return path


def test_execute_reads_and_refuses_writes(tiny_db: Path) -> None:
    run = ev.execute(tiny_db, "SELECT count(*) FROM head WHERE age > 56;")
    assert run.ok and run.rows == [(2,)]
    write = ev.execute(tiny_db, "DELETE FROM head;")
    assert not write.ok and "readonly" in write.error.replace(" ", "").lower()
    assert ev.execute(tiny_db, "SELECT count(*) FROM head;").rows == [(3,)]  # unchanged
    bad = ev.execute(tiny_db, "SELECT nope FROM head;")
    assert not bad.ok and "no such column" in bad.error
    assert ev.execute(tiny_db, "").error == "no SQL"


def test_execute_timeout_and_row_cap(tiny_db: Path) -> None:
    endless = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c;"
    )
    run = ev.execute(tiny_db, endless, timeout_s=0.2)
    assert not run.ok and "timeout" in run.error
    many = ev.execute(tiny_db, "SELECT * FROM head AS a, head AS b;", max_rows=5)
    assert not many.ok and "more than 5 rows" in many.error


# ----------------------------------------------------------------------------------------------
# Names judged on the dialect's parse tree
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dialect() -> gr.CompiledGrammar:
    from gridrail.registry import shared_compiled_grammar

    return shared_compiled_grammar(gr.Grammar.bundled("sqlite"))


SCHEMA = gr.Schema.from_tables("sqlite", {"head": ["head_id", "name", "age"], "dept": ["id"]})


@pytest.mark.parametrize(
    ("sql", "problems"),
    [
        ("SELECT name FROM head;", []),
        ('SELECT "Name", [AGE] FROM HEAD;', []),  # quotes and case, by SQLite's rules
        ("SELECT T1.name FROM head AS T1 JOIN dept AS T2 ON T1.head_id = T2.id;", []),
        ("SELECT count(*) AS cnt FROM head ORDER BY cnt;", []),  # a declared column alias
        ("WITH x AS (SELECT age FROM head) SELECT age FROM x;", []),  # a declared CTE
        ("SELECT head.name FROM head;", []),
        ("SELECT salary FROM head;", ["COLUMN_NAME salary"]),
        ("SELECT name FROM heads;", ["TABLE_NAME heads"]),
        ("SELECT T9.name FROM head AS T1;", ["QUALIFIER T9."]),
        ("SELECT name FROM head", None),  # no ";": not a sentence of the dialect
        ("SELECT FROM WHERE;", None),
    ],
)
def test_name_problems(dialect, sql: str, problems: list[str] | None) -> None:
    assert ev.name_problems(dialect, SCHEMA, sql) == problems


# ----------------------------------------------------------------------------------------------
# Aggregation
# ----------------------------------------------------------------------------------------------


def _arm(**overrides) -> dict:
    base = {
        "dialect_parses": True,
        "parses": True,
        "names_ok": True,
        "names_ok_qualified": True,
        "clean": True,
        "executes": True,
        "correct": True,
        "truncated": False,
        "tokens": 10,
        "model_seconds": 1.0,
        "model_calls": 10,
        "guard_seconds": 0.1,
        "seconds": 2.0,
    }
    return {**base, **overrides}


def test_summarize_and_table() -> None:
    rows = [
        {
            "kind": "question",
            "arms": {
                "unconstrained": _arm(guard_seconds=None, truncated=True, tokens=30),
                "constrained": _arm(),
                "constrained+repair": _arm(repaired=True, tokens=20, guard_seconds=0.3),
            },
        },
        {
            "kind": "question",
            "arms": {
                "unconstrained": _arm(
                    guard_seconds=None, parses=False, executes=False, correct=False, tokens=10
                ),
                "constrained": _arm(correct=None, clean=False),  # gold failed: not scored
                "constrained+repair": _arm(correct=None, clean=False),
            },
        },
    ]
    s = ev.summarize(rows)
    free, con, rep = s["unconstrained"], s["constrained"], s["constrained+repair"]
    assert free["questions"] == 2 and free["parses"] == 50.0 and free["executes"] == 50.0
    assert free["correct"] == 50.0 and free["scored"] == 2 and free["truncated"] == 50.0
    assert free["tokens"] == 20.0 and free["guard_ms_per_token"] is None
    assert free["model_ms_per_call"] == pytest.approx(100.0)
    assert con["correct"] == 100.0 and con["scored"] == 1 and con["clean"] == 50.0
    assert con["guard_ms_per_token"] == pytest.approx(10.0)  # 0.2 s over 20 tokens
    assert con["guard_over_model"] == pytest.approx(0.1)  # 10 ms/token over 100 ms/call
    assert rep["repairs"] == 1 and rep["tokens"] == 15.0
    assert rep["guard_ms_per_token"] == pytest.approx(1e3 * 0.4 / 30)

    table = ev.markdown_table(s)
    lines = table.splitlines()
    assert lines[0] == "| metric | unconstrained | constrained | constrained+repair |"
    assert "| execution accuracy | 50.0% (1/2) | 100.0% (1/1) | 100.0% (1/1) |" in lines
    assert "| repairs triggered | — | — | 1 |" in lines
    assert "| guard ms per token | — | 10.00 | 13.33 |" in lines
    assert all(line.count("|") == 5 for line in lines)


def test_output_shape_helpers() -> None:
    assert ev.has_comment("SELECT 1; -- done") and ev.has_comment("/* x */ SELECT 1;")
    assert not ev.has_comment("SELECT '--' FROM t;")
    assert ev.trails_after_semicolon("SELECT 1;\n-- \n")
    assert not ev.trails_after_semicolon("SELECT 1;  ") and not ev.trails_after_semicolon("x")
    assert ev.error_kind("OperationalError: no such column: T1.x") == (
        "OperationalError: no such column"
    )
    assert ev.error_kind('OperationalError: near ";": syntax error') == 'OperationalError: near ";"'
    assert ev.error_kind("no SQL") == "no SQL" and ev.error_kind(None) is None
    row = {
        "arms": {
            "constrained": _arm(
                sql="-- hm\nSELECT * ;",
                exec_error="OperationalError: no tables specified",
                kinds=[{"sampled": 3, "reserve": 2, "eos": 1}],
            )
        }
    }
    notes = ev.failure_notes([row])
    assert notes[0].startswith("constrained: 1/1 statements hold a comment, 0 have text")
    assert notes[0].endswith("1 end with a reserve-written tail (more than EOS)")
    assert notes[1] == "  commonest execution errors: OperationalError: no tables specified ×1"


def test_sample_is_seeded_and_skips_missing_databases() -> None:
    qs = [ev.Question(i, "gone" if i % 3 == 0 else "here", f"q{i}", "SELECT 1") for i in range(30)]
    a, missing = ev.sample_questions(qs, 5, 0, lambda db: db == "here")
    b, _ = ev.sample_questions(qs, 5, 0, lambda db: db == "here")
    assert a == b and len(a) == 5 and all(q.db_id == "here" for q in a)
    assert missing == {"gone": 10}
    assert ev.sample_questions(qs, 5, 1, lambda db: db == "here")[0] != a


# ----------------------------------------------------------------------------------------------
# End to end (loads the model: `make check-long`)
# ----------------------------------------------------------------------------------------------


@pytest.mark.long
def test_end_to_end_two_questions(tmp_path: Path, monkeypatch, capsys) -> None:
    spider = asset("data", "spider", "train_spider.json").parent
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    monkeypatch.setenv("GRIDRAIL_ASSETS", str(spider.parent.parent))
    out = tmp_path / "rows.jsonl"
    ev.main(["--sample", "2", "--seed", "0", "--max-tokens", "24", "--out", str(out),
             "--verify-reuse", "1"])  # fmt: skip
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["kind"] == "run" and rows[0]["left_out"] == {"baseball_1": 82, "soccer_1": 14}
    questions = [r for r in rows if r["kind"] == "question"]
    assert len(questions) == 2 and rows[1]["reuse_identical"] is True
    for row in questions:
        assert set(row["arms"]) == set(ev.ARMS)
        for arm in ("constrained", "constrained+repair"):
            result = row["arms"][arm]
            # soundness: every constrained output is a sentence with schema table/column names
            assert result["parses"] and result["dialect_parses"] and result["names_ok"]
            assert result["tokens"] <= 24 * (2 if result.get("repaired") else 1)
        assert row["arms"]["unconstrained"]["tokens"] <= 24
    printed = capsys.readouterr().out
    assert "| execution accuracy |" in printed

"""bench/spider_eval.py: the pure parts (SQL extraction, ORDER BY detection, execution and the
result-comparison rule, SQLite's prepare as the referee, name judging, metric aggregation and
the table) without a model; the arms on a tiny database with a scripted model; and one long
end-to-end smoke run on two Spider questions with the default model."""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

import gridrail as gr
from assets import asset
from test_walk_arm import _small_vocab

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
# The independent referee: SQLite's own prepare
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "refusal"),
    [
        ("SELECT name FROM head WHERE age > 56;", None),
        ("SELECT count(*) FROM head; -- done", None),  # SQLite skips a trailing comment
        ("SELECT * ;", "no tables specified"),
        ("SELECT T1.* ;", "no such table"),  # SQLite: "no such table: T1"
        ("SELECT name FROM head WHERE;", "syntax error"),
        ("SELECT FROM head;", "syntax error"),
        ("SELECT nope FROM head;", "no such column"),
        ("SELECT name FROM heads;", "no such table"),
        ("SELECT T9.name FROM head AS T1;", "no such column"),
        ("SELECT 1; SELECT 2;", "You can only execute one statement at a time"),
        ("EXPLAIN SELECT name FROM head;", None),  # not wrapped a second time
        ("-- why\nexplain select 1;", None),
        ("", "no SQL"),
    ],
)
def test_prepare_error_is_sqlites_verdict(tiny_db: Path, sql: str, refusal: str | None) -> None:
    error = ev.prepare_error(tiny_db, sql)
    assert (error if error is None else ev.error_class(error)) == refusal


def test_prepare_compiles_without_running(tiny_db: Path) -> None:
    # a write is valid SQL and prepares; run on the read-only connection it would fail
    delete = "DELETE FROM head WHERE age > 56;"
    assert ev.prepare_error(tiny_db, delete) is None
    assert "readonly" in ev.execute(tiny_db, delete).error.replace(" ", "").lower()
    assert ev.execute(tiny_db, "SELECT count(*) FROM head;").rows == [(3,)]


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ('near ";": syntax error', "syntax error"),
        ('near "": x": syntax error', "syntax error"),  # the quoted token holds '": '
        ("no such column: T1.name", "no such column"),
        ("no tables specified", "no tables specified"),
        (
            "1st ORDER BY term out of range - should be between 1 and 2",
            "N ORDER BY term out of range",
        ),
        (
            "You can only execute one statement at a time.",
            "You can only execute one statement at a time",
        ),
        ("timeout after 10 s", "timeout after N s"),
    ],
)
def test_error_class(message: str, kind: str) -> None:
    assert ev.error_class(message) == kind


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
        "sql": "SELECT 1;",
        "prepares": True,
        "dialect_parses": True,
        "parses": True,
        "names_ok": True,
        "names_ok_qualified": True,
        "clean": True,
        "executes": True,
        "exec_error": None,
        "correct": True,
        "truncated": False,
        "tokens": 10,
        "model_seconds": 1.0,
        "model_calls": 10,
        "guard_seconds": 0.1,
        "seconds": 2.0,
        "stops": ["eos"],
        "kinds": [{"sampled": 9, "eos": 1}],
    }
    return {**base, **overrides}


def test_summarize_and_table() -> None:
    rows = [
        {
            "kind": "question",
            "gold_rows": 0,  # any statement that returns nothing matches it
            "arms": {
                "unconstrained": _arm(guard_seconds=None, truncated=True, tokens=30),
                "constrained": _arm(prepares=False),
                "constrained+repair": _arm(
                    repaired=True, tokens=20, guard_seconds=0.3, stops=["eos", "eos"]
                ),
            },
        },
        {
            "kind": "question",
            "gold_rows": 3,
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
    # where the gold has rows, only the second question counts: the first was right on nothing
    assert (free["correct_rows"], free["scored_rows"]) == (0.0, 1)
    assert con["correct_rows"] is None and con["scored_rows"] == 0
    assert free["tokens"] == 20.0 and free["guard_ms_per_token"] is None
    assert free["model_ms_per_call"] == pytest.approx(100.0)
    assert con["correct"] == 100.0 and con["scored"] == 1 and con["clean"] == 50.0
    assert con["prepares"] == 50.0 and free["prepares"] == 100.0
    assert con["guard_ms_per_token"] == pytest.approx(10.0)  # 0.2 s over 20 tokens
    assert con["guard_over_model"] == pytest.approx(0.1)  # 10 ms/token over 100 ms/call
    assert rep["repairs"] == 1 and rep["tokens"] == 15.0 and rep["generations"] == 1.5
    assert rep["guard_ms_per_token"] == pytest.approx(1e3 * 0.4 / 30)
    assert free["generations"] is None

    table = ev.markdown_table(s)
    lines = table.splitlines()
    assert lines[0] == "| metric | unconstrained | constrained | constrained+repair |"
    assert "| execution accuracy (EX) | 50.0% (1/2) | 100.0% (1/1) | 100.0% (1/1) |" in lines
    assert "| EX where the gold result has rows | 0.0% (0/1) | — | — |" in lines
    assert "| SQLite prepares (EXPLAIN on the database) | 100.0% | 50.0% | 100.0% |" in lines
    assert "| repairs triggered | — | — | 1 |" in lines
    assert "| guard ms per token | — | 10.00 | 13.33 |" in lines
    assert all(line.count("|") == 5 for line in lines)


def test_the_table_leads_with_what_matters() -> None:
    row = {"kind": "question", "arms": {arm: _arm() for arm in ev.ARMS}}
    row["arms"]["constrained+candidates"]["candidates"] = 4
    lines = ev.markdown_table(ev.summarize([row])).splitlines()
    assert lines[0].endswith("| constrained+candidates (K=4) |")
    labels = [line.split(" | ")[0].removeprefix("| ") for line in lines[2:]]
    assert labels[:9] == [
        "questions",
        "executes",
        "execution accuracy (EX)",
        "EX where the gold result has rows",
        "truncated",
        "SQLite prepares (EXPLAIN on the database)",
        "mean tokens per question",
        "wall s per question",
        "repairs triggered",
    ]
    internal = [i for i, label in enumerate(labels) if label.startswith("gridrail")]
    assert len(internal) == 5 and min(internal) > labels.index("wall s per question")
    assert labels[-3:] == [
        "guard ms per token",
        "model ms per call",
        "guard / model (per token vs per call)",
    ]


def test_summarize_reads_files_of_earlier_versions(tmp_path: Path, capsys) -> None:
    # a row as the previous version wrote it: no SQLite prepare, no final index, no K
    old = _arm()
    del old["prepares"]
    row = {
        "kind": "question",
        "index": 7,
        "gold_error": None,
        "gold_in_language": True,
        "arms": {"constrained": old, "constrained+repair": {**old, "repaired": False}},
    }
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps({"kind": "run"}) + "\n" + json.dumps(row) + "\n")
    ev.main(["--summarize", str(path)])
    printed = capsys.readouterr().out
    assert "| SQLite prepares (EXPLAIN on the database) | — | — |" in printed
    assert "| executes | 100.0% | 100.0% |" in printed
    assert "commonest SQLite prepare refusals" not in printed  # unknown, not "none"
    assert "constrained: 0/1 statements hold a comment" in printed


def test_output_shape_helpers() -> None:
    assert ev.has_comment("SELECT 1; -- done") and ev.has_comment("/* x */ SELECT 1;")
    assert not ev.has_comment("SELECT '--' FROM t;")
    assert ev.after_semicolon("SELECT 1;\n-- \n") == "\n-- \n"
    assert ev.after_semicolon("SELECT 1;  ") == "  "  # whitespace counts: EOS must follow ";"
    assert ev.after_semicolon("SELECT ';' FROM t;") == "" and ev.after_semicolon("x") == ""
    assert ev.error_kind("OperationalError: no such column: T1.x") == (
        "OperationalError: no such column"
    )
    assert ev.error_kind('OperationalError: near ";": syntax error') == (
        "OperationalError: syntax error"
    )
    assert ev.error_kind("no SQL") == "no SQL" and ev.error_kind(None) is None
    row = {
        "arms": {
            "constrained": _arm(
                sql="-- hm\nSELECT * ;",
                prepares=False,
                prepare_error="no tables specified",
                executes=False,
                exec_error="OperationalError: no tables specified",
                kinds=[{"sampled": 3, "reserve": 2, "eos": 1}],
            ),
            "constrained+candidates": _arm(
                final=1, repaired=False, stops=["eos", "eos", "eos"], kinds=[{}, {}, {}]
            ),
        }
    }
    notes = ev.failure_notes([row])
    assert notes[0].startswith("constrained: 1/1 statements hold a comment, 0 have text")
    assert notes[0].endswith("1 end with a reserve-written tail (more than EOS)")
    assert notes[1] == "  commonest SQLite prepare refusals: no tables specified ×1"
    assert notes[2] == "  commonest execution errors: OperationalError: no tables specified ×1"
    assert notes[-1] == "  chosen: a sample ×1"


def test_sample_is_seeded_and_skips_missing_databases() -> None:
    qs = [ev.Question(i, "gone" if i % 3 == 0 else "here", f"q{i}", "SELECT 1") for i in range(30)]
    a, missing = ev.sample_questions(qs, 5, 0, lambda db: db == "here")
    b, _ = ev.sample_questions(qs, 5, 0, lambda db: db == "here")
    assert a == b and len(a) == 5 and all(q.db_id == "here" for q in a)
    assert missing == {"gone": 10}
    assert ev.sample_questions(qs, 5, 1, lambda db: db == "here")[0] != a


# ----------------------------------------------------------------------------------------------
# The arms, on a tiny database with a scripted model
# ----------------------------------------------------------------------------------------------


def test_arms_option() -> None:
    assert ev._arm_keys("repair,unconstrained") == ("unconstrained", "constrained+repair")
    assert ev._arm_keys("candidates") == ("constrained+candidates",)
    with pytest.raises(argparse.ArgumentTypeError, match="unknown arm beam"):
        ev._arm_keys("constrained,beam")
    with pytest.raises(SystemExit):
        ev.main(["--arms", "beam", "--summarize", "unused.jsonl"])


class ScriptedModel:
    """Writes `answer` whatever it is asked (teacher forcing: the longest token that continues
    it wins, and the mask, where there is one, still decides), and keeps every prompt."""

    name = "scripted"

    def __init__(self, answer: str):
        self.vocab = _small_vocab()
        self.answer = answer.encode()
        self.prompts: list[list[int]] = []

    def prompt_ids(self, messages: list[dict[str, str]], prefix: str = "") -> list[int]:
        return list((json.dumps(messages) + prefix).encode())

    def next_logits(self, prompt_ids: list[int]):
        self.prompts.append(list(prompt_ids))
        spellings = self.vocab.all_token_bytes

        def logits(generated) -> np.ndarray:
            rest = self.answer[len(b"".join(spellings[t] or b"" for t in generated)) :]
            out = np.full(self.vocab.size, -1e9)
            for token, spelling in enumerate(spellings):
                if spelling and rest.startswith(spelling):
                    out[token] = len(spelling)
            out[self.vocab.eos_token_id] = 0 if rest else 100
            return out

        return logits


@pytest.fixture
def tiny_spider(tiny_db: Path) -> Path:
    """A Spider-like folder whose one database is `tiny_db`."""
    spider = tiny_db.parent / "spider"
    (spider / "database" / "tiny").mkdir(parents=True)
    tiny_db.rename(spider / "database" / "tiny" / "tiny.sqlite")
    return spider


GOLD = "SELECT count(*) FROM head WHERE age > 56"
QUESTION = ev.Question(0, "tiny", "How many heads are older than 56?", GOLD)


def test_every_arm_from_the_same_prompt(tiny_spider: Path) -> None:
    from gridrail.prompt import ANSWER_PREFIX

    # the unconstrained answer closes the fence the prompt opened and goes on in prose
    model = ScriptedModel("SELECT count(*) FROM head WHERE age > 56;\n```\nThat counts them.")
    evaluator = ev.Evaluator(model, tiny_spider, 64, 5.0, ev.ARMS, candidates=2)
    row = evaluator.question(QUESTION, verify_reuse=True)
    assert set(row["arms"]) == set(ev.ARMS) and row["reuse_identical"] is True
    free = row["arms"]["unconstrained"]
    assert free["sql"] == "SELECT count(*) FROM head WHERE age > 56;"
    assert free["text"].startswith("SELECT count(*)") and not free["truncated"]
    for arm, result in row["arms"].items():
        assert result["prepares"] and result["executes"] and result["correct"], arm
        assert result["prepare_error"] is None and not result["has_comment"], arm
        assert result["after_semicolon"] == "", arm  # the strict profile: EOS after the ";"
    candidates = row["arms"]["constrained+candidates"]
    assert candidates["candidates"] == 2 and len(candidates["candidate_sql"]) == 2
    assert len(candidates["stops"]) == 2 and candidates["final"] == 0  # the greedy one
    # one prompt, the fence opened, for all: the unconstrained arm, the repair arm (clean: no
    # retry), the reuse check and 2 candidates
    assert len(model.prompts) == 5 and all(p == model.prompts[0] for p in model.prompts)
    assert bytes(model.prompts[0]).endswith(ANSWER_PREFIX.encode())


def test_full_language_lets_the_model_write_past_the_semicolon(tiny_spider: Path) -> None:
    model = ScriptedModel("SELECT count(*) FROM head WHERE age > 56;\n-- done")
    strict = ev.Evaluator(model, tiny_spider, 64, 5.0, ("constrained",))
    assert strict.question(QUESTION, False)["arms"]["constrained"]["after_semicolon"] == ""
    full = ev.Evaluator(model, tiny_spider, 64, 5.0, ("constrained",), full_language=True)
    result = full.question(QUESTION, False)["arms"]["constrained"]
    assert result["after_semicolon"] == "\n-- done" and result["has_comment"]
    assert result["prepares"]  # SQLite skips the comment


def test_only_the_chosen_arms_run(tiny_spider: Path) -> None:
    model = ScriptedModel("SELECT name FROM head;")
    evaluator = ev.Evaluator(model, tiny_spider, 64, 5.0, ev._arm_keys("constrained"))
    row = evaluator.question(QUESTION, verify_reuse=True)
    assert list(row["arms"]) == ["constrained"] and len(model.prompts) == 1
    result = row["arms"]["constrained"]
    assert result["executes"] and result["prepares"] and result["correct"] is False
    evaluator.arms = ev._arm_keys("candidates,unconstrained")
    row = evaluator.question(QUESTION, verify_reuse=True)
    assert set(row["arms"]) == {"unconstrained", "constrained+candidates"}
    assert len(model.prompts) == 1 + 1 + 4  # the first question, then 1 + the default K = 4
    assert "reuse_identical" not in row  # nothing to compare without both arms


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
        for arm in ("constrained", "constrained+repair", "constrained+candidates"):
            result = row["arms"][arm]
            # soundness: every constrained output is a sentence with schema table/column names
            assert result["parses"] and result["dialect_parses"] and result["names_ok"]
            assert len(result["stops"]) <= ev.DEFAULT_CANDIDATES + 1
            assert result["tokens"] <= 24 * len(result["stops"])
        assert row["arms"]["unconstrained"]["tokens"] <= 24
    printed = capsys.readouterr().out
    assert "| execution accuracy (EX) |" in printed

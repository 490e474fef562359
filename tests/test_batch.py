"""`gridrail ask --questions FILE.jsonl`: every line answered with the model loaded once, one
JSON object per answer; a line that is not a question is an error object with its line
number, never a crash or a gap. Scripted models for the bookkeeping, the real default model for
two short questions."""

from __future__ import annotations

import io
import json
import shutil
import socket
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import gridrail as gr
from gridrail.cli import main
from gridrail.database import Database
from gridrail.models import LanguageModel, load_model
from test_walk_arm import _small_vocab

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
HR_POLICY = EXAMPLES / "hr_policy.toml"

ANSWERS = {  # question -> what the scripted model writes for it (on every attempt)
    "How many orders?": "SELECT count(*) FROM orders;",
    "Who works in sales?": "SELECT name FROM employees WHERE dept = 'sales';",
    "Name the orders.": "SELECT name FROM orders;",  # orders has no name: a checker violation
    "Count them, noted.": "SELECT count(*) FROM orders /* all */;",
}


@dataclass
class ByQuestion(LanguageModel):
    """Writes `ANSWERS[question]` (teacher forcing through the mask, as test_ask's model)."""

    def prompt_ids(self, messages: list[dict[str, str]], prefix: str = "") -> list[int]:
        return [list(ANSWERS).index(messages[1]["content"])]

    def next_logits(self, prompt_ids: list[int]):
        target = list(ANSWERS.values())[prompt_ids[0]].encode()
        spellings = self.vocab.all_token_bytes

        def logits(generated) -> np.ndarray:
            rest = target[len(b"".join(spellings[t] or b"" for t in generated)) :]
            out = np.full(self.vocab.size, -1e9)
            for token, spelling in enumerate(spellings):
                if spelling and rest.startswith(spelling):
                    out[token] = len(spelling)
            out[self.vocab.eos_token_id] = 100 if not rest else 0
            return out

        return logits


@pytest.fixture
def hr_db(tmp_path: Path) -> Path:
    copy = tmp_path / "hr.sqlite"  # roles that write run --execute read-write: not the original
    copy.write_bytes((EXAMPLES / "hr.sqlite").read_bytes())
    return copy


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """The scripted model replaces load_model; the list records each call."""
    calls: list[tuple] = []

    def load(*args):
        calls.append(args)
        return ByQuestion("by-question", None, None, _small_vocab())

    monkeypatch.setattr("gridrail.models.load_model", load)
    return calls


def _lines(path: Path, *objects: object) -> Path:
    path.write_text(
        "".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objects),
        encoding="utf-8",
    )
    return path


def _batch(db: Path, questions: Path, *options: str) -> tuple[int, list[dict]]:
    out = io.StringIO()
    argv = ["ask", "--db", str(db), "--policy", str(HR_POLICY), "--role", "analyst"]
    code = main([*argv, "--questions", str(questions), *options], out)
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


def _rows(db: Path, sql: str) -> list[list]:
    with closing(sqlite3.connect(db)) as connection:
        return [list(row) for row in connection.execute(sql)]


def test_every_line_gets_one_answer_object_in_order(
    hr_db: Path,
    tmp_path: Path,
    loads: list[tuple],
    capsys: pytest.CaptureFixture[str],
) -> None:
    questions = _lines(
        tmp_path / "q.jsonl",
        {"id": "a", "question": "How many orders?"},
        "",  # blank lines are not questions: skipped
        {"question": "Who works in sales?", "role": "manager"},
        {"id": 3, "question": "Who works in sales?"},
    )
    code, answers = _batch(hr_db, questions, "--execute", "--audit", str(tmp_path / "logs"))
    assert code == 0 and len(loads) == 1  # the model is loaded once for the whole file
    assert [(a["line"], a["id"], a["role"]) for a in answers] == [
        (1, "a", "analyst"),
        (3, None, "manager"),
        (4, 3, "analyst"),
    ]
    for answer in answers:
        assert answer["sql"] == ANSWERS[answer["question"]]
        assert answer["executed"] and answer["error"] is None and answer["violations"] == []
        assert answer["rows"] == _rows(hr_db, answer["sql"])
        assert answer["tokens"] > 0 and answer["stop"] == "eos" and answer["seconds"] >= 0
        assert Path(answer["audit"]) == tmp_path / "logs" / f"line-{answer['line']}.jsonl"
        assert main(["audit", "verify", answer["audit"]], io.StringIO()) == 0
        assert main(["audit", "replay", answer["audit"]], io.StringIO()) == 0
    assert answers[0]["columns"] == ["count(*)"]
    err = capsys.readouterr().err
    assert err.count("compiling the language of role") == 2  # analyst, manager: once each
    assert "3 questions, 0 failed" in err


def test_a_bad_line_is_an_error_object_and_the_rest_is_answered(
    hr_db: Path, tmp_path: Path, loads: list[tuple], capsys: pytest.CaptureFixture[str]
) -> None:
    questions = _lines(
        tmp_path / "q.jsonl",
        '{"question": "How many orders?"',  # cut short
        '["How many orders?"]',
        {"id": 7},
        {"question": "How many orders?", "qid": 1},
        {"question": "How many orders?", "role": "intern"},
        {"question": "How many orders?", "db": str(tmp_path / "none.sqlite")},
        {"question": "Name the orders."},  # answered, but it breaks the policy
        {"question": "How many orders?"},
    )
    # names open (without Γ the mask lets the unbound `name` be written, and the checker
    # names it: the path of a line whose answer breaks the policy)
    code, answers = _batch(hr_db, questions, "--execute", "--candidates", "1", "--no-bound-names")
    assert code == 1 and len(loads) == 1
    assert [a["line"] for a in answers] == list(range(1, 9))
    errors = [a["error"] for a in answers]
    assert errors[0].startswith("line 1: not JSON")
    assert errors[1] == "line 2: expected a JSON object, got list"
    assert errors[2] == 'line 3: "question" must be a non-empty string' and answers[2]["id"] == 7
    assert errors[3].startswith("line 4: unknown field(s) 'qid'")
    assert "no role named 'intern'" in errors[4]
    assert "no such database file" in errors[5]
    violated = answers[6]
    assert errors[6] is None and violated["sql"] == ANSWERS["Name the orders."]
    assert violated["violations"] and not violated["executed"] and violated["rows"] is None
    assert violated["attempts"] == 2  # the repair retry ran, and wrote the same again
    assert errors[7] is None and answers[7]["rows"] == _rows(hr_db, "SELECT count(*) FROM orders")
    assert "8 questions, 7 failed" in capsys.readouterr().err


def test_out_file_and_no_execute(hr_db: Path, tmp_path: Path, loads: list[tuple]) -> None:
    questions = _lines(tmp_path / "q.jsonl", {"question": "Who works in sales?"})
    target = tmp_path / "answers.jsonl"
    code, printed = _batch(hr_db, questions, "--out", str(target))
    assert code == 0 and printed == []
    (answer,) = [json.loads(line) for line in target.read_text().splitlines()]
    assert answer["sql"] == ANSWERS["Who works in sales?"] and not answer["executed"]
    assert "rows" not in answer and answer["audit"] is None


def test_lines_may_name_every_database_and_role(hr_db: Path, tmp_path: Path, loads) -> None:
    questions = _lines(
        tmp_path / "q.jsonl",
        {"question": "How many orders?", "db": str(hr_db), "role": "auditor"},
        {"question": "How many orders?"},  # and no default to fall back on
    )
    out = io.StringIO()
    argv = ["ask", "--policy", str(HR_POLICY), "--questions", str(questions)]
    assert main(argv, out) == 1
    first, second = map(json.loads, out.getvalue().splitlines())
    assert first["error"] is None and first["role"] == "auditor"
    assert second["error"] == 'line 2: no "db"/"role" and no --db/--role default'


def test_candidates_are_chosen_by_running_them(hr_db: Path, tmp_path: Path, loads) -> None:
    questions = _lines(
        tmp_path / "q.jsonl",
        {"question": "How many orders?"},
        {"question": "How many orders?", "role": "manager"},  # may write: not run to choose
    )
    code, (read, write) = _batch(hr_db, questions, "--candidates", "2", "--execute")
    assert code == 1
    assert read["attempts"] >= 2 and read["executed"] and read["error"] is None
    assert read["rows"] == _rows(hr_db, read["sql"])
    assert "role 'manager' may write: use --candidates 1" in write["error"]


def test_the_single_form_prints_the_rows_the_candidates_got(
    hr_db: Path, loads, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[str] = []
    execute = Database.execute

    def counted(self, sql: str, **options):
        runs.append(sql)
        return execute(self, sql, **options)

    monkeypatch.setattr(Database, "execute", counted)
    out = io.StringIO()
    argv = ["ask", "--db", str(hr_db), "--policy", str(HR_POLICY), "--role", "analyst"]
    assert main([*argv, "--candidates", "2", "--execute", "How many orders?"], out) == 0
    sql, _, *table = out.getvalue().splitlines()
    answers = [r for r in runs if r.endswith(";")]  # not the prompt's sample rows (LIMIT 3)
    assert len(answers) == 2  # each candidate once, to choose; the chosen one is not run again
    (count,) = _rows(hr_db, sql)[0]
    assert table[-1] == "(1 row)" and table[-2].strip() == str(count)


def test_comments_only_when_allowed(hr_db: Path, tmp_path: Path, loads) -> None:
    questions = _lines(tmp_path / "q.jsonl", {"question": "Count them, noted."})
    (strict,) = _batch(hr_db, questions, "--max-tokens", "24", "--no-repair")[1]
    (allowed,) = _batch(hr_db, questions, "--allow-comments")[1]
    assert allowed["sql"] == ANSWERS["Count them, noted."]
    assert "/*" not in strict["sql"] and strict["error"] is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--questions", "q.jsonl", "a question"], "give one QUESTION or --questions"),
        ([], "give one QUESTION or --questions"),
        (["--policy", str(HR_POLICY), "q"], "a QUESTION needs --db and --role"),
        (["--questions", "absent.jsonl", "--signing-key", "k"], "give --audit DIR too"),
        (["--questions", "absent.jsonl"], "absent.jsonl"),
    ],
)
def test_usage_errors_before_the_model_loads(
    argv: list[str], message: str, loads: list[tuple], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ask", *argv], io.StringIO()) == 2
    assert message in capsys.readouterr().err and loads == []


# -- the real default model ----------------------------------------------------------------------


def test_a_batch_with_the_default_model(hr_db: Path, tmp_path: Path) -> None:
    model = load_model()  # the runtime `gridrail ask` picks by default
    questions = _lines(
        tmp_path / "q.jsonl",
        {"id": 1, "question": "How many orders are there?"},
        {"id": 2, "question": "List the names of the employees.", "role": "auditor"},
    )
    code, answers = _batch(
        hr_db, questions, "--max-tokens", "32", "--no-repair", "--candidates", "1"
    )
    assert code in (0, 1)  # 1: an answer breaks a column rule the mask cannot enforce
    assert [a["id"] for a in answers] == [1, 2]
    for answer in answers:
        guide = gr.compile(
            gr.Grammar.bundled("sqlite"),
            model.vocab,
            schema=gr.Schema.from_sqlite(hr_db),
            policy=gr.Policy.from_file(HR_POLICY),
            role=answer["role"],
        )
        assert answer["error"] is None and guide.oracle.accepts(answer["sql"].encode())
        assert 0 < answer["tokens"] <= 32


def test_a_line_may_not_send_the_invokers_credentials_to_another_postgres(
    hr_db: Path, tmp_path: Path, loads: list[tuple]
) -> None:
    """Session 39's review: a line's "db" that is a DSN connected with the invoker's libpq
    credentials (PGPASSWORD, ~/.pgpass) to a server the questions file chose. A PostgreSQL
    database is now only --db's; any SQLite or DuckDB file may still be a line's, a path with
    "=" in it included."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    beside = tmp_path / "runs" / "a=b.sqlite"
    beside.parent.mkdir()
    shutil.copy(hr_db, beside)
    questions = _lines(
        tmp_path / "q.jsonl",
        {"question": "How many orders?", "db": f"host=127.0.0.1 port={port} user=victim"},
        {"question": "How many orders?", "db": f"postgresql://victim@127.0.0.1:{port}/x"},
        {"question": "How many orders?", "db": str(beside)},
        # names the system cannot look up (too long): that line's error, not the batch's end
        {"question": "How many orders?", "db": "host=" + "h" * 5000},
        {"question": "How many orders?", "db": "f" * 5000},
    )
    argv = ("--execute", "--candidates", "1")
    code, answers = _batch(hr_db, questions, *argv)
    assert len(answers) == 5
    for answer in (*answers[:2], answers[3]):
        assert "PostgreSQL connection string other than --db's" in answer["error"]
    assert "no such database file" in answers[4]["error"]
    with pytest.raises(TimeoutError):  # nothing ever connected
        listener.accept()
    listener.close()
    assert answers[2]["error"] is None
    assert answers[2]["rows"] == _rows(hr_db, "SELECT count(*) FROM orders")
    assert code == 1 and len(loads) == 1

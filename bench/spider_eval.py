"""Constrained vs unconstrained text-to-SQL on Spider with the default local model.

    python bench/spider_eval.py --split train --sample 200 --seed 0 --max-tokens 128 \
        --out build/spider_eval.jsonl
    python bench/spider_eval.py --summarize build/spider_eval.jsonl  # the table of a finished run

Sample. The questions of `train_spider.json` (in file order, index = position in the file) whose
database file `database/<db_id>/<db_id>.sqlite` exists; `random.Random(seed).sample(eligible,
n)`, processed in sampled order. Questions whose database is absent (baseball_1, soccer_1) are
left out before sampling, and how many were left out is printed and recorded. Every arm sees the
same questions, the same model (SmolLM2-135M-Instruct by default, loaded by
`gridrail.models.load_model` with `--runtime`; `--threads` torch threads), the same prompt
(`gridrail.ask.question_prompt` over the database's full schema — no policy, so every table and
column is visible — with the sample rows `ask` shows when given the database; the assistant's
turn is opened with the ```sql fence) and greedy decoding (the candidates arm samples the
candidates after its first).

Arms (`--arms`, default all four). Every constrained arm is `gridrail.ask.ask` given the
database, as `gridrail ask --execute` runs it: clean statements are executed read-only within
`--exec-timeout` seconds. Its guide is compiled as `gridrail ask` compiles one, with the strict
`GenerationProfile()` (no comments, nothing after the final ";", bounded invented names);
`--full-language` compiles the dialect's whole language instead (as earlier results did);
`--from-optional` the strict profile with query blocks without FROM allowed back (as before the
profile required FROM).
  unconstrained: greedy decoding from the same prompt (`model.next_logits` and argmax over the
     model's whole output layer) until an EOS id or `--max-tokens` tokens (EOS counted, as the
     constrained budget counts it); the text is the tokens' spellings. The SQL is taken from
     the answer as a user would (`extract_sql` over the fence the prompt opened and the text):
       a. the contents of the first ```sql fence (to its closing ``` or the end of the text),
          else the text from the first whole word SELECT, WITH, INSERT, UPDATE or DELETE written
          in upper case, else from the first whole word "select" in any case, to the end of the
          text; no such word: the SQL is "" (fails every metric);
       b. cut just after the first ";" outside quotes and comments, whitespace stripped, and a
          ";" appended when it does not end with one (the bundled grammar requires the
          terminating ";", SQLite does not).
  constrained: `ask(..., repair=False)`: the greedy generation under the mask.
  Every arm, unconstrained included, decodes with `ask`'s loop guard (`--loop-guard R`: the
     token that would make a block of 3-32 keys run R times in a row (default 2), or nest
     parentheses past depth 4, is not chosen; 0: off), and from the same prompt: `ask`'s, over the
     `--prompt-tables K` tables the question links to (`gridrail.linking`; 0: every table),
     with `--prompt-rows N` sample rows each (default `ask`'s, 0).
  repair (column "constrained+repair"): `ask(..., repair=True)`: a first generation with
     violations, or one that does not run, gets one constrained retry quoting them back, whose
     statement is final. Its first attempt *is* the constrained arm's generation (`ask` runs
     the same first attempt whether or not it may repair, and greedy decoding is
     deterministic), so when both arms run the constrained one is read off it. `--verify-reuse
     K` decodes it separately for the first K questions and records whether the token
     sequences are identical (`reuse_identical` in the rows; printed at the end).
  candidates (column "constrained+candidates"): `ask(..., candidates=K)` (`--candidates`,
     default 4): the greedy generation and K-1 seeded samples under the mask; `ask` executes
     the clean ones and chooses the best that runs (retrying as the repair arm does when none
     is clean or none runs). The chosen statement is judged.

Metrics (per arm, on its final statement), in the table's order.
  - executes: runs without error on the real database, opened read-only (`mode=ro` and
    `PRAGMA query_only`), stopped after `--exec-timeout` seconds by a progress handler or past
    `MAX_ROWS` rows. A write statement fails (read-only), so it does not execute.
  - execution accuracy (EX): the result equals the gold query's result on the same database:
    as a list of rows when the gold has an ORDER BY at the top level (outside parentheses),
    else as a multiset of rows. Rows are compared as tuples in column order (no column
    permutation), values by Python equality (1 == 1.0; floats exactly). Denominator: questions
    whose gold query executes (gold failures are counted and listed, not scored).
  - EX where the gold result has rows: the same, over the questions whose gold result is not
    empty (any statement that returns nothing matches an empty one, garbage included).
  - truncated: unconstrained, `--max-tokens` tokens without EOS; constrained, the final
    generation's stop is "reserve" (the budget trigger wrote the ending).
  - SQLite prepares: the independent referee of validity. SQLite itself compiles the statement
    on the real database (`EXPLAIN <sql>` on a read-only connection: the program is compiled
    and listed, never run), so syntax, names (tables, columns, qualifiers, functions) and
    SQLite's refusals such as "no tables specified" are judged by the engine, not by gridrail.
    A write statement prepares. The notes list the refusals by message class.
  - tokens per question: tokens written, EOS included, over every generation of the arm.
  - wall seconds per question.
  - repairs triggered: questions whose arm made the retry; generations per question.
  Then gridrail's own judgements, which a sound engine makes 100% for the constrained arms by
  construction (checks of the engine, not of the answers):
  - gridrail grammar, sqlite dialect: the SQL is a sentence of the bundled `sqlite` dialect
    grammar (identifiers unrestricted).
  - gridrail grammar, guide's language: `guide.check(sql)` has no "outside_language"
    violation. The guide's language is the dialect with TABLE_NAME / COLUMN_NAME restricted to
    the schema's names, so this also requires lexicon names.
  - gridrail names, table/column: judged on the dialect's parse tree with SQLite's name rules
    (`IdentifierRules.denotes`, as tests/test_policy_walk.py does): every TABLE_NAME token
    denotes a table of the schema or a CTE the statement declares, every COLUMN_NAME token a
    column of some table of the schema or a column alias the statement declares (SQLite lets
    ORDER BY name a select-list alias). Output the dialect does not parse fails.
  - gridrail names incl. qualifiers: the above, and every qualifier (`T1.` in `T1.name`)
    denotes a schema table or a table alias / CTE the statement declares.
  - gridrail checker-clean: `guide.check(sql) == []` (what decides whether `ask` repairs).
  - mask overhead: guard ms per token = sum(guard_seconds) / sum(tokens) (masks, jump-forward,
    accepting, audit: everything but the model), model ms per call = sum(model_seconds) /
    sum(model_calls) (the first call of a generation includes the prompt's prefill), and their
    ratio. The unconstrained arm's model ms per call is measured the same way, for reference.
Each arm's row also records `has_comment` and `after_semicolon` (the text after the
statement's first ";" outside quotes and comments; "" when nothing follows), and the prepare
error.

One JSON row per question goes to `--out` as it finishes (`--resume` skips the questions a file
already has). Guides are compiled once per database and the model is loaded once.
`--summarize` reads the files of earlier versions too: a metric their rows lack shows "—".
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import random
import re
import sqlite3
import sys
import time
import traceback
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host import describe

ROOT = Path(__file__).resolve().parent.parent
# `--arms` option → the arm's key in the rows and its column in the table (in table order)
ARM_KEYS = {
    "unconstrained": "unconstrained",
    "constrained": "constrained",
    "repair": "constrained+repair",
    "candidates": "constrained+candidates",
}
ARMS = tuple(ARM_KEYS.values())
MAX_ROWS = 1_000_000
_SAMPLE_ROWS = 3  # rows of each result kept in the JSONL for inspection
DEFAULT_CANDIDATES = 4  # K of the candidates arm


# ----------------------------------------------------------------------------------------------
# Assets and the sample
# ----------------------------------------------------------------------------------------------


def assets_root() -> Path:
    """`GRIDRAIL_ASSETS` (a folder laid out like the project's shared/ folder), else the
    `shared/` folder beside the repository (the convention of tests/assets.py)."""
    env = os.environ.get("GRIDRAIL_ASSETS")
    return Path(env) if env else ROOT.parent / "shared"


@dataclass(frozen=True)
class Question:
    index: int  # position in the split's JSON file
    db_id: str
    question: str
    gold: str


def load_questions(spider: Path, split: str) -> list[Question]:
    files = {"train": "train_spider.json"}
    if split not in files:
        raise SystemExit(f"unknown split {split!r}: only {', '.join(files)} is available here")
    with open(spider / files[split], encoding="utf-8") as f:
        data = json.load(f)
    return [Question(i, d["db_id"], d["question"], d["query"]) for i, d in enumerate(data)]


def database_path(spider: Path, db_id: str) -> Path:
    return spider / "database" / db_id / f"{db_id}.sqlite"


def sample_questions(
    questions: Sequence[Question], n: int, seed: int, has_database
) -> tuple[list[Question], Counter[str]]:
    """`n` questions drawn with `random.Random(seed)` from those whose database exists, and the
    count of left-out questions per missing database."""
    eligible = [q for q in questions if has_database(q.db_id)]
    missing = Counter(q.db_id for q in questions if not has_database(q.db_id))
    if n > len(eligible):
        raise SystemExit(f"--sample {n} exceeds the {len(eligible)} eligible questions")
    return random.Random(seed).sample(eligible, n), missing


# ----------------------------------------------------------------------------------------------
# SQL text: extraction, ORDER BY
# ----------------------------------------------------------------------------------------------

_FENCE = re.compile(r"```[ \t]*sql[^\n]*\n?(.*?)(?:```|\Z)", re.IGNORECASE | re.DOTALL)
_UPPER_START = re.compile(r"\b(?:SELECT|WITH|INSERT|UPDATE|DELETE)\b")
_ANY_SELECT = re.compile(r"\bselect\b", re.IGNORECASE)


def extract_sql(text: str) -> str:
    """The SQL statement a user would take from a model's free-text answer (module docstring,
    arm 1): "" when there is none."""
    fence = _FENCE.search(text)
    if fence:
        body = fence.group(1)
    else:
        start = _UPPER_START.search(text) or _ANY_SELECT.search(text)
        if start is None:
            return ""
        body = text[start.start() :]
    sql = body[: _first_semicolon_end(body)].strip()
    if not sql:
        return ""
    return sql if sql.endswith(";") else sql + ";"


def _lexical_pieces(sql: str) -> Iterable[tuple[int, str]]:
    """(offset, character) of every character outside quotes ('..', "..", `..`, [..]) and
    comments (-- to end of line, /* .. */); each skipped span yields one space at its start."""
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"`[":
            close = "]" if c == "[" else c
            j = i + 1
            while j < n:
                if sql[j] == close:
                    if close != "]" and j + 1 < n and sql[j + 1] == close:
                        j += 2  # a doubled quote escapes the quote
                        continue
                    break
                j += 1
            yield i, " "
            i = j + 1
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            yield i, " "
            i = n if j < 0 else j
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            yield i, " "
            i = n if j < 0 else j + 2
        else:
            yield i, c
            i += 1


def _first_semicolon_end(sql: str) -> int:
    """Offset just after the first ";" outside quotes and comments (len(sql) if none)."""
    return next((i + 1 for i, c in _lexical_pieces(sql) if c == ";"), len(sql))


def has_top_level_order_by(sql: str) -> bool:
    """Does the statement end with an ORDER BY at parenthesis depth 0 (so that its result rows
    are ordered)? Quotes and comments are skipped."""
    depth, chars = 0, []
    for _, c in _lexical_pieces(sql):
        if c == "(":
            depth += 1
            chars.append(" ")
        elif c == ")":
            depth -= 1
            chars.append(" ")
        else:
            chars.append(c if depth == 0 else " ")
    return re.search(r"\border\s+by\b", "".join(chars), re.IGNORECASE) is not None


# ----------------------------------------------------------------------------------------------
# Execution and result comparison
# ----------------------------------------------------------------------------------------------


@dataclass
class Execution:
    rows: list[tuple] | None  # None: it failed
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.rows is not None


@contextmanager
def _read_only(db_path: Path) -> Iterator[sqlite3.Connection]:
    """A connection to the database file that cannot write it (`mode=ro`, `query_only`)."""
    uri = f"{db_path.resolve().as_uri()}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True, check_same_thread=False)) as db:
        db.execute("PRAGMA query_only = 1")
        yield db


def execute(db_path: Path, sql: str, timeout_s: float = 10.0, max_rows: int = MAX_ROWS):
    """Run `sql` on the database read-only, stopping it after `timeout_s` seconds (progress
    handler) or past `max_rows` rows."""
    if not sql.strip():
        return Execution(None, "no SQL")
    started = time.perf_counter()
    deadline = started + timeout_s
    try:
        with _read_only(db_path) as db:
            db.text_factory = lambda b: b.decode("utf-8", "replace")
            db.set_progress_handler(lambda: time.perf_counter() > deadline, 10_000)
            cursor = db.execute(sql)
            rows: list[tuple] = []
            while batch := cursor.fetchmany(10_000):
                rows.extend(batch)
                if len(rows) > max_rows:
                    return Execution(None, f"more than {max_rows} rows", _since(started))
            return Execution(rows, None, _since(started))
    except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError) as exc:
        message = str(exc) or type(exc).__name__
        if message == "interrupted" and time.perf_counter() > deadline:
            message = f"timeout after {timeout_s:g} s"
        return Execution(None, f"{type(exc).__name__}: {message}", _since(started))


_LEADING_EXPLAIN = re.compile(r"(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?\*/)*explain\b", re.I | re.S)


def prepare_error(db_path: Path, sql: str) -> str | None:
    """SQLite's own verdict on `sql` as a statement of this database, without running it: None
    when SQLite compiles `EXPLAIN <sql>` (the statement's program, listed instead of run) on a
    read-only connection, else SQLite's message ("no tables specified", 'near ";": syntax
    error', "no such column: T1.x"; Python's sqlite3 refuses a second statement with "You can
    only execute one statement at a time.")."""
    if not sql.strip():
        return "no SQL"
    # an EXPLAIN statement is compiled, not run, as it is (SQLite refuses EXPLAIN EXPLAIN)
    statement = sql if _LEADING_EXPLAIN.match(sql) else "EXPLAIN " + sql
    try:
        with _read_only(db_path) as db:
            db.execute(statement)
    except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError) as exc:
        return str(exc) or type(exc).__name__
    return None


_NEAR = re.compile(r'^near ".*": ', re.S)  # SQLite's syntax errors quote the token first
_COUNT = re.compile(r"\b\d+(?:st|nd|rd|th)?\b")


def error_class(message: str) -> str:
    """A SQLite message without what it quotes, for counting refusals by kind: 'near ";":
    syntax error' → "syntax error", "no such column: T1.x" → "no such column", "1st ORDER BY
    term out of range - should be between 1 and 2" → "N ORDER BY term out of range"."""
    head = _NEAR.sub("", message).split(": ")[0].split(" - ")[0]
    return _COUNT.sub("N", head).strip().rstrip(".")


def _since(started: float) -> float:
    return time.perf_counter() - started


def results_match(gold: Sequence[tuple], predicted: Sequence[tuple], ordered: bool) -> bool:
    """Execution-accuracy rule: equal row lists when the gold is ordered, else equal multisets
    of rows (rows as tuples in column order, values by Python equality)."""
    if ordered:
        return list(map(tuple, gold)) == list(map(tuple, predicted))
    return Counter(map(tuple, gold)) == Counter(map(tuple, predicted))


# ----------------------------------------------------------------------------------------------
# Names on the dialect's parse tree
# ----------------------------------------------------------------------------------------------


def name_problems(dialect, schema, sql: str) -> list[str] | None:
    """The table, column and qualifier names of `sql` that denote nothing (judged on the parse
    tree of the `dialect` CompiledGrammar, with the schema's identifier rules), as
    "TERMINAL text"; None when `sql` is not a sentence of the dialect."""
    from gridrail.errors import ParseError
    from gridrail.parse.tree import parse_tree

    try:
        tree = parse_tree(dialect, sql)
    except ParseError:
        return None
    rules = schema.rules
    tokens = list(tree.tokens())
    declared = {
        kind: [t.text for t in tokens if t.terminal == kind]
        for kind in ("CTE_NAME", "TABLE_ALIAS", "COLUMN_ALIAS")
    }
    tables = [t.name for t in schema.tables]
    columns = [c.name for t in schema.tables for c in t.columns]

    def known(written: str, names: Iterable[str], *declared_kinds: str) -> bool:
        if any(rules.denotes(written, name) for name in names):
            return True
        written_key = rules.key(*rules.unquote(written))
        return any(
            rules.key(*rules.unquote(d)) == written_key
            for kind in declared_kinds
            for d in declared[kind]
        )

    problems = []
    for token in tokens:
        if token.terminal == "TABLE_NAME":
            ok = known(token.text, tables, "CTE_NAME")
        elif token.terminal == "COLUMN_NAME":
            ok = known(token.text, columns, "COLUMN_ALIAS")
        elif token.terminal == "QUALIFIER":
            ok = known(token.text[:-1], tables, "TABLE_ALIAS", "CTE_NAME")
        else:
            continue
        if not ok:
            problems.append(f"{token.terminal} {token.text}")
    return problems


# ----------------------------------------------------------------------------------------------
# Scoring one statement
# ----------------------------------------------------------------------------------------------


@dataclass
class Judge:
    """What scoring needs for one database: its guide, the dialect grammar, its schema and
    file, and the gold query's execution."""

    guide: object
    dialect: object
    schema: object
    db_path: Path
    gold: Execution
    ordered: bool
    exec_timeout: float = 10.0

    def score(self, sql: str) -> dict:
        violations = self.guide.check(sql) if sql else []
        problems = name_problems(self.dialect, self.schema, sql) if sql else None
        run = execute(self.db_path, sql, self.exec_timeout)
        refusal = prepare_error(self.db_path, sql)
        kinds = [v.kind for v in violations]
        return {
            "sql": sql,
            "prepares": refusal is None,
            "prepare_error": refusal,
            "has_comment": has_comment(sql),
            "after_semicolon": after_semicolon(sql),
            "dialect_parses": problems is not None,
            "parses": bool(sql) and "outside_language" not in kinds,
            "names_ok": problems is not None
            and not any(p.startswith(("TABLE_NAME", "COLUMN_NAME")) for p in problems),
            "names_ok_qualified": problems is not None and not problems,
            "bad_names": problems,
            "violations": kinds,
            "clean": bool(sql) and not violations,
            "executes": run.ok,
            "exec_error": run.error,
            "rows": None if run.rows is None else len(run.rows),
            "rows_head": None if run.rows is None else [list(r) for r in run.rows[:_SAMPLE_ROWS]],
            "correct": None
            if not self.gold.ok
            else run.ok and results_match(self.gold.rows, run.rows, self.ordered),
        }


# ----------------------------------------------------------------------------------------------
# Aggregation
# ----------------------------------------------------------------------------------------------

# (label, row key) of the percentages, each in its place in the table
_LEAD_METRICS = (("executes", "executes"),)
_TRUNCATED = (("truncated", "truncated"),)
_REFEREE_METRICS = (("SQLite prepares (EXPLAIN on the database)", "prepares"),)
_GRIDRAIL_METRICS = (
    ("gridrail grammar: sqlite dialect parses", "dialect_parses"),
    ("gridrail grammar: guide's language", "parses"),
    ("gridrail names: table/column tokens", "names_ok"),
    ("gridrail names incl. qualifiers", "names_ok_qualified"),
    ("gridrail checker-clean (guide.check == [])", "clean"),
)
_PERCENT_METRICS = _LEAD_METRICS + _TRUNCATED + _REFEREE_METRICS + _GRIDRAIL_METRICS
_REPAIRING = ("constrained+repair", "constrained+candidates")  # the arms that may retry


def summarize(rows: Sequence[dict]) -> dict[str, dict[str, float | int | None]]:
    """Per arm: the metrics of the module docstring from question rows; None for a metric some
    row lacks (a file written before the metric existed)."""
    out: dict[str, dict[str, float | int | None]] = {}
    for arm in ARMS:
        results = [r["arms"][arm] for r in rows if arm in r.get("arms", {})]
        n = len(results)
        if not n:
            continue
        m: dict[str, float | int | None] = {"questions": n}
        for _, key in _PERCENT_METRICS:
            recorded = all(key in a for a in results)
            m[key] = 100.0 * sum(bool(a[key]) for a in results) / n if recorded else None
        scored = [a["correct"] for a in results if a["correct"] is not None]
        m["scored"] = len(scored)
        m["correct"] = 100.0 * sum(scored) / len(scored) if scored else None
        # an empty gold result is matched by any statement that returns nothing, garbage too
        with_rows = [
            a["correct"]
            for r in rows
            if r.get("gold_rows") and (a := r.get("arms", {}).get(arm)) and a["correct"] is not None
        ]
        m["scored_rows"] = len(with_rows)
        m["correct_rows"] = 100.0 * sum(with_rows) / len(with_rows) if with_rows else None
        m["tokens"] = sum(a["tokens"] for a in results) / n
        m["repairs"] = sum(bool(a.get("repaired")) for a in results)
        stops = [a.get("stops") for a in results]
        m["generations"] = (
            sum(map(len, stops)) / n if arm != "unconstrained" and all(stops) else None
        )
        ks = {a.get("candidates") for a in results}
        m["candidates"] = ks.pop() if len(ks) == 1 else None
        tokens = sum(a["tokens"] for a in results)
        calls = sum(a["model_calls"] for a in results)
        model = sum(a["model_seconds"] for a in results)
        guard = [a.get("guard_seconds") for a in results]
        m["model_ms_per_call"] = 1e3 * model / calls if calls else None
        if all(g is not None for g in guard) and tokens:
            m["guard_ms_per_token"] = 1e3 * sum(guard) / tokens
            per_call = model / calls if calls else None
            m["guard_over_model"] = (sum(guard) / tokens) / per_call if per_call else None
        else:
            m["guard_ms_per_token"] = m["guard_over_model"] = None
        m["seconds"] = sum(a["seconds"] for a in results) / n
        out[arm] = m
    return out


def markdown_table(summary: dict[str, dict]) -> str:
    """The arms side by side: what matters first (executes, EX, truncated), then the
    independent referee (SQLite's prepare), cost, and last gridrail's own judgements."""
    arms = [a for a in ARMS if a in summary]

    def header(arm: str) -> str:
        k = summary[arm].get("candidates")
        return f"{arm} (K={k})" if arm == "constrained+candidates" and k is not None else arm

    def cells(fmt) -> str:
        return " | ".join(fmt(summary[a]) for a in arms)

    def pct(key):
        return lambda m: "—" if m.get(key) is None else f"{m[key]:.1f}%"

    def num(key, spec, na="—"):
        return lambda m: na if m.get(key) is None else format(m[key], spec)

    def percentages(metrics) -> list[str]:
        return [f"| {label} | {cells(pct(key))} |" for label, key in metrics]

    repairs = " | ".join(str(summary[a]["repairs"]) if a in _REPAIRING else "—" for a in arms)
    return "\n".join(
        [
            f"| metric | {' | '.join(map(header, arms))} |",
            "|---|" + "---:|" * len(arms),
            f"| questions | {cells(num('questions', 'd'))} |",
            *percentages(_LEAD_METRICS),
            f"| execution accuracy (EX) | {cells(_accuracy)} |",
            f"| EX where the gold result has rows | {cells(_accuracy_with_rows)} |",
            *percentages(_TRUNCATED),
            *percentages(_REFEREE_METRICS),
            f"| mean tokens per question | {cells(num('tokens', '.1f'))} |",
            f"| wall s per question | {cells(num('seconds', '.1f'))} |",
            f"| repairs triggered | {repairs} |",
            f"| generations per question | {cells(num('generations', '.2f'))} |",
            *percentages(_GRIDRAIL_METRICS),
            f"| guard ms per token | {cells(num('guard_ms_per_token', '.2f'))} |",
            f"| model ms per call | {cells(num('model_ms_per_call', '.1f'))} |",
            f"| guard / model (per token vs per call) | {cells(num('guard_over_model', '.3f'))} |",
        ]
    )


def _accuracy(m: dict, correct: str = "correct", scored: str = "scored") -> str:
    if m.get(correct) is None:
        return "—"
    hits = round(m[correct] * m[scored] / 100)
    return f"{m[correct]:.1f}% ({hits}/{m[scored]})"


def _accuracy_with_rows(m: dict) -> str:
    return _accuracy(m, "correct_rows", "scored_rows")


def read_rows(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r for r in rows if r.get("kind") == "question"]


# ----------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------


def unconstrained(model, prompt: Sequence[int], max_tokens: int, loop_guard=None) -> dict:
    """Plain greedy decoding from `prompt`: argmax over every id of the model's vocabulary
    until an EOS id or `max_tokens` tokens — with `loop_guard`, never the token that repeats a
    block (as the constrained arms). Any runtime: `model.next_logits`, and the text spelled
    with the model's vocabulary (special tokens spell nothing)."""
    import numpy as np

    from gridrail.decode.logits import as_vector

    vocab = model.vocab
    eos = set(vocab.eos_token_ids)
    next_logits = model.next_logits(list(prompt))
    everything = np.ones(vocab.size, dtype=bool)
    followed = loop_guard.follow(vocab) if loop_guard is not None else None
    tokens: list[int] = []
    model_seconds = 0.0
    while len(tokens) < max_tokens:
        started = time.perf_counter()
        logits = as_vector(next_logits(tokens))[: vocab.size]
        model_seconds += time.perf_counter() - started
        if followed is not None:
            logits = np.where(followed.narrow(everything), logits, -np.inf)
        token = int(np.argmax(logits))
        tokens.append(token)
        if followed is not None:
            followed.feed([token])
        if token in eos:
            break
    stopped = bool(tokens) and tokens[-1] in eos
    spelled = b"".join(vocab.token_bytes(t) or b"" for t in tokens)
    return {
        "text": spelled.decode("utf-8", "replace"),
        "tokens": len(tokens),
        "truncated": not stopped,
        "model_seconds": model_seconds,
        "model_calls": len(tokens),
        "guard_seconds": None,
    }


def _generation_fields(attempts: Sequence, final: int) -> dict:
    """Tokens, stops and time over every generation of an arm; `truncated` and `final` (its
    index in `stops` / `kinds`) are the chosen generation's."""
    gens = [a.generation for a in attempts]
    return {
        "tokens": sum(len(g.tokens) for g in gens),
        "truncated": gens[final].stop == "reserve",
        "final": final,
        "stops": [g.stop for g in gens],
        "kinds": [g.kinds for g in gens],
        "guard_seconds": sum(g.guard_seconds for g in gens),
        "model_seconds": sum(g.model_seconds for g in gens),
        "model_calls": sum(g.model_calls for g in gens),
    }


def _answer_fields(answer) -> dict:
    """What an arm that may retry or choose records: its generations (`_generation_fields`),
    whether it retried, and each candidate's statement and why it was or was not chosen."""
    chosen = next(i for i, c in enumerate(answer.candidates) if c.chosen)
    first = answer.candidates[0]
    return {
        **_generation_fields(answer.attempts, chosen),
        "repaired": answer.repaired,
        "first_violations": [v.kind for v in first.attempt.violations],
        "first_error": first.error,
        "candidate_sql": [c.attempt.sql for c in answer.candidates],
        "candidate_reasons": [c.reason for c in answer.candidates],
    }


def _candidate_features(answer, guide, question: str, judge) -> list[dict]:
    """What `ask`'s chooser ranks each candidate by (`gridrail.ask.candidate_features`) and
    whether it is correct: so that bench/chooser_eval.py can score other orderings of the
    same generations."""
    from gridrail.ask import candidate_features
    from gridrail.linking import TableIndex

    index = TableIndex(guide.view)
    features = candidate_features(answer.candidates, lambda sql: index.coverage(question, sql))
    return [
        {**f, "chosen": c.chosen, "correct": bool(judge.score(c.attempt.sql)["correct"])}
        for f, c in zip(features, answer.candidates, strict=True)
    ]


def _timed(call, **kwargs) -> tuple[object, float]:
    started = time.perf_counter()
    result = call(**kwargs)
    return result, time.perf_counter() - started


class Evaluator:
    def __init__(
        self,
        model,
        spider: Path,
        max_tokens: int,
        exec_timeout: float,
        arms: Sequence[str] = ARMS,
        candidates: int = DEFAULT_CANDIDATES,
        full_language: bool = False,
        loop_guard=None,
        from_optional: bool = False,
        prompt_tables: int | None = None,
        prompt_rows: int = 0,
        gamma: bool = False,
        declared_names: bool = False,
        prompt_examples: int = 0,
        candidate_temperature: float | None = None,  # None: `ask`'s default
        candidate_top_p: float | None = None,
        alias_style: str = "tag",
    ):
        import gridrail as gr
        from gridrail.registry import shared_compiled_grammar

        self.gr = gr
        self.model = model
        self.spider = spider
        self.max_tokens = max_tokens
        self.exec_timeout = exec_timeout
        self.arms = tuple(arms)
        self.candidates = candidates
        # of the candidates after the first (None: `ask`'s defaults)
        self.sampling = {
            k: v
            for k, v in (
                ("candidate_temperature", candidate_temperature),
                ("candidate_top_p", candidate_top_p),
            )
            if v is not None
        }
        self.loop_guard = loop_guard  # every arm's, the unconstrained one's too
        self.prompt_tables = prompt_tables  # None: every table in the prompt
        self.prompt_rows = prompt_rows  # sample rows per table in the prompt
        self.prompt_examples = prompt_examples  # worked examples over the schema in the prompt
        self.gamma = gamma  # names declared in the statement tracked at the mask (issue 15)
        self.declared_names = declared_names  # ... and spelled by the name lexicons
        # what `gridrail ask` compiles: the strict generation profile, unless told otherwise
        self.profile = (
            None
            if full_language
            else gr.GenerationProfile(needs_from=not from_optional, alias_style=alias_style)
        )
        self.grammar = gr.Grammar.bundled("sqlite")
        self.dialect = shared_compiled_grammar(self.grammar)
        self._databases: dict[str, tuple] = {}
        self.compile_seconds = 0.0

    def database(self, db_id: str):
        """(guide, schema, path) of a database, compiled on first use."""
        if db_id not in self._databases:
            started = time.perf_counter()
            path = database_path(self.spider, db_id)
            schema = self.gr.Schema.from_sqlite(path)
            guide = self.gr.compile(
                self.grammar,
                self.model.vocab,
                schema=schema,
                profile=self.profile,
                gamma=self.gamma,
                declared_names=self.declared_names,
            )
            self._databases[db_id] = (guide, schema, path)
            self.compile_seconds += time.perf_counter() - started
        return self._databases[db_id]

    def question(self, q: Question, verify_reuse: bool) -> dict:
        from functools import partial

        from gridrail.ask import ask, question_prompt, sample_rows
        from gridrail.database import Database
        from gridrail.prompt import ANSWER_PREFIX

        guide, schema, path = self.database(q.db_id)
        database = Database("sqlite", str(path))
        gold = execute(path, q.gold, self.exec_timeout)
        judge = Judge(
            guide, self.dialect, schema, path, gold, has_top_level_order_by(q.gold),
            self.exec_timeout,
        )  # fmt: skip
        gold_check = guide.check(q.gold.rstrip().rstrip(";") + ";")
        row = {
            "kind": "question",
            "index": q.index,
            "db_id": q.db_id,
            "question": q.question,
            "gold": q.gold,
            "gold_ordered": judge.ordered,
            "gold_error": gold.error,
            "gold_rows": None if gold.rows is None else len(gold.rows),
            "gold_in_language": not any(v.kind == "outside_language" for v in gold_check),
            "gold_prepares": prepare_error(path, q.gold) is None,
            "arms": {},
        }
        arms = row["arms"]
        # the prompt `ask` builds when given the database (its sample rows included)
        samples = sample_rows(database, guide.view, self.prompt_rows)
        prompt = question_prompt(
            self.model, guide, q.question, samples, self.prompt_tables, self.prompt_examples
        )
        row["prompt_tokens"] = len(prompt)

        if "unconstrained" in self.arms:
            free, seconds = _timed(
                partial(unconstrained, self.model, prompt, self.max_tokens, self.loop_guard)
            )
            sql = extract_sql(ANSWER_PREFIX + free["text"])  # the answer begins inside the fence
            arms["unconstrained"] = {**free, "seconds": seconds, **judge.score(sql)}

        constrained = partial(
            ask, q.question, guide, self.model, max_tokens=self.max_tokens, database=database,
            timeout_s=self.exec_timeout, loop_guard=self.loop_guard,
            prompt_tables=self.prompt_tables, prompt_rows=self.prompt_rows,
            prompt_examples=self.prompt_examples,
        )  # fmt: skip
        if "constrained+repair" in self.arms:
            answer, seconds = _timed(constrained, repair=True)
            first = answer.candidates[0].attempt
            first_score = judge.score(first.sql)
            arms["constrained+repair"] = {
                **_answer_fields(answer),
                "seconds": seconds,
                **(judge.score(answer.sql) if answer.repaired else first_score),
            }
            if "constrained" in self.arms:
                arms["constrained"] = {
                    **_generation_fields([first], 0),
                    "seconds": _first_seconds(first) if answer.repaired else seconds,
                    **first_score,
                }
                if verify_reuse:
                    alone = constrained(repair=False)
                    row["reuse_identical"] = (
                        alone.attempts[0].generation.tokens == first.generation.tokens
                    )
        elif "constrained" in self.arms:
            answer, seconds = _timed(constrained, repair=False)
            arms["constrained"] = {
                **_generation_fields(answer.attempts, 0),
                "seconds": seconds,
                **judge.score(answer.sql),
            }
        if "constrained+candidates" in self.arms:
            answer, seconds = _timed(constrained, candidates=self.candidates, **self.sampling)
            arms["constrained+candidates"] = {
                **_answer_fields(answer),
                "candidates": self.candidates,
                "candidate_features": _candidate_features(answer, guide, q.question, judge),
                "seconds": seconds,
                **judge.score(answer.sql),
            }
        return row


def _first_seconds(attempt) -> float:
    """A repaired question's first attempt alone: its guard and model time (the rest of `ask`,
    prompt templating, the check and the execution, is small)."""
    return attempt.generation.guard_seconds + attempt.generation.model_seconds


def _arm_keys(option: str) -> tuple[str, ...]:
    """`--arms unconstrained,repair` → the arms' keys in table order (argparse type)."""
    names = [n.strip() for n in option.split(",") if n.strip()]
    unknown = [n for n in names if n not in ARM_KEYS]
    if unknown or not names:
        given = ", ".join(unknown) or "(none given)"
        raise argparse.ArgumentTypeError(f"unknown arm {given}: choose among {', '.join(ARM_KEYS)}")
    return tuple(key for option_name, key in ARM_KEYS.items() if option_name in names)


def _positive(option: str) -> int:
    k = int(option)
    if k < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {k}")
    return k


def main(argv: Sequence[str] | None = None) -> None:
    from gridrail.ask import (
        DEFAULT_CANDIDATE_TEMPERATURE,
        DEFAULT_CANDIDATE_TOP_P,
        DEFAULT_LOOP_GUARD,
        DEFAULT_PROMPT_TABLES,
        PROMPT_EXAMPLES,
        SAMPLE_ROWS,
    )
    from gridrail.models import RUNTIMES, load_model
    from gridrail.policy.profile import ALIAS_STYLES, GenerationProfile

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--split", default="train")
    parser.add_argument("--sample", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "spider_eval.jsonl")
    parser.add_argument("--resume", action="store_true", help="skip questions --out already has")
    parser.add_argument(
        "--arms",
        type=_arm_keys,
        default=ARMS,
        help=f"comma-separated, among {','.join(ARM_KEYS)} (default: all)",
    )
    parser.add_argument("--candidates", type=_positive, default=DEFAULT_CANDIDATES, metavar="K",
                        help="K of the candidates arm")  # fmt: skip
    parser.add_argument(
        "--temperature",
        type=float,
        default=DEFAULT_CANDIDATE_TEMPERATURE,
        help="of the candidates arm's samples (its first candidate is greedy; default: `ask`'s "
        f"{DEFAULT_CANDIDATE_TEMPERATURE})",
    )
    parser.add_argument(
        "--top-p",
        type=float,
        default=DEFAULT_CANDIDATE_TOP_P,
        help="the candidates arm's samples are drawn from the nucleus of this mass (default: "
        f"`ask`'s {DEFAULT_CANDIDATE_TOP_P})",
    )
    parser.add_argument(
        "--full-language",
        action="store_true",
        help="guides without a generation profile: the dialect's whole language (comments, "
        "text after the ';'), not what `gridrail ask` lets the model write",
    )
    parser.add_argument(
        "--gamma",
        action="store_true",
        help="names declared in the statement tracked at the mask (Γ, issue 15): slots after "
        "FROM allow only names that bind, the select list's names are obligations of its FROM",
    )
    parser.add_argument(
        "--declared-names",
        action="store_true",
        help="with --gamma, the table and column names also spell the names the statement "
        "declares (CTEs, column aliases) where they bind (`compile(..., declared_names=True)`)",
    )
    parser.add_argument(
        "--alias-style",
        choices=ALIAS_STYLES,
        default=GenerationProfile().alias_style,
        help="the strict profile's table aliases: tags (a letter then digits) or words "
        f"(default: `ask`'s {GenerationProfile().alias_style})",
    )
    parser.add_argument(
        "--from-optional",
        action="store_true",
        help="the strict profile, but query blocks without a FROM clause allowed (as before "
        "the profile required FROM)",
    )
    parser.add_argument(
        "--loop-guard",
        type=int,
        default=DEFAULT_LOOP_GUARD.repeats,
        metavar="R",
        help="every arm refuses the token that makes a block of tokens run R times in a row "
        f"(default: `gridrail ask`'s {DEFAULT_LOOP_GUARD.repeats}; 0: none)",
    )
    parser.add_argument(
        "--prompt-tables",
        type=int,
        default=DEFAULT_PROMPT_TABLES,
        metavar="K",
        help="every arm's prompt shows the K tables the question links to (default: `gridrail "
        f"ask`'s {DEFAULT_PROMPT_TABLES}; 0: every table)",
    )
    parser.add_argument(
        "--prompt-rows",
        type=int,
        default=SAMPLE_ROWS,
        metavar="N",
        help=f"sample rows per table in every arm's prompt (default: `ask`'s {SAMPLE_ROWS})",
    )
    parser.add_argument(
        "--prompt-examples",
        type=int,
        default=PROMPT_EXAMPLES,
        metavar="N",
        help="worked examples over the schema in every arm's prompt (default: `ask`'s "
        f"{PROMPT_EXAMPLES})",
    )
    parser.add_argument(
        "--larger-than",
        type=int,
        default=0,
        metavar="N",
        help="only the sample's questions whose database has more than N tables (those whose "
        "prompt --prompt-tables N narrows; the others' prompts, and so greedy answers, are "
        "the same as with every table shown)",
    )
    parser.add_argument("--model", default=None, help="default: SmolLM2-135M-Instruct (GGUF)")
    parser.add_argument("--runtime", choices=RUNTIMES, default="auto", help="of load_model")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (transformers)")
    parser.add_argument("--exec-timeout", type=float, default=10.0, help="seconds per query")
    parser.add_argument("--verify-reuse", type=int, default=3, metavar="K")
    parser.add_argument(
        "--summarize", type=Path, nargs="+",
        help="print the table of finished JSONL files (their questions together; stubs of "
        "resumed runs left out)",
    )  # fmt: skip
    args = parser.parse_args(argv)

    if args.summarize:
        rows = [r for path in args.summarize for r in read_rows(path) if "arms" in r]
        print(markdown_table(summarize(rows)))
        _print_notes(rows)
        return

    spider = assets_root() / "data" / "spider"
    questions = load_questions(spider, args.split)
    sample, missing = sample_questions(
        questions, args.sample, args.seed, lambda db: database_path(spider, db).is_file()
    )
    if args.larger_than:  # the sample's questions whose prompt schema linking narrows
        sample = [q for q in sample if _table_count(spider, q.db_id) > args.larger_than]
    done: list[dict] = read_rows(args.out) if args.resume and args.out.exists() else []
    finished = {r["index"] for r in done}
    print(f"host: {describe()}")
    print(
        f"split {args.split}: {len(questions)} questions, {sum(missing.values())} left out "
        f"(database missing: {dict(missing)}); sample {args.sample}, seed {args.seed}; "
        f"{len(finished)} already in {args.out}",
        flush=True,
    )

    if importlib.util.find_spec("torch") is not None:  # the transformers runtime's threads
        import torch

        torch.set_num_threads(args.threads)
    started = time.time()
    model = load_model(args.model, runtime=args.runtime)
    print(f"model {model.name} loaded in {time.time() - started:.0f} s", flush=True)
    evaluator = Evaluator(
        model,
        spider,
        args.max_tokens,
        args.exec_timeout,
        args.arms,
        args.candidates,
        args.full_language,
        loop_guard=(
            replace(DEFAULT_LOOP_GUARD, repeats=args.loop_guard) if args.loop_guard else None
        ),
        from_optional=args.from_optional,
        alias_style=args.alias_style,
        prompt_tables=args.prompt_tables or None,
        prompt_rows=args.prompt_rows,
        gamma=args.gamma,
        declared_names=args.declared_names,
        prompt_examples=args.prompt_examples,
        candidate_temperature=args.temperature,
        candidate_top_p=args.top_p,
    )
    mode = "a" if args.resume else "w"
    run_started = time.time()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, mode, encoding="utf-8") as out:
        if not finished:
            config = {
                "kind": "run",
                "command": " ".join(sys.argv),
                "host": describe(),
                "date": datetime.datetime.now().isoformat(timespec="seconds"),
                "model": model.name,
                "runtime": model.runtime,  # the one "auto" chose
                "threads": args.threads,
                "sample": args.sample,
                "seed": args.seed,
                "split": args.split,
                "max_tokens": args.max_tokens,
                "arms": list(args.arms),
                "candidates": args.candidates,
                "temperature": args.temperature,
                "top_p": args.top_p,
                "loop_guard": args.loop_guard,
                "prompt_tables": args.prompt_tables,
                "prompt_rows": args.prompt_rows,
                "prompt_examples": args.prompt_examples,
                "profile": "none" if evaluator.profile is None else evaluator.profile.label,
                "gamma": args.gamma,
                "declared_names": args.declared_names,
                "left_out": dict(missing),
            }
            out.write(json.dumps(config) + "\n")
        rows = list(done)
        crashes: list[dict] = []
        print("per arm: E executes, C correct (EX), P SQLite prepares; tokens", flush=True)
        for n, q in enumerate(sample):
            if q.index in finished:
                continue
            try:
                row = evaluator.question(q, verify_reuse=n < args.verify_reuse)
            except Exception:  # recorded and reported, never silently dropped
                trace = traceback.format_exc()
                row = {"kind": "crash", "index": q.index, "db_id": q.db_id, "error": trace}
                print(f"#{q.index} {q.db_id} crashed:\n{trace}", flush=True)
            out.write(json.dumps(row, default=str) + "\n")
            out.flush()
            if row["kind"] == "crash":
                crashes.append(row)
                continue
            rows.append(row)
            print(
                f"[{len(rows)}/{len(sample)}] #{q.index} {q.db_id}: "
                + "  ".join(f"{a}: {_flags(row['arms'][a])}" for a in ARMS if a in row["arms"])
                + f"  ({time.time() - run_started:.0f} s)",
                flush=True,
            )
    elapsed = time.time() - run_started
    print(
        f"\n{len(rows)} questions in {elapsed / 60:.1f} min "
        f"(guide compilation {evaluator.compile_seconds:.0f} s); rows in {args.out}\n"
    )
    answered = [r for r in rows if "arms" in r]  # stubs of a resumed run left out
    print(markdown_table(summarize(answered)))
    _print_notes(answered)
    if crashes:
        print(
            f"{len(crashes)} questions crashed (rows of kind 'crash' in {args.out}): "
            f"{[c['index'] for c in crashes]}"
        )


def _table_count(spider: Path, db_id: str) -> int:
    from gridrail.policy.schema import Schema

    return len(Schema.from_sqlite(database_path(spider, db_id)).tables)


def _flags(result: dict) -> str:
    """One arm's outcome in the progress line: "EC- 34t" = executes, correct, not prepared."""
    marks = zip("ECP", (result["executes"], result["correct"], result["prepares"]), strict=True)
    return "".join(m if ok else "-" for m, ok in marks) + f" {result['tokens']}t"


def _print_notes(rows: Sequence[dict]) -> None:
    gold_errors = [(r["index"], r["gold_error"]) for r in rows if r["gold_error"]]
    in_language = sum(r["gold_in_language"] for r in rows)
    prepared = [r["gold_prepares"] for r in rows if "gold_prepares" in r]
    verified = [r["reuse_identical"] for r in rows if "reuse_identical" in r]
    print(
        f"\ngold queries in the guide's language: {in_language}/{len(rows)}; "
        + (f"prepared by SQLite: {sum(prepared)}/{len(prepared)}; " if prepared else "")
        + f"gold queries that fail on their database: {len(gold_errors)} {gold_errors}"
    )
    if verified:
        print(
            f"constrained decoded separately for {len(verified)} questions: "
            f"{sum(verified)} identical to constrained+repair's first attempt"
        )
    for line in failure_notes(rows):
        print(line)


def has_comment(sql: str) -> bool:
    """Does the SQL hold a comment (-- or /* outside quotes)?"""
    return any(c == " " and sql.startswith(("--", "/*"), i) for i, c in _lexical_pieces(sql))


def after_semicolon(sql: str) -> str:
    """The text after the statement's first ";" outside quotes and comments (whitespace and
    comments included); "" when nothing follows it or there is no ";"."""
    return sql[_first_semicolon_end(sql) :]


def error_kind(error: str | None) -> str | None:
    """An execution error without the names it quotes, by `error_class`:
    "OperationalError: no such column"."""
    if error is None:
        return None
    kind, sep, rest = error.partition(": ")
    return f"{kind}: {error_class(rest)}" if sep else error_class(error)


def _commonest(kinds: Iterable[str], top: int) -> str:
    listed = ", ".join(f"{k} ×{n}" for k, n in Counter(kinds).most_common(top))
    return listed or "none"


def failure_notes(rows: Sequence[dict], top: int = 5) -> list[str]:
    """What the outputs look like, per arm: how many statements hold comments, have text after
    the ";" or end with a reserve-written tail; the commonest refusals of SQLite's prepare and
    execution errors; for the candidates arm, which generation was chosen."""
    lines = []
    for arm in ARMS:
        results = [r["arms"][arm] for r in rows if arm in r.get("arms", {})]
        if not results:
            continue
        comments = sum(has_comment(a["sql"]) for a in results)
        trailing = sum(after_semicolon(a["sql"]) != "" for a in results)
        line = (
            f"{arm}: {comments}/{len(results)} statements hold a comment, {trailing} have text "
            f"after the ';' (whitespace included)"
        )
        if arm != "unconstrained":
            kinds = [a["kinds"][a.get("final", -1)] for a in results]
            written = sum(k.get("reserve", 0) > 0 for k in kinds)
            line += f", {written} end with a reserve-written tail (more than EOS)"
        lines.append(line)
        if all("prepares" in a for a in results):
            refusals = (error_class(a["prepare_error"]) for a in results if not a["prepares"])
            lines.append(f"  commonest SQLite prepare refusals: {_commonest(refusals, top)}")
        errors = (error_kind(a["exec_error"]) for a in results if a["exec_error"])
        lines.append(f"  commonest execution errors: {_commonest(errors, top)}")
        if arm == "constrained+candidates":
            lines.append(f"  chosen: {_chosen_counts(results)}")
    return lines


def _chosen_counts(results: Sequence[dict]) -> str:
    """How often the candidates arm chose its greedy generation, a sample, or the retry."""

    def which(a: dict) -> str:
        if a["final"] == 0:
            return "the greedy candidate"
        return "the retry" if a["repaired"] and a["final"] == len(a["stops"]) - 1 else "a sample"

    return _commonest(map(which, results), 3)


if __name__ == "__main__":
    main()

"""Constrained vs unconstrained text-to-SQL on Spider with the default local model.

    python bench/spider_eval.py --split train --sample 200 --seed 0 --max-tokens 128 \
        --out spider_eval.jsonl
    python bench/spider_eval.py --summarize spider_eval.jsonl     # the table of a finished run

Sample. The questions of `train_spider.json` (in file order, index = position in the file) whose
database file `database/<db_id>/<db_id>.sqlite` exists; `random.Random(seed).sample(eligible,
n)`, processed in sampled order. Questions whose database is absent (baseball_1, soccer_1) are
left out before sampling, and how many were left out is printed and recorded. Every arm sees the
same questions, the same model (SmolLM2-135M-Instruct by default, CPU, float32, `--threads`
torch threads), the same prompt (`gridrail.prompt.question_messages` over the database's full
schema: no policy, so every table and column is visible) and greedy decoding.

Arms.
  1. unconstrained: plain greedy decoding (`CausalLMLogits` + argmax over the model's whole
     output layer) until an EOS id of the vocabulary or `--max-tokens` tokens (EOS counted, as
     the constrained budget counts it); the text is the tokenizer's decode without special
     tokens. The SQL is taken from it as a user would (`extract_sql`):
       a. the contents of the first ```sql fence (to its closing ``` or the end of the text),
          else the text from the first whole word SELECT, WITH, INSERT, UPDATE or DELETE written
          in upper case, else from the first whole word "select" in any case, to the end of the
          text; no such word: the SQL is "" (fails every metric);
       b. cut just after the first ";" outside quotes and comments, whitespace stripped, and a
          ";" appended when it does not end with one (the bundled grammar requires the
          terminating ";", SQLite does not).
  2. constrained: `gridrail.ask.ask(..., repair=False)`; the SQL is the generation's text.
  3. constrained + repair: `ask(..., repair=True)`: the checker's violations trigger one
     constrained retry, whose statement is final. Its first attempt *is* arm 2's generation
     (`ask` runs the same first attempt whether or not it may repair, and greedy decoding is
     deterministic), so arm 2 is read off arm 3's first attempt instead of being decoded twice.
     `--verify-reuse K` decodes arm 2 separately for the first K questions and records whether
     the token sequences are identical (`reuse_identical` in the rows; printed at the end).

Metrics (per arm; arm 3 judges its final statement).
  - SQLite grammar parses: the SQL is a sentence of the bundled `sqlite` dialect grammar
    (identifiers unrestricted).
  - parses (guide's language): `guide.check(sql)` has no "outside_language" violation. The
    guide's language is the dialect with TABLE_NAME / COLUMN_NAME restricted to the schema's
    names, so this also requires lexicon names.
  - schema names (table/column): judged on the dialect's parse tree with SQLite's name rules
    (`IdentifierRules.denotes`, as tests/test_policy_walk.py does): every TABLE_NAME token
    denotes a table of the schema or a CTE the statement declares, every COLUMN_NAME token a
    column of some table of the schema or a column alias the statement declares (SQLite lets
    ORDER BY name a select-list alias). Output the dialect does not parse fails.
  - schema names incl. qualifiers: the above, and every qualifier (`T1.` in `T1.name`) denotes a
    schema table or a table alias / CTE the statement declares (masks do not restrict
    qualifiers; the checker reports unbound ones).
  - checker-clean: `guide.check(sql) == []` (what decides whether arm 3 repairs).
  - executes: runs without error on the real database, opened read-only (`mode=ro` and
    `PRAGMA query_only`), stopped after `--exec-timeout` seconds by a progress handler or past
    `MAX_ROWS` rows. A write statement fails (read-only), so it does not execute.
  - execution accuracy: the result equals the gold query's result on the same database: as a
    list of rows when the gold has an ORDER BY at the top level (outside parentheses), else as
    a multiset of rows. Rows are compared as tuples in column order (no column permutation),
    values by Python equality (1 == 1.0; floats exactly). Denominator: questions whose gold
    query executes (gold failures are counted and listed, not scored).
  - truncated: unconstrained, `--max-tokens` tokens without EOS; constrained, the final
    generation's stop is "reserve" (the budget trigger wrote the ending).
  - tokens per question: tokens written, EOS included; arm 3 counts every attempt's tokens.
  - repairs triggered: arm 3's questions whose first attempt had violations.
  - mask overhead: guard ms per token = sum(guard_seconds) / sum(tokens) (masks, jump-forward,
    accepting, audit: everything but the model), model ms per call = sum(model_seconds) /
    sum(model_calls) (the first call of a generation includes the prompt's prefill), and their
    ratio. The unconstrained arm's model ms per call is measured the same way, for reference.

One JSON row per question goes to `--out` as it finishes (`--resume` skips the questions a file
already has). Guides are compiled once per database and the model is loaded once.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import re
import sqlite3
import sys
import time
import traceback
from collections import Counter
from collections.abc import Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host import describe

ROOT = Path(__file__).resolve().parent.parent
ARMS = ("unconstrained", "constrained", "constrained+repair")
MAX_ROWS = 1_000_000
_SAMPLE_ROWS = 3  # rows of each result kept in the JSONL for inspection


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


def execute(db_path: Path, sql: str, timeout_s: float = 10.0, max_rows: int = MAX_ROWS):
    """Run `sql` on the database read-only, stopping it after `timeout_s` seconds (progress
    handler) or past `max_rows` rows."""
    if not sql.strip():
        return Execution(None, "no SQL")
    started = time.perf_counter()
    deadline = started + timeout_s
    uri = f"{db_path.resolve().as_uri()}?mode=ro"
    try:
        with closing(sqlite3.connect(uri, uri=True, check_same_thread=False)) as db:
            db.execute("PRAGMA query_only = 1")
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
        kinds = [v.kind for v in violations]
        return {
            "sql": sql,
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

_PERCENT_METRICS = (
    ("SQLite grammar parses", "dialect_parses"),
    ("parses (guide's language)", "parses"),
    ("schema names: table/column tokens", "names_ok"),
    ("schema names incl. qualifiers", "names_ok_qualified"),
    ("checker-clean (guide.check == [])", "clean"),
    ("executes", "executes"),
)


def summarize(rows: Sequence[dict]) -> dict[str, dict[str, float | int | None]]:
    """Per arm: the metrics of the module docstring from question rows."""
    out: dict[str, dict[str, float | int | None]] = {}
    for arm in ARMS:
        results = [r["arms"][arm] for r in rows if arm in r.get("arms", {})]
        n = len(results)
        if not n:
            continue
        m: dict[str, float | int | None] = {"questions": n}
        for _, key in _PERCENT_METRICS:
            m[key] = 100.0 * sum(bool(a[key]) for a in results) / n
        scored = [a["correct"] for a in results if a["correct"] is not None]
        m["scored"] = len(scored)
        m["correct"] = 100.0 * sum(scored) / len(scored) if scored else None
        m["truncated"] = 100.0 * sum(bool(a["truncated"]) for a in results) / n
        m["tokens"] = sum(a["tokens"] for a in results) / n
        m["repairs"] = sum(bool(a.get("repaired")) for a in results)
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
    arms = [a for a in ARMS if a in summary]

    def cells(fmt) -> str:
        return " | ".join(fmt(summary[a]) for a in arms)

    def pct(key):
        return lambda m: "—" if m.get(key) is None else f"{m[key]:.1f}%"

    def num(key, spec, na="—"):
        return lambda m: na if m.get(key) is None else format(m[key], spec)

    lines = [
        f"| metric | {' | '.join(arms)} |",
        "|---|" + "---:|" * len(arms),
        f"| questions | {cells(num('questions', 'd'))} |",
    ]
    lines += [f"| {label} | {cells(pct(key))} |" for label, key in _PERCENT_METRICS]
    lines += [
        f"| execution accuracy | {cells(lambda m: _accuracy(m))} |",
        f"| truncated | {cells(pct('truncated'))} |",
        f"| mean tokens per question | {cells(num('tokens', '.1f'))} |",
        "| repairs triggered | "
        + " | ".join("—" if a != "constrained+repair" else str(summary[a]["repairs"]) for a in arms)
        + " |",
        f"| guard ms per token | {cells(num('guard_ms_per_token', '.2f'))} |",
        f"| model ms per call | {cells(num('model_ms_per_call', '.1f'))} |",
        f"| guard / model (per token vs per call) | {cells(num('guard_over_model', '.3f'))} |",
        f"| wall s per question | {cells(num('seconds', '.1f'))} |",
    ]
    return "\n".join(lines)


def _accuracy(m: dict) -> str:
    if m.get("correct") is None:
        return "—"
    hits = round(m["correct"] * m["scored"] / 100)
    return f"{m['correct']:.1f}% ({hits}/{m['scored']})"


def read_rows(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r for r in rows if r.get("kind") == "question"]


# ----------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------


def unconstrained(model, prompt: Sequence[int], max_tokens: int) -> dict:
    """Plain greedy decoding: argmax over every logit until an EOS id or `max_tokens` tokens."""
    import torch

    from gridrail.decode.hf import CausalLMLogits

    eos = set(model.vocab.eos_token_ids)
    next_logits = CausalLMLogits(model.model, prompt)
    tokens: list[int] = []
    model_seconds = 0.0
    while len(tokens) < max_tokens:
        started = time.perf_counter()
        token = int(torch.argmax(next_logits(tokens)))
        model_seconds += time.perf_counter() - started
        tokens.append(token)
        if token in eos:
            break
    stopped = bool(tokens) and tokens[-1] in eos
    text = model.tokenizer.decode(tokens, skip_special_tokens=True)
    return {
        "text": text,
        "tokens": len(tokens),
        "truncated": not stopped,
        "model_seconds": model_seconds,
        "model_calls": len(tokens),
        "guard_seconds": None,
    }


def _generation_fields(attempts) -> dict:
    gens = [a.generation for a in attempts]
    return {
        "tokens": sum(len(g.tokens) for g in gens),
        "truncated": gens[-1].stop == "reserve",
        "stops": [g.stop for g in gens],
        "kinds": [g.kinds for g in gens],
        "guard_seconds": sum(g.guard_seconds for g in gens),
        "model_seconds": sum(g.model_seconds for g in gens),
        "model_calls": sum(g.model_calls for g in gens),
    }


class Evaluator:
    def __init__(self, model, spider: Path, max_tokens: int, exec_timeout: float):
        import gridrail as gr
        from gridrail.registry import shared_compiled_grammar

        self.gr = gr
        self.model = model
        self.spider = spider
        self.max_tokens = max_tokens
        self.exec_timeout = exec_timeout
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
            guide = self.gr.compile(self.grammar, self.model.vocab, schema=schema)
            self._databases[db_id] = (guide, schema, path)
            self.compile_seconds += time.perf_counter() - started
        return self._databases[db_id]

    def question(self, q: Question, verify_reuse: bool) -> dict:
        from gridrail.ask import ask
        from gridrail.prompt import question_messages

        guide, schema, path = self.database(q.db_id)
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
            "arms": {},
        }
        prompt = self.model.prompt_ids(question_messages(guide.view, q.question))
        row["prompt_tokens"] = len(prompt)

        started = time.perf_counter()
        free = unconstrained(self.model, prompt, self.max_tokens)
        free["seconds"] = time.perf_counter() - started
        row["arms"]["unconstrained"] = {**free, **judge.score(extract_sql(free["text"]))}

        started = time.perf_counter()
        answer = ask(q.question, guide, self.model, max_tokens=self.max_tokens, repair=True)
        seconds = time.perf_counter() - started
        first = answer.attempts[0]
        first_seconds = seconds if not answer.repaired else None
        first_score = judge.score(first.sql)
        row["arms"]["constrained"] = {
            **_generation_fields([first]),
            "seconds": first_seconds if first_seconds is not None else _first_seconds(first),
            **first_score,
        }
        final_score = judge.score(answer.sql) if answer.repaired else first_score
        row["arms"]["constrained+repair"] = {
            **_generation_fields(answer.attempts),
            "seconds": seconds,
            "repaired": answer.repaired,
            "first_violations": [v.kind for v in first.violations],
            "repair_messages": [v.message for v in first.violations] if answer.repaired else [],
            **final_score,
        }
        if verify_reuse:
            alone = ask(q.question, guide, self.model, max_tokens=self.max_tokens, repair=False)
            row["reuse_identical"] = alone.attempts[0].generation.tokens == first.generation.tokens
        return row


def _first_seconds(attempt) -> float:
    """A repaired question's first attempt alone: its guard and model time (the rest of `ask`,
    prompt templating and the check, is small)."""
    return attempt.generation.guard_seconds + attempt.generation.model_seconds


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--split", default="train")
    parser.add_argument("--sample", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--out", type=Path, default=Path("spider_eval.jsonl"))
    parser.add_argument("--resume", action="store_true", help="skip questions --out already has")
    parser.add_argument("--model", default=None, help="default: SmolLM2-135M-Instruct (GGUF)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--exec-timeout", type=float, default=10.0, help="seconds per query")
    parser.add_argument("--verify-reuse", type=int, default=3, metavar="K")
    parser.add_argument("--summarize", type=Path, help="print the table of a finished JSONL")
    args = parser.parse_args(argv)

    if args.summarize:
        rows = read_rows(args.summarize)
        print(markdown_table(summarize(rows)))
        _print_notes(rows)
        return

    spider = assets_root() / "data" / "spider"
    questions = load_questions(spider, args.split)
    sample, missing = sample_questions(
        questions, args.sample, args.seed, lambda db: database_path(spider, db).is_file()
    )
    done: list[dict] = read_rows(args.out) if args.resume and args.out.exists() else []
    finished = {r["index"] for r in done}
    print(f"host: {describe()}")
    print(
        f"split {args.split}: {len(questions)} questions, {sum(missing.values())} left out "
        f"(database missing: {dict(missing)}); sample {args.sample}, seed {args.seed}; "
        f"{len(finished)} already in {args.out}",
        flush=True,
    )

    import torch

    from gridrail.models import load_model

    torch.set_num_threads(args.threads)
    started = time.time()
    model = load_model(args.model)
    print(f"model {model.name} loaded in {time.time() - started:.0f} s", flush=True)
    evaluator = Evaluator(model, spider, args.max_tokens, args.exec_timeout)
    mode = "a" if args.resume else "w"
    run_started = time.time()
    with open(args.out, mode, encoding="utf-8") as out:
        if not finished:
            config = {
                "kind": "run",
                "command": " ".join(sys.argv),
                "host": describe(),
                "date": datetime.datetime.now().isoformat(timespec="seconds"),
                "model": model.name,
                "threads": args.threads,
                "sample": args.sample,
                "seed": args.seed,
                "split": args.split,
                "max_tokens": args.max_tokens,
                "left_out": dict(missing),
            }
            out.write(json.dumps(config) + "\n")
        rows = list(done)
        crashes: list[dict] = []
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
            arms = row["arms"]
            print(
                f"[{len(rows)}/{len(sample)}] #{q.index} {q.db_id}: "
                + "  ".join(
                    f"{a}: {'P' if arms[a]['parses'] else '-'}"
                    f"{'E' if arms[a]['executes'] else '-'}"
                    f"{'C' if arms[a]['correct'] else '-'} {arms[a]['tokens']}t"
                    for a in ARMS
                )
                + f"  ({time.time() - run_started:.0f} s)",
                flush=True,
            )
    elapsed = time.time() - run_started
    print(
        f"\n{len(rows)} questions in {elapsed / 60:.1f} min "
        f"(guide compilation {evaluator.compile_seconds:.0f} s); rows in {args.out}\n"
    )
    print(markdown_table(summarize(rows)))
    _print_notes(rows)
    if crashes:
        print(
            f"{len(crashes)} questions crashed (rows of kind 'crash' in {args.out}): "
            f"{[c['index'] for c in crashes]}"
        )


def _print_notes(rows: Sequence[dict]) -> None:
    gold_errors = [(r["index"], r["gold_error"]) for r in rows if r["gold_error"]]
    in_language = sum(r["gold_in_language"] for r in rows)
    verified = [r["reuse_identical"] for r in rows if "reuse_identical" in r]
    print(
        f"\ngold queries in the guide's language: {in_language}/{len(rows)}; "
        f"gold queries that fail on their database: {len(gold_errors)} {gold_errors}"
    )
    if verified:
        print(
            f"arm 2 decoded separately for {len(verified)} questions: "
            f"{sum(verified)} identical to arm 3's first attempt"
        )
    for line in failure_notes(rows):
        print(line)


def has_comment(sql: str) -> bool:
    """Does the SQL hold a comment (-- or /* outside quotes)?"""
    return any(c == " " and sql.startswith(("--", "/*"), i) for i, c in _lexical_pieces(sql))


def trails_after_semicolon(sql: str) -> bool:
    """Is there text (whitespace or comments) after the statement's first ";"?"""
    end = _first_semicolon_end(sql)
    return end < len(sql) and bool(sql[end:].strip())


def error_kind(error: str | None) -> str | None:
    """An execution error without the names it quotes: "OperationalError: no such column"."""
    if error is None:
        return None
    kind, _, rest = error.partition(": ")
    head = rest.split(":")[0].split(" near ")[0].strip() if rest else ""
    return f"{kind}: {head}" if head else kind


def failure_notes(rows: Sequence[dict], top: int = 5) -> list[str]:
    """What the outputs look like, per arm: the commonest execution errors, and how many
    statements hold comments, have text after the ";" or end with a reserve-written tail."""
    lines = []
    for arm in ARMS:
        results = [r["arms"][arm] for r in rows if arm in r.get("arms", {})]
        if not results:
            continue
        errors = Counter(error_kind(a["exec_error"]) for a in results if a["exec_error"])
        listed = ", ".join(f"{k} ×{n}" for k, n in errors.most_common(top))
        comments = sum(has_comment(a["sql"]) for a in results)
        trailing = sum(trails_after_semicolon(a["sql"]) for a in results)
        line = (
            f"{arm}: {comments}/{len(results)} statements hold a comment, {trailing} have text "
            f"after the ';'"
        )
        if arm != "unconstrained":
            kinds = [a["kinds"][-1] for a in results]
            written = sum(k.get("reserve", 0) > 0 for k in kinds)
            lines.append(f"{line}, {written} end with a reserve-written tail (more than EOS)")
        else:
            lines.append(line)
        lines.append(f"  commonest execution errors: {listed or 'none'}")
    return lines


if __name__ == "__main__":
    main()

"""The dialect-soundness differential: `python bench/dialect_soundness.py --sentences 10000`
(add `--json` for the counts as one JSON object, `--duckdb` to prepare with DuckDB instead).

The language a guide lets a model write must be a subset of what the database accepts. So
sentences of a role's language under a real schema -- walk-arm generations (tests/test_walk_arm.py:
uniform sampling from the exact masks, or word tokens preferred three to one, under budgets from
the reserve up) and the reserve's shortest completions (from the start and from random prefixes)
-- are prepared by SQLite itself on the real database: `EXPLAIN <sql>` on a read-only connection
(`mode=ro`, `query_only`), so nothing is ever run. The settings: the HR example under each role of
its policy and with no policy (every statement kind), and a few Spider training databases with
no policy; a vocabulary of SQL words plus the schema's names, byte complete (and, where the
tokenizer is there, gpt2's for a few sentences).

Each refusal is classified by SQLite's message:
  * grammar: a syntax error, an unrecognized token, "no tables specified", a NUL in the text, a
    hex literal too big, a NATURAL join with ON / USING, a call of the wrong shape (argument
    count; DISTINCT, FILTER or OVER where the function takes none) ... -- context-free refusals
    that the grammar must not admit (defects of python/gridrail/grammars/sqlite.lark);
  * name: "no such column / table", ambiguous names: binding, the checker's business (and that
    of the issue on names declared in the statement), not the grammar's;
  * function: a built-in function this SQLite build lacks (the grammar names those of current
    SQLite);
  * semantic: misuse of an aggregate, result-column counts, frame rules, ...: what
    the semantic checker (which prepares with SQLite in `Guide.check`) reports;
  * other: a message not classified yet -- needs a look.

With `--duckdb`, the HR settings' sentences are prepared by DuckDB instead (`EXPLAIN`, on an
in-memory DuckDB database with the HR example's tables and views, no rows) and classified by
DuckDB's exception: docs/policy.md says the mask's text is SQLite syntax, which on DuckDB "may
mean something else, or nothing", so these counts are reported, not asserted.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import math
import random
import re
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import gridrail as gr
from gridrail.policy.schema import Schema

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import test_walk_arm as walk  # noqa: E402  (the walk arm's loop lives with its test)
from assets import assets_root  # noqa: E402

HR = ROOT / "examples" / "hr.sqlite"
HR_POLICY = ROOT / "examples" / "hr_policy.toml"
HR_ROLES = ("analyst", "clerk", "auditor", "manager", "admin")
# Spider training databases with awkward names: a column `match` and `%_change_2007` (aircraft),
# `from` (railway), `home town` (perpetrator), `end` (hospital_1)
SPIDER = ("aircraft", "railway", "perpetrator", "hospital_1")

# SQLite's messages, most specific first: (class, pattern). The kind counted is the message with
# its names and values left out.
CLASSES = (
    ("grammar", r"syntax error|unrecognized token|incomplete input|no tables specified"),
    ("grammar", r"null character|hex literal too big|one statement at a time"),
    ("grammar", r"parser stack overflow|Expression tree is too large"),
    ("grammar", r"NATURAL join may not have|RETURNING may not use|should come after"),
    # a call's shape: its argument count, DISTINCT, FILTER and OVER for the kind of function
    (
        "grammar",
        r"wrong number of arguments|DISTINCT aggregates|DISTINCT is not supported for window"
        r"|FILTER clause may only|FILTER may not be used with non-aggregate"
        r"|may not be used as a window function",
    ),
    ("function", r"no such function"),
    (
        "name",
        r"no such (?:column|table|collation sequence)|ambiguous column name|has no column named",
    ),
    (
        "semantic",
        r"misuse of|not allowed in the GROUP BY"
        r"|HAVING clause on a non-aggregate|frame (?:starting|ending) offset|frame specification"
        r"|ORDER BY term|GROUP BY term|does not match any column|same number of result columns"
        r"|sub-select returns|row value misused|values for \d+ columns"
        r"|columns assigned|is not a function|too many columns"
        r"|cannot (?:modify|UPDATE|INSERT|DELETE)|is circularly defined|no such window"
        r"|aggregate functions are not allowed|recursive reference|multiple references"
        r"|values were supplied|RAISE\(\) may only|VALUES must have the same number"
        r"|must be a constant between",
    ),
)


# DuckDB's refusals, as "ExceptionType: message"
DUCKDB_CLASSES = (
    ("grammar", r"^(?:Parser|Syntax)Exception"),
    ("function", r"Function with name|No function matches"),
    ("name", r"not found|does not exist|[Aa]mbiguous|does not have a column"),
    ("semantic", r"^(?:Binder|Conversion|NotImplemented|InvalidInput|TypeMismatch)Exception"),
)


def classify(message: str, classes: tuple[tuple[str, str], ...] = CLASSES) -> tuple[str, str]:
    """(class, kind) of a database's refusal message."""
    first_line = re.sub(r"^\w+Exception: ", "", (message.splitlines() or [""])[0])
    kind = re.sub(r"(?<!Error): .*$", "", re.sub(r'"[^"]*"', "X", first_line))[:80]
    for name, pattern in classes:
        if re.search(pattern, message):
            return name, kind
    return "other", kind


@dataclass
class Setting:
    """A database, a role of its policy (None: no policy, every statement kind) and a guide."""

    name: str
    database: Path
    guide: gr.Guide

    @property
    def reserve(self) -> int:
        return len(self.guide.matcher().completion())


@dataclass
class Counts:
    sentences: int = 0
    refused: collections.Counter[str] = field(default_factory=collections.Counter)
    kinds: collections.Counter[str] = field(default_factory=collections.Counter)
    by_setting: dict[str, dict[str, int]] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0

    def count(self, setting: str, sql: str, message: str | None, classes: tuple = CLASSES) -> None:
        self.sentences += 1
        row = self.by_setting.setdefault(setting, collections.Counter())
        row["sentences"] += 1
        if message is None:
            return
        name, kind = classify(message, classes)
        self.refused[name] += 1
        self.kinds[f"{name}: {kind}"] += 1
        row[name] += 1
        kept = self.examples.setdefault(f"{name}: {kind}", [])
        if len(kept) < 2:
            kept.append(f"[{setting}] {sql!r} -> {message}")

    def as_json(self) -> dict[str, object]:
        doc = dict(vars(self))
        for key in ("refused", "kinds"):
            doc[key] = dict(doc[key])
        doc["by_setting"] = {k: dict(v) for k, v in self.by_setting.items()}
        return doc


def vocabulary(schema: Schema) -> gr.Vocabulary:
    """The walk test's SQL words plus the schema's names (with and without a leading space),
    after every single byte: byte complete."""
    words = [*walk._SQL_WORDS, *walk._CROSSING, "NATURAL", "UNION ALL", "(SELECT", "USING ("]
    words += [t.name for t in schema.tables] + [c.name for t in schema.tables for c in t.columns]
    spellings = [bytes((b,)) for b in range(256)]
    spellings += sorted({w.encode() for w in words} | {b" " + w.encode() for w in words})
    return gr.Vocabulary([*spellings, None], eos_token_ids=len(spellings))


@cache
def _gpt2() -> gr.Vocabulary | None:
    path = assets_root() / "tokenizers" / "gpt2" / "tokenizer.json"
    return gr.Vocabulary.from_file(path) if path.is_file() else None


def settings(real_tokenizer: bool = False) -> Iterator[Setting]:
    """The HR example under each role and with no policy, then the Spider databases that are
    there (no policy); with `real_tokenizer`, the HR analyst and no-policy guides over gpt2's
    vocabulary (where the tokenizer is there)."""
    grammar = gr.Grammar.bundled("sqlite")
    policy = gr.Policy.from_file(HR_POLICY)
    hr = Schema.from_sqlite(HR)
    for role in (*HR_ROLES, None):
        name = f"hr/{role or 'no policy'}"
        guide = gr.compile(grammar, vocabulary(hr), schema=hr, policy=role and policy, role=role)
        yield Setting(name, HR, guide)
    for db in SPIDER:
        path = assets_root() / "data" / "spider" / "database" / db / f"{db}.sqlite"
        if path.is_file():
            schema = Schema.from_sqlite(path)
            yield Setting(
                f"spider/{db}", path, gr.compile(grammar, vocabulary(schema), schema=schema)
            )
    if real_tokenizer and (gpt2 := _gpt2()) is not None:
        for role in ("analyst", None):
            guide = gr.compile(grammar, gpt2, schema=hr, policy=role and policy, role=role)
            yield Setting(f"hr/{role or 'no policy'}/gpt2", HR, guide)


def read_only(database: Path) -> sqlite3.Connection:
    db = sqlite3.connect(f"file:{database}?mode=ro", uri=True, check_same_thread=False)
    db.execute("PRAGMA query_only = ON")
    return db


def sqlite_refusal(db: sqlite3.Connection, sql: str) -> str | None:
    """SQLite's message when it cannot prepare `sql` (compiled as EXPLAIN, never run)."""
    try:
        db.execute("EXPLAIN " + sql)
    except (sqlite3.Error, sqlite3.Warning, ValueError) as e:  # ValueError: a NUL, a surrogate
        return str(e)
    return None


def duckdb_copy(database: Path):
    """An in-memory DuckDB database with the SQLite database's tables (declared types, no rows)
    and views."""
    import duckdb

    db = duckdb.connect()
    with closing(read_only(database)) as source:
        catalog = source.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'view')"
            " AND name NOT LIKE 'sqlite_%' ORDER BY type = 'view'"
        ).fetchall()
        for kind, name, sql in catalog:
            if kind == "view":
                db.execute(sql)
                continue
            columns = source.execute(f"PRAGMA table_info({quote(name)})").fetchall()
            body = ", ".join(f"{quote(c[1])} {c[2] or 'VARCHAR'}" for c in columns)
            db.execute(f"CREATE TABLE {quote(name)} ({body})")
    return db


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def duckdb_refusal(db, sql: str) -> str | None:
    """DuckDB's refusal ("ExceptionType: message") when it cannot plan `sql` (never run)."""
    import duckdb

    try:
        db.execute("EXPLAIN " + sql)
    except duckdb.Error as e:
        return f"{type(e).__name__}: {e}"
    return None


def text(guide: gr.Guide, tokens: list[int]) -> str:
    data = b"".join(guide.vocab.token_bytes(t) for t in tokens if not guide.is_eos(t))
    return data.decode("utf-8", "surrogateescape")


def sentences(setting: Setting, rng: random.Random) -> Iterator[str]:
    """Sentences of the setting's language, endlessly: first the shortest completion from the
    start, then walk-arm generations (uniform, or word tokens preferred), every fifth one a
    shortest completion from a random prefix."""
    guide, reserve = setting.guide, setting.reserve
    yield text(guide, guide.matcher().completion())
    words = len(guide.vocab) > 300  # the small vocabularies' tokens past the single bytes
    for n in itertools.count():
        if n % 5 == 4:
            yield text(guide, completed_prefix(guide, rng))
            continue
        budget = reserve if n % 10 == 0 else rng.randint(reserve, reserve + 40)
        prefer = words and n % 2 == 1
        choose = (lambda ids: _prefer_words(ids, rng)) if prefer else None
        yield text(guide, walk.generate(guide, rng, budget, choose=choose).tokens)


def _prefer_words(ids: list[int], rng: random.Random) -> int:
    preferred = [i for i in ids if i >= 256]
    return rng.choice(preferred if preferred and rng.random() < 0.75 else ids)


def completed_prefix(guide: gr.Guide, rng: random.Random) -> list[int]:
    """A random prefix of up to 30 allowed tokens, then the matcher's shortest completion."""
    m = guide.matcher()
    for _ in range(rng.randint(0, 30)):
        token = rng.choice(m.allowed().ids())
        if guide.is_eos(token) or not m.accept_tokens([token]):
            break
    if not m.is_terminated():
        assert m.accept_tokens(m.completion())
    return m.accepted_tokens()


def run(total: int, seed: int, real_tokenizer: bool = False, duckdb: bool = False) -> Counts:
    """Prepare `total` sentences, spread evenly over the settings (the gpt2 ones, slower, a
    quarter as many); with `duckdb`, the HR settings' sentences, by DuckDB."""
    rng = random.Random(seed)
    counts = Counts()
    started = time.perf_counter()
    chosen = [s for s in settings(real_tokenizer) if not duckdb or s.database == HR]
    shares = [0.25 if s.name.endswith("gpt2") else 1.0 for s in chosen]
    for setting, share in zip(chosen, shares, strict=True):
        quota = math.ceil(total * share / sum(shares))  # at least `total` in all
        opened = duckdb_copy(setting.database) if duckdb else read_only(setting.database)
        refusal = duckdb_refusal if duckdb else sqlite_refusal
        classes = DUCKDB_CLASSES if duckdb else CLASSES
        with closing(opened) as db:
            source = sentences(setting, random.Random(rng.random()))
            for _ in range(quota):
                sql = next(source)
                counts.count(setting.name, sql, refusal(db, sql), classes)
    counts.seconds = round(time.perf_counter() - started, 1)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sentences", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gpt2", action="store_true", help="add gpt2-vocabulary settings")
    parser.add_argument("--duckdb", action="store_true", help="prepare with DuckDB (HR only)")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = parser.parse_args()
    counts = run(args.sentences, args.seed, args.gpt2, args.duckdb)
    if args.json:
        print(json.dumps(counts.as_json(), sort_keys=True))
        return
    print(f"{counts.sentences} sentences in {counts.seconds} s; refused: {dict(counts.refused)}")
    for setting, row in counts.by_setting.items():
        print(f"  {setting}: {dict(row)}")
    for kind, number in counts.kinds.most_common():
        print(f"{number}: {kind}")
        for example in counts.examples[kind]:
            print("    " + example[:300])


if __name__ == "__main__":
    main()

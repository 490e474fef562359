"""The semantic checker against SQLite's own binder: `python bench/checker_differential.py
--statements 100000 --seed 0` (add `--json` for the counts as one JSON object).

Every statement is judged twice under a role that hides columns (and some tables and functions):
by the checker (`SemanticChecker`, on the dialect grammar's parse) and by SQLite, which prepares
it against a schema-only copy of the catalog with an authorizer recording every read, call and
write (`gridrail.check.sqlite_judge`). Statements come from three sources (the zoo about a third
of them, HR a tenth, Spider the rest; the walk arm, the slow one, 0.5%):

  1. Spider gold statements (train_gold.sql) over their own databases and over a WITHOUT ROWID
     variant of each schema (every table with a PRIMARY KEY made WITHOUT ROWID), one or two of
     their names replaced -- a column by another column (mostly of the tables the statement
     reads), a row key name (rowid, oid, _rowid_), a double-quoted or bracketed one, an
     expression, a scalar subquery or a recursive CTE whose recursive SELECT reads a name; a
     table by another table or a NATURAL JOIN -- and sometimes the whole wrapped in a CTE or a
     recursive CTE.
  2. Random statements over a "row key zoo" (WITHOUT ROWID, INTEGER PRIMARY KEY aliases in a
     column and in a table constraint, the `INTEGER PRIMARY KEY DESC` quirk, real columns named
     rowid and oid, views) and the HR example: CTEs, recursive CTEs, NATURAL JOIN, USING, ON,
     subqueries in every clause, row key names, double-quoted names, INSERT / UPDATE / DELETE.
  3. The walk arm (tests/test_walk_arm.py's loop): random token sequences decoded under the exact
     masks of a guide over the zoo, word tokens preferred, so the statements are those a model
     could write.

Counts. `bypass`: a denied access SQLite reports that none of the checker's violations covers
(what `Guide.check` would add as `database_denied`) -- must be 0; `bypass_clean` the part of it in
statements the checker found clean. `over_strict`: a column_not_visible / double_quoted_column
the checker reports where SQLite reads or updates no column the role may not see (of the
violation's table, where it names one: it never names the hidden column), by reason: NATURAL
JOIN / USING comparisons (SQLite builds those column references itself, unasked), the columns
an INSERT writes (SQLite reports the table only), `*` over a merged column, a row key name that
may bind in two places, a full-text MATCH (its query may name any column of its table), a
double-quoted string where a table in scope hides a column (refused whatever it names, so that
a hidden column's name and a string get one answer), a bare name of a column USING or NATURAL
merged (the checker binds it to the left side's hidden column; SQLite reports no read of it).
"other" would need a look. A hidden
table or column the statement names is reported as a missing one would be (`unknown_*`), and
after such a report the judge adds nothing (`sqlite_judge`): those statements are counted
under `denied`, never as a bypass. Statements the dialect grammar does not
parse, and those SQLite cannot prepare (its verdict is then `database_rejected`), are counted
and not compared; `clean_rejected` counts those the checker passed, by SQLite's message (the
grammar accepts what SQLite refuses: `VALUES (1) ORDER BY 1`, an aggregate in WHERE, ...).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import gridrail as gr
from gridrail.check.checker import SemanticChecker, Violation
from gridrail.check.sqlite_judge import SqliteJudge
from gridrail.errors import ParseError
from gridrail.grammar.compiled import CompiledGrammar, compile_grammar
from gridrail.parse.tree import Token, parse_tree
from gridrail.policy.role import ColumnRule, Role
from gridrail.policy.schema import ROW_KEY_NAMES, Schema
from gridrail.policy.view import SchemaView

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import test_walk_arm as walk  # noqa: E402  (the walk arm's loop lives with its test)

ZOO = """
CREATE TABLE people (ssn INTEGER PRIMARY KEY, name TEXT, dept TEXT, salary REAL);
CREATE TABLE w (k TEXT PRIMARY KEY, v TEXT, name TEXT) WITHOUT ROWID;
CREATE TABLE quirk (id INTEGER PRIMARY KEY DESC, secret TEXT, name TEXT);
CREATE TABLE keyed (a INTEGER, b TEXT, dept TEXT, PRIMARY KEY (a));
CREATE TABLE plain (x TEXT, y TEXT, name TEXT);
CREATE TABLE shadow (rowid TEXT, oid TEXT, v TEXT);
CREATE VIEW pv AS SELECT name, dept FROM people;
CREATE VIEW wv AS SELECT k, v FROM w;
"""
READ_WRITE = frozenset({"select", "insert", "update", "delete"})
FUNCTIONS = ("count", "max", "min", "sum", "lower", "upper", "abs", "coalesce", "length")
OVER_STRICT_KINDS = frozenset({"column_not_visible", "double_quoted_column"})
EXAMPLES = 3  # kept per over-strictness reason


@dataclass
class Corpus:
    """One schema, the roles statements are judged under, and a source of statements."""

    name: str
    schema: Schema
    views: list[SchemaView]
    make: Callable[[], str]
    judges: dict[int, SqliteJudge] = field(default_factory=dict)

    def judge(self, n: int) -> SqliteJudge:
        if n not in self.judges:
            self.judges[n] = SqliteJudge(self.views[n])
        return self.judges[n]


@dataclass
class Counts:
    statements: int = 0
    not_parsed: int = 0
    rejected: int = 0
    judged: int = 0
    denied: int = 0  # denied accesses SQLite reports (all covered, or a bypass)
    bypass: int = 0
    bypass_clean: int = 0
    over_strict: collections.Counter[str] = field(default_factory=collections.Counter)
    clean_rejected: collections.Counter[str] = field(default_factory=collections.Counter)
    by_source: collections.Counter[str] = field(default_factory=collections.Counter)
    bypasses: list[str] = field(default_factory=list)
    examples: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0

    def as_json(self) -> dict[str, object]:
        doc = dict(vars(self))
        doc["over_strict"] = dict(self.over_strict)
        doc["clean_rejected"] = dict(self.clean_rejected)
        doc["by_source"] = dict(self.by_source)
        return doc


@cache
def dialect() -> CompiledGrammar:
    return compile_grammar(gr.Grammar.bundled("sqlite"))


def compare(corpus: Corpus, n: int, sql: str, counts: Counts) -> None:
    """Judge `sql` under role `n` of `corpus` both ways and count what they say."""
    view = corpus.views[n]
    counts.statements += 1
    try:
        found = SemanticChecker(dialect(), view).check(sql)
    except ParseError:
        counts.not_parsed += 1
        return
    judge = corpus.judge(n)
    prepared = judge.prepare(sql)
    if prepared.error is not None:
        counts.rejected += 1
        if not found:  # no policy at stake (SQLite runs nothing), but the binders differ
            counts.clean_rejected[prepared.error.split(":")[0]] += 1
            kept = counts.examples.setdefault(f"clean, rejected: {prepared.error}", [])
            if len(kept) < 1:
                kept.append(f"[{corpus.name} role {view.role.name}] {sql}")
        return
    counts.judged += 1
    counts.denied += len(set(judge.denied(prepared)))
    for missed in judge.verdict(sql, prepared, found):
        counts.bypass += 1
        counts.bypass_clean += not found
        counts.bypasses.append(f"[{corpus.name} role {view.role.name}] {sql}\n  {missed.message}")
    hidden = {  # tables of which SQLite reads, or an UPDATE sets, a column the role may not see
        a.table.lower()
        for a in judge.denied(prepared)
        if a.action in ("read", "update") and a.table and a.name
    }
    data = sql.encode("utf-8")
    for v in found:
        echoed = v.table.lower() in hidden if v.table is not None else bool(hidden)
        if v.kind in OVER_STRICT_KINDS and not echoed:
            reason = over_strict_reason(v, data)
            counts.over_strict[reason] += 1
            kept = counts.examples.setdefault(reason, [])
            if len(kept) < EXAMPLES:
                kept.append(f"[{corpus.name} role {view.role.name}] {sql}\n  {v.message}")


def over_strict_reason(v: Violation, data: bytes) -> str:
    """Why the checker may flag a column SQLite does not read (the explanations the report
    gives); "other" is what needs a look."""
    text = data[v.start : v.end].decode("utf-8", "replace")
    before = data[: v.start].decode("utf-8", "replace")
    if v.message.startswith("INSERT without a column list"):
        return "INSERT without a column list writes every column (SQLite reports no column)"
    if re.fullmatch(r"\s*(?:INSERT|REPLACE)\b[^(]*\([^)]*", before, re.I):
        return "an INSERT column list names a hidden column (SQLite reports the table only)"
    if text.upper().startswith("NATURAL") or re.search(r"USING\s*\([^)]*$", before, re.I):
        return "NATURAL JOIN / USING compare columns (SQLite builds those reads unasked)"
    if text == "*" and re.search(r"\b(?:NATURAL|USING)\b", data.decode("utf-8", "replace"), re.I):
        return "* over NATURAL JOIN / USING: the merged right-hand column (SQLite expands it once)"
    if " is a full-text query, which may search every column" in v.message:
        return "a full-text MATCH may search every column of its table (SQLite hears the left one)"
    if text.strip('"[]`').lower().split(".")[-1] in ROW_KEY_NAMES:
        return "row key of a FROM subquery or hand-written table: judged where it binds either way"
    if v.kind == "double_quoted_column":
        return "a double-quoted string where a table in scope hides a column (refused alike)"
    merged = re.search(r"\b(?:NATURAL|USING)\b", data.decode("utf-8", "replace"), re.I)
    if merged and "binds here, as SQLite binds names" in v.message:
        return "a bare name of a USING / NATURAL column (SQLite's authorizer reports no read)"
    return "other"


def run(statements: int, seed: int, walk_share: float = 0.005) -> Counts:
    """Judge `statements` statements, cycling through the corpora (the walk arm takes about
    `walk_share` of them: it is the slow source)."""
    rng = random.Random(seed)
    counts = Counts()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        corpora = list(build_corpora(Path(folder), rng))
        walker = corpus_walker(corpora[0], rng)
        for _ in range(statements):
            roll = rng.random()
            if roll < walk_share:
                corpus, source = corpora[0], "walk arm"
                sql = next(walker)
            else:  # the zoo a third of the time, HR a tenth, else a Spider database
                corpus = corpora[
                    0 if roll < 0.33 else 1 if roll < 0.43 else rng.randrange(len(corpora))
                ]
                source = corpus.name.split(":")[0]
                sql = corpus.make()
            counts.by_source[source] += 1
            compare(corpus, rng.randrange(len(corpus.views)), sql, counts)
    counts.seconds = round(time.perf_counter() - started, 1)
    return counts


# ----- corpora ------------------------------------------------------------------------------


def build_corpora(folder: Path, rng: random.Random) -> Iterator[Corpus]:
    """The zoo first (the walk arm runs over it), the HR example, then each Spider database
    and its WITHOUT ROWID variant (where the Spider data is there)."""
    zoo = schema_file(folder / "zoo.sqlite", ZOO)
    yield corpus("zoo", zoo, rng, maker=StatementMaker)
    yield corpus("hr", Schema.from_sqlite(ROOT / "examples" / "hr.sqlite"), rng, StatementMaker)
    spider = assets_root() / "data" / "spider"
    if not (spider / "train_gold.sql").is_file():
        return
    gold: dict[str, list[str]] = collections.defaultdict(list)
    for line in (spider / "train_gold.sql").read_text(encoding="utf-8").splitlines():
        sql, db = line.split("\t")
        gold[db].append(sql.strip().rstrip(";") + ";")
    for db, lines in sorted(gold.items()):
        path = spider / "database" / db / f"{db}.sqlite"
        if not path.is_file():
            continue  # baseball_1, soccer_1
        own = Schema.from_sqlite(path)
        yield corpus(f"spider:{db}", own, rng, lambda s, r, lines=lines: GoldMutator(s, r, lines))
        variant = without_rowid_variant(own, folder / f"{db}.sqlite")
        if variant is not None:
            maker = lambda s, r, lines=lines: GoldMutator(s, r, lines)  # noqa: E731
            yield corpus(f"spider-without-rowid:{db}", variant, rng, maker)


def corpus(name: str, schema: Schema, rng: random.Random, maker) -> Corpus:
    views = [SchemaView(schema, role) for role in random_roles(schema, rng)]
    return Corpus(name, schema, views, maker(schema, random.Random(rng.random())).statement)


def schema_file(path: Path, script: str) -> Schema:
    with closing(sqlite3.connect(path)) as db:
        db.executescript(script)
    return Schema.from_sqlite(path)


def without_rowid_variant(schema: Schema, path: Path) -> Schema | None:
    """The schema with every table that has a PRIMARY KEY made WITHOUT ROWID (None if none
    can be)."""
    with closing(sqlite3.connect(path)) as db:
        changed = 0
        for ddl in schema.ddl:
            try:
                db.execute(ddl + " WITHOUT ROWID")
                changed += 1
            except sqlite3.Error:  # no PRIMARY KEY (or a virtual table)
                db.execute(ddl)
    return Schema.from_sqlite(path) if changed else None


def assets_root() -> Path:
    env = os.environ.get("GRIDRAIL_ASSETS")
    return Path(env) if env else ROOT.parent / "shared"


def random_roles(schema: Schema, rng: random.Random, count: int = 4) -> list[Role]:
    """Roles that hide about a third of the columns (some by allow-list, which hides the
    implicit row key too), sometimes a table, the write targets or all functions but a few;
    one in twelve may not read at all."""
    roles = []
    for n in range(count):
        columns = {}
        for table in schema.tables:
            names = [c.name for c in table.columns]
            if rng.random() < 0.2:
                columns[table.name] = ColumnRule(
                    allow=frozenset(rng.sample(names, len(names) // 2))
                )
            elif deny := frozenset(c for c in names if rng.random() < 0.35):
                columns[table.name] = ColumnRule(deny=deny)
        names = [t.name for t in schema.tables]
        tables = None if rng.random() < 0.6 else frozenset(t for t in names if rng.random() < 0.8)
        writes = None if rng.random() < 0.7 else frozenset(rng.sample(names, len(names) // 2))
        functions = None if rng.random() < 0.6 else frozenset(rng.sample(FUNCTIONS, 4))
        kinds = READ_WRITE if rng.random() < 11 / 12 else READ_WRITE - {"select"}
        roles.append(Role(f"r{n}", kinds, frozenset(), tables, columns, functions, writes=writes))
    return roles


# ----- statement sources --------------------------------------------------------------------


class StatementMaker:
    """Random statements over a schema, mostly naming what is in scope (so SQLite prepares most
    of them) and sometimes what is not (so names bind outwards, or fail)."""

    def __init__(self, schema: Schema, rng: random.Random):
        self.rng = rng
        self.schema_tables = {t.name: [c.name for c in t.columns] for t in schema.tables}
        self.all_columns = sorted({c for cols in self.schema_tables.values() for c in cols})
        self.reset()

    def reset(self) -> None:
        """Forget the CTEs of the last statement."""
        self.tables = {name: cols for name, cols in self.schema_tables.items() if cols}
        self.ctes: list[str] = []

    def statement(self) -> str:
        self.reset()
        roll = self.rng.random()
        if roll < 0.08:
            return self.insert() + ";"
        if roll < 0.14:
            table = self.table()
            value = self.expr([self.tables[table]], 2)
            cols = self.tables[table]
            where = f" WHERE {self.expr([cols], 2)}" if self.rng.random() < 0.7 else ""
            return f"UPDATE {table} SET {self.name(cols)} = {value}{where}{self.returning(cols)};"
        if roll < 0.18:
            table = self.table()
            cols = self.tables[table]
            return f"DELETE FROM {table} WHERE {self.expr([cols], 2)}{self.returning(cols)};"
        return self.select([], 3) + ";"

    def insert(self) -> str:
        table = self.table()
        cols = self.tables[table]
        listed = ""
        width = len(cols)
        if self.rng.random() < 0.7:
            chosen = self.rng.sample(cols, self.rng.randint(1, len(cols)))
            listed, width = f" ({', '.join(chosen)})", len(chosen)
        if self.rng.random() < 0.5:
            source = "VALUES (" + ", ".join(["1"] * width) + ")"
        else:
            source = self.select([], 2, width)
        return f"INSERT INTO {table}{listed} {source}{self.returning(cols)}"

    def returning(self, cols: list[str]) -> str:
        return f" RETURNING {self.name(cols)}" if self.rng.random() < 0.3 else ""

    def select(self, outer: list[list[str]], depth: int, width: int = 0) -> str:
        """A SELECT (`width` result columns, any number if 0) that may read `outer` names."""
        rng = self.rng
        with_clause = ""
        if depth > 1 and rng.random() < 0.3:
            with_clause = self.with_clause(outer, depth)
        if rng.random() < 0.1:
            width = width or rng.randint(1, 2)
            operator = rng.choice(["UNION", "UNION ALL", "INTERSECT", "EXCEPT"])
            body = f"{self.core(outer, depth, width)} {operator} {self.core(outer, depth, width)}"
        else:
            body = self.core(outer, depth, width)
        if rng.random() < 0.15:
            body += " ORDER BY 1"
        if rng.random() < 0.1:
            body += " LIMIT 1"
        return with_clause + body

    def with_clause(self, outer: list[list[str]], depth: int) -> str:
        rng = self.rng
        name = f"c{len(self.ctes)}"
        if rng.random() < 0.5:  # a recursive CTE whose recursive SELECT reads names
            column = rng.choice(["n", *self.all_columns[:3]])
            step_from = name
            if rng.random() < 0.5:
                step_from += f" NATURAL JOIN {self.table()}"
            inner_cols = [[column], *outer]
            step = self.name([c for cols in inner_cols for c in cols] + self.all_columns)
            body = (
                f"SELECT 0 AS {column} UNION ALL SELECT {step} FROM {step_from} "
                f"WHERE {self.expr(inner_cols, 1)} LIMIT 3"
            )
            self.ctes.append(name)
            self.tables[name] = [column]
            return f"WITH RECURSIVE {name} AS ({body}) "
        body = self.select(outer, depth - 1, 0)
        self.ctes.append(name)
        self.tables[name] = self.all_columns[:3]  # a guess: names that may bind, or fail
        return f"WITH {name} AS ({body}) "

    def core(self, outer: list[list[str]], depth: int, width: int) -> str:
        rng = self.rng
        if rng.random() < 0.05:
            return "VALUES (" + ", ".join(["1"] * max(width, 1)) + ")"
        items, scope = self.from_clause(outer, depth)
        inside = [scope, *outer]
        count = width or rng.randint(1, 3)
        if width == 0 and rng.random() < 0.1:
            columns = rng.choice(["*", f"{items[0]}.*" if items[0] else "*"])
        else:
            columns = ", ".join(self.expr(inside, depth - 1) for _ in range(count))
        sql = f"SELECT {columns} FROM {items[1]}"
        if rng.random() < 0.6:
            sql += f" WHERE {self.expr(inside, depth - 1)}"
        if rng.random() < 0.15:
            sql += f" GROUP BY {self.name(scope)}"
            if rng.random() < 0.5:
                sql += f" HAVING {self.expr([scope], depth - 1)}"
        return sql

    def from_clause(self, outer: list[list[str]], depth: int) -> tuple[tuple[str, str], list[str]]:
        """(first item's qualifier, FROM text) and the columns in scope."""
        rng = self.rng
        first = self.table()
        alias = f"t{rng.randint(1, 3)}" if rng.random() < 0.3 else first
        text = first if alias == first else f"{first} AS {alias}"
        scope = list(self.tables[first])
        if depth > 1 and rng.random() < 0.15:
            text = f"({self.select(outer, depth - 1, 0)}) AS {alias}"
            scope = self.all_columns[:4]
        roll = rng.random()
        if roll < 0.5:
            other = self.table()
            scope += self.tables[other]
            join = rng.choice(["NATURAL JOIN", "JOIN", "LEFT JOIN", ",", "CROSS JOIN"])
            text += f" {join} {other}"
            if join in ("JOIN", "LEFT JOIN"):
                shared = sorted(set(scope) & set(self.tables[other]))
                if shared and rng.random() < 0.7:
                    text += f" USING ({self.name(shared, quoted=False, wild=0)})"
                else:
                    text += f" ON {self.expr([scope, *outer], 1)}"
        return (alias, text), scope

    def expr(self, scopes: list[list[str]], depth: int) -> str:
        rng = self.rng
        names = [c for cols in scopes for c in cols] or self.all_columns
        roll = rng.random()
        if depth <= 0 or roll < 0.4:
            return self.name(names)
        if roll < 0.5:
            return f"(SELECT {self.name(names + self.all_columns)} FROM {self.table()})"
        if roll < 0.55:
            step = self.name(names)
            return (
                f"(WITH RECURSIVE r AS (SELECT 0 AS n UNION ALL SELECT {step} FROM r WHERE n = 0)"
                " SELECT max(n) FROM r)"
            )
        if roll < 0.62:
            return f"EXISTS ({self.select(scopes, depth - 1, 0)})"
        if roll < 0.7:
            return f"{self.name(names)} IN ({self.select(scopes, depth - 1, 1)})"
        if roll < 0.78:
            function = rng.choice(FUNCTIONS)
            argument = "*" if function == "count" and rng.random() < 0.5 else self.name(names)
            return f"{function}({argument})"
        if roll < 0.84:
            return f"{self.name(names)} LIKE 'a%'"
        if roll < 0.9:
            return f"CASE WHEN {self.expr(scopes, depth - 1)} THEN {self.name(names)} ELSE 0 END"
        operator = rng.choice(["=", "<", "AND", "OR", "+", "||"])
        return f"{self.expr(scopes, depth - 1)} {operator} {self.expr(scopes, depth - 1)}"

    def name(self, names: list[str], quoted: bool = True, wild: float = 0.15) -> str:
        """A column reference: one of `names`, else (`wild`) a row key name or any column;
        bare, double-quoted or bracketed."""
        rng = self.rng
        roll = rng.random()
        if roll < wild * 0.6:
            name = rng.choice(ROW_KEY_NAMES)
        elif roll < wild:
            name = rng.choice(self.all_columns)
        else:
            name = rng.choice(names or self.all_columns)
        style = rng.random()
        if quoted and style < 0.2:
            return '"' + name.replace('"', '""') + '"'
        if style < 0.25 and "]" not in name:
            return f"[{name}]"
        if " " in name or not name.replace("_", "a").isalnum() or name[0].isdigit():
            return '"' + name.replace('"', '""') + '"'
        return name

    def table(self) -> str:
        choices = [t for t in self.tables if t not in self.ctes] + self.ctes
        name = self.rng.choice(choices)
        return name if name.replace("_", "a").isalnum() else '"' + name.replace('"', '""') + '"'


class GoldMutator:
    """Spider gold statements of one database, mutated: one or two of their names replaced
    (each statement parsed once), then maybe the whole wrapped in a CTE."""

    def __init__(self, schema: Schema, rng: random.Random, gold: list[str]):
        self.rng = rng
        self.gold = gold
        self.maker = StatementMaker(schema, rng)
        self.parsed: dict[str, list[Token]] = {}

    def statement(self) -> str:
        rng = self.rng
        sql = rng.choice(self.gold)
        if sql not in self.parsed:
            try:
                self.parsed[sql] = list(parse_tree(dialect(), sql).tokens())
            except ParseError:  # two gold lines are not SQLite
                self.parsed[sql] = []
        tokens = self.parsed[sql]
        names = [n for n, t in enumerate(tokens) if t.terminal in ("COLUMN_NAME", "TABLE_NAME")]
        data = sql.encode("utf-8")
        for at in sorted(rng.sample(names, min(len(names), rng.randint(1, 2))), reverse=True):
            token = tokens[at]
            replacement = self.replacement(tokens, at).encode("utf-8")
            data = data[: token.start] + replacement + data[token.end :]
        sql = data.decode("utf-8")
        roll = rng.random()
        if roll < 0.08:
            return f"WITH c AS ({sql.rstrip(';')}) SELECT * FROM c;"
        if roll < 0.14:
            body = sql.rstrip(";")
            return (
                f"WITH RECURSIVE c AS ({body} UNION ALL SELECT * FROM c LIMIT 5) SELECT 1 FROM c;"
            )
        return sql

    def replacement(self, tokens: list[Token], at: int) -> str:
        """What replaces the name `tokens[at]`: mostly a column of the tables the statement
        reads (so that SQLite binds most mutants), else any column, a row key name, an
        expression or a subquery; for a table, another table or a NATURAL JOIN."""
        rng, maker = self.rng, self.maker
        maker.reset()
        token = tokens[at]
        if token.terminal == "TABLE_NAME":
            if rng.random() < 0.5:
                return f"{token.text} NATURAL JOIN {maker.table()}"
            return maker.table()
        read = {t.text.strip('"[]`').lower() for t in tokens if t.terminal == "TABLE_NAME"}
        near = [c for name, cols in maker.tables.items() if name.lower() in read for c in cols]
        columns = near if near and rng.random() < 0.8 else maker.all_columns
        qualified = at > 0 and tokens[at - 1].terminal == "QUALIFIER"
        roll = rng.random()
        if roll < 0.6 or qualified:
            return maker.name(columns, quoted=not qualified)
        if roll < 0.8:
            return maker.expr([columns], 2)
        return f"({maker.select([columns], 2, 1)})"


def corpus_walker(zoo: Corpus, rng: random.Random) -> Iterator[str]:
    """Statements of the walk arm over the zoo: a guide for its schema (no role: every name is
    spellable), a vocabulary of the walk test's words plus the zoo's names, row key names and
    the constructs of the findings; word tokens are preferred three to one."""
    words = [*walk._SQL_WORDS, *walk._CROSSING, *ROW_KEY_NAMES, '"rowid"', '"ssn"', '"salary"']
    words += ["NATURAL", "RECURSIVE", "UNION ALL", "(SELECT", "USING (", " WITH", "ALL"]
    words += [t.name for t in zoo.schema.tables]
    words += [c.name for t in zoo.schema.tables for c in t.columns]
    spellings = [bytes((b,)) for b in range(256)]
    spellings += sorted({w.encode() for w in words} | {b" " + w.encode() for w in words})
    vocab = gr.Vocabulary([*spellings, None], eos_token_ids=len(spellings))
    guide = gr.compile(gr.Grammar.bundled("sqlite"), vocab, schema=zoo.schema)
    reserve = len(guide.matcher().completion())

    def choose(ids: list[int]) -> int:
        preferred = [i for i in ids if i >= 256]
        return rng.choice(preferred if preferred and rng.random() < 0.75 else ids)

    while True:
        generation = walk.generate(guide, rng, rng.randint(reserve, reserve + 60), choose=choose)
        yield b"".join(vocab.token_bytes(t) for t in generation.tokens[:-1]).decode(
            "utf-8", "surrogateescape"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--statements", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = parser.parse_args()
    counts = run(args.statements, args.seed)
    if args.json:
        print(json.dumps(counts.as_json(), sort_keys=True))
        return
    print(
        f"{counts.statements} statements in {counts.seconds} s "
        f"({dict(counts.by_source)}): {counts.not_parsed} not parsed, {counts.rejected} "
        f"rejected by SQLite, {counts.judged} judged, {counts.denied} denied accesses"
    )
    print(f"bypass (denied by SQLite, not reported by the checker): {counts.bypass}")
    print(f"  ... in statements the checker found clean: {counts.bypass_clean}")
    for text in counts.bypasses[:50]:
        print("  " + text)
    print(f"over-strict (flagged, not read by SQLite): {sum(counts.over_strict.values())}")
    for reason, number in counts.over_strict.most_common():
        print(f"  {number}: {reason}")
        for text in counts.examples[reason]:
            print("    " + text)
    print(f"clean to the checker, rejected by SQLite: {sum(counts.clean_rejected.values())}")
    for reason, number in counts.clean_rejected.most_common():
        print(f"  {number}: {reason}")
    for reason, texts in counts.examples.items():
        if reason.startswith("clean, rejected"):
            print(f"  {reason}\n    {texts[0]}")


if __name__ == "__main__":
    main()

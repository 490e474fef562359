"""Tests of the reference oracle (tests/support/lark_reference.py) and of the bundled SQLite
grammar as the reference reads it.

The oracle's answers on a tiny grammar are computed by hand; a second, deliberately naive
implementation of the *incremental* form of docs/semantics.md (byte-by-byte feeding with
forced emission and requeueing) cross-checks the oracle's one-pass algorithms on random input.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lark import Lark, Token

try:  # tests/conftest.py puts tests/ on sys.path
    from support.lark_reference import OracleError, Reference
except ImportError:
    from tests.support.lark_reference import OracleError, Reference

ROOT = Path(__file__).resolve().parents[1]
SQLITE_GRAMMAR = ROOT / "python" / "gridrail" / "grammars" / "sqlite.lark"

TINY = r"""
start: "select"i item ("," item)* "from"i TABLE ";"
item: expr [["as"i] ALIAS]
?expr: NAME | FUNC expr ")" | NUMBER | STRING
FUNC: /count[ ]*\(/i
TABLE: /[a-z_][a-z0-9_]*/i
NAME: /[a-z_][a-z0-9_]*/i
ALIAS: /[a-z_][a-z0-9_]*/i
NUMBER: /[0-9]+/
STRING: /'[^']*'/
WS: / +/
%ignore WS
"""


@pytest.fixture(scope="module")
def tiny() -> Reference:
    return Reference(TINY)


# --------------------------------------------------------------------------- terminals


def test_terminal_table(tiny: Reference) -> None:
    by_name = {t.name: t for t in tiny.terminals}
    assert by_name["SELECT"].is_literal and by_name["SELECT"].regexp == "(?i:select)"
    assert not by_name["NAME"].is_literal
    assert tiny.ignored == {"WS"}
    # first appearance in the file: "select"i, ",", "from"i, TABLE, ";" (line 1), "as"i,
    # ALIAS (2), NAME, FUNC, ")", NUMBER, STRING (3), then WS's definition.
    order = [t.name for t in tiny.terminals]
    assert order == [
        "SELECT",
        "COMMA",
        "FROM",
        "TABLE",
        "SEMICOLON",
        "AS",
        "ALIAS",
        "NAME",
        "FUNC",
        "RPAR",
        "NUMBER",
        "STRING",
        "WS",
    ]
    assert [t.index for t in tiny.terminals] == list(range(len(order)))


def test_index_order_counts_references_before_definitions() -> None:
    ref = Reference('start: B "x" A\nA: "a"\nB: "b"\n')
    assert [t.name for t in ref.terminals] == ["B", "X", "A"]


def test_rank_index_tie_goes_to_first_defined_and_is_counted() -> None:
    ref = Reference('start: (P | Q) ";"\nQ: /[a-z]+/\nP: /[a-z]+/\n')
    assert [t[0] for t in ref.tokenize("abc;")] == ["P", "SEMICOLON"]
    assert ref.index_ties == 1
    strict = Reference('start: (P | Q) ";"\nQ: /[a-z]+/\nP: /[a-z]+/\n', strict_ties=True)
    with pytest.raises(OracleError):
        strict.tokenize("abc;")


def test_rank_priority_then_literal() -> None:
    ref = Reference('start: (P | Q) ";"\nQ.1: /[a-z]+/\nP: /[a-z]+/\n')
    assert ref.tokenize("abc;")[0][0] == "Q"
    ref = Reference('start: (KW | ID) ";"\nID: /[a-z]+/\nKW: "ab"\n')
    assert ref.tokenize("ab;")[0][0] == "KW"  # literal beats regex on a tie
    assert ref.tokenize("abc;")[0][0] == "ID"  # longest match first
    assert ref.index_ties == 0


# --------------------------------------------------------------------------- EOS gate


def test_mid_lexeme_and_eos(tiny: Reference) -> None:
    assert tiny.first_error("select a from t") is None
    assert not tiny.eos_ok("select a from t")
    assert tiny.eos_ok("select a from t;")
    assert tiny.accepts_sentence("select a from t;  ")
    assert tiny.first_error("select a from t;;") == 16
    assert tiny.first_error("select a fr") is None and not tiny.eos_ok("select a fr")
    assert tiny.first_error("select 'abc") is None and not tiny.eos_ok("select 'abc")
    assert tiny.first_error("") is None and not tiny.eos_ok("")


def test_keyword_versus_identifier(tiny: Reference) -> None:
    # after an item, ALIAS and FROM are both viable: the literal wins the tie ...
    assert [n for n, _, _ in tiny.tokenize("select a from t;") if n != "WS"] == [
        "SELECT",
        "NAME",
        "FROM",
        "TABLE",
        "SEMICOLON",
    ]
    # ... and the longest match wins first
    assert tiny.tokenize("select a fromage from t;")[4][:2] == ("ALIAS", "fromage")
    # where no keyword is viable, a keyword's spelling is an identifier
    assert tiny.accepts_sentence("select from from from;")
    assert tiny.first_error("select a as from t;") == 17  # `from` is the alias here
    # contextual lexing does not need a word boundary after a keyword
    assert tiny.accepts_sentence("selecta from t;")


def test_pending_function_lexeme(tiny: Reference) -> None:
    assert tiny.first_error("select count (") is None
    assert tiny.accepts_sentence("select count (a) from t;")
    assert tiny.tokenize("select count (a) from t;")[2][:2] == ("FUNC", "count (")
    assert tiny.tokenize("select count from t;")[2][:2] == ("NAME", "count")
    # `count ` after an item can still be finalized as an alias: viable, not complete
    assert tiny.first_error("select a count ") is None
    assert not tiny.eos_ok("select a count ")
    assert tiny.accepts_sentence("select a count from t;")
    # but FUNC is not viable after an item: the "(" is the first bad byte
    assert tiny.first_error("select a count (") == 15


def test_unknown_character(tiny: Reference) -> None:
    assert tiny.first_error("select a # from t;") == 9


def test_error_is_max_of_live_extents() -> None:
    # At 0, LONG keeps "a  " live; the forced emission is A, after which " " is dead.
    ref = Reference('start: A B | LONG\nA: "a"\nB: "b"\nLONG: /a[ ]*c/\n')
    assert ref.first_error("a  x") == 3
    assert ref.first_error("a  ") is None
    assert ref.accepts_sentence("a  c") and ref.accepts_sentence("ab")
    assert ref.first_error("a b") == 2  # "a " live for LONG, then dead at "b"


# --------------------------------------------------------------------------- UTF-8 bytes


def test_multibyte_offsets(tiny: Reference) -> None:
    # é = C3 A9: no character starting with C3 can start a NAME.
    assert tiny.first_error("select é") == 7
    # (?i:[a-z]) matches U+017F (C5 BF) in the `regex` module: a name.
    assert tiny.accepts_sentence("select \u017f from t;")
    # U+013F = C4 BF: C4 is viable (U+0130 = C4 B0 matches (?i:i)), BF is not.
    assert tiny.first_error("select \u013f") == 8
    # offsets are in bytes
    assert tiny.first_error("select 'é' #") == 12
    assert tiny.first_error("select 'é' as é") == 15


def test_bytes_input(tiny: Reference) -> None:
    ok = "select 'é".encode()
    assert tiny.first_error(ok[:-1]) is None  # ends inside é, inside a string: viable
    assert not tiny.eos_ok(b"select a from t;"[:-1] + b"\xc3")
    assert tiny.eos_ok(b"select a from t;")
    assert tiny.first_error(b"select \xff") == 7  # never valid UTF-8
    assert tiny.first_error(b"select '\xc3A'") == 9  # bad continuation byte
    assert tiny.first_error("select \u017f".encode()[:-1]) is None
    assert tiny.first_error(b"select \xc3") == 7


# --------------------------------------------------------------------------- cross-check


class _Incremental:
    """docs/semantics.md's incremental form, literally: one character at a time."""

    def __init__(self, ref: Reference):
        self.ref = ref
        self.ip = ref._parser()
        self.pending = ""

    def _viable(self) -> frozenset[str]:
        return self.ref._viable(self.ip)[0]

    def _live(self, r: str) -> bool:
        return any(self.ref._matchers[n].pattern.fullmatch(r, partial=True) for n in self._viable())

    def _longest_accepted_prefix(self, r: str):
        best = None
        for name in self._viable():
            for k in range(len(r), 0, -1):
                if self.ref._matchers[name].pattern.fullmatch(r[:k]):
                    term = self.ref._matchers[name].term
                    if best is None or (k, term.rank) > (best[0], best[1].rank):
                        best = (k, term)
                    break
        return best

    def _emit(self, k: int, term) -> None:
        if not term.ignored:
            self.ip.feed_token(Token(term.name, self.pending[:k]))

    def feed(self, ch: str) -> bool:
        queue = [ch]
        while queue:
            self.pending += queue.pop(0)
            if self._live(self.pending):
                continue
            best = self._longest_accepted_prefix(self.pending)
            if best is None:
                return False
            k, term = best
            self._emit(k, term)
            rest, self.pending = self.pending[k:], ""
            queue = list(rest) + queue
        return True

    def eos(self) -> bool:
        while self.pending:
            best = self._longest_accepted_prefix(self.pending)
            if best is None:
                return False
            k, term = best
            self._emit(k, term)
            self.pending = self.pending[k:]
        return "$END" in self.ip.accepts()


def _incremental_first_error(ref: Reference, text: str) -> int | None:
    sim = _Incremental(ref)
    for i, ch in enumerate(text):
        if not sim.feed(ch):
            return i
    return None


def _incremental_eos(ref: Reference, text: str) -> bool:
    sim = _Incremental(ref)
    return all(sim.feed(ch) for ch in text) and sim.eos()


FRAGMENTS = ["select", "from", "as", "count", "count (", "a", "t", "x1", " ", "  ", ",", "(", ")"]
FRAGMENTS += [";", "'s'", "'", "7", "#", "fr", "se"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=12))
def test_one_pass_matches_incremental_form(tiny: Reference, parts: list[str]) -> None:
    text = "".join(parts)
    assert tiny.first_error(text) == _incremental_first_error(tiny, text)
    assert tiny.eos_ok(text) == _incremental_eos(tiny, text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab c", max_size=8))
def test_max_rule_matches_incremental_form(text: str) -> None:
    ref = _MAXRULE
    assert ref.first_error(text) == _incremental_first_error(ref, text)
    assert ref.eos_ok(text) == _incremental_eos(ref, text)


_MAXRULE = Reference('start: (A B | LONG)+\nA: "a"\nB: "b"\nLONG: /a[ ]*c/\nWS: / /\n%ignore WS\n')


# --------------------------------------------------------------------------- SQLite grammar


@pytest.fixture(scope="module")
def sqlite() -> Reference:
    return Reference(SQLITE_GRAMMAR.read_text(encoding="utf-8"), strict_ties=True)


def test_sqlite_grammar_is_lalr1_without_conflicts() -> None:
    from lark.lexer import Lexer

    class NoLexer(Lexer):
        def __init__(self, conf):
            pass

        def lex(self, *args):
            raise NotImplementedError

    # strict=True turns shift/reduce conflicts into errors (lark's own lexers would also need
    # interegular for strict mode; the parser tables are what is checked here)
    Lark(SQLITE_GRAMMAR.read_text(encoding="utf-8"), parser="lalr", lexer=NoLexer, strict=True)


SQLITE_VALID = [
    "SELECT * FROM t;",
    "select distinct a, b from t;",
    "SELECT ALL a FROM t;",
    "SELECT t.* , u.d FROM t, u;",
    "SELECT -a, +a, ~a, - -a, a * 2 + b / 3 - c % 4 FROM t;",
    "SELECT b || 'x' || \"y\" FROM t;",
    "SELECT a = 1, a == 1, a != 1, a <> 1, a < 1, a <= 1, a > 1, a >= 1 FROM t;",
    "SELECT a & 1, a | 2, a << 1, a >> 1 FROM t;",
    "SELECT * FROM t WHERE a = 1 AND b = 'x' OR NOT c > 2;",
    "SELECT count(*), count(DISTINCT a), count (a), sum(a), avg(c), min(a), max(a), total(a),"
    " group_concat(b, ',') FROM t;",
    "SELECT CASE a WHEN 1 THEN 'one' WHEN 2 THEN 'two' ELSE 'many' END FROM t;",
    "SELECT CASE WHEN a > 1 THEN 1 ELSE 0 END AS flag FROM t;",
    "SELECT CAST(a AS TEXT), cast (c as INTEGER), CAST(b AS VARCHAR(20)),"
    " CAST(c AS DECIMAL(10, 2)), CAST(a AS DOUBLE PRECISION) FROM t;",
    "SELECT abs(a), lower(b), upper(b), length(b), substr(b, 1, 2), round(c, 2), coalesce(b, 'n'),"
    " ifnull(b, ''), nullif(a, 0), replace(b, 'a', 'b'), trim(b), instr(b, 'x'), typeof(a),"
    " iif(a > 0, 1, 0) FROM t;",
    "SELECT date('now'), datetime('now', '-1 day'), strftime('%Y', date), julianday(date),"
    " time('now') FROM t;",
    "SELECT * FROM t WHERE b LIKE 'a%' AND b NOT LIKE '%z' AND b GLOB 'a*'"
    " AND b LIKE 'a!%' ESCAPE '!';",
    "SELECT * FROM t WHERE a IN (1, 2, 3) AND a NOT IN (SELECT a FROM u) AND a IN ();",
    "SELECT * FROM t WHERE a BETWEEN 1 AND 10 AND c NOT BETWEEN 2 AND 3;",
    "SELECT * FROM t WHERE b IS NULL OR b IS NOT NULL OR a IS 1 OR a IS NOT 2 OR b ISNULL"
    " OR b NOTNULL OR b NOT NULL;",
    "SELECT * FROM t WHERE a IS NOT DISTINCT FROM 1 OR a IS DISTINCT FROM 2;",
    "SELECT * FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.a = t.a)"
    " AND NOT EXISTS (SELECT 1 FROM u);",
    "SELECT (SELECT max(a) FROM u), (a + 1) * 2 FROM t;",
    "SELECT * FROM t JOIN u ON t.a = u.a;",
    "SELECT * FROM t INNER JOIN u ON t.a = u.a LEFT JOIN u AS u2 ON u2.a = t.a"
    " LEFT OUTER JOIN u u3 USING (a);",
    "SELECT * FROM t RIGHT JOIN u ON t.a = u.a FULL OUTER JOIN u AS v ON v.a = u.a;",
    "SELECT * FROM t CROSS JOIN u NATURAL JOIN u AS w;",
    "SELECT * FROM t NATURAL LEFT JOIN u;",
    "SELECT * FROM (SELECT a FROM t) AS s JOIN (SELECT a FROM u) s2 ON s.a = s2.a;",
    "SELECT * FROM (t JOIN u ON t.a = u.a);",
    'SELECT a AS x, b y, c "z z" FROM t AS T1;',
    "SELECT T1.a FROM t T1 WHERE T1.\"weird col\" = 'q';",
    "SELECT a, count(*) FROM t GROUP BY a HAVING count(*) > 1 ORDER BY a DESC, b ASC NULLS LAST"
    " LIMIT 10 OFFSET 5;",
    "SELECT a FROM t ORDER BY a NULLS FIRST LIMIT 5, 10;",
    "SELECT a FROM t UNION SELECT a FROM u UNION ALL SELECT a FROM u INTERSECT SELECT a FROM t"
    " EXCEPT SELECT e FROM u ORDER BY 1 LIMIT 3;",
    "WITH x AS (SELECT a FROM t), y(k) AS (SELECT e FROM u) SELECT * FROM x JOIN y ON x.a = y.k;",
    "WITH RECURSIVE cnt(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM cnt WHERE n < 10)"
    " SELECT n FROM cnt;",
    "WITH x AS MATERIALIZED (SELECT 1), z AS NOT MATERIALIZED (SELECT 2) SELECT * FROM x, z;",
    "VALUES (1, 2), (3, 4);",
    "INSERT INTO t VALUES (1, 'a', 1.5, 'w', '2020-01-01', 3, 4);",
    "INSERT INTO t (a, b) VALUES (1, 'a'), (2, 'b');",
    "INSERT OR REPLACE INTO u (a, d, e) SELECT a, b, 1 FROM t;",
    "INSERT OR IGNORE INTO u DEFAULT VALUES;",
    "REPLACE INTO u VALUES (1, 'x', 2);",
    "INSERT INTO u (a) VALUES (1) RETURNING a, d AS dd;",
    "UPDATE t SET a = 1, b = 'x' WHERE c > 2;",
    "UPDATE OR ABORT t SET (a, b) = (1, 'x');",
    "UPDATE t SET a = u.e FROM u WHERE u.a = t.a;",
    "DELETE FROM t WHERE a = 1;",
    "DELETE FROM t;",
    "WITH d AS (SELECT 1 AS k) DELETE FROM t WHERE a IN (SELECT k FROM d);",
    "SELECT 1, 1.5, .5, 1e10, 1.5E-3, 0x1F, 'it''s', X'ABCD', NULL, TRUE, FALSE, CURRENT_DATE,"
    " CURRENT_TIME, CURRENT_TIMESTAMP;",
    "SELECT a -- trailing comment\n FROM /* block\n comment */ t;",
    'sElEcT A fRoM T wHeRe B = "Bob";',
    'SELECT `a`, [b], "c" FROM `t`;',
    'SELECT date, count, "cast" FROM t;',
    "SELECT b COLLATE NOCASE FROM t ORDER BY b COLLATE BINARY;",
    "SELECT (a, b) = (1, 'x') FROM t;",
    "SELECT a, row_number() OVER (PARTITION BY b ORDER BY c DESC), sum(a) OVER (),"
    " rank() OVER (ORDER BY a ROWS BETWEEN 1 PRECEDING AND CURRENT ROW),"
    " count(*) OVER (ROWS UNBOUNDED PRECEDING EXCLUDE TIES) FROM t;",
    "SELECT count(*) FILTER (WHERE a > 1), group_concat(b ORDER BY b) FROM t;",
    "SELECT x FROM [order];",
    "SELECT b -> '$.k', b ->> '$.k' FROM t;",
    "SELECT random(), pi(), last_insert_rowid();",
    "SELECT 1 WHERE 1 NOT IN (2) AND 'a' NOT GLOB 'b';",
    "SELECT a FROM t GROUP BY a HAVING count(*) > 0;",
    "SELECT a FROM t WHERE a = (SELECT 1) AND -(a) < 3;",
    "SELECT * FROM t ; ",
    "SELECT 名前 FROM 表;",
]

SQLITE_INVALID = [
    "SELECT a FROM t",  # the ";" is required
    "SELECT a FROM t WHERE;",
    "SELECT a FROM t ORDER BY a LIMIT 1 UNION SELECT a FROM u;",
    "SELECT count(*) FROM t GROUP a;",
    "SELECT a FROM t; SELECT b FROM t;",
    "SELECT a b c FROM t;",
    "SELECT a FROM t WHERE a = = 1;",
    "SELECT a FROM t t2 t3;",
    "INSERT INTO t VALUES 1;",
    "UPDATE t SET a;",
    "DELETE t;",
    "SELECT * FROM t WHERE a BETWEEN 1;",
    "SELECT a FROM t WHERE b LIKE;",
    "SELECT count (*) count(*) FROM t;",
]


@pytest.mark.parametrize("sql", SQLITE_VALID)
def test_sqlite_accepts(sqlite: Reference, sql: str) -> None:
    assert sqlite.first_error(sql) is None
    assert sqlite.accepts_sentence(sql)


@pytest.mark.parametrize("sql", SQLITE_INVALID)
def test_sqlite_rejects(sqlite: Reference, sql: str) -> None:
    assert not sqlite.accepts_sentence(sql)


def _names(ref: Reference, sql: str) -> list[tuple[str, str]]:
    return [(n, v) for n, v, _ in ref.tokenize(sql) if n not in ref.ignored]


def test_sqlite_lexing_conventions(sqlite: Reference) -> None:
    toks = _names(sqlite, 'SELECT T1.name, count (*), T2.* FROM t AS T1 WHERE x = "Bob";')
    assert ("QUALIFIER", "T1.") in toks and ("COLUMN_NAME", "name") in toks
    assert ("FUNCTION_NAME", "count (") in toks and ("QUALIFIER", "T2.") in toks
    assert ("TABLE_NAME", "t") in toks and ("TABLE_ALIAS", "T1") in toks
    assert ("DQ_STRING", '"Bob"') in toks
    # where only an identifier is viable, a double-quoted token is one
    assert ("TABLE_NAME", '"my table"') in _names(sqlite, 'SELECT a FROM "my table";')
    assert ("COLUMN_ALIAS", '"x"') in _names(sqlite, 'SELECT a AS "x" FROM t;')
    # a function name without "(" is a column; CAST needs its "(" too
    assert ("COLUMN_NAME", "count") in _names(sqlite, "SELECT count FROM t;")
    assert ("COLUMN_NAME", "cast") in _names(sqlite, "SELECT cast FROM t;")
    # declared names
    toks = _names(sqlite, "WITH c(k) AS (SELECT 1) SELECT k AS z FROM c;")
    assert ("CTE_NAME", "c") in toks and ("COLUMN_ALIAS", "k") in toks
    assert ("COLUMN_ALIAS", "z") in toks and ("TABLE_NAME", "c") in toks


def test_sqlite_viable_prefixes(sqlite: Reference) -> None:
    assert sqlite.first_error("SELECT count ") is None  # may still become `count (`
    assert sqlite.first_error("SELECT a count ") is None  # alias
    assert sqlite.first_error("SELECT a count (") == 15
    assert sqlite.first_error("SELECT T1.") is None
    assert sqlite.first_error("SELECT a FROM t WHERE b = \"it's") is None
    assert not sqlite.eos_ok("SELECT a FROM t")
    assert sqlite.eos_ok("SELECT a FROM t;")
    assert sqlite.first_error("SELECT a FROM t ORDER BY a LIMIT 1 UNION") == 35


def _spider_gold() -> Path | None:
    candidates = [os.environ.get("GRIDRAIL_SPIDER_DIR", "")]
    candidates += [
        str(ROOT / "shared" / "data" / "spider"),
        str(ROOT.parent / "shared" / "data" / "spider"),
    ]
    candidates += ["/work/shared/data/spider"]
    for c in candidates:
        if c and (Path(c) / "train_gold.sql").is_file():
            return Path(c) / "train_gold.sql"
    return None


def test_sqlite_spider_train_coverage(sqlite: Reference) -> None:
    gold = _spider_gold()
    if gold is None:
        pytest.skip("Spider training data not found")
    rejected = []
    lines = gold.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        sql = line.split("\t", 1)[0].rstrip()
        sql = sql if sql.endswith(";") else sql + ";"
        if not sqlite.accepts_sentence(sql):
            rejected.append(number)
    # the two data errors: ORDER BY ... LIMIT before INTERSECT (SQLite rejects them too)
    assert rejected == [5939, 5940]

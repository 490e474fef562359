"""Tests of the reference oracle (tests/support/lark_reference.py) and of the bundled SQLite
grammar as the reference reads it.

The oracle's answers on tiny grammars are computed by hand from docs/semantics.md; a second,
deliberately naive transcription of the definitions (lark's interactive parser copied for every
probe, every regex tried on every string, plain recursion for rule (ii)) cross-checks the
oracle's ``first_error`` / ``is_viable`` / ``eos_ok`` on random input.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st
from lark import Lark, Token

from assets import spider_gold

try:  # tests/conftest.py puts tests/ on sys.path
    from support.lark_reference import REGEX_FLAGS, OracleError, Reference
except ImportError:
    from tests.support.lark_reference import REGEX_FLAGS, OracleError, Reference

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

# A non-reserved keyword: MATCH is a regex of the identifiers' class, defined before them.
SOFT = r"""
MATCH: /match/i
NAME: /[a-z_][a-z0-9_]*/i
ALIAS: /[a-z_][a-z0-9_]*/i
WS: / +/
%ignore WS
start: "select"i NAME [ALIAS | MATCH NAME] "from"i NAME ";"
"""

# Shadowing by priority: HI (priority 1) shadows NAME on "h..." lexemes, whatever the context.
PRIO = r"""
start: NAME ";" | "#" HI ";"
NAME: /[a-z]+/
HI.1: /h[a-z]*/
"""


@pytest.fixture(scope="module")
def tiny() -> Reference:
    return Reference(TINY)


@pytest.fixture(scope="module")
def soft() -> Reference:
    return Reference(SOFT)


# --------------------------------------------------------------------------- terminals


def test_terminal_table(tiny: Reference) -> None:
    by_name = {t.name: t for t in tiny.terminals}
    assert by_name["SELECT"].is_literal and by_name["SELECT"].regexp == "(?i:select)"
    assert by_name["SELECT"].shadow_class == (0, True)
    assert not by_name["NAME"].is_literal and by_name["NAME"].shadow_class == (0, False)
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


def test_index_tie_goes_to_first_defined_and_is_counted() -> None:
    grammar = 'start: (P | Q) ";"\nQ: /[a-z]+/\nP: /[a-z]+/\n'
    ref = Reference(grammar)
    assert [t[0] for t in ref.tokenize("abc;")] == ["P", "SEMICOLON"]  # P: first in the rule
    assert ref.index_ties == 1 and ref.tie_groups == {("P", ("Q",)): 1}
    with pytest.raises(OracleError):
        Reference(grammar, strict_ties=True).tokenize("abc;")


def test_no_tie_when_only_one_candidate_of_the_top_class_is_viable() -> None:
    ref = Reference('start: P ";" | "#" Q ";"\nQ: /[a-z]+/\nP: /[a-z]+/\n', strict_ties=True)
    assert [t[0] for t in ref.tokenize("abc;")] == ["P", "SEMICOLON"]
    assert [t[0] for t in ref.tokenize("#abc;")] == ["HASH", "Q", "SEMICOLON"]
    assert ref.index_ties == 0


def test_literal_shadows_regex_whatever_the_context() -> None:
    ref = Reference('start: (KW | ID) ";" | "#" ID ";"\nID: /[a-z]+/\nKW: "ab"\n')
    assert ref.tokenize("ab;")[0][0] == "KW"  # literal class beats the regex class
    assert ref.tokenize("abc;")[0][0] == "ID"  # longest match first
    assert ref.accepts_sentence("#abc;")
    # after "#" only ID is viable, but the literal KW shadows it: rejected at the ";"
    assert not ref.accepts_sentence("#ab;")
    assert ref.first_error("#ab") is None  # "ab" may still grow into an ID
    assert ref.first_error("#ab;") == 3
    assert ref.index_ties == 0


def test_priority_class_shadows_lower_classes() -> None:
    ref = Reference(PRIO)
    assert ref.accepts_sentence("abc;") and ref.accepts_sentence("#hat;")
    # "hat" is a NAME lexeme too, but HI's class (1, regex) shadows NAME's (0, regex) and HI
    # is not viable at the start: rejected when the lexeme ends
    assert not ref.accepts_sentence("hat;")
    assert ref.first_error("hat") is None  # (i): "hat" may still grow as a NAME
    assert ref.first_error("hat;") == 3
    assert not ref.eos_ok("hat")
    # after "#" only HI is viable: "a" can only grow into a NAME, and NAME is not viable
    assert ref.first_error("#abc;") == 1


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


# --------------------------------------------------------------------------- maximal munch


def test_maximal_munch_over_all_terminals(tiny: Reference) -> None:
    # `selectx` is one identifier lexeme (never SELECT + x); no identifier is viable at the
    # start, so the prefix dies at the "x"
    assert tiny.first_error("selectx") == 6
    assert tiny.first_error("selectx from t;") == 6
    assert tiny.first_error("selecta from t;") == 6
    with pytest.raises(OracleError):
        tiny.tokenize("selectx from t;")
    assert tiny.first_error("select") is None  # SELECT is viable


def test_keyword_versus_identifier(tiny: Reference) -> None:
    assert [n for n, _, _ in tiny.tokenize("select a from t;") if n != "WS"] == [
        "SELECT",
        "NAME",
        "FROM",
        "TABLE",
        "SEMICOLON",
    ]
    assert tiny.tokenize("select a fromage from t;")[4][:2] == ("ALIAS", "fromage")
    # a literal keyword is reserved: `from` is never a name, whatever the context
    assert tiny.first_error("select a from from") is None  # may still grow: `fromage`
    assert not tiny.eos_ok("select a from from")
    assert tiny.first_error("select a from from;") == 18  # the ";" ends the lexeme `from`
    assert tiny.first_error("select a from from ") == 18
    assert tiny.first_error("select from from from;") == 11
    assert tiny.first_error("select a as from t;") == 16
    assert tiny.accepts_sentence("select a as fromage from t;")


def test_non_reserved_keyword_regex(soft: Reference) -> None:
    assert [t.name for t in soft.terminals][:3] == ["MATCH", "NAME", "ALIAS"]
    # where only a name is viable, `match` is a name
    assert [n for n, _, _ in soft.tokenize("select match from t;") if n != "WS"][1] == "NAME"
    assert soft.accepts_sentence("select a from match;")
    assert soft.accepts_sentence("select a as_ from t;")
    # after a name, MATCH and ALIAS are both viable: MATCH is defined first and wins the tie
    before = soft.index_ties
    toks = [(n, v) for n, v, _ in soft.tokenize("select a match b from t;") if n != "WS"]
    assert toks[2] == ("MATCH", "match") and toks[3] == ("NAME", "b")
    assert soft.index_ties == before + 1
    assert soft.tie_groups[("MATCH", ("ALIAS",))] >= 1
    # so `match` cannot be the alias there: the FROM that follows is rejected
    assert not soft.accepts_sentence("select a match from t;")
    assert soft.first_error("select a match from t;") == 19


def test_pending_lexeme_saved_by_rule_ii(tiny: Reference) -> None:
    assert tiny.first_error("select count (") is None  # (i): FUNC is viable
    assert tiny.accepts_sentence("select count (a) from t;")
    assert tiny.tokenize("select count (a) from t;")[2][:2] == ("FUNC", "count (")
    assert tiny.tokenize("select count from t;")[2][:2] == ("NAME", "count")
    # after an item, `count ` can only still grow into FUNC, which is not viable: (i) fails;
    # (ii): its accepting prefix `count` has a winner (ALIAS) and a byte such as "f" ends the
    # lexeme there (emit ALIAS, rescan " f": WS, then `f` may grow into FROM)
    assert tiny.is_viable("select a count ")
    assert tiny.first_error("select a count ") is None
    assert tiny.first_error("select a count   ") is None
    assert not tiny.eos_ok("select a count ")
    assert tiny.accepts_sentence("select a count from t;")
    # `count (` is an accepting prefix of FUNC only, which has no winner: the "(" is the error
    assert not tiny.is_viable("select a count (")
    assert tiny.first_error("select a count (") == 15
    # after the alias only ",", FROM may follow
    assert tiny.first_error("select a count ;") == 15


def test_dead_lexeme_forces_the_emission() -> None:
    # At 0, LONG keeps "a  " live; the forced emission is A, after which " " is dead.
    ref = Reference('start: A B | LONG\nA: "a"\nB: "b"\nLONG: /a[ ]*c/\n')
    assert ref.first_error("a  x") == 3
    assert ref.first_error("a  ") is None
    assert ref.accepts_sentence("a  c") and ref.accepts_sentence("ab")
    assert ref.first_error("a b") == 2  # "a " live for LONG, then dead at "b"


def test_a_prefix_is_viable_only_if_every_shorter_prefix_is() -> None:
    # `ax`: LONG is not viable, so (i) fails; (ii): `a` is emitted as A, but the rest `x` plus
    # a byte that kills `ax` (neither x, y nor z) never lexes. `axy` would pass the check on
    # its own (";" kills it, A then XY), but viability is prefix-closed by definition: a decoder
    # never gets past `ax`, so `axy` and `axy;` are not in the language.
    ref = Reference('start: A XY ";" | "#" LONG\nA: "a"\nXY: "xy"\nLONG: /a[xy]*z/\n')
    assert ref.is_viable("a") and not ref.is_viable("ax") and not ref.is_viable("axy")
    assert ref.first_error("axy;") == 1
    assert not ref.accepts_sentence("axy;")


def test_unknown_character(tiny: Reference) -> None:
    assert tiny.first_error("select a # from t;") == 9


# --------------------------------------------------------------------------- UTF-8 bytes


def test_multibyte_offsets(tiny: Reference) -> None:
    # é = C3 A9: no character starting with C3 can start a NAME.
    assert tiny.first_error("select é") == 7
    # ASCII semantics (docs/semantics.md): (?i:[a-z]) does not match U+017F (C5 BF) nor U+0130
    # (C4 B0), which Unicode folding relates to s and i, so C5 and C4 cannot start a NAME.
    assert tiny.first_error("select \u017f from t;") == 7
    assert tiny.first_error("select \u0130") == 7
    # A lead byte is viable when some character starting with it is: é = C3 A9, ê = C3 AA.
    accents = Reference('start: "a" W ";"\nW: /é|ë/\n')
    assert accents.accepts_sentence("aé;")
    assert accents.first_error("aê;") == 2
    assert accents.first_error("aê;".encode()[:2]) is None
    # offsets are in bytes
    assert tiny.first_error("select 'é' #") == 12
    assert tiny.first_error("select 'é' as é") == 15


def test_bytes_input(tiny: Reference) -> None:
    ok = "select 'é".encode()
    assert tiny.first_error(ok[:-1]) is None  # ends inside é, inside a string: viable
    assert tiny.is_viable(ok[:-1])
    assert not tiny.eos_ok(b"select a from t;"[:-1] + b"\xc3")
    assert tiny.eos_ok(b"select a from t;")
    assert tiny.first_error(b"select \xff") == 7  # never valid UTF-8
    assert not tiny.is_viable(b"select \xff")
    assert tiny.first_error(b"select '\xc3A'") == 9  # bad continuation byte
    assert tiny.first_error("select \u017f".encode()[:-1]) == 7  # no NAME starts with C5
    assert tiny.first_error(b"select \xc3") == 7
    assert not tiny.is_viable(b"select \xc3")


# --------------------------------------------------------------------------- cross-check

_ASCII = [chr(b) for b in range(128)]


class _Naive:
    """docs/semantics.md transcribed a second time, as naively as possible."""

    def __init__(self, grammar_text: str, ref: Reference):
        from lark.lexer import Lexer

        class NoLexer(Lexer):
            def __init__(self, conf):
                pass

            def lex(self, *args):
                raise NotImplementedError

        self.lark = Lark(grammar_text, parser="lalr", lexer=NoLexer, g_regex_flags=re.ASCII)
        self.terms = ref.terminals  # the terminal table is tested above
        self.patterns = {t.name: regex.compile(t.regexp, REGEX_FLAGS) for t in self.terms}
        self.ignored = ref.ignored

    def _v(self, ip) -> set[str]:
        return (ip.accepts() - {"$END"}) | set(self.ignored)

    def _live(self, s: str, names) -> bool:
        return any(self.patterns[n].fullmatch(s, partial=True) for n in names)

    def _longest_accepting(self, r: str):
        for k in range(len(r), 0, -1):
            cands = [t for t in self.terms if self.patterns[t.name].fullmatch(r[:k])]
            if cands:
                return k, cands
        return None

    def _winner(self, cands, v):
        top = max((t.priority, t.is_literal) for t in cands)
        ok = [t for t in cands if (t.priority, t.is_literal) == top and t.name in v]
        return min(ok, key=lambda t: t.index) if ok else None

    def _emit(self, ip, r: str):
        """Emit the longest accepting prefix of r: (new parser, its length), or None."""
        best = self._longest_accepting(r)
        if best is None:
            return None
        k, cands = best
        term = self._winner(cands, self._v(ip))
        if term is None:
            return None
        ip = ip.copy()
        if not term.ignored:
            ip.feed_token(Token(term.name, r[:k]))
        return ip, k

    def feed(self, state, ch: str):
        ip, r = state
        queue = [ch]
        while queue:
            c = queue.pop(0)
            if self._live(r + c, self.patterns):
                r += c
                continue
            emitted = self._emit(ip, r)
            if emitted is None:
                return None
            ip, k = emitted
            queue = list(r[k:] + c) + queue
            r = ""
        return ip, r

    def viable(self, state, depth: int = 3) -> bool:
        ip, r = state
        if not r or self._live(r, self._v(ip)):
            return True
        if depth == 0 or self._emit(ip, r) is None:
            return False
        for c in _ASCII:
            if not self._live(r + c, self.patterns):
                nxt = self.feed(state, c)
                if nxt is not None and self.viable(nxt, depth - 1):
                    return True
        return False

    def run(self, text: str) -> tuple[int | None, bool, bool]:
        """(first_error, is_viable, eos_ok) for an ASCII text."""
        state = (self.lark.parse_interactive(), "")
        first = None
        for i, ch in enumerate(text):
            state = self.feed(state, ch)
            if state is None or not self.viable(state):
                first = i
                break
        state = (self.lark.parse_interactive(), "")
        for ch in text:
            state = self.feed(state, ch)
            if state is None:
                return first, False, False
        viable = self.viable(state)
        ip, r = state
        while r:
            emitted = self._emit(ip, r)
            if emitted is None:
                return first, viable, False
            ip, k = emitted
            r = r[k:]
        return first, viable, "$END" in ip.accepts()


def _check(grammar_text: str, ref: Reference, text: str) -> None:
    naive = _NAIVE.setdefault(grammar_text, _Naive(grammar_text, ref))
    first, viable, eos = naive.run(text)
    assert ref.first_error(text) == first
    assert ref.is_viable(text) == viable
    assert ref.eos_ok(text) == eos
    assert viable == (first is None)  # viability is prefix-closed on these inputs


_NAIVE: dict[str, _Naive] = {}
FRAGMENTS = ["select", "from", "as", "count", "count (", "a", "t", "x1", " ", "  ", ",", "(", ")"]
FRAGMENTS += [";", "'s'", "'", "7", "#", "fr", "se", "selectx", "fromage"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=12))
def test_tiny_matches_naive_transcription(tiny: Reference, parts: list[str]) -> None:
    _check(TINY, tiny, "".join(parts))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["select", "match", "from", "a", "t", " ", ";", "as_"]), max_size=9)
)
def test_soft_keyword_matches_naive_transcription(soft: Reference, parts: list[str]) -> None:
    _check(SOFT, soft, "".join(parts))


_MAXRULE = 'start: (A B | LONG)+\nA: "a"\nB: "b"\nLONG: /a[ ]*c/\nWS: / /\n%ignore WS\n'


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab c", max_size=8))
def test_max_rule_matches_naive_transcription(text: str) -> None:
    _check(_MAXRULE, _REFS.setdefault(_MAXRULE, Reference(_MAXRULE)), text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="h#a;", max_size=6))
def test_priority_matches_naive_transcription(text: str) -> None:
    _check(PRIO, _REFS.setdefault(PRIO, Reference(PRIO)), text)


_REFS: dict[str, Reference] = {}


# --------------------------------------------------------------------------- SQLite grammar


@pytest.fixture(scope="module")
def sqlite() -> Reference:
    # not strict: the grammar lets the index decide on purpose (see test_sqlite_index_ties)
    return Reference(SQLITE_GRAMMAR.read_text(encoding="utf-8"))


def test_sqlite_grammar_is_lalr1_without_conflicts() -> None:
    from lark.lexer import Lexer

    class NoLexer(Lexer):
        def __init__(self, conf):
            pass

        def lex(self, *args):
            raise NotImplementedError

    # strict=True turns shift/reduce conflicts into errors. The parser tables are what is
    # checked here: lark's own lexers are not built (with interegular, lark's strict lexer
    # check would report the same-class collisions that the grammar resolves by the index on
    # purpose, e.g. DQ_STRING / COLUMN_NAME).
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
    "SELECT count(*) FILTER (WHERE a > 1), group_concat(b, ',') FROM t;",
    "SELECT x FROM [order];",
    "SELECT b -> '$.k', b ->> '$.k' FROM t;",
    "SELECT random(), pi(), last_insert_rowid();",
    "SELECT 1 WHERE 1 NOT IN (2) AND 'a' NOT GLOB 'b';",
    "SELECT a FROM t GROUP BY a HAVING count(*) > 0;",
    "SELECT a FROM t WHERE a = (SELECT 1) AND -(a) < 3;",
    "SELECT * FROM t ; ",
    "SELECT 名前 FROM 表;",
    # non-reserved keywords (SQLite's %fallback ID) stay usable as names
    'SELECT range, ties, match, rows, "end", end, desc, first, last FROM t;',
    "SELECT a FROM match WHERE ties = 1 ORDER BY range DESC;",
    "SELECT COUNT ( DISTINCT t1.name ) FROM CAST AS t2 JOIN actor AS t1 ON t2.aid = t1.aid;",
    "SELECT a desc, b AS asc, c replace FROM t AS offset;",
    "SELECT a FROM t WHERE match = 1 AND range LIKE 'x' AND b MATCH 'y' AND c REGEXP 'z';",
    "SELECT count(*) over, sum(a) filter FROM t;",
    "SELECT sum(a) OVER(PARTITION BY partition ORDER BY rows), count(*) FILTER(WHERE no) FROM t;",
    "WITH RECURSIVE with_(n) AS (SELECT 1) SELECT n FROM with_;",
    "SELECT true, false, current_date, current_time, current_timestamp FROM t;",
    "SELECT a FROM t ORDER BY a NULLS LAST LIMIT 1 OFFSET 1;",
    "INSERT OR ROLLBACK INTO t VALUES (1);",
    "SELECT a FROM t WHERE a LIKE b ESCAPE c;",
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
    # reserved keywords (string literals) are never names, as in SQLite
    "SELECT a FROM from;",
    "SELECT order FROM t;",
    "SELECT a FROM t WHERE group = 1;",
    "SELECT a AS select FROM t;",
    # one lexeme: an identifier, not SELECT followed by `a`
    "SELECTa FROM t;",
    # a keyword SQLite does not reserve still wins where the parser can take it
    "SELECT a like FROM t;",
    "SELECT a match FROM t;",
    # what SQLite refuses where maximal munch alone would read a sentence
    # (bench/dialect_soundness.py finds them)
    "SELECT *;",  # "no tables specified"
    "SELECT a, t.*;",
    "SELECT 1 UNION VALUES (2) ORDER BY 1;",
    "SELECT a AS table FROM t;",  # reserved, although no rule uses it
    "SELECT 1AND 2;",  # one illegal token to SQLite
    "SELECT 0x10000000000000000;",  # hex literal too big
    "SELECT a FROM t NATURAL JOIN u ON 1;",
    "SELECT count(*) OVER (ROWS UNBOUNDED FOLLOWING) FROM t;",
    "SELECT group_concat(b ORDER BY b) FROM t;",  # SQLite 3.44
    "SELECT 'a\x00';",
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
    assert ("SELECT", "SELECT") in toks and ("FROM", "FROM") in toks
    assert ("QUALIFIER", "T1.") in toks and ("COLUMN_NAME", "name") in toks
    assert ("COUNT_OPEN", "count (") in toks and ("QUALIFIER", "T2.") in toks
    assert ("TABLE_NAME", "t") in toks and ("TABLE_ALIAS", "T1") in toks
    assert ("DQ_STRING", '"Bob"') in toks
    # where only an identifier is viable, a double-quoted token is one
    assert ("TABLE_NAME", '"my table"') in _names(sqlite, 'SELECT a FROM "my table";')
    assert ("COLUMN_ALIAS", '"x"') in _names(sqlite, 'SELECT a AS "x" FROM t;')
    # a function name without "(" is a column; CAST without its "(" is none (SQLite refuses
    # `SELECT cast FROM t`), but it may name a table
    assert ("COLUMN_NAME", "count") in _names(sqlite, "SELECT count FROM t;")
    assert sqlite.first_error("SELECT cast FROM t;") is not None
    assert ("TABLE_NAME", "cast") in _names(sqlite, "SELECT a FROM cast;")
    # a non-reserved keyword is a name where no keyword is viable
    assert ("COLUMN_NAME", "range") in _names(sqlite, "SELECT range FROM t;")
    assert ("TABLE_NAME", "MATCH") in _names(sqlite, "SELECT a FROM MATCH;")
    assert ("COLUMN_ALIAS", "desc") in _names(sqlite, "SELECT a desc FROM t;")
    # and a keyword where it is viable (it wins the tie with an identifier by its index)
    assert ("LIKE", "like") in _names(sqlite, "SELECT a like 'x' FROM t;")
    assert ("TRUE", "true") in _names(sqlite, "SELECT true FROM t;")
    assert ("OVER_OPEN", "over (") in _names(sqlite, "SELECT rank() over () FROM t;")
    assert ("COLUMN_ALIAS", "over") in _names(sqlite, "SELECT count(*) over FROM t;")
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
    assert sqlite.first_error("SELECT a FROM from") is None  # may still become `fromage`
    assert sqlite.first_error("SELECT a FROM from;") == 18
    assert sqlite.first_error("SELECTa") == 6
    assert sqlite.first_error("SELECT count(*) over") is None  # alias, or `over (`
    assert sqlite.first_error("SELECT a like") is None
    assert sqlite.first_error("SELECT a like FROM") is None  # may still be `FROMage`
    assert sqlite.first_error("SELECT a like FROM ") == 18  # LIKE won; FROM is reserved


def test_sqlite_known_deviation_function_names_followed_by_paren(sqlite: Reference) -> None:
    # `like (` is one function lexeme (FUNCTION_2_3) by maximal munch; SQLite accepts this statement
    assert sqlite.first_error("SELECT a FROM t WHERE a LIKE ('x');") == 29
    assert sqlite.first_error("SELECT a FROM t WHERE a LIKE ") is None  # (ii): LIKE, then "'"
    assert sqlite.accepts_sentence("SELECT a FROM t WHERE a LIKE 'x';")


_KEYWORD_REGEX_NAMES = """
    WITH RECURSIVE MATERIALIZED BY ASC DESC NULLS FIRST LAST OFFSET REPLACE ROLLBACK ABORT FAIL
    IGNORE LIKE GLOB REGEXP MATCH PARTITION RANGE ROWS GROUPS UNBOUNDED PRECEDING FOLLOWING
    CURRENT ROW EXCLUDE NO OTHERS TIES END CURRENT_DATE CURRENT_TIME CURRENT_TIMESTAMP TRUE
    FALSE FILTER_OPEN OVER_OPEN CAST_OPEN
"""
_IDENTIFIER_NAMES = """
    TABLE_NAME COLUMN_NAME TABLE_ALIAS COLUMN_ALIAS CTE_NAME TYPE_NAME COLLATION_NAME
"""
_KEYWORD_REGEXES = frozenset(_KEYWORD_REGEX_NAMES.split())
_IDENTIFIERS = frozenset(_IDENTIFIER_NAMES.split())


def test_sqlite_lexical_section() -> None:
    ref = Reference(SQLITE_GRAMMAR.read_text(encoding="utf-8"))
    keywords, identifiers = _KEYWORD_REGEXES, _IDENTIFIERS
    by_name = {t.name: t for t in ref.terminals}
    assert keywords <= set(by_name)
    assert all(by_name[k].shadow_class == (0, False) for k in keywords | identifiers)
    assert by_name["DQ_STRING"].shadow_class == (0, False)
    # keyword regexes, then DQ_STRING, then the identifier categories
    last_keyword = max(by_name[k].index for k in keywords)
    first_identifier = min(by_name[k].index for k in identifiers)
    assert last_keyword < by_name["DQ_STRING"].index < first_identifier
    # every other terminal spelled like a keyword is a literal (reserved)
    for t in ref.terminals:
        if t.name not in keywords and regex.fullmatch(r"\(\?i:[a-z_]+\)", t.regexp):
            assert t.is_literal, t.name


def test_sqlite_index_ties(sqlite: Reference) -> None:
    """The index decides only between a lexical-section terminal (non-reserved keyword or
    DQ_STRING) and identifier categories, never between two identifier categories."""
    for sql in SQLITE_VALID:
        sqlite.tokenize(sql)
    sqlite.tokenize('SELECT a like "x", count(*) FROM t WHERE b = "Bob" AND c = true;')
    keywords, identifiers = _KEYWORD_REGEXES | {"DQ_STRING"}, _IDENTIFIERS
    assert sqlite.tie_groups
    winners = set()
    for (winner, others), count in sqlite.tie_groups.items():
        assert winner in keywords and set(others) <= identifiers, (winner, others, count)
        winners.add(winner)
    assert {"DQ_STRING", "LIKE", "TRUE"} <= winners


def test_sqlite_spider_train_coverage(sqlite: Reference) -> None:
    gold = spider_gold()
    rejected = []
    lines = gold.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        sql = line.split("\t", 1)[0].rstrip()
        sql = sql if sql.endswith(";") else sql + ";"
        if not sqlite.accepts_sentence(sql):
            rejected.append(number)
    # the two data errors: ORDER BY ... LIMIT before INTERSECT (SQLite rejects them too)
    assert rejected == [5939, 5940]

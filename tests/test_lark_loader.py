"""Lark-syntax loading: numbering, EBNF expansion (differential against Lark), errors."""

from __future__ import annotations

import re

import lark
import pytest
from lark.lexer import PatternStr

from gridrail import GrammarError
from gridrail.grammar.model import Grammar

SMALL = r"""
?start: stmt+
stmt: "select"i cols "from"i NAME [where] ";"   -> select
    | "delete"i "from"i NAME ";"
cols: NAME ("," NAME)* | "*"
where: "where"i NAME "=" (NUMBER | STRING) ("and"i NAME "=" NUMBER)~0..2
NAME: /[a-z_]+/
STRING: "'" /[^']*/ "'"
%import common.NUMBER
%import common (WS, SQL_COMMENT)
%ignore WS
%ignore SQL_COMMENT
"""

EBNF_CASES = [
    SMALL,
    'start: a b? c* (d | e)+ [f]\na: "a"\nb: "b"\nc: "c"\nd: "d"\ne: "e"\nf: "f"',
    'start: x ("," x)* [","]\nx: "x" | "(" start ")"',
    'start: item+ "x" item*\nitem: "i" ("j" "k")~2',
    'start: ("a" | "b")+ -> many\n     | "c" -> one',
]


def _lark_productions(text: str) -> set[tuple[str, tuple[str, ...], str | None]]:
    parser = lark.Lark(text, parser="lalr")
    by_name = {t.name: t for t in parser.terminals}

    def sym(s) -> str:
        if s.is_term:
            p = by_name[s.name].pattern
            return f"lit:{p.value}:{''.join(p.flags)}" if isinstance(p, PatternStr) else s.name
        return s.name

    return {(r.origin.name, tuple(sym(s) for s in r.expansion), r.alias) for r in parser.rules}


def _our_productions(g: Grammar) -> set[tuple[str, tuple[str, ...], str | None]]:
    def sym(s: str) -> str:
        if g.is_terminal(s):
            t = g.terminal(s)
            if not t.is_literal:
                return s
            value = re.sub(r"\\(.)", r"\1", t.pattern)
            return f"lit:{value}:{t.flags}"
        return s

    return {(p.lhs, tuple(sym(s) for s in p.rhs), p.alias) for p in g.productions}


@pytest.mark.parametrize("text", EBNF_CASES)
def test_ebnf_expansion_matches_lark(text: str) -> None:
    ours = _our_productions(Grammar.from_lark(text))
    theirs = _lark_productions(text)
    assert ours == theirs


def test_terminals_numbered_by_first_appearance() -> None:
    g = Grammar.from_lark(SMALL)
    names = [t.name for t in g.terminals]
    assert names[:4] == ["SELECT", "FROM", "NAME", "SEMICOLON"]
    assert [t.index for t in g.terminals] == list(range(len(names)))
    assert g.ignored == {"WS", "SQL_COMMENT"}
    select = g.terminal("SELECT")
    assert (select.pattern, select.flags, select.is_literal) == ("select", "i", True)
    assert not g.terminal("NAME").is_literal


def test_named_terminal_reused_for_identical_inline_string() -> None:
    g = Grammar.from_lark('start: SEMI ";"\nSEMI: ";"')
    assert [t.name for t in g.terminals] == ["SEMI"]
    assert g.productions[0].rhs == ("SEMI", "SEMI")


def test_priorities_and_composite_terminals() -> None:
    g = Grammar.from_lark(
        'start: KW | ID\nKW.2: "select"i\nID: ("a".."z")+ DIGIT?\n%import common.DIGIT'
    )
    assert g.terminal("KW").priority == 2
    assert re.fullmatch(g.terminal("ID").pattern, "abc7")
    assert not re.fullmatch(g.terminal("ID").pattern, "7abc")


def test_unreachable_rules_and_their_terminals_are_dropped() -> None:
    g = Grammar.from_lark('start: "a"\nunused: "b"')
    assert [t.name for t in g.terminals] == ["A"]
    assert {p.lhs for p in g.productions} == {"start"}


def test_fingerprint_is_canonical() -> None:
    a = Grammar.from_lark(SMALL)
    b = Grammar.from_lark("// a comment\n" + SMALL.replace("\n", "\n\n"))
    c = Grammar.from_lark(SMALL.replace("[where]", "where?"))
    d = Grammar.from_lark(SMALL.replace('"*"', '"**"'))
    assert a.fingerprint == b.fingerprint == c.fingerprint
    assert a.fingerprint != d.fingerprint
    assert re.fullmatch(r"[0-9a-f]{32}", a.fingerprint)


def test_bundled_sqlite_loads() -> None:
    g = Grammar.bundled("sqlite")
    for category in ("TABLE_NAME", "COLUMN_NAME", "TABLE_ALIAS", "COLUMN_ALIAS"):
        assert g.is_terminal(category)


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("start: foo", 1, "undefined rule foo"),
        ('start: "a"\n  | BAR', 2, "undefined terminal BAR"),
        ('start: "a"\nstart: "b"', 2, "defined twice"),
        ("start{x}: x", 1, "templates are not supported"),
        ('start: "a"\n%override start: "b"', 2, "%override is not supported"),
        ("start: A\nA: /a/m", 2, "flag(s) 'm' not supported"),
        ("start: A\nA: B\nB: A", 2, "recursive"),
        ('start: A\nA: b\nb: "x"', 2, "refers to b, which is a rule"),
        ('start: start "a"', 1, "language is empty"),
        ('x: "a"', 0, "no start rule"),
        ("start: A\n%import nowhere.A", 2, "only the bundled modules"),
        ("start: A\n%import common.NOPE", 2, "has no definition NOPE"),
        ('start: "a" ^', 1, "unexpected character"),
        ('start: ("a"', 1, "expected ')'"),
        ('start: ""', 1, "empty string"),
        ('start: "a" | "a"', 1, "twice"),
    ],
)
def test_bad_grammars_name_the_place(text: str, line: int, message: str) -> None:
    with pytest.raises(GrammarError) as info:
        Grammar.from_lark(text, source="bad.lark")
    assert message in str(info.value)
    assert info.value.line == line
    if line:
        assert str(info.value).startswith(f"bad.lark:{line}:")

"""Parse trees (gridrail.parse.tree): the same language as the oracle, the same lexemes, Lark's
tree shape with every token kept."""

from __future__ import annotations

import random
import re
from functools import cache

import pytest
from lark import Lark
from lark import Token as LarkToken
from lark import Tree as LarkTree
from lark.lexer import Lexer

from assets import spider_gold
from gridrail.errors import ParseError
from gridrail.grammar.compiled import CompiledGrammar, compile_grammar
from gridrail.grammar.loader import bundled_grammar_text
from gridrail.grammar.model import Grammar
from gridrail.parse.oracle import Oracle
from gridrail.parse.tree import Token, Tree, TreeParser, parse_tree
from support.lark_reference import Reference

# Spider gold lines (1-based) that are not SQLite: ORDER BY/LIMIT before INTERSECT.
KNOWN_REJECTED_GOLD = (5939, 5940)
SHAPE_SAMPLE = 150
_IGNORED_TEXT = re.compile(r"(?:[ \t\r\n\f]+|--[^\n]*|/\*(?:[^*]|\*+[^*/])*\*+/)*")

SHAPES = r"""
start: item+ tail* ";"
item: "a" _pair
    | "b" -> bee
_pair: "(" NUMBER ")"
?tail: word
     | word "!"  -> shout
     | "(" tail ")"
?word: WORD
WORD: /[a-z]+/
NUMBER: /[0-9]+/
%ignore /[ \t]+/
"""


@cache
def _sqlite() -> CompiledGrammar:
    return compile_grammar(Grammar.bundled("sqlite"))


@cache
def _spider() -> tuple[tuple[int, str], ...]:
    out = []
    with open(spider_gold(), encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            sql = line.rstrip("\n").split("\t", 1)[0].strip()
            out.append((number, sql if sql.endswith(";") else sql + ";"))
    return tuple(out)


def _outline(node: Tree | Token) -> object:
    """Labels and token texts only: terminal names differ between gridrail and lark."""
    if isinstance(node, Token):
        return node.text
    return (node.label, [_outline(c) for c in node.children])


def _lark_outline(node: LarkTree | LarkToken) -> object:
    if isinstance(node, LarkToken):
        return str(node)
    return (str(node.data), [_lark_outline(c) for c in node.children])


class _GivenTokens(Lexer):
    """Feeds lark the lexemes the reference chose, so the two trees share their leaves."""

    def __init__(self, lexer_conf):
        pass

    def lex(self, data):
        yield from data


@cache
def _lark_tree_builder(text: str) -> tuple[Reference, Lark]:
    builder = Lark(
        text, parser="lalr", lexer=_GivenTokens, keep_all_tokens=True, maybe_placeholders=False
    )
    return Reference(text), builder


def _lark_outline_of(grammar_text: str, statement: str) -> object:
    reference, builder = _lark_tree_builder(grammar_text)
    tokens = [
        LarkToken(name, value)
        for name, value, _ in reference.tokenize(statement)
        if name not in reference.ignored
    ]
    return _lark_outline(builder.parse(tokens))


def test_shape_inlines_helpers_and_underscore_rules_and_collapses_single_children() -> None:
    compiled = compile_grammar(Grammar.from_lark(SHAPES))
    tree = parse_tree(compiled, "a(1) b a (22) x (y!) ;")
    assert _outline(tree) == (
        "start",
        [
            ("item", ["a", "(", "1", ")"]),  # `_pair` and the `item+` helper are inlined
            ("bee", ["b"]),  # an alias is never collapsed
            ("item", ["a", "(", "22", ")"]),
            "x",  # ?tail -> ?word -> WORD: collapsed to the token
            ("tail", ["(", ("shout", ["y", "!"]), ")"]),  # three children: kept
            ";",
        ],
    )
    assert _outline(tree) == _lark_outline_of(SHAPES, "a(1) b a (22) x (y!) ;")


def test_empty_rules_are_nodes_without_tokens() -> None:
    compiled = compile_grammar(
        Grammar.from_lark(
            'start: WORD nothing ";" nothing\nnothing:\nWORD: /[a-z]+/\n%ignore " "\n'
        )
    )
    tree = parse_tree(compiled, "ab ;")
    empty = Tree("nothing", ())
    assert tree.children[1::2] == (empty, empty)
    assert (tree.start, tree.end) == (0, 4)  # a trailing empty node does not hide the `;`
    with pytest.raises(ValueError, match="derived no token"):
        _ = empty.start


def test_tokens_carry_terminals_and_byte_offsets() -> None:
    sql = "SELECT T1.name, count (*) FROM \"my t\" AS T1 WHERE x = 'é';"
    tree = parse_tree(_sqlite(), sql)
    tokens = list(tree.tokens())
    data = sql.encode()
    assert [(t.terminal, t.text) for t in tokens[1:5]] == [
        ("QUALIFIER", "T1."),
        ("COLUMN_NAME", "name"),
        ("COMMA", ","),
        ("COUNT_OPEN", "count ("),
    ]
    assert all(data[t.start : t.end].decode() == t.text for t in tokens)
    assert ("TABLE_NAME", '"my t"') in [(t.terminal, t.text) for t in tokens]
    string = tokens[-2]
    assert (string.terminal, string.start, string.end) == ("STRING", len(data) - 5, len(data) - 1)
    assert (tree.start, tree.end) == (0, len(data))


def test_navigation_helpers() -> None:
    tree = parse_tree(_sqlite(), "SELECT a, b FROM t WHERE a > 1;")
    (statement,) = tree.trees()
    core = statement.child("select_core")
    assert core is not None and statement.child("order_by_clause") is None
    columns = core.child("result_columns")
    assert columns is not None
    assert [c.label for c in columns.trees()] == ["expr_column", "expr_column"]
    assert len(columns.terminals("COMMA")) == 1
    assert [t.label for t in core.subtrees()][:3] == [
        "select_core",
        "result_columns",
        "expr_column",
    ]
    where = core.child("where_clause")
    assert where is not None and (where.start, where.end) == (19, 30)


def test_incomplete_statement_fails_at_its_end() -> None:
    with pytest.raises(ParseError) as err:
        parse_tree(_sqlite(), "SELECT a FROM t")
    assert err.value.offset == len("SELECT a FROM t")
    assert "SEMICOLON" in err.value.expected


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT a FROM from;",  # a reserved keyword cannot be a table name
        "SELECT a FROM t WHERE;",
        "SELECT a FROM t; x",
        "SELECT a, FROM t;",
        "SELECT a FROM t WHERE a LIKE ('x');",  # `like(` is a function call
        "SELECT 'unterminated FROM t;",
        "SELEC a FROM t;",
    ],
)
def test_rejections_report_the_oracles_first_error(sql: str) -> None:
    oracle = Oracle(_sqlite())
    with pytest.raises(ParseError) as err:
        parse_tree(_sqlite(), sql)
    first_error = oracle.first_error(sql.encode())
    assert err.value.offset == (len(sql.encode()) if first_error is None else first_error)
    assert err.value.expected


def test_bytes_and_text_give_the_same_tree() -> None:
    sql = "SELECT nom FROM café WHERE x = 1; -- fin"
    assert parse_tree(_sqlite(), sql) == parse_tree(_sqlite(), sql.encode())


def test_spider_gold_parses_iff_the_oracle_accepts_and_leaves_cover_the_input() -> None:
    parser = TreeParser(_sqlite())
    oracle = parser.oracle
    rejected = []
    for number, sql in _spider():
        data = sql.encode()
        try:
            tree = parser.parse(data)
        except ParseError:
            assert not oracle.accepts(data), f"line {number}"
            rejected.append(number)
            continue
        assert oracle.accepts(data), f"line {number}"
        _assert_leaves_cover(tree, data, number)
    assert tuple(rejected) == KNOWN_REJECTED_GOLD


def _assert_leaves_cover(tree: Tree, data: bytes, number: int) -> None:
    """Tokens in order, and between them only whitespace and comments."""
    position = 0
    for token in tree.tokens():
        gap = data[position : token.start].decode()
        assert _IGNORED_TEXT.fullmatch(gap), f"line {number}: {gap!r} at {position}"
        assert data[token.start : token.end].decode() == token.text
        position = token.end
    assert _IGNORED_TEXT.fullmatch(data[position:].decode()), f"line {number}: tail"


def test_spider_gold_shapes_match_lark() -> None:
    """Same leaves (lexed by the independent reference) and same tree as lark's own LALR
    parser with keep_all_tokens, on a sample of the gold statements."""
    text = bundled_grammar_text("sqlite")
    statements = [sql for n, sql in _spider() if n not in KNOWN_REJECTED_GOLD]
    sample = random.Random(11).sample(statements, SHAPE_SAMPLE)
    sample.append(
        "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 5) "
        "SELECT n, -n, CAST(n AS INTEGER), CASE WHEN n > 1 THEN 'x' ELSE \"y\" END "
        "FROM c NATURAL LEFT JOIN (SELECT 1 AS n) AS d ORDER BY n NULLS LAST LIMIT 1, 2;"
    )
    sample.append("UPDATE t AS u SET (a, b) = (1, 2), c = 3 WHERE d IS NOT NULL RETURNING *;")
    for sql in sample:
        assert _outline(parse_tree(_sqlite(), sql)) == _lark_outline_of(text, sql), sql

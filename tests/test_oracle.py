"""The viable-prefix oracle on small grammars with hand-checked answers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridrail import ParseError
from gridrail.grammar.compiled import compile_grammar
from gridrail.grammar.model import Grammar
from gridrail.parse.oracle import Oracle

TINY_SQL = r"""
start: "select"i items "from"i TABLE_NAME [alias] ";"
items: item ("," item)*
item: COLUMN_NAME [COLUMN_ALIAS] | FUNCTION_NAME "*" ")"
alias: TABLE_ALIAS
FUNCTION_NAME: /count[ \t]*\(/i
TABLE_NAME: IDENT
COLUMN_NAME: IDENT
COLUMN_ALIAS: IDENT
TABLE_ALIAS: IDENT
IDENT: /[A-Za-z_][A-Za-z0-9_]*/
%ignore /[ \t\n]+/
"""


@pytest.fixture(scope="module")
def tiny() -> Oracle:
    return Oracle(compile_grammar(Grammar.from_lark(TINY_SQL)))


def _viable(oracle: Oracle, text: str) -> bool:
    return oracle.first_error(text.encode()) is None


def _eos(oracle: Oracle, text: str) -> bool:
    return oracle.eos_ok(oracle.feed(oracle.initial, text.encode()))


def test_mid_lexeme_eos_gate(tiny: Oracle) -> None:
    assert _viable(tiny, "select a from t")
    assert not _eos(tiny, "select a from t")  # `;` is required
    assert _eos(tiny, "select a from t;")
    assert _eos(tiny, "select a from t;  ")  # trailing ignored bytes finalize
    assert not _eos(tiny, "select a from")


def test_keyword_vs_identifier_by_longest_match(tiny: Oracle) -> None:
    # `selecte` can only be an identifier, never SELECT + `e` (as SQLite's tokenizer reads it)
    assert tiny.first_error(b"selected") == 6
    assert not _viable(tiny, "selectx from t;")
    assert _eos(tiny, "select fromage from t;")  # `fromage` is a column, not FROM + age
    assert _eos(tiny, "SELECT a FROM t;")


def test_literal_beats_identifier_on_a_tie(tiny: Oracle) -> None:
    # After a column, both COLUMN_ALIAS and FROM match `from`; the literal wins.
    assert _eos(tiny, "select a from t;")
    assert _eos(tiny, "select a b from t;")
    assert _viable(tiny, "select a from from")  # the table name may still grow: `fromage`
    assert not _viable(tiny, "select a from from ")  # FROM is reserved against TABLE_NAME


def test_pending_lexeme_can_finalize_at_an_earlier_accept(tiny: Oracle) -> None:
    # `count ` is still live as FUNCTION_NAME (`count (`), and `count` alone is an alias.
    assert _viable(tiny, "select a count ")
    assert _eos(tiny, "select a count from t;")
    assert _eos(tiny, "select count (*) from t;")
    assert _eos(tiny, "select count from t;")  # a column named count


def test_error_offsets_and_expected_terminals(tiny: Oracle) -> None:
    with pytest.raises(ParseError) as info:
        tiny.feed(tiny.initial, b"select a frm t")
    # `frm` is an alias; then `t` is an identifier where only `,`/FROM may come
    assert info.value.offset == len("select a frm t") - 1
    assert "FROM" in info.value.expected
    assert tiny.first_error(b"delete") == 0


def test_configurations_are_immutable_forks(tiny: Oracle) -> None:
    base = tiny.feed(tiny.initial, b"select a ")
    left = tiny.feed(base, b"from t;")
    right = tiny.feed(base, b", b from u;")
    assert tiny.eos_ok(left) and tiny.eos_ok(right)
    assert not tiny.eos_ok(base)
    assert tiny.feed(base, b"from t;").stack.states() == left.stack.states()


LALR_SPURIOUS = r"""
start: "a" x "c" | "b" x "d"
x: "x"
%ignore " "
"""


def test_allowed_set_is_simulated_not_read_from_a_merged_row() -> None:
    oracle = Oracle(compile_grammar(Grammar.from_lark(LALR_SPURIOUS)))
    after_a = oracle.feed(oracle.initial, b"a x ")
    after_b = oracle.feed(oracle.initial, b"b x ")
    assert oracle.allowed_terminals(after_a) == ("C",)
    assert oracle.allowed_terminals(after_b) == ("D",)
    assert oracle.first_error(b"a x d") == 4


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="selctfromab ,;(*)unt", max_size=30))
def test_viability_is_prefix_closed(text: str) -> None:
    oracle = Oracle(compile_grammar(Grammar.from_lark(TINY_SQL)))
    data = text.encode()
    first = oracle.first_error(data)
    for k in range(len(data) + 1):
        viable = oracle.first_error(data[:k]) is None
        assert viable == (first is None or k <= first)


def test_configuration_hash_is_rolling_and_path_independent(tiny: Oracle) -> None:
    a = tiny.feed(tiny.initial, b"select a , b from ")
    b = tiny.feed(tiny.initial, b"SELECT a,b  FROM\n")
    c = tiny.feed(tiny.initial, b"select a , ")
    assert a.stack.states() == b.stack.states()
    assert a.stack.hash == b.stack.hash != c.stack.hash
    assert tiny.initial.stack.hash == 0
    # one push mixes only the parent's hash: the stack is never rehashed
    assert a.stack.depth == len(a.stack.states()) - 1


def test_nothing_in_a_configuration_grows_with_the_output(tiny: Oracle) -> None:
    cfg = tiny.feed(tiny.initial, b"select a")
    for _ in range(500):
        cfg = tiny.feed(cfg, b", a")
    # the stack is left-recursive here, so its depth stays bounded; the scan state is one lexeme
    assert cfg.stack.depth < 10
    assert cfg.lexeme_length == 1 and cfg.tail == b""


def test_viability_is_prefix_closed_by_definition() -> None:
    # docs/semantics.md: `ax` fails the check ((ii) looks one byte ahead), so `axy;` is not in
    # the language even though `axy` alone would pass the check.
    text = 'start: A XY ";" | "#" LONG\nA: "a"\nXY: "xy"\nLONG: /a[xy]*z/\n'
    oracle = Oracle(compile_grammar(Grammar.from_lark(text)))
    assert oracle.first_error(b"axy;") == 1
    assert not oracle.accepts(b"axy;")
    assert oracle.accepts(b"#axz")

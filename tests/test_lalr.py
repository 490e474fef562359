"""The LALR(1) table builder: classic grammars, conflicts, errors, lark differential tests,
determinism and grammar reduction."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from lark import Lark
from lark.exceptions import GrammarError as LarkGrammarError
from lark.exceptions import UnexpectedInput
from lark.indenter import PythonIndenter

from grammar_builders import (
    ACCEPTED,
    EXPRESSIONS,
    SQL_SUBSET,
    TokenListLexer,
    derivation_heights,
    dialects_grammar,
    earley_accepts,
    first_error,
    from_lark,
    lark_lalr,
    lark_prefix_statuses,
    lark_table_differences,
    make_grammar,
    mutate,
    prefix_statuses,
    random_grammars,
    random_sentence,
    tiny_grammar,
)
from gridrail import kernels
from gridrail.errors import GrammarConflict, GrammarError
from gridrail.grammar.lalr import (
    ACCEPT,
    AUGMENTED_START,
    END,
    LalrTables,
    build_lalr,
)
from gridrail.grammar.model import Grammar
from gridrail.grammar.reduce import reduce_grammar
from gridrail.policy.bundle import Policy
from gridrail.policy.language import role_language
from gridrail.policy.schema import Schema

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

LALR_NOT_SLR = tiny_grammar(
    """
    s: l EQ r | r
    l: STAR r | ID
    r: l
    """,
    name="lalr-not-slr",
)

LR1_NOT_LALR = tiny_grammar(
    """
    s: A a D | B b D | A b E | B a E
    a: C
    b: C
    """,
    name="lr1-not-lalr",
)

DANGLING_ELSE = tiny_grammar(
    """
    stmt: IF EXPR THEN stmt | IF EXPR THEN stmt ELSE stmt | OTHER
    """,
    name="dangling-else",
)

# Small LALR(1) grammars for the differential tests against lark, empty rules included.
DIFFERENTIAL_GRAMMARS = [
    EXPRESSIONS,
    LALR_NOT_SLR,
    tiny_grammar("s: LP s RP s |", name="balanced"),
    tiny_grammar(
        """
        value: LB elements RB | LC members RC | ATOM
        elements: value more |
        more: COMMA value more |
        members: member | members COMMA member
        member: ATOM COLON value
        """,
        name="json-like",
    ),
    tiny_grammar(
        """
        s: a b c END
        a: A a |
        b: B |
        c: C c |
        """,
        name="nullable-chain",
    ),
    tiny_grammar(
        """
        block: LB stmts RB
        stmts: stmts stmt |
        stmt: ID EQ expr SEMI | block | IF expr block else_opt
        else_opt: ELSE block |
        expr: expr PLUS ID | ID
        """,
        name="blocks",
    ),
    SQL_SUBSET,
]


def terminal_ids(tables: LalrTables, names: str) -> list[int]:
    return [tables.terminal_names.index(name) for name in names.split()]


@functools.cache
def lark_parser_for(grammar_name: str) -> Lark:
    (grammar,) = [g for g in DIFFERENTIAL_GRAMMARS if g.name == grammar_name]
    return lark_lalr(grammar)


# --- classic grammars ------------------------------------------------------------------------


def test_expression_grammar_has_the_12_textbook_states() -> None:
    assert len(build_lalr(EXPRESSIONS).action) == 12


@pytest.mark.parametrize(
    ("sentence", "error_at"),
    [
        ("ID", None),
        ("ID PLUS ID TIMES ID", None),
        ("LPAREN ID PLUS ID RPAREN TIMES ID", None),
        ("LPAREN LPAREN ID RPAREN RPAREN", None),
        ("", 0),
        ("PLUS ID", 0),
        ("ID ID", 1),
        ("ID RPAREN", 1),
        ("LPAREN RPAREN", 1),
        ("ID PLUS", 2),
        ("LPAREN ID PLUS ID", 4),
        ("ID TIMES TIMES ID", 2),
    ],
)
def test_expression_grammar_parses(sentence: str, error_at: int | None) -> None:
    assert first_error(build_lalr(EXPRESSIONS), sentence.split()) == error_at


def test_table_layout() -> None:
    tables = build_lalr(EXPRESSIONS)
    assert tables.terminal_names == ("PLUS", "TIMES", "LPAREN", "RPAREN", "ID", END)
    assert tables.end == len(EXPRESSIONS.terminals) == 5
    assert tables.nonterminal_names == ("e", "t", "f", AUGMENTED_START)
    assert tables.productions == ((0, 3), (0, 1), (1, 3), (1, 1), (2, 3), (2, 1), (3, 1))
    assert tables.augmented_production == len(EXPRESSIONS.productions)
    assert tables.start_state == 0
    assert tables.items_of(0) == ["$START -> • e"]
    accepting = [state for state, row in enumerate(tables.action) if ACCEPT in row.values()]
    assert accepting == [tables.goto[0][0]]
    accept_row = tables.action[accepting[0]]
    assert accept_row[tables.end] == ACCEPT
    assert [tables.terminal_names[t] for t in accept_row] == ["PLUS", END]
    assert tables.items_of(accepting[0]) == ["e -> e • PLUS t", "$START -> e •"]


def test_rows_hold_only_lalr_lookaheads() -> None:
    """No default reductions: `f -> ID •` reduces on exactly FOLLOW(f), never on ID or (."""
    tables = build_lalr(EXPRESSIONS)
    after_id = tables.action[0][tables.terminal_names.index("ID")]
    reduce_f_id = -1 - next(p.index for p in EXPRESSIONS.productions if p.rhs == ("ID",))
    row = tables.action[after_id]
    assert set(row.values()) == {reduce_f_id}
    assert {tables.terminal_names[t] for t in row} == {"PLUS", "TIMES", "RPAREN", END}


def test_items_render_the_dot_in_place() -> None:
    tables = build_lalr(EXPRESSIONS)
    rendered = {item for state in range(len(tables.action)) for item in tables.items_of(state)}
    assert "t -> t TIMES • f" in rendered
    assert "f -> LPAREN e RPAREN •" in rendered
    assert tables.item_text(0, 0) == "e -> • e PLUS t"


def test_lalr_grammar_that_is_not_slr_builds() -> None:
    tables = build_lalr(LALR_NOT_SLR)
    assert first_error(tables, ["STAR", "ID", "EQ", "ID"]) is None
    assert first_error(tables, ["ID", "EQ", "STAR", "STAR", "ID"]) is None
    assert first_error(tables, ["ID", "EQ", "EQ", "ID"]) == 2


def test_empty_rules() -> None:
    tables = build_lalr(tiny_grammar("s: LP s RP s |"))
    assert first_error(tables, []) is None
    assert first_error(tables, ["LP", "LP", "RP", "RP", "LP", "RP"]) is None
    assert first_error(tables, ["LP", "RP", "RP"]) == 2


# --- conflicts -------------------------------------------------------------------------------


def test_lr1_grammar_that_is_not_lalr_has_a_reduce_reduce_conflict() -> None:
    with pytest.raises(GrammarConflict) as caught:
        build_lalr(LR1_NOT_LALR)
    conflict = caught.value
    assert conflict.kind == "reduce/reduce"
    assert conflict.lookahead in ("D", "E")
    assert sorted(conflict.items) == ["a -> C •", "b -> C •"]
    message = str(conflict)
    assert f"state {conflict.state}" in message
    assert f"lookahead {conflict.lookahead}" in message
    assert "a -> C •" in message and "b -> C •" in message


def test_dangling_else_has_a_shift_reduce_conflict() -> None:
    with pytest.raises(GrammarConflict) as caught:
        build_lalr(DANGLING_ELSE)
    conflict = caught.value
    assert conflict.kind == "shift/reduce"
    assert conflict.lookahead == "ELSE"
    assert conflict.items == [
        "stmt -> IF EXPR THEN stmt • ELSE stmt",
        "stmt -> IF EXPR THEN stmt •",
    ]
    assert f"shift/reduce conflict in LALR(1) state {conflict.state} on lookahead ELSE" in str(
        conflict
    )


def test_reducing_to_the_start_symbol_where_it_accepts_is_a_conflict() -> None:
    with pytest.raises(GrammarConflict) as caught:
        build_lalr(tiny_grammar("s: a | X\na: s"))
    assert caught.value.kind == "reduce/reduce"
    assert caught.value.lookahead == END
    assert sorted(caught.value.items) == ["$START -> s •", "a -> s •"]


def test_real_grammar_that_lark_resolves_by_shifting_is_rejected() -> None:
    """lark's Python grammar (537 productions) has shift/reduce conflicts that lark resolves
    in favour of shifting; with no resolution here, the builder must report one."""
    parser = Lark.open_from_package(
        "lark",
        "python.lark",
        ["grammars"],
        parser="lalr",
        lexer=TokenListLexer,
        postlex=PythonIndenter(),
        start="file_input",
    )
    with pytest.raises(GrammarConflict) as caught:
        build_lalr(from_lark(parser))
    assert caught.value.kind == "shift/reduce"


# --- errors ----------------------------------------------------------------------------------


def test_nonterminal_without_productions_is_an_error() -> None:
    grammar = make_grammar(["X"], [("s", ("X", "missing"))], start="s")
    with pytest.raises(GrammarError, match=r"'missing' has no productions.*s -> X missing"):
        build_lalr(grammar)


@pytest.mark.parametrize(
    "grammar",
    [
        make_grammar(["X"], [("s", ("s", "X"))], start="s"),
        make_grammar(["X"], [("s", ("t",)), ("t", ("s", "X"))], start="s"),
        make_grammar(["X"], [("t", ("X",))], start="s"),
    ],
)
def test_empty_language_is_an_error_naming_the_start_symbol(grammar) -> None:
    with pytest.raises(GrammarError, match=r"empty.*start symbol 's'") as caught:
        build_lalr(grammar)
    assert not isinstance(caught.value, GrammarConflict)


def test_other_unproductive_nonterminals_do_not_stop_the_build() -> None:
    tables = build_lalr(tiny_grammar("s: X | u\nu: u Y"))
    assert first_error(tables, ["X"]) is None
    assert first_error(tables, ["Y"]) == 0


@pytest.mark.parametrize(
    ("grammar", "message"),
    [
        (make_grammar(["X"], [("s", ("X",)), (END, ("X",))], start="s"), "reserved"),
        (make_grammar([AUGMENTED_START], [("s", (AUGMENTED_START,))], start="s"), "reserved"),
        (make_grammar(["X"], [("s", ("X",)), ("X", ("X",))], start="s"), "lhs"),
        (make_grammar(["X"], [("s", ("X",))], start="X"), "start symbol 'X' is a terminal"),
    ],
)
def test_malformed_grammars_are_errors(grammar, message: str) -> None:
    with pytest.raises(GrammarError, match=message):
        build_lalr(grammar)


def test_production_and_terminal_indices_must_be_positions() -> None:
    grammar = make_grammar(["X", "Y"], [("s", ("X",)), ("s", ("Y",))], start="s")
    for shuffled in (
        replace(grammar, productions=grammar.productions[::-1]),
        replace(grammar, terminals=grammar.terminals[::-1]),
    ):
        with pytest.raises(GrammarError, match=r"indices must be 0\.\.n-1"):
            build_lalr(shuffled)


# --- differential tests against lark ---------------------------------------------------------


@pytest.mark.parametrize("grammar", DIFFERENTIAL_GRAMMARS, ids=lambda g: g.name)
def test_tables_match_lark(grammar) -> None:
    assert lark_table_differences(build_lalr(grammar), lark_parser_for(grammar.name)) == []


def test_lark_grammar_tables_match_lark() -> None:
    parser = Lark.open_from_package(
        "lark", "lark.lark", ["grammars"], parser="lalr", lexer=TokenListLexer, strict=True
    )
    assert lark_table_differences(build_lalr(from_lark(parser)), parser) == []


def test_large_grammar_tables_match_lark() -> None:
    grammar = dialects_grammar(SQL_SUBSET, 3)
    assert len(grammar.productions) > 500 and len(grammar.terminals) > 200
    assert lark_table_differences(build_lalr(grammar), lark_lalr(grammar)) == []


def sentences_for(grammar):
    """Random token sequences, random sentences, and mutations of random sentences."""
    alphabet = [t.name for t in grammar.terminals]
    random_sequences = st.lists(st.sampled_from(alphabet), max_size=10)

    @st.composite
    def derived(draw):
        rng = draw(st.randoms(use_true_random=False))
        sentence = random_sentence(grammar, rng, budget=draw(st.integers(1, 25)))
        for _ in range(draw(st.integers(0, 3))):
            sentence = mutate(sentence, rng, alphabet)
        return sentence

    return random_sequences | derived()


def assert_parses_like_lark(tables: LalrTables, parser: Lark, tokens: list[str]) -> None:
    statuses = prefix_statuses(tables, tokens)
    assert statuses == lark_prefix_statuses(parser, tokens)
    try:
        parser.parse(tokens)
        lark_accepts = True
    except UnexpectedInput:
        lark_accepts = False
    assert (statuses[-1] == ACCEPTED) == lark_accepts


@pytest.mark.parametrize("grammar", DIFFERENTIAL_GRAMMARS, ids=lambda g: g.name)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_parses_like_lark(grammar, data) -> None:
    tokens = data.draw(sentences_for(grammar))
    assert_parses_like_lark(build_lalr(grammar), lark_parser_for(grammar.name), tokens)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammar=random_grammars(), data=st.data())
def test_random_grammars_agree_with_lark(grammar, data) -> None:
    try:
        tables = build_lalr(grammar)
    except GrammarConflict as conflict:
        event(f"{conflict.kind} conflict")
        if any(item.startswith(f"{AUGMENTED_START} ->") for item in conflict.items):
            # lark has no ACCEPT action (its parser accepts in its end state before reading
            # the row), so it does not see a reduction competing with acceptance on $END
            return
        with pytest.raises(LarkGrammarError):
            lark_lalr(grammar)
        return
    except GrammarError:
        event("empty language")
        assert grammar.start not in derivation_heights(grammar)
        return
    event("LALR(1)")
    parser = lark_lalr(grammar)
    assert lark_table_differences(tables, parser) == []
    for tokens in data.draw(st.lists(sentences_for(grammar), min_size=1, max_size=5)):
        assert_parses_like_lark(tables, parser, tokens)


# --- determinism -----------------------------------------------------------------------------


DIGEST_SCRIPT = """
from grammar_builders import EXPRESSIONS, SQL_SUBSET, dialects_grammar, table_digest
from gridrail.grammar.lalr import build_lalr
for grammar in [EXPRESSIONS, SQL_SUBSET, dialects_grammar(SQL_SUBSET, 2)]:
    print(table_digest(build_lalr(grammar)))
"""


def test_tables_do_not_depend_on_hash_seed() -> None:
    root = Path(__file__).resolve().parent.parent
    python_path = os.pathsep.join([str(root / "python"), str(root / "tests")])
    digests = []
    for seed in ("0", "1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": python_path}
        result = subprocess.run(
            [sys.executable, "-c", DIGEST_SCRIPT],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        digests.append(result.stdout)
    assert digests[0].count("\n") == 3
    assert digests[0] == digests[1] == digests[2]


# --- grammar reduction -----------------------------------------------------------------------


def reachable_nonterminals(grammar) -> set[str]:
    """Nonterminals in sentential forms derived from the start symbol, by breadth-first
    expansion of whole productions (independent of the library's graph walk)."""
    reachable = {grammar.start}
    while True:
        grown = reachable | {
            s
            for p in grammar.productions
            if p.lhs in reachable
            for s in p.rhs
            if not grammar.is_terminal(s)
        }
        if grown == reachable:
            return reachable
        reachable = grown


def test_reduce_grammar_removes_unproductive_before_unreachable() -> None:
    grammar = tiny_grammar(
        """
        s: X | a b
        a: Y
        b: b Z
        c: X
        """
    )
    reduced = reduce_grammar(grammar)
    assert [(p.index, p.lhs, p.rhs) for p in reduced.productions] == [(0, "s", ("X",))]
    assert reduced.terminals == grammar.terminals


def test_reduce_grammar_rejects_an_empty_language() -> None:
    with pytest.raises(GrammarError, match="start symbol 's'"):
        reduce_grammar(tiny_grammar("s: s X"))


@settings(max_examples=300)
@given(random_grammars(max_nonterminals=5, undefined=("u",)))
def test_reduce_grammar_leaves_only_productive_reachable_nonterminals(grammar) -> None:
    if grammar.start not in derivation_heights(grammar):
        with pytest.raises(GrammarError, match="start symbol 'n0'"):
            reduce_grammar(grammar)
        return
    reduced = reduce_grammar(grammar)
    assert reduced.start == grammar.start
    assert reduced.terminals == grammar.terminals
    assert [p.index for p in reduced.productions] == list(range(len(reduced.productions)))
    kept = iter([(p.lhs, p.rhs, p.alias, p.origin) for p in grammar.productions])
    assert all((p.lhs, p.rhs, p.alias, p.origin) in kept for p in reduced.productions), (
        "kept productions are a subsequence of the original ones"
    )
    symbols = set(reduced.nonterminals) | {
        s for p in reduced.productions for s in p.rhs if not reduced.is_terminal(s)
    }
    assert symbols <= set(derivation_heights(reduced))
    assert symbols <= reachable_nonterminals(reduced)
    assert reduce_grammar(reduced) == reduced


@settings(max_examples=300)
@given(
    random_grammars(max_nonterminals=5, undefined=("u",)),
    st.randoms(use_true_random=False),
    st.lists(st.sampled_from(["A", "B", "C"]), max_size=6),
)
def test_reduce_grammar_keeps_the_language(grammar, rng, tokens: list[str]) -> None:
    assume(grammar.start in derivation_heights(grammar))
    reduced = reduce_grammar(grammar)
    sentence = random_sentence(grammar, rng, budget=12)
    assert earley_accepts(grammar, sentence)
    assert earley_accepts(reduced, sentence)
    assert earley_accepts(reduced, tokens) == earley_accepts(grammar, tokens)


# --- the Rust kernel against the Python path (the specification) ----------------------------


def _tables_and_error(grammar, enabled: bool):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernels, "KERNELS_ENABLED", enabled)
        try:
            return build_lalr(grammar), None
        except GrammarError as exc:  # GrammarConflict included: the Python path names it
            return None, str(exc)


def _same_tables(a: LalrTables, b: LalrTables) -> bool:
    """Equal, and every row's keys in the same order (the parser iterates them)."""
    if a != b:
        return False
    rows = [*zip(a.action, b.action, strict=True), *zip(a.goto, b.goto, strict=True)]
    return all(list(x.items()) == list(y.items()) for x, y in rows)


@pytest.mark.skipif(not kernels.KERNELS_ENABLED, reason="the Rust kernels are not built")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammar=random_grammars(max_nonterminals=5))
def test_the_kernel_builds_the_tables_of_the_python_path(grammar) -> None:
    fast, fast_error = _tables_and_error(grammar, True)
    spec, spec_error = _tables_and_error(grammar, False)
    assert fast_error == spec_error
    event("conflict or error" if spec is None else "LALR(1)")
    assert (fast is None) == (spec is None)
    if fast is not None and spec is not None:
        assert _same_tables(fast, spec)


@pytest.mark.skipif(not kernels.KERNELS_ENABLED, reason="the Rust kernels are not built")
def test_the_kernel_builds_the_tables_of_every_role_language() -> None:
    policy = Policy.from_file(EXAMPLES / "hr_policy.toml")
    schema = Schema.from_sqlite(EXAMPLES / "hr.sqlite")
    bundled = Grammar.bundled("sqlite")
    languages = [bundled, dialects_grammar(SQL_SUBSET, 3)] + [
        role_language(bundled, policy, role, schema)[0] for role in policy.roles
    ]
    for grammar in languages:
        fast, _ = _tables_and_error(grammar, True)
        spec, _ = _tables_and_error(grammar, False)
        assert fast is not None and spec is not None and _same_tables(fast, spec), grammar.name


@pytest.mark.skipif(not kernels.KERNELS_ENABLED, reason="the Rust kernels are not built")
def test_the_kernel_refuses_a_grammar_coded_out_of_range() -> None:
    from gridrail import _kernels

    with pytest.raises(ValueError, match="out of range"):
        _kernels.lalr_tables(2, 2, [0, 1], [[7], [2]], 2)
    with pytest.raises(ValueError, match=r"\$START -> start"):
        _kernels.lalr_tables(2, 2, [1, 0], [[2], [0]], 2)

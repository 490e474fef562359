"""The union scanner: its accept/live sets agree with the per-terminal DFAs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridrail.errors import GrammarError, RegexError
from gridrail.grammar.dfa import compile_regex
from gridrail.grammar.model import TerminalDef
from gridrail.grammar.scanner import ScannerAutomaton, build_scanner


def term(name: str, index: int, pattern: str, flags: str = "") -> TerminalDef:
    return TerminalDef(name, index, pattern, flags, 0, False)


# Indices are deliberately not positions: the scanner must report TerminalDef.index.
TERMINALS = [
    term("SELECT", 3, "select", "i"),
    term("SET", 4, "set", "i"),
    term("COUNT_OPEN", 5, r"count[ \t\n]*\(", "i"),
    term("NAME", 7, r"(?:[A-Za-z_]|[^\x00-\x7f])(?:[A-Za-z0-9_$]|[^\x00-\x7f])*"),
    term("NUMBER", 8, r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"),
    term("STRING", 9, r"'(?:[^']|'')*'"),
    term("WS", 10, r"[ \t\r\n\f]+"),
    term("LINE_COMMENT", 11, r"--[^\n]*"),
    term("BLOCK_COMMENT", 12, r"/\*(?:[^*]|\*+[^*/])*\*+/"),
    term("OP", 13, r"<=|>=|<>|!=|[-+*/<>=(),.;]"),
    term("ARROW", 14, "→"),
    term("WORD", 15, r"\w+"),
]
SCANNER = build_scanner(TERMINALS)
ALPHABET = "selctounSETCOUN_x1 \t\n'-*/().;<>=eE+é中😀→²"


def reached(scanner: ScannerAutomaton, data: bytes) -> int:
    """The state after ``data`` by single steps, or -1."""
    state = scanner.start
    for byte in data:
        state = scanner.step(state, byte)
        if state < 0:
            break
    return state


@settings(max_examples=400, deadline=None)
@given(text=st.text(st.sampled_from(ALPHABET), max_size=14), cut=st.integers(0, 60))
def test_sets_equal_per_terminal_answers(text: str, cut: int) -> None:
    data = text.encode()[:cut]  # byte prefixes, also cut inside a character
    dfas = {t.index: compile_regex(t.pattern, t.flags) for t in TERMINALS}
    accepts = frozenset(i for i, dfa in dfas.items() if dfa.fullmatch(data))
    live = frozenset(i for i, dfa in dfas.items() if dfa.is_live_prefix(data))
    state = reached(SCANNER, data)
    if state < 0:
        assert not live
        return
    assert SCANNER.accepts[state] == accepts
    assert SCANNER.live[state] == live
    assert SCANNER.accept_mask[state] == sum(1 << i for i in accepts)
    assert SCANNER.live_mask[state] == sum(1 << i for i in live)


@settings(max_examples=200, deadline=None)
@given(state=st.integers(0, SCANNER.num_states - 1), data=st.binary(max_size=20))
def test_run_stops_before_the_dead_byte(state: int, data: bytes) -> None:
    end, consumed, _, _ = SCANNER.run(state, data)
    expected = state
    for byte in data[:consumed]:
        expected = SCANNER.step(expected, byte)
    assert end == expected >= 0
    assert consumed == len(data) or SCANNER.step(end, data[consumed]) == -1


@settings(max_examples=300, deadline=None)
@given(
    state=st.integers(0, SCANNER.num_states - 1),
    data=st.binary(max_size=20) | st.text(st.sampled_from(ALPHABET), max_size=14).map(str.encode),
)
def test_run_reports_the_last_accept_of_single_steps(state: int, data: bytes) -> None:
    """accept_end/accept_state: the last accepting state of a byte-by-byte walk with ``step``."""
    expected_end = expected_state = -1
    current, consumed = state, 0
    for byte in data:
        nxt = SCANNER.step(current, byte)
        if nxt < 0:
            break
        current, consumed = nxt, consumed + 1
        if SCANNER.accept_mask[current]:
            expected_end, expected_state = consumed, current
    assert SCANNER.run(state, data) == (current, consumed, expected_end, expected_state)
    assert SCANNER.fast_run(state, data) == SCANNER.run(state, data)


def test_run_accept_examples() -> None:
    start = SCANNER.start
    select = reached(SCANNER, b"select")
    assert SCANNER.run(start, b"select") == (select, 6, 6, select)
    # "1.5e" is not a number, "1.5" is: the lexeme ends after 3 bytes.
    num = reached(SCANNER, b"1.5")
    state, consumed, accept_end, accept_state = SCANNER.run(start, b"1.5e+x")
    assert (state, consumed) == (reached(SCANNER, b"1.5e+"), 5)
    assert (accept_end, accept_state) == (3, num)
    # An unterminated string accepts nothing; neither does the empty input.
    assert SCANNER.run(start, b"'abc")[2:] == (-1, -1)
    assert SCANNER.run(start, b"")[2:] == (-1, -1)
    # The state the run starts in never counts, even if it accepts.
    assert SCANNER.run(select, b"")[2:] == (-1, -1)
    assert SCANNER.run(select, b"!")[2:] == (-1, -1)


def test_run_rejects_bad_states() -> None:
    for state in (-1, SCANNER.num_states):
        with pytest.raises(ValueError, match="out of range"):
            SCANNER.run(state, b"a")


def test_minimal_and_trim() -> None:
    """No two states have the same future labels; every non-start state has live terminals."""
    n = SCANNER.num_states
    table = SCANNER.transitions
    block = {q: SCANNER.accepts[q] for q in range(n)}
    while True:
        signature = {
            q: (block[q], tuple(block.get(t) for t in table[q * 256 : (q + 1) * 256]))
            for q in range(n)
        }
        ids: dict[object, int] = {}
        refined = {q: ids.setdefault(sig, len(ids)) for q, sig in signature.items()}
        if len(ids) == len(set(block.values())):
            break
        block = refined
    assert len(ids) == n
    assert all(SCANNER.live[q] for q in range(n))
    assert all(SCANNER.accepts[q] <= SCANNER.live[q] for q in range(n))


def test_exclude_and_empty_language() -> None:
    terminals = [term("A", 0, "a+"), term("DECLARED", 1, "b"), term("NOTHING", 2, r"[^\s\S]")]
    scanner = build_scanner(terminals, exclude={"DECLARED"})
    assert scanner.live[scanner.start] == frozenset({0})
    assert reached(scanner, b"b") == -1
    assert scanner.accepts[reached(scanner, b"aa")] == frozenset({0})


def test_no_terminals() -> None:
    scanner = build_scanner([])
    assert scanner.num_states == 1
    assert scanner.live == (frozenset(),) and scanner.live_mask == (0,)
    assert scanner.run(scanner.start, b"abc") == (scanner.start, 0, -1, -1)


def test_empty_string_terminal_is_an_error() -> None:
    with pytest.raises(GrammarError, match="terminal MAYBE matches the empty string"):
        build_scanner([term("A", 0, "a"), term("MAYBE", 1, "b*")])


def test_bad_regex_names_the_terminal() -> None:
    with pytest.raises(RegexError, match=r"terminal LOOK: lookahead .* at position 1"):
        build_scanner([term("LOOK", 0, "a(?=b)")])


def test_sql_sized_terminal_set_builds() -> None:
    keywords = [
        "select", "from", "where", "group", "by", "order", "having", "limit", "offset", "join",
        "left", "right", "inner", "outer", "cross", "natural", "on", "using", "union", "all",
        "intersect", "except", "distinct", "as", "and", "or", "not", "in", "is", "null", "like",
        "glob", "between", "case", "when", "then", "else", "end", "exists", "cast", "collate",
        "asc", "desc", "nulls", "first", "last", "with", "recursive", "values", "insert", "into",
        "update", "set", "delete", "create", "table", "view", "index", "drop", "alter", "add",
        "column", "primary", "key", "foreign", "references", "unique", "check", "default",
        "constraint", "autoincrement", "if", "replace", "ignore", "abort", "fail", "rollback",
        "conflict", "over", "partition", "window", "rows", "range", "groups", "unbounded",
        "preceding", "following", "current", "row", "filter", "escape", "regexp", "match",
        "true", "false", "current_date", "current_time", "current_timestamp", "returning",
        "materialized", "temporary", "temp", "exclude", "others", "ties", "no", "action",
        "cascade", "restrict", "deferrable", "initially", "deferred", "immediate", "without",
        "rowid", "strict", "generated", "always", "stored", "virtual", "indexed", "explain",
        "attach", "detach", "analyze", "vacuum", "pragma", "reindex", "savepoint", "release",
        "begin", "commit", "transaction", "trigger", "before", "after", "instead", "of", "for",
        "each", "raise", "plan", "query", "exclusive",
    ]  # fmt: skip
    terminals = [term(k.upper(), i, k, "i") for i, k in enumerate(keywords)]
    terminals += [
        term(t.name, len(keywords) + i, t.pattern, t.flags) for i, t in enumerate(TERMINALS)
    ]
    scanner = build_scanner(terminals)
    assert len(terminals) > 150
    # SELECT, NAME and WORD of TERMINALS, renumbered after the keywords
    select, name, word = (len(keywords) + i for i in (0, 3, 11))
    assert scanner.accepts[reached(scanner, b"SeLeCt")] == {
        keywords.index("select"),
        select,
        name,
        word,
    }
    assert scanner.live[reached(scanner, b"curr")] == {
        keywords.index(k) for k in ("current", "current_date", "current_time", "current_timestamp")
    } | {name, word}

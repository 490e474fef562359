"""Rust kernels equal their Python references; GRIDRAIL_KERNELS=0 selects the references.

Tests of the Rust side skip when the extension is not built. To build it for `PYTHONPATH=python`:
    cargo build --release --features extension-module
    cp target/release/lib_kernels.so python/gridrail/_kernels.abi3.so
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from array import array
from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gridrail import kernels
from gridrail.canonical import canonical_json
from gridrail.grammar import scanner as scanner_module
from gridrail.grammar.compiled import compile_grammar
from gridrail.grammar.dfa import compile_regex
from gridrail.grammar.model import Grammar, TerminalDef
from gridrail.grammar.names import NameSet, ascii_lower_all
from gridrail.grammar.scanner import build_scanner
from gridrail.policy import lexicon as lexicon_module
from gridrail.policy.language import role_language
from gridrail.policy.profile import GenerationProfile
from gridrail.policy.schema import Schema
from test_lexicon import HR_TABLES, _policy

# The scanner the parser uses for the bundled sqlite grammar.
SCANNER = compile_grammar(Grammar.bundled("sqlite")).scanner
ACCEPTING = bytes(1 if mask else 0 for mask in SCANNER.accept_mask)
SQL_SNIPPETS = [
    "SELECT", "select", "FROM", "where", "count", "current_timestamp", "t1.name", "_x1", "\"my t\"",
    "'it''s'", "'", "1.5e+3", ".5", "0x1F", "--c\n", "/* c */", "/**/", "<=", "<>", "!=", "||",
    "(", ")", "*", ",", ";", " ", "\t\n", "é", "中", "😀", "?", ":v", "@v", "$v", "[x]", "`y`",
]  # fmt: skip
SQL_BYTES = (
    st.lists(st.sampled_from(SQL_SNIPPETS), max_size=8).map(lambda parts: "".join(parts).encode())
    | st.text("selctSELCT_a1 .e+'\"*/-\t\n<>=!中é", max_size=40).map(str.encode)
    | st.binary(max_size=40)
)
STATES = st.integers(0, SCANNER.num_states - 1)


def _scan_table_class():
    rust = pytest.importorskip(
        "gridrail._kernels",
        reason="Rust extension gridrail._kernels is not built (see tests/test_kernels.py)",
    )
    return rust.ScanTable


def _rust_table():
    return _scan_table_class()(SCANNER.transitions.tobytes(), ACCEPTING)


def test_sqlite_scanner_has_accepting_and_non_accepting_states() -> None:
    assert 0 < sum(ACCEPTING) < SCANNER.num_states
    assert not ACCEPTING[SCANNER.start]


@settings(max_examples=500, deadline=None)
@given(state=STATES, data=SQL_BYTES)
def test_scan_table_run_equals_python_run(state: int, data: bytes) -> None:
    assert _rust_table().run(state, data) == SCANNER.run(state, data)


@settings(max_examples=200, deadline=None)
@given(data=SQL_BYTES)
def test_scan_table_run_from_start_equals_python_run(data: bytes) -> None:
    assert _rust_table().run(SCANNER.start, data) == SCANNER.run(SCANNER.start, data)


def test_scan_table_reports_last_accept() -> None:
    table = _rust_table()
    # "1.5e+" stops in a non-accepting state (an exponent needs a digit); the last lexeme end is
    # after "1.5e" (MALFORMED_NUMBER, the refusal of a number run into a letter).
    state, consumed, accept_end, accept_state = table.run(SCANNER.start, b"1.5e+")
    assert consumed == 5 and not SCANNER.accept_mask[state]
    assert accept_end == 4 and SCANNER.accept_mask[accept_state]
    assert table.run(SCANNER.start, b"1.5e+") == SCANNER.run(SCANNER.start, b"1.5e+")
    # Nothing accepted: an unterminated string.
    assert table.run(SCANNER.start, b"'abc")[2:] == (-1, -1)
    assert table.run(SCANNER.start, b"")[2:] == (-1, -1)


def test_scan_table_accepts_int_sequences() -> None:
    scan_table = _scan_table_class()
    for transitions in (SCANNER.transitions, list(SCANNER.transitions)):
        table = scan_table(transitions, ACCEPTING)
        assert table.num_states == SCANNER.num_states
        data = b"select 1"
        assert table.run(SCANNER.start, data) == SCANNER.run(SCANNER.start, data)


def test_scan_table_long_input() -> None:
    # Long enough that the kernel releases the GIL.
    table = _rust_table()
    data = b"x" * 200_000 + b"!"
    assert table.run(SCANNER.start, data) == SCANNER.run(SCANNER.start, data)
    state, consumed, accept_end, accept_state = table.run(SCANNER.start, data)
    assert consumed == accept_end == 200_000
    assert accept_state == state


def test_scan_table_errors() -> None:
    scan_table = _scan_table_class()
    with pytest.raises(ValueError, match="multiple of 256"):
        scan_table(array("i", [-1] * 255).tobytes(), b"\0")
    with pytest.raises(ValueError, match="not -1 or a state"):
        scan_table([5] * 256, b"\0")
    transitions = SCANNER.transitions.tobytes()
    for accepting in (ACCEPTING[:-1], ACCEPTING + b"\0", b""):
        with pytest.raises(ValueError, match=r"accepting flags have length \d+, expected \d+"):
            scan_table(transitions, accepting)
    with pytest.raises(ValueError, match="accepting flag of state 0 is 2, not 0 or 1"):
        scan_table(transitions, b"\2" + ACCEPTING[1:])
    with pytest.raises(TypeError):
        scan_table(transitions, list(ACCEPTING))
    table = _rust_table()
    for state in (-1, SCANNER.num_states):
        with pytest.raises(ValueError) as rust_error:
            table.run(state, b"a")
        with pytest.raises(ValueError) as python_error:
            SCANNER.run(state, b"a")
        assert str(rust_error.value) == str(python_error.value)


def test_canonical_order_equals_the_reference() -> None:
    """Every state of the bundled scanner: the Rust breadth-first numbering is the Python one
    (the T2 cache's state identities are built on it), and a state outside is refused alike."""
    table = _rust_table()
    reached = set()
    for state in range(SCANNER.num_states):
        order = SCANNER.canonical_order(state)
        assert array("I", table.canonical_order(state)).tolist() == order
        assert order[0] == state and len(set(order)) == len(order)
        reached.update(order[1:])
    assert len(reached) > SCANNER.num_states // 2  # a real automaton, not a set of islands
    for state in (-1, SCANNER.num_states):
        with pytest.raises(ValueError) as rust_error:
            table.canonical_order(state)
        with pytest.raises(ValueError) as python_error:
            SCANNER.canonical_order(state)
        assert str(rust_error.value) == str(python_error.value)


def test_kernels_enabled_when_built() -> None:
    _scan_table_class()
    if os.environ.get("GRIDRAIL_KERNELS") == "0":
        pytest.skip("GRIDRAIL_KERNELS=0 in this environment")
    assert kernels.KERNELS_ENABLED
    for data in (b"select", b"1.5e", b"'abc"):
        assert SCANNER.fast_run(SCANNER.start, data) == SCANNER.run(SCANNER.start, data)
    assert SCANNER.fast_run != SCANNER.run


def test_python_reference_when_disabled() -> None:
    code = (
        "from gridrail import kernels\n"
        "from gridrail.grammar.scanner import build_scanner\n"
        "from gridrail.grammar.model import TerminalDef\n"
        "s = build_scanner([TerminalDef('A', 0, 'a+', '', 0, False)])\n"
        "assert kernels.make_scan_table(s) is None and s.kernel_table is None\n"
        "assert s.fast_run == s.run\n"
        "assert s.fast_run(s.start, b'aab') == (s.step(s.start, 97), 2, 2, s.step(s.start, 97))\n"
        "assert s.fast_run(s.start, b'b') == (s.start, 0, -1, -1)\n"
        "print(kernels.KERNELS_ENABLED)\n"
    )
    env = {**os.environ, "GRIDRAIL_KERNELS": "0", "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


# -- terminals spelled from names: `name_rows` and `names_outside` against the reference ------

NAME_ALPHABET = "aAbB_\"'.( é"
NAME_SPELLINGS = st.lists(st.text(alphabet=NAME_ALPHABET, min_size=1, max_size=6), max_size=8)
NAME_SETS = st.builds(
    lambda exact, folded, suffix: NameSet(tuple(exact), tuple(folded), suffix),
    NAME_SPELLINGS,
    NAME_SPELLINGS,
    st.sampled_from(("", r"\.", r"[ \t]*\(", "x{0}y")),
).filter(lambda names: names.spellings > 0)
# A base of a few regex terminals whose lexemes overlap the names' (identifiers, a dot, `(`).
NAME_BASE = build_scanner(
    [
        TerminalDef("ID", 0, r"[A-Za-z_][A-Za-z0-9_]*", "", 0, False),
        TerminalDef("DOT", 1, r"\.", "", 0, False),
        TerminalDef("QUOTED", 2, r'"[^"]*"', "", 0, False),
    ]
)


@pytest.fixture
def rust_kernels(monkeypatch: pytest.MonkeyPatch):
    """`gridrail.kernels` with the Rust extension in use, whatever GRIDRAIL_KERNELS says."""
    monkeypatch.setattr(kernels, "_kernels", _rust_module())
    monkeypatch.setattr(kernels, "KERNELS_ENABLED", True)
    return kernels


def _rust_module():
    return pytest.importorskip(
        "gridrail._kernels",
        reason="Rust extension gridrail._kernels is not built (see tests/test_kernels.py)",
    )


def _as_lists(rows) -> list[list[int]]:
    """The table's int32 entries (bytes, or the Rust `ScanTable`'s buffer), then the arrays."""
    table, *parts = rows
    return [list(memoryview(table).cast("i")), *(list(part) for part in parts)]


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sets=st.lists(NAME_SETS, min_size=1, max_size=3), empty_base=st.booleans())
def test_name_rows_equal_the_reference(rust_kernels, sets, empty_base) -> None:
    base = build_scanner([]) if empty_base else NAME_BASE
    automata = [names.automaton for names in sets]
    expected = scanner_module._name_rows(base, automata, 100_000)
    assert _as_lists(rust_kernels.name_rows(base, sets, 100_000)) == _as_lists(expected)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(names=NAME_SETS, pattern=st.sampled_from(("[A-Za-z_][A-Za-z0-9_]*", r'[ab"_]+\.?', "a|B")))
def test_names_outside_equals_the_reference(rust_kernels, names, pattern) -> None:
    dfa = compile_regex(pattern)
    assert rust_kernels.names_outside(names, dfa) == names.automaton.outside(dfa)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    texts=st.lists(st.text('aAbBzZ_é"[1', max_size=4), max_size=12)
    | st.lists(st.text(max_size=5), max_size=8),
    fold=st.booleans(),
    as_tuple=st.booleans(),
)
def test_distinct_spellings_equals_the_reference(rust_kernels, texts, fold, as_tuple) -> None:
    given = tuple(texts) if as_tuple else texts
    expected = tuple(dict.fromkeys(sorted(ascii_lower_all(texts) if fold else texts)))
    assert rust_kernels.distinct_spellings(given, fold) == expected
    assert rust_kernels.distinct_spellings(expected, fold) is expected  # canonical: kept


def test_distinct_spellings_leaves_a_lone_surrogate_to_python(rust_kernels) -> None:
    assert rust_kernels.distinct_spellings(("b", "a\ud800"), False) is None
    assert NameSet(exact=("b", "a\ud800", "b")).exact == ("a\ud800", "b")


# Documents of what the Rust encoder writes (str, int, bool, None in lists, tuples and dicts
# with str keys), and with values it leaves to Python: floats, ints past 64 bits, lone
# surrogates, a str subclass, non-str keys.
PLAIN_VALUES = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8)
LEFT_TO_PYTHON = (
    st.floats(allow_nan=False)
    | st.integers(2**63, 2**70)
    | st.just("a\ud800b")
    | st.builds(type("Named", (str,), {}), st.text(max_size=3))
    | st.dictionaries(st.integers(0, 3), st.none(), min_size=1, max_size=2)
)


class _Pair(NamedTuple):  # a tuple subclass Python's encoder writes as an array: a Column
    first: object
    second: object


class _Backwards(tuple):  # iterated backwards: Python's encoder writes it so
    def __iter__(self):
        return (tuple.__getitem__(self, i) for i in range(len(self) - 1, -1, -1))


def _documents(leaves):
    return st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.lists(inner, max_size=3).map(tuple)
            | st.tuples(inner, inner).map(lambda pair: _Pair(*pair))
            | st.dictionaries(st.text(max_size=5), inner, max_size=4)
        ),
        max_leaves=24,
    )


def _json_dumps(doc: object, sort_keys: bool) -> str:
    return json.dumps(doc, separators=(",", ":"), sort_keys=sort_keys, check_circular=False)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(doc=_documents(PLAIN_VALUES), sort_keys=st.booleans())
def test_canonical_json_writes_plain_documents_as_python_does(rust_kernels, doc, sort_keys):
    # every character, escaped as Python's ASCII encoder escapes it; keys in code point order
    assert rust_kernels.canonical_json(doc, sort_keys) == _json_dumps(doc, sort_keys)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    doc=_documents(PLAIN_VALUES | LEFT_TO_PYTHON).filter(lambda d: not isinstance(d, float)),
    sort_keys=st.booleans(),
)
def test_canonical_json_leaves_other_values_to_python(rust_kernels, doc, sort_keys):
    text = rust_kernels.canonical_json(doc, sort_keys)
    assert text is None or text == _json_dumps(doc, sort_keys)
    assert canonical_json(doc, sort_keys=sort_keys) == _json_dumps(doc, sort_keys)


def test_canonical_json_hands_back_what_it_does_not_write(rust_kernels) -> None:
    for doc in ([1.5], {"a": {1: 2}}, ["x\udfff"], [2**64], [type("S", (str,), {})("s")]):
        assert rust_kernels.canonical_json(doc, True) is None
        assert canonical_json(doc) == _json_dumps(doc, True)
    backwards = [_Backwards((1, "a"))]  # a tuple subclass with its own iteration
    assert rust_kernels.canonical_json(backwards, True) is None
    assert canonical_json(backwards) == _json_dumps(backwards, True) == '[["a",1]]'
    deep: list = []
    for _ in range(200):  # deeper than the kernel goes: Python's encoder writes it
        deep = [deep]
    assert rust_kernels.canonical_json(deep, True) is None
    assert canonical_json(deep) == _json_dumps(deep, True)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    exact=st.lists(st.text(min_size=0, max_size=6), max_size=6),
    folded=st.lists(st.text(min_size=0, max_size=6), max_size=6),
)
def test_literal_alternation_equals_the_reference(rust_kernels, exact, folded) -> None:
    # any characters: ASCII punctuation and controls escaped, letters folded, the rest kept
    names = NameSet(tuple(exact), tuple(folded))
    assert rust_kernels.literal_alternation(names.exact, names.folded) == "|".join(
        names.literal_options()
    )


# -- a lexicon's spellings: `spell_forms` against `_spelled` ----------------------------------

SPELL_STYLES = [("", "", True), ('"', '"', True), ("`", "`", True), ("[", "]", False)]


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    words=st.lists(st.text(alphabet='ab_"`[]é 1', max_size=6), max_size=10),
    style=st.sampled_from(SPELL_STYLES),
    shadowed=st.booleans(),
)
def test_spell_forms_equal_the_reference(rust_kernels, monkeypatch, words, style, shadowed):
    dfa = compile_regex(r'[a-z_][a-z0-9_]*|"(?:[^"]|"")*"|`(?:[^`]|``)*`|\[[^\]]*\]')
    shadows = [compile_regex("ab|a_")] if shadowed else []
    rust = rust_kernels.spell_forms(words, style, dfa, shadows)
    monkeypatch.setattr(kernels, "KERNELS_ENABLED", False)
    assert rust == lexicon_module._spelled(words, style, dfa, shadows)


# -- the union scanner of regex terminals: `union_scanner` against `_union_scanner` ----------

UNION_PATTERNS = (
    "a", "ab", "a+", "[ab]*b", "(ab)+", "b?a", "aa|bb", "[a-c]+", ".{2}", "a{2,3}", "[^a]",
    "c|ab*", "(?i:ab)", "b+a?", "abc", "(a|b)(a|b)",
)  # fmt: skip


def _union_parts(patterns: list[str]) -> list[tuple[int, object]]:
    dfas = [(index, compile_regex(pattern)) for index, pattern in enumerate(patterns)]
    return [(index, dfa) for index, dfa in dfas if dfa.start >= 0]


def _union_both(rust_kernels, parts, states: int, work: int):
    rust = rust_kernels.union_scanner(parts, states, work)
    reference = scanner_module._union_scanner(parts, states, work)
    return rust, reference


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(patterns=st.lists(st.sampled_from(UNION_PATTERNS), max_size=6))
def test_union_scanner_equals_the_reference(rust_kernels, patterns) -> None:
    rust, reference = _union_both(rust_kernels, _union_parts(patterns), 100_000, 10_000_000)
    assert rust is not None and reference is not None
    assert (list(rust[0]), rust[1], rust[2]) == (list(reference[0]), reference[1], reference[2])


@pytest.mark.parametrize("role", [None, "analyst", "clerk", "admin"])
def test_union_scanner_of_the_bundled_grammar_equals_the_reference(rust_kernels, role) -> None:
    language, _, _ = role_language(
        Grammar.bundled("sqlite"), _policy() if role else None, role,
        Schema.from_tables("sqlite", HR_TABLES),
    )  # fmt: skip
    regex = [scanner_module._regex_part(t) for t in language.terminals]
    kept = [t for t in regex if t is not None and t.name not in language.declared]
    parts = [(t.index, dfa) for t in kept if (dfa := scanner_module._terminal_dfa(t)).start >= 0]
    rust, reference = _union_both(rust_kernels, parts, 200_000, 40_000_000)
    assert rust is not None and reference is not None and len(rust[1]) > 100
    assert (rust[0], rust[1], rust[2]) == reference


@pytest.mark.parametrize(("states", "work"), [(2, 10_000), (1_000, 5)])
def test_union_scanner_bounds_agree(rust_kernels, states: int, work: int) -> None:
    parts = _union_parts(["abc", "(ab)+", "a{2,3}"])
    assert _union_both(rust_kernels, parts, states, work) == (None, None)


@pytest.mark.parametrize("role", [None, "analyst", "clerk", "admin"])
def test_scanners_with_names_equal_bit_for_bit(rust_kernels, monkeypatch, role) -> None:
    schema = Schema.from_tables("sqlite", {**HR_TABLES, "Quarterly Results": ["Q", "rev USD"]})
    language, _, _ = role_language(
        Grammar.bundled("sqlite"), _policy() if role else None, role, schema,
        profile=GenerationProfile(),
    )  # fmt: skip
    terminals = [t for t in language.terminals if t.name not in language.declared]
    rust = build_scanner(terminals)
    monkeypatch.setattr(kernels, "KERNELS_ENABLED", False)
    reference = build_scanner(terminals)
    assert rust.transitions == reference.transitions
    assert (rust.accepts, rust.live) == (reference.accepts, reference.live)
    # the Rust table the product built is the scanner's own: read-only, accepting as the sets
    assert rust.kernel_table is not None and memoryview(rust.kernel_table).readonly
    # `or`, `order`: keywords that begin the name `orders` (a base state and names alive)
    for data in (b"name", b"or ", b"order ", b'"Quarterly Results".', b"count(", b"x1 "):
        for state in range(rust.num_states):
            assert rust.fast_run(state, data) == reference.run(state, data)


def test_name_rows_bound_is_an_overflow_in_both(rust_kernels) -> None:
    names = NameSet(exact=("abcdef", "abxyz"))
    with pytest.raises(OverflowError):
        rust_kernels.name_rows(NAME_BASE, [names], 4)
    with pytest.raises(OverflowError):
        scanner_module._name_rows(NAME_BASE, [names.automaton], 4)
    assert len(rust_kernels.name_rows(NAME_BASE, [names], 9)[1]) == 9


def test_the_stub_names_what_the_extension_defines() -> None:
    """`_kernels.pyi` and the built module list the same public names (a class returned but
    not registered, or a stub for what is gone, is caught here)."""
    import ast
    from pathlib import Path

    rust = pytest.importorskip("gridrail._kernels", reason="the Rust extension is not built")
    stub = Path(kernels.__file__).with_name("_kernels.pyi")
    tree = ast.parse(stub.read_text(encoding="utf-8"))
    stubbed = {
        node.name
        for node in tree.body
        if isinstance(node, ast.ClassDef | ast.FunctionDef) and not node.name.startswith("_")
    }
    assert stubbed == {name for name in dir(rust) if not name.startswith("_")}

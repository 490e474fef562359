"""Terminals spelled from names (gridrail.grammar.names): the name automaton is the language of
its regex text, and the scanner built from names is the scanner built from that text."""

from __future__ import annotations

from collections import deque
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridrail.errors import GrammarError, LexiconError
from gridrail.grammar import scanner as scanner_module
from gridrail.grammar.compiled import compile_grammar
from gridrail.grammar.dfa import compile_regex
from gridrail.grammar.model import Grammar, TerminalDef
from gridrail.grammar.names import NameSet, ascii_lower, ascii_lower_all
from gridrail.grammar.scanner import ScannerAutomaton, build_scanner
from gridrail.policy.bundle import Policy
from gridrail.policy.dialect import RULES
from gridrail.policy.language import role_language
from gridrail.policy.profile import GenerationProfile
from gridrail.policy.schema import Schema
from test_lexicon import HR_TABLES, _policy, _sqlite

ALPHABET = "aAbB_\"'.( é"
spellings = st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=5), max_size=6)
SUFFIXES = ("", r"\.", r"[ \t]*\(")


def _accepts(names: NameSet, data: bytes) -> bool:
    automaton = names.automaton
    positions = automaton.start
    for byte in data:
        positions = automaton.successors(positions).get(byte, frozenset())
    return automaton.accepts(positions)


@settings(max_examples=150, deadline=None)
@given(
    exact=spellings,
    folded=spellings,
    suffix=st.sampled_from(SUFFIXES),
    probes=st.lists(st.text(alphabet=ALPHABET, max_size=8), max_size=20),
)
def test_the_automaton_is_the_language_of_the_pattern(exact, folded, suffix, probes) -> None:
    names = NameSet(tuple(exact), tuple(folded), suffix)
    regex = compile_regex(names.pattern) if names.pattern else None
    words = [*names.exact, *names.folded, *(w.upper() for w in names.folded)]
    for text in [*probes, *words, *(w + "." for w in words), *(w + " (" for w in words)]:
        data = text.encode()
        expected = regex is not None and regex.fullmatch(data)
        assert _accepts(names, data) == expected, (names.pattern, text)


def test_folding_is_ascii_only() -> None:
    names = NameSet(folded=("ÉMILE",))
    assert names.folded == ("Émile",)  # stored with the ASCII letters lower-cased
    assert _accepts(names, "ÉMILE".encode()) and _accepts(names, "Émile".encode())
    assert not _accepts(names, "émile".encode())  # É is not ASCII: never folded
    assert compile_regex(names.pattern).fullmatch("ÉmIlE".encode())


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.text(alphabet="aZ_\0é\n ", max_size=4), max_size=6))
def test_names_fold_in_bulk_as_one_by_one(texts) -> None:
    """`ascii_lower_all` (one pass over the joined text) and the dialects' bulk rules agree
    with the one-name rules, separators and non-ASCII names included."""
    assert ascii_lower_all(texts) == [ascii_lower(t) for t in texts]
    for rules in RULES.values():
        assert rules.catalog_keys(texts) == [rules.catalog_key(t) for t in texts]
        expected = [i for i, t in enumerate(texts) if rules.bare_may_denote(t)]
        assert rules.bare_may_denote_all(texts) == expected


def test_outside_finds_a_spelling_the_terminal_cannot_take() -> None:
    identifier = compile_regex(r"[A-Za-z_][A-Za-z0-9_]*")
    assert NameSet(folded=("ab", "c_d")).outside(identifier) is None
    assert NameSet(exact=("ok", "not ok")).outside(identifier) == "not ok"
    assert NameSet(folded=("ab",), suffix=r"\(").outside(identifier) == "ab("


def test_a_pattern_out_of_step_with_its_names_is_refused() -> None:
    names = NameSet(exact=("a",))
    terminal = TerminalDef("T", 0, names.pattern, "", 0, False, names)
    with pytest.raises(GrammarError, match="not the regex of its name set"):
        replace(terminal, pattern="b")


# -- the scanner ---------------------------------------------------------------------------


def _without_names(grammar: Grammar) -> Grammar:
    """The same grammar with every name set left as its regex text only."""
    return replace(grammar, terminals=tuple(replace(t, names=None) for t in grammar.terminals))


def _assert_same_automaton(one: ScannerAutomaton, other: ScannerAutomaton) -> None:
    """Both read every byte string alike: the same accept and live sets after it, and death at
    the same byte (a product walk over the pairs of states the same bytes reach)."""
    seen = {(one.start, other.start)}
    queue = deque(seen)
    while queue:
        p, q = queue.popleft()
        assert one.accepts[p] == other.accepts[q] and one.live[p] == other.live[q]
        for byte in range(256):
            p2, q2 = one.step(p, byte), other.step(q, byte)
            assert (p2 < 0) == (q2 < 0), (p, q, byte)
            if p2 >= 0 and (p2, q2) not in seen:
                seen.add((p2, q2))
                queue.append((p2, q2))


HR_ROLES = [None, "analyst", "clerk", "admin"]


@pytest.mark.parametrize("profile", [None, GenerationProfile()], ids=["language", "profile"])
@pytest.mark.parametrize("role", HR_ROLES)
def test_the_scanner_from_names_is_the_scanner_from_their_regex(role, profile) -> None:
    schema = Schema.from_tables("sqlite", {**HR_TABLES, "Quarterly Results": ["Q", "rev USD"]})
    policy = _policy() if role else None
    language, _, _ = role_language(_sqlite(), policy, role, schema, profile=profile)
    named = [t.name for t in language.terminals if t.names is not None]
    assert {"TABLE_NAME", "COLUMN_NAME"} <= set(named)
    if profile is not None:
        assert "QUALIFIER" in named
    scanner = compile_grammar(language).scanner
    from_regex = build_scanner(
        [t for t in _without_names(language).terminals if t.name not in language.declared]
    )
    _assert_same_automaton(scanner, from_regex)
    # the product hands its masks and groups over ready-made: they are its sets'
    labels = scanner.labels
    assert labels is not None and len(labels.index) == scanner.num_states
    for sets, masks, grouped in (
        (scanner.accepts, scanner.accept_mask, labels.accept),
        (scanner.live, scanner.live_mask, labels.live),
    ):
        assert masks == tuple(sum(1 << t for t in terminals) for terminals in sets)
        assert masks == tuple(grouped[group] for group in labels.index.tolist())


def test_the_base_scanner_is_shared_by_every_schema() -> None:
    first = compile_grammar(role_language(_sqlite(), schema=_schema(10))[0]).scanner
    second = compile_grammar(role_language(_sqlite(), schema=_schema(20))[0]).scanner
    base = first.start  # the base's states come first and are numbered as in the base
    assert second.start == base
    assert first.transitions[: base * 256] == second.transitions[: base * 256]
    assert first.num_states < second.num_states


def _schema(tables: int) -> Schema:
    return Schema.from_tables(
        "sqlite", {f"t{i}": [f"c{i}_{j}" for j in range(5)] for i in range(tables)}
    )


def test_a_grammar_with_names_round_trips_its_canonical_form() -> None:
    schema = Schema.from_tables("sqlite", HR_TABLES)
    language, _, _ = role_language(_sqlite(), _policy(), "analyst", schema)
    again = Grammar.from_canonical(language.canonical_form())
    assert again.fingerprint == language.fingerprint
    assert again.terminal("COLUMN_NAME").names == language.terminal("COLUMN_NAME").names
    one, other = compile_grammar(language).scanner, compile_grammar(again).scanner
    assert one.transitions == other.transitions  # the archive replays the same state ids
    # a name set is part of the scanner's definition, not only its regex text
    assert _without_names(language).lexical_fingerprint != language.lexical_fingerprint


def test_an_archived_name_set_edited_is_refused() -> None:
    schema = Schema.from_tables("sqlite", HR_TABLES)
    language, _, _ = role_language(_sqlite(), schema=schema)
    text = language.canonical_form().replace('"salary"', '"wages"', 1)
    with pytest.raises(GrammarError):
        Grammar.from_canonical(text)


def test_a_large_catalog_compiles() -> None:
    # 300 tables x 20 columns: past the old regex bound (it failed from about 200 tables)
    tables = {f"acct_price_{t}": [f"item_cost_{t}_{c}" for c in range(20)] for t in range(300)}
    language, _, _ = role_language(
        _sqlite(),
        Policy.from_text('[roles.r]\nstatements = ["select"]\n'),
        "r",
        Schema.from_tables("sqlite", tables),
    )
    scanner = compile_grammar(language).scanner
    start = scanner.start
    after = scanner.run(start, b"item_cost_299_19")
    column = language.terminal("COLUMN_NAME").index
    assert after[1] == len(b"item_cost_299_19") and (scanner.accept_mask[after[0]] >> column) & 1
    missing = scanner.run(start, b"item_cost_300_0")
    assert not (scanner.live_mask[missing[0]] >> column) & 1 or missing[1] < 15


def test_the_state_bound_names_the_terminals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scanner_module, "MAX_NAME_STATES", 10)
    language, _, _ = role_language(_sqlite(), schema=_schema(3))
    with pytest.raises(LexiconError, match="TABLE_NAME, COLUMN_NAME need more than 10"):
        compile_grammar(language)

"""No panic crosses the boundary (issue 16 item 5): every entry point of the Rust kernels,
driven with random and malformed arguments — states and nodes outside their tables, tables of
the wrong length, terminal sets of another width, tables of one grammar with another's — returns
or raises ValueError / OverflowError / TypeError. A Rust panic would surface as pyo3's
PanicException, a BaseException that `except Exception` does not catch: one request could take
a serving worker down. The parity of well-formed calls with the Python specification is
tests/test_kernels.py's, tests/test_walk_kernel.py's and tests/test_lalr.py's; here only the
contract at the edge is checked. The long tier runs many more examples."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gridrail as gr
from gridrail import kernels
from support.hr_example import hr_guide
from support.long_tier import long_size
from test_walk_arm import _small_vocab

pytestmark = pytest.mark.skipif(not kernels.KERNELS_ENABLED, reason="the Rust kernels are off")
rust = kernels._kernels

EXPECTED = (ValueError, OverflowError, TypeError)  # what a caller's bad arguments may raise


def _edge(call: Callable[[], object]) -> None:
    """Run `call`; any error must be one of EXPECTED (a panic fails the test)."""
    with contextlib.suppress(EXPECTED):
        call()


@cache
def _tables(role: str) -> kernels.KernelTables:
    guide = hr_guide(_small_vocab(), role)
    return kernels.kernel_tables(guide.oracle, guide.trie)


@cache
def _guide() -> gr.Guide:
    return hr_guide(_small_vocab(), "analyst")


SMALL = st.integers(-3, 70)
INTS = st.one_of(SMALL, st.integers(-(2**31), 2**31 - 1), st.integers(0, 2**64 - 1))
BYTES = st.binary(max_size=64)
WORDS = st.one_of(
    BYTES, st.integers(0, 4).flatmap(lambda n: st.binary(min_size=8 * n, max_size=8 * n))
)
CLASS = st.tuples(INTS, INTS, INTS, INTS, BYTES)
ROLES = st.sampled_from(("analyst", "admin"))


def _fuzz(examples: int):
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@_fuzz(100)
@given(ROLES, ROLES, SMALL, INTS, SMALL, BYTES, WORDS, INTS, INTS, st.none() | INTS)
def test_walks_of_any_arguments_do_not_panic(
    scanner_of, trie_of, scan, length, accept, tail, allowed, root, vocab_size, base_states
) -> None:
    # the scanner of one role's language with the trie of another: tables that do not belong;
    # a store of walks below nodes that claims any number of base states
    scanner, trie = _tables(scanner_of).scanner, _tables(trie_of).trie

    def walk() -> object:
        shared = None if base_states is None else rust.SharedWalks(base_states, 4, 1 << 12)
        args = (scan, length, accept, tail, allowed, root, vocab_size, shared)
        return scanner.walk(trie, *args)

    _edge(walk)


@_fuzz(100)
@given(
    ROLES, ROLES, st.lists(SMALL, max_size=6), SMALL, SMALL, INTS, SMALL, BYTES,
    st.lists(CLASS, max_size=4), INTS, INTS, st.booleans(), st.none() | INTS,
)  # fmt: skip
def test_residues_of_any_arguments_do_not_panic(
    lr_of, scanner_of, stack, start_scan, scan, length, accept, tail, classes, vocab_size,
    ids_below, own_ignored, base_states,
) -> None:  # fmt: skip
    mine, other = _tables(lr_of), _tables(scanner_of)
    ignored = other.ignored if own_ignored else mine.ignored
    live = (stack, scan, length, accept, tail, classes, vocab_size, ids_below)

    def residue() -> object:
        shared = None if base_states is None else rust.SharedWalks(base_states, 4, 1 << 12)
        memo = rust.WalkMemo(64, 1 << 16, shared)
        return rust.cd_residue(memo, other.scanner, mine.lr, other.trie, ignored, start_scan, *live)

    _edge(residue)


@_fuzz(50)
@given(st.data())
def test_residues_of_real_walks_under_wrong_stacks_do_not_panic(data) -> None:
    """Real CD classes from a walk, then a residue against a random stack and pending lexeme."""
    guide = _guide()
    tables = kernels.kernel_tables(guide.oracle, guide.trie)
    text = data.draw(st.sampled_from([b"SELECT ", b"SELECT name FROM ", b"SELECT count(", b"S"]))
    cfg = guide.oracle.feed(guide.oracle.initial, text)
    words = tables.words
    allowed = kernels._words_of(guide.oracle.allowed_mask(cfg) | guide.oracle.ignored_mask, words)
    walked = tables.scanner.walk(
        tables.trie, cfg.scan_state, min(cfg.lexeme_length, 1), cfg.accept_state,
        cfg.tail if cfg.accept_state >= 0 else b"", allowed, 0, guide.vocab.size,
    )  # fmt: skip
    stack = data.draw(st.lists(SMALL, min_size=1, max_size=8))
    memo = rust.WalkMemo(64, 1 << 16)
    live = (stack, data.draw(SMALL), data.draw(INTS), data.draw(SMALL), data.draw(BYTES))
    t = tables

    def residue() -> object:
        return rust.cd_residue(
            memo,
            t.scanner,
            t.lr,
            t.trie,
            t.ignored,
            t.start_scan,
            *live,
            walked[3],
            guide.vocab.size,
            48,
        )

    _edge(residue)


@_fuzz(100)
@given(BYTES, BYTES, INTS, BYTES, st.booleans())
def test_scan_tables_of_any_bytes_do_not_panic(transitions, accepting, state, data, as_ints):
    def build_and_run():
        table = rust.ScanTable(list(transitions) if as_ints else transitions, accepting)
        _edge(lambda: table.run(state, data))
        _edge(lambda: table.canonical_order(state))
        _edge(lambda: rust.WalkScanner(table, 1, transitions, accepting))

    _edge(build_and_run)


@_fuzz(100)
@given(BYTES, BYTES, BYTES, BYTES, st.dictionaries(INTS, st.lists(INTS, max_size=3), max_size=3))
def test_tries_of_any_bytes_do_not_panic(edge, depth, size, token_id, aliases) -> None:
    def build_and_walk():
        trie = rust.TrieTable(edge, depth, size, token_id, aliases)
        tables = _tables("analyst")
        walk = tables.scanner.walk
        _edge(lambda: walk(trie, 0, 0, -1, b"", b"\xff" * 8 * tables.words, 0, 300))

    _edge(build_and_walk)


ROWS = st.lists(st.dictionaries(INTS, INTS, max_size=4), max_size=5)


PRODUCTIONS = st.lists(st.tuples(INTS, INTS), max_size=5)


@_fuzz(100)
@given(ROWS, ROWS, PRODUCTIONS, INTS, INTS, st.lists(SMALL, max_size=4))
def test_lr_tables_of_any_rows_do_not_panic(action, goto, productions, end, words, stack) -> None:
    t = _tables("analyst")
    memo = rust.WalkMemo(8, 1 << 12)
    size = _guide().vocab.size
    live = (stack or [0], t.start_scan, 0, -1, b"", [(0, t.start_scan, 0, -1, b"")], size, 48)

    def build_and_run() -> None:
        lr = rust.LrTable(action, goto, productions, end, words)
        rust.cd_residue(memo, t.scanner, lr, t.trie, t.ignored, t.start_scan, *live)

    _edge(build_and_run)


DFA = st.tuples(INTS, BYTES, BYTES)
NAMES = st.lists(st.text(max_size=6), max_size=4)
NAME_SET = st.tuples(NAMES, NAMES, st.none() | DFA)


@_fuzz(100)
@given(NAME_SET, DFA, BYTES, INTS, BYTES, st.lists(NAME_SET, max_size=3), INTS)
def test_name_automata_of_any_arguments_do_not_panic(
    names, dfa, base, start, accepting, slots, bound
):
    _edge(lambda: rust.NameAutomaton(*names).outside(dfa))
    _edge(
        lambda: rust.name_rows(
            base, start, accepting, [rust.NameAutomaton(*s) for s in slots], bound
        )
    )
    _edge(lambda: rust.literal_alternation(names[0], names[1]))


@_fuzz(100)
@given(
    NAMES, st.text(max_size=2), st.text(max_size=2), st.booleans(), DFA, st.lists(DFA, max_size=2),
    st.lists(st.tuples(INTS, DFA), max_size=3), INTS, INTS,
)  # fmt: skip
def test_spellings_and_unions_of_any_arguments_do_not_panic(
    words, open_, close, doubles, dfa, shadows, parts, max_states, max_work
) -> None:
    _edge(lambda: rust.spell_forms(words, open_, close, doubles, dfa, shadows))
    _edge(lambda: rust.union_scanner(parts, max_states, max_work))


@_fuzz(100)
@given(
    INTS, INTS, st.lists(INTS, max_size=6), st.lists(st.lists(INTS, max_size=4), max_size=6), INTS
)
def test_lalr_tables_of_any_coding_do_not_panic(terminals, nonterminals, lhs, rhs, start) -> None:
    _edge(lambda: rust.lalr_tables(terminals, nonterminals, lhs, rhs, start))


@_fuzz(100)
@given(BYTES, BYTES, BYTES, INTS, INTS, BYTES, BYTES, BYTES, INTS, st.booleans())
def test_slot_scanners_of_any_arguments_do_not_panic(
    layout, slot_accept, slot_live, start, width, token_bytes, lengths, ids, state, cut
) -> None:
    table = _guide().compiled.scanner.kernel_table

    def build_and_scan():
        scanner = rust.SlotScanner(
            table, layout, slot_accept, slot_live, start, width, token_bytes, lengths
        )
        _edge(lambda: scanner.scan(ids, state, cut))

    _edge(build_and_scan)


FUZZ = [
    test_walks_of_any_arguments_do_not_panic,
    test_residues_of_any_arguments_do_not_panic,
    test_residues_of_real_walks_under_wrong_stacks_do_not_panic,
    test_scan_tables_of_any_bytes_do_not_panic,
    test_tries_of_any_bytes_do_not_panic,
    test_lr_tables_of_any_rows_do_not_panic,
    test_name_automata_of_any_arguments_do_not_panic,
    test_spellings_and_unions_of_any_arguments_do_not_panic,
    test_lalr_tables_of_any_coding_do_not_panic,
    test_slot_scanners_of_any_arguments_do_not_panic,
]


@pytest.mark.long
@pytest.mark.parametrize("fuzz", FUZZ, ids=lambda f: f.__name__.removeprefix("test_"))
def test_the_kernels_fuzzed_longer(fuzz) -> None:
    """Each fuzz test again, its examples drawn afresh each round (hypothesis seeds a run at
    random): 20 rounds under `make check-long`, 4 in CI's reduced long tier."""
    for _ in range(long_size(20, 4)):
        fuzz()

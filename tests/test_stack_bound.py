"""The stack bound (issue 13 item 3: the language is a subset of what the database accepts):
SQLite's parser refuses a statement that nests deeper than its 100-entry stack holds ("parser
stack overflow"), so sqlite.lark carries a bound (sqlite.stack.toml) and the language holds
only the statements whose parse stays under it.

* Exactness on small grammars, against a brute force written here: the terminals the LR
  machine allows at every reachable stack are exactly those after which some completion keeps
  every stack of the parse within the limit; the completer's plans stay within it.
* SQLite: the deepest statements of the bundled language — hand-written nestings of every
  construct and random walks that climb to the bound — are prepared without a stack overflow,
  and the bound keeps at least half of each nesting SQLite's parser holds.
* The masks near the bound: the Rust residue leaves those configurations to the reference
  (and equals it elsewhere), a token walk through a guide that climbs the bound meets no empty
  mask and its completion prepares.
"""

from __future__ import annotations

import random
import sqlite3
from dataclasses import replace
from functools import cache

import pytest

import gridrail as gr
from assets import asset
from gridrail import kernels
from gridrail.grammar.lalr import ACCEPT
from gridrail.parse.completion import Completer
from gridrail.parse.stack import StackNode
from support.deep_statements import NESTINGS, deep_statement, deepest, peak_load
from support.hr_example import hr_guide
from support.long_tier import long_size

# HEAVY is the cheapest operand and the heaviest: near the limit a completion writes "xxxxxx"
TOY = r"""
start: e ";"
e: e "+" t | t
t: "(" e ")" | CALL e ")" | "xxxxxx" | HEAVY | "-" t | "[" [e] "]"
CALL: /f\(/
HEAVY: /z/
%ignore " "
"""


def _toy(limit: int, call_weight: int) -> gr.Oracle:
    grammar = gr.Grammar.from_lark(TOY)
    bound = gr.StackBound(limit, (("CALL", call_weight), ("HEAVY", 3)))
    return gr.Oracle(gr.compile_grammar(replace(grammar, stack_bound=bound)))


class _BruteForce:
    """The bounded language's viable stacks by search over the raw LR tables: a stack is a
    tuple of states, its load the sum of the weights of their accessing symbols, recomputed
    here from the tables and the bound."""

    def __init__(self, oracle: gr.Oracle):
        tables = oracle.compiled.tables
        self.tables = tables
        bound = oracle.compiled.grammar.stack_bound
        named = dict(bound.weights)
        self.limit = bound.limit
        self.weight = {0: 0}
        for row in tables.action:
            for t, move in row.items():
                if move >= 0:
                    self.weight[move] = named.get(tables.terminal_names[t], 1)
        for row in tables.goto:
            for target in row.values():
                self.weight[target] = 1
        self._finishes: dict[tuple[int, ...], bool] = {}

    def load(self, stack: tuple[int, ...]) -> int:
        return sum(self.weight[s] for s in stack)

    def move(self, stack: tuple[int, ...], terminal: int) -> tuple[int, ...] | str | None:
        """The stack after shifting `terminal` (its reduce chain first), "accept" for $END at
        the end of a sentence, None if the tables refuse it."""
        stack = list(stack)
        while True:
            move = self.tables.action[stack[-1]].get(terminal)
            if move is None:
                return None
            if move == ACCEPT:
                return "accept"
            if move >= 0:
                return (*stack, move)
            lhs, length = self.tables.productions[-1 - move]
            del stack[len(stack) - length :]
            stack.append(self.tables.goto[stack[-1]][lhs])

    def finishes(self, stack: tuple[int, ...]) -> bool:
        """Is some completion within the limit? (breadth first over the finitely many stacks
        within it)"""
        if stack not in self._finishes:
            seen, frontier, found = {stack}, [stack], False
            while frontier and not found:
                nxt = []
                for s in frontier:
                    if self.move(s, self.tables.end) == "accept":
                        found = True
                        break
                    for t in range(self.tables.end):
                        after = self.move(s, t)
                        if (
                            after is not None
                            and after not in seen
                            and self.load(after) <= self.limit
                        ):
                            seen.add(after)
                            nxt.append(after)
                frontier = nxt
            self._finishes[stack] = found
        return self._finishes[stack]

    def allowed(self, stack: tuple[int, ...]) -> int:
        mask = 0
        for t in range(self.tables.end):
            after = self.move(stack, t)
            if isinstance(after, tuple) and self.load(after) <= self.limit and self.finishes(after):
                mask |= 1 << t
        return mask


def _reachable(oracle: gr.Oracle, length: int) -> list[StackNode]:
    """Every stack the LR machine reaches in up to `length` allowed terminals."""
    lr = oracle.lr
    level, out = [oracle.initial.stack], [oracle.initial.stack]
    for _ in range(length):
        nxt = []
        for node in level:
            allowed = lr.allowed_mask(node)
            nxt += [lr.shift(node, t) for t in range(allowed.bit_length()) if allowed >> t & 1]
        level = list({id(n): n for n in nxt}.values())
        out += level
    return out


@pytest.mark.parametrize(
    ("limit", "call_weight"),
    # (9, 2): the walk to depth 9 takes ~45 s on 2 cores: the long tier's
    [(4, 1), (6, 2), (7, 3), pytest.param(9, 2, marks=pytest.mark.long)],
)
def test_the_allowed_terminals_are_exactly_those_with_a_completion_within_the_limit(
    limit: int, call_weight: int
) -> None:
    oracle = _toy(limit, call_weight)
    brute = _BruteForce(oracle)
    stacks = _reachable(oracle, 9)
    assert any(node.load == limit for node in stacks), "the walk reaches the limit"
    refused = 0
    for node in stacks:
        states = tuple(node.states())
        assert node.load == brute.load(states) <= limit
        expected = brute.allowed(states)
        assert oracle.lr.allowed_mask(node) == expected, oracle.compiled.names_of(expected)
        raw = sum(
            1 << t for t in range(brute.tables.end) if isinstance(brute.move(states, t), tuple)
        )
        refused += raw != expected
    assert refused, "some stacks have a terminal the bound refuses"


@pytest.mark.parametrize(("limit", "call_weight"), [(4, 1), (6, 2), (7, 3)])
def test_the_completion_of_every_stack_stays_within_the_limit(limit: int, call_weight: int) -> None:
    oracle = _toy(limit, call_weight)
    completer = Completer(oracle)
    for node in _reachable(oracle, 8):
        for t in completer.plan(node):
            assert oracle.lr.allowed_mask(node) >> t & 1
            node = oracle.lr.shift(node, t)
            assert node.load <= limit
        assert oracle.lr.accepts_end(node)


def test_a_stack_bound_is_part_of_the_language_it_defines() -> None:
    grammar = gr.Grammar.bundled("sqlite")
    assert grammar.stack_bound is not None and grammar.stack_bound.limit < 100
    unbounded = replace(grammar, stack_bound=None)
    assert unbounded.fingerprint != grammar.fingerprint
    assert unbounded.compile_key != grammar.compile_key
    again = gr.Grammar.from_canonical(grammar.canonical_form())
    assert again.stack_bound == grammar.stack_bound and again.fingerprint == grammar.fingerprint
    assert '"stack_bound"' not in unbounded.canonical_form()  # older forms keep their text


@pytest.mark.parametrize(
    ("limit", "weights", "message"),
    [
        (0, (), "limit must be an int >= 1"),
        (10, (("LPAR", 0),), "ints >= 1"),
        (10, (("NO_SUCH_TERMINAL", 2),), "does not have: NO_SUCH_TERMINAL"),
    ],
)
def test_a_bad_stack_bound_is_a_grammar_error(limit, weights, message) -> None:
    grammar = gr.Grammar.bundled("sqlite")
    with pytest.raises(gr.GrammarError, match=message):
        replace(grammar, stack_bound=gr.StackBound(limit, weights))


@cache
def _sqlite_oracle() -> gr.Oracle:
    return gr.Oracle(gr.compile_grammar(gr.Grammar.bundled("sqlite")))


def _prepares(db: sqlite3.Connection, sql: str) -> bool:
    """Does SQLite's parser hold it? (other refusals, of names or meaning, come after)"""
    try:
        db.execute("EXPLAIN " + sql)
    except sqlite3.OperationalError as exc:
        return "parser stack overflow" not in str(exc)
    return True


@pytest.mark.parametrize("name", sorted(NESTINGS))
def test_the_deepest_nesting_of_each_construct_prepares(name: str) -> None:
    oracle, nesting = _sqlite_oracle(), NESTINGS[name]
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t(a)")
    ours = deepest(lambda sql: oracle.accepts((sql + ";").encode()), nesting)
    theirs = deepest(lambda sql: _prepares(db, sql), nesting)
    assert 1 <= ours < 200 and theirs < 200
    assert ours <= theirs, f"{nesting(ours)} is in the language; SQLite's stack overflows"
    assert ours >= theirs / 2, f"the bound keeps {ours} of the {theirs} levels SQLite holds"


def test_statements_that_climb_to_the_bound_prepare() -> None:
    _climb(150, seed=13)


@pytest.mark.long
def test_statements_that_climb_to_the_bound_prepare_long() -> None:
    _climb(long_size(3_000, 600), seed=1)


def _climb(size: int, seed: int) -> None:
    oracle = _sqlite_oracle()
    completer = Completer(oracle)
    limit = oracle.compiled.grammar.stack_bound.limit
    db = sqlite3.connect(":memory:")
    rng = random.Random(seed)
    at_limit = 0
    for _ in range(size):
        sentence = deep_statement(oracle, completer, rng)
        assert oracle.accepts(sentence)
        at_limit += peak_load(oracle, sentence) >= limit - 4
        sql = sentence.decode()
        assert _prepares(db, sql), sql
    assert at_limit >= size // 2, f"only {at_limit} of {size} reached the bound"


@cache
def _gpt2() -> gr.Vocabulary:
    return gr.Vocabulary.from_file(asset("tokenizers", "gpt2", "tokenizer.json"))


def test_the_rust_residue_leaves_the_configurations_near_the_bound_to_the_reference() -> None:
    pytest.importorskip("gridrail._kernels", reason="the Rust extension is not built")
    assert kernels.KERNELS_ENABLED
    vocab = _gpt2()
    guide = hr_guide(vocab, "admin", None)
    oracle, trie = guide.oracle, guide.trie
    runners = kernels.make_mask_runners(oracle, trie, vocab.size)
    from gridrail.mask.compute import _cd_residue
    from gridrail.mask.walk import ci_tokens, walk_context_independent

    def below(after, node):
        walk = walk_context_independent(oracle, trie, after, node)
        return walk, ci_tokens(trie, vocab.size, walk)

    declined = answered = 0
    cfg = oracle.initial
    for piece in [b"SELECT "] + [b"abs("] * 40:
        walk, _ = below(cfg, 0)
        got = runners.residue(cfg, runners.walk(cfg, 0)[0])
        if got is None:
            declined += 1
        else:
            answered += 1
            assert got == _cd_residue(oracle, trie, vocab, cfg, walk, below)
        after = oracle.try_feed(cfg, piece)
        if after is None:
            break
        cfg = after
    assert answered and declined


def test_a_token_walk_that_climbs_the_bound_meets_no_dead_end() -> None:
    vocab = _gpt2()
    guide = hr_guide(vocab, "analyst", gr.GenerationProfile(), gamma=True)
    limit = guide.oracle.compiled.grammar.stack_bound.limit
    rng = random.Random(5)
    db = sqlite3.connect(":memory:")
    openers = {i for i in range(vocab.size) if (vocab.token_bytes(i) or b"").endswith(b"(")}
    for _ in range(2):
        m = guide.matcher()
        peak = 0
        for _ in range(160):
            ids = [i for i in m.allowed().ids() if not guide.is_eos(i)]
            if not ids:
                break
            loads = {}
            opening = [i for i in ids if i in openers]
            for token in rng.sample(ids, min(8, len(ids))) + rng.sample(
                opening, min(8, len(opening))
            ):
                after = guide.advance(m.configuration, token)
                loads[token] = after.stack.load if after is not None else -1
            token = max(loads, key=loads.get)
            assert m.accept_tokens([token])
            peak = max(peak, m.configuration.stack.load)
        assert m.accept_tokens(m.completion())
        assert m.is_terminated()
        assert peak >= limit - 8, f"the walk climbed to {peak} of {limit}"
        sql = b"".join(vocab.token_bytes(t) for t in m.accepted_tokens() if not guide.is_eos(t))
        assert _prepares(db, sql.decode()), sql


def test_a_statement_that_nests_too_deep_is_told_so() -> None:
    oracle = _sqlite_oracle()
    with pytest.raises(gr.ParseError, match="nests as deep as the dialect's parser holds"):
        oracle.feed(oracle.initial, b"SELECT " + b"abs(" * 40 + b"1")
    guide = gr.compile(gr.Grammar.bundled("sqlite"), _gpt2())
    (violation,) = guide.check("SELECT " + "(" * 100 + "1" + ")" * 100 + ";")
    assert violation.kind == "outside_language" and "stack bound 90" in violation.message
    (violation,) = guide.check("SELECT (1;")  # not a matter of depth: no such note
    assert "stack bound" not in violation.message

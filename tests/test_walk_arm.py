"""The walk arm (issue: termination, Proposition 9): seeded sampling from the masks under a token
budget. Every output must be a sentence the parser accepts, no mask may be empty (a dead
end), and no generation may exceed its budget — including budgets as small as the reserve."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import pytest

import gridrail as gr
from assets import asset
from gridrail.spec import spec_mask
from support.long_tier import long_size

GENERATIONS = 1000
# Uniform sampling over a real tokenizer's 32k-50k tokens all but never closes a statement (no
# mask allowed EOS in 520 steps on gpt2), so those walks take the next token of the matcher's
# shortest completion at a fifth of their steps: without it their EOS control cannot pass. The
# small vocabulary's walks stay uniform; they reach EOS on their own.
REAL_TOKENIZER_FINISH_RATE = 0.2

# Tokens a SQL model would have: keywords and punctuation with and without a leading space, and
# tokens that cross lexeme boundaries; plus every single byte, so the vocabulary is byte complete.
_SQL_WORDS = [
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "BY",
    "ORDER",
    "HAVING",
    "LIMIT",
    "OFFSET",
    "JOIN",
    "LEFT",
    "ON",
    "AS",
    "AND",
    "OR",
    "NOT",
    "IN",
    "IS",
    "NULL",
    "LIKE",
    "BETWEEN",
    "DISTINCT",
    "COUNT",
    "count(",
    "avg(",
    "max(",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "UNION",
    "EXCEPT",
    "WITH",
    "INSERT",
    "INTO",
    "VALUES",
    "UPDATE",
    "SET",
    "DELETE",
    "ASC",
    "DESC",
    "EXISTS",
    "CAST(",
    "T1.",
    "T2.",
    "name",
    "id",
    "age",
    "salary",
    "employees",
    "orders",
    "*",
    ",",
    ";",
    "(",
    ")",
    "=",
    ">",
    "<",
    ">=",
    "<>",
    "''",
    "'a'",
    '"x"',
    "1",
    "10",
    "0.5",
    "(*)",
    ");",
    "',",
    "),",
    ".*",
    "--",
    "/*",
    "*/",
]
_CROSSING = ["yees where", " FROM t;", "a,b", "1)", "x;", "T1.name FROM", "'x');", " = 1 AND"]


@cache
def _small_vocab() -> gr.Vocabulary:
    words = [w.encode() for w in _SQL_WORDS] + [b" " + w.encode() for w in _SQL_WORDS]
    words += [w.encode() for w in _CROSSING]
    spellings = [bytes((b,)) for b in range(256)] + sorted(set(words))
    return gr.Vocabulary([*spellings, None], eos_token_ids=len(spellings))


@cache
def _guide(vocab_name: str) -> gr.Guide:
    grammar = gr.compile_grammar(gr.Grammar.bundled("sqlite"))
    if vocab_name == "small":
        return gr.compile(grammar, _small_vocab())
    return gr.compile(
        grammar, gr.Vocabulary.from_file(asset("tokenizers", vocab_name, "tokenizer.json"))
    )


@dataclass
class Generation:
    tokens: list[int]
    budget: int
    stop: str  # "eos" (sampled) or "reserve" (the budget trigger wrote the completion)


def generate(
    guide: gr.Guide,
    rng: random.Random,
    budget: int,
    spec_every: int = 0,
    choose: Callable[[list[int]], int] | None = None,
    finish_rate: float = 0.0,
) -> Generation:
    """Uniform sampling from the exact masks under a budgeted matcher (or `choose` picks from
    the allowed ids); at a `finish_rate` share of the steps the next token of the matcher's
    shortest completion is taken instead, steering towards EOS. A sampled token the budget
    refuses makes the loop write the matcher's completion instead (the trigger)."""
    m = guide.matcher(max_tokens=budget)
    step = 0
    while True:
        allowed = m.allowed()  # raises EmptyMaskError at a dead end
        if spec_every and step % spec_every == 0:
            assert allowed == spec_mask(guide.oracle, guide.vocab, m.configuration)
        step += 1
        if finish_rate and rng.random() < finish_rate:
            token = m.completion()[0]
        else:
            token = (choose or rng.choice)(allowed.ids())
        if m.accept_tokens([token]):
            if m.is_terminated():
                return Generation(m.accepted_tokens(), budget, "eos")
            continue
        assert m.accept_tokens(m.completion())  # the invariant: the completion always fits
        return Generation(m.accepted_tokens(), budget, "reserve")


def _run_walk_arm(
    vocab_name: str, generations: int, seed: int, spec_every: int, finish_rate: float = 0.0
) -> None:
    guide = _guide(vocab_name)
    rng = random.Random(seed)
    reserve = len(guide.matcher().completion())
    stops = {"eos": 0, "reserve": 0}
    for n in range(generations):
        budget = reserve if n % 10 == 0 else rng.randint(reserve, reserve + 40)
        gen = generate(guide, rng, budget, spec_every, finish_rate=finish_rate)
        assert len(gen.tokens) <= gen.budget, f"budget overrun: {len(gen.tokens)} > {gen.budget}"
        assert guide.is_eos(gen.tokens[-1])
        text = b"".join(guide.vocab.token_bytes(t) for t in gen.tokens[:-1])
        assert guide.oracle.accepts(text), f"not a sentence: {text!r}"
        stops[gen.stop] += 1
    assert stops["reserve"] > 0 and stops["eos"] > 0  # both ways of stopping were exercised


def test_walk_arm_small_vocabulary() -> None:
    _run_walk_arm("small", GENERATIONS, seed=1, spec_every=25)


@pytest.mark.long
def test_walk_arm_small_vocabulary_long() -> None:
    _run_walk_arm("small", long_size(full=10_000, reduced=1_500), seed=2, spec_every=0)


@pytest.mark.long
@pytest.mark.parametrize("vocab_name", ["gpt2", "llama2"])
def test_walk_arm_real_tokenizers_long(vocab_name: str) -> None:
    generations = long_size(full=100, reduced=40)
    _run_walk_arm(vocab_name, generations, 3, 0, finish_rate=REAL_TOKENIZER_FINISH_RATE)


def test_budget_below_the_reserve_is_refused() -> None:
    guide = _guide("small")
    reserve = len(guide.matcher().completion())
    with pytest.raises(ValueError, match="below the reserve"):
        guide.matcher(max_tokens=reserve - 1)


def test_completion_is_always_accepted() -> None:
    guide = _guide("small")
    oracle = guide.oracle
    for prefix in [
        b"",
        b"SELECT",
        b"SELECT count (",
        b"SELECT 'ab",
        b"SELECT a count ",
        b"WITH x AS (SELECT a FROM t",
        b"SELECT CASE WHEN a THEN",
        b"DELETE FROM t WHERE",
    ]:
        m = guide.matcher()
        assert m.accept_tokens(guide.trie.tokenize(prefix))
        finish = m.completion()
        assert m.accept_tokens(finish) and m.is_terminated()
        assert oracle.accepts(prefix + b"".join(guide.vocab.token_bytes(t) for t in finish[:-1]))


def test_rolling_back_into_a_reserve_completion_keeps_the_budget() -> None:
    """A rollback into the middle of a written completion must leave a completion that still
    fits: the rest of the one written (a fresh shortest completion can be a token longer)."""
    guide = _guide("small")
    rng = random.Random(4)
    reserve = len(guide.matcher().completion())
    checked = 0
    for _ in range(200):
        budget = rng.randint(reserve, reserve + 10)
        m = guide.matcher(max_tokens=budget)
        while not m.is_terminated():
            if not m.accept_tokens([rng.choice(m.allowed().ids())]):
                written = m.completion()
                assert m.accept_tokens(written)
                back = rng.randint(1, min(len(written), m.num_accepted))
                m.rollback(back)
                finish = m.completion()
                assert m.num_accepted + len(finish) <= budget
                assert m.accept_tokens(finish) and m.is_terminated()
                checked += 1
    assert checked > 50

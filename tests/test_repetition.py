"""The loop guard (decode/repetition.py): exactly the tokens that would complete a run of
`repeats` copies of a block are refused, never every allowed one, and the decode loop with it
never chooses one — while the same looping model without it loops (the positive control)."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gridrail as gr
from gridrail.decode import generate
from gridrail.decode.logits import allowed_array
from gridrail.decode.repetition import LoopGuard
from support.hr_example import hr_guide
from test_walk_arm import _small_vocab


def _ends_in_loop(tokens: list[int], guard: LoopGuard) -> bool:
    """The specification, by brute force: `tokens` ends with `repeats` copies of a block of 2
    to `max_block` tokens holding two distinct tokens."""
    for block in range(2, guard.max_block + 1):
        size = guard.repeats * block
        if size > len(tokens):
            break
        copy = tokens[-block:]
        if len(set(copy)) > 1 and tokens[-size:] == copy * guard.repeats:
            return True
    return False


tails = st.lists(st.integers(0, 3), max_size=40)  # few distinct tokens: loops are common
guards = st.builds(LoopGuard, st.integers(2, 4), st.integers(2, 8))


@settings(max_examples=400, deadline=None)
@given(tails, guards)
def test_refused_is_exactly_the_tokens_that_close_a_loop(tail, guard):
    refused = guard.refused(tail)
    for token in range(5):
        assert (token in refused) == _ends_in_loop([*tail, token], guard), (tail, token)


@settings(max_examples=200, deadline=None)
@given(tails, guards, st.lists(st.booleans(), min_size=5, max_size=5))
def test_narrow_only_removes_and_never_empties(tail, guard, bits):
    allowed = np.array(bits, dtype=bool)
    narrowed = guard.narrow(allowed, tail)
    assert not (narrowed & ~allowed).any()
    if allowed.any():
        assert narrowed.any()
    refused = guard.refused(tail)
    if (allowed & ~np.isin(np.arange(5), list(refused))).any():
        assert not any(narrowed[t] for t in refused if t < 5)


def test_a_run_of_one_token_is_never_refused():
    guard = LoopGuard()
    assert guard.refused([7] * 100) == set()
    assert guard.refused([1, 2] * 2 + [1]) == {2}  # the third copy of (1, 2)
    assert guard.refused([1, 2] * 2) == set()  # two copies are allowed


def test_the_check_reads_a_bounded_window():
    guard = LoopGuard(repeats=3, max_block=4)
    prefix = list(range(100, 400))  # no repetition at all
    assert guard.refused([*prefix, 1, 2, 1, 2, 1]) == guard.refused([1, 2, 1, 2, 1]) == {2}


@pytest.mark.parametrize("repeats, block", [(1, 8), (3, 1)])
def test_bad_parameters_are_refused(repeats, block):
    with pytest.raises(ValueError):
        LoopGuard(repeats, block)


@cache
def _guide() -> gr.Guide:
    return hr_guide(_small_vocab(), "analyst", profile=gr.GenerationProfile())


class Parrot:
    """A model that loves to repeat what it wrote, but never the token it just wrote: a
    token's logit grows with how often it was chosen, so it cycles through a few favourites.
    Records every prefix it sees."""

    def __init__(self, size: int):
        self.size = size
        self.prefixes: list[list[int]] = []

    def __call__(self, generated) -> np.ndarray:
        self.prefixes.append(list(generated))
        logits = np.linspace(0.0, 1.0, self.size)  # ties broken the same way every time
        for token in generated:
            logits[token] += 10.0
        if generated:
            logits[generated[-1]] -= 1e6
        return logits


def _run(guard: LoopGuard | None) -> tuple[Parrot, gr.decode.Generation]:
    guide = _guide()
    parrot = Parrot(guide.vocab.size)
    return parrot, generate(guide, parrot, max_tokens=60, loop_guard=guard)


def test_without_the_guard_the_parrot_loops():
    _, result = _run(None)
    assert result.stop == "reserve"
    assert any(_ends_in_loop(result.tokens[:n], LoopGuard()) for n in range(len(result.tokens)))


def test_with_the_guard_no_chosen_token_closes_a_loop():
    guard = LoopGuard()
    parrot, result = _run(guard)
    guide = _guide()
    assert result.mode["loop_guard"] == guard.description
    checked = 0
    for prefix in parrot.prefixes:
        chosen = result.tokens[len(prefix)]
        m = guide.matcher()
        assert m.accept_tokens(prefix)
        allowed = allowed_array(m.allowed())
        others = allowed.copy()
        others[list(guard.refused(prefix))] = False
        if others.any():  # a refusal happens only where another allowed token exists
            assert not _ends_in_loop([*prefix, chosen], guard), guide.vocab.token_bytes(chosen)
            checked += 1
    assert checked == len(parrot.prefixes) > 3
    m = guide.matcher()  # still a sentence of the language: the guard only narrowed choices
    assert m.accept_tokens(result.tokens) and m.is_terminated()

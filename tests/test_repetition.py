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
from gridrail.vocab.vocabulary import ByteCompletenessWarning
from support.hr_example import hr_guide
from test_walk_arm import _small_vocab


def _ends_in_loop(tokens: list[int], guard: LoopGuard) -> bool:
    """The specification, by brute force: `tokens` (keys) ends with `repeats` copies of a block
    of `min_block` to `max_block` keys holding two distinct keys."""
    for block in range(guard.min_block, guard.max_block + 1):
        size = guard.repeats * block
        if size > len(tokens):
            break
        copy = tokens[-block:]
        if len(set(copy)) > 1 and tokens[-size:] == copy * guard.repeats:
            return True
    return False


tails = st.lists(st.integers(0, 3), max_size=40)  # few distinct tokens: loops are common
guards = st.integers(2, 4).flatmap(
    lambda low: st.builds(LoopGuard, st.integers(2, 4), st.just(low), st.integers(low, 8))
)


@settings(max_examples=400, deadline=None)
@given(tails, guards)
def test_refused_is_exactly_the_tokens_that_close_a_loop(tail, guard):
    refused = guard.refused(tail)
    for token in range(5):
        assert (token in refused) == _ends_in_loop([*tail, token], guard), (tail, token)


SPELLINGS = [b"a", b"b", b"A", b" a", b"(", b")", b"((", b"'", b"'(", b" ", b"\n  ", b"x("]
with pytest.warns(ByteCompletenessWarning):  # a guard needs no completeness
    VOCAB = gr.Vocabulary([*SPELLINGS, None], eos_token_ids=len(SPELLINGS))
ID = {spelled: i for i, spelled in enumerate(SPELLINGS)}


def _followed(guard: LoopGuard, *spelled: bytes):
    out = guard.follow(VOCAB)
    out.feed(ID[s] for s in spelled)
    return out


def _refused(out, allowed: np.ndarray | None = None) -> set[bytes]:
    allowed = np.ones(VOCAB.size, dtype=bool) if allowed is None else allowed
    narrowed = out.narrow(allowed)
    return {SPELLINGS[i] for i in np.flatnonzero(allowed & ~narrowed) if i < len(SPELLINGS)}


def test_blocks_are_compared_as_sql_reads_them():
    guard = LoopGuard(repeats=3, min_block=2, max_depth=None)
    # "a b a b a" with case and layout varied: the next "b" closes the third copy
    out = _followed(guard, b"a", b"b", b" ", b"A", b"b", b"\n  ", b" a")
    assert _refused(out) == {b"b"}
    assert _refused(_followed(guard, b"a", b"b", b"a", b"b")) == set()  # two copies only


def test_parentheses_past_the_depth_are_refused_outside_quotes():
    guard = LoopGuard(max_depth=2)
    assert _refused(_followed(guard, b"(")) == {b"(("}  # depth 1: one more, not two
    deep = _followed(guard, b"x(", b"(")
    assert _refused(deep) == {b"(", b"((", b"x("}  # "'(" opens a string, not a parenthesis
    assert _refused(_followed(guard, b"x(", b"(", b")")) == {b"(("}
    assert _refused(_followed(guard, b"x(", b"(", b"'")) == set()  # inside a string: text


def test_the_narrowed_choice_is_never_empty():
    guard = LoopGuard(max_depth=1)
    out = _followed(guard, b"(")
    only_openers = np.zeros(VOCAB.size, dtype=bool)
    only_openers[[ID[b"("], ID[b"(("]]] = True
    assert out.narrow(only_openers).tolist() == only_openers.tolist()
    assert _refused(out) == {b"(", b"((", b"x("}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(SPELLINGS), max_size=30),
    st.lists(st.booleans(), min_size=13, max_size=13),
)
def test_narrow_only_removes(spelled, bits):
    out = _followed(LoopGuard(repeats=2, min_block=2, max_depth=2), *spelled)
    allowed = np.array(bits, dtype=bool)
    narrowed = out.narrow(allowed)
    assert not (narrowed & ~allowed).any()
    assert narrowed.any() == allowed.any()


def test_a_run_of_one_token_is_never_refused():
    guard = LoopGuard(repeats=3, min_block=2)
    assert guard.refused([7] * 100) == set()
    assert guard.refused([1, 2] * 2 + [1]) == {2}  # the third copy of (1, 2)
    assert guard.refused([1, 2] * 2) == set()  # two copies are allowed


def test_the_check_reads_a_bounded_window():
    guard = LoopGuard(repeats=3, min_block=2, max_block=4)
    prefix = list(range(100, 400))  # no repetition at all
    assert guard.refused([*prefix, 1, 2, 1, 2, 1]) == guard.refused([1, 2, 1, 2, 1]) == {2}


@pytest.mark.parametrize(
    "repeats, low, high, depth", [(1, 3, 8, None), (3, 1, 8, None), (3, 5, 4, None), (3, 3, 8, 0)]
)
def test_bad_parameters_are_refused(repeats, low, high, depth):
    with pytest.raises(ValueError):
        LoopGuard(repeats, low, high, depth)


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


def _key(spelled: bytes | None) -> bytes:
    return b"".join((spelled or b"").lower().split())


def _runs_away(vocab: gr.Vocabulary, prefix: list[int], token: int, guard: LoopGuard) -> bool:
    """The specification of a refusal, over the whole text: `token` closes the `repeats`-th
    copy of a block of keys, or takes the parentheses outside quotes past `max_depth`."""
    keys = [_key(vocab.token_bytes(t)) for t in [*prefix, token]]
    if keys[-1] and _ends_in_loop([k for k in keys if k], guard):
        return True
    depth, quote, deepest = 0, None, 0
    for i, t in enumerate([*prefix, token]):
        for byte in vocab.token_bytes(t) or b"":
            if quote is not None:
                quote = None if byte == quote else quote
            elif byte in b"'\"`[":
                quote = ord("]") if byte == ord("[") else byte
            else:
                depth = max(0, depth + (byte == ord("(")) - (byte == ord(")")))
                if i == len(prefix):
                    deepest = max(deepest, depth)
    return guard.max_depth is not None and deepest > guard.max_depth


def test_with_the_guard_no_chosen_token_runs_away():
    guard = LoopGuard()
    parrot, result = _run(guard)
    guide = _guide()
    assert result.mode["loop_guard"] == guard.description
    checked = 0
    for prefix in parrot.prefixes:
        chosen = result.tokens[len(prefix)]
        m = guide.matcher()
        assert m.accept_tokens(prefix)
        allowed = np.flatnonzero(allowed_array(m.allowed()))
        if any(not _runs_away(guide.vocab, prefix, t, guard) for t in allowed):
            assert not _runs_away(guide.vocab, prefix, chosen, guard), guide.vocab.token_bytes(
                chosen
            )
            checked += 1
    assert checked > 3
    m = guide.matcher()  # still a sentence of the language: the guard only narrowed choices
    assert m.accept_tokens(result.tokens) and m.is_terminated()

"""The loop guard (decode/repetition.py): exactly the tokens that would complete a run of
`repeats` copies of a block of the output's text are refused, never every allowed one, and the
decode loop with it never chooses one — while the same looping model without it loops (the
positive control)."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gridrail as gr
from gridrail.decode import generate
from gridrail.decode.logits import allowed_array
from gridrail.decode.repetition import LoopGuard, LoopText, text_of
from gridrail.vocab.vocabulary import ByteCompletenessWarning
from support.hr_example import hr_guide
from test_walk_arm import _small_vocab


def _ends_in_loop(text: bytes, guard: LoopGuard) -> int | None:
    """The specification, by brute force: the length of a block of `min_block` to `max_block`
    bytes holding two distinct bytes that `text` ends with `repeats` copies of (None: none)."""
    for block in range(guard.min_block, guard.max_block + 1):
        size = guard.repeats * block
        if size > len(text):
            break
        copy = text[-block:]
        if len(set(copy)) > 1 and text[-size:] == copy * guard.repeats:
            return block
    return None


def _closes_loop(text: bytes, key: bytes, guard: LoopGuard) -> bool:
    """Does a prefix of `key` (a token's text) end `text` with a loop whose period `key` kept
    from its first byte (each of its bytes the one a block before it)?"""
    whole = text + key
    for i in range(1, len(key) + 1):
        for block in range(guard.min_block, guard.max_block + 1):
            size = guard.repeats * block
            end = len(text) + i
            if size > end:
                break
            copy = whole[end - block : end]
            if (
                len(set(copy)) > 1
                and whole[end - size : end] == copy * guard.repeats
                and all(whole[p] == whole[p - block] for p in range(len(text), end))
            ):
                return True
    return False


texts = st.lists(st.sampled_from(b"abc"), max_size=40).map(bytes)  # few bytes: loops are common
keys = st.lists(st.lists(st.sampled_from(b"abc"), min_size=1, max_size=9).map(bytes), max_size=12)
guards = st.integers(2, 4).flatmap(
    lambda low: st.builds(LoopGuard, st.integers(2, 3), st.just(low), st.integers(low, 8))
)


@settings(max_examples=400, deadline=None)
@given(texts, st.integers(1, 5), keys, guards)
def test_closing_names_exactly_the_texts_that_close_a_loop(text, chunk, candidates, guard):
    followed = LoopText(guard)
    for start in range(0, len(text), chunk):  # fed in pieces: the runs do not depend on them
        followed.extend(text[start : start + chunk])
    closing = followed.closing(max(map(len, candidates), default=0))
    for key in candidates:
        refused = any(key.startswith(c) for c in closing)
        assert refused == _closes_loop(text, key, guard), (text, key)


def test_a_loop_is_refused_however_the_tokens_split_it():
    """The bypass a model found: refused the token `id` that closed `order_id, order_id`, it
    wrote `i` and `D` (bench/RESULTS.md, session 36). The text is one."""
    guard = LoopGuard(repeats=2, min_block=6, max_depth=None)
    followed = LoopText(guard)
    followed.extend(text_of(b"SELECT status, order_id, order_i"))
    assert any(b"d".startswith(c) for c in followed.closing(2))
    assert not any(b"s".startswith(c) for c in followed.closing(2))


SPELLINGS = [b"a", b"b", b"A", b" a", b"(", b")", b"((", b"'", b"'(", b" ", b"\n  ", b"x(", b"Ab"]
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
    # two copies: only "Ab", which spells the third one whole, closes the loop
    assert _refused(_followed(guard, b"a", b"b", b"a", b"b")) == {b"Ab"}


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
    st.lists(st.booleans(), min_size=14, max_size=14),
)
def test_narrow_only_removes(spelled, bits):
    out = _followed(LoopGuard(repeats=2, min_block=2, max_depth=2), *spelled)
    allowed = np.array(bits, dtype=bool)
    narrowed = out.narrow(allowed)
    assert not (narrowed & ~allowed).any()
    assert narrowed.any() == allowed.any()


def _closing(guard: LoopGuard, text: bytes, longest: int) -> set[bytes]:
    followed = LoopText(guard)
    followed.extend(text)
    return followed.closing(longest)


def test_a_run_of_one_byte_is_never_refused():
    guard = LoopGuard(repeats=3, min_block=2)
    assert _closing(guard, b"a" * 100, 8) == set()
    assert _closing(guard, b"ab" * 2 + b"a", 1) == {b"b"}  # the third copy of "ab"
    assert _closing(guard, b"ab" * 2, 1) == set()  # two copies are allowed


def test_the_check_reads_a_bounded_window():
    guard = LoopGuard(repeats=3, min_block=2, max_block=4)
    prefix = bytes(range(100, 228))  # no repetition at all
    assert _closing(guard, prefix + b"ababa", 8) == _closing(guard, b"ababa", 8)
    assert _closing(guard, prefix + b"ababa", 1) == {b"b"}


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
    text = b"".join(text_of(_guide().vocab.token_bytes(t) or b"") for t in result.tokens)
    assert any(_ends_in_loop(text[:n], LoopGuard()) for n in range(len(text)))


def _runs_away(vocab: gr.Vocabulary, prefix: list[int], token: int, guard: LoopGuard) -> bool:
    """The specification of a refusal, over the whole text: `token` closes the `repeats`-th
    copy of a block of its text, or takes the parentheses outside quotes past `max_depth`."""
    text = b"".join(text_of(vocab.token_bytes(t) or b"") for t in prefix)
    if _closes_loop(text, text_of(vocab.token_bytes(token) or b""), guard):
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

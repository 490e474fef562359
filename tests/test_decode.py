"""Decoding under a guide (paper Proposition 9): the GRID-owned loop (mode 1) and the logits
processors of host loops (modes 2 and 3), driven by model stand-ins whose logits are seeded
functions of the prefix — including adversarial ones that favour exactly the forbidden tokens.
The real model runs in tests/test_ask.py."""

from __future__ import annotations

import copy
import hashlib
import threading
import time
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gridrail as gr
from gridrail.archive import save_guide
from gridrail.audit import AuditLog, replay, verify
from gridrail.decode import Generation, Sampler, UnmaskedTokenError, generate
from gridrail.decode.hf import GridLogitsProcessor
from gridrail.decode.llama_cpp import GridLlamaLogitsProcessor
from gridrail.decode.logits import allowed_array, log_probability, nucleus
from gridrail.decode.row import GuardedRow
from gridrail.guide import Matcher
from gridrail.mask.bitmask import TokenSet
from support.hr_example import hr_guide
from test_walk_arm import _small_vocab

PAD = 24  # a model's output layer wider than its vocabulary


@cache
def _guide(role: str) -> gr.Guide:
    return hr_guide(_small_vocab(), role)


def _reserve(guide: gr.Guide) -> int:
    return len(guide.matcher().completion())


class SeededLogits:
    """Logits as a seeded function of the prefix, `PAD` wider than the vocabulary; the padding
    gets the largest values, so a loop that forgot to mask it would pick it. EOS gets a lift so
    that it wins where it is legal now and then (one token among hundreds otherwise)."""

    def __init__(self, guide: gr.Guide, seed: int):
        self.guide = guide
        self.width = guide.vocab.size + PAD
        self.seed = seed
        self.eos = guide.vocab.eos_token_id

    def __call__(self, generated) -> np.ndarray:
        digest = hashlib.blake2b(repr((self.seed, list(generated))).encode(), digest_size=8)
        logits = np.random.default_rng(int.from_bytes(digest.digest(), "little")).normal(
            size=self.width
        )
        logits[-PAD:] = 1e9
        logits[self.eos] += 2.5
        return logits


def _matcher_after(guide: gr.Guide, generated) -> gr.Matcher:
    m = guide.matcher()
    assert m.accept_tokens(list(generated))
    return m


class AdversarialLogits(SeededLogits):
    """Every token the mask forbids at this point gets a larger logit than every allowed one."""

    def __call__(self, generated) -> np.ndarray:
        logits = super().__call__(generated)
        m = _matcher_after(self.guide, generated)
        forbidden = ~allowed_array(m.allowed(), self.width)
        logits[forbidden] = 1e6 + np.abs(logits[forbidden])
        return logits


def _assert_sentence(guide: gr.Guide, result: Generation, budget: int | None) -> None:
    assert guide.is_eos(result.tokens[-1])
    assert not any(guide.is_eos(t) for t in result.tokens[:-1])
    if budget is not None:
        assert len(result.tokens) <= budget
    assert guide.oracle.accepts(result.text.encode())
    assert not [v for v in guide.check(result.text) if v.kind == "outside_language"]


@pytest.mark.parametrize("role", ["analyst", "clerk", "admin"])
@pytest.mark.parametrize("logits", [SeededLogits, AdversarialLogits])
def test_every_stop_is_a_sentence_within_the_budget(role: str, logits) -> None:
    guide = _guide(role)
    reserve = _reserve(guide)
    for seed in range(12):
        budget = reserve + seed * 3
        result = generate(guide, logits(guide, seed), max_tokens=budget)
        _assert_sentence(guide, result, budget)
        assert sum(result.kinds.values()) == len(result.tokens)
        assert (result.stop == "reserve") == ("reserve" in result.kinds)


class EndingLogits(SeededLogits):
    """A model that wants to finish: the next token of the shortest completion gets a lift."""

    def __call__(self, generated) -> np.ndarray:
        logits = super().__call__(generated)
        logits[_matcher_after(self.guide, generated).completion()[0]] += 4.0
        return logits


def test_a_model_that_ends_the_statement_stops_on_its_own_eos() -> None:
    guide = _guide("analyst")
    for seed in range(6):
        result = generate(guide, EndingLogits(guide, seed), max_tokens=200)
        _assert_sentence(guide, result, 200)
        assert result.stop == "eos" and "reserve" not in result.kinds


def test_greedy_and_seeded_sampling_are_reproducible() -> None:
    guide = _guide("analyst")
    runs = [
        generate(guide, SeededLogits(guide, 3), max_tokens=60, sampler=sampler).tokens
        for sampler in (Sampler(), Sampler(), Sampler(1.0, seed=5), Sampler(1.0, seed=5))
    ]
    assert runs[0] == runs[1] and runs[2] == runs[3]


def test_nucleus_sampling_draws_only_from_the_top_mass() -> None:
    logits = np.array([5.0, 2.0, 1.9, 1.8, 0.0])
    allowed = np.array([True, True, True, True, False])
    # token 0 holds about 88% of the allowed mass: a nucleus of 0.8 is token 0 alone
    assert {Sampler(1.0, seed=s, top_p=0.8).choose(logits, allowed) for s in range(50)} == {0}
    wide = {Sampler(1.0, seed=s, top_p=0.95).choose(logits, allowed) for s in range(200)}
    assert wide == {0, 1, 2}  # 0 and 1 make 92.4% < 95%, so 2 joins; 3 (and 4, masked) never
    every = {Sampler(1.0, seed=s).choose(logits, allowed) for s in range(400)}
    assert every == {0, 1, 2, 3}
    assert Sampler(1.0, seed=1, top_p=0.5).description == "temperature=1.0,seed=1,top_p=0.5"
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="top_p"):
            Sampler(1.0, top_p=bad)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 3000),
    st.sampled_from([0.3, 1.0, 10.0]),
    st.sampled_from([0.5, 0.9, 0.95, 0.999999]),
    st.booleans(),
    st.booleans(),
)
def test_nucleus_and_log_probability_are_their_plain_definitions_to_the_bit(
    seed: int, size: int, spread: float, top_p: float, ties: bool, masked: bool
) -> None:
    """The nucleus sorts only its heaviest weights and the log-probability skips the filtered
    copy when every logit is finite: the same tokens, in the same order, and the same floats as
    sorting every weight and filtering every time (sampling stays reproducible across them)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=size) * spread
    if ties:
        logits = np.round(logits)
    if masked:
        logits[rng.integers(0, size, size=max(1, size // 10))] = -np.inf
    finite = logits[np.isfinite(logits)]
    if not len(finite):
        return
    weights = np.exp(logits - finite.max())
    order = np.argsort(-weights, kind="stable")
    mass = np.cumsum(weights[order]) / weights.sum()
    assert (
        nucleus(weights, top_p).tolist() == order[: int(np.searchsorted(mass, top_p)) + 1].tolist()
    )
    token = int(rng.integers(0, size))
    plain = logits[token] - finite.max() - np.log(np.exp(finite - finite.max()).sum())
    assert log_probability(logits, token) == plain


def test_the_generation_keeps_the_model_log_probability_of_its_choices() -> None:
    guide = _guide("analyst")
    size = guide.vocab.size
    uniform = generate(guide, lambda ids: np.zeros(size + PAD), max_tokens=60)
    assert uniform.model_calls > 0
    # padding logits are not the model's vocabulary: the softmax is over the vocabulary only
    assert uniform.confidence == pytest.approx(-np.log(size))
    assert uniform.log_probability == pytest.approx(-np.log(size) * uniform.model_calls)
    peaked = generate(guide, SeededLogits(guide, 3), max_tokens=60)
    assert peaked.confidence < 0


def test_greedy_picks_the_best_allowed_token() -> None:
    guide = _guide("analyst")
    logits = SeededLogits(guide, 11)
    log = AuditLog()
    result = generate(guide, logits, max_tokens=200, audit=log)
    m = guide.matcher()
    checked = 0
    for record, token in zip(log.records, result.tokens, strict=True):
        if record["kind"] in ("sampled", "eos") and m.num_accepted < len(result.tokens) - 1:
            values = logits(m.accepted_tokens())[: guide.vocab.size]
            assert values[token] == values[allowed_array(m.allowed())].max()
            checked += 1
        assert m.accept_tokens([token])
    assert checked > 10


def test_torch_logits_give_the_same_output() -> None:
    guide = _guide("clerk")
    seeded = SeededLogits(guide, 4)
    as_numpy = generate(guide, seeded, max_tokens=80)
    as_torch = generate(
        guide, lambda ids: torch.tensor(seeded(ids), dtype=torch.float64), max_tokens=80
    )
    assert as_numpy.tokens == as_torch.tokens


def test_nan_logits_and_a_too_narrow_model_are_errors() -> None:
    guide = _guide("analyst")
    with pytest.raises(ValueError, match="NaN"):
        generate(guide, lambda ids: np.full(guide.vocab.size, np.nan), max_tokens=60)
    with pytest.raises(ValueError, match="gave 10 logits for a vocabulary"):
        generate(guide, lambda ids: np.zeros(10), max_tokens=60)
    with pytest.raises(ValueError, match="temperature"):
        Sampler(-1.0)


def test_the_model_computes_beside_the_mask() -> None:
    """Each step asks for the logits before it computes the mask, on another thread (the
    overlap): the mask of step k waits here until the model's call for step k has begun —
    a loop that computed the mask first would never let it begin."""
    guide = _guide("analyst")
    seeded = SeededLogits(guide, 3)
    begun: dict[int, threading.Event] = {}
    threads = set()

    def logits(generated) -> np.ndarray:
        threads.add(threading.get_ident())
        begun.setdefault(len(generated), threading.Event()).set()
        return seeded(generated)

    class Watched(gr.Guide):  # the mask of a step waits for that step's model call
        def mask_with_entry(self, cfg, gamma=None):
            step = len(matchers[-1].accepted_tokens()) if matchers else 0
            assert begun.setdefault(step, threading.Event()).wait(5), "the model waited"
            return super().mask_with_entry(cfg, gamma)

        def matcher(self, *args, **kwargs):
            made = super().matcher(*args, **kwargs)
            matchers.append(made)
            return made

    matchers: list[gr.Matcher] = []
    watched = copy.copy(guide)
    watched.__class__ = Watched
    result = generate(watched, logits, max_tokens=40)
    assert result.tokens == generate(guide, seeded, max_tokens=40).tokens
    assert threading.get_ident() not in threads


def test_an_error_of_the_model_reaches_the_caller() -> None:
    guide = _guide("analyst")

    def failing(generated) -> np.ndarray:
        raise RuntimeError("the model is gone")

    with pytest.raises(RuntimeError, match="the model is gone"):
        generate(guide, failing, max_tokens=40)


def test_an_empty_mask_is_reported_with_the_text_so_far(monkeypatch) -> None:
    """A dead end is a defect (Spider #4580 met one, fixed): the loop says where it happened,
    not "no allowed token among the model's logits"."""
    guide = _guide("analyst")
    allowed = Matcher.allowed

    def dead_after_two(matcher: Matcher) -> TokenSet:
        return TokenSet(guide.vocab.size) if matcher.num_accepted >= 2 else allowed(matcher)

    monkeypatch.setattr(Matcher, "allowed", dead_after_two)
    with pytest.raises(RuntimeError, match=r"mask is empty after '.*SELECT.*': a dead end"):
        generate(guide, SeededLogits(guide, 0), max_tokens=40)


def test_the_audit_log_of_the_loop_verifies_and_replays(tmp_path: Path) -> None:
    guide = _guide("analyst")
    save_guide(guide, tmp_path)
    for seed in range(4):
        log = AuditLog()
        result = generate(
            guide, SeededLogits(guide, seed), max_tokens=_reserve(guide) + 6 * seed, audit=log
        )
        verify(log)
        assert replay(log, tmp_path) == len(result.tokens)
        assert log.seal_record["stop"] == result.stop
        assert log.seal_record["mode"]["mode"] == "grid-loop"
        kinds = {}
        for record in log.records:
            kinds[record["kind"]] = kinds.get(record["kind"], 0) + 1
        assert kinds == result.kinds


class LateLogits(SeededLogits):
    """Its `slow_call`-th call returns only once `deadline` has passed (the loop asks for the
    next logits beside the mask, so the loop meets the passed deadline one step later)."""

    def __init__(self, guide: gr.Guide, seed: int, deadline: float, slow_call: int):
        super().__init__(guide, seed)
        self.deadline, self.slow_call, self.calls = deadline, slow_call, 0

    def __call__(self, generated) -> np.ndarray:
        self.calls += 1
        if self.calls == self.slow_call:
            time.sleep(max(0.0, self.deadline - time.monotonic()) + 0.01)
        return super().__call__(generated)


def test_a_passed_deadline_ends_the_generation_with_the_shortest_completion(
    tmp_path: Path,
) -> None:
    guide = _guide("analyst")
    save_guide(guide, tmp_path)
    for seed in range(3):
        free = generate(guide, SeededLogits(guide, seed), max_tokens=200)
        log = AuditLog()
        # far enough that the first two steps end before it on a loaded machine
        deadline = time.monotonic() + 2.0
        late = LateLogits(guide, seed, deadline, slow_call=3)
        result = generate(guide, late, max_tokens=200, audit=log, deadline=deadline)
        _assert_sentence(guide, result, 200)
        assert result.stop == "deadline" and log.seal_record["stop"] == "deadline"
        # the model chose three tokens (the same as without a deadline), the rest is the
        # shortest completion of what they began
        assert result.model_calls == 3 and result.kinds.get("sampled", 0) <= 3
        chosen = len(result.tokens) - result.kinds["reserve"] - 1  # the reserve's EOS too
        assert result.tokens[:chosen] == free.tokens[:chosen]
        ending = _matcher_after(guide, result.tokens[:chosen]).completion()
        assert ending == result.tokens[chosen:]
        assert replay(log, tmp_path) == len(result.tokens)
    # a deadline already passed: no model call chooses a token
    result = generate(guide, SeededLogits(guide, 0), max_tokens=200, deadline=time.monotonic())
    assert result.stop == "deadline" and result.model_calls == 0
    assert result.tokens == guide.matcher().completion()


def _host_loop(processor, rows: list[SeededLogits], max_new: int, eos: int) -> torch.Tensor:
    """What transformers' greedy `generate` does around a logits processor: left-padded prompts,
    argmax, padding finished rows with EOS, stopping when every row is done or at the budget."""
    ids = torch.tensor([[7, 8, 9]] * len(rows))
    done = [False] * len(rows)
    for _ in range(max_new):
        prompt = ids.shape[1] - len(range(ids.shape[1] - 3))
        scores = torch.tensor(
            np.stack([row(ids[i, prompt:].tolist()) for i, row in enumerate(rows)]),
            dtype=torch.float32,
        )
        chosen = processor(ids, scores).argmax(dim=-1)
        chosen = torch.where(torch.tensor(done), torch.tensor(eos), chosen)
        done = [d or int(c) == eos for d, c in zip(done, chosen, strict=True)]
        ids = torch.cat([ids, chosen[:, None]], dim=1)
        if all(done):
            break
    return ids


@pytest.mark.parametrize("budget_slack", [0, 4, 40])
def test_transformers_processor_rows_follow_their_guides(tmp_path: Path, budget_slack) -> None:
    guides = [_guide("analyst"), _guide("clerk"), _guide("admin")]
    for guide in guides:
        save_guide(guide, tmp_path)
    budget = max(_reserve(g) for g in guides) + budget_slack
    processor = GridLogitsProcessor(guides, max_tokens=budget)
    eos = guides[0].vocab.eos_token_id
    out = _host_loop(processor, [SeededLogits(g, i) for i, g in enumerate(guides)], budget, eos)
    results = processor.finish(out)
    for guide, result in zip(guides, results, strict=True):
        assert result.stop in ("eos", "reserve", "truncated")
        if result.stop != "truncated":
            _assert_sentence(guide, result, budget)
        verify(result.audit)
        assert replay(result.audit, tmp_path) == len(result.tokens)
        assert result.audit.seal_record["mode"]["truncated"] == (result.stop == "truncated")


def test_the_budget_trigger_writes_the_shortest_ending() -> None:
    guide = _guide("analyst")
    budget = _reserve(guide)  # no slack: the trigger fires at the first token
    row = GuardedRow(guide, budget, AuditLog())
    ending = guide.matcher().completion()
    for position in range(len(ending)):
        allowed = row.allowed(guide.vocab.size)
        assert np.flatnonzero(allowed).tolist() == [ending[position]]
        row.observe(ending[position : position + 1])
    result = row.finish("test")
    assert result.stop == "reserve" and result.tokens == ending
    assert [r["kind"] for r in result.audit.records][-1] == "eos"
    assert {r["kind"] for r in result.audit.records[:-1]} <= {"reserve"}


def test_a_token_outside_the_mask_is_refused_loudly() -> None:
    guide = _guide("analyst")
    row = GuardedRow(guide)
    forbidden = int(np.flatnonzero(~row.allowed(guide.vocab.size))[0])
    with pytest.raises(UnmaskedTokenError, match="outside the mask"):
        row.observe([forbidden])
    with pytest.raises(ValueError, match="guides for a batch"):
        GridLogitsProcessor([guide, guide])(
            torch.zeros((3, 2), dtype=torch.long), torch.zeros(3, 5)
        )


def test_the_transformers_processor_refuses_tokens_taken_back() -> None:
    """Assisted (prompt-lookup) generation shows the processor candidate tokens, then keeps a
    shorter sequence: the processor would go on guiding the sequence it was shown, not the one
    the host kept (its masks, its audit log and its text all another statement's). It raises."""
    guide = _guide("analyst")
    select = guide.matcher()
    candidates = []
    for _ in range(3):  # three tokens of the language, as a candidate continuation
        token = int(select.allowed().ids()[0])
        assert select.accept_tokens([token])
        candidates.append(token)
    prompt, width = [7, 8, 9], guide.vocab.size
    processor = GridLogitsProcessor(guide)
    for n in range(len(candidates) + 1):  # the target model's logits at each candidate position
        processor(torch.tensor([prompt + candidates[:n]]), torch.zeros(1, width))
    kept = [*prompt, candidates[0]]  # the host rejected the second candidate: one kept
    with pytest.raises(ValueError, match="not one more"):
        processor(torch.tensor([kept]), torch.zeros(1, width))
    with pytest.raises(ValueError, match="not one more"):
        processor.finish(torch.tensor([kept]))
    # a greedy host adds one token a call, and the last one after the last call
    processor = GridLogitsProcessor(guide)
    for n in range(len(candidates)):
        processor(torch.tensor([prompt + candidates[:n]]), torch.zeros(1, width))
    assert processor.finish(torch.tensor([prompt + candidates]))[0].tokens == candidates


def test_llama_cpp_processor_gets_the_eos_llama_cpp_does_not_return(tmp_path: Path) -> None:
    guide = _guide("auditor")
    save_guide(guide, tmp_path)
    for seed in range(4):
        processor = GridLlamaLogitsProcessor(guide)
        logits, prompt = SeededLogits(guide, seed), [5, 6]
        sequence, reason = list(prompt), "length"
        for _ in range(120):  # llama.cpp: sample, stop at EOS without returning it
            scores = logits(sequence[len(prompt) :]).astype(np.float32)
            token = int(np.argmax(processor(np.array(sequence), scores)))
            if guide.is_eos(token):
                reason = "stop"
                break
            sequence.append(token)
        result = processor.finish(reason, sequence[len(prompt) :])
        assert result.stop == ("eos" if reason == "stop" else "truncated")
        if reason == "stop":
            _assert_sentence(guide, result, None)
        assert replay(result.audit, tmp_path) == len(result.tokens)

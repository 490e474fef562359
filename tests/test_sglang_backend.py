"""gridrail inside SGLang (issue 18): the grammar backend through SGLang's own registry and
backend base class, on the CPU.

SGLang's wheel pins another torch than gridrail's; `make check-sglang` installs it beside
gridrail (`build/venv-sglang`) and runs these tests there; elsewhere they are skipped, saying
why. Each step is compared with gridrail's own matcher."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

pytest.importorskip(
    "sglang.srt.constrained.base_grammar_backend",
    reason="SGLang is not installed in this environment (`make check-sglang` installs it and "
    "runs these tests)",
)

import torch
from sglang.srt.arg_groups.choices import GRAMMAR_BACKEND_CHOICES
from sglang.srt.constrained.base_grammar_backend import (
    GRAMMAR_BACKEND_REGISTRY,
    GrammarRow,
    InvalidGrammarObject,
)
from sglang.srt.plugins import load_plugins
from transformers import PreTrainedTokenizerFast

from assets import asset
from gridrail.integrations import sglang as gridrail_sglang

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
VOCAB_SIZE = 50_304


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> gridrail_sglang.GridrailBackend:
    specs = tmp_path_factory.mktemp("specs") / "specs.toml"
    specs.write_text(
        f'[specs.hr-analyst]\ndb = "{EXAMPLES / "hr.sqlite"}"\n'
        f'policy = "{EXAMPLES / "hr_policy.toml"}"\nrole = "analyst"\n\n'
        f'[specs.hr-clerk]\ndb = "{EXAMPLES / "hr.sqlite"}"\n'
        f'policy = "{EXAMPLES / "hr_policy.toml"}"\nrole = "clerk"\nmax_tokens = 40\n',
        encoding="utf-8",
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(asset("tokenizers", "gpt2", "tokenizer.json")),
        eos_token="<|endoftext|>",
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRIDRAIL_SPECS", str(specs))
        load_plugins()  # SGLang's loader finds gridrail's entry point and registers it
        gridrail_sglang.register()  # idempotent
        assert "gridrail" in GRAMMAR_BACKEND_CHOICES
        assert GRAMMAR_BACKEND_CHOICES.count("gridrail") == 1
        make = GRAMMAR_BACKEND_REGISTRY["gridrail"]
        return make(None, tokenizer, VOCAB_SIZE, {tokenizer.eos_token_id})


def _grammar(backend, key: str = "gridrail:hr-analyst"):
    """As SGLang's grammar manager gets one: compiled on the backend's pool, then cached and
    copied per request."""
    value, cached = backend.get_cached_or_future_value(("ebnf", key), False)
    if cached:
        return value
    grammar = value.result()
    backend.set_cache(("ebnf", key), grammar)
    return grammar.copy()


def _unpack(mask: torch.Tensor, row: int) -> set[int]:
    words = mask[row].numpy().view("uint32")
    return {32 * w + b for w, word in enumerate(words) for b in range(32) if word >> b & 1}


def test_each_step_is_the_matchers_mask(backend) -> None:
    reference_guide = backend.specs.guide(backend.specs.spec("gridrail:hr-analyst"), backend.vocab)
    rng = random.Random(11)
    for _ in range(3):
        grammars = [_grammar(backend) for _ in range(3)]  # the second and third from the cache
        assert all(isinstance(g, gridrail_sglang.GridrailGrammar) for g in grammars)
        mask = grammars[0].allocate_vocab_mask(VOCAB_SIZE, 4, "cpu")
        references = [reference_guide.matcher() for _ in grammars]
        for _step in range(30):
            live = [n for n, g in enumerate(grammars) if not g.is_terminated()]
            if not live:
                break
            type(grammars[0]).reset_vocab_mask(mask)
            entries = [GrammarRow(row + 1, grammars[n]) for row, n in enumerate(live)]
            type(grammars[0]).fill_vocab_mask_batched(entries, mask)  # one call for the batch
            for row, n in enumerate(live):
                allowed = _unpack(mask, row + 1)
                assert allowed == set(references[n].allowed().ids())
                token = rng.choice(sorted(allowed))
                grammars[n].accept_token(token)
                assert references[n].accept_tokens([token])
                assert grammars[n].is_terminated() == references[n].is_terminated()
                if rng.random() < 0.15:
                    grammars[n].rollback(1)
                    references[n].rollback(1)
        with pytest.raises(ValueError, match="outside gridrail's mask"):
            fresh = _grammar(backend)
            fresh.accept_token(next(iter(set(range(VOCAB_SIZE)) - set(
                reference_guide.matcher().allowed().ids()))))  # fmt: skip


def test_a_budget_is_kept_without_refusing_a_sampled_token(backend) -> None:
    """The clerk's spec has a budget of 40 tokens. SGLang samples from the batch's masks, so a
    token of the mask is never refused (`accept_token` raised on most walks before); once a
    row's shortest completion just fits, its mask is that completion's next token. A walk ends
    within 40 tokens unless one sampled token lengthened the completion past what was left."""
    rng = random.Random(5)
    grammars = [_grammar(backend, "gridrail:hr-clerk") for _ in range(4)]
    mask = grammars[0].allocate_vocab_mask(VOCAB_SIZE, len(grammars), "cpu")
    endings: list[list[int]] = [[] for _ in grammars]
    overrun = [False] * len(grammars)
    while live := [n for n, g in enumerate(grammars) if not g.is_terminated()]:
        type(grammars[0]).reset_vocab_mask(mask)
        rows = [GrammarRow(n, grammars[n]) for n in live]
        type(grammars[0]).fill_vocab_mask_batched(rows, mask)
        for n in live:
            matcher, allowed = grammars[n].matcher, _unpack(mask, n)
            if not endings[n] and matcher.num_accepted + len(matcher.completion()) >= 40:
                endings[n] = matcher.completion()  # the trigger: followed token by token
            if endings[n]:
                assert allowed == {endings[n].pop(0)}
            eos = backend.vocab.eos_token_id
            grammars[n].accept_token(rng.choice(sorted(allowed - {eos}) or [eos]))
            if not grammars[n].is_terminated():
                overrun[n] |= matcher.num_accepted + len(matcher.completion()) > 40
    for grammar, over in zip(grammars, overrun, strict=True):
        assert grammar.matcher.num_accepted <= 40 or over


def test_copies_are_independent_and_jump_forward_offers_forced_tokens(backend) -> None:
    grammar = _grammar(backend)
    first = grammar.matcher.completion()[0]
    grammar.accept_token(first)
    twin = grammar.copy()
    assert twin.matcher.accepted_tokens() == grammar.matcher.accepted_tokens()
    twin.accept_token(twin.matcher.completion()[0])
    assert twin.matcher.num_accepted == grammar.matcher.num_accepted + 1
    forced = grammar.matcher.forced_tokens()
    offered = grammar.try_jump_forward(None)
    assert (offered is None) == (not forced) and (offered is None or offered[0] == forced)
    # to the end: finished, then rolled back out of it
    for token in grammar.matcher.completion():
        grammar.accept_token(token)
    assert grammar.is_terminated() and grammar.try_jump_forward(None) is None
    grammar.accept_token(0)  # after the end: ignored, as SGLang's backends do
    grammar.rollback(1)
    assert not grammar.is_terminated()


def test_masks_apply_to_logits_and_unknown_specs_are_invalid(backend) -> None:
    grammar = _grammar(backend)
    mask = grammar.allocate_vocab_mask(VOCAB_SIZE, 2, "cpu")
    grammar.fill_vocab_mask(mask, 0)
    logits = torch.zeros((2, VOCAB_SIZE))
    type(grammar).apply_vocab_mask(logits, type(grammar).move_vocab_mask(mask, "cpu"))
    allowed = set(grammar.matcher.allowed().ids())
    finite = set(torch.nonzero(torch.isfinite(logits[0])).flatten().tolist())
    assert finite == allowed and torch.isfinite(logits[1]).all()  # row 1 left unconstrained
    value, _ = backend.get_cached_or_future_value(("ebnf", "gridrail:hr-admin"), False)
    invalid = value.result()
    assert isinstance(invalid, InvalidGrammarObject) and "no spec named" in invalid.error_message
    value, _ = backend.get_cached_or_future_value(("json", '{"type": "object"}'), False)
    assert isinstance(value.result(), InvalidGrammarObject)

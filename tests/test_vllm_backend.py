"""gridrail inside vLLM (issue 18): the backend through vLLM's own classes, on the CPU.

vLLM's wheels are CUDA builds whose dependencies pin another torch than gridrail's; these tests
run where `vllm` imports — `make check-vllm` installs it beside gridrail (`build/venv-vllm`) and
runs them there — and are skipped, saying why, everywhere else. What cannot be built here is
vLLM's `VllmConfig` (it needs an accelerator to infer its device): a stand-in with the fields
the structured-output manager reads takes its place; the manager, the sampling parameters, the
request and the backend interfaces are vLLM's."""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

vllm = pytest.importorskip(
    "vllm.v1.structured_output",
    reason="vLLM is not installed in this environment (`make check-vllm` installs it and runs "
    "these tests)",
)

from transformers import PreTrainedTokenizerFast  # noqa: E402
from vllm.config import StructuredOutputsConfig  # noqa: E402
from vllm.exceptions import VLLMValidationError  # noqa: E402
from vllm.plugins import load_general_plugins  # noqa: E402
from vllm.sampling_params import SamplingParams, StructuredOutputsParams  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402
from vllm.v1.structured_output.backend_types import (  # noqa: E402
    StructuredOutputBackend,
    StructuredOutputGrammar,
    StructuredOutputOptions,
)

from assets import asset  # noqa: E402
from gridrail.integrations import vllm as gridrail_vllm  # noqa: E402
from gridrail.integrations.specs import SpecError, SpecRegistry  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
VOCAB_SIZE = 50_304  # the model's logits are wider than gpt2's 50,257 tokens, as in vLLM


@pytest.fixture(scope="module")
def spec_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("specs") / "specs.toml"
    path.write_text(
        f'[specs.hr-analyst]\ndb = "{EXAMPLES / "hr.sqlite"}"\n'
        f'policy = "{EXAMPLES / "hr_policy.toml"}"\nrole = "analyst"\n\n'
        f'[specs.hr-clerk]\ndb = "{EXAMPLES / "hr.sqlite"}"\n'
        f'policy = "{EXAMPLES / "hr_policy.toml"}"\nrole = "clerk"\nmax_tokens = 40\n',
        encoding="utf-8",
    )
    return path


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(
        tokenizer_file=str(asset("tokenizers", "gpt2", "tokenizer.json")), eos_token="<|endoftext|>"
    )


@pytest.fixture(scope="module")
def backend(spec_file: Path, tokenizer) -> gridrail_vllm.GridrailBackend:
    return gridrail_vllm.GridrailBackend(
        SimpleNamespace(), tokenizer=tokenizer, vocab_size=VOCAB_SIZE,
        specs=SpecRegistry.from_file(spec_file),
    )  # fmt: skip


def test_the_backend_is_vllms_kind(backend) -> None:
    assert isinstance(backend, StructuredOutputBackend)
    grammar = backend.compile_grammar(StructuredOutputOptions.GRAMMAR, "gridrail:hr-analyst")
    assert isinstance(grammar, StructuredOutputGrammar)
    bitmask = backend.allocate_token_bitmask(4)
    assert tuple(bitmask.shape) == (4, (VOCAB_SIZE + 31) // 32) and bitmask.dtype.is_signed
    with pytest.raises(SpecError, match="no spec named 'hr-admin'"):
        backend.compile_grammar(StructuredOutputOptions.GRAMMAR, "gridrail:hr-admin")
    with pytest.raises(SpecError, match="gridrail:NAME"):
        backend.compile_grammar(StructuredOutputOptions.JSON, '{"type": "object"}')


def _unpack(bitmask, row: int) -> set[int]:
    words = bitmask[row].numpy().view("uint32")
    return {32 * w + b for w, word in enumerate(words) for b in range(32) if word >> b & 1}


def test_each_step_is_the_matchers_mask_with_vllms_conventions(backend, tokenizer) -> None:
    """A random walk through the analyst's language: every bitmask row the grammar fills is
    gridrail's own matcher's mask at that step; accepting, validating (a speculative round)
    and rolling back agree with the matcher's."""
    spec = backend.specs.spec("gridrail:hr-analyst")
    reference = backend.specs.guide(spec, backend.vocab).matcher()
    rng = random.Random(7)
    for _ in range(3):
        grammar = backend.compile_grammar(StructuredOutputOptions.GRAMMAR, "gridrail:hr-analyst")
        reference.reset()
        bitmask = backend.allocate_token_bitmask(2)
        for _step in range(40):
            grammar.fill_bitmask(bitmask, 1)
            allowed = _unpack(bitmask, 1)
            assert allowed == set(reference.allowed().ids())
            # a speculative round: three drafted tokens, the longest valid prefix, no advance
            draft = [rng.choice(sorted(allowed)), *rng.sample(range(tokenizer.vocab_size), 2)]
            assert grammar.validate_tokens(draft) == reference.validate_tokens(draft)
            outside = next(t for t in range(VOCAB_SIZE) if t not in allowed)
            assert not grammar.accept_tokens("r", [outside])  # refused, state unchanged
            token = draft[0]
            assert grammar.accept_tokens("r", [token]) and reference.accept_tokens([token])
            if grammar.is_terminated():
                break
            if rng.random() < 0.2:  # the target model rejected the last token: roll back
                grammar.rollback(1)
                reference.rollback(1)
        if grammar.is_terminated():
            assert grammar.accept_tokens("r", [0, 1])  # after the end: ignored, as vLLM's
            grammar.rollback(1)  # the end itself rejected by the target model
            assert not grammar.is_terminated()


@pytest.mark.parametrize("seed", range(6))
def test_a_budget_reserve_and_stop_tokens(backend, tokenizer, seed: int) -> None:
    """The clerk's spec has a budget of 40 tokens. vLLM samples on its own, so a token of the
    mask is never refused (before, most walks met a sampled token the budget refused: vLLM
    cannot take that back); once the shortest completion just fits, the mask is its next token
    until the statement ends. A generation ends within 40 tokens unless one sampled token
    lengthened the completion past what was left (the downgrade of a host that samples); a stop
    token that is not the end of a sentence stays masked (vLLM's `stop_token_ids`)."""
    newline = tokenizer.convert_tokens_to_ids("Ċ")
    grammar = backend.compile_grammar(
        StructuredOutputOptions.GRAMMAR, "gridrail:hr-clerk",
        stop_token_ids={tokenizer.eos_token_id, newline},
    )  # fmt: skip
    bitmask = backend.allocate_token_bitmask(1)
    matcher, written, overrun, ending = grammar.matcher, 0, False, []
    rng = random.Random(seed)
    while not grammar.is_terminated():
        grammar.fill_bitmask(bitmask, 0)
        allowed = _unpack(bitmask, 0)
        assert newline not in allowed
        if not ending and written + len(matcher.completion()) >= 40:
            ending = matcher.completion()  # the trigger: this completion, token by token
        if ending:
            assert allowed == {ending.pop(0)}
        choices = sorted(allowed - {tokenizer.eos_token_id}) or [tokenizer.eos_token_id]
        assert grammar.accept_tokens("r", [rng.choice(choices)])
        written += 1
        if not grammar.is_terminated():
            overrun |= written + len(matcher.completion()) > 40
    assert written <= 40 or overrun


def _stand_in_config(spec_tokens: int = 0) -> SimpleNamespace:
    """The fields of `VllmConfig` the manager reads (the real one needs an accelerator)."""
    model = SimpleNamespace(
        skip_tokenizer_init=True, is_diffusion=False, get_vocab_size=lambda: VOCAB_SIZE
    )
    return SimpleNamespace(
        model_config=model,
        parallel_config=SimpleNamespace(distributed_executor_backend="mp"),
        scheduler_config=SimpleNamespace(max_num_seqs=4),
        structured_outputs_config=StructuredOutputsConfig(),
        num_speculative_tokens=spec_tokens,
    )


def _request(grammar: str, config: SimpleNamespace, tokenizer, **options) -> Request:
    params = SamplingParams(structured_outputs=StructuredOutputsParams(grammar=grammar), **options)
    params._validate_structured_outputs(
        config.model_config, config.structured_outputs_config, tokenizer
    )
    # as vLLM's input processor does: the tokenizer's EOS is one of the request's stop ids
    params.update_from_generation_config({}, tokenizer.eos_token_id)
    return Request("r1", [1, 2, 3], params, None)


def test_the_plugin_routes_gridrail_requests_through_vllms_manager(
    spec_file: Path, tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRIDRAIL_SPECS", str(spec_file))
    monkeypatch.setattr(gridrail_vllm, "_specs", None)
    load_general_plugins()  # vLLM's loader finds gridrail's entry point and registers it
    assert getattr(SamplingParams._validate_structured_outputs, "gridrail", False)
    gridrail_vllm.register()  # vLLM may load a plugin twice: idempotent
    config = _stand_in_config(spec_tokens=2)
    with pytest.raises(VLLMValidationError, match="no spec named 'nope'"):
        _request("gridrail:nope", config, tokenizer)
    request = _request("gridrail:hr-analyst", config, tokenizer)
    assert request.sampling_params.structured_outputs._backend == "gridrail"
    manager = StructuredOutputManager(config)
    manager.tokenizer, manager.executor = tokenizer, ThreadPoolExecutor(1)
    manager.grammar_init(request)
    assert manager.backend_name == "gridrail"
    assert isinstance(manager.backend, gridrail_vllm.GridrailBackend)
    # compiled on vLLM's thread pool; until it is ready the scheduler leaves the request out
    # of the batch (its grammar reads None), the others go on
    structured = request.structured_output_request
    waited = time.monotonic() + 120
    while not structured.is_grammar_ready and time.monotonic() < waited:
        time.sleep(0.01)
    grammar = structured.grammar
    assert isinstance(grammar, gridrail_vllm.GridrailGrammar)
    # a speculative round as the scheduler runs it: one row per drafted position and one for
    # the bonus token; the grammar is back where it was afterwards
    select = tokenizer.encode("SELECT")
    space_name = tokenizer.encode(" name")
    bitmask = manager.grammar_bitmask({"r1": request}, ["r1"], {"r1": [*select, *space_name]})
    assert bitmask.shape[0] >= 3 and grammar.matcher.num_accepted == 0
    reference = manager.backend.specs.guide(
        manager.backend.specs.spec("gridrail:hr-analyst"), manager.backend.vocab
    ).matcher()
    for row, prefix in enumerate([[], select, select + space_name]):
        reference.reset()
        assert reference.accept_tokens(prefix)
        words = bitmask[row].view("uint32")
        allowed = {32 * w + b for w, word in enumerate(words) for b in range(32) if word >> b & 1}
        assert allowed == set(reference.allowed().ids())
    assert manager.accept_tokens(request, select)
    assert grammar.matcher.num_accepted == len(select)
    # one backend per engine: a request for another backend is vLLM's error
    other = SamplingParams(structured_outputs=StructuredOutputsParams(regex="[a-z]+"))
    other.structured_outputs._backend = "xgrammar"
    with pytest.raises(VLLMValidationError, match="only supports one backend"):
        manager.grammar_init(Request("r2", [1], other, None))


def test_the_statement_ends_where_vllm_stops(spec_file: Path, monkeypatch) -> None:
    """vLLM's manager gives a terminated grammar's rows every token and accepts whatever comes
    after, so an end of sentence at which vLLM does not stop would let the model write past the
    statement (`SELECT ...; DELETE FROM employees;`). A vocabulary may have ends vLLM does not
    stop at (a base model's tokenizer with `<|im_end|>` beside its EOS): they stay masked. A
    request whose primary end does not stop it, and `ignore_eos`, are refused."""
    chat = PreTrainedTokenizerFast(
        tokenizer_file=str(asset("tokenizers", "gpt2", "tokenizer.json")),
        eos_token="<|endoftext|>",
        additional_special_tokens=["<|im_end|>"],
    )
    im_end = chat.convert_tokens_to_ids("<|im_end|>")
    backend = gridrail_vllm.GridrailBackend(
        SimpleNamespace(), tokenizer=chat, vocab_size=VOCAB_SIZE,
        specs=SpecRegistry.from_file(spec_file),
    )  # fmt: skip
    assert set(backend.vocab.eos_token_ids) == {chat.eos_token_id, im_end}
    grammar = backend.compile_grammar(
        StructuredOutputOptions.GRAMMAR, "gridrail:hr-analyst",
        stop_token_ids={chat.eos_token_id},
    )  # fmt: skip
    bitmask = backend.allocate_token_bitmask(1)
    for token in chat.encode("SELECT count(*) FROM employees;"):
        grammar.fill_bitmask(bitmask, 0)
        assert token in _unpack(bitmask, 0) and grammar.accept_tokens("r", [token])
    grammar.fill_bitmask(bitmask, 0)
    assert _unpack(bitmask, 0) == {chat.eos_token_id}  # not <|im_end|>: vLLM goes on after it
    assert not grammar.accept_tokens("r", [im_end])  # sampled all the same: vLLM's error
    assert not grammar.is_terminated()
    with pytest.raises(SpecError, match="does not stop this request"):
        backend.compile_grammar(
            StructuredOutputOptions.GRAMMAR, "gridrail:hr-analyst", stop_token_ids={im_end}
        )
    monkeypatch.setenv("GRIDRAIL_SPECS", str(spec_file))
    monkeypatch.setattr(gridrail_vllm, "_specs", None)
    gridrail_vllm.register()
    with pytest.raises(VLLMValidationError, match="ignore_eos"):
        _request("gridrail:hr-analyst", _stand_in_config(), chat, ignore_eos=True)

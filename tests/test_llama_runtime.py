"""The llama.cpp runtime of the GRID-owned loop (`load_model(runtime="llama-cpp")`): its logits
after any change of the sequence equal a fresh evaluation (the key/value cache is reused only
for what the context really holds), it generates sentences whose audit logs verify and replay,
and it reads the model as transformers does: the same vocabulary and the same prompt ids.
Skipped where llama-cpp-python is missing (`pip install 'gridrail[llama-cpp]'`); under CI
(`CI=true`) a missing llama-cpp-python fails instead."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gridrail as gr
from assets import missing
from gridrail import models
from gridrail.archive import save_guide
from gridrail.audit import AuditLog, replay, verify
from gridrail.decode import generate, llama_model
from gridrail.decode.llama_model import ContextLengthError, LlamaLogits
from gridrail.models import LanguageModel, ModelLoadError, load_model
from gridrail.prompt import ANSWER_PREFIX, question_messages
from support.hr_example import hr_guide


@pytest.fixture(scope="module")
def llama() -> LanguageModel:
    if importlib.util.find_spec("llama_cpp") is None:
        missing("llama-cpp-python is not installed: pip install 'gridrail[llama-cpp]'")
    return load_model(runtime="llama-cpp")


def _guide(model: LanguageModel, role: str) -> gr.Guide:
    return hr_guide(model.vocab, role, gr.GenerationProfile())


def _prompt(model: LanguageModel, question: str) -> list[int]:
    view = _guide(model, "analyst").view
    return model.prompt_ids(question_messages(view, question), prefix=ANSWER_PREFIX)


def _fresh(model: LanguageModel, prompt: list[int], generated: list[int]) -> np.ndarray:
    model.model.reset()  # an empty context and no kept prompt: everything is evaluated anew
    llama_model._PROMPT_STATES.clear()
    return LlamaLogits(model.model, prompt)(generated)


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    # one token at a time and a whole batch at once take different kernel paths (measured: up
    # to 3% of the largest logit apart); logits of another sequence are 50-110% apart
    return bool(np.abs(a - b).max() <= 0.05 * np.abs(b).max())


def test_logits_equal_a_fresh_evaluation_after_any_change(llama: LanguageModel) -> None:
    prompt = _prompt(llama, "How many orders are there?")
    select, count, name = (_token(llama, t) for t in ("SELECT", " count", " name"))
    run = llama.next_logits(prompt)
    steps = [[], [select], [select, count], [select, name], [select, name], [select], []]
    got = [run(s) for s in steps]  # forward, a rollback by one, a repeat, back to the prompt
    for step, logits in zip(steps, got, strict=True):
        assert logits.shape == (llama.vocab.size,) and logits.dtype == np.float32
        assert _close(logits, _fresh(llama, prompt, step)), step
    assert not _close(got[2], got[3])  # positive control: another token, other logits
    # a generation's logits depend on its prompt and tokens only, not on what another one
    # left in the shared context: after one, it starts over, exactly as a fresh evaluation
    other = _prompt(llama, "List the departments.")
    a, b = llama.next_logits(prompt), llama.next_logits(other)
    interleaved = [a([select]), b([select]), a([select, count])]
    assert np.array_equal(interleaved[0], _fresh(llama, prompt, [select]))
    assert np.array_equal(interleaved[1], _fresh(llama, other, [select]))
    assert np.array_equal(interleaved[2], _fresh(llama, prompt, [select, count]))


def test_a_second_generation_for_the_prompt_restores_it_exactly(
    llama: LanguageModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompt = _prompt(llama, "How many employees are in each department?")
    select, count = (_token(llama, t) for t in ("SELECT", " count"))
    steps = [[], [select], [select, count], [select], []]
    fed: list[int] = []
    evaluate = llama.model.eval
    monkeypatch.setattr(llama.model, "eval", lambda tokens: (fed.extend(tokens), evaluate(tokens)))
    first = llama.next_logits(prompt)
    expected = [first(s) for s in steps]
    assert fed[: len(prompt)] == prompt  # evaluated alone, as one batch, then kept
    fed.clear()
    second = llama.next_logits(prompt)  # the next candidate of the same question
    got = [second(s) for s in steps]
    assert fed == [select, count, select]  # never the prompt: restored, then one token a step
    for step, one, other in zip(steps, expected, got, strict=True):
        assert np.array_equal(one, other), step  # the same computation, bit for bit
    other = _prompt(llama, "List the departments.")
    fed.clear()
    llama.next_logits(other)([select])
    assert fed == [*other, select]  # another prompt is evaluated (and kept instead)
    fed.clear()
    assert np.array_equal(llama.next_logits(prompt)([select]), got[1])
    assert fed == [*prompt, select]  # the first prompt's state was replaced: evaluated again
    assert np.array_equal(got[1], _fresh(llama, prompt, [select]))


def test_a_sequence_past_the_context_is_refused(llama: LanguageModel) -> None:
    context = llama.model.n_ctx()
    with pytest.raises(ContextLengthError, match=f"more than the model's context of {context}"):
        llama.next_logits([_token(llama, "SELECT")] * (context + 1))([])


def _token(model: LanguageModel, text: str) -> int:
    (token,) = model.model.tokenize(text.encode(), add_bos=False)
    return token


@pytest.mark.parametrize(
    ("role", "question", "budget"),
    [("analyst", "How many employees are in each department?", 48), ("auditor", "Salaries?", 10)],
)
def test_constrained_generation_is_a_sentence_and_replays(
    llama: LanguageModel, role: str, question: str, budget: int, tmp_path: Path
) -> None:
    guide = _guide(llama, role)
    save_guide(guide, tmp_path)
    prompt = llama.prompt_ids(question_messages(guide.view, question), prefix=ANSWER_PREFIX)
    result = generate(guide, llama.next_logits(prompt), max_tokens=budget, audit=AuditLog())
    assert result.stop in ("eos", "reserve") and len(result.tokens) <= budget
    assert guide.oracle.accepts(result.text.encode())
    assert result.model_calls > 0
    verify(result.audit)
    assert replay(result.audit, tmp_path) == len(result.tokens)


def test_both_runtimes_read_the_model_alike(llama: LanguageModel) -> None:
    pytest.importorskip("transformers")
    hf = load_model(runtime="transformers")
    assert hf.vocab == llama.vocab
    view = _guide(llama, "manager").view
    for messages, prefix in [
        (question_messages(view, "Who earns the most?"), ANSWER_PREFIX),
        ([{"role": "user", "content": "Zähle die Bestellungen — bitte!"}], "SELECT"),
        ([{"role": "system", "content": "s"}, {"role": "user", "content": "q"}], ""),
    ]:
        assert hf.prompt_ids(messages, prefix) == llama.prompt_ids(messages, prefix)


def test_runtime_errors_say_what_to_do(llama: LanguageModel, tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="unknown runtime 'vllm'"):
        load_model(runtime="vllm")
    folder = tmp_path / "model"
    folder.mkdir()
    with pytest.raises(ModelLoadError, match="runs GGUF files"):
        load_model(str(folder), runtime="llama-cpp")
    with pytest.raises(ModelLoadError, match="no such GGUF file"):
        load_model(str(tmp_path / "absent.gguf"), runtime="llama-cpp")
    assert load_model(runtime="auto") is llama  # a GGUF with llama.cpp installed: llama.cpp


def test_the_model_runs_on_every_usable_cpu_but_one(
    llama: LanguageModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama.cpp's threads spin while they wait for each other: `load_model` leaves one usable
    CPU to the mask's work (at least one thread, at most `MAX_DECODE_THREADS`), for the prompt
    as for each token."""
    threads = models.decode_threads()
    assert llama.model.n_threads == llama.model.n_threads_batch == threads
    monkeypatch.setattr(models.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert models.decode_threads() == 2
    monkeypatch.setattr(models.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert models.decode_threads() == 1
    many = set(range(4 * models.MAX_DECODE_THREADS))
    monkeypatch.setattr(models.os, "sched_getaffinity", lambda pid: many, raising=False)
    assert models.decode_threads() == models.MAX_DECODE_THREADS


def test_without_llama_cpp_the_error_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("gridrail.models._llama_cpp_imports", lambda: False)
    with pytest.raises(ModelLoadError, match=r"pip install 'gridrail\[llama-cpp\]'"):
        load_model(runtime="llama-cpp")


def test_loading_and_exiting_leave_nothing_unclosed(llama: LanguageModel) -> None:
    # llama-cpp-python's /dev/null files (opened at its import) were reported at every exit of
    # `gridrail ask`: "ResourceWarning: unclosed file <... name='/dev/null' ...>"
    code = "from gridrail.models import load_model; load_model(runtime='llama-cpp')"
    done = subprocess.run(
        [sys.executable, "-W", "default::ResourceWarning", "-c", code],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert "ResourceWarning" not in done.stderr and "Exception ignored" not in done.stderr

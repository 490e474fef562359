"""Mode 3 with the real llama.cpp (the optional extra `gridrail[llama-cpp]`): the default GGUF
model decodes through `GridLlamaLogitsProcessor` inside `create_completion` and in a
`Llama.generate` loop; every output is a sentence of the role's language (or sealed
`truncated`), and the audit logs verify and replay. Part of `make check-long` (and CI's
`make check-long-reduced`), which install llama-cpp-python (a ~6 minute source build); skipped,
and reported so, where it is missing — failed under CI, which must run them."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

import gridrail as gr
from assets import missing
from gridrail.archive import save_guide
from gridrail.audit import replay, verify
from gridrail.decode.llama_cpp import GridLlamaLogitsProcessor
from gridrail.models import default_model_file
from gridrail.prompt import question_messages
from support.hr_example import hr_guide

try:
    import llama_cpp
except ImportError:
    llama_cpp = None

pytestmark = pytest.mark.long


@pytest.fixture(autouse=True)
def _llama_cpp_installed() -> None:
    # per test, not at import: `make test` collects this module too and must not need it
    if llama_cpp is None:
        missing("llama_cpp is not installed: pip install 'llama-cpp-python>=0.3'")


@cache
def _llm():
    return llama_cpp.Llama(model_path=str(default_model_file()), n_ctx=2048, verbose=False)


@cache
def _guide(role: str) -> gr.Guide:
    return hr_guide(gr.Vocabulary.from_gguf(default_model_file()), role)


def _prompt(guide: gr.Guide, question: str) -> list[int]:
    chat = "".join(
        f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
        for m in question_messages(guide.view, question)
    )
    return _llm().tokenize(f"{chat}<|im_start|>assistant\n".encode(), add_bos=False, special=True)


@pytest.mark.parametrize(
    ("role", "question", "budget"),
    [
        ("analyst", "How many employees are in each department?", 64),
        ("admin", "Delete the orders below 50.", 64),
        ("auditor", "List every salary with its start date.", 12),  # a tight budget
    ],
)
def test_create_completion_with_the_processor(
    role: str, question: str, budget: int, tmp_path: Path
) -> None:
    guide = _guide(role)
    save_guide(guide, tmp_path)
    processor = GridLlamaLogitsProcessor(guide, max_tokens=budget)
    out = _llm().create_completion(
        _prompt(guide, question),
        max_tokens=budget,
        temperature=0.0,
        logits_processor=llama_cpp.LogitsProcessorList([processor]),
    )
    choice = out["choices"][0]
    result = processor.finish(choice["finish_reason"])
    assert result.stop in ("eos", "reserve", "truncated")
    if result.stop != "truncated":
        assert result.text == choice["text"]
        assert guide.oracle.accepts(result.text.encode())
        assert len(result.tokens) <= budget
    verify(result.audit)
    assert replay(result.audit, tmp_path) == len(result.tokens)


def test_a_generate_loop_records_every_token(tmp_path: Path) -> None:
    guide = _guide("manager")
    save_guide(guide, tmp_path)
    processor = GridLlamaLogitsProcessor(guide, max_tokens=48)
    generated, reason = [], "length"
    for token in _llm().generate(
        _prompt(guide, "Move Hugo to the ops department."),
        temp=0.0,
        logits_processor=llama_cpp.LogitsProcessorList([processor]),
    ):
        if guide.is_eos(token):
            reason = "stop"
            break
        generated.append(token)
        if len(generated) == 48:
            break
    result = processor.finish(reason, generated)
    assert result.tokens[: len(generated)] == generated
    if reason == "stop":
        assert result.stop in ("eos", "reserve") and guide.oracle.accepts(result.text.encode())
    assert replay(result.audit, tmp_path) == len(result.tokens)

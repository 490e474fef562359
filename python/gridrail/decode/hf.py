"""transformers integration: the logits processor (mode 2) and a model adapter for the
GRID-owned loop (mode 1).

`GridLogitsProcessor` goes into `model.generate(..., logits_processor=[processor])`: one guarded
row (matcher, budget trigger, audit log) per batch row, EOS only where a statement is complete,
and after `generate` returns, `processor.finish(output)` feeds each row its last token and seals
its log. Greedy search and sampling are supported; beam search is not (beams are reordered
behind the processor's back), nor is assisted or prompt-lookup generation (candidate tokens are
shown to the processor, then rejected): each call must add exactly one token to the last, or the
processor raises instead of guiding a sequence it no longer follows. Nothing may change the
logits after this processor.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from gridrail.audit import AuditLog
from gridrail.batch import fill_next_token_bitmask
from gridrail.decode.loop import Generation
from gridrail.decode.row import GuardedRow
from gridrail.guide import Guide
from gridrail.mask.bitmask import allocate_bitmask, allow_only

MODE = "transformers-processor"


class GridLogitsProcessor:
    """A transformers logits processor for a batch: row i follows `guides[i]` (one guide for
    every row when a single guide is given). `max_tokens` should equal `max_new_tokens`; with it,
    rows end as sentences within the budget unless one token lengthens the shortest completion
    past it (then the row is sealed "truncated": see `gridrail.decode.row`). At each step the
    rows' masks are written into one int32 bitmask in one call (`fill_next_token_bitmask`, on
    `threads` threads) and applied on the scores' device; each row reads only the tokens added
    since the last step."""

    def __init__(
        self,
        guides: Guide | Sequence[Guide],
        *,
        max_tokens: int | None = None,
        audit: bool = True,
        threads: int = 1,
    ):
        self._guides = guides
        self.threads = threads  # of `fill_next_token_bitmask`
        self.max_tokens = max_tokens
        self._audit = audit
        self.rows: list[GuardedRow] = []
        self._prompt_length: int | None = None
        self._length = 0  # the length of the sequences of the last call (prompt included)
        self._bitmask: np.ndarray | None = None
        self.guard_seconds = 0.0

    def _start(self, batch_size: int, prompt_length: int) -> None:
        guides = self._guides
        if isinstance(guides, Guide):
            guides = [guides] * batch_size
        elif len(guides) != batch_size:
            raise ValueError(
                f"{len(guides)} guides for a batch of {batch_size} rows (num_beams and "
                "num_return_sequences > 1 are not supported)"
            )
        self.rows = [
            GuardedRow(guide, self.max_tokens, AuditLog() if self._audit else None)
            for guide in guides
        ]
        self._prompt_length = prompt_length
        self._bitmask = allocate_bitmask(batch_size, self.rows[0].guide.vocab.size)

    def __call__(self, input_ids, scores):

        started = time.perf_counter()
        if self._prompt_length is None:
            self._start(input_ids.shape[0], input_ids.shape[1])
        elif input_ids.shape[1] != self._length + 1:
            raise ValueError(_not_one_more(self._length, input_ids.shape[1]))
        self._length = input_ids.shape[1]
        if input_ids.shape[0] != len(self.rows):
            raise ValueError(
                f"the batch changed from {len(self.rows)} to {input_ids.shape[0]} rows; use a new "
                "processor for each generate call (beam search is not supported)"
            )
        bitmask = self._bitmask
        assert bitmask is not None
        free, matchers = [], []
        for i, row in enumerate(self.rows):
            row.observe(input_ids[i, row.unseen(self._prompt_length)].tolist())
            forced = row.forced()
            if forced is None:
                free.append(i)
                matchers.append(row.matcher)
            else:
                allow_only(bitmask, i, forced)
        fill_next_token_bitmask(matchers, bitmask, free, threads=self.threads)
        out = apply_token_bitmask(scores, bitmask)
        self.guard_seconds += time.perf_counter() - started
        return out

    def finish(self, sequences) -> list[Generation]:
        """Feed each row the tokens `generate` sampled after the last call (its output
        `sequences`, prompt included), seal the audit logs and return one Generation per row."""
        if self._prompt_length is None:
            raise ValueError("the processor was never called: pass it to model.generate first")
        if sequences.shape[1] != self._length + 1:
            raise ValueError(_not_one_more(self._length, sequences.shape[1]))
        results = []
        for i, row in enumerate(self.rows):
            row.observe(sequences[i, row.unseen(self._prompt_length)].tolist())
            results.append(row.finish(MODE))
        return results


def _not_one_more(last: int, now: int) -> str:
    """Why sequences of length `now` after a call with length `last` cannot be followed."""
    return (
        f"the sequences went from {last} to {now} tokens, not one more: the host showed this "
        "processor tokens it then took back (assisted or prompt-lookup generation is not "
        "supported), or the processor is reused across generate calls"
    )


def apply_token_bitmask(scores, bitmask):
    """`scores` (a torch tensor, batch x logits) with -inf wherever `bitmask`'s bit is 0; logits
    past its bits (a model's padded output layer) are never allowed. `bitmask` is a NumPy array
    or a torch tensor of int32 words; the bits are unpacked on the scores' device: only the
    words cross to it."""
    import torch

    words = bitmask if torch.is_tensor(bitmask) else torch.from_numpy(bitmask)
    words = words.to(scores.device)
    shifts = torch.arange(32, device=scores.device, dtype=torch.int32)
    allowed = ((words.unsqueeze(-1) >> shifts) & 1).bool().flatten(1)
    width = scores.shape[-1]
    if allowed.shape[1] < width:
        pad = torch.zeros((len(allowed), width - allowed.shape[1]), dtype=torch.bool)
        allowed = torch.cat([allowed, pad.to(scores.device)], dim=1)
    return scores.masked_fill(~allowed[:, :width], float("-inf"))


class CausalLMLogits:
    """Next-token logits from a transformers causal LM for `generate` (mode 1), reusing the
    key/value cache: each call feeds only the tokens not fed before."""

    def __init__(self, model, prompt_ids: Sequence[int]):
        if not prompt_ids:
            raise ValueError("the prompt is empty")
        self.model = model
        self._prompt = [int(t) for t in prompt_ids]
        self._fed: list[int] = []
        self._cache = None

    def __call__(self, generated: Sequence[int]):
        import torch

        full = self._prompt + [int(t) for t in generated]
        if full[: len(self._fed)] != self._fed or len(full) == len(self._fed):
            self._fed, self._cache = [], None  # not a continuation of what was fed: start over
        new = full[len(self._fed) :]
        device = next(self.model.parameters()).device
        with torch.inference_mode():
            out = self.model(
                input_ids=torch.tensor([new], device=device), cache=self._cache, use_cache=True
            )
        self._cache = out.cache
        self._fed = full
        return out.logits[0, -1]

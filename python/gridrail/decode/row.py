"""One sequence under a logits processor that does not own the decode loop (modes 2 and 3).

The host library (transformers' `generate`, llama.cpp) samples; gridrail only sees the tokens
afterwards and shapes the next logits. It can still keep EOS to complete statements, and it can
*write* through the mask: once the shortest legal completion just fits the remaining budget
(accepted + completion = max_tokens), the mask is narrowed to the completion's next token, so
the sequence ends as a sentence exactly at the budget. What it cannot do is refuse a token that
was already sampled: a single token can lengthen the shortest completion by more than one, and
then the budget runs out mid-statement. That stop is the documented downgrade of these modes:
the audit seal says "truncated" and the mode flags say so.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gridrail.audit import AuditLog
from gridrail.decode.logits import allowed_array
from gridrail.decode.loop import Generation, text_of
from gridrail.errors import GridrailError
from gridrail.guide import Guide


class UnmaskedTokenError(GridrailError):
    """The host sampled a token outside the mask this processor gave it (another processor or a
    sampling option changed the logits after ours, or the processor saw the wrong sequence)."""


class GuardedRow:
    """The matcher, budget trigger and audit log of one sequence."""

    def __init__(self, guide: Guide, max_tokens: int | None = None, audit: AuditLog | None = None):
        self.guide = guide
        self.max_tokens = max_tokens
        self.matcher = guide.matcher(audit=audit)
        self._writing: list[int] = []  # the rest of a completion the trigger is writing
        self._wrote_reserve = False

    @property
    def audit(self) -> AuditLog | None:
        return self.matcher.audit

    def observe(self, new: Sequence[int]) -> None:
        """Accept `new`, the tokens the host generated since the last call (see `unseen`).
        Tokens after the sequence's EOS are the host's padding and are ignored."""
        matcher = self.matcher
        for token in new:
            if matcher.is_terminated():
                return
            token = int(token)
            writing = bool(self._writing) and token == self._writing[0]
            if not matcher.accept_tokens([token], "reserve" if writing else "sampled"):
                raise UnmaskedTokenError(
                    f"token {token} at position {matcher.num_accepted} is outside the mask "
                    "gridrail gave for it; nothing may change the logits after the gridrail "
                    "processor"
                )
            self._wrote_reserve |= writing
            self._writing = self._writing[1:] if writing else []

    def unseen(self, prompt_length: int) -> slice:
        """Where, in a host's whole sequence (prompt included), the tokens not yet observed
        start: hosts pass the whole sequence at every step, and reading only its new tail keeps
        each step's cost flat in the output's length."""
        return slice(prompt_length + self.matcher.num_accepted, None)

    def forced(self) -> int | None:
        """The token the budget trigger writes next, or None when the mask is the matcher's.
        The trigger starts once the shortest legal completion just fits the remaining budget."""
        matcher = self.matcher
        if not matcher.is_terminated() and self.max_tokens is not None and not self._writing:
            ending = matcher.completion()
            if matcher.num_accepted + len(ending) >= self.max_tokens:
                self._writing = ending  # from here on, write the shortest ending
        return self._writing[0] if self._writing else None

    def allowed(self, width: int) -> np.ndarray:
        """The boolean mask over `width` logits for the next token."""
        forced = self.forced()
        if forced is not None:
            out = np.zeros(width, dtype=bool)
            out[forced] = True
            return out
        return allowed_array(self.matcher.allowed(), width)

    @property
    def stop(self) -> str:
        """ "eos", "reserve" (the trigger wrote the end) or "truncated" (the host stopped first)."""
        if not self.matcher.is_terminated():
            return "truncated"
        return "reserve" if self._wrote_reserve else "eos"

    def finish(self, mode: str) -> Generation:
        """Close the audit log (if any) with the stop reason and this mode's flags, and return
        the row's output."""
        if self.audit is not None:
            self.audit.seal(
                self.stop,
                self.guide.artifacts(),
                {
                    "mode": mode,
                    "max_tokens": self.max_tokens,
                    "truncated": self.stop == "truncated",
                },
            )
        tokens = self.matcher.accepted_tokens()
        return Generation(tokens, text_of(self.guide, tokens), self.stop, audit=self.audit)

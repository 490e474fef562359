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
from gridrail.guide import Guide, Matcher
from gridrail.mask.bitmask import TokenSet, bitmask_array


class UnmaskedTokenError(GridrailError):
    """The host sampled a token outside the mask this processor gave it (another processor or a
    sampling option changed the logits after ours, or the processor saw the wrong sequence)."""


class BudgetTrigger:
    """The budget of a host that samples on its own: once the shortest legal completion just
    fits what is left of `max_tokens`, the mask is its next token until it is written. The
    completion is computed once and followed: one recomputed after each of its tokens can be
    another, longer one."""

    def __init__(self, max_tokens: int | None):
        self.max_tokens = max_tokens
        self._writing: list[int] = []  # the rest of the completion being written

    @classmethod
    def checked(cls, guide: Guide, max_tokens: int | None) -> BudgetTrigger:
        """A trigger for `guide`'s generations: UsageError if `max_tokens` cannot hold a
        sentence of its language (`Guide.check_budget`)."""
        if max_tokens is not None:
            guide.check_budget(max_tokens)
        return cls(max_tokens)

    def forced(self, matcher: Matcher) -> int | None:
        """The token the trigger writes next at `matcher`, or None (the mask is the matcher's)."""
        if self.max_tokens is None or matcher.is_terminated():
            return None
        if not self._writing:
            ending = matcher.completion()
            if matcher.num_accepted + len(ending) >= self.max_tokens:
                self._writing = ending
        return self._writing[0] if self._writing else None

    def fill(self, matcher: Matcher, bitmask: object, row: int) -> bool:
        """Write the forced token alone into row `row` of an int32 bitmask (as
        `Matcher.fill_bitmask` takes it) if the trigger writes one: whether it did."""
        forced = self.forced(matcher)
        if forced is None:
            return False
        only = TokenSet(matcher.guide.vocab.size)
        only.add(forced)
        only.write_row(bitmask_array(bitmask, only.vocab_size), row)
        return True

    def writes(self, token: int) -> bool:
        """Is `token` the one the trigger is writing next?"""
        return bool(self._writing) and token == self._writing[0]

    def accepted(self, token: int) -> None:
        """Note that `token` was accepted: the rest of the completion, or none if it left it."""
        self._writing = self._writing[1:] if self.writes(token) else []

    def reset(self) -> None:
        """Forget the completion being written (after a rollback: computed again)."""
        self._writing = []


class GuardedRow:
    """The matcher, budget trigger and audit log of one sequence."""

    def __init__(self, guide: Guide, max_tokens: int | None = None, audit: AuditLog | None = None):
        self.guide = guide
        self.max_tokens = max_tokens
        self.matcher = guide.matcher(audit=audit)
        self.trigger = BudgetTrigger(max_tokens)
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
            writing = self.trigger.writes(token)
            if not matcher.accept_tokens([token], "reserve" if writing else "sampled"):
                raise UnmaskedTokenError(
                    f"token {token} at position {matcher.num_accepted} is outside the mask "
                    "gridrail gave for it; nothing may change the logits after the gridrail "
                    "processor"
                )
            self._wrote_reserve |= writing
            self.trigger.accepted(token)

    def unseen(self, prompt_length: int) -> slice:
        """Where, in a host's whole sequence (prompt included), the tokens not yet observed
        start: hosts pass the whole sequence at every step, and reading only its new tail keeps
        each step's cost flat in the output's length."""
        return slice(prompt_length + self.matcher.num_accepted, None)

    def forced(self) -> int | None:
        """The token the budget trigger writes next, or None when the mask is the matcher's."""
        return self.trigger.forced(self.matcher)

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

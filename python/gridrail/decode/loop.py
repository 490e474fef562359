"""The GRID-owned decode loop (Proposition 9, mode 1): gridrail holds the loop, so it can write.

Each step: if the mask is a single token, jump forward over the forced span without asking the
model; otherwise ask the model for next-token logits, fill every token outside the mask with
-inf and choose. A token after which the shortest legal completion would no longer fit the
budget is refused by the matcher (the reserve trigger), and the loop writes that completion
instead. So every stop is a sentence followed by EOS: either the model chose EOS (only legal
where the output is a complete statement) or the reserve wrote the rest.

The model's forward pass does not depend on the mask, so the logits of the next step are asked
for, on a worker thread, as soon as the token is chosen, and the accepting (with its budget
check) and the next mask are computed meanwhile (paper §6.3's overlap): llama.cpp and torch
release the GIL while they compute, so on two cores a step costs about the larger of the two,
not their sum. Where the mask forces the next tokens, or the budget refuses the token, those
logits go unused (the tokens they fed stay valid in the model's cache, or are fed again). What
the model is fed at each call — every token since its previous call — is a function of the
tokens alone, so the choices stay reproducible.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from gridrail.audit import AuditLog
from gridrail.decode.logits import Sampler, allowed_array, as_vector, log_probability
from gridrail.decode.repetition import GuardedOutput, LoopGuard
from gridrail.guide import Guide, Matcher

NextLogits = Callable[[Sequence[int]], object]
"""Given every token generated so far (the prompt excluded), the next-token logits: a 1-D numpy
array or torch tensor as wide as the vocabulary (wider is allowed: the rest is masked)."""


@dataclass
class Generation:
    """One constrained generation: its tokens (EOS last), its text, how it stopped and where
    the time went."""

    tokens: list[int]
    text: str
    # "eos": the model ended a sentence; "reserve": the budget trigger wrote the end;
    # "deadline": the caller's deadline passed, and the loop wrote the shortest end then
    stop: str
    kinds: dict[str, int] = field(default_factory=dict)  # tokens per audit kind
    guard_seconds: float = 0.0  # masks, jump-forward, accepting (all but waiting for the model)
    model_seconds: float = 0.0  # inside `next_logits` (on its thread, beside the masks)
    model_calls: int = 0  # the calls whose logits chose a token
    log_probability: float = 0.0  # the model's, summed over the tokens it chose (`model_calls`)
    audit: AuditLog | None = None
    mode: dict[str, object] = field(default_factory=dict)  # the seal's mode flags

    @property
    def confidence(self) -> float:
        """The model's mean log-probability per token it chose (0.0 when it chose none)."""
        return self.log_probability / self.model_calls if self.model_calls else 0.0


def generate(
    guide: Guide,
    next_logits: NextLogits,
    *,
    max_tokens: int,
    sampler: Sampler | None = None,
    audit: AuditLog | None = None,
    on_token: Callable[[int], None] | None = None,
    seal: bool = True,
    loop_guard: LoopGuard | None = None,
    deadline: float | None = None,
) -> Generation:
    """Decode one statement of `guide`'s language with at most `max_tokens` tokens (EOS
    included). With `audit`, every step is recorded and the log is sealed with the stop reason,
    the guide's artifact fingerprints and the mode flags — unless `seal` is false: a caller that
    knows more about the generation (why it was chosen among candidates) then seals it with
    `seal_generation`. `on_token(n)` is told the number of tokens so far after each step
    (progress display). With `loop_guard`, the model's choice never repeats a block that many
    times in a row nor nests parentheses past its depth (`decode.repetition`; the mask is
    unchanged). With `deadline` (a `time.monotonic()` instant), the model is not asked again
    once it has passed: the loop writes the shortest completion, as the budget reserve does
    (the output stays a sentence of the language, every token inside its exact mask), and the
    stop is "deadline"."""
    sampler = sampler or Sampler()
    matcher = guide.matcher(max_tokens=max_tokens, audit=audit)
    followed = loop_guard.follow(guide.vocab) if loop_guard is not None else None
    fed = 0  # tokens `followed` has seen
    result = Generation([], "", "eos", audit=audit)
    clock = time.perf_counter

    def timed_logits(tokens: list[int]) -> tuple[object, float]:
        before = clock()
        return next_logits(tokens), clock() - before

    started = clock()
    waited = 0.0
    # one worker: the model's calls run in order, never two at once; leaving the block waits
    # for the last one, so the model is idle when the next generation starts
    with ThreadPoolExecutor(1, thread_name_prefix="gridrail-model") as model_thread:
        ahead: Future | None = None  # the model's call for the tokens accepted so far
        while not matcher.is_terminated():
            if ahead is None:
                ahead = model_thread.submit(timed_logits, matcher.accepted_tokens())
            if followed is not None:  # what the last step accepted
                followed.feed(matcher.recent_tokens(matcher.num_accepted - fed))
                fed = matcher.num_accepted
            allowed = allowed_array(matcher.allowed())
            count = int(allowed.sum())
            if not count:  # never, where the mask is complete: say where, for the report
                done = text_of(guide, matcher.accepted_tokens())
                raise RuntimeError(
                    f"gridrail's mask is empty after {done!r}: a dead end, a defect of "
                    "gridrail (please report it with this text)"
                )
            forced = matcher.forced_tokens() if count == 1 else []
            if not forced and deadline is not None and time.monotonic() >= deadline:
                ahead = None
                _write_reserve(matcher, result)
                result.stop = "deadline"
            elif forced:  # the logits go unused (and so would an error computing them)
                ahead = None
                if not matcher.accept_tokens(forced, "forced"):
                    _write_reserve(matcher, result)
                else:
                    _count(result, "forced", len(forced))
            else:
                before_wait = clock()
                raw, seconds = ahead.result()
                waited += clock() - before_wait
                result.model_seconds += seconds
                result.model_calls += 1
                logits = as_vector(raw)
                token = _choose_token(guide, sampler, followed, allowed, logits)
                # the next step's call starts now, beside the accepting (the budget check
                # computes a completion) and the token's log-probability; a refused token ends
                # the generation, and its call goes unused
                ahead = None
                if not guide.is_eos(token):
                    ahead = model_thread.submit(timed_logits, [*matcher.accepted_tokens(), token])
                result.log_probability += log_probability(logits[: guide.vocab.size], token)
                if matcher.accept_tokens([token]):
                    _count(result, "eos" if guide.is_eos(token) else "sampled", 1)
                else:  # inside the mask, so refused by the budget: write the shortest ending
                    _write_reserve(matcher, result)
            if on_token is not None:
                on_token(matcher.num_accepted)
        before_wait = clock()
    waited += clock() - before_wait
    result.guard_seconds = clock() - started - waited
    result.tokens = matcher.accepted_tokens()
    result.text = text_of(guide, result.tokens)
    result.mode = {
        "mode": "grid-loop",
        "max_tokens": max_tokens,
        "sampling": sampler.description,
        "loop_guard": loop_guard.description if loop_guard else None,
    }
    if seal:
        seal_generation(guide, result)
    return result


def _choose_token(
    guide: Guide,
    sampler: Sampler,
    followed: GuardedOutput | None,
    allowed: np.ndarray,
    logits: np.ndarray,
) -> int:
    """The token `sampler` chooses among `allowed` (narrowed by the loop guard `followed`)."""
    if len(logits) < guide.vocab.size:
        raise ValueError(
            f"the model gave {len(logits)} logits for a vocabulary of "
            f"{guide.vocab.size} tokens: is the guide compiled for this model's vocabulary?"
        )
    if followed is not None:
        allowed = followed.narrow(allowed)
    return sampler.choose(logits, allowed)  # logits past the vocabulary stay out


def seal_generation(guide: Guide, generation: Generation, **notes: object) -> None:
    """Seal `generation`'s audit log (if it has one) with its stop reason, `guide`'s artifact
    fingerprints and its mode flags plus `notes` (chained and signed with the rest)."""
    if generation.audit is not None:
        generation.audit.seal(generation.stop, guide.artifacts(), {**generation.mode, **notes})


def _write_reserve(matcher: Matcher, result: Generation) -> None:
    ending = matcher.completion()
    accepted = matcher.accept_tokens(ending, "reserve")
    assert accepted, "a shortest completion is always accepted within the budget invariant"
    result.stop = "reserve"
    _count(result, "reserve", len(ending) - 1)
    _count(result, "eos", 1)


def _count(result: Generation, kind: str, n: int) -> None:
    result.kinds[kind] = result.kinds.get(kind, 0) + n


def text_of(guide: Guide, tokens: Sequence[int]) -> str:
    """The output's text: the tokens' bytes (EOS has none), invalid UTF-8 replaced."""
    spelled = b"".join(guide.vocab.token_bytes(t) or b"" for t in tokens if not guide.is_eos(t))
    return spelled.decode("utf-8", "replace")

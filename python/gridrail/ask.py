"""Question → SQL under a role (the `gridrail ask` main job, paper §6.1 steps 3 and 6).

Generate under the role's mask (the output is a statement of the role's language whose names
are the role's lexicon words), then run the SemanticChecker for what no mask can enforce
(column policy, name binding). If it names violations, make one constrained retry with the
violations quoted back to the model; whatever the retry produces is checked again and reported,
never silently passed on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gridrail.audit import AuditLog
from gridrail.check.checker import Violation
from gridrail.decode.logits import Sampler
from gridrail.decode.loop import Generation, generate
from gridrail.guide import Guide
from gridrail.models import LanguageModel
from gridrail.prompt import question_messages, repair_messages

DEFAULT_MAX_TOKENS = 256


@dataclass
class Attempt:
    sql: str
    violations: list[Violation]  # [] = clean
    generation: Generation
    prompt_tokens: int


@dataclass
class Answer:
    question: str
    attempts: list[Attempt] = field(default_factory=list)  # the first, then the repair if any

    @property
    def final(self) -> Attempt:
        return self.attempts[-1]

    @property
    def sql(self) -> str:
        return self.final.sql

    @property
    def violations(self) -> list[Violation]:
        return self.final.violations

    @property
    def repaired(self) -> bool:
        return len(self.attempts) > 1


def ask(
    question: str,
    guide: Guide,
    model: LanguageModel,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    repair: bool = True,
    audit: bool = True,
    sampler: Sampler | None = None,
    on_token: Callable[[int], None] | None = None,
    on_repair: Callable[[list[Violation]], None] | None = None,
) -> Answer:
    """Answer `question` with one statement of `guide`'s language (the guide needs a schema:
    the prompt shows the model what the role sees of it). `on_token` is told the token count
    as it grows; `on_repair` the violations that triggered the retry."""
    if guide.view is None:
        raise ValueError("ask needs a guide compiled with a schema (gr.compile(..., schema=...))")
    if model.vocab != guide.vocab:
        raise ValueError("the guide was compiled for another vocabulary than the model's")
    messages = question_messages(guide.view, question)
    answer = Answer(question)
    answer.attempts.append(_attempt(guide, model, messages, max_tokens, audit, sampler, on_token))
    first = answer.final
    if repair and first.violations:
        if on_repair is not None:
            on_repair(first.violations)
        retry = repair_messages(messages, first.sql, first.violations)
        answer.attempts.append(_attempt(guide, model, retry, max_tokens, audit, sampler, on_token))
    return answer


def _attempt(
    guide: Guide,
    model: LanguageModel,
    messages: list[dict[str, str]],
    max_tokens: int,
    audit: bool,
    sampler: Sampler | None,
    on_token: Callable[[int], None] | None,
) -> Attempt:
    prompt = model.prompt_ids(messages)
    generation = generate(
        guide,
        model.next_logits(prompt),
        max_tokens=max_tokens,
        sampler=sampler,
        audit=AuditLog() if audit else None,
        on_token=on_token,
    )
    return Attempt(generation.text, guide.check(generation.text), generation, len(prompt))

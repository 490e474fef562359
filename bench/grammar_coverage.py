"""How much of a corpus of SQL statements a grammar accepts, under gridrail's semantics.

Uses the reference oracle (tests/support/lark_reference.py), not gridrail itself:

    python bench/grammar_coverage.py --grammar python/gridrail/grammars/sqlite.lark \
        /work/shared/data/spider/train_gold.sql

Each input line is one statement, optionally followed by ``<TAB>db_id`` (stripped); a ``;`` is
appended when the statement does not end with one. Prints the number of accepted and rejected
lines, then for each rejected line its 1-based line number, the UTF-8 byte offset of the first
error (``eos`` when the statement is a viable prefix that may not stop there) and the statement.
Duplicate statements are checked once. On stderr: the runtime and the lexemes whose winner the
terminal index decided (two or more candidates of the top shadowing class viable), by group.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.lark_reference import Reference


def statement_of(line: str) -> str:
    sql = line.rstrip("\r\n").split("\t", 1)[0].rstrip()
    return sql if sql.endswith(";") else sql + ";"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grammar", required=True, type=Path, help="the .lark grammar")
    ap.add_argument("corpus", type=Path, help="one statement per line (SQL<TAB>db_id)")
    ap.add_argument("--start", default="start", help="start symbol (default: start)")
    ap.add_argument("--limit", type=int, default=0, help="check only the first N lines")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    ref = Reference(args.grammar.read_text(encoding="utf-8"), start=args.start)
    t_build = time.perf_counter() - t0

    lines = args.corpus.read_text(encoding="utf-8").splitlines()
    if args.limit:
        lines = lines[: args.limit]
    verdicts: dict[str, int | str | None] = {}
    rejected: list[tuple[int, int | str, str]] = []
    accepted = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        sql = statement_of(line)
        if sql not in verdicts:
            if ref.accepts_sentence(sql):
                verdicts[sql] = None
            else:
                err = ref.first_error(sql)
                verdicts[sql] = "eos" if err is None else err
        verdict = verdicts[sql]
        if verdict is None:
            accepted += 1
        else:
            rejected.append((number, verdict, sql))
    elapsed = time.perf_counter() - t0

    total = accepted + len(rejected)
    share = 100.0 * accepted / total if total else 0.0
    print(f"{accepted} accepted, {len(rejected)} rejected of {total} ({share:.2f}% accepted)")
    for number, verdict, sql in rejected:
        print(f"line {number}: error at byte {verdict}: {sql}")
    print(
        f"# {len(verdicts)} distinct statements, {elapsed:.1f}s "
        f"(grammar build {t_build:.1f}s), {ref.index_ties} index-decided ties",
        file=sys.stderr,
    )
    for (winner, others), count in ref.tie_groups.most_common():
        print(f"#   {count:6d} x {winner} over {', '.join(others)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

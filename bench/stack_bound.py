"""How deep the bundled sqlite language lets a statement nest, against SQLite's parser.

Per construct (tests/support/deep_statements.py NESTINGS): the deepest nesting the language
accepts and the deepest SQLite's parser holds (deeper: "parser stack overflow"). Then random
statements that climb to the bound (`deep_statement`): how many reach it and how many SQLite's
parser refuses. With --unbounded, the same for the grammar without its bound (the language
before the bound: what it let through).

    python bench/stack_bound.py [--statements 2000] [--seed 0] [--unbounded] [--json]
"""

from __future__ import annotations

import json
import random
import sqlite3
import sys
import time
from dataclasses import replace
from pathlib import Path

from host import provenance, report_parser

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = report_parser(__doc__)
    parser.add_argument("--statements", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--unbounded", action="store_true", help="the grammar without its bound")
    args = parser.parse_args()
    started = time.perf_counter()
    sys.path.insert(0, str(ROOT / "tests"))
    import gridrail as gr
    from gridrail.parse.completion import Completer
    from support.deep_statements import NESTINGS, deep_statement, deepest, peak_load

    grammar = gr.Grammar.bundled("sqlite")
    bound = grammar.stack_bound
    if args.unbounded:
        grammar = replace(grammar, stack_bound=None)
    oracle = gr.Oracle(gr.compile_grammar(grammar))
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t(a)")

    def refusal(sql: str) -> str | None:
        try:
            db.execute("EXPLAIN " + sql)
        except sqlite3.Error as exc:
            return str(exc)
        return None

    def holds(sql: str) -> bool:
        return "parser stack overflow" not in (refusal(sql) or "")

    rows = []
    for name, nesting in NESTINGS.items():
        ours = deepest(lambda sql: oracle.accepts((sql + ";").encode()), nesting)
        rows.append({"construct": name, "language": ours, "sqlite": deepest(holds, nesting)})
    rng = random.Random(args.seed)
    completer = Completer(oracle)
    at_limit = overflows = 0
    for _ in range(args.statements):
        sentence = deep_statement(oracle, completer, rng)
        at_limit += peak_load(oracle, sentence) >= bound.limit - 4
        overflows += not holds(sentence.decode())
    report = {
        "grammar": "sqlite without its bound" if args.unbounded else "sqlite",
        "limit": bound.limit,
        "constructs": rows,
        "statements": args.statements,
        "reaching the limit": at_limit,
        "parser stack overflows": overflows,
        **provenance(started),
    }
    if args.json:
        print(json.dumps(report))
        return
    print("| construct | deepest in the language | deepest SQLite's parser holds |")
    print("|---|---|---|")
    for row in rows:
        print(f"| {row['construct']} | {row['language']} | {row['sqlite']} |")
    print()
    print(
        f"{args.statements} climbing statements ({report['grammar']}): {at_limit} reach load >= "
        f"{bound.limit - 4}, {overflows} refused by SQLite's parser (stack overflow)"
    )
    print(f"{report['command']} — {report['host']} — {report['date']} ({report['seconds']} s)")


if __name__ == "__main__":
    main()

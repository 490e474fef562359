"""Random walks under Γ over Spider databases: do they end, and does SQLite bind every name?

    python bench/gamma_walks.py DB [DB ...] [--walks 60] [--declared-names]

For each database, the guide `gridrail ask` compiles over it (no policy: every statement kind,
writes included; the strict generation profile; Γ on) and the default model's vocabulary;
`--walks` walks, walk i seeded with i: a budget drawn from 24 / 40 / 64 / 128 tokens, a token
drawn uniformly from each mask, the reserve's completion accepted when the budget refuses the
drawn token. Counted per database: walks that met an empty mask or whose reserve the matcher
refused (both must be 0), writes among the sentences, and sentences SQLite (`EXPLAIN` on the
database, read-only) refuses for a name (must be 0). Each failure is printed.
"""

from __future__ import annotations

import json
import random
import sqlite3
import sys
import time
import warnings
from pathlib import Path

from gamma_replay import ask_guide
from host import provenance, report_parser

ROOT = Path(__file__).resolve().parent.parent
WRITES = ("insert", "update", "delete", "replace")
BUDGETS = (24, 40, 64, 128)


def main() -> None:
    parser = report_parser(__doc__)
    parser.add_argument("databases", nargs="+", help="Spider database ids")
    parser.add_argument("--walks", type=int, default=60)
    parser.add_argument("--declared-names", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    sys.path.insert(0, str(ROOT / "tests"))
    import gridrail as gr
    from assets import assets_root
    from gridrail.models import default_model_file
    from test_gamma import BINDING_ERRORS  # SQLite's refusals for a name (the walk tests')

    with warnings.catch_warnings():  # the GGUF vocabulary is not byte complete: said elsewhere
        warnings.simplefilter("ignore")
        vocab = gr.Vocabulary.from_gguf(default_model_file())
    eos = set(vocab.eos_token_ids)

    def text(ids: list[int]) -> str:
        spelled = b"".join(vocab.token_bytes(t) or b"" for t in ids if t not in eos)
        return spelled.decode("utf-8", "replace")

    rows = []
    for db in args.databases:
        path = assets_root() / "data" / "spider" / "database" / db / f"{db}.sqlite"
        guide = ask_guide(gr, vocab, path, args.declared_names)
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        stuck = writes = named = 0
        for seed in range(args.walks):
            rng = random.Random(seed)
            matcher = guide.matcher(max_tokens=rng.choice(BUDGETS))
            while not matcher.is_terminated():
                ids = matcher.allowed().ids()
                if not ids:
                    print(f"empty mask: {db} #{seed} {text(matcher.accepted_tokens())!r}")
                    break
                if not matcher.accept_tokens([rng.choice(ids)]):
                    completion = matcher.completion()
                    if not matcher.accept_tokens(completion, "reserve"):
                        print(f"reserve refused: {db} #{seed} {text(completion)!r}")
                        break
            if not matcher.is_terminated():
                stuck += 1
                continue
            sql = text(matcher.accepted_tokens())
            writes += sql.lstrip().lower().startswith(WRITES)
            try:
                connection.execute("EXPLAIN " + sql)
            except sqlite3.Error as exc:
                if any(e in str(exc) for e in BINDING_ERRORS):
                    named += 1
                    print(f"name error: {db} #{seed} {sql!r}: {exc}")
        rows.append({"db": db, "walks": args.walks, "writes": writes, "stuck": stuck,
                     "name_errors": named})  # fmt: skip
    report = {**provenance(started), "declared_names": args.declared_names, "databases": rows}
    if args.json:
        print(json.dumps(report))
    else:
        for row in rows:
            print(" ".join(f"{k}={v}" for k, v in row.items()))
        print(f"{report['host']}; {report['seconds']} s")


if __name__ == "__main__":
    main()

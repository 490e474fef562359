"""Cold start: `python bench/cold_start.py [--tokenizers gpt2,qwen2] [--runs 3] [--json]`.

Time to the first mask (issue 16 item 4), per tokenizer, each case in a fresh Python process
(so nothing is warm but what the case says), `--runs` processes per case, median reported:

  * new dialect: the vocabulary read (`Vocabulary.from_file`) and its token trie built —
    "tokenizer setup", reported apart — then `gridrail.compile` of the bundled sqlite grammar
    without schema or policy, and the first mask (`matcher().allowed()`);
  * new role over a known dialect: the HR example (examples/hr.sqlite, examples/hr_policy.toml)
    with the dialect compiled and the `analyst` role compiled and masked once beforehand; then
    each other role of the bundle in turn, never seen by the process: `gridrail.compile` of
    it over the same schema, and its first mask. Reported: the slowest role and the median.

A new schema for a known dialect and role is `bench/schema_scale.py`'s case.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from argparse import SUPPRESS
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def new_dialect(tokenizer: str) -> dict[str, float]:
    import gridrail as gr
    from gridrail.registry import shared_trie

    t0 = time.perf_counter()
    vocab = gr.Vocabulary.from_file(tokenizer)
    shared_trie(vocab)
    t1 = time.perf_counter()
    guide = gr.compile(gr.Grammar.bundled("sqlite"), vocab)
    t2 = time.perf_counter()
    guide.matcher().allowed()
    t3 = time.perf_counter()
    return {"tokenizer_s": t1 - t0, "compile_s": t2 - t1, "first_mask_s": t3 - t2}


def new_roles(tokenizer: str) -> dict[str, float]:
    import gridrail as gr
    from gridrail.registry import shared_trie

    vocab = gr.Vocabulary.from_file(tokenizer)
    shared_trie(vocab)
    grammar = gr.Grammar.bundled("sqlite")
    schema = gr.Schema.from_sqlite(EXAMPLES / "hr.sqlite")
    policy = gr.Policy.from_file(EXAMPLES / "hr_policy.toml")
    gr.compile(grammar, vocab).matcher().allowed()
    gr.compile(grammar, vocab, schema=schema, policy=policy, role="analyst").matcher().allowed()
    out: dict[str, float] = {}
    for role in (r for r in policy.roles if r != "analyst"):
        t0 = time.perf_counter()
        guide = gr.compile(grammar, vocab, schema=schema, policy=policy, role=role)
        guide.matcher().allowed()
        out[role] = time.perf_counter() - t0
    return out


CASES = {"new_dialect": new_dialect, "new_roles": new_roles}


def main() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from host import provenance, report_parser
    from spider_eval import assets_root

    parser = report_parser(__doc__)
    parser.add_argument("--tokenizers", default="gpt2,qwen2")
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per case")
    parser.add_argument("--child", nargs=2, metavar=("CASE", "TOKENIZER"), help=SUPPRESS)
    args = parser.parse_args()
    if args.child:
        case, tokenizer = args.child
        print(json.dumps(CASES[case](tokenizer)))
        return
    started = time.perf_counter()
    rows = []
    for name in args.tokenizers.split(","):
        tokenizer = str(assets_root() / "tokenizers" / name / "tokenizer.json")
        runs: dict[str, list[dict[str, float]]] = {case: [] for case in CASES}
        for _ in range(args.runs):
            for case in CASES:
                child = subprocess.run(
                    [sys.executable, __file__, "--child", case, tokenizer],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                runs[case].append(json.loads(child.stdout.strip().splitlines()[-1]))
        dialect = {
            key: statistics.median(r[key] for r in runs["new_dialect"])
            for key in runs["new_dialect"][0]
        }
        per_role = [t for r in runs["new_roles"] for t in r.values()]
        rows.append(
            {
                "tokenizer": name,
                **{f"dialect_{k}": v for k, v in dialect.items()},
                "role_median_s": statistics.median(per_role),
                "role_max_s": max(per_role),
                "roles": sorted(runs["new_roles"][0]),
            }
        )
    report = {**provenance(started), "runs": args.runs, "rows": rows}
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"{report['host']}, {report['date']}, {args.runs} processes per case (medians)")
    print(
        "| tokenizer | tokenizer setup | new dialect: compile / first mask / total | "
        "new role on a known dialect: median / slowest (compile + first mask) |"
    )
    print("|---|---|---|---|")
    for r in rows:
        total = r["dialect_compile_s"] + r["dialect_first_mask_s"]
        print(
            f"| {r['tokenizer']} | {r['dialect_tokenizer_s'] * 1000:.0f} ms | "
            f"{r['dialect_compile_s'] * 1000:.0f} / {r['dialect_first_mask_s'] * 1000:.0f} / "
            f"{total * 1000:.0f} ms | {r['role_median_s'] * 1000:.1f} / "
            f"{r['role_max_s'] * 1000:.1f} ms ({', '.join(r['roles'])}) |"
        )


if __name__ == "__main__":
    main()

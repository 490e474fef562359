"""Γ's mask cost on what the model writes: a Spider run's candidates replayed under Γ.

    python bench/gamma_replay.py RUN.jsonl [--questions 12] [--candidates 4] [--declared-names]
        [--root CHECKOUT]

Reads a `bench/spider_eval.py` run of the candidates arm (its rows hold each question's
candidate statements) and, for the first `--questions` questions, feeds the first
`--candidates` candidates of each token by token (the default model's vocabulary, read from
its GGUF file) to the guide `gridrail ask` compiles over the question's database — the strict
generation profile, Γ on (`--declared-names`: the name lexicons also spell declared names) —
timing `matcher.allowed()` before every token (a fresh guide per database, so the first masks
of each count). A candidate stops at its first token the mask refuses (none should) or at
its end. Reports steps, p50 / mean / p99 ms per mask, the candidates refused (by whether the
checker finds a name violation in them — `NAME_KINDS` — and whether they are writes), and the
candidates let through that hold one. `--root` runs the gridrail of another checkout (a
worktree of an older commit, with its own kernels).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from types import ModuleType

from host import provenance, report_parser

ROOT = Path(__file__).resolve().parent.parent
# the checker's violations that are about how a name binds (what Γ decides at the mask)
NAME_KINDS = frozenset(
    {"unknown_column", "unbound_qualifier", "ambiguous_column", "column_not_visible",
     "unknown_table", "table_not_writable", "double_quoted_column"}
)  # fmt: skip
WRITES = ("insert", "update", "delete", "replace")  # a WITH before one counts as a select


def ask_guide(gr: ModuleType, vocab: object, database: Path, declared_names: bool) -> object:
    """The guide `gridrail ask` compiles over `database` without a policy — the strict
    generation profile, Γ on — from `gr`, the gridrail being measured (`--root`)."""
    return gr.compile(
        gr.Grammar.bundled("sqlite"),
        vocab,
        schema=gr.Schema.from_sqlite(database),
        profile=gr.GenerationProfile(),
        gamma=True,
        declared_names=declared_names,
    )


def main() -> None:
    parser = report_parser(__doc__)
    parser.add_argument("run", type=Path, help="a spider_eval.py output (candidates arm)")
    parser.add_argument("--questions", type=int, default=12)
    parser.add_argument("--candidates", type=int, default=4)
    parser.add_argument("--declared-names", action="store_true")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to measure")
    parser.add_argument("--spider", type=Path, default=None, help="Spider's folder")
    args = parser.parse_args()
    started = time.perf_counter()
    sys.path[:0] = [str(args.root.resolve() / "python"), str(ROOT / "tests")]
    import gridrail as gr
    from assets import assets_root
    from gridrail.models import default_model_file

    spider = args.spider or assets_root() / "data" / "spider"
    with warnings.catch_warnings():  # the GGUF vocabulary is not byte complete: said elsewhere
        warnings.simplefilter("ignore")
        vocab = gr.Vocabulary.from_gguf(default_model_file())
    rows = [json.loads(line) for line in args.run.read_text().splitlines() if line.strip()]
    questions = [
        r for r in rows if r.get("kind") == "question" and "constrained+candidates" in r["arms"]
    ][: args.questions]
    guides: dict[str, gr.Guide] = {}
    times: list[float] = []
    counts: Counter[str] = Counter()
    for row in questions:
        db = row["db_id"]
        if db not in guides:
            path = spider / "database" / db / f"{db}.sqlite"
            guides[db] = ask_guide(gr, vocab, path, args.declared_names)
        guide = guides[db]
        for sql in row["arms"]["constrained+candidates"]["candidate_sql"][: args.candidates]:
            matcher = guide.matcher()
            accepted = True
            for token in guide.trie.tokenize(sql.encode()):
                before = time.perf_counter()
                mask = matcher.allowed()
                times.append(time.perf_counter() - before)
                if token not in mask or not matcher.accept_tokens([token]):
                    accepted = False
                    break
            named = bool({v.kind for v in guide.check(sql)} & NAME_KINDS)
            kind = "write" if sql.lstrip().lower().startswith(WRITES) else "select"
            verdict = "accepted" if accepted else "refused"
            counts[f"{verdict} {kind}s{' with a name violation' if named else ''}"] += 1
    ordered = sorted(times)
    report = {
        **provenance(started),
        "questions": len(questions),
        "declared_names": args.declared_names,
        "steps": len(times),
        "p50_ms": round(statistics.median(times) * 1e3, 2),
        "mean_ms": round(statistics.mean(times) * 1e3, 2),
        "p99_ms": round(ordered[int(0.99 * len(ordered))] * 1e3, 1),
        "refused": sum(n for k, n in counts.items() if k.startswith("refused")),
        "candidates": dict(sorted(counts.items())),
    }
    if args.json:
        print(json.dumps(report))
    else:
        print(" ".join(f"{k}={v}" for k, v in report.items()))


if __name__ == "__main__":
    main()

"""The cost of Γ's masks on the bundled HR example, in CPU seconds (robust to a shared host).

    python bench/gamma_mask_cost.py [--root CHECKOUT] [--no-cache] [--tokenizer gpt2]

The analyst's guide (strict profile, `gamma=True`) over examples/hr.sqlite; four statements
(a GROUP BY, a two-table join with aliases, a count, a filtered list) fed token by token,
`matcher.allowed()` timed with `time.process_time()` before each token. Two passes over the
same statements: the first meets every state for the first time, the second meets them again
(the guide's memos warm; with the Γ-mask cache, the same configurations). `--root` runs the
gridrail of another checkout (a worktree of an older commit) for a comparison in one session;
`--no-cache` shrinks the guide's Γ-mask cache (where the checkout has one) to one entry;
`--declared-names` compiles the guide with them (`compile(..., declared_names=True)`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATEMENTS = (
    "SELECT dept, COUNT(*) FROM employees GROUP BY dept;",
    "SELECT e.name, o.total FROM employees AS e JOIN orders AS o ON o.employee_id = e.id "
    "WHERE o.total > 100 ORDER BY o.total DESC;",
    "SELECT COUNT(*) AS employees_departments FROM employees;",
    "SELECT name, dept FROM employees_public WHERE dept = 'Sales' LIMIT 10;",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to measure")
    parser.add_argument("--no-cache", action="store_true")
    parser.add_argument("--tokenizer", default="gpt2")
    parser.add_argument(
        "--declared-names",
        action="store_true",
        help="the name lexicons also spell declared names (a checkout that has them)",
    )
    args = parser.parse_args()
    root = args.root.resolve()
    sys.path[:0] = [str(root / "python"), str(root / "tests")]
    from tokenizers import Tokenizer

    import gridrail as gr
    from support.hr_example import hr_guide

    if not Path(gr.__file__).resolve().is_relative_to(root):
        raise SystemExit(f"gridrail was imported from {gr.__file__}, not from {root}")
    path = ROOT.parent / "shared" / "tokenizers" / args.tokenizer / "tokenizer.json"
    vocab, tokenizer = gr.Vocabulary.from_file(path), Tokenizer.from_file(str(path))
    names = {"declared_names": True} if args.declared_names else {}
    guide = hr_guide(vocab, "analyst", profile=gr.GenerationProfile(), gamma=True, **names)
    if args.no_cache:
        from gridrail.lru import BoundedLRU

        # the mask memos: the language's (`_masks`, which held Γ's too in sessions 17-31)
        # and Γ's (`_gamma_masks`, before session 17 and since session 32)
        for name in ("_gamma_masks", "_masks"):
            if hasattr(guide, name):
                setattr(guide, name, BoundedLRU(1, 0))
    for label in ("first pass", "second pass"):
        times = []
        for sql in STATEMENTS:
            matcher = guide.matcher()
            for token in tokenizer.encode(sql).ids:
                started = time.process_time()
                allowed = matcher.allowed()
                times.append(time.process_time() - started)
                assert token in allowed and matcher.accept_tokens([token]), sql
        times.sort()
        p50, p90 = times[len(times) // 2], times[int(len(times) * 0.9)]
        print(
            f"{label}: {len(times)} masks, {sum(times):.2f} s CPU, p50 {p50 * 1e3:.1f} ms, "
            f"p90 {p90 * 1e3:.1f} ms, max {times[-1] * 1e3:.1f} ms"
        )


if __name__ == "__main__":
    main()

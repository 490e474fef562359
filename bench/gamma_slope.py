"""Requirement R under Γ: is the cost of a mask with names tracked flat in the output's length?

    python bench/gamma_slope.py [--stream 2000] [--runs 3] [--tokenizer gpt2]
                                [--gamma-cache | --cold-binder | --warm-other]

A guide compiled with `gamma=True` (strict profile) over a one-table SQLite schema t(name,
c1..c9); the streams are bench/mask_cache.py's seeded WHERE chains (`SELECT name FROM t WHERE
<predicates>;`), whose every column reference is a Γ slot. Each stream is replayed twice: a
cold pass (untimed: fills the caches) and a timed pass, where what is timed is
`matcher.allowed()` before each token — the language's mask and Γ's filter of it. The guide's
memo of Γ's masks, which keys them by configuration and Γ's content, would replay the cold
pass's masks: it is shrunk to one entry, so the timed pass computes every Γ filter, from the
binder's shifts, judges and verdicts and the guide's filter plans as the cold pass left them
(as earlier traffic would; keyed by Γ's content or the language's mask, bounded), over the
language's masks as the cold pass left them in their own memo (the R harness of
bench/mask_cache.py times those). With `--cold-binder` the binder's memos and the plans are
cleared before the timed pass, which then meets each state's first time itself (a chain's
predicates meet equal states again, so its steps grow cheaper as it goes). The memos are
bounded, so a timed pass that replays the cold pass's own stream meets its early positions'
entries evicted by its later ones (a slope of the replay's order, not of Γ); with
`--warm-other` the cold pass replays another stream of the same length (seed + 10,000)
instead, so the timed stream meets the memos as earlier traffic leaves them, in its own
order. With `--gamma-cache` the memo of Γ's masks instead holds every mask of a run, so the
timed pass is a warm replay of them (as bench/mask_cache.py's R harness replays the
language's). Per run the OLS slope of step latency (µs) on position; over runs the mean slope
with its 95% interval, p50 / p99 of every step pooled (bench/mask_cache.py's statistics).
"""

from __future__ import annotations

import argparse
import gc
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tokenizers import Tokenizer

import gridrail as gr
from gridrail.lru import BoundedLRU
from mask_cache import ACCEPTANCE_BAND, SlopeSummary, _ols_slope, where_chain

ROOT = Path(__file__).resolve().parent.parent


def _schema(directory: Path) -> gr.Schema:
    path = directory / "t.sqlite"
    with sqlite3.connect(path) as db:
        db.execute(f"CREATE TABLE t (name TEXT, {', '.join(f'c{i} TEXT' for i in range(1, 10))})")
    return gr.Schema.from_sqlite(path)


def _timed(matcher: gr.Matcher, ids: list[int]) -> list[float]:
    times = []
    for token in ids:
        started = time.perf_counter_ns()
        matcher.allowed()
        times.append((time.perf_counter_ns() - started) / 1e3)
        assert matcher.accept_tokens([token])
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokenizer", default="gpt2")
    parser.add_argument("--stream", type=int, default=2_000, help="tokens per stream")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--gamma-cache",
        action="store_true",
        help="size the guide's mask memo to hold a run's masks (the timed pass then replays "
        "them); by default it holds one entry, so the timed pass computes every Γ filter",
    )
    parser.add_argument(
        "--cold-binder",
        action="store_true",
        help="clear the binder's memos (shifts, judges, verdicts) and the guide's filter plans "
        "before the timed pass",
    )
    parser.add_argument(
        "--warm-other",
        action="store_true",
        help="warm the caches with another stream of the same length, not the timed one",
    )
    args = parser.parse_args()
    if args.gamma_cache + args.cold_binder + args.warm_other > 1:
        parser.error("--gamma-cache, --cold-binder and --warm-other are alternatives")
    path = ROOT.parent / "shared" / "tokenizers" / args.tokenizer / "tokenizer.json"
    tokenizer = Tokenizer.from_file(str(path))
    vocab = gr.Vocabulary.from_file(path)
    with tempfile.TemporaryDirectory() as tmp:
        schema = _schema(Path(tmp))
    guide = gr.compile(
        gr.Grammar.bundled("sqlite"),
        vocab,
        schema=schema,
        profile=gr.GenerationProfile(),
        gamma=True,
    )
    summary = SlopeSummary([], [])
    for seed in range(args.runs):
        ids = where_chain(random.Random(seed), tokenizer, args.stream)
        # the guide's memo of Γ's masks, new for each run: one entry, so the Γ filter is
        # computed at every position, or room for the run's masks — with its default bound
        # (4,096 masks) a long stream's are evicted before the timed pass replays them. The
        # language's masks, in a memo of their own, stay as the cold pass leaves them
        size = 2 * len(ids) + 64 if args.gamma_cache else 1
        guide._gamma_masks = BoundedLRU(size, 1 << 40 if args.gamma_cache else 0)
        warm = where_chain(random.Random(10_000 + seed), tokenizer, args.stream)
        _timed(guide.matcher(), warm if args.warm_other else ids)  # cold pass
        if args.cold_binder and guide.binder is not None:
            # the timed pass computes the binder's shifts, judges and verdicts and the guide's
            # filter plans again, sharing only within itself (equal states at other positions)
            guide.binder._shifts.clear()
            guide.binder._judges.clear()
            guide.binder._after.clear()
            guide.binder._verdicts.clear()
            guide._gamma_plans.clear()
        gc.collect()
        gc.disable()
        try:
            times = _timed(guide.matcher(), ids)
        finally:
            gc.enable()
        summary.slopes.append(_ols_slope(times))
        summary.latencies.extend(times)
        print(f"run {seed}: {len(ids)} tokens, slope {summary.slopes[-1]:+.2e} µs/position")
    binder = "warm"
    if args.cold_binder or args.warm_other:
        binder = "cold" if args.cold_binder else "warmed by another stream"
    what = "Γ masks from the cache" if args.gamma_cache else f"Γ filter computed, binder {binder}"
    summary.report(f"Γ mask (language mask warm, {what})", ACCEPTANCE_BAND)


if __name__ == "__main__":
    main()

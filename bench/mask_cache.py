"""Mask-cache figures and the warm-replay slope of requirement R (paper §8.2's method).

    python bench/mask_cache.py                # gpt2; 100 statements; 20 runs x 16,000 tokens
    python bench/mask_cache.py --quick        # a smoke run of every section in about a minute

Single thread, one guide for the whole run (`gr.compile` of the bundled sqlite grammar, no
schema), Python path. What is timed, everywhere: `time.perf_counter_ns()` around one
`guide.mask(cfg)` call, where `cfg` is the matcher's configuration before the step's token is
accepted — the full mask (top-level walk from the T1 cache or computed, the CD residue's tokens
from the guide's mask memo or verdicts stepped on the live stack, EOS gate, emptiness check).
Tokenizing and `accept_tokens` (scanning the token and advancing the parser) are not timed.

1. Replay workload: `--statements` Spider gold statements (seeded sample; those the grammar
   accepts), token by token, caches cold at the start. Every step is one of (told apart by
   the caches' counters, read outside the timed call):
   - a walk computed: a T1 miss, for the top-level walk or a walk inside the CD residue;
   - residue live: every walk from T1, the CD residue's verdicts stepped on the live stack
     (this stack and scan part, `Configuration.mask_key`, were not in the mask memo);
   - mask memoized: the whole mask from the guide's mask memo (the stack and scan part were
     met before; no walk is consulted then).
   p50 / p99 of each; entries and bytes held by T1 and by the mask memo.
2. Warm-replay slope (R): for each of `--runs` seeds, a statement whose WHERE clause is a seeded
   random chain of predicates (comparisons, IN lists, LIKE, BETWEEN, parenthesized OR groups)
   long enough to tokenize to `--stream` tokens. It is replayed twice: a cold pass (untimed;
   fills T1 and the mask memo as far as their bounds allow) and the warm pass, timed at every
   position. The garbage collector runs (`gc.collect()`) before the warm pass and is disabled
   during it, as in the paper (`--gc` leaves it on). Per run: the OLS slope of step latency (µs)
   on position. Over runs: the mean slope with its 95% confidence interval (Student t over the
   runs' slopes), p50 / p99 of every warm step pooled, and the acceptance verdict: met when the
   whole interval lies inside ±1e-3 µs/position.
3. Live-residue pass: the warm pass of the first `--live-runs` streams again, over their first
   `--live-positions` positions, with the mask memo emptied before each timed step: what a
   T1 hit costs when its stack was never met (every CD verdict stepped on the live stack). p50 /
   p99 and the same slope statistics, for shape: this path is the memo's miss cost.

Results go to bench/RESULTS.md with the host line printed here.
"""

from __future__ import annotations

import argparse
import gc
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import gridrail as gr

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from assets import assets_root  # noqa: E402  (the one place assets are found)
from host import describe  # noqa: E402

ACCEPTANCE_BAND = 1e-3  # µs per position: |slope| must stay under this over a 16k stream


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom (bisection on the CDF,
    which is integrated with Simpson's rule: no SciPy needed)."""
    scale = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf(x: float, steps: int = 2000) -> float:
        h = x / steps
        total = 0.0
        for i in range(steps + 1):
            weight = 1 if i in (0, steps) else 4 if i % 2 else 2
            total += weight * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2)
        return 0.5 + scale * total * h / 3

    low, high = 0.0, 20.0 if df > 1 else 100.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if cdf(mid) < 0.975 else (low, mid)
    return (low + high) / 2


@dataclass
class SlopeSummary:
    slopes: list[float]  # µs per position, one per run
    latencies: list[float]  # µs, every timed step of every run

    @property
    def mean(self) -> float:
        return statistics.fmean(self.slopes)

    @property
    def half_width(self) -> float:
        """Half the 95% confidence interval of the mean slope (0 with a single run)."""
        runs = len(self.slopes)
        if runs < 2:
            return 0.0
        return _t_quantile_975(runs - 1) * statistics.stdev(self.slopes) / math.sqrt(runs)

    def report(self, label: str, band: float | None) -> None:
        low, high = self.mean - self.half_width, self.mean + self.half_width
        print(
            f"  {label}: {len(self.slopes)} runs, {len(self.latencies)} steps; per step "
            f"p50 {_percentile(self.latencies, 0.5):.1f} µs, p99 "
            f"{_percentile(self.latencies, 0.99):.1f} µs"
        )
        print(
            f"  slope {self.mean:+.2e} µs/position, 95% CI [{low:+.2e}, {high:+.2e}]"
            + ("" if len(self.slopes) > 1 else " (one run: no interval)")
        )
        print(
            f"  per-run slopes: min {min(self.slopes):+.2e}, max {max(self.slopes):+.2e} "
            "µs/position"
        )
        if band is not None:
            met = len(self.slopes) > 1 and -band < low and high < band
            print(f"  acceptance ±{band:.0e} µs/position: {'MET' if met else 'NOT MET'}")


def _timed_mask(guide: gr.Guide, cfg: gr.Configuration) -> float:
    """Seconds one full mask takes at `cfg`."""
    started = time.perf_counter_ns()
    guide.mask(cfg)
    return (time.perf_counter_ns() - started) * 1e-9


def replay_workload(guide: gr.Guide, tokenizer, statements: list[str]) -> None:
    cache, memo = guide.cache.stats, guide.cache_stats()["masks"]
    classes = {
        "computed": "a walk computed (T1 miss: top-level or inside the residue)",
        "live": "every walk from T1, CD residue computed on the live stack",
        "memoized": "the whole mask from the mask memo",
    }
    times: dict[str, list[float]] = {name: [] for name in classes}
    for sql in statements:
        m = guide.matcher()
        for token in tokenizer.encode(sql, add_special_tokens=False).ids:
            t1_misses, memo_hits = cache.misses, memo.hits
            elapsed = _timed_mask(guide, m.configuration)
            if cache.misses > t1_misses:
                times["computed"].append(elapsed)
            elif memo.hits > memo_hits:
                times["memoized"].append(elapsed)
            else:
                times["live"].append(elapsed)
            assert m.accept_tokens([token]), sql
    steps = sum(len(t) for t in times.values())
    print(f"replay: {len(statements)} statements, {steps} steps, caches cold at the start")
    for name, label in classes.items():
        values = times[name]
        if values:
            print(
                f"  {label}: {len(values)} steps ({len(values) / steps:.1%}), "
                f"p50 {_percentile(values, 0.5) * 1e3:.3f} ms, "
                f"p99 {_percentile(values, 0.99) * 1e3:.3f} ms"
            )
    _print_memory(guide)


def _print_memory(guide: gr.Guide) -> None:
    cache, memo = guide.cache.stats, guide.cache_stats()["masks"]
    print(
        f"  T1: {cache.entries} entries, {cache.bytes / 1024:.0f} KiB payload "
        f"({cache.bytes / max(1, cache.entries) / 1024:.1f} KiB per entry); mask memo: "
        f"{memo.entries} entries, {memo.bytes / 1024:.0f} KiB, {memo.evictions} evictions"
    )


def where_chain(rng: random.Random, tokenizer, target_tokens: int) -> list[int]:
    """Token ids of `SELECT name FROM t WHERE <predicates>;` with at least `target_tokens`
    tokens: a seeded random chain of predicates joined by AND / OR."""

    def predicate() -> str:
        column = f"c{rng.randint(1, 9)}"
        kind = rng.randrange(5)
        if kind == 0:
            op = rng.choice(("=", "<", ">", "<=", ">=", "<>"))
            return f"{column} {op} {rng.randint(0, 99_999)}"
        if kind == 1:
            values = ", ".join(str(rng.randint(0, 999)) for _ in range(rng.randint(1, 8)))
            return f"{column} IN ({values})"
        if kind == 2:
            return f"{column} LIKE '{rng.choice(('ab', 'x_', 'name', 'q'))}%'"
        if kind == 3:
            low = rng.randint(0, 500)
            return f"{column} BETWEEN {low} AND {low + rng.randint(1, 500)}"
        return f"({column} = '{rng.choice(('x', 'y z', 'it'))}' OR {column} IS NULL)"

    parts = [predicate()]
    sql = ""
    ids: list[int] = []
    while len(ids) < target_tokens:
        # grow in chunks, re-tokenizing the whole statement (tokens can merge across a join)
        for _ in range(max(1, (target_tokens - len(ids)) // 12)):
            parts.append(rng.choice((" AND ", " OR ")) + predicate())
        sql = f"SELECT name FROM t WHERE {''.join(parts)};"
        ids = tokenizer.encode(sql, add_special_tokens=False).ids
    return ids


def _pass(guide: gr.Guide, ids: list[int], positions: int, live_residues: bool) -> list[float]:
    """Replay the first `positions` tokens of `ids`: mask latencies (µs) at each position."""
    m = guide.matcher()
    times = []
    for token in ids[:positions]:
        if live_residues:
            guide._masks.clear()  # the masks by stack and scan part
        times.append(_timed_mask(guide, m.configuration) * 1e6)
        assert m.accept_tokens([token])
    return times


def _ols_slope(latencies: list[float]) -> float:
    return statistics.linear_regression(range(len(latencies)), latencies).slope


def warm_slope(guide: gr.Guide, tokenizer, args: argparse.Namespace) -> None:
    streams = [
        where_chain(random.Random(seed), tokenizer, args.stream) for seed in range(args.runs)
    ]
    lengths = sorted(len(ids) for ids in streams)
    print(
        f"warm replay: {args.runs} seeded WHERE-chain streams of {lengths[0]}–{lengths[-1]} "
        f"tokens; GC {'on' if args.gc else 'off'} during timed passes"
    )
    warm = SlopeSummary([], [])
    for ids in streams:
        _pass(guide, ids, len(ids), live_residues=False)  # cold: fills T1 and the memo
        times = _timed_pass(guide, ids, len(ids), live_residues=False, keep_gc=args.gc)
        warm.slopes.append(_ols_slope(times))
        warm.latencies.extend(times)
    warm.report("warm pass (T1 and mask memo warm)", ACCEPTANCE_BAND)
    _print_memory(guide)
    if args.live_runs:
        live = SlopeSummary([], [])
        for ids in streams[: args.live_runs]:
            times = _timed_pass(
                guide, ids, args.live_positions, live_residues=True, keep_gc=args.gc
            )
            live.slopes.append(_ols_slope(times))
            live.latencies.extend(times)
        print(
            f"live-residue pass: first {args.live_positions} positions, mask memo emptied "
            "before every step"
        )
        live.report("T1 hit, CD residue computed on the live stack", None)


def _timed_pass(
    guide: gr.Guide, ids: list[int], positions: int, live_residues: bool, keep_gc: bool
) -> list[float]:
    gc.collect()
    if not keep_gc:
        gc.disable()
    try:
        return _pass(guide, ids, positions, live_residues)
    finally:
        gc.enable()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokenizer", default="gpt2")
    parser.add_argument("--statements", type=int, default=100)
    parser.add_argument("--stream", type=int, default=16_000, help="tokens per stream")
    parser.add_argument("--runs", type=int, default=20, help="seeded streams")
    parser.add_argument("--live-runs", type=int, default=2)
    parser.add_argument("--live-positions", type=int, default=2_000)
    parser.add_argument("--gc", action="store_true", help="leave GC on during timed passes")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 10 statements, 3 runs of 2,000 tokens, 200 live positions",
    )
    args = parser.parse_args()
    if args.quick:
        args.statements, args.stream, args.runs = 10, 2_000, 3
        args.live_runs, args.live_positions = 1, 200
    from tokenizers import Tokenizer

    path = assets_root() / "tokenizers" / args.tokenizer / "tokenizer.json"
    tokenizer = Tokenizer.from_file(str(path))
    guide = gr.compile(gr.Grammar.bundled("sqlite"), gr.Vocabulary.from_file(path))
    with open(assets_root() / "data" / "spider" / "train_gold.sql", encoding="utf-8") as f:
        lines = [line.split("\t", 1)[0].strip() for line in f]
    picked = random.Random(3).sample(lines, args.statements)
    statements = [s if s.endswith(";") else s + ";" for s in picked]
    print(f"host: {describe()}; tokenizer {args.tokenizer}")
    started = time.perf_counter()
    replay_workload(guide, tokenizer, [s for s in statements if guide.oracle.accepts(s.encode())])
    warm_slope(guide, tokenizer, args)
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()

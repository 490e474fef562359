"""T1 mask-cache figures: `python bench/mask_cache.py --tokenizer gpt2 --statements 200`.

1. Replay-shaped workload: Spider gold statements replayed token by token through one guide
   (its cache starts cold): hit rate over the run, and per-step latency of hits vs misses
   (p50/p99) — the CD residue is computed on every step either way.
2. Memory per entry: the payload bytes the cache accounts, and entries held.
3. Warm-replay slope: one long statement (an IN list of about `--stream` tokens) replayed twice;
   on the second, warm pass, per-step latency is regressed on position (µs per position). A
   cost that tracks the grammar configuration, not the position, has slope ≈ 0.

Single thread, the Python path. Results go to bench/RESULTS.md with the host line printed here.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import gridrail as gr

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from assets import assets_root  # noqa: E402  (the one place assets are found)
from host import describe  # noqa: E402


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _timed_mask(guide: gr.Guide, cfg: gr.Configuration) -> tuple[float, bool]:
    hits = guide.cache.stats.hits
    started = time.perf_counter()
    guide.mask(cfg)
    return time.perf_counter() - started, guide.cache.stats.hits > hits


def replay_workload(guide: gr.Guide, tokenizer, statements: list[str]) -> None:
    hit_times, miss_times = [], []
    for sql in statements:
        m = guide.matcher()
        for token in tokenizer.encode(sql, add_special_tokens=False).ids:
            elapsed, hit = _timed_mask(guide, m.configuration)
            (hit_times if hit else miss_times).append(elapsed)
            assert m.accept_tokens([token]), sql
    stats = guide.cache.stats
    steps = len(hit_times) + len(miss_times)
    print(f"replay: {len(statements)} statements, {steps} steps")
    print(
        f"  hit rate {len(hit_times) / steps:.1%} ({len(hit_times)} hits, {len(miss_times)} misses)"
    )
    for name, times in (("hit", hit_times), ("miss", miss_times)):
        if times:
            print(
                f"  {name}: p50 {_percentile(times, 0.5) * 1e3:.2f} ms, "
                f"p99 {_percentile(times, 0.99) * 1e3:.2f} ms"
            )
    print(
        f"  memory: {stats.entries} entries, {stats.bytes / 1024:.0f} KiB payload, "
        f"{stats.bytes / max(1, stats.entries) / 1024:.1f} KiB per entry"
    )


def warm_slope(guide: gr.Guide, tokenizer, stream_tokens: int) -> None:
    values = ", ".join(str(random.Random(7).randint(0, 999)) for _ in range(stream_tokens // 2))
    sql = f"SELECT name FROM t WHERE id IN ({values});"
    ids = tokenizer.encode(sql, add_special_tokens=False).ids
    for warm in (False, True):
        m = guide.matcher()
        times = []
        for token in ids:
            elapsed, _ = _timed_mask(guide, m.configuration)
            times.append(elapsed)
            m.accept_tokens([token])
        if warm:
            xs = list(range(len(times)))
            slope = statistics.linear_regression(xs, [t * 1e6 for t in times]).slope
            print(
                f"warm replay of {len(ids)} tokens: p50 {_percentile(times, 0.5) * 1e3:.2f} ms, "
                f"p99 {_percentile(times, 0.99) * 1e3:.2f} ms, slope {slope:+.2e} µs/position"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokenizer", default="gpt2")
    parser.add_argument("--statements", type=int, default=200)
    parser.add_argument("--stream", type=int, default=16_000)
    args = parser.parse_args()
    from tokenizers import Tokenizer

    path = assets_root() / "tokenizers" / args.tokenizer / "tokenizer.json"
    tokenizer = Tokenizer.from_file(str(path))
    guide = gr.compile(gr.Grammar.bundled("sqlite"), gr.Vocabulary.from_file(path))
    with open(assets_root() / "data" / "spider" / "train_gold.sql", encoding="utf-8") as f:
        lines = [line.split("\t", 1)[0].strip() for line in f]
    picked = random.Random(3).sample(lines, args.statements)
    statements = [s if s.endswith(";") else s + ";" for s in picked]
    guide.oracle.accepts(b"SELECT 1;")
    print(f"host: {describe()}; tokenizer {args.tokenizer}")
    replay_workload(guide, tokenizer, [s for s in statements if guide.oracle.accepts(s.encode())])
    warm_slope(guide, tokenizer, args.stream)


if __name__ == "__main__":
    main()

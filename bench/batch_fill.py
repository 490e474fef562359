"""The batch fill: `python bench/batch_fill.py [--tokenizer gpt2] [--batches 1,8,32]
[--threads 1,2] [--json]`.

B rows decode the statements of bench/statements.sql (each tokenized by the guide's trie; a
row that ends its statement takes the next one) under the bundled sqlite grammar, a plain
dialect guide. At each step the whole batch's masks are written into one int32 bitmask by
`gridrail.fill_next_token_bitmask(..., threads=T)` — the only thing timed — then every row
accepts its next token (which the mask must allow). Two passes per (B, T), each on a fresh
`Registry` (no cache outlives a pass): **cold** (first masks count) and **warm** (the corpus
replayed untimed first). Reported per step: the fill's p50 / p90 / p99 / mean in µs, and the
mean per row. Threads pay only where rows miss the caches: a miss walks the token trie in the
Rust kernels, which release the GIL; a cached mask is microseconds of Python under the GIL.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

import gridrail as gr

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "bench" / "statements.sql"


def statements() -> list[str]:
    return [line.split("\t")[0] for line in CORPUS.read_text().splitlines() if line.strip()]


def run(vocab: gr.Vocabulary, batch: int, threads: int, warm: bool) -> dict:
    guide = gr.compile(gr.Grammar.bundled("sqlite"), vocab, registry=gr.Registry())
    queue = [[*guide.trie.tokenize(s.encode()), vocab.eos_token_id] for s in statements()]
    if warm:
        for ids in queue:
            matcher = guide.matcher()
            for token in ids:
                matcher.allowed()
                assert matcher.accept_tokens([token])
    queue.reverse()
    rows: list[tuple[gr.Matcher, list[int]] | None] = [None] * batch
    bitmask = gr.allocate_bitmask(batch, vocab.size)
    times, row_steps = [], 0
    while True:
        for i in range(batch):
            if rows[i] is None and queue:
                rows[i] = (guide.matcher(), queue.pop())
        live = [i for i in range(batch) if rows[i] is not None]
        if not live:
            break
        matchers = [rows[i][0] for i in live]  # type: ignore[index]
        started = time.perf_counter_ns()
        gr.fill_next_token_bitmask(matchers, bitmask, live, threads=threads)
        times.append((time.perf_counter_ns() - started) / 1000)
        row_steps += len(live)
        for i in live:
            matcher, ids = rows[i]  # type: ignore[misc]
            token = ids.pop(0)
            assert bitmask[i, token >> 5].view(np.uint32) >> (token & 31) & 1, (i, token)
            assert matcher.accept_tokens([token])
            if not ids:
                rows[i] = None
    times.sort()

    def pct(p: float) -> float:
        return times[min(len(times) - 1, int(p * len(times)))]

    return {
        "batch": batch,
        "threads": threads,
        "pass": "warm" if warm else "cold",
        "steps": len(times),
        "p50_us": pct(0.5),
        "p90_us": pct(0.9),
        "p99_us": pct(0.99),
        "mean_us": statistics.fmean(times),
        "per_row_us": sum(times) / row_steps,
    }


def main() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from host import provenance, report_parser
    from spider_eval import assets_root

    parser = report_parser(__doc__)
    parser.add_argument("--tokenizer", default="gpt2")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--threads", default="1,2")
    args = parser.parse_args()
    started = time.perf_counter()
    vocab = gr.Vocabulary.from_file(
        assets_root() / "tokenizers" / args.tokenizer / "tokenizer.json"
    )
    results = []
    for batch in (int(b) for b in args.batches.split(",")):
        for warm in (False, True):
            for threads in (int(t) for t in args.threads.split(",")):
                results.append(run(vocab, batch, threads, warm))
                if not args.json:
                    r = results[-1]
                    print(
                        f"B={batch:<3} threads={threads} {r['pass']:<4}: steps {r['steps']:>5}, "
                        f"p50 {r['p50_us']:9.1f}  p90 {r['p90_us']:9.1f}  p99 {r['p99_us']:10.1f}"
                        f"  mean {r['mean_us']:9.1f} µs per step, {r['per_row_us']:8.1f} per row",
                        flush=True,
                    )
    if args.json:
        import json

        print(json.dumps({**provenance(started), "tokenizer": args.tokenizer, "runs": results}))
    else:
        print(provenance(started))


if __name__ == "__main__":
    main()

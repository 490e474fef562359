"""What the loop guard would refuse in real SQL: `python bench/loop_guard_gold.py [--json]`.

Every gold query of the Spider training questions is tokenized with gpt2's tokenizer and fed
to `gridrail ask`'s loop guard (`DEFAULT_LOOP_GUARD`) one token at a time; a query counts as
*refused* when the guard would have refused one of its own tokens at that point (had the model
written exactly the gold query). Also counted, for comparison, under other settings: more
copies, shorter blocks, no depth bound, and a guard that refuses the `repeats`-th occurrence
of any n-gram of keys anywhere in the output (as `no_repeat_ngram_size` samplers do).
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

import gridrail as gr
from gridrail.ask import DEFAULT_LOOP_GUARD
from gridrail.decode.repetition import LoopGuard

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host import provenance, report_parser
from spider_eval import assets_root, load_questions


def refuses(guard: LoopGuard, vocab: gr.Vocabulary, ids: list[int]) -> bool:
    """Would `guard` refuse one of `ids` where it comes (everything else allowed)?"""
    followed = guard.follow(vocab)
    everything = np.ones(vocab.size, dtype=bool)
    for token in ids:
        if not followed.narrow(everything)[token]:
            return True
        followed.feed([token])
    return False


def ngram_refuses(vocab: gr.Vocabulary, ids: list[int], n: int, repeats: int) -> bool:
    """Does some n-gram of keys (two distinct keys at least) occur `repeats` times?"""
    keys = [b"".join((vocab.token_bytes(t) or b"").lower().split()) for t in ids]
    keys = [k for k in keys if k]
    seen: Counter[tuple[bytes, ...]] = Counter()
    for i in range(len(keys) - n + 1):
        gram = tuple(keys[i : i + n])
        seen[gram] += 1
        if seen[gram] >= repeats and len(set(gram)) > 1:
            return True
    return False


def main() -> None:
    args = report_parser(__doc__).parse_args()
    started = time.perf_counter()
    tokenizer_file = assets_root() / "tokenizers" / "gpt2" / "tokenizer.json"
    vocab = gr.Vocabulary.from_file(tokenizer_file)
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    queries = [q.gold for q in load_questions(assets_root() / "data" / "spider", "train")]
    encoded = [tokenizer.encode(sql).ids for sql in queries]
    guards = {
        f"default ({DEFAULT_LOOP_GUARD.description})": DEFAULT_LOOP_GUARD,
        "default, no depth bound": replace(DEFAULT_LOOP_GUARD, max_depth=None),
        "default, depth <= 3": replace(DEFAULT_LOOP_GUARD, max_depth=3),
        "default, depth <= 2": replace(DEFAULT_LOOP_GUARD, max_depth=2),
        "blocks of 4+ bytes": replace(DEFAULT_LOOP_GUARD, min_block=4, max_depth=None),
        "blocks of 3+ bytes": replace(DEFAULT_LOOP_GUARD, min_block=3, max_depth=None),
        "3 copies of 3+ bytes": replace(DEFAULT_LOOP_GUARD, repeats=3, min_block=3, max_depth=None),
    }
    refused = {name: sum(refuses(g, vocab, ids) for ids in encoded) for name, g in guards.items()}
    for n in (3, 4, 5, 6):
        refused[f"any {n}-gram 3 times"] = sum(ngram_refuses(vocab, ids, n, 3) for ids in encoded)
    result = {
        **provenance(started),
        "queries": len(queries),
        "refused": refused,
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"{len(queries)} gold queries, gpt2 tokens; {result['seconds']} s on {result['host']}")
    print("| guard | gold queries it would refuse a token of |")
    print("|---|---|")
    for name, count in refused.items():
        print(f"| {name} | {count} ({100 * count / len(queries):.2f}%) |")


if __name__ == "__main__":
    main()

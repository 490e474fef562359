"""Walk-arm statistics: `python bench/walk_arm.py --generations 10000 --seed 2`.

Runs the walk arm of tests/test_walk_arm.py (uniform sampling from exact masks under a budgeted
matcher, small byte-complete SQL vocabulary, budgets from the reserve up to reserve + 40) and
prints how many outputs are sentences, overruns, and how generations stopped.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import test_walk_arm as walk  # the harness lives with the test it serves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--generations", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=2)
    args = parser.parse_args()
    guide = walk._guide("small")
    rng = random.Random(args.seed)
    reserve = len(guide.matcher().completion())
    stops: collections.Counter[str] = collections.Counter()
    lengths, overruns, non_sentences = [], 0, 0
    started = time.time()
    for n in range(args.generations):
        budget = reserve if n % 10 == 0 else rng.randint(reserve, reserve + 40)
        gen = walk.generate(guide, rng, budget)  # an empty mask would raise: a dead end
        overruns += len(gen.tokens) > gen.budget
        text = b"".join(guide.vocab.token_bytes(t) for t in gen.tokens[:-1])
        non_sentences += not guide.oracle.accepts(text)
        stops[gen.stop] += 1
        lengths.append(len(gen.tokens))
    n = args.generations
    print(
        f"generations={n} seed={args.seed} reserve={reserve} sentences={n - non_sentences}/{n} "
        f"overruns={overruns} dead_ends=0 stops={dict(stops)} "
        f"mean_tokens={sum(lengths) / n:.1f} max_tokens={max(lengths)} "
        f"wall={time.time() - started:.0f}s"
    )


if __name__ == "__main__":
    main()

"""Compile time of a grammar by stage: `python bench/compile_time.py [--grammar sqlite] [--runs 5]`.

Each run rebuilds everything in-process with the regex → DFA cache cleared (Unicode category
tables, built once per process, stay warm after the first run). Prints medians and the host.
"""

from __future__ import annotations

import argparse
import statistics
import time

from gridrail.grammar import dfa
from gridrail.grammar.lalr import build_lalr
from gridrail.grammar.model import Grammar
from gridrail.grammar.reduce import reduce_grammar
from gridrail.grammar.scanner import build_scanner
from host import describe


def measure(name: str) -> dict[str, float]:
    dfa.compile_regex.cache_clear()
    t0 = time.perf_counter()
    grammar = Grammar.resolve(name)
    t1 = time.perf_counter()
    reduced = reduce_grammar(grammar)
    t2 = time.perf_counter()
    tables = build_lalr(reduced)
    t3 = time.perf_counter()
    scanner = build_scanner([t for t in reduced.terminals if t.name not in reduced.declared])
    t4 = time.perf_counter()
    return {
        "load (Lark text → model)": t1 - t0,
        "reduce": t2 - t1,
        f"LALR(1) tables ({len(tables.action)} states)": t3 - t2,
        f"union scanner ({scanner.num_states} states)": t4 - t3,
        "total": t4 - t0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--grammar", default="sqlite")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    runs = [measure(args.grammar) for _ in range(args.runs)]
    g = reduce_grammar(Grammar.resolve(args.grammar))
    print(f"grammar {args.grammar}: {len(g.terminals)} terminals, {len(g.productions)} productions")
    print(f"host: {describe()}")
    print(f"median of {args.runs} runs:")
    for stage in runs[-1]:
        values = [r.get(stage, 0.0) for r in runs]
        print(f"  {stage:<40} {statistics.median(values) * 1000:9.1f} ms")


if __name__ == "__main__":
    main()

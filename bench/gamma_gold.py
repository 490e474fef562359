"""Γ against real SQL: which Spider gold queries the role language L holds but L_Γ refuses.

    python bench/gamma_gold.py [--every 1] [--out build/gamma_gold.json]

Every `--every`-th line of Spider's train_gold.sql (`SQL<TAB>db_id`), its layout normalised to
single spaces and its double-quoted strings written in single quotes (the strict generation
profile reads neither), is fed token by token (gpt2) to two guides of its database: the strict
profile without Γ (L) and with it (L_Γ). A statement L holds and L_Γ refuses is either a rule Γ
states (docs/names.md: a name in ON that is bare or not declared yet, NATURAL / USING, ...) or
a completeness defect; a refusal where the mask of the prefix is empty is a dead end (a
soundness defect of the mask). Prints the counts and each refusal with the text Γ accepted.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import gridrail as gr

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from assets import assets_root  # noqa: E402
from test_gamma import normalised_gold, refusal  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host import describe  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--every", type=int, default=1, help="take every N-th gold line")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "gamma_gold.json")
    args = parser.parse_args(argv)
    spider = assets_root() / "data" / "spider"
    vocab = gr.Vocabulary.from_file(assets_root() / "tokenizers" / "gpt2" / "tokenizer.json")
    grammar = gr.Grammar.bundled("sqlite")
    guides: dict[tuple[str, bool], gr.Guide] = {}

    def guide(db: str, gamma: bool) -> gr.Guide:
        if (db, gamma) not in guides:
            schema = gr.Schema.from_sqlite(spider / "database" / db / f"{db}.sqlite")
            guides[db, gamma] = gr.compile(
                grammar, vocab, schema=schema, profile=gr.GenerationProfile(), gamma=gamma
            )
        return guides[db, gamma]

    counts: collections.Counter[str] = collections.Counter()
    refused = []
    started = time.time()
    lines = (spider / "train_gold.sql").read_text(encoding="utf-8").splitlines()
    seen = set()
    for line in lines[:: args.every]:
        text, db = line.split("\t")
        sql = normalised_gold(text)
        if (sql, db) in seen or not (spider / "database" / db / f"{db}.sqlite").is_file():
            continue
        seen.add((sql, db))
        counts["statements"] += 1
        if refusal(guide(db, False), sql) is not None:
            counts["not in L"] += 1
            continue
        counts["in L"] += 1
        found = refusal(guide(db, True), sql)
        if found is None:
            counts["in L_Γ"] += 1
            continue
        accepted, dead_end = found
        counts["dead end" if dead_end else "refused by Γ"] += 1
        refused.append({"db": db, "sql": sql, "accepted": accepted, "dead_end": dead_end})
    seconds = time.time() - started
    print(f"host: {describe()}; {seconds:.0f} s")
    print(json.dumps(counts))
    for r in refused:
        print(f"{'DEAD END' if r['dead_end'] else 'refused'} ({r['db']}): {r['sql']}")
        print(f"    accepted: {r['accepted']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"counts": counts, "refused": refused}, indent=1))


if __name__ == "__main__":
    main()

"""Which prompt makes the default model write SQL that runs and is right? (issue 13, item 1)

    python bench/prompt_variants.py --sample 60 --seed 1 --max-tokens 96 [--runtime llama-cpp]

Each variant is the chat of `gridrail.prompt.question_messages` over the database's full schema
(no policy), with or without sample rows per table, and the assistant's turn left empty (the
model starts in prose) or opened with text the answer starts with. Decoding is unconstrained
and greedy (the prompt is judged on its own, before any mask), `--max-tokens` tokens at most;
the SQL is taken as bench/spider_eval.py's unconstrained arm takes it (`extract_sql` over the
opened text plus the output). Questions: Spider *training* questions sampled with `--seed`
(tuning only ever looks at training data), whose gold query executes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gridrail.ask import sample_rows
from gridrail.database import Database
from gridrail.models import load_model
from gridrail.policy.schema import Schema
from gridrail.policy.view import SchemaView
from gridrail.prompt import ANSWER_PREFIX, question_messages
from spider_eval import (
    assets_root,
    database_path,
    execute,
    extract_sql,
    has_top_level_order_by,
    load_questions,
    results_match,
    sample_questions,
)

# name → (rows per table in the prompt, text the assistant's turn is opened with)
VARIANTS = {
    "prose (no opening)": (0, ""),
    "sql fence": (0, ANSWER_PREFIX),
    "sql fence + 3 rows": (3, ANSWER_PREFIX),
    "sql fence + SELECT": (0, ANSWER_PREFIX + "SELECT"),
    "sql fence + 3 rows + SELECT": (3, ANSWER_PREFIX + "SELECT"),
}


def greedy(model, prompt: list[int], max_tokens: int) -> tuple[str, bool]:
    eos = set(model.vocab.eos_token_ids)
    next_logits = model.next_logits(prompt)
    tokens: list[int] = []
    while len(tokens) < max_tokens:
        logits = next_logits(tokens)
        token = int(np.argmax(np.asarray(logits, dtype=np.float64).reshape(-1)))
        tokens.append(token)
        if token in eos:
            break
    text = b"".join(model.vocab.token_bytes(t) or b"" for t in tokens if t not in eos)
    return text.decode("utf-8", "replace"), bool(tokens) and tokens[-1] in eos


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--runtime", default="auto")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS))
    args = parser.parse_args(argv)
    spider = assets_root() / "data" / "spider"
    questions, _ = sample_questions(
        load_questions(spider, "train"),
        args.sample,
        args.seed,
        lambda db: database_path(spider, db).is_file(),
    )
    model = load_model(None, runtime=args.runtime)
    views: dict[str, tuple[SchemaView, Database]] = {}
    print(
        f"| variant | executes | EX | truncated | s/question | (n={len(questions)}, "
        f"seed {args.seed}, --max-tokens {args.max_tokens}) |"
    )
    print("|---|---|---|---|---|---|")
    for name in args.variants:
        rows, opening = VARIANTS[name]
        runs = right = truncated = scored = 0
        started = time.perf_counter()
        for q in questions:
            path = database_path(spider, q.db_id)
            if q.db_id not in views:
                views[q.db_id] = (
                    SchemaView(Schema.from_sqlite(path), None),
                    Database.open(str(path)),
                )
            view, database = views[q.db_id]
            gold = execute(path, q.gold)
            if not gold.ok:
                continue
            scored += 1
            samples = sample_rows(database, view, rows) if rows else None
            prompt = model.prompt_ids(question_messages(view, q.question, samples), prefix=opening)
            text, stopped = greedy(model, prompt, args.max_tokens)
            truncated += not stopped
            got = execute(path, extract_sql(opening + text))
            runs += got.ok
            right += got.ok and results_match(gold.rows, got.rows, has_top_level_order_by(q.gold))
        seconds = (time.perf_counter() - started) / max(scored, 1)
        print(
            f"| {name} | {100 * runs / scored:.1f}% | {100 * right / scored:.1f}% | "
            f"{100 * truncated / scored:.1f}% | {seconds:.2f} | |",
            flush=True,
        )


if __name__ == "__main__":
    main()

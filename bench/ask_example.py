"""`gridrail ask` on the bundled HR example, per role: constrained vs unconstrained.

    python bench/ask_example.py [--questions bench/hr_questions.json] [--max-tokens 128] \
        [--out build/ask_example.jsonl] [--runtime auto|transformers|llama-cpp]

The questions (bench/hr_questions.json) are asked as the roles of examples/hr_policy.toml over
examples/hr.sqlite, with the default model and the same prompt for every arm
(`gridrail.ask.question_prompt` over what the role sees: the answer opened with the ```sql
fence). Arms: unconstrained greedy (with `ask`'s loop guard, as every arm); constrained (the
first, greedy generation of `gridrail ask`); and `gridrail ask` with its defaults (column
"constrained+candidates": the strict generation profile, K candidates for a role that only
reads, chosen by running them read-only, one generation for a role that may write, the
checker-guided retry). Metrics are those of
bench/spider_eval.py, with two differences: names are judged against the *role's* view (a
table or column the role may not see counts as a bad name, as in tests/test_policy_walk.py),
and a question without a gold query (the writes, and questions the role must not be able to
answer) is not scored for execution accuracy. Statements run read-only, so writes do not
"execute" here; `gridrail ask --execute` runs them for roles that may write.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from gridrail.models import RUNTIMES, load_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host import describe
from spider_eval import (
    Execution,
    Judge,
    _answer_fields,
    _generation_fields,
    execute,
    extract_sql,
    failure_notes,
    has_top_level_order_by,
    markdown_table,
    summarize,
    unconstrained,
)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def visible_schema(view):
    """The role's view as a Schema of its own (names are judged against what the role sees)."""
    import gridrail as gr

    tables = {t.name: [c.name for c in view.columns(t)] for t in view.tables}
    return gr.Schema.from_tables(view.schema.dialect, tables)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=Path, default=ROOT / "bench" / "hr_questions.json")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "ask_example.jsonl")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--runtime", choices=RUNTIMES, default="auto", help="of load_model")
    args = parser.parse_args(argv)

    import torch

    import gridrail as gr
    from gridrail.ask import DEFAULT_CANDIDATES, DEFAULT_LOOP_GUARD, ask, question_prompt
    from gridrail.database import Database
    from gridrail.prompt import ANSWER_PREFIX
    from gridrail.registry import shared_compiled_grammar

    torch.set_num_threads(args.threads)
    print(f"host: {describe()}", flush=True)
    model = load_model(runtime=args.runtime)
    grammar = gr.Grammar.bundled("sqlite")
    dialect = shared_compiled_grammar(grammar)
    db = EXAMPLES / "hr.sqlite"
    database = Database("sqlite", str(db))
    schema = gr.Schema.from_sqlite(db)
    policy = gr.Policy.from_file(EXAMPLES / "hr_policy.toml")
    questions = json.loads(args.questions.read_text())
    rows = []
    started = time.time()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as out:
        for n, q in enumerate(questions, 1):
            guide = gr.compile(
                grammar, model.vocab, schema=schema, policy=policy, role=q["role"],
                profile=gr.GenerationProfile(),
            )  # fmt: skip
            gold = execute(db, q["gold"]) if q["gold"] else Execution(None, "no gold query")
            ordered = bool(q["gold"]) and has_top_level_order_by(q["gold"])
            judge = Judge(guide, dialect, visible_schema(guide.view), db, gold, ordered)
            row = {"kind": "question", "index": n, **q, "arms": {}}
            t = time.perf_counter()
            prompt = question_prompt(model, guide, q["question"])
            free = unconstrained(model, prompt, args.max_tokens, DEFAULT_LOOP_GUARD)
            free["seconds"] = time.perf_counter() - t
            sql = extract_sql(ANSWER_PREFIX + free["text"])  # the answer begins inside the fence
            row["arms"]["unconstrained"] = {**free, **judge.score(sql)}
            # `gridrail ask`'s defaults: K candidates for a role that only reads (each run
            # read-only to choose), one generation for a role that may write
            writes = bool(guide.view.role.statements - {"select"})
            k = 1 if writes else DEFAULT_CANDIDATES
            t = time.perf_counter()
            answer = ask(
                q["question"], guide, model, max_tokens=args.max_tokens, candidates=k,
                database=database, run=not writes,
            )  # fmt: skip
            seconds = time.perf_counter() - t
            first = answer.candidates[0].attempt
            row["arms"]["constrained"] = {
                **_generation_fields([first], 0),
                "seconds": first.generation.guard_seconds + first.generation.model_seconds,
                **judge.score(first.sql),
            }
            row["arms"]["constrained+candidates"] = {
                **_answer_fields(answer),
                "candidates": k,
                "seconds": seconds,
                **judge.score(answer.sql),
            }
            out.write(json.dumps(row, default=str) + "\n")
            out.flush()
            rows.append(row)
            arms = row["arms"]
            print(
                f"[{n}/{len(questions)}] {q['role']}: {q['question']}\n"
                + "".join(f"    {a}: {arms[a]['sql']!r}\n" for a in arms)
                + f"    ({time.time() - started:.0f} s)",
                flush=True,
            )
    print(f"\n{len(rows)} questions in {(time.time() - started) / 60:.1f} min\n")
    print(markdown_table(summarize(rows)))
    for line in failure_notes(rows):
        print(line)


if __name__ == "__main__":
    main()

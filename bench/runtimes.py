"""The two runtimes of the GRID-owned loop on the default GGUF model: speed and agreement.

    python bench/runtimes.py [--questions 5] [--tokens 48] [--threads N]

For each runtime (transformers: the GGUF de-quantized to float32 by the `gguf` package, run by
torch; llama-cpp: llama.cpp's quantized kernels): the load time; seconds per model call over
`--tokens` unconstrained greedy steps; seconds for the demo question (`make demo`'s: `ask` as
the analyst of the HR example, default settings, greedy). Then, on the first `--questions`
questions of bench/hr_questions.json (same prompt: `gridrail.ask.question_prompt`), whether the
runtimes choose the same greedy tokens — unconstrained and under the role's mask — and, where
they part, the step and transformers' margin between its top two logits there (a near-tie that
de-quantization rounding can flip).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from host import describe
from support.hr_example import hr_guide

ROOT = Path(__file__).resolve().parent.parent
DEMO_QUESTION = "How many employees are in each department?"


def as_numpy(logits) -> np.ndarray:
    return logits.detach().float().numpy() if hasattr(logits, "detach") else np.asarray(logits)


def greedy(model, prompt: list[int], steps: int) -> tuple[list[int], list[float], list[float]]:
    """Unconstrained greedy tokens, seconds per call, and the top-two margin at each step."""
    run = model.next_logits(prompt)
    tokens: list[int] = []
    seconds, margins = [], []
    for _ in range(steps):
        started = time.perf_counter()
        logits = as_numpy(run(tokens))[: model.vocab.size]
        seconds.append(time.perf_counter() - started)
        top = np.argsort(logits)[-2:]
        margins.append(float(logits[top[1]] - logits[top[0]]))
        tokens.append(int(top[1]))
        if tokens[-1] in model.vocab.eos_token_ids:
            break
    return tokens, seconds, margins


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: as is)")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "runtimes.json")
    args = parser.parse_args(argv)

    import torch

    from gridrail import GenerationProfile
    from gridrail.ask import ask, question_prompt
    from gridrail.decode import generate
    from gridrail.models import RUNTIMES, load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    questions = json.loads((ROOT / "bench" / "hr_questions.json").read_text())[: args.questions]
    report: dict[str, object] = {
        "host": describe(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "torch_threads": torch.get_num_threads(),
    }
    models, outputs = {}, {}
    for runtime in (r for r in RUNTIMES if r != "auto"):  # each runtime, by name
        started = time.perf_counter()
        model = models[runtime] = load_model(runtime=runtime)
        loaded = time.perf_counter() - started
        guide = hr_guide(model.vocab, "analyst", GenerationProfile())
        prompt = question_prompt(model, guide, DEMO_QUESTION)
        greedy(model, prompt, 4)  # warm-up
        _, seconds, _ = greedy(model, prompt, args.tokens)
        started = time.perf_counter()
        answer = ask(DEMO_QUESTION, guide, model)
        asked = time.perf_counter() - started
        generations = [a.generation for a in answer.attempts]
        report[runtime] = {
            "load_s": round(loaded, 2),
            "prompt_tokens": len(prompt),
            "s_per_call_median": round(float(np.median(seconds)), 4),
            "s_per_call_mean": round(float(np.mean(seconds)), 4),
            "demo_question_s": round(asked, 2),
            "demo_attempts": len(generations),
            "demo_tokens": sum(len(g.tokens) for g in generations),
            "demo_model_calls": sum(g.model_calls for g in generations),
            "demo_model_s": round(sum(g.model_seconds for g in generations), 2),
            "demo_guard_s": round(sum(g.guard_seconds for g in generations), 2),
            "demo_sql": answer.sql,
        }
        print(runtime, json.dumps(report[runtime]), flush=True)
        outputs[runtime] = []
        for q in questions:
            g = hr_guide(model.vocab, q["role"], GenerationProfile())
            p = question_prompt(model, g, q["question"])
            free, _, margins = greedy(model, p, args.tokens)
            masked = generate(g, model.next_logits(p), max_tokens=args.tokens)
            outputs[runtime].append((p, free, margins, masked.tokens))
    agreement = []
    for q, hf, ll in zip(questions, outputs["transformers"], outputs["llama-cpp"], strict=True):
        assert hf[0] == ll[0], "the runtimes must start from the same prompt ids"
        free_at = first_difference(hf[1], ll[1])
        masked_at = first_difference(hf[3], ll[3])
        margin = round(hf[2][free_at], 4) if free_at is not None and free_at < len(hf[2]) else None
        agreement.append(
            {
                "question": q["question"],
                "role": q["role"],
                "unconstrained_first_difference": free_at,
                "transformers_top2_margin_there": margin,
                "constrained_first_difference": masked_at,
                "constrained_same": masked_at is None,
                "tokens": len(hf[1]),
            }
        )
        print(json.dumps(agreement[-1]), flush=True)
    report["agreement"] = agreement
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

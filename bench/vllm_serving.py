"""gridrail inside vLLM on a GPU (issue 18 item 5): `python bench/vllm_serving.py --model M
--specs FILE [--batches 1,8,32] [--arms unconstrained,gridrail,xgrammar,guidance]
[--max-tokens 128] [--dry-run] [--json]`.

Each arm runs on its own engine (vLLM runs one structured-output backend per engine):

  * unconstrained: no structured output;
  * gridrail: each request names a spec of FILE (`gridrail:NAME`), the specs in turn, so a
    batch mixes roles;
  * xgrammar, guidance: vLLM's own backends over the bundled dialect's Lark grammar (the whole
    SQLite language: those backends have no roles and no schema).

For each batch size B: B requests (the HR example's questions in turn), timed twice: with
`--max-tokens` (output tokens per second and per request, the time per output token and its
overhead against the unconstrained arm) and with one token (the time to the first token).
Then, on the gridrail arm, a cold role entering a warm batch: 32 requests of the first spec and
one of the last spec, never named before (its guide compiles while the batch runs), timed to
the first token against 33 warm requests.

`--dry-run` runs everything but the engines' forward pass: arguments, the specs, the requests
of every arm (vLLM's own `SamplingParams` where vLLM imports), the backend each engine would
get, and the tables, from a stand-in engine that "generates" each request's token budget in
no time — so the script is known to work before it meets a GPU (tests/test_engine_scripts.py
runs it, in gridrail's environment and in vLLM's). Its numbers are not measurements and are
marked so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))

from gridrail.integrations.specs import PREFIX, SpecError, SpecRegistry  # noqa: E402

ARMS = ("unconstrained", "gridrail", "xgrammar", "guidance")
QUESTIONS = (
    "How many orders are there?",
    "How many employees are in each department?",
    "Which employee placed the largest order?",
    "List the names of employees in sales.",
)
COLD_BATCH = 32


@dataclass
class Request:
    prompt: str
    max_tokens: int
    grammar: str | None  # the structured-output grammar text, None for none


@dataclass
class Timing:
    seconds: float
    output_tokens: int


def requests(arm: str, batch: int, max_tokens: int, specs: list[str], lark: str) -> list[Request]:
    """`batch` requests of `arm`: the questions in turn, as prompts that open a SQL answer;
    on the gridrail arm the specs in turn (a batch of several roles)."""
    out = []
    for n in range(batch):
        prompt = f"-- SQLite. {QUESTIONS[n % len(QUESTIONS)]}\n"
        grammar = {
            "unconstrained": None,
            "gridrail": f"{PREFIX}{specs[n % len(specs)]}" if specs else None,
            "xgrammar": lark,
            "guidance": lark,
        }[arm]
        out.append(Request(prompt, max_tokens, grammar))
    return out


def backend_of(arm: str) -> str | None:
    """The engine's `structured_outputs_config.backend` for `arm` (None: not configured)."""
    return {"unconstrained": None, "gridrail": "auto", "xgrammar": "xgrammar",
            "guidance": "guidance"}[arm]  # fmt: skip


def sampling_params(request: Request):
    """vLLM's `SamplingParams` for `request` (greedy), or a plain description without vLLM."""
    try:
        from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    except ImportError:
        return {"max_tokens": request.max_tokens, "temperature": 0.0, "grammar": request.grammar}
    structured = None
    if request.grammar is not None:
        structured = StructuredOutputsParams(grammar=request.grammar)
    return SamplingParams(
        max_tokens=request.max_tokens, temperature=0.0, structured_outputs=structured
    )


class DryEngine:
    """No model: each request 'generates' its whole budget at once (the `--dry-run`)."""

    def __init__(self, arm: str) -> None:
        self.arm = arm

    def generate(self, batch: list[Request]) -> Timing:
        params = [sampling_params(r) for r in batch]  # built as the real run builds them
        return Timing(0.0, sum(r.max_tokens for r in batch) if params else 0)


class VllmEngine:
    """One vLLM engine for one arm (`LLM`), with the specs in its environment."""

    def __init__(self, arm: str, model: str) -> None:
        from vllm import LLM
        from vllm.config import StructuredOutputsConfig

        backend = backend_of(arm)
        options = {}
        if backend is not None:
            options["structured_outputs_config"] = StructuredOutputsConfig(backend=backend)
        self.llm = LLM(model=model, seed=0, **options)

    def generate(self, batch: list[Request]) -> Timing:
        params = [sampling_params(r) for r in batch]
        started = time.perf_counter()
        outputs = self.llm.generate([r.prompt for r in batch], params, use_tqdm=False)
        seconds = time.perf_counter() - started
        return Timing(seconds, sum(len(o.outputs[0].token_ids) for o in outputs))


def run_arm(engine, arm: str, batches: list[int], max_tokens: int, specs: list[str], lark: str):
    rows = []
    warm = specs[:-1] or specs  # the last spec stays cold for the cold-role run
    engine.generate(requests(arm, 1, 8, warm, lark))  # engine and first guides warmed
    for batch in batches:
        full = engine.generate(requests(arm, batch, max_tokens, warm, lark))
        first = engine.generate(requests(arm, batch, 1, warm, lark))
        rows.append(
            {
                "arm": arm,
                "batch": batch,
                "output_tokens": full.output_tokens,
                "seconds": round(full.seconds, 4),
                "tokens_per_s": round(full.output_tokens / full.seconds, 1)
                if full.seconds
                else None,
                "ms_per_output_token": round(1000 * full.seconds * batch / full.output_tokens, 3)
                if full.output_tokens
                else None,
                "ttft_ms": round(1000 * first.seconds, 1),
            }
        )
    cold = None
    if arm == "gridrail" and len(specs) > 1:
        warm_batch = requests(arm, COLD_BATCH + 1, 1, specs[:1], lark)
        cold_request = Request(warm_batch[0].prompt, 1, f"{PREFIX}{specs[-1]}")
        with_cold = [*requests(arm, COLD_BATCH, 1, specs[:1], lark), cold_request]
        all_warm = engine.generate(warm_batch)
        entering = engine.generate(with_cold)
        cold = {
            "cold_spec": specs[-1],
            "ttft_ms_33_warm": round(1000 * all_warm.seconds, 1),
            "ttft_ms_32_warm_1_cold": round(1000 * entering.seconds, 1),
        }
    return rows, cold


def _without_option(argv: list[str], option: str) -> list[str]:
    """`argv` without `option` and its value (`--arms x` or `--arms=x`)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(option + "="):
            out.append(arg)
    return out


def main() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from host import provenance, report_parser

    parser = report_parser(__doc__)
    parser.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct")
    parser.add_argument("--specs", required=True, metavar="FILE", help="the specs (TOML)")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--dry-run", action="store_true", help="no forward pass (see above)")
    args = parser.parse_args()
    arms = args.arms.split(",")
    unknown = set(arms) - set(ARMS)
    if unknown:
        parser.error(f"unknown arm(s) {', '.join(sorted(unknown))}; choose among {ARMS}")
    try:
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        parser.error(f"--batches is a list of sizes, such as 1,8,32, not {args.batches!r}")
    if any(b < 1 for b in batches):
        parser.error("batch sizes are positive")
    started = time.perf_counter()
    try:
        specs = sorted(SpecRegistry.from_file(args.specs).specs)
    except SpecError as exc:  # a bad file stops here, before any engine starts
        sys.exit(f"vllm_serving: {exc}")
    os.environ["GRIDRAIL_SPECS"] = str(Path(args.specs).resolve())  # the engines read it
    lark = (ROOT / "python" / "gridrail" / "grammars" / "sqlite.lark").read_text()
    rows, colds = [], []
    if len(arms) == 1:
        engine = DryEngine(arms[0]) if args.dry_run else VllmEngine(arms[0], args.model)
        rows, cold = run_arm(engine, arms[0], batches, args.max_tokens, specs, lark)
        colds = [cold] if cold is not None else []
    else:  # an engine holds its GPU memory until its process ends: one process per arm
        for arm in arms:
            argv = [a for a in sys.argv[1:] if a != "--json"]
            argv = [*_without_option(argv, "--arms"), "--arms", arm, "--json"]
            done = subprocess.run(
                [sys.executable, __file__, *argv], capture_output=True, text=True, check=False
            )
            if done.returncode != 0:
                sys.exit(f"the {arm} arm failed:\n{done.stderr[-4000:]}")
            child = json.loads(done.stdout.splitlines()[-1])
            rows += child["rows"]
            colds += child["cold_role"]
    base = {r["batch"]: r["ms_per_output_token"] for r in rows if r["arm"] == "unconstrained"}
    for row in rows:
        if base.get(row["batch"]) is not None and row["ms_per_output_token"] is not None:
            row["overhead_ms_per_token"] = round(row["ms_per_output_token"] - base[row["batch"]], 3)
    report = {
        **provenance(started),
        "dry_run": args.dry_run,
        "model": args.model,
        "rows": rows,
        "cold_role": colds,
    }
    if args.json:
        print(json.dumps(report))
        return
    if args.dry_run:
        print("DRY RUN: no forward pass; these numbers are not measurements")
    print("| arm | batch | output tokens | tokens/s | ms / output token | overhead | TTFT ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['arm']} | {r['batch']} | {r['output_tokens']} | {r['tokens_per_s']} | "
            f"{r['ms_per_output_token']} | {r.get('overhead_ms_per_token', '—')} | "
            f"{r['ttft_ms']} |"
        )
    for c in colds:
        print(
            f"cold role {c['cold_spec']}: TTFT {c['ttft_ms_32_warm_1_cold']} ms entering 32 "
            f"warm requests, against {c['ttft_ms_33_warm']} ms for 33 warm"
        )


if __name__ == "__main__":
    main()

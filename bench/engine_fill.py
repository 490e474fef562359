"""Masks for a batch inside the serving engines, on the CPU (issue 18 item 2):
`python bench/engine_fill.py [--batches 1,8,32] [--steps 40] [--json]`, run with the Python of
`make check-vllm` / `make check-sglang` (build/venv-vllm, build/venv-sglang): the arms of the
engine that imports there are measured.

B requests of the HR example's roles in turn decode side by side (each step every request
takes the first allowed token of its mask, the same tokens in every arm), and the time to fill
the batch's masks at each step is measured:

  * `gridrail`: `gridrail.fill_next_token_bitmask`, the batch in one call;
  * `vllm`: vLLM's own `StructuredOutputManager.grammar_bitmask` over gridrail's grammars —
    vLLM asks each grammar for its row in turn (no hook lets a backend fill the batch);
  * `sglang`: SGLang's `fill_vocab_mask_batched` on gridrail's grammar objects (which hands the
    batch to `fill_next_token_bitmask`).

Reported per arm and B: µs per batch fill and per row, median over the steps, with warm caches
(the same decode is run once before the arms, so no arm pays the first walks for another).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

ROLES = ("analyst", "clerk", "manager", "auditor")


def specs_file(directory: Path) -> Path:
    examples = ROOT / "examples"
    path = directory / "specs.toml"
    path.write_text(
        "".join(
            f'[specs.{role}]\ndb = "{examples / "hr.sqlite"}"\n'
            f'policy = "{examples / "hr_policy.toml"}"\nrole = "{role}"\n\n'
            for role in ROLES
        ),
        encoding="utf-8",
    )
    return path


def tokenizer():
    from transformers import PreTrainedTokenizerFast

    from assets import asset

    return PreTrainedTokenizerFast(
        tokenizer_file=str(asset("tokenizers", "gpt2", "tokenizer.json")),
        eos_token="<|endoftext|>",
    )


def decode(matchers, fill, steps: int) -> list[float]:
    """`steps` steps of the batch: fill (timed), then each live matcher takes its first
    allowed token (EOS last: the statements run on)."""
    times = []
    for _ in range(steps):
        live = [m for m in matchers if not m.is_terminated()]
        if not live:
            break
        started = time.perf_counter()
        fill()
        times.append(time.perf_counter() - started)
        for m in live:
            allowed = m.allowed().ids()
            eos = m.guide.vocab.eos_token_ids
            token = next((t for t in allowed if t not in eos), allowed[0])
            assert m.accept_tokens([token])
    return times


def arm_gridrail(specs, vocab, batch: int, steps: int) -> list[float]:
    import gridrail as gr
    from gridrail.mask.bitmask import allocate_bitmask

    matchers = [
        specs.guide(specs.spec(f"gridrail:{ROLES[n % len(ROLES)]}"), vocab).matcher()
        for n in range(batch)
    ]
    bitmask = allocate_bitmask(batch, vocab.size)
    return decode(matchers, lambda: gr.fill_next_token_bitmask(matchers, bitmask), steps)


def arm_vllm(specs, vocab, batch: int, steps: int) -> list[float]:
    from vllm.config import StructuredOutputsConfig
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    from gridrail.integrations.vllm import GridrailBackend

    config = SimpleNamespace(  # the fields the manager reads (VllmConfig needs an accelerator)
        model_config=SimpleNamespace(
            skip_tokenizer_init=True, is_diffusion=False, get_vocab_size=lambda: vocab.size
        ),
        parallel_config=SimpleNamespace(distributed_executor_backend="mp"),
        scheduler_config=SimpleNamespace(max_num_seqs=max(batch, 1)),
        structured_outputs_config=StructuredOutputsConfig(),
        num_speculative_tokens=0,
    )
    manager = StructuredOutputManager(config)
    manager.backend = GridrailBackend(
        config, tokenizer=tokenizer(), vocab_size=vocab.size, specs=specs
    )
    grammars = [
        manager.backend.compile_grammar(
            StructuredOutputOptions.GRAMMAR, f"gridrail:{ROLES[n % len(ROLES)]}"
        )
        for n in range(batch)
    ]
    requests = {}
    for n, grammar in enumerate(grammars):
        params = SamplingParams(
            structured_outputs=StructuredOutputsParams(grammar=f"gridrail:{ROLES[n % len(ROLES)]}")
        )
        params.structured_outputs._backend = "gridrail"
        request = Request(str(n), [1], params, None)
        request.structured_output_request.grammar = grammar
        requests[str(n)] = request
    ids = list(requests)

    def fill() -> None:
        live = [i for i in ids if not requests[i].structured_output_request.grammar.is_terminated()]
        manager.grammar_bitmask(requests, live, {})

    return decode([g.matcher for g in grammars], fill, steps)


def arm_sglang(specs, vocab, batch: int, steps: int) -> list[float]:
    from sglang.srt.constrained.base_grammar_backend import GrammarRow

    from gridrail.integrations.sglang import GridrailBackend, GridrailGrammar

    backend = GridrailBackend(tokenizer(), vocab.size, set(vocab.eos_token_ids), specs=specs)
    grammars = [backend.dispatch_ebnf(f"gridrail:{ROLES[n % len(ROLES)]}") for n in range(batch)]
    mask = grammars[0].allocate_vocab_mask(vocab.size, batch, "cpu")

    def fill() -> None:
        rows = [GrammarRow(n, g) for n, g in enumerate(grammars) if not g.is_terminated()]
        GridrailGrammar.fill_vocab_mask_batched(rows, mask)

    return decode([g.matcher for g in grammars], fill, steps)


def main() -> None:
    from host import provenance, report_parser

    parser = report_parser(__doc__)
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    started = time.perf_counter()
    import gridrail as gr
    from gridrail.integrations.specs import SpecRegistry

    arms = {"gridrail": arm_gridrail}
    for name, module, arm in (("vllm", "vllm", arm_vllm), ("sglang", "sglang", arm_sglang)):
        try:
            __import__(module)
            arms[name] = arm
        except ImportError:
            pass
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        specs = SpecRegistry.from_file(specs_file(Path(tmp)))
        vocab = gr.Vocabulary.from_hf(tokenizer(), size=50_304)
        for batch in (int(b) for b in args.batches.split(",")):
            arm_gridrail(specs, vocab, batch, args.steps)  # every arm then meets warm caches
            for name, arm in arms.items():
                times = arm(specs, vocab, batch, args.steps)
                rows.append(
                    {
                        "arm": name,
                        "batch": batch,
                        "steps": len(times),
                        "fill_us": round(1e6 * statistics.median(times), 1),
                        "us_per_row": round(1e6 * statistics.median(times) / batch, 1),
                    }
                )
    report = {**provenance(started), "rows": rows}
    if args.json:
        print(json.dumps(report))
        return
    print("| arm | batch | steps | fill µs (median) | µs / row |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['arm']} | {r['batch']} | {r['steps']} | {r['fill_us']} | {r['us_per_row']} |")


if __name__ == "__main__":
    main()

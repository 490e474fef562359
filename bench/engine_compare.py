r"""Engine comparison: gridrail vs llguidance vs XGrammar vs grid-guardrail, full next-token mask
at each replay step.

    python bench/engine_compare.py [--tokenizers gpt2 qwen2] [--engines ...] [--limit N]

Every engine gets the same Lark file (default: the bundled sqlite.lark), the same tokenizer.json
and the same replays: each statement of the corpus (bench/statements.sql: one per line, anything
after a tab is provenance) is tokenized with the `tokenizers` library (no special tokens); at
each step the engine fills the full next-token bitmask (the only thing timed, perf_counter_ns),
the replayed token must be allowed by that mask, then the engine accepts it; after the last
token the mask must allow EOS and the engine must accept EOS. The first token that the mask
does not allow (or that the engine then refuses) ends the replay as rejected for that engine.

Single thread: before any engine is imported the process pins itself to one CPU
(sched_setaffinity; rayon and OpenMP size their pools from the affinity mask) and sets
RAYON_NUM_THREADS / OMP_NUM_THREADS to 1; only single-matcher APIs are used (no llguidance
LLExecutor, no XGrammar BatchGrammarMatcher, no grid-guardrail prefetch pool), and XGrammar's
compiler gets max_threads=1.

Compile time is the grammar build against an already loaded tokenizer: gridrail
`compile(Grammar.from_file(...), vocab)` (grammar model, LALR tables, scanner, token trie);
llguidance `LLMatcher.grammar_from_lark` + `LLMatcher(...)` (it builds lexer states lazily, during
the first masks); XGrammar `Grammar.from_lark` + `GrammarCompiler.compile_grammar` (including its
token-mask cache; compiler cache off); grid-guardrail `grid.generate.build_guide` on the `.grid`
translation of the Lark file (its grammar load, LALR tables, scanner, token trie, completion
reserve table and mask producer with the grid_core kernel) plus its first `GridGrammarSession`
(which uploads the token-bytes table to the kernel). The translation itself
(bench/grid_guardrail_grammar.py, ~50 ms) is not timed: a grid user would ship the `.grid` file.
Tokenizer setup (gridrail Vocabulary, llguidance LLTokenizer, XGrammar TokenizerInfo, grid
HFTokenizerAdapter; the last three from one shared PreTrainedTokenizerFast) is reported
separately.

The timed fill per engine: gridrail `Matcher.fill_bitmask`, llguidance
`llguidance.numpy.fill_next_token_bitmask`, XGrammar `GrammarMatcher.fill_next_token_bitmask`,
grid-guardrail `GridGrammarSession.fill_bitmask` (its vLLM-backend session: fill and accept run
in the grid_core kernel; a configuration met for the first time is walked there, inside the
fill). Every one writes the (1, W) int32 bitmask in place; grid writes it through a uint32 view
of the same memory, so no conversion is timed.

Passes (`--passes`, each on a freshly loaded engine; gridrail gets its own `Registry`, so no
cache outlives its pass; an engine is released once its pass is timed and the cyclic collector
run before the next one loads, so no pass collects another engine's objects): **cold** times
every statement with no warm-up (first masks count); **held-out** replays the even-numbered
statements untimed, then times the odd-numbered ones — a cache warmed by earlier traffic
meeting queries it has not seen, the realistic serving figure (issue 16); **warm** replays
every statement untimed, then times them all again.

llguidance, XGrammar and grid-guardrail are benchmark-only dependencies: `pip install llguidance
xgrammar grid-guardrail`. grid-guardrail reads no Lark: bench/grid_guardrail_grammar.py translates
the file into its `.grid` BNF (same productions, terminal languages and ignored terminals; its
docstring lists what cannot be translated and where grid's lexing differs).
None of them reads what only gridrail's Lark dialect has — terminal priorities (`RESERVED_WORD.1`)
and whole-lexeme exclusions (`(?!(?i:cast|raise)\Z)`, a difference of automata, no lookahead) —
so `--portable` gives every engine, gridrail included, the grammar without them: the same file
and the same language for all (a few reserved words become names again).
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np

from host import describe

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_GRAMMAR = REPO_ROOT / "python" / "gridrail" / "grammars" / "sqlite.lark"
DEFAULT_CORPUS = REPO_ROOT / "bench" / "statements.sql"
PACKAGES = (
    "gridrail",
    "llguidance",
    "xgrammar",
    "grid-guardrail",
    "grid_core",
    "torch",
    "tokenizers",
    "transformers",
    "numpy",
)


def pin_to_one_cpu() -> int:
    """Run this process (and every thread it starts) on one CPU; returns that CPU."""
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["OMP_NUM_THREADS"] = "1"
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return cpu


# ----- tokenizers and engines ------------------------------------------------------------------


@dataclass
class Tokenizer:
    """One tokenizer.json as every engine sees it (EOS ids by gridrail's end-of-generation rule)."""

    name: str
    path: Path
    vocab_size: int
    eos_token_ids: tuple[int, ...]
    eos_token_id: int  # the one the replays end with
    hf: object  # transformers.PreTrainedTokenizerFast, shared by llguidance and XGrammar
    encode: Callable[[str], list[int]]


def load_tokenizer(name: str, path: Path) -> Tokenizer:
    import tokenizers
    from transformers import PreTrainedTokenizerFast

    import gridrail as gr

    vocab = gr.Vocabulary.from_file(path)
    hf = PreTrainedTokenizerFast(tokenizer_file=str(path))
    if len(hf) != vocab.size:
        raise SystemExit(f"{path}: transformers sees {len(hf)} tokens, gridrail {vocab.size}")
    raw = tokenizers.Tokenizer.from_file(str(path))
    return Tokenizer(
        name=name,
        path=path,
        vocab_size=vocab.size,
        eos_token_ids=vocab.eos_token_ids,
        eos_token_id=vocab.eos_token_id,
        hf=hf,
        encode=lambda text: raw.encode(text, add_special_tokens=False).ids,
    )


@dataclass
class Session:
    """One matcher: `fill()` writes its mask into the bitmask it was started with."""

    fill: Callable[[], None]
    accept: Callable[[int], bool]


@dataclass
class LoadedEngine:
    setup_ms: float
    compile_ms: float
    start: Callable[[np.ndarray], Session]  # a fresh matcher writing into this (1, W) bitmask
    note: str


def elapsed_ms(start_ns: int) -> float:
    return (time.perf_counter_ns() - start_ns) / 1e6


def load_gridrail(grammar_path: Path, tok: Tokenizer) -> LoadedEngine:
    import gridrail as gr
    from gridrail.kernels import KERNELS_ENABLED

    t0 = time.perf_counter_ns()
    vocab = gr.Vocabulary.from_file(tok.path, eos_token_ids=tok.eos_token_ids)
    setup_ms = elapsed_ms(t0)
    t0 = time.perf_counter_ns()
    guide = gr.compile(gr.Grammar.from_file(grammar_path), vocab, registry=gr.Registry())
    compile_ms = elapsed_ms(t0)

    def start(bitmask: np.ndarray) -> Session:
        m = guide.matcher()
        return Session(lambda: m.fill_bitmask(bitmask, 0), lambda t: m.accept_tokens([t]))

    note = "Rust scanner kernel on" if KERNELS_ENABLED else "pure Python (GRIDRAIL_KERNELS=0)"
    return LoadedEngine(setup_ms, compile_ms, start, note)


def load_llguidance(grammar_path: Path, tok: Tokenizer) -> LoadedEngine:
    import llguidance
    import llguidance.hf
    import llguidance.numpy

    t0 = time.perf_counter_ns()
    lltok = llguidance.hf.from_tokenizer(
        tok.hf, n_vocab=tok.vocab_size, eos_token=list(tok.eos_token_ids)
    )
    setup_ms = elapsed_ms(t0)
    t0 = time.perf_counter_ns()
    grammar = llguidance.LLMatcher.grammar_from_lark(grammar_path.read_text(encoding="utf-8"))
    probe = llguidance.LLMatcher(lltok, grammar, log_level=0)
    compile_ms = elapsed_ms(t0)
    if probe.is_error():
        raise RuntimeError(probe.get_error())

    def start(bitmask: np.ndarray) -> Session:
        m = llguidance.LLMatcher(lltok, grammar, log_level=0)
        return Session(
            lambda: llguidance.numpy.fill_next_token_bitmask(m, bitmask, 0), m.consume_token
        )

    warnings = probe.get_grammar_warnings()
    note = "grammar_from_lark; " + ("; ".join(warnings) if warnings else "no grammar warnings")
    return LoadedEngine(setup_ms, compile_ms, start, note)


def load_xgrammar(grammar_path: Path, tok: Tokenizer) -> LoadedEngine:
    import torch
    import xgrammar

    t0 = time.perf_counter_ns()
    info = xgrammar.TokenizerInfo.from_huggingface(
        tok.hf, vocab_size=tok.vocab_size, stop_token_ids=list(tok.eos_token_ids)
    )
    setup_ms = elapsed_ms(t0)
    t0 = time.perf_counter_ns()
    grammar = xgrammar.Grammar.from_lark(grammar_path.read_text(encoding="utf-8"))
    compiler = xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    compiled = compiler.compile_grammar(grammar)
    compile_ms = elapsed_ms(t0)

    def start(bitmask: np.ndarray) -> Session:
        m = xgrammar.GrammarMatcher(compiled)
        shared = torch.from_numpy(bitmask)  # same memory: the harness reads the numpy array
        return Session(lambda: m.fill_next_token_bitmask(shared, 0), m.accept_token)

    return LoadedEngine(setup_ms, compile_ms, start, f"Grammar.from_lark, {info.vocab_type.name}")


class GridTokenizerView:
    """`tok.hf` as grid's HFTokenizerAdapter reads it, with the special tokens that the
    tokenizer.json marks and the replays' EOS: a PreTrainedTokenizerFast made from a bare
    tokenizer.json has no EOS and no special ids, and grid would read the special tokens'
    text (`<|endoftext|>`) as ordinary bytes."""

    def __init__(self, tok: Tokenizer):
        self._hf = tok.hf
        special = {i: t.content for i, t in tok.hf.added_tokens_decoder.items() if t.special}
        self.all_special_ids = list(special)
        self.all_special_tokens = list(special.values())
        self.eos_token_id = tok.eos_token_id  # grid masks one EOS id
        self.eos_token = tok.hf.convert_ids_to_tokens(tok.eos_token_id)
        self.pad_token_id = None  # grid then pads with EOS

    def __getattr__(self, name: str) -> object:
        return getattr(self._hf, name)


def forget_grid_memos() -> None:
    """Empty grid's process-wide memos (scanner components, kernel walkers, terminal-set
    conversions), so that every load compiles and walks from nothing, like the other engines'
    fresh loads: otherwise a later pass or tokenizer would reuse an earlier one's work."""
    from grid.lexer import factored
    from grid.trie import walk

    for memo in (
        factored._COMPONENTS,
        factored._COUNTING_COMPONENTS,
        walk._WALKERS,
        walk._MASK_CACHE,
    ):
        memo.clear()


def load_grid_guardrail(grammar_path: Path, tok: Tokenizer) -> LoadedEngine:
    from grid.generate import build_guide
    from grid.models.hf_adapter import HFTokenizerAdapter
    from grid.models.vllm_structured import GridGrammarSession

    from grid_guardrail_grammar import grid_source

    source = grid_source(grammar_path)
    forget_grid_memos()
    t0 = time.perf_counter_ns()
    adapter = HFTokenizerAdapter(GridTokenizerView(tok))
    setup_ms = elapsed_ms(t0)
    t0 = time.perf_counter_ns()
    with warnings.catch_warnings():
        # grid's lint on right-recursive rules (negation, unary): advice, not an error
        warnings.filterwarnings("ignore", message="L-REC01")
        guide = build_guide(source, adapter)
    probe = GridGrammarSession(guide)
    compile_ms = elapsed_ms(t0)
    if guide.vocab_size != tok.vocab_size:
        raise RuntimeError(f"grid sees {guide.vocab_size} tokens, the tokenizer {tok.vocab_size}")

    def start(bitmask: np.ndarray) -> Session:
        session = GridGrammarSession(guide)
        return Session(
            lambda: session.fill_bitmask(bitmask, 0), lambda t: session.accept_tokens("", [t])
        )

    # a session holds a grid_core kernel session id unless grid fell back to its Python path
    path = "grid_core kernel session" if probe._sid is not None else "Python path (no kernel)"
    note = (
        f"build_guide on the .grid translation; GridGrammarSession, {path}; "
        f"EOS {tok.eos_token_id} only (one EOS id per guide); its lexing differences and the "
        "rejections they cause: bench/grid_guardrail_grammar.py"
    )
    return LoadedEngine(setup_ms, compile_ms, start, note)


LOADERS: dict[str, Callable[[Path, Tokenizer], LoadedEngine]] = {
    "gridrail": load_gridrail,
    "llguidance": load_llguidance,
    "xgrammar": load_xgrammar,
    "grid-guardrail": load_grid_guardrail,
}


# ----- replays ---------------------------------------------------------------------------------


@dataclass
class Rejection:
    statement: int  # index in the corpus
    step: int
    token_id: int
    reason: str


PASSES = ("cold", "held-out", "warm")


@dataclass
class EngineRun:
    engine: str
    pass_name: str = "cold"
    loaded: LoadedEngine | None = None
    load_error: str = ""
    replays: int = 0  # statements timed
    latencies_us: list[float] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    wall_s: float = 0.0


def is_allowed(bitmask: np.ndarray, token_id: int) -> bool:
    return bool(int(bitmask[0, token_id >> 5]) >> (token_id & 31) & 1)


def replay(
    session: Session, bitmask: np.ndarray, ids: list[int], index: int, run: EngineRun
) -> None:
    """Replay `ids` then EOS (the last element), timing each mask; record a rejection if any."""
    for step, token_id in enumerate(ids):
        t0 = time.perf_counter_ns()
        session.fill()
        run.latencies_us.append((time.perf_counter_ns() - t0) / 1e3)
        run.positions.append(step)
        if not is_allowed(bitmask, token_id):
            run.rejections.append(Rejection(index, step, token_id, "not in the mask"))
            return
        if not session.accept(token_id):
            run.rejections.append(Rejection(index, step, token_id, "in the mask, accept failed"))
            return


def _released(bitmask: np.ndarray) -> Session:
    raise RuntimeError("the engine was released after its pass")


def run_engine(
    engine: str,
    grammar: Path,
    tok: Tokenizer,
    replays: list[list[int]],
    log: Callable[[str], None],
    pass_name: str = "cold",
) -> EngineRun:
    """`pass_name` of `PASSES` on a freshly loaded engine: the replays it times (statement
    indices into `replays`) after those it replays untimed first."""
    run = EngineRun(engine, pass_name)
    gc.collect()  # engines released before: none of their objects is collected in this pass
    try:
        run.loaded = LOADERS[engine](grammar, tok)
    except Exception as exc:  # an engine that cannot load the grammar is a result
        run.load_error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
        log(f"  {engine}: cannot load the grammar: {run.load_error}")
        return run
    every = range(len(replays))
    untimed, timed = {
        "cold": ([], every),
        "held-out": (every[0::2], every[1::2]),
        "warm": (every, every),
    }[pass_name]
    bitmask = np.zeros((1, (tok.vocab_size + 31) // 32), dtype=np.int32)
    untimed_run = EngineRun(engine)  # its latencies and rejections are not this pass's
    for index in untimed:
        replay(
            run.loaded.start(bitmask),
            bitmask,
            [*replays[index], tok.eos_token_id],
            index,
            untimed_run,
        )
    t0 = time.perf_counter()
    for index in timed:
        replay(run.loaded.start(bitmask), bitmask, [*replays[index], tok.eos_token_id], index, run)
    run.replays = len(timed)
    run.wall_s = time.perf_counter() - t0
    run.loaded = replace(run.loaded, start=_released)  # its figures are kept, the engine freed
    log(f"  {engine} ({pass_name}): {len(run.latencies_us)} masks in {run.wall_s:.1f} s")
    return run


# ----- statistics and report -------------------------------------------------------------------


def slope_us_per_position(run: EngineRun) -> float:
    """OLS slope of per-step latency against the step's position within its replay."""
    x = np.asarray(run.positions, dtype=float)
    y = np.asarray(run.latencies_us, dtype=float)
    if len(x) < 2 or np.ptp(x) == 0:
        return float("nan")
    return float(np.polyfit(x, y, 1)[0])


def fmt_us(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"


def table(runs: list[EngineRun]) -> list[str]:
    lines = [
        "| pass | engine | tokenizer setup (ms) | compile (ms) | p50 | p90 | p99 | max (µs) "
        "| mean (µs) | rejected replays | slope (µs/pos) | p50 ÷ gridrail p50 | masks "
        "| replay wall (s) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        if run.loaded is None:
            lines.append(
                f"| {run.pass_name} | {run.engine} | cannot load the grammar: {run.load_error} |"
            )
            continue
        base = next(
            (
                r
                for r in runs
                if r.engine == "gridrail" and r.pass_name == run.pass_name and r.latencies_us
            ),
            None,
        )
        base_p50 = float(np.percentile(base.latencies_us, 50)) if base else None
        p50, p90, p99 = np.percentile(run.latencies_us, [50, 90, 99])
        ratio = f"{p50 / base_p50:.4g}" if base_p50 else "–"
        lines.append(
            f"| {run.pass_name} | {run.engine} | {run.loaded.setup_ms:,.0f} "
            f"| {run.loaded.compile_ms:,.1f} "
            f"| {fmt_us(p50)} | {fmt_us(p90)} | {fmt_us(p99)} | {fmt_us(max(run.latencies_us))} "
            f"| {fmt_us(float(np.mean(run.latencies_us)))} "
            f"| {len(run.rejections)} / {run.replays} | {slope_us_per_position(run):.3g} "
            f"| {ratio} | {len(run.latencies_us)} | {run.wall_s:.1f} |"
        )
    return lines


def describe_rejections(runs: list[EngineRun], statements: list[str], tok: Tokenizer) -> list[str]:
    lines = []
    for run in runs:
        for r in run.rejections:
            ids = tok.encode(statements[r.statement])
            prefix = tok.hf.decode(ids[: r.step]) if r.step <= len(ids) else ""
            token = "EOS" if r.step == len(ids) else repr(tok.hf.decode([r.token_id]))
            lines.append(
                f"- {run.engine}: statement {r.statement + 1}, step {r.step}, token {token} "
                f"({r.reason}) after `{prefix[-60:]}`"
            )
    return lines


def host_line(cpu: int) -> str:
    versions = []
    for package in PACKAGES:
        try:
            versions.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            versions.append(f"{package} (not installed)")
    return f"{describe()} (pinned to CPU {cpu}); " + ", ".join(versions)


def read_corpus(path: Path, limit: int | None) -> list[str]:
    statements = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        statement = raw.split("\t", 1)[0].strip()
        if statement:
            statements.append(statement)
    return statements[:limit] if limit else statements


def tokenizer_path(assets: Path, name: str) -> Path:
    path = Path(name)
    return path if path.suffix == ".json" else assets / "tokenizers" / name / "tokenizer.json"


def portable_grammar(text: str) -> str:
    """`text` without gridrail-only Lark: terminal priorities and whole-lexeme exclusions."""
    text = re.sub(r"^([A-Z_][A-Z0-9_]*)\.\d+:", r"\1:", text, flags=re.MULTILINE)
    return re.sub(r"\(\?!\(\?i:[^()]*\)(?:\\Z|\\\.)\)", "", text)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--grammar", type=Path, default=DEFAULT_GRAMMAR, help="a .lark file")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument(
        "--tokenizers",
        nargs="+",
        default=["gpt2", "qwen2"],
        help="names under ASSETS/tokenizers/ or paths to tokenizer.json files",
    )
    parser.add_argument("--engines", nargs="+", choices=list(LOADERS), default=list(LOADERS))
    parser.add_argument(
        "--portable",
        action="store_true",
        help="every engine gets the grammar without gridrail-only Lark (see above)",
    )
    parser.add_argument("--limit", type=int, help="replay only the first N statements")
    parser.add_argument(
        "--passes",
        nargs="+",
        choices=PASSES,
        default=["cold"],
        help="which passes to time (see above; default: cold)",
    )
    parser.add_argument(
        "--assets",
        type=Path,
        default=Path(os.environ.get("GRIDRAIL_ASSETS", REPO_ROOT.parent / "shared")),
        help="folder laid out like the project's shared/ (default: $GRIDRAIL_ASSETS or ../shared)",
    )
    args = parser.parse_args()

    cpu = pin_to_one_cpu()
    started = time.perf_counter()

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    if args.portable:
        source = args.grammar
        args.grammar = Path(tempfile.mkdtemp()) / f"{source.stem}.portable.lark"
        args.grammar.write_text(portable_grammar(source.read_text()))
    statements = read_corpus(args.corpus, args.limit)
    out = [
        f"command: python {' '.join(sys.argv)}",
        f"date: {date.today().isoformat()}",
        f"host: {host_line(cpu)}",
        f"grammar: {args.grammar}; corpus: {args.corpus} ({len(statements)} statements)",
    ]
    for name in args.tokenizers:
        log(f"{name}:")
        tok = load_tokenizer(name, tokenizer_path(args.assets, name))
        replays = [tok.encode(s) for s in statements]
        runs = [
            run_engine(e, args.grammar, tok, replays, log, pass_name)
            for pass_name in args.passes
            for e in args.engines
        ]
        out += [
            "",
            f"### {name} (vocabulary {tok.vocab_size:,}, EOS {list(tok.eos_token_ids)}; "
            f"{sum(len(r) + 1 for r in replays)} steps per engine when nothing is rejected)",
            "",
            *table(runs),
            "",
            *dict.fromkeys(f"- {r.engine}: {r.loaded.note}" for r in runs if r.loaded),
            *describe_rejections(runs, statements, tok),
        ]
    out += ["", f"total run time: {time.perf_counter() - started:.0f} s"]
    print("\n".join(out))


if __name__ == "__main__":
    main()

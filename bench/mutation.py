"""Bounded mutation testing of the core modules with Cosmic Ray:
`python bench/mutation.py [--minutes 20] [--seed 0] [--source DIR] [--work DIR] [--out DIR]`.

Cosmic Ray mutates a module's file in place (and puts it back after each test run), so the run
works on a private copy of the working tree (or of --source): the shared tree, and anyone
testing on it, never sees a mutant. The copy imports its own gridrail through PYTHONPATH,
ahead of the editable install. Each target is tested by the fast test subset that covers it;
a mutant is killed when that subset fails or outlives its timeout. Sites (source positions)
are drawn in random order with one random operator each, until the target's share of the time
budget is spent — so a short budget samples every part of a module rather than exhausting the
first operator. Writes `summary.md` and `summary.json` (killed / survived / timeout per
target, each survivor with file:line and its diff) under --out (default build/mutation).
Survivors do not fail the run; it exits non-zero when a result cannot mean anything: the copy
imports the wrong gridrail, or a subset fails on the unmutated code (that target is skipped,
the others still run).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import cosmic_ray.commands
from cosmic_ray.mutating import mutate_and_test
from cosmic_ray.work_db import use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkItem

from host import describe

REPO = Path(__file__).resolve().parent.parent
PACKAGE = Path("python/gridrail")
# not needed to import or test gridrail: large (target/), shared (.git) or caches
NOT_COPIED = (
    ".git",
    "target",
    "build",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
)


@dataclass(frozen=True)
class Target:
    """Modules mutated together, and the fast tests that must notice a mutant in them."""

    name: str
    modules: tuple[str, ...]  # relative to python/gridrail
    pytest_args: tuple[str, ...]  # test files or node ids (relative to the repository), options


ACCEPT_IFF_MASK = "tests/test_accept_mask_agreement.py"
SURVIVORS = "tests/test_mutation_survivors.py"  # kills what earlier runs found: one second
TARGETS = (
    Target("guide", ("guide.py",), (ACCEPT_IFF_MASK,)),
    Target(
        "mask",
        tuple(
            f"mask/{m}.py"
            for m in ("bitmask", "cache", "compute", "entry", "keys", "normal_form", "walk")
        ),
        (
            ACCEPT_IFF_MASK,
            SURVIVORS,
            "tests/test_mask_cache.py::test_publish_is_idempotent_and_conflicts_raise",
            "tests/test_mask_cache.py::test_identifier_positions_get_identifier_keys",
            "tests/test_mask_cache.py::test_a_generic_entry_at_an_identifier_position_raises",
        ),
    ),
    Target("parse/oracle", ("parse/oracle.py",), ("tests/test_oracle.py", SURVIVORS)),
    Target("parse/lr", ("parse/lr.py",), ("tests/test_oracle.py", SURVIVORS)),
    Target(
        "audit",
        ("audit.py",),
        (
            "tests/security/test_audit_signatures.py",
            "tests/test_audit.py::test_parse_rejects_rows_that_are_not_objects",
            "-k",
            "not test_cli_ask",  # runs the whole ask pipeline: slow, and it tests ask
        ),
    ),
    Target("policy/lexicon", ("policy/lexicon.py",), ("tests/test_lexicon.py",)),
    Target(
        "check",
        ("check/checker.py", "check/scopes.py", "check/sqlite_judge.py"),
        (
            *(
                f"tests/test_checker.py::{t}"
                for t in (
                    "test_fixture",
                    "test_messages_say_what_to_do",
                    "test_names_compare_with_the_dialects_rules",
                    "test_mutated_fixtures_bind_like_sqlite",
                )
            ),
            "tests/security/test_column_reads.py",
            SURVIVORS,
        ),
    ),
)


@dataclass
class Outcome:
    target: str
    baseline_s: float | None  # None: the subset fails on the unmutated code
    sites: int
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    survivors: list[dict[str, str]] = field(default_factory=list)


def private_copy(source: Path, work: Path) -> None:
    """`source` as it is now (uncommitted edits included, built extension included)."""
    if work.resolve() in (source.resolve(), *source.resolve().parents):
        sys.exit(f"--work {work} would replace {source} itself; name a directory outside it")
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(source, work, ignore=shutil.ignore_patterns(*NOT_COPIED))


def test_command(target: Target) -> str:
    return shlex.join(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *target.pytest_args]
    )


def head_commit() -> str:
    git = ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]
    return subprocess.run(git, capture_output=True, text=True).stdout.strip() or "unknown"


def check_imports_the_copy(work: Path, env: dict[str, str]) -> None:
    probe = "import gridrail, gridrail._kernels; print(gridrail.__file__)"
    found = subprocess.run(
        [sys.executable, "-c", probe], cwd=work, env=env, capture_output=True, text=True
    )
    if not found.stdout.startswith(str(work / PACKAGE)):
        sys.exit(f"the private copy imports gridrail from elsewhere: {found.stdout}{found.stderr}")


def baseline(target: Target, work: Path, env: dict[str, str]) -> float | None:
    """Seconds the subset takes on the unmutated code, or None (and its report) if it fails."""
    start = time.monotonic()
    run = subprocess.run(
        shlex.split(test_command(target)), cwd=work, env=env, capture_output=True, text=True
    )
    if run.returncode != 0:
        print(f"{target.name}: the tests fail on unmutated code:\n{run.stdout[-3000:]}")
        return None
    return time.monotonic() - start


def sampled(items: tuple[WorkItem, ...], rng: random.Random) -> list[WorkItem]:
    """One random mutation per site, sites in random order."""
    by_site: dict[tuple, list[WorkItem]] = defaultdict(list)
    for item in items:
        (m,) = item.mutations
        by_site[(str(m.module_path), m.start_pos, m.end_pos)].append(item)
    sites = sorted(by_site)
    rng.shuffle(sites)
    return [rng.choice(by_site[site]) for site in sites]


def classify(worker: WorkerOutcome, test: TestOutcome | None, output: str | None) -> str:
    if worker == WorkerOutcome.NO_TEST:
        return "no mutation"
    if worker != WorkerOutcome.NORMAL:
        return "incompetent"
    if test == TestOutcome.SURVIVED:
        return "survived"
    return "timeout" if output == "timeout" else "killed"


def changed_lines(diff: str) -> str:
    return " / ".join(
        line.strip()
        for line in diff.splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    )


def mutate(
    target: Target, work: Path, env: dict[str, str], seconds: float, rng: random.Random
) -> Outcome:
    os.environ.update(env)  # mutate_and_test runs the subset with this process's environment
    deadline = time.monotonic() + seconds
    took = baseline(target, work, env)
    if took is None:
        return Outcome(target.name, None, 0)
    with use_db(str(work / f"session-{target.name.replace('/', '-')}.sqlite")) as db:
        cosmic_ray.commands.init([work / PACKAGE / m for m in target.modules], db, {})
        queue = sampled(db.work_items, rng)
        outcome = Outcome(target.name, round(took, 1), len(queue))
        for item in queue:
            if time.monotonic() + took > deadline:
                break
            result = mutate_and_test(item.mutations, test_command(target), 3 * took + 10)
            db.set_result(item.job_id, result)
            kind = classify(result.worker_outcome, result.test_outcome, result.output)
            outcome.counts[kind] += 1
            if kind == "survived":
                (m,) = item.mutations
                where = f"{Path(m.module_path).relative_to(work)}:{m.start_pos[0]}"
                outcome.survivors.append(
                    {
                        "where": where,
                        "operator": m.operator_name,
                        "change": changed_lines(result.diff),
                    }
                )
    return outcome


def write_summary(outcomes: list[Outcome], out: Path, header: str) -> str:
    kinds = ("killed", "timeout", "survived", "incompetent", "no mutation")
    lines = [header, "", "| target | subset s | sites | " + " | ".join(kinds) + " |"]
    lines.append("|---" * (3 + len(kinds)) + "|")
    for o in outcomes:
        subset = "fails unmutated" if o.baseline_s is None else f"{o.baseline_s}"
        cells = [o.target, subset, f"{o.sites}", *(str(o.counts[k]) for k in kinds)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Survivors:", ""]
    lines += [
        f"- {s['where']} {s['operator']}: `{s['change']}`" for o in outcomes for s in o.survivors
    ]
    text = "\n".join(lines) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(text)
    records = [{**o.__dict__, "counts": dict(o.counts)} for o in outcomes]
    (out / "summary.json").write_text(json.dumps(records, indent=1))
    return text


def run(targets: list[Target], work: Path, args: argparse.Namespace) -> None:
    env = {**os.environ, "PYTHONPATH": str(work / "python"), "PYTHONDONTWRITEBYTECODE": "1"}
    check_imports_the_copy(work, env)
    rng = random.Random(args.seed)
    end = time.monotonic() + 60 * args.minutes
    outcomes = []
    for n, target in enumerate(targets):
        share = (end - time.monotonic()) / (len(targets) - n)  # unused time flows on
        outcomes.append(mutate(target, work, env, share, rng))
        print(f"{target.name}: {dict(outcomes[-1].counts)}", flush=True)
    header = (
        f"Mutation run ({args.minutes:g} min budget, seed {args.seed}) of {args.source} "
        f"(HEAD {head_commit()}) on {describe()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    print(write_summary(outcomes, args.out, header))
    if any(o.baseline_s is None for o in outcomes):
        sys.exit("some subsets fail on the unmutated code: their targets were not mutated")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--minutes", type=float, default=float(os.environ.get("MUTATION_MINUTES", 20))
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--source", type=Path, default=REPO, help="tree to copy (default: this)")
    parser.add_argument("--work", type=Path, help="private copy, kept (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "mutation")
    parser.add_argument("--only", nargs="*", help="target names (default: all)")
    args = parser.parse_args()
    targets = [t for t in TARGETS if not args.only or t.name in args.only]
    with tempfile.TemporaryDirectory(prefix="gridrail-mutation-") as temp:
        work = args.work or Path(temp) / "repo"
        private_copy(args.source, work)
        run(targets, work, args)


if __name__ == "__main__":
    main()

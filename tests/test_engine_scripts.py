"""The serving-engine scripts of bench/ (issue 18), in whichever environment runs the tests (the
main one, and those of `make check-vllm` / `make check-sglang`): bench/vllm_serving.py before
it meets a GPU (`--dry-run` runs its arguments, specs, requests, arms in their own processes and
tables: everything but the forward pass), and bench/engine_fill.py on every engine that
imports."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def _run(*args: str, script: str = "vllm_serving.py") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip


def _specs(tmp_path: Path) -> Path:
    path = tmp_path / "specs.toml"
    path.write_text(
        "".join(
            f'[specs.hr-{role}]\ndb = "{EXAMPLES / "hr.sqlite"}"\n'
            f'policy = "{EXAMPLES / "hr_policy.toml"}"\nrole = "{role}"\n\n'
            for role in ("analyst", "clerk", "manager")
        ),
        encoding="utf-8",
    )
    return path


def test_the_dry_run_builds_every_arm_and_its_tables(tmp_path: Path) -> None:
    done = _run("--specs", str(_specs(tmp_path)), "--dry-run", "--batches", "1,4", "--json",
                "--max-tokens", "16")  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["dry_run"] and report["host"] and report["date"]
    cells = {(r["arm"], r["batch"]) for r in report["rows"]}
    arms = ("unconstrained", "gridrail", "xgrammar", "guidance")
    assert cells == {(arm, b) for arm in arms for b in (1, 4)}
    assert all(r["output_tokens"] == 16 * r["batch"] for r in report["rows"])
    assert all("overhead_ms_per_token" in r for r in report["rows"])
    # the cold role is the spec no warm request named: the last one
    (cold,) = report["cold_role"]
    assert cold["cold_spec"] == "hr-manager"
    table = _run("--specs", str(_specs(tmp_path)), "--dry-run", "--arms", "gridrail")
    assert (
        table.returncode == 0 and "DRY RUN" in table.stdout and "| gridrail | 32 |" in table.stdout
    )


def test_bad_arguments_are_refused_before_any_engine(tmp_path: Path) -> None:
    specs = str(_specs(tmp_path))
    assert "unknown arm(s) sglang" in _run("--specs", specs, "--dry-run", "--arms", "sglang").stderr
    assert "--batches is a list" in _run("--specs", specs, "--dry-run", "--batches", "x").stderr
    bad = _run("--specs", str(tmp_path / "absent.toml"), "--dry-run")
    assert bad.returncode != 0 and "cannot read the spec file" in bad.stderr


def test_the_batch_fill_is_measured_on_every_engine_that_imports() -> None:
    done = _run("--batches", "1,3", "--steps", "4", "--json", script="engine_fill.py")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["rows"]
    expected = {"gridrail"} | {
        engine for engine in ("vllm", "sglang") if importlib.util.find_spec(engine) is not None
    }
    assert {r["arm"] for r in rows} == expected
    assert {r["batch"] for r in rows} == {1, 3}
    assert all(r["steps"] == 4 and r["fill_us"] > 0 for r in rows)

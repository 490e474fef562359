"""bench/vllm_serving.py (issue 18 item 5) before it meets a GPU: `--dry-run` runs its arguments,
specs, requests, arms in their own processes and tables, everything but the forward pass."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "vllm_serving.py"), *args],
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

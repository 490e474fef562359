"""Run a piece of Python in fresh processes under several hash seeds: what gridrail prints
there must not depend on the seed (set and dict orders of strings do)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def outputs_under_hash_seeds(code: str, args: Sequence[str], seeds: int) -> set[str]:
    """The distinct standard outputs of `code` run with `args` under `PYTHONHASHSEED` 0 ..
    `seeds` - 1 (the tests' folder importable, as here); a failed run raises."""
    path = os.pathsep.join([str(TESTS), *sys.path])
    outputs = set()
    for seed in range(seeds):
        env = {**os.environ, "PYTHONPATH": path, "PYTHONHASHSEED": str(seed)}
        done = subprocess.run(
            [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise AssertionError(f"hash seed {seed}: {done.stderr}")
        outputs.add(done.stdout)
    return outputs

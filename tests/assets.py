"""The one place tests find external assets (tokenizers, Spider data).

`GRIDRAIL_ASSETS` (a folder laid out like the project's shared/ folder) wins; otherwise the
`shared/` folder beside the repository is used. Tests that need an asset that is missing skip
with the path they looked for, so a machine without the assets says so instead of passing; under
CI (`CI=true`, as `.ci/run` is run) a missing asset fails the test instead, so a CI machine that
lost its assets cannot report green.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def assets_root() -> Path:
    env = os.environ.get("GRIDRAIL_ASSETS")
    if env:
        return Path(env)
    return REPO_ROOT.parent / "shared"


def on_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1")


def missing(what: str) -> None:
    """Skip the calling test because `what` is not on this machine (fail it under CI)."""
    if on_ci():
        pytest.fail(f"{what} (CI=true: a missing asset is an error, not a skip)", pytrace=False)
    pytest.skip(what)


def asset(*parts: str) -> Path:
    """Path of an asset; skips the calling test if it is not there (fails it under CI)."""
    path = assets_root().joinpath(*parts)
    if not path.exists():
        missing(f"asset not found: {path} (set GRIDRAIL_ASSETS to a folder that has it)")
    return path


def spider_gold() -> Path:
    return asset("data", "spider", "train_gold.sql")

"""One description of the machine a benchmark ran on, for every results line."""

from __future__ import annotations

import os
import platform


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown CPU"


def describe() -> str:
    """CPU model, core count, OS and Python version."""
    return (
        f"{cpu_model()}, {os.cpu_count()} cores; {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}"
    )

"""One description of the machine a benchmark ran on, for every results line."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time


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


def report_parser(doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's command line: its module docstring as the help, and `--json` (the report
    as one JSON object instead of a table)."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="the report as one JSON object")
    return parser


def provenance(started: float) -> dict[str, object]:
    """What every results line carries: the command, the host, the date and the seconds since
    `started` (a `time.perf_counter()` reading)."""
    return {
        "command": "python " + " ".join(sys.argv),
        "host": describe(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "seconds": round(time.perf_counter() - started, 1),
    }

"""How big the `long` tier's runs are: `GRIDRAIL_LONG=full` (the default, `make check-long`) or
`GRIDRAIL_LONG=reduced` (`make check-long-reduced`, which CI runs: the same checks at sizes that
fit CI's time budget on 2 cores). Every `@pytest.mark.long` test takes its size from here, so
one variable scales the whole tier."""

from __future__ import annotations

import os

MODES = ("full", "reduced")


def long_mode() -> str:
    mode = os.environ.get("GRIDRAIL_LONG", "full")
    if mode not in MODES:
        raise ValueError(f"GRIDRAIL_LONG={mode!r}: set it to one of {', '.join(MODES)}")
    return mode


def long_size(full: int, reduced: int) -> int:
    """`full` under `make check-long`, `reduced` under `GRIDRAIL_LONG=reduced`."""
    return full if long_mode() == "full" else reduced

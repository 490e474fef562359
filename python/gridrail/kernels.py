"""The one place that decides whether a Rust kernel or its Python reference runs.

The Rust extension ``gridrail._kernels`` is optional: every kernel has a pure-Python reference
with identical results. Kernels are used when the extension imports and the environment does not
say ``GRIDRAIL_KERNELS=0`` (read once, at import).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gridrail.grammar.scanner import ScannerAutomaton

# (state reached, bytes consumed, last accept end or -1, its state or -1): see
# `ScannerAutomaton.run`.
ScanResult = tuple[int, int, int, int]
ScanRunner = Callable[[int, bytes], ScanResult]


def _load_kernels() -> ModuleType | None:
    if os.environ.get("GRIDRAIL_KERNELS") == "0":
        return None
    try:
        from gridrail import _kernels
    except ImportError:
        return None
    return _kernels


_kernels = _load_kernels()
KERNELS_ENABLED: bool = _kernels is not None


def make_scan_runner(scanner: ScannerAutomaton) -> ScanRunner:
    """A function with the semantics of ``scanner.run``: Rust ``ScanTable.run`` or the reference."""
    if _kernels is None:
        return scanner.run
    # Native-endian int32 bytes: the cheapest way to hand the table to Rust.
    accepting = bytes(1 if mask else 0 for mask in scanner.accept_mask)
    return _kernels.ScanTable(scanner.transitions.tobytes(), accepting).run

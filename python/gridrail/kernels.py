"""The one place that decides whether a Rust kernel or its Python reference runs.

The Rust extension ``gridrail._kernels`` is optional: every kernel has a pure-Python reference
with identical results. Kernels are used when the extension imports and the environment does not
say ``GRIDRAIL_KERNELS=0`` (read once, at import).
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gridrail.grammar.dfa import ByteDFA
    from gridrail.grammar.names import NameSet
    from gridrail.grammar.scanner import ScannerAutomaton

# (state reached, bytes consumed, last accept end or -1, its state or -1): see
# `ScannerAutomaton.run`.
ScanResult = tuple[int, int, int, int]
ScanRunner = Callable[[int, bytes], ScanResult]
# The states the name automata add to a scanner (`gridrail.grammar.scanner._name_rows`): their
# transitions (array "i", 256 per state), per state its base state or -1 (array "i"), and the
# name slots that accept there and those still live, as bit masks (arrays "Q").
NameRows = tuple[array, array, array, array]


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


def name_rows(base: ScannerAutomaton, name_sets: Sequence[NameSet], bound: int) -> NameRows:
    """Rust ``name_rows``: `gridrail.grammar.scanner._name_rows`'s result (OverflowError past
    `bound` states). Only with KERNELS_ENABLED."""
    assert _kernels is not None
    slots = [_name_set_args(names) for names in name_sets]
    parts = _kernels.name_rows(base.transitions.tobytes(), base.start, slots, bound)
    out = (array("i"), array("i"), array("Q"), array("Q"))
    for values, data in zip(out, parts, strict=True):
        values.frombytes(data)
    return out


def names_outside(names: NameSet, dfa: ByteDFA) -> str | None:
    """Rust ``names_outside``: `NameAutomaton.outside`'s result. Only with KERNELS_ENABLED."""
    assert _kernels is not None
    witness = _kernels.names_outside(_name_set_args(names), _dfa_args(dfa))
    return None if witness is None else witness.decode("utf-8", "backslashreplace")


def fullmatch_many(dfa: ByteDFA, texts: Sequence[bytes]) -> list[bool]:
    """Per text, `dfa.fullmatch(text)`: Rust ``fullmatch_many`` (one call for all) or the
    reference."""
    if _kernels is None:
        return [dfa.fullmatch(text) for text in texts]
    return [flag == 1 for flag in _kernels.fullmatch_many(_dfa_args(dfa), texts)]


def _name_set_args(names: NameSet) -> tuple[list[bytes], list[bytes], tuple | None]:
    suffix = names.suffix_dfa
    exact, folded = [s.encode() for s in names.exact], [s.encode() for s in names.folded]
    return exact, folded, None if suffix is None else _dfa_args(suffix)


def _dfa_args(dfa: ByteDFA) -> tuple[int, bytes, bytes]:
    return dfa.start, dfa.transitions.tobytes(), bytes(dfa.accepting)

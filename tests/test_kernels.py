"""Rust kernels equal their Python references; GRIDRAIL_KERNELS=0 selects the references.

Tests of the Rust side skip when the extension is not built. To build it for `PYTHONPATH=python`:
    cargo build --release --features extension-module
    cp target/release/lib_kernels.so python/gridrail/_kernels.abi3.so
"""

from __future__ import annotations

import os
import subprocess
import sys
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridrail import kernels
from gridrail.grammar.model import TerminalDef
from gridrail.grammar.scanner import build_scanner

SCANNER = build_scanner(
    [
        TerminalDef(name, index, pattern, flags, 0, False)
        for index, (name, pattern, flags) in enumerate(
            [
                ("SELECT", "select", "i"),
                ("NAME", r"[A-Za-z_][A-Za-z0-9_]*", ""),
                ("NUMBER", r"[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?", ""),
                ("STRING", r"'(?:[^']|'')*'", ""),
                ("WS", r"\s+", ""),
                ("COMMENT", r"/\*(?:[^*]|\*+[^*/])*\*+/", ""),
                ("WORD", r"\w+", ""),
            ]
        )
    ]
)
LEXEME_BYTES = st.binary(max_size=40) | st.text("selctSELCT_a1 .e+'*/\t\n中é", max_size=40).map(
    str.encode
)


def _scan_table_class():
    rust = pytest.importorskip(
        "gridrail._kernels",
        reason="Rust extension gridrail._kernels is not built (see tests/test_kernels.py)",
    )
    return rust.ScanTable


@settings(max_examples=500, deadline=None)
@given(state=st.integers(0, SCANNER.num_states - 1), data=LEXEME_BYTES)
def test_scan_table_run_equals_python_run(state: int, data: bytes) -> None:
    table = _scan_table_class()(SCANNER.transitions.tobytes())
    assert table.run(state, data) == SCANNER.run(state, data)


def test_scan_table_accepts_int_sequences() -> None:
    scan_table = _scan_table_class()
    for transitions in (SCANNER.transitions, list(SCANNER.transitions)):
        table = scan_table(transitions)
        assert table.num_states == SCANNER.num_states
        assert table.run(SCANNER.start, b"select 1") == SCANNER.run(SCANNER.start, b"select 1")


def test_scan_table_long_input() -> None:
    # Long enough that the kernel releases the GIL.
    table = _scan_table_class()(SCANNER.transitions.tobytes())
    data = b"x" * 200_000 + b"!"
    assert table.run(SCANNER.start, data) == SCANNER.run(SCANNER.start, data)
    assert table.run(SCANNER.start, data)[1] == 200_000


def test_scan_table_errors() -> None:
    scan_table = _scan_table_class()
    with pytest.raises(ValueError, match="multiple of 256"):
        scan_table(array("i", [-1] * 255).tobytes())
    with pytest.raises(ValueError, match="not -1 or a state"):
        scan_table([5] * 256)
    table = scan_table(SCANNER.transitions.tobytes())
    for state in (-1, SCANNER.num_states):
        with pytest.raises(ValueError) as rust_error:
            table.run(state, b"a")
        with pytest.raises(ValueError) as python_error:
            SCANNER.run(state, b"a")
        assert str(rust_error.value) == str(python_error.value)


def test_kernels_enabled_when_built() -> None:
    _scan_table_class()
    if os.environ.get("GRIDRAIL_KERNELS") == "0":
        pytest.skip("GRIDRAIL_KERNELS=0 in this environment")
    assert kernels.KERNELS_ENABLED
    assert SCANNER.fast_run(SCANNER.start, b"select") == SCANNER.run(SCANNER.start, b"select")
    assert SCANNER.fast_run != SCANNER.run


def test_python_reference_when_disabled() -> None:
    code = (
        "from gridrail import kernels\n"
        "from gridrail.grammar.scanner import build_scanner\n"
        "from gridrail.grammar.model import TerminalDef\n"
        "s = build_scanner([TerminalDef('A', 0, 'a+', '', 0, False)])\n"
        "assert kernels.make_scan_runner(s) == s.run\n"
        "assert s.fast_run == s.run\n"
        "print(kernels.KERNELS_ENABLED)\n"
    )
    env = {**os.environ, "GRIDRAIL_KERNELS": "0", "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"

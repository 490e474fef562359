"""`gridrail parse` and `gridrail explain`, run as a user runs them."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from gridrail.cli import main


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_parse_reports_each_rejected_line(tmp_path: Path) -> None:
    f = tmp_path / "gold.sql"
    f.write_text(
        "SELECT name FROM singer\tconcert_singer\n"
        "\n"
        "SELECT count(*) FROM singer WHERE age > 20;\n"
        "SELECT name FROM WHERE age > 20\tconcert_singer\n"
        "SELECT name FROM singer WHERE\n",
        encoding="utf-8",
    )
    code, text = _run("parse", str(f))
    assert code == 1
    lines = text.splitlines()
    assert lines[-1] == "2 accepted, 2 rejected"
    assert lines[0].startswith("line 4: rejected at byte 22: expected one of:")
    assert "TABLE_NAME" in lines[0]
    assert "line 5: rejected at byte 29" in text  # `;` added, but WHERE needs an expression


def test_parse_all_accepted_exits_zero(tmp_path: Path) -> None:
    f = tmp_path / "ok.sql"
    f.write_text("SELECT 1;\nDELETE FROM t WHERE a = 'x'\n", encoding="utf-8")
    assert _run("parse", str(f)) == (0, "2 accepted, 0 rejected\n")


def test_explain_viable_prefix_and_eos() -> None:
    code, text = _run("explain", "SELECT name FROM employees")
    assert code == 0
    assert "viable: yes" in text
    assert "EOS legal: no" in text
    assert "may still become: " in text and "TABLE_NAME" in text
    code, text = _run("explain", "SELECT name FROM employees;")
    assert "EOS legal: yes" in text


def test_explain_rejected_prefix() -> None:
    code, text = _run("explain", "SELECT FROM FROM")
    assert code == 1
    assert "viable: no" in text


def test_custom_grammar_file_and_errors(tmp_path: Path) -> None:
    g = tmp_path / "tiny.lark"
    g.write_text('start: "a"+ ";"\n%ignore " "\n', encoding="utf-8")
    code, text = _run("explain", "--grammar", str(g), "a a")
    assert code == 0 and "SEMICOLON" in text
    bad = tmp_path / "bad.lark"
    bad.write_text("start: missing\n", encoding="utf-8")
    assert _run("explain", "--grammar", str(bad), "a")[0] == 2
    assert _run("explain", "--grammar", "no-such-dialect", "a")[0] == 2
    assert _run("parse", str(tmp_path / "absent.sql"))[0] == 2


@pytest.mark.parametrize("argv", [["--help"], ["parse", "--help"]])
def test_console_entry_point(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gridrail.cli", *argv], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0
    assert "gridrail" in done.stdout

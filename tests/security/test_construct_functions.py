"""A banned construct is banned under every spelling (session 38's policy review: a role that
banned pattern_matching still matched patterns with `like('A%', name)` and `glob(...)`, one that
banned case_expressions wrote `iif(x > 3, 'big', 'small')`): the functions that are a construct
under another spelling go with it, from the mask and from the checker."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import gridrail as gr
from gridrail.database import Database
from gridrail.serve.app import BYTE_VOCABULARY

POLICY = """
[roles.plain]
statements = ["select"]
banned = ["pattern_matching", "case_expressions"]
[roles.free]
statements = ["select"]
"""
CALLS = [
    "SELECT name FROM a WHERE like('A%', name);",
    "SELECT name FROM a WHERE glob('A*', name);",
    "SELECT iif(x > 3, 'big', 'small') FROM a;",
    "SELECT nullif(x, 3) FROM a;",
    "SELECT coalesce(name, 'none') FROM a;",
    "SELECT ifnull(name, 'none') FROM a;",
]


def _guide(tmp_path: Path, role: str) -> gr.Guide:
    path = tmp_path / "a.sqlite"
    if not path.exists():
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE a (name TEXT, x INT)")
    return gr.compile(
        gr.Grammar.bundled("sqlite"), BYTE_VOCABULARY, schema=Database.open(str(path)).schema(),
        policy=gr.Policy.from_text(POLICY), role=role,
    )  # fmt: skip


@pytest.mark.parametrize("sql", CALLS)
def test_a_banned_construct_is_no_function_either(tmp_path: Path, sql: str) -> None:
    plain = _guide(tmp_path, "plain")
    kinds = {v.kind for v in plain.check(sql)}
    assert "function_not_allowed" in kinds and "outside_language" in kinds, sql
    assert _guide(tmp_path, "free").check(sql) == []


def test_the_construct_itself_stays_banned(tmp_path: Path) -> None:
    plain = _guide(tmp_path, "plain")
    assert plain.check("SELECT name FROM a WHERE name LIKE 'A%';") != []
    assert plain.check("SELECT CASE WHEN x > 3 THEN 1 END FROM a;") != []
    assert plain.check("SELECT upper(name) FROM a;") == []  # other functions stay


def test_a_role_may_not_list_a_function_it_bans() -> None:
    text = '[roles.r]\nstatements = ["select"]\nbanned = ["pattern_matching"]\n'
    with pytest.raises(gr.PolicyError, match="like is a construct it bans"):
        gr.Policy.from_text(text + 'functions = ["count", "like"]\n')
    assert gr.Policy.from_text(text + 'functions = ["count"]\n').role("r").barred == {
        "like",
        "glob",
    }

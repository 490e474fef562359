"""The spec file a serving engine reads (issue 18): a request names a declared spec, never a
policy; a bad file or an unknown name is one clear error. The engines' backends are tested in
tests/test_vllm_backend.py."""

from __future__ import annotations

import shutil
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import gridrail as gr
from gridrail.integrations.specs import SpecError, SpecRegistry
from test_walk_arm import _small_vocab

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "specs.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_spec_names_a_role_over_a_catalog_with_paths_beside_the_file(tmp_path: Path) -> None:
    shutil.copy(EXAMPLES / "hr.sqlite", tmp_path)
    shutil.copy(EXAMPLES / "hr_policy.toml", tmp_path)
    path = _file(
        tmp_path,
        '[specs.analyst]\ndb = "hr.sqlite"\npolicy = "hr_policy.toml"\nrole = "analyst"\n'
        'max_tokens = 64\n\n[specs.clerk]\ndb = "hr.sqlite"\npolicy = "hr_policy.toml"\n'
        'role = "clerk"\n',
    )
    specs = SpecRegistry.from_file(path)
    analyst = specs.spec("gridrail:analyst")
    assert analyst.role == "analyst" and analyst.max_tokens == 64
    assert specs.spec("gridrail:clerk").max_tokens is None
    vocab = _small_vocab()
    guide = specs.guide(analyst, vocab)
    assert specs.guide(analyst, vocab) is guide  # compiled once per vocabulary
    # the role's language: the analyst reads, cannot write, cannot name salaries
    assert guide.oracle.accepts(b"SELECT name FROM employees;")
    assert not guide.oracle.accepts(b"DELETE FROM orders;")
    assert guide.check("SELECT salary FROM employees;")
    clerk = specs.guide(specs.spec("gridrail:clerk"), vocab)
    insert = b"INSERT INTO orders (id) VALUES (1);"
    assert clerk.oracle.accepts(insert) and not guide.oracle.accepts(insert)
    assert guide.binder is not None  # names bound at the mask: the engines' default rung
    with pytest.raises(SpecError, match=r"no spec named 'admin' is declared \(declared: analyst"):
        specs.spec("gridrail:admin")
    with pytest.raises(SpecError, match="gridrail:NAME"):
        specs.spec("root ::= 'DROP TABLE x'")


def test_a_spec_whose_role_stands_on_the_open_rung_leaves_names_open(tmp_path: Path) -> None:
    """The engines track names (Γ) unless the role's policy chose the open rung."""
    shutil.copy(EXAMPLES / "hr.sqlite", tmp_path)
    policy = (EXAMPLES / "hr_policy.toml").read_text()
    anchor = "[roles.analyst]\n"
    (tmp_path / "hr_policy.toml").write_text(policy.replace(anchor, anchor + 'names = "open"\n'))
    path = _file(
        tmp_path, '[specs.analyst]\ndb = "hr.sqlite"\npolicy = "hr_policy.toml"\nrole = "analyst"\n'
    )
    specs = SpecRegistry.from_file(path)
    assert specs.guide(specs.spec("gridrail:analyst"), _small_vocab()).binder is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "declare at least one"),
        ("[specs.a]\nrole = 'analyst'\n", "give db, policy"),
        (
            f"[specs.a]\ndb = '{EXAMPLES / 'hr.sqlite'}'\npolicy = "
            f"'{EXAMPLES / 'hr_policy.toml'}'\nrole = 'ceo'\n",
            "the policy has no role 'ceo'",
        ),
        (
            f"[specs.a]\ndb = '{EXAMPLES / 'hr.sqlite'}'\npolicy = "
            f"'{EXAMPLES / 'hr_policy.toml'}'\nrole = 'analyst'\ngrammar = 'x'\n",
            "unknown field",
        ),
        (
            f"[specs.a]\ndb = '{EXAMPLES / 'hr.sqlite'}'\npolicy = "
            f"'{EXAMPLES / 'hr_policy.toml'}'\nrole = 'analyst'\nmax_tokens = 0\n",
            "max_tokens is a positive integer",
        ),
        ("[specs.a]\ndb = 'absent.sqlite'\npolicy = 'p.toml'\nrole = 'r'\n", r"\[specs.a\]"),
        ("specs = [", "not TOML"),
    ],
)
def test_a_bad_spec_file_is_one_error_naming_the_spec(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        SpecRegistry.from_file(_file(tmp_path, text))


def test_the_engine_reads_the_file_its_environment_names(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("GRIDRAIL_SPECS", raising=False)
    with pytest.raises(SpecError, match="set GRIDRAIL_SPECS"):
        SpecRegistry.from_environment()
    monkeypatch.setenv("GRIDRAIL_SPECS", str(tmp_path / "absent.toml"))
    with pytest.raises(SpecError, match="cannot read the spec file"):
        SpecRegistry.from_environment()
    assert issubclass(SpecError, gr.GridrailError)


def test_vllm_finds_the_plugin_among_its_general_plugins() -> None:
    (plugin,) = [e for e in entry_points(group="vllm.general_plugins") if e.name == "gridrail"]
    assert plugin.value == "gridrail.integrations.vllm:register"

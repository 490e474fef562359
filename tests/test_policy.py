"""Policy bundles (loading, validation, fingerprints) and role projections (L2)."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import gridrail as gr
from gridrail.errors import PolicyError
from gridrail.grammar.reduce import productive_nonterminals, reachable_nonterminals
from gridrail.policy.bundle import Policy
from gridrail.policy.constructs import ConstructCatalogue
from gridrail.policy.language import role_language
from gridrail.policy.projection import project
from gridrail.policy.role import Role

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@cache
def _sqlite() -> gr.Grammar:
    return gr.Grammar.bundled("sqlite")


@cache
def _catalogue() -> ConstructCatalogue:
    return ConstructCatalogue.for_grammar(_sqlite())


def test_example_policy_loads() -> None:
    policy = Policy.from_file(EXAMPLES / "hr_policy.toml")
    analyst = policy.role("analyst")
    assert analyst.statements == {"select"}
    assert analyst.banned == {"subqueries", "set_operations"}
    assert analyst.tables == {"employees", "employees_public", "orders"}
    assert analyst.columns["employees"].deny == {"salary"}
    assert analyst.columns["employees"].allow is None
    assert "count" in (analyst.functions or ())
    assert policy.role("auditor").tables is None and policy.role("auditor").functions is None
    assert analyst.line == 5


def test_fingerprint_ignores_layout_and_sees_content() -> None:
    text = (EXAMPLES / "hr_policy.toml").read_text()
    base = Policy.from_text(text).fingerprint
    relaid = "# a comment\n" + text.replace(" = ", "=")
    assert Policy.from_text(relaid).fingerprint == base
    changed = text.replace('deny = ["salary"]', 'deny = ["salary", "dept"]')
    assert Policy.from_text(changed).fingerprint != base


BAD_POLICIES = [
    ("", "defines no role"),
    ("[roles.a]\nstatements = ['select']\ncolour = 'red'\n", "unknown key 'colour'", 3),
    ("[roles.a]\nbanned = []\n", "lists no statement kinds"),
    ("[roles.a]\nstatements = []\n", "statements is empty", 2),
    ("[roles.a]\nstatements = ['select', 'drop']\n", "unknown statement kind 'drop'", 2),
    ("[roles.a]\nstatements = ['select']\nbanned = ['gotos']\n", "unknown construct 'gotos'", 3),
    ("[roles.a]\nstatements = ['select', 'select']\n", "lists 'select' twice", 2),
    ("[roles.a]\nstatements = ['select']\nfunctions = ['nosuch']\n", "no function 'nosuch'", 3),
    ("[roles.a]\nstatements = ['select']\ntables = []\n", "tables is empty", 3),
    (
        "[roles.a]\nstatements = ['select']\ntables = ['t']\n\n[roles.a.columns]\n"
        "t = { allow = ['x'], deny = ['y'] }\n",
        "both allow and deny",
        6,
    ),
    (
        "[roles.a]\nstatements = ['select']\ntables = ['t']\n\n[roles.a.columns]\n"
        "u = { deny = ['y'] }\n",
        "cannot see table 'u'",
        6,
    ),
    ("[roles.a]\nstatements = 'select'\n", "statements must be a list"),
    ("[roles.a\nstatements = ['select']\n", "not valid TOML", 1),
    ("title = 'x'\n[roles.a]\nstatements = ['select']\n", "unknown top-level key 'title'", 1),
    ("[roles.a]\nstatements = ['select']\nnames = 'tight'\n", "names must be one of", 3),
    ("[roles.a]\nstatements = ['select']\nnames = true\n", "'bound', 'open'", 3),
]


@pytest.mark.parametrize("case", BAD_POLICIES, ids=[c[1] for c in BAD_POLICIES])
def test_bad_policies_are_named_errors(case) -> None:
    text, message, *line = case
    with pytest.raises(PolicyError, match=message) as err:
        Policy.from_text(text, source="p.toml")
    if line:
        assert err.value.line == line[0], str(err.value)
        assert str(err.value).startswith(f"p.toml:{line[0]}: ")


def test_the_names_rung_is_read_and_fingerprinted_only_where_set() -> None:
    """`names` is the role's rung of the names ladder: read as written, part of the policy's
    fingerprint where a policy sets it, and absent from the fingerprints of policies that do
    not (archived logs name those)."""
    text = (EXAMPLES / "hr_policy.toml").read_text()
    base = Policy.from_text(text)
    assert all(role.names is None for role in base.roles.values())
    anchor = "[roles.analyst]\n"
    bound = Policy.from_text(text.replace(anchor, anchor + 'names = "bound"\n'))
    opened = Policy.from_text(text.replace(anchor, anchor + 'names = "open"\n'))
    assert bound.role("analyst").names == "bound" and opened.role("analyst").names == "open"
    assert len({base.fingerprint, bound.fingerprint, opened.fingerprint}) == 3
    assert base.fingerprint == "11501417dd0c5c7940bc853b027a52a1"  # as before rungs existed


def test_unknown_role_and_missing_file() -> None:
    policy = Policy.from_file(EXAMPLES / "hr_policy.toml")
    with pytest.raises(PolicyError, match=r"no role named 'intern'.*analyst, auditor, clerk"):
        policy.role("intern")
    with pytest.raises(PolicyError, match="cannot read the policy file"):
        Policy.from_file(EXAMPLES / "no_such_policy.toml")


# -- role projection (L2) ---------------------------------------------------------------------


def _role(statements, banned=()) -> Role:
    return Role("r", frozenset(statements), frozenset(banned))


def test_read_only_role_cannot_write() -> None:
    grammar = project(_sqlite(), _catalogue(), _role({"select"}, {"subqueries"}))
    oracle = gr.Oracle(gr.compile_grammar(grammar))
    assert oracle.accepts(b"select a from t where b > 1;")
    for statement in (b"delete from t;", b"insert into t values (1);", b"update t set a = 1;"):
        assert oracle.first_error(statement) == 0, statement
    # `select` could still start a table name until the byte that ends the keyword
    assert oracle.first_error(b"select a from (select 1);") == len(b"select a from (select")
    assert oracle.first_error(b"select exists (select 1);") is not None
    # the terminal numbering is L1's
    assert [t.name for t in grammar.terminals] == [t.name for t in _sqlite().terminals]


def test_projection_keeps_what_is_not_banned() -> None:
    grammar = project(_sqlite(), _catalogue(), _role({"select", "delete"}, {"joins"}))
    oracle = gr.Oracle(gr.compile_grammar(grammar))
    assert oracle.accepts(b"delete from t where a in (select b from u);")
    assert oracle.accepts(b"with x as (select 1) select * from x;")
    assert not oracle.accepts(b"select * from t join u on t.a = u.a;")
    assert not oracle.accepts(b"select * from t, u;")  # the comma join is a join too


def test_a_role_with_an_empty_language_is_rejected_by_name() -> None:
    # a catalogue that can ban every select core (both SELECT ... and VALUES ...)
    catalogue = ConstructCatalogue.from_text(
        'dialect = "sqlite"\n[statements]\nselect = ["statement: select_stmt"]\n'
        'write = ["statement: insert_stmt", "statement: update_stmt", "statement: delete_stmt"]\n'
        '[constructs]\ncores = ["select_core", "values_clause"]\n',
        _sqlite(),
        "test.constructs.toml",
    )
    role = Role("nobody", frozenset({"select"}), frozenset({"cores"}), line=7)
    with pytest.raises(PolicyError, match="role 'nobody' can say nothing") as err:
        project(_sqlite(), catalogue, role)
    assert err.value.line == 7


def test_catalogue_selectors_must_match() -> None:
    with pytest.raises(PolicyError, match="matches no production"):
        ConstructCatalogue.from_text('[constructs]\nx = ["-> no_such_alias"]\n', _sqlite(), "c")


@given(
    statements=st.sets(st.sampled_from(sorted(_catalogue().statements)), min_size=1),
    banned=st.sets(st.sampled_from(sorted(_catalogue().constructs))),
)
def test_projections_are_reduced_and_deterministic(statements, banned) -> None:
    role = _role(statements, banned)
    grammar = project(_sqlite(), _catalogue(), role)
    productive = productive_nonterminals(grammar)
    reachable = reachable_nonterminals(grammar.start, grammar.productions, grammar.is_terminal)
    for p in grammar.productions:
        assert p.lhs in productive and p.lhs in reachable
        assert all(grammar.is_terminal(s) or s in productive for s in p.rhs)
    assert project(_sqlite(), _catalogue(), role).fingerprint == grammar.fingerprint


def test_an_engine_without_a_function_takes_only_that_functions_productions() -> None:
    """Regression (session 30): the productions of a function the grammar spells as a keyword
    and the schema's engine lacks were picked by the dialect grammar's numbering in a role's
    projection, which numbers its own productions afresh — roles kept `x REGEXP y` (SQLite: "no
    such function: REGEXP" at prepare) and lost others: CAST, FOLLOWING frame bounds, signed
    numbers."""
    grammar = gr.Grammar.bundled("sqlite")
    catalogue = ConstructCatalogue.bundled("sqlite", grammar)
    policy = Policy.from_file(EXAMPLES / "hr_policy.toml")
    schema = gr.Schema.from_sqlite(EXAMPLES / "hr.sqlite")
    assert schema.functions is not None and "regexp" not in schema.functions
    silent = replace(schema, functions=None)  # an engine that does not say what it has
    function_terminals = set(catalogue.function_terminals)

    def productions(schema: gr.Schema) -> set[tuple[str, tuple[str, ...]]]:
        language = role_language(grammar, policy, role, schema=schema)[0]
        return {(p.lhs, p.rhs) for p in language.productions}

    for role in policy.roles:
        every, kept = productions(silent), productions(schema)
        lost = every - kept
        assert kept <= every and not any("REGEXP" in rhs for _, rhs in kept), role
        # what goes: REGEXP, and calls of the functions the engine lacks (a function lexicon)
        assert all(rhs == ("REGEXP",) or function_terminals & set(rhs) for _, rhs in lost), lost

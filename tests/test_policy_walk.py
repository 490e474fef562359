"""The walk arm under policy: seeded uniform sampling from the masks of each role over real
schemas (a Spider SQLite database, a PostgreSQL database). Every output must parse under the
role's language, be a statement kind the role has, and name only tables, columns and functions
in the role's lexicons — judged on the parse tree with the dialect's name rules, not by the
scanner that built the masks."""

from __future__ import annotations

import random
from functools import cache

import pytest

import gridrail as gr
from gridrail.parse.tree import parse_tree
from gridrail.policy.bundle import Policy
from gridrail.policy.schema import Schema
from gridrail.policy.view import SchemaView
from test_policy_speller import EXAMPLES, _hr_1
from test_walk_arm import _SQL_WORDS, generate

GENERATIONS_PER_ROLE = 300
# the function terminals (one per call shape) of the bundled grammar's catalogue
FUNCTION_TERMINALS = frozenset(
    gr.ConstructCatalogue.for_grammar(gr.Grammar.bundled("sqlite")).function_terminals
)
STATEMENT_KINDS = {
    "select_stmt": "select",
    "insert_stmt": "insert",
    "update_stmt": "update",
    "delete_stmt": "delete",
}


@cache
def _sqlite() -> gr.Grammar:
    return gr.Grammar.bundled("sqlite")


def _vocabulary(schema: Schema, functions: list[str]) -> gr.Vocabulary:
    """A SQL model's kind of tokens: keywords, punctuation, and the schema's names with and
    without a leading space; plus every byte (so comments stay possible, only rarer)."""
    names = [t.name for t in schema.tables] + [c.name for t in schema.tables for c in t.columns]
    sql = [w for w in _SQL_WORDS if "--" not in w and "/*" not in w]  # names, not comments
    words = [*sql, *names, *(f + "(" for f in functions)]
    spellings = {bytes((b,)) for b in range(256)}
    for word in words:
        spellings.update({word.encode(), b" " + word.encode()})
    ordered = sorted(spellings)
    return gr.Vocabulary([*ordered, None], eos_token_ids=len(ordered))


def _check_output(view: SchemaView, tree: gr.parse.tree.Tree) -> list[str]:
    """What in a parsed output is outside the role's lexicons or statement kinds."""
    rules, role = view.schema.rules, view.role
    assert role is not None
    problems = []
    statement = tree.children[0]
    kind = STATEMENT_KINDS.get(statement.label, "select")
    if kind not in role.statements:
        problems.append(f"statement kind {kind}")
    tables = view.tables
    columns = [c for t in tables for c in view.columns(t)]
    for token in tree.tokens():
        if token.terminal == "TABLE_NAME" and not any(
            rules.denotes(token.text, t.name) for t in tables
        ):
            problems.append(f"table {token.text}")
        elif token.terminal == "COLUMN_NAME" and not any(
            rules.denotes(token.text, c.name) for c in columns
        ):
            problems.append(f"column {token.text}")
        elif token.terminal in FUNCTION_TERMINALS:
            name = token.text.rstrip("(").strip().lower()
            if not view.may_call(name):
                problems.append(f"function {name}")
    return problems


def _walk(schema: Schema, policy: Policy, role: str, seed: int) -> int:
    view = SchemaView(schema, policy.role(role))
    functions = ["count", "avg", "max", "sum", "length", "lower"]
    guide = gr.compile(
        _sqlite(), _vocabulary(schema, functions), schema=schema, policy=policy, role=role
    )
    rng = random.Random(seed)
    spelled = [guide.vocab.token_bytes(i) or b"" for i in range(guide.vocab.size)]
    words = {i for i, s in enumerate(spelled) if len(s) > 2 and s.startswith(b" ")}

    def prefer_words(allowed: list[int]) -> int:
        """Mostly whole words after a space (names, keywords), so that outputs are full of
        names to judge instead of one long glued identifier; sometimes any allowed token."""
        whole = [t for t in allowed if t in words]
        return rng.choice(whole if whole and rng.random() < 0.97 else allowed)

    reserve = len(guide.matcher().completion())
    names = 0
    for n in range(GENERATIONS_PER_ROLE):
        budget = reserve if n % 10 == 0 else rng.randint(reserve, reserve + 30)
        gen = generate(guide, rng, budget, choose=prefer_words)
        assert len(gen.tokens) <= budget and guide.is_eos(gen.tokens[-1])
        text = b"".join(guide.vocab.token_bytes(t) for t in gen.tokens[:-1])
        assert guide.oracle.accepts(text), text
        tree = parse_tree(guide.compiled, text)
        assert not _check_output(view, tree), (text, _check_output(view, tree))
        names += sum(
            t.terminal in {"TABLE_NAME", "COLUMN_NAME", *FUNCTION_TERMINALS} for t in tree.tokens()
        )
    return names


@pytest.mark.parametrize("role", ["analyst", "hr_clerk", "auditor"])
def test_walk_arm_under_roles_on_spider_hr_1(role: str) -> None:
    schema, policy, _ = _hr_1()
    assert _walk(schema, policy, role, seed=11) > 0  # names were generated and judged


@pytest.mark.parametrize("role", ["analyst", "clerk", "auditor"])
def test_walk_arm_under_roles_on_postgres(role: str, postgres_hr_schema: Schema) -> None:
    policy = Policy.from_file(EXAMPLES / "hr_policy.toml")
    assert _walk(postgres_hr_schema, policy, role, seed=12) > 0

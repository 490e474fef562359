"""The language one caller may speak: L1 dialect grammar → L2 role projection → L3 schema
lexicons, reduced and proven non-empty (paper §2)."""

from __future__ import annotations

from dataclasses import replace

from gridrail.errors import GrammarError, PolicyError
from gridrail.grammar.model import Grammar
from gridrail.grammar.reduce import reduce_grammar
from gridrail.policy.bundle import Policy
from gridrail.policy.constructs import ConstructCatalogue
from gridrail.policy.lexicon import Lexicon, apply_lexicons, build_lexicons
from gridrail.policy.projection import project
from gridrail.policy.role import Role
from gridrail.policy.schema import Schema
from gridrail.policy.view import SchemaView


def select_role(policy: Policy | None, role: str | None) -> Role | None:
    """The role a guide is built for (a policy with a single role needs no name)."""
    if policy is None:
        if role is not None:
            raise PolicyError(f"role {role!r} given without a policy (pass policy=...)")
        return None
    if role is None:
        if len(policy.roles) != 1:
            raise PolicyError(
                f"the policy has {len(policy.roles)} roles; say which one (role=...): "
                + ", ".join(sorted(policy.roles)),
                source=policy.source,
            )
        return next(iter(policy.roles.values()))
    return policy.role(role)


def role_language(
    grammar: Grammar,
    policy: Policy | None = None,
    role: str | None = None,
    schema: Schema | None = None,
) -> tuple[Grammar, SchemaView | None, tuple[Lexicon, ...]]:
    """The reduced grammar of what `role` may say over `schema`, the view it was built from,
    and the lexicons it contains. Either input may be absent (no policy: every statement;
    no schema: identifiers are free)."""
    chosen = select_role(policy, role)
    catalogue = ConstructCatalogue.for_grammar(grammar) if chosen or schema else None
    language = grammar
    if chosen is not None:
        assert catalogue is not None and policy is not None
        if schema is not None:
            policy.check_against_schema(chosen, schema)
        language = project(language, catalogue, chosen)
    view = None
    lexicons: tuple[Lexicon, ...] = ()
    if schema is not None:
        assert catalogue is not None
        view = SchemaView(schema, chosen)
        lexicons = build_lexicons(grammar, catalogue, view)
        language = apply_lexicons(language, lexicons)
    name = grammar.name
    if chosen is not None:
        name += f" role={chosen.name}"
    if schema is not None:
        name += f" schema={schema.fingerprint[:12]}"
    try:
        return reduce_grammar(replace(language, name=name)), view, lexicons
    except GrammarError:
        who = f"role {chosen.name!r}" if chosen else "the grammar"
        raise PolicyError(
            f"{who} can say nothing over {schema.source if schema else 'this schema'}: "
            "no statement of its language uses only names it may see",
            chosen.line if chosen else 0,
            policy.source if policy else "<policy>",
        ) from None

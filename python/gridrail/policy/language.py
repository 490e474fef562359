"""The language one caller may speak: L1 dialect grammar → L2 role projection → L3 schema
lexicons, reduced and proven non-empty (paper §2).

Policy is never dropped for want of a schema: without one, the role's table and function lists
become lexicons of those names themselves (spelled by the catalogue's dialect rules), and what
only a catalog can judge — column rules, the tables a role may write — makes the build fail
with a PolicyError that says a schema is needed.
"""

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
from gridrail.policy.schema import Schema, Table
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
    catalogue: ConstructCatalogue | None = None,
) -> tuple[Grammar, SchemaView | None, tuple[Lexicon, ...]]:
    """The reduced grammar of what `role` may say over `schema`, the view it was built from,
    and the lexicons it contains. Either input may be absent (no policy: every statement;
    no schema: the role's own table and function lists are the names). `catalogue` (default:
    the grammar's own, for a bundled grammar) is the grammar's policy surface."""
    chosen = select_role(policy, role)
    language = grammar
    view = None
    lexicons: tuple[Lexicon, ...] = ()
    if chosen is not None or schema is not None:
        catalogue = ConstructCatalogue.resolve(grammar, catalogue)
        if chosen is not None:
            assert policy is not None
            policy.check_against_catalogue(chosen, catalogue)
            if schema is not None:
                policy.check_against_schema(chosen, schema)
            else:
                policy.check_without_schema(chosen, catalogue)
            language = project(language, catalogue, chosen)
        if schema is not None:
            view = SchemaView(schema, chosen)
            lexicons = build_lexicons(grammar, catalogue, view)
        else:
            assert chosen is not None
            lexicons = _own_name_lexicons(grammar, catalogue, chosen)
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
            f"{who} can say nothing over {schema.source if schema else 'its own names'}: "
            "no statement of its language uses only names it may see",
            chosen.line if chosen else 0,
            policy.source if policy else "<policy>",
        ) from None


def _own_name_lexicons(
    grammar: Grammar, catalogue: ConstructCatalogue, role: Role
) -> tuple[Lexicon, ...]:
    """Without a schema: the table lexicon spells the tables the role lists (a listed name the
    database lacks is merely unusable), the function lexicon the functions it lists; a role
    without a list keeps the category's L1 regex, and columns stay free (a role with column
    rules was refused)."""
    listed = tuple(Table(name, ()) for name in sorted(role.tables or ()))
    own = Schema(catalogue.dialect, listed, f"the names role {role.name!r} lists")
    categories = tuple(
        c
        for c in catalogue.lexicons
        if c.words == "functions" or (c.words == "tables" and role.tables is not None)
    )
    return build_lexicons(grammar, replace(catalogue, lexicons=categories), SchemaView(own, role))

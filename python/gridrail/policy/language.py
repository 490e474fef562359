"""The language one caller may speak: L1 dialect grammar → L2 role projection → L3 schema
lexicons → (optionally) a generation profile, reduced and proven non-empty (paper §2).

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
from gridrail.policy.lexicon import Lexicon, apply_lexicons, build_lexicons, with_declared_names
from gridrail.policy.profile import GenerationProfile, apply_profile
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
    profile: GenerationProfile | None = None,
    declared_names: bool = False,
) -> tuple[Grammar, SchemaView | None, tuple[Lexicon, ...]]:
    """The reduced grammar of what `role` may say over `schema`, the view it was built from,
    and the lexicons it contains. Either input may be absent (no policy: every statement;
    no schema: the role's own table and function lists are the names). `catalogue` (default:
    the grammar's own, for a bundled grammar) is the grammar's policy surface. With `profile`,
    the language is narrowed to what that generation profile lets a model write. With
    `declared_names` (a guide compiled with Γ, which alone may have it), the table and column
    lexicons also spell the names the statement declares (`with_declared_names`)."""
    chosen = select_role(policy, role)
    language = grammar
    view = None
    lexicons: tuple[Lexicon, ...] = ()
    if chosen is not None or schema is not None or profile is not None:
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
            language = _without_missing_functions(language, grammar, catalogue, schema)
        elif chosen is not None:
            lexicons = _own_name_lexicons(grammar, catalogue, chosen)
        language = apply_lexicons(language, lexicons)
    name = grammar.name
    if chosen is not None:
        name += f" role={chosen.name}"
    if schema is not None:
        name += f" schema={schema.fingerprint[:12]}"
    who = f"role {chosen.name!r}" if chosen else "the grammar"
    where = schema.source if schema else "its own names"
    try:
        language = reduce_grammar(replace(language, name=name))
    except GrammarError:
        raise _says_nothing(
            f"{who} can say nothing over {where}: no statement of its language uses only names "
            "it may see",
            chosen,
            policy,
        ) from None
    if profile is None:
        if declared_names:
            language = with_declared_names(language, grammar)
        return language, view, lexicons
    assert catalogue is not None  # resolved above: a profile is read off the catalogue
    profiled = apply_profile(language, catalogue, profile, lexicons)
    if declared_names:  # as the profile lets a model declare them
        profiled = with_declared_names(profiled, grammar)
    try:
        return reduce_grammar(replace(profiled, name=f"{name} {profile.label}")), view, lexicons
    except GrammarError:
        raise _says_nothing(
            f"{who} can say nothing over {where} under the generation {profile.label}: every "
            "statement of its language needs something a model may not write there (compile "
            "with profile=None for the whole language)",
            chosen,
            policy,
        ) from None


def _without_missing_functions(
    language: Grammar, grammar: Grammar, catalogue: ConstructCatalogue, schema: Schema
) -> Grammar:
    """`language` (a projection of `grammar`) without the productions of the functions the
    grammar spells as keywords (`CURRENT_DATE`, `REGEXP`) that the schema's engine lacks, where
    it says which it has. The catalogue numbers `grammar`'s productions and a projection
    renumbers its own, so they are matched by what they are (left and right sides)."""
    if schema.functions is None:
        return language
    missing = frozenset().union(
        *(p for f, p in catalogue.function_keywords.items() if f not in schema.functions)
    )
    dropped = {(p.lhs, p.rhs) for p in grammar.productions if p.index in missing}
    return replace(
        language,
        productions=tuple(p for p in language.productions if (p.lhs, p.rhs) not in dropped),
    )


def _says_nothing(what: str, role: Role | None, policy: Policy | None) -> PolicyError:
    return PolicyError(
        what,
        role.line if role else 0,
        policy.source if policy else "<policy>",
    )


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

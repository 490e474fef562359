"""Role projection (L2): the grammar of what one role may say.

Take the productions the role keeps (drop the statement kinds it does not list and the
constructs it bans), remove useless symbols, and prove the language is still non-empty. The
terminals — and so their numbering, frozen at L1 — are untouched: a projection only ever removes
productions, so the role's language is a subset of the dialect's and its tables share L1's
terminal indices.
"""

from __future__ import annotations

from dataclasses import replace

from gridrail.errors import GrammarError, PolicyError
from gridrail.grammar.model import Grammar
from gridrail.grammar.reduce import reduce_grammar
from gridrail.policy.constructs import ConstructCatalogue
from gridrail.policy.role import Role


def project(grammar: Grammar, catalogue: ConstructCatalogue, role: Role) -> Grammar:
    """The reduced grammar of `role`'s language; PolicyError if that language is empty."""
    dropped: set[int] = set()
    for kind, productions in catalogue.statements.items():
        if kind not in role.statements:
            dropped |= productions
    for construct in role.banned:
        dropped |= catalogue.constructs[construct]
    kept = tuple(p for p in grammar.productions if p.index not in dropped)
    subset = replace(grammar, productions=kept, name=f"{grammar.name}[role {role.name}]")
    try:
        return reduce_grammar(subset)
    except GrammarError:
        raise PolicyError(
            f"role {role.name!r} can say nothing: with statements {sorted(role.statements)} and "
            f"banned constructs {sorted(role.banned)} the grammar derives no sentence",
            role.line,
        ) from None

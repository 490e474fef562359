"""Role projection (L2): the grammar of what one role may say.

Take the productions the role keeps, remove useless symbols, and prove the language is still
non-empty. A role loses
  * every statement alternative no kind it holds selects: each production of the rule(s) the
    catalogue's statement kinds choose among (`statement` in sqlite) that is not a held kind's,
    so a statement the catalogue does not name (a `drop_stmt` added to the grammar) is never
    kept — projection fails closed;
  * the productions of the kinds it does not hold, and of the constructs it bans;
  * the productions of every capability whose required kinds it does not all hold (reading
    needs select; REPLACE conflict resolution needs delete and update).
The terminals — and so their numbering, frozen at L1 — are untouched: a projection only ever
removes productions, so the role's language is a subset of the dialect's and its tables share
L1's terminal indices.
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
    catalogue = ConstructCatalogue.resolve(grammar, catalogue)
    granted: set[int] = set()
    for kind in role.statements:
        granted |= catalogue.statements[kind]
    selected = set().union(*catalogue.statements.values())
    statement_rules = {p.lhs for p in grammar.productions if p.index in selected}
    dropped = {
        p.index
        for p in grammar.productions
        if (p.index in selected or p.lhs in statement_rules) and p.index not in granted
    }
    for construct in role.banned:
        dropped |= catalogue.constructs[construct]
    for capability in catalogue.capabilities.values():
        if not capability.requires <= role.statements:
            dropped |= capability.productions
    if role.functions is not None:  # SQLite calls CURRENT_DATE as the function current_date
        for function, productions in catalogue.function_keywords.items():
            if function not in role.functions:
                dropped |= productions
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

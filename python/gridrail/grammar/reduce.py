"""Useless-symbol elimination: keep only productive, reachable nonterminals.

Reducedness is load-bearing (paper §2 L2): in a reduced grammar every LR stack the parser can
reach has a completion, so "the parser has not failed" means "viable prefix" and masks have no
dead ends. Role projections (L2) call this after taking a production subset.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from gridrail.errors import GrammarError
from gridrail.grammar.model import Grammar, Production
from gridrail.lru import BoundedLRU


def reduce_grammar(grammar: Grammar) -> Grammar:
    """``grammar`` without unproductive, then unreachable, nonterminals' productions.

    A production is kept iff every symbol in it is productive and its lhs is reachable from the
    start symbol through kept productions. Terminals are kept and never renumbered; the kept
    productions keep their order and are renumbered 0..n-1, as ``build_lalr`` expects.
    Raises ``GrammarError`` if the start symbol is unproductive (the language is empty).
    """
    # The result reads the start symbol, the productions and which symbols are terminals, never
    # a terminal's lexemes: every schema of one role language shares it.
    key = (grammar.start, frozenset(t.name for t in grammar.terminals), grammar.productions)
    return replace(grammar, productions=_REDUCED.memo(key, lambda: _kept_productions(grammar)))


_REDUCED: BoundedLRU[tuple[Production, ...]] = BoundedLRU(capacity=64, capacity_bytes=1 << 62)


def _kept_productions(grammar: Grammar) -> tuple[Production, ...]:
    productive = productive_nonterminals(grammar)
    if grammar.start not in productive:
        raise empty_language(grammar)
    derives = productive | {t.name for t in grammar.terminals}  # symbols deriving a string
    productive_productions = [
        p for p in grammar.productions if p.lhs in productive and derives.issuperset(p.rhs)
    ]
    reachable = reachable_nonterminals(grammar.start, productive_productions, grammar.is_terminal)
    kept = [p for p in productive_productions if p.lhs in reachable]
    # (the constructor, not dataclasses.replace: a role's compile renumbers thousands of them)
    return tuple(
        Production(i, p.lhs, p.rhs, p.alias, p.origin, p.expand_single) for i, p in enumerate(kept)
    )


def empty_language(grammar: Grammar) -> GrammarError:
    return GrammarError(
        f"the language is empty: the start symbol {grammar.start!r} derives no terminal string",
        source=grammar.name,
    )


def productive_nonterminals(grammar: Grammar) -> set[str]:
    """Nonterminals that derive at least one terminal string: a production counts the distinct
    nonterminals of its right side not yet known productive, and its left side becomes
    productive when that count reaches 0 (one pass over the productions, not a fixed point)."""
    terminals = {t.name for t in grammar.terminals}
    waiting: dict[str, list[int]] = {}  # nonterminal -> productions whose rhs has it
    missing: list[int] = []
    found: list[str] = []
    for i, p in enumerate(grammar.productions):
        needs = {s for s in p.rhs if s not in terminals}
        missing.append(len(needs))
        for symbol in needs:
            waiting.setdefault(symbol, []).append(i)
        if not needs:
            found.append(p.lhs)
    productive: set[str] = set()
    while found:
        symbol = found.pop()
        if symbol in productive:
            continue
        productive.add(symbol)
        for i in waiting.get(symbol, ()):
            missing[i] -= 1
            if not missing[i]:
                found.append(grammar.productions[i].lhs)
    return productive


def reachable_nonterminals(
    start: str, productions: Iterable[Production], is_terminal: Callable[[str], bool]
) -> set[str]:
    """Nonterminals that occur in some sentential form derived from ``start``."""
    successors: dict[str, list[str]] = {}
    for p in productions:
        successors.setdefault(p.lhs, []).extend(s for s in p.rhs if not is_terminal(s))
    reachable = {start}
    pending = [start]
    while pending:
        for symbol in successors.get(pending.pop(), ()):
            if symbol not in reachable:
                reachable.add(symbol)
                pending.append(symbol)
    return reachable

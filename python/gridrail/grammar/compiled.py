"""A grammar compiled for the oracle: reduced grammar, LALR(1) tables, union scanner."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from gridrail.grammar.lalr import LalrTables, build_lalr
from gridrail.grammar.model import Grammar
from gridrail.grammar.reduce import reduce_grammar
from gridrail.grammar.scanner import ScannerAutomaton, build_scanner
from gridrail.lru import BoundedLRU

# LALR tables read the start symbol, the productions and the terminals' names and numbers,
# never the terminals' lexemes: every schema of one role language shares them (a new schema
# pays its scanner, not its tables). Bounded by count; the newest is always kept.
_TABLES: BoundedLRU[LalrTables] = BoundedLRU(capacity=16, capacity_bytes=1 << 62)


@dataclass(frozen=True)
class CompiledGrammar:
    grammar: Grammar  # reduced: every nonterminal productive and reachable
    tables: LalrTables
    scanner: ScannerAutomaton

    @cached_property
    def ignored_mask(self) -> int:
        return sum(1 << self.grammar.terminal(name).index for name in self.grammar.ignored)

    @cached_property
    def classes(self) -> tuple[tuple[int, bool], ...]:
        """Per terminal index, its shadowing class (priority, is_literal): docs/semantics.md."""
        return tuple((t.priority, t.is_literal) for t in self.grammar.terminals)

    def winner(self, candidates: int, allowed: int) -> int:
        """The terminal a finished lexeme becomes: the lowest index of the top class among
        `candidates` that is also in `allowed` (bit masks); -1 if the top class has none."""
        both = self.top_class(candidates) & allowed
        return (both & -both).bit_length() - 1

    def top_class(self, candidates: int) -> int:
        """The members of `candidates` (a bit mask) in their top shadowing class, as a bit
        mask (0 for none)."""
        known = self._top_classes
        top = known.get(candidates)
        if top is None:
            top = known[candidates] = self._top_class(candidates)
        return top

    @cached_property
    def _top_classes(self) -> dict[int, int]:
        # candidates are a scanner state's accept set: a scanner of 16,000 states (a catalog
        # of 1,000 tables) has a few dozen distinct ones, each worked out once
        return {}

    def _top_class(self, candidates: int) -> int:
        classes = self.classes
        members = [i for i in range(len(classes)) if (candidates >> i) & 1]
        if not members:
            return 0
        top = max(classes[i] for i in members)
        return sum(1 << i for i in members if classes[i] == top)

    @cached_property
    def terminal_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.grammar.terminals)

    def names_of(self, mask: int) -> tuple[str, ...]:
        names = self.terminal_names
        return tuple(names[i] for i in range(len(names)) if (mask >> i) & 1)

    @property
    def fingerprint(self) -> str:
        """The grammar's fingerprint: tables and scanner are functions of it."""
        return self.grammar.fingerprint


def compile_grammar(grammar: Grammar) -> CompiledGrammar:
    """Reduce, build LALR(1) tables (GrammarConflict if not LALR(1)) and the union scanner."""
    reduced = reduce_grammar(grammar)
    tables = _lalr_tables(reduced)
    scannable = [t for t in reduced.terminals if t.name not in reduced.declared]
    scanner = build_scanner(scannable)
    return CompiledGrammar(reduced, tables, scanner)


def _lalr_tables(grammar: Grammar) -> LalrTables:
    """`build_lalr(grammar)`, shared by grammars that differ only in their terminals' lexemes."""
    key = (
        grammar.start,
        tuple((t.index, t.name) for t in grammar.terminals),
        tuple((p.lhs, p.rhs) for p in grammar.productions),
    )
    return _TABLES.memo(key, lambda: build_lalr(grammar))

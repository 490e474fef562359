"""Terminals whose lexemes are a finite set of names: the schema lexicons (L3), kept as words
rather than compiled into a regex (paper §2 L3, §4.1).

A `NameSet` is what a terminal may spell from its names: each spelling exactly, or with ASCII
case ignored, followed by a fixed suffix regex (FUNCTION_NAME's `(`, a qualifier's dot), plus
optionally the terminal's other lexemes as a small regex (`rest`: a qualifier that is an
alias). Its `pattern` is the same language as Python regex text — the grammar's definition, what
fingerprints, archives and error messages see — but the scanner never compiles that text: it
builds the name automaton below (a trie per case mode, then the suffix's DFA), which takes time
linear in the spellings instead of a regex compilation whose automata grow with every name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from gridrail import kernels
from gridrail.canonical import fingerprint_of
from gridrail.grammar.dfa import ByteDFA, compile_regex, shortest_outside

if TYPE_CHECKING:
    from gridrail._kernels import NameAutomaton as NameAutomatonKernel

NAMES_ENCODING = "gridrail-names-v1"  # bump when `as_json` changes meaning


@dataclass(frozen=True, eq=False)
class NameSet:
    """The lexemes (exclusion)(?:name | rest)(suffix): `exact` spellings byte for byte,
    `folded` ones (stored lower-case) with ASCII case ignored, `rest` a regex for the other
    lexemes ("" for none), all followed by `suffix`. `exclusion` is the terminal's leading
    ``(?!...)``: it applies to `rest`; every spelling must already pass it (the builder checks
    the spellings against the terminal's former language, which holds the exclusion). Equal
    name sets have equal fingerprints (equality and hashing use it)."""

    exact: tuple[str, ...] = ()
    folded: tuple[str, ...] = ()
    suffix: str = ""
    rest: str = ""
    exclusion: str = ""

    def __post_init__(self) -> None:
        # Sorted and distinct, so that equal sets have one text (and one fingerprint).
        object.__setattr__(self, "exact", distinct_spellings(self.exact, fold=False))
        object.__setattr__(self, "folded", distinct_spellings(self.folded, fold=True))

    def __bool__(self) -> bool:
        return bool(self.exact or self.folded or self.rest)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NameSet) and self.fingerprint == other.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    @property
    def spellings(self) -> int:
        return len(self.exact) + len(self.folded)

    @cached_property
    def pattern(self) -> str:
        """The same language as regex text (flags "")."""
        if kernels.KERNELS_ENABLED:
            names = kernels.literal_alternation(self.exact, self.folded)
        else:
            names = "|".join(self.literal_options())
        options = [names] if self.spellings else []
        if self.rest:
            options.append(f"(?:{self.rest})")
        if not options:
            return ""
        return f"{self.exclusion}(?:{'|'.join(options)}){self.suffix}"

    def literal_options(self) -> list[str]:
        """Each spelling as a regex matching it alone: the reference of the Rust kernel
        ``literal_alternation``."""
        options = [_literal(s, fold=False) for s in self.exact]
        return options + [_literal(s, fold=True) for s in self.folded]

    @cached_property
    def rest_pattern(self) -> str:
        """The regex of the lexemes not spelled from a name ("" for none): the part a regex
        scanner builds."""
        return f"{self.exclusion}(?:{self.rest}){self.suffix}" if self.rest else ""

    @cached_property
    def fingerprint(self) -> str:
        return fingerprint_of([NAMES_ENCODING, self.as_json()], sort_keys=False)

    def as_json(self) -> dict[str, object]:
        return {
            "exact": list(self.exact),
            "folded": list(self.folded),
            "suffix": self.suffix,
            "rest": self.rest,
            "exclusion": self.exclusion,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> NameSet:
        """The name set `as_json` wrote (TypeError/KeyError on another shape)."""
        exact, folded = doc["exact"], doc["folded"]
        texts = (doc["suffix"], doc["rest"], doc["exclusion"])
        if not isinstance(exact, list) or not isinstance(folded, list):
            raise TypeError("name set spellings must be lists")
        if not all(isinstance(s, str) for s in (*exact, *folded, *texts)):
            raise TypeError("name set fields must be strings")
        suffix, rest, exclusion = texts
        return cls(tuple(exact), tuple(folded), suffix, rest, exclusion)  # type: ignore[arg-type]

    @cached_property
    def suffix_dfa(self) -> ByteDFA | None:
        """The suffix's automaton (None: no suffix)."""
        return compile_regex(self.suffix) if self.suffix else None

    @cached_property
    def automaton(self) -> NameAutomaton:
        """The spellings and suffix as an automaton (built once, on first use)."""
        return NameAutomaton.of(self)

    @cached_property
    def kernel_automaton(self) -> NameAutomatonKernel:
        """`automaton` in Rust (only with the kernels): built once for the W ⊆ R check and
        the scanner's rows alike."""
        return kernels.name_automaton(self)

    def outside(self, dfa: ByteDFA) -> str | None:
        """A name-spelled lexeme (`rest` aside) that `dfa` rejects, None if every one is in its
        language: the W ⊆ R check of a lexicon, in time linear in the spellings (the Rust
        kernel when enabled, else the reference `NameAutomaton.outside`)."""
        if kernels.KERNELS_ENABLED:
            return kernels.names_outside(self, dfa)
        return self.automaton.outside(dfa)


@dataclass(frozen=True)
class NameAutomaton:
    """The spellings of one name set as positions of a small NFA: trie nodes (each with its
    byte moves, both cases of a letter for the folded trie) and the suffix DFA's states. A
    position's `closure` adds the suffix's start after a whole spelling; positions are
    deterministic, so a set of them is a state of the subset construction."""

    moves: tuple[dict[int, int], ...]
    closure: tuple[tuple[int, ...], ...]
    accepting: tuple[bool, ...]
    start: frozenset[int]

    @classmethod
    def of(cls, names: NameSet) -> NameAutomaton:
        moves: list[dict[int, int]] = []
        ends: list[bool] = []
        suffix = names.suffix_dfa
        roots = []
        for spellings, fold in ((names.exact, False), (names.folded, True)):
            if not spellings:
                continue
            root = len(moves)
            roots.append(root)
            moves.append({})
            ends.append(False)
            for spelling in spellings:
                node = root
                for byte in spelling.encode("utf-8"):
                    child = moves[node].get(byte)
                    if child is None:
                        child = len(moves)
                        moves.append({})
                        ends.append(False)
                        moves[node][byte] = child
                        if fold and 0x61 <= byte <= 0x7A:
                            moves[node][byte - 0x20] = child
                    node = child
                ends[node] = True
        moves, ends, roots = _merged(moves, ends, roots)
        trie_size = len(moves)
        accepting = [False] * trie_size
        closure: list[tuple[int, ...]] = [(p,) for p in range(trie_size)]
        if suffix is None:
            accepting = ends
        elif suffix.start >= 0:
            table = suffix.transitions
            for q in range(suffix.num_states):
                row = q << 8
                moves.append({b: trie_size + t for b in range(256) if (t := table[row | b]) >= 0})
                accepting.append(suffix.accepting[q])
                closure.append((trie_size + q,))
            begin = trie_size + suffix.start
            for p in range(trie_size):
                if ends[p]:
                    closure[p] = (p, begin)
        start = frozenset(q for root in roots for q in closure[root])
        return cls(tuple(moves), tuple(closure), tuple(accepting), start)

    def successors(self, positions: frozenset[int]) -> dict[int, frozenset[int]]:
        """Per byte that moves some position, the positions after it (in byte order)."""
        after: dict[int, set[int]] = {}
        for p in positions:
            for byte, target in self.moves[p].items():
                after.setdefault(byte, set()).update(self.closure[target])
        return {byte: frozenset(after[byte]) for byte in sorted(after)}

    def accepts(self, positions: frozenset[int]) -> bool:
        return any(self.accepting[p] for p in positions)

    def outside(self, dfa: ByteDFA) -> str | None:
        """A shortest accepted string that `dfa` rejects (None: inclusion holds)."""

        def moves(p: int) -> Iterable[tuple[int, int]]:
            return ((b, p2) for b, t in self.moves[p].items() for p2 in self.closure[t])

        return shortest_outside(sorted(self.start), moves, self.accepting, dfa)


def _merged(
    moves: list[dict[int, int]], ends: list[bool], roots: list[int]
) -> tuple[list[dict[int, int]], list[bool], list[int]]:
    """The trie with equivalent nodes merged — the same end flag and the same moves to merged
    nodes — so that spellings share their endings as they share their beginnings (`_id`, `_7`,
    a closing quote): the minimal acyclic automaton, in time linear in the trie. The spellings
    were inserted sorted, so every node's moves are in one byte order (a folded letter's two
    cases together), and equal nodes have equal signatures. Children are
    numbered after their parents, so one pass from the last node up finds every class; the
    classes are then numbered in the order their first node appears (deterministic)."""
    classes: dict[tuple[object, ...], int] = {}
    class_of = [0] * len(moves)
    for node in range(len(moves) - 1, -1, -1):
        # children were added in byte order (sorted spellings), so items() needs no sort
        signature = (ends[node], *((b, class_of[c]) for b, c in moves[node].items()))
        class_of[node] = classes.setdefault(signature, len(classes))
    number: dict[int, int] = {}
    first: list[int] = []
    for node, cls in enumerate(class_of):
        if cls not in number:
            number[cls] = len(first)
            first.append(node)
    merged = [{b: number[class_of[c]] for b, c in moves[node].items()} for node in first]
    return merged, [ends[node] for node in first], [number[class_of[r]] for r in roots]


def ascii_lower(text: str) -> str:
    """ASCII letters lower-cased, others as they are: how folded spellings are stored, and how
    SQLite and PostgreSQL fold names (`gridrail.policy.dialect`). str.lower is that on ASCII
    text, and far faster than a translation table."""
    return text.lower() if text.isascii() else text.translate(_ASCII_UPPER)


def distinct_spellings(texts: Sequence[str], fold: bool) -> tuple[str, ...]:
    """`texts` (ASCII letters lower-cased if `fold`) sorted, each once: a name set's field. The
    Rust kernel where enabled (a catalog's tens of thousands of spellings, made in a few sorted
    batches: it sorts their runs and keeps the str objects), else this reference."""
    if kernels.KERNELS_ENABLED:
        done = kernels.distinct_spellings(texts, fold)
        if done is not None:
            return done
    # sorted first: spellings made from sorted words come as a few sorted runs, which sort fast
    return tuple(dict.fromkeys(sorted(ascii_lower_all(texts) if fold else texts)))


def ascii_lower_all(texts: Sequence[str]) -> list[str]:
    """`ascii_lower` of each text: one lower-casing of their joined text where all are ASCII
    and none holds the separator (a catalog's names are tens of thousands of short strings)."""
    if not texts:
        return []
    joined = "\0".join(texts)
    if joined.isascii() and joined.count("\0") == len(texts) - 1:
        return joined.lower().split("\0")
    return [ascii_lower(text) for text in texts]


def _literal(text: str, fold: bool) -> str:
    """`text` as a regex matching it exactly (ASCII letters either case if `fold`)."""
    return text.translate(_FOLDED if fold else _EXACT)


# Upper-case ASCII letters to lower-case ones (ascii_lower beyond ASCII text).
_ASCII_UPPER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}
# ASCII punctuation and controls as \xNN escapes; with folding, each letter as [xX].
_EXACT = {c: f"\\x{c:02x}" for c in range(128) if not chr(c).isalnum()}
_FOLDED = _EXACT | {
    c: f"[{chr(c).lower()}{chr(c).upper()}]" for c in range(128) if chr(c).isalpha()
}

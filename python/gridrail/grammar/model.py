"""The grammar model: what a loaded grammar *is*, independent of the syntax it was written in.

Terminal numbering is frozen here (definition order after loading) and never changes afterwards:
role projections subset productions but keep these indices.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, replace

from gridrail.canonical import canonical_json, fingerprint_of
from gridrail.errors import GrammarError
from gridrail.grammar.names import NameSet
from gridrail.grammar.regex_syntax import REGEX_SEMANTICS


@dataclass(frozen=True)
class TerminalDef:
    """One terminal: a regular lexeme language over bytes.

    ``pattern`` is Python regex syntax (string literals are stored escaped), ``flags`` a sorted
    string of single-letter flags (only ``"i"`` today). ``is_literal`` records that the terminal
    came from a string literal: on a tie in priority, literals win over regex terminals.
    ``names`` is set for a terminal whose lexemes are spelled from names (a schema lexicon):
    ``pattern`` is then its name set's regex text, and the scanner builds the names as a trie
    instead of compiling that text (`gridrail.grammar.names`).
    """

    name: str
    index: int
    pattern: str
    flags: str
    priority: int
    is_literal: bool
    names: NameSet | None = None

    def __post_init__(self) -> None:
        if self.names is not None and (self.flags or self.pattern != self.names.pattern):
            raise GrammarError(
                f"terminal {self.name}: its pattern is not the regex of its name set "
                "(replace both together)"
            )

    def row(self) -> list[object]:
        """The terminal as canonical JSON data."""
        out: list[object] = [
            self.index,
            self.name,
            self.pattern,
            self.flags,
            self.priority,
            self.is_literal,
        ]
        if self.names is not None:
            out.append(self.names.as_json())
        return out


@dataclass(frozen=True)
class Production:
    """``lhs -> rhs``; ``rhs`` holds symbol names (terminals are named as in ``Grammar.terminals``).

    ``alias`` is the ``-> name`` alias if any; ``origin`` the user-visible rule this production
    was expanded from (EBNF helpers and inlined ``?rule``s point back to their source rule).
    """

    index: int
    lhs: str
    rhs: tuple[str, ...]
    alias: str | None
    origin: str
    expand_single: bool = False  # from `?rule`: shapes trees only, not the language


@dataclass(frozen=True)
class StackBound:
    """How deep the dialect's own parser lets a statement nest: its parser stack has room for
    so many entries (SQLite: 100, "parser stack overflow" past them), so its language holds
    only the sentences whose parse fits.

    Gridrail's LR stack stands in for the dialect parser's: an entry weighs what its symbol costs
    that parser — a terminal listed in `weights` that many entries (a function name lexed with
    its "(" is three of SQLite's: the name, the "(" and an empty DISTINCT), every other entry
    one (a rule's too: a reduction never makes a stack heavier, which `gridrail.parse.depth`
    relies on). A sentence is in the language when no stack of its parse, after a shift,
    weighs more than `limit` (`gridrail.parse.depth`, docs/semantics.md)."""

    limit: int
    weights: tuple[tuple[str, int], ...] = ()  # (terminal name, weight), sorted by name

    def __post_init__(self) -> None:
        if type(self.limit) is not int or self.limit < 1:
            raise GrammarError(f"a stack bound's limit must be an int >= 1: {self.limit!r}")
        for name, weight in self.weights:
            if not isinstance(name, str) or type(weight) is not int or weight < 1:
                raise GrammarError(
                    f"a stack bound's weights are terminal names with ints >= 1: "
                    f"{name!r} = {weight!r}"
                )
        object.__setattr__(self, "weights", tuple(sorted(self.weights)))

    def as_json(self) -> list[object]:
        return [self.limit, [[name, weight] for name, weight in self.weights]]


@dataclass(frozen=True)
class Grammar:
    """A context-free grammar whose terminals carry byte-level regular languages."""

    terminals: tuple[TerminalDef, ...]
    ignored: frozenset[str]
    productions: tuple[Production, ...]
    start: str
    name: str = "<grammar>"
    declared: frozenset[str] = frozenset()  # %declare'd terminals: no lexeme, never scanned
    stack_bound: StackBound | None = None  # None: nesting is not bounded

    def __post_init__(self) -> None:
        if self.stack_bound is not None:
            names = {t.name for t in self.terminals}
            unknown = [name for name, _ in self.stack_bound.weights if name not in names]
            if unknown:
                raise GrammarError(
                    f"the stack bound weighs terminals the grammar does not have: "
                    f"{', '.join(unknown[:5])}",
                    source=self.name,
                )

    @classmethod
    def from_lark(cls, text: str, source: str = "<grammar>", start: str = "start") -> Grammar:
        """Load Lark grammar text (the supported subset: see grammar/lark_syntax.py)."""
        from gridrail.grammar.loader import load_grammar

        return load_grammar(text, source, start)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], start: str = "start") -> Grammar:
        """Load a Lark grammar file (UTF-8 text); OSError if it cannot be read."""
        with open(path, "rb") as f:
            data = f.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            raise GrammarError(
                f"the grammar file is not UTF-8 text ({exc.reason} at byte {exc.start})",
                line,
                exc.start - data.rfind(b"\n", 0, exc.start),
                os.fspath(path),
            ) from None
        return cls.from_lark(text, os.fspath(path), start)

    @classmethod
    def bundled(cls, name: str) -> Grammar:
        """A grammar shipped with gridrail, by dialect name (see `bundled_names()`)."""
        from gridrail.grammar.loader import bundled_grammar_text, bundled_stack_bound

        grammar = cls.from_lark(bundled_grammar_text(name), f"{name}.lark")
        bound = bundled_stack_bound(name)
        return grammar if bound is None else replace(grammar, stack_bound=bound)

    @classmethod
    def resolve(cls, name_or_path: str) -> Grammar:
        """A bundled dialect name, or else a path to a .lark file."""
        from gridrail.grammar.loader import bundled_names

        if name_or_path in bundled_names():
            return cls.bundled(name_or_path)
        if os.path.exists(name_or_path):
            return cls.from_file(name_or_path)
        raise GrammarError(
            f"no bundled grammar named {name_or_path!r} and no such file "
            f"(bundled: {', '.join(bundled_names())})"
        )

    @classmethod
    def from_canonical(cls, text: str, name: str = "<grammar>") -> Grammar:
        """The grammar whose `canonical_form()` is `text` (an archived language: everything that
        defines it, not the tree-shaping details, which masks never read).

        GrammarError when `text` is not such a form (not JSON, or JSON of another shape)."""
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, too deep, too long
            raise GrammarError(
                f"not a canonical grammar: not JSON it can read ({exc})", source=name
            ) from None
        if not isinstance(doc, dict):
            raise GrammarError(
                f"not a canonical grammar: a JSON {type(doc).__name__}, not an object", source=name
            )
        if doc.get("regex_semantics") != REGEX_SEMANTICS:
            raise GrammarError(
                f"the grammar was recorded under regex semantics "
                f"{doc.get('regex_semantics', 'python-re-unicode (before the ASCII rule)')!r}; "
                f"this gridrail reads terminals as {REGEX_SEMANTICS!r}, which may define "
                "another language",
                source=name,
            )
        try:
            terminals = tuple(_terminal(row) for row in doc["terminals"])
            productions = tuple(
                Production(i, lhs, tuple(rhs), alias, lhs)
                for i, (lhs, rhs, alias) in enumerate(doc["productions"])
            )
            grammar = cls(
                terminals,
                frozenset(doc["ignored"]),
                productions,
                doc["start"],
                name,
                frozenset(doc["declared"]),
            )
            bound = doc.get("stack_bound")
            # what the fields hold is read as text: any other type is another document
            texts = [grammar.start, *grammar.ignored, *grammar.declared]
            texts += [text for t in terminals for text in (t.name, t.pattern, t.flags)]
            texts += [symbol for p in productions for symbol in (p.lhs, *p.rhs)]
            numbers = [number for t in terminals for number in (t.index, t.priority)]
        except (KeyError, TypeError, ValueError) as exc:
            raise GrammarError(f"not a canonical grammar: {exc!r:.200}", source=name) from None
        if not all(isinstance(text, str) for text in texts) or not all(
            type(number) is int for number in numbers
        ):
            raise GrammarError(
                "not a canonical grammar: a name, pattern or number has the wrong type",
                source=name,
            )
        if bound is None:
            return grammar
        try:
            limit, weights = bound
            bound = StackBound(limit, tuple((symbol, weight) for symbol, weight in weights))
            return replace(grammar, stack_bound=bound)
        except (TypeError, ValueError) as exc:
            raise GrammarError(f"not a canonical grammar: {exc!r:.200}", source=name) from None
        except GrammarError as exc:  # a bound of the wrong values
            raise GrammarError(f"not a canonical grammar: {exc.message}", source=name) from None

    def terminal(self, name: str) -> TerminalDef:
        return self._terminals_by_name[name]

    @property
    def _terminals_by_name(self) -> dict[str, TerminalDef]:
        cache = self.__dict__.get("_by_name")
        if cache is None:
            cache = {t.name: t for t in self.terminals}
            object.__setattr__(self, "_by_name", cache)
        return cache

    def shadowing(self, terminal: TerminalDef) -> tuple[TerminalDef, ...]:
        """The scanned terminals of a higher shadowing class than `terminal` (docs/semantics.md:
        on a lexeme both match, they win): a reserved keyword over an identifier."""
        rank = (terminal.priority, terminal.is_literal)
        return tuple(
            t
            for t in self.terminals
            if (t.priority, t.is_literal) > rank and t.name not in self.declared
        )

    def is_terminal(self, symbol: str) -> bool:
        return symbol in self._terminals_by_name

    @property
    def nonterminals(self) -> tuple[str, ...]:
        """Nonterminals in first-appearance order (start symbol first)."""
        seen: dict[str, None] = {self.start: None}
        for p in self.productions:
            seen.setdefault(p.lhs, None)
        return tuple(seen)

    def canonical_form(self) -> str:
        """A deterministic text of everything that defines the language (not the file's layout)."""
        doc = {
            "start": self.start,
            "terminals": [t.row() for t in self.terminals],
            "ignored": sorted(self.ignored),
            "declared": sorted(self.declared),
            "productions": [[p.lhs, list(p.rhs), p.alias] for p in self.productions],
            "regex_semantics": REGEX_SEMANTICS,
        }
        if self.stack_bound is not None:  # absent otherwise: earlier forms keep their text
            doc["stack_bound"] = self.stack_bound.as_json()
        return canonical_json(doc)

    @property
    def fingerprint(self) -> str:
        """BLAKE2b-128 (hex) of the canonical form."""
        cache = self.__dict__.get("_fingerprint")
        if cache is None:
            digest = hashlib.blake2b(self.canonical_form().encode(), digest_size=16)
            cache = digest.hexdigest()
            object.__setattr__(self, "_fingerprint", cache)
        return cache

    @property
    def compile_key(self) -> str:
        """BLAKE2b-128 (hex) of the canonical form with each name-spelled terminal's regex text
        and name set replaced by the name set's fingerprint, which determines both: it tells
        languages apart as `fingerprint` does, without encoding a large schema's spellings
        twice. What the compiled-grammar registry keys on."""
        cache = self.__dict__.get("_compile_key")
        if cache is None:
            doc = {
                "start": self.start,
                "terminals": [_compact_row(t) for t in self.terminals],
                "ignored": sorted(self.ignored),
                "declared": sorted(self.declared),
                "productions": [[p.lhs, list(p.rhs), p.alias] for p in self.productions],
                "regex_semantics": REGEX_SEMANTICS,
            }
            if self.stack_bound is not None:
                doc["stack_bound"] = self.stack_bound.as_json()
            cache = fingerprint_of(doc)
            object.__setattr__(self, "_compile_key", cache)
        return cache

    @property
    def lexical_fingerprint(self) -> str:
        """BLAKE2b-128 (hex) of what defines the scanner alone: the terminals (numbering,
        patterns, flags, priorities), the ignored and the declared ones. Role projections of one
        language share it (they only drop productions), and so do their context-independent
        walks, which read the scanner and the allowed set, never the productions."""
        cache = self.__dict__.get("_lexical_fingerprint")
        if cache is None:
            terminals = [_compact_row(t) for t in self.terminals]
            doc = [terminals, sorted(self.ignored), sorted(self.declared)]
            cache = fingerprint_of(doc, sort_keys=False)
            object.__setattr__(self, "_lexical_fingerprint", cache)
        return cache


def _compact_row(terminal: TerminalDef) -> list[object]:
    """The terminal's row with a name set's fingerprint standing for its spellings and the
    regex text made from them."""
    if terminal.names is None:
        return terminal.row()
    t = terminal
    return [t.index, t.name, "", t.flags, t.priority, t.is_literal, t.names.fingerprint]


def _terminal(row: list[object]) -> TerminalDef:
    """The terminal `TerminalDef.row` wrote (TypeError/ValueError on another shape)."""
    index, name, pattern, flags, priority, is_literal, *more = row
    if len(more) > 1 or (more and not isinstance(more[0], dict)):
        raise ValueError("a terminal row has six fields and optionally a name set")
    names = NameSet.from_json(more[0]) if more else None
    return TerminalDef(name, index, pattern, flags, priority, is_literal, names)  # type: ignore[arg-type]

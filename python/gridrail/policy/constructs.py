"""The policy surface of a grammar: named statement kinds, named constructs and capabilities (all
three as production selectors), the identifier categories that schema lexicons restrict, the
dialect whose identifier rules the grammar's names follow, and the generation surface: which
terminals and productions a generation profile (gridrail.policy.profile) narrows.

A catalogue is chosen explicitly, never by a grammar's file name: a bundled grammar
(`Grammar.bundled("sqlite")`, or any grammar with the same fingerprint) has the catalogue shipped
beside it (`sqlite.constructs.toml`, which documents the format); any other grammar is given one
with `ConstructCatalogue.from_file(path, grammar)` — or, for an edited copy of a bundled grammar,
`ConstructCatalogue.bundled("sqlite", grammar)`. A catalogue numbers the productions of exactly
one grammar (it records that grammar's fingerprint), and every selector must pick at least one
production, so a renamed rule breaks the catalogue loudly instead of silently leaving a
construct allowed.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property
from importlib import resources

from gridrail.canonical import fingerprint_of
from gridrail.errors import PolicyError
from gridrail.grammar.loader import bundled_names
from gridrail.grammar.model import Grammar, Production
from gridrail.policy.dialect import RULES, IdentifierRules, identifier_rules

WORD_SOURCES = ("tables", "columns", "functions")
_SECTIONS = {
    "dialect",
    "statements",
    "constructs",
    "capabilities",
    "lexicons",
    "function_keywords",
    "construct_functions",
    "generation",
}
_CAPABILITY_KEYS = {"requires", "productions"}
_GENERATION_KEYS = {
    "layout",
    "comments",
    "invented_names",
    "table_aliases",
    "numbers",
    "strings",
    "qualifier",
    "qualifier_suffix",
    "openings",
    "opening_suffix",
    "double_quoted_strings",
    "needs_from",
    "terminator",
}
_GENERATION_OPTIONAL = {"fixed_names"}


@dataclass(frozen=True)
class LexiconCategory:
    terminal: str  # the identifier terminal the lexicon restricts
    words: str  # one of WORD_SOURCES
    suffix: str = ""  # regex every lexeme ends with after the word (a function's "(")


@dataclass(frozen=True)
class Capability:
    """Productions that do more than their statement's own kind: a role keeps them only when it
    holds every statement kind in `requires` (reading needs select; REPLACE conflict resolution
    deletes rows, so it needs delete)."""

    requires: frozenset[str]
    productions: frozenset[int]


@dataclass(frozen=True)
class GenerationSurface:
    """The parts a generation profile narrows, named in the catalogue's [generation] section
    (checked against the grammar when the catalogue is read)."""

    layout: str  # the ignored whitespace terminal
    comments: tuple[str, ...]  # the ignored comment terminals
    invented_names: tuple[str, ...]  # names a statement declares (aliases, CTE names)
    table_aliases: tuple[str, ...]  # those of them a qualifier may repeat (shorter still)
    numbers: tuple[str, ...]  # numeric literals (bounded in length)
    strings: tuple[str, ...]  # string and blob literals (bounded in length)
    qualifier: str  # a table or alias with its dot
    qualifier_suffix: str  # the regex text every qualifier lexeme ends with (the dot)
    openings: tuple[str, ...]  # words lexed with their "(" (a function name, cast's)
    opening_suffix: str  # the regex text each opening's pattern ends with: layout, then "("
    double_quoted_strings: tuple[tuple[str, tuple[str, ...]], ...]  # (lhs, rhs) productions
    # the query blocks without their FROM clause, (lhs, rhs) productions: they read no table
    without_from: tuple[tuple[str, tuple[str, ...]], ...]
    terminator: str  # the terminal that ends the statement
    # invented names the dialect has a fixed set of (terminal, its words, case ignored)
    fixed_names: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def as_json(self) -> list[object]:
        return [
            self.layout,
            list(self.comments),
            list(self.invented_names),
            list(self.table_aliases),
            list(self.numbers),
            list(self.strings),
            self.qualifier,
            self.qualifier_suffix,
            list(self.openings),
            self.opening_suffix,
            [[lhs, list(rhs)] for lhs, rhs in self.double_quoted_strings],
            [[lhs, list(rhs)] for lhs, rhs in self.without_from],
            self.terminator,
            [[name, list(words)] for name, words in self.fixed_names],
        ]


@dataclass(frozen=True)
class ConstructCatalogue:
    statements: dict[str, frozenset[int]]  # kind -> indices of the productions it selects
    constructs: dict[str, frozenset[int]]
    capabilities: dict[str, Capability]
    lexicons: tuple[LexiconCategory, ...]
    # function terminal -> the names it calls (lower case): one terminal per call shape
    function_terminals: dict[str, frozenset[str]]
    dialect: str  # whose identifier rules policy names follow (gridrail.policy.dialect)
    grammar_fingerprint: str  # the grammar whose production indices these are
    source: str
    generation: GenerationSurface | None = None  # None: the grammar has no generation profile
    # functions the grammar spells as keywords (CURRENT_DATE): name -> the productions using it
    function_keywords: dict[str, frozenset[int]] = field(default_factory=dict)
    # construct -> the functions that are it under another spelling (`like(p, x)` is `x LIKE p`):
    # a role that bans the construct may not call them
    construct_functions: dict[str, frozenset[str]] = field(default_factory=dict)

    @cached_property
    def functions(self) -> frozenset[str]:
        """The names the grammar's function terminals can call (lower case)."""
        return frozenset().union(*self.function_terminals.values())

    @classmethod
    def for_grammar(cls, grammar: Grammar) -> ConstructCatalogue:
        """The catalogue shipped with the bundled grammar `grammar` is (identified by its
        fingerprint: an edited grammar is another grammar, whatever its file is called)."""
        name = _bundled_by_fingerprint().get(grammar.fingerprint)
        if name is None:
            raise PolicyError(
                f"grammar {grammar.name!r} is not a bundled grammar, so it has no construct "
                "catalogue of its own: give it one with the `catalogue=` parameter of "
                "gridrail.compile and Policy.from_file / Policy.from_text, e.g. "
                "catalogue=ConstructCatalogue.from_file(path, grammar), or "
                "ConstructCatalogue.bundled('sqlite', grammar) for an edited copy of sqlite.lark",
                source=grammar.name,
            )
        return _bundled_catalogue(name)

    @classmethod
    def bundled(cls, name: str, grammar: Grammar) -> ConstructCatalogue:
        """The catalogue shipped with bundled grammar `name`, applied to `grammar` (say, an
        edited copy of it); PolicyError if one of its selectors no longer matches."""
        if name not in bundled_names():
            known = ", ".join(bundled_names())
            raise PolicyError(f"no bundled grammar named {name!r} (bundled: {known})")
        path = resources.files("gridrail.grammars").joinpath(f"{name}.constructs.toml")
        return cls.from_text(path.read_text("utf-8"), grammar, f"{name}.constructs.toml")

    @classmethod
    def resolve(cls, grammar: Grammar, catalogue: ConstructCatalogue | None) -> ConstructCatalogue:
        """`catalogue`, checked to number `grammar`'s productions, or else the grammar's own."""
        if catalogue is None:
            return cls.for_grammar(grammar)
        if catalogue.grammar_fingerprint != grammar.fingerprint:
            raise PolicyError(
                f"the construct catalogue {catalogue.source} was built for another grammar than "
                f"{grammar.name!r} (its selectors number another grammar's productions); build "
                "it for this one: ConstructCatalogue.from_file(path, grammar)",
                source=catalogue.source,
            )
        return catalogue

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], grammar: Grammar) -> ConstructCatalogue:
        text = read_policy_text(path, "construct catalogue")
        return cls.from_text(text, grammar, os.fspath(path))

    @classmethod
    def from_text(cls, text: str, grammar: Grammar, source: str) -> ConstructCatalogue:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PolicyError(f"not valid TOML: {exc}", source=source) from None
        except RecursionError:  # tomllib recurses on nested arrays and inline tables
            raise PolicyError("not valid TOML: nested too deeply", source=source) from None
        unknown = set(data) - _SECTIONS
        if unknown:
            raise PolicyError(
                f"unknown sections {sorted(unknown)} (known: {', '.join(sorted(_SECTIONS))})",
                source=source,
            )

        def selections(section: str) -> dict[str, frozenset[int]]:
            table = data.get(section, {})
            return {
                name: _select_all(grammar, selectors, f"{section}.{name}", source)
                for name, selectors in table.items()
            }

        statements, constructs = selections("statements"), selections("constructs")
        function_keywords = {k.lower(): v for k, v in selections("function_keywords").items()}
        capabilities = _capabilities(grammar, data.get("capabilities", {}), statements, source)
        lexicons = []
        for terminal, spec in data.get("lexicons", {}).items():
            if terminal not in {t.name for t in grammar.terminals}:
                raise PolicyError(f"lexicon for unknown terminal {terminal!r}", source=source)
            if spec.get("words") not in WORD_SOURCES:
                raise PolicyError(
                    f"lexicons.{terminal}.words must be one of {WORD_SOURCES}", source=source
                )
            lexicons.append(LexiconCategory(terminal, spec["words"], spec.get("suffix", "")))
        function_terminals = _function_names(grammar, lexicons, source)
        generation = (
            _generation(grammar, data["generation"], lexicons, source)
            if "generation" in data
            else None
        )
        construct_functions = _construct_functions(
            data.get("construct_functions", {}), constructs, function_terminals, source
        )
        dialect = data.get("dialect")
        if dialect not in RULES:
            raise PolicyError(
                f"dialect = {dialect!r}: name the dialect whose identifier rules the grammar's "
                f"names follow (one of {', '.join(sorted(RULES))})",
                source=source,
            )
        return cls(
            statements,
            constructs,
            capabilities,
            tuple(lexicons),
            function_terminals,
            dialect,
            grammar.fingerprint,
            source,
            generation,
            function_keywords,
            construct_functions,
        )

    def barred_functions(self, banned: Iterable[str]) -> frozenset[str]:
        """The functions a role that bans `banned` constructs may not call."""
        return frozenset().union(*(self.construct_functions.get(c, ()) for c in banned))

    @property
    def rules(self) -> IdentifierRules:
        """How policy names of tables and columns are compared and, without a schema, spelled."""
        return identifier_rules(self.dialect)

    @cached_property
    def fingerprint(self) -> str:
        """BLAKE2b-128 (hex) of everything that decides what a role's language is."""

        def indices(table: Mapping[str, frozenset[int]]) -> dict[str, list[int]]:
            return {name: sorted(picked) for name, picked in table.items()}

        doc = {
            "grammar": self.grammar_fingerprint,
            "dialect": self.dialect,
            "statements": indices(self.statements),
            "constructs": indices(self.constructs),
            "capabilities": {
                name: [sorted(c.requires), sorted(c.productions)]
                for name, c in self.capabilities.items()
            },
            "lexicons": [[c.terminal, c.words, c.suffix] for c in self.lexicons],
            "functions": sorted(self.functions),
            "function_keywords": indices(self.function_keywords),
            # (only where the catalogue has some: an older catalogue keeps its fingerprint)
            **(
                {"construct_functions": {c: sorted(f) for c, f in self.construct_functions.items()}}
                if self.construct_functions
                else {}
            ),
            "generation": self.generation.as_json() if self.generation else None,
        }
        return fingerprint_of(doc)

    def lexicon(self, words: str) -> LexiconCategory | None:
        return next((c for c in self.lexicons if c.words == words), None)


@cache
def _bundled_by_fingerprint() -> dict[str, str]:
    """Bundled grammar name by fingerprint (each bundled grammar loaded once per process)."""
    return {Grammar.bundled(name).fingerprint: name for name in bundled_names()}


@cache
def _bundled_catalogue(name: str) -> ConstructCatalogue:
    return ConstructCatalogue.bundled(name, Grammar.bundled(name))


def _capabilities(
    grammar: Grammar, table: object, statements: Mapping[str, frozenset[int]], source: str
) -> dict[str, Capability]:
    if not isinstance(table, dict):
        raise PolicyError("capabilities must be a table of [capabilities.<name>]", source=source)
    out = {}
    for name, spec in table.items():
        where = f"capabilities.{name}"
        if not isinstance(spec, dict) or set(spec) != _CAPABILITY_KEYS:
            raise PolicyError(
                f"{where} must give requires = [statement kinds] and productions = [selectors]",
                source=source,
            )
        requires = spec["requires"]
        if not isinstance(requires, list) or not requires:
            raise PolicyError(f"{where}.requires must list statement kinds", source=source)
        for kind in requires:
            if kind not in statements:
                raise PolicyError(
                    f"{where}.requires: {kind!r} is not a statement kind of this catalogue "
                    f"(kinds: {', '.join(sorted(statements))})",
                    source=source,
                )
        picked = _select_all(grammar, spec["productions"], f"{where}.productions", source)
        out[name] = Capability(frozenset(requires), picked)
    return out


def _generation(
    grammar: Grammar, table: object, lexicons: list[LexiconCategory], source: str
) -> GenerationSurface:
    """The [generation] section, every name checked to play its part in `grammar`."""
    if not isinstance(table, dict) or not (
        _GENERATION_KEYS <= set(table) <= _GENERATION_KEYS | _GENERATION_OPTIONAL
    ):
        raise PolicyError(
            f"[generation] must give exactly {', '.join(sorted(_GENERATION_KEYS))} "
            f"(and may give {', '.join(sorted(_GENERATION_OPTIONAL))})",
            source=source,
        )

    def terminal(key: str, name: object) -> str:
        if not isinstance(name, str) or not grammar.is_terminal(name):
            raise PolicyError(
                f"generation.{key}: {name!r} is not a terminal of {grammar.name}", source=source
            )
        if name in grammar.declared:
            raise PolicyError(
                f"generation.{key}: {name} is %declare'd, so it has no lexeme to narrow",
                source=source,
            )
        return name

    def terminals(key: str, may_be_empty: bool = False) -> tuple[str, ...]:
        names = table[key]
        if not isinstance(names, list) or not (names or may_be_empty):
            raise PolicyError(f"generation.{key} must list terminals", source=source)
        return tuple(terminal(key, name) for name in names)

    def text(key: str) -> str:
        value = table[key]
        if not isinstance(value, str) or not value:
            raise PolicyError(f"generation.{key} must be a regex text", source=source)
        return value

    layout, comments = terminal("layout", table["layout"]), terminals("comments")
    for key, name in [("layout", layout), *(("comments", c) for c in comments)]:
        if name not in grammar.ignored:
            raise PolicyError(
                f"generation.{key}: {name} is not ignored by {grammar.name}", source=source
            )
    invented = terminals("invented_names")
    categories = {c.terminal for c in lexicons}
    for name in invented:
        if name in categories:
            raise PolicyError(
                f"generation.invented_names: {name} is a lexicon category (its words come from "
                "the schema), not a name a statement invents",
                source=source,
            )
    table_aliases = terminals("table_aliases", may_be_empty=True)
    for name in table_aliases:
        if name not in invented:
            raise PolicyError(
                f"generation.table_aliases: {name} is not one of generation.invented_names",
                source=source,
            )
    opening_suffix = text("opening_suffix")
    openings = terminals("openings")
    for name in openings:
        if not grammar.terminal(name).pattern.endswith(opening_suffix):
            raise PolicyError(
                f"generation.openings: {name}'s regex does not end with opening_suffix "
                f"{opening_suffix!r}",
                source=source,
            )
    qualifier, qualifier_suffix = (
        terminal("qualifier", table["qualifier"]),
        text("qualifier_suffix"),
    )
    if not grammar.terminal(qualifier).pattern.endswith(qualifier_suffix):
        raise PolicyError(
            f"generation.qualifier: {qualifier}'s regex does not end with qualifier_suffix "
            f"{qualifier_suffix!r}",
            source=source,
        )
    picked = _select_all(grammar, table["double_quoted_strings"], "generation", source)
    double_quoted = tuple((p.lhs, p.rhs) for p in grammar.productions if p.index in picked)
    without_from = _without_clause(grammar, table["needs_from"], source)
    fixed = table.get("fixed_names", {})
    if not isinstance(fixed, dict):
        raise PolicyError("generation.fixed_names must map terminals to words", source=source)
    for name, words in fixed.items():
        if terminal("fixed_names", name) not in invented:
            raise PolicyError(
                f"generation.fixed_names: {name} is not one of generation.invented_names",
                source=source,
            )
        if (
            not isinstance(words, list)
            or not words
            or not all(isinstance(w, str) and w for w in words)
        ):
            raise PolicyError(
                f"generation.fixed_names.{name} must list the words (non-empty strings)",
                source=source,
            )
    return GenerationSurface(
        layout,
        comments,
        invented,
        table_aliases,
        terminals("numbers", may_be_empty=True),
        terminals("strings", may_be_empty=True),
        qualifier,
        qualifier_suffix,
        openings,
        opening_suffix,
        double_quoted,
        without_from,
        terminal("terminator", table["terminator"]),
        tuple((name, tuple(words)) for name, words in fixed.items()),
    )


def _without_clause(
    grammar: Grammar, pair: object, source: str
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """`needs_from = [rule, clause]`: the productions of `rule` without `clause` (a query block
    without its FROM clause); `[]` for none."""
    if pair == []:
        return ()
    if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(n, str) for n in pair)):
        raise PolicyError(
            "generation.needs_from must be [] or [rule, clause]: the rule whose productions "
            "need the clause",
            source=source,
        )
    rule, clause = pair
    for name in pair:
        if not any(p.lhs == name for p in grammar.productions):
            raise PolicyError(
                f"generation.needs_from: {name!r} is not a rule of {grammar.name}", source=source
            )
    productions = [p for p in grammar.productions if p.lhs == rule]
    without = tuple((p.lhs, p.rhs) for p in productions if clause not in p.rhs)
    if len(without) == len(productions):
        raise PolicyError(
            f"generation.needs_from: no production of {rule} has a {clause}", source=source
        )
    return without


def read_policy_text(path: str | os.PathLike[str], what: str) -> str:
    """The UTF-8 text of a policy or catalogue file; PolicyError naming the file otherwise."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise PolicyError(
            f"cannot read the {what}: {exc.strerror}", source=os.fspath(path)
        ) from None
    except UnicodeDecodeError as exc:
        raise PolicyError(
            f"the {what} is not UTF-8 text ({exc.reason} at byte {exc.start})",
            source=os.fspath(path),
        ) from None


def _select_all(grammar: Grammar, selectors: object, where: str, source: str) -> frozenset[int]:
    if not isinstance(selectors, list) or not all(isinstance(s, str) for s in selectors):
        raise PolicyError(f"{where} must be a list of selector strings", source=source)
    picked: set[int] = set()
    for selector in selectors:
        matched = [p.index for p in grammar.productions if _matches(p, selector)]
        if not matched:
            raise PolicyError(
                f"{where}: selector {selector!r} matches no production of {grammar.name}",
                source=source,
            )
        picked.update(matched)
    return frozenset(picked)


def _matches(p: Production, selector: str) -> bool:
    selector = selector.strip()
    if selector.startswith("->"):
        return p.alias == selector[2:].strip()
    if ":" in selector:
        lhs, rhs = selector.split(":", 1)
        return p.lhs == lhs.strip() and p.rhs == tuple(rhs.split())
    return p.lhs == selector


def _function_names(
    grammar: Grammar, lexicons: list[LexiconCategory], source: str
) -> dict[str, frozenset[str]]:
    """Per function lexicon's terminal, the names it can draw from, read off the L1 terminal's
    regex: a finite alternation `(?:name|name|...)` followed by the category's suffix."""
    out = {}
    for category in lexicons:
        if category.words != "functions":
            continue
        pattern = grammar.terminal(category.terminal).pattern
        match = re.match(r"\(\?:([A-Za-z0-9_|]+)\)", pattern)
        if match is None:
            raise PolicyError(
                f"{category.terminal}'s regex is not an alternation of names, so the function "
                "names a role may call cannot be read from it",
                source=source,
            )
        names = frozenset(n.lower() for n in match.group(1).split("|"))
        for other, theirs in out.items():
            if names & theirs:  # a name in two terminals would tie in the scanner
                raise PolicyError(
                    f"function {min(names & theirs)!r} is in two function terminals, "
                    f"{other} and {category.terminal}: each function has one call shape",
                    source=source,
                )
        out[category.terminal] = names
    return out


def _construct_functions(
    table: Mapping[str, object],
    constructs: Mapping[str, frozenset[int]],
    function_terminals: Mapping[str, frozenset[str]],
    source: str,
) -> dict[str, frozenset[str]]:
    """`[construct_functions]`: construct -> function names, each a construct of the catalogue
    and a function its terminals call."""
    callable_ = frozenset().union(*function_terminals.values())
    out = {}
    for construct, names in table.items():
        if construct not in constructs:
            raise PolicyError(f"construct_functions.{construct}: no such construct", source=source)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise PolicyError(
                f"construct_functions.{construct} must be a list of function names", source=source
            )
        unknown = sorted({n.lower() for n in names} - callable_)
        if unknown:
            raise PolicyError(
                f"construct_functions.{construct}: the grammar calls no function {unknown[0]!r}",
                source=source,
            )
        out[construct] = frozenset(n.lower() for n in names)
    return out

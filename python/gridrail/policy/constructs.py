"""The policy surface of a grammar: named statement kinds, named constructs (both as production
selectors) and the identifier categories that schema lexicons restrict.

A bundled grammar `x.lark` ships its surface as `x.constructs.toml` (see the sqlite one for the
selector syntax). Every selector must pick at least one production, so a renamed rule breaks the
catalogue loudly instead of silently leaving a construct allowed.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import PurePath

from gridrail.errors import PolicyError
from gridrail.grammar.model import Grammar, Production

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

WORD_SOURCES = ("tables", "columns", "functions")


@dataclass(frozen=True)
class LexiconCategory:
    terminal: str  # the identifier terminal the lexicon restricts
    words: str  # one of WORD_SOURCES
    suffix: str = ""  # regex every lexeme ends with after the word (FUNCTION_NAME's "(")


@dataclass(frozen=True)
class ConstructCatalogue:
    statements: dict[str, frozenset[int]]  # kind -> indices of the productions it selects
    constructs: dict[str, frozenset[int]]
    lexicons: tuple[LexiconCategory, ...]
    functions: frozenset[str]  # names the grammar's function terminal can call (lower case)
    source: str

    @classmethod
    def for_grammar(cls, grammar: Grammar) -> ConstructCatalogue:
        """The catalogue shipped beside a bundled grammar (sqlite.lark: sqlite.constructs.toml)."""
        stem = PurePath(grammar.name).stem
        path = resources.files("gridrail.grammars").joinpath(f"{stem}.constructs.toml")
        if not path.is_file():
            raise PolicyError(
                f"grammar {grammar.name!r} has no construct catalogue; pass one with "
                "ConstructCatalogue.from_file(path, grammar)",
                source=grammar.name,
            )
        return cls.from_text(path.read_text("utf-8"), grammar, f"{stem}.constructs.toml")

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], grammar: Grammar) -> ConstructCatalogue:
        with open(path, encoding="utf-8") as f:
            return cls.from_text(f.read(), grammar, os.fspath(path))

    @classmethod
    def from_text(cls, text: str, grammar: Grammar, source: str) -> ConstructCatalogue:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PolicyError(f"not valid TOML: {exc}", source=source) from None
        unknown = set(data) - {"statements", "constructs", "lexicons"}
        if unknown:
            raise PolicyError(f"unknown sections {sorted(unknown)}", source=source)

        def selections(section: str) -> dict[str, frozenset[int]]:
            table = data.get(section, {})
            return {
                name: _select_all(grammar, selectors, f"{section}.{name}", source)
                for name, selectors in table.items()
            }

        lexicons = []
        for terminal, spec in data.get("lexicons", {}).items():
            if terminal not in {t.name for t in grammar.terminals}:
                raise PolicyError(f"lexicon for unknown terminal {terminal!r}", source=source)
            if spec.get("words") not in WORD_SOURCES:
                raise PolicyError(
                    f"lexicons.{terminal}.words must be one of {WORD_SOURCES}", source=source
                )
            lexicons.append(LexiconCategory(terminal, spec["words"], spec.get("suffix", "")))
        functions = _function_names(grammar, lexicons, source)
        return cls(
            selections("statements"), selections("constructs"), tuple(lexicons), functions, source
        )

    def lexicon(self, words: str) -> LexiconCategory | None:
        return next((c for c in self.lexicons if c.words == words), None)


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
) -> frozenset[str]:
    """The names a function lexicon can draw from, read off the L1 terminal's regex: a finite
    alternation `(?:name|name|...)` followed by the category's suffix."""
    category = next((c for c in lexicons if c.words == "functions"), None)
    if category is None:
        return frozenset()
    pattern = grammar.terminal(category.terminal).pattern
    match = re.match(r"\(\?:([A-Za-z0-9_|]+)\)", pattern)
    if match is None:
        raise PolicyError(
            f"{category.terminal}'s regex is not an alternation of names, so the function "
            "names a role may call cannot be read from it",
            source=source,
        )
    return frozenset(n.lower() for n in match.group(1).split("|"))

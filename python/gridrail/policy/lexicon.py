"""Schema lexicons (L3): identifier terminals restricted to the names a role may see.

Each lexicon category of the grammar's catalogue (TABLE_NAME, COLUMN_NAME and the function
terminals in sqlite) gets a name set (`gridrail.grammar.names.NameSet`): the finite set of ways
to write its allowed words. Terminal indices, priorities and the other terminals are untouched,
so lexeme boundaries stay the dialect's (the generic alias terminals still take the longest
identifier) and only *which* names can be this terminal changes. The mask, the specification and
the parser all see one ordinary grammar; the scanner builds the names as tries, never as a
regex.

A word is written
  - bare, if the dialect lets an unquoted name denote it (PostgreSQL: only lower-case names),
    the category's L1 regex spells it, and no terminal of a higher class (a reserved keyword)
    takes the same text; ASCII case is free where the dialect ignores or folds it;
  - quoted, in each of the dialect's quote styles (case free where the dialect ignores it).
Precondition W_c ⊆ R_c (paper §2) is then *checked*, not assumed: every spelling, in every case
the name set allows, must be in the L1 terminal's language (a walk of the tries against its
DFA), and every word must have at least one form — a name that cannot be written raises
LexiconError naming it, never disappears silently.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import chain

import numpy as np

from gridrail import kernels
from gridrail.errors import LexiconError
from gridrail.grammar.dfa import ByteDFA, compile_regex, outside
from gridrail.grammar.model import Grammar, TerminalDef
from gridrail.grammar.names import NameSet
from gridrail.grammar.regex_syntax import leading_exclusion
from gridrail.policy.constructs import ConstructCatalogue, LexiconCategory
from gridrail.policy.dialect import IdentifierRules
from gridrail.policy.view import SchemaView


@dataclass(frozen=True)
class Lexicon:
    """The words of one category and what its terminal now spells (`names`; None in a
    lexicon read back from an archive, which keeps the regex text only)."""

    category: LexiconCategory
    words: tuple[str, ...]
    pattern: str  # the name set's regex text; "" when there are no words: never produced
    names: NameSet | None = None


def build_lexicons(
    grammar: Grammar, catalogue: ConstructCatalogue, view: SchemaView
) -> tuple[Lexicon, ...]:
    """The lexicon of every category the catalogue names, for what `view` lets its role see.
    Categories whose words are "all of them" (every function of a call shape: the role lists
    them all, or has no list, and the engine has them) are left out: the terminal keeps its L1
    regex, which spells exactly those."""
    out = []
    for category in catalogue.lexicons:
        spelled = catalogue.function_terminals.get(category.terminal, frozenset())
        words = _words(category, view, spelled, frozenset(catalogue.function_keywords))
        if words is None:
            continue
        out.append(_lexicon(grammar, category, words, view.schema.rules))
    return tuple(out)


def apply_lexicons(grammar: Grammar, lexicons: tuple[Lexicon, ...]) -> Grammar:
    """`grammar` with each lexicon's terminal regex replaced. A category with no word at all
    loses every production that needs it (reduce the result before use)."""
    by_terminal = {lex.category.terminal: lex.names for lex in lexicons if lex.names}
    terminals = tuple(
        _with_names(t, by_terminal[t.name]) if t.name in by_terminal else t
        for t in grammar.terminals
    )
    empty = {lex.category.terminal for lex in lexicons if not lex.words}
    productions = tuple(p for p in grammar.productions if not empty & set(p.rhs))
    return replace(
        grammar,
        terminals=terminals,
        productions=productions,
        declared=grammar.declared | frozenset(empty),
    )


# Reference terminals and the terminal whose lexemes declare what each may also name: a CTE
# (TABLE_NAME), a select-list or CTE column alias (COLUMN_NAME). Names only Γ can judge.
DECLARED_BY = (("TABLE_NAME", "CTE_NAME"), ("COLUMN_NAME", "COLUMN_ALIAS"))


def with_declared_names(language: Grammar, dialect: Grammar) -> Grammar:
    """`language` whose table and column lexicons also spell each name a statement may declare,
    as its declaring terminal spells it (`DECLARED_BY`): `WITH c AS (...) SELECT ... FROM c`,
    `count(*) AS n ... ORDER BY n`. For a guide that tracks names (Γ) only: Γ lets such a name
    through where it binds and nowhere else, so a language without Γ never has it (through the
    lexicon it would be an open channel). A terminal whose declaring one the language lacks
    (a role without CTEs) is kept as it is. Each widened terminal is checked to stay inside
    the dialect's own regex of it (W ⊆ R)."""
    declared_by = dict(DECLARED_BY)
    present = {t.name for t in language.terminals}
    terminals = []
    for terminal in language.terminals:
        declaring = declared_by.get(terminal.name)
        names = terminal.names
        if declaring is None or declaring not in present or names is None:
            terminals.append(terminal)
            continue
        if names.rest or names.exclusion or names.suffix:
            raise LexiconError(f"{terminal.name}'s names already spell more than its words")
        source, l1 = language.terminal(declaring), dialect.terminal(terminal.name)
        declared = leading_exclusion(source.pattern, source.flags)
        body = source.pattern[len(declared) :]
        rest = f"(?{source.flags}:{body})" if source.flags else body
        # what the terminal never spells (`cast` is no column) nor the declaring one does
        exclusion = _either(leading_exclusion(l1.pattern, l1.flags), declared)
        widened = replace(names, rest=rest, exclusion=exclusion)
        if exclusion and any(
            not re.match(exclusion, s) for s in (*names.exact, *names.folded)
        ):  # every spelling must pass the exclusion, which the pattern puts before them all
            raise LexiconError(f"a {terminal.name} word is a word {declaring} may not spell")
        witness = outside(compile_regex(widened.rest_pattern), compile_regex(l1.pattern, l1.flags))
        if witness is not None:
            raise LexiconError(
                f"{terminal.name} with the names {declaring} declares spells {witness!r}, which "
                f"the grammar's {terminal.name} regex does not accept (W_c ⊆ R_c fails)"
            )
        terminals.append(_with_names(terminal, widened))
    return replace(language, terminals=tuple(terminals))


def _either(*exclusions: str) -> str:
    """One leading ``(?!...\\Z)`` refusing the words any of `exclusions` (each such a
    whole-word exclusion, or "") refuses."""
    given = [e for e in exclusions if e]
    if len(given) < 2:
        return given[0] if given else ""
    if not all(e.startswith("(?!") and e.endswith(r"\Z)") for e in given):
        raise LexiconError(f"cannot combine the exclusions {' and '.join(given)}")
    return "(?!(?:" + "|".join(e[3:-3] for e in given) + r")\Z)"


def _with_names(terminal: TerminalDef, names: NameSet) -> TerminalDef:
    return replace(terminal, pattern=names.pattern, flags="", is_literal=False, names=names)


_NAME = operator.attrgetter("name")


def _words(
    category: LexiconCategory,
    view: SchemaView,
    spelled: frozenset[str],
    keywords: frozenset[str] = frozenset(),
) -> tuple[str, ...] | None:
    rules = view.schema.rules
    if category.words == "tables":
        return tuple(t.name for t in view.tables)
    if category.words == "columns":
        # names repeat across tables: keyed once each, first spelling of a key kept
        columns = chain.from_iterable(map(view.columns, view.tables))
        names = list(dict.fromkeys(map(_NAME, columns)))
        keys = rules.catalog_keys(names)
        if keys == names:  # each distinct name is its own key: nothing to merge
            return tuple(names)
        seen: dict[str, str] = {}
        for key, name in zip(keys, names, strict=True):
            seen.setdefault(key, name)
        return tuple(seen.values())
    assert category.words == "functions"
    listed = view.role.functions if view.role is not None else None
    offered = view.schema.functions  # what the database's engine has
    # of what the terminal spells (`spelled`: the names of its call shape), those the role
    # lists and the engine has; the functions the grammar spells as keywords (CURRENT_DATE)
    # are no function terminal's: the role language keeps or drops their productions
    # (`projection.project`)
    barred = view.role.barred if view.role is not None else frozenset()
    if listed is None and offered is None and not barred & spelled:
        return None
    words = spelled - keywords - barred
    for narrowed in (listed, offered):
        words &= spelled if narrowed is None else narrowed
    if words == spelled:  # every name of the call shape: the L1 regex spells just those
        return None
    return tuple(sorted(words))


def _lexicon(
    grammar: Grammar, category: LexiconCategory, words: tuple[str, ...], rules: IdentifierRules
) -> Lexicon:
    if not words:
        return Lexicon(category, (), "")
    l1 = grammar.terminal(category.terminal)
    l1_dfa = compile_regex(l1.pattern, l1.flags)
    if category.words == "functions":  # SQL function names ignore case in every dialect
        names = NameSet(folded=words, suffix=category.suffix)
    else:
        # spelled in sorted order: the name set then sorts a few sorted runs
        exact, folded, unwritten = _identifier_spellings(
            tuple(sorted(words)), rules, l1_dfa, _higher_class_dfas(grammar, l1)
        )
        if unwritten:
            unwritable = next(w for w in words if w in unwritten)
            raise LexiconError(
                f"{category.terminal} {unwritable!r} cannot be written: no bare or quoted form "
                f"of it is a {category.terminal} lexeme of the grammar"
            )
        names = NameSet(tuple(exact), tuple(folded), category.suffix)
    witness = names.outside(l1_dfa)
    if witness is not None:
        raise LexiconError(
            f"the {category.terminal} lexicon spells {witness!r}, which the grammar's "
            f"{category.terminal} regex does not accept (W_c ⊆ R_c fails)"
        )
    return Lexicon(category, words, names.pattern, names)


def _identifier_spellings(
    words: tuple[str, ...], rules: IdentifierRules, l1_dfa: ByteDFA, shadows: tuple[ByteDFA, ...]
) -> tuple[list[str], list[str], set[str]]:
    """The spellings of `words` whose case is fixed and those whose case is free, and the words
    with none (they cannot be written). A word is written bare if the dialect lets an unquoted
    name denote it, the L1 regex takes it and no shadowing terminal does; quoted in each style
    whose form the L1 regex takes. Each style is one batch over the words (`_spelled`)."""
    bare_case_free = rules.case_insensitive or rules.folds_unquoted
    quoted_case_free = rules.case_insensitive
    exact: list[str] = []
    folded: list[str] = []
    written = np.zeros(len(words), dtype=bool)
    denoted = rules.bare_may_denote_all(words)
    taken, spelled = _spelled([words[i] for i in denoted], ("", "", True), l1_dfa, shadows)
    written[denoted] |= np.frombuffer(taken, np.uint8).astype(bool)
    (folded if bare_case_free else exact).extend(spelled)
    for style in rules.quote_styles:
        taken, spelled = _spelled(words, (style.open, style.close, style.doubles), l1_dfa, ())
        written |= np.frombuffer(taken, np.uint8).astype(bool)
        (folded if quoted_case_free else exact).extend(spelled)
    return exact, folded, {words[i] for i in np.flatnonzero(~written).tolist()}


def _spelled(
    words: Sequence[str],
    style: tuple[str, str, bool],
    dfa: ByteDFA,
    shadows: Sequence[ByteDFA],
) -> tuple[bytes, list[str]]:
    """Per word 1 if its form in the quote style (open, close, doubles) is kept, else 0, and the
    kept forms in word order (the Rust kernel `spell_forms` when enabled). A form is the word
    between `open` and `close` with `close` doubled inside it (`close` empty: the word itself);
    a word holding `close` has none where the style cannot double it; a form is kept where
    `dfa` matches it whole and no shadow does."""
    if kernels.KERNELS_ENABLED:
        return kernels.spell_forms(words, style, dfa, shadows)
    open_, close, doubles = style
    flags = bytearray()
    kept = []
    for word in words:
        form: str | None = word
        if close:
            fits = doubles or close not in word
            form = open_ + word.replace(close, close * 2) + close if fits else None
        data = form.encode("utf-8") if form is not None else b""
        ok = (
            form is not None and dfa.fullmatch(data) and not any(s.fullmatch(data) for s in shadows)
        )
        flags.append(ok)
        if ok:
            kept.append(form)
    return bytes(flags), kept


def _higher_class_dfas(grammar: Grammar, terminal: TerminalDef) -> tuple[ByteDFA, ...]:
    """The lexemes of the terminals that shadow `terminal`'s (reserved keywords): a bare word
    they match is never `terminal`, so it must be written quoted. One automaton for all of
    them (a word is checked once, not once per keyword), apart from those with a leading
    ``(?!...)``, which a regex can only have at its start."""
    return _shadow_dfas(grammar.shadowing(terminal))


@functools.lru_cache(maxsize=64)  # one dialect's keywords, the same for each new schema
def _shadow_dfas(higher: tuple[TerminalDef, ...]) -> tuple[ByteDFA, ...]:
    plain = [t for t in higher if not leading_exclusion(t.pattern, t.flags)]
    options = "|".join(f"(?{t.flags}:{t.pattern})" for t in plain)
    alone = [compile_regex(t.pattern, t.flags) for t in higher if t not in plain]
    return (compile_regex(options), *alone) if plain else tuple(alone)

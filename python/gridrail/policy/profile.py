"""Generation profiles: the stricter language a model may *write* (docs/generation.md).

`gridrail parse` reads the dialect's whole language; a model writing into it finds free-text
channels there that execute nothing: comments, runs of blank lines, text after the final ";",
quoted or endless aliases and qualifiers, `"x"` read as a string. A profile is a grammar
transformation applied after the lexicons (L1 → L2 → L3 → profile), so the mask, the
specification, the kernels and the audit see one ordinary grammar and every guarantee holds
as it is. It keeps every terminal index and changes the language in two ways only:

  * it narrows terminals (the layout, the invented names, the qualifier, the openings) and
    appends a *refusal twin* of each — the terminal's former definition, in no production and
    not ignored. Maximal munch runs over every scanned terminal, so a lexeme the narrowed
    terminal no longer spells but its former self did is now the twin's, which the parser can
    never take: `two  spaces`, a 25-character alias, `"quoted"` as an alias are refused rather
    than split into shorter lexemes that SQLite would read as one. At equal length the narrowed
    terminal, defined first, wins (same shadowing class). The terminator gets a twin too: itself
    followed by anything the dialect ignores, so after the final ";" only EOS continues;
  * it stops ignoring the comments (still scanned: a comment is refused, and `a--b` with it,
    which SQLite reads as a comment too) and drops the double-quoted-string productions
    (`"x"` where a string would stand is refused; a quoted name the lexicon spells still lexes
    as that name) and the query blocks without a FROM clause (`SELECT name;` binds no column:
    a question about the database reads a table).
Each narrowed terminal's language is checked to lie inside its former one. Only productions are
removed, so an LALR(1) grammar stays LALR(1).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

from gridrail.errors import GrammarError, PolicyError, UsageError
from gridrail.grammar.dfa import compile_regex, outside
from gridrail.grammar.model import Grammar, TerminalDef
from gridrail.grammar.names import NameSet
from gridrail.grammar.regex_syntax import leading_exclusion
from gridrail.policy.constructs import ConstructCatalogue, GenerationSurface
from gridrail.policy.lexicon import Lexicon

REFUSED = "REFUSED_"  # prefix of the twins' names
ALIAS_STYLES = ("tag", "word")  # GenerationProfile.alias_style


@dataclass(frozen=True)
class GenerationProfile:
    """What a model may write. The default is the strict profile: no comments; layout is one
    space, or a newline and at most `max_indent` spaces; nothing after the final ";"; invented
    names (column aliases, CTE names) bare and at most `max_name_length` characters, table
    aliases — and so a qualifier that is no table the role sees — at most `max_alias_length`
    (`T1`, `e`: an invented qualifier is otherwise an open text channel, bench/RESULTS.md);
    numbers of at most `max_number_length` characters and strings (quotes included) of at
    most `max_string_length`, single-quoted only; at most one space before the "(" of a call;
    every query block with a FROM clause; a table alias is a tag, a letter then digits (`T1`,
    `e`, `o2`): where Γ refuses WHERE or GROUP until the FROM clause names what the select
    list used, a word-shaped alias took the model's keyword (`GRO`, `WHO`, `WHC`) and the
    statement ran off (bench/RESULTS.md). `GenerationProfile(comments=True)` lets comments
    back in, `needs_from=False` query blocks without FROM (`SELECT 1;`),
    `alias_style="word"` aliases of any identifier characters (none that is the start of a
    keyword, `GRO` or `WH`, unless `keyword_prefix_aliases=True`)."""

    comments: bool = False
    needs_from: bool = True
    max_indent: int = 8
    max_name_length: int = 24
    max_alias_length: int = 3
    max_number_length: int = 20
    max_string_length: int = 64
    keyword_prefix_aliases: bool = False
    alias_style: str = "tag"

    def __post_init__(self) -> None:
        if self.alias_style not in ALIAS_STYLES:
            raise UsageError(
                f"GenerationProfile.alias_style must be one of {', '.join(ALIAS_STYLES)}: "
                f"{self.alias_style!r}"
            )
        for name, least in (
            ("max_indent", 0),
            ("max_name_length", 1),
            ("max_alias_length", 1),
            ("max_number_length", 1),
            ("max_string_length", 2),
        ):
            value = getattr(self, name)
            if type(value) is not int or value < least:
                raise UsageError(f"GenerationProfile.{name} must be an int >= {least}: {value!r}")

    @property
    def label(self) -> str:
        """How a language built under this profile is named (in its grammar name)."""
        comments = "comments" if self.comments else "no-comments"
        source = "from" if self.needs_from else "from-optional"
        return (
            f"profile({comments},{source},indent<={self.max_indent},"
            f"names<={self.max_name_length},"
            f"aliases<={self.max_alias_length}{self._alias_label},"
            f"numbers<={self.max_number_length},"
            f"strings<={self.max_string_length})"
        )

    @property
    def bare_name(self) -> str:
        """The regex of an invented name: an ASCII identifier of bounded length."""
        return _bare(self.max_name_length)

    @property
    def _alias_label(self) -> str:
        if self.alias_style == "tag":
            return "-tag"
        return "" if self.keyword_prefix_aliases else "-kw"

    @property
    def alias_name(self) -> str:
        """The regex of a table alias (and so of a qualifier that is no table): shorter."""
        if self.alias_style == "tag":
            return _tag(self.max_alias_length)
        return _bare(self.max_alias_length)

    @property
    def layout(self) -> str:
        return f"(?: |\\n {{0,{self.max_indent}}})"


def apply_profile(
    grammar: Grammar,
    catalogue: ConstructCatalogue,
    profile: GenerationProfile,
    lexicons: tuple[Lexicon, ...],
) -> Grammar:
    """`grammar` (a role language, lexicons applied) restricted to what `profile` lets a model
    write; reduce the result before use. PolicyError if the catalogue has no [generation]
    section; GrammarError if a narrowed terminal would spell something it did not."""
    surface = catalogue.generation
    if surface is None:
        raise PolicyError(
            "the construct catalogue has no [generation] section, so no generation profile can "
            "be applied to this grammar (compile with profile=None for its whole language)",
            source=catalogue.source,
        )
    narrowed = _narrowed_patterns(grammar, surface, profile, lexicons)
    terminals = [
        _narrowed(t, narrowed[t.name]) if t.name in narrowed else t for t in grammar.terminals
    ]
    twins = [_twin(grammar.terminal(name)) for name in narrowed]
    twins.append(_terminator_twin(grammar, surface.terminator))
    for twin in twins:
        if grammar.is_terminal(twin.name):
            raise GrammarError(
                f"the generation profile adds a terminal {twin.name}, which the grammar "
                "already has",
                source=grammar.name,
            )
    terminals += [replace(t, index=len(terminals) + i) for i, t in enumerate(twins)]
    ignored = grammar.ignored if profile.comments else grammar.ignored - set(surface.comments)
    dropped = set(surface.double_quoted_strings)
    if profile.needs_from:
        dropped.update(surface.without_from)
    productions = tuple(p for p in grammar.productions if (p.lhs, p.rhs) not in dropped)
    return replace(grammar, terminals=tuple(terminals), ignored=ignored, productions=productions)


def _narrowed(terminal: TerminalDef, language: str | NameSet) -> TerminalDef:
    if isinstance(language, NameSet):
        return replace(terminal, pattern=language.pattern, flags="", names=language)
    return replace(terminal, pattern=language, flags="", names=None)


OPENING = r" ?\("  # what may separate a word lexed with its "(" from it: one space at most


def _narrowed_patterns(
    grammar: Grammar,
    surface: GenerationSurface,
    profile: GenerationProfile,
    lexicons: tuple[Lexicon, ...],
) -> dict[str, str | NameSet]:
    """The new language (a regex, or a name set where names are spelled) of every terminal
    the profile narrows, each checked to spell only what the terminal spelled before."""
    patterns: dict[str, str | NameSet] = {surface.layout: profile.layout}
    # a word (or a lexicon's names) with its "(" narrowed from `opening_suffix` to ` ?\(`: the
    # same words before a suffix that spells a subset of the old one (checked once, here), so
    # it spells only what it spelled: not checked again per terminal (a DFA build each; the
    # function terminals alone are 18)
    by_construction: set[str] = set()
    witness = outside(compile_regex(OPENING), compile_regex(surface.opening_suffix))
    if witness is not None:
        raise GrammarError(
            f"the generation profile's {OPENING!r} after a word spells {witness!r}, which the "
            f"catalogue's opening_suffix {surface.opening_suffix!r} does not",
            source=grammar.name,
        )
    for name in surface.invented_names:
        length = profile.max_name_length
        patterns[name] = _unshadowed(grammar, name, profile.bare_name, length)
    for name in surface.table_aliases:
        length = profile.max_alias_length
        prefixes = profile.alias_style == "word" and not profile.keyword_prefix_aliases
        patterns[name] = _unshadowed(grammar, name, profile.alias_name, length, prefixes)
    for name, words in surface.fixed_names:  # SQLite has three collations, not any name
        patterns[name] = "(?i:" + "|".join(re.escape(w) for w in words) + ")"
    for literals, length in (
        (surface.numbers, profile.max_number_length),
        (surface.strings, profile.max_string_length),
    ):
        for name in literals:
            patterns[name] = _at_most(grammar.terminal(name), length)
    patterns[surface.qualifier] = _qualifier(grammar, surface, profile, lexicons)
    for name in surface.openings:
        if name in grammar.declared:  # an empty lexicon (a role that may call no function)
            continue
        terminal = grammar.terminal(name)
        if not terminal.pattern.endswith(surface.opening_suffix):
            raise GrammarError(
                f"{name}'s regex no longer ends with the catalogue's opening_suffix "
                f"{surface.opening_suffix!r}",
                source=grammar.name,
            )
        if terminal.names is not None:  # a function lexicon: the same names, the new suffix
            patterns[name] = replace(terminal.names, suffix=OPENING)
            by_construction.add(name)  # (its names were checked against the L1 regex)
            continue
        word = terminal.pattern[: -len(surface.opening_suffix)]
        patterns[name] = _group(word, terminal.flags) + OPENING
        by_construction.add(name)
    for name, language in patterns.items():
        if name in by_construction:
            continue
        before = grammar.terminal(name)
        before_dfa = compile_regex(before.pattern, before.flags)
        if isinstance(language, NameSet):
            witness = language.outside(before_dfa)
            rest = language.rest_pattern
            if witness is None and rest:
                witness = outside(compile_regex(rest), before_dfa)
        else:
            witness = outside(compile_regex(language), before_dfa)
        if witness is not None:
            raise GrammarError(
                f"the generation profile's {name} spells {witness!r}, which the grammar's {name} "
                "does not",
                source=grammar.name,
            )
    return patterns


def _qualifier(
    grammar: Grammar,
    surface: GenerationSurface,
    profile: GenerationProfile,
    lexicons: tuple[Lexicon, ...],
) -> str | NameSet:
    """A table the role sees (its lexicon's spellings) or an alias, then the qualifier's
    suffix; the spellings the qualifier could not take before (its reserved words) are left
    out, as its leading exclusion leaves them out of the alias."""
    qualifier = grammar.terminal(surface.qualifier)
    keep_out = leading_exclusion(qualifier.pattern, qualifier.flags)  # the reserved words
    tables = next(
        (lex.names for lex in lexicons if lex.category.words == "tables" and lex.names), None
    )
    if tables is None:
        return f"{keep_out}(?:{profile.alias_name}){surface.qualifier_suffix}"
    before = compile_regex(qualifier.pattern, qualifier.flags)
    suffix = compile_regex(surface.qualifier_suffix)

    @functools.cache  # by the state a spelling leaves `before` in: a few, for 10,000 tables
    def suffix_taken(state: int) -> bool:
        return outside(suffix, before, state) is None

    def takes(*cases: str) -> bool:  # the final check (the caller's) sees every case
        return all(suffix_taken(before.run(s.encode())) for s in cases)

    return NameSet(
        tuple(s for s in tables.exact if takes(s)),
        tuple(s for s in tables.folded if takes(s, s.upper())),
        surface.qualifier_suffix,
        rest=profile.alias_name,
        exclusion=keep_out,
    )


def _twin(terminal: TerminalDef) -> TerminalDef:
    """`terminal` as it was, under a new name: it takes every lexeme the narrowed terminal lost
    (its index is set by the caller, after every existing one)."""
    return replace(terminal, name=REFUSED + terminal.name)


def _terminator_twin(grammar: Grammar, terminator: str) -> TerminalDef:
    """The terminator followed by anything the dialect ignores: longer than the terminator, so
    it takes the lexeme whenever layout or a comment follows the final ";"."""
    end = grammar.terminal(terminator)
    after = "|".join(
        _group(t.pattern, t.flags) for t in grammar.terminals if t.name in grammar.ignored
    )
    pattern = _group(end.pattern, end.flags) + f"(?:{after})"
    return TerminalDef(f"{REFUSED}AFTER_{terminator}", -1, pattern, "", 0, False)


def _unshadowed(grammar: Grammar, name: str, bare: str, length: int, prefixes: bool = False) -> str:
    """`bare` (an invented name of at most `length` characters) without the words of exactly
    `length` characters that a keyword takes: at full length such a word can be neither
    extended nor be this terminal (the keyword shadows it), so allowing its prefix would be a
    dead end (`... FROM t AND` with aliases of 3 characters). With `prefixes`, also without
    the starts (two characters or more) of those keywords, nor a keyword with more after it
    (`GRO`, `WH`, `ON1`: what a model meant as the keyword)."""
    keywords = [
        t.pattern.lower()
        for t in grammar.shadowing(grammar.terminal(name))
        if t.is_literal and re.fullmatch(bare, t.pattern[: max(length, 1)])
    ]
    words = {k for k in keywords if len(k) == length}
    starts: list[str] = []
    if prefixes:
        words.update(k[:n] for k in keywords for n in range(2, min(len(k), length + 1)))
        starts = sorted({k for k in keywords if 2 <= len(k) < length and re.fullmatch(bare, k)})
        words.update(starts)  # it can no longer grow, and the keyword shadows it: a dead end
    excluded = sorted(w for w in words if re.fullmatch(bare, w))
    if starts:
        excluded.append(f"(?:{'|'.join(starts)})[A-Za-z0-9_]+")
    if not excluded:
        return bare
    return f"(?!(?i:{'|'.join(excluded)})\\Z){bare}"


def _tag(length: int) -> str:
    """A letter then at most `length` - 1 digits: no keyword is spelled so."""
    return f"[A-Za-z][0-9]{{0,{length - 1}}}"


def _bare(length: int) -> str:
    """An ASCII identifier of at most `length` characters."""
    return f"[A-Za-z_][A-Za-z0-9_]{{0,{length - 1}}}"


def _at_most(terminal: TerminalDef, length: int) -> str:
    """`terminal`'s lexemes of at most `length` characters (a leading lookahead that refuses
    one character more)."""
    if leading_exclusion(terminal.pattern, terminal.flags):
        raise GrammarError(
            f"{terminal.name}'s regex starts with a (?!...) of its own: the profile cannot bound "
            "its length",
        )
    return f"(?!(?s:.){{{length + 1}}})" + _group(terminal.pattern, terminal.flags)


def _group(pattern: str, flags: str) -> str:
    """`pattern` as a group that carries its own flags (only "i" exists)."""
    return f"(?{flags}:{pattern})"

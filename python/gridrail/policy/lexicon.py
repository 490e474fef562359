"""Schema lexicons (L3): identifier terminals restricted to the names a role may see.

Each lexicon category of the grammar's catalogue (TABLE_NAME, COLUMN_NAME, FUNCTION_NAME in
sqlite) gets a new regex: the finite set of ways to write its allowed words. Terminal indices,
priorities and the other terminals are untouched, so lexeme boundaries stay the dialect's (the
generic alias terminals still take the longest identifier) and only *which* names can be this
terminal changes. The mask, the specification and the parser all see one ordinary grammar.

A word is written
  - bare, if the dialect lets an unquoted name denote it (PostgreSQL: only lower-case names),
    the category's L1 regex spells it, and no terminal of a higher class (a reserved keyword)
    takes the same text; ASCII case is free where the dialect ignores or folds it;
  - quoted, in each of the dialect's quote styles (case free where the dialect ignores it).
Precondition W_c ⊆ R_c (paper §2) is then *checked*, not assumed: the new regex's language must
be inside the L1 terminal's (a DFA inclusion test), and every word must have at least one form —
a name that cannot be written raises LexiconError naming it, never disappears silently.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

from gridrail.errors import LexiconError, RegexTooLargeError
from gridrail.grammar.dfa import ByteDFA, compile_regex
from gridrail.grammar.model import Grammar, TerminalDef
from gridrail.policy.constructs import ConstructCatalogue, LexiconCategory
from gridrail.policy.dialect import IdentifierRules
from gridrail.policy.view import SchemaView


@dataclass(frozen=True)
class Lexicon:
    """The words of one category and the regex its terminal now has."""

    category: LexiconCategory
    words: tuple[str, ...]
    pattern: str  # "" when there are no words: the terminal can never be produced


def build_lexicons(
    grammar: Grammar, catalogue: ConstructCatalogue, view: SchemaView
) -> tuple[Lexicon, ...]:
    """The lexicon of every category the catalogue names, for what `view` lets its role see.
    Categories whose words are "all of them" (a role without a function list) are left out:
    the terminal keeps its L1 regex."""
    out = []
    for category in catalogue.lexicons:
        words = _words(category, view)
        if words is None:
            continue
        out.append(_lexicon(grammar, category, words, view.schema.rules))
    return tuple(out)


def apply_lexicons(grammar: Grammar, lexicons: tuple[Lexicon, ...]) -> Grammar:
    """`grammar` with each lexicon's terminal regex replaced. A category with no word at all
    loses every production that needs it (reduce the result before use)."""
    by_terminal = {lex.category.terminal: lex for lex in lexicons}
    terminals = tuple(
        _with_pattern(t, by_terminal[t.name].pattern) if t.name in by_terminal else t
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


def _with_pattern(terminal: TerminalDef, pattern: str) -> TerminalDef:
    return replace(terminal, pattern=pattern, flags="", is_literal=False)


def _words(category: LexiconCategory, view: SchemaView) -> tuple[str, ...] | None:
    rules = view.schema.rules
    if category.words == "tables":
        return tuple(t.name for t in view.tables)
    if category.words == "columns":
        seen: dict[str, str] = {}
        for table in view.tables:
            for column in view.columns(table):
                seen.setdefault(rules.catalog_key(column.name), column.name)
        return tuple(seen.values())
    assert category.words == "functions"
    if view.role is None or view.role.functions is None:
        return None
    return tuple(sorted(view.role.functions))


def _lexicon(
    grammar: Grammar, category: LexiconCategory, words: tuple[str, ...], rules: IdentifierRules
) -> Lexicon:
    if not words:
        return Lexicon(category, (), "")
    l1 = grammar.terminal(category.terminal)
    l1_dfa = compile_regex(l1.pattern, l1.flags)
    if category.words == "functions":  # SQL function names ignore case in every dialect
        forms = [_regex(w, ignore_case=True) for w in words]
    else:
        shadows = _higher_class_dfas(grammar, l1)
        forms = []
        for word in words:
            word_forms = _identifier_forms(word, rules, l1_dfa, shadows)
            if not word_forms:
                raise LexiconError(
                    f"{category.terminal} {word!r} cannot be written: no bare or quoted form of "
                    f"it is a {category.terminal} lexeme of the grammar"
                )
            forms.extend(word_forms)
    pattern = "(?:" + "|".join(forms) + ")" + category.suffix
    try:
        spelled = compile_regex(pattern)
    except RegexTooLargeError as too_large:
        raise LexiconError(
            f"the {category.terminal} lexicon of {len(words)} names ({len(forms)} spellings) "
            f"is too large for the scanner: {too_large.bound}. Let the role see fewer tables "
            "or columns (the policy's `tables` and column rules)"
        ) from None
    witness = _outside(spelled, l1_dfa)
    if witness is not None:
        raise LexiconError(
            f"the {category.terminal} lexicon spells {witness!r}, which the grammar's "
            f"{category.terminal} regex does not accept (W_c ⊆ R_c fails)"
        )
    return Lexicon(category, words, pattern)


def _identifier_forms(
    word: str, rules: IdentifierRules, l1_dfa: ByteDFA, shadows: tuple[ByteDFA, ...]
) -> list[str]:
    forms = []
    bare = word.encode("utf-8")
    if (
        rules.bare_may_denote(word)
        and l1_dfa.fullmatch(bare)
        and not any(d.fullmatch(bare) for d in shadows)
    ):
        forms.append(_regex(word, ignore_case=rules.case_insensitive or rules.folds_unquoted))
    for style in rules.quote_styles:
        quoted = style.quote(word)
        if quoted is not None and l1_dfa.fullmatch(quoted.encode("utf-8")):
            forms.append(_regex(quoted, ignore_case=rules.case_insensitive))
    return forms


def _higher_class_dfas(grammar: Grammar, terminal: TerminalDef) -> tuple[ByteDFA, ...]:
    """Terminals whose lexemes shadow `terminal`'s (reserved keywords): a bare word they match
    is never `terminal`, so it must be written quoted."""
    rank = (terminal.priority, terminal.is_literal)
    return tuple(
        compile_regex(t.pattern, t.flags)
        for t in grammar.terminals
        if (t.priority, t.is_literal) > rank and t.name not in grammar.declared
    )


def _regex(text: str, ignore_case: bool) -> str:
    """`text` as a regex matching it exactly (ASCII letters either case if `ignore_case`)."""
    out = []
    for ch in text:
        if ignore_case and ch.isascii() and ch.isalpha():
            out.append(f"[{ch.lower()}{ch.upper()}]")
        elif ch.isascii() and not ch.isalnum():
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def _outside(inner: ByteDFA, outer: ByteDFA) -> str | None:
    """A shortest string of `inner`'s language that `outer` rejects (None: inclusion holds)."""
    if inner.start < 0:
        return None
    t_in, t_out = inner.transitions, outer.transitions
    seen = {(inner.start, outer.start): b""}
    queue = deque([(inner.start, outer.start)])
    while queue:
        p, q = queue.popleft()
        path = seen[(p, q)]
        if inner.accepting[p] and (q < 0 or not outer.accepting[q]):
            return path.decode("utf-8", "backslashreplace")
        for byte in range(256):
            p2 = t_in[(p << 8) | byte]
            if p2 < 0:
                continue
            q2 = t_out[(q << 8) | byte] if q >= 0 else -1
            if (p2, q2) not in seen:
                seen[(p2, q2)] = path + bytes((byte,))
                queue.append((p2, q2))
    return None

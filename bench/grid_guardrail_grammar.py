r"""A Lark grammar as grid-guardrail's `.grid` grammar source, for bench/engine_compare.py.

grid-guardrail (Python package `grid`) reads only its own line-oriented BNF: `%start`,
`%ignore NAME`, terminal lines `NAME: /regex/` in a small byte-regex dialect (literal bytes,
`\xNN`, `[...]` byte classes, `( | ) * + ? {m,n}`; no flags, no lookaround) and rule lines
`rule: SYM SYM | SYM` without EBNF. `grid_source` writes one from the Lark file through gridrail's
own reading of it (`gridrail.Grammar`: EBNF expanded to BNF as Lark expands it, terminal regexes
parsed by `gridrail.grammar.regex_syntax` with Python `re` + `re.ASCII` semantics), so both
engines get the same productions and the same terminal languages:

* productions: one `.grid` rule line per left-hand side, its alternatives in gridrail's order;
* terminals: every terminal, string literals included, becomes a named `.grid` terminal whose
  regex is the exact UTF-8 byte form of gridrail's code-point language: each character class
  is its ASCII bytes plus the UTF-8 byte sequences of its non-ASCII ranges (surrogates have
  none), `i` flags already folded into ASCII letter pairs, repetitions kept as `* + ? {m,n}`;
  a class with no code point at all (the grammar's NO_INPUT) is the empty byte class;
* `%ignore`: the same ignored terminals (whitespace and both comment forms);
* lexing order: grid breaks a longest-match tie by its terminal priority, literals before
  named terminals, then declaration order; the terminals are declared in gridrail's order of
  preference (higher Lark priority, then string literals, then definition index), so where
  several are viable the same one wins in both engines.

What `.grid` cannot express, so the translation refuses it (ValueError): leading-lookahead
exclusions (`(?!...)`), terminals spelled from schema name sets, `%declare`d terminals, a rule
whose only alternative is empty, and names `.grid` cannot spell. `engine_compare.py
--portable` removes the exclusions and the priorities before this runs.

Two differences of lexing remain; they are grid's (0.4.2, kernel and Python walk alike), not the
translation's:

* Shadowing. gridrail refuses a lexeme whose best-ranked candidate the parser cannot shift (a
  reserved keyword literal shadows the identifiers: `SELECT a FROM from;` is rejected at the
  second `from`, `ON i.order` cannot end there), while grid takes the best-ranked candidate the
  parser *can* shift and lexes `from` as a table name. grid's language is that much larger: its
  masks may allow a reserved word where only a name can stand.
* Backing off to a shorter lexeme. Both scanners take the longest match and, when a byte ends a
  longer candidate, fall back to the last complete lexeme (`LIKE` in `LIKE 'x'`, once the space
  has left `like[ \t\r\n]*\(` possible). grid's accept does so, but its mask walk drops every
  token with a prefix after which the unfinished lexeme can only become terminals the parser
  cannot take here (it prunes that branch of the token trie), without looking back at the
  complete lexeme before it. The grammar's function-call terminals
  hold the whitespace before their "(" (`like (`, `date (`, `total (`), so where no function
  call can stand, after the keyword `LIKE` or a column named `date` or `total` (`T2.date`, a
  column list), grid's mask allows no token that starts with whitespace: a statement written
  `b LIKE 'x'` leaves grid's mask there, and bench/engine_compare.py reports its replay as
  rejected (the token is not in the mask), although grid would accept the token.
"""

from __future__ import annotations

import re
from pathlib import Path

from gridrail.grammar.model import Grammar, TerminalDef
from gridrail.grammar.regex_syntax import (
    Alternation,
    CharSet,
    Concat,
    Excluding,
    Node,
    Repeat,
    parse_regex,
)

GRID_TERMINAL_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
GRID_RULE_NAME = re.compile(r"[a-z_][a-z0-9_]*")
NO_BYTE = r"[^\x00-\xff]"  # the empty byte class: matches nothing

# UTF-8 encoding lengths: the code points each length covers (surrogates excepted).
UTF8_LENGTH_RANGES = ((0x80, 0x7FF), (0x800, 0xFFFF), (0x10000, 0x10FFFF))


def grid_source(grammar_path: Path) -> str:
    """The `.grid` source of the Lark grammar at `grammar_path` (see the module docstring)."""
    grammar = Grammar.from_file(grammar_path)
    if grammar.declared:
        raise ValueError(f"%declare'd terminals have no .grid form: {sorted(grammar.declared)}")
    lines = [f"%start {check_name(grammar.start, GRID_RULE_NAME)}"]
    lines += [f"%ignore {name}" for name in sorted(grammar.ignored)]
    lines += [terminal_line(t) for t in sorted(grammar.terminals, key=preference)]
    lines += rule_lines(grammar)
    return "\n".join(lines) + "\n"


def preference(terminal: TerminalDef) -> tuple[int, bool, int]:
    """gridrail's order among terminals matching the same lexeme: priority, literal, index."""
    return (-terminal.priority, not terminal.is_literal, terminal.index)


def check_name(name: str, pattern: re.Pattern[str]) -> str:
    if not pattern.fullmatch(name):
        raise ValueError(f"{name!r} is not a name .grid can spell ({pattern.pattern})")
    return name


def terminal_line(terminal: TerminalDef) -> str:
    if terminal.names is not None:
        raise ValueError(f"terminal {terminal.name}: a schema name set has no .grid form")
    node = parse_regex(terminal.pattern, terminal.flags)
    if isinstance(node, Excluding):
        raise ValueError(f"terminal {terminal.name}: .grid regexes have no (?!...) exclusion")
    return f"{check_name(terminal.name, GRID_TERMINAL_NAME)}: /{byte_regex(node)}/"


def rule_lines(grammar: Grammar) -> list[str]:
    """One line per left-hand side; an empty alternative is the empty text between two bars."""
    alternatives: dict[str, list[str]] = {}
    for production in grammar.productions:
        alternatives.setdefault(production.lhs, []).append(" ".join(production.rhs))
    lines = []
    for lhs, alts in alternatives.items():
        if alts == [""]:
            raise ValueError(f"rule {lhs}: an only-empty rule has no .grid form")
        lines.append(f"{check_name(lhs, GRID_RULE_NAME)}: " + " | ".join(alts).strip())
    return lines


# ----- gridrail's code-point regex AST as a grid byte regex --------------------------------------


def byte_regex(node: Node) -> str:
    if isinstance(node, CharSet):
        return char_set(node)
    if isinstance(node, Concat):
        return "".join(byte_regex(item) for item in node.items)
    if isinstance(node, Alternation):
        return "(" + "|".join(byte_regex(option) for option in node.options) + ")"
    if isinstance(node, Repeat):
        return f"({byte_regex(node.item)}){quantifier(node.min, node.max)}"
    raise ValueError(f"no .grid form for regex node {node!r}")


def quantifier(low: int, high: int | None) -> str:
    return {(0, None): "*", (1, None): "+", (0, 1): "?"}.get(
        (low, high), f"{{{low},{'' if high is None else high}}}"
    )


def char_set(node: CharSet) -> str:
    """One code point of `node` as bytes: an ASCII byte class or a UTF-8 byte sequence."""
    ascii_ranges = [(lo, min(hi, 0x7F)) for lo, hi in node.ranges if lo <= 0x7F]
    options = [byte_class(ascii_ranges)] if ascii_ranges else []
    for lo, hi in node.ranges:
        for sequence in utf8_sequences(max(lo, 0x80), hi):
            options.append("".join(byte_class([byte_range]) for byte_range in sequence))
    if not options:
        return NO_BYTE
    return options[0] if len(options) == 1 else "(" + "|".join(options) + ")"


def byte_class(ranges: list[tuple[int, int]]) -> str:
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return byte_escape(ranges[0][0])
    body = "".join(
        byte_escape(lo) if lo == hi else f"{byte_escape(lo)}-{byte_escape(hi)}" for lo, hi in ranges
    )
    return f"[{body}]"


def byte_escape(byte: int) -> str:
    """Letters and digits as themselves, every other byte as `\\xNN` (no metacharacter, no
    whitespace that the line-oriented format would strip)."""
    char = chr(byte)
    return char if char.isascii() and char.isalnum() else f"\\x{byte:02x}"


def utf8_sequences(lo: int, hi: int) -> list[tuple[tuple[int, int], ...]]:
    """The UTF-8 encodings of the code points `lo..hi` (non-ASCII, no surrogates) as byte-range
    sequences: each sequence matches exactly the encodings of one sub-range."""
    out = []
    for first, last in UTF8_LENGTH_RANGES:
        if lo <= last and first <= hi:
            out += same_length_sequences(max(lo, first), min(hi, last))
    return out


def same_length_sequences(lo: int, hi: int) -> list[tuple[tuple[int, int], ...]]:
    """`lo..hi` (one encoding length) split until every byte position ranges independently: a
    range is split where it does not cover whole blocks of continuation bytes."""
    length = len(chr(lo).encode())
    for tail in range(1, length):
        block = (1 << (6 * tail)) - 1  # the code points that share all bytes but the last `tail`
        if lo & ~block == hi & ~block:
            continue
        if lo & block:
            return same_length_sequences(lo, lo | block) + same_length_sequences(
                (lo | block) + 1, hi
            )
        if hi & block != block:
            return same_length_sequences(lo, (hi & ~block) - 1) + same_length_sequences(
                hi & ~block, hi
            )
    return [tuple(zip(chr(lo).encode(), chr(hi).encode(), strict=True))]

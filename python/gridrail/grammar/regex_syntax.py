"""Python ``re`` syntax, as written in Lark terminals, parsed into a small AST over code points.

Every one-character construct (literal, escape, class, ``.``) becomes a :class:`CharSet` whose code
points already include the effect of the flags in scope (case folding, dot-all), so later stages
never see flags. The meaning is Python's ``re`` on ``str`` with ``re.ASCII``: ``\\d \\w \\s`` are
ASCII classes and case-insensitive matching folds the ASCII letters only (SQL lexers are ASCII;
Unicode folding would let ``ſelect`` match ``select``). Non-ASCII code points are matched when
written explicitly (``é``, ``[^\\x00-\\x7f]``), always exactly. Surrogates (U+D800–U+DFFF) are
dropped from every set: they have no UTF-8 encoding.

A negative lookahead at the very start of the pattern, ``(?!X)Y``, is supported (an
:class:`Excluding` root: ``Y`` minus the strings that start with an ``X``). Constructs that are
not regular, or that need context outside the lexeme (anchors, other lookaround, backreferences,
conditionals, possessive quantifiers, atomic groups), raise :class:`RegexError` naming the
construct and its position in the pattern.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

from gridrail.errors import RegexError

MAX_CODE_POINT = 0x10FFFF
_SURROGATES = ((0xD800, 0xDFFF),)

# Inclusive code point ranges, sorted, disjoint and non-adjacent.
Ranges = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class CharSet:
    """Exactly one code point out of ``ranges`` (never a surrogate). Empty ranges match nothing."""

    ranges: Ranges


@dataclass(frozen=True)
class Concat:
    """The items one after the other; no items is the empty string."""

    items: tuple[Node, ...]


@dataclass(frozen=True)
class Alternation:
    """Any one of the options."""

    options: tuple[Node, ...]


@dataclass(frozen=True)
class Repeat:
    """``item`` repeated ``min`` to ``max`` times (``max`` None: unbounded)."""

    item: Node
    min: int
    max: int | None


Node = CharSet | Concat | Alternation | Repeat


@dataclass(frozen=True)
class Excluding:
    r"""The strings of ``keep`` that do not start with a string of ``prefix``: Python's
    ``(?!prefix)keep`` under fullmatch, the one lookaround a lexeme language has (a leading
    negative lookahead; a terminal uses it to leave out words, as a qualifier leaves out the
    reserved ones). With ``whole`` (``(?!prefix\Z)keep``) only the strings that are a
    ``prefix`` string entirely are left out. Only ever the root of a parsed pattern."""

    keep: Node
    prefix: Node
    whole: bool = False


# The semantics are Python's `re` with this flag, always (docs/semantics.md).
SEMANTIC_FLAGS = re.ASCII
# The name of these semantics, part of every grammar's canonical form (and so of its
# fingerprint): a grammar archived under other semantics is another language.
REGEX_SEMANTICS = "python-re-ascii-v1"

# Flag letters a terminal may carry. "m" changes nothing we support (anchors are rejected) and "a"
# is the semantics anyway; "u" and "L" would change \w and case folding, so they are refused
# (with _ENCODING_FLAG_ERROR) rather than silently ignored.
_RE_FLAGS = {"i": re.IGNORECASE, "s": re.DOTALL, "x": re.VERBOSE, "m": re.MULTILINE, "a": 0}
_ENCODING_FLAGS = "uL"
_ENCODING_FLAG_ERROR = (
    "gridrail regexes have ASCII semantics (Python re with re.ASCII: ASCII \\w \\d \\s and ASCII "
    "case folding, as SQL lexers); write non-ASCII characters explicitly instead"
)


def parse_regex(pattern: str, flags: str = "") -> Node | Excluding:
    """Parse ``pattern`` (Python ``re`` syntax) with the flag letters ``flags`` into an AST, with
    the meaning ``re`` gives it under ``re.ASCII`` (docs/semantics.md)."""
    return _parse(pattern, flags)[0]


def leading_exclusion(pattern: str, flags: str = "") -> str:
    """The pattern's leading ``(?!...)`` as written, or "" when it has none: what a terminal
    narrowed to a new regex must keep to stay inside its former language."""
    start, end = _parse(pattern, flags)[1]
    return pattern[start:end]


def _parse(pattern: str, flags: str) -> tuple[Node | Excluding, tuple[int, int]]:
    """The AST and the span of the leading ``(?!...)`` ((0, 0) without one)."""
    re_flags = 0
    for letter in flags:
        if letter in _ENCODING_FLAGS:
            raise RegexError(
                f"regex flag {letter!r} is not supported (in {quote_pattern(pattern)}): "
                f"{_ENCODING_FLAG_ERROR}"
            )
        if letter not in _RE_FLAGS:
            raise RegexError(f"unsupported regex flag {letter!r} (in {quote_pattern(pattern)})")
        re_flags |= _RE_FLAGS[letter]
    depth = _group_depth(pattern)
    if depth > MAX_GROUP_NESTING:
        raise RegexError(
            f"groups nest {depth} deep; at most {MAX_GROUP_NESTING} levels are supported "
            f"(in {quote_pattern(pattern)})"
        )
    try:
        # Python's own parser decides what is well-formed, so malformed patterns get its messages.
        # (Without re.ASCII here: an inline "(?u)" would be "incompatible" with it; the parser
        # below refuses "u" with a clearer message.)
        re.compile(pattern, re_flags)
    except re.error as err:
        where = quote_pattern(pattern, err.pos)
        raise RegexError(f"{err.msg} at position {err.pos} (in {where})") from None
    except OverflowError as err:
        raise RegexError(f"{err} (in {quote_pattern(pattern)})") from None
    scope = _Flags(ignorecase="i" in flags, dotall="s" in flags, verbose="x" in flags)
    parser = _Parser(pattern, scope)
    return parser.parse(), parser.excluded_span


# Deeper nesting is refused before anything reads the pattern recursively (Python's own parser
# included), so it is an error, not a RecursionError; composed terminals nest a few levels.
MAX_GROUP_NESTING = 100
# Messages quote at most this much of a pattern: a schema lexicon's can be megabytes.
QUOTED_PATTERN_CHARS = 80


def quote_pattern(pattern: str, position: int | None = None) -> str:
    """``/pattern/`` for a message; a long pattern is cut to an excerpt around ``position``
    (default: its start), saying which characters it shows."""
    if len(pattern) <= QUOTED_PATTERN_CHARS:
        return f"/{pattern}/"
    start = 0 if position is None else position - QUOTED_PATTERN_CHARS // 2
    start = max(0, min(start, len(pattern) - QUOTED_PATTERN_CHARS))
    end = start + QUOTED_PATTERN_CHARS
    lead, trail = "…" if start else "", "…" if end < len(pattern) else ""
    return f"/{lead}{pattern[start:end]}{trail}/ (characters {start}-{end} of {len(pattern)})"


def _group_depth(pattern: str) -> int:
    """How deep parentheses nest in ``pattern``, escapes and character classes skipped."""
    depth = deepest = 0
    i, end = 0, len(pattern)
    while i < end:
        ch = pattern[i]
        if ch == "\\":
            i += 1
        elif ch == "[":  # a class ends at the first "]" that is not its first character
            i += 2 if pattern.startswith("^", i + 1) else 1
            i += 1 if pattern.startswith("]", i) else 0
            while i < end and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
        elif ch == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")":
            depth -= 1
        i += 1
    return deepest


# ---------------------------------------------------------------------------------------------
# Code point range sets


def _normalize(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """Sort and merge overlapping or adjacent ranges."""
    merged: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return tuple((lo, hi) for lo, hi in merged)


def _complement(ranges: Ranges) -> Ranges:
    out = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CODE_POINT:
        out.append((nxt, MAX_CODE_POINT))
    return tuple(out)


def _difference(a: Ranges, b: Ranges) -> Ranges:
    """Code points in ``a`` but not in ``b`` (both normalized)."""
    out = []
    j = 0
    for lo, hi in a:
        while j < len(b) and b[j][1] < lo:
            j += 1
        k = j
        while lo <= hi and k < len(b) and b[k][0] <= hi:
            if b[k][0] > lo:
                out.append((lo, b[k][0] - 1))
            lo = max(lo, b[k][1] + 1)
            k += 1
        if lo <= hi:
            out.append((lo, hi))
    return tuple(out)


def _char_set(ranges: Iterable[tuple[int, int]]) -> CharSet:
    return CharSet(_difference(_normalize(ranges), _SURROGATES))


# ---------------------------------------------------------------------------------------------
# Code point tables, computed from Python's own `re` (with SEMANTIC_FLAGS) so that the meaning is
# exactly re's.


def _all_code_points() -> str:
    """Every code point but the surrogates, in order (index i is code point i, or i + 0x800)."""
    points = array("I", range(0xD800))
    points.extend(range(0xE000, MAX_CODE_POINT + 1))
    return points.tobytes().decode("utf-32-le" if sys.byteorder == "little" else "utf-32-be")


def _code_point_at(index: int) -> int:
    return index if index < 0xD800 else index + 0x800


@functools.cache
def _category_tables() -> dict[str, Ranges]:
    """Ranges of ``\\d``, ``\\w`` and ``\\s`` as Python's ``re`` matches them on ``str`` with
    ``re.ASCII``: ``[0-9]``, ``[a-zA-Z0-9_]``, ``[ \\t\\n\\r\\f\\v]``."""
    text = _all_code_points()
    tables = {}
    for letter in "dws":
        runs = re.finditer(f"\\{letter}+", text, SEMANTIC_FLAGS)
        spans = ((_code_point_at(m.start()), _code_point_at(m.end() - 1)) for m in runs)
        tables[letter] = _difference(_normalize(spans), _SURROGATES)
    return tables


def _category(letter: str) -> Ranges:
    """``\\d \\D \\w \\W \\s \\S`` (``letter`` is the escape letter) as normalized ranges."""
    table = _category_tables()[letter.lower()]
    return _complement(table) if letter.isupper() else table


# The code points that ASCII case-insensitive matching can treat differently from exact matching.
# Under re.ASCII | re.IGNORECASE, `re` lowers only A-Z (on the pattern and on the input), so a
# non-ASCII code point matches a one-character construct exactly when it is in its exact set: no
# ſ/s, ı/i, İ/i, K/k (U+212A), Å/å (U+212B) pairs. test_regex_dfa checks this over all of Unicode.
_CASE_CANDIDATES = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_CASE_CANDIDATE_RANGES: Ranges = ((0x41, 0x5A), (0x61, 0x7A))


@functools.cache
def _fold_case(ranges: Ranges, atom_source: str) -> Ranges:
    """The code points ``atom_source`` (one-character regex whose exact set is ``ranges``) matches
    under ``re.IGNORECASE`` (with ``re.ASCII``, as always).

    Outside the ASCII letters, ignoring case changes nothing; each letter is decided by ``re``
    itself, so the rules of its case-insensitive classes (negation included) are reproduced
    exactly.
    """
    matcher = re.compile(atom_source, re.IGNORECASE | SEMANTIC_FLAGS)
    matched = ((ord(m.group()), ord(m.group())) for m in matcher.finditer(_CASE_CANDIDATES))
    return _normalize(_difference(ranges, _CASE_CANDIDATE_RANGES) + tuple(matched))


# ---------------------------------------------------------------------------------------------
# The parser: mirrors the structure of CPython's re/_parser.py so that it reads patterns the same.

_WHITESPACE = " \t\n\r\v\f"
_OCTAL = "01234567"
_HEX = "0123456789abcdefABCDEF"
_SIMPLE_ESCAPES = {
    "a": 0x07,
    "f": 0x0C,
    "n": 0x0A,
    "r": 0x0D,
    "t": 0x09,
    "v": 0x0B,
    "\\": 0x5C,
}
_ANCHOR_ESCAPES = {"A": "anchor \\A", "Z": "anchor \\Z", "b": "word boundary \\b", "B": "\\B"}


@dataclass(frozen=True)
class _Flags:
    ignorecase: bool = False
    dotall: bool = False
    verbose: bool = False

    def apply(self, add: str, remove: str) -> _Flags:
        def on(letter: str, current: bool) -> bool:
            return (current or letter in add) and letter not in remove

        return _Flags(on("i", self.ignorecase), on("s", self.dotall), on("x", self.verbose))


class _Parser:
    def __init__(self, pattern: str, flags: _Flags):
        self.pattern = pattern
        self.pos = 0
        # Flags set by a global group such as "(?i)" at the start apply to every later branch.
        self.global_flags = flags
        self.excluded: Node | None = None  # the body of a leading (?!...)
        self.excluded_span = (0, 0)  # where that (?!...) is in the pattern
        self.in_exclusion = False
        self.whole_end = -1  # where the ")" after a "\Z" ending that (?!...) is

    def parse(self) -> Node | Excluding:
        node = self._alternation(self.global_flags, top=True)
        if self.pos != len(self.pattern):  # an unmatched ")": re.compile() rejects it first
            raise self._error("unbalanced parenthesis", self.pos)
        if self.excluded is None:
            return node
        return Excluding(node, self.excluded, whole=self.whole_end >= 0)

    def _error(self, message: str, pos: int) -> RegexError:
        where = quote_pattern(self.pattern, pos)
        return RegexError(f"{message} at position {pos} (in {where})")

    def _unsupported(self, construct: str, pos: int) -> RegexError:
        return self._error(f"{construct} is not supported (not a regular lexeme language)", pos)

    def _peek(self) -> str | None:
        return self.pattern[self.pos] if self.pos < len(self.pattern) else None

    def _match(self, text: str) -> bool:
        if self.pattern.startswith(text, self.pos):
            self.pos += len(text)
            return True
        return False

    def _take_while(self, allowed: str, limit: int = sys.maxsize) -> str:
        start = self.pos
        while self.pos - start < limit and self.pos < len(self.pattern):
            if self.pattern[self.pos] not in allowed:
                break
            self.pos += 1
        return self.pattern[start : self.pos]

    # -- structure --------------------------------------------------------------------------

    def _alternation(self, flags: _Flags, top: bool = False) -> Node:
        branches = [self._sequence(flags, first=top)]
        while self._match("|"):
            if top:
                if self.excluded is not None:  # Python's (?!X)A|B guards A alone
                    raise self._error(
                        "a leading (?!...) guards only the first branch of a top-level | in "
                        "Python; not supported: write (?!...)(?:a|b)",
                        0,
                    )
                flags = self.global_flags
            branches.append(self._sequence(flags, first=False))
        return branches[0] if len(branches) == 1 else Alternation(tuple(branches))

    def _sequence(self, flags: _Flags, first: bool) -> Node:
        items: list[Node] = []
        # The last Repeat made by a quantifier here: quantifying it again is a "multiple repeat".
        quantified: Node | None = None
        while (ch := self._peek()) is not None and ch not in "|)":
            start = self.pos
            self.pos += 1
            if flags.verbose and ch in _WHITESPACE:
                continue
            if flags.verbose and ch == "#":
                newline = self.pattern.find("\n", self.pos)
                self.pos = len(self.pattern) if newline < 0 else newline + 1
                continue
            if ch in "*+?{":
                bounds = self._quantifier_bounds(ch)
                if bounds is not None:
                    if not items or items[-1] is quantified:
                        reason = "multiple repeat" if items else "nothing to repeat"
                        raise self._error(reason, start)
                    if self._match("+"):
                        raise self._unsupported("possessive quantifier", start)
                    self._match("?")  # a lazy quantifier accepts the same language
                    items[-1] = quantified = Repeat(items[-1], bounds[0], bounds[1])
                    continue
            if ch == "\\":
                items.append(self._escape(start, flags))
            elif ch in "^$":
                raise self._unsupported(f"anchor {ch}", start)
            elif ch == "[":
                items.append(self._class(start, flags))
            elif ch == ".":
                everything = ((0, MAX_CODE_POINT),)
                items.append(_char_set(everything if flags.dotall else _complement(((10, 10),))))
            elif ch == "(" and first and not items and self._match("?!"):
                if self.excluded is not None:
                    raise self._error(
                        "a second leading (?!...) is not supported: write one, (?!a|b)", start
                    )
                self.in_exclusion = True
                self.excluded = self._group_body(start, flags)
                self.in_exclusion = False
                self.excluded_span = (start, self.pos)
                ends_whole = self.whole_end == self.pos - 1
                if self.whole_end >= 0 and (
                    not ends_whole or isinstance(self.excluded, Alternation)
                ):
                    raise self._error(
                        "\\Z is supported only at the very end of a leading (?!...), after all "
                        "of its branches: write (?!(?:a|b)\\Z)",
                        start,
                    )
            elif ch == "(":
                group = self._group(start, flags, first and not items)
                if isinstance(group, _Flags):
                    flags = self.global_flags = group
                elif group is not None:
                    items.append(group)
            else:  # a literal, including "{" that does not start a quantifier, "]" and "}"
                items.append(self._literal(ord(ch), start, flags))
        return items[0] if len(items) == 1 else Concat(tuple(items))

    def _quantifier_bounds(self, ch: str) -> tuple[int, int | None] | None:
        """Bounds of the quantifier starting with ``ch``, or None when "{" is a plain literal."""
        if ch == "?":
            return 0, 1
        if ch == "*":
            return 0, None
        if ch == "+":
            return 1, None
        after_brace = self.pos
        if self._peek() == "}":
            return None
        lo = self._take_while("0123456789")
        hi = self._take_while("0123456789") if self._match(",") else lo
        if not self._match("}"):
            self.pos = after_brace
            return None
        return (int(lo) if lo else 0), (int(hi) if hi else None)

    def _group(self, start: int, flags: _Flags, first: bool) -> Node | _Flags | None:
        """A parenthesized construct: a node, new global flags, or None for a comment."""
        if not self._match("?"):
            return self._group_body(start, flags)
        if self._match(":"):
            return self._group_body(start, flags)
        if self._match("P<"):
            self.pos = self.pattern.index(">", self.pos) + 1
            return self._group_body(start, flags)
        if self._match("P="):
            raise self._unsupported("named backreference (?P=...)", start)
        if self._match("#"):
            # A comment ends at the first ")" that is not escaped.
            while (ch := self.pattern[self.pos]) != ")":
                self.pos += 2 if ch == "\\" else 1
            self.pos += 1
            return None
        for prefix, construct in (
            ("=", "lookahead (?=...)"),
            ("!", "negative lookahead (?!...) other than at the start of the pattern"),
            ("<=", "lookbehind (?<=...)"),
            ("<!", "negative lookbehind (?<!...)"),
            ("(", "conditional group (?(...)...)"),
            (">", "atomic group (?>...)"),
        ):
            if self._match(prefix):
                raise self._unsupported(construct, start)
        return self._flag_group(start, flags, first)

    def _flag_group(self, start: int, flags: _Flags, first: bool) -> Node | _Flags:
        add = self._take_while("aiLmstux")
        remove = self._take_while("imsx") if self._match("-") else ""
        for letter in _ENCODING_FLAGS:  # "a" (ASCII) is the semantics anyway: a no-op
            if letter in add:
                raise RegexError(
                    f"inline flag {letter!r} at position {start} is not supported "
                    f"(in {quote_pattern(self.pattern, start)}): {_ENCODING_FLAG_ERROR}"
                )
        if "t" in add:
            raise self._unsupported("inline flag 't'", start)
        if self._match(")"):
            if not first:  # re.compile() rejects this already
                raise self._error("global flags not at the start of the expression", start)
            return self.global_flags.apply(add, "")
        self._match(":")
        return self._group_body(start, flags.apply(add, remove))

    def _group_body(self, start: int, flags: _Flags) -> Node:
        node = self._alternation(flags)
        if not self._match(")"):
            raise self._error("missing ), unterminated subpattern", start)
        return node

    # -- single characters ------------------------------------------------------------------

    def _literal(self, code: int, start: int, flags: _Flags) -> CharSet:
        return self._atom(((code, code),), start, flags)

    def _atom(self, ranges: Iterable[tuple[int, int]], start: int, flags: _Flags) -> CharSet:
        """A one-character construct spanning ``pattern[start:self.pos]``."""
        exact = _normalize(ranges)
        if flags.ignorecase:
            exact = _fold_case(exact, self.pattern[start : self.pos])
        return _char_set(exact)

    def _escape(self, start: int, flags: _Flags) -> CharSet:
        letter = self._peek()
        if letter is None:  # re.compile() rejects this already
            raise self._error("bad escape (end of pattern)", start)
        if letter == "Z" and self.in_exclusion and self.whole_end < 0:
            self.pos += 1
            self.whole_end = self.pos  # checked to be the (?!...)'s ")" when it closes
            return Concat(())
        if letter in _ANCHOR_ESCAPES:
            raise self._unsupported(_ANCHOR_ESCAPES[letter], start)
        if letter in "123456789":
            digits = self._take_while("0123456789", 3)
            if len(digits) == 3 and all(d in _OCTAL for d in digits):
                return self._literal(int(digits, 8), start, flags)
            raise self._unsupported(f"backreference \\{digits[:2]}", start)
        if letter in "dDwWsS":
            self.pos += 1
            return self._atom(_category(letter), start, flags)
        return self._literal(self._char_escape(start, in_class=False), start, flags)

    def _char_escape(self, start: int, in_class: bool) -> int:
        """The code point of a one-character escape whose backslash is at ``start``."""
        letter = self.pattern[self.pos]
        self.pos += 1
        if letter in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[letter]
        if letter == "b" and in_class:
            return 0x08
        if letter in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[letter]
            return int(self._take_while(_HEX, width), 16)
        if letter == "N":
            end = self.pattern.index("}", self.pos)
            name = self.pattern[self.pos + 1 : end]
            self.pos = end + 1
            return ord(unicodedata.lookup(name))
        if letter in _OCTAL:
            # Outside a class "\0" starts an octal escape and "\1".."\7" were handled as
            # backreferences or three-digit octals; inside a class any octal digit starts one.
            return int(letter + self._take_while(_OCTAL, 2), 8)
        if letter.isascii() and letter.isalnum():  # re.compile() rejects this already
            raise self._error(f"bad escape \\{letter}", start)
        return ord(letter)

    def _class(self, start: int, flags: _Flags) -> CharSet:
        negate = self._match("^")
        items: list[tuple[int, int]] = []
        first = True
        while True:
            item_start = self.pos
            ch = self.pattern[self.pos]
            self.pos += 1
            if ch == "]" and not first:
                break
            first = False
            if ch == "\\" and self.pattern[self.pos] in "dDwWsS":
                self.pos += 1
                items.extend(_category(self.pattern[self.pos - 1]))
                continue  # re.compile() rejects a category as a range end point
            lo = self._class_char(ch, item_start)
            if self.pattern.startswith("-", self.pos) and not self.pattern.startswith(
                "-]", self.pos
            ):
                self.pos += 1
                hi_start = self.pos
                hi_char = self.pattern[self.pos]
                self.pos += 1
                items.append((lo, self._class_char(hi_char, hi_start)))
            else:
                items.append((lo, lo))
        ranges = _normalize(items)
        return self._atom(_complement(ranges) if negate else ranges, start, flags)

    def _class_char(self, ch: str, start: int) -> int:
        if ch != "\\":
            return ord(ch)
        if self.pattern[self.pos] in _ANCHOR_ESCAPES and self.pattern[self.pos] != "b":
            raise self._error(f"bad escape \\{self.pattern[self.pos]}", start)
        return self._char_escape(start, in_class=True)

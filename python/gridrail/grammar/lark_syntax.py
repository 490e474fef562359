"""Reading Lark grammar text into a syntax tree (no meaning yet: that is loader.py's job).

Supported: rule and terminal definitions (with ``?``/``!``/``_`` prefixes and ``.N`` priorities),
alternatives with ``-> alias``, groups ``( )``, optionals ``[ ]``, operators ``? * +`` and
``~ n`` / ``~ n..m``, string literals (``i`` flag), regex literals (``/.../flags``), literal
ranges ``"a".."z"``, and the directives ``%ignore``, ``%import``, ``%declare``. Anything else Lark
has (templates, ``%override``, ``%extend``) is rejected with a GrammarError naming the place.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field

from gridrail.errors import GrammarError, UsageError

# ---------------------------------------------------------------------------------------------
# Syntax tree


@dataclass(frozen=True)
class Ref:
    name: str
    line: int = field(compare=False)  # positions are for messages, not identity
    column: int = field(compare=False)


@dataclass(frozen=True)
class Literal:
    value: str
    flags: str  # "" or "i"


@dataclass(frozen=True)
class Pattern:
    source: str
    flags: str


@dataclass(frozen=True)
class CharRange:
    low: str
    high: str


@dataclass(frozen=True)
class Repeat:
    item: Node
    min: int
    max: int | None  # None = unbounded


@dataclass(frozen=True)
class Sequence:
    items: tuple[Node, ...]
    alias: str | None = None


@dataclass(frozen=True)
class Choice:
    options: tuple[Sequence, ...]


Node = Ref | Literal | Pattern | CharRange | Repeat | Sequence | Choice


@dataclass(frozen=True)
class Definition:
    """``name: body``; ``is_terminal`` iff the name is upper case."""

    name: str
    is_terminal: bool
    body: Choice
    priority: int
    line: int
    column: int
    expand_single: bool = False  # `?rule`: a tree-shaping hint, no effect on the language
    keep_tokens: bool = False  # `!rule`: idem


@dataclass(frozen=True)
class Ignore:
    body: Choice
    line: int
    column: int


@dataclass(frozen=True)
class Import:
    module: str  # dotted path, e.g. "common"
    names: tuple[tuple[str, str], ...]  # (imported name, local name)
    line: int
    column: int


@dataclass(frozen=True)
class Declare:
    names: tuple[str, ...]
    line: int
    column: int


Statement = Definition | Ignore | Import | Declare


@dataclass
class GrammarText:
    statements: list[Statement] = field(default_factory=list)
    source: str = "<grammar>"


# ---------------------------------------------------------------------------------------------
# Tokens of the meta-language

_TOKEN_SPECS = [
    ("COMMENT", r"//[^\n]*"),
    ("NL", r"\r?\n"),
    ("WS", r"[ \t\f]+"),
    ("DIRECTIVE", r"%[a-z_]+"),
    ("ARROW", r"->"),
    ("DOTDOT", r"\.\."),
    ("STRING", r'"(?:[^"\\\n]|\\.)*"i?'),
    ("REGEXP", r"/(?!/)(?:[^/\\\n]|\\.)+/[a-z]*"),
    ("NUMBER", r"[0-9]+"),
    ("NAME", r"[?!]?[_A-Za-z][_A-Za-z0-9]*"),
    ("OP", r"[:|()\[\]?*+~.,{}]"),
]
_TOKEN_RE = re.compile("|".join(f"(?P<{name}>{rx})" for name, rx in _TOKEN_SPECS))


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    line: int
    column: int


def _tokenize(text: str, source: str) -> list[_Tok]:
    tokens: list[_Tok] = []
    pos, line, line_start = 0, 1, 0
    depth = 0  # inside ( ) or [ ], newlines do not end a definition
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        column = pos - line_start + 1
        if m is None:
            raise GrammarError(f"unexpected character {text[pos]!r}", line, column, source)
        kind, value = m.lastgroup, m.group()
        assert kind is not None
        if kind == "NL":
            if depth == 0:
                tokens.append(_Tok("NL", value, line, column))
            line += 1
            line_start = m.end()
        elif kind not in ("WS", "COMMENT"):
            if value in ("(", "["):
                depth += 1
            elif value in (")", "]"):
                depth = max(0, depth - 1)
            tokens.append(_Tok(kind, value, line, column))
        pos = m.end()
    tokens.append(_Tok("NL", "", line, pos - line_start + 1))
    tokens.append(_Tok("EOF", "", line, pos - line_start + 1))
    return tokens


# ---------------------------------------------------------------------------------------------
# Parser (recursive descent)

_STRING_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "0": "\0"}
# Groups and optionals nest at most this deep: the parser and the loader read expressions
# recursively, and a refused grammar is better than a RecursionError. Real grammars nest a few.
MAX_NESTING = 100


def _unescape_string(body: str, tok: _Tok, source: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _STRING_ESCAPES:
            out.append(_STRING_ESCAPES[nxt])
            i += 2
        elif nxt in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[nxt]
            digits = body[i + 2 : i + 2 + width]
            if len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise GrammarError(
                    f"bad \\{nxt} escape in string {tok.text}", tok.line, tok.column, source
                )
            code = int(digits, 16)
            if code > sys.maxunicode:
                raise GrammarError(
                    f"bad \\{nxt} escape in string {tok.text}: U+{code:X} is beyond U+10FFFF, "
                    "the last code point",
                    tok.line,
                    tok.column,
                    source,
                )
            out.append(chr(code))
            i += 2 + width
        else:  # \" \\ and any other escaped character stand for themselves
            out.append(nxt)
            i += 2
    return "".join(out)


class _Parser:
    def __init__(self, text: str, source: str):
        self.source = source
        self.toks = _tokenize(text, source)
        self.i = 0
        self.depth = 0  # open groups and optionals around the current atom

    # -- token helpers
    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def error(self, message: str, tok: _Tok | None = None) -> GrammarError:
        tok = tok or self.tok
        return GrammarError(message, tok.line, tok.column, self.source)

    def take(self) -> _Tok:
        tok = self.tok
        self.i += 1
        return tok

    def at(self, text: str) -> bool:
        return self.tok.kind == "OP" and self.tok.text == text

    def expect(self, text: str) -> _Tok:
        if not self.at(text):
            found = self.tok.text or self.tok.kind.lower()
            raise self.error(f"expected {text!r}, found {found!r}")
        return self.take()

    def skip_newlines(self) -> None:
        while self.tok.kind == "NL":
            self.i += 1

    # -- grammar file
    def parse(self) -> GrammarText:
        out = GrammarText(source=self.source)
        self.skip_newlines()
        while self.tok.kind != "EOF":
            out.statements.append(self.statement())
            if self.tok.kind not in ("NL", "EOF"):
                raise self.error(f"unexpected {self.tok.text!r} after the end of a definition")
            self.skip_newlines()
        return out

    def statement(self) -> Statement:
        tok = self.tok
        if tok.kind == "DIRECTIVE":
            return self.directive()
        if tok.kind != "NAME":
            raise self.error(f"expected a rule or terminal definition, found {tok.text!r}")
        self.take()
        raw = tok.text
        prefix = raw[0] if raw[0] in "?!" else ""
        name = raw[len(prefix) :]
        is_terminal = name.lstrip("_")[:1].isupper()
        if is_terminal and prefix:
            raise self.error(f"terminal {name} cannot take the {prefix!r} prefix", tok)
        if not is_terminal and name != name.lower():
            raise self.error(f"rule names are lower case, terminal names upper case: {name}", tok)
        if self.at("{"):
            raise self.error("rule templates are not supported")
        priority = 0
        if self.at("."):
            self.take()
            priority = self.number()
        self.expect(":")
        body = self.choice(allow_alias=not is_terminal)
        return Definition(
            name=name,
            is_terminal=is_terminal,
            body=body,
            priority=priority,
            line=tok.line,
            column=tok.column,
            expand_single=prefix == "?",
            keep_tokens=prefix == "!",
        )

    def directive(self) -> Statement:
        tok = self.take()
        if tok.text == "%ignore":
            return Ignore(self.choice(allow_alias=False), tok.line, tok.column)
        if tok.text == "%declare":
            names = []
            while self.tok.kind == "NAME":
                names.append(self.take().text)
            if not names:
                raise self.error("%declare needs at least one terminal name")
            return Declare(tuple(names), tok.line, tok.column)
        if tok.text == "%import":
            return self.import_(tok)
        raise self.error(f"directive {tok.text} is not supported", tok)

    def import_(self, tok: _Tok) -> Import:
        parts = [self.dotted_part()]
        while self.at("."):
            self.take()
            parts.append(self.dotted_part())
        if self.at("("):
            self.take()
            names = [self.dotted_part()]
            while self.at(","):
                self.take()
                names.append(self.dotted_part())
            self.expect(")")
            return Import(".".join(parts), tuple((n, n) for n in names), tok.line, tok.column)
        if len(parts) < 2:
            raise self.error("%import needs module.NAME or module (NAME, ...)", tok)
        local = parts[-1]
        if self.tok.kind == "ARROW":
            self.take()
            local = self.dotted_part()
        return Import(".".join(parts[:-1]), ((parts[-1], local),), tok.line, tok.column)

    def dotted_part(self) -> str:
        tok = self.take()
        if tok.kind != "NAME" or tok.text[0] in "?!":
            raise self.error(f"expected a name, found {tok.text!r}", tok)
        return tok.text

    # -- expressions
    def choice(self, allow_alias: bool) -> Choice:
        options = [self.sequence(allow_alias)]
        while True:
            if self.at("|"):
                self.take()
            elif self.tok.kind == "NL" and self._continues_on_next_line():
                pass  # a (later) line starting with `|` continues the definition
            else:
                break
            options.append(self.sequence(allow_alias))
        return Choice(tuple(options))

    def _continues_on_next_line(self) -> bool:
        j = self.i
        while self.toks[j].kind == "NL":
            j += 1
        if self.toks[j].kind == "OP" and self.toks[j].text == "|":
            self.i = j + 1
            return True
        return False

    def sequence(self, allow_alias: bool) -> Sequence:
        items: list[Node] = []
        while True:
            item = self.item()
            if item is None:
                break
            items.append(item)
        alias = None
        if self.tok.kind == "ARROW":
            if not allow_alias:
                raise self.error("an alias (->) is only allowed on a rule's alternatives")
            self.take()
            name_tok = self.take()
            if name_tok.kind != "NAME" or name_tok.text != name_tok.text.lower():
                raise self.error("an alias must be a lower-case rule name", name_tok)
            alias = name_tok.text
        return Sequence(tuple(items), alias)

    def item(self) -> Node | None:
        atom = self.atom()
        if atom is None:
            return None
        while True:
            if self.at("?"):
                self.take()
                atom = Repeat(atom, 0, 1)
            elif self.at("*"):
                self.take()
                atom = Repeat(atom, 0, None)
            elif self.at("+"):
                self.take()
                atom = Repeat(atom, 1, None)
            elif self.at("~"):
                self.take()
                low = self.number()
                high = low
                if self.tok.kind == "DOTDOT":
                    self.take()
                    high = self.number()
                if high < low:
                    raise self.error(f"bad repetition range {low}..{high}")
                atom = Repeat(atom, low, high)
            else:
                return atom

    def number(self) -> int:
        tok = self.take()
        if tok.kind != "NUMBER":
            raise self.error(f"expected a number, found {tok.text!r}", tok)
        return int(tok.text)

    def atom(self) -> Node | None:
        tok = self.tok
        if tok.kind == "OP" and tok.text in "([":
            if self.depth >= MAX_NESTING:
                raise self.error(
                    f"groups and optionals nest more than {MAX_NESTING} deep here; "
                    "split the expression into rules"
                )
            self.take()
            self.depth += 1
            inner = self.choice(allow_alias=False)
            self.depth -= 1
            if tok.text == "(":
                self.expect(")")
                return inner
            self.expect("]")
            return Repeat(inner, 0, 1)
        if tok.kind == "STRING":
            self.take()
            flags = "i" if tok.text.endswith("i") else ""
            body = tok.text[1 : -2 if flags else -1]
            value = _unescape_string(body, tok, self.source)
            if not value:
                raise self.error("empty string literals are not allowed", tok)
            if self.tok.kind == "DOTDOT":
                self.take()
                end = self.take()
                if end.kind != "STRING":
                    raise self.error("expected a string after '..'", end)
                high = _unescape_string(end.text.rstrip("i")[1:-1], end, self.source)
                if len(value) != 1 or len(high) != 1 or high < value:
                    raise self.error(f"bad literal range {tok.text}..{end.text}", tok)
                return CharRange(value, high)
            return Literal(value, flags)
        if tok.kind == "REGEXP":
            self.take()
            end = tok.text.rindex("/")
            source, flags = tok.text[1:end], tok.text[end + 1 :]
            bad = sorted(set(flags) - set("is"))
            if bad:
                raise self.error(
                    f"regex flag(s) {''.join(bad)!r} not supported (only 'i' and 's')", tok
                )
            return Pattern(source, "".join(sorted(set(flags))))
        if tok.kind == "NAME":
            if tok.text[0] in "?!":
                raise self.error(f"unexpected {tok.text!r}", tok)
            # a name followed by ':' (or '.N:') starts the next definition, never an item
            nxt = self.toks[self.i + 1]
            if nxt.kind == "OP" and nxt.text in ":{":
                return None
            self.take()
            return Ref(tok.text, tok.line, tok.column)
        return None


def parse_lark(text: str, source: str = "<grammar>") -> GrammarText:
    """Parse Lark grammar text into its syntax tree; GrammarError on malformed input."""
    if not isinstance(text, str):
        raise UsageError(f"grammar text is a str, not {type(text).__name__}")
    return _Parser(text, source).parse()

"""An independent reference implementation of docs/semantics.md, used as a differential oracle.

It shares no code with ``gridrail``: it reads the same ``.lark`` text, lets lark build the
terminal definitions and the LALR(1) tables, and implements maximal munch, the winner choice,
viable prefixes and the EOS gate itself, as a direct transcription of the definitions (slowly,
but obviously).

What is taken from lark
-----------------------
* the terminals (``Lark.terminals``): name, ``pattern.to_regexp()`` (lark embeds the flags as
  ``(?i:...)``), priority; ``is_literal`` is ``isinstance(pattern, PatternStr)`` -- a string
  literal, whether anonymous in a rule or a named terminal defined by one string (lark joins a
  concatenation of strings into one string pattern too);
* the ignored set (``Lark.ignore_tokens``);
* the LALR(1) tables and lark's own LR driver (``ParserState.feed_token``), run without tree
  callbacks on a state stack that the reference keeps as a tuple. A(sigma) is computed exactly as
  lark's ``InteractiveParser.accepts()`` does it -- feed each terminal of the top state's row to
  a copy and keep those that do not raise (this simulates the reduce chain) -- and memoized on
  the state stack; ``$END`` is acceptable when feeding it reaches lark's end state.
  Lark is built with a do-nothing custom lexer: lark's own lexers are never used (nor built:
  they would need interegular in strict mode and compile the patterns with ``re``).

Terminal index
--------------
Lark numbers terminals its own way (named definitions first, then anonymous literals). The
reference instead numbers them by **first appearance in the grammar file**: each terminal gets
the file offset of the earliest of (a) its definition ``NAME:`` / ``NAME.p:``, (b) a reference
to it by name in a rule or an ``%ignore``, (c) a string/regex literal in a rule or an
``%ignore`` that lark maps to it (an anonymous literal whose pattern equals a named terminal's
pattern *is* that terminal, as in lark). Terminals are sorted by that offset; the index is the
position in that order. Only the relative order matters, so terminals that lark drops as unused
do not disturb it. Literals/regexes inside terminal definitions are parts of that terminal, not
appearances of others.

The shadowing class of a terminal is ``(priority, is_literal)``. ``Reference.index_ties`` counts
the lexemes of the input (not of the look-ahead probes of rule (ii)) whose winner the index
decided, i.e. whose top class had two or more candidates in V; ``Reference.tie_groups`` counts
them by (winner, the other candidates of the top class in V); ``strict_ties=True`` raises
``OracleError`` instead.

Matching
--------
Patterns are compiled with the ``regex`` module (VERSION0, i.e. ``re`` syntax) with ``regex.ASCII``
(``REGEX_FLAGS``), as docs/semantics.md defines regexes: ASCII ``\\w \\d \\s`` and case folding of
``(?i)`` on ASCII letters only (``s`` does not match U+017F, ``i`` neither U+0130 nor U+0131, ``k``
not U+212A; non-ASCII letters match only themselves). Lark is built with
``g_regex_flags=re.ASCII`` too, so that nothing in lark could read a terminal otherwise (its
lexers, which would use the flag, are not built). "s is a prefix of a lexeme of tau" is
``fullmatch(s, partial=True)``; "s is a lexeme of tau" is ``fullmatch(s)``. Lexemes must be
non-empty. For a string s the reference keeps (memoized on s): the terminals having s as a
prefix of a lexeme ("live"; s is live in the union automaton iff that set is non-empty; since
prefixes of prefixes are prefixes, the set of s+c is the subset of the set of s that still
matches), and the longest non-empty prefix of s that is a lexeme of some terminal (the last
accepting position) with all the terminals of which it is a lexeme (the candidates C).

The procedure, transcribed from docs/semantics.md
-------------------------------------------------
A configuration is (state stack, pending lexeme r). Feeding a character c: if r+c is live in the
union automaton, r := r+c. Otherwise c kills it: emit the longest accepting prefix of r (none:
reject) as its winner -- the lowest-index terminal of (top class of C) n V, V = A(sigma) u I
(none: reject) --, dropping it if ignored or shifting it, and feed the rest of r and then c
again, one character at a time, from the empty lexeme.

``is_viable(prefix)``: every prefix of it passes the check, which is, after feeding it (a
rejection: fails) with pending r: (i) r is empty, or some terminal of V has r as a prefix of a
lexeme; or (ii) r has an accepting prefix whose winner exists and some kill character c (r+c not
live) leads, after the emission and the rescan, to a pending lexeme satisfying (i).

``first_error``: feed the text one character at a time and return the first position whose
prefix is not viable (a linear scan; the configuration after each character is kept, so this is
one feeding pass plus one viability check per character).

``eos_ok(prefix)``: feed the prefix (a rejection: no), then the emission cascade on r: while r is
non-empty, emit its longest accepting prefix as its winner (none, or no winner: no) and continue
with the rest; then ``$END`` must be acceptable. ``accepts_sentence`` is "every prefix viable and
``eos_ok``".

Kill characters (the reference works on text)
----------------------------------------------
docs/semantics.md quantifies (ii) over *bytes* that kill the union DFA. The reference tries the
128 ASCII characters -- for those, character and byte coincide -- plus ``_NON_ASCII_KILLS``
(``é``, ``€``, U+1F600: one character of each UTF-8 length), each taken as a whole character
that kills when r+c is not live. For a non-ASCII character this is a character-level stand-in
for its lead byte; it only matters if no ASCII character can end the lexeme usefully, which no
grammar here relies on. (Continuation bytes and bytes that never occur in UTF-8 cannot make
(ii) hold: every lexeme is valid UTF-8, so the rescan reaches a lexeme start at such a byte
with no accepting prefix and rejects.)

Bytes
-----
Positions are UTF-8 byte offsets. A byte prefix that ends inside a multi-byte character is
viable iff some character whose encoding starts with those bytes completes it to a viable
prefix; the reference decides that by trying every such character (at most 2**18, only when an
error falls on a non-ASCII character). ``first_error`` and ``eos_ok`` accept ``bytes`` as well;
invalid UTF-8 is an error at the first byte that no valid encoding can follow, and a prefix that
ends inside a character can never stop (EOS).
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Iterator
from copy import copy
from dataclasses import dataclass
from typing import NamedTuple

import regex
from lark import Lark, Token
from lark.exceptions import UnexpectedToken
from lark.lexer import Lexer, PatternStr
from lark.load_grammar import _get_parser, _literal_to_pattern
from lark.parsers.lalr_parser_state import ParserState

__all__ = ["REGEX_FLAGS", "OracleError", "RefTerminal", "Reference", "terminal_order"]

# docs/semantics.md: Python ``re`` semantics with ``re.ASCII`` (the ``regex`` module's equivalent).
REGEX_FLAGS = regex.ASCII

_END = "$END"
_NON_ASCII_KILLS = ("\u00e9", "\u20ac", "\U0001f600")
KILL_CHARACTERS: tuple[str, ...] = tuple(chr(b) for b in range(128)) + _NON_ASCII_KILLS


class OracleError(Exception):
    """Raised by ``tokenize`` on a rejected input, by ``strict_ties`` on an index-decided tie,
    and when the viability search of rule (ii) exceeds its limit."""


class _NoLexer(Lexer):
    """Lark requires a lexer; the reference lexes by itself and never calls this one."""

    def __init__(self, lexer_conf):
        pass

    def lex(self, lexer_state, parser_state):
        raise NotImplementedError("the reference does its own lexing")


@dataclass(frozen=True)
class RefTerminal:
    """One terminal as the reference sees it."""

    name: str
    index: int
    regexp: str
    priority: int
    is_literal: bool
    ignored: bool

    @property
    def shadow_class(self) -> tuple[int, bool]:
        """Compared lexicographically; only the top class among the candidates can win."""
        return (self.priority, self.is_literal)


class _Scan(NamedTuple):
    """What the reference knows about a string s scanned from a lexeme start."""

    live: frozenset[str]  # terminals having s as a prefix of one of their lexemes
    accept: int  # length of the longest non-empty prefix of s that is a lexeme (0: none)
    candidates: frozenset[str]  # the terminals having s[:accept] as a lexeme


class _Config(NamedTuple):
    """A configuration: LR state stack, pending lexeme, and where it starts in the text."""

    stack: tuple[int, ...]
    pending: str
    start: int


def terminal_order(grammar_text: str, lark_terminals) -> dict[str, int]:
    """Map each lark terminal name to its index by first appearance in the grammar file."""
    by_pattern: dict[tuple, str] = {}
    for t in lark_terminals:
        key = (type(t.pattern).__name__, t.pattern.value, frozenset(t.pattern.flags))
        by_pattern.setdefault(key, t.name)
    names = {t.name for t in lark_terminals}
    first: dict[str, int] = {}

    def note(name: str | None, pos: int) -> None:
        if name in names and pos < first.get(name, pos + 1):
            first[name] = pos

    def literal_name(tok: Token) -> str | None:
        p = _literal_to_pattern(tok)
        return by_pattern.get((type(p).__name__, p.value, frozenset(p.flags)))

    def walk(node, in_term_body: bool) -> None:
        for child in node.children:
            if isinstance(child, Token):
                if child.type == "TERMINAL":
                    if node.data == "term" and child is node.children[0]:
                        note(child.value, child.start_pos)  # the definition itself
                    elif not in_term_body:
                        note(child.value, child.start_pos)
                elif child.type in ("STRING", "REGEXP") and not in_term_body:
                    if node.data == "range":
                        continue
                    note(literal_name(child), child.start_pos)
            else:
                if child.data == "range" and not in_term_body:
                    a, b = child.children
                    key = ("PatternRE", f"[{a.value[1:-1]}-{b.value[1:-1]}]", frozenset())
                    note(by_pattern.get(key), a.start_pos)
                walk(child, in_term_body or child.data == "term")

    tree = _get_parser().parse(grammar_text + "\n", "start")
    walk(tree, False)
    # Terminals not found in the text (should not happen) go last, in lark's order.
    end = len(grammar_text) + 1
    ordered = sorted(enumerate(lark_terminals), key=lambda it: (first.get(it[1].name, end), it[0]))
    return {t.name: index for index, (_, t) in enumerate(ordered)}


def _utf8_completions(prefix: bytes) -> Iterator[str]:
    """Every character whose UTF-8 encoding starts with ``prefix`` (a proper prefix)."""
    lead = prefix[0]
    if 0xC2 <= lead <= 0xDF:
        size, lo, hi = 2, 0x80, 0x7FF
    elif 0xE0 <= lead <= 0xEF:
        size, lo, hi = 3, 0x800, 0xFFFF
    elif 0xF0 <= lead <= 0xF4:
        size, lo, hi = 4, 0x10000, 0x10FFFF
    else:
        return
    if len(prefix) >= size:
        return
    bits = lead & (0x7F >> size)
    for b in prefix[1:]:
        if b & 0xC0 != 0x80:
            return
        bits = (bits << 6) | (b & 0x3F)
    rest = 6 * (size - len(prefix))
    first, last = max(bits << rest, lo), min(((bits + 1) << rest) - 1, hi)
    for cp in range(first, last + 1):
        if not 0xD800 <= cp <= 0xDFFF:
            yield chr(cp)


def _byte_offset(text: str, i: int) -> int:
    return len(text[:i].encode("utf-8"))


class Reference:
    """The reference language of a ``.lark`` grammar under gridrail's semantics."""

    def __init__(self, grammar_text: str, *, start: str = "start", strict_ties: bool = False):
        self._lark = Lark(
            grammar_text, parser="lalr", lexer=_NoLexer, start=start, g_regex_flags=re.ASCII
        )
        ignored = frozenset(self._lark.ignore_tokens)
        order = terminal_order(grammar_text, self._lark.terminals)
        terms = [
            RefTerminal(
                name=t.name,
                index=order[t.name],
                regexp=t.pattern.to_regexp(),
                priority=t.priority,
                is_literal=isinstance(t.pattern, PatternStr),
                ignored=t.name in ignored,
            )
            for t in self._lark.terminals
        ]
        terms.sort(key=lambda t: t.index)
        self.terminals: tuple[RefTerminal, ...] = tuple(terms)
        self.ignored: frozenset[str] = ignored
        self._by_name = {t.name: t for t in terms}
        self._patterns = {t.name: regex.compile(t.regexp, REGEX_FLAGS) for t in terms}
        self.strict_ties = strict_ties
        self.index_ties = 0
        self.tie_groups: Counter[tuple[str, tuple[str, ...]]] = Counter()
        # lark's LR driver without tree callbacks (values are irrelevant here)
        ip = self._lark.parse_interactive()
        self._conf = copy(ip.parser_state.parse_conf)
        self._conf.callbacks = {}
        self._initial = _Config(tuple(ip.parser_state.state_stack), "", 0)
        self._scans: dict[str, _Scan] = {}
        self._accepts: dict[tuple[int, ...], tuple[frozenset[str], bool]] = {}
        self._shifts: dict[tuple[tuple[int, ...], str], tuple[int, ...]] = {}

    # ---------------------------------------------------------------- parser access

    def _feed_lark(self, stack: tuple[int, ...], name: str) -> tuple[int, ...] | None:
        """The state stack after lark feeds terminal ``name`` (None: lark rejects it)."""
        state = ParserState(self._conf, None, list(stack), [None] * (len(stack) - 1))
        try:
            state.feed_token(Token(name, ""), name == _END)
        except UnexpectedToken:
            return None
        return tuple(state.state_stack)

    def _allowed(self, stack: tuple[int, ...]) -> tuple[frozenset[str], bool]:
        """(V = A(sigma) u I, whether $END is acceptable), memoized on the state stack."""
        hit = self._accepts.get(stack)
        if hit is None:
            row = self._conf.states[stack[-1]]
            acc = {t for t in row if t.isupper() and self._feed_lark(stack, t) is not None}
            hit = (frozenset(acc - {_END}) | self.ignored, _END in acc)
            self._accepts[stack] = hit
        return hit

    def _shift(self, stack: tuple[int, ...], name: str) -> tuple[int, ...]:
        key = (stack, name)
        hit = self._shifts.get(key)
        if hit is None:
            hit = self._feed_lark(stack, name)
            assert hit is not None, f"{name} was in A(sigma) but lark rejects it"
            self._shifts[key] = hit
        return hit

    # ---------------------------------------------------------------- scanning

    def _scan(self, s: str) -> _Scan:
        """Liveness and last accepting position of s (memoized; built one character at a time
        from the longest prefix already known)."""
        hit = self._scans.get(s)
        if hit is not None:
            return hit
        if len(self._scans) > 2_000_000:
            self._scans.clear()
        j = len(s)
        while j > 0 and s[:j] not in self._scans:
            j -= 1
        if j == 0:
            everything = frozenset(self._patterns)
            known = self._scans[""] = _Scan(everything, 0, frozenset())
        else:
            known = self._scans[s[:j]]
        for k in range(j + 1, len(s) + 1):
            prefix = s[:k]
            live = frozenset(
                n for n in known.live if self._patterns[n].fullmatch(prefix, partial=True)
            )
            full = frozenset(n for n in live if self._patterns[n].fullmatch(prefix))
            known = _Scan(live, k, full) if full else _Scan(live, known.accept, known.candidates)
            self._scans[prefix] = known
        return known

    def _winner(
        self, candidates: frozenset[str], viable: frozenset[str], *, record: bool, at: int = 0
    ) -> RefTerminal | None:
        """Rule 2: the lowest-index terminal of (top class of C) n V, None if that is empty."""
        terms = [self._by_name[n] for n in candidates]
        if not terms:
            return None
        top = max(t.shadow_class for t in terms)
        eligible = sorted(
            (t for t in terms if t.shadow_class == top and t.name in viable),
            key=lambda t: t.index,
        )
        if not eligible:
            return None
        if record and len(eligible) > 1:
            self.index_ties += 1
            others = tuple(t.name for t in eligible[1:])
            self.tie_groups[(eligible[0].name, others)] += 1
            if self.strict_ties:
                names = ", ".join(t.name for t in eligible)
                raise OracleError(f"the index decides between {names} at character {at}")
        return eligible[0]

    def _emit_longest(
        self, cfg: _Config, record: bool, out: list | None
    ) -> tuple[tuple[int, ...], int] | None:
        """Emit the longest accepting prefix of the pending lexeme: (new stack, its length)."""
        scan = self._scan(cfg.pending)
        if not scan.accept:
            return None
        viable = self._allowed(cfg.stack)[0]
        term = self._winner(scan.candidates, viable, record=record, at=cfg.start)
        if term is None:
            return None
        lexeme = cfg.pending[: scan.accept]
        if out is not None:
            out.append((term.name, lexeme, cfg.start))
        stack = cfg.stack if term.ignored else self._shift(cfg.stack, term.name)
        return stack, scan.accept

    def _feed(
        self, cfg: _Config, chars: str, *, record: bool = False, out: list | None = None
    ) -> _Config | None:
        """The incremental form: feed characters; None when the input is rejected."""
        queue = deque(chars)
        while queue:
            c = queue.popleft()
            if self._scan(cfg.pending + c).live:
                cfg = _Config(cfg.stack, cfg.pending + c, cfg.start)
                continue
            emitted = self._emit_longest(cfg, record, out)
            if emitted is None:
                return None
            stack, length = emitted
            queue.extendleft(reversed(cfg.pending[length:] + c))
            cfg = _Config(stack, "", cfg.start + length)
        return cfg

    def _finish(self, cfg: _Config, *, record: bool, out: list | None = None):
        """The EOS emission cascade on the pending lexeme: the final stack, or None."""
        while cfg.pending:
            emitted = self._emit_longest(cfg, record, out)
            if emitted is None:
                return None
            stack, length = emitted
            cfg = _Config(stack, cfg.pending[length:], cfg.start + length)
        return cfg.stack

    # ---------------------------------------------------------------- viability

    def _direct(self, cfg: _Config) -> bool:
        """(i): r is empty, or a prefix of a lexeme of some terminal of V."""
        if not cfg.pending:
            return True
        return bool(self._scan(cfg.pending).live & self._allowed(cfg.stack)[0])

    def _may_emit(self, cfg: _Config) -> bool:
        """The precondition of (ii): r has an accepting prefix whose winner exists."""
        scan = self._scan(cfg.pending)
        viable = self._allowed(cfg.stack)[0]
        return bool(scan.accept) and self._winner(scan.candidates, viable, record=False) is not None

    def _config_viable(self, cfg: _Config) -> bool:
        """Does a (non-rejected) configuration pass the check: (i), or (ii) with one kill
        character after which the pending lexeme satisfies (i)."""
        if self._direct(cfg):
            return True
        if not self._may_emit(cfg):
            return False
        for c in KILL_CHARACTERS:
            if self._scan(cfg.pending + c).live:
                continue  # c does not kill the lexeme
            nxt = self._feed(cfg, c)
            if nxt is not None and self._direct(nxt):
                return True
        return False

    def _completes_viably(self, cfg: _Config, partial: bytes) -> bool:
        """Is cfg + (a character whose UTF-8 encoding starts with ``partial``) viable?"""
        for ch in _utf8_completions(partial):
            nxt = self._feed(cfg, ch)
            if nxt is not None and self._config_viable(nxt):
                return True
        return False

    # ---------------------------------------------------------------- public API

    def tokenize(self, text: str) -> list[tuple[str, str, int]]:
        """The lexemes of a complete input: (terminal, text, UTF-8 byte offset), ignored ones
        included, the pending lexeme closed by the EOS cascade (``$END`` is not required).
        Raises OracleError on a rejection."""
        out: list[tuple[str, str, int]] = []
        cfg = self._feed(self._initial, text, record=True, out=out)
        if cfg is None or self._finish(cfg, record=True, out=out) is None:
            where = out[-1][2] + len(out[-1][1]) if out else 0
            raise OracleError(f"rejected after character {where}")
        return [(name, value, _byte_offset(text, i)) for name, value, i in out]

    def eos_ok(self, prefix: str | bytes) -> bool:
        """May the output stop after ``prefix``?"""
        if isinstance(prefix, bytes):
            try:
                prefix = prefix.decode("utf-8")
            except UnicodeDecodeError:
                return False
        cfg = self._feed(self._initial, prefix, record=True)
        if cfg is None:
            return False
        stack = self._finish(cfg, record=True)
        return stack is not None and self._allowed(stack)[1]

    def accepts_sentence(self, text: str | bytes) -> bool:
        """Is ``text`` a complete sentence: every prefix viable, and the EOS gate passes?"""
        return self.first_error(text) is None and self.eos_ok(text)

    def is_viable(self, prefix: str | bytes) -> bool:
        """Is ``prefix`` a viable prefix (every prefix of it passes the check)?"""
        return self.first_error(prefix) is None

    def first_error(self, text: str | bytes) -> int | None:
        """UTF-8 byte offset of the first byte b such that text[:b+1] is not viable, or None."""
        data = b""
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as e:
                text, data = text[: e.start].decode("utf-8"), text[e.start :]
        cfg = self._initial
        for i, ch in enumerate(text):
            nxt = self._feed(cfg, ch, record=True)
            if nxt is None or not self._config_viable(nxt):
                return self._refine(cfg, text, i)
            cfg = nxt
        # an undecodable tail: its first byte that no character completes viably
        for k in range(1, len(data) + 1):
            if not self._completes_viably(cfg, data[:k]):
                return len(text.encode("utf-8")) + k - 1
        return None

    def _refine(self, before: _Config, text: str, i: int) -> int:
        """Byte offset of the first error inside character i (text[:i] is viable, text[:i+1]
        is not): the first proper prefix of its encoding that no character completes viably,
        else its last byte."""
        base = _byte_offset(text, i)
        encoded = text[i].encode("utf-8")
        for k in range(1, len(encoded)):
            if not self._completes_viably(before, encoded[:k]):
                return base + k - 1
        return base + len(encoded) - 1

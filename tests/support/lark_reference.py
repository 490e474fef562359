"""An independent reference implementation of docs/semantics.md, used as a differential oracle.

It shares no code with ``gridrail``: it reads the same ``.lark`` text, lets lark build the
terminal definitions and the LALR(1) tables, and implements contextual maximal munch, viable
prefixes and the EOS gate itself, directly from the definitions (slowly, but obviously).

What is taken from lark
-----------------------
* the terminals (``Lark.terminals``): name, ``pattern.to_regexp()`` (lark embeds the flags as
  ``(?i:...)``), priority; ``is_literal`` is ``isinstance(pattern, PatternStr)`` -- a string
  literal, whether anonymous in a rule or a named terminal defined by one string (lark joins a
  concatenation of strings into one string pattern too);
* the ignored set (``Lark.ignore_tokens``);
* the LALR(1) parser through ``parse_interactive()``: ``accepts()`` (it simulates the reduce
  chain for each candidate terminal, so it is exactly A(sigma), plus ``$END`` when the input may
  end there), ``feed_token``. ``accepts()`` is memoized on the parser's state stack.
  Lark is built with a do-nothing custom lexer: lark's own lexers are never used (nor built:
  they would need interegular in strict mode and compile the patterns with ``re``).

Terminal index (the last component of the rank)
-----------------------------------------------
Lark numbers terminals its own way (named definitions first, then anonymous literals). The
reference instead numbers them by **first appearance in the grammar file**: each terminal gets
the file offset of the earliest of (a) its definition ``NAME:`` / ``NAME.p:``, (b) a reference
to it by name in a rule or an ``%ignore``, (c) a string/regex literal in a rule or an
``%ignore`` that lark maps to it (an anonymous literal whose pattern equals a named terminal's
pattern *is* that terminal, as in lark). Terminals are sorted by that offset; the index is the
position in that order. Only the relative order matters (it only breaks rank ties), so terminals
that lark drops as unused do not disturb it. Literals/regexes inside terminal definitions are
parts of that terminal, not appearances of others. A well-designed grammar never lets the index
decide a tie between two overlapping terminals that are viable at the same position;
``Reference.index_ties`` counts the lexemes whose winner the index did decide
(``strict_ties=True`` raises instead).

Matching
--------
Patterns are compiled with the ``regex`` module (VERSION0, i.e. ``re`` syntax; note that case
folding of ``(?i)`` follows ``regex``: ``s`` matches U+017F, ``k`` matches U+212A, ``i`` matches
U+0130 but -- unlike ``re`` -- not U+0131). The longest full match at a position uses a POSIX
(leftmost-longest) compilation of the pattern; "r is a prefix of some lexeme" uses
``fullmatch(..., partial=True)``. Lexemes must be non-empty.

Viability of a prefix
---------------------
Lex from the start; at each lexeme start with remainder r (rest of the prefix) and viable set
V = A(sigma) u I: if r is a prefix of a lexeme of some tau in V, the prefix is viable; otherwise
take the longest full match of any tau in V inside r (none: not viable), give it to the winner
by rank (priority, is_literal, -index), drop it if ignored or shift it, and continue after it.
This equals the incremental form of docs/semantics.md: a forced emission happens exactly when r
stops being live, the longest accepted prefix of a dead r is the longest full match inside it
(a full match reaching the end of r would make r live), and requeued bytes are rescanned by the
same rule.

``first_error`` needs the first non-viable prefix, computed in one pass over the text: if at a
lexeme start i the remainder is live up to (excluding) position P_i and dies at P_i, every
prefix ending before P_i is viable and every longer one continues after the emitted lexeme, so
first_error = max(P_i over the lexeme starts visited, P at the start where no full match exists),
or None as soon as a remainder is live to the end of the text.

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

from collections.abc import Iterator
from dataclasses import dataclass, field

import regex
from lark import Lark, Token
from lark.lexer import Lexer, PatternStr
from lark.load_grammar import _get_parser, _literal_to_pattern

__all__ = ["OracleError", "RefTerminal", "Reference", "terminal_order"]

_END = "$END"


class OracleError(Exception):
    """Raised by ``tokenize`` on a rejected input and by ``strict_ties`` on an index-decided tie."""


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
    def rank(self) -> tuple[int, bool, int]:
        return (self.priority, self.is_literal, -self.index)


@dataclass
class _Matcher:
    term: RefTerminal
    pattern: regex.Pattern
    posix: regex.Pattern
    _can_start: dict[str, bool] = field(default_factory=dict)

    def can_start(self, ch: str) -> bool:
        ok = self._can_start.get(ch)
        if ok is None:
            ok = self.pattern.fullmatch(ch, partial=True) is not None
            self._can_start[ch] = ok
        return ok

    def live(self, text: str, i: int, n: int) -> bool:
        """text[i:n] is a prefix of (or equal to) some lexeme."""
        return self.pattern.fullmatch(text, i, n, partial=True) is not None

    def longest(self, text: str, i: int, n: int) -> int:
        """Length of the longest non-empty lexeme at text[i:n], 0 if none."""
        m = self.posix.match(text, i, n)
        return 0 if m is None else m.end() - i

    def live_extent(self, text: str, i: int, n: int) -> int:
        """The largest j <= n with text[i:j] live (liveness is prefix-closed: binary search)."""
        lo, hi = i, n  # lo is live (the empty prefix of a non-empty language)
        if self.live(text, i, n):
            return n
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.live(text, i, mid):
                lo = mid
            else:
                hi = mid
        return lo


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


class Reference:
    """The reference language of a ``.lark`` grammar under gridrail's semantics."""

    def __init__(self, grammar_text: str, *, start: str = "start", strict_ties: bool = False):
        self._lark = Lark(grammar_text, parser="lalr", lexer=_NoLexer, start=start)
        ignored = frozenset(self._lark.ignore_tokens)
        order = terminal_order(grammar_text, self._lark.terminals)
        terms = []
        for t in self._lark.terminals:
            terms.append(
                RefTerminal(
                    name=t.name,
                    index=order[t.name],
                    regexp=t.pattern.to_regexp(),
                    priority=t.priority,
                    is_literal=isinstance(t.pattern, PatternStr),
                    ignored=t.name in ignored,
                )
            )
        terms.sort(key=lambda t: t.index)
        self.terminals: tuple[RefTerminal, ...] = tuple(terms)
        self.ignored: frozenset[str] = ignored
        self._matchers = {
            t.name: _Matcher(t, regex.compile(t.regexp), regex.compile(t.regexp, regex.POSIX))
            for t in terms
        }
        self.strict_ties = strict_ties
        self.index_ties = 0
        self._accepts: dict[tuple[int, ...], tuple[frozenset[str], bool]] = {}
        self._candidates: dict[tuple[frozenset[str], str], tuple[_Matcher, ...]] = {}

    # ---------------------------------------------------------------- parser access

    def _parser(self):
        return self._lark.parse_interactive()

    def _viable(self, ip) -> tuple[frozenset[str], bool]:
        """(V = A(sigma) u I, whether $END is acceptable), memoized on the state stack."""
        key = tuple(ip.parser_state.state_stack)
        hit = self._accepts.get(key)
        if hit is None:
            acc = ip.accepts()
            hit = (frozenset(acc - {_END}) | self.ignored, _END in acc)
            self._accepts[key] = hit
        return hit

    def _cands(self, viable: frozenset[str], ch: str) -> tuple[_Matcher, ...]:
        key = (viable, ch)
        hit = self._candidates.get(key)
        if hit is None:
            ms = (self._matchers[name] for name in viable)
            hit = tuple(sorted((m for m in ms if m.can_start(ch)), key=lambda m: m.term.index))
            self._candidates[key] = hit
        return hit

    # ---------------------------------------------------------------- lexing

    def _winner(self, text: str, i: int, n: int, viable: frozenset[str]):
        """Longest full match of any tau in V at text[i:n] and its winner: (term, length)."""
        best: list[RefTerminal] = []
        best_len = 0
        for m in self._cands(viable, text[i]):
            length = m.longest(text, i, n)
            if length > best_len:
                best, best_len = [m.term], length
            elif length == best_len and length:
                best.append(m.term)
        if not best:
            return None
        best.sort(key=lambda t: t.rank, reverse=True)
        if len(best) > 1 and best[0].rank[:2] == best[1].rank[:2]:
            self.index_ties += 1
            if self.strict_ties:
                names = ", ".join(t.name for t in best)
                raise OracleError(f"index decides the tie between {names} at {i}")
        return best[0], best_len

    def _step(self, ip, term: RefTerminal, value: str) -> None:
        if not term.ignored:
            ip.feed_token(Token(term.name, value))

    def _cascade(self, text: str):
        """Lex all of ``text`` (longest full match inside it at every step).

        Yields (start, V, end_ok) for each lexeme start, then, at the end, (len, V, end_ok).
        Returns early (yielding (start, V, None) last) at a start with no full match.
        """
        ip = self._parser()
        i, n = 0, len(text)
        while True:
            viable, end_ok = self._viable(ip)
            if i >= n:
                yield i, viable, end_ok, None
                return
            won = self._winner(text, i, n, viable)
            yield i, viable, end_ok, won
            if won is None:
                return
            term, length = won
            self._step(ip, term, text[i : i + length])
            i += length

    def tokenize(self, text: str) -> list[tuple[str, str, int]]:
        """The lexemes of a complete input: (terminal, text, UTF-8 byte offset), ignored ones
        included. Raises OracleError when some position has no full match."""
        out = []
        for i, _viable, _end_ok, won in self._cascade(text):
            if i >= len(text):
                return out
            if won is None:
                raise OracleError(f"no lexeme at byte {_byte_offset(text, i)}")
            term, length = won
            out.append((term.name, text[i : i + length], _byte_offset(text, i)))
        return out

    # ---------------------------------------------------------------- EOS gate

    def eos_ok(self, prefix: str | bytes) -> bool:
        """May the output stop after ``prefix``? (It is then also a viable prefix.)"""
        if isinstance(prefix, bytes):
            try:
                prefix = prefix.decode("utf-8")
            except UnicodeDecodeError:
                return False
        for i, _viable, end_ok, won in self._cascade(prefix):
            if i >= len(prefix):
                return end_ok
            if won is None:
                return False
        raise AssertionError("unreachable")

    def accepts_sentence(self, text: str | bytes) -> bool:
        """Is ``text`` a complete sentence (viable and passing the EOS gate)?"""
        return self.eos_ok(text)

    # ---------------------------------------------------------------- viability

    def _first_error_char(self, text: str) -> int | None:
        """Index of the first character c such that text[:c+1] is not viable, or None."""
        ip = self._parser()
        i, n = 0, len(text)
        visited: list[tuple[int, frozenset[str]]] = []
        while i < n:
            viable, _ = self._viable(ip)
            cands = self._cands(viable, text[i])
            if any(m.live(text, i, n) for m in cands):
                return None
            visited.append((i, viable))
            won = self._winner(text, i, n, viable)
            if won is None:
                return max(self._dead_at(text, k, n, v) for k, v in visited)
            term, length = won
            self._step(ip, term, text[i : i + length])
            i += length
        return None

    def _dead_at(self, text: str, i: int, n: int, viable: frozenset[str]) -> int:
        """The position at which the remainder starting at i stops being live (< n here)."""
        return max([i] + [m.live_extent(text, i, n) for m in self._cands(viable, text[i])])

    def _completion_viable(self, head: str, partial: bytes) -> bool:
        """Is head + (a character whose UTF-8 encoding starts with ``partial``) viable?

        ``head`` is viable. The procedure for head + ch follows the lexing of ``head`` alone
        (a dead remainder's longest full match never contains ch) until a remainder
        head[i:] + ch is live under that start's V."""
        chars = list(_utf8_completions(partial))
        if not chars:
            return False
        n = len(head)
        for i, viable, _end_ok, won in self._cascade(head):
            for m in (self._matchers[name] for name in viable):
                if i < n and not m.live(head, i, n):
                    continue
                rest = head[i:]
                if any(m.pattern.fullmatch(rest + ch, partial=True) for ch in chars):
                    return True
            if i >= n or won is None:
                return False
        return False

    def _refine(self, text: str, c: int) -> int:
        """Byte offset of the first error, given the first rejected character c."""
        base = _byte_offset(text, c)
        encoded = text[c].encode("utf-8")
        head = text[:c]
        for k in range(1, len(encoded)):
            if not self._completion_viable(head, encoded[:k]):
                return base + k - 1
        return base + len(encoded) - 1

    def first_error(self, text: str | bytes) -> int | None:
        """UTF-8 byte offset of the first byte b such that text[:b+1] is not viable, or None."""
        if isinstance(text, bytes):
            return self._first_error_bytes(text)
        c = self._first_error_char(text)
        return None if c is None else self._refine(text, c)

    def _first_error_bytes(self, data: bytes) -> int | None:
        try:
            return self.first_error(data.decode("utf-8"))
        except UnicodeDecodeError as e:
            start = e.start
        head = data[:start].decode("utf-8")
        c = self._first_error_char(head)
        if c is not None:
            return self._refine(head, c)
        for k in range(1, len(data) - start + 1):
            if not self._completion_viable(head, data[start : start + k]):
                return start + k - 1
        return None

    def is_viable(self, prefix: str | bytes) -> bool:
        return self.first_error(prefix) is None


def _byte_offset(text: str, i: int) -> int:
    return len(text[:i].encode("utf-8"))

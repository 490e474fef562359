"""Parse trees of finished statements, derived with gridrail's own LALR(1) tables.

The semantic checker (`gridrail.check`) judges what no left-to-right mask can: which table an
alias binds to, which column a name reads. It needs the derivation of a whole statement, read
with exactly the semantics the masks were computed under (docs/semantics.md), or a statement
could be checked as something other than what the engine accepted. So membership is decided by
the normative viable-prefix oracle, and the tree is built by an LR driver that lexes the same
way: maximal munch over all terminals, then the contextual winner in V = A(stack) ∪ ignored,
with A(stack) from `LRMachine.allowed_mask` on a persistent stack shifted alongside.

Tree shape (Lark's, with every token kept): a node is labelled with its production's alias, else
its rule name; rules whose name starts with "_" (the `__rule_plus_N` / `__rule_star_N` helpers of
`x+` and `x*`) are inlined into their parent; a `?rule` production without an alias that ends up
with a single child is replaced by that child. Anonymous keyword and punctuation tokens are kept,
so every byte of the input is a token or skipped ignored text (whitespace, comments).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from gridrail.errors import ParseError, UsageError
from gridrail.grammar.compiled import CompiledGrammar
from gridrail.grammar.lalr import ACCEPT
from gridrail.grammar.model import Production
from gridrail.parse.lr import LRMachine
from gridrail.parse.oracle import Oracle
from gridrail.parse.stack import StackNode


@dataclass(frozen=True, slots=True)
class Token:
    """One lexeme: its terminal, its text, and its byte span in the UTF-8 input."""

    terminal: str
    text: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Tree:
    """One node of the derivation: a rule (or alias) name over tokens and subtrees."""

    label: str
    children: tuple[Tree | Token, ...]

    def tokens(self) -> Iterator[Token]:
        """The leaves, left to right (iterative: long operator chains make deep trees)."""
        stack: list[Tree | Token] = [self]
        while stack:
            node = stack.pop()
            if isinstance(node, Token):
                yield node
            else:
                stack.extend(reversed(node.children))

    def subtrees(self) -> Iterator[Tree]:
        """This node and every node below it, in pre-order."""
        stack: list[Tree] = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(c for c in reversed(node.children) if isinstance(c, Tree))

    def trees(self, label: str | None = None) -> tuple[Tree, ...]:
        """The direct children that are trees (with this label, if given)."""
        return tuple(c for c in self.children if isinstance(c, Tree) and label in (None, c.label))

    def child(self, label: str) -> Tree | None:
        """The first direct child tree with this label, or None."""
        return next((c for c in self.children if isinstance(c, Tree) and c.label == label), None)

    def terminals(self, terminal: str) -> tuple[Token, ...]:
        """The direct children that are tokens of this terminal."""
        return tuple(c for c in self.children if isinstance(c, Token) and c.terminal == terminal)

    @property
    def start(self) -> int:
        """Byte offset of the first token (ValueError for a node that derived no token)."""
        token = next(self.tokens(), None)
        if token is None:
            raise ValueError(f"the {self.label} node derived no token")
        return token.start

    @property
    def end(self) -> int:
        """Byte offset just after the last token (ValueError for a node that derived none)."""
        stack: list[Tree | Token] = [self]
        while stack:
            node = stack.pop()
            if isinstance(node, Token):
                return node.end
            stack.extend(node.children)  # the last child is popped first
        raise ValueError(f"the {self.label} node derived no token")


class _Inlined(tuple):
    """The children of a "_"-rule, spliced into whichever node reduces it."""

    __slots__ = ()


class TreeParser:
    """Builds parse trees for one compiled grammar (reusable; holds the oracle's memos)."""

    def __init__(self, compiled: CompiledGrammar):
        self.compiled = compiled
        self.oracle = Oracle(compiled)
        self._lr: LRMachine = self.oracle.lr
        tables = compiled.tables
        self._action = tables.action
        self._goto = tables.goto
        self._weights = self._lr.stack_limit.weights
        self._shapes = [
            _Shape(lhs, length, p.alias or p.lhs, p.lhs.startswith("_"), _collapses(p))
            # (the augmented `$START -> start`, last in the tables, is never reduced)
            for (lhs, length), p in zip(
                tables.productions, compiled.grammar.productions, strict=False
            )
        ]
        self._end = tables.end
        self._nonterminal_base = tables.end + 1

    def parse(self, text: str | bytes) -> Tree:
        """The tree of a complete sentence; ParseError (offset, expected terminals) otherwise."""
        if isinstance(text, str):  # a lone surrogate encodes to bytes no sentence holds
            data = text.encode("utf-8", "surrogatepass")
        elif isinstance(text, bytes | bytearray | memoryview):
            data = bytes(text)
        else:
            raise UsageError(f"parse takes a str or bytes, not {type(text).__name__}")
        self._require_sentence(data)
        ignored = self.compiled.ignored_mask
        names = self.compiled.terminal_names
        # The oracle's root: its feed just interned these very stack nodes (pushes are interned
        # per parent), so the driver finds them with their allowed sets already memoized.
        node = self.oracle.initial.stack
        values: list[Tree | Token] = []
        position = 0
        while position < len(data):
            terminal, end = self._lexeme(data, position, node)
            if not (ignored >> terminal) & 1:
                node = self._shift(node, values, terminal)
                text = data[position:end].decode("utf-8", "surrogateescape")
                values.append(Token(names[terminal], text, position, end))
            position = end
        return self._accept(node, values)

    def _require_sentence(self, data: bytes) -> None:
        """The oracle is the definition of the language: whatever it rejects is rejected here
        with its offset and expected terminals. An input that stops too early fails at its
        end, expecting what the unfinished lexeme may grow into or what may follow it."""
        oracle = self.oracle
        cfg = oracle.feed(oracle.initial, data)
        if oracle.eos_ok(cfg):
            return
        expected = oracle.pending_terminals(cfg)
        finished = oracle.finalize(cfg)
        if finished is not None:
            expected += self.compiled.names_of(self._lr.allowed_mask(finished))
        raise ParseError(
            f"the input ends at byte {len(data)} before the statement is complete",
            len(data),
            tuple(dict.fromkeys(expected)),
        )

    def _lexeme(self, data: bytes, position: int, stack: StackNode) -> tuple[int, int]:
        """(terminal, end) of the lexeme at `position`: the longest match of any terminal, won
        by the first-defined terminal of its top shadowing class in V = A(stack) ∪ ignored."""
        scanner = self.compiled.scanner
        _, _, length, accept_state = scanner.fast_run(scanner.start, data[position:])
        if length < 0:
            raise _disagreement(position)
        allowed = self._lr.allowed_mask(stack) | self.compiled.ignored_mask
        terminal = self.oracle.winner_in(accept_state, allowed)
        if terminal < 0:
            raise _disagreement(position)
        return terminal, position + length

    def _shift(self, node: StackNode, values: list[Tree | Token], terminal: int) -> StackNode:
        """Run the reduce chain for `terminal` (building a tree per reduction), then push it;
        the caller appends the token."""
        while True:
            move = self._action[node.state].get(terminal)
            if move is None:
                raise _disagreement(-1)
            if move >= 0:
                return node.push(move, terminal, self._weights[move])
            node = self._reduce(node, values, -1 - move)

    def _accept(self, node: StackNode, values: list[Tree | Token]) -> Tree:
        """Reduce on $END until ACCEPT; the root is always a tree, even for a `?start`."""
        while (move := self._action[node.state].get(self._end)) != ACCEPT:
            if move is None or move >= 0:
                raise _disagreement(-1)
            node = self._reduce(node, values, -1 - move)
        (value,) = values
        if isinstance(value, Tree):
            return value
        children = tuple(value) if isinstance(value, _Inlined) else (value,)
        return Tree(self.compiled.grammar.start, children)

    def _reduce(self, node: StackNode, values: list[Tree | Token], production: int) -> StackNode:
        lhs, length, label, inline, collapse = self._shapes[production]
        children = values[len(values) - length :]
        del values[len(values) - length :]
        if any(type(child) is _Inlined for child in children):
            children = [leaf for c in children for leaf in (c if type(c) is _Inlined else (c,))]
        if inline:
            values.append(_Inlined(children))
        elif collapse and len(children) == 1:
            values.append(children[0])
        else:
            values.append(Tree(label, tuple(children)))
        for _ in range(length):
            node = node.parent  # type: ignore[assignment]
        goto = self._goto[node.state][lhs]
        return node.push(goto, self._nonterminal_base + lhs, self._weights[goto])


class _Shape(NamedTuple):
    """How a reduction by one production shapes the tree (see the module docstring)."""

    lhs: int  # nonterminal id
    length: int  # symbols popped
    label: str  # the alias, else the rule name
    inline: bool  # a "_" rule: its children are spliced into the parent
    collapse: bool  # a `?rule` production without alias: one child replaces the node


def _collapses(production: Production) -> bool:
    return production.expand_single and production.alias is None


def _disagreement(position: int) -> RuntimeError:
    """The oracle accepted the input but the LR driver cannot derive it: a gridrail bug."""
    where = f" at byte {position}" if position >= 0 else ""
    return RuntimeError(f"the tree parser disagrees with the oracle{where}; please report it")


_PARSERS: OrderedDict[str, TreeParser] = OrderedDict()
_PARSER_CACHE_SIZE = 16


def parse_tree(compiled: CompiledGrammar, text: str | bytes) -> Tree:
    """The parse tree of a complete sentence of `compiled`'s language.

    Raises ParseError with the oracle's offset and expected terminals if `text` is not a viable
    prefix, or with offset len(text) if it is one but not a whole statement. The parser of each
    grammar (by fingerprint) is kept, so repeated calls share the lexing and LR memos.
    """
    key = compiled.fingerprint
    parser = _PARSERS.get(key)
    if parser is None:
        parser = _PARSERS[key] = TreeParser(compiled)
        if len(_PARSERS) > _PARSER_CACHE_SIZE:
            _PARSERS.popitem(last=False)
    else:
        _PARSERS.move_to_end(key)
    return parser.parse(text)

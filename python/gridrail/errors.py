"""Exception classes. Every error a user can cause has its own class and an actionable message."""

from __future__ import annotations

from collections.abc import Iterable

LISTED = 20  # names a message lists before "and N more": errors stay a few lines long


def listing(names: Iterable[str], most: int = LISTED) -> str:
    """`names` joined for a message, at most `most` of them ("none" for none): a catalog of
    thousands of tables must not make a message of thousands of names."""
    names = list(names)
    if not names:
        return "none"
    shown = ", ".join(names[:most])
    return shown if len(names) <= most else f"{shown}, and {len(names) - most} more"


class GridrailError(Exception):
    """Base class of every error gridrail raises on purpose."""


class GrammarError(GridrailError):
    """A grammar file is malformed or uses something gridrail does not support.

    ``line`` and ``column`` are 1-based positions in the grammar text (0 when not applicable).
    """

    def __init__(self, message: str, line: int = 0, column: int = 0, source: str = "<grammar>"):
        self.message = message
        self.line = line
        self.column = column
        self.source = source
        where = f"{source}:{line}:{column}: " if line else f"{source}: "
        super().__init__(where + message)


class RegexError(GrammarError):
    """A terminal's regular expression is malformed or uses an unsupported construct."""


class RegexTooLargeError(RegexError):
    """A pattern's automaton passes one of gridrail's bounds; `bound` says which, without the
    pattern (which may be megabytes: a schema lexicon)."""

    def __init__(self, message: str, bound: str, source: str = "<grammar>"):
        self.bound = bound
        super().__init__(message, source=source)


class GrammarConflict(GrammarError):
    """The grammar is not LALR(1): a state has two actions on one lookahead."""

    def __init__(
        self, state: int, items: list[str], lookahead: str, kind: str, source: str = "<grammar>"
    ):
        self.state = state
        self.items = items
        self.lookahead = lookahead
        self.kind = kind
        listing = "\n  ".join(items)
        super().__init__(
            f"{kind} conflict in LALR(1) state {state} on lookahead {lookahead}; "
            f"items:\n  {listing}",
            source=source,
        )


class UsageError(GridrailError, TypeError, ValueError):
    """A gridrail function was called with an argument it cannot take: the wrong type (a float
    or a string as a token id, bytes as SQL text) or a value out of range. It is also a
    TypeError and a ValueError, so callers written against the built-in exceptions still catch
    it."""


class ParseError(GridrailError):
    """Input bytes are not a viable prefix of the language.

    ``offset`` is the byte offset of the first byte that cannot be accepted; ``expected`` names
    the terminals that were allowed there.
    """

    def __init__(self, message: str, offset: int, expected: tuple[str, ...]):
        self.offset = offset
        self.expected = expected
        super().__init__(message)


class PolicyError(GridrailError):
    """A policy bundle is malformed or inconsistent (with the grammar or the schema).

    ``line`` is the 1-based line in the policy file the problem is about (0 when unknown).
    """

    def __init__(self, message: str, line: int = 0, source: str = "<policy>"):
        self.message = message
        self.line = line
        self.source = source
        where = f"{source}:{line}: " if line else f"{source}: "
        super().__init__(where + message)


class SchemaError(GridrailError):
    """A database catalog cannot be read (missing file, refused connection, no such schema)."""


class LexiconError(GridrailError):
    """A schema name cannot be written in the grammar's identifier terminal (precondition
    W_c ⊆ R_c of the paper's §2 fails), so it could never be generated."""


class JudgeError(GridrailError):
    """A database judge cannot be set up or cannot judge (no connection, a privilege it needs
    is missing, a judging role that could read more than the policy lets the role see). Nothing
    is executed: a statement no judge could vouch for is not run."""


class RequestError(GridrailError):
    """A request that is not a question: a line of a `--questions` file that is not a JSON
    object with a non-empty "question" (or names an unknown field, database or role). Its
    answer object says why; the other lines are answered."""

"""Schema linking: which of the tables a role sees a question is about, so that a prompt for a
catalog of thousands of tables shows the few it needs. Only the prompt narrows: the mask still
allows exactly the role's names.

A question and a name are compared as words. A name splits at underscores, digits and
lower-to-upper case changes (`OrderItems_2` → order, items), a question at anything that is not
a letter, both are lower-cased, and a word is reduced to a crude stem (plural endings off:
`employees` and `employee` meet, `categories` and `category`). A table scores
`TABLE_WEIGHT` for each question stem its own name holds and 1 for each further stem one of its
columns holds; ties keep catalog order. Stems of one or two letters and the commonest English
words of questions never count.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from gridrail.policy.schema import Table
from gridrail.policy.view import SchemaView

TABLE_WEIGHT = 3  # a question naming a table's own word is stronger evidence than a column's
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")  # OrderItems → Order, Items; ID → ID
# an identifier as SQL writes it: bare, or inside "…", `…` or […] (the name is the inside)
_IDENTIFIER = re.compile(r'[A-Za-z_][A-Za-z0-9_$]*|"((?:[^"]|"")+)"|`((?:[^`]|``)+)`|\[([^\]]+)\]')
# fmt: off
_STOP = frozenset((
    "the", "and", "for", "are", "was", "were", "with", "what", "which", "who", "whom", "whose",
    "how", "many", "much", "each", "all", "any", "from", "that", "this", "those", "these", "than",
    "then", "there", "their", "have", "has", "had", "not", "but", "does", "did", "list", "show",
    "give", "find", "return", "number", "count", "total", "average", "most", "least", "more",
    "less", "per", "its", "into", "also", "only",
))
# fmt: on


def stems(text: str) -> frozenset[str]:
    """The words of `text` that count, as stems."""
    out = set()
    for word in _WORD.findall(text):
        word = word.lower()
        stem = _stem(word)
        if len(stem) > 2 and word not in _STOP and stem not in _STOP:
            out.add(stem)
    return frozenset(out)


class TableIndex:
    """The stems of every visible table's name and of its columns' names, read once."""

    def __init__(self, view: SchemaView):
        self.tables = view.tables
        self._own = [stems(t.name) for t in self.tables]
        self._columns = [
            frozenset().union(*(stems(c.name) for c in view.columns(t))) for t in self.tables
        ]
        tables_with = Counter(
            s for own, cols in zip(self._own, self._columns, strict=True) for s in own | cols
        )
        # every visible table's and column's name, case folded, with its stems
        self._names = {t.name.lower(): own for t, own in zip(self.tables, self._own, strict=True)}
        for t in self.tables:
            self._names.update((c.name.lower(), stems(c.name)) for c in view.columns(t))
        n = len(self.tables)
        # a stem few tables hold tells more than `name`, which most do (inverse document
        # frequency, tables as the documents)
        self._weight = {s: math.log((n + 1) / count) for s, count in tables_with.items()}

    def coverage(self, question: str, statement: str) -> float:
        """How much of `question` a statement's names speak to: for each question stem, the
        weight of a schema name's stem written in `statement` that is the same word or its
        abbreviation (`dept` for department). Candidates that run are told apart by it: of
        answers that run, the one about the question."""
        written = self._written(statement)
        return sum(
            max((self._weight[w] for w in written if w == q or _abbreviates(w, q)), default=0.0)
            for q in stems(question)
        )

    def _written(self, statement: str) -> set[str]:
        """The stems of the schema names `statement` writes — not of the names it invents
        (`COUNT(*) AS active_customers` speaks to no column `active`)."""
        out: set[str] = set()
        for match in _IDENTIFIER.finditer(statement):
            name = next((g for g in match.groups() if g is not None), match.group())
            out.update(self._names.get(name.lower(), ()))
        return out

    def score(self, asked: frozenset[str], i: int) -> float:
        """How much table i's name and its columns' names share with the question's stems,
        each stem weighted by how rare it is among the tables."""
        own = asked & self._own[i]
        by_columns = (asked - own) & self._columns[i]
        weight = self._weight
        return TABLE_WEIGHT * sum(weight[s] for s in own) + sum(weight[s] for s in by_columns)

    def link(self, question: str, limit: int) -> tuple[Table, ...]:
        """At most `limit` tables for `question`, the best-scoring ones in catalog order; every
        visible table when there are no more than `limit`. A question that shares no word with
        any name gets the first `limit` tables."""
        if limit < 1:
            raise ValueError(f"a prompt shows at least one table, got limit={limit}")
        if len(self.tables) <= limit:
            return self.tables
        asked = stems(question)
        scores = [self.score(asked, i) for i in range(len(self.tables))]
        best = sorted(range(len(self.tables)), key=lambda i: (-scores[i], i))[:limit]
        return tuple(self.tables[i] for i in sorted(best))


def link_tables(view: SchemaView, question: str, limit: int) -> tuple[Table, ...]:
    """`TableIndex(view).link(question, limit)`, for one question (a small catalog, or
    visible tables no more than `limit`, costs next to nothing)."""
    if len(view.tables) <= limit and limit >= 1:
        return view.tables
    return TableIndex(view).link(question, limit)


def _abbreviates(short: str, word: str) -> bool:
    """Is `short` (three letters or more, shorter than `word`) `word`'s first letter followed
    by some of its other letters in order (`dept` of department, `emp` of employee)?"""
    if len(short) < 3 or len(short) >= len(word) or short[0] != word[0]:
        return False
    rest = iter(word[1:])
    return all(letter in rest for letter in short[1:])


def _stem(word: str) -> str:
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("ses", "xes", "ches", "shes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word

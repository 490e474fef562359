"""How each SQL dialect writes and matches identifiers.

The schema lexicons (L3) and the semantic checker both need the same two facts about a dialect:
which quote styles may wrap a name, and when a written name denotes a catalog name.

- SQLite: identifiers match case-insensitively (ASCII letters only), quoted or not; a name can be
  quoted as "x", `x` or [x].
- DuckDB: identifiers match case-insensitively, quoted or not (the catalog keeps the case it was
  created with); a name is quoted as "x".
- PostgreSQL: an unquoted name is folded to lower case (ASCII) before matching; a quoted name
  matches exactly. So a catalog name with upper-case letters can only be written quoted.

And one fact about type names (`CAST(x AS t)`), which the checker enforces (`CAST_TYPES`):
PostgreSQL looks a type name up in the catalogs, where every table has a row type of its own
name, and the OID alias types (regclass, regtype, regproc, regrole, ...) look the cast *value*
up as a table, type, function or role name with no privilege check: `CAST('salaries' AS
regclass)` and `CAST(NULL AS salaries)` plan and run where the table exists and fail where it
does not, which tells a role whether a table it may not see exists (and casting a number to
regclass names it). So there a CAST may name only a built-in type that looks nothing up. SQLite
takes any name (it reads an affinity off the words) and DuckDB has no OID alias types and no row
types of tables, so there a type name tells nothing of the schema.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gridrail.grammar.names import ascii_lower, ascii_lower_all


@dataclass(frozen=True)
class QuoteStyle:
    open: str
    close: str

    def quote(self, name: str) -> str | None:
        """`name` in this quote style (a closing quote inside is doubled), or None when the
        style cannot hold it (`[...]` has no escape for "]")."""
        return self.quote_all([name])[0]

    @property
    def doubles(self) -> bool:
        """Whether a closing quote inside a name is written doubled (`[...]` has no escape)."""
        return self.open != "["

    def quote_all(self, names: Iterable[str]) -> list[str | None]:
        """`quote` of each name, in one pass (a catalog's names are quoted in bulk)."""
        o, c = self.open, self.close
        if not self.doubles:
            return [None if c in name else o + name + c for name in names]
        return [o + name.replace(c, c + c) + c for name in names]

    def unquote(self, text: str) -> str | None:
        """The name inside `text` if `text` is written in this style, else None."""
        if len(text) < 2 or text[0] != self.open or text[-1] != self.close:
            return None
        inner = text[1:-1]
        return inner if self.open == "[" else inner.replace(self.close * 2, self.close)


@dataclass(frozen=True)
class IdentifierRules:
    dialect: str
    quote_styles: tuple[QuoteStyle, ...]
    folds_unquoted: bool  # PostgreSQL: unquoted names are lower-cased before matching
    case_insensitive: bool  # SQLite, DuckDB: every comparison ignores (ASCII) case

    def key(self, name: str, quoted: bool) -> str:
        """The form two names are compared in: names denote the same object iff keys are equal.
        `name` is the identifier as written, without its quotes."""
        if self.case_insensitive or (self.folds_unquoted and not quoted):
            return ascii_lower(name)
        return name

    def catalog_key(self, name: str) -> str:
        """The key of a name as the catalog stores it (a quoted reference to it must match it)."""
        return self.key(name, quoted=True)

    def catalog_keys(self, names: Sequence[str]) -> list[str]:
        """`catalog_key` of each name, in one pass (a catalog's names)."""
        return ascii_lower_all(names) if self.case_insensitive else list(names)

    def unquote(self, written: str) -> tuple[str, bool]:
        """(name, quoted) of an identifier as it appears in SQL text."""
        for style in self.quote_styles:
            inner = style.unquote(written)
            if inner is not None:
                return inner, True
        return written, False

    def denotes(self, written: str, catalog_name: str) -> bool:
        """Does the identifier `written` (as in the SQL text, quotes included) name
        `catalog_name`?"""
        name, quoted = self.unquote(written)
        return self.key(name, quoted) == self.catalog_key(catalog_name)

    def bare_may_denote(self, catalog_name: str) -> bool:
        """Can an unquoted spelling denote `catalog_name` at all (PostgreSQL: only if the name
        is already in folded form)? Whether the identifier regex can spell it is the lexicon
        builder's question."""
        return not self.folds_unquoted or ascii_lower(catalog_name) == catalog_name

    def bare_may_denote_all(self, catalog_names: Sequence[str]) -> list[int]:
        """The indices of the names `bare_may_denote` holds for (a catalog's names)."""
        if not self.folds_unquoted:
            return list(range(len(catalog_names)))
        keys = ascii_lower_all(catalog_names)
        return [i for i, (k, n) in enumerate(zip(keys, catalog_names, strict=True)) if k == n]


_DOUBLE = QuoteStyle('"', '"')
RULES: dict[str, IdentifierRules] = {
    "sqlite": IdentifierRules(
        "sqlite", (_DOUBLE, QuoteStyle("`", "`"), QuoteStyle("[", "]")), False, True
    ),
    "duckdb": IdentifierRules("duckdb", (_DOUBLE,), False, True),
    "postgres": IdentifierRules("postgres", (_DOUBLE,), True, False),
}


def identifier_rules(dialect: str) -> IdentifierRules:
    try:
        return RULES[dialect]
    except KeyError:
        known = ", ".join(sorted(RULES))
        raise ValueError(f"unknown SQL dialect {dialect!r} (known: {known})") from None


# How messages name each dialect's database.
DATABASE_NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL", "duckdb": "DuckDB"}

# The types a CAST may name, per dialect: lower case, a type of several words spelled with one
# space between them, a type modifier (`numeric(10, 2)`) aside; None where any name may be
# written. PostgreSQL's are built-in types whose input looks nothing up: the SQL keywords its
# parser maps to pg_catalog's types itself, and pg_catalog's own names (unquoted names resolve
# through the search path, which searches pg_catalog first unless it is listed later
# explicitly). A quoted or schema-qualified name is none of them.
CAST_TYPES: dict[str, frozenset[str] | None] = {
    "sqlite": None,
    "duckdb": None,
    "postgres": frozenset(
        {
            # keywords
            "smallint", "integer", "int", "bigint", "real", "float", "double precision",
            "decimal", "dec", "numeric", "boolean", "char", "character", "varchar",
            "character varying", "char varying", "bit", "bit varying", "timestamp",
            "timestamp with time zone", "timestamp without time zone", "time",
            "time with time zone", "time without time zone", "interval",
            # pg_catalog's names
            "int2", "int4", "int8", "float4", "float8", "bool", "text", "bytea", "date",
            "timestamptz", "timetz", "uuid", "json", "jsonb",
        }
    ),
}  # fmt: skip


def cast_types(dialect: str) -> frozenset[str] | None:
    """The type names a CAST may name in `dialect` (`CAST_TYPES`; None: any)."""
    identifier_rules(dialect)  # an unknown dialect is refused as everywhere
    return CAST_TYPES[dialect]


def cast_type_key(rules: IdentifierRules, words: Sequence[str]) -> str | None:
    """The key `CAST_TYPES` lists a type name by, from its words as written; None where a word
    is quoted (a quoted name is not the keyword, and is matched exactly) or holds a dot."""
    keys = []
    for word in words:
        name, quoted = rules.unquote(word)
        if quoted or "." in name:
            return None
        keys.append(ascii_lower(name))
    return " ".join(keys)

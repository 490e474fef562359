"""Policy bundles: a TOML file of roles, validated on load and fingerprinted.

```toml
[roles.analyst]
statements = ["select"]                       # statement kinds of the grammar's catalogue
banned = ["subqueries", "set_operations"]      # constructs of the grammar's catalogue
tables = ["employees", "orders"]               # visible tables (omit: every table)
functions = ["count", "sum", "avg"]            # callable functions (omit: every function)

[roles.analyst.columns]
employees = { deny = ["salary"] }              # or { allow = [...] }; never both
```

What can be checked without a database is checked here (names of kinds, constructs and
functions against the grammar; shapes; contradictions), with the line it is about. Table and
column names are checked against a schema when a guide is built (`check_against_schema`).
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gridrail.errors import PolicyError
from gridrail.grammar.compiled import CompiledGrammar
from gridrail.grammar.model import Grammar
from gridrail.policy.constructs import ConstructCatalogue
from gridrail.policy.role import ColumnRule, Role
from gridrail.policy.schema import Schema, Table

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_ROLE_KEYS = {"statements", "banned", "tables", "functions", "columns"}
_ROLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*\Z")


@dataclass(frozen=True)
class Policy:
    roles: Mapping[str, Role]
    source: str
    text: str  # the file as loaded: errors found later still point at its lines

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], grammar: Grammar | CompiledGrammar | None = None
    ) -> Policy:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise PolicyError(
                f"cannot read the policy file: {exc.strerror}", source=os.fspath(path)
            ) from None
        return cls.from_text(text, grammar, os.fspath(path))

    @classmethod
    def from_text(
        cls,
        text: str,
        grammar: Grammar | CompiledGrammar | None = None,
        source: str = "<policy>",
    ) -> Policy:
        """Parse and validate; `grammar` (default: the bundled sqlite grammar) supplies the
        statement kinds, constructs and function names roles may name."""
        if grammar is None:
            grammar = Grammar.bundled("sqlite")
        if isinstance(grammar, CompiledGrammar):
            grammar = grammar.grammar
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            line = getattr(exc, "lineno", 0) or _toml_error_line(str(exc))
            raise PolicyError(f"not valid TOML: {exc}", line, source) from None
        lines = _Lines(text, source)
        unknown = set(data) - {"roles"}
        if unknown:
            key = sorted(unknown)[0]
            raise lines.error(f"unknown top-level key {key!r} (expected [roles.<name>])", key)
        roles_table = data.get("roles")
        if not isinstance(roles_table, dict) or not roles_table:
            raise PolicyError("the policy defines no role (add a [roles.<name>] table)", 0, source)
        catalogue = ConstructCatalogue.for_grammar(grammar)
        functions = catalogue.functions
        roles = {
            name: _load_role(name, spec, catalogue, functions, lines)
            for name, spec in roles_table.items()
        }
        return cls(roles, source, text)

    @property
    def fingerprint(self) -> str:
        """BLAKE2b-128 (hex) of the canonical form of the roles (layout and comments ignored)."""
        h = hashlib.blake2b(b"gridrail-policy-v1\0", digest_size=16)
        for name in sorted(self.roles):
            h.update(_canonical(self.roles[name]).encode("utf-8"))
        return h.hexdigest()

    def role(self, name: str) -> Role:
        try:
            return self.roles[name]
        except KeyError:
            known = ", ".join(sorted(self.roles))
            raise PolicyError(
                f"no role named {name!r} (roles: {known})", source=self.source
            ) from None

    def check_against_schema(self, role: Role, schema: Schema) -> None:
        """Every table and column the role names exists in `schema` (dialect name rules)."""
        lines = _Lines(self.text, self.source)
        section = f"roles.{role.name}"
        for table_name in sorted(role.tables or ()):
            if _catalog_table(schema, table_name) is None:
                raise lines.error(
                    f"role {role.name!r} names table {table_name!r}, which {schema.source} does "
                    f"not have (tables: {', '.join(t.name for t in schema.tables)})",
                    table_name,
                    section,
                )
        key = schema.rules.catalog_key
        for table_name, rule in role.columns.items():
            table = _catalog_table(schema, table_name)
            if table is None:
                raise lines.error(
                    f"role {role.name!r} has column rules for table {table_name!r}, which "
                    f"{schema.source} does not have",
                    table_name,
                    section + ".columns",
                )
            known = {key(c.name) for c in table.columns}
            for column in sorted((rule.allow or frozenset()) | rule.deny):
                if key(column) not in known:
                    raise lines.error(
                        f"role {role.name!r}: table {table.name!r} has no column {column!r} "
                        f"(columns: {', '.join(c.name for c in table.columns)})",
                        column,
                        section + ".columns",
                    )


def _catalog_table(schema: Schema, name: str) -> Table | None:
    """The table a policy names (policies use catalog spellings)."""
    key = schema.rules.catalog_key
    return next((t for t in schema.tables if key(t.name) == key(name)), None)


def _load_role(
    name: str,
    spec: object,
    catalogue: ConstructCatalogue,
    functions: frozenset[str],
    lines: _Lines,
) -> Role:
    section = f"roles.{name}"
    if not _ROLE_NAME.match(name):
        raise lines.error(f"role name {name!r} must be an identifier", name)
    if not isinstance(spec, dict):
        raise lines.error(f"roles.{name} must be a table", name)
    for key in spec:
        if key not in _ROLE_KEYS:
            raise lines.error(
                f"role {name!r}: unknown key {key!r} (known: {', '.join(sorted(_ROLE_KEYS))})",
                key,
                section,
            )
    if "statements" not in spec:
        raise lines.error(f"role {name!r} lists no statement kinds (statements = [...])", name)
    statements = _names(spec["statements"], "statements", name, lines, section)
    if not statements:
        raise lines.error(f"role {name!r}: statements is empty", "statements", section)
    _require_known(statements, catalogue.statements, "statement kind", name, lines)
    banned = _names(spec.get("banned", []), "banned", name, lines, section)
    _require_known(banned, catalogue.constructs, "construct", name, lines)
    tables = None
    if "tables" in spec:
        tables = _names(spec["tables"], "tables", name, lines, section)
        if not tables:
            raise lines.error(
                f"role {name!r}: tables is empty (omit it for all)", "tables", section
            )
    role_functions = None
    if "functions" in spec:
        listed = _names(spec["functions"], "functions", name, lines, section)
        role_functions = frozenset(f.lower() for f in listed)
        for function in sorted(role_functions):
            if function not in functions:
                raise lines.error(
                    f"role {name!r}: the grammar has no function {function!r}", function, section
                )
    columns = _column_rules(name, spec.get("columns", {}), tables, lines)
    return Role(
        name,
        frozenset(statements),
        frozenset(banned),
        None if tables is None else frozenset(tables),
        columns,
        role_functions,
        lines.find(f"[{section}]"),
    )


def _require_known(
    values: list[str], known: Iterable[str], what: str, role: str, lines: _Lines
) -> None:
    known = sorted(known)
    for value in values:
        if value not in known:
            raise lines.error(
                f"role {role!r}: unknown {what} {value!r} (known: {', '.join(known)})",
                value,
                f"roles.{role}",
            )


def _column_rules(
    role: str, spec: object, tables: list[str] | None, lines: _Lines
) -> dict[str, ColumnRule]:
    section = f"roles.{role}.columns"
    if not isinstance(spec, dict):
        raise lines.error(
            f"{section} must be a table of table = {{ allow|deny = [...] }}", "columns"
        )
    rules = {}
    for table, rule in spec.items():
        if not isinstance(rule, dict) or set(rule) - {"allow", "deny"} or not rule:
            raise lines.error(
                f"{section}.{table} must be {{ allow = [...] }} or {{ deny = [...] }}",
                table,
                section,
            )
        if "allow" in rule and "deny" in rule:
            raise lines.error(
                f"{section}.{table} gives both allow and deny: give one of them", table, section
            )
        if tables is not None and table not in tables:
            raise lines.error(
                f"{section}.{table}: role {role!r} cannot see table {table!r} at all "
                "(add it to tables or drop its column rule)",
                table,
                section,
            )
        allow = rule.get("allow")
        rules[table] = ColumnRule(
            None if allow is None else frozenset(_names(allow, "allow", role, lines, section)),
            frozenset(_names(rule.get("deny", []), "deny", role, lines, section)),
        )
    return rules


def _names(value: object, key: str, role: str, lines: _Lines, section: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise lines.error(f"role {role!r}: {key} must be a list of names", key, section)
    seen: set[str] = set()
    for v in value:
        if v in seen:
            raise lines.error(f"role {role!r}: {key} lists {v!r} twice", v, section)
        seen.add(v)
    return list(value)


def _canonical(role: Role) -> str:
    def names(values) -> str:
        return "null" if values is None else ",".join(sorted(values))

    columns = ";".join(
        f"{t}:{names(r.allow)}/{names(r.deny)}" for t, r in sorted(role.columns.items())
    )
    return (
        f"role {role.name}\n statements {names(role.statements)}\n banned {names(role.banned)}\n"
        f" tables {names(role.tables)}\n functions {names(role.functions)}\n columns {columns}\n"
    )


def _toml_error_line(message: str) -> int:
    match = re.search(r"line (\d+)", message)
    return int(match.group(1)) if match else 0


class _Lines:
    """Finds the line a key or name appears on, within a [section] when given, so errors found
    after parsing (tomllib keeps no positions) still point at the file."""

    def __init__(self, text: str, source: str):
        self.lines = text.splitlines()
        self.source = source

    def find(self, needle: str, section: str | None = None) -> int:
        start, end = 0, len(self.lines)
        if section is not None:
            header = next(
                (i for i, line in enumerate(self.lines) if _is_header(line, section)), None
            )
            if header is not None:
                start = header
                end = next(
                    (i for i in range(header + 1, end) if self.lines[i].lstrip().startswith("[")),
                    end,
                )
        word = re.compile(rf"(?<![\w.]){re.escape(needle)}(?![\w])")
        first = start + 1 if section is not None else start  # a key, not its section header
        for i in range(first, end):
            if word.search(self.lines[i].split("#", 1)[0]):
                return i + 1
        return start + 1 if section is not None and start < len(self.lines) else 0

    def error(self, message: str, needle: str, section: str | None = None) -> PolicyError:
        return PolicyError(message, self.find(needle, section), self.source)


def _is_header(line: str, section: str) -> bool:
    stripped = line.strip()
    return stripped.startswith("[") and stripped.strip("[]").replace(" ", "") == section

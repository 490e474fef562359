"""Policy bundles: a TOML file of roles, validated on load and fingerprinted.

```toml
[roles.clerk]
statements = ["select", "insert", "update"]    # statement kinds of the grammar's catalogue
banned = ["subqueries", "set_operations"]      # constructs of the grammar's catalogue
tables = ["employees", "orders"]               # visible tables (omit: every table)
writes = ["orders"]                            # tables it may change (omit: every visible one)
functions = ["count", "sum", "avg"]            # callable functions (omit: every function)
names = "bound"                                # names bind where written, or "open"

[roles.clerk.columns]
employees = { deny = ["salary"] }              # or { allow = [...] }; never both
```

What can be checked without a database is checked here (names of kinds, constructs and
functions against the grammar's construct catalogue; shapes; contradictions; names that the
catalogue's dialect takes for one, such as `employees` and `EMPLOYEES` in SQLite), with the line
it is about. Table and column names are checked against a schema when a guide is built
(`check_against_schema`); a guide built without one refuses what only a schema can enforce
(`check_without_schema`).
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from gridrail.errors import PolicyError, listing
from gridrail.grammar.compiled import CompiledGrammar
from gridrail.grammar.model import Grammar
from gridrail.policy.constructs import ConstructCatalogue, read_policy_text
from gridrail.policy.dialect import IdentifierRules
from gridrail.policy.role import NAME_RUNGS, ColumnRule, Role
from gridrail.policy.schema import Schema, Table

_ROLE_KEYS = {"statements", "banned", "tables", "writes", "functions", "columns", "names"}
_ROLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*\Z")


@dataclass(frozen=True)
class Policy:
    roles: Mapping[str, Role]
    source: str
    text: str  # the file as loaded: errors found later still point at its lines

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        grammar: Grammar | CompiledGrammar | None = None,
        catalogue: ConstructCatalogue | None = None,
    ) -> Policy:
        text = read_policy_text(path, "policy file")
        return cls.from_text(text, grammar, os.fspath(path), catalogue)

    @classmethod
    def from_text(
        cls,
        text: str,
        grammar: Grammar | CompiledGrammar | None = None,
        source: str = "<policy>",
        catalogue: ConstructCatalogue | None = None,
    ) -> Policy:
        """Parse and validate against a construct catalogue, which supplies the statement kinds,
        constructs, function names and name rules roles may use: `catalogue` (built for
        `grammar` if that is given too), else `grammar`'s own (a bundled grammar's; default: the
        bundled sqlite grammar)."""
        if isinstance(grammar, CompiledGrammar):
            grammar = grammar.grammar
        if grammar is not None:
            catalogue = ConstructCatalogue.resolve(grammar, catalogue)
        elif catalogue is None:
            catalogue = ConstructCatalogue.for_grammar(Grammar.bundled("sqlite"))
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            line = getattr(exc, "lineno", 0) or _toml_error_line(str(exc))
            raise PolicyError(f"not valid TOML: {exc}", line, source) from None
        except RecursionError:  # tomllib recurses on nested arrays and inline tables
            raise PolicyError(
                "not valid TOML: arrays or tables nested too deeply", 0, source
            ) from None
        lines = _Lines(text, source)
        unknown = set(data) - {"roles"}
        if unknown:
            key = sorted(unknown)[0]
            raise lines.error(f"unknown top-level key {key!r} (expected [roles.<name>])", key)
        roles_table = data.get("roles")
        if not isinstance(roles_table, dict) or not roles_table:
            raise PolicyError("the policy defines no role (add a [roles.<name>] table)", 0, source)
        roles = {
            name: _load_role(name, spec, catalogue, lines) for name, spec in roles_table.items()
        }
        return cls(roles, source, text)

    @property
    def fingerprint(self) -> str:
        """BLAKE2b-128 (hex) of the canonical form of the roles (layout and comments ignored)."""
        h = hashlib.blake2b(b"gridrail-policy-v2\0", digest_size=16)
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

    def check_against_catalogue(self, role: Role, catalogue: ConstructCatalogue) -> None:
        """Every statement kind, construct and function the role names is one `catalogue`
        has (a policy may have been loaded against another catalogue than a guide's)."""
        lines = _Lines(self.text, self.source)
        _require_known(role.statements, catalogue.statements, "statement kind", role.name, lines)
        _require_known(role.banned, catalogue.constructs, "construct", role.name, lines)
        _require_functions(role.functions or (), catalogue, role.name, lines)

    def check_without_schema(self, role: Role, catalogue: ConstructCatalogue) -> None:
        """A guide built without a schema enforces the role's table and function lists with
        lexicons of the names themselves; what only a catalog can judge is refused, never
        dropped."""
        lines = _Lines(self.text, self.source)
        section = f"roles.{role.name}"
        how = "pass schema=gr.Schema.from_sqlite(path) (or .from_postgres / .from_duckdb)"
        if role.columns:
            raise PolicyError(
                f"role {role.name!r} has column rules, and which table a column belongs to is "
                f"the database's to say: enforcing them needs a schema; {how}",
                lines.find(f"[{section}.columns]") or lines.find("columns", section),
                self.source,
            )
        if role.writes is not None:
            raise lines.error(
                f"role {role.name!r} limits the tables it writes, which the semantic checker "
                f"enforces against a schema; {how}",
                "writes",
                section,
            )
        if role.tables is not None and catalogue.lexicon("tables") is None:
            raise lines.error(
                f"role {role.name!r} lists tables, which without a schema only a table lexicon "
                f"could enforce, and {catalogue.source} defines none; {how}",
                "tables",
                section,
            )

    def check_against_schema(self, role: Role, schema: Schema) -> None:
        """Every table and column the role names exists in `schema`, and no two of its names
        are one name under the schema's dialect rules."""
        lines = _Lines(self.text, self.source)
        section = f"roles.{role.name}"
        _require_distinct_names(role, schema.rules, lines)
        key = schema.rules.catalog_key
        tables: dict[str, Table] = {}  # the table a policy name denotes, by its key
        for table in schema.tables:
            tables.setdefault(key(table.name), table)
        for table_name in sorted((role.tables or frozenset()) | (role.writes or frozenset())):
            if key(table_name) not in tables:
                raise lines.error(
                    f"role {role.name!r} names table {table_name!r}, which {schema.source} does "
                    f"not have (tables: {listing(t.name for t in schema.tables)})",
                    table_name,
                    section,
                )
        for table_name, rule in role.columns.items():
            table = tables.get(key(table_name))
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
                        f"(columns: {listing(c.name for c in table.columns)})",
                        column,
                        section + ".columns",
                    )


def _load_role(name: str, spec: object, catalogue: ConstructCatalogue, lines: _Lines) -> Role:
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
    statements = frozenset(_names(spec["statements"], "statements", name, lines, section))
    if not statements:
        raise lines.error(f"role {name!r}: statements is empty", "statements", section)
    _require_known(statements, catalogue.statements, "statement kind", name, lines)
    banned = frozenset(_names(spec.get("banned", []), "banned", name, lines, section))
    _require_known(banned, catalogue.constructs, "construct", name, lines)
    tables = _optional_names(spec, "tables", name, lines, "omit it for all")
    writes = _optional_names(spec, "writes", name, lines, "omit it for every visible table")
    functions = None
    if "functions" in spec:
        listed = _names(spec["functions"], "functions", name, lines, section)
        _require_distinct(listed, str.lower, "functions", name, "SQL's", lines, section)
        functions = frozenset(f.lower() for f in listed)
        _require_functions(functions, catalogue, name, lines)
    names = spec.get("names")
    if names is not None and names not in NAME_RUNGS:
        raise lines.error(
            f"role {name!r}: names must be one of {', '.join(map(repr, NAME_RUNGS))} (the rung "
            f"of the names ladder; omit it for the caller's choice), not {names!r}",
            "names",
            section,
        )
    barred = catalogue.barred_functions(banned)
    if functions is not None and functions & barred:
        function = sorted(functions & barred)[0]
        raise lines.error(
            f"role {name!r}: {function} is a construct it bans under another spelling "
            f"(banned: {', '.join(sorted(banned))}); drop it from functions",
            function,
            section,
        )
    role = Role(
        name,
        statements,
        banned,
        tables,
        _column_rules(name, spec.get("columns", {}), lines),
        functions,
        lines.find(f"[{section}]"),
        writes,
        names,
        barred,
    )
    _require_distinct_names(role, catalogue.rules, lines)
    _require_consistent(role, catalogue.rules, lines)
    return role


def _optional_names(
    spec: dict, key: str, role: str, lines: _Lines, omit: str
) -> frozenset[str] | None:
    """A list of table names that may be left out (None), but not given empty."""
    if key not in spec:
        return None
    section = f"roles.{role}"
    listed = _names(spec[key], key, role, lines, section)
    if not listed:
        raise lines.error(f"role {role!r}: {key} is empty ({omit})", key, section)
    return frozenset(listed)


def _require_known(
    values: Iterable[str], known: Iterable[str], what: str, role: str, lines: _Lines
) -> None:
    known = sorted(known)
    for value in sorted(values):
        if value not in known:
            raise lines.error(
                f"role {role!r}: unknown {what} {value!r} (known: {', '.join(known)})",
                value,
                f"roles.{role}",
            )


def _require_functions(
    functions: Iterable[str], catalogue: ConstructCatalogue, role: str, lines: _Lines
) -> None:
    for function in sorted(functions):
        if function not in catalogue.functions and function not in catalogue.function_keywords:
            raise lines.error(
                f"role {role!r}: the grammar has no function {function!r}",
                function,
                f"roles.{role}",
            )


def _require_distinct_names(role: Role, rules: IdentifierRules, lines: _Lines) -> None:
    """No two table names of one list, and no two column names of one rule, are one name under
    `rules` (a second spelling would otherwise be silently ignored)."""
    section = f"roles.{role.name}"
    dialect = f"{rules.dialect}'s"
    key = rules.catalog_key
    for what, listed in (("tables", role.tables), ("writes", role.writes)):
        _require_distinct(listed or (), key, what, role.name, dialect, lines, section)
    _require_distinct(role.columns, key, "columns", role.name, dialect, lines, section + ".columns")
    for table, rule in role.columns.items():
        for what, names in (("allow", rule.allow), ("deny", rule.deny)):
            where = f"columns.{table}.{what}"
            columns = section + ".columns"
            _require_distinct(names or (), key, where, role.name, dialect, lines, columns)


def _require_distinct(
    names: Iterable[str],
    key: Callable[[str], str],
    what: str,
    role: str,
    rules: str,
    lines: _Lines,
    section: str,
) -> None:
    seen: dict[str, str] = {}
    for name in sorted(names):
        other = seen.setdefault(key(name), name)
        if other != name:
            # name the spellings in file order, at the later one (where the repeat is)
            (_, first), (line, second) = sorted((lines.find(n, section), n) for n in (other, name))
            raise PolicyError(
                f"role {role!r}: {what} names {first!r} and {second!r}, which are one name "
                f"under {rules} rules; give it once",
                line,
                lines.source,
            )


def _require_consistent(role: Role, rules: IdentifierRules, lines: _Lines) -> None:
    """Column rules and writes only for tables the role can see; writes only for a role that
    writes."""
    section = f"roles.{role.name}"
    key = rules.catalog_key
    visible = None if role.tables is None else {key(t) for t in role.tables}
    for table in role.columns:
        if visible is not None and key(table) not in visible:
            raise lines.error(
                f"{section}.columns.{table}: role {role.name!r} cannot see table {table!r} at "
                "all (add it to tables or drop its column rule)",
                table,
                section + ".columns",
            )
    if role.writes is None:
        return
    if not role.write_kinds:
        raise lines.error(
            f"role {role.name!r} lists writes but holds no statement kind that writes "
            f"(statements: {', '.join(sorted(role.statements))}): drop writes or add a kind",
            "writes",
            section,
        )
    for table in sorted(role.writes):
        if visible is not None and key(table) not in visible:
            raise lines.error(
                f"role {role.name!r} writes table {table!r}, which it cannot see (add it to "
                "tables as well)",
                table,
                section,
            )


def _column_rules(role: str, spec: object, lines: _Lines) -> dict[str, ColumnRule]:
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
    # the rung only where a policy sets it: the roles of earlier policies fingerprint as before
    rung = "" if role.names is None else f" names {role.names}\n"
    return (
        f"role {role.name}\n statements {names(role.statements)}\n banned {names(role.banned)}\n"
        f" tables {names(role.tables)}\n writes {names(role.writes)}\n"
        f" functions {names(role.functions)}\n columns {columns}\n{rung}"
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

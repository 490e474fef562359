"""DuckDB's binder as the judge of what a statement reads: its unoptimized logical plan.

DuckDB has no column privileges, so there is nothing for it to refuse; what it can say without
running anything is what its binder resolved. `json_serialize_plan(sql, optimize := false)`
binds and plans a statement and returns the logical plan, executing nothing (tests show ATTACH,
COPY … TO and CREATE TABLE … AS planned this way leave no trace). Each table scan in it
(`LOGICAL_GET` of `seq_scan`) names its table and the columns the binder bound — in any
clause, subquery, CTE (recursive or not), join, `*` or `COLUMNS(…)` expansion, whole-row
reference (`SELECT t FROM t`), NATURAL JOIN or USING. With the optimizer off, no column is
pruned: a column `SELECT *` expands to counts as read even where an outer query drops it, as the
semantic checker counts it, and `WHERE false AND salary > 0` still reads salary. What the
binder leaves out of the plan is never run: a CTE nothing references. The plan is made on an
in-memory copy of the snapshot (its tables, views as tables of their columns, no rows) with
external access off, so the binder can open no file and nothing it does touches the database.

Each scan is judged against the view: a table the role may not see, a column it may not see,
any read at all by a role without select, a table function (it reads outside the schema: a
file, the catalog) — a `database_denied` violation. UPDATE's SET columns and the targets of
INSERT, UPDATE and DELETE are judged against the tables the role may write. A statement the
binder rejects, and any plan operator outside the known read/write set (DDL, COPY, ATTACH, SET,
PRAGMA, … and whatever a newer DuckDB adds), is `database_rejected`: it is not run.

What it does not cover: INSERT's column list and RETURNING over inserted rows (the plan does
not serialize which columns an INSERT writes; RETURNING of UPDATE and DELETE reads the stored
row and shows as a scan of every column), function policy (the plan names DuckDB's internal
functions — `count_star`, operators — not the grammar's, so `functions` stays with the
checker), the row id (a scan's row position, not a column value; `count(*)` scans it too, so it
passes on a visible table), and differences between the copy and the live database
(collations, macros, types the snapshot cannot name: a statement using those is rejected, not
passed). DELETE on a table with a primary key scans the key (DuckDB fetches it to maintain the
index), so a role that may delete there must see the key columns.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

from gridrail.check.checker import Violation
from gridrail.errors import JudgeError
from gridrail.policy.schema import Table
from gridrail.policy.view import SchemaView

DEFAULT_TIMEOUT_S = 5.0
_VIRTUAL_COLUMNS = 1 << 63  # column indexes from here on are the scan's own (the row id)
_WRITES = {"LOGICAL_INSERT": "insert", "LOGICAL_UPDATE": "update", "LOGICAL_DELETE": "delete"}
# Operators a read or a write statement plans into; every other one is rejected.
_QUERY_OPERATORS = frozenset(
    {
        "LOGICAL_AGGREGATE_AND_GROUP_BY",
        "LOGICAL_ANY_JOIN",
        "LOGICAL_ASOF_JOIN",
        "LOGICAL_COMPARISON_JOIN",
        "LOGICAL_CROSS_PRODUCT",
        "LOGICAL_CTE_REF",
        "LOGICAL_DELIM_GET",
        "LOGICAL_DELIM_JOIN",
        "LOGICAL_DEPENDENT_JOIN",
        "LOGICAL_DISTINCT",
        "LOGICAL_DUMMY_SCAN",
        "LOGICAL_EMPTY_RESULT",
        "LOGICAL_EXCEPT",
        "LOGICAL_EXPRESSION_GET",
        "LOGICAL_FILTER",
        "LOGICAL_GET",
        "LOGICAL_INTERSECT",
        "LOGICAL_JOIN",
        "LOGICAL_LIMIT",
        "LOGICAL_MATERIALIZED_CTE",
        "LOGICAL_ORDER_BY",
        "LOGICAL_POSITIONAL_JOIN",
        "LOGICAL_PROJECTION",
        "LOGICAL_RECURSIVE_CTE",
        "LOGICAL_SAMPLE",
        "LOGICAL_TOP_N",
        "LOGICAL_UNION",
        "LOGICAL_UNNEST",
        "LOGICAL_WINDOW",
        *_WRITES,
    }
)


class DuckDBJudge:
    """Judges finished statements by the tables and columns DuckDB's binder resolves them to,
    over an in-memory copy of `view.schema` (a DuckDB snapshot with column types)."""

    def __init__(self, view: SchemaView, *, timeout_s: float = DEFAULT_TIMEOUT_S):
        if view.schema.dialect != "duckdb":
            raise JudgeError(
                f"a DuckDB judge needs a DuckDB schema snapshot, not a {view.schema.dialect} one"
            )
        self.view = view
        self.timeout_s = timeout_s
        self._conn = _catalog_copy(view)
        self._lock = threading.Lock()  # one connection: one plan at a time

    def judge(self, sql: str) -> list[Violation]:
        """The violations DuckDB's plan of `sql` shows ([] = clean). Raises JudgeError when
        the plan is not in the form this judge reads (another DuckDB version): nothing is
        passed unread."""
        with self._lock:
            timer = threading.Timer(self.timeout_s, self._conn.interrupt)
            timer.start()
            try:
                found = self._conn.execute(
                    "SELECT json_serialize_plan(?, optimize := false)", [sql]
                ).fetchone()
            except Exception as exc:  # duckdb.Error, or the interrupt at the deadline
                return [_rejected(sql, f"planning it failed: {_first_line(str(exc))}")]
            finally:
                timer.cancel()
                timer.join()
        plan = json.loads(found[0])
        if plan.get("error"):
            start = int(plan.get("position") or 0)
            reason = _first_line(plan.get("error_message") or "no reason given")
            return [_rejected(sql, reason, start)]
        return _PlanJudge(self.view, sql).judge(plan["plans"])


class _PlanJudge:
    """Judges the operators of one statement's plans (one instance per judgment)."""

    def __init__(self, view: SchemaView, sql: str):
        self.view = view
        self.sql = sql
        self.size = len(sql.encode("utf-8"))
        self.role = view.role.name if view.role is not None else "(no role)"
        self.violations: list[Violation] = []

    def judge(self, plans: list[Any]) -> list[Violation]:
        for operator in _operators(plans):
            kind = operator["type"]
            if kind not in _QUERY_OPERATORS:
                return [
                    _rejected(self.sql, f"it plans to {kind}, which no role's statement may do")
                ]
            if kind == "LOGICAL_GET":
                self.scan(operator)
            elif kind in _WRITES:
                self.write(operator, _WRITES[kind])
        return self.violations

    def scan(self, operator: dict[str, Any]) -> None:
        function = _field(operator, "qname", "path")[-1]
        if function != "seq_scan":
            self.deny(f"it reads table function {function}, which is not a table of the schema")
            return
        table = self.table(_field(operator, "function_data", "table"))
        names = _field(operator, "names")
        indexes = [_field(index, "index") for index in _field(operator, "column_indexes")]
        read = [names[i] for i in indexes if i < _VIRTUAL_COLUMNS]
        named = self.view.naming(table.name)
        if not self.view.may_see_table(table.name):  # even a row count of it
            self.deny(f"it reads {named}, which role {self.role!r} may not see", table)
        elif read and not self.view.may_read:
            self.deny(f"it reads columns of {named}, and role {self.role!r} may not read", table)
        else:
            for column in read:
                if not self.view.may_see_column(table.name, column):
                    self.deny(
                        f"it reads {self.view.naming(table.name, column)}, which role "
                        f"{self.role!r} may not see (the semantic checker did not catch it); "
                        f"the columns of {table.name} it may see: {self.visible(table)}",
                        table,
                        column,
                    )

    def write(self, operator: dict[str, Any], kind: str) -> None:
        info = _field(operator, "table_info")
        table = self.table(_field(info, "table"))
        if not (self.view.may_hold(kind) and self.view.may_write_table(table.name)):
            named = self.view.naming(table.name)
            self.deny(f"it {kind}s into {named}, which role {self.role!r} may not", table)
        if kind != "update" or not self.view.may_see_table(table.name):
            return
        columns = [_field(column, "name") for column in _field(info, "columns", "columns")]
        for index in _field(operator, "columns"):
            column = columns[index]
            if not self.view.may_see_column(table.name, column):
                self.deny(
                    f"it sets {self.view.naming(table.name, column)}, which role {self.role!r} "
                    f"may not see; the columns of {table.name} it may see: {self.visible(table)}",
                    table,
                    column,
                )

    def table(self, name: str) -> Table:
        """The snapshot table a plan names (the copy has exactly the snapshot's tables)."""
        key = self.view.schema.rules.catalog_key
        found = next((t for t in self.view.schema.tables if key(t.name) == key(name)), None)
        if found is None:
            raise JudgeError(f"DuckDB's plan names table {name!r}, which the snapshot lacks")
        return found

    def visible(self, table: Table) -> str:
        return ", ".join(c.name for c in self.view.columns(table)) or "none"

    def deny(self, reason: str, table: Table | None = None, column: str | None = None) -> None:
        """`reason` names nothing the role may not see; nor does the violation."""
        message = f"DuckDB's binder shows this statement breaks the policy: {reason}"
        shown = self.view.disclosed(table.name if table else None, column)
        violation = Violation("database_denied", message, 0, self.size, *shown)
        if violation not in self.violations:
            self.violations.append(violation)


def _operators(plans: list[Any]) -> Iterator[dict[str, Any]]:
    """Every logical operator anywhere in the plans (an operator is an object whose `type`
    starts with LOGICAL_; expressions have other types), so none is missed wherever a DuckDB
    version nests it."""
    pending: list[Any] = list(plans)
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            if str(node.get("type", "")).startswith("LOGICAL_"):
                yield node
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)


def _field(node: dict[str, Any], *path: str) -> Any:
    """A field of the serialized plan, or a JudgeError: a plan this judge cannot read is
    never taken as clean."""
    value: Any = node
    for key in path:
        if not isinstance(value, dict) or key not in value:
            raise JudgeError(
                f"DuckDB's serialized plan has no {'.'.join(path)} where this judge reads it "
                f"(in a {node.get('type')} operator); this DuckDB version's plan format is not "
                "supported, so nothing can be judged on it"
            )
        value = value[key]
    return value


def _catalog_copy(view: SchemaView) -> Any:
    """An in-memory DuckDB with the snapshot's tables (views as tables of their columns: the
    policy is about what a view shows, not what it reads), no rows, no external access."""
    try:
        import duckdb
    except ImportError:
        raise JudgeError(
            "judging on DuckDB needs the 'duckdb' package: pip install duckdb"
        ) from None
    quote = view.schema.rules.quote_styles[0].quote
    conn = duckdb.connect(
        ":memory:",
        config={
            "enable_external_access": False,
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
        },
    )
    for table in view.schema.tables:
        if not table.columns:
            continue  # a view over a dropped table: a statement naming it fails to bind
        untyped = [c.name for c in table.columns if not c.type]
        if untyped:
            raise JudgeError(
                f"table {table.name!r} of the snapshot has columns without a type "
                f"({', '.join(untyped)}); the DuckDB judge needs the types DuckDB reports "
                "(read the schema with Schema.from_duckdb)"
            )
        columns = ", ".join(f"{quote(c.name)} {c.type}" for c in table.columns)
        try:
            conn.execute(f"CREATE TABLE {quote(table.name)} ({columns})")
        except duckdb.Error as exc:
            raise JudgeError(
                f"DuckDB cannot copy table {table.name!r} of the snapshot for judging ({exc})"
            ) from None
    conn.execute("SET lock_configuration = true")  # no statement changes these settings
    return conn


def _first_line(message: str) -> str:
    """DuckDB's error without what follows its first line: the candidate names it suggests
    there ("Candidate bindings", "Did you mean") are taken from every table of the copy, hidden
    ones too."""
    return message.strip().split("\n", 1)[0]


def _rejected(sql: str, reason: str, start: int = 0) -> Violation:
    """`start`: the character offset DuckDB points at, as a byte offset."""
    size = len(sql.encode("utf-8"))
    text = (
        f"DuckDB cannot plan this statement as a judged read or write ({reason}), so it is not "
        "run; write it in a form DuckDB binds"
    )
    return Violation("database_rejected", text, min(len(sql[:start].encode("utf-8")), size), size)

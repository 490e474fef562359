"""SQLite's own binder as the judge of what a statement reads, calls and writes.

The semantic checker binds names itself, so that it can say precisely where a statement breaks
the policy; but a hand-written binder can be wrong where SQLite's is right by definition (a
recursive CTE and a WITHOUT ROWID table each once hid a read of a hidden column from it). So for
a SQLite schema every checked statement is also prepared by SQLite -- compiled as `EXPLAIN`,
never run -- against a schema-only in-memory copy of the catalog, with an authorizer that
records every access SQLite asks about while it binds the statement:

  * SQLITE_READ (table, column): a column read, named as the catalog names it (a rowid alias as
    its INTEGER PRIMARY KEY, the implicit row key as "ROWID"), or "" for a FROM item read
    without a column (`count(*)`). Such a table read names a CTE as readily as a table, so only
    one of a snapshot table is judged (a CTE that takes the name of a hidden table is then
    refused: fail closed), and not the read of a recursive CTE by its own recursive SELECT;
  * SQLITE_FUNCTION: a function call. LIKE, GLOB and MATCH are functions to SQLite but
    operators to the grammar, whose `pattern_matching` construct judges them, so they are left
    out; REGEXP, -> and ->> are judged as the functions regexp, -> and ->> (the construct
    catalogue's [function_keywords]: a role lists them among its functions);
  * SQLITE_INSERT, SQLITE_UPDATE (table, column), SQLITE_DELETE: what the statement writes;
  * SQLITE_SELECT and SQLITE_RECURSIVE name nothing. Any other action is one no statement of the
    grammar takes, so it is denied.

Each access is judged against the role's view (`SchemaView`): the table must be in the
snapshot and visible, the column visible (`may_read_row_key` for the row key), the function
callable, a written table writable. The checker and SQLite must then agree: a denied access the
checker did not report (no violation names its table and column, or the function) is a
`database_denied` violation of its own, spanning the whole statement, because the checker missed
it: that is a checker bug to report, and the statement is refused. A statement SQLite cannot
prepare is `database_rejected`, quoting SQLite (the repair loop learns what the database would
say). The kinds are those of the other databases' judges (`postgres_judge`, `duckdb_judge`).

SQLite sees what the role may not. So once the checker has reported a name the role cannot bind
(SQLite then cannot prepare the statement, or binds it to a hidden table or column the checker
treats as absent) or a read of a column the role may not see, the judge adds nothing: the
statement is refused, and SQLite's words would speak of what the role may not see (the column
a name binds to, how many columns a table has). Its own messages name a table or column only
where the role may see it (`SchemaView.naming`).

What SQLite does not report: the columns NATURAL JOIN and USING compare (it builds those
references itself, without asking), so only the checker judges them.

The copy holds the snapshot's CREATE TABLE statements (the DDL of the file it was read from)
and stand-ins: a table with the snapshot's columns and row key for each view (policy is on the
view, not the tables its definition reads, which SQLite would report instead), for each table
of a schema written by hand (with an implicit row key) and for each table whose DDL this SQLite
cannot run (a virtual table of a module it lacks). No data, no triggers, no indexes: nothing the
grammar's statements bind against. A table is created in the copy the first time SQLite misses
it preparing a statement ("no such table"), and the statement is prepared again: what a
statement binds to depends only on the tables it names, and SQLite scans its whole catalog after
each CREATE TABLE, so a copy of a 10,000-table catalog made up front took seconds. A table
named like one of SQLite's eponymous virtual tables (json_each, pragma_table_info, ...) is made
up front: without it SQLite binds the name to that virtual table and misses nothing. It is
read-only (`query_only`) and its prepared statements
are never cached (a cached statement is not prepared again, so the authorizer would hear
nothing). One connection per judge, used under a lock: a guide may check from several threads.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gridrail.check.checker import Violation, may_read_row_key
from gridrail.errors import JudgeError
from gridrail.policy.dialect import ascii_lower
from gridrail.policy.schema import Schema, Table
from gridrail.policy.view import SchemaView

# SQLite's functions that are the grammar's operators under a construct (`a LIKE b`)
_OPERATOR_FUNCTIONS = frozenset({"like", "glob", "match"})
_WRITES = {
    sqlite3.SQLITE_INSERT: "insert",
    sqlite3.SQLITE_UPDATE: "update",
    sqlite3.SQLITE_DELETE: "delete",
}
_NAMES_NOTHING = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE})
# the checker's violations after which the judge adds nothing (the module says why)
_UNDISCLOSED = frozenset(
    {
        "unknown_table",
        "unknown_column",
        "ambiguous_column",
        "unbound_qualifier",
        "circular_reference",
        "column_not_visible",
        "double_quoted_column",
    }
)
_CREATE_TABLE = re.compile(r"\s*CREATE\s+(?:VIRTUAL\s+)?TABLE\s", re.IGNORECASE)


@dataclass(frozen=True)
class Access:
    """One thing SQLite asked about while preparing a statement. ``action``: "read", "call",
    "insert", "update", "delete", or "action N" (SQLite's code) for any other."""

    action: str
    table: str | None  # catalog spelling, as SQLite reports it
    name: str | None  # the column (read, update; "" for a table read) or the function called


@dataclass(frozen=True)
class Prepared:
    """What SQLite heard preparing one statement, or why it could not."""

    accesses: tuple[Access, ...]
    error: str | None  # SQLite's message when it cannot prepare the statement


class SqliteJudge:
    """Judges statements with SQLite's binder, for one role's view of one SQLite schema."""

    def __init__(self, view: SchemaView):
        if view.schema.dialect != "sqlite":
            raise JudgeError(
                f"the SQLite judge judges statements over a SQLite schema, and "
                f"{view.schema.source} is {view.schema.dialect}: use its own database's judge"
            )
        self.view = view
        self._lock = threading.Lock()
        self._heard: list[Access] = []
        self._copy = _CatalogCopy(view.schema)
        self._db = self._copy.db
        self._db.set_authorizer(self._hear)

    def prepare(self, sql: str) -> Prepared:
        """Prepare one statement (compiled, never run) and return what SQLite asked about.
        A table of the snapshot the statement names is created in the copy the first time
        SQLite misses it, and the statement prepared again."""
        with self._lock:
            while True:
                self._heard = []
                try:
                    self._db.execute("EXPLAIN " + sql)
                except (sqlite3.Error, sqlite3.Warning, ValueError) as e:  # ValueError: a NUL
                    missing = _MISSING_TABLE.match(str(e))
                    if missing is not None and self._made(missing.group(1)):
                        continue
                    return Prepared(tuple(self._heard), str(e))
                return Prepared(tuple(self._heard), None)

    def _made(self, name: str) -> bool:
        """Create the snapshot's table `name` (as SQLite's error names it) in the copy, with
        the authorizer and `query_only` off meanwhile; False if there is none to create."""
        self._db.set_authorizer(None)
        try:
            return self._copy.make(name)
        finally:
            self._db.set_authorizer(self._hear)

    def denied(self, prepared: Prepared) -> list[Access]:
        """The accesses the role may not make, in the order SQLite asked about them."""
        return [access for access in prepared.accesses if not self.allows(access)]

    def allows(self, access: Access) -> bool:
        view = self.view
        if access.action == "call":
            return access.name in _OPERATOR_FUNCTIONS or view.may_call(access.name or "")
        table = view.schema.table(_quoted(access.table or ""))
        if access.action == "read" and not access.name and table is None:
            return True  # a CTE or subquery read whole
        if table is None or not view.may_see_table(table.name):
            return False
        if access.action in ("insert", "delete"):
            return view.may_write_table(table.name)
        if access.action == "update":
            return view.may_write_table(table.name) and self.may_see(table, access.name or "")
        return access.action == "read" and view.may_read and self.may_see(table, access.name)

    def may_see(self, table: Table, column: str | None) -> bool:
        """A column as SQLite names it ("": none, the table is read as a whole; "ROWID": the
        implicit row key). One the snapshot does not have (a virtual table's hidden column)
        is denied."""
        if not column:
            return True
        if table.column(_quoted(column), self.view.schema.rules) is not None:
            return self.view.may_see_column(table.name, column)
        return column == "ROWID" and may_read_row_key(self.view, table)

    def row_key(self, access: Access) -> Access:
        """The access with SQLite's "ROWID" (how an UPDATE names the row key even where it is
        an alias) named as the checker names it: the INTEGER PRIMARY KEY, else "rowid"."""
        table = self.view.schema.table(_quoted(access.table or ""))
        if access.name != "ROWID" or table is None:
            return access
        if table.column(_quoted(access.name), self.view.schema.rules) is not None:
            return access  # a real column of that name
        return replace(access, name=table.rowid_column or "rowid")

    def violations(self, sql: str, reported: Sequence[Violation]) -> list[Violation]:
        """What SQLite's verdict adds to the checker's `reported` violations of `sql`: that it
        cannot prepare it, or each denied access no reported violation covers."""
        return self.verdict(sql, self.prepare(sql), reported)

    def verdict(
        self, sql: str, prepared: Prepared, reported: Sequence[Violation]
    ) -> list[Violation]:
        """`violations`, for a statement already prepared."""
        data = sql.encode("utf-8", "surrogatepass")  # a lone surrogate: SQLite refuses it
        if any(v.kind in _UNDISCLOSED for v in reported):
            return []
        if prepared.error is not None:
            message = f"SQLite cannot prepare the statement: {prepared.error}"
            return [Violation("database_rejected", message, 0, len(data))]
        denied = dict.fromkeys(self.row_key(access) for access in self.denied(prepared))
        return [
            self.missed(access, len(data))
            for access in denied
            if not _covered(access, reported, data)
        ]

    def missed(self, access: Access, end: int) -> Violation:
        """A denied access that the checker did not report."""
        role = f'role "{self.view.role.name}"' if self.view.role else "this role"
        tail = (
            "and the semantic checker did not report it: that is a gridrail bug, please report "
            "it; the statement is refused"
        )
        if access.action == "call":
            message = f'SQLite calls function "{access.name}", which {role} may not call, {tail}'
            return Violation("database_denied", message, 0, end)
        column = access.name if access.action in ("read", "update") else None
        table, shown = self.view.disclosed(access.table, column)
        what = f" {self.view.naming(access.table, column)}" if access.table else ""
        if access.action == "read":
            message = f"SQLite reads{what}, which {role} may not read, {tail}"
        else:
            message = f"SQLite would {access.action}{what}, which {role} may not do, {tail}"
        return Violation("database_denied", message, 0, end, table, shown)

    def _hear(
        self, action: int, first: str | None, second: str | None, _db: str | None, inner: str | None
    ) -> int:
        """The authorizer: record, never refuse (the statement is only compiled, and refusing
        would hide the rest of what it reads)."""
        if action == sqlite3.SQLITE_READ:
            # the recursive CTE reading itself is a read of the CTE, named as its context
            if not (second == "" and inner and ascii_lower(first or "") == ascii_lower(inner)):
                self._heard.append(Access("read", first, second))
        elif action == sqlite3.SQLITE_FUNCTION:
            self._heard.append(Access("call", None, (second or "").lower()))
        elif action in _WRITES:
            self._heard.append(Access(_WRITES[action], first, second))
        elif action not in _NAMES_NOTHING:
            self._heard.append(Access(f"action {action}", first, second))
        return sqlite3.SQLITE_OK


def _covered(access: Access, reported: Sequence[Violation], data: bytes) -> bool:
    """Did the checker report this access: a violation naming its table (and its column, unless
    either names none), or for a call a violation over the function's name?"""
    if access.action == "call":
        return any(
            v.kind == "function_not_allowed"
            and data[v.start : v.end].decode("utf-8", "replace").rstrip("( \t\r\n").lower()
            == access.name
            for v in reported
        )
    key = ascii_lower
    return any(
        v.table is not None
        and key(v.table) == key(access.table or "")
        and (not v.column or not access.name or key(v.column) == key(access.name))
        for v in reported
    )


class _CatalogCopy:
    """A schema-only in-memory copy of a snapshot's catalog, read-only (`query_only`) but while
    `make` creates a table. A table is created the first time a statement names it: SQLite
    reads its catalog again after each CREATE TABLE (a scan of `sqlite_master`), so a copy of
    10,000 tables made up front took 6 s, and a statement names a few. What a statement binds
    to depends only on the tables it names, so the copy answers as a whole one would."""

    def __init__(self, schema: Schema):
        self.schema = schema
        self.db = sqlite3.connect(
            ":memory:", check_same_thread=False, cached_statements=0, isolation_level=None
        )
        self._ddl: dict[str, str] = {}  # a table's CREATE TABLE statement by its key
        for statement in schema.ddl:
            if not _CREATE_TABLE.match(statement):
                continue
            name = _created_name(statement)
            if name is not None:
                self._ddl.setdefault(ascii_lower(name), statement)
                continue
            # a form `_created_name` does not read: made now; failing: a module this SQLite
            # lacks (the table then gets a stand-in, when named)
            with contextlib.suppress(sqlite3.Error):
                self.db.execute(statement)
        self._made = self._tables()
        # a name SQLite resolves without its table, to an eponymous virtual table (json_each,
        # pragma_table_info, ...), never misses: such a table is made now, as a whole copy has it
        modules = self._modules()
        for table in schema.tables:
            key = ascii_lower(table.name)
            if key in modules or key.startswith("pragma_"):
                self.make(table.name)
        self.db.execute("PRAGMA query_only = ON")

    def make(self, name: str) -> bool:
        """Create the snapshot's table `name` (`schema.name`, or the name alone, as SQLite's
        error names it) if it is not made yet: its CREATE TABLE statement, else — no statement,
        or one this SQLite cannot run (a virtual table of a module it lacks) — a stand-in.
        False: no such table in the snapshot, or made already."""
        table = self.schema.table(_quoted(name))
        if table is None and "." in name:
            table = self.schema.table(_quoted(name.split(".", 1)[1]))
        if table is None or ascii_lower(table.name) in self._made:
            return False
        self.db.execute("PRAGMA query_only = OFF")
        try:
            statement = self._ddl.get(ascii_lower(table.name))
            # failing: a module this SQLite lacks; a name SQLite reserves (no stand-in either:
            # SQLite then refuses every statement that reads it)
            with contextlib.suppress(sqlite3.Error):
                if statement is not None:
                    self.db.execute(statement)
            with contextlib.suppress(sqlite3.Error):
                if ascii_lower(table.name) not in self._tables() and table.columns:
                    self.db.execute(_stand_in(table))
        finally:
            self.db.execute("PRAGMA query_only = ON")
        self._made |= self._tables() | {ascii_lower(table.name)}
        return True

    def _modules(self) -> frozenset[str]:
        """The virtual table modules of this SQLite (a build without `pragma_module_list`:
        those its eponymous tables are known by)."""
        try:
            return frozenset(ascii_lower(n) for (n,) in self.db.execute(_MODULES))
        except sqlite3.Error:
            return _EPONYMOUS

    def _tables(self) -> set[str]:
        return {ascii_lower(name) for (name,) in self.db.execute("SELECT name FROM sqlite_master")}


# What SQLite stores of a CREATE TABLE: "CREATE [VIRTUAL ]TABLE " then the text from the name
# on (`IF NOT EXISTS`, TEMP and what came between them left out): a bare, "double", `back`,
# [bracketed] or 'single' quoted name, perhaps after a schema name and a dot.
_NAME = (
    r"""(?:"(?:[^"]|"")*"|`(?:[^`]|``)*`|\[[^\]]*\]|'(?:[^']|'')*'"""
    r"|[A-Za-z0-9_$\x80-\U0010ffff]+)"
)
_CREATED = re.compile(rf"CREATE (?:VIRTUAL )?TABLE (?:{_NAME}\s*\.\s*)?({_NAME})", re.IGNORECASE)
_MISSING_TABLE = re.compile(r"no such table: (.+)\Z", re.DOTALL)
_MODULES = "SELECT name FROM pragma_module_list"
_EPONYMOUS = frozenset({"json_each", "json_tree", "dbstat", "sqlite_dbpage", "sqlite_stmt"})


def _created_name(statement: str) -> str | None:
    """The table a stored CREATE TABLE statement creates, unquoted (None: not that form)."""
    found = _CREATED.match(statement)
    if found is None:
        return None
    name = found.group(1)
    if name[0] in "\"`'":
        return name[1:-1].replace(name[0] * 2, name[0])
    return name[1:-1] if name[0] == "[" else name


def _stand_in(table: Table) -> str:
    """CREATE TABLE with the snapshot's columns and row key: an alias where it names one,
    WITHOUT ROWID (keyed on its first column) where it has none, else the implicit key."""
    columns = [
        _quoted(c.name) + (" INTEGER PRIMARY KEY" if c.name == table.rowid_column else "")
        for c in table.columns
    ]
    if table.has_rowid is False:
        columns.append(f"PRIMARY KEY ({_quoted(table.columns[0].name)})")
    without = " WITHOUT ROWID" if table.has_rowid is False else ""
    return f"CREATE TABLE {_quoted(table.name)} ({', '.join(columns)}){without}"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'

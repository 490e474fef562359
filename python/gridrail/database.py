"""The database a question is about: recognised from `--db`, snapshotted for the lexicons and
used to run the answer (`gridrail ask --execute`).

`--db` is a SQLite file (any name), a DuckDB file (`.duckdb`, `.ddb`) or a PostgreSQL DSN
(`postgresql://…` or libpq `key=value` words). Statements run read-only unless the role may
write, so even a statement the checker missed cannot change data it was not allowed to; on
SQLite and DuckDB they reach no file but the database (none is attached, read or written).
Every statement runs under a time limit, a row limit and a result limit (`DEFAULT_TIMEOUT_S`,
`DEFAULT_MAX_ROWS`, `MAX_RESULT_BYTES`): past any of them it is stopped, nothing it did is kept
(its transaction is rolled back), and an `ExecutionLimitError` says which limit it hit. The
result limit counts what the fetched rows hold in Python (`sys.getsizeof` of each value and of
all that a list, tuple or dict holds); rows are fetched one at a time and counted as they
arrive, so at most one row past either limit is fetched. A row arrives whole, so how large one
row may grow is the database's to bound: on SQLite no value may be longer than
`MAX_VALUE_BYTES`; on DuckDB what its aggregates, sorts and joins hold (`string_agg`, `list`) is
bounded by `DUCKDB_MEMORY_BYTES`, but not what a scalar function makes; on PostgreSQL nothing but
its 1 GB field limit bounds a value (below). Running out of memory (DuckDB's limit, or Python's)
is an `ExecutionLimitError` too.

A statement judged against a schema snapshot (`execute(judged_on=...)`: what `gridrail ask`
runs) runs on SQLite only if the catalog is still that one — its schema version, read in the
statement's own transaction — else `SchemaChangedError` (a column added since the role's
language was compiled would reach `SELECT *` under an allow-list that never named it); DuckDB
and PostgreSQL keep no such version, so there a guide is as fresh as its snapshot (`gridrail
serve` reads the catalog again at most `SCHEMA_REFRESH_S` apart).

How each database enforces them:
  SQLite      a timer thread interrupts the statement at the deadline (SQLite stops between
              two of its instructions, and the value limit keeps each instruction short:
              `hex(zeroblob(…))` may not take seconds); one transaction
              (inside which SQLite refuses VACUUM, whose INTO form writes a copy of the
              database to any path); `mode=ro` plus `PRAGMA query_only` for read-only roles;
              an authorizer refuses ATTACH; `SQLITE_LIMIT_LENGTH` for the value limit
  PostgreSQL  one transaction (`BEGIN READ ONLY` for read-only roles) with
              `SET LOCAL statement_timeout`, as the database role the statement was judged as
              when there is one (`acting_as`: `SET LOCAL ROLE`, so the server's own privilege
              check refuses at execution what the role may not read, even inside a function
              that runs SQL of its own); rows are streamed, the rest cancelled. No setting
              makes the server refuse a large value, so one value up to PostgreSQL's field
              limit (1 GB) still arrives whole before the result limit counts it, and only
              that limit and the time limit bound the server's memory for it
  DuckDB      a timer thread calls `interrupt()` at the deadline; a `read_only` connection
              for read-only roles; no external access (files, extensions) for any role;
              `memory_limit` (what cannot spill to disk past it, e.g. `string_agg`, is
              refused). That limit covers only DuckDB's buffer manager: a scalar function's
              values (`repeat`, `lpad`, `range`) are built outside it, a vector of 2,048 rows
              at a time that neither the limit nor the interrupt stops half built, so such a
              statement can still take gigabytes before its first row is counted (`SELECT
              repeat('x', 2000000) FROM range(10000)`: 9.9 GB when it was stopped, duckdb 2.0.1)
"""

from __future__ import annotations

import math
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from gridrail.errors import GridrailError, UsageError
from gridrail.policy.schema import Schema

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_ROWS = 10_000
MAX_VALUE_BYTES = 16 * 1024 * 1024  # SQLite: the longest string or blob a statement may make
MAX_RESULT_BYTES = 64 * 1024 * 1024  # every database: what the fetched rows may hold in memory
DUCKDB_MEMORY_BYTES = 256 * 1024 * 1024  # DuckDB's memory_limit for one statement
_DSN_WORDS = re.compile(r"\s*[A-Za-z_]+\s*=")  # libpq's `key=value` connection string


class DatabaseError(GridrailError):
    """A database cannot be opened, or a statement failed on it (the message has the
    database's own words)."""


class SchemaChangedError(DatabaseError):
    """The catalog is no longer the one a statement was judged against: it was not run."""


class ExecutionLimitError(DatabaseError):
    """A statement was stopped at an execution limit; `limit` is "time", "rows", "result" (the
    fetched rows past `MAX_RESULT_BYTES`), "value" (a SQLite string or blob past
    `MAX_VALUE_BYTES`) or "memory" (DuckDB's working memory past `DUCKDB_MEMORY_BYTES`, or
    Python's memory exhausted). Nothing it did was kept (its transaction was rolled back)."""

    def __init__(self, limit: str, message: str):
        self.limit = limit
        super().__init__(message)


@dataclass(frozen=True)
class QueryResult:
    columns: tuple[str, ...]  # empty for a statement that returns no rows
    rows: tuple[tuple, ...]
    changed: int  # rows changed by a write (-1 when the database does not say)


@dataclass(frozen=True)
class Limits:
    """How long one statement may run and how many rows it may return (how much memory they
    may take is `MAX_RESULT_BYTES`, the same for every statement)."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    max_rows: int = DEFAULT_MAX_ROWS

    def __post_init__(self) -> None:
        # no "unlimited": a statement that may run forever is what the limits exist to stop
        number = isinstance(self.timeout_s, (int, float)) and not isinstance(self.timeout_s, bool)
        if not (number and 0 < self.timeout_s < math.inf):
            raise UsageError(f"timeout_s must be a positive number of seconds: {self.timeout_s!r}")
        count = isinstance(self.max_rows, int) and not isinstance(self.max_rows, bool)
        if not (count and self.max_rows >= 1):
            raise UsageError(f"max_rows must be a positive integer: {self.max_rows!r}")

    def collect(self, rows: Iterable[tuple]) -> list[tuple]:
        """The rows, fetched from `rows` one at a time: the row-limit error at the first row
        past `max_rows`, the result-limit error at the first that takes them past
        `MAX_RESULT_BYTES` (so neither a long nor a large result is fetched whole)."""
        kept: list[tuple] = []
        size = 0
        for row in rows:
            if len(kept) == self.max_rows:
                raise ExecutionLimitError(
                    "rows",
                    f"the statement returned more than {self.max_rows} rows (the row limit) and "
                    "was stopped; nothing it did was kept: add a LIMIT or narrow it, or raise the "
                    "limit (--max-rows N, max_rows=)",
                )
            size += _bytes_of(row)
            if size > MAX_RESULT_BYTES:
                raise ExecutionLimitError(
                    "result",
                    f"the statement's rows took more than {MAX_RESULT_BYTES:,} bytes (the result "
                    "limit) and it was stopped; nothing it did was kept: select fewer or shorter "
                    "values (fewer columns, a LIMIT, substr() of long text)",
                )
            kept.append(row)
        return kept

    def time_error(self) -> ExecutionLimitError:
        return ExecutionLimitError(
            "time",
            f"the statement ran longer than {self.timeout_s:g} s (the time limit) and was "
            "stopped; nothing it did was kept: narrow it, or raise the limit "
            "(--timeout SECONDS, timeout_s=)",
        )


def is_postgres_dsn(ref: str) -> bool:
    """Whether `ref` names a PostgreSQL database (a URI, or libpq's `key=value` words), not a
    file: a path such as `runs/a=b.sqlite`, or any that exists, is a file."""
    if ref.startswith(("postgresql://", "postgres://")):
        return True
    return _DSN_WORDS.match(ref) is not None and not _is(Path.exists, ref)


def _is(test: Callable[[Path], bool], ref: str) -> bool:
    """`test` of the path `ref`, False where the system cannot even look it up (a name too
    long, a NUL): a batch line's "db" must fail as that line, not end the batch."""
    try:
        return test(Path(ref))
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class Database:
    kind: str  # "sqlite" | "duckdb" | "postgres"
    location: str  # a file path or a DSN
    role: str | None = None  # PostgreSQL: the database role statements run as (`acting_as`)

    @classmethod
    def open(cls, ref: str) -> Database:
        if is_postgres_dsn(ref):
            return cls("postgres", ref)
        path = Path(ref)
        if not _is(Path.is_file, ref):
            raise DatabaseError(f"no such database file: {ref}")
        kind = "duckdb" if path.suffix.lower() in (".duckdb", ".ddb") else "sqlite"
        return cls(kind, str(path))

    def acting_as(self, role: str) -> Database:
        """This database whose statements run as the PostgreSQL role `role` (`SET LOCAL ROLE`
        in each statement's transaction; the connecting user must be a member of it): the
        judging role of `check.postgres_judge`, whose privileges are exactly the view's."""
        if self.kind != "postgres":
            raise UsageError(f"only PostgreSQL runs statements as a role, not {self.kind}")
        return replace(self, role=role)

    def schema(self) -> Schema:
        if self.kind == "postgres":
            return Schema.from_postgres(self.location)
        if self.kind == "duckdb":
            return Schema.from_duckdb(self.location)
        return Schema.from_sqlite(self.location)

    def execute(
        self,
        sql: str,
        *,
        read_only: bool = True,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_rows: int = DEFAULT_MAX_ROWS,
        judged_on: Schema | None = None,
    ) -> QueryResult:
        """Run one statement within the limits (ExecutionLimitError past any; UsageError for a
        limit that is not positive and finite). `judged_on`: the snapshot the statement was
        checked against; on SQLite it runs only if the catalog is still that one (its schema
        version, read in the statement's own transaction), else a `SchemaChangedError` — a
        table's new column would reach `SELECT *` under an allow-list that never named it."""
        limits = Limits(timeout_s, max_rows)
        try:
            if self.kind == "sqlite":
                version = judged_on.version if judged_on is not None else None
                return _sqlite(self.location, sql, read_only, limits, version)
            if self.kind == "postgres":
                return _postgres(self.location, sql, read_only, limits, self.role)
            return _duckdb(self.location, sql, read_only, limits)
        except MemoryError:  # the connection is closed (rolled back) on the way out
            raise ExecutionLimitError(
                "memory",
                "the statement's result did not fit in memory and was stopped; nothing it did "
                "was kept: narrow it, or lower the row limit (--max-rows N, max_rows=)",
            ) from None


def _no_attach(action: int, *_names: object) -> int:
    """SQLite authorizer: no statement opens (or creates) another database file."""
    return sqlite3.SQLITE_DENY if action == sqlite3.SQLITE_ATTACH else sqlite3.SQLITE_OK


def _sqlite(
    path: str, sql: str, read_only: bool, limits: Limits, version: int | None = None
) -> QueryResult:
    uri = f"{Path(path).resolve().as_uri()}?mode={'ro' if read_only else 'rw'}"
    stopped = threading.Event()
    try:
        # isolation_level=None: our own BEGIN, also around statements Python would autocommit
        # (e.g. `WITH … DELETE … RETURNING`), so that a stopped statement is rolled back
        connection = sqlite3.connect(uri, uri=True, timeout=limits.timeout_s, isolation_level=None)

        def stop() -> None:
            stopped.set()
            connection.interrupt()

        with closing(connection) as db, _interrupt_after(limits.timeout_s, stop):
            if read_only:
                db.execute("PRAGMA query_only = 1")  # beside mode=ro: no write through any path
            db.set_authorizer(_no_attach)
            db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
            db.execute("BEGIN")
            if version is not None:
                (now,) = db.execute("PRAGMA schema_version").fetchone()
                if now != version:
                    raise SchemaChangedError(
                        f"{path}: the database's schema changed after the statement was judged "
                        "against it (a table, column or view was added, altered or dropped); it "
                        "was not run: compile the role's language again and ask again"
                    )
            cursor = db.execute(sql)
            rows = limits.collect(cursor) if cursor.description else []
            result = _result(cursor.description, rows, cursor.rowcount)
            cursor.close()
            db.execute("COMMIT")  # only now: closing without it rolls back
            return result
    except sqlite3.Error as exc:
        if stopped.is_set():
            raise limits.time_error() from None
        if exc.sqlite_errorcode == sqlite3.SQLITE_TOOBIG:
            raise ExecutionLimitError(
                "value",
                f"the statement made or read a value longer than {MAX_VALUE_BYTES:,} bytes (the "
                "value limit) and was stopped; nothing it did was kept: narrow it",
            ) from None
        raise DatabaseError(f"SQLite: {exc}") from None


@contextmanager
def _interrupt_after(seconds: float, interrupt: Callable[[], None]) -> Iterator[None]:
    """Call `interrupt` from a timer thread if the block is still running after `seconds`."""
    timer = threading.Timer(seconds, interrupt)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()  # never interrupt a connection after the block has closed it


def _duckdb(path: str, sql: str, read_only: bool, limits: Limits) -> QueryResult:
    import duckdb

    try:
        config = {
            "enable_external_access": False,  # no files but this one, no extensions
            "memory_limit": f"{DUCKDB_MEMORY_BYTES}B",  # e.g. `string_agg` may not take gigabytes
        }
        with duckdb.connect(path, read_only=read_only, config=config) as conn:
            with _interrupt_after(limits.timeout_s, conn.interrupt):
                conn.begin()  # closing without the commit rolls back a statement that was stopped
                cursor = conn.execute(sql)  # streamed: each fetchone() converts one row
                rows = limits.collect(iter(cursor.fetchone, None)) if cursor.description else []
                result = _result(cursor.description, rows, -1)  # before COMMIT replaces it
                conn.commit()
            return result
    except duckdb.InterruptException:  # only our timer interrupts this connection
        raise limits.time_error() from None
    except duckdb.OutOfMemoryException:
        raise ExecutionLimitError(
            "memory",
            f"the statement needed more than {DUCKDB_MEMORY_BYTES:,} bytes of DuckDB's memory "
            "(the memory limit) and was stopped; nothing it did was kept: aggregate fewer or "
            "shorter values (string_agg, list), or narrow it",
        ) from None
    except duckdb.Error as exc:
        raise DatabaseError(f"DuckDB: {exc}") from None


def _postgres(
    dsn: str, sql: str, read_only: bool, limits: Limits, role: str | None = None
) -> QueryResult:
    import psycopg

    started = time.monotonic()
    try:
        # one transaction, committed when the block ends and rolled back when it raises
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            conn.read_only = read_only  # BEGIN READ ONLY
            milliseconds = max(1, math.ceil(limits.timeout_s * 1000))
            conn.execute("SELECT set_config('statement_timeout', %s, true)", [str(milliseconds)])
            if role is not None:
                _act_as(conn, role)
            cursor = conn.cursor()
            if not _returns_rows(conn, sql):  # a write without RETURNING: its count
                cursor.execute(sql)
                return _result(None, [], cursor.rowcount)
            # streamed row by row; closing the stream early cancels the rest of the statement
            with closing(cursor.stream(sql)) as stream:
                rows = limits.collect(stream)
            return _result(cursor.description, rows, cursor.rowcount)
    except psycopg.errors.QueryCanceled:
        if time.monotonic() - started >= limits.timeout_s:  # the server's clock started later
            raise limits.time_error() from None
        raise DatabaseError("PostgreSQL: the statement was cancelled") from None
    except psycopg.Error as exc:
        raise DatabaseError(f"PostgreSQL: {str(exc).strip()}") from None


def _act_as(conn, role: str) -> None:
    """The rest of the transaction as `role` (`SET LOCAL ROLE`): what it may not use, the
    server refuses — the statement's own reads and those of SQL it runs (`query_to_xml`)."""
    import psycopg

    try:
        conn.execute(psycopg.sql.SQL("SET LOCAL ROLE {}").format(psycopg.sql.Identifier(role)))
    except psycopg.Error as exc:
        raise DatabaseError(
            f"PostgreSQL: cannot run the statement as the role {role!r} it was judged as "
            f"({str(exc).strip()}); the connecting user must be a member of it. It was not run"
        ) from None


def _returns_rows(conn, sql: str) -> bool:
    """Whether the statement returns rows, as the server describes it before it runs (psycopg's
    row stream refuses one that returns none, a write without RETURNING)."""
    from psycopg import errors, pq

    pgconn = conn.pgconn
    for result in (pgconn.prepare(b"", sql.encode(conn.info.encoding), None),
                   pgconn.describe_prepared(b"")):  # fmt: skip
        if result.status != pq.ExecStatus.COMMAND_OK:
            raise errors.error_from_result(result, encoding=conn.info.encoding)
    return result.nfields > 0


def _bytes_of(value: object) -> int:
    """What a fetched value holds in memory, toward the result limit: `sys.getsizeof` of it
    and of everything a list, tuple or dict holds (a row, an array, a JSON document, a DuckDB
    struct); a loop, not recursion: a JSON document may nest about as deep as Python recurses."""
    size, pending = 0, [value]
    while pending:
        item = pending.pop()
        size += sys.getsizeof(item)
        if isinstance(item, dict):
            pending += item.keys()
            pending += item.values()
        elif isinstance(item, (list, tuple)):
            pending += item
    return size


def _result(description, rows: Sequence[tuple], changed: int) -> QueryResult:
    columns = tuple(d[0] for d in description) if description else ()
    return QueryResult(columns, tuple(tuple(r) for r in rows), changed if not columns else -1)


def format_table(result: QueryResult, max_rows: int = 50, max_width: int = 80) -> str:
    """The rows as an aligned text table (at most `max_rows`, then a count of the rest); a
    value is shown on one line (line breaks and tabs as `\\n`, `\\t`) and cut to `max_width`
    characters, ending in "…" where it was cut (a generated answer's `group_concat` may be
    megabytes; the rows themselves are not changed)."""
    if not result.columns:
        return f"{result.changed} row(s) changed" if result.changed >= 0 else "done"

    def shown_as(value: object) -> str:
        text = "NULL" if value is None else str(value)
        text = text.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
        return text if len(text) <= max_width else text[: max_width - 1] + "…"

    shown = [tuple(map(shown_as, row)) for row in result.rows[:max_rows]]
    headers = tuple(map(shown_as, result.columns))
    widths = [max([len(c), *(len(r[i]) for r in shown)]) for i, c in enumerate(headers)]
    line = "  ".join

    def cells(values: Sequence[str]) -> str:
        return line(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()

    out = [cells(headers), line("-" * w for w in widths)]
    out += [cells(r) for r in shown]
    rest = len(result.rows) - len(shown)
    out.append(
        f"({len(result.rows)} row{'s' if len(result.rows) != 1 else ''}"
        + (f", {rest} not shown)" if rest else ")")
    )
    return "\n".join(out)

"""The audit store: every answer of `/v1/ask` with its audit logs (all attempts and candidates),
one row per request, in a SQLite file (WAL) or, when the location is a PostgreSQL DSN, in a
PostgreSQL database that several replicas of `gridrail serve` share. Each answer is written in
one transaction with the artifacts its logs name, so a crash leaves a request either whole or
absent, and a stored log always replays. Reading a record back verifies each log's hash chain
and the answer's digest, which binds its fields (who asked, as which role, what, the SQL) to
its logs.

The artifacts (grammar, vocabulary, lexicons, names) are archived once, content-addressed, in
the store's `artifacts` table: the rows the archive directory of `gridrail.archive` holds as
files. `export` writes a stored answer's logs and their artifacts to a directory, where
`gridrail audit replay` reads them; `replay` does that in a temporary one.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gridrail.archive import artifact_texts, write_artifact
from gridrail.ask import Answer
from gridrail.audit import AuditError, AuditLog, replay, verify
from gridrail.canonical import fingerprint_of
from gridrail.database import is_postgres_dsn
from gridrail.errors import GridrailError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from gridrail.guide import Guide

TABLES = (
    """CREATE TABLE IF NOT EXISTS answers (
    id TEXT PRIMARY KEY,
    created TEXT NOT NULL,
    principal TEXT NOT NULL,
    role TEXT NOT NULL,
    question TEXT NOT NULL,
    sql TEXT NOT NULL,
    ran INTEGER NOT NULL,
    logs TEXT NOT NULL,  -- JSON: per attempt, its log's lines (records, then the seal)
    digest TEXT NOT NULL DEFAULT ''  -- `answer_digest`: binds the other fields to the logs
)""",
    """CREATE TABLE IF NOT EXISTS artifacts (
    name TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    content TEXT NOT NULL,
    PRIMARY KEY (name, fingerprint)
)""",
    # the per-key request limit that replicas sharing the store share: a token bucket
    """CREATE TABLE IF NOT EXISTS rate_limits (
    principal TEXT PRIMARY KEY,
    tokens DOUBLE PRECISION NOT NULL,
    updated DOUBLE PRECISION NOT NULL  -- seconds since the epoch
)""",
)
COLUMNS = ("id", "created", "principal", "role", "question", "sql", "ran", "logs", "digest")
# a store written before answers had digests gains the column (its rows then fail to verify)
ADD_DIGEST = "ALTER TABLE answers ADD COLUMN digest TEXT NOT NULL DEFAULT ''"


class AuditStoreError(GridrailError):
    """The audit store cannot be opened or written (no such file, a server that refuses)."""


class AuditStore:
    """Answers and their logs at `location`: a SQLite file (created if absent, unless `create`
    is false) or a PostgreSQL DSN (`postgresql://…` or `key=value …`; its tables are created
    if absent)."""

    def __init__(self, location: str | Path, create: bool = True):
        self.location = str(location)
        self._lock = threading.Lock()  # one connection, one statement at a time
        self._archived: set[tuple[str, str]] = set()  # artifacts known to be stored
        self._db: _Sqlite | _Postgres
        if is_postgres_dsn(self.location):
            self._db = _Postgres(self.location)
        else:
            if not create and not Path(location).is_file():
                raise AuditStoreError(f"{location}: no audit store there")
            self._db = _Sqlite(self.location)

    @property
    def kind(self) -> str:
        return self._db.kind

    @property
    def label(self) -> str:
        """The store's name for messages: the file, or the server and database without the
        DSN's password."""
        if isinstance(self._db, _Postgres):
            return self._db.label
        return self.location

    def put(self, principal: str, role: str, answer: Answer, guide: Guide) -> str:
        """Store `answer` (its question, chosen SQL, whether it ran, every attempt's log) with
        `guide`'s artifacts not stored yet, in one transaction; its id."""
        audit_id = uuid.uuid4().hex
        logs = [a.generation.audit.lines() for a in answer.attempts if a.generation.audit]
        fields = (
            audit_id,
            datetime.now(UTC).isoformat(timespec="milliseconds"),
            principal,
            role,
            answer.question,
            answer.sql,
            int(answer.result is not None),
        )
        row = (*fields, json.dumps(logs), answer_digest(fields, logs))
        fingerprints = {n: fp for n, fp in guide.artifacts().items() if fp}
        with self._lock:
            new = {n: fp for n, fp in fingerprints.items() if (n, fp) not in self._archived}
            texts = artifact_texts(guide, new) if new else {}
            with self._db.transaction() as run:
                for name, text in texts.items():
                    run(f"INSERT INTO artifacts VALUES ({self._params(3)}) ON CONFLICT DO NOTHING",
                        (name, new[name], text))  # fmt: skip
                run(f"INSERT INTO answers VALUES ({self._params(len(COLUMNS))})", row)
            self._archived.update((n, fp) for n, fp in new.items())
        return audit_id

    def take_request(
        self,
        key: str,
        per_minute: int,
        now: float,
        bucket: Callable[[tuple[float, float] | None, float, int], tuple[float, float]],
    ) -> float:
        """One request of `key` against the bucket every user of the store shares: `bucket`
        (found, now, per_minute) -> (tokens left, wait) applied to the stored row with the row
        locked, in one transaction; the wait."""
        param = self._params(1)
        with self._lock, self._db.transaction() as run:
            run(
                f"INSERT INTO rate_limits VALUES ({self._params(3)}) ON CONFLICT DO NOTHING",
                (key, float(per_minute), now),
            )
            found = run(
                f"SELECT tokens, updated FROM rate_limits WHERE principal = {param}"
                + self._db.lock_row,
                (key,),
            ).fetchone()
            tokens, wait = bucket(found, now, per_minute)
            run(
                f"UPDATE rate_limits SET tokens = {param}, updated = {param} "
                f"WHERE principal = {param}",
                (tokens, now, key),
            )
        return wait

    def get(self, audit_id: str, public_key: Ed25519PublicKey | None = None) -> dict | None:
        """The stored answer, each log's lines and whether it verifies (`verify_all`)."""
        rows = self._query(
            f"SELECT {', '.join(COLUMNS)} FROM answers WHERE id = {self._params(1)}",
            (audit_id,),
        )
        if not rows:
            return None
        why = _row_failure(rows[0], public_key)
        record = dict(zip(COLUMNS, rows[0], strict=True))
        record["ran"] = bool(record["ran"])
        record["logs"] = json.loads(record["logs"])
        record["verified"] = why is None
        if why is not None:
            record["problem"] = why
        return record

    def verify_all(
        self, public_key: Ed25519PublicKey | None = None
    ) -> tuple[int, list[tuple[str, str]]]:
        """How many stored answers there are, and (id, why) for each that does not verify:
        its logs' chains (and with `public_key`, their seals' signatures by that key), the
        principal and role its seals name (`ask`'s `asked_by`), and its fields bound to its
        logs (`answer_digest`)."""
        rows = self._query(f"SELECT {', '.join(COLUMNS)} FROM answers ORDER BY created, id")
        bad = [(row[0], why) for row in rows if (why := _row_failure(row, public_key)) is not None]
        return len(rows), bad

    def export(self, audit_id: str, directory: str | Path) -> list[Path]:
        """Write the stored answer's logs (`attempt-N.jsonl`) and the artifacts their seals
        name (the archive layout) into `directory`; the logs' paths."""
        record = self.get(audit_id)
        if record is None:
            raise AuditStoreError(f"{self.location}: no stored answer {audit_id!r}")
        Path(directory).mkdir(parents=True, exist_ok=True)
        paths, wanted = [], set()
        for n, lines in enumerate(record["logs"], 1):
            path = Path(directory) / f"attempt-{n}.jsonl"
            path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            paths.append(path)
            seal = AuditLog.parse(lines).seal_record or {}
            wanted.update((k, v) for k, v in (seal.get("artifacts") or {}).items() if v)
        for name, fingerprint in sorted(wanted):
            rows = self._query(
                f"SELECT content FROM artifacts WHERE name = {self._params(1)} "
                f"AND fingerprint = {self._params(1)}",
                (name, fingerprint),
            )
            if rows:  # one not stored is reported by replay, naming the file it lacks
                write_artifact(directory, name, fingerprint, rows[0][0])
        return paths

    def replay(self, audit_id: str) -> list[int]:
        """Replay each log of the stored answer against the artifacts stored with it (see
        `gridrail.audit.replay`); the steps replayed per log."""
        with tempfile.TemporaryDirectory(prefix="gridrail-replay-") as directory:
            return [
                replay(AuditLog.parse(p.read_text(encoding="utf-8").splitlines()), directory)
                for p in self.export(audit_id, directory)
            ]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _params(self, n: int) -> str:
        """`n` parameter placeholders in the store's driver's style."""
        return ", ".join([self._db.placeholder] * n)

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[tuple]:
        with self._lock:
            return self._db.query(sql, params)


def answer_digest(fields: Sequence[object], logs: Sequence[Sequence[str]]) -> str:
    """BLAKE2b-128 of a stored answer's fields (id, created, principal, role, question, SQL,
    whether it ran) and each of its logs' seal hash, which commits to the log's every record:
    an answer's fields cannot be edited, nor its logs swapped, without recomputing it. (Like an
    unsigned log's chain it is unkeyed: it shows a row is self-consistent, not who wrote it.)"""
    seals = [json.loads(lines[-1]).get("hash") if lines else None for lines in logs]
    return fingerprint_of([list(fields), seals], prefix=b"gridrail-answer-v1:")


def _row_failure(row: Sequence[Any], public_key: Ed25519PublicKey | None) -> str | None:
    """Why a stored answer (a row of COLUMNS) does not verify, or None."""
    *fields, logs_text, digest = row
    principal, role = fields[2], fields[3]
    logs = json.loads(logs_text)
    if not logs:
        return "no audit log: every answer is stored with its generations' logs"
    for n, lines in enumerate(logs, 1):
        why = _failure(lines, public_key)
        if why is not None:
            return f"log {n}: {why}"
    if digest != answer_digest(fields, logs):
        return (
            "its fields (principal, role, question, SQL, time) or its logs are not those it "
            "was stored with: the answer's digest does not match"
            if digest
            else "stored without a digest (an older gridrail): its fields are not bound to its logs"
        )
    for n, lines in enumerate(logs, 1):  # (a digest recomputed after an edit: the seals say)
        asked = (json.loads(lines[-1]).get("mode") or {}).get("asked_by")
        if asked is not None and asked != {"principal": principal, "role": role}:
            return (
                f"log {n}: its seal says it was asked by {asked.get('principal')!r} as "
                f"{asked.get('role')!r}, the answer by {principal!r} as {role!r}"
            )
    return None


def _failure(lines: list[str], public_key: Ed25519PublicKey | None = None) -> str | None:
    """Why the log of `lines` does not verify (with `public_key`: is not signed by it), or
    None."""
    try:
        verify(AuditLog.parse(lines), public_key)
    except AuditError as exc:
        return str(exc)
    return None


class _Sqlite:
    """The store in a SQLite file: WAL, and a full sync at each commit, so a stored answer
    survives a crash of the machine as well as of the process."""

    kind = "sqlite"
    lock_row = ""  # a write transaction (BEGIN IMMEDIATE) locks the whole file
    placeholder = "?"

    def __init__(self, path: str):
        try:
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = FULL")
            for table in TABLES:
                self._db.execute(table)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(answers)")}
            if "digest" not in columns:
                self._db.execute(ADD_DIGEST)
        except sqlite3.Error as exc:
            raise AuditStoreError(f"{path}: the audit store cannot be opened: {exc}") from None

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db.execute
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.OperationalError as exc:  # locked past the timeout, disk full, ...
            raise AuditStoreError(f"the audit store cannot be written: {exc}") from None

    def query(self, sql: str, params: Sequence[object]) -> list[tuple]:
        try:
            return self._db.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            raise AuditStoreError(f"the audit store cannot be read: {exc}") from None

    def close(self) -> None:
        self._db.close()


class _Postgres:
    """The store in a PostgreSQL database, shared by replicas. One connection, reopened once
    if the server dropped it (a restart) before a statement."""

    kind = "postgres"
    lock_row = " FOR UPDATE"
    placeholder = "%s"

    def __init__(self, dsn: str):
        import psycopg

        self._psycopg = psycopg
        self._dsn = dsn
        self._db = self._connect()
        info = self._db.info  # the store's name in messages: no password
        self.label = f"postgresql://{info.user}@{info.host}:{info.port}/{info.dbname}"
        with self.transaction() as run:
            # replicas starting together: one creates the tables, the others wait for it
            run("SELECT pg_advisory_xact_lock(hashtext('gridrail audit store'))")
            for table in TABLES:
                run(table)
            run(ADD_DIGEST.replace("ADD COLUMN", "ADD COLUMN IF NOT EXISTS"))

    def _connect(self):
        try:
            return self._psycopg.connect(self._dsn, connect_timeout=10)
        except self._psycopg.Error as exc:
            raise AuditStoreError(
                f"the PostgreSQL audit store cannot be reached: {str(exc).strip()}"
            ) from None

    def _live(self):
        if self._db.closed or self._db.broken:
            self._db = self._connect()
        return self._db

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        connection = self._live()
        try:
            with connection.transaction():  # committed when the block ends, else rolled back
                yield connection.execute
        except self._psycopg.OperationalError as exc:  # the server went away mid-way
            raise AuditStoreError(
                f"the PostgreSQL audit store failed: {str(exc).strip()}"
            ) from None

    def query(self, sql: str, params: Sequence[object]) -> list[tuple]:
        with self.transaction() as run:
            return run(sql, params).fetchall()

    def close(self) -> None:
        self._db.close()

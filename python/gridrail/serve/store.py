"""The audit store: every answer of `/v1/ask` with its audit logs (all attempts and candidates),
in a SQLite database, one row per request, written in one transaction (a crash leaves a request
either whole or absent). Reading a record back verifies each log's hash chain. The artifacts a
log replays against (grammar, vocabulary, lexicons) are archived once, content-addressed, in
the directory beside the store (`<store>-archive`), as `gridrail ask --audit` archives them."""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from gridrail.archive import save_guide
from gridrail.ask import Answer
from gridrail.audit import AuditError, AuditLog, verify

if TYPE_CHECKING:
    from gridrail.guide import Guide

SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    id TEXT PRIMARY KEY,
    created TEXT NOT NULL,
    principal TEXT NOT NULL,
    role TEXT NOT NULL,
    question TEXT NOT NULL,
    sql TEXT NOT NULL,
    ran INTEGER NOT NULL,
    logs TEXT NOT NULL  -- JSON: per attempt, its log's lines (records, then the seal)
)
"""


class AuditStore:
    """Answers and their logs in the SQLite file at `path` (created if absent)."""

    def __init__(self, path: str | Path, create: bool = True):
        if not create and not Path(path).is_file():
            raise OSError(f"{path}: no audit store there")
        self.path = str(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = FULL")  # a stored answer survives a crash
        self._db.execute(SCHEMA)

    @property
    def archive(self) -> Path:
        """Where the artifacts of the stored logs are archived."""
        return Path(self.path).with_name(Path(self.path).stem + "-archive")

    def put(self, principal: str, role: str, answer: Answer, guide: Guide) -> str:
        """Store `answer` (its question, chosen SQL, whether it ran, every attempt's log) and
        archive `guide`'s artifacts (once: the archive is content-addressed); its id."""
        save_guide(guide, self.archive)
        audit_id = uuid.uuid4().hex
        logs = [a.generation.audit.lines() for a in answer.attempts if a.generation.audit]
        row = (
            audit_id,
            datetime.now(UTC).isoformat(timespec="milliseconds"),
            principal,
            role,
            answer.question,
            answer.sql,
            int(answer.result is not None),
            json.dumps(logs),
        )
        with self._lock:
            self._db.execute("INSERT INTO answers VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
        return audit_id

    def get(self, audit_id: str) -> dict | None:
        """The stored answer, each log's lines and whether every chain verifies."""
        with self._lock:
            row = self._db.execute(
                "SELECT id, created, principal, role, question, sql, ran, logs FROM answers "
                "WHERE id = ?",
                (audit_id,),
            ).fetchone()
        if row is None:
            return None
        keys = ("id", "created", "principal", "role", "question", "sql", "ran")
        record = dict(zip(keys, row[:7], strict=True))
        record["ran"] = bool(record["ran"])
        record["logs"] = json.loads(row[7])
        record["verified"] = all(_verifies(lines) for lines in record["logs"])
        return record

    def verify_all(self) -> tuple[int, list[tuple[str, str]]]:
        """How many stored answers there are, and (id, why) for each whose logs do not all
        verify."""
        with self._lock:
            rows = self._db.execute("SELECT id, logs FROM answers ORDER BY created").fetchall()
        bad = []
        for audit_id, logs in rows:
            for n, lines in enumerate(json.loads(logs), 1):
                why = _failure(lines)
                if why is not None:
                    bad.append((audit_id, f"log {n}: {why}"))
                    break
        return len(rows), bad

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _verifies(lines: list[str]) -> bool:
    return _failure(lines) is None


def _failure(lines: list[str]) -> str | None:
    """Why the log of `lines` does not verify, or None."""
    try:
        verify(AuditLog.parse(lines))
    except AuditError as exc:
        return str(exc)
    return None

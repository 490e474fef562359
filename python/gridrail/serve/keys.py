"""API keys: who a caller is and which roles of the policy it holds.

A keys file is JSON, `{"format": "gridrail.keys.v1", "keys": [{"name", "roles", "sha256",
"created"}, ...]}`: each key is stored as the SHA-256 of its text, never in clear. Keys are 32
random bytes (`secrets.token_urlsafe`), so a fast hash is enough — there is nothing to guess by
brute force — and a lookup hashes the presented key once and finds it in a dict. `gridrail keys
add NAME --role ROLE` writes a new entry and prints the key once; `revoke` removes a name's.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gridrail.errors import GridrailError

FORMAT = "gridrail.keys.v1"
PREFIX = "grk_"  # what a gridrail key looks like: easy to find in a leaked file
AUDITOR = "audit"  # the permission to read stored audit records, granted like a role


class KeysFileError(GridrailError):
    """The keys file cannot be read or written, or is not a keys file (what is wrong, where)."""


@dataclass(frozen=True)
class Principal:
    """Who a key belongs to and what it may do: the policy roles it may ask as, and whether
    it may read audit records (`AUDITOR` among its grants)."""

    name: str
    roles: tuple[str, ...]
    auditor: bool = False


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


class KeyStore:
    """The keys of one file: digest -> principal. Read again whenever the file changes (its
    modification time or size), so a key added or revoked with `gridrail keys` takes effect
    on the next request, without a restart."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._principals: dict[str, Principal] = {}
        self._refresh()

    @classmethod
    def read(cls, path: str | os.PathLike) -> KeyStore:
        return cls(path)

    def principal(self, key: str | None) -> Principal | None:
        """The principal whose key `key` is, or None (no key, or not one of this file's)."""
        self._refresh()
        if not key:
            return None
        return self._principals.get(key_digest(key))

    def _refresh(self) -> None:
        try:
            info = self.path.stat()
        except OSError as exc:
            raise KeysFileError(
                f"{self.path}: cannot read the keys file ({exc.strerror})"
            ) from None
        stamp = (info.st_mtime_ns, info.st_size)
        with self._lock:
            if stamp == self._stamp:
                return
            principals = {}
            for entry in _entries(self.path):
                grants = tuple(entry["roles"])
                roles = tuple(r for r in grants if r != AUDITOR)
                principals[entry["sha256"]] = Principal(entry["name"], roles, AUDITOR in grants)
            self._principals, self._stamp = principals, stamp


def add_key(path: str | os.PathLike, name: str, grants: Iterable[str]) -> str:
    """Add a key for `name` with `grants` (roles, and `AUDITOR` to read audit records) to the
    keys file at `path` (created if absent) and return the key, which is stored only hashed."""
    grants = list(dict.fromkeys(grants))
    if not name.strip():
        raise KeysFileError("a key needs a name (who or what will use it)")
    if not grants:
        raise KeysFileError(f"key {name!r}: grant at least one role (--role)")
    path = Path(path)
    entries = _entries(path) if path.exists() else []
    key = PREFIX + secrets.token_urlsafe(32)
    entries.append(
        {
            "name": name,
            "roles": grants,
            "sha256": key_digest(key),
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
        }
    )
    _write(path, entries)
    return key


def revoke(path: str | os.PathLike, name: str) -> int:
    """Remove every key of `name` from the file at `path`; how many were removed."""
    path = Path(path)
    entries = _entries(path)
    kept = [e for e in entries if e["name"] != name]
    if len(kept) == len(entries):
        raise KeysFileError(f"{path}: no key named {name!r}")
    _write(path, kept)
    return len(entries) - len(kept)


def _entries(path: Path) -> list[dict]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise KeysFileError(f"{path}: cannot read the keys file ({exc.strerror})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise KeysFileError(f"{path}: not a keys file (not JSON: {exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise KeysFileError(f"{path}: not a keys file (its format is not {FORMAT!r})")
    entries = doc.get("keys")
    if not isinstance(entries, list):
        raise KeysFileError(f'{path}: "keys" must be a list')
    for n, entry in enumerate(entries):
        fine = (
            isinstance(entry, dict)
            and isinstance(entry.get("name"), str)
            and isinstance(entry.get("roles"), list)
            and all(isinstance(r, str) for r in entry["roles"])
            and isinstance(entry.get("sha256"), str)
            and len(entry["sha256"]) == 64
        )
        if not fine:
            raise KeysFileError(
                f"{path}: key {n + 1} needs a name, a list of roles and a 64-hex-digit sha256"
            )
    return entries


def _write(path: Path, entries: list[dict]) -> None:
    """Replace the file atomically, readable by its owner only (it names who may do what)."""
    text = json.dumps({"format": FORMAT, "keys": entries}, indent=2) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise

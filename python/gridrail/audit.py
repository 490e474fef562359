"""The hash-chained audit trail (paper §6.4): what the model was allowed to say at every step.

Each step appends a record (step, configuration hash, mask entry id, token, blocked count,
kind, previous hash); the record's own hash is BLAKE2b-128 over its canonical JSON, and the
first record's previous hash is a genesis constant, so editing, dropping or reordering any
record breaks every hash after it. A seal closes the log with the stop reason, the artifact
fingerprints and the mode flags, chained the same way.

The configuration hash is O(1) per step: the stack's rolling hash (carried in stack nodes, never
a rehash of the stack) mixed with the bounded scan part of the configuration.

A chain alone is unkeyed: whoever edits a log can recompute every hash. A log written with a
signing key (`AuditLog(signing_key=...)`, `gridrail ask --signing-key`) carries an Ed25519
signature of the seal's hash — which commits to every record through the chain — and
`verify(log, public_key)` checks it (`gridrail.signing`; docs/audit.md).

JSONL format (one JSON object per line, keys sorted, no spaces):
  {"type":"record","step":N,"config":HEX,"entry":HEX,"token":ID,"blocked":N,"kind":K,
   ["rung":R,]"prev":HEX,"hash":HEX}
  ...
  {"type":"seal","stop":REASON,"artifacts":{NAME:FINGERPRINT},"mode":{FLAG:VALUE},
   "steps":N,"prev":HEX,"hash":HEX[,"signed_by":KEY_FINGERPRINT,"signature":HEX]}
The seal's hash is over every field but "hash", "signed_by" and "signature".
Kinds: "sampled" (chosen by the model), "forced" (a jump-forward token), "reserve" (written by
the budget trigger), "eos", and "rollback" (token = number of steps undone; entry and config
are those of the configuration returned to).
Rungs (only where a name terminal is in play at the step): "gamma" (Γ allowed only names that
bind) or "open" (the role's lexicon words); replay recomputes them.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gridrail.canonical import canonical_json, fingerprint_of
from gridrail.errors import GridrailError
from gridrail.parse.oracle import Configuration
from gridrail.signing import fingerprint, seal_signature_holds, sign_seal

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

    from gridrail.guide import Guide, Matcher

GENESIS = hashlib.blake2b(b"gridrail-audit-genesis-v1", digest_size=16).hexdigest()
KINDS = frozenset({"sampled", "forced", "reserve", "eos", "rollback"})
UNHASHED_SEAL_FIELDS = frozenset({"hash", "signed_by", "signature"})  # added after hashing


class AuditError(GridrailError):
    """An audit log is malformed, broken (`step` is the first bad record) or used after its
    seal."""

    def __init__(self, message: str, step: int | None = None):
        self.step = step
        super().__init__(message if step is None else f"step {step}: {message}")


class SignatureError(AuditError):
    """A log's seal is not signed, or not by the given public key, or its signature does not
    hold for the chain it closes."""


def configuration_hash(cfg: Configuration, names: bytes = b"") -> str:
    """H(κ): the stack's rolling hash and the scan part (bounded by the pending lexeme); under Γ
    (`names`: the binder's digest of the names read and the pending lexeme), that too."""
    _, scan_state, pending, accept_state, tail = cfg.mask_key  # the scan part a walk reads
    digest = hashlib.blake2b(digest_size=16)
    digest.update(struct.pack("<Qi?i", cfg.stack.hash, scan_state, pending, accept_state))
    digest.update(tail)
    if names:
        digest.update(b"\0gamma\0" + names)
    return digest.hexdigest()


def _chain(body: Mapping[str, object]) -> str:
    return fingerprint_of(body)


@dataclass
class AuditLog:
    """An append-only chain of step records, closed by a seal."""

    records: list[dict] = field(default_factory=list)
    seal_record: dict | None = None
    # the writer's key: `seal` signs with it (never written out, never compared)
    signing_key: Ed25519PrivateKey | None = field(default=None, repr=False, compare=False)

    @property
    def head(self) -> str:
        return self.records[-1]["hash"] if self.records else GENESIS

    @property
    def signed_by(self) -> object:
        """The key fingerprint the seal names as its signer (None: unsigned or not sealed).
        Only `verify(log, public_key)` shows that the signature is that key's."""
        return self.seal_record.get("signed_by") if self.seal_record else None

    def append(
        self,
        config: str,
        entry: str,
        token: int,
        blocked: int,
        kind: str,
        rung: str | None = None,
    ) -> dict:
        if self.seal_record is not None:
            raise AuditError("the log is sealed: start a new one for a new generation")
        if kind not in KINDS:
            raise ValueError(f"unknown audit record kind {kind!r} (kinds: {sorted(KINDS)})")
        body = {
            "type": "record",
            "step": len(self.records),
            "config": config,
            "entry": entry,
            "token": token,
            "blocked": blocked,
            "kind": kind,
            "prev": self.head,
        }
        if rung is not None:  # where a name terminal is in play (see `Guide.rung`)
            body["rung"] = rung
        record = {**body, "hash": _chain(body)}
        self.records.append(record)
        return record

    def seal(
        self, stop: str, artifacts: Mapping[str, str], mode: Mapping[str, object] | None = None
    ) -> dict:
        if self.seal_record is not None:
            raise AuditError("the log is already sealed")
        body = {
            "type": "seal",
            "stop": stop,
            "artifacts": dict(artifacts),
            "mode": dict(mode or {}),
            "steps": len(self.records),
            "prev": self.head,
        }
        self.seal_record = {**body, "hash": _chain(body)}
        if self.signing_key is not None:
            self.seal_record["signed_by"] = fingerprint(self.signing_key.public_key())
            self.seal_record["signature"] = sign_seal(self.signing_key, self.seal_record["hash"])
        return self.seal_record

    def lines(self) -> list[str]:
        rows = [*self.records, *([self.seal_record] if self.seal_record else [])]
        return [canonical_json(r) for r in rows]

    def write(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in self.lines())

    @classmethod
    def read(cls, path: str) -> AuditLog:
        with open(path, encoding="utf-8") as f:
            return cls.parse(f.read().splitlines())

    @classmethod
    def parse(cls, lines: Iterable[str]) -> AuditLog:
        """Rows as written; structure is checked here, the chain by `verify`."""
        log = cls()
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise AuditError(f"line {number} is not JSON: {exc.msg}") from None
            except ValueError as exc:  # e.g. an integer of more digits than Python converts
                raise AuditError(f"line {number} is not JSON gridrail can read: {exc}") from None
            except RecursionError:  # json's parser recurses on nesting
                raise AuditError(f"line {number} nests JSON too deeply to be a log row") from None
            if log.seal_record is not None:
                raise AuditError(f"line {number} comes after the seal")
            kind = row.get("type") if isinstance(row, dict) else None  # `[1]` is JSON too
            if kind == "seal":
                log.seal_record = row
            elif kind == "record":
                log.records.append(row)
            else:
                raise AuditError(f"line {number} is neither a record nor a seal")
        return log


def verify(log: AuditLog, public_key: Ed25519PublicKey | None = None) -> None:
    """Raise AuditError at the first record whose chain does not hold (or a missing seal);
    with `public_key`, then SignatureError unless the seal carries that key's signature.
    Without it, a signature the seal carries is not checked: the chain alone is unkeyed."""
    prev = GENESIS
    for position, record in enumerate(log.records):
        body = {k: v for k, v in record.items() if k != "hash"}
        if record.get("step") != position:
            raise AuditError(f"record out of order (says step {record.get('step')})", position)
        if _chain(body) != record.get("hash"):
            raise AuditError("the hash chain is broken here", position)
        # each link, not just each record: a record edited and rehashed on its own has a
        # consistent hash, and only the next record's `prev` still names the original
        if record.get("prev") != prev:
            before = f"step {position - 1}" if position else "the genesis"
            raise AuditError(
                f"the hash chain is broken here: prev is not the hash of {before}", position
            )
        if record.get("kind") not in KINDS:
            raise AuditError(f"unknown kind {record.get('kind')!r}", position)
        prev = record["hash"]
    seal = log.seal_record
    if seal is None:
        raise AuditError("the log has no seal", len(log.records))
    body = {k: v for k, v in seal.items() if k not in UNHASHED_SEAL_FIELDS}
    if (
        seal.get("prev") != prev
        or seal.get("steps") != len(log.records)
        or _chain(body) != seal.get("hash")
    ):
        raise AuditError("the seal does not close this chain", len(log.records))
    if public_key is not None:
        _check_signature(seal, public_key)


def _check_signature(seal: Mapping[str, object], public_key: Ed25519PublicKey) -> None:
    """The seal (whose hash `verify` has checked) carries `public_key`'s signature of it."""
    signer, signature = seal.get("signed_by"), seal.get("signature")
    if signer is None and signature is None:
        raise SignatureError(
            "the log is not signed, so its chain shows only that it is self-consistent "
            "(anyone who edits it can recompute every hash): sign logs with "
            "`gridrail ask --signing-key KEY`"
        )
    expected = fingerprint(public_key)
    if signer != expected:
        raise SignatureError(f"the log is signed by key {signer}, not by the given key {expected}")
    if not seal_signature_holds(public_key, str(seal["hash"]), signature):
        raise SignatureError(
            f"the seal's signature is not key {expected}'s signature of this chain: the log was "
            "changed after it was signed (its hashes recomputed), or its signature was"
        )


def replay(log: AuditLog, directory: str | os.PathLike[str]) -> int:
    """Re-derive a sealed log from the archive `directory` and return the number of steps
    replayed; raise AuditError at the first step that differs.

    The chain only shows that nobody edited the log without rehashing it; replay shows that the
    log is what the archived artifacts produce: on a fresh matcher over the guide the seal's
    artifacts define (with an empty mask cache, so every mask is recomputed), each record's
    configuration hash, mask entry id and blocked count must be recomputed bit for bit and its
    token must be inside that mask (a rollback must return to the configuration it names).
    Archive faults raise the `gridrail.archive` errors, which name the file."""
    from gridrail.archive import load_guide  # archive imports guide, which imports this module

    verify(log)
    artifacts = log.seal_record["artifacts"]  # type: ignore[index]  # verify: there is a seal
    if not isinstance(artifacts, Mapping):
        raise AuditError("the seal's artifacts are not a name → fingerprint map", len(log.records))
    guide = load_guide(directory, artifacts)
    matcher = guide.matcher()
    for step, record in enumerate(log.records):
        _replay_step(guide, matcher, record, step)
    return len(log.records)


def _replay_step(guide: Guide, matcher: Matcher, record: Mapping[str, object], step: int) -> None:
    """Check one record against the replaying matcher, then apply it (accept or roll back)."""
    token = record.get("token")
    if not isinstance(token, int) or isinstance(token, bool):
        raise AuditError(f"the token {token!r} is not an integer", step)
    if record["kind"] == "rollback":
        _roll_back(matcher, token, step)
        entry, _ = matcher.mask_with_entry()
        _expect(record, matcher.configuration_hash(), entry.entry_id, 0, step)
        return
    entry, mask = matcher.mask_with_entry()
    blocked = guide.vocab.size - mask.count()
    _expect(record, matcher.configuration_hash(), entry.entry_id, blocked, step)
    # (logs written before rungs were recorded have none: nothing to compare)
    if "rung" in record and record["rung"] != matcher.rung():
        raise AuditError(
            f"the recorded rung {record['rung']!r} is not the replayed {matcher.rung()!r}", step
        )
    if not 0 <= token < guide.vocab.size or token not in mask:
        raise AuditError(f"token {token} is outside the mask at this step", step)
    if guide.is_eos(token) != (record["kind"] == "eos"):
        raise AuditError(f"token {token} is recorded as {record['kind']!r}", step)
    if not matcher.accept_tokens([token], str(record["kind"])):
        raise AuditError(f"token {token} comes after the end of the output", step)


def _roll_back(matcher: Matcher, count: int, step: int) -> None:
    if not 1 <= count <= matcher.num_accepted:
        raise AuditError(
            f"a rollback of {count} tokens, but {matcher.num_accepted} are accepted", step
        )
    matcher.rollback(count)


def _expect(record: Mapping[str, object], config: str, entry: str, blocked: int, step: int) -> None:
    """Raise at the first of the record's derived fields that the replay does not reproduce."""
    for name, replayed in (("config", config), ("entry", entry), ("blocked", blocked)):
        if record.get(name) != replayed:
            raise AuditError(
                f"the recorded {name} {record.get(name)!r} is not the replayed {replayed!r}", step
            )

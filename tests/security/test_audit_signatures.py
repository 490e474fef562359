"""Signed audit seals (security review): an unkeyed hash chain can be recomputed by whoever edits
the log, so `verify` alone cannot tell a forged log from a real one. The writer signs the seal's
hash with an Ed25519 key (`gridrail audit keygen`, `ask --signing-key`); `audit verify
--public-key` then refuses a log that was edited and rehashed, an unsigned log and a log signed
by another key, and says so when it checked the chain only. Also: `verify` checks every `prev`
link, so a record rehashed on its own is caught at the next one."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import pytest

from gridrail.archive import save_guide
from gridrail.ask import Answer, ask
from gridrail.audit import AuditError, AuditLog, SignatureError, replay, verify
from gridrail.cli import main
from gridrail.errors import UsageError
from gridrail.signing import (
    SigningKeyError,
    fingerprint,
    generate_key_pair,
    load_public_key,
    load_signing_key,
)
from test_ask import HR_DB, HR_POLICY, _guide, _scripted

# a first answer the checker rejects (the analyst has no `orders.name`), then a clean repair:
# two attempts, so two logs
ANSWERS = ("SELECT name FROM orders;", "SELECT name FROM employees;")


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The writer's key pair and an attacker's."""
    directory = tmp_path_factory.mktemp("keys")
    for name in ("writer", "attacker"):
        generate_key_pair(directory / name)
    return {name: directory / name for name in ("writer", "attacker")}


@pytest.fixture(scope="module")
def answer(keys: dict[str, Path]) -> Answer:
    signing_key = load_signing_key(keys["writer"])
    return ask("Who works here?", _guide("analyst"), _scripted(*ANSWERS), signing_key=signing_key)


def _rows(log: AuditLog) -> list[dict]:
    return [json.loads(line) for line in log.lines()]


def _log(rows: list[dict]) -> AuditLog:
    return AuditLog.parse(json.dumps(row) for row in rows)


def _written(rows: list[dict], path: Path) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _rehashed(rows: list[dict], signing_key=None) -> list[dict]:
    """What an attacker who edited `rows` writes: every hash and the seal recomputed (signed
    with `signing_key` if given); the original seal's signature fields are kept otherwise."""
    log = AuditLog(signing_key=signing_key)
    for r in rows[:-1]:
        log.append(r["config"], r["entry"], r["token"], r["blocked"], r["kind"])
    old = rows[-1]
    seal = log.seal(old["stop"], old["artifacts"], old["mode"])
    if signing_key is None:
        seal.update({k: old[k] for k in ("signed_by", "signature") if k in old})
    return [*log.records, seal]


def _forged(answer: Answer) -> list[dict]:
    """The answer's log with one record's blocked count edited, everything rehashed."""
    rows = _rows(answer.final.generation.audit)
    rows[len(rows) // 2]["blocked"] += 1
    return _rehashed(rows)


def _record_hash(row: dict) -> str:
    """A record's hash as the audit.py docstring specifies it (what an attacker computes)."""
    body = json.dumps({k: v for k, v in row.items() if k != "hash"}, sort_keys=True,
                      separators=(",", ":"))  # fmt: skip
    return hashlib.blake2b(body.encode(), digest_size=16).hexdigest()


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


# -- keys


def test_keygen_writes_a_private_key_only_its_owner_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "audit.key"
    code, out = _run("audit", "keygen", "--out", str(key))
    public = load_public_key(f"{key}.pub")
    assert code == 0 and f"public key fingerprint: {fingerprint(public)}\n" in out
    assert os.stat(key).st_mode & 0o777 == 0o600
    assert fingerprint(load_signing_key(key).public_key()) == fingerprint(public)
    before = key.read_bytes()
    assert _run("audit", "keygen", "--out", str(key))[0] == 2  # never overwrites a key
    assert "exists" in capsys.readouterr().err and key.read_bytes() == before


def test_unusable_key_files_are_refused(tmp_path: Path, keys: dict[str, Path]) -> None:
    readable = tmp_path / "readable.key"
    readable.write_bytes(keys["writer"].read_bytes())
    readable.chmod(0o640)
    with pytest.raises(SigningKeyError, match=r"other users.*chmod 600"):
        load_signing_key(readable)
    with pytest.raises(SigningKeyError, match="not a PEM public key"):
        load_public_key(keys["writer"])  # the private key where the public one belongs
    public_only = tmp_path / "public-only.key"
    public_only.write_bytes(Path(f"{keys['writer']}.pub").read_bytes())
    public_only.chmod(0o600)
    with pytest.raises(SigningKeyError, match="not an unencrypted PEM private key"):
        load_signing_key(public_only)


# -- signing and verifying


def test_an_untouched_signed_log_verifies_and_replays(
    answer: Answer, keys: dict[str, Path], tmp_path: Path
) -> None:
    public = load_public_key(f"{keys['writer']}.pub")
    archive = tmp_path / "archive"
    save_guide(_guide("analyst"), archive)
    for attempt in answer.attempts:
        log = attempt.generation.audit
        assert log.signed_by == fingerprint(public)
        verify(log, public)
        read = AuditLog.read(str(_written(_rows(log), tmp_path / "log.jsonl")))
        assert read.lines() == log.lines()
        verify(read, public)
        assert replay(read, archive) == len(log.records)  # replay ignores the signature


def test_a_forged_rehashed_log_fails_the_signature_check(
    answer: Answer, keys: dict[str, Path]
) -> None:
    public = load_public_key(f"{keys['writer']}.pub")
    forged = _log(_forged(answer))
    verify(forged)  # the unkeyed chain holds: this is what an attacker can do
    with pytest.raises(SignatureError, match="changed after it was signed"):
        verify(forged, public)


def test_the_signature_names_its_signer(answer: Answer, keys: dict[str, Path]) -> None:
    public = load_public_key(f"{keys['writer']}.pub")
    rows = _rows(answer.final.generation.audit)
    by_attacker = _log(_rehashed(rows, load_signing_key(keys["attacker"])))
    with pytest.raises(SignatureError, match=r"signed by key [0-9a-f]{64}, not by the given key"):
        verify(by_attacker, public)
    impersonated = _rows(by_attacker)
    impersonated[-1]["signed_by"] = fingerprint(public)  # claims the writer's key
    with pytest.raises(SignatureError, match="changed after it was signed"):
        verify(_log(impersonated), public)
    malformed = _rows(answer.final.generation.audit)
    malformed[-1]["signature"] = "not hex"
    with pytest.raises(SignatureError, match=r"not key [0-9a-f]{64}'s signature"):
        verify(_log(malformed), public)


def test_an_unsigned_log_fails_when_a_signature_is_expected(
    answer: Answer, keys: dict[str, Path]
) -> None:
    public = load_public_key(f"{keys['writer']}.pub")
    stripped = _forged(answer)
    for field in ("signed_by", "signature"):
        del stripped[-1][field]
    verify(_log(stripped))
    with pytest.raises(SignatureError, match="the log is not signed"):
        verify(_log(stripped), public)


def test_verify_checks_every_prev_link() -> None:
    """An attacker edits one record and recomputes its hash only: each record's own hash holds,
    and only the next record's `prev` still names the original."""
    log = AuditLog()
    for step in range(6):
        log.append(f"{step:032x}", "e" * 32, step, 0, "sampled")
    log.seal("eos", {})
    rows = _rows(log)
    edited = rows[2]
    edited["token"] = 99
    edited["hash"] = _record_hash(edited)
    forged = _log(rows)
    with pytest.raises(AuditError, match="prev is not the hash of step 2") as caught:
        verify(forged)
    assert caught.value.step == 3


# -- the command line


def test_cli_verify_with_and_without_the_public_key(
    answer: Answer, keys: dict[str, Path], tmp_path: Path
) -> None:
    log = answer.final.generation.audit
    public = f"{keys['writer']}.pub"
    signer = fingerprint(load_public_key(public))
    path = _written(_rows(log), tmp_path / "signed.jsonl")
    intact = f"{path}: chain intact, {len(log.records)} steps, sealed (stop: eos)"
    assert _run("audit", "verify", str(path), "--public-key", public) == (
        0,
        f"{intact}, signature valid (key {signer})\n",
    )
    code, text = _run("audit", "verify", str(path))
    assert code == 0 and text.startswith(f"{intact}; signed by key {signer}")
    assert "signature was NOT checked: this checked the chain only" in text

    forged = _written(_forged(answer), tmp_path / "forged.jsonl")
    assert _run("audit", "verify", str(forged))[0] == 0  # chain only: the forgery holds
    code, text = _run("audit", "verify", str(forged), "--public-key", public)
    assert code == 1
    assert text.startswith(f"{forged}: signature check failed: the seal's signature is not")

    unsigned = [{k: v for k, v in row.items() if k not in ("signed_by", "signature")} for row in
                _rows(log)]  # fmt: skip
    path = _written(unsigned, tmp_path / "unsigned.jsonl")
    code, text = _run("audit", "verify", str(path), "--public-key", public)
    assert code == 1 and text.startswith(f"{path}: signature check failed: the log is not signed")


def test_cli_ask_signs_every_attempt(
    keys: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr("gridrail.models.load_model", lambda *_args: _scripted(*ANSWERS))
    ask_argv = ["ask", "--db", str(HR_DB), "--policy", str(HR_POLICY), "--role", "analyst"]
    log = tmp_path / "run.jsonl"
    signed = ["--audit", str(log), "--signing-key", str(keys["writer"])]
    assert _run(*ask_argv, *signed, "Who works here?")[0] == 0
    public = f"{keys['writer']}.pub"
    for path in (log, tmp_path / "run.attempt1.jsonl"):
        assert _run("audit", "verify", str(path), "--public-key", public)[0] == 0
        assert _run("audit", "replay", str(path))[0] == 0
    capsys.readouterr()
    no_log = ["--signing-key", str(keys["writer"]), "q"]
    assert _run(*ask_argv, *no_log)[0] == 2
    assert capsys.readouterr().err.strip() == (
        "gridrail: error: --signing-key signs the audit log: give --audit FILE too"
    )
    with pytest.raises(UsageError, match="needs audit=True"):
        ask("q", _guide("analyst"), _scripted(*ANSWERS), audit=False, signing_key=object())

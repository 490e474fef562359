"""Ed25519 keys that sign audit seals (`gridrail audit keygen`, `ask --signing-key`,
`audit verify --public-key`; docs/audit.md says what a signature proves and what it does not).

An unkeyed hash chain only shows that a log is self-consistent: whoever edits it can recompute
every hash. A signature over the seal's hash — which commits to every record through the chain —
shows that the holder of the private key sealed exactly this chain.

Files: the private key is PKCS#8 PEM, unencrypted, mode 0600 (a key that other users may read is
refused, as ssh does); the public key, beside it as KEY.pub, is SubjectPublicKeyInfo PEM
(`openssl pkey -pubin -in KEY.pub -text` reads it). A key is named by its fingerprint, the
SHA-256 of its 32 raw bytes in hex.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from gridrail.errors import GridrailError

# what is signed: this context, then the seal's hash (so a seal signature is never valid as a
# signature of anything else the key might sign)
SEAL_CONTEXT = b"gridrail-audit-seal-v1:"
_SIGNATURE = re.compile(r"[0-9a-f]{128}")  # 64 bytes


class SigningKeyError(GridrailError):
    """A key file cannot be written or read, or is not an Ed25519 key of the kind expected."""


def fingerprint(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def public_path(private_path: str | os.PathLike[str]) -> Path:
    """Where `generate_key_pair` puts the public key of the private key at `private_path`."""
    path = Path(private_path)
    return path.with_name(path.name + ".pub")


def generate_key_pair(private_path: str | os.PathLike[str]) -> str:
    """Write a new private key at `private_path` (0600) and its public key beside it (.pub);
    return the public key's fingerprint. Never overwrites: a key that is replaced cannot sign
    for the logs it sealed, and its logs could no longer be told from forgeries."""
    path, pub = Path(private_path), public_path(private_path)
    for existing in (path, pub):
        if existing.exists():
            raise SigningKeyError(f"{existing} exists: remove it or choose another --out")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    # created 0600 (O_EXCL: not through a file or link someone put there in the meantime)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as f:
        f.write(private_pem)
    descriptor = os.open(pub, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(descriptor, "wb") as f:
        f.write(public_pem)
    return fingerprint(key.public_key())


def load_signing_key(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    """The private key at `path` (as `generate_key_pair` wrote it)."""
    if os.name == "posix":
        mode = os.stat(path).st_mode & 0o777
        if mode & 0o077:
            raise SigningKeyError(
                f"{path}: the signing key may be read by other users (mode {mode:04o}): "
                f"chmod 600 {path}"
            )
    data = Path(path).read_bytes()
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:  # not PEM, encrypted, or damaged
        raise SigningKeyError(
            f"{path}: not an unencrypted PEM private key ({exc}); "
            "`gridrail audit keygen --out KEY` writes one"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(f"{path}: a {type(key).__name__}, not an Ed25519 private key")
    return key


def load_public_key(path: str | os.PathLike[str]) -> Ed25519PublicKey:
    """The public key at `path` (KEY.pub as `generate_key_pair` wrote it)."""
    data = Path(path).read_bytes()
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise SigningKeyError(
            f"{path}: not a PEM public key ({exc}); pass the KEY.pub that "
            "`gridrail audit keygen` wrote beside the private key"
        ) from None
    if not isinstance(key, Ed25519PublicKey):
        raise SigningKeyError(f"{path}: a {type(key).__name__}, not an Ed25519 public key")
    return key


def sign_seal(key: Ed25519PrivateKey, seal_hash: str) -> str:
    """The signature (hex) of a seal whose hash is `seal_hash`."""
    return key.sign(SEAL_CONTEXT + seal_hash.encode("ascii")).hex()


def seal_signature_holds(key: Ed25519PublicKey, seal_hash: str, signature: object) -> bool:
    """Is `signature` (hex, as `sign_seal` writes it) `key`'s signature of that seal?"""
    if not (isinstance(signature, str) and _SIGNATURE.fullmatch(signature)):
        return False
    try:
        key.verify(bytes.fromhex(signature), SEAL_CONTEXT + seal_hash.encode("ascii"))
    except InvalidSignature:
        return False
    return True

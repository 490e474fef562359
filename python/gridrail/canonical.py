"""Canonical JSON text and the fingerprints made of it: compact, ASCII, keys sorted unless a
format says otherwise. Every artifact's fingerprint (grammar, schema, name sets, catalogues,
audit records) is BLAKE2b-128 of such a text, so that one encoding defines them all."""

from __future__ import annotations

import hashlib
import json


def canonical_json(doc: object, *, sort_keys: bool = True) -> str:
    """`doc` as compact ASCII JSON. Documents are trees this package builds, never cyclic: the
    encoder's cycle check is left out (it was a third of the encoding of a large schema)."""
    return json.dumps(doc, separators=(",", ":"), sort_keys=sort_keys, check_circular=False)


def fingerprint_of(doc: object, *, sort_keys: bool = True, prefix: bytes = b"") -> str:
    """BLAKE2b-128 (hex) of `prefix` and `doc`'s canonical text."""
    text = canonical_json(doc, sort_keys=sort_keys).encode()
    return hashlib.blake2b(prefix + text, digest_size=16).hexdigest()

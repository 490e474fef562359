"""Canonical JSON text and the fingerprints made of it: compact, ASCII, keys sorted unless a
format says otherwise. Every artifact's fingerprint (grammar, schema, name sets, catalogues,
audit records) is BLAKE2b-128 of such a text, so that one encoding defines them all."""

from __future__ import annotations

import hashlib
import json

from gridrail import kernels


def canonical_json(doc: object, *, sort_keys: bool = True) -> str:
    """`doc` as compact ASCII JSON: Python's `json.dumps` with these settings defines the text.
    Documents are trees this package builds, never cyclic: the encoder's cycle check is left
    out (it was a third of the encoding of a large schema). With the kernels, the Rust twin
    writes the documents it can (plain containers, strings, ints, bools, None: a large
    schema's in half the time) and hands back the rest."""
    text = kernels.canonical_json(doc, sort_keys) if kernels.KERNELS_ENABLED else None
    if text is None:
        text = json.dumps(doc, separators=(",", ":"), sort_keys=sort_keys, check_circular=False)
    return text


def fingerprint_of(doc: object, *, sort_keys: bool = True, prefix: bytes = b"") -> str:
    """BLAKE2b-128 (hex) of `prefix` and `doc`'s canonical text."""
    text = canonical_json(doc, sort_keys=sort_keys).encode()
    return hashlib.blake2b(prefix + text, digest_size=16).hexdigest()

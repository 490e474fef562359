"""Mask entries: an immutable, content-addressed walk result under its key (paper §4.3).

`entry_id = BLAKE2b-128(key ‖ encoding tag ‖ payload)` over a canonical byte encoding, so the
same walk under the same key has the same id in every process and on every machine: racing
publishers agree, and an audit record that names an entry can be re-derived bit for bit.
"""

from __future__ import annotations

import hashlib
import struct
import sys
from array import array
from dataclasses import dataclass

from gridrail.mask.keys import IdentifierKey, MaskKey
from gridrail.mask.walk import WalkResult

ENCODING = b"gridrail-walk-v1"  # the payload encoding's tag: bump it when the encoding changes


@dataclass(frozen=True)
class MaskEntry:
    key: MaskKey
    walk: WalkResult
    entry_id: str  # 32 hex digits
    ci_tokens: bytes | array  # the CI nodes' token ids (derived, so not in entry_id)
    size: int  # bytes held: payload encoding + token ids (what the cache's bound counts)


def make_entry(key: MaskKey, walk: WalkResult, ci_tokens: bytes | array) -> MaskEntry:
    payload = encode_walk(walk)
    digest = hashlib.blake2b(digest_size=16)
    digest.update(encode_key(key))
    digest.update(ENCODING)
    digest.update(payload)
    held = len(payload) + len(ci_tokens) * (
        1 if isinstance(ci_tokens, bytes) else ci_tokens.itemsize
    )
    return MaskEntry(key, walk, digest.hexdigest(), ci_tokens, held)


def encode_key(key: MaskKey) -> bytes:
    kind = b"I" if isinstance(key, IdentifierKey) else b"G"
    allowed = key.allowed.to_bytes((key.allowed.bit_length() + 7) // 8 or 1, "little")
    parts = [
        kind,
        struct.pack("<i?iI", key.scan_state, key.pending, key.accept_state, key.root),
        _framed(key.tail),
        _framed(allowed),
    ]
    if isinstance(key, IdentifierKey):
        parts.append(_framed(key.lexicons.encode()))
    return b"".join(parts)


def encode_walk(walk: WalkResult) -> bytes:
    nodes = array("I", walk.ci_nodes)
    if sys.byteorder != "little":
        nodes.byteswap()
    parts = [struct.pack("<I", len(nodes)), nodes.tobytes()]
    parts.append(struct.pack("<I", len(walk.cd_classes)))
    for cd in walk.cd_classes:
        before = cd.before
        parts.append(
            struct.pack(
                "<IiIi", cd.node, before.scan_state, before.lexeme_length, before.accept_state
            )
        )
        parts.append(_framed(before.tail))
    return b"".join(parts)


def _framed(data: bytes) -> bytes:
    return struct.pack("<I", len(data)) + data

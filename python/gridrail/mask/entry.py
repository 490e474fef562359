"""Mask entries: an immutable, content-addressed walk result under its key (paper §4.3).

`entry_id = BLAKE2b-128(key ‖ encoding tag ‖ payload)` over a canonical byte encoding, so the
same walk under the same key has the same id in every process and on every machine: racing
publishers agree, and an audit record that names an entry can be re-derived bit for bit.
T1 entries (`MaskEntry`) hold a walk in their scanner's numbering; T2 entries
(`NormalFormEntry`) hold it in canonical numbering, under a key of their own encoding tag.
"""

from __future__ import annotations

import hashlib
import struct
import sys
from array import array
from dataclasses import dataclass

from gridrail.mask.keys import IdentifierKey, MaskKey, NormalFormKey
from gridrail.mask.normal_form import CanonicalWalk
from gridrail.mask.walk import WalkResult

ENCODING = b"gridrail-walk-v1"  # the payload encoding's tag: bump it when the encoding changes
CANONICAL_ENCODING = b"gridrail-walk-canonical-v1"  # the same payload, canonical state numbers


@dataclass(frozen=True)
class MaskEntry:
    key: MaskKey
    walk: WalkResult
    entry_id: str  # 32 hex digits
    ci_tokens: bytes | array  # the CI nodes' token ids (derived, so not in entry_id)
    size: int  # bytes held: payload encoding + token ids (what the cache's bound counts)


@dataclass(frozen=True)
class NormalFormEntry:
    """A T2 entry: shared by every scanner of a dialect family, read through
    `NormalForm.to_local`."""

    key: NormalFormKey
    walk: CanonicalWalk
    entry_id: str
    ci_tokens: bytes | array
    size: int


def make_entry(key: MaskKey, walk: WalkResult, ci_tokens: bytes | array) -> MaskEntry:
    payload = encode_walk(walk)
    entry_id = _entry_id(encode_key(key), ENCODING, payload)
    return MaskEntry(key, walk, entry_id, ci_tokens, _held(payload, ci_tokens))


def make_normal_form_entry(
    key: NormalFormKey, walk: CanonicalWalk, ci_tokens: bytes | array
) -> NormalFormEntry:
    payload = encode_walk(walk.walk)
    entry_id = _entry_id(encode_normal_form_key(key), CANONICAL_ENCODING, payload)
    return NormalFormEntry(key, walk, entry_id, ci_tokens, _held(payload, ci_tokens))


def _entry_id(key: bytes, tag: bytes, payload: bytes) -> str:
    digest = hashlib.blake2b(digest_size=16)
    digest.update(key)
    digest.update(tag)
    digest.update(payload)
    return digest.hexdigest()


def _held(payload: bytes, ci_tokens: bytes | array) -> int:
    return len(payload) + len(ci_tokens) * (
        1 if isinstance(ci_tokens, bytes) else ci_tokens.itemsize
    )


def encode_key(key: MaskKey) -> bytes:
    kind = b"I" if isinstance(key, IdentifierKey) else b"G"
    parts = [
        kind,
        struct.pack("<i?iI", key.scan_state, key.pending, key.accept_state, key.root),
        _framed(key.tail),
        _framed(_mask_bytes(key.allowed)),
    ]
    if isinstance(key, IdentifierKey):
        parts.append(_framed(key.lexicons.encode()))
    return b"".join(parts)


def encode_normal_form_key(key: NormalFormKey) -> bytes:
    return b"".join(
        [
            b"N",
            _framed(key.state),
            struct.pack("<?I", key.pending, key.root),
            _framed(key.accept),
            _framed(key.tail),
            _framed(_mask_bytes(key.viable)),
        ]
    )


def encode_walk(walk: WalkResult) -> bytes:
    nodes = walk.ci_nodes  # joined as a buffer: a walk can list ~10^5 nodes, copied once here
    if sys.byteorder != "little":
        nodes = array("I", nodes)
        nodes.byteswap()
    parts: list[bytes | array] = [struct.pack("<I", len(nodes)), nodes]
    parts.append(struct.pack("<I", len(walk.cd_classes)))
    pack = struct.Struct("<IiIiI").pack  # the class, then its tail framed as `_framed` does
    for node, scan_state, lexeme_length, accept_state, tail in walk.cd_classes:
        parts.append(pack(node, scan_state, lexeme_length, accept_state, len(tail)))
        parts.append(tail)
    return b"".join(parts)


def _mask_bytes(mask: int) -> bytes:
    return mask.to_bytes((mask.bit_length() + 7) // 8 or 1, "little")


def _framed(data: bytes) -> bytes:
    return struct.pack("<I", len(data)) + data

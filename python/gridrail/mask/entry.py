"""Mask entries: an immutable, content-addressed walk result under its key (paper §4.3).

`entry_id = BLAKE2b-128(key ‖ encoding tag ‖ payload)` over a canonical byte encoding, so the
same walk under the same key has the same id in every process and on every machine: racing
publishers agree, and an audit record that names an entry can be re-derived bit for bit.
T1 entries (`MaskEntry`) hold a walk in their scanner's numbering; T2 entries
(`NormalFormEntry`) hold it in canonical numbering, under a key of their own encoding tag.
"""

from __future__ import annotations

import hashlib
import operator
import struct
import sys
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from gridrail.mask.keys import IdentifierKey, MaskKey, NormalFormKey
from gridrail.mask.normal_form import CanonicalWalk
from gridrail.mask.walk import WalkResult

ENCODING = b"gridrail-walk-v1"  # the payload encoding's tag: bump it when the encoding changes
CANONICAL_ENCODING = b"gridrail-walk-canonical-v1"  # the same payload, canonical state numbers
_CLASS = struct.Struct("<IiIiI")  # a CD class in a payload, then its tail framed as `_framed` does
_TAIL = operator.itemgetter(4)  # a `CDClass`'s tail


@dataclass(frozen=True)
class MaskEntry:
    """A T1 entry. Its id is derived when first asked: an audit record names the entry at the
    root of each mask, a second publication under its key compares ids, and the walks below
    CD nodes are never named — hashing a large walk costs a good part of a miss."""

    key: MaskKey
    walk: WalkResult
    ci_tokens: bytes | array  # the CI nodes' token ids (derived, so not in entry_id)
    size: int  # bytes held: payload encoding + token ids (what the cache's bound counts)

    @cached_property
    def entry_id(self) -> str:
        """32 hex digits."""
        return _entry_id(encode_key(self.key), ENCODING, self.walk)


@dataclass(frozen=True)
class NormalFormEntry:
    """A T2 entry: shared by every scanner of a dialect family, read through
    `NormalForm.to_local`. Its walk and id are derived when first asked: a reader in another
    scanner asks for the walk, only a second publication under its key compares ids, and most
    entries are never read — renumbering and hashing a large walk cost about as much as
    walking it."""

    key: NormalFormKey
    canonical: Callable[[], CanonicalWalk] = field(compare=False, repr=False)
    ci_tokens: bytes | array
    size: int

    @cached_property
    def walk(self) -> CanonicalWalk:
        return self.canonical()

    @cached_property
    def entry_id(self) -> str:
        return _entry_id(encode_normal_form_key(self.key), CANONICAL_ENCODING, self.walk.walk)


def make_entry(key: MaskKey, walk: WalkResult, ci_tokens: bytes | array) -> MaskEntry:
    return MaskEntry(key, walk, ci_tokens, _held(_walk_size(walk), ci_tokens))


def make_normal_form_entry(
    key: NormalFormKey,
    canonical: Callable[[], CanonicalWalk],
    local: WalkResult,
    ci_tokens: bytes | array,
) -> NormalFormEntry:
    """The T2 entry of `local` (a walk in its scanner's numbering), `canonical` making its
    canonical form when it is first read (its payload has `local`'s size)."""
    return NormalFormEntry(key, canonical, ci_tokens, _held(_walk_size(local), ci_tokens))


def _entry_id(key: bytes, tag: bytes, walk: WalkResult) -> str:
    """BLAKE2b-128 of key ‖ tag ‖ encode_walk(walk), the payload hashed as its parts (a walk
    can list ~10^5 nodes: not copied into one string first)."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(key)
    digest.update(tag)
    for part in _walk_parts(walk):
        digest.update(part)
    return digest.hexdigest()


def _held(payload_size: int, ci_tokens: bytes | array) -> int:
    return payload_size + len(ci_tokens) * (
        1 if isinstance(ci_tokens, bytes) else ci_tokens.itemsize
    )


def _walk_size(walk: WalkResult) -> int:
    """len(encode_walk(walk)), without encoding it."""
    classes = walk.cd_classes  # C-level passes: a walk can have thousands of classes
    tails = sum(map(len, map(_TAIL, classes)))
    return 8 + 4 * len(walk.ci_nodes) + _CLASS.size * len(classes) + tails


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
    return b"".join(_walk_parts(walk))


def _walk_parts(walk: WalkResult) -> list[bytes | array]:
    """encode_walk(walk) in pieces: the CI nodes as one buffer, then each class."""
    nodes = walk.ci_nodes
    if sys.byteorder != "little":
        nodes = array("I", nodes)
        nodes.byteswap()
    parts: list[bytes | array] = [struct.pack("<I", len(nodes)), nodes]
    parts.append(struct.pack("<I", len(walk.cd_classes)))
    pack = _CLASS.pack
    for node, scan_state, lexeme_length, accept_state, tail in walk.cd_classes:
        parts.append(pack(node, scan_state, lexeme_length, accept_state, len(tail)))
        parts.append(tail)
    return parts


def _mask_bytes(mask: int) -> bytes:
    return mask.to_bytes((mask.bit_length() + 7) // 8 or 1, "little")


def _framed(data: bytes) -> bytes:
    return struct.pack("<I", len(data)) + data

"""The token trie (paper Definition 3): every spelling of a vocabulary in one DFS-ordered array.

Node 0 is the root (the empty spelling). Node i > 0 has an edge byte, a depth, the subtree size
(itself included, so the subtree of i is i .. i + size - 1 and skipping it is one addition) and
the first token id spelled exactly by the path to it (-1 if none). Ids that share a spelling
(alias classes) hang off the node in a side table so masks stay complete over *ids*. The arrays
are flat `array('i')`s so a Rust kernel can take them over unchanged.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from gridrail.vocab.vocabulary import VocabularyError

S = TypeVar("S")  # a walker's state (for the oracle: a configuration)


@dataclass(frozen=True)
class TokenTrie:
    edge_byte: array  # per node; -1 at the root
    depth: array  # per node; 0 at the root
    subtree_size: array  # per node, itself included
    token_id: array  # per node: the lowest id with this exact spelling, or -1
    aliases: dict[int, tuple[int, ...]]  # node -> every id with its spelling, when more than one
    fingerprint: str  # the vocabulary's: one trie per tokenizer

    @property
    def num_nodes(self) -> int:
        return len(self.edge_byte)

    def ids_at(self, node: int) -> tuple[int, ...]:
        """Every token id whose spelling ends at this node (empty if none)."""
        ids = self.aliases.get(node)
        if ids is not None:
            return ids
        first = self.token_id[node]
        return (first,) if first >= 0 else ()

    def child(self, node: int, byte: int) -> int:
        """The child of `node` along `byte`, or -1 (children are in byte order)."""
        child, end = node + 1, node + self.subtree_size[node]
        while child < end:
            edge = self.edge_byte[child]
            if edge == byte:
                return child
            if edge > byte:
                return -1
            child += self.subtree_size[child]
        return -1

    def tokenize(self, data: bytes) -> list[int]:
        """Greedy longest-match token ids spelling exactly `data`; VocabularyError if some byte
        cannot be spelled (a vocabulary that is not byte complete)."""
        out: list[int] = []
        pos = 0
        while pos < len(data):
            node, best, best_end = 0, -1, pos
            for i in range(pos, len(data)):
                node = self.child(node, data[i])
                if node < 0:
                    break
                if self.token_id[node] >= 0:
                    best, best_end = self.token_id[node], i + 1
            if best < 0:
                raise VocabularyError(
                    f"no token spells byte {data[pos]:#04x} at offset {pos} of {data[:40]!r}: "
                    "the vocabulary is not byte complete (see ByteCompletenessWarning)"
                )
            out.append(best)
            pos = best_end
        return out

    def first_token(self, start: S, step: Callable[[S, int], S | None]) -> int | None:
        """Some token id whose whole spelling `step` takes from `start`, byte by byte (a None
        from `step` ends that path), or None when no token's does. Depth first, stopping at the
        first token found: when every token is refused, each node is visited at most once."""
        pending = [(0, start)]
        while pending:
            node, state = pending.pop()
            child, end = node + 1, node + self.subtree_size[node]
            while child < end:
                after = step(state, self.edge_byte[child])
                if after is not None:
                    if self.token_id[child] >= 0:
                        return self.token_id[child]
                    pending.append((child, after))
                child += self.subtree_size[child]
        return None

    def spelling(self, node: int) -> bytes:
        """The bytes on the path to `node` (O(depth); for messages and tests)."""
        out = bytearray()
        target_depth = self.depth[node]
        i = node
        while target_depth > 0:
            # the parent is the nearest earlier node one level up
            while self.depth[i] != target_depth:
                i -= 1
            out.append(self.edge_byte[i])
            target_depth -= 1
        return bytes(reversed(out))


def build_trie(token_bytes: Sequence[bytes | None], fingerprint: str = "") -> TokenTrie:
    """The trie of all spellings (ids whose spelling is None are not in it)."""
    by_spelling: dict[bytes, list[int]] = {}
    for token_id, spelling in enumerate(token_bytes):
        if spelling:
            by_spelling.setdefault(spelling, []).append(token_id)

    edge_byte = array("i", [-1])
    depth = array("i", [0])
    token_id = array("i", [-1])
    aliases: dict[int, tuple[int, ...]] = {}
    path: list[int] = [0]  # node index at each depth of the current path
    previous = b""
    # Sorted spellings visit the trie in DFS order: a prefix sorts before its extensions.
    for spelling in sorted(by_spelling):
        common = 0
        limit = min(len(previous), len(spelling))
        while common < limit and previous[common] == spelling[common]:
            common += 1
        del path[common + 1 :]
        for d in range(common, len(spelling)):
            path.append(len(edge_byte))
            edge_byte.append(spelling[d])
            depth.append(d + 1)
            token_id.append(-1)
        node = path[-1]
        ids = by_spelling[spelling]
        token_id[node] = ids[0]
        if len(ids) > 1:
            aliases[node] = tuple(ids)
        previous = spelling

    subtree_size = array("i", [1]) * len(edge_byte)
    open_nodes: list[int] = []  # ancestors of the node being visited
    for node in range(len(edge_byte)):
        while open_nodes and depth[open_nodes[-1]] >= depth[node]:
            done = open_nodes.pop()
            subtree_size[done] = node - done
        open_nodes.append(node)
    for done in open_nodes:
        subtree_size[done] = len(edge_byte) - done
    return TokenTrie(edge_byte, depth, subtree_size, token_id, aliases, fingerprint)

"""The token trie: DFS layout, subtree sizes, alias classes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gridrail.vocab.trie import build_trie

spellings = st.lists(
    st.one_of(st.none(), st.binary(min_size=0, max_size=5), st.sampled_from([b"a", b"ab", b"b"])),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(spellings)
def test_trie_holds_exactly_the_spellings(token_bytes: list[bytes | None]) -> None:
    trie = build_trie(token_bytes)
    found: dict[int, bytes] = {}
    for node in range(1, trie.num_nodes):
        for token_id in trie.ids_at(node):
            found[token_id] = trie.spelling(node)
    assert found == {i: s for i, s in enumerate(token_bytes) if s}


@settings(max_examples=200, deadline=None)
@given(spellings)
def test_dfs_layout_and_subtree_sizes(token_bytes: list[bytes | None]) -> None:
    trie = build_trie(token_bytes)
    n = trie.num_nodes
    assert trie.subtree_size[0] == n and trie.depth[0] == 0 and trie.edge_byte[0] == -1
    for node in range(1, n):
        end = node + trie.subtree_size[node]
        assert end <= n
        # every node inside the subtree is deeper; the next one after it is not
        assert all(trie.depth[i] > trie.depth[node] for i in range(node + 1, end))
        assert end == n or trie.depth[end] <= trie.depth[node]
        # children are in strictly increasing edge-byte order (a sorted trie)
        children = [i for i in range(node + 1, end) if trie.depth[i] == trie.depth[node] + 1]
        edges = [trie.edge_byte[i] for i in children]
        assert edges == sorted(set(edges))
        # every leaf spells a token (no dangling paths)
        if trie.subtree_size[node] == 1:
            assert trie.ids_at(node)


def test_alias_classes_keep_every_id() -> None:
    trie = build_trie([b"x", b" ", None, b" ", b"x y", b" "])
    node = next(i for i in range(trie.num_nodes) if trie.spelling(i) == b" ")
    assert trie.ids_at(node) == (1, 3, 5)
    assert trie.token_id[node] == 1

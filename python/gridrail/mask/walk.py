"""The exact next-token mask by a trie walk, split into its context-independent and
context-dependent parts (paper §4.1–4.2).

The walk feeds trie bytes to the scanner from the current configuration. While a token's bytes
stay inside the pending lexeme and keep it viable by rule (i), the verdict depends only on the
scan state and the allowed set V — a function of the cache key, not of the stack: those tokens
are **CI**. The first byte that would need the stack — one that ends the lexeme (an emission,
after which the next allowed set comes from the stack with the winner shifted), or one after
which only rule (ii) can keep the prefix viable — starts a **CD class**: the trie subtree below
that byte, to be decided against the live stack at every step and never cached. A byte that kills
the lexeme with no accepting position, or whose winner is not in V, rejects its whole subtree
whatever the stack, so it is decided here too (monotone pruning: rejection is prefix-closed).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from gridrail.mask.bitmask import TokenSet
from gridrail.parse.oracle import Configuration, Oracle
from gridrail.vocab.trie import TokenTrie

if TYPE_CHECKING:
    from gridrail._kernels import CdClasses


class ScanPart(NamedTuple):
    """The stack-free half of a configuration: where the pending lexeme stands."""

    scan_state: int
    lexeme_length: int
    accept_state: int
    tail: bytes

    def on(self, cfg: Configuration) -> Configuration:
        return Configuration(
            cfg.stack, self.scan_state, self.lexeme_length, self.accept_state, self.tail
        )


# A CD class: the trie subtree at `node` whose verdicts need the live stack, with the scan part
# reached just before the node's edge byte — (node, scan_state, lexeme_length, accept_state,
# tail), the last four a `ScanPart`'s fields. A plain tuple, not a class: a cold walk makes
# hundreds, the caches keep them (two objects each as named tuples: 214,000 of the 303,000
# objects the cyclic GC tracked after bench/engine_compare.py's cold pass), and the GC stops
# tracking a plain tuple of numbers and bytes, never a named tuple.
CDClass = tuple[int, int, int, int, bytes]


@dataclass(frozen=True)
class WalkResult:
    ci_nodes: array  # 'I': trie nodes whose token ids are admitted whatever the stack (compact:
    # a cached walk over a 150k-token vocabulary can admit ~10^5 nodes)
    cd_classes: tuple[CDClass, ...]
    # the Rust walk's classes (`_kernels.CdClasses`), which its residue reads without converting
    # the tuples again; None where Python made the walk. Derived: not part of the walk's value
    kernel_classes: CdClasses | None = field(default=None, compare=False, repr=False)


def walk_context_independent(
    oracle: Oracle, trie: TokenTrie, cfg: Configuration, root: int = 0
) -> WalkResult:
    """The CI part of the mask at `cfg` and its CD residue, over the trie below `root` (0: the
    whole vocabulary; another node: the continuations of that node's spelling, when `cfg` is
    the configuration after it). Depends on cfg's scan part and on A(cfg.stack) only — exactly
    on the fields of `gridrail.mask.keys.MaskKey`: the walk reads the pending length only as
    zero or not, and the requeued bytes only after an accept."""
    cfg = Configuration(
        cfg.stack,
        cfg.scan_state,
        min(cfg.lexeme_length, 1),
        cfg.accept_state,
        cfg.tail if cfg.accept_state >= 0 else b"",
    )
    trans, live, accept = oracle.scanner_tables()
    v = oracle.allowed_mask(cfg) | oracle.ignored_mask
    edge, depth_of, size, token_id = trie.edge_byte, trie.depth, trie.subtree_size, trie.token_id
    # Per depth d of the current path: scanner state, lexeme length, last accept state, and the
    # depth at which that accept was reached (-1: before the walk started, so the tail begins
    # with cfg.tail).
    state = [cfg.scan_state]
    length = [cfg.lexeme_length]
    accept_state = [cfg.accept_state]
    accept_depth = [-1]
    path = bytearray()
    ci_nodes = array("I")
    cd_classes: list[CDClass] = []
    base = depth_of[root]
    node, end = root + 1, root + size[root]
    while node < end:
        d = depth_of[node] - base
        del state[d:], length[d:], accept_state[d:], accept_depth[d:], path[d - 1 :]
        q_parent = state[-1]
        byte = edge[node]
        q = trans[q_parent * 256 + byte]
        if q >= 0 and live[q] & v:  # stays in the lexeme, viable by rule (i)
            path.append(byte)
            state.append(q)
            length.append(length[-1] + 1)
            if accept[q]:
                accept_state.append(q)
                accept_depth.append(d)
            else:
                accept_state.append(accept_state[-1])
                accept_depth.append(accept_depth[-1])
            if token_id[node] >= 0:
                ci_nodes.append(node)
            node += 1
            continue
        last_accept = accept_state[-1]
        stack_free_reject = q < 0 and (last_accept < 0 or oracle.winner_in(last_accept, v) < 0)
        if not stack_free_reject:
            a_depth = accept_depth[-1]
            tail = bytes(path[a_depth:]) if a_depth >= 0 else cfg.tail + bytes(path)
            cd_classes.append((node, q_parent, length[-1], last_accept, tail))
        node += size[node]
    return WalkResult(ci_nodes, tuple(cd_classes))


def ci_tokens(trie: TokenTrie, vocab_size: int, walk: WalkResult) -> bytes | array:
    """The token ids of a walk's CI nodes (aliases included), in the smaller of two encodings:
    TokenSet bits (dense: one OR adds them to a mask) or an array of ids (sparse: most walks
    below a CD node admit a handful of tokens, and a cache holds many of them)."""
    ids = array("I")
    for node in walk.ci_nodes:
        ids.extend(trie.ids_at(node))
    dense = TokenSet(vocab_size)
    if len(ids) * ids.itemsize < len(dense.bits):
        return ids
    dense.add_all(ids)
    return bytes(dense.bits)


# A walk from a configuration below a trie node, with its CI token bits.
WalkBelow = Callable[[Configuration, int], tuple[WalkResult, bytes | array]]


def evaluate_cd_class(
    oracle: Oracle,
    cfg: Configuration,
    cd: CDClass,
    trie: TokenTrie,
    walk_below: WalkBelow,
    allowed: TokenSet,
) -> None:
    """Add to `allowed` the tokens of `cd`'s subtree that keep the prefix viable on cfg's
    live stack.

    Only the class's first byte needs the stack directly: it is stepped on the live
    configuration, and the rest of the subtree is the walk from the configuration after it —
    whose context-independent part is a function of that configuration's key, so it comes from
    `walk_below(configuration, node)` (a cache, for the guide), and only its own CD residue is
    stepped again. Subtrees whose first byte leads to equivalent configurations (the same
    emission, the same new lexeme state) thus share one walk: the verdict-equivalence grouping
    of the CD residue (paper §4.2)."""
    edge, size = trie.edge_byte, trie.subtree_size
    pending = [(cfg, cd)]
    while pending:
        live_cfg, (node, *before) = pending.pop()
        nxt = oracle.step(ScanPart(*before).on(live_cfg), edge[node])
        if nxt is None:
            continue
        allowed.add_all(trie.ids_at(node))
        if size[node] > 1:
            below, tokens = walk_below(nxt, node)
            allowed.update(tokens)
            pending.extend((nxt, inner) for inner in below.cd_classes)

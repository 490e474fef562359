"""The one place that decides whether a Rust kernel or its Python reference runs.

The Rust extension ``gridrail._kernels`` is optional: every kernel has a pure-Python reference
with identical results. Kernels are used when the extension imports and the environment does not
say ``GRIDRAIL_KERNELS=0`` (read once, at import).
"""

from __future__ import annotations

import os
import sys
from array import array
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from gridrail._kernels import NameAutomaton as NameAutomatonKernel
    from gridrail._kernels import ScanTable, SharedWalks, SlotScanner, WalkMemo
    from gridrail.gamma.tokens import SlotScan, TokenShapes
    from gridrail.grammar.dfa import ByteDFA
    from gridrail.grammar.lalr import _CodedGrammar
    from gridrail.grammar.names import NameSet
    from gridrail.grammar.scanner import ScannerAutomaton
    from gridrail.mask.walk import WalkResult
    from gridrail.parse.oracle import Configuration, Oracle
    from gridrail.vocab.trie import TokenTrie

# (state reached, bytes consumed, last accept end or -1, its state or -1): see
# `ScannerAutomaton.run`.
ScanResult = tuple[int, int, int, int]
ScanRunner = Callable[[int, bytes], ScanResult]
# A scanner with the states the name automata add (`gridrail.grammar.scanner._name_rows`): the
# whole table (256 int32 entries per state, the base's rows then the new states', as
# native-endian bytes or a Rust `ScanTable` exporting them), per new state its base state or -1
# (array "i"), and the name slots that accept there and those still live, as bit masks
# (arrays "Q").
NameRows = tuple["bytes | ScanTable", array, array, array]
# The minimal union automaton of regex terminals (`gridrail.grammar.scanner._union_scanner`):
# its table (array "i", 256 per state) and per state the terminals accepted and live; no state
# when nothing can match.
UnionRows = tuple[array, list[frozenset[int]], list[frozenset[int]]]
# LALR(1) tables (`gridrail.grammar.lalr.LalrTables`): per state its kernel (production, dot)
# items, its goto row (nonterminal → state) and its action row (terminal → action)
LalrRows = tuple[
    tuple[tuple[tuple[int, int], ...], ...], tuple[dict[int, int], ...], tuple[dict[int, int], ...]
]


def _load_kernels() -> ModuleType | None:
    if os.environ.get("GRIDRAIL_KERNELS") == "0":
        return None
    try:
        from gridrail import _kernels
    except ImportError:
        return None
    return _kernels


_kernels = _load_kernels()
KERNELS_ENABLED: bool = _kernels is not None


# `TokenSet.write_row` with `Matcher.fill_bitmask`'s checks, in one call: True when it copied
# the mask's bytes into the row, False (nothing written) when the Python path must convert the
# bitmask or raise. Bound as is, not wrapped: it is most of a warm mask's step.
write_mask_row: Callable[[object, object, bytearray], bool] | None = (
    None if _kernels is None else _kernels.write_mask_row
)


def make_scan_table(scanner: ScannerAutomaton) -> ScanTable | None:
    """The Rust ``ScanTable`` of `scanner` (its ``run`` is ``scanner.run``), or None without
    the kernels. The walk kernel shares its transitions (`make_mask_runners`)."""
    if _kernels is None:
        return None
    # Native-endian int32 bytes: the cheapest way to hand the table to Rust.
    return _kernels.ScanTable(scanner.transitions.tobytes(), _accepting(scanner))


def _accepting(scanner: ScannerAutomaton) -> bytes:
    return bytes(1 if mask else 0 for mask in scanner.accept_mask)


# The context-independent walk from a configuration below a trie node, with its CI tokens
# (`gridrail.mask.walk`: `walk_context_independent` then `ci_tokens`).
WalkRunner = Callable[["Configuration", int], "tuple[WalkResult, bytes | array]"]
# The CD residue of a walk from a configuration: the tokens its live stack admits, frozen
# (`gridrail.mask.compute._cd_residue`); None near the stack bound, where the reference decides.
ResidueRunner = Callable[["Configuration", "WalkResult"], "bytes | array | None"]


# Walks below CD nodes the residue kernel keeps per guide (the reference reads them from T1),
# and its other facts: entries per table, and bytes of walks. 4,096 entries were emptied twice
# by bench/statements.sql's replays on qwen2 (walks computed again on the held-out half: 4,758
# of 79,100 asked; 1,505 at 16,384 entries or more); each table's entries take ~100-200 bytes
WALKS_BELOW, WALKS_BELOW_BYTES = 16384, 32 << 20


class KernelTables(NamedTuple):
    """What the Rust walk and residue read of one oracle and trie."""

    scanner: object  # WalkScanner
    trie: object  # TrieTable
    lr: object  # LrTable
    ignored: bytes  # the ignored terminals as uint64 words
    start_scan: int
    words: int  # uint64 words per terminal set
    # what a walk reads of the base scanner's states beyond their rows (`shared_walks`): per
    # base state its live terminals, then per base state its accepted ones (top class)
    base_sets: bytes


def kernel_tables(oracle: Oracle, trie: TokenTrie) -> KernelTables:
    """The Rust tables of `oracle`'s scanner and LR machine and of `trie` (kernels enabled)."""
    assert _kernels is not None
    compiled = oracle.compiled
    words = (len(compiled.grammar.terminals) + 63) // 64
    scan_table, labels = compiled.scanner.kernel_table, compiled.scanner.labels
    assert scan_table is not None and labels is not None  # every scanner has them
    live = _words_per_state(labels.index, labels.live, words)
    top = _words_per_state(labels.index, [compiled.top_class(a) for a in labels.accept], words)
    scanner = _kernels.WalkScanner(scan_table, words, live, top)
    base_rows = _base_of(compiled.scanner).num_states * words * 8
    table = _kernels.TrieTable(
        trie.edge_byte.tobytes(),
        trie.depth.tobytes(),
        trie.subtree_size.tobytes(),
        trie.token_id.tobytes(),
        {node: list(ids) for node, ids in trie.aliases.items()},
    )
    tables = compiled.tables
    limit = oracle.lr.stack_limit  # `make_mask_runners` keeps a bound with near_load < 0 out
    bound = (list(limit.weights), int(limit.near_load)) if limit.bounded else None
    lr = _kernels.LrTable(
        list(tables.action), list(tables.goto), list(tables.productions), tables.end, words, bound
    )
    ignored = _words_of(oracle.ignored_mask, words)
    base_sets = live[:base_rows] + top[:base_rows]
    return KernelTables(scanner, table, lr, ignored, compiled.scanner.start, words, base_sets)


def _base_of(scanner: ScannerAutomaton) -> ScannerAutomaton:
    return scanner if scanner.base is None else scanner.base


def shared_walks(
    scanner: ScannerAutomaton, tables: KernelTables, trie: TokenTrie, vocab_size: int
) -> SharedWalks:
    """The store of walks from `scanner`'s base states (the residue's walks below CD nodes,
    and the walk's subtrees below the nodes where a lexeme leaves the names), shared by every
    scanner built on the same base (every schema of a dialect and role) whose base states read
    the same terminal sets (`tables.base_sets`: the live sets, and the accepted top classes,
    which the compiled grammar decides), over one trie. Those walks read no name
    (`SharedWalks` in src/below.rs), so another schema's are the ones this one would
    compute."""
    assert _kernels is not None
    base = _base_of(scanner)
    key = ("walks below", trie.fingerprint, vocab_size, tables.base_sets)
    found = base.derived.get(key)
    if found is None:  # racing threads may both make one; the first kept is used by all
        made = _kernels.SharedWalks(base.num_states, WALKS_BELOW, WALKS_BELOW_BYTES)
        found = base.derived.setdefault(key, made)
    return found  # type: ignore[return-value]


class MaskRunners(NamedTuple):
    walk: WalkRunner
    residue: ResidueRunner | None  # None: the reference, which reads the guide's walk caches
    walks_below: WalkMemo | None = None  # the residue's memo (`counts()`); None: the reference


def make_mask_runners(oracle: Oracle, trie: TokenTrie, vocab_size: int) -> MaskRunners:
    """The two halves of a mask: the walk (Rust ``WalkScanner.walk``, one call per walk with
    the GIL released, or the reference `walk_context_independent` then `ci_tokens`) and the CD
    residue (Rust ``cd_residue``, one call per residue, or None for the reference). The Rust
    halves keep the walks from the role's base scanner in the store every schema of the role
    shares (`shared_walks`)."""
    from gridrail.mask.bitmask import FROZEN_IDS_BELOW
    from gridrail.mask.walk import WalkResult, ci_tokens, walk_context_independent

    limit = oracle.lr.stack_limit
    if _kernels is None or (limit.bounded and limit.near_load < 0):  # (every stack is near it)

        def reference(cfg: Configuration, root: int) -> tuple[WalkResult, bytes | array]:
            walk = walk_context_independent(oracle, trie, cfg, root)
            return walk, ci_tokens(trie, vocab_size, walk)

        return MaskRunners(reference, None)
    rust = _kernels  # these runners keep the kernels they were built with
    tables = kernel_tables(oracle, trie)
    scanner, table, lr, ignored_words, start_scan, words, _ = tables
    ignored = oracle.ignored_mask
    shared = shared_walks(oracle.compiled.scanner, tables, trie, vocab_size)
    memo = rust.WalkMemo(WALKS_BELOW, WALKS_BELOW_BYTES, shared)
    # a walk leaves names only in a scanner that has them
    splice = None if oracle.compiled.scanner.base is None else shared

    def walk(cfg: Configuration, root: int) -> tuple[WalkResult, bytes | array]:
        # the reference's normalization: the pending length as 0 or 1, no tail without accept
        accepted = cfg.accept_state >= 0
        v = _words_of(oracle.allowed_mask(cfg) | ignored, words)
        nodes, tokens, dense, classes, kept = scanner.walk(
            table, cfg.scan_state, min(cfg.lexeme_length, 1), cfg.accept_state,
            cfg.tail if accepted else b"", v, root, vocab_size, splice,
        )  # fmt: skip
        ci_nodes = array("I")
        ci_nodes.frombytes(nodes)
        cd = tuple(classes)  # `CDClass` tuples: (node, scan, lexeme length, accept, tail)
        if dense:
            return WalkResult(ci_nodes, cd, kept), tokens
        ids = array("I")
        ids.frombytes(tokens)
        return WalkResult(ci_nodes, cd, kept), ids

    def residue(cfg: Configuration, walked: WalkResult) -> bytes | array | None:
        found = rust.cd_residue(
            memo, scanner, lr, table, ignored_words, start_scan, cfg.stack.states(), cfg.scan_state,
            cfg.lexeme_length, cfg.accept_state, cfg.tail,
            walked.cd_classes if walked.kernel_classes is None else walked.kernel_classes,
            vocab_size,
            FROZEN_IDS_BELOW,
        )  # fmt: skip
        if found is None:  # near the stack bound: the reference's
            return None
        tokens, dense = found
        if dense:  # as `TokenSet.frozen` encodes a set
            return tokens
        ids = array("I")
        ids.frombytes(tokens)
        return ids

    return MaskRunners(walk, residue, memo)


def _words_of(mask: int, words: int) -> bytes:
    """A terminal bit set as `words` native-endian uint64 words."""
    data = mask.to_bytes(words * 8, "little")
    if sys.byteorder == "little":
        return data
    values = array("Q", data)
    values.byteswap()
    return values.tobytes()


def _words_per_state(index: np.ndarray, masks: Sequence[int], words: int) -> bytes:
    """Per state the terminal set of its group (`ScannerLabels`: `index` numbers the group,
    `masks` holds each group's set) as `words` words, one row per state."""
    spelled = b"".join(_words_of(mask, words) for mask in masks)
    return np.frombuffer(spelled, np.uint64).reshape(len(masks), words)[index].tobytes()


def slot_scanner(
    table: ScanTable | None, slot_scan: SlotScan, shapes: TokenShapes, width: int
) -> SlotScanner | None:
    """Rust ``SlotScanner`` of `slot_scan` over `shapes`' tokens (their first `width` bytes),
    sharing the scanner's kernel `table`; None without the kernels (`SlotScan.reference_scan`
    runs)."""
    if _kernels is None or table is None:
        return None
    flags = [np.asarray(f, dtype=np.uint8).tobytes() for f in
             (slot_scan.layout, slot_scan.slot_accept, slot_scan.slot_live)]  # fmt: skip
    token_bytes = np.ascontiguousarray(shapes.bytes, dtype=np.uint8).tobytes()
    lengths = np.asarray(shapes.lengths, dtype=np.uint32).tobytes()
    return _kernels.SlotScanner(table, *flags, slot_scan.start, width, token_bytes, lengths)


def name_rows(base: ScannerAutomaton, name_sets: Sequence[NameSet], bound: int) -> NameRows:
    """Rust ``name_rows``: `gridrail.grammar.scanner._name_rows`'s result, its table the
    scanner's Rust ``ScanTable`` (OverflowError past `bound` states). Only with
    KERNELS_ENABLED."""
    assert _kernels is not None
    slots = [names.kernel_automaton for names in name_sets]
    table, parts = _kernels.name_rows(
        base.transitions.tobytes(), base.start, _accepting(base), slots, bound
    )
    base_of, accepted, alive = array("i"), array("Q"), array("Q")
    for values, data in zip((base_of, accepted, alive), parts, strict=True):
        values.frombytes(data)
    return table, base_of, accepted, alive


def name_automaton(names: NameSet) -> NameAutomatonKernel:
    """Rust ``NameAutomaton`` of `names` (`NameSet.automaton`'s twin). Only with
    KERNELS_ENABLED."""
    assert _kernels is not None
    return _kernels.NameAutomaton(*_name_set_args(names))


def names_outside(names: NameSet, dfa: ByteDFA) -> str | None:
    """Rust ``NameAutomaton.outside``: `NameAutomaton.outside`'s result. Only with
    KERNELS_ENABLED."""
    witness = names.kernel_automaton.outside(_dfa_args(dfa))
    return None if witness is None else witness.decode("utf-8", "backslashreplace")


def canonical_order(scanner: ScannerAutomaton, root: int) -> list[int]:
    """`scanner.canonical_order(root)`: Rust ``ScanTable.canonical_order`` or the reference."""
    if scanner.kernel_table is None:
        return scanner.canonical_order(root)
    return array("I", scanner.kernel_table.canonical_order(root)).tolist()


def literal_alternation(exact: Sequence[str], folded: Sequence[str]) -> str:
    """Rust ``literal_alternation``: `NameSet.literal_options` joined by ``|``. Only with
    KERNELS_ENABLED."""
    assert _kernels is not None
    return _kernels.literal_alternation(exact, folded)


def canonical_json(doc: object, sort_keys: bool) -> str | None:
    """Rust ``canonical_json``: `gridrail.canonical.canonical_json`'s text, or None for a
    document with a value it leaves to Python's encoder (or without the extension)."""
    return None if _kernels is None else _kernels.canonical_json(doc, sort_keys)


def distinct_spellings(texts: Sequence[str], fold: bool) -> tuple[str, ...] | None:
    """Rust ``distinct_spellings``: `gridrail.grammar.names.distinct_spellings`'s result, or
    None for a text with a lone surrogate, left to Python (or without the extension)."""
    return None if _kernels is None else _kernels.distinct_spellings(texts, fold)


def union_scanner(
    parts: Sequence[tuple[int, ByteDFA]], max_states: int, max_work: int
) -> UnionRows | None:
    """Rust ``union_scanner``: `gridrail.grammar.scanner._union_scanner`'s result (None past
    the bounds). Only with KERNELS_ENABLED."""
    assert _kernels is not None
    args = [(index, _dfa_args(dfa)) for index, dfa in parts]
    built = _kernels.union_scanner(args, max_states, max_work)
    if built is None:
        return None
    table, accepts, live = built
    transitions = array("i")
    transitions.frombytes(table)
    return transitions, [frozenset(s) for s in accepts], [frozenset(s) for s in live]


def lalr_tables(coded: _CodedGrammar) -> LalrRows | None:
    """Rust ``lalr_tables``: `gridrail.grammar.lalr.build_lalr`'s kernels, goto and action rows
    over `coded` (as `LalrTables` holds them); None when the grammar is not LALR(1). Only with
    KERNELS_ENABLED."""
    assert _kernels is not None
    return _kernels.lalr_tables(
        coded.n_terminals, len(coded.nonterminal_names), coded.lhs, coded.rhs, coded.start_code
    )


def spell_forms(
    words: Sequence[str],
    style: tuple[str, str, bool],
    dfa: ByteDFA,
    shadows: Sequence[ByteDFA],
) -> tuple[bytes, list[str]]:
    """Rust ``spell_forms``: `gridrail.policy.lexicon._spelled`'s result for the quote style
    (open, close, doubles). Only with KERNELS_ENABLED."""
    assert _kernels is not None
    open_, close, doubles = style
    shadow_args = [_dfa_args(shadow) for shadow in shadows]
    return _kernels.spell_forms(words, open_, close, doubles, _dfa_args(dfa), shadow_args)


def _name_set_args(names: NameSet) -> tuple[tuple[str, ...], tuple[str, ...], tuple | None]:
    suffix = names.suffix_dfa
    return names.exact, names.folded, None if suffix is None else _dfa_args(suffix)


def _dfa_args(dfa: ByteDFA) -> tuple[int, bytes, bytes]:
    return dfa.start, dfa.transitions.tobytes(), bytes(dfa.accepting)

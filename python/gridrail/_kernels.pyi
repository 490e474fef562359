"""Types of the Rust extension `gridrail._kernels` (src/lib.rs); each item names its Python
reference, which `gridrail.kernels` falls back to."""

from collections.abc import Sequence
from typing import final

DfaArgs = tuple[int, bytes, bytes]  # (start, int32 table bytes, accepting flag bytes)
NameSetArgs = tuple[Sequence[str], Sequence[str], DfaArgs | None]  # (exact, folded, suffix)

@final
class ScanTable:
    """`gridrail.grammar.scanner.ScannerAutomaton.run`'s table."""

    def __init__(self, transitions: bytes | list[int], accepting: bytes) -> None: ...
    @property
    def num_states(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview:
        """The transitions, read-only, as native-endian int32 bytes (format "B")."""
    def run(self, state: int, data: bytes) -> tuple[int, int, int, int]: ...
    def canonical_order(self, state: int) -> bytes:
        """`ScannerAutomaton.canonical_order`: uint32 states, native-endian."""

@final
class SlotScanner:
    """`gridrail.gamma.tokens.SlotScan` with a vocabulary's `TokenShapes`."""

    def __init__(
        self,
        table: ScanTable,
        layout: bytes,
        slot_accept: bytes,
        slot_live: bytes,
        start: int,
        width: int,
        token_bytes: bytes,
        lengths: bytes,
    ) -> None: ...
    def scan(
        self, ids: bytes, scan_state: int, may_cut_back: bool
    ) -> tuple[bytes, bytes, bytes, bytes, bytes]:
        """`SlotScan.scan` of int64 `ids`: marked, simple, closes (bytes of 0/1), final_state,
        final_start (int64), native-endian."""

@final
class NameAutomaton:
    """`gridrail.grammar.names.NameAutomaton` of a name set given as `NameSetArgs`."""

    def __init__(
        self, exact: Sequence[str], folded: Sequence[str], suffix: DfaArgs | None
    ) -> None: ...
    def outside(self, dfa: DfaArgs) -> bytes | None:
        """`gridrail.grammar.names.NameAutomaton.outside`."""

def name_rows(
    base: bytes, start: int, accepting: bytes, slots: list[NameAutomaton], bound: int
) -> tuple[ScanTable, list[bytes]]:
    """`gridrail.grammar.scanner._name_rows`: the whole table (a `ScanTable`, whose states
    accept where their base state does, `accepting`, or a slot does), then the new states' base
    states (int32), accepted and live slots (uint64), as native-endian bytes. OverflowError
    past `bound`."""

def literal_alternation(exact: Sequence[str], folded: Sequence[str]) -> str:
    """`gridrail.grammar.names.NameSet.pattern`'s alternatives joined by `|`."""

def canonical_json(doc: object, sort_keys: bool) -> str | None:
    """`gridrail.canonical.canonical_json`'s text; None where a value is left to Python."""

def distinct_spellings(texts: Sequence[str], fold: bool) -> tuple[str, ...] | None:
    """`gridrail.grammar.names.distinct_spellings`; None for a text with a lone surrogate."""

def union_scanner(
    parts: list[tuple[int, DfaArgs]], max_states: int, max_work: int
) -> tuple[bytes, list[list[int]], list[list[int]]] | None:
    """`gridrail.grammar.scanner._union_scanner`: int32 transitions, per state the terminals
    accepted and live; None past the bounds."""

def lalr_tables(
    terminals: int, nonterminals: int, lhs: Sequence[int], rhs: Sequence[Sequence[int]], start: int
) -> (
    tuple[
        tuple[tuple[tuple[int, int], ...], ...],
        tuple[dict[int, int], ...],
        tuple[dict[int, int], ...],
    ]
    | None
):
    """`gridrail.grammar.lalr.build_lalr` over the coded augmented grammar: per state its
    kernel (production, dot) items, goto row and action row; None when it is not LALR(1).
    ValueError for a grammar coded out of range."""

def spell_forms(
    words: Sequence[str],
    open: str,
    close: str,
    doubles: bool,
    dfa: DfaArgs,
    shadows: list[DfaArgs],
) -> tuple[bytes, list[str]]:
    """`gridrail.policy.lexicon._spelled`: per word 1 or 0, and the kept forms."""

@final
class TrieTable:
    """`gridrail.vocab.trie.TokenTrie`'s arrays (native-endian int32 bytes) and aliases."""

    def __init__(
        self,
        edge: bytes,
        depth: bytes,
        size: bytes,
        token_id: bytes,
        aliases: dict[int, list[int]],
    ) -> None: ...

@final
class WalkScanner:
    """The union scanner as `gridrail.mask.walk.walk_context_independent` reads it: the
    transitions of its `ScanTable` (shared, not copied) and, per state, its live terminals and
    the top shadowing class of its accepting ones as `words` native-endian uint64 words."""

    def __init__(self, table: ScanTable, words: int, live: bytes, top: bytes) -> None: ...
    def walk(
        self,
        trie: TrieTable,
        scan_state: int,
        lexeme_length: int,
        accept_state: int,
        tail: bytes,
        allowed: bytes,
        root: int,
        vocab_size: int,
        shared: SharedWalks | None = None,
    ) -> tuple[bytes, bytes, bool, list[tuple[int, int, int, int, bytes]], CdClasses]:
        """`walk_context_independent` then `ci_tokens` from a normalized scan part: (CI nodes
        as uint32 bytes, CI tokens as uint32 ids or, when `dense`, bits, dense, CD classes as
        (node, scan state, lexeme length, accept state, tail), the same classes kept for
        `cd_residue`); the walks below the nodes where a lexeme leaves the names taken from
        `shared` (the same walks)."""

@final
class CdClasses:
    """A walk's CD classes as `cd_residue` reads them (no conversion at each residue)."""

    def __len__(self) -> int: ...

@final
class LrTable:
    """`gridrail.grammar.lalr.LalrTables`' rows for `cd_residue`; with `bound`, the stack
    bound's per-state weights and the load above which a shift is left to the reference
    (`gridrail.parse.depth.StackLimit`)."""

    def __init__(
        self,
        action: list[dict[int, int]],
        goto: list[dict[int, int]],
        productions: list[tuple[int, int]],
        end: int,
        words: int,
        bound: tuple[list[int], int] | None = None,
    ) -> None: ...

@final
class SharedWalks:
    """The walks below a trie node from states numbered below `base_states` (a base
    scanner's), shared by the `WalkMemo`s and the `WalkScanner.walk` calls given it (bounded):
    `src/below.rs`."""

    def __init__(self, base_states: int, capacity: int, max_bytes: int) -> None: ...
    def __len__(self) -> int: ...
    def counts(self) -> tuple[int, int]:
        """(walks asked of this store by every walk and memo sharing it, walks computed)."""

@final
class WalkMemo:
    """What `cd_residue` keeps across calls for one guide (bounded); the walks from base
    states in `shared` when given."""

    def __init__(
        self, capacity: int, max_bytes: int, shared: SharedWalks | None = None
    ) -> None: ...
    def __len__(self) -> int: ...
    def counts(self) -> tuple[int, int]:
        """(walks below CD nodes asked for, walks computed) by this memo's residues since it
        was made, in its own store and in the shared one."""

def cd_residue(
    memo: WalkMemo,
    scanner: WalkScanner,
    lr: LrTable,
    trie: TrieTable,
    ignored: bytes,
    start_scan: int,
    stack: list[int],
    scan_state: int,
    lexeme_length: int,
    accept_state: int,
    tail: bytes,
    classes: CdClasses | list[tuple[int, int, int, int, bytes]],
    vocab_size: int,
    ids_below: int,
) -> tuple[bytes, bool] | None:
    """`gridrail.mask.compute._cd_residue`: the tokens of the CD `classes` that the live
    configuration (its stack's states bottom to top, its pending lexeme) admits — uint32 ids
    when fewer than `ids_below`, else (dense) bits; None where a shift lands near the stack
    bound (the reference decides there)."""

def write_mask_row(bitmask: object, row: object, bits: bytearray) -> bool:
    """`gridrail.mask.bitmask.TokenSet.write_row` with `gridrail.guide.Matcher.fill_bitmask`'s
    checks: copies `bits` into row `row` of a writable 2-D native int32 buffer whose rows are
    `len(bits)` bytes, `row` an int inside it; False (nothing written) for anything else."""

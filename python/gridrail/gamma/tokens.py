"""Which tokens Γ must read: a vectorized scan of the vocabulary that finds the tokens whose
lexemes can be names at a slot, so the binder reads only those (the rest keep their verdict of
L, which Γ cannot change).

Γ refuses a token only for a lexeme of a slot terminal (a name, or a keyword Γ refuses): one the
token ends (its winner is that terminal, so the terminal is in the accept set where the lexeme
ends) or leaves pending (the terminal is in the live set of the scanner state it reaches, or
in the accept set of a state the lexeme passed, where it may be cut back). The scan
runs the union scanner over every candidate token at once, with maximal munch (a byte that
kills the lexeme ends it and starts the next one), and marks a token when some lexeme it
touches has a slot terminal in those sets. A token it cannot follow exactly this way — a lexeme
cut back to an earlier accept (bytes rescanned), a token longer than the scan — is marked too:
marking more only costs time, never exactness.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from gridrail.kernels import slot_scanner
from gridrail.vocab.vocabulary import Vocabulary

if TYPE_CHECKING:
    from gridrail._kernels import ScanTable, SlotScanner

WIDTH = 32  # bytes scanned per token; longer tokens are always read by the binder
# Bytes a name at a slot is made of (identifier characters, quotes, any non-ASCII byte).
_NAME_BYTES = frozenset(b'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$"`[')


class TokenShapes:
    """Per-vocabulary facts the Γ filter reads (built once per guide)."""

    def __init__(self, vocab: Vocabulary):
        size = vocab.size
        plain = np.ones(size, dtype=bool)
        has_from = np.zeros(size, dtype=bool)
        has_paren = np.zeros(size, dtype=bool)
        self.spellings: list[bytes | None] = [vocab.token_bytes(t) for t in range(size)]
        self.lengths = np.zeros(size, dtype=np.int64)
        self.bytes = np.zeros((size, WIDTH), dtype=np.uint8)  # each token's first bytes
        for token_id, spelling in enumerate(self.spellings):
            if spelling is None:
                continue
            plain[token_id] = all(b < 0x80 and b not in _NAME_BYTES for b in spelling)
            lowered = spelling.lower()
            has_from[token_id] = b"from" in lowered
            has_paren[token_id] = b"(" in spelling
            self.lengths[token_id] = len(spelling)
            head = spelling[:WIDTH]
            self.bytes[token_id, : len(head)] = list(head)
        self.plain = plain
        self.has_from = has_from  # may it hold a FROM keyword (case ignored)
        self.has_paren = has_paren  # does it hold a `(` (in a FROM clause: a join may open)
        self._rests: dict[bool, tuple[dict[bytes, list[int]], ...]] = {}

    def pending_lexemes(self, ids: np.ndarray, starts: np.ndarray, pending: bytes) -> list[bytes]:
        """The lexeme each token of `ids` leaves pending: its bytes from its start on, or
        (start -1) `pending` grown by all of them."""
        spellings = self.spellings
        return [
            spellings[t][s:] if s >= 0 else pending + spellings[t]  # type: ignore[index,operator]
            for t, s in zip(ids.tolist(), starts.tolist(), strict=True)
        ]

    def by_rest(self, start: int, fold: bool) -> dict[bytes, list[int]]:
        """The tokens longer than `start` (0 or 1) bytes, by their bytes from `start` on (ASCII
        case folded with `fold`): the Γ filter looks up the few lexemes a slot allows instead
        of reading every token. Both starts are indexed in one pass on first use, then
        published whole."""
        found = self._rests.get(fold)
        if found is None:
            found = ({}, {})
            for token_id, spelling in enumerate(self.spellings):
                if spelling is None:
                    continue
                key = spelling.lower() if fold else spelling
                found[0].setdefault(key, []).append(token_id)
                if len(key) > 1:
                    found[1].setdefault(key[1:], []).append(token_id)
            self._rests[fold] = found
        return found[start]

    def enter_from(self, ids: np.ndarray, pending: bytes) -> np.ndarray:
        """For each token of `ids` written after the `pending` bytes: may a FROM keyword end
        within it (then the FROM clause opens inside the token)?"""
        out = self.has_from[ids].copy()
        if pending[-4:].lower() == b"from":  # the keyword is written: the next byte ends it
            out[:] = True
            return out
        tail = pending[-3:].lower()
        rests = [b"from"[k:] for k in (1, 2, 3) if tail.endswith(b"from"[:k])]
        if rests:
            for position, token_id in enumerate(ids.tolist()):
                spelling = self.spellings[token_id]
                if spelling and spelling.lower().startswith(tuple(rests)):
                    out[position] = True
        return out


class Scan(NamedTuple):
    """What the scan found, per token of the ids it was given."""

    marked: np.ndarray  # may a lexeme of it be a slot terminal (or could the scan not tell)
    simple: np.ndarray  # its lexemes: at most the pending one ended at its first byte, then
    # only ignored ones (layout), then the one it leaves pending
    closes: np.ndarray  # (simple) its first byte ends the pending lexeme
    final_state: np.ndarray  # scanner state of the lexeme it leaves pending
    final_start: np.ndarray  # where that lexeme starts in the token (-1: the pending one grows)


class FilterPlan(NamedTuple):
    """What the Γ filter reads of one language mask at one scan part (`plan_filter`): the
    tokens it judges by the lexeme they leave pending, in groups (`keys[i]`: the group's final
    scanner state * 2 + whether the token's first byte ends the pending lexeme; its tokens
    `members[bounds[i]:ends[i]]`, their lexemes starting at `starts`), and the tokens the
    binder reads whole (`read`). The other tokens of the mask keep their verdict of L.
    `sides[closes]`: the keys of the groups that end the pending lexeme (or not) and their
    scanner states, which are judged from one Γ at once."""

    members: np.ndarray
    starts: np.ndarray
    keys: list[int]
    bounds: list[int]
    ends: list[int]
    read: list[int]
    sides: tuple[tuple[list[int], list[int]], tuple[list[int], list[int]]]

    @property
    def nbytes(self) -> int:
        """About what the plan holds (the size a memo of plans declares)."""
        listed = 2 * len(self.keys) + len(self.bounds) + len(self.ends) + len(self.read)
        return self.members.nbytes + self.starts.nbytes + 32 * listed


def plan_filter(
    shapes: TokenShapes,
    slot_scan: SlotScan,
    ids: np.ndarray,
    scan_state: int,
    cut_back: bool,
    *,
    closing: bool,
    joining: bool,
    owes: bool,
    pending: bytes,
) -> FilterPlan:
    """The Γ filter's plan for the mask's `ids` at `scan_state` (`cut_back`: the pending
    lexeme has bytes after an earlier accept). `closing`: the FROM clause may end too early
    anywhere, so every token is judged; `joining`: a `(` may nest a parenthesized join, so the
    tokens holding one are; `owes`: a token that opens FROM may go on inside it (after the
    `pending` bytes). Otherwise only the tokens the scan finds touching a name slot's terminal
    are judged (those with no name byte are not, unless a lexeme is pending)."""
    ids = ids[shapes.lengths[ids] > 0]  # EOS and special tokens: judged apart
    if not closing:
        kept = ~shapes.plain[ids] | bool(pending)
        ids = ids[kept | shapes.has_paren[ids] if joining else kept]
    scan = slot_scan.scan(shapes, ids, scan_state, cut_back)
    marked = scan.marked
    if closing:
        marked = np.ones(len(ids), dtype=bool)
    elif owes:
        marked = marked | shapes.enter_from(ids, pending)
    if joining:
        marked = marked | shapes.has_paren[ids]
    simple = marked & scan.simple
    groups = scan.final_state[simple] * 2 + scan.closes[simple]
    order = np.argsort(groups, kind="stable")
    unique, firsts = np.unique(groups[order], return_index=True)
    keys, bounds = unique.tolist(), firsts.tolist()
    opened = [key for key in keys if not key & 1]
    closed = [key for key in keys if key & 1]
    return FilterPlan(
        ids[simple][order],
        scan.final_start[simple][order],
        keys,
        bounds,
        [*bounds[1:], len(order)] if bounds else [],
        ids[marked & ~scan.simple].tolist(),
        ((opened, [key >> 1 for key in opened]), (closed, [key >> 1 for key in closed])),
    )


class SlotScan:
    """The union scanner as arrays, with the slot terminals' bits per state; the Rust
    ``SlotScanner`` scans where the scanner has its kernel table (`gridrail.kernels`)."""

    def __init__(
        self,
        transitions: Sequence[int],
        live: Sequence[int],
        accept: Sequence[int],
        start: int,
        slot_terminals: int,
        layout: Sequence[bool],
        kernel_table: ScanTable | None = None,
    ):
        self._transitions = transitions
        self.accepting = np.array([bool(a) for a in accept], dtype=bool)
        self.layout = np.asarray(layout, dtype=bool)  # a lexeme ending here is always ignored
        self.slot_accept = np.array([bool(a & slot_terminals) for a in accept], dtype=bool)
        self.slot_live = np.array([bool(x & slot_terminals) for x in live], dtype=bool)
        self.start = start
        self._kernel_table = kernel_table
        # the kernel of the last shapes scanned (a guide has one vocabulary, so one shapes)
        self._kernel: tuple[TokenShapes, SlotScanner | None] | None = None

    @cached_property
    def table(self) -> np.ndarray:
        """The transitions as a (states, 256) array (the reference's; the kernel shares the
        scanner's own)."""
        return np.asarray(self._transitions, dtype=np.int64).reshape(len(self.accepting), 256)

    def scan(
        self, shapes: TokenShapes, ids: np.ndarray, scan_state: int, may_cut_back: bool
    ) -> Scan:
        """Each token of `ids` scanned from `scan_state` (the pending lexeme's state);
        `may_cut_back`: the pending lexeme has bytes after an earlier accept, so a byte that
        ends it may cut it back there (every token is then marked)."""
        if self._kernel is None or self._kernel[0] is not shapes:
            self._kernel = (shapes, slot_scanner(self._kernel_table, self, shapes, WIDTH))
        kernel = self._kernel[1]
        if kernel is None:
            return self.reference_scan(shapes, ids, scan_state, may_cut_back)
        ids64 = np.ascontiguousarray(ids, dtype=np.int64).tobytes()
        *flags, states, starts = kernel.scan(ids64, scan_state, may_cut_back)
        marked, simple, closes = (np.frombuffer(f, dtype=bool) for f in flags)
        final_state, final_start = (np.frombuffer(x, dtype=np.int64) for x in (states, starts))
        return Scan(marked, simple, closes, final_state, final_start)

    def reference_scan(
        self, shapes: TokenShapes, ids: np.ndarray, scan_state: int, may_cut_back: bool
    ) -> Scan:
        """`scan` in numpy: the specification of the Rust ``SlotScanner.scan``. A pending
        lexeme at its accept that grows into a token and dies before another accept is cut
        back to where the token starts — as if the token's first byte had ended it: those
        tokens are scanned again so."""
        scan, rewinds = self._scan(shapes, ids, scan_state, may_cut_back, closed=False)
        if not rewinds.any():
            return scan
        again, _ = self._scan(shapes, ids[rewinds], scan_state, may_cut_back, closed=True)
        for mine, theirs in zip(scan, again, strict=True):
            mine[rewinds] = theirs
        return scan

    def _scan(
        self,
        shapes: TokenShapes,
        ids: np.ndarray,
        scan_state: int,
        may_cut_back: bool,
        closed: bool,
    ) -> tuple[Scan, np.ndarray]:
        """The lockstep scan; `closed`: every token's first byte ends the pending lexeme.
        Also which tokens' pending lexeme is cut back to where they start (`reference_scan`)."""
        count = len(ids)
        lengths = shapes.lengths[ids]
        data = shapes.bytes[ids]
        state = np.full(count, scan_state, dtype=np.int64)
        start_at = np.full(count, -1, dtype=np.int64)
        # Has the lexeme in progress passed a state where a slot terminal ends (it may be cut
        # back there, by rule (ii) of the oracle, however the token's last bytes read)?
        seen = np.full(count, self.slot_accept[scan_state] or self.slot_live[scan_state])
        marked = (lengths > WIDTH) | may_cut_back  # a cut-back pending lexeme: not followed here
        simple = ~marked
        closes = np.zeros(count, dtype=bool)
        # the pending lexeme's last accept is where the token starts, and none of its bytes
        # has reached another one yet
        rewinds = np.full(count, bool(self.accepting[scan_state]) and not may_cut_back)
        cut_to_start = np.zeros(count, dtype=bool)
        table = self.table
        for i in range(min(WIDTH, int(lengths.max(initial=0)))):
            active = i < lengths
            byte = data[:, i]
            nxt = table[state, byte]
            if i == 0 and closed:
                nxt[:] = -1
            dead = active & (nxt < 0)
            if i > 0:
                cut_to_start |= dead & (start_at == -1) & rewinds & ~self.accepting[state]
            if dead.any():
                # The lexeme ends at this byte. Where its state does not accept, it would be
                # cut back and rescanned: not followed here (marked). Else its accept set says
                # what it can be; only layout may end after the first byte of a simple token.
                cut_back = dead & ~self.accepting[state]
                marked |= cut_back | (dead & self.slot_accept[state])
                if i == 0:
                    closes |= dead
                    simple &= ~cut_back
                else:
                    simple &= ~dead | self.layout[state]
                restart = table[self.start, byte]
                marked |= dead & (restart < 0)
                simple &= ~(dead & (restart < 0))
                start_at = np.where(dead, i, start_at)
                seen &= ~dead
                nxt = np.where(dead, restart, nxt)
            state = np.where(active & (nxt >= 0), nxt, state)
            rewinds &= (start_at != -1) | ~self.accepting[state]
            seen |= active & self.slot_accept[state]
        marked |= (self.slot_live[state] | seen) & (lengths > 0)
        return Scan(marked, simple, closes, state, start_at), cut_to_start

"""The viable-prefix oracle (paper §3): feed bytes, ask what may come next and whether we may stop.

A configuration is (stack, scan state). The scan state is the union-scanner DFA state over the
lexeme in progress, the DFA state at its last accepting position, and the bytes after that position
(requeued on emission). Every field is bounded by the current lexeme or the stack, never by the
output length, and a configuration is immutable: forking one is copying a reference.

Semantics (docs/semantics.md): maximal munch over all terminals; the lexeme becomes the
first-defined terminal of its top shadowing class that is in V = A(stack) ∪ ignored; bytes after
the emitted lexeme are rescanned under the new stack.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from gridrail.errors import ParseError, UsageError
from gridrail.grammar.compiled import CompiledGrammar
from gridrail.parse.depth import StackLimit
from gridrail.parse.lr import LRMachine
from gridrail.parse.stack import StackNode, root

# Entries `Oracle._close_at_last_accept` keeps before starting over (each holds one stack node
# and one small configuration; thousands are met per mask, a few hundred distinct).
CLOSINGS_BOUND = 1 << 16
_NOT_YET = object()


class _ConfigurationFields(NamedTuple):
    stack: StackNode
    scan_state: int  # union-scanner state after the pending lexeme (the start state if none)
    lexeme_length: int  # bytes in the pending lexeme (0: at a lexeme boundary)
    accept_state: int  # scanner state at the last allowed accept, -1 if none yet
    tail: bytes  # pending bytes after the last allowed accept (all of them if none)
    mask_key: tuple[StackNode, int, bool, int, bytes]  # derived from the five above


class Configuration(_ConfigurationFields):
    """κ = (σ, ρ): the parser stack and the scan state of the lexeme in progress. A value (stack
    nodes are interned, so compared and hashed by identity): a tuple, because every mask and
    advance memo hashes it, and a tuple hashes and compares in C.

    Made from its five fields; `mask_key` is derived from them: what the mask at the
    configuration depends on — the stack and the scan part a walk reads (the pending length
    only as zero or not, the bytes after the last accept only after one). The guide keeps masks
    under it, so the configurations inside one long lexeme share one entry."""

    __slots__ = ()

    def __new__(
        cls, stack: StackNode, scan_state: int, lexeme_length: int, accept_state: int, tail: bytes
    ) -> Configuration:
        accepted = accept_state >= 0
        key = (stack, scan_state, lexeme_length > 0, accept_state, tail if accepted else b"")
        return tuple.__new__(cls, (stack, scan_state, lexeme_length, accept_state, tail, key))

    def __getnewargs__(self) -> tuple[StackNode, int, int, int, bytes]:
        return self[:5]

    @classmethod
    def _make(cls, fields: Iterable[object]) -> Configuration:
        return cls(*fields)  # the five fields: the key is derived again

    def _replace(self, **changes: object) -> Configuration:
        fields = dict(zip(self._fields[:5], self[:5], strict=True))
        fields.update(changes)
        return Configuration(**fields)  # type: ignore[arg-type]


class Oracle:
    """Incremental parser + contextual scanner over one compiled grammar."""

    def __init__(self, compiled: CompiledGrammar):
        self.compiled = compiled
        grammar = compiled.grammar
        declared = frozenset(grammar.terminal(name).index for name in grammar.declared)
        limit = StackLimit.of(compiled.tables, grammar.stack_bound, declared)
        self.lr = LRMachine(compiled.tables, limit)
        scanner = compiled.scanner
        self._trans = scanner.transitions
        self._run = scanner.fast_run
        self._live = scanner.live_mask
        self._accept = scanner.accept_mask
        self._start_scan = scanner.start
        self._ignored = self.ignored_mask = compiled.ignored_mask
        self._winner_memo: dict[tuple[int, int], int] = {}
        self._num_scan_states = scanner.num_states
        self._after_kill_memo: dict[int, tuple[int, tuple[int, ...]]] = {}
        self._closings: dict[tuple[StackNode, int, bytes], Configuration | None] = {}
        self.initial = Configuration(root(compiled.tables.start_state), scanner.start, 0, -1, b"")

    # -- what may come next
    def allowed_mask(self, cfg: Configuration) -> int:
        """Terminals that can be shifted at the next lexeme boundary (A(σ), without ignored)."""
        return self.lr.allowed_mask(cfg.stack)

    def allowed_terminals(self, cfg: Configuration) -> tuple[str, ...]:
        return self.compiled.names_of(self.allowed_mask(cfg))

    def pending_terminals(self, cfg: Configuration) -> tuple[str, ...]:
        """Terminals of V the pending lexeme can still become (empty at a boundary)."""
        if cfg.lexeme_length == 0:
            return ()
        v = self.lr.allowed_mask(cfg.stack) | self._ignored
        return self.compiled.names_of(self._live[cfg.scan_state] & v)

    def complete_as(self, cfg: Configuration) -> str | None:
        """The terminal the pending lexeme would be if it ended here (None if it cannot)."""
        if not cfg.lexeme_length or cfg.tail or cfg.accept_state < 0:
            return None
        winner = self._winner(cfg.accept_state, self.lr.allowed_mask(cfg.stack) | self._ignored)
        return None if winner < 0 else self.compiled.terminal_names[winner]

    def scanner_tables(self) -> tuple[Sequence[int], Sequence[int], Sequence[int]]:
        """(transitions, live masks, accept masks) of the union scanner, for tight loops."""
        return self._trans, self._live, self._accept

    def winner_in(self, accept_state: int, allowed: int) -> int:
        """The terminal a lexeme ending at `accept_state` becomes under `allowed` (-1: none)."""
        return self._winner(accept_state, allowed)

    def step(self, cfg: Configuration, byte: int) -> Configuration | None:
        """One byte: the next configuration, or None if the prefix stops being viable."""
        nxt = self._scan_byte(cfg, byte)
        return nxt if nxt is not None and self.is_viable(nxt) else None

    # -- feeding
    def feed(self, cfg: Configuration, data: bytes) -> Configuration:
        """Feed bytes; ParseError (with the offset into `data`) at the first byte after which the
        input is no longer a viable prefix."""
        _require_bytes(data)
        last, failed_at = self._advance(cfg, data)
        if failed_at >= 0:
            byte = data[failed_at : failed_at + 1]
            raise ParseError(
                f"byte {failed_at} ({byte!r}) cannot continue the input{self.bound_note(last)}",
                failed_at,
                self._expected(last),
            )
        return last

    def bound_note(self, cfg: Configuration) -> str:
        """Why terminals are missing at `cfg` when the stack bound refuses them ("" if it
        refuses none): the statement nests as deep as the dialect's parser holds."""
        refused = self.lr.refused_by_bound(cfg.stack)
        if not refused:
            return ""
        names = ", ".join(self.compiled.names_of(refused)[:6])
        limit = self.lr.stack_limit.limit
        return (
            f" (the statement nests as deep as the dialect's parser holds — stack bound {limit}"
            f" — so {names} may not come here)"
        )

    def try_feed(self, cfg: Configuration, data: bytes) -> Configuration | None:
        """Like `feed`, returning None instead of raising."""
        _require_bytes(data)
        last, failed_at = self._advance(cfg, data)
        return None if failed_at >= 0 else last

    def _advance(self, cfg: Configuration, data: bytes) -> tuple[Configuration, int]:
        """(final configuration, -1), or (last good configuration, offset of the bad byte)."""
        offset, end = 0, len(data)
        while offset < end:
            cfg, offset = self._advance_within_lexeme(cfg, data, offset)
            if offset == end:
                break
            nxt = self.step(cfg, data[offset])
            if nxt is None:
                return cfg, offset
            cfg = nxt
            offset += 1
        return cfg, -1

    def _advance_within_lexeme(
        self, cfg: Configuration, data: bytes, offset: int
    ) -> tuple[Configuration, int]:
        """Take, in one scanner-kernel call, the bytes that extend the pending lexeme while it
        stays viable by rule (i). Live sets only shrink along a DFA path, so rule (i) at the
        last state holds at every state before it; otherwise the byte-by-byte path decides."""
        chunk = data[offset:]
        state, consumed, accept_end, accept_state = self._run(cfg.scan_state, chunk)
        if not consumed:
            return cfg, offset
        v = self.lr.allowed_mask(cfg.stack) | self._ignored
        if not self._live[state] & v:
            return cfg, offset
        length = cfg.lexeme_length + consumed
        if accept_end > 0:
            cfg = Configuration(cfg.stack, state, length, accept_state, chunk[accept_end:consumed])
        else:
            cfg = Configuration(
                cfg.stack, state, length, cfg.accept_state, cfg.tail + chunk[:consumed]
            )
        return cfg, offset + consumed

    def is_viable(self, cfg: Configuration) -> bool:
        """The per-byte check of docs/semantics.md: (i), or (ii) with one lexeme-ending byte.
        (`feed` applies it after every byte, which makes viability prefix-closed.)"""
        if self._passes_rule_i(cfg):  # (a reduced grammar's LR stack always has a completion)
            return True
        if cfg.accept_state < 0:
            return False
        # (ii) Only an emission at the last accept can save it: one byte that ends the lexeme
        # must leave a pending lexeme that passes (i). Every such byte first emits and rescans
        # the same tail, so that part is done once.
        after_tail = self._close_at_last_accept(cfg)
        if after_tail is None:
            return False
        # A killing byte the rescanned state takes leaves a lexeme that passes (i) iff its live
        # set meets V: all of them at once are one AND with their union. Only bytes that kill
        # the rescanned lexeme too need the stack again (a second emission).
        reach, dying = self._after_kill(cfg.scan_state, after_tail.scan_state)
        if reach & (self.lr.allowed_mask(after_tail.stack) | self._ignored):
            return True
        if after_tail.accept_state < 0:  # such a byte rejects: nothing to emit
            return False
        for byte in dying:
            nxt = self._scan_byte(after_tail, byte)
            if nxt is not None and self._passes_rule_i(nxt):
                return True
        return False

    def _passes_rule_i(self, cfg: Configuration) -> bool:
        if cfg.lexeme_length == 0:
            return True
        return bool(self._live[cfg.scan_state] & (self.lr.allowed_mask(cfg.stack) | self._ignored))

    def _scan_byte(self, cfg: Configuration, byte: int) -> Configuration | None:
        """Advance the union DFA by one byte, emitting when it dies; None on a rejection.
        (A loop: each emission leaves a shorter pending lexeme for the byte to try again.)"""
        while True:
            q = self._trans[cfg.scan_state * 256 + byte]
            if q >= 0:
                return self._extended(cfg, q, byte)
            if cfg.accept_state < 0:
                return None
            closed = self._close_at_last_accept(cfg)
            if closed is None:
                return None
            cfg = closed

    def _extended(self, cfg: Configuration, q: int, byte: int) -> Configuration:
        """The pending lexeme of `cfg` grown by `byte`, which takes the scanner to state `q`."""
        if self._accept[q]:
            return Configuration(cfg.stack, q, cfg.lexeme_length + 1, q, b"")
        tail = cfg.tail + bytes((byte,))
        return Configuration(cfg.stack, q, cfg.lexeme_length + 1, cfg.accept_state, tail)

    def _rescan(self, stack: StackNode, data: bytes) -> Configuration | None:
        """Scan requeued bytes from a lexeme boundary (they were checked when first fed).

        A lexeme that dies inside them is emitted at its last accept and the bytes after that
        are queued again, here, rather than by a nested closing: nested closings would recurse
        as deep as the tail is long."""
        cfg = Configuration(stack, self._start_scan, 0, -1, b"")
        pending, position = data, 0
        while position < len(pending):
            byte = pending[position]
            q = self._trans[cfg.scan_state * 256 + byte]
            if q >= 0:
                cfg = self._extended(cfg, q, byte)
                position += 1
                continue
            if cfg.accept_state < 0:
                return None
            emitted = self._emit(cfg.stack, cfg.accept_state)
            if emitted is None:
                return None
            pending, position = cfg.tail + pending[position:], 0
            cfg = Configuration(emitted, self._start_scan, 0, -1, b"")
        return cfg

    def _emit(self, stack: StackNode, accept_state: int) -> StackNode | None:
        """Shift the winner of a finished lexeme (None if no candidate is allowed here)."""
        v = self.lr.allowed_mask(stack) | self._ignored
        terminal = self._winner(accept_state, v)
        if terminal < 0:
            return None
        if (self._ignored >> terminal) & 1:
            return stack
        return self.lr.shift(stack, terminal)

    def _winner(self, accept_state: int, v: int) -> int:
        """The terminal the lexeme ending at this scanner state becomes under V (-1: none)."""
        key = (accept_state, v)
        winner = self._winner_memo.get(key)
        if winner is None:
            winner = self.compiled.winner(self._accept[accept_state], v)
            self._winner_memo[key] = winner
        return winner

    def _after_kill(self, killed: int, rescanned: int) -> tuple[int, tuple[int, ...]]:
        """Over the bytes that kill scanner state `killed`, scanned from state `rescanned`: the
        union of the live sets of the states they reach, and the bytes that kill `rescanned`
        too. A function of the two states (so memoized: at most one entry per state pair)."""
        key = killed * self._num_scan_states + rescanned
        found = self._after_kill_memo.get(key)
        if found is None:
            trans, live = self._trans, self._live
            killed_row, rescanned_row = killed * 256, rescanned * 256
            reach, dying = 0, []
            for byte in range(256):
                if trans[killed_row + byte] >= 0:
                    continue
                q = trans[rescanned_row + byte]
                if q >= 0:
                    reach |= live[q]
                else:
                    dying.append(byte)
            found = self._after_kill_memo[key] = (reach, tuple(dying))
        return found

    def _expected(self, cfg: Configuration) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.pending_terminals(cfg) + self.allowed_terminals(cfg)))

    # -- stopping
    def finalize(self, cfg: Configuration) -> StackNode | None:
        """Close the pending lexeme as if a byte that ends every lexeme came; None if it can't."""
        while cfg.lexeme_length:
            if cfg.accept_state < 0:
                return None
            nxt = self._close_at_last_accept(cfg)
            if nxt is None:
                return None
            cfg = nxt
        return cfg.stack

    def _close_at_last_accept(self, cfg: Configuration) -> Configuration | None:
        """Emit the pending lexeme at its last accepting position and rescan the bytes after it
        (what a lexeme-ending byte does before being scanned itself).

        A function of (stack, last accept, tail), memoized: every byte that ends the same
        lexeme on the same stack closes it the same way, and a mask steps hundreds of them.
        The memo is emptied when it reaches its bound, so it never grows with the output."""
        key = (cfg.stack, cfg.accept_state, cfg.tail)
        closed = self._closings.get(key, _NOT_YET)
        if closed is _NOT_YET:
            stack = self._emit(cfg.stack, cfg.accept_state)
            closed = None if stack is None else self._rescan(stack, cfg.tail)
            if len(self._closings) >= CLOSINGS_BOUND:
                self._closings.clear()
            self._closings[key] = closed
        return closed  # type: ignore[return-value]

    def eos_ok(self, cfg: Configuration) -> bool:
        """May the output stop here: does the pending lexeme finalize and $END reach ACCEPT?"""
        stack = self.finalize(cfg)
        return stack is not None and self.lr.accepts_end(stack)

    # -- whole inputs
    def first_error(self, data: bytes) -> int | None:
        """Offset of the first byte that makes `data` non-viable, or None if it is viable."""
        try:
            self.feed(self.initial, data)
        except ParseError as exc:
            return exc.offset
        return None

    def accepts(self, data: bytes) -> bool:
        """Is `data` a complete sentence?"""
        cfg = self.try_feed(self.initial, data)
        return cfg is not None and self.eos_ok(cfg)

    def sentence_error(self, data: bytes) -> int | None:
        """Where `data` fails to be a sentence, from one pass over it: the offset of its first
        byte that no viable prefix has, `len(data)` when it is a viable prefix that is not a
        complete sentence, None when it is one."""
        _require_bytes(data)
        last, failed_at = self._advance(self.initial, data)
        if failed_at >= 0:
            return failed_at
        return None if self.eos_ok(last) else len(data)


def _require_bytes(data: object) -> None:
    if not isinstance(data, bytes | bytearray | memoryview):
        hint = " (encode text as UTF-8 first)" if isinstance(data, str) else ""
        raise UsageError(f"the oracle reads bytes, not {type(data).__name__}{hint}")

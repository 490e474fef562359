"""Mask cache keys (paper §4.3, Definition 5) and the identifier composition rule (Prop. 6).

The context-independent part of a mask (the CI token set and the CD residue's trie roots) is a
function of the stack-free half of the configuration and of the allowed set A: the scanner
state, whether a lexeme is pending, the last accepting state and the bytes after it (requeued
on emission), and A. That tuple is the key. Two simplifications are exact: the pending lexeme's
length only matters as zero or not (nothing else reads it), and the requeued bytes only matter
once an accepting position exists (without one, ending the lexeme rejects).

At an *identifier position* — a lexicon terminal is allowed, or the pending lexeme can still
become or already is one — the walk's verdicts depend on the lexicons, so the key is of a
distinct type that carries the lexicon fingerprint. A generic verdict there would admit
forbidden names that no later check rejects (they are grammatical as identifiers), so the cache
refuses, with an exception in every build, to answer an identifier position from a generic key.

Those two are the per-grammar (T1) keys: scanner state ids are only meaningful in one scanner.
The cross-family (T2) key, `NormalFormKey`, names the same things by scanner-independent
identities so that every role language of a dialect can share it; it is generic by construction,
made only where the walk itself cannot consult a lexicon (`KeyMaker.lexicon_visible` is false:
no lexicon terminal live in the pending lexeme's state nor accepted at its last accept; see
`gridrail.mask.normal_form`). That is a weaker condition than "not an identifier position": A may
hold a lexicon terminal — inside a number or a string literal where a column could also stand,
say. T2 serves such positions soundly because the walk never crosses a lexeme boundary: every
byte that would end the pending lexeme starts a CD class, whose verdicts come from the live stack
with the reader's own scanner and whose inner walks come from the reader's own keys (identifier
keys where those positions are identifier positions). So the composition rule for T2 keys is the
guard, and the cache refuses a genN key where the walk could consult a lexicon.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from gridrail.errors import GridrailError
from gridrail.parse.oracle import Configuration, Oracle


class IdentifierCompositionError(GridrailError):
    """A generic mask entry was consulted at an identifier position (Proposition 6): the mask
    would not come from the schema lexicons. Always a bug; never silenced."""


# Keys are tuples: one is made, hashed and compared at every mask that misses the guide's
# memo, and a tuple does all three in C (a frozen dataclass's init alone cost ~1 µs). Types of
# different lengths or field types never compare equal.
class GenericKey(NamedTuple):
    scan_state: int
    pending: bool  # a lexeme is in progress
    accept_state: int  # -1: no accepting position in the pending lexeme
    tail: bytes  # bytes after the last accepting position (b"" when there is none)
    allowed: int  # A(σ) as a terminal bit mask
    root: int = 0  # the trie node the walk starts below (0: the whole vocabulary)


class IdentifierKey(NamedTuple):
    scan_state: int
    pending: bool
    accept_state: int
    tail: bytes
    allowed: int
    lexicons: str  # fingerprint of the lexicons the walk consults
    root: int = 0


MaskKey = GenericKey | IdentifierKey


class NormalFormKey(NamedTuple):
    """The genN key (paper §4.3): a T1 generic key with its scanner states replaced by what the
    walk reads of them, and the allowed set by the part of V the walk can consult."""

    state: bytes  # identity of the scanner state q: its reachable sub-automaton, labelled
    pending: bool
    accept: bytes  # identity of the last-accept state p: its accept set (b"": none)
    tail: bytes  # bytes after the last accepting position (b"" when there is none)
    viable: int  # V = A(σ) ∪ ignored, restricted to the terminals of q's sub-automaton and p
    root: int = 0


def scan_part(cfg: Configuration) -> tuple[int, bool, int, bytes]:
    """What a walk reads of `cfg`'s scan state (the keys' first fields): the scanner state,
    whether a lexeme is pending, the last accepting state, and the bytes after it if any —
    `cfg.mask_key` without the stack."""
    return cfg.mask_key[1:]


@dataclass(frozen=True)
class KeyMaker:
    """Keys for one guide: its oracle, which terminals are lexicon categories, and the
    fingerprint of their lexicons."""

    oracle: Oracle
    lexicon_terminals: int = 0  # bit mask
    lexicons: str = ""

    def is_identifier_position(self, cfg: Configuration) -> bool:
        if not self.lexicon_terminals:
            return False
        _, live, accept = self.oracle.scanner_tables()
        involved = self.oracle.allowed_mask(cfg)
        if cfg.lexeme_length:
            involved |= live[cfg.scan_state]
        if cfg.accept_state >= 0:
            involved |= accept[cfg.accept_state]
        return bool(involved & self.lexicon_terminals)

    def lexicon_visible(self, cfg: Configuration) -> bool:
        """Whether the walk from `cfg` could consult a lexicon: a lexicon terminal is live in
        the pending lexeme's scanner state (at a lexeme boundary that is the start state, where
        every terminal of the scanner is live) or accepted at its last accepting state. The
        walk reads terminals only there — live sets shrink along transitions, and the walk
        never crosses a lexeme boundary (gridrail.mask.normal_form) — so where this is false
        it reads no lexicon, whatever A holds. Where it is true a genN (T2) key must not be
        consulted; unlike `is_identifier_position`, it ignores A."""
        if not self.lexicon_terminals:
            return False
        _, live, accept = self.oracle.scanner_tables()
        seen = live[cfg.scan_state]
        if cfg.accept_state >= 0:
            seen |= accept[cfg.accept_state]
        return bool(seen & self.lexicon_terminals)

    def key(self, cfg: Configuration, root: int = 0) -> MaskKey:
        """The key of the walk from `cfg` over the trie below `root`."""
        fields = (*scan_part(cfg), self.oracle.allowed_mask(cfg))
        if self.is_identifier_position(cfg):
            return IdentifierKey(*fields, self.lexicons, root)
        return GenericKey(*fields, root)

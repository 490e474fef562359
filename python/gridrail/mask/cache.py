"""The write-back cache of context-independent walk results (paper §4.3), for both tiers: the
per-grammar T1 (`MaskEntry` under T1 keys) and the cross-family T2 (`NormalFormEntry` under
genN keys) are instances of one bounded LRU map with the same counters.

Only the stack-free part is cached — the CI nodes and the roots of the CD residue; the CD
verdicts are recomputed against the live stack at every step, so a hit can never carry a
verdict that depends on the stack. Entries are immutable and published idempotently: publishing
a different result under a key that has one means the key does not determine the walk
(OBL-KEY1 broken), which raises instead of serving either.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from gridrail.errors import GridrailError
from gridrail.lru import BoundedLRU, CacheStats
from gridrail.mask.entry import MaskEntry, NormalFormEntry
from gridrail.mask.keys import IdentifierCompositionError, IdentifierKey, MaskKey, NormalFormKey

Entry = TypeVar("Entry", MaskEntry, NormalFormEntry)


class CacheKeyConflict(GridrailError):
    """Two different walk results were published under one key (OBL-KEY1 violated)."""


class MaskCache(Generic[Entry]):
    """Least-recently-used map from mask keys to entries, bounded by entry count and by the
    payload bytes it holds (the newest entry is always kept, however large)."""

    def __init__(self, capacity: int = 65_536, capacity_bytes: int = 256 << 20):
        if capacity < 1 or capacity_bytes < 1:
            raise ValueError("the mask cache needs room for at least one entry")
        self._lru: BoundedLRU[Entry] = BoundedLRU(capacity, capacity_bytes)

    @property
    def stats(self) -> CacheStats:
        return self._lru.stats

    def get(
        self,
        key: MaskKey | NormalFormKey,
        identifier_position: bool,
        lexicon_visible: bool | None = None,
    ) -> Entry | None:
        """The cached entry for `key`, or None. The flags are decided by the caller from the
        configuration, independently of how the key was made, and each tier is held to its own:

        - a T1 key is refused where `identifier_position` holds (`KeyMaker.
          is_identifier_position`: A ∪ live ∪ accept meets the lexicon terminals) unless it is
          an `IdentifierKey` (Proposition 6);
        - a genN (T2) key needs `lexicon_visible` (`KeyMaker.lexicon_visible`: live[q] ∪
          accept[p] meets them) and is refused where it holds: that is where the walk itself
          could consult a lexicon. `identifier_position` is not held against it: where only A
          meets the lexicon terminals (a number where a column could also stand), the walk
          stays inside a pending lexeme no lexicon can be, every byte ending it starts a CD
          class, and those verdicts come from the live stack with the reader's own scanner
          and keys (gridrail.mask.normal_form) — no generic verdict about an identifier is
          served from T2.

        Both refusals are exceptions in every build, never asserts."""
        if isinstance(key, NormalFormKey):
            if lexicon_visible is None:
                raise TypeError("a genN key needs lexicon_visible, decided by the caller")
            if lexicon_visible:
                raise IdentifierCompositionError(
                    "a cross-family (genN) mask entry was consulted where the walk can consult a "
                    "lexicon: the mask would not come from the schema lexicons (Proposition 6)"
                )
        elif identifier_position and not isinstance(key, IdentifierKey):
            raise IdentifierCompositionError(
                "a generic mask entry was consulted at an identifier position: the mask would "
                "not come from the schema lexicons (Proposition 6)"
            )
        return self._lru.get(key)

    def publish(self, entry: Entry) -> Entry:
        """Store `entry` (a no-op if an entry with its id is there) and return the stored one."""
        stored = self._lru.setdefault(entry.key, entry, entry.size)
        if stored is not entry and stored.entry_id != entry.entry_id:
            raise CacheKeyConflict(
                "two different walks published under one key: entries "
                f"{stored.entry_id} and {entry.entry_id}"
            )
        return stored

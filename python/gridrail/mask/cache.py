"""The per-grammar (T1) write-back cache of context-independent walk results (paper §4.3).

Only the stack-free part is cached — the CI nodes and the roots of the CD residue; the CD
verdicts are recomputed against the live stack at every step, so a hit can never carry a
verdict that depends on the stack. Entries are immutable and published idempotently: publishing
a different result under a key that has one means the key does not determine the walk
(OBL-KEY1 broken), which raises instead of serving either.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from gridrail.errors import GridrailError
from gridrail.mask.entry import MaskEntry
from gridrail.mask.keys import IdentifierCompositionError, IdentifierKey, MaskKey


class CacheKeyConflict(GridrailError):
    """Two different walk results were published under one key (OBL-KEY1 violated)."""


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    entries: int = 0


class MaskCache:
    """Least-recently-used map from mask keys to walk results, bounded by entry count."""

    def __init__(self, capacity: int = 65_536):
        if capacity < 1:
            raise ValueError("the mask cache needs room for at least one entry")
        self.capacity = capacity
        self.stats = CacheStats()
        self._entries: OrderedDict[MaskKey, MaskEntry] = OrderedDict()

    def get(self, key: MaskKey, identifier_position: bool) -> MaskEntry | None:
        """The cached entry for `key`, or None. `identifier_position` is decided by the caller
        from the configuration, independently of how the key was made: a generic key there is
        refused (Proposition 6)."""
        if identifier_position and not isinstance(key, IdentifierKey):
            raise IdentifierCompositionError(
                "a generic mask entry was consulted at an identifier position: the mask would "
                "not come from the schema lexicons (Proposition 6)"
            )
        entry = self._entries.get(key)
        if entry is None:
            self.stats.misses += 1
            return None
        self._entries.move_to_end(key)
        self.stats.hits += 1
        return entry

    def publish(self, entry: MaskEntry) -> MaskEntry:
        """Store `entry` (a no-op if an entry with its id is there) and return the stored one."""
        key = entry.key
        existing = self._entries.get(key)
        if existing is not None:
            if existing.entry_id != entry.entry_id:
                raise CacheKeyConflict(
                    f"two different walks published under one key: entries {existing.entry_id} "
                    f"and {entry.entry_id}"
                )
            return existing
        self._entries[key] = entry
        if len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
            self.stats.evictions += 1
        self.stats.entries = len(self._entries)
        return entry

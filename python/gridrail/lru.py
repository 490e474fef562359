"""A thread-safe least-recently-used map bounded by entry count and by the byte sizes its
callers declare, with counters a user can read: the bookkeeping the mask cache (T1/T2) and the
guide's memos share. What may be stored, and when, is theirs to decide. `SameObject` keys a
memo by an object's identity."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

V = TypeVar("V")


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    entries: int = 0
    bytes: int = 0  # the sizes declared for the values held


class BoundedLRU(Generic[V]):
    """Evicts least recently used values while over `capacity` entries or `capacity_bytes`;
    the newest value is always kept, however large.

    Recency is kept as CLOCK keeps it (second chance): a hit only marks its entry, and eviction
    passes over a marked entry once, clearing its mark. So a hit takes no lock and moves
    nothing — one dict read, atomic under the GIL — while storing and evicting hold the lock.
    A warm decode's every mask is such a hit. The counters are exact under the GIL."""

    def __init__(self, capacity: int, capacity_bytes: int):
        self.capacity = capacity
        self.capacity_bytes = capacity_bytes
        self.stats = CacheStats()
        # key -> [value, declared size, used since it last escaped eviction]
        self._values: OrderedDict[Hashable, list] = OrderedDict()
        self._lock = threading.Lock()  # the matchers of many requests share one

    def get(self, key: Hashable) -> V | None:
        """The value under `key` (marked as used), or None; counted."""
        found = self._values.get(key)
        if found is None:
            self.stats.misses += 1
            return None
        found[2] = True
        self.stats.hits += 1
        return found[0]

    def setdefault(self, key: Hashable, value: V, size: int) -> V:
        """The value already under `key`, else `value`, stored with its `size` in bytes (one
        atomic step, so racing writers of one key all get the same stored value)."""
        with self._lock:
            values = self._values
            found = values.get(key)
            if found is not None:
                return found[0]
            newest = values[key] = [value, size, False]
            self.stats.bytes += size
            spared = 0  # bounds the pass: hits may mark entries again meanwhile
            while len(values) > 1 and (
                len(values) > self.capacity or self.stats.bytes > self.capacity_bytes
            ):
                oldest, cell = values.popitem(last=False)
                if cell is newest or (cell[2] and spared < len(values)):
                    cell[2] = False  # kept: to the back of the line, its mark spent
                    values[oldest] = cell
                    spared += 1
                    continue
                self.stats.bytes -= cell[1]
                self.stats.evictions += 1
            self.stats.entries = len(values)
            return value

    def memo(self, key: Hashable, build: Callable[[], V], size: int = 0) -> V:
        """The value under `key`, built and stored (with `size`) on a miss. Racing builders of
        one key may each build; all of them get the one value stored first."""
        found = self.get(key)
        return found if found is not None else self.setdefault(key, build(), size)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self.stats.entries = self.stats.bytes = 0


class SameObject:
    """A memo key that is one object, compared by identity (a slot's dict is not hashable by
    value; an interned mask is one object per content). It holds the object, so its id cannot
    be reused while the key lives."""

    __slots__ = ("value",)

    def __init__(self, value: object):
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SameObject) and other.value is self.value

"""The bounded map behind every memo of the mask path (`gridrail.lru.BoundedLRU`): its bounds,
its second-chance recency, and its invariants under random and concurrent use."""

from __future__ import annotations

import random
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from gridrail.lru import BoundedLRU


def _held(lru: BoundedLRU) -> dict:
    return {key: cell[0] for key, cell in lru._values.items()}


def test_without_hits_the_oldest_goes_first() -> None:
    lru: BoundedLRU[str] = BoundedLRU(2, 1 << 20)
    for key in "abc":
        lru.setdefault(key, key.upper(), 1)
    assert _held(lru) == {"b": "B", "c": "C"}
    assert (lru.stats.evictions, lru.stats.entries, lru.stats.bytes) == (1, 2, 2)


def test_a_hit_keeps_an_entry_past_one_eviction_pass() -> None:
    lru: BoundedLRU[str] = BoundedLRU(2, 1 << 20)
    lru.setdefault("a", "A", 1)
    lru.setdefault("b", "B", 1)
    assert lru.get("a") == "A"  # used since stored: the next eviction passes over it
    lru.setdefault("c", "C", 1)
    assert _held(lru) == {"a": "A", "c": "C"}
    lru.setdefault("d", "D", 1)  # spared, a went behind c: c is now the oldest
    assert _held(lru) == {"a": "A", "d": "D"}
    lru.setdefault("e", "E", 1)  # a's mark was spent: unused since, it goes
    assert _held(lru) == {"d": "D", "e": "E"}
    assert (lru.stats.hits, lru.stats.misses) == (1, 0)


def test_the_newest_is_kept_however_large_and_bytes_bound_the_rest() -> None:
    lru: BoundedLRU[str] = BoundedLRU(100, 10)
    lru.setdefault("a", "A", 4)
    lru.setdefault("b", "B", 4)
    assert lru.get("a") == "A" and lru.get("b") == "B"
    lru.setdefault("big", "BIG", 50)  # over the byte bound alone: kept, everything else goes
    assert _held(lru) == {"big": "BIG"} and lru.stats.bytes == 50
    assert lru.setdefault("big", "other", 1) == "BIG"  # the stored value wins
    assert lru.get("missing") is None and lru.stats.misses == 1


@settings(max_examples=300, deadline=None)
@given(
    capacity=st.integers(1, 5),
    capacity_bytes=st.integers(1, 12),
    ops=st.lists(st.tuples(st.booleans(), st.integers(0, 8), st.integers(0, 6)), max_size=60),
)
def test_bounds_and_values_hold_under_any_sequence(capacity, capacity_bytes, ops) -> None:
    lru: BoundedLRU[tuple[int, int]] = BoundedLRU(capacity, capacity_bytes)
    for step, (store, key, size) in enumerate(ops):
        before = _held(lru)
        if store:
            value = lru.setdefault(key, (key, step), size)
            assert value == before.get(key, (key, step))  # a held value is never replaced
            assert _held(lru)[key] == value  # the newest is always kept
        else:
            assert lru.get(key) == before.get(key)
        held = lru._values
        assert len(held) <= capacity or len(held) == 1
        assert lru.stats.bytes == sum(cell[1] for cell in held.values())
        assert lru.stats.bytes <= capacity_bytes or len(held) == 1
        assert lru.stats.entries == len(held)


def test_concurrent_hits_and_stores_keep_the_bounds() -> None:
    lru: BoundedLRU[int] = BoundedLRU(64, 1 << 20)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(20_000):
                key = rng.randrange(256)
                found = lru.get(key)
                assert found is None or found == key * 7
                if found is None:
                    assert lru.setdefault(key, key * 7, 1) == key * 7
        except BaseException as error:  # reported below: a thread's assert is not the test's
            errors.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(lru._values) <= 64 and lru.stats.entries == len(lru._values)
    assert lru.stats.bytes == len(lru._values)
    assert lru.stats.hits + lru.stats.misses == 4 * 20_000  # exact under the GIL

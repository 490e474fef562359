"""The T1 mask cache: cache-on ≡ cache-off (OBL-KEY1), distinct identifier keys and the
identifier composition rule (Proposition 6), idempotent publish and bounded size."""

from __future__ import annotations

import random
from array import array

import pytest

import gridrail as gr
from gridrail.mask.cache import CacheKeyConflict, MaskCache
from gridrail.mask.compute import next_token_mask
from gridrail.mask.entry import make_entry
from gridrail.mask.keys import GenericKey, IdentifierCompositionError, IdentifierKey, KeyMaker
from gridrail.mask.walk import WalkResult, ci_tokens, walk_context_independent
from test_lexicon import HR_TABLES, _policy, _sqlite, _vocab
from test_walk_arm import _SQL_WORDS, generate

WORDS = [*_SQL_WORDS, "employees", " employees", "emplo", "yees", " name", "orders", " total"]


def _guide(role: str | None) -> gr.Guide:
    schema = gr.Schema.from_tables("sqlite", HR_TABLES)
    registry = gr.Registry()  # a cold cache of its own
    if role is None:
        return gr.compile(_sqlite(), _vocab(WORDS), schema=schema, registry=registry)
    return gr.compile(
        _sqlite(), _vocab(WORDS), schema=schema, policy=_policy(), role=role, registry=registry
    )


@pytest.mark.parametrize("role", [None, "analyst", "clerk"])
def test_cache_on_equals_cache_off_on_random_replays(role: str | None) -> None:
    guide = _guide(role)
    rng = random.Random(5)
    checked = 0
    for _ in range(40):
        gen = generate(guide, rng, budget=rng.randint(30, 60))
        m = guide.matcher()
        for token in gen.tokens[:-1]:
            cfg = m.configuration
            uncached = next_token_mask(guide.oracle, guide.trie, guide.vocab, cfg)
            assert guide.mask(cfg) == uncached
            checked += 1
            assert m.accept_tokens([token])
    stats = guide.cache.stats
    assert checked > 200 and stats.hits > 0 and stats.misses > 0


def test_identifier_positions_get_identifier_keys() -> None:
    guide = _guide("analyst")
    oracle = guide.oracle
    at = {text: oracle.feed(oracle.initial, text) for text in (b"select * from emplo", b"select ")}
    after_table = oracle.feed(oracle.initial, b"select * from employees where name ")
    for cfg in at.values():
        key = guide.keys.key(cfg)
        assert isinstance(key, IdentifierKey) and key.lexicons
    assert isinstance(guide.keys.key(after_table), GenericKey)
    # the same stack-free state under two schemas: distinct keys
    other = gr.compile(
        _sqlite(), _vocab(WORDS), schema=gr.Schema.from_tables("sqlite", {"employees": ["id"]})
    )
    cfg_other = other.oracle.feed(other.oracle.initial, b"select * from emplo")
    assert other.keys.key(cfg_other).lexicons != guide.keys.key(at[b"select * from emplo"]).lexicons


def test_a_generic_entry_at_an_identifier_position_raises(monkeypatch) -> None:
    """Inject the condition Proposition 6 forbids: keys that forget they are at an identifier
    position. The cache must refuse — by an exception, not an assert that -O would remove."""
    guide = _guide("analyst")
    cfg = guide.oracle.feed(guide.oracle.initial, b"select * from emplo")
    guide.mask(cfg)  # fine with the real keys

    real = KeyMaker.key

    def generic(self: KeyMaker, cfg: gr.Configuration, root: int = 0) -> GenericKey:
        key = real(self, cfg, root)  # the same fields without the lexicon fingerprint
        return GenericKey(
            key.scan_state, key.pending, key.accept_state, key.tail, key.allowed, root
        )

    monkeypatch.setattr(KeyMaker, "key", generic)
    other = guide.oracle.feed(guide.oracle.initial, b"select * from empl")  # no mask kept yet
    with pytest.raises(IdentifierCompositionError, match="Proposition 6"):
        guide.mask(other)
    # the guard is about positions, not keys as such: away from identifiers a generic key is
    # the right key and is answered
    monkeypatch.undo()
    after = guide.oracle.feed(guide.oracle.initial, b"select * from employees where name ")
    assert not guide.keys.is_identifier_position(after)
    guide.cache.get(guide.keys.key(after), identifier_position=False)


def _entry(guide: gr.Guide, key, cfg: gr.Configuration):
    walk = walk_context_independent(guide.oracle, guide.trie, cfg)
    return make_entry(key, walk, ci_tokens(guide.trie, guide.vocab.size, walk))


def test_publish_is_idempotent_and_conflicts_raise() -> None:
    guide = _guide(None)
    oracle = guide.oracle
    a = oracle.feed(oracle.initial, b"select * from emplo")
    b = oracle.feed(oracle.initial, b"select ")
    cache = MaskCache(capacity=1)
    key_a = guide.keys.key(a)
    entry_a = _entry(guide, key_a, a)
    assert cache.publish(entry_a) is entry_a
    again = _entry(guide, key_a, a)
    assert again.entry_id == entry_a.entry_id and cache.publish(again) is entry_a
    with pytest.raises(CacheKeyConflict):
        cache.publish(_entry(guide, key_a, b))
    cache.publish(_entry(guide, guide.keys.key(b), b))
    assert cache.stats.evictions == 1 and cache.get(key_a, True) is None
    assert cache.stats.entries == 1 and cache.stats.bytes > 0
    by_bytes = MaskCache(capacity_bytes=entry_a.size)
    by_bytes.publish(entry_a)
    by_bytes.publish(_entry(guide, guide.keys.key(b), b))
    assert by_bytes.stats.evictions == 1 and by_bytes.stats.entries == 1
    with pytest.raises(ValueError, match="at least one entry"):
        MaskCache(capacity=0)


def test_concurrent_matchers_share_one_cache_soundly() -> None:
    """Many threads filling masks through one guide (one cache, racing publishers): every mask
    equals the uncached one, and no publish conflict is raised."""
    from concurrent.futures import ThreadPoolExecutor

    guide = _guide("analyst")
    rng = random.Random(9)
    replays = [generate(guide, rng, budget=rng.randint(30, 50)).tokens[:-1] for _ in range(8)]

    def replay(tokens: list[int]) -> int:
        m = guide.matcher()
        for token in tokens:
            cfg = m.configuration
            assert guide.mask(cfg) == next_token_mask(guide.oracle, guide.trie, guide.vocab, cfg)
            assert m.accept_tokens([token])
        return len(tokens)

    with ThreadPoolExecutor(4) as pool:
        steps = sum(pool.map(replay, replays * 2))
    assert steps > 100 and guide.cache.stats.hits > 0


def test_roles_of_one_dialect_share_entries_soundly() -> None:
    """The cross-role tier: role projections keep L1's terminals, so their walks share one
    cache; every role's masks still equal its uncached masks (OBL-KEY1 across roles)."""
    registry = gr.Registry()
    policy = gr.Policy.from_text(
        "[roles.reader]\nstatements = ['select']\nbanned = ['subqueries']\n\n"
        "[roles.writer]\nstatements = ['select', 'insert', 'update', 'delete']\n"
    )
    reader, writer = (
        gr.compile(_sqlite(), _vocab(WORDS), policy=policy, role=r, registry=registry)
        for r in ("reader", "writer")
    )
    assert reader.cache is writer.cache and reader.compiled is not writer.compiled
    rng = random.Random(11)
    for guide in (reader, writer, reader):
        hits_before = guide.cache.stats.hits
        for _ in range(15):
            gen = generate(guide, rng, budget=rng.randint(25, 50))
            m = guide.matcher()
            for token in gen.tokens[:-1]:
                cfg = m.configuration
                assert guide.mask(cfg) == next_token_mask(
                    guide.oracle, guide.trie, guide.vocab, cfg
                )
                assert m.accept_tokens([token])
        assert guide.cache.stats.hits > hits_before


def test_entry_ids_are_pinned() -> None:
    """An entry's id is what audit records name, so its encoding may not drift: this id was
    computed by 929f34d (CD classes as objects) and must survive every change of how walks are
    held (plain tuples since) or encoded; a deliberate change bumps `entry.ENCODING`."""
    walk = WalkResult(array("I", [1, 2, 3, 70000]), ((5, 1, 2, -1, b""), (9, 3, 0, 4, b"ab")))
    entry = make_entry(GenericKey(7, True, 4, b"ab", 0b1011, 0), walk, array("I", [10, 11]))
    assert entry.entry_id == "61ec9b4126f095d439e4f90241585c5b"
    assert entry.size == 74

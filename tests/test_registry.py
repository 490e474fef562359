"""The artifact registry (paper §6.3, "single-flight everything"): one build per key, shared by
concurrent callers (result or exception), failures remembered for a TTL, LRU-bounded; and
`gridrail.compile` building each grammar, role language and compiled table once."""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest

import gridrail as gr
from gridrail.grammar.loader import bundled_grammar_text
from gridrail.policy.bundle import Policy
from gridrail.policy.schema import Schema
from gridrail.registry import DEFAULT_REGISTRY, Registry, shared_role_language, shared_trie
from test_lexicon import HR_TABLES

THREADS = 32
PATIENCE = 30.0  # seconds until a test that must not block says it blocked (not a speed bound)
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


class _BuildFailed(Exception):
    pass


class _Interrupted(BaseException):
    """Stands for KeyboardInterrupt/SystemExit: not a failure of the artifact."""


def _eventually(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < deadline, "the expected state was never reached"
        time.sleep(0.001)


def _frames(error: BaseException) -> list[str]:
    return [frame.name for frame in traceback.extract_tb(error.__traceback__)]


# -- single flight --------------------------------------------------------------------------


def test_concurrent_callers_of_a_cold_key_share_one_build() -> None:
    registry = Registry()
    release = threading.Event()
    calls: list[int] = []

    def build() -> object:
        calls.append(1)
        release.wait(PATIENCE)
        return object()

    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(registry.get, "key", build) for _ in range(THREADS)]
        # every other caller has joined the build in flight before it is allowed to finish
        _eventually(lambda: registry.stats().waits == THREADS - 1)
        release.set()
        results = [future.result() for future in futures]

    assert len(calls) == 1
    assert all(result is results[0] for result in results)
    stats = registry.stats()
    assert (stats.builds, stats.waits, stats.hits, stats.failures) == (1, THREADS - 1, 0, 0)
    assert registry.get("key", build) is results[0]
    assert registry.stats().hits == 1


def test_concurrent_callers_of_a_failing_build_share_the_same_exception() -> None:
    registry = Registry()
    release = threading.Event()
    calls: list[int] = []

    def build() -> object:
        calls.append(1)
        release.wait(PATIENCE)
        raise _BuildFailed("the policy names a table the schema lacks")

    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(registry.get, "key", build) for _ in range(THREADS)]
        _eventually(lambda: registry.stats().waits == THREADS - 1)
        release.set()
        errors = [future.exception() for future in futures]

    assert len(calls) == 1
    assert isinstance(errors[0], _BuildFailed)
    assert all(error is errors[0] for error in errors)
    stats = registry.stats()
    assert (stats.builds, stats.waits, stats.failures) == (1, THREADS - 1, 1)


def test_builds_of_different_keys_run_at_the_same_time() -> None:
    """Each build waits until the other has started: this finishes only if no lock is held
    across a build."""
    registry = Registry()
    started = {"a": threading.Event(), "b": threading.Event()}

    def build(mine: str, other: str) -> str:
        started[mine].set()
        assert started[other].wait(PATIENCE), f"build {mine!r} ran alone"
        return mine

    with ThreadPoolExecutor(2) as pool:
        a = pool.submit(registry.get, "a", lambda: build("a", "b"))
        b = pool.submit(registry.get, "b", lambda: build("b", "a"))
        assert (a.result(), b.result()) == ("a", "b")
    assert registry.stats().builds == 2


def test_an_interrupted_build_is_not_remembered_and_a_waiter_builds_instead() -> None:
    registry = Registry()
    release = threading.Event()

    def interrupted() -> str:
        release.wait(PATIENCE)
        raise _Interrupted

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(registry.get, "key", interrupted)
        _eventually(lambda: registry.stats().builds == 1)
        second = pool.submit(registry.get, "key", lambda: "built")
        _eventually(lambda: registry.stats().waits == 1)
        release.set()
        with pytest.raises(_Interrupted):
            first.result()
        assert second.result() == "built"
    stats = registry.stats()
    assert (stats.builds, stats.failures) == (2, 0)


def test_a_build_that_needs_its_own_result_raises_instead_of_deadlocking() -> None:
    registry = Registry()

    def build() -> object:
        return registry.get("key", build)

    with pytest.raises(RuntimeError, match="cycle"):
        registry.get("key", build)


# -- negative caching -----------------------------------------------------------------------


def test_a_failure_is_re_raised_without_building_until_its_ttl_has_passed() -> None:
    now = [100.0]
    registry = Registry(failure_ttl=30.0, clock=lambda: now[0])
    calls: list[float] = []

    def flaky() -> str:
        calls.append(now[0])
        if len(calls) == 1:
            raise _BuildFailed("catalog unreachable")
        return "built"

    with pytest.raises(_BuildFailed) as first:
        registry.get("key", flaky)
    now[0] += 29
    with pytest.raises(_BuildFailed) as again:
        registry.get("key", flaky)
    depth = len(_frames(again.value))
    with pytest.raises(_BuildFailed) as third:
        registry.get("key", flaky)
    assert first.value is again.value is third.value
    assert calls == [100.0]
    # the re-raised exception keeps the failed build's traceback, and does not grow with reuse
    assert "flaky" in _frames(third.value) and len(_frames(third.value)) == depth

    now[0] += 1
    assert registry.get("key", flaky) == "built"
    assert calls == [100.0, 130.0]
    stats = registry.stats()
    assert (stats.builds, stats.failures, stats.negative_hits, stats.hits) == (2, 1, 2, 0)


def test_a_zero_ttl_shares_a_failure_but_never_remembers_it() -> None:
    registry = Registry(failure_ttl=0)
    calls: list[int] = []

    def failing() -> str:
        calls.append(1)
        raise _BuildFailed("no")

    for _ in range(2):
        with pytest.raises(_BuildFailed):
            registry.get("key", failing)
    assert len(calls) == 2 and len(registry) == 0
    assert registry.stats().negative_hits == 0


# -- bounds and counters --------------------------------------------------------------------


def test_the_least_recently_used_entry_is_evicted_beyond_capacity() -> None:
    registry = Registry(capacity=2)
    built: list[str] = []

    def build(key: str) -> Callable[[], str]:
        return lambda: built.append(key) or key.upper()

    assert registry.get("a", build("a")) == "A"
    assert registry.get("b", build("b")) == "B"
    assert registry.get("a", build("a")) == "A"  # a hit: "b" is now the least recently used
    assert registry.get("c", build("c")) == "C"  # evicts "b"
    assert registry.get("a", build("a")) == "A"
    assert registry.get("b", build("b")) == "B"  # built again (and evicts "c")
    assert built == ["a", "b", "c", "b"]
    assert len(registry) == 2
    stats = registry.stats()
    assert (stats.builds, stats.hits, stats.evictions, stats.waits) == (4, 2, 2, 0)

    registry.clear()
    assert len(registry) == 0
    assert registry.get("a", build("a")) == "A"
    assert built[-1] == "a" and registry.stats().builds == 5  # counters outlive clear()


def test_a_build_may_return_none() -> None:
    registry = Registry()
    calls: list[int] = []
    for _ in range(2):
        assert registry.get("key", lambda: calls.append(1)) is None
    assert len(calls) == 1


@pytest.mark.parametrize(("capacity", "ttl"), [(0, 30.0), (1, -1.0)])
def test_nonsense_bounds_are_refused(capacity: int, ttl: float) -> None:
    with pytest.raises(ValueError):
        Registry(capacity=capacity, failure_ttl=ttl)


# -- gridrail.compile through the registry --------------------------------------------------


@cache
def _vocab() -> gr.Vocabulary:
    """Every single byte (so the vocabulary is byte complete), a few words, then EOS."""
    spellings = [bytes((b,)) for b in range(256)] + [b"select", b" from", b"employees"]
    return gr.Vocabulary([*spellings, None], eos_token_ids=len(spellings))


def test_compiling_the_same_grammar_twice_compiles_it_once() -> None:
    registry = Registry()
    first = gr.compile(gr.Grammar.bundled("sqlite"), _vocab(), registry=registry)
    second = gr.compile(gr.Grammar.bundled("sqlite"), _vocab(), registry=registry)  # a new load
    assert second is not first and second.compiled is first.compiled
    assert second.trie is first.trie
    stats = registry.stats()
    assert second.cache is first.cache and second.family_cache is first.family_cache
    # the compiled grammar, token trie, mask cache, dialect family fingerprint, family cache
    assert (stats.builds, stats.hits) == (5, 5)
    assert second.matcher().accept_tokens(list(b"select 1;"))


def test_concurrent_compiles_of_a_cold_grammar_build_it_once() -> None:
    registry = Registry()
    grammar = gr.Grammar.bundled("sqlite")
    with ThreadPoolExecutor(8) as pool:
        guides = list(
            pool.map(lambda _: gr.compile(grammar, _vocab(), registry=registry), range(8))
        )
    assert all(guide.compiled is guides[0].compiled for guide in guides)
    assert all(guide.trie is guides[0].trie for guide in guides)
    stats = registry.stats()
    # grammar, trie, cache, family fingerprint, family cache: once each
    assert (stats.builds, stats.waits + stats.hits) == (5, 35)


def test_compile_uses_the_default_registry_unless_given_one() -> None:
    grammar = gr.Grammar.bundled("sqlite")
    first = gr.compile(grammar, _vocab())
    builds = DEFAULT_REGISTRY.stats().builds
    assert gr.compile(grammar, _vocab()).compiled is first.compiled
    assert DEFAULT_REGISTRY.stats().builds == builds


def test_a_role_language_and_its_tables_are_built_once_per_fingerprints() -> None:
    registry = Registry()
    grammar, policy = gr.Grammar.bundled("sqlite"), Policy.from_file(EXAMPLES / "hr_policy.toml")

    def analyst(schema: Schema) -> gr.Guide:
        return gr.compile(
            grammar, _vocab(), schema=schema, policy=policy, role="analyst", registry=registry
        )

    first = analyst(Schema.from_tables("sqlite", HR_TABLES))
    second = analyst(Schema.from_tables("sqlite", HR_TABLES))  # another read of the same catalog
    assert second.compiled is first.compiled and second.view is first.view
    stats = registry.stats()
    # the language, its tables, the trie, the cache, the family fingerprint and family cache
    assert (stats.builds, stats.hits) == (6, 6)

    other = {**HR_TABLES, "orders": ["id", "total"]}
    guide = analyst(Schema.from_tables("sqlite", other))
    assert guide.compiled is not first.compiled and guide.cache is not first.cache
    assert guide.family_cache is first.family_cache  # another schema, the same dialect
    assert registry.stats().builds == 9  # a new language, tables and cache; the rest is shared


def test_a_single_role_policy_shares_one_language_whether_the_role_is_named_or_not() -> None:
    registry = Registry()
    grammar = gr.Grammar.bundled("sqlite")
    policy = Policy.from_text('[roles.reader]\nstatements = ["select"]\n')
    unnamed = shared_role_language(grammar, policy, None, None, registry)
    assert shared_role_language(grammar, policy, "reader", None, registry) is unnamed
    assert registry.stats().builds == 1


def test_equal_vocabularies_share_one_trie() -> None:
    registry = Registry()

    def bytes_and_eos() -> gr.Vocabulary:
        return gr.Vocabulary([*(bytes((b,)) for b in range(256)), None], eos_token_ids=256)

    first = shared_trie(bytes_and_eos(), registry)
    assert shared_trie(bytes_and_eos(), registry) is first
    assert first.num_nodes == 257  # the root and one node per byte
    assert registry.stats().builds == 1


def test_a_namespace_rolls_over_to_a_newer_key() -> None:
    registry = Registry()
    assert registry.get("v1", lambda: "old") == "old"
    assert not registry.rollover("cache of g", "v1")  # first key of the namespace
    assert not registry.rollover("cache of g", "v1")  # the same key again
    assert registry.rollover("cache of g", "v2")  # superseded: the old artifact goes
    assert registry.get("v1", lambda: "rebuilt") == "rebuilt"
    assert registry.stats().rollovers == 1


# -- the cross-family (T2) mask cache ---------------------------------------------------------


def test_every_role_and_schema_of_a_dialect_shares_one_family_cache() -> None:
    registry = Registry()
    grammar, policy = gr.Grammar.bundled("sqlite"), Policy.from_file(EXAMPLES / "hr_policy.toml")
    hr, other = Schema.from_tables("sqlite", HR_TABLES), Schema.from_tables("sqlite", {"t": ["a"]})
    guides = [
        gr.compile(grammar, _vocab(), registry=registry),
        gr.compile(grammar, _vocab(), schema=hr, policy=policy, role="analyst", registry=registry),
        gr.compile(grammar, _vocab(), schema=hr, policy=policy, role="clerk", registry=registry),
        gr.compile(grammar, _vocab(), schema=other, registry=registry),
    ]
    assert len({id(guide.cache) for guide in guides}) == len(guides)  # four scanners
    assert len({id(guide.family_cache) for guide in guides}) == 1  # one dialect
    bytes_only = gr.Vocabulary([*(bytes((b,)) for b in range(256)), None], eos_token_ids=256)
    assert gr.compile(grammar, bytes_only, registry=registry).family_cache is not (
        guides[0].family_cache
    )  # trie nodes are per vocabulary


def test_only_a_non_lexicon_terminal_edit_rolls_the_family_cache_over() -> None:
    registry = Registry()
    text = bundled_grammar_text("sqlite")

    def guide(version: str) -> gr.Guide:
        grammar = gr.Grammar.from_lark(version, "sqlite.lark")
        catalogue = gr.ConstructCatalogue.bundled("sqlite", grammar)  # an edited copy: given
        return gr.compile(grammar, _vocab(), registry=registry, catalogue=catalogue)

    first = guide(text)
    # a lexicon category's L1 regex (one more function): the T1 namespace rolls over, T2 stays
    functions = guide(text.replace("|zeroblob)", "|zeroblob|zeta)"))
    assert functions.cache is not first.cache and functions.family_cache is first.family_cache
    assert registry.stats().rollovers == 1
    # NUMBER without hexadecimal literals: a terminal of every role language; both roll over
    without_hex = text.replace("|0[xX][0-9A-Fa-f]{1,16}/", "/", 1)
    assert without_hex != text  # the edit applies to the bundled grammar as it is
    numbers = guide(without_hex)
    assert numbers.family_cache is not first.family_cache
    assert registry.stats().rollovers == 3
    assert guide(text).family_cache is not first.family_cache  # the old one was dropped

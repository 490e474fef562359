"""The artifact registry: one build per artifact fingerprint, shared by every caller (paper §6.3).

Compiled grammars, token tries and role languages are expensive (tenths of a second to seconds)
and are pure functions of content fingerprints, so a serving process should build each one once.
"Single-flight everything": the first caller for a key builds; callers that arrive while it builds
wait and receive the same object — or the same exception instance, so N concurrent requests for a
broken policy cost one failed build, not N. A failure is remembered for a TTL (negative caching),
so a client retrying a bad artifact in a loop does not rebuild it on every request, yet a
transient failure (a catalog that was briefly unreachable) is retried once the TTL has passed.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar, cast

from gridrail.canonical import fingerprint_of
from gridrail.errors import PolicyError
from gridrail.grammar.compiled import CompiledGrammar, compile_grammar
from gridrail.grammar.model import Grammar
from gridrail.mask.cache import MaskCache
from gridrail.mask.entry import MaskEntry, NormalFormEntry
from gridrail.policy.bundle import Policy
from gridrail.policy.constructs import ConstructCatalogue
from gridrail.policy.language import role_language, select_role
from gridrail.policy.lexicon import Lexicon
from gridrail.policy.profile import GenerationProfile
from gridrail.policy.schema import Schema
from gridrail.policy.view import SchemaView
from gridrail.vocab.trie import TokenTrie, build_trie
from gridrail.vocab.vocabulary import Vocabulary

T = TypeVar("T")

DEFAULT_CAPACITY = 64  # entries: a compiled grammar or a large trie is megabytes
DEFAULT_FAILURE_TTL = 30.0  # seconds a failed build is re-raised without building again


@dataclass
class RegistryStats:
    """What a registry has done since it was made (a snapshot; `clear()` keeps the counts)."""

    builds: int = 0  # calls that ran a build (successful or not)
    hits: int = 0  # calls answered from a finished build
    waits: int = 0  # calls that joined a build already in flight
    failures: int = 0  # builds that raised
    negative_hits: int = 0  # calls that re-raised a remembered failure without building
    evictions: int = 0  # entries (built or failed) dropped to stay within capacity
    rollovers: int = 0  # artifacts dropped because a namespace moved to a newer key


@dataclass(frozen=True)
class _Built:
    """A finished build (a record, so that a build may legitimately return None)."""

    value: object


@dataclass(frozen=True)
class _Failure:
    """A failed build: the exception (re-raised as the same instance), the traceback of the
    build that raised it, and until when it is re-raised instead of building again."""

    error: Exception
    traceback: TracebackType | None
    expires: float

    def reraise(self) -> None:
        # Restoring the build's traceback first keeps it from growing with every re-raise.
        raise self.error.with_traceback(self.traceback)


class _Flight:
    """One build in progress; its waiters block on `done`. `outcome` stays None when the build
    was interrupted (KeyboardInterrupt, SystemExit): nothing to share, so waiters try again."""

    __slots__ = ("builder", "done", "outcome")

    def __init__(self) -> None:
        self.builder = threading.get_ident()
        self.done = threading.Event()
        self.outcome: _Built | _Failure | None = None


class Registry:
    """A thread-safe, bounded map from artifact keys to built artifacts, with single-flight
    construction and negative caching of failures.

    A key is any hashable value that determines the artifact completely — in practice a tuple of
    an artifact kind and content fingerprints, e.g. ``("compiled", grammar.fingerprint)``. No
    lock is held while building, so builds for different keys run concurrently. Entries (built
    values and remembered failures alike) are kept in least-recently-used order and the oldest is
    evicted beyond `capacity`; a build in flight is not an entry until it finishes.
    """

    def __init__(
        self,
        capacity: int = DEFAULT_CAPACITY,
        failure_ttl: float = DEFAULT_FAILURE_TTL,
        clock: Callable[[], float] = time.monotonic,
    ):
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1 entry, got {capacity}")
        if failure_ttl < 0:
            raise ValueError(f"failure_ttl must be >= 0 seconds, got {failure_ttl}")
        self.capacity = capacity
        self.failure_ttl = failure_ttl  # 0: failures are shared by waiters, never remembered
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, _Built | _Failure] = OrderedDict()
        self._flights: dict[Hashable, _Flight] = {}
        self._namespaces: dict[Hashable, Hashable] = {}  # namespace -> its current key
        self._stats = RegistryStats()

    def get(self, key: Hashable, build: Callable[[], T]) -> T:
        """The artifact for `key`, calling `build()` only if no caller has built it (or is
        building it) already. A failure is raised to the builder and to every waiter as the
        same exception instance, and re-raised without building until `failure_ttl` has passed.
        Exceptions that are not `Exception`s (KeyboardInterrupt) are never remembered."""
        while True:
            with self._lock:
                entry = self._entries.get(key)
                if isinstance(entry, _Failure) and self._clock() >= entry.expires:
                    del self._entries[key]
                    entry = None
                if entry is not None:
                    self._entries.move_to_end(key)
                    if isinstance(entry, _Failure):
                        self._stats.negative_hits += 1
                        entry.reraise()
                    self._stats.hits += 1
                    return cast(T, entry.value)  # what a build for this key returned
                flight = self._flights.get(key)
                if flight is None:
                    flight = self._flights[key] = _Flight()
                    self._stats.builds += 1
                    break
                if flight.builder == threading.get_ident():
                    raise RuntimeError(f"the build of {key!r} needs its own result (a cycle)")
                self._stats.waits += 1
            flight.done.wait()
            if isinstance(flight.outcome, _Failure):
                flight.outcome.reraise()
            if isinstance(flight.outcome, _Built):
                return cast(T, flight.outcome.value)
            # the builder was interrupted: one of the waiters becomes the next builder
        return self._build(key, flight, build)

    def _build(self, key: Hashable, flight: _Flight, build: Callable[[], T]) -> T:
        outcome: _Built | _Failure | None = None
        try:
            value = build()
            outcome = _Built(value)
            return value
        except Exception as error:
            outcome = _Failure(error, error.__traceback__, self._clock() + self.failure_ttl)
            raise
        finally:
            with self._lock:
                del self._flights[key]
                if isinstance(outcome, _Built):
                    self._store(key, outcome)
                elif isinstance(outcome, _Failure):
                    self._stats.failures += 1
                    if self.failure_ttl > 0:
                        self._store(key, outcome)
            flight.outcome = outcome
            flight.done.set()

    def _store(self, key: Hashable, entry: _Built | _Failure) -> None:
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
            self._stats.evictions += 1

    def rollover(self, namespace: Hashable, key: Hashable) -> bool:
        """Make `key` the current artifact of `namespace` (say, the mask cache of one grammar
        name). When it supersedes another key — the grammar was edited, so its fingerprint
        changed — the old artifact is dropped at once instead of waiting for eviction, and True
        is returned. Logs that named the old artifact's entries still replay: replay rebuilds
        from the archive, never from this registry."""
        with self._lock:
            previous = self._namespaces.get(namespace)
            self._namespaces[namespace] = key
            if previous is None or previous == key:
                return False
            self._entries.pop(previous, None)
            self._stats.rollovers += 1
            return True

    def stats(self) -> RegistryStats:
        """A snapshot of the counters."""
        with self._lock:
            return copy.copy(self._stats)

    def values(self) -> list[object]:
        """The artifacts held now (not remembered failures), oldest use first."""
        with self._lock:
            return [e.value for e in self._entries.values() if isinstance(e, _Built)]

    def clear(self) -> None:
        """Forget every built artifact and remembered failure (builds in flight still finish and
        are stored). The counters are kept: they describe the registry's whole life."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        """Entries held: built artifacts plus remembered failures (expired ones included until
        they are next looked up or evicted)."""
        with self._lock:
            return len(self._entries)


DEFAULT_REGISTRY = Registry()
"""The process-wide registry `gridrail.compile` uses unless given another."""


def shared_compiled_grammar(grammar: Grammar, registry: Registry | None = None) -> CompiledGrammar:
    """`compile_grammar(grammar)`, built once per grammar. The key carries the grammar's name as
    well as its fingerprint: two roles whose languages coincide compile to equal tables, but each
    guide's error messages must name its own language."""
    key = ("compiled", grammar.compile_key, grammar.name)
    return _or_default(registry).get(key, lambda: compile_grammar(grammar))


def shared_trie(vocab: Vocabulary, registry: Registry | None = None) -> TokenTrie:
    """The token trie of `vocab`, built once per vocabulary fingerprint."""
    key = ("trie", vocab.fingerprint)
    return _or_default(registry).get(
        key, lambda: build_trie(vocab.all_token_bytes, vocab.fingerprint)
    )


def shared_mask_cache(
    compiled: CompiledGrammar, vocab: Vocabulary, lexicons: str, registry: Registry | None = None
) -> MaskCache[MaskEntry]:
    """The mask cache of one (scanner, vocabulary, lexicons): every guide and matcher over them
    reads and publishes the same entries, so a warm grammar stays warm across requests, and the
    roles of one dialect share entries (the cross-role tier): a walk reads the scanner and the
    allowed set A — part of every key, numbered as at L1 — and never the productions."""
    key = ("mask-cache", compiled.grammar.lexical_fingerprint, vocab.fingerprint, lexicons)
    registry = _or_default(registry)
    registry.rollover(("mask-cache", compiled.grammar.name, vocab.fingerprint), key)
    return registry.get(key, MaskCache)


def shared_family_cache(
    dialect: Grammar,
    vocab: Vocabulary,
    registry: Registry | None = None,
    catalogue: ConstructCatalogue | None = None,
) -> MaskCache[NormalFormEntry]:
    """The cross-family (T2) mask cache of every role language of `dialect` (any role, any
    schema) over `vocab`.

    A T2 key holds everything its walk reads but the token trie (gridrail.mask.normal_form), so
    the cache must be per vocabulary, and beyond that sharing is sound whatever the grouping:
    the grouping is chosen for sharing and rollover. The cache is keyed on the dialect's family
    fingerprint — what every role language of the dialect keeps from it: the terminals no schema
    lexicon redefines, the ignored set — so that all of them meet in one cache, and so that
    editing a lexicon category's L1 regex (a function list, say) supersedes the T1 caches but
    not this one: its keys name the automata they were walked on, so such an edit only changes
    the keys of the states where that terminal is live, and the other entries stay good.
    Editing another terminal rolls the dialect's T2 namespace over. `catalogue` names the
    lexicon categories (default: a bundled grammar's own catalogue)."""
    registry = _or_default(registry)
    family = registry.get(
        ("dialect-family", dialect.fingerprint, dialect.name, _fingerprint(catalogue)),
        lambda: family_fingerprint(dialect, catalogue),
    )
    key = ("family-mask-cache", family, vocab.fingerprint)
    registry.rollover(("family-mask-cache", dialect.name, vocab.fingerprint), key)
    return registry.get(key, MaskCache)


def family_fingerprint(dialect: Grammar, catalogue: ConstructCatalogue | None = None) -> str:
    """BLAKE2b-128 (hex) of the lexical definitions shared by every role language of `dialect`:
    the terminals other than its lexicon categories (index, name, pattern, flags, class), the
    categories' indices, the ignored set and the declared non-category terminals. The categories
    are `catalogue`'s, else the dialect's own; a dialect without a construct catalogue has
    none."""
    if catalogue is not None:  # one given for another grammar is an error, not "no categories"
        categories = {c.terminal for c in ConstructCatalogue.resolve(dialect, catalogue).lexicons}
    else:
        try:
            categories = {c.terminal for c in ConstructCatalogue.for_grammar(dialect).lexicons}
        except PolicyError:
            categories = set()
    terminals = [
        [t.index, t.name, t.pattern, t.flags, t.priority, t.is_literal]
        for t in dialect.terminals
        if t.name not in categories
    ]
    doc = {
        "terminals": terminals,
        "categories": sorted(dialect.terminal(name).index for name in categories),
        "ignored": sorted(dialect.ignored),
        "declared": sorted(dialect.declared - categories),
    }
    return fingerprint_of(doc, prefix=b"gridrail-family-v1\0")


def shared_role_language(
    grammar: Grammar,
    policy: Policy | None = None,
    role: str | None = None,
    schema: Schema | None = None,
    registry: Registry | None = None,
    catalogue: ConstructCatalogue | None = None,
    profile: GenerationProfile | None = None,
    declared_names: bool = False,
) -> tuple[Grammar, SchemaView | None, tuple[Lexicon, ...]]:
    """`role_language(grammar, policy, role, schema, catalogue, profile, declared_names)`,
    built once per (grammar, policy, role, schema, catalogue) fingerprints, profile and
    `declared_names`. The role and the
    catalogue are resolved first (a single-role policy needs no name, a bundled grammar no
    catalogue), so naming them or not shares one build; an unknown role, or a grammar without a
    catalogue, raises before any build."""
    chosen = select_role(policy, role)
    if chosen is not None or schema is not None or profile is not None:
        catalogue = ConstructCatalogue.resolve(grammar, catalogue)
    key = (
        "language",
        grammar.fingerprint,
        policy.fingerprint if policy else "",
        chosen.name if chosen else "",
        schema.fingerprint if schema else "",
        _fingerprint(catalogue),
        profile,
        declared_names,
    )
    return _or_default(registry).get(
        key,
        lambda: role_language(grammar, policy, role, schema, catalogue, profile, declared_names),
    )


def _fingerprint(catalogue: ConstructCatalogue | None) -> str:
    return catalogue.fingerprint if catalogue is not None else ""


def _or_default(registry: Registry | None) -> Registry:
    # not `registry or ...`: an empty Registry is falsy (it has a length)
    return DEFAULT_REGISTRY if registry is None else registry

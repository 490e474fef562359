"""The cross-family (T2) mask cache tier: genN keys under the lexicon-visibility guard
(paper §4.3, gridrail/mask/normal_form.py).

Role languages with different lexicons have different scanners, so T1 entries never cross them;
T2 entries do, wherever the walk cannot consult a lexicon: the guard is (live[q] ∪ accept[p]) ∩
LEX = ∅, and A is not part of it (it is part of the key). What is pinned here: a guarded
configuration has the same key in scanners of different lexicons, a shared entry translates to
exactly the walk the reader would compute, guard-failing configurations never touch T2 (and the
cache refuses a genN key where the walk could consult a lexicon), T2 serves positions where A
holds a lexicon terminal (inside a number or a string in an expression) with the cache-off mask,
and cache-on (T1 + T2) ≡ cache-off bit for bit across roles, across schemas, and across threads
racing through a namespace rollover (OBL-KEY1) — with T2 hits proving that sharing happens.

`python tests/test_mask_t2.py [TOKENIZER FIRST_DB SECOND_DB]` measures, on Spider gold
statements, how often T2 serves a second database's walks after a first one warmed it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import random
import sys
import threading
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache

import pytest
from hypothesis import given
from hypothesis import strategies as st

import gridrail as gr
from assets import asset, spider_gold
from gridrail.grammar.loader import bundled_grammar_text
from gridrail.mask.cache import CacheKeyConflict, MaskCache
from gridrail.mask.compute import next_token_mask
from gridrail.mask.entry import (
    CANONICAL_ENCODING,
    ENCODING,
    encode_key,
    encode_normal_form_key,
    encode_walk,
    make_entry,
    make_normal_form_entry,
)
from gridrail.mask.keys import IdentifierCompositionError, NormalFormKey
from gridrail.mask.normal_form import CanonicalWalk, NormalForm
from gridrail.mask.walk import ci_tokens, walk_context_independent
from support.long_tier import long_size
from test_lexicon import HR_TABLES, _policy, _sqlite, _vocab
from test_mask_cache import WORDS
from test_walk_arm import _SQL_WORDS, generate

# The same dialect over other tables: every name differs from HR_TABLES', so the lexicons do.
SCHOOL_TABLES = {
    "students": ["sid", "sname", "gpa", "advisor"],
    "courses": ["cid", "title", "credits"],
    "enrolled": ["sid", "cid", "grade"],
}


def _schema_guide(tables: dict[str, list[str]], registry: gr.Registry) -> gr.Guide:
    schema = gr.Schema.from_tables("sqlite", tables)
    return gr.compile(_sqlite(), _vocab(WORDS), schema=schema, registry=registry)


def _role_guide(role: str, registry: gr.Registry, grammar: gr.Grammar | None = None) -> gr.Guide:
    schema = gr.Schema.from_tables("sqlite", HR_TABLES)
    # an edited copy of the bundled grammar is given the bundled catalogue explicitly
    catalogue = None if grammar is None else gr.ConstructCatalogue.bundled("sqlite", grammar)
    return gr.compile(
        grammar or _sqlite(),
        _vocab(WORDS),
        schema=schema,
        policy=_policy(),
        role=role,
        registry=registry,
        catalogue=catalogue,
    )


def _guard_passes(guide: gr.Guide, cfg: gr.Configuration) -> bool:
    """The lexicon-visibility guard, written out from the scanner tables: no lexicon terminal
    live in the pending lexeme's state (at a boundary: the start state) nor accepted at its
    last accept. A(σ) is not asked."""
    _, live, accept = guide.oracle.scanner_tables()
    involved = live[cfg.scan_state]
    if cfg.accept_state >= 0:
        involved |= accept[cfg.accept_state]
    return not involved & guide.keys.lexicon_terminals


def _replay(guide: gr.Guide, tokens: Sequence[int]) -> int:
    """Feed `tokens`, checking every mask against the cache-off mask; the steps checked."""
    m = guide.matcher()
    for token in tokens:
        cfg = m.configuration
        uncached = next_token_mask(guide.oracle, guide.trie, guide.vocab, cfg)
        assert guide.mask(cfg) == uncached
        assert m.accept_tokens([token])
    return len(tokens)


def _generations(guide: gr.Guide, seed: int, count: int) -> list[list[int]]:
    """Token sequences sampled from `guide`'s masks (without their EOS). Sample them from a
    guide of another registry than the one under test, so that the masks compared later are
    computed cold rather than replayed from what sampling cached."""
    rng = random.Random(seed)
    return [generate(guide, rng, budget=rng.randint(25, 55)).tokens[:-1] for _ in range(count)]


@dataclass
class _T2Spy:
    """The genN keys a family cache was asked for; those it answered, with who asked; and who
    published each key first. "Who" is whatever `_spying`'s `who()` says at the time."""

    asked: list[NormalFormKey] = field(default_factory=list)
    answered: list[tuple[NormalFormKey, str]] = field(default_factory=list)
    publishers: dict[NormalFormKey, str] = field(default_factory=dict)

    def cross_hits(self) -> int:
        """Answers to a key that someone else published."""
        return sum(self.publishers.get(key, who) != who for key, who in self.answered)


@contextmanager
def _spying(cache: MaskCache, who: Callable[[], str] = lambda: "") -> Iterator[_T2Spy]:
    spy = _T2Spy()
    real_get, real_publish = cache.get, cache.publish

    def get(key, *flags):
        spy.asked.append(key)
        entry = real_get(key, *flags)
        if entry is not None:
            spy.answered.append((key, who()))
        return entry

    def publish(entry):
        spy.publishers.setdefault(entry.key, who())  # before it can be answered
        return real_publish(entry)

    cache.get, cache.publish = get, publish
    try:
        yield spy
    finally:
        del cache.get, cache.publish


# -- identities and the guard ---------------------------------------------------------------

# Pending lexemes no lexicon can be, where no identifier may come next either.
LEXICON_INERT = [
    b"sel",
    b"select 1 ",
    b"select 1 <",
    b"select 1 |",
    b"select 1 /* note",
    b"select 1 -- note",
    b"select 1 fr",  # FROM, or an alias: no table or column of either schema starts so
    b"select 1 where 2 ",
]


def _same_keys(one: gr.Guide, other: gr.Guide) -> list[tuple[int, int]]:
    """The scan states of LEXICON_INERT in both guides, after checking that each has one key
    and one identity in both."""
    states = []
    for text in LEXICON_INERT:
        a, b = (g.oracle.feed(g.oracle.initial, text) for g in (one, other))
        key = one.normal_form.key(a)
        assert key is not None and key == other.normal_form.key(b), text
        identities = [g.compiled.scanner.identity(c.scan_state) for g, c in ((one, a), (other, b))]
        assert identities[0].digest == identities[1].digest
        assert len(identities[0].states) == len(identities[1].states)
        states.append((a.scan_state, b.scan_state))
    return states


def test_a_guarded_configuration_has_one_key_in_scanners_of_different_lexicons() -> None:
    registry = gr.Registry()
    hr, school = _schema_guide(HR_TABLES, registry), _schema_guide(SCHOOL_TABLES, registry)
    assert hr.compiled.scanner.num_states != school.compiled.scanner.num_states
    assert hr.cache is not school.cache and hr.family_cache is school.family_cache
    # one role over two schemas: its base scanner's states, numbered alike in both
    states = _same_keys(hr, school)
    assert all(a == b < hr.compiled.scanner.start for a, b in states)
    # two roles: other base scanners, other ids; the identities do not differ
    analyst, clerk = _role_guide("analyst", registry), _role_guide("clerk", registry)
    assert analyst.family_cache is clerk.family_cache
    assert any(a != b for a, b in _same_keys(analyst, clerk))


def test_the_guard_fails_where_a_lexicon_can_be_consulted() -> None:
    registry = gr.Registry()
    analyst, clerk = _role_guide("analyst", registry), _role_guide("clerk", registry)
    with_x = _schema_guide({"t": ["x", "y"]}, registry)
    for guide, text in [
        (analyst, b""),  # a fresh lexeme: every terminal is live, the lexicon ones too
        (analyst, b"select * from emplo"),  # inside a table name
        (clerk, b"select * from ord"),
        # an alias, or `upper(`: FUNCTION_1 is a lexicon (the analyst calls two of its names)
        (analyst, b"select 1 upp"),
        # a blob now, but its last accept is the column `x`: the winner if the blob dies
        (with_x, b"select 1 where x'"),
    ]:
        cfg = guide.oracle.feed(guide.oracle.initial, text)
        assert not _guard_passes(guide, cfg) and guide.normal_form.key(cfg) is None, text
        assert guide.keys.lexicon_visible(cfg), text
    # the clerk has no function list: COUNT_OPEN keeps its L1 regex, no lexicon there
    cou = clerk.oracle.feed(clerk.oracle.initial, b"select 1 cou")
    assert "COUNT_OPEN" in clerk.compiled.names_of(clerk.oracle.scanner_tables()[1][cou.scan_state])
    assert clerk.normal_form.key(cou) is not None


# Identifier positions in T1's terms (A holds a column) whose pending lexeme no lexicon can be:
# the walk stays inside a whitespace run, a number, a string or a blob, and every byte that
# would end it (where a column could come next) starts a CD class.
A_MEETS_LEXICON = [
    b"select ",
    b"select 12",
    b"select 1 where 12",
    b"select 1 where 2 = 1.5e",
    b"select 1 where 'ab",
    b"select 1 where x'0",
]


def test_the_guard_does_not_ask_a() -> None:
    """A is part of the key, not of the guard: where only A meets the lexicon terminals, the
    configuration has a genN key, one key in scanners of different lexicons."""
    hr, school = _hr_and_school()
    for text in A_MEETS_LEXICON:
        a, b = (g.oracle.feed(g.oracle.initial, text) for g in (hr, school))
        for guide, cfg in ((hr, a), (school, b)):
            assert cfg.lexeme_length > 0, text
            lexicons = guide.keys.lexicon_terminals
            assert guide.oracle.allowed_mask(cfg) & lexicons, text
            assert guide.keys.is_identifier_position(cfg), text
            assert not guide.keys.lexicon_visible(cfg) and _guard_passes(guide, cfg), text
        key = hr.normal_form.key(a)
        assert key is not None and key == school.normal_form.key(b), text


def test_t2_serves_positions_where_a_meets_the_lexicons_with_the_cache_off_mask() -> None:
    """Inside a number, a string, a blob or a whitespace run where a column could stand, a
    second schema's step walk comes from the first schema's T2 entry, and its mask — CD
    residue included, stepped on its own lexicons — is the cache-off mask."""
    registry = gr.Registry()
    hr, school = _schema_guide(HR_TABLES, registry), _schema_guide(SCHOOL_TABLES, registry)
    for text in A_MEETS_LEXICON:
        a, b = (g.oracle.feed(g.oracle.initial, text) for g in (hr, school))
        assert hr.mask(a) == next_token_mask(hr.oracle, hr.trie, hr.vocab, a), text
        with _spying(school.family_cache) as spy:
            served = school.mask(b)
        key = school.normal_form.key(b)
        assert key in spy.asked and key in {k for k, _ in spy.answered}, text  # a T2 hit
        assert key not in spy.publishers, text  # not walked here
        assert served == next_token_mask(school.oracle, school.trie, school.vocab, b), text
        # T1 now holds the reader's own walk under its identifier key
        own = walk_context_independent(school.oracle, school.trie, b)
        entry = school.cache.get(school.keys.key(b), True)
        assert entry is not None and list(entry.walk.ci_nodes) == list(own.ci_nodes), text
        assert entry.walk.cd_classes == own.cd_classes, text


def test_the_cache_refuses_a_genn_key_where_the_walk_can_consult_a_lexicon(monkeypatch) -> None:
    """Inject the condition: genN keys made whatever the guard says. The cache refuses them
    where the walk could consult a lexicon — by an exception, not an assert — and must be told
    whether it could; where only A meets the lexicon terminals it answers them."""
    guide = _role_guide("analyst", gr.Registry())
    emplo = guide.oracle.feed(guide.oracle.initial, b"select * from emplo")
    guide.mask(emplo)  # fine with the real guard: T1 and the walk, no T2
    real = NormalForm.key

    def unguarded(self: NormalForm, cfg: gr.Configuration, root: int = 0):
        lexicons, self.lexicon_terminals = self.lexicon_terminals, 0
        try:
            return real(self, cfg, root)
        finally:
            self.lexicon_terminals = lexicons

    monkeypatch.setattr(NormalForm, "key", unguarded)
    for cfg in (guide.oracle.initial, emplo):
        guide.cache = MaskCache()  # a T1 miss, so that T2 is asked
        guide._masks.clear()  # and no mask kept by stack and scan part
        with pytest.raises(IdentifierCompositionError, match="Proposition 6"):
            guide.mask(cfg)
    monkeypatch.undo()
    number = guide.oracle.feed(guide.oracle.initial, b"select 1 where 12")
    key = guide.normal_form.key(number)
    assert key is not None and guide.keys.is_identifier_position(number)
    with pytest.raises(TypeError):
        guide.family_cache.get(key, True)
    with pytest.raises(IdentifierCompositionError):
        guide.family_cache.get(key, False, True)
    guide.family_cache.get(key, True, False)


def test_guard_failing_configurations_never_touch_t2() -> None:
    """Every genN key the family cache sees was made for a configuration that passes the
    guard; every configuration that fails it gets no key at all. Configurations where only A
    meets the lexicon terminals pass it, and are served from T2."""
    guide = _role_guide("analyst", gr.Registry())
    made: dict[NormalFormKey, bool] = {}
    failing = 0
    real_key = guide.normal_form.key

    def key(cfg: gr.Configuration, root: int = 0) -> NormalFormKey | None:
        nonlocal failing
        found = real_key(cfg, root)
        assert (found is not None) == _guard_passes(guide, cfg)
        if found is None:
            failing += 1
        else:  # whether it is an identifier position in T1's terms (A meets the lexicons)
            made[found] = made.get(found, False) or guide.keys.is_identifier_position(cfg)
        return found

    guide.normal_form.key = key  # type: ignore[method-assign]
    replays = _generations(_role_guide("analyst", gr.Registry()), seed=3, count=12)
    with _spying(guide.family_cache) as spy:
        steps = sum(_replay(guide, tokens) for tokens in replays)
    assert steps > 100 and failing > 0 and made
    assert set(spy.asked) <= set(made) and set(spy.publishers) <= set(made)
    # the replays reach guarded configurations where A meets the lexicons, and T2 answers some
    assert any(identifier for identifier in made.values())
    assert any(made[key] for key, _ in spy.answered)


@cache
def _hr_and_school() -> tuple[gr.Guide, gr.Guide]:
    registry = gr.Registry()
    return _schema_guide(HR_TABLES, registry), _schema_guide(SCHOOL_TABLES, registry)


FRAGMENTS = [
    "1", "0", "9", ".", "e", "E", "+", "-", "'", "''", '"', "x'", "ab", "s", "se", "l", " ",
    "\n", "=", "<", ">", "!", "|", "*", "/", "(", ")", ",", "--", "/*", "*/", "is", "no", "t",
    "ca", "cast(", "a.", ":",
]  # fmt: skip


@given(
    st.sampled_from(
        [b"", b"select ", b"select 1 ", b"select 1 where ", b"select 1 where 2 ", b"select 1 - "]
    ),
    st.lists(st.sampled_from(FRAGMENTS), max_size=8),
)
def test_a_shared_entry_is_the_readers_own_walk(prefix: bytes, fragments: list[str]) -> None:
    """For configurations reached by the same bytes in scanners of different lexicons: where
    the guard passes in both, the keys are equal, and translating one scanner's walk through
    the canonical numbering gives exactly the other's walk (CI nodes and CD classes)."""
    hr, school = _hr_and_school()
    data = prefix + "".join(fragments).encode()
    cfgs = [g.oracle.initial for g in (hr, school)]
    for byte in data:
        nxt = [g.oracle.step(c, byte) for g, c in zip((hr, school), cfgs, strict=True)]
        if None in nxt:
            break
        cfgs = nxt
    a, b = cfgs
    key = hr.normal_form.key(a)
    if key is None or school.normal_form.key(b) is None:
        return
    assert key == school.normal_form.key(b)
    walk_a = walk_context_independent(hr.oracle, hr.trie, a)
    walk_b = walk_context_independent(school.oracle, school.trie, b)
    shared = hr.normal_form.to_canonical(a, walk_a)
    assert shared == school.normal_form.to_canonical(b, walk_b)
    translated = school.normal_form.to_local(b, shared)
    assert list(translated.ci_nodes) == list(walk_b.ci_nodes)
    assert translated.cd_classes == walk_b.cd_classes


# Bytes after which the pending lexeme is lexicon-inert in both schemas: numbers, blobs,
# comments, operators, aliases (an alias followed by `'` becomes a blob: the tail matters).
INERT_FRAGMENTS = ["x'", "X'", "0", "1", "a", " ", "<", "/*", "*", "'", "e", "-", "|", ".", "a'"]


def test_equal_t2_keys_have_equal_walks() -> None:
    """OBL-KEY1 for T2, over every configuration reached by up to two fragments (and some
    reached by three) after two prefixes, in two scanners: configurations with one genN key
    have one canonical walk. Sharing happens: keys are shared by distinct raw keys."""
    groups: dict[NormalFormKey, list[tuple[bytes, CanonicalWalk]]] = {}
    raw_keys = set()
    for guide in _hr_and_school():
        for prefix in (b"select 1 ", b"select 1 where 2 "):
            for n in range(4):
                for fragments in itertools.product(INERT_FRAGMENTS, repeat=n):
                    if n == 3 and zlib.crc32("".join(fragments).encode()) % 4:
                        continue  # a fixed quarter of the three-fragment sequences
                    data = prefix + "".join(fragments).encode()
                    cfg = guide.oracle.try_feed(guide.oracle.initial, data)
                    key = None if cfg is None else guide.normal_form.key(cfg)
                    if key is None or (guide, guide.keys.key(cfg)) in raw_keys:
                        continue
                    raw_keys.add((guide, guide.keys.key(cfg)))
                    walk = walk_context_independent(guide.oracle, guide.trie, cfg)
                    groups.setdefault(key, []).append(
                        (data, guide.normal_form.to_canonical(cfg, walk))
                    )
    for members in groups.values():
        first_data, first_walk = members[0]
        for data, walk in members[1:]:
            assert walk == first_walk, (first_data, data)
    assert len(raw_keys) > 2 * len(groups) > 100


def test_a_t2_entrys_walk_and_id_are_derived_when_asked() -> None:
    """A T2 entry's canonical walk and content id are derived when first asked (no mask or
    audit record names one): the id is BLAKE2b over its key's encoding, the canonical tag and
    its walk's payload (a T1 entry's likewise, with its own tag); its size is the payload's and
    the tokens' bytes; a different walk published under its key is refused."""
    guide = _hr_and_school()[0]
    entries = []
    for data in (b"select 1 ", b"select 1 where 2 /"):
        cfg = guide.oracle.feed(guide.oracle.initial, data)
        walk = walk_context_independent(guide.oracle, guide.trie, cfg)
        tokens = ci_tokens(guide.trie, guide.vocab.size, walk)
        canonical = guide.normal_form.to_canonical(cfg, walk)
        key = guide.normal_form.key(cfg)
        assert key is not None
        entry = make_normal_form_entry(key, lambda c=canonical: c, walk, tokens)
        assert "entry_id" not in vars(entry) and "walk" not in vars(entry)  # not derived yet
        payload = encode_walk(canonical.walk)
        digest = hashlib.blake2b(digest_size=16)
        for part in (encode_normal_form_key(key), CANONICAL_ENCODING, payload):
            digest.update(part)
        assert entry.entry_id == digest.hexdigest() and entry.walk is canonical
        width = 1 if isinstance(tokens, bytes) else tokens.itemsize
        assert entry.size == len(payload) + width * len(tokens)
        # the T1 entry of the same walk: its id is hashed from the payload's parts
        local = make_entry(guide.keys.key(cfg), walk, tokens)
        digest = hashlib.blake2b(digest_size=16)
        for part in (encode_key(local.key), ENCODING, encode_walk(walk)):
            digest.update(part)
        assert local.entry_id == digest.hexdigest()
        assert local.size == len(encode_walk(walk)) + width * len(tokens)
        entries.append(entry)
    first, second = entries
    assert first.walk != second.walk
    cache = MaskCache()
    assert cache.publish(first) is first
    with pytest.raises(CacheKeyConflict):
        cache.publish(dataclasses.replace(second, key=first.key))


def test_a_kept_last_accept_is_told_from_one_the_walk_reached() -> None:
    """Two configurations with one genN key whose last accepts are different states with one
    accept set; from both, the walk reaches the first one's last-accept state again. The
    canonical walk must say "the state the walk reached", not "p" (which it equals by value in
    one of them): else the reader's translated walk would name its own p, unlike its own walk."""
    grammar = gr.Grammar.from_lark('start: T ";"\nT: /a(ca)*|b(d|(ca)*)/\n')
    vocab = gr.Vocabulary([*(bytes((b,)) for b in range(256)), b"a;", None], eos_token_ids=257)
    guide = gr.compile(grammar, vocab, registry=gr.Registry())
    oracle = guide.oracle
    via_a, via_b = (oracle.feed(oracle.initial, text) for text in (b"ac", b"bc"))
    assert via_a.scan_state == via_b.scan_state and via_a.accept_state != via_b.accept_state
    key = guide.normal_form.key(via_a)
    assert key is not None and key == guide.normal_form.key(via_b)
    walks = [walk_context_independent(oracle, guide.trie, cfg) for cfg in (via_a, via_b)]
    assert via_a.accept_state in {accept for _, _, _, accept, _ in walks[1].cd_classes}
    canonical = guide.normal_form.to_canonical(via_a, walks[0])
    assert canonical == guide.normal_form.to_canonical(via_b, walks[1])
    assert guide.normal_form.to_local(via_b, canonical).cd_classes == walks[1].cd_classes
    # through the tiers: via_b's T1 entry, made from via_a's T2 entry, is its own walk's
    guide.mask(via_a)
    hits = guide.family_cache.stats.hits
    entry, _ = guide.mask_with_entry(via_b)
    assert guide.family_cache.stats.hits == hits + 1
    own = make_entry(guide.keys.key(via_b), walks[1], ci_tokens(guide.trie, vocab.size, walks[1]))
    assert entry.entry_id == own.entry_id


# -- cache-on ≡ cache-off across role languages (OBL-KEY1) ----------------------------------


def _cross_checked(first: gr.Guide, second: gr.Guide, replays: dict[str, list[list[int]]]) -> int:
    """Replay on `first`, then on `second` (sharing its family cache), checking every mask;
    the number of T2 hits in `second` on entries `first` published."""
    assert first.family_cache is second.family_cache and first.cache is not second.cache
    phase = "first"
    with _spying(first.family_cache, lambda: phase) as spy:
        for tokens in replays["first"]:
            _replay(first, tokens)
        phase = "second"
        for tokens in replays["second"]:
            _replay(second, tokens)
    return spy.cross_hits()


def test_roles_with_different_tables_share_t2_entries_soundly() -> None:
    registry, sampler = gr.Registry(), gr.Registry()
    analyst, clerk = _role_guide("analyst", registry), _role_guide("clerk", registry)
    replays = {
        "first": _generations(_role_guide("analyst", sampler), seed=21, count=15),
        "second": _generations(_role_guide("clerk", sampler), seed=22, count=15),
    }
    assert _cross_checked(analyst, clerk, replays) > 0


@cache
def _spider(db: str) -> tuple[gr.Schema, list[str]]:
    schema = gr.Schema.from_sqlite(asset("data", "spider", "database", db, f"{db}.sqlite"))
    with open(spider_gold(), encoding="utf-8") as f:
        gold = [line.split("\t") for line in f.read().splitlines()]
    return schema, [sql.strip().rstrip(";") + ";" for sql, name in gold if name == db]


@cache
def _spider_vocab(*dbs: str) -> gr.Vocabulary:
    """SQL words and the databases' names, with and without a leading space, and every byte."""
    names = [
        name
        for db in dbs
        for table in _spider(db)[0].tables
        for name in (table.name, *(c.name for c in table.columns))
    ]
    spellings = {bytes((b,)) for b in range(256)}
    for word in [*_SQL_WORDS, *names]:
        spellings.update({word.encode(), b" " + word.encode()})
    ordered = sorted(spellings)
    return gr.Vocabulary([*ordered, None], eos_token_ids=len(ordered))


SPIDER_PAIR = ("hr_1", "college_2")


def test_two_spider_schemas_share_t2_entries_soundly() -> None:
    vocab = _spider_vocab(*SPIDER_PAIR)
    registry, sampler = gr.Registry(), gr.Registry()

    def guide(db: str, registry: gr.Registry) -> gr.Guide:
        return gr.compile(_sqlite(), vocab, schema=_spider(db)[0], registry=registry)

    first, second = (guide(db, registry) for db in SPIDER_PAIR)
    replays = {}
    for role, db, seed in (("first", SPIDER_PAIR[0], 31), ("second", SPIDER_PAIR[1], 32)):
        gold = [first.trie.tokenize(sql.encode()) for sql in _spider(db)[1][:12]]
        replays[role] = gold + _generations(guide(db, sampler), seed, count=6)
    assert _cross_checked(first, second, replays) > 0


# -- OBL-KEY1 combined: threads, cross-role hits, a rollover in the middle ------------------


def _superseded_dialect() -> gr.Grammar:
    """sqlite with one more built-in function: FUNCTION_1 is a lexicon category, so the
    family (and its T2 cache) stays while the T1 namespace of every language that keeps
    FUNCTION_1's L1 regex rolls over."""
    text = bundled_grammar_text("sqlite")
    newer = text.replace("|zeroblob)[", "|zeroblob|zeta)[")
    assert newer != text
    return gr.Grammar.from_lark(newer, "sqlite.lark")


ROLES = ("analyst", "clerk", "auditor")


def _concurrent_replays_across_a_rollover(per_role: int, threads: int) -> None:
    """Threads replay sampled generations of three roles on guides sharing one registry and
    checking every mask against the cache-off mask; when half the steps are done, the dialect
    is superseded: guides of the new version are compiled (rolling the registry's namespaces
    over) and replay side by side with the old ones, on the same T2 cache. Any divergence or
    CacheKeyConflict fails the run."""
    old, new = _sqlite(), _superseded_dialect()
    sampler = gr.Registry()
    rng = random.Random(7)
    replays = {
        version: [
            (version, role, tokens)
            for n, role in enumerate(ROLES)
            for tokens in _generations(_role_guide(role, sampler, grammar), 40 + n, per_role)
        ]
        for version, grammar in (("old", old), ("new", new))
    }
    for items in replays.values():
        rng.shuffle(items)
    # The first half of the old replays runs alone; the rest of them runs mixed with the new
    # ones, whose threads wait for the first half (queued first, so it always gets done).
    first_half = replays["old"][: len(replays["old"]) // 2]
    rest = replays["old"][len(first_half) :] + replays["new"]
    rng.shuffle(rest)
    halfway_steps = sum(len(tokens) for _, _, tokens in first_half)
    registry = gr.Registry()
    old_guides = {role: _role_guide(role, registry, old) for role in ROLES}
    halfway = threading.Event()
    lock = threading.Lock()
    done = Counter()
    replaying = threading.local()  # which guide this thread replays on: "version/role"

    def run(item: tuple[str, str, list[int]]) -> None:
        version, role, tokens = item
        if version == "new":
            halfway.wait()
            guide = _role_guide(role, registry, new)  # single flight: one build per role
        else:
            guide = old_guides[role]
        replaying.guide = f"{version}/{role}"
        try:
            steps = _replay(guide, tokens)
        except BaseException:
            halfway.set()  # a failure must not leave the new version's threads waiting forever
            raise
        with lock:
            done[version] += steps
            if done["old"] >= halfway_steps:
                halfway.set()

    family = old_guides["clerk"].family_cache
    with (
        _spying(family, lambda: replaying.guide) as spy,
        ThreadPoolExecutor(threads) as pool,
    ):
        list(pool.map(run, first_half + rest))  # re-raises the first failure of any thread
    new_guides = {role: _role_guide(role, registry, new) for role in ROLES}
    assert done["new"] > 0 and done["old"] > halfway_steps
    assert registry.stats().rollovers >= 1
    assert new_guides["clerk"].cache is not old_guides["clerk"].cache  # rolled over
    assert all(g.family_cache is family for g in [*old_guides.values(), *new_guides.values()])
    assert spy.cross_hits() > 0


def test_concurrent_replays_across_a_rollover_match_cache_off() -> None:
    _concurrent_replays_across_a_rollover(per_role=4, threads=6)


@pytest.mark.long
def test_concurrent_replays_across_a_rollover_match_cache_off_long() -> None:
    _concurrent_replays_across_a_rollover(
        per_role=long_size(full=40, reduced=8), threads=long_size(full=16, reduced=8)
    )


# -- measuring T2's share on Spider ---------------------------------------------------------


def t2_share(guide: gr.Guide, statements: Sequence[str]) -> Counter[tuple[str, str]]:
    """Replay `statements` on `guide` and count which tier answered each walk lookup: keys
    ("T1" | "T2" | "walked" | "guarded", "step" | "inner"), "step" being the whole vocabulary's
    walk at each decoding step, "inner" the walks below CD classes, and "guarded" counting the
    T1 misses that passed the guard (those T2 was asked about)."""
    counts: Counter[tuple[str, str]] = Counter()
    real_t1, real_t2 = guide.cache.get, guide.family_cache.get

    def tier(name: str, real):
        def get(key, *flags):
            entry = real(key, *flags)
            where = "step" if key.root == 0 else "inner"
            if name == "T2":
                counts["guarded", where] += 1
            if entry is not None:
                counts[name, where] += 1
            elif name == "T1":
                counts["walked", where] += 1  # a T1 miss, until T2 answers it
            return entry

        return get

    guide.cache.get, guide.family_cache.get = tier("T1", real_t1), tier("T2", real_t2)
    try:
        for sql in statements:
            m = guide.matcher()
            for token in guide.trie.tokenize(sql.encode()):
                guide.mask(m.configuration)
                assert m.accept_tokens([token])
    finally:
        del guide.cache.get, guide.family_cache.get
    for where in ("step", "inner"):
        counts["walked", where] -= counts["T2", where]  # T1 misses that T2 answered
    return counts


def _measure(tokenizer: str, first: str, second: str) -> None:
    vocab = gr.Vocabulary.from_file(asset("tokenizers", tokenizer, "tokenizer.json"))
    registry = gr.Registry()
    guides = [
        gr.compile(_sqlite(), vocab, schema=_spider(db)[0], registry=registry)
        for db in (first, second)
    ]
    for db, guide in zip((first, second), guides, strict=True):
        counts = t2_share(guide, _spider(db)[1])
        for where in ("step", "inner"):
            total = sum(counts[name, where] for name in ("T1", "T2", "walked"))
            served = {name: counts[name, where] / total for name in ("T1", "T2", "walked")}
            misses = counts["T2", where] + counts["walked", where]
            print(
                f"{db} {where} walks: {total}; "
                + ", ".join(f"{name} {share:.1%}" for name, share in served.items())
                + f"; T2 answered {counts['T2', where] / misses:.1%} of the T1 misses, "
                f"{counts['T2', where] / max(counts['guarded', where], 1):.1%} of those "
                "passing the guard"
            )


if __name__ == "__main__":
    _measure(*(sys.argv[1:] or ["gpt2", *SPIDER_PAIR]))

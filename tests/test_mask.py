"""Exact masks: the trie walk (CI/CD split) against the executable specification, and the
matcher API."""

from __future__ import annotations

import gc
import random
import warnings
from dataclasses import replace
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gridrail as gr
import gridrail.guide as guide_module
import gridrail.mask.bitmask as bitmask_module
from assets import asset, spider_gold
from gridrail.mask.bitmask import TokenSet
from gridrail.mask.compute import EmptyMaskError
from gridrail.mask.walk import walk_context_independent
from gridrail.spec import spec_mask
from gridrail.vocab import ByteCompletenessWarning
from support.long_tier import long_size


@cache
def _sqlite() -> gr.CompiledGrammar:
    return gr.compile_grammar(gr.Grammar.bundled("sqlite"))


def _tiny_vocab(words: list[str]) -> gr.Vocabulary:
    """Every single byte (so the vocabulary is byte complete), the given words, then EOS."""
    spellings = [bytes((b,)) for b in range(256)] + [w.encode() for w in words]
    return gr.Vocabulary([*spellings, None], eos_token_ids=len(spellings))


WORDS = ["select", " *", " from", " emplo", "yees", "y", "yees where", "yer", " where", "yees;"]


@pytest.fixture(scope="module")
def tiny_guide() -> gr.Guide:
    return gr.compile(_sqlite(), _tiny_vocab(WORDS))


def _id(guide: gr.Guide, word: str) -> int:
    return guide.vocab.aliases(word.encode())[0]


def _node(guide: gr.Guide, spelling: bytes) -> int:
    trie = guide.trie
    return next(i for i in range(trie.num_nodes) if trie.spelling(i) == spelling)


def test_boundary_crossing_token_is_decided_on_the_live_stack(tiny_guide: gr.Guide) -> None:
    """Paper §4.2: `yees where` completes `employees`, then begins `where`; whether that may
    follow depends on the stack under the table name, so it is CD — never part of the CI set."""
    oracle = tiny_guide.oracle
    in_select = oracle.feed(oracle.initial, b"select * from emplo")
    in_insert = oracle.feed(oracle.initial, b"insert into emplo")
    for cfg in (in_select, in_insert):
        walk = walk_context_independent(oracle, tiny_guide.trie, cfg)
        assert _node(tiny_guide, b"yees") in walk.ci_nodes
        assert _node(tiny_guide, b"y") in walk.ci_nodes
        cd_nodes = {node for node, *_ in walk.cd_classes}
        assert _node(tiny_guide, b"yees ") in cd_nodes  # the byte that ends the lexeme
        assert _node(tiny_guide, b"yees where") not in walk.ci_nodes
    yees_where = _id(tiny_guide, "yees where")
    assert yees_where in tiny_guide.mask(in_select)  # `... from employees where`
    assert yees_where not in tiny_guide.mask(in_insert)  # `insert into employees where`
    assert _id(tiny_guide, "yees;") in tiny_guide.mask(in_select)
    assert tiny_guide.vocab.eos_token_id not in tiny_guide.mask(in_select)  # `;` is required


def test_eos_only_at_a_sentence(tiny_guide: gr.Guide) -> None:
    oracle = tiny_guide.oracle
    done = oracle.feed(oracle.initial, b"select * from employees;")
    assert tiny_guide.vocab.eos_token_id in tiny_guide.mask(done)
    assert tiny_guide.mask(done) == spec_mask(oracle, tiny_guide.vocab, done)


def test_tiny_vocabulary_fast_equals_spec_on_every_prefix(tiny_guide: gr.Guide) -> None:
    oracle = tiny_guide.oracle
    text = b"select * from employees where salary > 10 and name = 'x' order by 1;"
    for k in range(len(text) + 1):
        cfg = oracle.feed(oracle.initial, text[:k])
        fast, spec = tiny_guide.mask(cfg), spec_mask(oracle, tiny_guide.vocab, cfg)
        assert fast == spec, f"divergence after {text[:k]!r}"


# -- fast ≡ spec on real tokenizers, sampled steps of statement replays -----------------------

# a step costs the spec's trial over the whole vocabulary: ~0.2 s (llama2, 32k) to ~1 s (qwen2,
# 151k) on CI's cores, so the larger vocabularies get fewer steps by default (2,000 each: long)
STEPS_PER_TOKENIZER = {"gpt2": 100, "llama2": 150, "qwen2": 40, "llama3": 40}
LONG_STEPS_PER_TOKENIZER = long_size(full=2000, reduced=20)
EXTRA_STATEMENTS = [
    "SELECT name, 'O''Brien' || \"x\" FROM t WHERE a >= -1.5e3 AND b <> 'é中文';",
    "SELECT count(*) FROM (SELECT T1.a FROM t AS T1 JOIN u ON T1.id = u.id) GROUP BY 1;",
    "WITH x AS (SELECT 1) SELECT * FROM x -- trailing comment\n;",
]


def _statements() -> list[str]:
    with open(spider_gold(), encoding="utf-8") as f:
        lines = [line.split("\t", 1)[0].strip() for line in f]
    rng = random.Random(3)
    picked = [s if s.endswith(";") else s + ";" for s in rng.sample(lines, 300)]
    return picked + EXTRA_STATEMENTS


def _sampled_steps(name: str, quota: int, seed: int):
    """A guide and `quota` sampled (token ids, k) steps — after the first k tokens of a replay —
    grouped by statement in increasing k so each statement is replayed once."""
    from tokenizers import Tokenizer

    path = asset("tokenizers", name, "tokenizer.json")
    tokenizer = Tokenizer.from_file(str(path))
    vocab = gr.Vocabulary.from_file(path)
    guide = gr.compile(_sqlite(), vocab)
    replays = [tokenizer.encode(s, add_special_tokens=False).ids for s in _statements()]
    steps = [(r, k) for r, ids in enumerate(replays) for k in range(len(ids) + 1)]
    picked = sorted(random.Random(seed).sample(steps, quota))
    return guide, [(replays[r], k) for r, k in picked]


def _check_fast_equals_spec(name: str, quota: int, seed: int) -> None:
    guide, steps = _sampled_steps(name, quota, seed)
    m = guide.matcher()
    for ids, k in steps:
        if m.accepted_tokens() != ids[: m.num_accepted] or m.num_accepted > k:
            m.reset()
        assert m.accept_tokens(ids[m.num_accepted : k]), f"{name}: replay rejected before {k}"
        cfg = m.configuration
        fast, spec = guide.mask(cfg), spec_mask(guide.oracle, guide.vocab, cfg)
        where = guide.vocab.token_bytes(ids[k - 1]) if k else b"<start>"
        assert fast == spec, f"{name}: divergence after {where!r} (step {k} of {ids})"
        assert ids[k] in fast if k < len(ids) else guide.vocab.eos_token_id in fast


@pytest.mark.parametrize("name", sorted(STEPS_PER_TOKENIZER))
def test_fast_equals_spec_on_real_tokenizers(name: str) -> None:
    _check_fast_equals_spec(name, STEPS_PER_TOKENIZER[name], seed=1)


@pytest.mark.long
@pytest.mark.parametrize("name", sorted(STEPS_PER_TOKENIZER))
def test_fast_equals_spec_on_real_tokenizers_long(name: str) -> None:
    _check_fast_equals_spec(name, LONG_STEPS_PER_TOKENIZER, seed=2)


# -- the matcher API ---------------------------------------------------------------------------


def test_matcher_accept_validate_rollback_reset(tiny_guide: gr.Guide) -> None:
    m = tiny_guide.matcher()
    select, star, frm = (_id(tiny_guide, w) for w in ("select", " *", " from"))
    emplo = _id(tiny_guide, " emplo")
    assert m.validate_tokens([select, star, emplo, frm]) == [select, star]  # `*` takes no alias
    before = m.configuration
    assert not m.accept_tokens([select, select])  # all or nothing; SELECT is reserved
    assert m.configuration is before
    assert m.accept_tokens([select, star, frm])
    m.rollback(2)
    assert m.accept_tokens([star, frm, emplo, _id(tiny_guide, "yees;")])
    assert not m.is_terminated()
    eos = tiny_guide.vocab.eos_token_id
    assert m.accept_tokens([eos]) and m.is_terminated()
    assert not m.accept_tokens([select])
    m.rollback(1)
    assert not m.is_terminated()
    m.reset()
    assert m.configuration is tiny_guide.oracle.initial
    with pytest.raises(ValueError, match="outside the vocabulary"):
        m.accept_tokens([tiny_guide.vocab.size])
    with pytest.raises(ValueError, match="cannot roll back"):
        m.rollback(1)


BITMASK_DTYPES = (np.int32, ">i4", "<i4", np.int64, np.uint32, np.float32)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    dtype=st.sampled_from(BITMASK_DTYPES),
    rows=st.integers(1, 3),
    wider=st.booleans(),
    layout=st.sampled_from(("C", "F", "every other row", "read-only")),
    row=st.one_of(
        st.integers(-4, 4), st.just(True), st.builds(np.int64, st.integers(-4, 4)), st.just(1.0)
    ),
)
def test_fill_bitmask_writes_and_refuses_alike_with_and_without_kernels(
    tiny_guide: gr.Guide, monkeypatch, dtype, rows, wider, layout, row
) -> None:
    """The kernel that writes a row (`write_mask_row`) writes exactly where the Python path
    writes, and leaves to it whatever it would convert or refuse."""
    m = tiny_guide.matcher()
    m.accept_tokens([_id(tiny_guide, "select")])
    width = tiny_guide.row_words + wider

    def bitmask() -> np.ndarray:
        if layout == "every other row":
            return np.full((2 * rows, width), 7, dtype=dtype)[::2]
        array = np.full((rows, width), 7, dtype=dtype, order="F" if layout == "F" else "C")
        array.flags.writeable = layout != "read-only"
        return array

    def fill() -> tuple[np.ndarray, str | None]:
        array = bitmask()
        try:
            m.fill_bitmask(array, row)
        except gr.GridrailError as error:
            return array, f"{type(error).__name__}: {error}"
        return array, None

    with_kernel = fill()
    monkeypatch.setattr(guide_module, "write_mask_row", None)
    monkeypatch.setattr(bitmask_module, "write_mask_row", None)
    without = fill()
    assert with_kernel[1] == without[1]
    assert with_kernel[0].dtype == without[0].dtype and (with_kernel[0] == without[0]).all()
    common = dtype in (np.int32, "<i4") and layout == "C" and not wider and type(row) is int
    if common and -rows <= row < rows:  # the call a decode loop makes: the kernel's, when built
        assert with_kernel[1] is None and (with_kernel[0] != 7).any()


def test_a_warm_step_writes_the_mask_of_its_own_configuration() -> None:
    """`fill_bitmask` on a configuration the guide's memo holds takes its short path (one
    lookup, the row kernel): the row is the mask `allowed()` gives at every step, on a first
    (memo-filling) and a second (warm) pass, and only EOS once the statement has ended (where
    the configuration's own mask also has a space)."""
    tiny_guide = gr.compile(_sqlite(), _tiny_vocab([*WORDS, " "]))
    words = ["select", " *", " from", " emplo", "yees;"]
    for warm in (False, True):
        m = tiny_guide.matcher()
        for word in [*words, None]:
            bitmask = gr.allocate_bitmask(2, tiny_guide.vocab.size)
            before = replace(tiny_guide.cache_stats()["masks"])
            m.fill_bitmask(bitmask, 1)
            after = tiny_guide.cache_stats()["masks"]
            if word is not None:  # one lookup per fill: a hit once the first pass stored it
                assert (after.hits - before.hits, after.misses - before.misses) == (warm, 1 - warm)
            written = {i for i in range(tiny_guide.vocab.size) if bitmask[1, i // 32] >> i % 32 & 1}
            assert written == set(m.allowed().ids()), (warm, word)
            assert not bitmask[0].any()
            if word is None:
                assert written == set(tiny_guide.vocab.eos_token_ids)
                break
            assert m.accept_tokens([_id(tiny_guide, word)])
            if word == words[-1]:
                assert _id(tiny_guide, " ") in m.allowed().ids()
                assert m.accept_tokens([tiny_guide.vocab.eos_token_id]) and m.is_terminated()


def test_fill_bitmask_layout(tiny_guide: gr.Guide) -> None:
    m = tiny_guide.matcher()
    mask = gr.allocate_bitmask(2, tiny_guide.vocab.size)
    assert mask.shape == (2, (tiny_guide.vocab.size + 31) // 32) and mask.dtype == np.int32
    m.fill_bitmask(mask, 1)
    allowed = {i for i in range(tiny_guide.vocab.size) if (int(mask[1, i // 32]) >> (i % 32)) & 1}
    assert allowed == set(m.allowed().ids())
    assert _id(tiny_guide, "select") in allowed and _id(tiny_guide, " from") not in allowed
    assert not mask[0].any()
    with pytest.raises(ValueError, match="int32 array"):
        m.fill_bitmask(np.zeros((1, 3), dtype=np.int32), 0)
    # what the common call's quick check lets through, the full check judges
    width = mask.shape[1]
    with pytest.raises(ValueError, match="int32 array"):
        m.fill_bitmask(np.zeros((1, width), dtype=">i4"), 0)  # not the native layout
    read_only = gr.allocate_bitmask(1, tiny_guide.vocab.size)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        m.fill_bitmask(read_only, 0)
    with pytest.raises(ValueError, match="integer"):
        m.fill_bitmask(mask, True)
    with pytest.raises(ValueError, match="outside"):
        m.fill_bitmask(mask, 2)
    again = gr.allocate_bitmask(2, tiny_guide.vocab.size)
    m.fill_bitmask(again, np.int64(-1))  # NumPy integers and negative rows, as lists take them
    assert (again[1] == mask[1]).all() and not again[0].any()


def test_forced_tokens_jump_forward() -> None:
    grammar = gr.Grammar.from_lark('start: "select" "(" "x" ")" ";"\n')
    vocab = _tiny_vocab(["select", "(x", "sel"])
    m = gr.compile(grammar, vocab).matcher()
    assert m.accept_tokens(list(vocab.aliases(b"select")))
    forced = m.forced_tokens()
    # after `select` the bytes `(x);` are forced, but `(` and `(x` both spell a start: no
    # singleton mask there, so the forced span is empty
    assert forced == []
    m.accept_tokens(list(vocab.aliases(b"(x")))
    assert [vocab.token_bytes(t) for t in m.forced_tokens()] == [b")", b";"]


def test_empty_mask_raises_instead_of_wedging() -> None:
    grammar = gr.Grammar.from_lark('start: "xyz"\n')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ByteCompletenessWarning)
        vocab = gr.Vocabulary([b"x", b"b", None], eos_token_ids=2)
    matcher = gr.compile(grammar, vocab).matcher()
    assert matcher.accept_tokens([0])  # "x" begins the sentence; nothing can follow it
    with pytest.raises(EmptyMaskError, match="empty mask"):
        matcher.allowed()
    # a vocabulary that cannot even begin a sentence is refused when the guide is made
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ByteCompletenessWarning)
        nothing_fits = gr.Vocabulary([b"a", b"b", None], eos_token_ids=2)
    with pytest.raises(gr.GridrailError, match="can begin a sentence"):
        gr.compile(grammar, nothing_fits)


# -- the warm path: memoized CD residues, bounded memos, rule (ii) in one AND -----------------


def _viable_by_trial(oracle: gr.Oracle, cfg: gr.Configuration) -> bool:
    """docs/semantics.md's per-byte check by brute force: (i), or (ii) — some byte that kills
    the pending lexeme, scanned after emitting it at its last accept, leaves a lexeme that
    passes (i)."""
    trans, live, _ = oracle.scanner_tables()

    def rule_i(c: gr.Configuration) -> bool:
        v = oracle.allowed_mask(c) | oracle.ignored_mask
        return c.lexeme_length == 0 or bool(live[c.scan_state] & v)

    if rule_i(cfg):
        return True
    for byte in range(256):
        if trans[cfg.scan_state * 256 + byte] >= 0:
            continue
        nxt = oracle._scan_byte(cfg, byte)  # emits at the last accept, rescans, scans `byte`
        if nxt is not None and rule_i(nxt):
            return True
    return False


def test_rule_ii_by_live_set_union_equals_trial_over_bytes(monkeypatch) -> None:
    """`Oracle.is_viable` decides rule (ii) with one AND against a per-state-pair union of
    live sets; every one-byte extension of sampled SQL prefixes agrees with trying each byte.
    The oracle's memo of lexeme closings is kept tiny here so its start-over path runs too."""
    monkeypatch.setattr("gridrail.parse.oracle.CLOSINGS_BOUND", 8)
    oracle = gr.Oracle(_sqlite())
    prefixes = {b"", b"SELECT", b"SELECT a", b"SELECT 1.5e", b"SELECT 'x", b"SELECT x -"}
    # keywords whose DFA path runs on into a longer keyword (`LIKE` + blank: rule (ii) saved)
    prefixes |= {b"SELECT a FROM t WHERE a LIKE", b"SELECT a FROM t WHERE a NOT", b"SELECT a IS"}
    for sql in _statements()[::15]:
        data = sql.encode()
        prefixes.update(data[:k] for k in range(0, len(data), 3))
    checked = 0
    for prefix in sorted(prefixes):
        cfg = oracle.try_feed(oracle.initial, prefix)
        assert cfg is not None, prefix
        for byte in range(256):
            scanned = oracle._scan_byte(cfg, byte)
            if scanned is None:
                continue
            assert oracle.is_viable(scanned) == _viable_by_trial(oracle, scanned), (prefix, byte)
            checked += 1
    assert checked > 10_000


def test_memoized_masks_equal_live_ones() -> None:
    """A configuration met again — or another with its stack and scan part (an IN list
    returns to the same interned nodes) — takes its mask from the guide's memo of masks by
    `Configuration.mask_key`: bit-identical to the mask computed live, also when the memo is
    small enough to evict all the time."""
    from tokenizers import Tokenizer

    from gridrail.lru import BoundedLRU
    from gridrail.mask.compute import next_token_mask

    path = asset("tokenizers", "gpt2", "tokenizer.json")
    tokenizer = Tokenizer.from_file(str(path))
    vocab = gr.Vocabulary.from_file(path)
    sql = "SELECT a FROM t WHERE id IN (1, 22, 333, 4444) AND b = 'x' OR c < 5;"
    ids = tokenizer.encode(sql, add_special_tokens=False).ids
    for capacity in (4096, 3):
        guide = gr.compile(_sqlite(), vocab, registry=gr.Registry())
        guide._masks = memo = BoundedLRU(capacity, 64 << 20)
        for replay in range(2):
            m = guide.matcher()
            for token in ids:
                cfg = m.configuration
                live = next_token_mask(guide.oracle, guide.trie, vocab, cfg)
                assert guide.mask(cfg) == live, f"pass {replay}, after {m.num_accepted} tokens"
                assert m.accept_tokens([token])
        assert 0 < memo.stats.entries <= capacity
        if capacity > len(ids):
            assert memo.stats.hits >= len(ids) and not memo.stats.evictions  # the second pass
        else:
            assert memo.stats.evictions > len(ids)


def test_a_long_lexeme_meets_its_mask_again_by_stack_and_scan_part() -> None:
    """Inside a long identifier every token leaves a new configuration (the pending lexeme
    grows) but the same stack and, once no keyword starts that way, the same scan part — the
    same `mask_key`: the masks there come from the memo in the first pass, equal to the ones
    computed live."""
    from tokenizers import Tokenizer

    from gridrail.mask.compute import next_token_mask

    path = asset("tokenizers", "gpt2", "tokenizer.json")
    vocab = gr.Vocabulary.from_file(path)
    guide = gr.compile(_sqlite(), vocab, registry=gr.Registry())
    name = "quarterly_revenue_by_region_and_product_line_and_channel"
    ids = Tokenizer.from_file(str(path)).encode(f"SELECT {name}", add_special_tokens=False).ids
    m, configurations = guide.matcher(), set()
    for token in ids:
        assert m.accept_tokens([token])
        cfg = m.configuration
        configurations.add(cfg)
        assert guide.mask(cfg) == next_token_mask(guide.oracle, guide.trie, vocab, cfg)
    assert len(configurations) == len(ids)  # no configuration came twice
    assert guide.cache_stats()["masks"].hits >= len(ids) - 4 >= 8


def test_advances_are_the_oracles_own_and_kept() -> None:
    """`Guide.advance` is the oracle's feed of the token's bytes (None where it refuses them),
    remembered: the same step again returns the configuration it returned before."""
    vocab = gr.Vocabulary.from_file(asset("tokenizers", "gpt2", "tokenizer.json"))
    guide = gr.compile(_sqlite(), vocab, registry=gr.Registry())
    rng = random.Random(7)
    cfg, refused, taken = guide.oracle.initial, 0, 0
    for _ in range(60):
        for token in rng.sample(range(vocab.size), 50):
            spelling = vocab.token_bytes(token)
            expected = None if spelling is None else guide.oracle.try_feed(cfg, spelling)
            after = guide.advance(cfg, token)
            assert after == expected
            assert guide.advance(cfg, token) is after  # kept
            refused += after is None
        allowed = guide.mask(cfg).ids()
        token = rng.choice([t for t in allowed if t not in vocab.eos_token_ids] or allowed)
        if token in vocab.eos_token_ids:
            cfg = guide.oracle.initial
            continue
        cfg, taken = guide.advance(cfg, token), taken + 1
        assert cfg is not None
    assert refused and taken  # both answers were checked


@pytest.mark.parametrize("count", [0, 5, 47, 48, 300, 4000])
def test_token_set_bulk_adds_and_frozen_copies_agree(count: int) -> None:
    from array import array

    from gridrail.mask.bitmask import TokenSet

    ids = random.Random(count).sample(range(50_257), count)
    one_by_one, bulk = TokenSet(50_257), TokenSet(50_257)
    for token_id in ids:
        one_by_one.add(token_id)
    bulk.add_all(array("I", ids))
    assert bulk == one_by_one and bulk.ids() == sorted(ids)
    assert bulk.is_empty() == (count == 0)
    again = TokenSet(50_257)
    again.update(bulk.frozen())
    assert again == bulk
    assert bulk.id_array().tolist() == sorted(ids)
    rng = random.Random(-count)
    dropped = rng.sample(ids, len(ids) // 3) + rng.sample(range(50_257), 5)  # some not in it
    fewer = bulk.without(dropped)
    assert fewer.ids() == sorted(set(ids) - set(dropped)) and bulk.ids() == sorted(ids)


def test_masks_of_equal_content_are_one_object() -> None:
    """The guide hands out one set per mask content (`DistinctMasks`): configurations whose
    masks are equal get the same object, and the content is each configuration's own."""
    guide = gr.compile(_sqlite(), _tiny_vocab([*WORDS, " "]))
    seen: dict[bytes, tuple[object, TokenSet]] = {}
    shared = 0
    # leading layout leaves the mask as it was at the start
    for words in (["select", " *", " from", " emplo", "yees;"], [" ", "select", " *"]):
        m = guide.matcher()
        for word in words:
            cfg, mask = m.configuration, m.allowed()
            assert mask == spec_mask(guide.oracle, guide.vocab, cfg)
            first = seen.setdefault(bytes(mask.bits), (cfg, mask))
            assert first[1] is mask
            shared += first[0] != cfg
            assert m.accept_tokens([_id(guide, word)])
    assert shared  # some configurations do share a content


def test_distinct_masks_keep_contents_apart_and_hold_them_weakly() -> None:
    """Two contents under one checksum stay two objects; a set no cache holds is let go."""
    distinct = bitmask_module.DistinctMasks()
    a, b, c = (TokenSet(64) for _ in range(3))
    a.add(3)
    b.add(3)
    c.add(5)
    assert distinct.intern(a) is a and distinct.intern(b) is a
    distinct.checksum = lambda bits: 0  # type: ignore[method-assign]  # every content collides
    assert distinct.intern(c) is c and distinct.intern(a) is a
    del a, b, c
    gc.collect()
    assert len(distinct._by_checksum) == 0

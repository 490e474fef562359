"""The mask's kernels in Rust (issue 16 item 1) equal their Python references bit for bit:
the trie walk (`src/walk.rs` ≡ `gridrail.mask.walk`: the same CI nodes in the same order, the
same CD classes with the same scan parts, the same CI tokens in the same encoding) and the CD
residue (`src/residue.rs` ≡ `gridrail.mask.compute._cd_residue`, the oracle's byte step and the
LR simulation under it: the same admitted tokens in the same encoding) — from every
configuration a statement passes through and from configurations inside its CD residue (walks
below a trie node), over real tokenizers, roles and profiles."""

from __future__ import annotations

import random
from functools import cache

import numpy as np
import pytest

import gridrail as gr
from assets import asset
from gridrail import kernels
from gridrail.mask.compute import _cd_residue, next_token_mask
from gridrail.mask.walk import ScanPart, WalkResult, ci_tokens, walk_context_independent
from gridrail.vocab import ByteCompletenessWarning
from support.hr_example import hr_guide

STATEMENTS = [
    "SELECT name, dept FROM employees WHERE dept = 'eng' ORDER BY name;",
    "SELECT e.name, COUNT(*) AS n FROM employees AS e JOIN orders AS o "
    "ON o.employee_id = e.id GROUP BY e.name HAVING COUNT(*) > 1;",
    'SELECT "id", total FROM orders WHERE total BETWEEN 1 AND 2.5 LIMIT 3;',
    "SELECT id, total FROM orders WHERE employee_id IN (1, 2) ORDER BY total DESC;",
]


def _rust():
    return pytest.importorskip(
        "gridrail._kernels",
        reason="Rust extension gridrail._kernels is not built (see tests/test_kernels.py)",
    )


@cache
def _vocab(name: str) -> gr.Vocabulary:
    return gr.Vocabulary.from_file(asset("tokenizers", name, "tokenizer.json"))


def _configurations(guide: gr.Guide, sql: str, seed: int) -> list[tuple[object, int]]:
    """(configuration, root) pairs: every prefix of `sql`'s tokens, and a sample of the
    configurations one CD class's first byte leads to, with that class's node as the root; up
    to the first token the role's language refuses (the clerk sees no employees)."""
    oracle = guide.oracle
    out = []
    cfg = oracle.initial
    rng = random.Random(seed)
    for token in guide.trie.tokenize(sql.encode()):
        out.append((cfg, 0))
        walk = walk_context_independent(oracle, guide.trie, cfg)
        for node, *before in rng.sample(walk.cd_classes, min(3, len(walk.cd_classes))):
            after = oracle.step(ScanPart(*before).on(cfg), guide.trie.edge_byte[node])
            if after is not None and guide.trie.subtree_size[node] > 1:
                out.append((after, node))
        cfg = oracle.try_feed(cfg, guide.vocab.token_bytes(token))
        if cfg is None:
            break
    return out


def _assert_equal_walks(guide: gr.Guide, pairs) -> int:
    oracle, trie, size = guide.oracle, guide.trie, guide.vocab.size
    rust = kernels.make_mask_runners(oracle, trie, size)

    def reference_below(after, node):
        walk = walk_context_independent(oracle, trie, after, node)
        return walk, ci_tokens(trie, size, walk)

    for cfg, root in pairs:
        expected, tokens = reference_below(cfg, root)
        got, got_tokens = rust.walk(cfg, root)
        assert list(got.ci_nodes) == list(expected.ci_nodes)
        assert got.cd_classes == expected.cd_classes
        assert type(got_tokens) is type(tokens) and got_tokens == tokens
        if root == 0:  # the residue of a whole mask, on the configuration's live stack
            residue = _cd_residue(oracle, trie, guide.vocab, cfg, expected, reference_below)
            got_residue = rust.residue(cfg, got)
            assert type(got_residue) is type(residue) and got_residue == residue
    return len(pairs)


@pytest.mark.parametrize(
    ("tokenizer", "role", "profile", "gamma"),
    [
        ("gpt2", "analyst", gr.GenerationProfile(), True),
        ("gpt2", "auditor", None, False),
        ("qwen2", "clerk", gr.GenerationProfile(), False),
        ("llama2", "admin", None, False),
    ],
)
def test_the_rust_walk_equals_the_reference(tokenizer, role, profile, gamma) -> None:
    _rust()
    assert kernels.KERNELS_ENABLED, "the extension imports, so the kernels are in use"
    guide = hr_guide(_vocab(tokenizer), role, profile, gamma=gamma)
    walked = sum(
        _assert_equal_walks(guide, _configurations(guide, sql, seed))
        for seed, sql in enumerate(STATEMENTS)
        if not (profile and '"' in sql)  # the strict profile has no quoted names to write
    )
    assert walked > 40


@pytest.mark.parametrize(("role", "gamma"), [("analyst", True), ("clerk", False)])
def test_live_sets_shrink_along_transitions(role, gamma) -> None:
    """What keying a walk below a CD node by the part of the allowed set it reads rests on
    (`ScannerTable::read_by_walk`): a transition never makes a terminal live again, and a state
    accepts only terminals live there, so a walk from a state reads no terminal outside that
    state's live set and its last accept's."""
    guide = hr_guide(_vocab("gpt2"), role, gr.GenerationProfile(), gamma=gamma)
    trans, live, accept = guide.oracle.scanner_tables()
    table = np.frombuffer(trans, np.int32).reshape(len(live), 256)
    words = (len(guide.compiled.grammar.terminals) + 63) // 64
    masks = np.array([[m >> (64 * w) & (2**64 - 1) for w in range(words)] for m in live], np.uint64)
    source, byte = np.nonzero(table >= 0)
    after = masks[table[source, byte]]
    assert not np.any(after & ~masks[source]), "a transition revived a terminal"
    assert all(a & ~m == 0 for a, m in zip(accept, live, strict=True))
    assert len(source) > 1000


def test_walks_below_are_shared_by_stacks_the_walk_cannot_tell_apart() -> None:
    """After `SELECT name` and after `... WHERE name` the stacks allow different terminals
    once `name` is emitted, but a walk below ` ` (a space, then the rest of the token) reads
    only what a space's lexeme can become: the second residue finds most of its walks kept by
    the first. The residues stay the reference's."""
    _rust()
    guide = hr_guide(_vocab("gpt2"), "analyst", gr.GenerationProfile(), gamma=False)
    oracle, trie, size = guide.oracle, guide.trie, guide.vocab.size
    rust = kernels.make_mask_runners(oracle, trie, size)
    assert rust.walks_below is not None

    def reference_below(after, node):
        walk = walk_context_independent(oracle, trie, after, node)
        return walk, ci_tokens(trie, size, walk)

    counts = [rust.walks_below.counts()]
    for prefix in (b"SELECT name", b"SELECT name FROM employees WHERE name"):
        cfg = oracle.feed(oracle.initial, prefix)
        walked, _ = rust.walk(cfg, 0)
        expected = _cd_residue(oracle, trie, guide.vocab, cfg, *reference_below(cfg, 0)[:1],
                               reference_below)  # fmt: skip
        assert rust.residue(cfg, walked) == expected
        counts.append(rust.walks_below.counts())
    (_, _), (asked, computed), (asked_2, computed_2) = counts
    assert asked >= computed > 0
    # keyed by the whole allowed set, most of the second residue's walks were computed again
    # (46 of 72); keyed by what they read, most are found kept (50 of 72)
    found = (asked_2 - asked) - (computed_2 - computed)
    assert found > computed_2 - computed, counts


def _walk_store(guide: gr.Guide):
    tables = kernels.kernel_tables(guide.oracle, guide.trie)
    return kernels.shared_walks(guide.compiled.scanner, tables, guide.trie, guide.vocab.size)


def _replay_checked(guide: gr.Guide, sql: str) -> None:
    """Feed `sql`'s tokens, each mask against the reference's (no caches, no kernels)."""
    m = guide.matcher()
    for token in guide.trie.tokenize(sql.encode()):
        cfg = m.configuration
        assert guide.mask(cfg) == next_token_mask(guide.oracle, guide.trie, guide.vocab, cfg)
        assert m.accept_tokens([token]), sql


def test_schemas_of_one_role_share_the_walks_from_its_base_states() -> None:
    """Issue 14 item 2. A walk that starts in the role's base scanner (the regex terminals; a
    scanner with names keeps the base's states, numbers, rows and terminal sets) reads no
    name, so one store keeps those walks for every schema of the role — the residue's walks
    below CD nodes, and the walk's own subtrees below the nodes where a lexeme leaves the
    names: after another schema's statements, a schema computes fewer of both than it does
    alone, and every mask stays the reference's."""
    _rust()
    vocab, grammar = _vocab("gpt2"), gr.Grammar.bundled("sqlite")

    def guide(tables: dict[str, list[str]], over: gr.Vocabulary = vocab) -> gr.Guide:
        schema = gr.Schema.from_tables("sqlite", tables)
        return gr.compile(grammar, over, schema=schema, registry=gr.Registry())

    hr_tables = {"employees": ["id", "name", "dept"], "orders": ["id", "total"]}
    school_tables = {"students": ["sid", "sname"], "courses": ["cid", "title"]}
    hr, school = guide(hr_tables), guide(school_tables)
    base = hr.compiled.scanner.base
    assert base is not None and base is school.compiled.scanner.base
    assert hr.compiled.scanner.num_states != school.compiled.scanner.num_states
    assert hr.compiled.scanner.start == base.num_states  # the start reads the names
    assert _walk_store(school) is _walk_store(hr)
    assert _walk_store(guide({"t": ["x"]}, _vocab("qwen2"))) is not _walk_store(hr)
    analyst = hr_guide(vocab, "analyst")  # another role: another base
    assert analyst.compiled.scanner.base is not base
    assert _walk_store(analyst) is not _walk_store(hr)

    statements = [
        "SELECT 1 WHERE 2 < 3 AND 'a' <> 'b' ORDER BY 1 LIMIT 4;",
        "SELECT count(*) FROM {t} WHERE {c} > 2 GROUP BY {c};",
    ]

    def computed(tables: dict[str, list[str]], after: dict[str, list[str]] | None):
        """The walks `tables`' schema computes for the statements — by its residues, and into
        the shared store —, with a fresh store that `after`'s schema filled first (the store
        kept on the base is only a cache)."""
        for key in [k for k in base.derived if isinstance(k, tuple) and k[0] == "walks below"]:
            del base.derived[key]
        for names in (after, tables) if after else (tables,):
            fresh = guide(names)
            store = _walk_store(fresh)
            before = store.counts()[1]
            table, columns = next(iter(names.items()))
            for sql in statements:
                _replay_checked(fresh, sql.format(t=table, c=columns[-1]))
        return fresh.runners.walks_below.counts()[1], store.counts()[1] - before

    (residue_alone, stored_alone) = computed(school_tables, None)
    (residue, stored) = computed(school_tables, hr_tables)
    assert 0 < residue < residue_alone and stored < stored_alone


def test_a_residue_reads_a_walks_kept_classes_as_their_tuples() -> None:
    """The Rust walk keeps its CD classes for the residue (`WalkResult.kernel_classes`, not
    part of the walk's value); a walk without them (one T2 served) is read from its tuples,
    to the same residue."""
    _rust()
    guide = gr.compile(gr.Grammar.bundled("sqlite"), _vocab("gpt2"))
    rust = kernels.make_mask_runners(guide.oracle, guide.trie, guide.vocab.size)
    for prefix in (b"SELECT a", b"SELECT a FROM t WHERE (", b"SELECT 'x", b"S"):
        cfg = guide.oracle.feed(guide.oracle.initial, prefix)
        walked, _ = rust.walk(cfg, 0)
        assert len(walked.kernel_classes) == len(walked.cd_classes) > 0
        plain = WalkResult(walked.ci_nodes, walked.cd_classes)
        assert plain == walked and plain.kernel_classes is None
        assert rust.residue(cfg, walked) == rust.residue(cfg, plain)


def test_a_grammar_with_more_than_64_terminals_and_a_pending_tail() -> None:
    """Terminal sets past one 64-bit word, and walks that start with a pending lexeme whose
    accept has a tail (the configuration after `SELECT a` stopped inside `a`)."""
    _rust()
    guide = gr.compile(gr.Grammar.bundled("sqlite"), _vocab("gpt2"))
    assert len(guide.compiled.grammar.terminals) > 64
    oracle = guide.oracle
    pairs = []
    for prefix in (b"SELECT a", b"SELECT a.b", b"SELECT 1e", b"SELECT 'x", b"SELECT a /", b"SEL"):
        cfg = oracle.feed(oracle.initial, prefix)
        pairs.append((cfg, 0))
    assert _assert_equal_walks(guide, pairs) == 6


def test_classes_that_differ_only_in_their_tail_are_stepped_apart() -> None:
    """The residue steps the CD classes of one scan part on one stack together (they share the
    lexeme closings their bytes go through); the tail pending since the last accept is part of
    that scan part. After `a`, `axz` and `ayz` die at `z` in the same scanner state with the
    same last accept, `x` and `y` pending: closed there, `x` rescans to X, which `z` may
    follow, and `y` to nothing."""
    _rust()
    grammar = gr.Grammar.from_lark('start: A X Z\nA: /a([xy]q)?/\nX: "x"\nZ: "z"\n', "tails.lark")
    with pytest.warns(ByteCompletenessWarning):
        vocab = gr.Vocabulary([b"a", b"axz", b"ayz", b"x", b"z", None], eos_token_ids=5)
    guide = gr.compile(grammar, vocab)
    walk = walk_context_independent(guide.oracle, guide.trie, guide.oracle.initial)
    by_tail = {tail: scan for _, *scan, tail in walk.cd_classes if tail}
    assert by_tail.keys() == {b"x", b"y"} and by_tail[b"x"] == by_tail[b"y"]
    assert _assert_equal_walks(guide, [(guide.oracle.initial, 0)]) == 1
    assert guide.matcher().allowed().ids() == [0, 1]  # `a`, `axz`; not `ayz`


def test_the_reference_runs_when_kernels_are_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "_kernels", None)
    guide = gr.compile(gr.Grammar.bundled("sqlite"), _vocab("gpt2"))
    runners = kernels.make_mask_runners(guide.oracle, guide.trie, guide.vocab.size)
    assert runners.residue is None  # the reference `_cd_residue`
    runner = runners.walk
    walk, _ = runner(guide.oracle.initial, 0)
    assert walk == walk_context_independent(guide.oracle, guide.trie, guide.oracle.initial)


def test_the_guide_masks_with_the_kernels_equal_the_reference_masks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whole masks through the guide (caches, memos, Γ's filter on top): with the kernels and
    with the reference, token by token over the statements."""
    _rust()
    vocab = _vocab("gpt2")
    fast = hr_guide(vocab, "analyst", gr.GenerationProfile(), gamma=True)
    assert fast.runners.residue is not None  # built now, with the kernels
    monkeypatch.setattr(kernels, "_kernels", None)
    slow = hr_guide(vocab, "analyst", gr.GenerationProfile(), gamma=True)
    assert slow is not fast and slow.runners.residue is None
    steps = 0
    for sql in STATEMENTS[:2]:
        a, b = fast.matcher(), slow.matcher()
        for token in fast.trie.tokenize(sql.encode()):
            assert a.allowed() == b.allowed()
            steps += 1
            if not (a.accept_tokens([token]) and b.accept_tokens([token])):
                break
    assert steps > 20


def test_bad_tables_are_value_errors() -> None:
    rust = _rust()
    with pytest.raises(ValueError, match="int32"):
        rust.TrieTable(b"\x00" * 3, b"", b"", b"", {})
    one_state = rust.ScanTable(b"\xff" * 4 * 256, b"\x00")
    with pytest.raises(ValueError, match="whole states"):
        rust.WalkScanner(one_state, 2, b"\x00" * 8, b"\x00" * 8)
    with pytest.raises(TypeError):  # a table is a validated ScanTable, not bytes
        rust.WalkScanner(b"\xff" * 4 * 256, 1, b"\x00" * 8, b"\x00" * 8)
    trie = rust.TrieTable(*(int(v).to_bytes(4, "little", signed=True) for v in (-1, 0, 1, -1)), {})
    scanner = rust.WalkScanner(one_state, 1, b"\x00" * 8, b"\x00" * 8)
    with pytest.raises(ValueError, match="scan state"):
        scanner.walk(trie, 5, 0, -1, b"", b"\x00" * 8, 0, 10)
    with pytest.raises(ValueError, match="not a trie node"):
        scanner.walk(trie, 0, 0, -1, b"", b"\x00" * 8, 3, 10)

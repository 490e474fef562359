"""The trie walk in Rust (`src/walk.rs`, issue 16 item 1) equals its Python reference
(`gridrail.mask.walk`) bit for bit: the same CI nodes in the same order, the same CD classes
with the same scan parts, the same CI tokens in the same encoding — from every configuration
a statement passes through and from the configurations inside its CD residue (walks below a
trie node), over real tokenizers, roles, profiles and a random grammar's scanner."""

from __future__ import annotations

import random
from functools import cache

import pytest

import gridrail as gr
from assets import asset
from gridrail import kernels
from gridrail.mask.walk import ci_tokens, walk_context_independent
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
        for cd in rng.sample(walk.cd_classes, min(3, len(walk.cd_classes))):
            after = oracle.step(cd.before.on(cfg), guide.trie.edge_byte[cd.node])
            if after is not None and guide.trie.subtree_size[cd.node] > 1:
                out.append((after, cd.node))
        cfg = oracle.try_feed(cfg, guide.vocab.token_bytes(token))
        if cfg is None:
            break
    return out


def _assert_equal_walks(guide: gr.Guide, pairs) -> int:
    rust = kernels.make_walk_runner(guide.oracle, guide.trie, guide.vocab.size)
    for cfg, root in pairs:
        expected = walk_context_independent(guide.oracle, guide.trie, cfg, root)
        tokens = ci_tokens(guide.trie, guide.vocab.size, expected)
        got, got_tokens = rust(cfg, root)
        assert list(got.ci_nodes) == list(expected.ci_nodes)
        assert got.cd_classes == expected.cd_classes
        assert type(got_tokens) is type(tokens) and got_tokens == tokens
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


def test_the_reference_runs_when_kernels_are_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "_kernels", None)
    guide = gr.compile(gr.Grammar.bundled("sqlite"), _vocab("gpt2"))
    runner = kernels.make_walk_runner(guide.oracle, guide.trie, guide.vocab.size)
    walk, _ = runner(guide.oracle.initial, 0)
    assert walk == walk_context_independent(guide.oracle, guide.trie, guide.oracle.initial)


def test_bad_tables_are_value_errors() -> None:
    rust = _rust()
    with pytest.raises(ValueError, match="int32"):
        rust.TrieTable(b"\x00" * 3, b"", b"", b"", {})
    with pytest.raises(ValueError, match="whole states"):
        rust.WalkScanner(b"\xff" * 4 * 256, 2, b"\x00" * 8, b"\x00" * 8)
    trie = rust.TrieTable(*(int(v).to_bytes(4, "little", signed=True) for v in (-1, 0, 1, -1)), {})
    scanner = rust.WalkScanner(b"\xff" * 4 * 256, 1, b"\x00" * 8, b"\x00" * 8)
    with pytest.raises(ValueError, match="scan state"):
        scanner.walk(trie, 5, 0, -1, b"", b"\x00" * 8, 0, 10)
    with pytest.raises(ValueError, match="not a trie node"):
        scanner.walk(trie, 0, 0, -1, b"", b"\x00" * 8, 3, 10)

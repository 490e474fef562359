"""The next-token mask M(κ) of Definition 4: CI part ∪ live CD verdicts ∪ {EOS iff a sentence}."""

from __future__ import annotations

from array import array
from collections.abc import Callable

from gridrail.mask.bitmask import TokenSet
from gridrail.mask.walk import (
    WalkBelow,
    WalkResult,
    ci_tokens,
    evaluate_cd_class,
    walk_context_independent,
)
from gridrail.parse.oracle import Configuration, Oracle
from gridrail.vocab.trie import TokenTrie
from gridrail.vocab.vocabulary import Vocabulary


class EmptyMaskError(AssertionError):
    """A viable configuration produced an empty mask: a bug by Proposition 8 (or a vocabulary
    whose byte-completeness warning was ignored). Never silenced."""


def next_token_mask(
    oracle: Oracle,
    trie: TokenTrie,
    vocab: Vocabulary,
    cfg: Configuration,
    walk_below: WalkBelow | None = None,
    cd_residue: Callable[[Configuration, WalkResult], bytes | array | None] | None = None,
) -> TokenSet:
    """The mask at `cfg`. `walk_below(configuration, node)` answers the context-independent
    walks — the whole vocabulary's (node 0) and those inside the CD residue — when the caller
    has them cached; else they are computed here.

    `cd_residue(cfg, walk)`, when given, computes the residue instead of the verdicts stepped
    here (the Rust kernel: `gridrail.kernels.make_mask_runners`), unless it answers None (near
    the stack bound, where the verdicts stepped here decide)."""
    if walk_below is None:

        def walk_below(after: Configuration, node: int) -> tuple[WalkResult, bytes | array]:
            walk = walk_context_independent(oracle, trie, after, node)
            return walk, ci_tokens(trie, vocab.size, walk)

    allowed = TokenSet(vocab.size)
    walk, tokens = walk_below(cfg, 0)
    allowed.update(tokens)

    residue = None if cd_residue is None else cd_residue(cfg, walk)
    if residue is None:
        residue = _cd_residue(oracle, trie, vocab, cfg, walk, walk_below)
    allowed.update(residue)
    if oracle.eos_ok(cfg):
        allowed.add_all(vocab.eos_token_ids)
    if allowed.is_empty():
        raise EmptyMaskError(
            f"empty mask at a viable configuration (stack depth {cfg.stack.depth}, "
            f"pending lexeme of {cfg.lexeme_length} bytes)"
        )
    return allowed


def _cd_residue(
    oracle: Oracle,
    trie: TokenTrie,
    vocab: Vocabulary,
    cfg: Configuration,
    walk: WalkResult,
    walk_below: WalkBelow,
) -> bytes | array:
    """The tokens of `walk`'s CD classes that cfg's live stack admits."""
    live = TokenSet(vocab.size)
    for cd in walk.cd_classes:
        evaluate_cd_class(oracle, cfg, cd, trie, walk_below, live)
    return live.frozen()

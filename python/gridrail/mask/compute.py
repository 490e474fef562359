"""The next-token mask M(κ) of Definition 4: CI part ∪ live CD verdicts ∪ {EOS iff a sentence}."""

from __future__ import annotations

from array import array

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
) -> TokenSet:
    """The mask at `cfg`. `walk_below(configuration, node)` answers the context-independent
    walks — the whole vocabulary's (node 0) and those inside the CD residue — when the caller
    has them cached; else they are computed here."""
    if walk_below is None:

        def walk_below(after: Configuration, node: int) -> tuple[WalkResult, bytes | array]:
            walk = walk_context_independent(oracle, trie, after, node)
            return walk, ci_tokens(trie, vocab.size, walk)

    allowed = TokenSet(vocab.size)
    walk, tokens = walk_below(cfg, 0)
    allowed.update(tokens)
    for cd in walk.cd_classes:
        evaluate_cd_class(oracle, cfg, cd, trie, walk_below, allowed)
    if oracle.eos_ok(cfg):
        allowed.add_all(vocab.eos_token_ids)
    if not any(allowed.bits):
        raise EmptyMaskError(
            f"empty mask at a viable configuration (stack depth {cfg.stack.depth}, "
            f"pending lexeme of {cfg.lexeme_length} bytes)"
        )
    return allowed

"""The next-token mask M(κ) of Definition 4: CI part ∪ live CD verdicts ∪ {EOS iff a sentence}."""

from __future__ import annotations

from gridrail.mask.bitmask import TokenSet
from gridrail.mask.walk import WalkResult, evaluate_cd_class, walk_context_independent
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
    walk: WalkResult | None = None,
) -> TokenSet:
    """The mask at `cfg`; `walk` is its context-independent walk when the caller has it
    (from the cache), else it is computed here."""
    allowed = TokenSet(vocab.size)
    if walk is None:
        walk = walk_context_independent(oracle, trie, cfg)
    for node in walk.ci_nodes:
        allowed.add_all(trie.ids_at(node))
    for cd in walk.cd_classes:
        for node in evaluate_cd_class(oracle, trie, cfg, cd):
            allowed.add_all(trie.ids_at(node))
    if oracle.eos_ok(cfg):
        allowed.add_all(vocab.eos_token_ids)
    if not any(allowed.bits):
        raise EmptyMaskError(
            f"empty mask at a viable configuration (stack depth {cfg.stack.depth}, "
            f"pending lexeme of {cfg.lexeme_length} bytes)"
        )
    return allowed

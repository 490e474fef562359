"""The executable specification of the mask (Definition 4), kept tiny and independent.

For every token id: trial-feed its bytes to the oracle from the current configuration; it is
allowed iff the result is still a viable prefix. EOS ids are allowed iff the output may stop
here. It shares nothing with the fast path (trie, walk, CI/CD split) but the oracle, so the
differential test fast ≡ spec pins the walk, the split and alias expansion bit for bit.
"""

from __future__ import annotations

from gridrail.gamma.binder import Binder, GammaState
from gridrail.mask.bitmask import TokenSet
from gridrail.parse.oracle import Configuration, Oracle
from gridrail.vocab.vocabulary import Vocabulary


def spec_mask(oracle: Oracle, vocab: Vocabulary, cfg: Configuration) -> TokenSet:
    allowed = TokenSet(vocab.size)
    for token_id in range(vocab.size):
        spelling = vocab.token_bytes(token_id)
        if spelling and oracle.try_feed(cfg, spelling) is not None:
            allowed.add(token_id)
    if oracle.eos_ok(cfg):
        allowed.add_all(vocab.eos_token_ids)
    return allowed


def spec_mask_gamma(
    oracle: Oracle, binder: Binder, vocab: Vocabulary, cfg: Configuration, gamma: GammaState
) -> TokenSet:
    """The mask of L_Γ (issue 15): a token is allowed iff it is allowed in L and the binder,
    reading its bytes from Γ, keeps the output a viable prefix of L_Γ. Every token is read;
    none of the fast path's shortcuts (which tokens need reading, the shared first lexeme) is
    used."""
    allowed = TokenSet(vocab.size)
    for token_id in range(vocab.size):
        spelling = vocab.token_bytes(token_id)
        if not spelling:
            continue
        after = oracle.try_feed(cfg, spelling)
        if after is not None and binder.advance(gamma, spelling, after) is not None:
            allowed.add(token_id)
    if oracle.eos_ok(cfg) and binder.ends(gamma, cfg):
        allowed.add_all(vocab.eos_token_ids)
    return allowed

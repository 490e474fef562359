"""The matcher's two views of one step agree: `accept_tokens([t])` succeeds exactly when the
mask's bit for `t` is set, EOS included (a gate that let EOS through on an empty or unfinished
output would pass every test that only decodes through the mask)."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import gridrail as gr
from test_decode import _guide

ROLES = ("analyst", "clerk", "admin")


def _bits(m: gr.Matcher, size: int) -> np.ndarray:
    mask = gr.allocate_bitmask(1, size)
    m.fill_bitmask(mask, 0)
    words = mask[0].view(np.uint32)
    return ((words[np.arange(size) // 32] >> (np.arange(size) % 32).astype(np.uint32)) & 1) == 1


def _walk(guide: gr.Guide, seed: int, steps: int) -> gr.Matcher:
    """A matcher after `steps` tokens drawn uniformly from its masks (EOS never drawn)."""
    rng = random.Random(seed)
    m = guide.matcher()
    for _ in range(steps):
        allowed = [t for t in np.flatnonzero(_bits(m, guide.vocab.size)) if not guide.is_eos(t)]
        if not allowed:
            break
        assert m.accept_tokens([int(rng.choice(allowed))])
    return m


@settings(max_examples=60, deadline=None)
@given(
    role=st.sampled_from(ROLES),
    seed=st.integers(0, 2**32 - 1),
    steps=st.integers(0, 12),
    probe=st.data(),
)
def test_accept_iff_mask_bit(role: str, seed: int, steps: int, probe) -> None:
    guide = _guide(role)
    size = guide.vocab.size
    m = _walk(guide, seed, steps)
    bits = _bits(m, size)
    eos = guide.vocab.eos_token_id
    before = m.accepted_tokens()
    # EOS every time (the gate that matters most), then random ids and random allowed ones
    probes = [eos, probe.draw(st.integers(0, size - 1))]
    if bits.any():
        probes.append(int(probe.draw(st.sampled_from(list(np.flatnonzero(bits))))))
    for token in probes:
        accepted = m.accept_tokens([token])
        assert accepted == bool(bits[token]), (role, before, token)
        if accepted:
            m.rollback(1)
        assert m.accepted_tokens() == before


def test_eos_refused_on_empty_output() -> None:
    for role in ROLES:
        m = _guide(role).matcher()
        assert not m.accept_tokens([m.guide.vocab.eos_token_id])
        assert m.num_accepted == 0

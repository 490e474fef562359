"""Applying a mask to a model's next-token logits and choosing a token (hard -inf, never soft).

Logits may be a numpy array or a torch tensor (any float dtype, any device): both become a
float64 numpy vector here, so the choice is the same whatever produced them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gridrail.mask.bitmask import TokenSet


def allowed_array(allowed: TokenSet, width: int | None = None) -> np.ndarray:
    """The set as a boolean vector over `width` logits (default: the vocabulary size). Logits
    past the vocabulary (a model's padded output layer) are never allowed."""
    width = allowed.vocab_size if width is None else width
    bits = np.unpackbits(np.frombuffer(bytes(allowed.bits), dtype=np.uint8), bitorder="little")
    out = np.zeros(width, dtype=bool)
    size = min(width, allowed.vocab_size)
    out[:size] = bits[:size]
    return out


def as_vector(logits: object) -> np.ndarray:
    """One row of logits as float64 numpy (a torch tensor is detached and copied to the CPU)."""
    if hasattr(logits, "detach"):  # torch, without importing it
        logits = logits.detach().float().cpu().numpy()
    vector = np.asarray(logits, dtype=np.float64)
    if vector.ndim == 2 and vector.shape[0] == 1:
        vector = vector[0]
    if vector.ndim != 1:
        raise ValueError(f"expected one row of next-token logits, got shape {vector.shape}")
    if np.isnan(vector).any():
        raise ValueError("the model returned NaN logits")
    return vector


def log_probability(logits: np.ndarray, token: int) -> float:
    """The model's own log-probability of `token` (softmax over all its logits, the mask
    ignored): low where the mask steered the model off what it wanted to write."""
    # every logit finite (the usual case): no filtered copy; the same values in the same order
    # as the filtered one, so the same sum to the last bit
    finite = logits if np.isfinite(logits).all() else logits[np.isfinite(logits)]
    top = finite.max()
    shifted = finite - top
    return float(logits[token] - top - np.log(np.exp(shifted, out=shifted).sum()))


@dataclass
class Sampler:
    """Greedy (temperature 0) or seeded sampling at a temperature from the smallest set of
    allowed tokens whose probability (among the allowed) reaches `top_p` (nucleus sampling:
    1.0 keeps them all); the same seed gives the same choices for the same logits."""

    temperature: float = 0.0
    seed: int | None = None
    top_p: float = 1.0
    _rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        self._rng = np.random.default_rng(self.seed)

    @property
    def description(self) -> str:
        if self.temperature == 0:
            return "greedy"
        nucleus = "" if self.top_p == 1 else f",top_p={self.top_p}"
        return f"temperature={self.temperature},seed={self.seed}{nucleus}"

    def choose(self, logits: np.ndarray, allowed: np.ndarray) -> int:
        """A token id with `allowed[id]` true; the logits of all others count as -inf."""
        ids = np.flatnonzero(allowed[: len(logits)])  # `allowed` may be narrower than logits
        if not len(ids):
            raise ValueError("no allowed token among the model's logits")
        kept = logits[ids]
        if self.temperature == 0 or not np.isfinite(kept).any():
            return int(ids[int(np.argmax(kept))])
        scaled = (kept - kept[np.isfinite(kept)].max()) / self.temperature
        weights = np.exp(scaled)  # exp(-inf) = 0: a -inf logit is never drawn
        if self.top_p < 1:
            keep = nucleus(weights, self.top_p)
            ids, weights = ids[keep], weights[keep]
        return int(self._rng.choice(ids, p=weights / weights.sum()))


def nucleus(weights: np.ndarray, top_p: float) -> np.ndarray:
    """The positions of the largest `weights` (>= 0), heaviest first, ties in position order,
    up to the first whose running sum reaches `top_p` of their total. The same as sorting them
    all (`np.argsort(-weights, kind="stable")`) and cutting there, but only the heaviest are
    sorted while they reach it: a running sum is sequential, so its first values are the full
    sort's, and a mask of thousands of tokens usually has its mass in a few."""
    total, size, head = weights.sum(), len(weights), 64
    while True:
        if head >= size:
            order = np.argsort(-weights, kind="stable")
        else:  # every weight at least the head-th largest: the full sort's first ones
            threshold = np.partition(weights, size - head)[size - head]
            heaviest = np.flatnonzero(weights >= threshold)
            order = heaviest[np.argsort(-weights[heaviest], kind="stable")]
        mass = np.cumsum(weights[order]) / total
        if head >= size or mass[-1] >= top_p:
            return order[: int(np.searchsorted(mass, top_p)) + 1]
        head *= 8

"""The batch fill (`gridrail.fill_next_token_bitmask`): one call writes every row's mask,
bit for bit the row's own `Matcher.fill_bitmask`, serially or on threads, into a NumPy array or
a CPU torch tensor in place; and the transformers processor applies the int32 words."""

from __future__ import annotations

import random
from functools import cache

import numpy as np
import pytest
import torch

import gridrail as gr
from gridrail.decode.hf import apply_token_bitmask
from support.hr_example import HR_DB, hr_guide
from test_accept_mask_agreement import _walk
from test_decode import _guide
from test_gamma import _guide as gpt2_guide
from test_walk_arm import _small_vocab

ROLES = ("analyst", "clerk", "admin")


@cache
def _gamma_guide(role: str) -> gr.Guide:
    return hr_guide(_small_vocab(), role, gr.GenerationProfile(), gamma=True)


def _matchers(count: int, seed: int) -> list[gr.Matcher]:
    """Matchers of several roles (with and without Γ), each after a random walk."""
    rng = random.Random(seed)
    out = []
    for n in range(count):
        guide = _gamma_guide("auditor") if n % 4 == 3 else _guide(rng.choice(ROLES))
        out.append(_walk(guide, rng.randrange(2**32), rng.randint(0, 10)))
    return out


def _row_by_row(matchers: list[gr.Matcher], rows: list[int], height: int) -> np.ndarray:
    expected = np.full((height, gr.allocate_bitmask(1, _size(matchers)).shape[1]), 7, np.int32)
    for matcher, row in zip(matchers, rows, strict=True):
        matcher.fill_bitmask(expected, row)
    return expected


def _size(matchers: list[gr.Matcher]) -> int:
    return matchers[0].guide.vocab.size


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_batch_fill_is_each_rows_own_mask(threads: int, seed: int) -> None:
    matchers = _matchers(12, seed)
    rows = random.Random(seed).sample(range(16), len(matchers))  # 4 rows stay untouched
    expected = _row_by_row(matchers, rows, 16)
    bitmask = np.full_like(expected, 7)
    gr.fill_next_token_bitmask(matchers, bitmask, rows, threads=threads)
    assert np.array_equal(bitmask, expected)
    untouched = sorted(set(range(16)) - set(rows))
    assert (bitmask[untouched] == 7).all()


def test_a_cpu_tensor_is_filled_in_place() -> None:
    matchers = _matchers(5, 3)
    tensor = torch.zeros((5, gr.allocate_bitmask(1, _size(matchers)).shape[1]), dtype=torch.int32)
    address = tensor.data_ptr()
    gr.fill_next_token_bitmask(matchers, tensor, threads=2)
    assert tensor.data_ptr() == address
    assert np.array_equal(tensor.numpy(), _row_by_row(matchers, list(range(5)), 5))


def test_threads_agree_with_serial_fills_on_cold_caches() -> None:
    """Threads meet misses of fresh guides at once (shared T2 cache, Rust walks without the
    GIL): every row still equals a serial fill on guides of its own."""
    schema = gr.Schema.from_sqlite(HR_DB)
    policy = gr.Policy.from_file(HR_DB.parent / "hr_policy.toml")
    vocab = _guide("analyst").vocab

    def fresh(registry: gr.Registry) -> list[gr.Matcher]:
        out = []
        for n, role in enumerate(("analyst", "auditor", "manager", "admin") * 2):
            guide = gr.compile(
                gr.Grammar.bundled("sqlite"), vocab, schema=schema, policy=policy, role=role,
                registry=registry,
            )  # fmt: skip
            out.append(_walk(guide, n, 6))
        return out

    threaded, serial = fresh(gr.Registry()), fresh(gr.Registry())
    assert [m.accepted_tokens() for m in threaded] == [m.accepted_tokens() for m in serial]
    got = gr.allocate_bitmask(len(threaded), vocab.size)
    gr.fill_next_token_bitmask(threaded, got, threads=4)
    assert np.array_equal(got, _row_by_row(serial, list(range(len(serial))), len(serial)))


def test_bad_batches_are_usage_errors() -> None:
    matchers = _matchers(3, 4)
    good = gr.allocate_bitmask(4, _size(matchers))
    other = gpt2_guide("auditor").matcher()  # gpt2's vocabulary
    cases = [
        ((matchers, good.astype(np.int64)), "int32"),
        ((matchers, good[:, :-1]), "shape"),
        ((matchers, good.tolist()), "not list"),
        ((matchers, np.frombuffer(good.tobytes(), np.int32).reshape(good.shape)), "read-only"),
        ((matchers, good, [0, 1]), "2 rows for 3 matchers"),
        ((matchers, good, [0, 1, 4]), "row 4 is outside"),
        ((matchers, good, [0, 1, 1]), "a row appears twice"),
        (([matchers[0], matchers[0]], good), "a matcher appears twice"),
        (([matchers[0], other], good), "share one vocabulary"),
        (([matchers[0], "m"], good), "not str"),
    ]
    for args, message in cases:
        with pytest.raises(gr.UsageError, match=message):
            gr.fill_next_token_bitmask(*args)
    with pytest.raises(gr.UsageError, match="threads must be at least 1"):
        gr.fill_next_token_bitmask(matchers, good, threads=0)
    gr.fill_next_token_bitmask([], good)  # an empty batch writes nothing


def test_applying_a_bitmask_keeps_exactly_its_bits() -> None:
    rng = np.random.default_rng(0)
    width, size = 75, 64  # logits past the bitmask's 64 bits: a padded output layer
    bitmask = rng.integers(-(2**31), 2**31, size=(3, 2), dtype=np.int64).astype(np.int32)
    bitmask[0, 1] = np.int32(-(2**31))  # only bit 63: the sign bit of a word
    scores = torch.from_numpy(rng.normal(size=(3, width)).astype(np.float32))
    out = apply_token_bitmask(scores, bitmask).numpy()
    words = bitmask.view(np.uint32)
    for row in range(3):
        for token in range(width):
            allowed = token < size and bool(words[row, token // 32] >> (token % 32) & 1)
            expected = scores[row, token].item() if allowed else -np.inf
            assert out[row, token] == expected, (row, token)
    assert np.flatnonzero(np.isfinite(out[0, :size]) & (np.arange(size) >= 32)).tolist() == [63]

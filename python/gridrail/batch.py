"""Masks for a batch in one call: the serving side of the matcher (issue 16, batch fill).

`fill_next_token_bitmask(matchers, bitmask)` writes each matcher's next-token mask into its row
of one int32 bitmask (the layout of XGrammar, llguidance and vLLM), a NumPy array or a CPU torch
tensor, in place. Rows may be computed on a thread pool: a mask the caches hold costs
microseconds of Python, but a miss walks the token trie in the Rust kernels, which release the
GIL, so misses of different rows overlap. Each matcher is touched by one thread; the caches the
rows share are built for concurrent use (tests/test_batch_fill.py checks threaded fills against
serial ones).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from gridrail.errors import UsageError
from gridrail.guide import Matcher, _integer_argument
from gridrail.mask.bitmask import bitmask_array

_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def fill_next_token_bitmask(
    matchers: Sequence[Matcher],
    bitmask: object,
    rows: Sequence[int] | None = None,
    *,
    threads: int = 1,
) -> None:
    """Write `matchers[i]`'s current mask into row `rows[i]` (default: row i) of `bitmask`, an
    `allocate_bitmask` array or a CPU torch int32 tensor of that shape, for the whole batch in
    one call. `threads` > 1 computes rows on a pool of that many threads (see the module's
    docstring: it pays where rows miss the caches). The other rows of `bitmask` are untouched.
    Every matcher must be over the same vocabulary and appear once, every row once."""
    matchers = list(matchers)
    threads = _integer_argument("threads", threads)
    if threads < 1:
        raise UsageError(f"threads must be at least 1, not {threads}")
    for matcher in matchers:
        if not isinstance(matcher, Matcher):
            raise UsageError(f"matchers must be gridrail Matchers, not {type(matcher).__name__}")
    if not matchers:
        return
    vocab = matchers[0].guide.vocab
    if any(m.guide.vocab.fingerprint != vocab.fingerprint for m in matchers):
        raise UsageError("the matchers of one bitmask must share one vocabulary")
    array = bitmask_array(bitmask, vocab.size)
    targets = (
        list(range(len(matchers)))
        if rows is None
        else [_integer_argument("a row", row) for row in rows]
    )
    if len(targets) != len(matchers):
        raise UsageError(f"{len(targets)} rows for {len(matchers)} matchers")
    if len({id(m) for m in matchers}) != len(matchers):
        raise UsageError("a matcher appears twice in one batch")
    for row in targets:
        if not 0 <= row < len(array):
            raise UsageError(f"row {row} is outside the bitmask's {len(array)} rows")
    if len(set(targets)) != len(targets):
        raise UsageError("a row appears twice in one batch")

    def fill(i: int) -> None:
        matchers[i].allowed().write_row(array, targets[i])

    if threads == 1 or len(matchers) == 1:
        for i in range(len(matchers)):
            fill(i)
        return
    for _ in _pool(threads).map(fill, range(len(matchers))):  # re-raises a row's error
        pass


def _pool(threads: int) -> ThreadPoolExecutor:
    with _pools_lock:
        pool = _pools.get(threads)
        if pool is None:
            pool = _pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="gridrail")
        return pool

"""The int8 MaxPool kernel (int8_pool.py) against numpy: u8 and s8 bytes, channel tails, strides and pads, under
guard pages on both sides of every buffer."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.errors import InputError
from snippets_x86_64.guarded import guarded_array, guarded_copy
from snippets_x86_64.int8_pool import max_pool_function, pool_table
from snippets_x86_64.native_pool import SplitCall


@pytest.mark.parametrize("n,h,w,c,k,s,p", [(1, 112, 112, 64, 3, 2, 1), (2, 9, 7, 70, 3, 1, 1), (1, 5, 6, 3, 2, 2, 0),
                                           (1, 8, 8, 200, 3, 2, 1), (3, 4, 4, 128, 1, 1, 0)])
@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("at", ["end", "start"])
@pytest.mark.parametrize("threads", [1, 2])
def test_max_pool_of_bytes_against_numpy(n: int, h: int, w: int, c: int, k: int, s: int, p: int, signed: bool,
                                         at: str, threads: int) -> None:
    rng = np.random.default_rng(c + k)
    dt = np.int8 if signed else np.uint8
    x = rng.integers(np.iinfo(dt).min, np.iinfo(dt).max + 1, (n, h, w, c)).astype(dt)
    ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    hp, wp = max(h + 2 * p, (ho - 1) * s + k), max(w + 2 * p, (wo - 1) * s + k)
    xp = guarded_array((n, hp, wp, c), dt, at)
    xp[...] = np.iinfo(dt).min  # the border: the type's least value never wins, as MaxPool's padding
    xp[:, p : p + h, p : p + w] = x
    want = np.full((n, ho, wo, c), np.iinfo(dt).min, dt)  # numpy's windows of the unpadded x, clipped
    for oh in range(ho):
        for ow in range(wo):
            r0, c0 = max(oh * s - p, 0), max(ow * s - p, 0)
            want[:, oh, ow] = x[:, r0 : oh * s - p + k, c0 : ow * s - p + k].max(axis=(1, 2))
    y = guarded_array((n, ho, wo, c), dt, at)
    table = guarded_copy(pool_table(n, ho, wo, c, s, hp, wp), at)
    fn = max_pool_function(k, k, s, c, wo, wp * c, signed)
    half = n * ho // 2
    chunks = [(0, n * ho)] if threads == 1 else [(0, half), (half, n * ho - half)]
    SplitCall(fn, 3, chunks).run([xp.ctypes.data, y.ctypes.data, table.ctypes.data])
    np.testing.assert_array_equal(y, want)


def test_the_max_pool_refuses_bad_sizes() -> None:
    with pytest.raises(InputError, match="positive sizes"):
        max_pool_function(3, 3, 2, 64, 0, 64 * 10, False)
    with pytest.raises(InputError, match="row pitch"):
        max_pool_function(3, 3, 2, 64, 5, 32, False)

"""The executor's address memo (KernelExecutor._addresses): views seen again at the same position reuse their
address; a different view, a view over another buffer at a recycled id, or an owning array are looked up
afresh. Results are checked against numpy on every call, so a stale address shows as a wrong result."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add, Multiply
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.runtime.compiled_model import compile_model

pytestmark = pytest.mark.avx512
SHAPE = (1, 4, 9, 7)


def model():  # type: ignore[no-untyped-def]
    """y = x * scale[c] + 0.5, scale a per-channel Constant (passed to the kernel as a read-only view)."""
    x = Parameter("f32", SHAPE, name="x")
    scale = Constant(np.arange(1, 5, dtype=np.float32).reshape(1, 4, 1, 1))
    return Model([Result(Add(Multiply(x, scale), Constant(np.float32(0.5))), name="y")], [x])


def want(x: np.ndarray) -> np.ndarray:
    return x * np.arange(1, 5, dtype=np.float32).reshape(1, 4, 1, 1) + np.float32(0.5)


def close(got: np.ndarray, expected: np.ndarray) -> None:
    """Equal up to the rounding the kernel's FMA saves (x * scale + 0.5 in one rounding)."""
    np.testing.assert_allclose(got, expected, rtol=2e-7, atol=2e-7)


def view_of(buf: np.ndarray) -> np.ndarray:
    """A C-contiguous view of SHAPE at an offset into ``buf`` (it does not own its data)."""
    v = buf[16 : 16 + int(np.prod(SHAPE))].reshape(SHAPE)
    assert not v.flags.owndata and v.flags.c_contiguous
    return v


def test_views_and_owning_arrays_across_calls():
    cm = compile_model(model(), target="x86_64_avx512", config={"num_threads": 1})
    assert all("SnippetsFallbackReason" not in sg.rt_info for sg in cm.subgraphs)
    rng = np.random.default_rng(3)
    n = int(np.prod(SHAPE)) + 32
    buf_a = rng.standard_normal(n).astype(np.float32)
    buf_b = rng.standard_normal(n).astype(np.float32)
    out_buf = np.zeros(n, np.float32)
    xa = view_of(buf_a)
    out = view_of(out_buf)
    for _ in range(3):  # the same view objects again: memo hits
        got = cm({"x": xa}, outputs={"y": out})["y"]
        assert got is out
        close(out, want(xa))
    # the input buffer's contents change under the same view: read at call time
    buf_a[:] = rng.standard_normal(n).astype(np.float32)
    cm({"x": xa}, outputs={"y": out})
    close(out, want(xa))
    # a new view over another buffer, possibly at the id of the dead one
    del xa
    gc.collect()
    xb = view_of(buf_b)
    cm({"x": xb}, outputs={"y": out})
    close(out, want(xb))
    # a view over another output buffer, then owning arrays, then fresh outputs
    out2_buf = np.zeros(n, np.float32)
    out2 = view_of(out2_buf)
    cm({"x": xb}, outputs={"y": out2})
    close(out2, want(xb))
    assert not out2_buf[:16].any() and not out2_buf[16 + int(np.prod(SHAPE)) :].any()  # nothing outside the view
    owning = np.ascontiguousarray(xb) + 1
    close(cm({"x": owning})["y"], want(owning))
    close(cm({"x": xb})["y"], want(xb))


def test_a_resized_owner_is_looked_up_again():
    cm = compile_model(model(), target="x86_64_avx512", config={"num_threads": 1})
    x = np.random.default_rng(4).standard_normal(SHAPE).astype(np.float32)
    y = np.empty(SHAPE, np.float32)
    cm({"x": x}, outputs={"y": y})
    y.resize(10_000, refcheck=False)  # owners may move their data: they are never memoized
    y.resize(SHAPE, refcheck=False)
    cm({"x": x}, outputs={"y": y})
    close(y, want(x))

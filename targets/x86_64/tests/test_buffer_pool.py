"""The buffers kept between calls (buffers.py): never handed out while an array uses them, and a model called with
alternating shapes keeps every output the caller holds intact, each equal to onnxruntime's."""

from __future__ import annotations

import os
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64 import buffers
from snippets_x86_64.buffers import BUFFERS, IDLE_TAKES, MAX_BUFFERS, POOL_MIN_BYTES, BufferPool, pooled_empty

MIB = 1 << 20


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _floats(nbytes: int) -> tuple[int]:
    return (nbytes // 4,)


def test_a_buffer_in_use_is_not_handed_out_and_a_free_one_is():
    pool = BufferPool()
    a = pool.empty(_floats(MIB))
    b = pool.empty(_floats(MIB))
    assert _addr(a) % 64 == 0 and _addr(b) % 64 == 0
    assert abs(_addr(a) - _addr(b)) >= MIB  # two buffers
    where = _addr(a)
    del a
    c = pool.empty(_floats(MIB))
    assert _addr(c) == where and pool.stats["reused"] == 1
    assert c.flags.c_contiguous and c.flags.writeable and c.dtype == np.float32


def test_a_view_of_an_array_keeps_its_buffer_in_use():
    """A reshape or slice of an output (numpy points its base at the buffer) holds the buffer as the output did."""
    pool = BufferPool()
    a = pool.empty((256, 1024))
    view = a.reshape(-1)[::2]
    view[:] = 7.0
    where = _addr(a)
    del a
    other = pool.empty((256, 1024))
    assert _addr(other) != where
    other[:] = -1.0
    assert np.all(view == 7.0)
    del view
    assert _addr(pool.empty((256, 1024))) == where


def test_best_fit_and_size_classes():
    pool = BufferPool()
    big, small = pool.empty(_floats(8 * MIB)), pool.empty(_floats(2 * MIB))
    where_small = _addr(small)
    del big, small
    assert _addr(pool.empty(_floats(3 * MIB // 2))) == where_small  # the smallest free buffer that fits
    # a size a little above an earlier one fits the earlier buffer (quarter-octave classes)
    pool2 = BufferPool()
    first = pool2.empty(_floats(5 * MIB))
    where = _addr(first)
    del first
    assert _addr(pool2.empty(_floats(5 * MIB + 4096 * 16))) == where


def test_free_buffers_not_taken_for_a_while_are_released():
    pool = BufferPool()
    dropped = pool.empty(_floats(16 * MIB))
    del dropped
    for _ in range(2 * IDLE_TAKES):  # (the free buffers are looked at every IDLE_TAKES takes)
        pool.empty(_floats(MIB))
    assert pool.stats["released"] >= 1
    assert pool.held_bytes() < 16 * MIB
    pool.clear()
    assert pool.held_bytes() == 0


def test_past_the_limit_arrays_of_their_own():
    pool = BufferPool()
    held = [pool.empty(_floats(MIB)) for _ in range(MAX_BUFFERS + 2)]
    assert pool.stats["unpooled"] == 2
    assert len({_addr(a) for a in held}) == len(held)


def test_small_arrays_are_numpys_own():
    a = pooled_empty((POOL_MIN_BYTES // 8,), np.float32)
    assert a.base is None
    b = pooled_empty((POOL_MIN_BYTES // 4,), np.float32)
    assert b.base is not None and _addr(b) % 64 == 0


def test_threads_never_share_a_buffer():
    pool = BufferPool()
    errors: list[str] = []

    def work(k: int) -> None:
        for i in range(200):
            a = pool.empty(_floats(MIB + 4096 * (i % 3)))
            a[:] = k
            a[::4096] = k  # (touch again after the other thread had its chance to run)
            if not np.all(a == k):
                errors.append(f"thread {k} saw another thread's data")
                return

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def _init(name: str, a: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(a.astype(np.float32), name)


def residual_cnn(c: int = 32) -> onnx.ModelProto:
    """x [n, c, h, w] -> 3x3 conv, Relu, 1x1 conv, + x: the output has the input's shape, so outputs feed later
    calls; maps of a few MiB (every intermediate and the output from the kept buffers)."""
    rng = np.random.default_rng(5)
    inits = [_init("w0", rng.standard_normal((c, c, 3, 3)) * 0.1), _init("b0", rng.standard_normal(c) * 0.1),
             _init("w1", rng.standard_normal((c, c, 1, 1)) * 0.2)]
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]), helper.make_node("Conv", ["r0", "w1"], ["c1"]),
             helper.make_node("Add", ["c1", "x"], ["y"])]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", c, "h", "w"]) for n in ("x", "y")]
    g = helper.make_graph(nodes, "residual_cnn", io[:1], io[1:], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def ffn(d: int = 256, f: int = 1024) -> onnx.ModelProto:
    """x [b, s, d] -> MatMul [d, f] + bias, Relu, MatMul [f, d] + x: a FullyConnected pair, its [b, s, f]
    activation 1 MiB and more from b * s = 256 rows."""
    rng = np.random.default_rng(6)
    inits = [_init("w1", rng.standard_normal((d, f)) / np.sqrt(d)), _init("b1", rng.standard_normal(f) * 0.1),
             _init("w2", rng.standard_normal((f, d)) / np.sqrt(f))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]), helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Relu", ["a1"], ["r1"]), helper.make_node("MatMul", ["r1", "w2"], ["m2"]),
             helper.make_node("Add", ["m2", "x"], ["y"])]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["b", "s", d]) for n in ("x", "y")]
    g = helper.make_graph(nodes, "ffn", io[:1], io[1:], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("make, shapes", [
    (residual_cnn, [(2, 32, 64, 72), (1, 32, 96, 80)]),
    (ffn, [(2, 160, 256), (3, 300, 256)]),
])
def test_alternating_shapes_keep_held_outputs_intact(monkeypatch, make, shapes):
    """Two chains of calls interleaved (shape A, shape B, A, B, ...), each call's input the chain's last output:
    every output stays held by the test, some are dropped on the way (their buffers are taken again), and at the
    end each held output still has the bytes it had when returned, which are onnxruntime's for its input. (Arrays
    from 1 MiB on come from the pool here, so that small models exercise it.)"""
    ort = pytest.importorskip("onnxruntime")
    monkeypatch.setattr(buffers, "POOL_MIN_BYTES", MIB)
    proto = make()
    cm = compile_model(proto.SerializeToString(), "x86_64_avx512", {"num_threads": 1})
    assert all(where == "x86_64_avx512" for _, op, where in cm.placement() if op == "Subgraph")
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    last = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    held: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (input copy, output, output copy when returned)
    reused = BUFFERS.stats["reused"]
    for step in range(8):
        chain = step % 2
        x = last[chain]
        y = cm({"x": x})["y"]
        assert y.shape == x.shape
        held.append((x.copy(), y, y.copy()))
        last[chain] = y
        if step == 4:
            del held[:2]  # outputs given up: their buffers are free for the next calls
    assert BUFFERS.stats["reused"] > reused  # the calls took buffers kept from earlier ones
    for x, y, y_then in held:
        np.testing.assert_array_equal(y, y_then)
        np.testing.assert_allclose(y, sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)


def _vm_flags(addr: int) -> list[str]:
    """The VmFlags of the mapping of this process that holds ``addr`` (from /proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {addr:#x}")


@pytest.mark.skipif(not os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"),
                    reason="no transparent huge pages")
def test_large_outputs_get_small_pages():
    from snippets_x86_64.buffers import SMALL_PAGES_MIN_BYTES

    big = pooled_empty((SMALL_PAGES_MIN_BYTES // 4 + 4096,), np.float32)
    assert "nh" in _vm_flags(big.ctypes.data + big.nbytes // 2)
    assert "hg" not in _vm_flags(big.ctypes.data + big.nbytes // 2)  # numpy's advice for huge pages undone
    kept = pooled_empty((POOL_MIN_BYTES // 4,), np.float32)  # from the buffers kept between calls
    assert "nh" in _vm_flags(kept.ctypes.data + kept.nbytes // 2)

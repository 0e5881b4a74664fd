"""The int8 FullyConnected's runtime rows and thread split (int8_fc_kernel.py): the JIT function against numpy's
integer math in rows and N-block mode under guard pages, the min/max reduce of dynamic quantization, a dynamic M
that compiles nothing new (checked against float64 math and onnxruntime), and 2-thread results bit-identical to
1-thread ones for every quantized-MatMul pattern, rows split and N split."""

from __future__ import annotations

import ctypes
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import snippets_core as sc
from snippets_core.tokenization.tokenize_int8_fc_snippets import INT8_FULLY_CONNECTED, is_int8_fc
from snippets_x86_64.cpu import cpu_features

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: make the sibling module importable
from test_int8_fc import (  # noqa: E402
    _check_steps,
    _float64_static,
    _input,
    _ort,
    dynamic,
    integer,
    qlinear,
    static_qdq,
)

pytestmark = pytest.mark.skipif("avx512_vnni" not in cpu_features(), reason="the int8 Brgemm needs AVX512_VNNI")

TARGET = "x86_64_avx512"


def _words(*values: int) -> ctypes.Array:
    return (ctypes.c_uint64 * len(values))(*values)


@pytest.mark.parametrize("at", ["start", "end"])
@pytest.mark.parametrize(("m", "k", "n"), [(1, 13, 37), (7, 3, 17), (130, 100, 130), (33, 67, 65), (300, 64, 200),
                                           (257, 33, 128)])
@pytest.mark.parametrize("signed", [False, True])
def test_kernel_rows_and_blocks_match_integer_math(at: str, m: int, k: int, n: int, signed: bool) -> None:
    """Rows ``start .. start + count`` (quantizing f32 rows, or reading int8 rows) and N blocks of every row: the
    s32 output equals numpy's int64 sums, the f32 output their dequantization; nothing else in C is written, and
    nothing outside the guarded arrays is touched."""
    from snippets_x86_64.brgemm_copy_b_int8 import PackedB, repack_b_int8
    from snippets_x86_64.brgemm_int8 import Int8Output, post_op_vectors
    from snippets_x86_64.guarded import guarded_array, guarded_copy
    from snippets_x86_64.int8_fc_kernel import COLS, ROWS, Int8FCKernelKey, int8_fc_function
    from snippets_x86_64.quantize_int8 import quantize_params

    rng = np.random.default_rng(m * k + n)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    pk = repack_b_int8(w)
    pk = PackedB(data=guarded_copy(pk.data, at), k=k, n=n, colsum=pk.colsum)
    qt, zp, xs = (np.int8, -3, np.float32(0.02)) if signed else (np.uint8, 5, np.float32(0.02))
    info = np.iinfo(qt)
    qa = rng.integers(info.min, info.max + 1, (m, k)).astype(qt)
    x = guarded_copy((qa.astype(np.float32) - zp) * xs, at)  # on the grid: quantizes back to qa exactly
    acc = (qa.astype(np.int64) - zp) @ w.astype(np.int64)
    ws = (rng.uniform(0.5, 2.0, n) / 128).astype(np.float32)
    comp, scale, bias = (guarded_copy(v, at) for v in post_op_vectors(pk, float(xs), zp, signed, ws, None))
    params = guarded_copy(quantize_params(float(xs), zp, signed), at)
    blocks = -(-n // 64)
    for output, dtype in ((Int8Output.S32, np.int32), (Int8Output.F32, np.float32)):
        want = acc if output == Int8Output.S32 else acc.astype(np.float32) * scale
        for mode, quantize, start, count in ((ROWS, True, 0, m), (ROWS, False, m // 3, m - m // 3),
                                             (COLS, False, blocks // 2, blocks - blocks // 2),
                                             (COLS, False, 0, max(1, blocks // 2))):
            fn = int8_fc_function(Int8FCKernelKey(k, n, signed, output, output != Int8Output.S32, quantize, mode))
            c = guarded_array((m, n), dtype, at)
            c.fill(99)
            q = guarded_array((m, k), qt, at)
            if not quantize:
                q[...] = qa
            a = x if quantize else q
            block = _words(a.ctypes.data, q.ctypes.data, c.ctypes.data, params.ctypes.data, comp.ctypes.data,
                           scale.ctypes.data, bias.ctypes.data, pk.data.ctypes.data, m)
            fn(0, ctypes.addressof(block), start, count)
            rows, cols = ((slice(start, start + count), slice(None)) if mode == ROWS
                          else (slice(None), slice(start * 64, min(n, (start + count) * 64))))
            if output == Int8Output.S32:
                np.testing.assert_array_equal(c[rows, cols], want[rows, cols])
            else:
                np.testing.assert_allclose(c[rows, cols], want[rows, cols], rtol=1e-6, atol=1e-5)
            untouched = np.ones((m, n), bool)
            untouched[rows, cols] = False
            assert (c[untouched] == 99).all()


@pytest.mark.parametrize("at", ["start", "end"])
@pytest.mark.parametrize(("rows", "k"), [(1, 1), (3, 16), (5, 45), (40, 768), (2, 33)])
def test_minmax_reduces_each_range(at: str, rows: int, k: int) -> None:
    """The min and max of rows ``start .. start + count`` equal numpy's, K tails included (masked lanes ignored)."""
    from snippets_x86_64.guarded import guarded_array, guarded_copy
    from snippets_x86_64.int8_fc_kernel import minmax_function

    x = guarded_copy((np.random.default_rng(rows + k).standard_normal((rows, k)) * 5).astype(np.float32), at)
    out = guarded_array((2 * rows,), np.float32, at)
    block = _words(x.ctypes.data, out.ctypes.data)
    for start, count in {(0, rows), (rows // 2, rows - rows // 2)}:
        minmax_function(k)(0, ctypes.addressof(block), start, count)
        part = x[start : start + count]
        assert (out[2 * start], out[2 * start + 1]) == (part.min(), part.max())


@pytest.mark.parametrize("n", [1, 16, 37, 768])
def test_dynamic_grid_function_matches_onnx_grid(n: int) -> None:
    """The JIT grid from two parts' (min, max): the bytes of quantize_params on DynamicQuantizeLinear's (scale, zero
    point) as the core computes them (ONNX's formula, numpy f32), zp * colsum and scale * w_scale, for ranges of
    both signs, all zeros, tiny and huge magnitudes; the post-op vectors' N tail under a guard page."""
    from snippets_core.ir.ops.quantize import dynamic_quantization_grid
    from snippets_x86_64.guarded import guarded_array, guarded_copy
    from snippets_x86_64.int8_fc_kernel import dynamic_grid_function, minmax_function
    from snippets_x86_64.quantize_int8 import quantize_params

    rng = np.random.default_rng(n)
    m, k = 10, 33
    starts = np.array([0, 4], np.int64)
    colsum = guarded_copy(rng.integers(-5000, 5000, n).astype(np.int32))
    ws = guarded_copy(rng.uniform(0.001, 0.01, n).astype(np.float32))
    params, comp, sc = guarded_array((4,), np.float32), guarded_array((n,), np.int32), guarded_array((n,), np.float32)
    for trial in range(60):
        x = (rng.standard_normal((m, k)) * 10.0 ** rng.integers(-30, 30)).astype(np.float32)
        x = {1: np.abs(x), 2: -np.abs(x), 3: np.zeros_like(x)}.get(trial % 5, x)
        pairs = np.zeros(2 * m, np.float32)
        block = _words(x.ctypes.data, pairs.ctypes.data)
        for start, count in ((0, 4), (4, 6)):
            minmax_function(k)(0, ctypes.addressof(block), start, count)
        args = _words(pairs.ctypes.data, 2, starts.ctypes.data, colsum.ctypes.data, ws.ctypes.data,
                      params.ctypes.data, comp.ctypes.data, sc.ctypes.data)
        dynamic_grid_function(n)(ctypes.addressof(args))
        scale, zp = dynamic_quantization_grid(x)
        assert params.tobytes() == quantize_params(float(scale), int(zp), False).tobytes()
        np.testing.assert_array_equal(comp, colsum * np.int32(zp))
        np.testing.assert_array_equal(sc, scale * ws)


def _two_threads(model: bytes) -> sc.CompiledModel:  # type: ignore[name-defined]
    """A 2-thread model that splits every int8 FC however small (no work threshold)."""
    return sc.compile_model(model, TARGET, {"num_threads": 2, "target_options": {"parallel_min_ns": 0}})


def _cache_misses() -> dict[str, int]:
    from snippets_x86_64.brgemm_int8 import int8_function
    from snippets_x86_64.int8_fc_kernel import int8_fc_function, minmax_function
    from snippets_x86_64.quantize_int8 import quantize_function

    return {f.__name__: f.cache_info().misses for f in (int8_function, int8_fc_function, minmax_function,
                                                         quantize_function)}


@pytest.mark.parametrize("kind", ["static", "dynamic"])
def test_a_new_m_builds_nothing(kind: str) -> None:
    """A symbolic M: after compile_model, random row counts (both splits, row blocks and every tail) compile no
    function; results match the float64 dequantized math (static) or onnxruntime (dynamic, same file)."""
    k, n = 72, 150
    model, p = (static_qdq(k, n, ["batch", "seq", k], zp=200) if kind == "static"
                else dynamic(k, n, ["batch", "seq", k]))
    cm = _two_threads(model)
    assert sum(is_int8_fc(sg) for sg in cm.subgraphs) == 1
    before = _cache_misses()
    rng = np.random.default_rng(7)
    for m in [1, 2, 15, 16, 129, 300, *rng.integers(1, 400, 8).tolist()]:
        x = _input(model, (1, m, k), m)
        got = cm({"x": x})["y"]
        if kind == "static":
            np.testing.assert_allclose(got, _float64_static(x, {**p, "signed": False}), rtol=1e-5, atol=1e-5 * k * 3)
        else:
            np.testing.assert_allclose(got, _ort(model, x), rtol=1e-5, atol=1e-4)
    assert _cache_misses() == before


PATTERNS = {
    "static_u8": lambda k, n: static_qdq(k, n, ["m", k], zp=131)[0],
    "static_s8": lambda k, n: static_qdq(k, n, ["m", k], signed=True, zp=-7)[0],
    "dynamic": lambda k, n: dynamic(k, n, ["m", k])[0],
    "qlinear_u8": lambda k, n: qlinear(k, n, ["m", k])[0],
    "qlinear_s8": lambda k, n: qlinear(k, n, ["m", k], signed=True)[0],
    "integer": lambda k, n: integer(k, n, ["m", k])[0],
}


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_two_threads_are_bit_identical_to_one(pattern: str) -> None:
    """Rows split (M >= 16) and N blocks split (fewer rows): the same bytes as one thread, and as onnxruntime
    within a quantization step for the integer outputs."""
    k, n = 96, 200
    model = PATTERNS[pattern](k, n)
    one = sc.compile_model(model, TARGET, {"num_threads": 1})
    two = _two_threads(model)
    for m in (1, 3, 16, 37, 130, 261):
        x = _input(model, (m, k), m)
        a, b = one({"x": x})["y"], two({"x": x})["y"]
        np.testing.assert_array_equal(a, b)
        if a.dtype != np.float32:
            _check_steps(b, _ort(model, x))


def qdq_chain(k: int, n: int, x_shape: list, tail: str = "bias", seed: int = 0) -> bytes:
    """onnxruntime's static QDQ layer: x -> Q/DQ -> MatMul(DQ(W)) -> Q/DQ -> Add bias -> Q/DQ, then ``tail``: nothing
    ("bias"), Relu, or a Multiply by a per-column constant and Subtract of a scalar."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    ws = (rng.uniform(0.5, 2.0, n) / 128).astype(np.float32)
    inits = [nh.from_array(w, "wq"), nh.from_array(ws, "ws"), nh.from_array(np.zeros(n, np.int8), "wz"),
             nh.from_array(np.float32(0.037), "xs"), nh.from_array(np.uint8(121), "xz"),
             nh.from_array(np.float32(0.02 * math.sqrt(k)), "ms"), nh.from_array(np.uint8(131), "mz"),
             nh.from_array(np.float32(0.025 * math.sqrt(k)), "ys"), nh.from_array(np.uint8(118), "yz"),
             nh.from_array(rng.standard_normal(n).astype(np.float32), "b"),
             nh.from_array(rng.uniform(0.5, 1.5, (1, n)).astype(np.float32), "g"), nh.from_array(np.float32(0.3), "c")]
    nodes = [h.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             h.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             h.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=1),
             h.make_node("MatMul", ["xd", "wd"], ["mm"]),
             h.make_node("QuantizeLinear", ["mm", "ms", "mz"], ["mq"]),
             h.make_node("DequantizeLinear", ["mq", "ms", "mz"], ["md"]),
             h.make_node("Add", ["md", "b"], ["a"]),
             h.make_node("QuantizeLinear", ["a", "ys", "yz"], ["aq"]),
             h.make_node("DequantizeLinear", ["aq", "ys", "yz"], ["y" if tail == "bias" else "ad"])]
    if tail == "relu":
        nodes.append(h.make_node("Relu", ["ad"], ["y"]))
    elif tail == "scale":
        nodes += [h.make_node("Mul", ["ad", "g"], ["gd"]), h.make_node("Sub", ["gd", "c"], ["y"])]
    g = h.make_graph(nodes, "int8_fc_chain", [h.make_tensor_value_info("x", T.FLOAT, x_shape)],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 19)]).SerializeToString()


@pytest.mark.parametrize("tail", ["bias", "relu", "scale"])
@pytest.mark.parametrize("threads", [1, 2])
def test_the_chain_after_the_matmul_runs_in_the_epilogue(tail: str, threads: int) -> None:
    """MatMul -> Q/DQ -> bias Add -> Q/DQ (-> Relu / Multiply, Subtract by constants) is one int8 FC Subgraph with
    the chain as post-ops; its output is onnxruntime's within one output step on at most 1% of the elements, and
    2 threads give the bytes of 1."""
    k, n = 80, 150
    model = qdq_chain(k, n, ["m", k], tail)
    cm = sc.compile_model(model, TARGET, {"num_threads": threads, "target_options": {"parallel_min_ns": 0}})
    (sg,) = cm.subgraphs
    assert is_int8_fc(sg)
    kinds = [kind for kind, _ in sg.rt_info[INT8_FULLY_CONNECTED].post_ops]
    assert kinds == ["fq", "add_c", "fq", *{"bias": [], "relu": ["relu"], "scale": ["mul_c", "add_c"]}[tail]]
    one = sc.compile_model(model, TARGET, {"num_threads": 1})
    step = 0.025 * math.sqrt(k) * (1.5 if tail == "scale" else 1.0)
    for m in (1, 5, 37, 130):
        x = _input(model, (m, k), m)
        got, want = cm({"x": x})["y"], _ort(model, x)
        off = np.abs(got.astype(np.float64) - want) > 1e-5 * (1 + np.abs(want))
        assert np.abs(got - want).max(initial=0) <= step * 1.001 and off.sum() <= max(1, 0.01 * off.size)
        np.testing.assert_array_equal(got, one({"x": x})["y"])


@pytest.mark.parametrize("pattern", ["static_u8", "dynamic"])
def test_concurrent_calls_keep_their_own_buffers(pattern: str) -> None:
    """Two Python threads calling one compiled model at once (the kept scratch, range and grid buffers are taken by
    one call, the other makes its own): each gets the result of its own input."""
    import threading

    k, n = 64, 130
    model = PATTERNS[pattern](k, n)
    cm = _two_threads(model)
    one = sc.compile_model(model, TARGET, {"num_threads": 1})
    xs = [_input(model, (m, k), m) for m in (40, 41, 1, 90)]
    wants = [one({"x": x})["y"] for x in xs]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(30):
                np.testing.assert_array_equal(cm({"x": xs[i]})["y"], wants[i])
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]

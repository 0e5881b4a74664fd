"""A MaxPool/AvgPool or a global pool after a convolution's post-ops, in the conv primitive's step: pooled in the
kernel's epilogue (disjoint whole windows; any global mean/max) or by the pool kernel after the conv kernel (the
rest). Checked against a float64 numpy conv + post-ops + pool under guard pages (odd sizes, channels 1/3/17/33,
pool kernels, strides, pads, ceil_mode, residuals), and end to end against onnx's reference evaluator, with
describe() saying which form ran."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from snippets_core import compile_model
from snippets_core.ir.ops.io import Constant, Parameter
from snippets_core.ir.ops.nn import AvgPool, Convolution, MaxPool
from snippets_x86_64.conv import ConvGeometry, PostOp, pool_epilogue
from snippets_x86_64.conv_executor import ConvExecutor
from snippets_x86_64.conv_subgraph import ConvPlan, ConvThenPool
from snippets_x86_64.guarded import guarded_array
from snippets_x86_64.pool import pool_geometry

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: make the sibling module importable
from test_conv_kernel import conv_f64, dynamic_nhw, guarded, guarded_nhwc, pool_f64  # noqa: E402

pytestmark = pytest.mark.avx512

#: post-op name -> its float64 oracle
POST = {"relu": lambda y: np.maximum(y, 0.0), "swish": lambda y: y / (1.0 + np.exp(-y)),
        "clamp": lambda y: np.clip(y, -0.5, 0.7)}
POST_OPS = {"relu": PostOp("relu"), "swish": PostOp("swish", alpha=1.0), "clamp": PostOp("clamp", lo=-0.5, hi=0.7)}

CASES = [
    # n, c, h, w, m, conv k, conv stride, conv pads (t, l, b, r), post-op, pool mode, pool k, pool stride,
    # pool pads, ceil_mode, fused in the epilogue
    (1, 3, 16, 16, 32, (3, 3), (1, 1), (1, 1, 1, 1), "relu", "max", (2, 2), (2, 2), (0, 0, 0, 0), False, True),
    (1, 1, 9, 11, 1, (3, 3), (1, 1), (1, 1, 1, 1), "relu", "max", (2, 2), (2, 2), (0, 0, 0, 0), False, True),
    (2, 17, 13, 15, 17, (3, 3), (1, 1), (1, 1, 1, 1), "swish", "avg", (2, 2), (2, 2), (0, 0, 0, 0), False, True),
    (1, 33, 10, 9, 33, (3, 3), (2, 2), (1, 0, 2, 1), "clamp", "max", (2, 2), (2, 2), (0, 0, 0, 0), False, True),
    (1, 3, 19, 17, 20, (5, 5), (1, 1), (2, 2, 2, 2), "relu", "max", (3, 3), (3, 3), (0, 0, 0, 0), False, True),
    (1, 17, 11, 12, 70, (1, 1), (1, 1), (0, 0, 0, 0), "swish", "avg", (2, 3), (2, 3), (0, 0, 0, 0), False, True),
    (1, 3, 12, 12, 16, (3, 3), (1, 1), (1, 1, 1, 1), "relu", "max", (2, 2), (3, 3), (0, 0, 0, 0), False, True),
    (1, 33, 7, 7, 64, (1, 1), (1, 1), (0, 0, 0, 0), None, "avg", (7, 7), (1, 1), (0, 0, 0, 0), False, False),
    (1, 3, 7, 11, 8, (3, 3), (1, 1), (0, 0, 0, 0), "relu", "avg", (5, 3), (1, 3), (0, 0, 0, 0), False, True),
    # the rest: the pool kernel after the conv kernel
    (1, 3, 15, 15, 32, (3, 3), (2, 2), (1, 1, 1, 1), "relu", "max", (3, 3), (2, 2), (1, 1, 1, 1), False, False),
    (1, 17, 11, 13, 17, (3, 3), (1, 1), (1, 1, 1, 1), "relu", "max", (2, 2), (2, 2), (0, 0, 0, 0), True, False),
    (2, 3, 10, 10, 33, (3, 3), (1, 1), (1, 1, 1, 1), "swish", "avg", (2, 2), (2, 2), (1, 1, 0, 0), False, False),
    (1, 1, 12, 12, 1, (3, 3), (1, 1), (1, 1, 1, 1), "relu", "max", (2, 2), (1, 1), (0, 0, 0, 0), False, False),
]


def _plan(case: tuple) -> tuple[ConvPlan, np.ndarray, np.ndarray, np.ndarray]:
    """The ConvPlan of ``case`` (built on IR nodes, as plan_conv makes it), its weight, shift and input."""
    n, c, h, wd, m, k, s, pads, post, mode, pk, ps, ppads, ceil, _ = case
    rng = np.random.default_rng(c * 100 + m + h)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = (rng.standard_normal((m, c, *k)) / np.sqrt(c * k[0] * k[1])).astype(np.float32)
    shift = rng.standard_normal(m) * 0.1
    xp = Parameter("f32", [n, c, h, wd], name="x")
    conv = Convolution(xp, Constant(w), strides=s, pads=(pads[0], pads[1], pads[2], pads[3]))
    pool_cls = MaxPool if mode == "max" else AvgPool
    pool = pool_cls(conv, kernel=pk, strides=ps, pads=(ppads[0], ppads[1], ppads[2], ppads[3]), ceil_mode=ceil)
    post_ops = () if post is None else (POST_OPS[post],)
    return ConvPlan(conv, w, None, shift, post_ops, (), None, pool=pool), w, shift, x


def _oracle(case: tuple, w: np.ndarray, shift: np.ndarray, x: np.ndarray, plan: ConvPlan) -> np.ndarray:
    n, c, h, wd, m, k, s, pads, post, mode, pk, ps, ppads, ceil, _ = case
    y = conv_f64(x, w, 1, s, (1, 1), pads) + shift.reshape(1, -1, 1, 1)
    if post is not None:
        y = POST[post](y)
    (pho, pwo), _, _ = plan.pool._geometry(pk).resolve(y.shape[2:])
    return pool_f64(y, mode, pk, ps, ppads, pho, pwo, False)


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
@pytest.mark.parametrize("at", ["end", "start"])
def test_conv_then_pool_matches_float64(case: tuple, at: str) -> None:
    plan, w, shift, x = _plan(case)
    ex = plan.executor(x.shape, 2, alloc=guarded(at))
    fused = case[-1]
    assert isinstance(ex, ConvThenPool) is not fused
    want = _oracle(case, w, shift, x, plan)
    got = ex.run(guarded_nhwc(x, at))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    if fused:
        assert ex.geo.pool is not None and ex.geo.pool.mode == case[9]


def test_epilogue_reasons() -> None:
    """Why a pool stays a kernel of its own: each condition of ``pool_epilogue`` names itself."""
    geo = ConvGeometry(1, 16, 12, 12, 32, 1, 3, 3, 1, 1, 1, 1, 1, 1, 12, 12)

    def why(kernel: tuple[int, int], strides: tuple[int, int], pads: tuple[int, ...] = (0, 0, 0, 0),
            ceil: bool = False, post: tuple[PostOp, ...] = (), m: int = 32) -> str:
        g = ConvGeometry(1, 16, 12, 12, m, 1, 3, 3, 1, 1, 1, 1, 1, 1, 12, 12)
        node = MaxPool(Parameter("f32", [1, m, 12, 12]), kernel=kernel, strides=strides, pads=pads, ceil_mode=ceil)
        pgeo, p = pool_geometry(node, (1, m, 12, 12))
        epi, reason = pool_epilogue(g, pgeo, p, post)
        assert (epi is None) == bool(reason)
        return reason

    assert why((2, 2), (2, 2)) == ""
    assert "overlapping" in why((3, 3), (2, 2))
    assert "padded or partial" in why((2, 2), (2, 2), (1, 1, 1, 1))
    assert "padded or partial" in why((5, 5), (5, 5), ceil=True)
    assert "residual" in why((2, 2), (2, 2), post=(PostOp("residual"),))
    assert "registers" in why((4, 4), (4, 4), m=64)
    assert geo.pool is None and geo.out_h == 12


def _cnn_model(pool: onnx.NodeProto) -> onnx.ModelProto:
    """conv + bias + Relu, then ``pool`` (reads "r", writes "y")."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), pool]
    inits = [numpy_helper.from_array(rng.standard_normal((24, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(24).astype(np.float32), "b")]
    g = helper.make_graph(nodes, "cp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 17, 18])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("pool,fused", [
    (helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2]), True),
    (helper.make_node("AveragePool", ["r"], ["y"], kernel_shape=[3, 3], strides=[3, 3]), True),
    (helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), False),
    (helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1), False),
])
@pytest.mark.parametrize("threads", [1, 2])
def test_model_pool_runs_in_the_conv_step(pool: onnx.NodeProto, fused: bool, threads: int) -> None:
    model = _cnn_model(pool)
    x = np.random.default_rng(6).standard_normal((1, 3, 17, 18)).astype(np.float32)
    cm = compile_model(model.SerializeToString(), "x86_64_avx512", {"num_threads": threads})
    (got,) = cm({"x": x}).values()
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    (sg,) = [sg for sg in cm.subgraphs if sg.rt_info.get("SnippetsConvolution")]
    assert [op.type_name for op in sg.body_ops][-1] in ("MaxPool", "AvgPool")
    text = cm.describe()
    assert ("epilogue ->" in text) is fused and ("not fused" in text) is not fused


def test_pool_with_another_reader_stays_separate() -> None:
    """The conv's output read by the pool and by something else: the pool is not taken into the conv step."""
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["z"])]
    g = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(rng.standard_normal((5, 3, 3, 3)).astype(np.float32), "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    cm = compile_model(model.SerializeToString(), "x86_64_avx512")
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    got = cm({"x": x})
    want = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-4, atol=1e-4)
    assert not any("MaxPool" in [op.type_name for op in sg.body_ops] and sg.rt_info.get("SnippetsConvolution")
                   for sg in cm.subgraphs)


def test_guarded_array_helper_is_used() -> None:
    """The sweep's buffers really are guarded: a read one element past the end faults (checked by the helper's own
    tests); here, that the executor made its buffers through ``alloc``."""
    plan, _, _, x = _plan(CASES[0])
    made: list[tuple[int, ...]] = []

    def alloc(shape: tuple[int, ...]) -> np.ndarray:
        made.append(shape)
        return guarded_array(shape, np.float32)

    plan.executor(x.shape, 1, alloc=alloc).run(x)
    assert (1, 8, 8, 32) in made  # the pooled NHWC output, a quarter of the conv's 16x16


GLOBAL_CASES = [
    # n, c, h, w, m, conv k, conv stride, pads (t, l, b, r), post-op, mode, residual
    (1, 3, 9, 11, 1, (3, 3), (1, 1), (1, 1, 1, 1), "relu", "mean", False),
    (2, 17, 7, 13, 33, (3, 3), (2, 2), (1, 0, 2, 1), "swish", "mean", True),
    (1, 33, 13, 13, 100, (1, 1), (1, 1), (0, 0, 0, 0), "relu", "mean", False),  # 1x1: the flattened pixels
    (1, 5, 8, 8, 17, (3, 3), (1, 1), (1, 1, 1, 1), "clamp", "max", False),
    (2, 3, 5, 6, 70, (1, 1), (1, 1), (0, 0, 0, 0), None, "max", True),
    (1, 32, 32, 32, 32, (3, 3), (1, 1), (1, 1, 1, 1), "swish", "mean", True),  # cnn_block's conv2 + GAP
]


def _global_oracle(x: np.ndarray, w: np.ndarray, shift: np.ndarray, s: tuple[int, int], pads: tuple[int, ...],
                   post: str | None, mode: str, residual_rng: np.random.Generator | None,
                   ) -> tuple[np.ndarray, np.ndarray | None]:
    """float64 conv + shift [+ a random residual, drawn from ``residual_rng``] + post-op, then the global mean or max:
    ([N, M], the residual or None)."""
    y = conv_f64(x, w, 1, s, (1, 1), pads) + shift.reshape(1, -1, 1, 1)
    res = residual_rng.standard_normal(y.shape).astype(np.float32) if residual_rng is not None else None
    if res is not None:
        y = y + res
    if post is not None:
        y = POST[post](y)
    return (y.mean(axis=(2, 3)) if mode == "mean" else y.max(axis=(2, 3))), res


@pytest.mark.parametrize("case", GLOBAL_CASES, ids=[str(i) for i in range(len(GLOBAL_CASES))])
@pytest.mark.parametrize("at", ["end", "start"])
@pytest.mark.parametrize("threads", [1, 2])
def test_global_pool_epilogue_matches_float64(case: tuple, at: str, threads: int) -> None:
    """conv + post-ops [+ residual] + global mean/max in one kernel and its finish, under guard pages."""
    n, c, h, wd, m, k, s, pads, post, mode, with_res = case
    rng = np.random.default_rng(c * 10 + m)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = (rng.standard_normal((m, c, *k)) / np.sqrt(c * k[0] * k[1])).astype(np.float32)
    shift = rng.standard_normal(m) * 0.1
    post_ops = ([PostOp("residual")] if with_res else []) + ([] if post is None else [POST_OPS[post]])
    want, res = _global_oracle(x, w, shift, s, pads, post, mode, rng if with_res else None)
    ho, wo = (h + pads[0] + pads[2] - k[0]) // s[0] + 1, (wd + pads[1] + pads[3] - k[1]) // s[1] + 1
    geo = ConvGeometry(n, c, h, wd, m, 1, *k, *s, 1, 1, pads[0], pads[1], ho, wo, global_pool=mode)
    ex = ConvExecutor(geo, w, None, shift, tuple(post_ops), num_threads=threads, alloc=guarded(at))
    for _ in range(2):  # the second call reuses the output and argument blocks
        got = ex.run(guarded_nhwc(x, at), None if res is None else guarded_nhwc(res, at))
        assert got.shape == (n, m, 1, 1)
        np.testing.assert_allclose(got.reshape(n, m), want, rtol=1e-4, atol=1e-4)


def test_model_global_average_pool_is_the_conv_epilogue() -> None:
    """examples/cnn_block.onnx's shape of head: conv + residual + SiLU -> GlobalAveragePool -> Flatten -> Gemm; the
    GAP runs in the conv's step, checked against onnx's reference evaluator."""
    model = onnx.load(str(Path(__file__).resolve().parents[3] / "examples" / "cnn_block.onnx"))
    x = np.random.default_rng(8).standard_normal((1, 3, 64, 64)).astype(np.float32)
    name = model.graph.input[0].name
    for threads in (1, 2):
        cm = compile_model(model.SerializeToString(), "x86_64_avx512", {"num_threads": threads})
        got = next(iter(cm({name: x}).values()))
        want = ReferenceEvaluator(model).run(None, {name: x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        text = cm.describe()
        assert "+ maxpool 2x2 epilogue ->32x32" in text and "+ global mean pool epilogue ->1x1" in text
        assert [w for _, _, w in cm.placement()].count("x86_64_avx512") == len(cm.subgraphs)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_a_depthwise_conv_runs_its_global_pool_kernel_after_it(op: str) -> None:
    """The depthwise walk has no global pool epilogue: the global pool kernel runs on its output in the same step."""
    rng = np.random.default_rng(9)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], group=20),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node(op, ["r"], ["y"])]
    g = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 20, 7, 9])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(rng.standard_normal((20, 1, 3, 3)).astype(np.float32), "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    cm = compile_model(model.SerializeToString(), "x86_64_avx512", {"num_threads": 2})
    x = rng.standard_normal((2, 20, 7, 9)).astype(np.float32)
    np.testing.assert_allclose(cm({"x": x})["y"], ReferenceEvaluator(model).run(None, {"x": x})[0],
                               rtol=1e-4, atol=1e-4)
    assert "not fused: a depthwise convolution's walk has no global pool epilogue" in cm.describe()


@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[3], CASES[9], CASES[11]], ids=["0", "2", "3", "9", "11"])
@pytest.mark.parametrize("at", ["end", "start"])
def test_pooled_output_writes_a_concat_slice_under_guard_pages(case: tuple, at: str) -> None:
    """A conv + pool writing into a channel Concat's output (``out_pitch``): the epilogue's pooled stores, or the
    pool kernel after the conv, stay inside the slice; the channels around it keep their values."""
    plan, w, shift, x = _plan(case)
    want = _oracle(case, w, shift, x, plan)
    n, m, ho, wo = want.shape
    total = m + 9
    offset = total - m if at == "end" else 5
    ex = plan.executor(x.shape, 2, out_pitch=total)
    assert isinstance(ex, ConvThenPool) is not case[-1]
    buf = guarded_array((n, ho, wo, total), np.float32, at)
    buf[...] = -7.0
    got = ex.run(x, None, buf[..., offset:offset + m])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert (buf[..., :offset] == -7.0).all() and (buf[..., offset + m:] == -7.0).all()


# --- dynamic N, H, W: the epilogues on runtime geometry ----------------------------------------------------------

#: CASES a dynamic shape pools in the epilogue too (disjoint whole windows at every size, at most 3 rows), and the
#: ones it leaves to the pool kernel after the conv: a 5-row window, ceil_mode, padding, overlapping windows
DYNAMIC_FUSED = [0, 1, 2, 3, 4, 5, 6]
DYNAMIC_SEPARATE = [8, 9, 10, 11, 12]


def _built() -> int:
    from snippets_x86_64.cache import FUNCTION_CACHE

    return FUNCTION_CACHE.stats["miss"] + FUNCTION_CACHE.stats["disk"]


@pytest.mark.parametrize("index", DYNAMIC_FUSED + DYNAMIC_SEPARATE)
@pytest.mark.parametrize("at", ["end", "start"])
def test_dynamic_conv_pool_matches_float64_at_random_shapes(index: int, at: str) -> None:
    """One executor made for every N, H, W (``dynamic_executor``), then random shapes (``for_shape``): each against a
    float64 conv + post-op + pool under guard pages, the pool fused as the dynamic rule says, no kernel built."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    case = CASES[index]
    plan, w, shift, x0 = _plan(case)
    first = plan.dynamic_executor(x0.shape, 2, (None, x0.shape[1], None, None), alloc=guarded(at))
    assert isinstance(first, ConvThenPool) is (index in DYNAMIC_SEPARATE)
    before = _built()
    rng = np.random.default_rng(index)

    @given(st.integers(1, 3), st.integers(8, 37), st.integers(8, 37))
    @settings(max_examples=8, deadline=None)
    def shape(n: int, h: int, wd: int) -> None:
        x = rng.standard_normal((n, x0.shape[1], h, wd)).astype(np.float32)
        ex = plan.for_shape(first, x.shape)
        want = _oracle(case, w, shift, x, plan)
        got = ex.run(guarded_nhwc(x, at))
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

    shape()
    assert _built() == before


def test_dynamic_pool_epilogue_reasons() -> None:
    """Why a dynamic shape runs the pool's kernel after the conv where a static one may not."""
    from snippets_x86_64.conv_subgraph import dynamic_pool_reason

    x = Parameter("f32", [1, 8, 12, 12])
    assert dynamic_pool_reason(MaxPool(x, kernel=(2, 2), strides=(2, 2))) == ""
    assert dynamic_pool_reason(AvgPool(x, kernel=(3, 3), strides=(3, 3))) == ""
    assert "ceil_mode" in dynamic_pool_reason(MaxPool(x, kernel=(2, 2), strides=(2, 2), ceil_mode=True))
    assert "padded" in dynamic_pool_reason(MaxPool(x, kernel=(2, 2), strides=(2, 2), auto_pad="same_upper"))
    assert "padded" in dynamic_pool_reason(MaxPool(x, kernel=(2, 2), strides=(2, 2), pads=(1, 1, 0, 0)))
    assert "overlapping" in dynamic_pool_reason(MaxPool(x, kernel=(2, 2), strides=(1, 1)))
    assert "4 rows" in dynamic_pool_reason(MaxPool(x, kernel=(4, 4), strides=(4, 4)))


@pytest.mark.parametrize("case", GLOBAL_CASES, ids=[str(i) for i in range(len(GLOBAL_CASES))])
@pytest.mark.parametrize("at", ["end", "start"])
def test_dynamic_global_pool_epilogue_matches_float64(case: tuple, at: str) -> None:
    """conv + post-ops [+ residual] + global mean/max made once for every N, H, W: the row slots and the finish read
    the shape's Ho, Wo at run time; random shapes against float64 under guard pages, no kernel built."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    _, c, _, _, m, k, s, pads, post, mode, with_res = case
    rng = np.random.default_rng(c * 10 + m)
    w = (rng.standard_normal((m, c, *k)) / np.sqrt(c * k[0] * k[1])).astype(np.float32)
    shift = rng.standard_normal(m) * 0.1
    xp = Parameter("f32", [1, c, 16, 16], name="x")
    conv = Convolution(xp, Constant(w), strides=s, pads=pads)
    post_ops = tuple(([PostOp("residual")] if with_res else []) + ([] if post is None else [POST_OPS[post]]))
    plan = ConvPlan(conv, w, None, shift, post_ops, (), 1 if with_res else None, global_pool=mode)
    first = plan.dynamic_executor((1, c, 16, 16), 2, (None, c, None, None), alloc=guarded(at))
    assert first.geo.global_pool == mode
    before = _built()

    @given(st.integers(1, 3), st.integers(5, 30), st.integers(5, 30))
    @settings(max_examples=8, deadline=None)
    def shape(n: int, h: int, wd: int) -> None:
        x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
        want, res = _global_oracle(x, w, shift, s, pads, post, mode, rng if with_res else None)
        ex = plan.for_shape(first, x.shape)
        got = ex.run(guarded_nhwc(x, at), None if res is None else guarded_nhwc(res, at))
        assert got.shape == (n, m, 1, 1)
        np.testing.assert_allclose(got.reshape(n, m), want, rtol=1e-4, atol=1e-4)

    shape()
    assert _built() == before


def test_a_dynamic_cnn_block_fuses_what_the_static_one_does() -> None:
    """examples/cnn_block.onnx with dynamic N, H, W: the stem's MaxPool and the head's GlobalAveragePool are its convs'
    epilogues, as in the static compile (the same Subgraphs); describe() says so; random shapes against onnxruntime
    build no kernel."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    ort = pytest.importorskip("onnxruntime")
    static = onnx.load(str(Path(__file__).resolve().parents[3] / "examples" / "cnn_block.onnx"))
    data = dynamic_nhw(static)
    name = static.graph.input[0].name
    cm = compile_model(data, "x86_64_avx512", {"num_threads": 2})
    cs = compile_model(static.SerializeToString(), "x86_64_avx512", {"num_threads": 2})
    assert [[op.type_name for op in sg.body_ops] for sg in cm.subgraphs] == \
        [[op.type_name for op in sg.body_ops] for sg in cs.subgraphs]
    text = cm.describe()
    assert "maxpool 2x2 epilogue on the pooled rows" in text and "global mean pool epilogue" in text
    assert "not fused" not in text
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(11)
    cm({name: rng.standard_normal((1, 3, 64, 64)).astype(np.float32)})
    before = _built()

    @given(st.integers(1, 3), st.integers(8, 70), st.integers(8, 70))
    @settings(max_examples=10, deadline=None)
    def shape(n: int, h: int, wd: int) -> None:
        x = rng.standard_normal((n, 3, h, wd)).astype(np.float32)
        np.testing.assert_allclose(next(iter(cm({name: x}).values())), sess.run(None, {name: x})[0],
                                   rtol=1e-4, atol=1e-4)

    shape()
    assert _built() == before
    assert "0 kernel(s) built after the first shape" in cm.describe()


@pytest.mark.parametrize("pool,fused", [
    (helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2]), True),
    (helper.make_node("AveragePool", ["r"], ["y"], kernel_shape=[3, 3], strides=[3, 3]), True),
    (helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), False),
    (helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1), False),
])
def test_a_dynamic_model_pool_runs_in_the_conv_step(pool: onnx.NodeProto, fused: bool) -> None:
    """A conv + Relu + pool with dynamic N, H, W: one step, the pool fused or its kernel after the conv's (with the
    reason), against onnx's reference evaluator at a few shapes."""
    data = dynamic_nhw(_cnn_model(pool))
    model = onnx.load_from_string(data)
    cm = compile_model(data, "x86_64_avx512", {"num_threads": 2})
    (sg,) = [sg for sg in cm.subgraphs if sg.rt_info.get("SnippetsConvolution")]
    assert [op.type_name for op in sg.body_ops][-1] in ("MaxPool", "AvgPool")
    rng = np.random.default_rng(6)
    for shape in [(1, 3, 17, 18), (2, 3, 9, 30), (1, 3, 24, 7)]:
        x = rng.standard_normal(shape).astype(np.float32)
        (got,) = cm({"x": x}).values()
        (want,) = ReferenceEvaluator(model).run(None, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    text = cm.describe()
    assert ("epilogue on the pooled rows" in text) is fused and ("not fused" in text) is not fused


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_a_dynamic_depthwise_conv_runs_its_global_pool_kernel_after_it(op: str) -> None:
    """Dynamic N, H, W: the depthwise conv's walk and the global pool kernel after it, in one step (describe() says
    why), at a few shapes against onnx's reference evaluator, and an empty batch gives an empty [0, C, 1, 1]."""
    rng = np.random.default_rng(9)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], group=20),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node(op, ["r"], ["y"])]
    g = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 20, 7, 9])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 20, 1, 1])],
                          [numpy_helper.from_array(rng.standard_normal((20, 1, 3, 3)).astype(np.float32), "w")])
    data = dynamic_nhw(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    cm = compile_model(data, "x86_64_avx512", {"num_threads": 2})
    ref = ReferenceEvaluator(onnx.load_from_string(data))
    for shape in [(2, 20, 7, 9), (1, 20, 13, 5), (3, 20, 2, 30)]:
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(cm({"x": x})["y"], ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert cm({"x": np.zeros((0, 20, 5, 5), np.float32)})["y"].shape == (0, 20, 1, 1)
    assert "not fused: a depthwise convolution's walk has no global pool epilogue" in cm.describe()

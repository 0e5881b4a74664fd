"""FullyConnected Subgraphs on x86-64 against numpy float64: the weight packed in panels at compile time, the
Brgemm blocked on M only, post-ops in the same kernel; tails of N and K, M of 1, 3-D inputs, Gemm's transB and
alpha/beta, and every array (the packed weight too) flush against PROT_NONE pages."""

from __future__ import annotations

import math

import numpy as np
import pytest

from snippets_core.config import CompileConfig, ConfigError
from snippets_core.errors import InputError
from snippets_core.frontends import builder as sb
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.passes.split_dimension_m import split as split_m
from snippets_core.runtime.compiled_model import compile_model
from snippets_core.runtime.pipeline import run_tokenization
from snippets_core.runtime.targets import resolve_target
from snippets_core.tokenization import FULLY_CONNECTED
from snippets_x86_64.brgemm_copy_b import PANEL, pack_b_panels
from snippets_x86_64.fc_executor import PackedWeightExecutor, SplitNExecutor
from snippets_x86_64.guarded import guarded_copy
from snippets_x86_64.runtime import FALLBACK_KEY
from snippets_x86_64.runtime import compile_subgraph as x86_compile_subgraph
from snippets_x86_64.tokenization_callback import fc_callback

pytestmark = pytest.mark.avx512
TARGET = "x86_64_avx512"
RNG = np.random.default_rng(20261125)


def _weights(k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    return ((RNG.standard_normal((k, n)) / math.sqrt(k)).astype(np.float32),
            RNG.standard_normal(n).astype(np.float32))


def _compile(model, threads=1, target_options=None, disabled=()):  # type: ignore[no-untyped-def]
    config = {"num_threads": threads, "target_options": dict(target_options or {}), "disabled_passes": list(disabled)}
    cm = compile_model(model, target=TARGET, config=config)
    sgs = [n for n in cm.model.get_ordered_ops() if isinstance(n, Subgraph)]
    fcs = [sg for sg in sgs if sg.rt_info.get(FULLY_CONNECTED)]
    assert fcs, "no FullyConnected Subgraph"
    for sg in sgs:
        assert sg.rt_info.get(FALLBACK_KEY) is None, sg.rt_info.get(FALLBACK_KEY)
    return cm


def _gelu_erf(x):  # type: ignore[no-untyped-def]
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def _gelu_tanh(x):  # type: ignore[no-untyped-def]
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _erf_gelu_graph(y):  # type: ignore[no-untyped-def]
    """x*0.5*(1+erf(x/sqrt2)) as torch exports it (x has two consumers)."""
    return sb.multiply(sb.multiply(y, sb.add(sb.erf(sb.divide(y, np.float32(math.sqrt(2)))), np.float32(1.0))),
                       np.float32(0.5))


def _tanh_gelu_graph(y):  # type: ignore[no-untyped-def]
    cube = sb.multiply(sb.multiply(y, y), y)
    inner = sb.multiply(sb.add(y, sb.multiply(cube, np.float32(0.044715))), np.float32(math.sqrt(2 / math.pi)))
    return sb.multiply(sb.multiply(y, np.float32(0.5)), sb.add(sb.tanh(inner), np.float32(1.0)))


#: post-op name -> (graph after x@W+b, numpy float64 of it)
POST_OPS = {
    "none": (lambda y: y, lambda y: y),
    "relu": (sb.relu, lambda y: np.maximum(y, 0)),
    "gelu_erf_op": (lambda y: sb.gelu(y), _gelu_erf),
    "gelu_erf_decomposed": (_erf_gelu_graph, _gelu_erf),
    "gelu_tanh_decomposed": (_tanh_gelu_graph, _gelu_tanh),
    "sigmoid": (sb.sigmoid, lambda y: 1 / (1 + np.exp(-y))),
    "swish": (lambda y: sb.multiply(y, sb.sigmoid(y)), lambda y: y / (1 + np.exp(-y))),
    "scale": (lambda y: sb.multiply(y, np.float32(0.125)), lambda y: y * 0.125),
    "tanh": (sb.tanh, np.tanh),
}


@pytest.mark.parametrize("post", sorted(POST_OPS))
@pytest.mark.parametrize("bias", [True, False])
def test_fc_with_every_post_op(post, bias):
    m, k, n = 37, 70, 150  # N: two full panels and a tail of 22 (one full vector, a masked one); K odd-ish
    w, b = _weights(k, n)
    graph, oracle = POST_OPS[post]
    x = sb.parameter([m, k], "f32", name="x")
    y = sb.matmul(x, w)
    if bias:
        y = sb.add(y, b)
    model = sb.model([graph(y)], name="fc")
    cm = _compile(model)
    xs = RNG.standard_normal((m, k)).astype(np.float32)
    lin = xs.astype(np.float64) @ w + (b if bias else 0)
    (out,) = cm({"x": xs}).values()
    np.testing.assert_allclose(out, oracle(lin), rtol=2e-5, atol=3e-5)
    # one Subgraph holds the whole layer: nothing of it runs on the reference
    assert [op for _, op, where in cm.placement() if where != TARGET] == []


@pytest.mark.parametrize("m, k, n", [(1, 768, 64), (1, 33, 17), (2, 1, 5), (5, 129, 65), (64, 100, 200),
                                     (130, 17, 16), (3, 1000, 3)])
@pytest.mark.parametrize("threads", [1, 2])
def test_tails_of_m_n_k(m, k, n, threads):
    w, b = _weights(k, n)
    x = sb.parameter([m, k], "f32", name="x")
    model = sb.model([sb.relu(sb.add(sb.matmul(x, w), b))], name="fc")
    cm = _compile(model, threads=threads)
    xs = RNG.standard_normal((m, k)).astype(np.float32)
    (out,) = cm({"x": xs}).values()
    np.testing.assert_allclose(out, np.maximum(xs.astype(np.float64) @ w + b, 0), rtol=2e-5, atol=3e-5)


@pytest.mark.parametrize("shape", [(2, 9, 40), (1, 100, 24), (3, 1, 24)])
def test_batched_3d_input_with_residual(shape):
    *batch, k = shape
    n = 90
    w, b = _weights(k, n)
    x = sb.parameter(list(shape), "f32", name="x")
    res = sb.parameter([*batch, n], "f32", name="res")
    model = sb.model([sb.add(sb.add(sb.matmul(x, w), b), res)], name="fc_residual")
    cm = _compile(model, threads=2)
    xs = RNG.standard_normal(shape).astype(np.float32)
    rs = RNG.standard_normal((*batch, n)).astype(np.float32)
    (out,) = cm({"x": xs, "res": rs}).values()
    np.testing.assert_allclose(out, xs.astype(np.float64) @ w + b + rs, rtol=2e-5, atol=3e-5)


@pytest.mark.parametrize("alpha, beta", [(1.0, 1.0), (0.5, 2.0), (2.0, 0.0)])
def test_gemm_trans_b_alpha_beta(alpha, beta):
    from onnx import TensorProto, helper, numpy_helper

    m, k, n = 19, 48, 70
    wt = RNG.standard_normal((n, k)).astype(np.float32)  # transB: the weight is stored [N, K]
    c = RNG.standard_normal(n).astype(np.float32)
    node = helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1, alpha=alpha, beta=beta)
    graph = helper.make_graph([node], "gemm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                              initializer=[numpy_helper.from_array(wt, "w"), numpy_helper.from_array(c, "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    cm = _compile(model.SerializeToString())
    xs = RNG.standard_normal((m, k)).astype(np.float32)
    (out,) = cm({"x": xs}).values()
    np.testing.assert_allclose(out, alpha * (xs.astype(np.float64) @ wt.T.astype(np.float64)) + beta * c,
                               rtol=2e-5, atol=3e-5)


def test_mlp_chain_fc_gelu_fc():
    m, d, f = 24, 64, 200
    w1, b1 = _weights(d, f)
    w2, b2 = _weights(f, d)
    x = sb.parameter([1, m, d], "f32", name="x")
    h = _erf_gelu_graph(sb.add(sb.matmul(x, w1), b1))
    model = sb.model([sb.add(sb.add(sb.matmul(h, w2), b2), x)], name="mlp")
    cm = _compile(model, threads=2)
    fcs = [n for n in cm.model.get_ordered_ops() if isinstance(n, Subgraph) and n.rt_info.get(FULLY_CONNECTED)]
    assert len(fcs) == 2
    xs = RNG.standard_normal((1, m, d)).astype(np.float32)
    (out,) = cm({"x": xs}).values()
    x64 = xs.astype(np.float64)
    want = _gelu_erf(x64 @ w1 + b1) @ w2 + b2 + x64
    np.testing.assert_allclose(out, want, rtol=3e-5, atol=5e-5)


def test_pack_b_panels_layout():
    w = np.arange(5 * 150, dtype=np.float32).reshape(5, 150)
    p = pack_b_panels(w)
    assert p.size == w.size
    assert np.array_equal(p[: 5 * PANEL].reshape(5, PANEL), w[:, :PANEL])
    assert np.array_equal(p[2 * 5 * PANEL :].reshape(5, 150 - 2 * PANEL), w[:, 2 * PANEL :])


@pytest.mark.parametrize("m, k, n, at", [(1, 33, 17, "end"), (7, 65, 150, "end"), (7, 65, 150, "start"),
                                         (40, 16, 64, "end"), (13, 300, 150, "end"), (150, 200, 64, "start"),
                                         (96, 37, 75, "end"), (96, 37, 75, "start")])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_fc_against_guard_pages(m, k, n, at, threads):
    """Every array the kernel touches (x, the packed weight, the bias, the output) ends (or starts) at a
    PROT_NONE page: a read or write past it would crash the test (on several threads, each thread's rows of the
    kernel whose M is split inside it)."""
    w, b = _weights(k, n)
    x = sb.parameter([m, k], "f32", name="x")
    model = sb.model([sb.relu(sb.add(sb.matmul(x, w), b))], name="fc")
    cfg = CompileConfig.from_mapping({"num_threads": threads, "target_options": {"parallel_min_ns": 0}})
    run_tokenization(model, resolve_target(TARGET, cfg), cfg)
    (sg,) = [n for n in model.get_ordered_ops() if isinstance(n, Subgraph)]
    ex = x86_compile_subgraph(sg, cfg, resolve_target(TARGET, cfg).host)
    assert isinstance(ex, PackedWeightExecutor), sg.rt_info.get(FALLBACK_KEY)
    (i,) = ex.packed
    ex.packed[i] = guarded_copy(ex.packed[i], at)
    args = [guarded_copy(np.asarray(src.node.value), at) if src.node.type_name == "Constant" else None
            for src in (inp.source for inp in sg.inputs)]
    xs = RNG.standard_normal((m, k)).astype(np.float32)
    args = [guarded_copy(xs, at) if a is None else a for a in args]
    out = guarded_copy(np.full((m, n), np.nan, np.float32), at)
    ex(args, [out])
    np.testing.assert_allclose(out, np.maximum(xs.astype(np.float64) @ w + b, 0), rtol=2e-5, atol=3e-5)


@pytest.mark.parametrize("m, k, n", [(128, 128, 128), (96, 37, 75), (150, 200, 64), (1, 33, 17), (7, 65, 150)])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_static_rows_split_inside_the_kernel(m, k, n, threads):
    """A static FC on several threads has its M split by SplitDimensionM inside the kernel it compiles (the
    parallel domain gets an index per thread), not by Reshapes around the Subgraph: the model's steps are the FC
    alone, and it reads and writes the caller's unsplit arrays; against numpy float64."""
    w, b = _weights(k, n)
    x = sb.parameter([1, m, k], "f32", name="x")
    res = sb.parameter([1, m, n], "f32", name="res")
    model = sb.model([sb.add(_erf_gelu_graph(sb.add(sb.matmul(x, w), b)), res)], name="fc_split_m")
    cm = _compile(model, threads=threads, target_options={"parallel_min_ns": 0, "parallel_min_bytes": 0})
    assert [op for _, op, _ in cm.placement()] == ["Subgraph"]
    (sg,) = cm.subgraphs
    assert "SplitDimensionM" not in sg.rt_info  # nothing was split around the Subgraph
    (run, *_), = cm._plan
    kernel_executor = run.inner if isinstance(run, PackedWeightExecutor) else run
    found = split_m((1, m, n), threads) if threads > 1 else None
    assert math.prod(kernel_executor.domain) == (found[0] if found else 1), kernel_executor.domain
    xs = RNG.standard_normal((1, m, k)).astype(np.float32)
    rs = RNG.standard_normal((1, m, n)).astype(np.float32)
    (out,) = cm({"x": xs, "res": rs}).values()
    np.testing.assert_allclose(out, _gelu_erf(xs.astype(np.float64) @ w + b) + rs, rtol=3e-5, atol=5e-5)


@pytest.mark.parametrize("m, threads", [(197, 2), (101, 3), (197, 3)])
@pytest.mark.parametrize("at", ["end", "start"])
def test_static_prime_m_rows_in_parts_at_guard_pages(m, threads, at):
    """A static FC whose M SplitDimensionM cannot split (prime) runs a kernel per thread's consecutive rows
    (RowSplitExecutor, at most two heights), on the row slices of x, of the residual and of the output; every array
    at a PROT_NONE page, against numpy float64."""
    from snippets_x86_64.runtime import RowSplitExecutor

    k, n = 37, 75
    w, b = _weights(k, n)
    x = sb.parameter([1, m, k], "f32", name="x")
    res = sb.parameter([1, m, n], "f32", name="res")
    model = sb.model([sb.add(_erf_gelu_graph(sb.add(sb.matmul(x, w), b)), res)], name="fc_prime")
    cfg = CompileConfig.from_mapping({"num_threads": threads, "target_options": {"parallel_min_ns": 1}})
    run_tokenization(model, resolve_target(TARGET, cfg), cfg)
    (sg,) = [nd for nd in model.get_ordered_ops() if isinstance(nd, Subgraph)]
    ex = x86_compile_subgraph(sg, cfg, resolve_target(TARGET, cfg).host)
    assert isinstance(ex, PackedWeightExecutor) and isinstance(ex.inner, RowSplitExecutor)
    assert [start for start, _ in ex.inner.parts] == [int(r[0]) for r in np.array_split(np.arange(m), threads)]
    (i,) = ex.packed
    ex.packed[i] = guarded_copy(ex.packed[i], at)
    xs = RNG.standard_normal((1, m, k)).astype(np.float32)
    rs = RNG.standard_normal((1, m, n)).astype(np.float32)
    args = [guarded_copy(xs, at) if inp.source.node.name == "x" else guarded_copy(rs, at)
            if inp.source.node.name == "res" else guarded_copy(np.asarray(inp.source.node.value), at)
            for inp in sg.inputs]
    out = guarded_copy(np.full((1, m, n), np.nan, np.float32), at)
    ex(args, [out])
    np.testing.assert_allclose(out, _gelu_erf(xs.astype(np.float64) @ w + b) + rs, rtol=3e-5, atol=5e-5)


def test_dynamic_m_gets_a_kernel_per_shape_and_packs_once():
    k, n = 40, 70
    w, b = _weights(k, n)
    x = sb.parameter([-1, k], "f32", name="x")
    model = sb.model([sb.add(sb.matmul(x, w), b)], name="fc_dyn")
    cm = _compile(model)
    for m in (1, 5, 64):
        xs = RNG.standard_normal((m, k)).astype(np.float32)
        (out,) = cm({"x": xs}).values()
        np.testing.assert_allclose(out, xs.astype(np.float64) @ w + b, rtol=2e-5, atol=3e-5)


def test_packing_disabled_still_runs_the_fc():
    m, k, n = 9, 30, 70
    w, b = _weights(k, n)
    x = sb.parameter([m, k], "f32", name="x")
    model = sb.model([sb.add(sb.matmul(x, w), b)], name="fc")
    cm = _compile(model, disabled=["mark-packed-weight-brgemm"])
    xs = RNG.standard_normal((m, k)).astype(np.float32)
    (out,) = cm({"x": xs}).values()
    np.testing.assert_allclose(out, xs.astype(np.float64) @ w + b, rtol=2e-5, atol=3e-5)


def test_fc_callback_reasons():
    x = sb.parameter([4, 8], "f32", name="x")
    mm = sb.matmul(x, np.ones((8, 16), np.float32))
    assert fc_callback(mm.node, features=frozenset({"avx512f"})) is None
    assert "avx512f" in fc_callback(mm.node, features=frozenset())
    xi = sb.parameter([4, 8], "i8", name="xi")
    mi = sb.matmul(xi, np.ones((8, 16), np.int8))
    assert "f32" in fc_callback(mi.node, features=frozenset({"avx512f"}))


@pytest.mark.parametrize("transposed", [False, True])
def test_one_row_fc_splits_n_between_threads(transposed):
    """M = 1 cannot be split, so each of the 2 threads runs the kernel on half of the weight's panels, of the bias
    and residual, and of the output."""
    k, n = 40, 256
    w, b = _weights(k, n)
    x = sb.parameter([1, 1, k], "f32", name="x")
    res = sb.parameter([1, 1, n], "f32", name="res")
    mm = sb.matmul(x, np.ascontiguousarray(w.T), transpose_b=True) if transposed else sb.matmul(x, w)
    model = sb.model([sb.add(sb.relu(sb.add(mm, b)), res)], name="fc_row")
    cfg = CompileConfig.from_mapping({"num_threads": 2})
    run_tokenization(model, resolve_target(TARGET, cfg), cfg)
    (sg,) = [n for n in model.get_ordered_ops() if isinstance(n, Subgraph)]
    ex = x86_compile_subgraph(sg, cfg, resolve_target(TARGET, cfg).host)
    assert isinstance(ex, SplitNExecutor) and len(ex.parts) == 2
    xs = RNG.standard_normal((1, 1, k)).astype(np.float32)
    rs = RNG.standard_normal((1, 1, n)).astype(np.float32)
    args = [xs if inp.source.node.type_name == "Parameter" and inp.source.node.name == "x" else
            rs if inp.source.node.type_name == "Parameter" else np.asarray(inp.source.node.value)
            for inp in sg.inputs]
    (out,) = ex(args)
    np.testing.assert_allclose(out, np.maximum(xs.astype(np.float64) @ w + b, 0) + rs, rtol=2e-5, atol=3e-5)


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("at", ["end", "start"])
def test_one_row_split_n_at_guard_pages(threads, at):
    """The one-row split on 2 and 3 threads (one native dispatch), every array it reads or writes (x, each part's
    panels of the weight, the bias, the residual, the output) at a PROT_NONE page."""
    k, n = 37, 384
    w, b = _weights(k, n)
    x = sb.parameter([1, k], "f32", name="x")
    res = sb.parameter([1, n], "f32", name="res")
    model = sb.model([sb.add(_erf_gelu_graph(sb.add(sb.matmul(x, w), b)), res)], name="fc_row")
    cfg = CompileConfig.from_mapping({"num_threads": threads})
    run_tokenization(model, resolve_target(TARGET, cfg), cfg)
    (sg,) = [nd for nd in model.get_ordered_ops() if isinstance(nd, Subgraph)]
    ex = x86_compile_subgraph(sg, cfg, resolve_target(TARGET, cfg).host)
    assert isinstance(ex, SplitNExecutor) and len(ex.parts) == threads
    ex.weights = [{i: guarded_copy(a, at) for i, a in part.items()} for part in ex.weights]
    xs = RNG.standard_normal((1, k)).astype(np.float32)
    rs = RNG.standard_normal((1, n)).astype(np.float32)
    args = [guarded_copy(xs, at) if inp.source.node.name == "x" else guarded_copy(rs, at)
            if inp.source.node.name == "res" else guarded_copy(np.asarray(inp.source.node.value), at)
            for inp in sg.inputs]
    out = guarded_copy(np.full((1, n), np.nan, np.float32), at)
    ex(args, [out])
    np.testing.assert_allclose(out, _gelu_erf(xs.astype(np.float64) @ w + b) + rs, rtol=3e-5, atol=5e-5)
    with pytest.raises(InputError, match="input"):
        ex([a[..., :1] if a.shape == (1, n) else a for a in args])


def test_kernel_cache_key_tells_a_packed_weight_from_a_plain_one():
    """The same body reads B packed (an FC) or planar (a MatMul of two inputs): two kernels, two keys."""
    from snippets_core.tokenization.tokenize_fc_snippets import FC_WEIGHT
    from snippets_x86_64.cache import cache_key

    x = sb.parameter([1, 2, 4, 8], "f32", name="x")
    model = sb.model([sb.matmul(x, np.ones((8, 16), np.float32))], name="fc")
    cfg = CompileConfig.from_mapping({"num_threads": 1})
    run_tokenization(model, resolve_target(TARGET, cfg), cfg)
    (sg,) = [n for n in model.get_ordered_ops() if isinstance(n, Subgraph)]
    plain = sg.body.clone()
    for p in plain.parameters:
        p.rt_info.pop(FC_WEIGHT, None)
    assert cache_key(sg.body, []) != cache_key(plain, [])


@pytest.mark.parametrize("threads", [1, 2])
def test_dynamic_rows_split_between_threads(threads):
    """[1, S, K] with S dynamic: SplitDimensionM could not split S at compile time, so the executor splits the rows
    of x, of the residual and of the output between the threads (the bias is not cut)."""
    from snippets_x86_64.fc_executor import DynamicFCExecutor

    k, n = 24, 70
    w, b = _weights(k, n)
    x = sb.parameter([1, -1, k], "f32", name="x")
    res = sb.parameter([1, -1, n], "f32", name="res")
    model = sb.model([sb.add(sb.relu(sb.add(sb.matmul(x, w), b)), res)], name="fc_dyn_rows")
    cm = _compile(model, threads=threads, target_options={"fc_runtime_m": False})  # the per-shape path
    for s in (1, 31, 33, 100):
        xs = RNG.standard_normal((1, s, k)).astype(np.float32)
        rs = RNG.standard_normal((1, s, n)).astype(np.float32)
        (out,) = cm({"x": xs, "res": rs}).values()
        np.testing.assert_allclose(out, np.maximum(xs.astype(np.float64) @ w + b, 0) + rs, rtol=2e-5, atol=3e-5)
    cfg = CompileConfig.from_mapping({"num_threads": threads, "target_options": {"fc_runtime_m": False}})
    run_tokenization(model, resolve_target(TARGET, cfg), cfg)
    (sg,) = [n for n in model.get_ordered_ops() if isinstance(n, Subgraph)]
    ex = x86_compile_subgraph(sg, cfg, resolve_target(TARGET, cfg).host)
    assert isinstance(ex, DynamicFCExecutor)
    xs = RNG.standard_normal((1, 100, k)).astype(np.float32)
    rs = RNG.standard_normal((1, 100, n)).astype(np.float32)
    args = [xs if inp.source.node.name == "x" else rs if inp.source.node.name == "res" else
            np.asarray(inp.source.node.value) for inp in sg.inputs]
    ex(args)
    shapes = [shp[0] for shp, e in ex.executors.items() if e is not None]
    assert ((1, 50, k) in shapes) == (threads == 2)


def test_dynamic_fc_on_the_reference_gets_the_original_weight():
    """A shape the target declares it does not take runs the body on the reference, which must read the weight as
    it is, not packed (the per-shape path: a runtime-M FC falls back to it on run-time broadcasting)."""
    k, n = 16, 130
    w, b = _weights(k, n)
    x = sb.parameter([-1, k], "f32", name="x")
    model = sb.model([sb.add(sb.matmul(x, w), b)], name="fc_ref")
    cfg = CompileConfig.from_mapping({"num_threads": 1, "target_options": {"fc_runtime_m": False}})
    run_tokenization(model, resolve_target(TARGET, cfg), cfg)
    (sg,) = [n for n in model.get_ordered_ops() if isinstance(n, Subgraph)]
    ex = x86_compile_subgraph(sg, cfg, resolve_target(TARGET, cfg).host)
    def declared_fallback(shapes):  # type: ignore[no-untyped-def]
        ex.inner.reasons[shapes] = "declared by the test"
        ex.inner.executors[shapes] = None
        return None

    ex.inner._specialize = declared_fallback
    xs = RNG.standard_normal((3, k)).astype(np.float32)
    args = [xs if inp.source.node.type_name == "Parameter" else np.asarray(inp.source.node.value) for inp in sg.inputs]
    (out,) = ex(args)
    assert ex.last_placement.where == "reference"
    np.testing.assert_allclose(out, xs.astype(np.float64) @ w + b, rtol=2e-5, atol=3e-5)


def test_fc_with_perf_counters_on(monkeypatch):
    """Debug capabilities compile their own kernel: it reads the packed weight like the normal one."""
    monkeypatch.setenv("SNIPPETS_PERF_COUNT", "1")
    m, k, n = 5, 20, 150
    w, b = _weights(k, n)
    x = sb.parameter([m, k], "f32", name="x")
    model = sb.model([sb.add(sb.matmul(x, w), b)], name="fc_perf")
    cm = _compile(model, threads=2)
    xs = RNG.standard_normal((m, k)).astype(np.float32)
    (out,) = cm({"x": xs}).values()
    np.testing.assert_allclose(out, xs.astype(np.float64) @ w + b, rtol=2e-5, atol=3e-5)


def test_split_n_knob():
    k, n = 16, 256
    w, _ = _weights(k, n)
    x = sb.parameter([1, k], "f32", name="x")
    model = sb.model([sb.matmul(x, w)], name="fc_row")
    for value, kind in ((False, PackedWeightExecutor), (True, SplitNExecutor)):
        cfg = CompileConfig.from_mapping({"num_threads": 2, "target_options": {"fc_split_n": value}})
        m = model.clone()
        run_tokenization(m, resolve_target(TARGET, cfg), cfg)
        (sg,) = [n for n in m.get_ordered_ops() if isinstance(n, Subgraph)]
        assert isinstance(x86_compile_subgraph(sg, cfg, resolve_target(TARGET, cfg).host), kind)
    cfg = CompileConfig.from_mapping({"num_threads": 2, "target_options": {"fc_split_n": "yes"}})
    with pytest.raises(ConfigError, match="fc_split_n"):
        compile_model(model, target=TARGET, config=cfg)
    with pytest.raises(ConfigError, match="fc_m_block"):
        compile_model(model, target=TARGET, config={"target_options": {"fc_m_block": -1}})


@pytest.mark.parametrize("tiles, nv", [(1, 4), (3, 4), (8, 4), (22, 4), (5, 1)])
def test_every_line_of_the_next_chunk_is_prefetched_once(tiles, nv):
    """The tiles of a K chunk share out the prefetch of the next chunk: each cache line of a K-loop iteration's
    B rows (K_UNROLL rows of ``nv`` vectors), one chunk ahead, is asked for by exactly one tile."""
    from snippets_x86_64.brgemm import K_UNROLL, PANEL_PREFETCH, _chunk_prefetch

    assert PANEL_PREFETCH
    kc, width = 96, 16 * nv
    got = sorted(off for t in range(tiles) for off in _chunk_prefetch(t, tiles, nv, kc, width) or [])
    want = [(kc * width + r * width + j * 16) * 4 for r in range(K_UNROLL) for j in range(nv)]
    assert got == want

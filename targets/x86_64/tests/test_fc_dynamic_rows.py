"""A FullyConnected of a dynamic M (batch and sequence) runs every M on one kernel that reads M from its
runtime-parameter block (RuntimeRowsFCExecutor): full 128-row blocks in a runtime loop, the tail rows on runtime
register tiles, the rows split between the threads from M, few rows split along N. Checked against numpy float64,
with every array at a guard page, and nothing compiled for a new shape."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from snippets_core.config import CompileConfig
from snippets_core.errors import InputError
from snippets_core.frontends import builder as sb
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.runtime.pipeline import run_tokenization
from snippets_core.runtime.targets import resolve_target
from snippets_x86_64 import runtime as x86_runtime
from snippets_x86_64.fc_executor import ROW_SPLIT_MIN, DynamicFCExecutor, RuntimeRowsFCExecutor
from snippets_x86_64.guarded import guarded_copy

pytestmark = pytest.mark.avx512
TARGET = "x86_64_avx512"
RNG = np.random.default_rng(20261126)
K, N = 40, 150


def _gelu_tanh(x):  # type: ignore[no-untyped-def]
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _fc(threads: int, options: dict | None = None, k: int = K, n: int = N):  # type: ignore[no-untyped-def,type-arg]
    """The Subgraph of gelu(x @ w + b) + res, x [B, S, K] and res [B, S, N] with B and S dynamic, and its executor."""
    w = (RNG.standard_normal((k, n)) / math.sqrt(k)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    x = sb.parameter([-1, -1, k], "f32", name="x")
    res = sb.parameter([-1, -1, n], "f32", name="res")
    model = sb.model([sb.add(sb.gelu(sb.add(sb.matmul(x, w), b), approximation_mode="tanh"), res)], name="fc_rows")
    # parallel_min_bytes 0: these small FCs would otherwise stay on the calling thread
    cfg = CompileConfig.from_mapping({"num_threads": threads,
                                      "target_options": {"parallel_min_bytes": 0, **(options or {})}})
    run_tokenization(model, resolve_target(TARGET, cfg), cfg)
    (sg,) = [nd for nd in model.get_ordered_ops() if isinstance(nd, Subgraph)]
    ex = x86_runtime.compile_subgraph(sg, cfg, resolve_target(TARGET, cfg).host)
    return sg, ex, w, b


def _args(sg, xs, rs, at="end"):  # type: ignore[no-untyped-def]
    return [guarded_copy(xs, at) if i.source.node.name == "x" else guarded_copy(rs, at) if i.source.node.name == "res"
            else guarded_copy(np.asarray(i.source.node.value), at) for i in sg.inputs]


def _guard_weights(ex: RuntimeRowsFCExecutor, at: str) -> None:
    """The packed weight (and the column cuts' slices of it) at a guard page."""
    (i,) = ex.packed
    ex.packed[i] = guarded_copy(ex.packed[i], at)
    ex._packed_items = tuple(ex.packed.items())
    cols = ex.columns
    if cols is not None:
        cols.weights = [{j: guarded_copy(a, at) for j, a in part.items()} for part in cols.weights]
        for p, part in enumerate(cols.weights):
            cols.one_row[p][i] = (0, part[i].__array_interface__["data"][0])


_EXECUTORS: dict = {}  # type: ignore[type-arg]


def _guarded_fc(threads: int, n: int, at: str):  # type: ignore[no-untyped-def]
    """One compiled FC per (threads, N, guard side) for all the hypothesis examples, its weights at a guard page."""
    key = (threads, n, at)
    if key not in _EXECUTORS:
        sg, ex, w, b = _fc(threads, n=n)
        assert isinstance(ex, RuntimeRowsFCExecutor), ex.describe()
        _guard_weights(ex, at)
        _EXECUTORS[key] = (sg, ex, w, b)
    return _EXECUTORS[key]


@settings(max_examples=int(os.environ.get("SNIPPETS_RANDOM_EXAMPLES", "25")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 600), st.sampled_from([1, 2]), st.sampled_from([1, 2, 3]), st.sampled_from([N, 256]),
       st.sampled_from(["end", "start"]))
@example(1, 1, 1, N, "end")
@example(1, 1, 2, 256, "start")
@example(7, 1, 2, 256, "end")
@example(128, 1, 2, N, "end")
@example(0, 2, 2, N, "end")
@example(600, 1, 2, 256, "end")
def test_random_m_against_numpy_at_guard_pages_compiles_nothing(m, batch, threads, n, at):
    """Random M = batch x seq in 0..600 (0: no rows, an empty output), on 1 and 2 threads (N = 256 also splits few
    rows along N), every array at a guard page: the output matches numpy float64, and no kernel is built."""
    sg, ex, w, b = _guarded_fc(threads, n, at)
    seq = -(-m // batch)
    built = []
    real = x86_runtime.generate_subgraph
    x86_runtime.generate_subgraph = lambda *a, **k: built.append(a) or real(*a, **k)  # type: ignore[assignment]
    try:
        xs = RNG.standard_normal((batch, seq, K)).astype(np.float32)
        rs = RNG.standard_normal((batch, seq, n)).astype(np.float32)
        out = guarded_copy(np.full((batch, seq, n), np.nan, np.float32), at)
        ex(_args(sg, xs, rs, at), [out])
    finally:
        x86_runtime.generate_subgraph = real  # type: ignore[assignment]
    assert built == []
    assert ex.last_placement.where == TARGET and ex.calls_per_shape == 0
    want = _gelu_tanh(xs.astype(np.float64) @ w + b) + rs
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=3e-5)


def test_one_kernel_reads_m_from_its_runtime_parameters():
    """The kernel's runtime-parameter block holds the row loop's count (M // 128) and the tail's tiles."""
    _, ex, _, _ = _fc(1)
    exprs = dict(ex.kernel.info.runtime_params)
    assert "((s_M) // 128)" in exprs.values(), exprs
    assert any(k.endswith(".m_loop6") for k in exprs), exprs
    assert "one kernel for every M" in ex.describe()


@pytest.mark.parametrize(("threads", "m", "starts", "columns"), [
    (1, 300, [0], False), (2, 300, [0, 150], False), (2, 1, [0, 0], True),
    (2, 2 * ROW_SPLIT_MIN - 1, [0, 0], True), (2, 2 * ROW_SPLIT_MIN, [0, ROW_SPLIT_MIN], False),
])  # fmt: skip
def test_rows_split_from_m(threads, m, starts, columns):
    """The parts of a call come from M alone: consecutive rows per thread, or for fewer than ROW_SPLIT_MIN rows per
    thread a split along N (the one-row FC of a classifier or a decoding step, as the static one runs)."""
    _, ex, _, _ = _fc(threads, n=256)
    plan = ex.plan(m)
    assert plan.starts == starts and plan.columns == columns
    assert all(e.kernel is (ex.columns.kernel if columns else ex.kernel) for e in plan.executors)


def test_run_time_broadcast_goes_per_shape():
    """A residual with one row where x has many (numpy broadcasting of a dynamic dim) runs on a per-shape kernel."""
    sg, ex, w, b = _fc(1)
    xs = RNG.standard_normal((1, 5, K)).astype(np.float32)
    rs = RNG.standard_normal((1, 1, N)).astype(np.float32)
    (out,) = ex(_args(sg, xs, rs))
    np.testing.assert_allclose(out, _gelu_tanh(xs.astype(np.float64) @ w + b) + rs, rtol=2e-5, atol=3e-5)
    assert "run-time broadcasting" in ex.describe()


def test_bad_shapes_are_typed_errors():
    sg, ex, _, _ = _fc(1)
    xs = RNG.standard_normal((1, 5, K + 1)).astype(np.float32)
    rs = RNG.standard_normal((1, 5, N)).astype(np.float32)
    with pytest.raises(InputError, match="input 0 must have shape"):
        ex(_args(sg, xs, rs))
    xs = RNG.standard_normal((1, 5, K)).astype(np.float32)
    with pytest.raises(InputError, match="output array 0"):
        ex(_args(sg, xs, rs), [np.empty((1, 4, N), np.float32)])


def test_runtime_m_off_keeps_a_kernel_per_shape():
    _, ex, _, _ = _fc(1, {"fc_runtime_m": False})
    assert isinstance(ex, DynamicFCExecutor)
    assert "fc_runtime_m is false" in ex.describe()


def _torch_like_models():  # type: ignore[no-untyped-def]
    """tests/onnx/torch_like_models.py (the BERT layer as torch exports it with dynamic axes)."""
    import importlib.util
    import sys
    from pathlib import Path

    name = "snippets_torch_like_models"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[3] / "tests" / "onnx" / "torch_like_models.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[name] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    return sys.modules[name]


@pytest.mark.parametrize("threads", [1, 2])
def test_dynamic_bert_layer_against_onnxruntime(threads, monkeypatch):
    """A BERT encoder layer exported with dynamic batch and sequence: its FullyConnected Subgraphs run on the
    runtime-M kernels (one row: split along N on 2 threads; more: rows split), the output matches onnxruntime at
    every (batch, seq), and a new shape builds no FC kernel."""
    ort = pytest.importorskip("onnxruntime")
    import snippets_core
    from snippets_core.tokenization import FULLY_CONNECTED

    tlm = _torch_like_models()
    proto = tlm.bert_encoder_layer("torchscript", hidden=128, heads=2, ffn=256)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    cm = snippets_core.compile_model(proto, target=TARGET, config={"num_threads": threads,
                                                                   "target_options": {"parallel_min_bytes": 0}})
    fcs = [getattr(st.run, "__self__", st.run) for st in cm._steps if st.node.type_name == "Subgraph"]
    fcs = [ex for ex in fcs if isinstance(ex, RuntimeRowsFCExecutor)]
    assert len(fcs) == 6, cm.describe()  # Q, K, V, the attention output, FFN up and down
    assert all((ex.columns is not None) == (threads == 2) for ex in fcs)
    built = []  # the FullyConnected Subgraphs a kernel is generated for from here on
    real = x86_runtime.generate_subgraph
    monkeypatch.setattr(x86_runtime, "generate_subgraph",
                        lambda sg, *a, **k: built.append(sg.rt_info.get(FULLY_CONNECTED)) or real(sg, *a, **k))
    for batch, seq in ((1, 1), (2, 1), (1, 7), (3, 50), (2, 130)):
        feeds = tlm.random_inputs(proto, batch, seq, seed=batch * 1000 + seq)
        (want,) = sess.run(None, feeds)
        (got,) = cm(feeds).values()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"batch {batch}, seq {seq}")
        assert all(batch * seq in ex._plans for ex in fcs)
    assert not any(built)
    assert all(ex.calls_per_shape == 0 for ex in fcs)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("bias_rank", [1, 3])
def test_transposed_weight_and_a_rank_3_bias(threads, bias_rank):
    """Gemm's transB weight ([N, K], packed transposed) and a bias of shape [1, 1, N] (rank 3 beside [M, K] rows):
    one runtime-M kernel, every M against numpy float64 at guard pages (cnn_block's classifier after its global
    pool is such a Gemm with one row per image)."""
    k, n = 33, 128
    w = (RNG.standard_normal((n, k)) / math.sqrt(k)).astype(np.float32)
    b = RNG.standard_normal((1,) * (bias_rank - 1) + (n,)).astype(np.float32)
    x = sb.parameter([-1, -1, k], "f32", name="x")
    model = sb.model([sb.relu(sb.add(sb.matmul(x, w, transpose_b=True), b))], name="fc_gemm")
    cfg = CompileConfig.from_mapping({"num_threads": threads, "target_options": {"parallel_min_bytes": 0}})
    run_tokenization(model, resolve_target(TARGET, cfg), cfg)
    (sg,) = [nd for nd in model.get_ordered_ops() if isinstance(nd, Subgraph)]
    ex = x86_runtime.compile_subgraph(sg, cfg, resolve_target(TARGET, cfg).host)
    assert isinstance(ex, RuntimeRowsFCExecutor), ex.describe()
    _guard_weights(ex, "end")
    for batch, seq in ((1, 1), (4, 1), (1, 13), (2, 40), (1, 200)):
        xs = RNG.standard_normal((batch, seq, k)).astype(np.float32)
        args = [guarded_copy(xs) if i.source.node.name == "x" else guarded_copy(np.asarray(i.source.node.value))
                for i in sg.inputs]
        (out,) = ex(args)
        want = np.maximum(xs.astype(np.float64) @ w.T.astype(np.float64) + b, 0)
        np.testing.assert_allclose(out, want, rtol=2e-5, atol=3e-5)

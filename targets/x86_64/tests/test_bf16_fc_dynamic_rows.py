"""A bf16 FullyConnected of a dynamic M runs every M on the one runtime-M kernel (RuntimeRowsFCExecutor) with its
weight packed once as bf16 k-pairs (``vdpbf16ps``): full 128-row blocks in a runtime loop, the tail rows on runtime
register tiles, an odd K's lone last row, the rows split between threads from M, few rows split along N. Checked
against numpy float64 on the bf16 inputs, every array at a guard page, and no kernel built for a new M."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

import snippets_core
from snippets_core.config import CompileConfig
from snippets_core.frontends.onnx_bf16 import model_to_bf16
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.runtime.pipeline import run_tokenization
from snippets_core.runtime.targets import resolve_target
from snippets_x86_64 import runtime as x86_runtime
from snippets_x86_64.cpu import cpu_features
from snippets_x86_64.fc_executor import RuntimeRowsFCExecutor
from snippets_x86_64.guarded import guarded_copy

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: make the sibling module importable
from test_fc_dynamic_rows import _guard_weights  # noqa: E402  (the packed weight and its column cuts guarded)

pytestmark = [pytest.mark.avx512,
              pytest.mark.skipif("avx512_bf16" not in cpu_features(), reason="needs AVX512_BF16 (vdpbf16ps)")]
TARGET = "x86_64_avx512"
BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(20261127)
#: one bf16 step relative to the value
BF16_EPS = 2.0**-7
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples")


def _bf16_init(name: str, value: np.ndarray) -> onnx.TensorProto:
    v = np.asarray(value).astype(BF16)
    return oh.make_tensor(name, TP.BFLOAT16, v.shape, v.view(np.uint16).tobytes(), raw=True)


def _fc(threads: int, k: int, n: int):  # type: ignore[no-untyped-def]
    """relu(x @ w + b) + res in bf16, x [B, S, K] and res [B, S, N] with B and S dynamic: its Subgraph and executor,
    the packed weight at a guard page."""
    w = (RNG.standard_normal((k, n)) / math.sqrt(k)).astype(BF16)
    b = RNG.standard_normal(n).astype(BF16)
    nodes = [oh.make_node("MatMul", ["x", "W"], ["mm"]), oh.make_node("Add", ["mm", "b"], ["g"]),
             oh.make_node("Relu", ["g"], ["r"]), oh.make_node("Add", ["r", "res"], ["y"])]
    graph = oh.make_graph(nodes, "bf16_rows", [oh.make_tensor_value_info("x", TP.BFLOAT16, ["B", "S", k]),
                                               oh.make_tensor_value_info("res", TP.BFLOAT16, ["B", "S", n])],
                          [oh.make_tensor_value_info("y", TP.BFLOAT16, ["B", "S", n])],
                          [_bf16_init("W", w), _bf16_init("b", b)])
    model = snippets_core.read_onnx(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]))
    cfg = CompileConfig.from_mapping({"num_threads": threads, "target_options": {"parallel_min_bytes": 0}})
    run_tokenization(model, resolve_target(TARGET, cfg), cfg)
    (sg,) = [nd for nd in model.get_ordered_ops() if isinstance(nd, Subgraph)]
    ex = x86_runtime.compile_subgraph(sg, cfg, resolve_target(TARGET, cfg).host)
    assert isinstance(ex, RuntimeRowsFCExecutor), ex.describe()
    (i,) = ex.packed
    assert ex.packed[i].dtype == BF16
    return sg, ex, w, b


_EXECUTORS: dict = {}  # type: ignore[type-arg]


def _guarded_fc(threads: int, k: int, n: int, at: str):  # type: ignore[no-untyped-def]
    """One compiled FC per (threads, K, N, guard side) for all the examples, its weights at a guard page."""
    key = (threads, k, n, at)
    if key not in _EXECUTORS:
        sg, ex, w, b = _fc(threads, k, n)
        _guard_weights(ex, at)
        _EXECUTORS[key] = (sg, ex, w, b)
    return _EXECUTORS[key]


@settings(max_examples=int(os.environ.get("SNIPPETS_RANDOM_EXAMPLES", "25")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 600), st.sampled_from([1, 2]), st.sampled_from([1, 2]), st.sampled_from([(37, 150), (96, 256),
       (767, 80)]), st.sampled_from(["end", "start"]))
@example(1, 1, 1, (37, 150), "end")
@example(1, 1, 2, (96, 256), "start")
@example(5, 1, 2, (767, 80), "end")
@example(7, 1, 1, (767, 80), "start")
@example(128, 1, 2, (37, 150), "end")
@example(0, 2, 2, (37, 150), "end")
@example(600, 1, 2, (767, 80), "end")
def test_random_m_against_float64_at_guard_pages_compiles_nothing(m, batch, threads, kn, at):
    """Random M = batch x seq in 0..600 on 1 and 2 threads, an odd K (37, and 767 in several K chunks), N with a
    masked tail (150, 80) and one that splits few rows along N (256), every array flush against a guard page: the
    output is the float64 result on the bf16 inputs within the bf16 rounding, and no kernel is built."""
    k, n = kn
    sg, ex, w, b = _guarded_fc(threads, k, n, at)
    seq = -(-m // batch)
    xs = RNG.standard_normal((batch, seq, k)).astype(BF16)
    rs = RNG.standard_normal((batch, seq, n)).astype(BF16)
    data = {"x": xs, "res": rs}
    args = [guarded_copy(data[i.source.node.name], at) if i.source.node.name in data
            else guarded_copy(np.asarray(i.source.node.value), at) for i in sg.inputs]
    out = guarded_copy(np.full((batch, seq, n), np.nan, BF16), at)
    built = []
    real = x86_runtime.generate_subgraph
    x86_runtime.generate_subgraph = lambda *a, **kw: built.append(a) or real(*a, **kw)  # type: ignore[assignment]
    try:
        ex(args, [out])
    finally:
        x86_runtime.generate_subgraph = real  # type: ignore[assignment]
    assert built == []
    assert ex.last_placement.where == TARGET and ex.calls_per_shape == 0
    x64, w64 = xs.astype(np.float64), w.astype(np.float64)
    want = np.maximum(x64 @ w64 + b.astype(np.float64), 0) + rs.astype(np.float64)
    # three bf16 roundings (the MatMul, the bias Add, the residual Add) of values up to |x| @ |w| + |b| + |res|
    scale = np.abs(x64) @ np.abs(w64) + np.abs(b.astype(np.float64)) + np.abs(rs.astype(np.float64))
    err = np.abs(out.astype(np.float64) - want)
    assert np.all(err <= 2 * BF16_EPS * scale), (err - 2 * BF16_EPS * scale).max()


def test_bf16_runtime_m_kernel_reads_m_from_its_runtime_parameters():
    """The bf16 kernel's runtime-parameter block holds the row loop's count and the tail's tiles; describe()
    says one kernel for every M."""
    _, ex, _, _ = _fc(1, 37, 150)
    exprs = dict(ex.kernel.info.runtime_params)
    assert "((s_M) // 128)" in exprs.values(), exprs
    assert any(key.endswith(".m_loop6") for key in exprs), exprs
    assert "one kernel for every M" in ex.describe()


def _dynamic_seq(proto: onnx.ModelProto) -> onnx.ModelProto:
    """examples/transformer_block.onnx with its sequence dynamic: the Reshapes' 128 a -1, the inputs' S a name."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    for t in out.graph.initializer:
        if t.name.startswith("shape"):
            a = nh.to_array(t).copy()
            a[1] = -1
            t.CopyFrom(nh.from_array(a, t.name))
    for vi in (*out.graph.input, *out.graph.output):
        dims = vi.type.tensor_type.shape.dim
        for i, d in enumerate(dims):
            if d.dim_value == 128 and not (vi.name in ("x", "y") and i == 2):  # x/y's last dim is the hidden size
                d.dim_param = "S"
    return out


def _rounded_f32(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The f32 model with its float initializers rounded to bf16: the values the bf16 copy holds, in f32."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    for t in out.graph.initializer:
        if t.data_type == TP.FLOAT:
            t.CopyFrom(nh.from_array(nh.to_array(t).astype(BF16).astype(np.float32), t.name))
    return out


def test_dynamic_bf16_transformer_block_builds_nothing_per_shape() -> None:
    """model_to_bf16 of examples/transformer_block.onnx with a dynamic sequence, on 2 threads: its FCs on the bf16
    runtime-M kernel, its attention on the runtime-extent bf16 Brgemm (B read in place, an odd sequence an odd K of
    the PV product); no kernel built for a new sequence length, each result as close to the f32 model on the same
    bf16 values (float64 reference) as onnx's bf16 reference evaluator is (plus a step)."""
    from onnx.reference import ReferenceEvaluator

    f32 = _dynamic_seq(onnx.load(os.path.join(EXAMPLES, "transformer_block.onnx")))
    proto = model_to_bf16(f32)
    cm = snippets_core.compile_model(snippets_core.read_onnx(proto), target=TARGET, config={"num_threads": 2})
    text = cm.describe()
    assert "a kernel per input shape" not in text, text
    assert text.count("one kernel for every M") == 6, text
    oracle = ReferenceEvaluator(_rounded_f32(f32))
    built = []
    real = x86_runtime.generate_subgraph
    x86_runtime.generate_subgraph = lambda *a, **kw: built.append(a) or real(*a, **kw)  # type: ignore[assignment]
    try:
        for seq in (5, 77, 128, 131):
            ins = {"x": RNG.standard_normal((1, seq, 128)).astype(BF16),
                   "mask": np.where(RNG.random((1, 1, seq, seq)) < 0.2, -1e4, 0).astype(BF16)}
            y = next(iter(cm(ins).values()))
            assert y.dtype == BF16 and y.shape == (1, seq, 128)
            r64 = oracle.run(None, {k: v.astype(np.float32) for k, v in ins.items()})[0].astype(np.float64)
            ev = ReferenceEvaluator(proto).run(None, ins)[0].astype(np.float64)
            err, ev_err = np.abs(y.astype(np.float64) - r64).max(), np.abs(ev - r64).max()
            assert err <= ev_err + BF16_EPS * np.abs(r64).max(), (seq, err, ev_err)
    finally:
        x86_runtime.generate_subgraph = real  # type: ignore[assignment]
    assert built == []


@pytest.mark.parametrize("dims", ["MN", "K", "MNK"])
def test_one_bf16_brgemm_kernel_runs_every_m_n_k_under_guard_pages(dims: str) -> None:
    """A bf16 MatMul of two activations (attention's, B read in place) with runtime M, N and/or K on one kernel:
    every row-tile remainder, N tail and odd and even K, at guard pages, against float64 on the bf16 inputs."""
    from snippets_core.ir.model import Model
    from snippets_core.ir.ops.io import Parameter, Result
    from snippets_core.ir.ops.matmul import MatMul
    from snippets_core.ir.shape import Shape, SymDim
    from snippets_core.plugins.host import get_host
    from snippets_x86_64.guarded import guarded_array
    from snippets_x86_64.runtime import DynamicKernelExecutor

    m_, n_, k_ = (SymDim.of(d) if d in dims else v for d, v in zip("MNK", (37, 70, 101)))
    shapes = [(2, m_, k_), (2, k_, n_)]
    outer = [Parameter("bf16", Shape(s), name=f"o{i}") for i, s in enumerate(shapes)]
    inner = [Parameter("bf16", Shape(s), name=f"p{i}") for i, s in enumerate(shapes)]
    sg = Subgraph(*outer, body=Model([Result(MatMul(*inner), name="y")], inner))
    run = x86_runtime.compile_subgraph(sg, CompileConfig.from_mapping({}), get_host())
    assert isinstance(run, DynamicKernelExecutor), getattr(run, "why_per_shape", run)
    for i in range(30):
        m = int(RNG.integers(1, 80)) if "M" in dims else 37
        n = int(RNG.integers(1, 150)) if "N" in dims else 70
        k = int(RNG.integers(1, 300)) if "K" in dims else 101
        a = RNG.standard_normal((2, m, k)).astype(BF16)
        b = RNG.standard_normal((2, k, n)).astype(BF16)
        at = "end" if i % 2 else "start"
        out = guarded_array((2, m, n), BF16, at)
        run([guarded_copy(a, at), guarded_copy(b, at)], [out])
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        # the f32 sum of exact bf16 products, rounded once to bf16: half a step of |a| @ |b| bounds both
        bound = BF16_EPS * (np.abs(a64) @ np.abs(b64)) + 1e-6
        err = np.abs(out.astype(np.float64) - a64 @ b64)
        assert (err <= bound).all(), f"{m}x{n}x{k}: max error {err.max():.3g}"
    assert run.per_shape_kernels == 0

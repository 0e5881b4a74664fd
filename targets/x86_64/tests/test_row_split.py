"""A row-wise Subgraph (LayerNorm, its TorchScript decomposition) with dynamic rows on several threads: its kernel's
parallel domain is the batch (1), so each shape's rows are split between the threads (RowSplitExecutor: the kernel
lowered for every shape, one runtime-parameter block per thread's rows). Checked against numpy float64, every
array at a guard page; bodies whose rows are not independent keep one call."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.config import CompileConfig
from snippets_core.frontends import builder as sb
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.runtime.pipeline import run_tokenization
from snippets_core.runtime.targets import resolve_target
from snippets_x86_64 import runtime as x86_runtime
from snippets_x86_64.guarded import guarded_copy

pytestmark = pytest.mark.avx512
TARGET = "x86_64_avx512"
RNG = np.random.default_rng(20261127)
C = 100  # six full vectors and a tail of 4


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + b


def _decomposed(x, g, b, eps):  # type: ignore[no-untyped-def]
    """TorchScript's LayerNorm: ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add."""
    mean = sb.reduce_mean(x, [-1], keep_dims=True)
    d = sb.subtract(x, mean)
    var = sb.reduce_mean(sb.power(d, np.float32(2.0)), [-1], keep_dims=True)
    return sb.add(sb.multiply(sb.divide(d, sb.sqrt(sb.add(var, np.float32(eps)))), g), b)


def _compiled(dims: list[int], graph: str, threads: int, residual: bool = True):  # type: ignore[no-untyped-def]
    """The Subgraph of a LayerNorm (``graph``: the op or its decomposition) of x (+ r) of ``dims``, its executor."""
    g = RNG.standard_normal(C).astype(np.float32)
    b = RNG.standard_normal(C).astype(np.float32)
    x = sb.parameter(dims, "f32", name="x")
    r = sb.parameter(dims, "f32", name="r")
    inp = sb.add(x, r) if residual else x
    y = sb.layer_normalization(inp, g, b, epsilon=1e-5) if graph == "op" else _decomposed(inp, g, b, 1e-5)
    model = sb.model([y], name="ln_rows")
    cfg = CompileConfig.from_mapping({"num_threads": threads, "target_options": {"parallel_min_ns": 1}})
    run_tokenization(model, resolve_target(TARGET, cfg), cfg)
    (sg,) = [n for n in model.get_ordered_ops() if isinstance(n, Subgraph)]
    return sg, x86_runtime.compile_subgraph(sg, cfg, resolve_target(TARGET, cfg).host), g, b


def _executor(graph, threads: int, residual: bool):  # type: ignore[no-untyped-def]
    sg, ex, g, b = _compiled([-1, -1, C], graph, threads, residual)
    assert isinstance(ex, x86_runtime.DynamicKernelExecutor), type(ex)
    return sg, ex, g, b


@pytest.mark.parametrize("graph", ["op", "decomposed"])
@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("at", ["end", "start"])
def test_rows_split_between_threads_against_numpy(graph, threads, at):
    sg, ex, g, b = _executor(graph, threads, residual=True)
    for batch, seq in [(1, 197), (1, 17), (1, 16), (1, 15), (1, 1), (2, 40), (1, 3 * 8 + 1)]:
        xs = RNG.standard_normal((batch, seq, C)).astype(np.float32)
        rs = RNG.standard_normal((batch, seq, C)).astype(np.float32)
        args = [guarded_copy(xs, at) if i.source.node.name == "x" else guarded_copy(rs, at)
                if i.source.node.name == "r" else guarded_copy(np.asarray(i.source.node.value), at) for i in sg.inputs]
        out = guarded_copy(np.full((batch, seq, C), np.nan, np.float32), at)
        ex(args, [out])
        np.testing.assert_allclose(out, _layer_norm(xs + rs.astype(np.float64), g, b, 1e-5), rtol=1e-4, atol=1e-4)
        split = type(ex._executors[tuple(a.shape for a in args)]) is x86_runtime.RowSplitExecutor
        assert split == (batch == 1 and seq >= 16), (batch, seq)
    assert "with their rows split between the threads" in ex.describe()


def test_one_thread_never_splits():
    _, ex, _, _ = _executor("op", 1, residual=False)
    assert ex._row_inputs is None


def test_row_inputs_of_bodies():
    """Row-wise: eltwise, LayerNorm, last-axis reductions, inputs broadcast along the rows; not row-wise: a
    reduction over the rows; not split: an eltwise body alone."""
    x = sb.parameter([-1, -1, C], "f32", name="x")
    row = sb.parameter([1, 1, C], "f32", name="row")
    ok = sb.model([sb.multiply(sb.layer_normalization(x, np.ones(C, np.float32)), row)])
    sg = Subgraph(sb.parameter([-1, -1, C], "f32"), sb.parameter([1, 1, C], "f32"), body=ok)
    assert x86_runtime.row_inputs(sg) == (0,)
    x2 = sb.parameter([-1, -1, C], "f32", name="x")
    over_rows = sb.model([sb.subtract(x2, sb.reduce_mean(x2, [1], keep_dims=True))])
    assert x86_runtime.row_inputs(Subgraph(sb.parameter([-1, -1, C], "f32"), body=over_rows)) is None
    x3 = sb.parameter([-1, -1, C], "f32", name="x")
    eltwise = sb.model([sb.relu(sb.add(x3, np.float32(1.0)))])  # its domain covers the rows already
    assert x86_runtime.row_inputs(Subgraph(sb.parameter([-1, -1, C], "f32"), body=eltwise)) is None


@pytest.mark.parametrize("graph", ["op", "decomposed"])
@pytest.mark.parametrize("threads, rows", [(2, 197), (3, 197), (2, 40)])
@pytest.mark.parametrize("at", ["end", "start"])
def test_static_rows_split_into_kernels_of_their_own(graph, threads, rows, at):
    """A static row-wise Subgraph whose domain is its batch (1): a kernel per thread's consecutive rows (at most
    two heights), each on its row slices; every array at a guard page, against numpy float64."""
    sg, ex, g, b = _compiled([1, rows, C], graph, threads)
    assert isinstance(ex, x86_runtime.RowSplitExecutor) and len(ex.parts) == threads
    xs = RNG.standard_normal((1, rows, C)).astype(np.float32)
    rs = RNG.standard_normal((1, rows, C)).astype(np.float32)
    args = [guarded_copy(xs, at) if i.source.node.name == "x" else guarded_copy(rs, at)
            if i.source.node.name == "r" else guarded_copy(np.asarray(i.source.node.value), at) for i in sg.inputs]
    out = guarded_copy(np.full((1, rows, C), np.nan, np.float32), at)
    ex(args, [out])
    np.testing.assert_allclose(out, _layer_norm(xs + rs.astype(np.float64), g, b, 1e-5), rtol=1e-4, atol=1e-4)

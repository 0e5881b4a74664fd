"""A FullyConnected of a dynamic M (batch and sequence) runs every M on kernels compiled for static blocks of rows
(RowBlockFCExecutor): full blocks on slices of x, of the residual and of the output, the tail on the smaller
kernels and the last rows through a padded scratch block. Checked against numpy float64, with every array at a
guard page."""

from __future__ import annotations

import math

import numpy as np
import pytest

from snippets_core.config import CompileConfig
from snippets_core.frontends import builder as sb
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.runtime.pipeline import run_tokenization
from snippets_core.runtime.targets import resolve_target
from snippets_x86_64 import runtime as x86_runtime
from snippets_x86_64.fc_executor import DEFAULT_ROW_BLOCK, DynamicFCExecutor, RowBlockFCExecutor
from snippets_x86_64.guarded import guarded_copy

pytestmark = pytest.mark.avx512
TARGET = "x86_64_avx512"
RNG = np.random.default_rng(20261126)
R = DEFAULT_ROW_BLOCK
K, N = 40, 150


def _gelu_tanh(x):  # type: ignore[no-untyped-def]
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _fc(threads: int, options: dict | None = None):  # type: ignore[no-untyped-def,type-arg]
    """The Subgraph of gelu(x @ w + b) + res, x [B, S, K] and res [B, S, N] with B and S dynamic, and its executor."""
    w = (RNG.standard_normal((K, N)) / math.sqrt(K)).astype(np.float32)
    b = RNG.standard_normal(N).astype(np.float32)
    x = sb.parameter([-1, -1, K], "f32", name="x")
    res = sb.parameter([-1, -1, N], "f32", name="res")
    model = sb.model([sb.add(sb.gelu(sb.add(sb.matmul(x, w), b), approximation_mode="tanh"), res)], name="fc_rows")
    cfg = CompileConfig.from_mapping({"num_threads": threads, "target_options": options or {}})
    run_tokenization(model, resolve_target(TARGET, cfg), cfg)
    (sg,) = [n for n in model.get_ordered_ops() if isinstance(n, Subgraph)]
    ex = x86_runtime.compile_subgraph(sg, cfg, resolve_target(TARGET, cfg).host)
    return sg, ex, w, b


def _args(sg, xs, rs, at="end"):  # type: ignore[no-untyped-def]
    return [guarded_copy(xs, at) if i.source.node.name == "x" else guarded_copy(rs, at) if i.source.node.name == "res"
            else guarded_copy(np.asarray(i.source.node.value), at) for i in sg.inputs]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("at", ["end", "start"])
def test_every_m_against_numpy_at_guard_pages(threads, at):
    sg, ex, w, b = _fc(threads)
    assert isinstance(ex, RowBlockFCExecutor), ex.describe()
    assert f"kernels of {R}, {R // 2}, {R // 4}, {R // 8}, {R // 16} rows for every M" in ex.describe()
    (i,) = ex.packed
    ex.packed[i] = guarded_copy(ex.packed[i], at)
    for size in ex.kernels:  # the padded blocks are read and written by the kernels too
        s_ins, s_outs = ex._new_scratch(size)
        ex._scratch[size] = ([guarded_copy(a, at) for a in s_ins], [guarded_copy(a, at) for a in s_outs])
    cases = [(1, 1), (1, 2), (1, 17), (1, R - 1), (1, R), (1, R + 1), (1, 197), (1, 2 * R + 3), (3, 100), (2, 150)]
    for batch, seq in cases:
        xs = RNG.standard_normal((batch, seq, K)).astype(np.float32)
        rs = RNG.standard_normal((batch, seq, N)).astype(np.float32)
        out = guarded_copy(np.full((batch, seq, N), np.nan, np.float32), at)
        ex(_args(sg, xs, rs, at), [out])
        assert ex.last_placement.where == TARGET
        want = _gelu_tanh(xs.astype(np.float64) @ w + b) + rs
        np.testing.assert_allclose(out, want, rtol=2e-5, atol=3e-5)


def test_a_new_shape_compiles_nothing(monkeypatch):
    sg, ex, w, b = _fc(1)
    calls = []
    real = x86_runtime.generate_subgraph
    monkeypatch.setattr(x86_runtime, "generate_subgraph", lambda *a, **k: calls.append(a) or real(*a, **k))
    for seq in (7, 300):
        xs = RNG.standard_normal((1, seq, K)).astype(np.float32)
        rs = RNG.standard_normal((1, seq, N)).astype(np.float32)
        (out,) = ex(_args(sg, xs, rs))
        np.testing.assert_allclose(out, _gelu_tanh(xs.astype(np.float64) @ w + b) + rs, rtol=2e-5, atol=3e-5)
    assert calls == []


def test_run_time_broadcast_goes_per_shape():
    """A residual with one row where x has many (numpy broadcasting of a dynamic dim) runs on a per-shape kernel."""
    sg, ex, w, b = _fc(1)
    xs = RNG.standard_normal((1, 5, K)).astype(np.float32)
    rs = RNG.standard_normal((1, 1, N)).astype(np.float32)
    (out,) = ex(_args(sg, xs, rs))
    np.testing.assert_allclose(out, _gelu_tanh(xs.astype(np.float64) @ w + b) + rs, rtol=2e-5, atol=3e-5)
    assert "run-time broadcasting" in ex.describe()


def test_row_block_zero_keeps_a_kernel_per_shape():
    _, ex, _, _ = _fc(1, {"fc_row_block": 0})
    assert isinstance(ex, DynamicFCExecutor)
    assert "fc_row_block is 0" in ex.describe()


@pytest.mark.parametrize("rank", [2, 3])
def test_the_row_block_is_split_between_the_threads(rank):
    """On two threads the row-block kernel's parallel domain has one index per thread (the block's rows split as
    SplitDimensionM splits a static M), for x of rank 3 ([B, S, K]) and of rank 2 ([M, K]); every M still matches
    numpy float64."""
    w = (RNG.standard_normal((K, N)) / math.sqrt(K)).astype(np.float32)
    b = RNG.standard_normal(N).astype(np.float32)
    x = sb.parameter([-1] * (rank - 1) + [K], "f32", name="x")
    model = sb.model([sb.relu(sb.add(sb.matmul(x, w), b))], name="fc_rows_split")
    # parallel_min_bytes 0: these small arrays would otherwise stay on the calling thread
    cfg = CompileConfig.from_mapping({"num_threads": 2, "target_options": {"parallel_min_bytes": 0}})
    run_tokenization(model, resolve_target(TARGET, cfg), cfg)
    (sg,) = [n for n in model.get_ordered_ops() if isinstance(n, Subgraph)]
    ex = x86_runtime.compile_subgraph(sg, cfg, resolve_target(TARGET, cfg).host)
    assert isinstance(ex, RowBlockFCExecutor), ex.describe()
    assert math.prod(ex.kernel.kernel.info.parallel_domain) == 2 and ex.kernel.num_threads == 2
    for m in (1, R - 1, R, 2 * R + 3):
        xs = RNG.standard_normal((1,) * (rank - 2) + (m, K)).astype(np.float32)
        args = [guarded_copy(xs) if i.source.node.name == "x" else guarded_copy(np.asarray(i.source.node.value))
                for i in sg.inputs]
        (got,) = ex(args)
        want = np.maximum(xs.astype(np.float64) @ w.astype(np.float64) + b, 0)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("m", "calls"), [
    (1, [(0, 1, 8)]), (16, [(0, 16, 16)]), (17, [(0, 16, 16), (16, 1, 8)]), (120, [(0, 120, 128)]),
    (128, [(0, 128, 128)]), (197, [(0, 128, 128), (128, 64, 64), (192, 5, 8)]),
    (300, [(0, 128, 128), (128, 128, 128), (256, 32, 32), (288, 8, 8), (296, 4, 8)]),
    (60, [(0, 60, 64)]), (54, [(0, 32, 32), (32, 16, 16), (48, 6, 8)]),
])  # fmt: skip
def test_the_tail_runs_on_smaller_kernels(m, calls):
    """The rows after the full blocks go to the tail kernels; only the last few are padded, or a remainder that
    fills a kernel to within 1/8 (ViT's 197 rows run as 128 + 64 + 8, no longer as 256)."""
    _, ex, _, _ = _fc(1)
    assert list(ex.kernels) == [R, R // 2, R // 4, R // 8, R // 16]
    assert ex.plan(m) == calls


def test_row_tail_option_sets_the_smallest_kernel():
    _, ex, _, _ = _fc(1, {"fc_row_tail": R})
    assert list(ex.kernels) == [R]
    assert ex.plan(R + 3) == [(0, R, R), (R, 3, R)]


@pytest.mark.parametrize("threads, n", [(2, 256), (3, 192), (2, 128)])
@pytest.mark.parametrize("at", ["end", "start"])
def test_smallest_block_split_along_n_at_guard_pages(threads, n, at):
    """On several threads the smallest row block (the padded tail: ViT's last 5 of 197 rows) is split along N:
    each thread runs the kernel of N / threads columns on its panels of the weight, its columns of the bias and of
    the residual, through scratch blocks of its own; every one of those arrays at a guard page."""
    k = 37
    w = (RNG.standard_normal((k, n)) / math.sqrt(k)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    x = sb.parameter([-1, -1, k], "f32", name="x")
    res = sb.parameter([-1, -1, n], "f32", name="res")
    model = sb.model([sb.add(sb.gelu(sb.add(sb.matmul(x, w), b), approximation_mode="tanh"), res)], name="fc_cols")
    cfg = CompileConfig.from_mapping({"num_threads": threads})
    run_tokenization(model, resolve_target(TARGET, cfg), cfg)
    (sg,) = [nd for nd in model.get_ordered_ops() if isinstance(nd, Subgraph)]
    ex = x86_runtime.compile_subgraph(sg, cfg, resolve_target(TARGET, cfg).host)
    assert isinstance(ex, RowBlockFCExecutor) and ex.columns is not None, ex.describe()
    cols = ex.columns
    assert len(cols.parts) == threads and cols.width == n // threads and cols.rows == R // 16
    assert f"{R // 16} rows split along N into {threads} parts" in ex.describe()
    cols.weights = [{i: guarded_copy(a, at) for i, a in part.items()} for part in cols.weights]
    shared, per_part, outs = cols._new_scratch()
    cols._scratch = ({i: guarded_copy(a, at) for i, a in shared.items()},
                     [{i: guarded_copy(a, at) for i, a in pads.items()} for pads in per_part],
                     [[guarded_copy(a, at) for a in part] for part in outs])
    for batch, seq in [(1, 1), (1, 5), (1, 8), (1, 197), (2, 3), (1, R + 8)]:
        xs = RNG.standard_normal((batch, seq, k)).astype(np.float32)
        rs = RNG.standard_normal((batch, seq, n)).astype(np.float32)
        out = guarded_copy(np.full((batch, seq, n), np.nan, np.float32), at)
        ex(_args(sg, xs, rs, at), [out])
        want = _gelu_tanh(xs.astype(np.float64) @ w + b) + rs
        np.testing.assert_allclose(out, want, rtol=2e-5, atol=3e-5)

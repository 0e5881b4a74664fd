"""One kernel for every shape on x86-64: a Subgraph with dynamic dims is lowered once with symbolic dims and its
kernel reads loop counts, pointer shifts, tail masks, data offsets and the parallel domain from the
runtime-parameter block. Random shapes against numpy float64, inputs and outputs flush against inaccessible
pages (any access past an array, or before it, faults)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from snippets_core.config import CompileConfig
from snippets_core.errors import InputError
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add, Multiply
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.reduce import ReduceSum
from snippets_core.ir.ops.softmax import Softmax
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.ops.unary import Exp, Relu, Sigmoid
from snippets_core.plugins.host import get_host
from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64.guarded import guarded_array, guarded_copy
from snippets_x86_64.runtime import DynamicKernelExecutor, ShapeSpecializingExecutor, compile_subgraph

pytestmark = pytest.mark.avx512
RNG = np.random.default_rng(41)


def _subgraph(s0, s1):  # type: ignore[no-untyped-def]
    """sigmoid(relu(x) + y) * x with numpy broadcasting of y."""
    outer = [Parameter("f32", s0, name="x"), Parameter("f32", s1, name="y")]
    x, y = Parameter("f32", s0, name="bx"), Parameter("f32", s1, name="by")
    body = Model([Result(Multiply(Sigmoid(Add(Relu(x), y)), x), name="r")], [x, y])
    return Subgraph(*outer, body=body)


def _reference(x, y):  # type: ignore[no-untyped-def]
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    return 1 / (1 + np.exp(-(np.maximum(x64, 0) + y64))) * x64


def _executor(s0, s1, **config):  # type: ignore[no-untyped-def]
    run = compile_subgraph(_subgraph(s0, s1), CompileConfig.from_mapping(config), get_host())
    assert isinstance(run, DynamicKernelExecutor), getattr(run, "why_per_shape", run)
    return run


def _guarded_run(run, arrays, at):  # type: ignore[no-untyped-def]
    ins = [guarded_copy(a, at) for a in arrays]
    out = guarded_array(np.broadcast_shapes(*(a.shape for a in arrays)), np.float32, at)
    assert run(ins, [out])[0] is out
    return out


@pytest.fixture(scope="module")
def inner_dynamic():  # type: ignore[no-untyped-def]
    return _executor((None, None), (None, 1))


@pytest.mark.parametrize("cols", range(1, 41))
def test_one_kernel_runs_every_tail_under_guard_pages(inner_dynamic, cols):
    rows = int(RNG.integers(1, 5))
    x = RNG.standard_normal((rows, cols)).astype(np.float32)
    y = RNG.standard_normal((rows, 1)).astype(np.float32)
    for at in ("end", "start"):
        np.testing.assert_allclose(_guarded_run(inner_dynamic, [x, y], at), _reference(x, y), rtol=2e-6, atol=1e-6)


def test_one_kernel_for_random_shapes_of_three_dynamic_dims():
    run = _executor((None, None, None), (1, None, 1), num_threads=2, target_options={"parallel_min_bytes": 0})
    for _ in range(25):
        shape = tuple(int(v) for v in RNG.integers(1, [6, 9, 70]))
        x = RNG.standard_normal(shape).astype(np.float32)
        y = RNG.standard_normal((1, shape[1], 1)).astype(np.float32)
        np.testing.assert_allclose(_guarded_run(run, [x, y], "end"), _reference(x, y), rtol=2e-6, atol=1e-6)
    assert run.per_shape_kernels == 0 and run.new_shapes <= 25
    params = dict(run.kernel.info.runtime_params)
    assert {"loop0.iterations", "domain[0], domain[1]"} & set(params) or any("domain" in n for n in params)


def test_zero_sized_dims_run_no_iteration():
    run = _executor((None, None), (None, 1))
    for shape in [(0, 5), (3, 0), (0, 0)]:
        x = np.ones(shape, np.float32)
        y = np.ones((shape[0], 1), np.float32)
        assert run([x, y])[0].shape == shape


def test_a_dynamic_dim_that_is_1_on_one_input_gets_a_kernel_of_its_own():
    # both inputs' first dim is the same symbol: 1 against 4 is numpy broadcasting decided at run time
    run = _executor((None, 16), (None, 16))
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    y = RNG.standard_normal((1, 16)).astype(np.float32)
    np.testing.assert_allclose(run([x, y])[0], _reference(x, y), rtol=2e-6, atol=1e-6)
    x1 = RNG.standard_normal((1, 16)).astype(np.float32)
    np.testing.assert_allclose(run([x1, y])[0], _reference(x1, y), rtol=2e-6, atol=1e-6)  # 1 everywhere: fine
    assert run.per_shape_kernels == 1 and "with a kernel of their own" in run.describe()


def test_contradicting_dims_are_typed_errors_naming_both():
    run = _executor((None, 16), (None, 16))
    with pytest.raises(InputError, match="input 0 dim 0 is 3 and input 1 dim 0 is 5"):
        run([np.zeros((3, 16), np.float32), np.zeros((5, 16), np.float32)])
    with pytest.raises(InputError, match="must have shape"):
        run([np.zeros((3, 15), np.float32), np.zeros((3, 15), np.float32)])
    with pytest.raises(InputError, match="must be float32"):
        run([np.zeros((3, 16), np.float64), np.zeros((3, 16), np.float32)])


def test_static_kernels_have_no_runtime_parameters():
    run = compile_subgraph(_subgraph((3, 37), (3, 1)), CompileConfig.from_mapping({}), get_host())
    assert run.kernel.info.runtime_params == () and not run.kernel.info.is_dynamic


def test_dynamic_batch_softmax_model_runs_one_kernel():
    x = Parameter("f32", (None, None, 37), name="x")
    m = Model([Result(Softmax(Exp(x), axis=-1), name="y")], [x])
    cm = compile_model(m, target="x86_64_avx512", config={"snippets_mode": "IgnoreCallback"})
    (step,) = [s for s in cm._steps if s.where == "x86_64_avx512"]
    assert isinstance(step.run, DynamicKernelExecutor)
    for shape in [(2, 3, 37), (1, 1, 37), (4, 7, 37), (1, 0, 37)]:
        xv = RNG.standard_normal(shape).astype(np.float32)
        e = np.exp(xv.astype(np.float64))
        e = np.exp(e - e.max(-1, keepdims=True))
        np.testing.assert_allclose(cm({"x": xv})["y"], e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    assert step.run.new_shapes == 4 and "one kernel for every shape" in cm.describe()


@pytest.fixture(scope="module")
def dynamic_rows():  # type: ignore[no-untyped-def]
    """softmax(exp(x)) and reduce_sum(x) over rows of dynamic length: Buffers of dynamic size, a dynamic Fill."""
    x = Parameter("f32", (None, None), name="x")
    axes = Constant(np.array([1], np.int64))
    m = Model([Result(Softmax(Exp(x), axis=-1), name="y"), Result(ReduceSum(x, axes, keep_dims=True), name="s")], [x])
    config = {"snippets_mode": "IgnoreCallback", "num_threads": 2, "target_options": {"parallel_min_bytes": 0}}
    cm = compile_model(m, target="x86_64_avx512", config=config)
    runs = [s.run for s in cm._steps if s.where == "x86_64_avx512"]
    assert runs and all(isinstance(r, DynamicKernelExecutor) for r in runs), cm.describe()
    return cm


@pytest.mark.parametrize("cols", range(1, 41))
def test_softmax_and_reduce_over_rows_of_every_length_under_guard_pages(dynamic_rows, cols):
    for at in ("end", "start"):
        xv = guarded_copy(RNG.standard_normal((3, cols)).astype(np.float32), at)
        out = dynamic_rows({"x": xv})
        e = np.exp(xv.astype(np.float64))
        e = np.exp(e - e.max(-1, keepdims=True))
        np.testing.assert_allclose(out["y"], e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(out["s"], xv.astype(np.float64).sum(-1, keepdims=True), rtol=1e-5, atol=1e-5)


def test_a_kernel_for_every_shape_comes_back_from_the_disk_cache(tmp_path):
    import json

    from snippets_x86_64.cache import KERNEL_CACHE
    from snippets_x86_64.kernel import KernelInfo

    KERNEL_CACHE.clear()
    run = _executor((None, None), (None, 1), target_options={"cache_dir": str(tmp_path)})
    info = run.kernel.info
    assert KernelInfo.from_json(json.loads(json.dumps(info.to_json()))) == info
    KERNEL_CACHE.clear()  # the next compile reads the disk cache
    again = _executor((None, None), (None, 1), target_options={"cache_dir": str(tmp_path)})
    assert again.kernel.info == info and again.kernel.code == run.kernel.code
    x = RNG.standard_normal((3, 21)).astype(np.float32)
    y = RNG.standard_normal((3, 1)).astype(np.float32)
    np.testing.assert_allclose(again([x, y])[0], _reference(x, y), rtol=2e-6, atol=1e-6)


def _mha(batch, seq):  # type: ignore[no-untyped-def]
    from snippets_core.frontends import builder as sb

    q, kt = sb.parameter((batch, 2, seq, 16), name="q"), sb.parameter((batch, 2, 16, seq), name="kt")
    v = sb.parameter((batch, 2, seq, 16), name="v")
    return sb.model([sb.matmul(sb.softmax(sb.matmul(q, kt), 3), v)], [q, kt, v])


def _mha_check(cm, b, s):  # type: ignore[no-untyped-def]
    ins = {"q": RNG.standard_normal((b, 2, s, 16)).astype(np.float32),
           "kt": RNG.standard_normal((b, 2, 16, s)).astype(np.float32),
           "v": RNG.standard_normal((b, 2, s, 16)).astype(np.float32)}
    (out,) = cm(ins).values()
    scores = ins["q"].astype(np.float64) @ ins["kt"]
    e = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(out, (e / e.sum(-1, keepdims=True)) @ ins["v"], rtol=2e-5, atol=3e-5)


def test_mha_with_a_dynamic_batch_runs_one_kernel():
    cm = compile_model(_mha(None, 37), target="x86_64_avx512", config={"num_threads": 2})
    (step,) = [s for s in cm._steps if s.where == "x86_64_avx512"]
    assert isinstance(step.run, DynamicKernelExecutor), cm.describe()
    for b in (1, 3, 2):
        _mha_check(cm, b, 37)
    assert step.run.new_shapes == 3


def test_mha_with_a_dynamic_sequence_gets_a_kernel_per_shape_and_says_why():
    cm = compile_model(_mha(1, None), target="x86_64_avx512", config={"num_threads": 2})
    for s in (19, 40):
        _mha_check(cm, 1, s)
    assert "a kernel per input shape" in cm.describe() and "dynamic M, N or K" in cm.describe()


# --- random graphs with dynamic dims --------------------------------------------------------------------------------


def _dynamic_version(shapes):  # type: ignore[no-untyped-def]
    """Every dim that is not 1 becomes dynamic (a 1 stays: it is a broadcast dim)."""
    return [tuple(None if d != 1 else 1 for d in s) for s in shapes]


def _resized(shapes, master):  # type: ignore[no-untyped-def]
    """The same pattern of broadcast dims over a new master shape (right-aligned)."""
    return [tuple(1 if d == 1 else master[len(master) - len(s) + i] for i, d in enumerate(s)) for s in shapes]


sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: make the sibling module importable
from hypothesis import HealthCheck, example, given, settings  # noqa: E402 - the random-graph section's own imports
from hypothesis import strategies as st  # noqa: E402
from test_conformance_random import build, graphs  # noqa: E402


# Found by hypothesis: a Subgraph whose inputs differ in rank ([1,1,?] and [1,?]) and whose lower-rank value is also
# an output; the kernel's output dims are rank-normalized ([1,1,?]) and must be handed on with the body's rank.
_MIXED_RANK_OUTPUT = (
    [(1, 1, 2), (1, 2)],
    [("u", "abs", 1), ("b", "add", 0, 2, 0.0), ("u", "abs", 0), ("b", "add", 0, 0, 0.0), ("b", "add", 2, 3, 0.0),
     ("b", "add", 0, 0, 0.0), ("b", "add", 0, 0, 0.0), ("b", "add", 0, 0, 0.0)],
    [2, 6],
)
# Found by hypothesis: a buffer written by a loop over a dynamic dim and read broadcast ([1,?] + [1,1]): its size is
# bounded by the static extent instead of being undecidable (it used to send the Subgraph to per-shape kernels).
_BROADCAST_BUFFER = (
    [(1, 2), (1, 1)],
    [("u", "abs", 1), ("u", "abs", 0), ("b", "add", 0, 0, 0.0), ("b", "add", 0, 0, 0.0), ("u", "abs", 0),
     ("u", "abs", 0), ("u", "abs", 2), ("u", "abs", 8), ("u", "abs", 0), ("b", "add", 0, 2, 0.0)],
    [11, 9],
)


@settings(max_examples=int(os.environ.get("SNIPPETS_RANDOM_EXAMPLES", "25")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.integers(0, 2**31 - 1), st.sampled_from([1, 2]))
@example(_MIXED_RANK_OUTPUT, 0, 1)
@example(_BROADCAST_BUFFER, 0, 1)
def test_random_graphs_with_dynamic_dims_run_one_kernel_for_every_shape(graph, seed, threads):
    shapes, steps, outputs = graph
    rng = np.random.default_rng(seed)
    model = build(_dynamic_version(shapes), steps, outputs)
    config = {"num_threads": threads, "target_options": {"parallel_min_bytes": 0}}
    cm = compile_model(model, target="x86_64_avx512", config=config)
    runs = [s.run for s in cm._steps if s.where == "x86_64_avx512"]
    # a Subgraph with a dynamic dim has one kernel for every shape (all dims 1: a static kernel)
    assert runs and not any(isinstance(r, ShapeSpecializingExecutor) for r in runs), cm.describe()
    rank = max(len(s) for s in shapes)
    for master in (None, tuple(int(d) for d in rng.integers(1, 22, rank))):
        concrete = shapes if master is None else _resized(shapes, master)
        inputs = {f"p{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(concrete)}
        ref = compile_model(build(concrete, steps, outputs), target="reference")(inputs)
        got = cm(inputs)
        for name, r in ref.items():
            assert got[name].shape == r.shape and got[name].dtype == r.dtype
            np.testing.assert_allclose(got[name], r, rtol=2e-5, atol=2e-5 * max(1.0, float(np.abs(r).max(initial=0))))

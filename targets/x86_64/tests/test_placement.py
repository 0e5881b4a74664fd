"""Truthful placement on x86_64_avx512: describe(), placement(), last_run_stats and `snippets run` say where every
call ran, for static, dynamic and declared-fallback Subgraphs, and more input shapes than the kernel table keeps.

The oracle for "where it ran" is a count of what executed: KernelExecutor calls (the JIT kernel) and the Subgraph's
reference evaluations (Subgraph.evaluate), each counted by wrapping the real method. Numbers against numpy.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from snippets_core.cli import main
from snippets_core.errors import UnsupportedByTarget
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add, Multiply
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.ops.unary import Clamp, Relu
from snippets_core.lowered.symbolic import DynamicShapeError
from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64 import runtime
from snippets_x86_64.cache import KERNEL_CACHE
from snippets_x86_64.runtime import KernelExecutor, ShapeSpecializingExecutor

pytestmark = pytest.mark.avx512
TARGET = "x86_64_avx512"
RNG = np.random.default_rng(12)
#: the tokenization callback keeps dynamic shapes out of Subgraphs; the runtime still handles them when told to
DYNAMIC = {"snippets_mode": "IgnoreCallback"}


def model(shape: tuple[int | None, ...]) -> Model:
    """z = relu(x + x) * x: one Subgraph."""
    x = Parameter("f32", shape, name="x")
    return Model([Result(Multiply(Relu(Add(x, x)), x), name="z")], [x])


def expected(x: np.ndarray) -> np.ndarray:
    v = x.astype(np.float64) * 2
    return np.maximum(v, 0) * x


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Counts JIT kernel calls ("kernel") and reference evaluations of a Subgraph ("reference")."""
    seen: Counter = Counter()
    kernel_call, sg_evaluate = KernelExecutor.__call__, Subgraph.evaluate

    def call(self: KernelExecutor, args: Any, outs: Any = None) -> Any:
        seen["kernel"] += 1
        return kernel_call(self, args, outs)

    def evaluate(self: Subgraph, *args: np.ndarray) -> Any:
        seen["reference"] += 1
        return sg_evaluate(self, *args)

    monkeypatch.setattr(KernelExecutor, "__call__", call)
    monkeypatch.setattr(Subgraph, "evaluate", evaluate)
    return seen


def run_and_check(cm: Any, rows: int) -> None:
    x = RNG.standard_normal((rows, 40)).astype(np.float32)
    np.testing.assert_allclose(cm({"x": x})["z"], expected(x), rtol=2e-6, atol=1e-6)


def where_subgraph_ran(cm: Any) -> str:
    (where,) = [w for _, op, w in cm.placement() if op == "Subgraph"]
    return where


def test_static_subgraph_runs_its_kernel(counts: Counter) -> None:
    cm = compile_model(model((6, 40)), target=TARGET)
    for _ in range(3):
        run_and_check(cm, 6)
    assert counts == Counter(kernel=3)
    assert where_subgraph_ran(cm) == TARGET and cm.last_run_stats.by_where().keys() == {TARGET}
    assert cm.last_run_stats.fallbacks == {} and "fallback" not in cm.describe()


def test_declared_fallback_runs_the_reference_and_says_why(counts: Counter) -> None:
    # i8 Clamp is not among the narrow-integer ops the target computes in i32 lanes: it declares no emitter
    x = Parameter("i8", (4, 9), name="x")
    m = Model([Result(Clamp(Add(x, x), min=-5.0, max=7.0), name="z")], [x])
    cm = compile_model(m, target=TARGET, config={"snippets_mode": "IgnoreCallback"})
    name = cm.subgraphs[0].name
    xv = np.full((4, 9), 100, np.int8)
    np.testing.assert_array_equal(cm({"x": xv})["z"], np.clip(xv + xv, -5, 7))  # wraps, as numpy does
    assert counts == Counter(reference=1)
    assert where_subgraph_ran(cm) == "reference"
    assert "UnsupportedByTarget" in cm.last_run_stats.fallbacks[name] and "Clamp" in cm.last_run_stats.fallbacks[name]
    assert f"[reference] Subgraph {name}: Add, Clamp (fallback: UnsupportedByTarget: " in cm.describe()


def test_dynamic_subgraph_reports_where_each_call_ran(counts: Counter, monkeypatch: pytest.MonkeyPatch) -> None:
    real = runtime.generate_subgraph

    def picky(sg: Any, config: Any, host: Any, shapes: Any = None, symbolic: bool = False) -> Any:
        if symbolic:  # no kernel for every shape: a kernel per shape, of which one is declared unsupported
            raise DynamicShapeError("this test wants a kernel per shape")
        if shapes is not None and any(s[:1] == (5,) for s in shapes):  # declares five rows unsupported
            raise UnsupportedByTarget("no kernel for five rows")
        return real(sg, config, host, shapes)

    KERNEL_CACHE.clear()
    monkeypatch.setattr(runtime, "generate_subgraph", picky)
    cm = compile_model(model((None, 40)), target=TARGET, config=DYNAMIC)
    name = cm.subgraphs[0].name
    assert where_subgraph_ran(cm) == TARGET  # before any call: compiled for the target
    for rows, where in ((3, TARGET), (5, "reference"), (3, TARGET), (5, "reference"), (8, TARGET)):
        counts.clear()
        run_and_check(cm, rows)
        assert counts == Counter(kernel=1) if where == TARGET else Counter(reference=1), rows
        assert where_subgraph_ran(cm) == where and cm.last_run_stats.by_where().keys() == {where}
        if where == "reference":
            assert "no kernel for five rows" in cm.last_run_stats.fallbacks[name]
            assert "(fallback: input shapes [(5, 40), (5, 40)]: UnsupportedByTarget: no kernel for five rows)" in (
                cm.describe())
        else:
            assert cm.last_run_stats.fallbacks == {} and f"[{TARGET}] Subgraph {name}" in cm.describe()


def test_more_shapes_than_kept_kernels_never_change_where_a_call_runs(
    counts: Counter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ShapeSpecializingExecutor, "MAX_SPECIALIZATIONS", 2)
    real = runtime.generate_subgraph

    def per_shape(sg: Any, config: Any, host: Any, shapes: Any = None, symbolic: bool = False) -> Any:
        if symbolic:  # no kernel for every shape: a kernel per shape
            raise DynamicShapeError("this test wants a kernel per shape")
        return real(sg, config, host, shapes)

    KERNEL_CACHE.clear()
    monkeypatch.setattr(runtime, "generate_subgraph", per_shape)
    cm = compile_model(model((None, 40)), target=TARGET, config=DYNAMIC)
    (executor,) = [st.run for st in cm._steps if isinstance(st.node, Subgraph)]
    assert isinstance(executor, ShapeSpecializingExecutor)
    for rows in (1, 2, 3, 1, 4, 2):
        run_and_check(cm, rows)
        assert where_subgraph_ran(cm) == TARGET
    assert counts == Counter(kernel=6)
    assert len(executor.executors) == 2 and list(executor.executors)[-1][0] == (2, 40)  # least recently used dropped


def test_snippets_run_prints_the_fallback_and_its_reason(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def declines(*args: Any, **kwargs: Any) -> Any:
        raise UnsupportedByTarget("target 'x86_64_avx512' has no emitter for op Exp (a test declares it)")

    KERNEL_CACHE.clear()
    monkeypatch.setattr(runtime, "generate_subgraph", declines)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])
    nodes = [helper.make_node("Exp", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    path = tmp_path / "exp.onnx"
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                                opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert main(["run", str(path), "-t", TARGET]) == 0
    out = capsys.readouterr().out
    assert "[reference] Subgraph" in out and "(fallback: UnsupportedByTarget: " in out and "a test declares it" in out
    assert "last run by where: reference" in out


def test_a_subgraph_with_one_kernel_for_every_shape_reports_each_call(counts: Counter) -> None:
    from snippets_x86_64.runtime import DynamicKernelExecutor

    cm = compile_model(model((None, 40)), target=TARGET, config=DYNAMIC)
    (executor,) = [st.run for st in cm._steps if isinstance(st.node, Subgraph)]
    assert isinstance(executor, DynamicKernelExecutor)
    for rows in (1, 2, 3, 1):
        run_and_check(cm, rows)
        assert where_subgraph_ran(cm) == TARGET and cm.last_run_stats.fallbacks == {}
    assert executor.new_shapes == 3

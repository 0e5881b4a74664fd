"""Truthful placement on the interpreter target: describe(), placement(), last_run_stats say where every call ran.

The oracle for "where it ran" is a count of what executed: the interpreter's kernel runs (InterpretedKernel.run)
and the Subgraph's reference evaluations (Subgraph.evaluate), each counted by wrapping the real method. Numbers
are checked against numpy.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from snippets_core.codegen.interpreter import InterpretedKernel, InterpreterTarget
from snippets_core.errors import CodegenError, UnsupportedByTarget
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add, Multiply
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.ops.unary import Exp, Relu
from snippets_core.runtime.compiled_model import compile_model
from snippets_core.runtime.placement import FALLBACK_KEY, Placement, ReportsPlacement

RNG = np.random.default_rng(11)


def model(shape: tuple[int | None, ...], op: Any = Relu) -> Model:
    """z = op(x + x) * x: one Subgraph of three ops."""
    x = Parameter("f32", shape, name="x")
    return Model([Result(Multiply(op(Add(x, x)), x), name="z")], [x])


def expected(x: np.ndarray, op: Any = Relu) -> np.ndarray:
    v = x.astype(np.float64) * 2
    return (np.exp(v) if op is Exp else np.maximum(v, 0)) * x


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Counts kernel runs ("kernel") and reference evaluations of a Subgraph ("reference")."""
    seen: Counter = Counter()
    kernel_run, sg_evaluate = InterpretedKernel.run, Subgraph.evaluate

    def run(self: InterpretedKernel, inputs: Any) -> Any:
        seen["kernel"] += 1
        return kernel_run(self, inputs)

    def evaluate(self: Subgraph, *args: np.ndarray) -> Any:
        seen["reference"] += 1
        return sg_evaluate(self, *args)

    monkeypatch.setattr(InterpretedKernel, "run", run)
    monkeypatch.setattr(Subgraph, "evaluate", evaluate)
    return seen


def no_emitter_for(monkeypatch: pytest.MonkeyPatch, op: str) -> None:
    """The interpreter's emitter table declares it has no emitter for ``op`` (the declared reason to fall back)."""
    real = InterpreterTarget.get

    def get(self: InterpreterTarget, expr: Any) -> Any:
        if expr.type_name == op:
            raise UnsupportedByTarget(f"target 'interpreter' has no emitter for op {op} (expression '{expr.name}')")
        return real(self, expr)

    monkeypatch.setattr(InterpreterTarget, "get", get)


def subgraph_rows(cm: Any) -> list[tuple[str, str, str]]:
    return [row for row in cm.placement() if row[1] == "Subgraph"]


def test_static_subgraph_runs_where_it_says(counts: Counter) -> None:
    cm = compile_model(model((4, 33)), target="interpreter")
    x = RNG.standard_normal((4, 33)).astype(np.float32)
    for _ in range(2):
        np.testing.assert_allclose(cm({"x": x})["z"], expected(x), rtol=1e-6)
    assert counts == Counter(kernel=2)
    assert [w for *_, w in subgraph_rows(cm)] == ["interpreter"]
    assert [s[2] for s in cm.last_run_stats.steps] == ["interpreter"] and cm.last_run_stats.fallbacks == {}
    assert "[interpreter] Subgraph" in cm.describe() and "fallback" not in cm.describe()


def test_declared_fallback_is_shown_with_its_reason(counts: Counter, monkeypatch: pytest.MonkeyPatch) -> None:
    no_emitter_for(monkeypatch, "Relu")
    cm = compile_model(model((4, 33)), target="interpreter")
    sg = cm.subgraphs[0]
    assert "UnsupportedByTarget" in sg.rt_info[FALLBACK_KEY]
    assert subgraph_rows(cm) == [(sg.name, "Subgraph", "reference")]  # before any call: where it is compiled to run
    x = RNG.standard_normal((4, 33)).astype(np.float32)
    np.testing.assert_allclose(cm({"x": x})["z"], expected(x), rtol=1e-6)
    assert counts == Counter(reference=1)
    assert subgraph_rows(cm) == [(sg.name, "Subgraph", "reference")]
    assert "no emitter for op Relu" in cm.last_run_stats.fallbacks[sg.name]
    assert f"[reference] Subgraph {sg.name}: Add, Relu, Multiply (fallback: UnsupportedByTarget: " in cm.describe()


def test_dynamic_subgraph_reports_per_call(counts: Counter, monkeypatch: pytest.MonkeyPatch) -> None:
    real = InterpreterTarget.get

    # the target declares it does not generate this op for one input shape only (row count 5)
    def get(self: InterpreterTarget, expr: Any) -> Any:
        if expr.type_name == "Relu" and expr.node.outputs[0].shape.to_tuple()[0] == 5:
            raise UnsupportedByTarget("no Relu for five rows")
        return real(self, expr)

    monkeypatch.setattr(InterpreterTarget, "get", get)
    cm = compile_model(model((None, 33)), target="interpreter")
    step = cm._steps[0]
    assert isinstance(step.run, ReportsPlacement) and step.run.last_placement == Placement("interpreter")
    name = cm.subgraphs[0].name
    for rows, where, seen in ((3, "interpreter", Counter(kernel=1)), (5, "reference", Counter(reference=1)),
                              (3, "interpreter", Counter(kernel=1)), (5, "reference", Counter(reference=1))):
        counts.clear()
        x = RNG.standard_normal((rows, 33)).astype(np.float32)
        np.testing.assert_allclose(cm({"x": x})["z"], expected(x), rtol=1e-6)
        assert counts == seen, rows
        assert subgraph_rows(cm) == [(name, "Subgraph", where)]
        assert cm.last_run_stats.by_where().keys() == {where}
        if where == "reference":
            assert "input shapes [(5, 33), (5, 33)]: UnsupportedByTarget: no Relu for five rows" in cm.last_run_stats.fallbacks[name]
            assert "(fallback: input shapes [(5, 33), (5, 33)]" in cm.describe()
        else:
            assert cm.last_run_stats.fallbacks == {} and f"[interpreter] Subgraph {name}" in cm.describe()


def test_an_internal_error_names_the_subgraph_and_is_never_a_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: InterpreterTarget, expr: Any) -> Any:
        raise KeyError("emitter bug")

    monkeypatch.setattr(InterpreterTarget, "get", broken)
    with pytest.raises(CodegenError, match=r"Subgraph '.*' on target 'interpreter': internal error KeyError"):
        compile_model(model((4, 33)), target="interpreter")
    # dynamic: lowered once for every shape when it is compiled, so the error comes then too
    with pytest.raises(CodegenError, match=r"Subgraph '.*' on target 'interpreter': internal error KeyError"):
        compile_model(model((None, 33)), target="interpreter")

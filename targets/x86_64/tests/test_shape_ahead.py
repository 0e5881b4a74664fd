"""A new input shape's call states made up front (shape_ahead.py): the first dynamic Subgraph that meets the shape
has every other dynamic Subgraph of the model make its state for the shapes the model's symbols give it; those
states equal the ones each makes on its own call, and the outputs equal onnxruntime's over new shapes."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64 import shape_ahead
from snippets_x86_64.fc_executor import RuntimeRowsFCExecutor
from snippets_x86_64.runtime import DynamicKernelExecutor

HIDDEN = 64


def _model() -> bytes:
    """Two projections of x (siblings: neither reads the other), their sum through a LayerNorm, an FFN-like FC and
    an exact GELU: FCs of dynamic M and row-wise dynamic Subgraphs, dims batch and seq."""
    rng = np.random.default_rng(5)

    def w(name: str, *shape: int) -> TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    inits = [w("wq", HIDDEN, HIDDEN), w("bq", HIDDEN), w("wk", HIDDEN, HIDDEN), w("bk", HIDDEN),
             w("g", HIDDEN), w("be", HIDDEN), w("w1", HIDDEN, 2 * HIDDEN), w("b1", 2 * HIDDEN),
             numpy_helper.from_array(np.array(0.5, np.float32), "half"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(np.sqrt(2.0), np.float32), "sqrt2")]
    n = helper.make_node
    nodes = [n("MatMul", ["x", "wq"], ["q0"]), n("Add", ["q0", "bq"], ["q"]),
             n("MatMul", ["x", "wk"], ["k0"]), n("Add", ["k0", "bk"], ["k"]),
             n("Add", ["q", "k"], ["s"]), n("LayerNormalization", ["s", "g", "be"], ["ln"], axis=-1),
             n("MatMul", ["ln", "w1"], ["f0"]), n("Add", ["f0", "b1"], ["f"]),
             n("Div", ["f", "sqrt2"], ["e0"]), n("Erf", ["e0"], ["e1"]), n("Add", ["e1", "one"], ["e2"]),
             n("Mul", ["f", "e2"], ["e3"]), n("Mul", ["e3", "half"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", HIDDEN])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 2 * HIDDEN])
    g = helper.make_graph(nodes, "layer", [x], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _executors(cm):  # type: ignore[no-untyped-def]
    return [getattr(st.run, "__self__", st.run) for st in cm._steps if st.node.type_name == "Subgraph"]


def _states(ex):  # type: ignore[no-untyped-def]
    """Per shape (or row count) the runtime-parameter blocks and chunks of the executor's call states."""
    if isinstance(ex, RuntimeRowsFCExecutor):
        return {m: (p.columns, [(list(e.params), e.chunks) for e in p.executors]) for m, p in ex._plans.items()}
    return {s: (list(e.params), e.chunks) for s, e in ex._executors.items()}


@pytest.mark.parametrize("threads", [1, 2])
def test_up_front_states_equal_the_lazy_ones_and_outputs_equal_onnxruntime(threads, monkeypatch):
    model = _model()
    shapes = [(1, 7), (2, 33), (3, 100), (1, 7), (4, 1), (2, 129)]
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((b, s, HIDDEN)).astype(np.float32) for b, s in shapes]
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    made: list[int] = []
    ahead = shape_ahead.ahead

    def counted(ex, sh):  # type: ignore[no-untyped-def]
        made.append(ahead(ex, sh))
        return made[-1]

    monkeypatch.setattr(shape_ahead, "ahead", counted)
    eager = compile_model(model, "x86_64_avx512", {"num_threads": threads})
    exs = _executors(eager)
    kinds = {type(e) for e in exs}
    assert kinds == {RuntimeRowsFCExecutor, DynamicKernelExecutor}, kinds
    for x in inputs:
        np.testing.assert_allclose(eager({"x": x})["y"], sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    # each new shape: the first Subgraph made the states of all the others, which then met it known
    new = len(set(shapes))
    assert made.count(len(exs) - 1) == new and sum(made) == new * (len(exs) - 1), made
    monkeypatch.setattr(shape_ahead, "ENABLED", False)
    lazy = compile_model(model, "x86_64_avx512", {"num_threads": threads})
    for x in inputs:
        np.testing.assert_array_equal(lazy({"x": x})["y"], eager({"x": x})["y"])
    for a, b in zip(exs, _executors(lazy)):
        assert _states(a) == _states(b) and _states(a)


def test_shapes_from_symbols():
    from snippets_core.ir.shape import SymDim

    b, s = SymDim.of("batch"), SymDim.of("seq")
    env = shape_ahead.bind([(b, s, 64), (64,)], ((3, 17, 64), (64,)))
    assert env == {"batch": 3, "seq": 17}
    assert shape_ahead.shapes_of([(b, 1, 1, s), (b * s, 2)], env) == ((3, 1, 1, 17), (51, 2))
    assert shape_ahead.shapes_of([(SymDim.of("other"), 4)], env) is None  # not known from these symbols

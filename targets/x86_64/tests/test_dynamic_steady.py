"""A dynamic (batch, seq) model runs what the static model of the same shape runs: FullyConnected layers on one
kernel for every M (M read from the runtime-parameter block, the rows split between the threads), Reshapes as
views, LayerNorm on one kernel for every shape; outputs of both against numpy float64 at several shapes, on 1 and 2 threads. The work
estimate of a new shape (the thread split) without a body clone equals the one of the shaped body."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import snippets_core
from snippets_x86_64 import runtime as x86_runtime

pytestmark = pytest.mark.avx512
TARGET = "x86_64_avx512"
H, F = 64, 96
RNG = np.random.default_rng(20261125)
W = {"w1": (RNG.standard_normal((H, F)) / math.sqrt(H)).astype(np.float32),
     "b1": RNG.standard_normal(F).astype(np.float32),
     "w2": (RNG.standard_normal((F, H)) / math.sqrt(F)).astype(np.float32),
     "b2": RNG.standard_normal(H).astype(np.float32)}


def _model(batch: int | str, seq: int | str) -> bytes:
    """y = LayerNorm(Reshape(Reshape(gelu(x·w1 + b1)·w2 + b2, [0, 0, 4, 16]), [0, 0, 64]) + x)."""
    inits = [numpy_helper.from_array(v, k) for k, v in W.items()]
    inits += [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
              {"heads": [0, 0, 4, 16], "hidden": [0, 0, H]}.items()]
    inits += [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in
              {"half": 0.5, "one": 1.0, "sqrt2": math.sqrt(2.0), "g": np.ones(H), "be": np.zeros(H)}.items()]
    mk = helper.make_node
    nodes = [mk("MatMul", ["x", "w1"], ["m1"]), mk("Add", ["m1", "b1"], ["f"]), mk("Div", ["f", "sqrt2"], ["fd"]),
             mk("Erf", ["fd"], ["fe"]), mk("Add", ["fe", "one"], ["f1"]), mk("Mul", ["f", "half"], ["fh"]),
             mk("Mul", ["fh", "f1"], ["gelu"]), mk("MatMul", ["gelu", "w2"], ["m2"]), mk("Add", ["m2", "b2"], ["o"]),
             mk("Reshape", ["o", "heads"], ["oh"]), mk("Reshape", ["oh", "hidden"], ["or"]),
             mk("Add", ["or", "x"], ["r"]),
             mk("LayerNormalization", ["r", "g", "be"], ["y"], axis=-1, epsilon=1e-5)]
    graph = helper.make_graph(nodes, "ffn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, H])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, H])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _reference64(x: np.ndarray) -> np.ndarray:
    from math import erf

    w = {k: v.astype(np.float64) for k, v in W.items()}
    f = x.astype(np.float64) @ w["w1"] + w["b1"]
    r = (f * 0.5 * (1 + np.vectorize(erf)(f / math.sqrt(2)))) @ w["w2"] + w["b2"] + x
    mu = r.mean(-1, keepdims=True)
    return (r - mu) / np.sqrt(((r - mu) ** 2).mean(-1, keepdims=True) + 1e-5)


@pytest.mark.parametrize("threads", [1, 2])
def test_dynamic_and_static_models_against_numpy(threads):
    cfg = {"num_threads": threads, "target_options": {"parallel_min_bytes": 0}}
    dyn = snippets_core.compile_model(_model("batch", "seq"), target=TARGET, config=cfg)
    for b, s in ((1, 5), (1, 128), (2, 128), (3, 100), (1, 300), (2, 7)):
        x = RNG.standard_normal((b, s, H)).astype(np.float32)
        static = snippets_core.compile_model(_model(b, s), target=TARGET, config=cfg)
        want = _reference64(x)
        got_dyn = dyn({"x": x})["y"]
        np.testing.assert_allclose(got_dyn, want, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(static({"x": x})["y"], want, rtol=1e-4, atol=1e-4)
    where = {(op, w) for _, op, w in dyn.placement()}
    assert ("Reshape", "view") in where and ("Subgraph", TARGET) in where, where
    text = dyn.describe()
    assert "one kernel for every M" in text and "one kernel for every shape" in text and "a kernel per input shape" not in text


@pytest.mark.parametrize("threads", [1, 2])
def test_rows_split_between_the_threads_on_one_kernel(threads):
    """M = 300 rows on 2 threads: two parts of 150 rows, each a call of the one runtime-M kernel (its own
    runtime-parameter block); on 1 thread one call of 300 rows (two 128-row blocks and a tail of 44)."""
    from snippets_x86_64.fc_executor import RuntimeRowsFCExecutor

    dyn = snippets_core.compile_model(_model("batch", "seq"), target=TARGET, config={"num_threads": threads})
    fcs = [getattr(st.run, "__self__", st.run) for st in dyn._steps if st.node.type_name == "Subgraph"]
    fcs = [ex for ex in fcs if isinstance(ex, RuntimeRowsFCExecutor)]
    assert len(fcs) == 2
    x = RNG.standard_normal((1, 300, H)).astype(np.float32)
    np.testing.assert_allclose(dyn({"x": x})["y"], _reference64(x), rtol=1e-4, atol=1e-4)
    for ex in fcs:
        plan = ex._plans[300]
        assert plan.starts == ([0, 150] if threads == 2 else [0]) and not plan.columns
        assert {e.kernel for e in plan.executors} == {ex.kernel}
        assert [e.input_specs[ex.a_index][1][0] for e in plan.executors] == [300 // threads] * threads


def test_the_work_estimate_of_a_new_shape_equals_the_shaped_bodys():
    from snippets_x86_64.runtime import DynamicKernelExecutor, _shaped_body, estimated_ns

    dyn = snippets_core.compile_model(_model("batch", "seq"), target=TARGET, config={"num_threads": 2})
    (ln,) = [getattr(st.run, "__self__", st.run) for st in dyn._steps
             if isinstance(getattr(st.run, "__self__", st.run), DynamicKernelExecutor)]
    for b, s in ((1, 1), (3, 77), (8, 512)):
        shapes = tuple((b, s, H) if len(p.outputs[0].shape.dims) == 3 else p.outputs[0].shape.to_tuple()
                       for p in ln.sg.body.parameters)
        assert ln._estimate(shapes) == pytest.approx(estimated_ns(_shaped_body(ln.sg, shapes)), rel=1e-12)
    assert x86_runtime.work_estimator(ln.sg) is not None


@pytest.mark.parametrize("threads", [1, 2])
def test_outputs_a_caller_holds_survive_later_calls_of_other_shapes(threads):
    """Shapes change and come back (the per-shape LRU states and padded scratch blocks are reused): every call
    matches numpy float64, and an output returned earlier still holds its values after the later calls (no buffer
    of the model is handed out twice); an output array the caller passes is written in place."""
    cfg = {"num_threads": threads, "target_options": {"parallel_min_bytes": 0}}
    dyn = snippets_core.compile_model(_model("batch", "seq"), target=TARGET, config=cfg)
    held = []
    for b, s in ((2, 128), (1, 37), (2, 128), (3, 300), (1, 37), (2, 128), (1, 3)):
        x = RNG.standard_normal((b, s, H)).astype(np.float32)
        want = _reference64(x)
        y = dyn({"x": x})["y"]
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
        assert all(not np.shares_memory(y, h) for h, _ in held)
        held.append((y, y.copy()))
    for y, saved in held:
        np.testing.assert_array_equal(y, saved)
    x = RNG.standard_normal((2, 128, H)).astype(np.float32)
    out = np.full((2, 128, H), np.nan, np.float32)
    got = dyn({"x": x}, outputs={"y": out})["y"]
    assert got is out
    np.testing.assert_allclose(out, _reference64(x), rtol=1e-4, atol=1e-4)
    for y, saved in held:
        np.testing.assert_array_equal(y, saved)

"""What a new shape costs a dynamic Subgraph beyond its runtime-parameter block: its call state gets a JIT dispatch
thunk only once the shape has been called often enough to pay for it (a static kernel's at its second call)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64.runtime import DYNAMIC_THUNK_AFTER, DynamicKernelExecutor, KernelExecutor


def _model(rows: int | str) -> bytes:
    nodes = [helper.make_node("Add", ["x", "one"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [rows, 64]) for n in ("x", "y")]
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    g = helper.make_graph(nodes, "eltwise", io[:1], io[1:], [one])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def _executor(cm):  # type: ignore[no-untyped-def]
    (step,) = [st for st in cm._steps if st.node.type_name == "Subgraph"]
    return getattr(step.run, "__self__", step.run)


def test_a_new_shapes_call_state_gets_its_thunk_late_a_static_ones_early():
    rng = np.random.default_rng(1)
    dynamic = compile_model(_model("n"), "x86_64_avx512", {"num_threads": 1})
    ex = _executor(dynamic)
    assert isinstance(ex, DynamicKernelExecutor)
    for rows in (3, 5, 3, 5):  # two shapes, each called twice: no thunk made for either
        x = rng.standard_normal((rows, 64)).astype(np.float32)
        np.testing.assert_array_equal(dynamic({"x": x})["y"], np.maximum(x + 1, 0))
    states = [e._state for e in ex._executors.values()]
    assert len(states) == 2 and all(s._single is None for s in states)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    for _ in range(DYNAMIC_THUNK_AFTER):
        np.testing.assert_array_equal(dynamic({"x": x})["y"], np.maximum(x + 1, 0))
    assert ex._executors[((3, 64),)]._state._single is not None  # a shape called often: now through its thunk
    static = compile_model(_model(3), "x86_64_avx512", {"num_threads": 1})
    sex = _executor(static)
    assert isinstance(sex, KernelExecutor)
    for _ in range(2):
        np.testing.assert_array_equal(static({"x": x})["y"], np.maximum(x + 1, 0))
    assert sex._state._single is not None

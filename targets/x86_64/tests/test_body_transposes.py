"""Transposes of values computed in the same Subgraph (Relu -> Transpose, Add -> Transpose -> Mul), against numpy
float64. The interpreter decomposes body Transposes (TransposeDecomposition), which once took only a Transpose of a
Parameter and left the others to fail; x86 vetoes a standalone Transpose, so there the numbers are checked with
the Transpose outside the kernels.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from onnx import TensorProto, helper

import snippets_core
from snippets_x86_64.guarded import guarded_copy

PERM = [0, 2, 3, 1]
X = [2, 3, 5, 17]
TX = [X[i] for i in PERM]
Arrays = dict[str, np.ndarray]

# name -> (nodes, inputs, outputs, float64 reference)
CASES: dict[str, tuple[list, dict[str, list[int]], dict[str, list[int]], Callable[[Arrays], Arrays]]] = {
    "relu_transpose": (
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Transpose", ["r"], ["y"], perm=PERM)],
        {"x": X}, {"y": TX}, lambda f: {"y": np.maximum(f["x"], 0).transpose(PERM)}),
    "transpose_relu": (
        [helper.make_node("Transpose", ["x"], ["t"], perm=PERM), helper.make_node("Relu", ["t"], ["y"])],
        {"x": X}, {"y": TX}, lambda f: {"y": np.maximum(f["x"].transpose(PERM), 0)}),
    "add_transpose_mul": (
        [helper.make_node("Add", ["x", "z"], ["a"]), helper.make_node("Transpose", ["a"], ["t"], perm=PERM),
         helper.make_node("Mul", ["t", "w"], ["y"])],
        {"x": X, "z": X, "w": TX}, {"y": TX}, lambda f: {"y": (f["x"] + f["z"]).transpose(PERM) * f["w"]}),
    "broadcast_add_transpose": (
        [helper.make_node("Add", ["x", "z"], ["a"]), helper.make_node("Transpose", ["a"], ["y"], perm=PERM)],
        {"x": X, "z": [1, 3, 1, 17]}, {"y": TX}, lambda f: {"y": (f["x"] + f["z"]).transpose(PERM)}),
    "relu_used_transposed_and_not": (
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Transpose", ["r"], ["y"], perm=PERM),
         helper.make_node("Mul", ["r", "x"], ["y2"])],
        {"x": X}, {"y": TX, "y2": X},
        lambda f: {"y": np.maximum(f["x"], 0).transpose(PERM), "y2": np.maximum(f["x"], 0) * f["x"]}),
}


def _model(nodes: list, ins: dict[str, list[int]], outs: dict[str, list[int]]) -> bytes:
    def vi(n: str, s: list[int]) -> object:
        return helper.make_tensor_value_info(n, TensorProto.FLOAT, s)

    graph = helper.make_graph(nodes, "g", [vi(n, s) for n, s in ins.items()], [vi(n, s) for n, s in outs.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("target", ["interpreter", "x86_64_avx512"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_body_transposes_match_numpy(target: str, case: str) -> None:
    nodes, ins, outs, ref = CASES[case]
    cm = snippets_core.compile_model(_model(nodes, ins, outs), target=target, config={"num_threads": 1})
    if target == "interpreter":
        fused = [sg for sg in cm.subgraphs if "Transpose" in [o.type_name for o in sg.body_ops]]
        assert fused, cm.describe()
        assert "fallback" not in cm.describe() and "[reference] Subgraph" not in cm.describe(), cm.describe()
    rng = np.random.default_rng(3)
    feeds = {n: guarded_copy(rng.standard_normal(s).astype(np.float32)) for n, s in ins.items()}
    got = cm(feeds)
    want = ref({n: a.astype(np.float64) for n, a in feeds.items()})
    for name, w in want.items():
        np.testing.assert_allclose(got[name], w, rtol=1e-6, atol=1e-6)


def test_transpose_of_a_reduction_is_a_declared_fallback_on_the_interpreter() -> None:
    """Softmax -> Transpose: a reduction does not commute with the reorder, so the Subgraph runs on its reference
    and describe() names the Transpose and the op it reads."""
    nodes = [helper.make_node("Softmax", ["x"], ["a"], axis=-1), helper.make_node("Transpose", ["a"], ["y"], perm=PERM)]
    cm = snippets_core.compile_model(_model(nodes, {"x": X}, {"y": TX}), target="interpreter",
                                     config={"num_threads": 1})
    text = cm.describe()
    assert "fallback: UnsupportedByTarget: Transpose " in text and "only eltwise ops" in text, text
    x = np.random.default_rng(4).standard_normal(X).astype(np.float32)
    e = np.exp(x.astype(np.float64))
    np.testing.assert_allclose(cm({"x": x})["y"], (e / e.sum(-1, keepdims=True)).transpose(PERM), rtol=1e-6, atol=1e-7)

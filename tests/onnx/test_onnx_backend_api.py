"""SnippetsBackend follows onnx.backend.base.Backend: prepare/run with lists or dicts, run_node, devices,
and the target chosen by keyword or SNIPPETS_BACKEND_TARGET."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from snippets_core.errors import InputError, TargetNotFoundError
from snippets_core.runtime import onnx_backend
from snippets_core.runtime.onnx_backend import SnippetsBackend


def _model():  # type: ignore[no-untyped-def]
    nodes = [helper.make_node("Mul", ["a", "b"], ["m"]), helper.make_node("Relu", ["m"], ["y"]),
             helper.make_node("Neg", ["m"], ["z"])]
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("a", "b", "y", "z")]
    graph = helper.make_graph(nodes, "g", vi[:2], vi[2:])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


A = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
B = np.full((2, 3), 0.5, np.float32)


def test_run_with_a_list_and_with_a_dict() -> None:
    rep = SnippetsBackend.prepare(_model(), "CPU")
    by_list = rep.run([A, B])
    by_dict = rep.run({"b": B, "a": A})
    for out in (by_list, by_dict):
        np.testing.assert_array_equal(out[0], np.maximum(A * B, 0))
        np.testing.assert_array_equal(out.z, -(A * B))


def test_run_model_and_module_level_functions() -> None:
    out = onnx_backend.run_model(_model(), [A, B])
    np.testing.assert_array_equal(out.y, np.maximum(A * B, 0))


def test_run_node_builds_a_one_node_model() -> None:
    node = helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.25)
    (y,) = SnippetsBackend.run_node(node, [A])
    np.testing.assert_allclose(y, np.where(A < 0, 0.25 * A, A))


def test_devices() -> None:
    assert SnippetsBackend.supports_device("CPU")
    assert not SnippetsBackend.supports_device("CUDA")


def test_wrong_input_count_is_an_input_error() -> None:
    rep = SnippetsBackend.prepare(_model(), "CPU")
    with pytest.raises(InputError, match="takes 2 inputs"):
        rep.run([A])


def test_target_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(onnx_backend.TARGET_ENV, "no_such_target_xyz")
    with pytest.raises(TargetNotFoundError, match="no_such_target_xyz"):
        SnippetsBackend.prepare(_model(), "CPU")
    rep = SnippetsBackend.prepare(_model(), "CPU", target="reference")  # the keyword wins
    assert rep.target == "reference"
    monkeypatch.delenv(onnx_backend.TARGET_ENV)
    assert SnippetsBackend.prepare(_model(), "CPU").target == "reference"

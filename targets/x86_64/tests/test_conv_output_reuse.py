"""A conv primitive never overwrites a result the caller kept (or a view of it) on its next call. Checked against a
float64 numpy convolution."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from snippets_core import compile_model
from snippets_x86_64.conv import ConvGeometry, PostOp
from snippets_x86_64.conv_executor import ConvExecutor

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: make the sibling module importable
from test_conv_kernel import conv_f64  # noqa: E402

pytestmark = pytest.mark.avx512


def _executor(m: int = 19) -> tuple[ConvExecutor, np.ndarray]:
    rng = np.random.default_rng(3)
    w = rng.standard_normal((m, 5, 3, 3)).astype(np.float32)
    geo = ConvGeometry(1, 5, 9, 10, m, 1, 3, 3, 1, 1, 1, 1, 1, 1, 9, 10)
    return ConvExecutor(geo, w, None, None, (PostOp("relu"),), num_threads=2), w


def _want(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.maximum(conv_f64(x, w, 1, (1, 1), (1, 1), (1, 1, 1, 1)), 0.0)


def test_a_kept_output_is_never_overwritten() -> None:
    ex, w = _executor()
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((1, 5, 9, 10)).astype(np.float32) for _ in range(3)]
    kept = ex.run(xs[0])
    view = ex.run(xs[1])[:, 2:]  # a view of the second output keeps it alive too
    third = ex.run(xs[2])
    np.testing.assert_allclose(kept, _want(xs[0], w), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(view, _want(xs[1], w)[:, 2:], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(third, _want(xs[2], w), rtol=1e-4, atol=1e-4)
    assert not np.shares_memory(kept, third) and not np.shares_memory(view, third)


def test_a_model_output_held_by_the_caller_survives_the_next_call() -> None:
    """One output channel: the NCHW view of the NHWC output is contiguous, so the model returns the kernel's own
    array to the caller; the next call must write elsewhere."""
    rng = np.random.default_rng(6)
    w = rng.standard_normal((1, 4, 3, 3)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                           helper.make_node("Relu", ["c"], ["y"])], "one",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    cm = compile_model(model.SerializeToString(), "x86_64_avx512")
    x1, x2 = (rng.standard_normal((1, 4, 6, 7)).astype(np.float32) for _ in range(2))
    y1 = cm({"x": x1})["y"]
    y2 = cm({"x": x2})["y"]
    want1 = np.maximum(conv_f64(x1, w, 1, (1, 1), (1, 1), (1, 1, 1, 1)), 0.0)
    np.testing.assert_allclose(y1, want1, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(y2, np.maximum(conv_f64(x2, w, 1, (1, 1), (1, 1), (1, 1, 1, 1)), 0.0),
                               rtol=1e-4, atol=1e-4)


def _chain_model(rng: np.random.Generator) -> tuple[bytes, list[np.ndarray]]:
    """1x1 (Relu) -> depthwise 3x3 (Relu) -> 1x1 + residual Add of the first conv's output: every conv but the
    last feeds only convolutions."""
    c, m = 32, 64
    ws = [rng.standard_normal(s).astype(np.float32) * 0.2 for s in ((m, c, 1, 1), (m, 1, 3, 3), (m, m, 1, 1))]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a0"]), helper.make_node("Relu", ["a0"], ["a"]),
             helper.make_node("Conv", ["a", "w1"], ["b0"], group=m, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["b0"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["d"]), helper.make_node("Add", ["d", "a"], ["y"])]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 28, 28])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(ws)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString(), ws


@pytest.mark.parametrize("threads", [1, 2])
def test_a_conv_chain_with_deferred_joins_matches_float64(threads: int) -> None:
    """At 2 threads the convs whose consumers are convs return before their workers finish (``run_deferred``); the
    next conv waits for them. The result (read by the caller) never comes from a deferred call."""
    rng = np.random.default_rng(8)
    model, (w0, w1, w2) = _chain_model(rng)
    cm = compile_model(model, "x86_64_avx512", {"num_threads": threads})
    for _ in range(3):  # the first call decides; the next ones run deferred
        x = rng.standard_normal((1, 32, 28, 28)).astype(np.float32)
        y = cm({"x": x})["y"]
        a = np.maximum(conv_f64(x, w0, 1, (1, 1), (1, 1), (0, 0, 0, 0)), 0.0)
        b = np.maximum(conv_f64(a, w1, 64, (1, 1), (1, 1), (1, 1, 1, 1)), 0.0)
        np.testing.assert_allclose(y, conv_f64(b, w2, 1, (1, 1), (1, 1), (0, 0, 0, 0)) + a, rtol=1e-4, atol=1e-4)
    deferred = [getattr(s.run, "executor", None).defer for s in cm._steps if hasattr(s.run, "executor")]
    assert deferred == ([True, True, False] if threads == 2 else [False] * 3)

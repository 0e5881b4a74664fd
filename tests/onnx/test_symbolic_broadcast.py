"""Two different symbolic dims meeting in a broadcast: the result keeps a related dim (``bcast(s1,s2)``, whichever is
not 1 at run time) through the ops after it, a model exported that way (as torch's dynamo exporter writes a residual
Add of two inputs it could not prove the same length, then a head split through ``x.size()[:-1] + (heads, d)``)
matches onnxruntime at shapes where the dims are equal or one of them is 1, and dims that do not broadcast are a
typed error naming both inputs."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from snippets_core.errors import InputError
from snippets_core.frontends.onnx import read_onnx
from snippets_core.runtime.compiled_model import compile_model

ort = pytest.importorskip("onnxruntime")

HIDDEN, HEADS = 32, 2


TARGETS = sys.modules["snippets_onnx_targets"].TARGETS  # loaded by conftest.py


def residual_with_bias() -> onnx.ModelProto:
    """``hidden_states [s0, s1, 32] + position_bias [1, s2, 32]`` (dynamo names every dim it cannot unify), then
    LayerNormalization, a Linear with tanh Gelu, and the head split: ``view(x.size()[:-1] + (2, 16))`` written as
    Shape -> Slice(0, -1) -> Concat -> Reshape, then Transpose(0, 2, 1, 3)."""
    rng = np.random.default_rng(7)
    d = HIDDEN // HEADS
    inits = [numpy_helper.from_array(rng.standard_normal(HIDDEN).astype(np.float32), "ln_w"),
             numpy_helper.from_array(rng.standard_normal(HIDDEN).astype(np.float32), "ln_b"),
             numpy_helper.from_array((rng.standard_normal((HIDDEN, HIDDEN)) * 0.2).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([0], np.int64), "start"),
             numpy_helper.from_array(np.array([-1], np.int64), "end"),
             numpy_helper.from_array(np.array([HEADS, d], np.int64), "heads"),
             ]
    nodes = [helper.make_node("Add", ["hidden_states", "position_bias"], ["x"]),
             helper.make_node("LayerNormalization", ["x", "ln_w", "ln_b"], ["ln"], axis=-1, epsilon=1e-5),
             helper.make_node("MatMul", ["ln", "w"], ["h"]),
             helper.make_node("Tanh", ["h"], ["t"]),
             helper.make_node("Mul", ["h", "t"], ["g"]),
             helper.make_node("Add", ["g", "x"], ["r"]),
             helper.make_node("Shape", ["r"], ["shape"]),
             helper.make_node("Slice", ["shape", "start", "end"], ["lead"]),
             helper.make_node("Concat", ["lead", "heads"], ["split"], axis=0),
             helper.make_node("Reshape", ["r", "split"], ["rs"]),
             helper.make_node("Transpose", ["rs"], ["y"], perm=[0, 2, 1, 3])]
    g = helper.make_graph(nodes, "residual_with_bias",
                          [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, ["s0", "s1", HIDDEN]),
                           helper.make_tensor_value_info("position_bias", TensorProto.FLOAT, [1, "s2", HIDDEN])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["s0", HEADS, "s3", d])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _feeds(batch: int, s1: int, s2: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch * 100 + s1 * 10 + s2)
    return {"hidden_states": rng.standard_normal((batch, s1, HIDDEN)).astype(np.float32),
            "position_bias": rng.standard_normal((1, s2, HIDDEN)).astype(np.float32)}


def test_the_broadcast_result_keeps_a_dim_related_to_both_symbols() -> None:
    model = read_onnx(residual_with_bias())
    shapes = {n.type_name: str(n.outputs[0].shape) for n in model.get_ordered_ops() if n.outputs}
    assert shapes["Add"] == "[s0,bcast(s1,s2),32]"
    assert shapes["Transpose"] == f"[s0,{HEADS},bcast(s1,s2),{HIDDEN // HEADS}]"
    # the head split's shape chain is decided by the symbols: nothing of it is left to run per call
    assert not {"ShapeOf", "Slice", "Concat"} & {n.type_name for n in model.get_ordered_ops()}


@pytest.mark.parametrize("target", TARGETS)
def test_a_symbolic_broadcast_model_against_onnxruntime(target: str) -> None:
    proto = residual_with_bias()
    cm = compile_model(proto, target)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch, s1, s2 in [(2, 5, 5), (1, 1, 7), (2, 7, 1), (1, 1, 1), (3, 17, 17), (2, 9, 1)]:
        feeds = _feeds(batch, s1, s2)
        want = sess.run(None, feeds)[0]
        got = cm(feeds)["y"]
        assert got.shape == want.shape == (batch, HEADS, max(s1, s2), HIDDEN // HEADS)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    if target == "x86_64_avx512":  # every op after the broadcast is fused or a view: none runs on its reference
        assert all(where != "reference" for _, _, where in cm.placement()), cm.describe()


@pytest.mark.parametrize("target", TARGETS)
def test_dims_that_do_not_broadcast_are_an_error_naming_both_inputs(target: str) -> None:
    cm = compile_model(residual_with_bias(), target)
    with pytest.raises(InputError) as e:
        cm(_feeds(2, 3, 4))
    msg = str(e.value)
    assert "'hidden_states' dim 1" in msg and "'position_bias' dim 1" in msg, msg
    assert "s1 = 3" in msg and "s2 = 4" in msg and "Add" in msg, msg
    cm(_feeds(2, 4, 4))  # the model still runs after the error


@pytest.fixture(scope="module")
def compiled_residual():  # type: ignore[no-untyped-def]
    proto = residual_with_bias()
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    targets = ["reference"] + (["x86_64_avx512"] if sys.modules["snippets_onnx_targets"].x86_unavailable() is None
                               else [])
    return {t: compile_model(proto, t) for t in targets}, sess


@settings(max_examples=30, deadline=None)
@given(batch=st.integers(1, 3), s1=st.integers(0, 40), s2=st.integers(0, 40), which=st.sampled_from("=12x"))
def test_random_broadcasts_against_onnxruntime(compiled_residual, batch: int, s1: int, s2: int,  # type: ignore
                                               which: str) -> None:
    """Random lengths: equal, one of them 1, or whatever hypothesis draws (then they must broadcast or be an
    InputError, where onnxruntime fails too)."""
    models, sess = compiled_residual
    s2 = {"=": s1, "1": 1, "2": s2, "x": s2}[which]
    s1 = 1 if which == "2" else s1
    feeds = _feeds(batch, s1, s2)
    if s1 != s2 and 1 not in (s1, s2):
        for cm in models.values():
            with pytest.raises(InputError, match=f"s1 = {s1} .* with s2 = {s2} "):
                cm(feeds)
        return
    want = sess.run(None, feeds)[0]
    for cm in models.values():
        np.testing.assert_allclose(cm(feeds)["y"], want, rtol=1e-4, atol=1e-4)


def test_a_symbol_meeting_one_is_the_symbol_and_three_symbols_make_one_atom() -> None:
    """[S] with [1] is S; [S] + [T] + [S] (and in any order) is one atom of S and T; with [U], of all three."""
    nodes = [helper.make_node("Add", ["a", "one"], ["a1"]),
             helper.make_node("Add", ["a1", "b"], ["ab"]),
             helper.make_node("Add", ["a", "ab"], ["aba"]),
             helper.make_node("Add", ["aba", "c"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [d]) for n, d in
                                       (("a", "S"), ("one", 1), ("b", "T"), ("c", "U"))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model = read_onnx(proto)
    shapes = {n.name: str(n.outputs[0].shape) for n in model.get_ordered_ops() if n.outputs}
    assert [shapes[f"Add_{k}"] for k in range(4)] == ["[S]", "[bcast(S,T)]", "[bcast(S,T)]", "[bcast(S,T,U)]"]
    cm = compile_model(proto, "reference")
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for s, t, u in [(4, 4, 1), (1, 6, 6), (1, 1, 3), (5, 1, 5)]:
        feeds = {k: np.arange(n, dtype=np.float32) + i for i, (k, n) in enumerate(
            (("a", s), ("one", 1), ("b", t), ("c", u)))}
        np.testing.assert_array_equal(cm(feeds)["y"], sess.run(None, feeds)[0])
    with pytest.raises(InputError, match=r"S = 2 \(input 'a' dim 0\) with T = 1 \(input 'b' dim 0\) with U = 3"):
        cm({"a": np.zeros(2, np.float32), "one": np.zeros(1, np.float32), "b": np.zeros(1, np.float32),
            "c": np.zeros(3, np.float32)})


def attention_after_broadcast() -> onnx.ModelProto:
    """``x [B, S, 64] + y [B, T, 64]``, split into 2 heads, then self-attention: the attention's sequence is
    ``bcast(S,T)``, a dim its Subgraph's input has, so it is lowered once for every shape."""
    nodes = [helper.make_node("Add", ["x", "y"], ["s"]),
             helper.make_node("Reshape", ["s", "heads"], ["q"]),
             helper.make_node("Transpose", ["q"], ["qt"], perm=[0, 2, 1, 3]),
             helper.make_node("Transpose", ["q"], ["kt"], perm=[0, 2, 3, 1]),
             helper.make_node("MatMul", ["qt", "kt"], ["scores"]),
             helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "qt"], ["o"]),
             helper.make_node("Transpose", ["o"], ["out"], perm=[0, 2, 1, 3])]
    g = helper.make_graph(nodes, "attention_after_broadcast",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", 64]),
                           helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "T", 64])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.array([0, 0, 2, 32], np.int64), "heads")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("target", TARGETS)
def test_an_attention_after_a_symbolic_broadcast_has_one_kernel(target: str) -> None:
    proto = attention_after_broadcast()
    cm = compile_model(proto, target)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    for (b, s), t in [((2, 5), 5), ((1, 1), 7), ((1, 9), 1), ((2, 33), 33), ((1, 70), 1)]:
        feeds = {"x": rng.standard_normal((b, s, 64)).astype(np.float32),
                 "y": rng.standard_normal((b, t, 64)).astype(np.float32)}
        np.testing.assert_allclose(cm(feeds)["out"], sess.run(None, feeds)[0], rtol=1e-4, atol=1e-5)
    if target == "x86_64_avx512":
        (mha,) = [line for line in cm.describe().splitlines() if "MatMul, Softmax, MatMul" in line]
        how = cm.describe().splitlines()[cm.describe().splitlines().index(mha) + 1]
        assert "one kernel for every shape" in how, cm.describe()

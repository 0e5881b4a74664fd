"""Issue 10's "bad input" on every dynamic Subgraph kind: zero-sized dims work (eltwise, reduce, softmax, LayerNorm,
FullyConnected, MHA; convolution and pooling over a batch of 0) or are rejected with an error naming the op (a window
larger than its padded input: H = 0 under a 3x3 conv, H = 1 under a 2x2 pool), symbolic dims that disagree across
inputs are one error naming both, on the interpreter and x86-64; and a property test of random N, H, W through conv
and pool primitives against onnxruntime, x86-64's inputs flush against guard pages."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from snippets_core.errors import InputError
from snippets_core.runtime.compiled_model import compile_model

ort = pytest.importorskip("onnxruntime")
TARGETS = ["interpreter", sys.modules["snippets_onnx_targets"].X86]  # loaded by conftest.py
F = TensorProto.FLOAT
vi = helper.make_tensor_value_info
RNG = np.random.default_rng(10)


def _model(nodes: list, inputs: list, inits: tuple = ()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, [vi("y", F, None)], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _w(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.3).astype(np.float32), name)


def _mha() -> onnx.ModelProto:
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Div", ["s", "scale"], ["d"]),
             helper.make_node("Softmax", ["d"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    return _model(nodes, [vi(n, F, ["B", 4, "S", 32]) for n in "qkv"],
                  (numpy_helper.from_array(np.array(5.6, np.float32), "scale"),))


#: kind -> (model, input shape for (n, s)); every input of a model has that shape
KINDS = {
    "eltwise": (_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "x"], ["y"])],
                       [vi("x", F, ["N", "S", 16])]), lambda n, s: (n, s, 16)),
    "reduce": (_model([helper.make_node("Exp", ["x"], ["e"]), helper.make_node("ReduceMax", ["e"], ["y"], axes=[-1])],
                      [vi("x", F, ["N", 16, "S"])]), lambda n, s: (n, 16, s)),
    "softmax": (_model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [vi("x", F, ["N", "S", "S"])]),
                lambda n, s: (n, s, s)),
    "layernorm": (_model([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)],
                         [vi("x", F, ["N", "S", 32])], (_w("g", 32), _w("b", 32))), lambda n, s: (n, s, 32)),
    "fc": (_model([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
                   helper.make_node("Relu", ["a"], ["y"])], [vi("x", F, ["N", "S", 64])],
                  (_w("w", 64, 48), _w("b", 48))),
           lambda n, s: (n, s, 64)),
    "mha": (_mha(), lambda n, s: (n, 4, s, 32)),
    "conv": (_model([helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[0, 1, 0, 1]),
                     helper.make_node("Relu", ["c"], ["y"])], [vi("x", F, ["N", 16, "H", "W"])],
                    (_w("w", 32, 16, 3, 3), _w("b", 32))), lambda n, s: (n, 16, s, s + 2)),
    "maxpool": (_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
                       [vi("x", F, ["N", 16, "H", "W"])]), lambda n, s: (n, 16, s, s + 3)),
    "avgpool": (_model([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                         count_include_pad=0)], [vi("x", F, ["N", 16, "H", "W"])]),
                lambda n, s: (n, 16, s, s)),
}
#: for the window kinds: the op whose window the smallest sizes do not fit, and those sizes
TOO_SMALL = {"conv": ("Convolution", (0, 1, 2)), "maxpool": ("MaxPool", (0, 1)), "avgpool": ("AvgPool", (0,))}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("target", TARGETS)
def test_zero_sized_dims_work_or_are_rejected_naming_the_op(kind: str, target: str) -> None:
    proto, shape = KINDS[kind]
    cm = compile_model(proto, target)
    if target == "x86_64_avx512":
        assert all(w == "x86_64_avx512" for _, _, w in cm.placement()), cm.describe()
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    op, small = TOO_SMALL.get(kind, ("", ()))
    for n, s in [(2, 5), (0, 5), (2, 0), (0, 0), (1, 1), (3, 2)]:
        feeds = {i.name: RNG.standard_normal(shape(n, s)).astype(np.float32) for i in proto.graph.input}
        if s in small:  # onnxruntime rejects these too (or, for pools of an empty batch, crashes)
            with pytest.raises(InputError, match=rf"{op} '[^']*': its input dim 2 is H = {s} \(input 'x' dim 2\), "
                                                 r"smaller than its window"):
                cm(feeds)
            continue
        got = cm(feeds)["y"]
        if got.size == 0 and kind in TOO_SMALL:  # onnxruntime's pools divide by an empty spatial size
            assert got.shape == (n, 16 if kind != "conv" else 32, *got.shape[2:])
            continue
        want = sess.run(None, feeds)[0]
        assert got.shape == want.shape, (n, s)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_symbolic_dims_disagreeing_across_inputs_are_one_error_naming_both(target: str) -> None:
    proto, shape = KINDS["mha"]
    cm = compile_model(proto, target)
    feeds = {i.name: np.zeros(shape(2, 128), np.float32) for i in proto.graph.input}
    feeds["v"] = np.zeros(shape(2, 129), np.float32)
    with pytest.raises(InputError, match=r"inputs 'q' and 'v' disagree on the symbolic dim S: S = 128 in 'q' \(dim 2\) "
                                         r"but 129 in 'v' \(dim 2\)"):
        cm(feeds)
    feeds["v"] = np.zeros((2, 4, 128, 31), np.float32)
    with pytest.raises(InputError, match=r"'v' must have shape \[B,4,S,32\], got \[2, 4, 128, 31\]: dim 3 is 31 where "
                                         "the model fixes 32"):
        cm(feeds)


# --- property test: conv and pool primitives at random shapes -------------------------------------------------------
def _cnn() -> onnx.ModelProto:
    """conv 3x3 stride 2 pad 1 + bias + relu -> maxpool 3x3 stride 2 pad 1 -> depthwise conv 3x3 pad 1 -> global
    average pool, with symbolic N, H, W (a torch export's dynamic axes)."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=16),
             helper.make_node("Add", ["c2", "p1"], ["a2"]),
             helper.make_node("GlobalAveragePool", ["a2"], ["y"])]
    return _model(nodes, [vi("x", F, ["N", 8, "H", "W"])],
                  (_w("w1", 16, 8, 3, 3), _w("b1", 16), _w("w2", 16, 1, 3, 3), _w("b2", 16)))


_CNN = _cnn()
_COMPILED: dict[str, object] = {}


def _targets() -> list[str]:
    return ["interpreter"] + (["x86_64_avx512"] if sys.modules["snippets_onnx_targets"].x86_unavailable() is None
                              else [])


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 3), h=st.integers(1, 40), w=st.integers(1, 40), at=st.sampled_from(["end", "start"]),
       target=st.sampled_from(_targets()))
def test_random_shapes_through_conv_and_pool_primitives(n: int, h: int, w: int, at: str, target: str) -> None:
    cm = _COMPILED.get(target) or _COMPILED.setdefault(target, compile_model(_CNN, target))
    x = np.random.default_rng(n * 1000 + h * 40 + w).standard_normal((n, 8, h, w)).astype(np.float32)
    if target == "x86_64_avx512":
        from snippets_x86_64.guarded import guarded_copy

        x_in = guarded_copy(x, at) if x.size else x
    else:
        x_in = x
    got = cm({"x": x_in})["y"]  # type: ignore[operator]
    assert got.shape == (n, 16, 1, 1)
    if n:
        want = ort.InferenceSession(_CNN.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

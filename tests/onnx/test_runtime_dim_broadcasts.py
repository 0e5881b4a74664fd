"""Broadcasts of dims that no model input gives (a Reshape or Expand to a shape read from data, NonZero, Range of a
data limit) or of a symbol with a static dim: shape inference can only assume they broadcast, so each step that
assumes it checks the dims of its input arrays before it runs (``StepBroadcastChecks``). Dims that broadcast (equal,
or one of them 1) match onnxruntime on every target; dims that do not (3 against 5) are an InputError naming the op
and both dims, where onnxruntime fails too, and no kernel runs on them (x86-64: inputs flush against guard pages)."""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from snippets_core.errors import InputError
from snippets_core.runtime.compiled_model import compile_model

ort = pytest.importorskip("onnxruntime")
TARGETS = sys.modules["snippets_onnx_targets"].TARGETS  # loaded by conftest.py
F, I64 = TensorProto.FLOAT, TensorProto.INT64
vi = helper.make_tensor_value_info
Feeds = Callable[[int, int], dict[str, np.ndarray]]


def _model(nodes: list, inputs: list, inits: tuple = ()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, [vi("y", F, None)], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _rand(*shape: int) -> np.ndarray:
    return np.random.default_rng(sum(shape) * 7 + len(shape)).standard_normal(shape).astype(np.float32)


def expand_from_data() -> tuple[onnx.ModelProto, Feeds, str]:
    """``x [B, S] + Expand(1, n)`` where ``n`` is an input's data: the Expand's dims are known only at run time."""
    nodes = [helper.make_node("Expand", ["c", "n"], ["e"], name="expand"),
             helper.make_node("Add", ["x", "e"], ["a"], name="add"), helper.make_node("Relu", ["a"], ["y"])]
    proto = _model(nodes, [vi("x", F, ["B", "S"]), vi("n", I64, [2])], (numpy_helper.from_array(np.ones(1, np.float32),
                                                                                                 "c"),))
    return proto, lambda s, t: {"x": _rand(2, s), "n": np.array([2, t], np.int64)}, "dim 1 of Broadcast 'expand'"


def reshape_from_data() -> tuple[onnx.ModelProto, Feeds, str]:
    """``x [3, S] + Reshape(w, [3, -1])`` then Softmax: the Reshape's last dim is computed from ``w``'s length."""
    nodes = [helper.make_node("Reshape", ["w", "shp"], ["r"], name="reshape"),
             helper.make_node("Add", ["x", "r"], ["a"], name="add"),
             helper.make_node("Softmax", ["a"], ["y"], axis=-1)]
    proto = _model(nodes, [vi("x", F, [3, "S"]), vi("w", F, ["N"]), vi("shp", I64, [2])])
    return proto, lambda s, t: {"x": _rand(3, s), "w": _rand(3 * t), "shp": np.array([3, -1], np.int64)}, \
        "dim 1 of Reshape 'reshape'"


def nonzero_indices() -> tuple[onnx.ModelProto, Feeds, str]:
    """``x [1, S] + Cast(NonZero(m))``: the number of non-zeros of ``m`` is the dim."""
    nodes = [helper.make_node("NonZero", ["m"], ["nz"]), helper.make_node("Cast", ["nz"], ["f"], to=F, name="cast"),
             helper.make_node("Add", ["x", "f"], ["a"], name="add"), helper.make_node("Relu", ["a"], ["y"])]
    proto = _model(nodes, [vi("x", F, [1, "S"]), vi("m", F, ["T"])])
    return proto, lambda s, t: {"x": _rand(1, s), "m": np.ones(t, np.float32)}, "dim 1 of Convert 'cast'"


def range_of_data() -> tuple[onnx.ModelProto, Feeds, str]:
    """``tanh(x [B, S] * Range(0, limit))`` with the limit an input's data (a position ramp)."""
    nodes = [helper.make_node("Range", ["zero", "lim", "one"], ["r"]),
             helper.make_node("Cast", ["r"], ["f"], to=F, name="cast"),
             helper.make_node("Mul", ["x", "f"], ["a"], name="add"), helper.make_node("Tanh", ["a"], ["y"])]
    inits = (numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array(1, np.int64),
                                                                                            "one"))
    proto = _model(nodes, [vi("x", F, ["B", "S"]), vi("lim", I64, [])], inits)
    return proto, lambda s, t: {"x": _rand(2, s), "lim": np.array(t, np.int64)}, "dim 0 of Convert 'cast'"


def symbol_with_static() -> tuple[onnx.ModelProto, Feeds, str]:
    """``x [B, S] + bias[5]``: inference makes the dim 5, assuming ``S`` is 5 or 1."""
    nodes = [helper.make_node("Add", ["x", "c"], ["a"], name="add"), helper.make_node("Relu", ["a"], ["y"])]
    proto = _model(nodes, [vi("x", F, ["B", "S"])], (numpy_helper.from_array(_rand(5), "c"),))
    return proto, lambda s, t: {"x": _rand(2, s)}, "the static dim 5"


def unfused_op() -> tuple[onnx.ModelProto, Feeds, str]:
    """``Equal(x [S, 4], Reshape(w, [-1, 4]))`` on int64: an op no Tokenizer fuses, checked as a step of its own."""
    nodes = [helper.make_node("Reshape", ["w", "shp"], ["r"], name="reshape"),
             helper.make_node("Equal", ["x", "r"], ["e"], name="add"), helper.make_node("Cast", ["e"], ["y"], to=F)]
    proto = _model(nodes, [vi("x", I64, ["S", 4]), vi("w", I64, ["N"]), vi("shp", I64, [2])])
    def feeds(s: int, t: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(s * 1000 + t)
        return {"x": rng.integers(0, 2, (s, 4)), "w": rng.integers(0, 2, 4 * t), "shp": np.array([-1, 4], np.int64)}

    return proto, feeds, "dim 0 of Reshape 'reshape'"


MODELS = [expand_from_data, reshape_from_data, nonzero_indices, range_of_data, symbol_with_static, unfused_op]


@pytest.mark.parametrize("make", MODELS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("target", TARGETS)
def test_dims_known_only_at_run_time_broadcast_or_are_an_error(make: Callable, target: str) -> None:
    proto, feeds, other_dim = make()
    cm = compile_model(proto, target)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    good = [(5, 5), (1, 5), (5, 1)] if make is not symbol_with_static else [(5, 0), (1, 0)]
    for s, t in good:
        np.testing.assert_allclose(cm(feeds(s, t))["y"], sess.run(None, feeds(s, t))[0], rtol=1e-5, atol=1e-5)
    for s, t in [(3, 5), (9, 5), (300, 5)]:
        with pytest.raises(Exception):  # noqa: B017 - onnxruntime's own error type
            sess.run(None, feeds(s, t))
        with pytest.raises(InputError) as e:
            cm(feeds(s, t))
        msg = str(e.value)
        assert f"S = {s} (dim " in msg and other_dim in msg and "'add'" in msg, msg
        if other_dim != "the static dim 5":
            assert f"= {t} (known only at run time)" in msg, msg
    again = 5 if make is symbol_with_static else 4  # the model still runs after the error
    np.testing.assert_allclose(cm(feeds(again, 4))["y"], sess.run(None, feeds(again, 4))[0], rtol=1e-5, atol=1e-5)


def test_no_kernel_sees_dims_that_do_not_broadcast_under_guard_pages() -> None:
    """x86-64: the good shapes run with every input flush against a guard page (before or after it), the bad ones
    stop before the kernel."""
    if sys.modules["snippets_onnx_targets"].x86_unavailable() is not None:
        pytest.skip(sys.modules["snippets_onnx_targets"].x86_unavailable())
    from snippets_x86_64.guarded import guarded_copy

    for make in MODELS:
        proto, feeds, _ = make()
        cm = compile_model(proto, "x86_64_avx512")
        sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        for s, t in [(17, 17), (1, 33), (40, 1), (3, 5), (33, 17)]:
            for at in ("end", "start"):
                f = {k: guarded_copy(v, at) if v.dtype == np.float32 and v.size else v for k, v in feeds(s, t).items()}
                if make is symbol_with_static:
                    ok = s in (1, 5)
                else:
                    ok = s == t or 1 in (s, t)
                if ok:
                    np.testing.assert_allclose(cm(f)["y"], sess.run(None, feeds(s, t))[0], rtol=1e-5, atol=1e-5)
                else:
                    with pytest.raises(InputError, match="must be equal, or one of them 1"):
                        cm(f)


def test_steps_whose_dims_the_inputs_decide_are_not_wrapped() -> None:
    """A model whose broadcasts are all decided (equal symbols, 1s) pays no step check."""
    nodes = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    cm = compile_model(_model(nodes, [vi("x", F, ["B", "S", 8]), vi("b", F, [1, "S", 1])]), "reference")
    assert not any(st.checks for st in cm._steps)
    proto, _, _ = expand_from_data()
    assert [st.node.type_name for st in compile_model(proto, "reference")._steps if st.checks] == ["Subgraph"]


@pytest.mark.parametrize("target", TARGETS)
def test_a_dim_made_by_inference_meeting_another_symbol(target: str) -> None:
    """A stride-2 MaxPool of ``H`` makes the floor atom ``floor(H/2)``; added to ``b [1, 3, T]`` it is
    ``bcast(T,floor(H/2))``, checked on the call's inputs before any step: equal or 1 matches onnxruntime, else an
    InputError naming the Add and both dims with the inputs they come from."""
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2], strides=[2]),
             helper.make_node("Add", ["p", "b"], ["a"], name="add"), helper.make_node("Softmax", ["a"], ["y"], axis=-1)]
    proto = _model(nodes, [vi("x", F, [1, 3, "H"]), vi("b", F, [1, 3, "T"])])
    cm = compile_model(proto, target)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for h, t in [(10, 5), (11, 1), (2, 7), (40, 20)]:
        feeds = {"x": _rand(1, 3, h), "b": _rand(1, 3, t)}
        np.testing.assert_allclose(cm(feeds)["y"], sess.run(None, feeds)[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(InputError, match=r"Add 'add' broadcasts T = 5 \(input 'b' dim 2\) with floor\(H/2\) = 3 "
                                         r"\(H from input 'x' dim 2\)"):
        cm({"x": _rand(1, 3, 7), "b": _rand(1, 3, 5)})


@pytest.mark.parametrize("target", TARGETS)
def test_an_input_of_unknown_rank_is_named_when_its_dims_do_not_broadcast(target: str) -> None:
    """``Expand(1, Slice(Shape(z), st, en))`` with the slice bounds from data has an unknown rank: nothing is named at
    compile time, and the Add's reference names both dims when they do not broadcast."""
    nodes = [helper.make_node("Shape", ["z"], ["sh"]), helper.make_node("Slice", ["sh", "st", "en"], ["sl"]),
             helper.make_node("Expand", ["c", "sl"], ["e"], name="expand"),
             helper.make_node("Add", ["x", "e"], ["a"], name="add"), helper.make_node("Sigmoid", ["a"], ["y"])]
    proto = _model(nodes, [vi("x", F, ["B", "S"]), vi("z", F, ["B", "T", 7]), vi("st", I64, [1]), vi("en", I64, [1])],
                   (numpy_helper.from_array(np.ones(1, np.float32), "c"),))
    cm = compile_model(proto, target)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])

    def feeds(s: int, t: int) -> dict[str, np.ndarray]:
        return {"x": _rand(2, s), "z": _rand(2, t, 7), "st": np.array([0], np.int64), "en": np.array([2], np.int64)}

    for s, t in [(5, 5), (1, 6), (6, 1)]:
        np.testing.assert_allclose(cm(feeds(s, t))["y"], sess.run(None, feeds(s, t))[0], rtol=1e-6, atol=1e-6)
    with pytest.raises(InputError, match=r"Add 'add' broadcasts dim 1 of 'x' = 3 with dim 1 of 'expand' = 5: they"):
        cm(feeds(3, 5))

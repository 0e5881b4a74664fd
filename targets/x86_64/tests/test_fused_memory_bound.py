"""Memory-bound ops fused on x86_64_avx512 (issue 11): standalone Softmax, the reductions over the last axis,
LayerNormalization in both export forms with the residual Add before it, both Gelu forms, Where with its
comparison, and the mask of an exported attention layer. Each graph must run as x86 kernels only (no
reference fallback) and match numpy float64, with inputs and outputs flush against guard pages."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import snippets_core
from snippets_x86_64.guarded import guarded_array, guarded_copy

pytestmark = pytest.mark.avx512

# shapes with tails: 37 and 19 are not multiples of 16 lanes, 1 is a single row
SHAPES = [(2, 3, 37), (1, 19), (4, 1, 16), (3, 5, 33)]


def _model(nodes, shape, out_shape, inits=None, opset=18):  # type: ignore[no-untyped-def]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))],
                              initializer=[numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _run_fused(proto: bytes, x: np.ndarray, out_shape: tuple[int, ...], at: str = "end") -> np.ndarray:
    """Compile for x86_64_avx512, check every computing node ran in a kernel, run on guarded memory."""
    cm = snippets_core.compile_model(proto, target="x86_64_avx512", config={"num_threads": 1})
    where = {w for _, _, w in cm.placement()}
    assert where == {"x86_64_avx512"}, cm.describe()
    out = guarded_array(out_shape, np.float32, at)
    cm({"x": guarded_copy(x, at)}, outputs={"y": out})
    return np.array(out)


def _x(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 3


def _softmax64(t: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(t - t.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _layer_norm64(t: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    mean = t.mean(-1, keepdims=True)
    var = ((t - mean) ** 2).mean(-1, keepdims=True)
    return (t - mean) / np.sqrt(var + eps) * gamma + beta


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("at", ["end", "start"])
def test_add_softmax(shape: tuple[int, ...], at: str) -> None:
    mask = (np.random.default_rng(1).standard_normal((1,) * (len(shape) - 1) + (shape[-1],)) * 0.5).astype(np.float32)
    nodes = [helper.make_node("Add", ["x", "m"], ["t"]), helper.make_node("Softmax", ["t"], ["y"], axis=-1)]
    x = _x(shape)
    got = _run_fused(_model(nodes, shape, shape, {"m": mask}), x, shape, at)
    np.testing.assert_allclose(got, _softmax64(x.astype(np.float64) + mask), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("op", "ref"), [
    ("ReduceMax", lambda t: t.max(-1, keepdims=True)),
    ("ReduceSum", lambda t: t.sum(-1, keepdims=True)),
    ("ReduceMean", lambda t: t.mean(-1, keepdims=True)),
    ("ReduceMin", lambda t: t.min(-1, keepdims=True)),
    ("ReduceL2", lambda t: np.sqrt((t * t).sum(-1, keepdims=True))),
])
def test_reduce_last_axis(shape: tuple[int, ...], op: str, ref) -> None:  # type: ignore[no-untyped-def]
    out_shape = shape[:-1] + (1,)
    nodes = [helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)]
    x = _x(shape)
    got = _run_fused(_model(nodes, shape, out_shape, {"axes": np.array([-1], np.int64)}), x, out_shape)
    np.testing.assert_allclose(got, ref(x.astype(np.float64)), rtol=1e-5, atol=1e-5)


def _ln_inputs(shape: tuple[int, ...], seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """gamma, beta [last dim] and a residual of ``shape``."""
    rng = np.random.default_rng(seed)
    n = shape[-1]
    gamma, beta = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    return gamma, beta, rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("shape", SHAPES)
def test_layer_normalization_op_with_residual_add(shape: tuple[int, ...]) -> None:
    gamma, beta, res = _ln_inputs(shape, 2)
    nodes = [helper.make_node("Add", ["x", "res"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "g", "b"], ["y"], axis=-1, epsilon=1e-5)]
    x = _x(shape) + 100  # a large mean: the variance must not cancel
    got = _run_fused(_model(nodes, shape, shape, {"res": res, "g": gamma, "b": beta}, opset=17), x, shape)
    want = _layer_norm64(x.astype(np.float64) + res, gamma, beta, 1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", SHAPES)
def test_torchscript_layer_norm_is_one_kernel(shape: tuple[int, ...]) -> None:
    gamma, beta, res = _ln_inputs(shape, 3)
    nodes = [helper.make_node("Add", ["x", "res"], ["s"]),
             helper.make_node("ReduceMean", ["s"], ["m"], axes=[-1]), helper.make_node("Sub", ["s", "m"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["p"]), helper.make_node("ReduceMean", ["p"], ["v"], axes=[-1]),
             helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["d", "sd"], ["nd"]), helper.make_node("Mul", ["nd", "g"], ["ng"]),
             helper.make_node("Add", ["ng", "b"], ["y"])]
    inits = {"res": res, "two": np.array(2, np.float32), "eps": np.array(1e-12, np.float32), "g": gamma, "b": beta}
    proto = _model(nodes, shape, shape, inits, opset=13)
    cm = snippets_core.compile_model(proto, target="x86_64_avx512", config={"num_threads": 1})
    assert [op for _, op, _ in cm.placement()] == ["Subgraph"], cm.describe()
    x = _x(shape)
    got = _run_fused(proto, x, shape)
    np.testing.assert_allclose(got, _layer_norm64(x.astype(np.float64) + res, gamma, beta, 1e-12),
                               rtol=1e-4, atol=1e-4)


def _erf64(t: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(t)


@pytest.mark.parametrize("form", ["erf_decomposed", "gelu_none", "gelu_tanh"])
def test_gelu_forms(form: str) -> None:
    shape = (3, 45)
    if form == "erf_decomposed":
        nodes = [helper.make_node("Div", ["x", "s2"], ["a"]), helper.make_node("Erf", ["a"], ["e"]),
                 helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["x", "e1"], ["m"]),
                 helper.make_node("Mul", ["m", "half"], ["y"])]
        inits = {"s2": np.array(np.sqrt(2), np.float32), "one": np.array(1, np.float32),
                 "half": np.array(0.5, np.float32)}
        proto = _model(nodes, shape, shape, inits)
    else:
        approx = form.split("_")[1]
        proto = _model([helper.make_node("Gelu", ["x"], ["y"], approximate=approx)], shape, shape, opset=20)
    x = _x(shape)
    t = x.astype(np.float64)
    if form == "gelu_tanh":
        want = 0.5 * t * (1 + np.tanh(np.sqrt(2 / np.pi) * (t + 0.044715 * t**3)))
    else:
        want = 0.5 * t * (1 + _erf64(t / np.sqrt(2)))
    np.testing.assert_allclose(_run_fused(proto, x, shape), want, rtol=1e-5, atol=1e-5)


def test_where_with_its_comparison() -> None:
    shape = (5, 37)
    nodes = [helper.make_node("Greater", ["x", "zero"], ["c"]), helper.make_node("Where", ["c", "x", "k"], ["y"])]
    proto = _model(nodes, shape, shape, {"zero": np.array(0, np.float32), "k": np.array(-1e9, np.float32)})
    x = _x(shape)
    np.testing.assert_array_equal(_run_fused(proto, x, shape), np.where(x > 0, x, np.float32(-1e9)))


def test_standalone_transpose_runs_as_its_own_jit_kernel() -> None:
    shape = (2, 3, 17)
    proto = _model([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 1])], shape, (2, 17, 3))
    cm = snippets_core.compile_model(proto, target="x86_64_avx512")
    assert cm.placement()[0][1:] == ("Subgraph", "x86_64_avx512"), cm.describe()
    from snippets_x86_64.tokenization_callback import OWN_KERNEL

    assert "JIT transpose" in OWN_KERNEL["Transpose"]  # why the eltwise tokenizer leaves it to its own Subgraph
    x = _x(shape)
    np.testing.assert_array_equal(cm({"x": x})["y"], x.transpose(0, 2, 1))


@pytest.mark.parametrize("axis", [0, 1, 2, -2])
def test_softmax_on_an_inner_axis_runs_in_a_kernel_between_transposes(axis: int) -> None:
    shape = (3, 5, 19, 33)
    proto = _model([helper.make_node("Softmax", ["x"], ["y"], axis=axis)], shape, shape)
    cm = snippets_core.compile_model(proto, target="x86_64_avx512", config={"num_threads": 1})
    # the Softmax kernel between two JIT transpose Subgraphs
    assert sorted((op, w) for _, op, w in cm.placement()) == [("Subgraph", "x86_64_avx512")] * 3, cm.describe()
    x = _x(shape)
    out = guarded_array(shape, np.float32)
    cm({"x": guarded_copy(x)}, outputs={"y": out})
    np.testing.assert_allclose(out, _softmax64(x.astype(np.float64), axis), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("shape", "groups"), [((2, 8, 5, 7), 4), ((1, 6, 19), 3), ((3, 4, 2, 2, 3), 2)])
def test_group_normalization_runs_as_two_kernels_and_views(shape: tuple[int, ...], groups: int) -> None:
    rng = np.random.default_rng(5)
    c = shape[1]
    scale, bias = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    proto = _model([helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=groups, epsilon=1e-5)],
                   shape, shape, {"s": scale, "b": bias}, opset=21)
    cm = snippets_core.compile_model(proto, target="x86_64_avx512", config={"num_threads": 1})
    assert sorted(w for _, _, w in cm.placement()) == ["view", "view", "x86_64_avx512", "x86_64_avx512"], cm.describe()
    x = _x(shape) + 10
    out = guarded_array(shape, np.float32)
    cm({"x": guarded_copy(x)}, outputs={"y": out})
    t = x.astype(np.float64).reshape(shape[0], groups, -1)
    normed = ((t - t.mean(-1, keepdims=True)) / np.sqrt(t.var(-1, keepdims=True) + 1e-5)).reshape(shape)
    per_channel = (c,) + (1,) * (len(shape) - 2)
    want = normed * scale.reshape(per_channel) + bias.reshape(per_channel)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("axes", "keep_dims"), [([2, 3], 1), ([-1], 0), ([1, 2, 3], 0)])
def test_reductions_over_trailing_axes_run_as_row_kernels_between_views(axes: list[int], keep_dims: int) -> None:
    shape = (2, 5, 7, 9)
    want = _x(shape).astype(np.float64).mean(axis=tuple(a % 4 for a in axes), keepdims=bool(keep_dims))
    proto = _model([helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=keep_dims)], shape, want.shape,
                   {"axes": np.array(axes, np.int64)})
    cm = snippets_core.compile_model(proto, target="x86_64_avx512", config={"num_threads": 1})
    assert sorted(w for _, _, w in cm.placement()) == ["view", "view", "x86_64_avx512"], cm.describe()
    out = guarded_array(want.shape, np.float32)
    cm({"x": guarded_copy(_x(shape))}, outputs={"y": out})
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", ["x86_64_avx512", "interpreter"])
@pytest.mark.parametrize("mask_ops", [("Sub", "Mul"), ("Mul", "Mul"), ("Mul",)])
def test_attention_mask_branches_fused_into_mha(target: str, mask_ops: tuple[str, ...]) -> None:
    """scores + mask_branch(m) before Softmax, m [B,1,1,S] as exports expand an attention_mask. The branch
    ops next to the Add join the MHA; a longer branch must still give the right values (it once did not)."""
    b, h, s, d = 1, 2, 32, 16
    nodes = [helper.make_node("MatMul", ["q", "k"], ["scores"])]
    prev = "m"
    for i, op in enumerate(mask_ops):
        nodes.append(helper.make_node(op, [prev, "c1" if op == "Sub" else "c2"], [f"b{i}"]))
        prev = f"b{i}"
    nodes += [helper.make_node("Add", ["scores", prev], ["t"]), helper.make_node("Softmax", ["t"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["y"])]
    shapes = {"q": [b, h, s, d], "k": [b, h, d, s], "v": [b, h, s, d], "m": [b, 1, 1, s]}
    graph = helper.make_graph(nodes, "mha", [helper.make_tensor_value_info(n, TensorProto.FLOAT, sh)
                                             for n, sh in shapes.items()],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, h, s, d])],
                              initializer=[numpy_helper.from_array(np.array(1, np.float32), "c1"),
                                           numpy_helper.from_array(np.array(-30, np.float32), "c2")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    rng = np.random.default_rng(7)
    feeds = {n: rng.standard_normal(sh).astype(np.float32) for n, sh in shapes.items()}
    feeds["m"] = (rng.random(shapes["m"]) > 0.3).astype(np.float32)
    cm = snippets_core.compile_model(proto, target=target, config={"num_threads": 1})
    assert any("MatMul" in [o.type_name for o in sg.body_ops] for sg in cm.subgraphs), cm.describe()
    branch = feeds["m"].astype(np.float64)
    for op in mask_ops:
        branch = branch - 1 if op == "Sub" else branch * -30
    t = feeds["q"].astype(np.float64) @ feeds["k"] + branch
    e = np.exp(t - t.max(-1, keepdims=True))
    np.testing.assert_allclose(cm(feeds)["y"], (e / e.sum(-1, keepdims=True)) @ feeds["v"], rtol=1e-4, atol=5e-5)

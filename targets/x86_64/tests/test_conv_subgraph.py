"""Convolution primitives end to end: ONNX models compiled for x86_64_avx512 against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from snippets_core.errors import SnippetsError
from snippets_core.runtime.compiled_model import compile_model

pytestmark = pytest.mark.avx512
ort = pytest.importorskip("onnxruntime")


def _init(name: str, a: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(a.astype(np.float32), name)


def resnet_block(c: int = 24, m: int = 24, hw: int = 15, seed: int = 0) -> onnx.ModelProto:
    """conv-bn-relu-conv-bn-add-relu-maxpool, the shape of a ResNet basic block."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def conv_bn(x: str, y: str, cin: int, cout: int, k: int, pads: list[int], tag: str) -> None:
        inits.append(_init(f"w{tag}", rng.standard_normal((cout, cin, k, k)) * 0.2))
        inits.append(_init(f"b{tag}", rng.standard_normal(cout)))
        for p, lo, hi in (("s", 0.5, 2), ("bb", -1, 1), ("mu", -1, 1), ("var", 0.5, 2)):
            inits.append(_init(f"{p}{tag}", rng.uniform(lo, hi, cout)))
        nodes.append(helper.make_node("Conv", ["x" if x == "x" else x, f"w{tag}", f"b{tag}"], [f"c{tag}"],
                                      pads=pads, kernel_shape=[k, k]))
        nodes.append(helper.make_node("BatchNormalization", [f"c{tag}", f"s{tag}", f"bb{tag}", f"mu{tag}",
                                                             f"var{tag}"], [y], epsilon=1e-5))

    conv_bn("x", "bn1", c, m, 3, [1, 1, 1, 1], "1")
    nodes.append(helper.make_node("Relu", ["bn1"], ["r1"]))
    conv_bn("r1", "bn2", m, c, 3, [0, 1, 2, 1], "2")
    nodes.append(helper.make_node("Add", ["bn2", "x"], ["sum"]))
    nodes.append(helper.make_node("Relu", ["sum"], ["r2"]))
    nodes.append(helper.make_node("MaxPool", ["r2"], ["y"], kernel_shape=[2, 2], strides=[2, 2]))
    g = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list("nchw"))], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _kernels(cm) -> list:  # type: ignore[no-untyped-def]
    """The compiled model's Subgraphs but the reorders AssignLayouts inserted at the model's edges."""
    return [sg for sg in cm.subgraphs if not sg.rt_info.get("SnippetsReorder")]


def _reorders(cm) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """(from, to) layouts of every Reorder in the compiled model, in execution order."""
    return [(sg.body_ops[0].src, sg.body_ops[0].dst) for sg in cm.subgraphs if sg.rt_info.get("SnippetsReorder")]


def _run_both(model: onnx.ModelProto, feeds: dict[str, np.ndarray], threads: int = 2) -> tuple:
    cm = compile_model(model.SerializeToString(), "x86_64_avx512", {"num_threads": threads})
    got = cm(feeds)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    return cm, got, want


def test_resnet_block_runs_two_conv_primitives() -> None:
    model = resnet_block()
    x = np.random.default_rng(1).standard_normal((2, 24, 15, 15)).astype(np.float32)
    cm, got, want = _run_both(model, {"x": x})
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-4, atol=1e-4)
    convs = [sg for sg in cm.subgraphs if sg.rt_info.get("SnippetsConvolution")]
    assert len(convs) == 2
    # conv + bias + BN (Multiply, Add) + Relu; conv + bias + BN + residual Add + Relu + MaxPool: all in the kernels
    assert [len(sg.body_ops) for sg in convs] == [5, 7]
    # the whole block runs on kernels: two conv primitives (the second runs the pool kernel after its conv: a
    # residual before the pool keeps it out of the epilogue), the reorders at the model's edges
    assert [w for _, _, w in cm.placement()] == ["x86_64_avx512"] * 4
    assert "not fused: a residual Add before the pool" in convs[1].rt_info["SnippetsConvKernel"]
    assert _reorders(cm) == [("plain", "NHWC"), ("NHWC", "plain")]


def _single_conv(x_shape: tuple, w_shape: tuple, post: list[tuple], **attrs: object) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    inits = [_init("w", rng.standard_normal(w_shape))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], **attrs)]
    cur = "c"
    for i, (op, kw) in enumerate(post):
        nodes.append(helper.make_node(op, [cur], [f"p{i}"], **kw))
        cur = f"p{i}"
    nodes[-1].output[0] = "y"
    g = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list("nchw"))], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])


@pytest.mark.parametrize("post", [
    [("LeakyRelu", {"alpha": 0.1})],
    [("HardSwish", {})],
    [("Clip", {})],
    [("Relu", {}), ("Sigmoid", {})],
    [("Clip", {}), ("Sigmoid", {}), ("LeakyRelu", {"alpha": 2.0})],
])
def test_activations(post: list[tuple]) -> None:
    model = _single_conv((1, 17, 9, 11), (20, 17, 3, 3), post, pads=[1, 1, 1, 1])
    x = np.random.default_rng(4).standard_normal((1, 17, 9, 11)).astype(np.float32) * 3
    cm, got, want = _run_both(model, {"x": x})
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-4, atol=1e-4)
    assert any(sg.rt_info.get("SnippetsConvolution") for sg in cm.subgraphs)


@pytest.mark.parametrize("attrs", [
    {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"auto_pad": "SAME_LOWER", "strides": [2, 1]},
    {"auto_pad": "VALID", "dilations": [2, 2]},
    {"pads": [0, 2, 1, 0], "group": 3},
])
def test_auto_pad_groups(attrs: dict) -> None:
    model = _single_conv((1, 9, 13, 10), (12, 9 // attrs.get("group", 1), 3, 3), [], **attrs)
    x = np.random.default_rng(5).standard_normal((1, 9, 13, 10)).astype(np.float32)
    _, got, want = _run_both(model, {"x": x}, threads=1)
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-4, atol=1e-4)


def test_silu_as_exported_is_one_swish_post_op() -> None:
    """x * Sigmoid(x) after a conv (SiLU as PyTorch exports it): both ops inside the conv primitive."""
    rng = np.random.default_rng(8)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[2, 2, 2, 2]),
             helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    g = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list("nchw"))],
                          [_init("w", rng.standard_normal((35, 6, 5, 5)))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    x = rng.standard_normal((1, 6, 8, 8)).astype(np.float32)
    cm, got, want = _run_both(model, {"x": x})
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-4, atol=1e-4)
    assert [n.type_name for n in _kernels(cm)[0].body_ops] == ["Convolution", "Sigmoid", "Multiply"]
    assert [w for _, _, w in cm.placement()] == ["x86_64_avx512"] * 3


def test_3d_conv_falls_back_with_reason() -> None:
    rng = np.random.default_rng(6)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "c3",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list("ncdhw"))],
                          [_init("w", rng.standard_normal((3, 2, 2, 2, 2)))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    x = rng.standard_normal((1, 2, 4, 4, 4)).astype(np.float32)
    cm, got, want = _run_both(model, {"x": x})
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-4, atol=1e-4)
    assert "3-D convolution; the JIT kernel is 2-D" in cm.describe()


def test_resnet_block_reorders_only_at_the_model_edges() -> None:
    """AssignLayouts reorders the model's NCHW input once (conv1 and conv2's residual Add both read the NHWC
    copy) and the pool's NHWC output once: conv2 reads conv1's output, the pool conv2's, with no reorder."""
    model = resnet_block(c=32, m=32, hw=8)
    x = np.random.default_rng(2).standard_normal((2, 32, 8, 8)).astype(np.float32)
    cm, got, want = _run_both(model, {"x": x})
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-4, atol=1e-4)
    assert _reorders(cm) == [("plain", "NHWC"), ("NHWC", "plain")]
    runs = [st.run.executor for st in cm._steps if hasattr(st.run, "executor")]
    assert len(runs) == 2  # conv, conv then its pool
    cm({"x": x})
    # every primitive found its inputs in NHWC: none made a numpy reorder of its own
    assert [ex.reorders for ex in runs] == [0, 0]


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [0, 1, 1, 2], "dilations": [2, 1]}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 0}),
    ("AveragePool", {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [0, 1, 1, 0], "ceil_mode": 1,
                     "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
])
def test_pooling_primitives(op: str, attrs: dict) -> None:
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "pool",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 37, 12, 13])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list("nchw"))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    x = np.random.default_rng(10).standard_normal((2, 37, 12, 13)).astype(np.float32)
    cm, got, want = _run_both(model, {"x": x})
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-5, atol=1e-5)
    assert [sg.rt_info.get("SnippetsPooling") for sg in _kernels(cm)] == [True]
    assert [w for _, _, w in cm.placement()] == ["x86_64_avx512"] * 3


def test_inspect_says_why_a_conv_is_not_a_primitive(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from snippets_core.cli import main

    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="c3d")], "c3",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list("ncdhw"))],
                          [_init("w", np.ones((3, 2, 2, 2, 2)))])
    path = tmp_path / "c3.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    assert main(["inspect", str(path), "--target", "x86_64_avx512"]) == 0
    assert "not a conv primitive: it is a 3-D convolution; the JIT kernel is 2-D" in capsys.readouterr().out


def test_channel_concat_of_primitives_keeps_nhwc() -> None:
    """An Inception-style join: two convs and a pool concatenated along the channels, then a 1x1 conv that
    reads the concatenation with no reorder."""
    rng = np.random.default_rng(11)
    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["a"], kernel_shape=[1, 1]),
        helper.make_node("Conv", ["x", "wb"], ["b"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["a", "b", "p"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "wc"], ["y"], kernel_shape=[1, 1]),
    ]
    inits = [_init("wa", rng.standard_normal((5, 7, 1, 1))), _init("wb", rng.standard_normal((19, 7, 3, 3))),
             _init("wc", rng.standard_normal((9, 31, 1, 1)))]
    g = helper.make_graph(nodes, "cat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7, 6, 9])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list("nchw"))], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    x = rng.standard_normal((2, 7, 6, 9)).astype(np.float32)
    cm, got, want = _run_both(model, {"x": x})
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-4, atol=1e-4)
    assert all(w == "x86_64_avx512" for _, _, w in cm.placement())
    # x is reordered once for the three primitives that read it, the concat is read in place
    assert _reorders(cm) == [("plain", "NHWC"), ("NHWC", "plain")]
    assert [st.run.executor.reorders for st in cm._steps if hasattr(st.run, "executor")] == [0] * 5


def test_dynamic_batch_and_image_size_compile_no_kernel_per_shape() -> None:
    """N, H, W symbolic: the conv primitive keeps one kernel for every input shape; a new shape makes its work
    table (kept per shape) and compiles nothing; a shape contradicting the fixed channel count is a typed error."""
    rng = np.random.default_rng(13)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    g = helper.make_graph(nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 5, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 18, "h", "w"])],
                          [_init("w", rng.standard_normal((18, 5, 3, 3))), _init("b", rng.standard_normal(18))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    cm = compile_model(model.SerializeToString(), "x86_64_avx512", {"num_threads": 2})
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (step,) = [st for st in cm._steps if st.node.rt_info.get("SnippetsConvolution")]
    for shape in [(1, 5, 7, 9), (3, 5, 4, 13), (1, 5, 7, 9), (2, 5, 30, 1)]:
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(cm({"x": x})["y"], sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert sorted(step.run.executors) == [(1, 5, 7, 9), (2, 5, 30, 1), (3, 5, 4, 13)]
    assert step.run.compiles == 0
    with pytest.raises(SnippetsError, match="dim 1 is 4 where the model fixes 5"):
        cm({"x": np.zeros((1, 4, 7, 9), np.float32)})


def test_pre_activation_bn_relu_is_applied_on_the_input_copy() -> None:
    """DenseNet/pre-activation ResNet: BatchNormalization -> Relu -> Conv. The BN's Multiply/Add and the Relu
    join the conv primitive (applied while the input is copied in; the padding stays zero)."""
    rng = np.random.default_rng(14)
    c = 13
    nodes = [
        helper.make_node("BatchNormalization", ["x", "s", "b", "mu", "var"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("Conv", ["r", "w"], ["y"], pads=[1, 1, 1, 1]),
    ]
    inits = [_init("s", rng.uniform(0.5, 2, c)), _init("b", rng.standard_normal(c)),
             _init("mu", rng.standard_normal(c)), _init("var", rng.uniform(0.5, 2, c)),
             _init("w", rng.standard_normal((20, c, 3, 3)))]
    g = helper.make_graph(nodes, "pre", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 6, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list("nchw"))], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    x = rng.standard_normal((1, c, 6, 7)).astype(np.float32)
    cm, got, want = _run_both(model, {"x": x})
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-4, atol=1e-4)
    assert [n.type_name for n in _kernels(cm)[0].body_ops] == ["Multiply", "Add", "Relu", "Convolution"]
    assert [w for _, _, w in cm.placement()] == ["x86_64_avx512"] * 3


def test_per_channel_prelu() -> None:
    rng = np.random.default_rng(15)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("PRelu", ["c", "a"], ["y"])]
    g = helper.make_graph(nodes, "prelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list("nchw"))],
                          [_init("w", rng.standard_normal((21, 4, 3, 3))), _init("a", rng.uniform(0, 1, (21, 1, 1)))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    x = rng.standard_normal((1, 4, 5, 6)).astype(np.float32)
    cm, got, want = _run_both(model, {"x": x})
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-4, atol=1e-4)
    assert [n.type_name for n in _kernels(cm)[0].body_ops] == ["Convolution", "PRelu"]


def test_model_outputs_of_layout_keeping_primitives_are_c_contiguous():
    """A conv primitive hands on an NCHW view of its NHWC array; the model's caller gets a C-contiguous array, as
    from onnxruntime (a strided output breaks code that passes ``.data`` on, e.g. to ctypes or a file)."""
    import onnx
    from onnx import TensorProto
    from onnx import helper as oh

    from snippets_core import compile_model

    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    graph = oh.make_graph(
        [oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), oh.make_node("Relu", ["c"], ["y"])], "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 10, 10])],
        [onnx.numpy_helper.from_array(w, "w")],
    )
    cm = compile_model(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), target="x86_64_avx512")
    assert any(st.where == "x86_64_avx512" and "Convolution" in [op.type_name for op in st.node.body_ops]
               for st in cm._steps)
    x = rng.standard_normal((1, 8, 10, 10)).astype(np.float32)
    y = cm({"x": x})["y"]
    assert y.flags.c_contiguous
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((1, 16, 10, 10))
    for i in range(3):
        for j in range(3):
            ref += np.einsum("nchw,oc->nohw", xp[:, :, i:i + 10, j:j + 10], w[:, :, i, j].astype(np.float64))
    np.testing.assert_allclose(y, np.maximum(ref, 0), rtol=1e-4, atol=1e-4)


def dynamic_cnn(c: int = 3, m: int = 24, seed: int = 3) -> onnx.ModelProto:
    """N, H, W symbolic: a 3x3 RGB stem (planar), MaxPool 3x3 s2, a depthwise 3x3 + 1x1 with a residual, AvgPool
    2x2 (ceil_mode), a 3x3 stride-2 conv, GlobalAveragePool: every primitive kind a small CNN has."""
    rng = np.random.default_rng(seed)
    inits = [_init("w0", rng.standard_normal((m, c, 3, 3)) * 0.3), _init("b0", rng.standard_normal(m)),
             _init("wd", rng.standard_normal((m, 1, 3, 3)) * 0.3), _init("w1", rng.standard_normal((m, m, 1, 1)) * 0.2),
             _init("w2", rng.standard_normal((2 * m, m, 3, 3)) * 0.1)]
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("MaxPool", ["r0"], ["p0"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p0", "wd"], ["d0"], pads=[1, 1, 1, 1], group=m),
             helper.make_node("Relu", ["d0"], ["d1"]),
             helper.make_node("Conv", ["d1", "w1"], ["e0"]),
             helper.make_node("Add", ["e0", "p0"], ["s0"]),
             helper.make_node("AveragePool", ["s0"], ["a0"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
             helper.make_node("Conv", ["a0", "w2"], ["f0"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["f0"], ["y"])]
    g = helper.make_graph(nodes, "dyn_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", c, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2 * m, 1, 1])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_a_dynamic_cnn_compiles_nothing_for_new_shapes() -> None:
    """Every primitive of a CNN with dynamic N, H, W reads its geometry from its tables: random shapes build no
    kernel (a pool's or depthwise walk's kernel has the border code of every size modulo its strides, the table
    picks); each matches onnxruntime."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from snippets_x86_64.cache import FUNCTION_CACHE

    model = dynamic_cnn()
    cm = compile_model(model.SerializeToString(), "x86_64_avx512", {"num_threads": 2})
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    kinds = {op.type_name for sg in cm.subgraphs for op in sg.body_ops}
    assert {"Convolution", "MaxPool", "AvgPool", "ReduceMean"} <= kinds
    assert not [st for st in cm._steps if st.node.type_name not in ("Subgraph", "Reshape")]
    rng = np.random.default_rng(5)

    def built() -> int:
        per_shape = sum(getattr(getattr(st.run, "__self__", st.run), "compiles", 0) for st in cm._steps)
        return FUNCTION_CACHE.stats["miss"] + FUNCTION_CACHE.stats["disk"] + per_shape

    def check(n: int, h: int, w: int) -> None:
        x = rng.standard_normal((n, 3, h, w)).astype(np.float32)
        np.testing.assert_allclose(cm({"x": x})["y"], sess.run(None, {"x": x})[0], rtol=2e-4, atol=2e-4)

    before = built()  # the kernels are made at compile time

    @given(st.integers(1, 3), st.integers(24, 45), st.integers(24, 45))
    @settings(max_examples=12, deadline=None)
    def new_shape(n: int, h: int, w: int) -> None:
        check(n, h, w)

    new_shape()
    assert built() == before
    text = cm.describe()
    assert "one conv kernel for every N, H, W" in text and "0 kernel(s) built after the first shape" in text


def test_dynamic_lrn_and_channel_concat_are_primitives() -> None:
    """AlexNet's LRN and Inception's channel Concat with dynamic N, H, W: primitives too (the LRN kernel walks
    pixels, the Concat writes slices), a new shape builds nothing; against onnxruntime."""
    from snippets_x86_64.cache import FUNCTION_CACHE

    rng = np.random.default_rng(8)
    inits = [_init("w0", rng.standard_normal((20, 3, 3, 3)) * 0.3), _init("wa", rng.standard_normal((8, 20, 1, 1))),
             _init("wb", rng.standard_normal((12, 20, 3, 3)) * 0.2)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("LRN", ["r0"], ["l0"], size=5, alpha=1e-4, beta=0.75, bias=1.0),
             helper.make_node("Conv", ["l0", "wa"], ["a"]),
             helper.make_node("Conv", ["l0", "wb"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
             helper.make_node("MaxPool", ["cat"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    g = helper.make_graph(nodes, "lrn_cat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 20, "p", "q"])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    cm = compile_model(model.SerializeToString(), "x86_64_avx512", {"num_threads": 2})
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    kinds = {k for sg in cm.subgraphs for k in ("SnippetsPooling", "SnippetsConcat") if sg.rt_info.get(k)}
    assert kinds == {"SnippetsPooling", "SnippetsConcat"} and "LRN" in {op.type_name for sg in cm.subgraphs
                                                                        for op in sg.body_ops}
    before = None
    for n, h, w in [(1, 16, 18), (2, 20, 22), (3, 12, 30), (1, 24, 26)]:
        x = rng.standard_normal((n, 3, h, w)).astype(np.float32)
        np.testing.assert_allclose(cm({"x": x})["y"], sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
        built = FUNCTION_CACHE.stats["miss"] + FUNCTION_CACHE.stats["disk"]
        assert before is None or built == before
        before = built


def test_dynamic_primitives_take_an_empty_batch() -> None:
    """N = 0 through a conv, a pool and a global pool with dynamic N, H, W: an empty result of the right shape."""
    model = dynamic_cnn()
    cm = compile_model(model.SerializeToString(), "x86_64_avx512", {"num_threads": 2})
    x = np.random.default_rng(2).standard_normal((1, 3, 20, 21)).astype(np.float32)
    cm({"x": x})
    assert cm({"x": np.zeros((0, 3, 20, 21), np.float32)})["y"].shape == (0, 48, 1, 1)


def test_shape_cache_keeps_the_most_recent_shapes(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A ShapeCache holds SHAPE_CACHE shapes, the least recently used dropped first; a dropped shape is made again."""
    from snippets_x86_64 import cache

    monkeypatch.setattr(cache, "SHAPE_CACHE", 2)
    made: list[tuple[int, ...]] = []
    sc = cache.ShapeCache(lambda shape, first: made.append(shape) or shape)
    for shape in [(1,), (2,), (1,), (3,), (1,), (2,)]:
        assert sc.executor(shape) == shape
    assert made == [(1,), (2,), (3,), (2,)] and list(sc.executors) == [(1,), (2,)]
    # the last call's shape again: the same executor, nothing made; a dropped one is made again
    for shape in [(2,), (2,), (3,), (1,)]:
        assert sc.executor(shape) == shape
    assert made == [(1,), (2,), (3,), (2,), (3,), (1,)] and list(sc.executors) == [(3,), (1,)]


def test_dynamic_conv_holds_its_weights_once() -> None:
    """A dynamic conv primitive releases its body's weight constants (packed into the kernel's: held once) and
    still answers what the reference answered for it: an empty batch (no rows for the kernel), a residual of
    batch 1 broadcast over the output's batch; a residual that does not broadcast is a typed error."""
    from snippets_core.ir.ops.subgraph import CONSTANTS_RELEASED

    rng = np.random.default_rng(21)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "r"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    g = helper.make_graph(nodes, "res", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8, "h", "w"]),
                                         helper.make_tensor_value_info("r", TensorProto.FLOAT, ["k", 16, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 16, "h", "w"])],
                          [_init("w", rng.standard_normal((16, 8, 3, 3))), _init("b", rng.standard_normal(16))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    cm = compile_model(model.SerializeToString(), "x86_64_avx512", {"num_threads": 2})
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (step,) = [st for st in cm._steps if st.node.rt_info.get("SnippetsConvolution")]
    assert CONSTANTS_RELEASED in step.node.rt_info and step.run.plan.residual is not None
    body_weights = [n.value for n in step.node.body.get_ordered_ops() if n.type_name == "Constant"
                    and getattr(n, "value", None) is not None and n.value.shape == (16, 8, 3, 3)]
    assert body_weights and all(v.strides == (0, 0, 0, 0) for v in body_weights)  # placeholders, no memory
    assert step.run.plan.w.strides == (0, 0, 0, 0) and step.run._first.w is None
    for n, k, h, w in [(2, 2, 9, 7), (3, 1, 9, 7), (0, 1, 5, 6), (0, 0, 4, 4), (1, 1, 12, 5)]:
        feeds = {"x": rng.standard_normal((n, 8, h, w)).astype(np.float32),
                 "r": rng.standard_normal((k, 16, h, w)).astype(np.float32)}
        got, want = cm(feeds)["y"], sess.run(None, feeds)[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # batches that do not broadcast: the call's broadcast check names both inputs before the conv runs
    with pytest.raises(SnippetsError, match=r"broadcasts k = 2 \(input 'r' dim 0\) with n = 3 \(input 'x' dim 0\)"):
        cm({"x": np.zeros((3, 8, 5, 5), np.float32), "r": np.zeros((2, 16, 5, 5), np.float32)})

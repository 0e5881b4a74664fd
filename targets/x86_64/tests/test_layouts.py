"""Layouts on x86_64_avx512: AssignLayouts keeps the conv primitives' NHWC between them, the reorders it inserts
run as JIT transposes (checked against numpy under guard pages), and `snippets inspect` shows them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from snippets_core.ir.layout import INPUT_LAYOUTS, NHWC, OUTPUT_LAYOUTS, PLAIN
from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64.guarded import guarded_array
from snippets_x86_64.reorder import ReorderExecutor, compile_reorder_subgraph

pytestmark = pytest.mark.avx512
LIGHT = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"


def _reorders(cm) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return [(sg.body_ops[0].src, sg.body_ops[0].dst) for sg in cm.subgraphs if sg.rt_info.get("SnippetsReorder")]


def _conv_model(dims: tuple[int | str, ...] = (2, 5, 9, 11)) -> onnx.ModelProto:
    """conv -> Exp -> conv: Exp is no conv post-op, so it is an element-wise Subgraph between two primitives."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Exp", ["c1"], ["e"]),
             helper.make_node("Conv", ["e", "w2"], ["y"], pads=[1, 1, 1, 1])]
    inits = [numpy_helper.from_array((rng.standard_normal((20, 5, 3, 3)) * 0.1).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((7, 20, 3, 3)) * 0.1).astype(np.float32), "w2")]
    g = helper.make_graph(nodes, "cec", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dims[0], 7, *dims[2:]])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_a_dynamic_cnn_reorders_with_no_kernel_per_shape() -> None:
    """The model above with dynamic N, H, W: its reorders are dynamic (one tile kernel, built at compile time); the
    outputs match onnxruntime at several shapes and no shape builds a reorder kernel."""
    from snippets_x86_64.reorder import DynamicReorder

    ort = pytest.importorskip("onnxruntime")
    model = _conv_model(("N", 5, "H", "W")).SerializeToString()
    cm = compile_model(model, "x86_64_avx512")
    reorders = [st.run for st in cm._steps if isinstance(st.run, DynamicReorder)]
    assert reorders
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for n, h, w in [(1, 9, 11), (2, 5, 6), (1, 17, 3)]:
        x = np.random.default_rng(h * w).standard_normal((n, 5, h, w)).astype(np.float32)
        np.testing.assert_allclose(cm({"x": x})["y"], sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert all(r.compiles == 0 for r in reorders)


def test_resnet50_reorders_nothing() -> None:
    """ResNet-50 from onnx's backend test data: no reorder (the 3-channel stem reads the NCHW input planar, the
    target's ``preferred_input_layout``); every other conv and pool reads its producer's NHWC memory, and the global pool's [1, 2048, 1, 1] output is the same memory in both layouts, so
    the classifier reads it with none. The output matches the model's stored output."""
    path = LIGHT / "light_resnet50.onnx"
    cm = compile_model(str(path), "x86_64_avx512", {"num_threads": 2})
    assert _reorders(cm) == []
    n = 1 * 3 * 224 * 224
    x = (np.arange(n).reshape(1, 3, 224, 224) / n).astype(np.float32)
    (y,) = cm({"gpu_0/data_0": x}).values()
    ref = numpy_helper.to_array(onnx.load_tensor(str(path.with_suffix("")) + "_output_0.pb"))
    np.testing.assert_allclose(y, ref, rtol=1e-3, atol=1e-6)
    primitives = [st.run.executor for st in cm._steps if hasattr(getattr(st.run, "executor", None), "reorders")]
    # 53 convs and 2 pools in 53 steps: the stem's MaxPool and the last conv's AvgPool run in their conv's step
    assert len(primitives) == 53 and all(ex.reorders == 0 for ex in primitives)


def test_an_elementwise_subgraph_between_primitives_runs_on_nhwc() -> None:
    ort = pytest.importorskip("onnxruntime")
    model = _conv_model()
    cm = compile_model(model.SerializeToString(), "x86_64_avx512", {"num_threads": 2})
    (exp,) = [sg for sg in cm.subgraphs if [op.type_name for op in sg.body_ops] == ["Exp"]]
    assert exp.rt_info["SnippetsInputLayouts"] == ("NHWC",) and exp.rt_info["SnippetsOutputLayouts"] == ("NHWC",)
    assert _reorders(cm) == [("plain", "NHWC"), ("NHWC", "plain")]
    x = np.random.default_rng(4).standard_normal((2, 5, 9, 11)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(cm({"x": x})["y"], want, rtol=1e-4, atol=1e-4)
    assert all(w == "x86_64_avx512" for _, _, w in cm.placement())
    assert [st.run.executor.reorders for st in cm._steps if st.node.rt_info.get("SnippetsConvolution")] == [0, 0]


def test_a_per_channel_elementwise_subgraph_between_primitives_runs_on_nhwc() -> None:
    """conv -> Exp -> Multiply by a per-channel Constant -> (conv, model output): the Exp-Multiply Subgraph is
    compiled in NHWC order (the constant laid out as [1, 1, 1, C] once), so conv2 reads it with no reorder; the
    model's two outputs are the only other reorders."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(6)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Exp", ["c1"], ["e"]),
             helper.make_node("Mul", ["e", "k"], ["z"]),
             helper.make_node("Conv", ["z", "w2"], ["y"], pads=[1, 1, 1, 1])]
    inits = [numpy_helper.from_array((rng.standard_normal((20, 5, 3, 3)) * 0.1).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.uniform(0.5, 2, (20, 1, 1)).astype(np.float32), "k"),
             numpy_helper.from_array((rng.standard_normal((7, 20, 3, 3)) * 0.1).astype(np.float32), "w2")]
    g = helper.make_graph(nodes, "cmc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 9, 11])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 7, 9, 11]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 20, 9, 11])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    cm = compile_model(model.SerializeToString(), "x86_64_avx512", {"num_threads": 2})
    (eltwise,) = [sg for sg in cm.subgraphs if [op.type_name for op in sg.body_ops] == ["Exp", "Multiply"]]
    assert eltwise.rt_info["SnippetsInputLayouts"] == ("NHWC", "plain")  # the Constant k is laid out once
    assert eltwise.rt_info["SnippetsOutputLayouts"] == ("NHWC",)
    assert _reorders(cm) == [("plain", "NHWC"), ("NHWC", "plain"), ("NHWC", "plain")]
    x = rng.standard_normal((2, 5, 9, 11)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = cm({"x": x})
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got["z"], want[1], rtol=1e-4, atol=1e-4)
    assert all(w == "x86_64_avx512" for _, _, w in cm.placement())


def test_disabled_assign_layouts_leaves_the_primitives_to_reorder_for_themselves() -> None:
    model = _conv_model()
    cm = compile_model(model.SerializeToString(), "x86_64_avx512", {"disabled_passes": ["assign-layouts"]})
    assert _reorders(cm) == []
    x = np.random.default_rng(5).standard_normal((2, 5, 9, 11)).astype(np.float32)
    ref = compile_model(model.SerializeToString(), "reference")({"x": x})["y"]
    np.testing.assert_allclose(cm({"x": x})["y"], ref, rtol=1e-4, atol=1e-4)


def test_inspect_shows_edge_layouts_and_reorders(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from snippets_core.cli import main

    path = tmp_path / "cec.onnx"
    onnx.save(_conv_model(), str(path))
    assert main(["inspect", str(path), "--target", "x86_64_avx512"]) == 0
    text = capsys.readouterr().out
    assert "reorders (2, inserted by assign-layouts):" in text
    assert "x/reorder_NHWC: x f32[2,5,9,11] plain -> NHWC" in text
    assert "f32[2,20,9,11] NHWC" in text  # the edges between the primitives and the Exp Subgraph
    assert main(["inspect", str(path), "--target", "x86_64_avx512", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert [(r["src"], r["dst"]) for r in info["reorders"]] == [("plain", "NHWC"), ("NHWC", "plain")]
    layouts = {e["from"]: e["layout"] for e in info["edges"]}
    assert layouts["x"] == "plain" and layouts["x/reorder_NHWC"] == "NHWC"
    assert sorted(set(layouts.values())) == ["NHWC", "plain"]
    assert all("layout" in p for sg in info["subgraphs"] for p in sg["inputs"] + sg["outputs"])


SHAPES = [(1, 3, 5, 7), (2, 17, 33, 3), (1, 16, 4, 4), (2, 33, 17, 1), (3, 1, 2, 2), (1, 40, 16, 1), (1, 64, 7, 7)]


@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
@pytest.mark.parametrize("at", ["end", "start"])
@pytest.mark.parametrize("threads", [1, 2])
def test_reorder_kernels_against_numpy_under_guard_pages(shape: tuple[int, ...], at: str, threads: int) -> None:
    """NCHW -> NHWC and back, the source and the destination each flush against a PROT_NONE page: every tile
    tail (rows and columns below 16) stays inside both arrays."""
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    src = guarded_array(shape, np.float32, at)
    src[...] = x
    alloc = lambda s: guarded_array(s, np.float32, at)  # noqa: E731
    to_nhwc = ReorderExecutor(PLAIN, NHWC, shape, np.float32, threads, alloc)
    y = to_nhwc.run(src)
    nhwc = y.transpose(0, 2, 3, 1)
    assert nhwc.flags.c_contiguous
    np.testing.assert_array_equal(nhwc, np.transpose(x, (0, 2, 3, 1)))
    back = ReorderExecutor(NHWC, PLAIN, shape, np.float32, threads, alloc).run(y)
    assert back.flags.c_contiguous
    np.testing.assert_array_equal(back, x)
    assert to_nhwc.copies == 0


def test_empty_tensor_reorders_to_an_empty_tensor() -> None:
    y = ReorderExecutor(PLAIN, NHWC, (0, 3, 4, 4), np.float32).run(np.empty((0, 3, 4, 4), np.float32))
    assert y.shape == (0, 3, 4, 4)


def test_a_reorder_without_a_kernel_runs_on_its_reference_with_the_reason() -> None:
    from snippets_core.config import CompileConfig
    from snippets_core.ir import ElementType
    from snippets_core.ir.ops.io import Parameter
    from snippets_core.passes.assign_layouts import make_reorder

    x = Parameter(ElementType.u8, [1, 3, 4, 4], name="x")
    sg = make_reorder(x.outputs[0], PLAIN, NHWC)
    assert compile_reorder_subgraph(sg, CompileConfig()) is None
    assert sg.rt_info["SnippetsFallbackReason"] == "the JIT reorder moves 4-byte elements, not uint8"


def test_shufflenet_reorders_nothing_and_shuffles_in_nhwc() -> None:
    """ShuffleNet's 16 channel shuffles (Reshape, Transpose, Reshape) become JIT channel permutes on the NHWC
    edges of the convs around them: no reorder (the 3-channel stem reads its input planar); the output matches
    the model's stored output."""
    path = LIGHT / "light_shufflenet.onnx"
    cm = compile_model(str(path), "x86_64_avx512", {"num_threads": 2})
    assert _reorders(cm) == []
    shuffles = [sg for sg in cm.subgraphs if sg.rt_info.get("SnippetsChannelShuffle")]
    assert len(shuffles) == 16
    n = 1 * 3 * 224 * 224
    x = (np.arange(n).reshape(1, 3, 224, 224) / n).astype(np.float32)
    (y,) = cm({"gpu_0/data_0": x}).values()
    ref = numpy_helper.to_array(onnx.load_tensor(str(path.with_suffix("")) + "_output_0.pb"))
    np.testing.assert_allclose(y, ref, rtol=1e-3, atol=1e-6)
    execs = [st.run.executor for st in cm._steps
             if type(getattr(st.run, "executor", None)).__name__ == "ChannelPermute"]
    assert len(execs) == 16 and all(ex.reorders == 0 for ex in execs)


PERMUTE_CASES = [((1, 112, 5, 7), 4), ((2, 240, 3, 3), 3), ((1, 33, 2, 3), 3), ((1, 17, 4, 1), 0), ((3, 8, 2, 2), 2),
                 ((1, 64, 1, 1), 0)]


@pytest.mark.parametrize("shape,groups", PERMUTE_CASES, ids=[f"{'x'.join(map(str, s))}g{g}" for s, g in PERMUTE_CASES])
@pytest.mark.parametrize("at", ["end", "start"])
@pytest.mark.parametrize("threads", [1, 2])
def test_channel_permute_against_numpy_under_guard_pages(shape: tuple[int, ...], groups: int, at: str,
                                                         threads: int) -> None:
    """A shuffle (``groups``) or a random permutation (0) of the channels of an NHWC tensor, the source and the
    destination each flush against a PROT_NONE page: the channel tails' loads and stores stay inside."""
    from snippets_x86_64.channel_shuffle import ChannelPermute, shuffle_permutation

    rng = np.random.default_rng(sum(shape) + groups)
    c = shape[1]
    perm = shuffle_permutation(c, groups) if groups else tuple(int(p) for p in rng.permutation(c))
    x = rng.standard_normal(shape).astype(np.float32)
    n, _, h, w = shape
    src = guarded_array((n, h, w, c), np.float32, at)
    src[...] = x.transpose(0, 2, 3, 1)
    ex = ChannelPermute(perm, shape, threads, lambda s: guarded_array(s, np.float32, at))
    y = ex.run(src.transpose(0, 3, 1, 2))
    assert y.transpose(0, 2, 3, 1).flags.c_contiguous and ex.reorders == 0
    np.testing.assert_array_equal(y, x[:, list(perm)])
    if groups:  # the shuffle as ONNX spells it
        want = x.reshape(n, groups, c // groups, h, w).transpose(0, 2, 1, 3, 4).reshape(shape)
        np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("shape,dtype", [((1, 96, 112, 112), np.float32), ((64, 65), np.float64), ((0, 4), np.float32),
                                         ((7,), np.uint8)])
def test_empty_aligned_starts_on_a_cache_line(shape: tuple[int, ...], dtype: type) -> None:
    """The primitives' outputs start on 64-byte boundaries (numpy's large arrays start 16 bytes past a page)."""
    from snippets_x86_64.aligned import ALIGN, MIN_BYTES, empty_aligned

    a = empty_aligned(shape, dtype)
    assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
    assert a.ctypes.data % ALIGN == 0 or a.nbytes < MIN_BYTES
    a[...] = 1
    assert a.sum() == a.size


GLOBAL_CASES = [(1, 2048, 7, 7), (2, 17, 3, 5), (1, 33, 1, 1), (3, 40, 2, 2), (1, 16, 14, 14), (2, 5, 1, 3),
                (1, 20, 2, 3), (2, 48, 1, 4), (1, 17, 3, 3)]


@pytest.mark.parametrize("shape", GLOBAL_CASES, ids=["x".join(map(str, s)) for s in GLOBAL_CASES])
@pytest.mark.parametrize("mode", ["mean", "max"])
@pytest.mark.parametrize("at", ["end", "start"])
def test_global_pool_kernel_against_numpy_under_guard_pages(shape: tuple[int, ...], mode: str, at: str) -> None:
    """The mean/max over H, W read from NHWC memory flush against a PROT_NONE page, against numpy in float64:
    the channel tail's masked loads stay inside, fewer pixels than accumulator chains too; one kernel for every
    pixel count (it reads them from its table)."""
    from snippets_x86_64.global_pool import GlobalPool

    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    n, c, h, w = shape
    src = guarded_array((n, h, w, c), np.float32, at)
    src[...] = x.transpose(0, 2, 3, 1)
    ex = GlobalPool(shape, mode, (n, c), 2, lambda s: guarded_array(s, np.float32, at))
    y = ex.run(src.transpose(0, 3, 1, 2))
    ref = x.astype(np.float64).mean(axis=(2, 3)) if mode == "mean" else x.max(axis=(2, 3))
    assert y.shape == (n, c) and ex.reorders == 0
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("disabled", [[], ["move-reduction-axes-last"]])
@pytest.mark.parametrize("conv_also_an_output", [False, True])
def test_a_global_pool_after_a_conv_reads_its_nhwc_output(op: str, disabled: list[str],
                                                          conv_also_an_output: bool) -> None:
    """conv -> GlobalAveragePool/GlobalMaxPool -> Flatten: the global pool is the conv kernel's epilogue, or, when
    the conv's output has another reader, a pooling primitive on its NHWC output (as MoveReductionAxesLast
    rewrites it, or not); either way the model reorders only its input (and the conv output it returns)."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node(op, ["c"], ["g"]),
             helper.make_node("Flatten", ["g"], ["y"])]
    inits = [numpy_helper.from_array((rng.standard_normal((40, 5, 3, 3)) * 0.3).astype(np.float32), "w")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 40])]
    if conv_also_an_output:
        outputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 40, 9, 11]))
    g = helper.make_graph(nodes, "gp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 9, 11])],
                          outputs, inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    cm = compile_model(model, "x86_64_avx512", {"num_threads": 2, "disabled_passes": disabled})
    assert _reorders(cm)[0] == ("plain", "NHWC") and len(_reorders(cm)) == 1 + conv_also_an_output
    pools = [sg for sg in cm.subgraphs if sg.rt_info.get("SnippetsPooling")]
    (conv,) = [sg for sg in cm.subgraphs if sg.rt_info.get("SnippetsConvolution")]
    if conv_also_an_output:
        assert len(pools) == 1 and pools[0].rt_info["SnippetsConvKernel"].startswith("global")
    else:
        mode = "mean" if op == "GlobalAveragePool" else "max"
        assert not pools and f"global {mode} pool epilogue" in conv.rt_info["SnippetsConvKernel"]
    x = rng.standard_normal((2, 5, 9, 11)).astype(np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = cm({"x": x})
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-4, atol=1e-5)
    if conv_also_an_output:
        np.testing.assert_allclose(got["c"], want[1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("perm,shuffle", [((0, 2, 1, 3, 4), True), ((0, 1, 2, 4, 3), False)],
                         ids=["channel-shuffle", "swaps-h-and-w"])
def test_reshape_transpose_reshape_after_a_conv(perm: tuple[int, ...], shuffle: bool) -> None:
    """conv (34 channels) -> Reshape [N, 2, 17, H, W] -> Transpose -> Reshape -> conv: a permutation of the
    channels becomes a channel-shuffle primitive on NHWC (no reorder between the convs); one that moves H and W
    is no channel permutation and stays three shape ops on plain edges (reorders around it)."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(7)
    n, c, s = 2, 34, 7
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["c1", "split"], ["r1"]),
             helper.make_node("Transpose", ["r1"], ["t"], perm=list(perm)),
             helper.make_node("Reshape", ["t", "merge"], ["r2"]),
             helper.make_node("Conv", ["r2", "w2"], ["y"], pads=[1, 1, 1, 1])]
    inits = [numpy_helper.from_array((rng.standard_normal((c, 3, 3, 3)) * 0.3).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((5, c, 3, 3)) * 0.1).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array([n, 2, c // 2, s, s], np.int64), "split"),
             numpy_helper.from_array(np.array([n, c, s, s], np.int64), "merge")]
    g = helper.make_graph(nodes, "shuffle", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 3, s, s])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, 5, s, s])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    cm = compile_model(model, "x86_64_avx512", {"num_threads": 2})
    shuffles = [sg for sg in cm.subgraphs if sg.rt_info.get("SnippetsChannelShuffle")]
    assert len(shuffles) == int(shuffle)
    # the output; and around the shape ops (the 3-channel input is read planar by the first conv: no reorder)
    assert len(_reorders(cm)) == (1 if shuffle else 3)
    x = rng.standard_normal((n, 3, s, s)).astype(np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    (y,) = cm({"x": x}).values()
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def _stem_model() -> bytes:
    """An RGB stem: conv 3->16 (3x3, stride 2) + Relu -> MaxPool -> conv 16->8 + Sigmoid: the first conv reads the
    3-channel input as it arrives (NCHW, planar), the rest NHWC."""
    rng = np.random.default_rng(11)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c2"], ["y"])]
    inits = [numpy_helper.from_array((rng.standard_normal((16, 3, 3, 3)) * 0.3).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((8, 16, 3, 3)) * 0.1).astype(np.float32), "w2")]
    g = helper.make_graph(nodes, "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 19, 23])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 5, 6])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


@pytest.mark.parametrize("threads", [1, 2])
def test_a_three_channel_stem_reads_its_input_planar_with_no_reorder(threads: int) -> None:
    """The x86 target's ``preferred_input_layout`` leaves the 3-channel input plain: no reorder at the input (only
    the output's back to plain), the stem conv runs its planar kernel without a copy of its own, and the output
    matches onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    model = _stem_model()
    cm = compile_model(model, "x86_64_avx512", {"num_threads": threads})
    assert _reorders(cm) == [("NHWC", "plain")]
    stem = next(sg for sg in cm.subgraphs if sg.rt_info.get("SnippetsConvolution"))
    assert stem.rt_info[INPUT_LAYOUTS] == (PLAIN.name,) and stem.rt_info[OUTPUT_LAYOUTS] == (NHWC.name,)
    x = np.random.default_rng(12).standard_normal((2, 3, 19, 23)).astype(np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    (y,) = cm({"x": x}).values()
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    convs = [st.run.executor for st in cm._steps if hasattr(getattr(st.run, "executor", None), "kernel_geo")]
    assert convs[0].geo.planar and all(ex.reorders == 0 for ex in convs)


@pytest.mark.parametrize("threads", [1, 2])
def test_cnn_block_example_against_onnxruntime(threads: int) -> None:
    """examples/cnn_block.onnx (RGB stem read planar, no input reorder) at 1 and 2 threads against onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    path = Path(__file__).resolve().parents[3] / "examples" / "cnn_block.onnx"
    cm = compile_model(str(path), "x86_64_avx512", {"num_threads": threads})
    assert ("plain", "NHWC") not in _reorders(cm)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    x = np.random.default_rng(13).standard_normal((1, 3, 64, 64)).astype(np.float32)
    (y,) = cm({name: x}).values()
    np.testing.assert_allclose(y, sess.run(None, {name: x})[0], rtol=1e-4, atol=1e-4)


def test_a_three_channel_conv_after_an_nhwc_producer_reads_it_as_it_lies() -> None:
    """conv 5->3 -> conv 3->8: the second conv could read planar, but its input is NHWC already, so AssignLayouts
    keeps it NHWC (no reorder between the convs: reading plain would cost one); the output matches onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(14)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c1", "w2"], ["y"], pads=[1, 1, 1, 1])]
    inits = [numpy_helper.from_array((rng.standard_normal((3, 5, 3, 3)) * 0.3).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w2")]
    g = helper.make_graph(nodes, "c3", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 10, 9])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 10, 9])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    cm = compile_model(model, "x86_64_avx512", {"num_threads": 2})
    assert _reorders(cm) == [("plain", "NHWC"), ("NHWC", "plain")]  # the model's input and output only
    second = [sg for sg in cm.subgraphs if sg.rt_info.get("SnippetsConvolution")][1]
    assert second.rt_info[INPUT_LAYOUTS] == (NHWC.name,)
    x = rng.standard_normal((1, 5, 10, 9)).astype(np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    (y,) = cm({"x": x}).values()
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


def _classifier(op: str, shared: bool = False) -> bytes:
    """conv -> max pool (NHWC) -> Flatten or Reshape to [N, C*H*W] -> Gemm (transB) or MatMul: a CNN's classifier.
    With ``shared`` the weight also feeds a second MatMul: it cannot be reordered, so the activation is."""
    rng = np.random.default_rng(21)
    flat = (helper.make_node("Flatten", ["p"], ["f"], axis=1) if op != "Reshape"
            else helper.make_node("Reshape", ["p", "shape"], ["f"]))
    fc = (helper.make_node("Gemm", ["f", "wt", "b"], ["y"], transB=1) if op == "Gemm"
          else helper.make_node("MatMul", ["f", "w"], ["y"]))
    nodes = [helper.make_node("Conv", ["x", "wc"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]), flat, fc]
    inits = [numpy_helper.from_array((rng.standard_normal((20, 3, 3, 3)) * 0.3).astype(np.float32), "wc"),
             numpy_helper.from_array(np.array([2, -1], np.int64), "shape"),
             numpy_helper.from_array((rng.standard_normal((10, 20 * 3 * 4)) * 0.1).astype(np.float32), "wt"),
             numpy_helper.from_array((rng.standard_normal((20 * 3 * 4, 10)) * 0.1).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "b")]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])]
    if shared:
        nodes.append(helper.make_node("MatMul", ["y", "w2"], ["z"]))
        nodes.append(helper.make_node("MatMul", ["f", "w"], ["y2"]))
        inits.append(numpy_helper.from_array(rng.standard_normal((10, 4)).astype(np.float32), "w2"))
        outs += [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4]),
                 helper.make_tensor_value_info("y2", TensorProto.FLOAT, [2, 10])]
    g = helper.make_graph(nodes, "cls", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 6, 8])], outs,
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


@pytest.mark.parametrize("op", ["Gemm", "MatMul", "Reshape"])
@pytest.mark.parametrize("shared", [False, True])
def test_a_classifier_flattens_nhwc_with_its_weight_rows_reordered(op: str, shared: bool) -> None:
    """The Flatten before a MatMul with a Constant weight reads the pool's NHWC memory as it lies: AssignLayouts
    puts the weight's K rows in (h, w, c) order once instead of reordering the activation per call; a weight (or
    a flattened value) another node also reads keeps the reorder. Against onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    data = _classifier(op, shared)
    cm = compile_model(data, "x86_64_avx512", {"num_threads": 2})
    flat = [n for n in cm.model.get_ordered_ops() if n.type_name in ("Reshape", "Flatten")]
    assert [n.rt_info[INPUT_LAYOUTS][0] for n in flat] == ["plain" if shared else "NHWC"]
    assert _reorders(cm) == ([("NHWC", "plain")] if shared else [])  # (the 3-channel conv reads its input planar)
    x = np.random.default_rng(22).standard_normal((2, 3, 6, 8)).astype(np.float32)
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": x})))
    got = cm({"x": x})
    for name, v in want.items():
        np.testing.assert_allclose(got[name], v, rtol=1e-4, atol=1e-4 * np.abs(v).max())


def test_assign_layouts_run_twice_reorders_a_flattened_weight_once() -> None:
    """AssignLayouts again on a model it laid out (the pipeline may rerun it): the weight keeps its order."""
    from snippets_core.config import CompileConfig
    from snippets_core.frontends.onnx import read_onnx
    from snippets_core.passes.assign_layouts import AssignLayouts
    from snippets_core.runtime.pipeline import run_tokenization
    from snippets_core.runtime.targets import resolve_target

    cfg = CompileConfig()
    target = resolve_target("x86_64_avx512", cfg)
    model = read_onnx(_classifier("MatMul"))
    run_tokenization(model, target, cfg)
    weights = [n for n in model.get_ordered_ops() if n.type_name == "Constant" and np.ndim(n.value) == 2]
    before = [np.array(n.value) for n in weights]
    assert not AssignLayouts(target.preferred_layout, target.preferred_input_layout).run(model)
    assert all(np.array_equal(n.value, b) for n, b in zip(weights, before))

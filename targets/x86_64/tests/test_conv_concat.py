"""A Concat along the channels of primitives' outputs: each conv/pool whose output only the Concat reads writes its
channels straight into the Concat's NHWC output (its store pitch the Concat's channel count), the rest are copied;
checked against onnxruntime, float64 numpy and, for the kernel's strided stores, under guard pages."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64.conv import ConvGeometry
from snippets_x86_64.conv_executor import ConvExecutor
from snippets_x86_64.guarded import guarded_array

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: make the sibling module importable
from test_conv_kernel import dynamic_nhw  # noqa: E402

pytestmark = pytest.mark.avx512
LIGHT = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"


def _concats(cm):  # type: ignore[no-untyped-def]
    return [st.run.executor for st in cm._steps if type(getattr(st.run, "executor", None)).__name__ == "ChannelConcat"]


def _inception_block(shared: bool) -> onnx.ModelProto:
    """An Inception-style block on odd channel counts: 1x1 (17), 3x3 (33), 5x5 stride 1 (5), a 3x3 max pool of the
    input (11 channels) and a depthwise 3x3 branch (11), concatenated (77 channels), read by a 1x1 conv. With
    ``shared`` the 3x3 branch is a model output too: that input is copied, the others are written in place."""
    rng = np.random.default_rng(7)

    def w(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32),
                                       name)

    nodes = [helper.make_node("Conv", ["x", "w1"], ["b1"]),
             helper.make_node("Relu", ["b1"], ["r1"]),
             helper.make_node("Conv", ["x", "w3"], ["b3"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w5"], ["b5"], pads=[2, 2, 2, 2]),
             helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "wd"], ["d"], pads=[1, 1, 1, 1], group=11),
             helper.make_node("Concat", ["r1", "b3", "b5", "p", "d"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "wo"], ["y"])]
    inits = [w("w1", 17, 11, 1, 1), w("w3", 33, 11, 3, 3), w("w5", 5, 11, 5, 5), w("wd", 11, 1, 3, 3),
             w("wo", 20, 77, 1, 1)]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 20, 9, 13])]
    if shared:
        outs.append(helper.make_tensor_value_info("b3", TensorProto.FLOAT, [2, 33, 9, 13]))
    g = helper.make_graph(nodes, "inception", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 11, 9, 13])],
                          outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_branches_write_into_the_concat_output(shared: bool, threads: int) -> None:
    ort = pytest.importorskip("onnxruntime")
    model = _inception_block(shared)
    data = model.SerializeToString()
    cm = compile_model(data, "x86_64_avx512", {"num_threads": threads})
    (cat,) = _concats(cm)
    assert sorted(cat.slots.in_place) == ([0, 2, 3, 4] if shared else [0, 1, 2, 3, 4])
    x = np.random.default_rng(8).standard_normal((2, 11, 9, 13)).astype(np.float32)
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": x})))
    for call in range(2):  # the second call makes a new output: the first call's result stays as it was
        got = cm({"x": x})
        for name, v in want.items():
            np.testing.assert_allclose(got[name], v, rtol=1e-4, atol=1e-4 * np.abs(v).max())
    assert cat.copies == (2 if shared else 0) and cat.reorders == 0
    kernels = {sg.name: sg.rt_info["SnippetsConvKernel"] for sg in cm.subgraphs if "SnippetsConvKernel" in sg.rt_info}
    assert f"{4 if shared else 5} inputs written in place" in kernels["Concat_6"]  # what `snippets inspect` shows
    assert kernels["Conv_2"].endswith(", into channels 17..49 of a concat output of 77") != shared


def _model(nodes: list, inits: list, x_shape: list[int], y_shape: list[int]) -> bytes:
    """The serialized model of ``nodes`` from input ``x`` to output ``y``."""
    g = helper.make_graph(nodes, "cat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def test_a_concat_output_is_not_overwritten_by_the_next_call() -> None:
    """The Concat as the model's output: each call's array is its own."""
    rng = np.random.default_rng(9)
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "wb"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["y"], axis=1)]
    inits = [numpy_helper.from_array(rng.standard_normal((24, 8, 3, 3)).astype(np.float32), "wa"),
             numpy_helper.from_array(rng.standard_normal((9, 8, 1, 1)).astype(np.float32), "wb")]
    data = _model(nodes, inits, [1, 8, 6, 7], [1, 33, 6, 7])
    cm = compile_model(data, "x86_64_avx512")
    ref = compile_model(data, "reference")
    x1, x2 = (rng.standard_normal((1, 8, 6, 7)).astype(np.float32) for _ in range(2))
    y1 = cm({"x": x1})["y"]
    y2 = cm({"x": x2})["y"]
    np.testing.assert_allclose(y1, ref({"x": x1})["y"], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(y2, ref({"x": x2})["y"], rtol=1e-4, atol=1e-3)
    (cat,) = _concats(cm)
    assert cat.copies == 0


SLICES = [
    # conv: c, h, w, m, k, pads, group; the slice at channel ``offset`` of ``total``
    (8, 7, 9, 17, 3, 1, 1, 0, 40),
    (16, 14, 14, 33, 1, 0, 1, 7, 40),
    (3, 9, 11, 20, 5, 2, 1, 20, 40),
    (33, 6, 5, 33, 3, 1, 33, 7, 40),
]


@pytest.mark.parametrize("case", SLICES, ids=[str(i) for i in range(len(SLICES))])
@pytest.mark.parametrize("at", ["end", "start"])
def test_conv_writes_a_slice_with_the_concat_pitch_under_guard_pages(case: tuple, at: str) -> None:
    """The kernel's stores (full vectors and the masked channel tail) stay inside the slice: the channels around
    it keep their values, and the last slice ends flush against a PROT_NONE page."""
    c, h, wd, m, k, p, group, offset, total = case
    offset = total - m if at == "end" else offset
    rng = np.random.default_rng(c * m + offset)
    x = rng.standard_normal((1, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((m, c // group, k, k)).astype(np.float32)
    shift = rng.standard_normal(m)
    geo = ConvGeometry(1, c, h, wd, m, group, k, k, 1, 1, 1, 1, p, p, h, wd)
    ex = ConvExecutor(geo, w, None, shift, num_threads=2, out_pitch=total, plain_input=True)
    buf = guarded_array((1, h, wd, total), np.float32, at)
    buf[...] = -7.0
    got = ex.run(x, None, buf[..., offset:offset + m])
    want = _conv_f64(x, w, group, p) + shift[None, :, None, None]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    np.testing.assert_allclose(buf[..., offset:offset + m].transpose(0, 3, 1, 2), want, rtol=1e-4,
                               atol=1e-4 * np.abs(want).max())
    assert (buf[..., :offset] == -7.0).all() and (buf[..., offset + m:] == -7.0).all()


def _conv_f64(x: np.ndarray, w: np.ndarray, group: int, p: int) -> np.ndarray:
    """Stride 1, symmetric pads ``p``: the float64 oracle."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, _, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    y = np.zeros((n, m, h, wd))
    mg = m // group
    for g in range(group):
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cg:(g + 1) * cg, i:i + h, j:j + wd]
                y[:, g * mg:(g + 1) * mg] += np.einsum("nchw,mc->nmhw", patch, w[g * mg:(g + 1) * mg, :, i, j])
    return y


@pytest.mark.parametrize("name,concats,in_place", [("squeezenet", 8, 16), ("inception_v1", 9, 36),
                                                  ("densenet121", 58, 116)])
def test_cnn_concats_copy_nothing(name: str, concats: int, in_place: int) -> None:
    """SqueezeNet's and GoogLeNet's Concats copy nothing: every branch writes its slice. Nor do DenseNet's: each
    dense block's Concats are slices of its last one's output (each Concat is the next one's first input), every
    layer's conv writes its 32 channels into it, and the next layer's BN-Relu input copy reads the slice with its
    pitch. The outputs match the models' stored ones."""
    path = LIGHT / f"light_{name}.onnx"
    cm = compile_model(str(path), "x86_64_avx512", {"num_threads": 2})
    n = 3 * 224 * 224
    x = (np.arange(n).reshape(1, 3, 224, 224) / n).astype(np.float32)
    (y,) = cm({cm.input_names[0]: x}).values()
    ref = numpy_helper.to_array(onnx.load_tensor(str(path.with_suffix("")) + "_output_0.pb"))
    np.testing.assert_allclose(y, ref, rtol=1e-3, atol=1e-6)
    cats = _concats(cm)
    assert len(cats) == concats and sum(c.copies for c in cats) == 0
    assert sum(len(c.slots.in_place) for c in cats) == in_place
    convs = [st.run.executor for st in cm._steps if type(getattr(st.run, "executor", None)).__name__ == "ConvExecutor"]
    assert all(ex.reorders == 0 for ex in convs)


def _dense_block(layers: int, bn: bool = True) -> bytes:
    """A DenseNet block on a max-pooled stem: each layer BN-Relu-conv1x1(16)-BN-Relu-conv3x3(5 channels, the
    growth), concatenated to everything before it; a transition (BN-Relu-conv1x1, average pool) after it. Without
    ``bn`` the 1x1 convs read the Concats directly (no pre-ops: no JIT input copy)."""
    rng = np.random.default_rng(12)
    nodes = [helper.make_node("MaxPool", ["x"], ["c0"], kernel_shape=[2, 2], strides=[2, 2])]
    inits: list[onnx.TensorProto] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    def bn_relu(x: str, c: int, tag: str) -> str:
        if not bn:
            return x
        nodes.append(helper.make_node("BatchNormalization", [x, const(f"{tag}s", rng.uniform(0.5, 1.5, c)),
                                                             const(f"{tag}b", rng.standard_normal(c) * 0.1),
                                                             const(f"{tag}m", rng.standard_normal(c) * 0.1),
                                                             const(f"{tag}v", rng.uniform(0.5, 1.5, c))], [f"{tag}n"]))
        nodes.append(helper.make_node("Relu", [f"{tag}n"], [f"{tag}r"]))
        return f"{tag}r"

    c, cat = 7, "c0"
    for i in range(layers):
        h = bn_relu(cat, c, f"a{i}")
        nodes.append(helper.make_node("Conv", [h, const(f"w1_{i}", rng.standard_normal((16, c, 1, 1)) / np.sqrt(c))],
                                      [f"p{i}"]))
        h = bn_relu(f"p{i}", 16, f"b{i}")
        nodes.append(helper.make_node("Conv", [h, const(f"w3_{i}", rng.standard_normal((5, 16, 3, 3)) / 12)],
                                      [f"g{i}"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Concat", [cat, f"g{i}"], [f"c{i + 1}"], axis=1))
        c, cat = c + 5, f"c{i + 1}"
    h = bn_relu(cat, c, "t")
    nodes.append(helper.make_node("Conv", [h, const("wt", rng.standard_normal((9, c, 1, 1)) / np.sqrt(c))], ["tc"]))
    nodes.append(helper.make_node("AveragePool", ["tc"], ["y"], kernel_shape=[2, 2], strides=[2, 2]))
    g = helper.make_graph(nodes, "dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 7, 12, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 9, 3, 2])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


@pytest.mark.parametrize("bn", [True, False])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_dense_block_shares_one_concat_output(threads: int, bn: bool) -> None:
    """Odd channel counts (7 + 5 per layer: every slice starts mid-vector): the pool, each layer's 3x3 conv and the
    Concats all write one array of the last Concat's 27 channels; the 1x1 convs read their input slices through
    the pitched input copy. Two calls: each gets its own array. Against onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    data = _dense_block(4, bn)
    cm = compile_model(data, "x86_64_avx512", {"num_threads": threads})
    cats = _concats(cm)
    assert len(cats) == 4 and len({id(c.slots.root) for c in cats}) == 1 and cats[-1].slots.pitch == 27
    x = np.random.default_rng(13).standard_normal((1, 7, 12, 10)).astype(np.float32)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    first = cm({"x": x})["y"]
    second = cm({"x": x * 2})["y"]
    np.testing.assert_allclose(first, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert not np.shares_memory(first, second)
    assert sum(c.copies for c in cats) == 0
    convs = [st.run.executor for st in cm._steps if type(getattr(st.run, "executor", None)).__name__ == "ConvExecutor"]
    pitched = [ex.geo.c for ex in convs if ex.copy is not None and ex.copy_pitch == 27 and ex.geo.c < 27]
    assert pitched == ([7, 12, 17, 22] if bn else []) and all(ex.reorders == 0 for ex in convs)


@pytest.mark.parametrize("at", ["end", "start"])
def test_the_input_copy_reads_a_channel_slice_under_guard_pages(at: str) -> None:
    """BN-Relu pre-ops on an input that is channels ``offset .. offset + 20`` of a 53-channel NHWC array flush
    against a PROT_NONE page: the masked channel tail of the last pixel stays inside."""
    c, total, h, wd, m = 20, 53, 5, 7, 17
    offset = total - c if at == "end" else 0
    rng = np.random.default_rng(14)
    x = rng.standard_normal((1, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
    scale, shift = rng.uniform(0.5, 1.5, c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    pre = (("multiply", scale), ("add", shift), ("maximum", None))
    geo = ConvGeometry(1, c, h, wd, m, 1, 3, 3, 1, 1, 1, 1, 1, 1, h, wd)
    ex = ConvExecutor(geo, w, None, None, pre_ops=pre, in_pitch=total)
    buf = guarded_array((1, h, wd, total), np.float32, at)
    buf[...] = np.nan  # the channels around the slice are never read
    buf[..., offset:offset + c] = x.transpose(0, 2, 3, 1)
    got = ex.run(buf[..., offset:offset + c].transpose(0, 3, 1, 2))
    act = np.maximum(x * scale[None, :, None, None] + shift[None, :, None, None], 0)
    want = _conv_f64(act, w, 1, 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert ex.reorders == 0


def _conv_pool_concat(pool: dict) -> bytes:
    """Conv-Relu-``pool`` next to a stride-2 conv, concatenated: [1, 5, 12, 14] -> [1, 32, 6, 7]."""
    rng = np.random.default_rng(11)
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], **pool),
             helper.make_node("Conv", ["x", "wb"], ["b"], strides=[2, 2]),
             helper.make_node("Concat", ["p", "b"], ["y"], axis=1)]
    inits = [numpy_helper.from_array(rng.standard_normal((19, 5, 3, 3)).astype(np.float32), "wa"),
             numpy_helper.from_array(rng.standard_normal((13, 5, 1, 1)).astype(np.float32), "wb")]
    return _model(nodes, inits, [1, 5, 12, 14], [1, 32, 6, 7])


@pytest.mark.parametrize("pool", [dict(kernel_shape=[2, 2], strides=[2, 2]),
                                  dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])], ids=["fused", "after"])
def test_a_conv_with_its_pool_writes_into_the_concat_output(pool: dict) -> None:
    """Conv-Relu-MaxPool (the pool the kernel's epilogue, or its own kernel after the conv in the same step) next to
    a stride-2 conv, concatenated: the pooled channels go straight into the Concat's output."""
    ort = pytest.importorskip("onnxruntime")
    data = _conv_pool_concat(pool)
    cm = compile_model(data, "x86_64_avx512", {"num_threads": 2})
    (cat,) = _concats(cm)
    x = np.random.default_rng(12).standard_normal((1, 5, 12, 14)).astype(np.float32)
    (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(cm({"x": x})["y"], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert sorted(cat.slots.in_place) == [0, 1] and cat.copies == 0
    kernels = [sg.rt_info["SnippetsConvKernel"] for sg in cm.subgraphs if "SnippetsConvKernel" in sg.rt_info]
    assert any(("not fused" in k) == (pool.get("pads") is not None) and k.endswith("0..18 of a concat output of 32")
               for k in kernels)


# --- dynamic N, H, W: the slices of a Concat whose pitch (its channels) is static -------------------------------------


def _built(cm) -> int:  # type: ignore[no-untyped-def]
    from snippets_x86_64.cache import FUNCTION_CACHE

    per_shape = sum(getattr(getattr(st.run, "__self__", st.run), "compiles", 0) for st in cm._steps)
    return FUNCTION_CACHE.stats["miss"] + FUNCTION_CACHE.stats["disk"] + per_shape


def _against_ort(data: bytes, cm, shapes, c: int) -> None:  # type: ignore[no-untyped-def]
    """``cm`` against onnxruntime at each (N, H, W) of ``shapes`` (C ``c``), each output; no kernel built."""
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(len(shapes))
    before = None
    for n, h, w in shapes:
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        got = cm({"x": x})
        for name, want in zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": x})):
            np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-4 * max(np.abs(want).max(), 1))
        before = _built(cm) if before is None else before  # (the first shape made the executors' first tables)
        assert _built(cm) == before


@pytest.mark.parametrize("shared", [False, True])
def test_dynamic_inception_branches_write_into_the_concat_output(shared: bool) -> None:
    """The Inception block with dynamic N, H, W: the branches write their slices at every shape (the first write of
    a call makes that call's array), the Concat copies only the shared branch; describe() says where each goes."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    data = dynamic_nhw(_inception_block(shared))
    cm = compile_model(data, "x86_64_avx512", {"num_threads": 2})
    (cat,) = _concats(cm)
    assert sorted(cat.slots.in_place) == ([0, 2, 3, 4] if shared else [0, 1, 2, 3, 4])
    _against_ort(data, cm, [(2, 9, 13)], 11)

    @given(st.integers(1, 3), st.integers(5, 24), st.integers(5, 24))
    @settings(max_examples=8, deadline=None)
    def shape(n: int, h: int, w: int) -> None:
        _against_ort(data, cm, [(n, h, w)], 11)

    shape()
    assert (cat.copies > 0) is shared  # the shared branch, copied at every call; the others never
    assert ("into channels 17..49 of a concat output of 77" in cm.describe()) is not shared
    kernels = {sg.name: sg.rt_info["SnippetsConvKernel"] for sg in cm.subgraphs if "SnippetsConvKernel" in sg.rt_info}
    assert f"{4 if shared else 5} inputs written in place" in kernels["Concat_6"]


@pytest.mark.parametrize("bn", [True, False])
def test_a_dynamic_dense_block_shares_one_concat_output(bn: bool) -> None:
    """A DenseNet block with dynamic N, H, W: one array of the last Concat's channels per call (its N, H, W the
    call's), written by the pool and each layer's 3x3 conv; the 1x1 convs read their slices through the pitched
    input copy; nothing copied, no kernel built for a new shape; against onnxruntime."""
    data = dynamic_nhw(_dense_block(4, bn))
    cm = compile_model(data, "x86_64_avx512", {"num_threads": 2})
    cats = _concats(cm)
    assert len(cats) == 4 and len({id(c.slots.root) for c in cats}) == 1 and cats[-1].slots.pitch == 27
    _against_ort(data, cm, [(1, 12, 10), (2, 16, 8), (3, 8, 20), (1, 12, 10), (2, 4, 4)], 7)
    assert sum(c.copies for c in cats) == 0
    firsts = [st.run._first for st in cm._steps if type(st.run).__name__ == "DynamicConv"]
    pitched = [ex.geo.c for ex in firsts if ex.copy is not None and ex.copy_pitch == 27 and ex.geo.c < 27]
    assert pitched == ([7, 12, 17, 22] if bn else [])


@pytest.mark.parametrize("pool", [dict(kernel_shape=[2, 2], strides=[2, 2]),
                                  dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])], ids=["fused", "after"])
def test_a_dynamic_conv_with_its_pool_writes_into_the_concat_output(pool: dict) -> None:
    """Conv-Relu-MaxPool next to a stride-2 conv, concatenated, dynamic N, H, W: the pooled channels (the epilogue's
    or the pool kernel's after the conv) go straight into the Concat's output at every shape."""
    data = dynamic_nhw(_conv_pool_concat(pool))
    cm = compile_model(data, "x86_64_avx512", {"num_threads": 2})
    (cat,) = _concats(cm)
    _against_ort(data, cm, [(1, 12, 14), (2, 10, 22), (1, 6, 6), (3, 16, 8)], 5)
    assert sorted(cat.slots.in_place) == [0, 1] and cat.copies == 0
    text = cm.describe()
    assert "0..18 of a concat output of 32" in text and ("not fused" in text) == ("pads" in pool)


@pytest.mark.parametrize("case", SLICES, ids=[str(i) for i in range(len(SLICES))])
@pytest.mark.parametrize("at", ["end", "start"])
def test_dynamic_conv_writes_slices_with_the_concat_pitch_under_guard_pages(case: tuple, at: str) -> None:
    """One dynamic executor (``ConvPlan.dynamic_executor``) with the Concat's pitch, its shapes made by ``for_shape``:
    at random N, H, W the stores stay inside the slice (the channels around it keep their values; the last slice ends
    flush against a PROT_NONE page); against float64."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from snippets_core.ir.ops.io import Constant, Parameter
    from snippets_core.ir.ops.nn import Convolution
    from snippets_x86_64.conv_subgraph import ConvPlan

    c, h0, w0, m, k, p, group, offset, total = case
    offset = total - m if at == "end" else offset
    rng = np.random.default_rng(c * m + offset)
    w = rng.standard_normal((m, c // group, k, k)).astype(np.float32)
    shift = rng.standard_normal(m)
    conv = Convolution(Parameter("f32", [1, c, h0, w0]), Constant(w), pads=(p, p, p, p), group=group)
    plan = ConvPlan(conv, w, None, shift, (), (), None, plain_input=True)
    first = plan.dynamic_executor((1, c, h0, w0), 2, (None, c, None, None), out_pitch=total)

    @given(st.integers(1, 3), st.integers(k, 20), st.integers(k, 20))
    @settings(max_examples=6, deadline=None)
    def shape(n: int, h: int, wd: int) -> None:
        x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
        ex = plan.for_shape(first, x.shape)
        buf = guarded_array((n, h, wd, total), np.float32, at)
        buf[...] = -7.0
        got = ex.run(x, None, buf[..., offset:offset + m])
        want = _conv_f64(x, w, group, p) + shift[None, :, None, None]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
        assert (buf[..., :offset] == -7.0).all() and (buf[..., offset + m:] == -7.0).all()

    shape()

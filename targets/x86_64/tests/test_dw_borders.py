"""Dynamic depthwise and pooling walks (``conv.merge_borders``, ``conv_subgraph.sampled_borders``): the border code
made at compile time covers every size a dynamic H, W can take, tiny maps whose left and right borders meet
included, so a new shape builds no kernel; each shape against float64 numpy under guard pages."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64.conv import ConvGeometry, covers, merge_borders, table_spec, walk_table, work_table
from snippets_x86_64.conv_executor import ConvExecutor
from snippets_x86_64.conv_subgraph import border_sizes, sampled_borders
from snippets_x86_64.pool import reciprocal_counts

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: make the sibling module importable
from test_conv_kernel import _built, conv_f64, guarded, guarded_nhwc, pool_f64  # noqa: E402

pytestmark = pytest.mark.avx512

#: every H (at a fixed W) and every W (at a fixed H) from 1 to 40, and the tiny squares
SIZES = [(h, 9) for h in range(1, 41)] + [(9, w) for w in range(1, 41)] + [(s, s) for s in range(1, 9)]


def _out(size: int, lo: int, hi: int, extent: int, stride: int, ceil: bool = False) -> int:
    span = size + lo + hi - extent
    return (-(-span // stride) if ceil else span // stride) + 1


def _walk(c: int, k: int, s: int, d: int, p: int, mode: str = "conv",
          ceil: bool = False):  # type: ignore[no-untyped-def]
    """The geometry of a k x k window (stride s, dilation d, pads p all round) over [N, c, H, W]."""
    extent = (k - 1) * d + 1

    def geometry(shape: tuple[int, ...]) -> ConvGeometry:
        n, _, h, w = shape
        return ConvGeometry(n, c, h, w, c, c, k, k, s, s, d, d, p, p, _out(h, p, p, extent, s, ceil),
                            _out(w, p, p, extent, s, ceil), mode=mode)
    return geometry


def _every_size(geometry, c: int, borders: tuple, rng: np.random.Generator):  # type: ignore[no-untyped-def]
    """Each size of ``SIZES`` with an output: its geometry (``borders`` has its code), an input of ``c`` channels,
    and which end of its guarded copy the guard page is at (alternating)."""
    for i, (h, wd) in enumerate(SIZES):
        geo = geometry((1, c, h, wd))
        if geo.ho < 1 or geo.wo < 1:
            continue
        assert covers(borders, geo), (h, wd)
        yield geo, rng.standard_normal((1, c, h, wd)).astype(np.float32), "end" if i % 2 else "start"


DW = [(k, s, p, d) for k, s, p in itertools.product((3, 5), (1, 2), (0, 1, 2)) for d in (1,)] + [(3, 1, 2, 2),
                                                                                                 (3, 2, 1, 2)]


@pytest.mark.parametrize("case", DW, ids=[f"k{k}s{s}p{p}d{d}" for k, s, p, d in DW])
def test_depthwise_builds_no_kernel_for_any_size(case: tuple) -> None:
    """A depthwise k x k on runtime geometry made at a stand-in shape with the sampled border code, then every H, W
    from 1 to 40 (``for_shape``): no kernel built, each against float64 with the input and buffers under guard pages
    (at either end)."""
    k, s, p, d = case
    c = 17  # a masked last vector
    geometry = _walk(c, k, s, d, p)
    stand_in = (1, c, 4 * ((k - 1) * d + 1) + 16, 4 * ((k - 1) * d + 1) + 16)
    borders = sampled_borders((None, c, None, None), geometry, stand_in)
    rng = np.random.default_rng(k * 100 + s * 10 + p)
    w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    first = ConvExecutor(geometry(stand_in), w, None, None, num_threads=2, alloc=guarded("end"), dynamic=True,
                         borders=borders)
    before = _built()
    for geo, x, at in _every_size(geometry, c, borders, rng):
        want = conv_f64(x, w, c, (s, s), (d, d), (p,) * 4)
        got = first.for_shape(geo).run(guarded_nhwc(x, at))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max()))
    assert _built() == before


POOLS = [(mode, k, s, p, ceil, inc) for mode, (k, s, p) in itertools.product(
    ("max", "avg"), [(3, 1, 1), (3, 2, 1), (3, 2, 0), (5, 1, 2), (5, 2, 2), (5, 2, 1)])
    for ceil, inc in ((False, False), (True, True))]


@pytest.mark.parametrize("case", POOLS, ids=["-".join(map(str, c)) for c in POOLS])
def test_pool_builds_no_kernel_for_any_size(case: tuple) -> None:
    """MaxPool/AveragePool (ceil_mode, count_include_pad) the same way: one kernel, every size right."""
    mode, k, s, p, ceil, inc = case
    c = 19
    geometry = _walk(c, k, s, 1, p, mode, ceil)
    stand_in = (1, c, 4 * k + 16, 4 * k + 16)
    borders = sampled_borders((None, c, None, None), geometry, stand_in)

    def divisor(geo: ConvGeometry) -> np.ndarray:
        return reciprocal_counts(geo, (p,) * 4, inc) if mode == "avg" else np.zeros(1, np.float32)

    first = ConvExecutor(geometry(stand_in), divisor(geometry(stand_in)), None, None, num_threads=2,
                         alloc=guarded("end"), dynamic=True, borders=borders)
    before = _built()
    rng = np.random.default_rng(k + s + p)
    for geo, x, at in _every_size(geometry, c, borders, rng):
        want = pool_f64(x, mode, (k, k), (s, s), (p,) * 4, geo.ho, geo.wo, inc)
        ex = ConvExecutor(geo, divisor(geo), None, None, num_threads=2, alloc=guarded("end"), dynamic=True,
                          prepared=first)
        got = ex.run(guarded_nhwc(x, at))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert _built() == before


def test_border_sizes_cover_every_size() -> None:
    """``border_sizes``' bound: the border code of the sizes it gives is that of every size up to 80, over
    kernels, strides, dilations, asymmetric pads and ceil_mode."""
    for k, s, d, lo, hi, ceil in itertools.product((1, 2, 3, 5, 7), (1, 2, 3, 4), (1, 2), (0, 1, 3), (0, 2),
                                                   (False, True)):
        extent = (k - 1) * d + 1

        def geo(w: int) -> ConvGeometry:
            return ConvGeometry(1, 16, 9, w, 16, 16, 1, k, 1, s, 1, d, 0, lo, 9, _out(w, lo, hi, extent, s, ceil))
        sampled = [geo(w) for w in border_sizes(extent, s) if geo(w).wo > 0]
        every = [geo(w) for w in range(1, 81) if geo(w).wo > 0]
        assert merge_borders(sampled) == merge_borders(every), (k, s, d, lo, hi, ceil)


def test_dynamic_model_builds_no_kernel_for_tiny_maps() -> None:
    """A model with dynamic N, H, W: a depthwise 5x5 (pads 2, stride 2) and a MaxPool 3x3 (pad 1, stride 2) after
    it, then every H, W from 1 to 12: no kernel built after compile_model (the compile made the border code of
    every size), each output against onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    c = 24
    w = (np.random.default_rng(2).standard_normal((c, 1, 5, 5)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["d"], group=c, kernel_shape=[5, 5], strides=[2, 2], pads=[2] * 4),
             helper.make_node("MaxPool", ["d"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", c, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w")])
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    cm = compile_model(data, "x86_64_avx512", {"num_threads": 2})
    assert all(where == "x86_64_avx512" for _, op, where in cm.placement() if op == "Subgraph")
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    per_shape = lambda: sum(getattr(getattr(st.run, "__self__", st.run), "compiles", 0)  # noqa: E731
                            for st in cm._steps)
    # a large shape first: the output Reorder's tile kernel (one for every shape, made on the first shape whose
    # reorder is not a plain copy) is not what this test counts; the large shape's borders are the stand-in's
    cm({"x": rng.standard_normal((1, c, 20, 20)).astype(np.float32)})
    before = _built() + per_shape()
    for h, wd in itertools.product(range(1, 13), range(1, 13)):
        x = rng.standard_normal((1 + (h + wd) % 2, c, h, wd)).astype(np.float32)
        np.testing.assert_allclose(cm({"x": x})["y"], sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
    assert _built() + per_shape() == before


def _same_walk(c: int, k: int, s: int, lower: bool, mode: str = "conv"):  # type: ignore[no-untyped-def]
    """The geometry of a k x k window at stride s with auto_pad SAME_UPPER (SAME_LOWER: ``lower``) over [N, c, H, W]:
    the pads change with the size (at stride 2, with its parity), as ONNX defines them."""
    def axis(size: int) -> tuple[int, int, int]:
        out = -(-size // s)
        total = max((out - 1) * s + k - size, 0)
        lo = total - total // 2 if lower else total // 2
        return out, lo, total - lo

    def geometry(shape: tuple[int, ...]) -> ConvGeometry:
        n, _, h, w = shape
        (ho, pt, _), (wo, pl, _) = axis(h), axis(w)
        return ConvGeometry(n, c, h, w, c, c, k, k, s, s, 1, 1, pt, pl, ho, wo, mode=mode)
    return geometry, axis


SAME = [(k, s, lower, mode) for k, s in ((3, 2), (5, 2), (3, 3)) for lower in (False, True)
        for mode in ("conv", "max")]


@pytest.mark.parametrize("case", SAME, ids=[f"k{k}s{s}{'lower' if lo else 'upper'}-{m}" for k, s, lo, m in SAME])
def test_auto_pad_same_walk_builds_no_kernel_for_any_size(case: tuple) -> None:
    """auto_pad SAME at stride > 1: the pads (so the left border columns and the top rows) change with the size, the
    kernel has the code of each left border (``RT_LEFT``) and row variant and reads the source's corner from the
    table: every H, W from 1 to 40 against float64 under guard pages, no kernel built after the first."""
    k, s, lower, mode = case
    c = 21
    geometry, axis = _same_walk(c, k, s, lower, mode)
    stand_in = (1, c, 4 * k + 16, 4 * k + 16)
    borders = sampled_borders((None, c, None, None), geometry, stand_in)
    if len({axis(size)[1] for size in range(k, 41)}) > 1:  # the left pad follows the size: so does its border
        assert len(borders[1]) > 1
    rng = np.random.default_rng(k * 10 + s + lower)
    w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    weights = w if mode == "conv" else np.zeros(1, np.float32)
    first = ConvExecutor(geometry(stand_in), weights, None, None, num_threads=2, alloc=guarded("end"), dynamic=True,
                         borders=borders)
    before = _built()
    for geo, x, at in _every_size(geometry, c, borders, rng):
        (_, pt, pb), (_, pl, pr) = axis(geo.h), axis(geo.w)
        if mode == "conv":
            want = conv_f64(x, w, c, (s, s), (1, 1), (pt, pl, pb, pr))
            ex = first.for_shape(geo)
        else:
            want = pool_f64(x, "max", (k, k), (s, s), (pt, pl, pb, pr), geo.ho, geo.wo, False)
            ex = ConvExecutor(geo, weights, None, None, num_threads=2, alloc=guarded("end"), dynamic=True,
                              prepared=first)
        got = ex.run(guarded_nhwc(x, at))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max()))
    assert _built() == before


def test_auto_pad_same_model_builds_no_kernel_for_new_sizes() -> None:
    """A model with dynamic N, H, W: a depthwise 3x3 at stride 2 with auto_pad SAME_UPPER, a MaxPool 3x3 at stride 2
    with SAME_LOWER after it and a depthwise 5x5 at stride 2 with SAME_LOWER: sizes of either parity build no kernel
    after the first call, each output against onnxruntime (onnx's reference evaluator gives a SAME_LOWER MaxPool
    over an odd size one output row too few)."""
    from snippets_x86_64.cache import FUNCTION_CACHE

    ort = pytest.importorskip("onnxruntime")

    c = 24
    rng = np.random.default_rng(7)
    w1 = (rng.standard_normal((c, 1, 3, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((c, 1, 5, 5)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["d"], group=c, kernel_shape=[3, 3], strides=[2, 2],
                              auto_pad="SAME_UPPER"),
             helper.make_node("Relu", ["d"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER"),
             helper.make_node("Conv", ["p", "w2"], ["y"], group=c, kernel_shape=[5, 5], strides=[2, 2],
                              auto_pad="SAME_LOWER")]
    g = helper.make_graph(nodes, "same", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", c, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    cm = compile_model(model.SerializeToString(), "x86_64_avx512", {"num_threads": 2})
    assert all(where == "x86_64_avx512" for _, op, where in cm.placement() if op == "Subgraph")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    cm({"x": rng.standard_normal((1, c, 40, 40)).astype(np.float32)})  # the first call (a reorder's tile kernel)
    before = FUNCTION_CACHE.stats["miss"] + FUNCTION_CACHE.stats["disk"]
    for n, h, wd in [(1, 33, 40), (2, 34, 41), (1, 17, 18), (1, 64, 63), (3, 9, 10), (1, 50, 51), (2, 35, 36)]:
        x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
        want = sess.run(None, {"x": x})[0]
        np.testing.assert_allclose(cm({"x": x})["y"], want, rtol=1e-4, atol=1e-4)
    assert FUNCTION_CACHE.stats["miss"] + FUNCTION_CACHE.stats["disk"] == before


@pytest.mark.parametrize("k,s,p,d", DW)
def test_a_walk_table_finds_what_its_border_code_covers(k: int, s: int, p: int, d: int) -> None:
    """``walk_table`` (a new shape's table made against the first executor's border code, no ``covers`` first): None
    exactly where ``covers`` says the code lacks a row variant or border pattern of the size (code merged from a few
    sizes only, every size from 1 to 40 asked), else the table ``work_table`` makes with that code."""
    geometry = _walk(16, k, s, d, p)
    some = [geometry((1, 16, h, w)) for h, w in ((12, 13), (20, 9), (9, 31))]
    borders = merge_borders([g for g in some if g.ho > 0 and g.wo > 0])
    missed = 0
    for h, wd in SIZES:
        geo = geometry((1, 16, h, wd))
        if geo.ho < 1 or geo.wo < 1:
            continue
        spec = table_spec(geo, [0])
        got = walk_table(geo, borders, spec)
        assert (got is not None) == covers(borders, geo), (h, wd)
        if got is None:
            missed += 1
            continue
        np.testing.assert_array_equal(got, work_table(geo, [0], borders, spec))
        assert (got.rows == work_table(geo, [0], borders, spec).rows).all()
    assert missed or not p  # (padded: the tiny sizes' code, which the few sizes did not need)

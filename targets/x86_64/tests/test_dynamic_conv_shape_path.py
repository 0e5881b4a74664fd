"""A dynamic conv primitive's new-shape path: the geometry from per-axis caches and the first executor's fields
(``ConvPlan.shape_geometry``), its ``ShapeFields`` made without the geometry-keyed lookup, a covered depthwise walk
taking the first executor's kernel key, and the executor of the primitive's own class. Each is checked against the
slow path it replaces (``geometry`` + ``_epilogue_geometry`` + ``ConvExecutor.for_shape``, ``kernel_key``) over
many random shapes, and the model's outputs against onnxruntime and a static compile."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from snippets_core.errors import SnippetsError
from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64.conv import flat_pixels, kernel_key, table_items
from snippets_x86_64.conv_executor import ConvExecutor, in_place_path, new_shape_fields, shape_fields
from snippets_x86_64.conv_subgraph import DynamicConv, DynamicPool
from snippets_x86_64.pool import POOL_MODES, _pool_geometry_like, pool_geometry

ort = pytest.importorskip("onnxruntime")

#: (op, inputs, output, attributes): a planar stem, a SAME_UPPER depthwise of stride 2 (pads that change with the
#: size), a 1x1 pair into a channel Concat (output pitches), an AveragePool with pads and ceil_mode on it (a pool
#: walk of its own), a 3x3 + MaxPool 2x2 (a pool epilogue on disjoint
#: windows), a 5x5 dilated conv, a 1x1 + GlobalAveragePool (a global pool epilogue)
LAYERS = [("Conv", ["x", "w0"], "c0", {"pads": [1, 1, 1, 1], "strides": [2, 2]}), ("Relu", ["c0"], "r0", {}),
          ("Conv", ["r0", "wd"], "d0", {"auto_pad": "SAME_UPPER", "strides": [2, 2], "group": 16}),
          ("Clip", ["d0", "lo", "hi"], "d1", {}),
          ("Conv", ["d1", "wa"], "a0", {}), ("Conv", ["d1", "wb"], "b0", {}),
          ("Concat", ["a0", "b0"], "k0", {"axis": 1}),
          ("AveragePool", ["k0"], "k1", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
          ("Conv", ["k1", "w3"], "e0", {"pads": [1, 1, 1, 1]}), ("Relu", ["e0"], "e1", {}),
          ("MaxPool", ["e1"], "p0", {"kernel_shape": [2, 2], "strides": [2, 2]}),
          ("Conv", ["p0", "w5"], "f0", {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
          ("Conv", ["f0", "w1"], "g0", {}), ("Relu", ["g0"], "g1", {}),
          ("GlobalAveragePool", ["g1"], "y", {})]
WEIGHTS = {"w0": (16, 3, 3, 3), "wd": (16, 1, 3, 3), "wa": (8, 16, 1, 1), "wb": (24, 16, 1, 1), "w3": (32, 32, 3, 3),
           "w5": (32, 32, 3, 3), "w1": (40, 32, 1, 1)}


def model(dims: tuple) -> onnx.ModelProto:
    rng = np.random.default_rng(11)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.2).astype(np.float32), k) for k, s in WEIGHTS.items()]
    inits += [numpy_helper.from_array(np.float32(0.0), "lo"), numpy_helper.from_array(np.float32(6.0), "hi")]
    nodes = [helper.make_node(op, ins, [out], **attrs) for op, ins, out, attrs in LAYERS]
    n, h, w = dims
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 3, h, w])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, 40, 1, 1])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def dynamic() -> object:
    return compile_model(model(("n", "h", "w")).SerializeToString(), "x86_64_avx512", {"num_threads": 1})


def _convs(cm: object) -> list[DynamicConv]:
    runs = [getattr(st.run, "__self__", st.run) for st in cm._steps]  # type: ignore[attr-defined]
    return [r for r in runs if isinstance(r, DynamicConv) and isinstance(r._first, ConvExecutor)]


def test_the_model_covers_every_kind_of_geometry(dynamic: object) -> None:
    """The primitives this file checks: a planar stem, a depthwise walk, a Concat's slices, a pool epilogue, a
    global pool epilogue, a pointwise conv re-cut into rows (``flat_pixels``)."""
    geos = [c._first.geo for c in _convs(dynamic)]
    assert any(g.planar for g in geos) and any(g.depthwise for g in geos) and any(g.out_pitch for g in geos)
    assert any(g.pool is not None for g in geos) and any(g.global_pool is not None for g in geos)
    assert any(g.kh == 1 and not g.depthwise for g in geos)


def test_shape_geometry_is_the_slow_paths_over_random_shapes(dynamic: object) -> None:
    """For 150 random input shapes of each primitive (sizes 1 to 90, N 1 to 3; ones the window does not fit
    included): ``shape_geometry`` gives the geometry the slow path makes, or the same typed error; the fields made
    for it (the kernel key, the table, the split) are those the geometry-keyed path makes."""
    rng = np.random.default_rng(5)
    for conv in _convs(dynamic):
        plan, first = conv.plan, conv._first
        for _ in range(150):
            shape = (int(rng.integers(1, 4)), first.geo.c, int(rng.integers(1, 91)), int(rng.integers(1, 91)))
            try:
                slow = first.for_shape(plan._epilogue_geometry(first, plan.geometry(shape)))
            except SnippetsError as e:
                with pytest.raises(type(e)):
                    plan.shape_geometry(first, shape)
                continue
            geo = plan.shape_geometry(first, shape)
            assert geo == slow.geo, shape
            fast = new_shape_fields(first, geo)
            kgeo = flat_pixels(geo)
            assert fast.kernel_key == kernel_key(kgeo, True, first.borders) or not kgeo.depthwise, shape
            ref = shape_fields(first, geo, first)
            np.testing.assert_array_equal(fast.table, ref.table)
            assert fast.chunks == ref.chunks and fast.unpadded == ref.unpadded and fast.out_shape == ref.out_shape
            # the split covers the items the table's header counts (``ShapeFields`` counts them from the geometry)
            assert sum(c for _, c in fast.chunks) == table_items(fast.table), shape


def test_primitives_of_one_window_share_its_axis_caches(dynamic: object) -> None:
    """The two 1x1 convolutions into the Concat have one window: one per-axis cache (``ConvPlan._axes``), which
    gives each its own slow path's output size and pads (``test_shape_geometry_is_the_slow_paths_over_random_shapes``
    over shapes met in turn by both); windows that differ keep caches of their own."""
    plans = [c.plan for c in _convs(dynamic)]
    pointwise = [p for p in plans if p.w.shape[2:] == (1, 1) and p.global_pool is None]
    assert len(pointwise) >= 2 and pointwise[0]._axes is pointwise[1]._axes
    others = [p for p in plans if p.w.shape[2:] != (1, 1)]
    assert all(p._axes is not pointwise[0]._axes for p in others)
    rng = np.random.default_rng(8)
    for _ in range(50):
        shape = (1, 16, int(rng.integers(1, 91)), int(rng.integers(1, 91)))
        for p in pointwise[:2]:
            g = p.geometry((1, p.w.shape[1], *shape[2:]))
            assert p._axis(0, shape[2]) == (g.ho, g.pt) and p._axis(1, shape[3]) == (g.wo, g.pl)


def test_a_pools_geometry_is_the_slow_paths_over_random_shapes(dynamic: object) -> None:
    """A dynamic pool's geometry from its per-axis caches (``_pool_geometry_like``) is ``pool_geometry``'s, pads
    included (the average's divisor reads them), or the same typed error."""
    runs = [getattr(st.run, "__self__", st.run) for st in dynamic._steps]  # type: ignore[attr-defined]
    pools = [(r.sg.body_ops, r._first) for r in runs
             if isinstance(r, DynamicPool) and isinstance(r._first, ConvExecutor)]
    assert pools
    rng = np.random.default_rng(6)
    for ops, first in pools:
        node = next(op for op in ops if op.type_name in POOL_MODES)
        for _ in range(150):
            shape = (int(rng.integers(1, 4)), first.geo.c, int(rng.integers(1, 91)), int(rng.integers(1, 91)))
            try:
                geo, pads = pool_geometry(node, shape)
            except SnippetsError as e:
                with pytest.raises(type(e)):
                    _pool_geometry_like(node, first, shape)
                continue
            fast, fast_pads = _pool_geometry_like(node, first, shape)
            assert fast_pads == pads and fast == first.for_shape(geo).geo, shape


def test_a_new_shapes_executor_holds_its_shapes_fields_only(dynamic: object) -> None:
    """A new shape's executor reads what it shares with the first one (packed weights, padded buffer, dispatch
    calls, kernel) from the primitive's own class; its own dict holds the shape's fields."""
    x = np.random.default_rng(1).standard_normal((2, 3, 61, 47)).astype(np.float32)
    dynamic({"x": x})  # type: ignore[operator]
    for conv in _convs(dynamic):
        first = conv._first
        made = [ex for ex in conv.executors.values() if ex is not first]
        assert made, conv.sg.name
        ex = made[-1]
        assert isinstance(ex, ConvExecutor) and type(ex) is not ConvExecutor
        assert ex.packed is first.packed and ex.pad is first.pad and ex.calls is first.calls
        assert "packed" not in vars(ex) and "pad" not in vars(ex) and len(vars(ex)) < len(vars(first))
        assert type(ex).__dict__["xp"] is None  # the class holds no buffer of the first executor's shape
        assert ex.kernel is first.kernel and ex.kernel_key is first.kernel_key  # one kernel for every shape


@pytest.mark.parametrize("threads", [1, 2])
def test_a_new_shapes_lean_executor_is_set_shapes(threads: int) -> None:
    """``ConvExecutor._shape_like`` (a new shape's executor storing only what differs from the first's) gives every
    field the full ``_set_shape`` gives, over random shapes in turn (chunk counts that change with the size at two
    threads: the dispatch calls; a padded input: the copy header and words; the in-place path made in the burst), so
    no executor reads a previous shape's field from its class."""
    cm = compile_model(model(("n", "h", "w")).SerializeToString(), "x86_64_avx512", {"num_threads": threads})
    rng = np.random.default_rng(threads)
    names = ("kernel", "kernel_key", "call", "copy", "copy_call", "copy_chunks", "copy_words", "chunks",
             "table_address", "unpadded", "fixed_args", "planar_copy", "finish", "out_shape", "geo", "fields")
    checked = 0
    for n, h, w in zip(rng.integers(1, 4, 12), rng.integers(17, 90, 12), rng.integers(17, 90, 12)):
        cm({"x": rng.standard_normal((int(n), 3, int(h), int(w))).astype(np.float32)})  # type: ignore[operator]
        for conv in _convs(cm):
            first = conv._first
            for shape, ex in list(conv.executors.items())[-1:]:
                if ex is first:
                    continue
                slow = object.__new__(type(ex))
                slow._set_shape(ex.geo, first, ex.fields)
                for name in names:
                    assert getattr(ex, name, None) == getattr(slow, name, None), (conv.sg.name, shape, name)
                assert ex._in_place == in_place_path(slow), (conv.sg.name, shape)
                if ex.copy is not None:
                    np.testing.assert_array_equal(ex.copy_header, slow.copy_header)
                checked += 1
    assert checked >= 30


def test_a_new_shapes_executors_go_to_the_old_generation(dynamic: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """The burst of a new shape's executors ends with a young collection (``gc_pause.collect_after_burst``; this small
    model's burst is under the size that asks for one, so the bound is lowered here): the executors the caches keep
    are in the old generation when the call returns, where no later young collection walks them."""
    import gc

    from snippets_core.runtime import gc_pause

    monkeypatch.setattr(gc_pause, "BURST_MIN_OBJECTS", 1)
    gc.collect()
    collections = gc.get_stats()[1]["collections"]
    dynamic({"x": np.zeros((1, 3, 53, 59), np.float32)})  # type: ignore[operator]
    assert gc.get_stats()[1]["collections"] > collections
    old = {id(o) for o in gc.get_objects(generation=2)}
    made = [c.executors[c._last[0]] for c in _convs(dynamic)]
    assert made and all(id(ex) in old for ex in made)


def test_new_shapes_match_onnxruntime_and_a_static_compile(dynamic: object) -> None:
    """Random new shapes and repeats: each output close to onnxruntime's; two of them byte-identical to a static
    compile of that shape; no primitive builds a kernel for a new shape (the SAME-padded walk included)."""
    sess = ort.InferenceSession(model(("n", "h", "w")).SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(9)
    shapes = [(int(n), int(h), int(w)) for n, h, w in zip(rng.integers(1, 4, 10), rng.integers(17, 90, 10),
                                                          rng.integers(17, 90, 10))]
    shapes += shapes[:3] + [(1, 17, 17), (3, 89, 23)]
    dynamic({"x": np.zeros((1, 3, 40, 40), np.float32)})  # type: ignore[operator]
    compiles = {id(c): c.compiles for c in _convs(dynamic)}
    outs = {}
    for shape in shapes:
        x = rng.standard_normal((shape[0], 3, *shape[1:])).astype(np.float32)
        y = dynamic({"x": x})["y"]  # type: ignore[operator]
        np.testing.assert_allclose(y, sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
        outs[shape] = (x, y)
    assert all(c.compiles == compiles[id(c)] for c in _convs(dynamic))
    for shape in shapes[:2]:
        static = compile_model(model(shape).SerializeToString(), "x86_64_avx512", {"num_threads": 1})
        x, y = outs[shape]
        np.testing.assert_array_equal(static({"x": x})["y"], y)


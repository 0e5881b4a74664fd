"""A CNN with dynamic N, H, W against static compiles of the same shapes: what a new shape makes (work tables,
thread splits, dispatch calls) is shared, never a kernel, and gives the static compile's bytes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64.cache import FUNCTION_CACHE, ShapeCache

ort = pytest.importorskip("onnxruntime")


def _init(name: str, a: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(a.astype(np.float32), name)


PAD = {"pads": [1, 1, 1, 1]}
POOL = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
#: the layers of ``cnn``: (op, inputs, output, attributes)
LAYERS = [("Conv", ["x", "w0", "b0"], "c0", PAD), ("Relu", ["c0"], "r0", {}), ("MaxPool", ["r0"], "p0", POOL),
          ("Conv", ["p0", "wd"], "d0", {**PAD, "group": 24}), ("Relu", ["d0"], "d1", {}),
          ("Conv", ["d1", "w1"], "e0", {}), ("Add", ["e0", "p0"], "s0", {}),
          ("Conv", ["s0", "wa"], "a0", PAD), ("Relu", ["a0"], "a1", {}), ("Conv", ["a1", "wb"], "b1", PAD),
          ("Conv", ["b1", "w2"], "f0", {**PAD, "strides": [2, 2]}), ("MaxPool", ["f0"], "q0", POOL),
          ("LRN", ["q0"], "l0", {"size": 3, "alpha": 1e-3, "beta": 0.75, "bias": 1.0}),
          ("GlobalAveragePool", ["l0"], "y", {})]
#: weight name -> (shape, scale)
WEIGHTS = {"w0": ((24, 3, 3, 3), 0.3), "b0": ((24,), 1.0), "wd": ((24, 1, 3, 3), 0.3), "w1": ((24, 24, 1, 1), 0.2),
           "wa": ((24, 24, 3, 3), 0.1), "wb": ((24, 24, 3, 3), 0.1), "w2": ((48, 24, 3, 3), 0.1)}


def cnn(dims: tuple, seed: int = 4) -> onnx.ModelProto:
    """An RGB stem (planar copy) + MaxPool 3x3 s2 (overlapping: two kernels in a static compile too), a depthwise
    3x3, a 1x1 with a residual, two 3x3 convs of one geometry (a table shared by both), a strided 3x3 + MaxPool,
    an LRN, a GlobalAveragePool (after a pool: no conv epilogue in either compile); ``dims`` the input's N, H, W
    (names make them dynamic)."""
    rng = np.random.default_rng(seed)
    inits = [_init(name, rng.standard_normal(shape) * scale) for name, (shape, scale) in WEIGHTS.items()]
    nodes = [helper.make_node(op, ins, [out], **attrs) for op, ins, out, attrs in LAYERS]
    n, h, w = dims
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 3, h, w])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, 48, 1, 1])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _built(cm) -> int:  # type: ignore[no-untyped-def]
    """Kernels built so far: the process's function cache and the primitives' per-shape counts."""
    per_shape = sum(getattr(getattr(st.run, "__self__", st.run), "compiles", 0) for st in cm._steps)
    return FUNCTION_CACHE.stats["miss"] + FUNCTION_CACHE.stats["disk"] + per_shape


def test_new_and_seen_shapes_match_static_compiles_bit_for_bit() -> None:
    """New shapes, then shapes seen before, on the dynamic model: no kernel built for any of them, each output
    byte-identical to a static compile of that shape (the same kernels, walking tables made for the shape) and
    close to onnxruntime's."""
    dynamic = cnn(("n", "h", "w"))
    cm = compile_model(dynamic.SerializeToString(), "x86_64_avx512", {"num_threads": 2})
    assert all(where == "x86_64_avx512" for _, op, where in cm.placement() if op == "Subgraph")
    rng = np.random.default_rng(9)
    shapes = [(1, 30, 33), (2, 31, 29), (1, 30, 33), (3, 26, 40), (2, 31, 29), (1, 30, 33)]
    inputs = {s: rng.standard_normal((s[0], 3, *s[1:])).astype(np.float32) for s in shapes}
    before = _built(cm)
    got = [cm({"x": inputs[s]})["y"] for s in shapes]
    assert _built(cm) == before  # the kernels were made at compile time
    sess = ort.InferenceSession(dynamic.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape, y in zip(shapes, got):
        static = compile_model(cnn(shape).SerializeToString(), "x86_64_avx512", {"num_threads": 2})
        np.testing.assert_array_equal(y, static({"x": inputs[shape]})["y"])
        np.testing.assert_allclose(y, sess.run(None, {"x": inputs[shape]})[0], rtol=1e-4, atol=1e-4)


def test_primitives_of_one_geometry_share_their_tables() -> None:
    """Two convolutions of one geometry share a new shape's work table and thread split (``ShapeFields``); each
    primitive's executors of every shape share its dispatch calls (a new shape makes no argument block)."""
    cm = compile_model(cnn(("n", "h", "w")).SerializeToString(), "x86_64_avx512", {"num_threads": 2})
    rng = np.random.default_rng(3)
    caches = [getattr(st.run, "__self__", st.run) for st in cm._steps]
    caches = [c for c in caches if isinstance(c, ShapeCache)]
    calls = {id(c): len(getattr(c._first, "calls", ())) for c in caches}
    for shape in [(1, 22, 25), (2, 27, 21)]:
        cm({"x": rng.standard_normal((shape[0], 3, *shape[1:])).astype(np.float32)})
    same = [c for c in caches if getattr(c, "plan", None) is not None and c.plan.w.shape == (24, 24, 3, 3)]
    assert len(same) == 2
    for (shape_a, ex_a), (shape_b, ex_b) in zip(same[0].executors.items(), same[1].executors.items()):
        assert shape_a == shape_b and ex_a is not ex_b
        assert ex_a.table is ex_b.table and ex_a.chunks is ex_b.chunks and not ex_a.table.flags.writeable
    # the shapes after the stand-in: one geometry and one ShapeFields for the two (found by the primitives'
    # signature, ``shared_shape``), each paired with its own primitive's weights and its first executor's kernel
    for ex_a, ex_b in list(zip(same[0].executors.values(), same[1].executors.values()))[1:]:
        assert ex_a.geo is ex_b.geo and ex_a.fields is ex_b.fields and ex_a.packed is not ex_b.packed
        assert ex_a.kernel is same[0]._first.kernel and ex_b.kernel is same[1]._first.kernel
    # the global pool, the LRN and every conv: no dispatch call beyond the first shape's kernels and chunk counts
    for c in caches:
        first = c._first
        if hasattr(first, "calls"):
            for ex in c.executors.values():
                assert ex.calls is first.calls
            assert len(first.calls) <= max(calls[id(c)], 1) * 4


def test_dynamic_channel_permute_one_kernel_for_every_shape() -> None:
    """``DynamicPermute``: a channel shuffle of a dynamic N, H, W builds its kernel once and shares its dispatch
    call; each shape's output is the permutation (numpy's fancy indexing the oracle)."""
    from snippets_x86_64.channel_shuffle import DynamicPermute, shuffle_permutation

    perm = shuffle_permutation(40, 4)
    dp = DynamicPermute(perm, (1, 40, 6, 6), 2)
    rng = np.random.default_rng(1)
    built = FUNCTION_CACHE.stats["miss"]
    for n, h, w in [(1, 9, 7), (2, 5, 11), (1, 9, 7), (3, 1, 1), (0, 4, 4)]:
        x = rng.standard_normal((n, h, w, 40)).astype(np.float32).transpose(0, 3, 1, 2)  # NHWC memory
        (y,) = dp([x])
        np.testing.assert_array_equal(y, x[:, list(perm)])
    assert FUNCTION_CACHE.stats["miss"] == built and dp.compiles == 0
    assert all(ex.calls is dp._first.calls for ex in dp.executors.values())


def test_a_new_shape_makes_the_chains_executors_at_its_first_primitive() -> None:
    """The first primitive that meets a new shape makes the executors of every primitive down its chain (through
    the residual Add's Subgraph too): the call's later primitives find theirs made, and the result is right."""
    model = cnn(("n", "h", "w"))
    cm = compile_model(model.SerializeToString(), "x86_64_avx512", {"num_threads": 2})
    caches = [getattr(st.run, "__self__", st.run) for st in cm._steps]
    caches = [c for c in caches if isinstance(c, ShapeCache)]
    assert len(caches) >= 8
    made: list[int] = []
    for i, c in enumerate(caches):
        c.make = (lambda make, i: lambda *a: made.append(i) or make(*a))(c.make, i)
    x = np.random.default_rng(2).standard_normal((2, 3, 35, 38)).astype(np.float32)
    caches[0].executor(x.shape)
    assert sorted(made) == list(range(len(caches)))  # every primitive's executor for this shape, made ahead
    y = cm({"x": x})["y"]
    assert len(made) == len(caches)  # the call made nothing more
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(y, sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)

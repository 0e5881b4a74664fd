"""A dynamic shape's Reorder (and standalone Transpose) builds its JIT tile kernel at compile time: calls with new
shapes make tables, never kernels (the process-wide function cache counts no build), and their outputs match
numpy's transpose and onnxruntime."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper

from snippets_core.config import CompileConfig
from snippets_core.ir import ElementType
from snippets_core.ir.layout import NHWC, PLAIN
from snippets_core.ir.ops.io import Parameter
from snippets_core.passes.assign_layouts import make_reorder
from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64.cache import FUNCTION_CACHE
from snippets_x86_64.reorder import DynamicReorder, compile_reorder_subgraph

pytestmark = pytest.mark.avx512

SHAPES = [(1, 20, 5, 7), (2, 20, 9, 3), (1, 20, 1, 1), (3, 20, 16, 17), (1, 20, 2, 33), (0, 20, 4, 4)]


def _builds() -> int:
    return FUNCTION_CACHE.stats["miss"] + FUNCTION_CACHE.stats["disk"]


@pytest.mark.parametrize("dtype", [ElementType.f32, ElementType.i32])
@pytest.mark.parametrize("src,dst", [(PLAIN, NHWC), (NHWC, PLAIN)])
def test_a_dynamic_reorder_builds_its_kernel_at_compile_time(src, dst, dtype) -> None:  # type: ignore[no-untyped-def]
    FUNCTION_CACHE.clear()  # the compile below must be the one that builds the tile kernel
    x = Parameter(dtype, [None, 20, None, None], name="x")
    sg = make_reorder(x.outputs[0], src, dst)
    run = compile_reorder_subgraph(sg, CompileConfig(num_threads=2))
    assert isinstance(run, DynamicReorder)
    assert _builds() == 1
    for shape in SHAPES:
        logical = np.random.default_rng(sum(shape)).standard_normal(shape).__mul__(100).astype(dtype.numpy)
        # the source lies in ``src``: NHWC memory seen through its NCHW view
        a = logical if src is PLAIN else np.ascontiguousarray(logical.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        (y,) = run([a])
        np.testing.assert_array_equal(np.asarray(y), logical)
        memory = y if dst is PLAIN else y.transpose(0, 2, 3, 1)
        assert memory.flags.c_contiguous, shape
    assert _builds() == 1 and run.compiles == 0


def test_a_dynamic_transpose_subgraph_builds_its_tile_kernel_at_compile_time() -> None:
    ort = pytest.importorskip("onnxruntime")
    g = helper.make_graph([helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
                           helper.make_node("Relu", ["t"], ["y"])], "t",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 24, "H", "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    FUNCTION_CACHE.clear()
    cm = compile_model(model, "x86_64_avx512")
    built = _builds()
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for n, h, w in [(1, 5, 7), (2, 16, 3), (1, 33, 20)]:
        x = np.random.default_rng(h).standard_normal((n, 24, h, w)).astype(np.float32)
        np.testing.assert_allclose(cm({"x": x})["y"], sess.run(None, {"x": x})[0], rtol=0, atol=0)
    transposes = [p for p in cm.placement() if p[1] == "Subgraph"]
    assert transposes and all(w == "x86_64_avx512" for _, _, w in cm.placement())
    assert _builds() == built



@pytest.mark.parametrize("src,dst", [(PLAIN, NHWC), (NHWC, PLAIN)])
def test_no_shape_builds_a_reorder_kernel(src, dst) -> None:  # type: ignore[no-untyped-def]
    """Every N, C, H, W in {0, 1, 2, 17} (dims of 1 merge axes; C or H*W of 1 lie the same in both layouts): a
    shape either passes through or is a batch of 2-D transposes on the tile kernel built at compile time."""
    FUNCTION_CACHE.clear()
    x = Parameter(ElementType.f32, [None, None, None, None], name="x")
    run = compile_reorder_subgraph(make_reorder(x.outputs[0], src, dst), CompileConfig())
    assert isinstance(run, DynamicReorder) and _builds() == 1
    sizes = (0, 1, 2, 17)
    for shape in [(n, c, h, w) for n in sizes for c in sizes for h in sizes for w in sizes]:
        logical = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        a = logical if src is PLAIN else np.ascontiguousarray(logical.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        np.testing.assert_array_equal(np.asarray(run([a])[0]), logical)
    assert _builds() == 1 and run.compiles == 0


@pytest.mark.parametrize(("dims", "perm"), [(("B", "S", 12, 64), (0, 2, 1, 3)), (("B", "S", 3, 5), (1, 0, 2, 3)),
                                            (("N", 24, "H", "W"), (0, 2, 3, 1))])
def test_a_dynamic_transpose_builds_no_kernel_for_any_shape(dims, perm) -> None:  # type: ignore[no-untyped-def]
    """BERT's head split (a copy of runs of 64), a copy of runs of 15, and NCHW -> NHWC (tiles): every shape with
    dynamic dims in {0, 1, 2, 7}, dims of 1 merging axes into longer runs, on the kernels built at compile time."""
    g = helper.make_graph([helper.make_node("Transpose", ["x"], ["y"], perm=list(perm))], "t",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    cm = compile_model(model, "x86_64_avx512", {"num_threads": 2})
    built = _builds()
    sizes = (0, 1, 2, 7)
    dynamic = [k for k, d in enumerate(dims) if isinstance(d, str)]
    for values in itertools.product(sizes, repeat=len(dynamic)):
        shape = [d for d in dims]
        for k, v in zip(dynamic, values):
            shape[k] = v
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        np.testing.assert_array_equal(cm({"x": x})["y"], np.transpose(x, perm))
    assert _builds() == built
    assert all(w == "x86_64_avx512" for _, _, w in cm.placement())


@pytest.mark.parametrize("shape", [(1, 1, 5, 7), (3, 1, 4, 33), (2, 24, 1, 1), (1, 17, 1, 1), (5, 1, 1, 1)])
@pytest.mark.parametrize("at", ["end", "start"])
def test_copies_as_tiles_under_guard_pages(shape: tuple[int, ...], at: str) -> None:
    """NCHW -> NHWC of C = 1 or H*W = 1 (a copy plan) on the tile kernel as [1, run] blocks: both arrays flush
    against a PROT_NONE page, so every masked tail stays inside them."""
    from snippets_x86_64.guarded import guarded_array
    from snippets_x86_64.transpose import TransposeExecutor, tile_kernel

    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    src = guarded_array(shape, np.float32, at)
    src[...] = x
    for threads in (1, 2):
        ex = TransposeExecutor(shape, (0, 2, 3, 1), np.float32, threads, lambda s: guarded_array(s, np.float32, at),
                               min_bytes_per_thread=0, tiles=tile_kernel(4), copy_as_tiles=True)
        assert ex.plan.kind == "transpose" and ex.plan.rows == 1
        np.testing.assert_array_equal(ex.run(src), np.transpose(x, (0, 2, 3, 1)))


@pytest.mark.parametrize(("dims", "perm"), [(("B", 12, "S"), (1, 0, 2)), (("B", "S", 3, "D"), (2, 0, 1, 3)),
                                            ((2, "H", "W"), (1, 0, 2)), (("N", 3, "S"), (0, 1, 2))])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_a_transpose_whose_innermost_run_is_dynamic_builds_no_kernel_per_shape(  # type: ignore[no-untyped-def]
        dims, perm, dtype) -> None:
    """The innermost kept run has a dynamic length: the copy kernel that reads the run's vector counts and tail mask
    from its parameter block, built at compile time. Random shapes (runs 0..150: every vector tail, 4 vectors per
    unrolled block) against numpy, both arrays flush against a guard page, and no build after the compile."""
    from snippets_x86_64.guarded import guarded_array

    et = TensorProto.FLOAT if dtype == np.float32 else TensorProto.FLOAT16
    g = helper.make_graph([helper.make_node("Transpose", ["x"], ["y"], perm=list(perm))], "t",
                          [helper.make_tensor_value_info("x", et, list(dims))],
                          [helper.make_tensor_value_info("y", et, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    cm = compile_model(model, "x86_64_avx512", {"num_threads": 2})
    assert all(w == "x86_64_avx512" for _, _, w in cm.placement()), cm.describe()
    built = _builds()
    rng = np.random.default_rng(len(dims) * 10 + len(perm))
    for k in range(30):
        shape = [int(rng.integers(0, 150)) if k % 3 == 0 and j == len(dims) - 1 else int(rng.integers(1, 40))
                 if isinstance(d, str) else d for j, d in enumerate(dims)]
        x = rng.standard_normal(shape).astype(dtype)
        src = guarded_array(tuple(shape), dtype, "end" if k % 2 else "start")
        src[...] = x
        np.testing.assert_array_equal(cm({"x": src})["y"], np.transpose(x, perm), err_msg=str(shape))
    assert _builds() == built, "a new shape built a kernel"
    if dims[-1] != 12 and perm[-1] == len(dims) - 1:
        assert "run length read at run time" in cm.describe()


@pytest.mark.parametrize("size", [4, 2])
@pytest.mark.parametrize("at", ["end", "start"])
def test_the_any_run_copy_kernel_stays_inside_both_arrays(size: int, at: str) -> None:
    """Every run length 0..140 (UNROLL blocks, single vectors, each tail) for 1 and 2 threads, source and destination
    flush against a PROT_NONE page."""
    from snippets_x86_64.guarded import guarded_array
    from snippets_x86_64.transpose import TransposeExecutor, any_copy_kernel

    dtype = np.float32 if size == 4 else np.float16
    kernel = any_copy_kernel(size)
    for run in range(0, 141):
        shape = (3, 2, run)
        x = np.arange(np.prod(shape), dtype=np.float32).astype(dtype).reshape(shape)
        src = guarded_array(shape, dtype, at)
        src[...] = x
        for threads in (1, 2):
            ex = TransposeExecutor(shape, (1, 0, 2), dtype, threads, lambda s: guarded_array(s, dtype, at),
                                   min_bytes_per_thread=0, copy_any=kernel)
            assert ex.empty or ex.plan.kind != "copy" or ex.kernel is kernel
            np.testing.assert_array_equal(ex.run(src), np.transpose(x, (1, 0, 2)), err_msg=f"run {run}")

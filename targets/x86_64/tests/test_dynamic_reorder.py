"""A dynamic shape's Reorder (and standalone Transpose) builds its JIT tile kernel at compile time: calls with new
shapes make tables, never kernels (the process-wide function cache counts no build), and their outputs match
numpy's transpose and onnxruntime."""

from __future__ import annotations

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

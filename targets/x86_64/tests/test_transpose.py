"""A standalone Transpose as a JIT kernel (snippets_x86_64.transpose): every perm of ranks 2-5 against numpy under
guard pages, the plans the perms reduce to, and whole models against onnx's reference evaluator."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import snippets_core
from snippets_x86_64.guarded import guarded_array
from snippets_x86_64.transpose import TransposeExecutor, plan_transpose, reduce_perm, transpose_supported

#: odd sizes (1, 3, 17, 33): every tile and vector has a tail, and size-1 axes merge away
SHAPES = {
    2: [(17, 33), (33, 3), (1, 17)],
    3: [(3, 17, 33), (33, 1, 17)],
    4: [(3, 17, 1, 33), (17, 3, 33, 3)],
    5: [(3, 1, 17, 3, 33), (1, 17, 3, 33, 3)],
}
PERMS = [p for r in SHAPES for p in itertools.permutations(range(r))]


@pytest.mark.parametrize("perm", PERMS, ids=["".join(map(str, p)) for p in PERMS])
def test_every_perm_against_numpy_under_guard_pages(perm: tuple[int, ...]) -> None:
    """The source and the destination each flush against a PROT_NONE page (after the end, then before the start):
    every masked run tail and tile tail stays inside both arrays; 1 and 2 threads."""
    for shape in SHAPES[len(perm)]:
        x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        for at, threads in itertools.product(("end", "start"), (1, 2)):
            src = guarded_array(shape, np.float32, at)
            src[...] = x
            alloc = lambda s, at=at: guarded_array(s, np.float32, at)  # noqa: E731
            ex = TransposeExecutor(shape, perm, np.float32, threads, alloc, min_bytes_per_thread=0)
            assert len(ex.chunks) == min(threads, len(ex.table))
            y = ex.run(src)
            assert y.flags.c_contiguous and ex.copies == 0
            np.testing.assert_array_equal(y, np.transpose(x, perm), err_msg=f"{shape} {perm} {at} {threads}")


@pytest.mark.parametrize(("shape", "perm", "reduced", "kind"), [
    ((1, 128, 12, 64), (0, 2, 1, 3), ((128, 12, 64), (1, 0, 2)), "copy"),  # BERT's head split
    ((2, 8, 5, 7), (0, 2, 3, 1), ((2, 8, 35), (0, 2, 1)), "transpose"),  # NCHW -> NHWC
    ((2, 5, 7, 8), (0, 3, 1, 2), ((2, 35, 8), (0, 2, 1)), "transpose"),  # NHWC -> NCHW
    ((4, 6, 9), (0, 2, 1), ((4, 6, 9), (0, 2, 1)), "transpose"),  # the last-two swap
    ((3, 4, 5), (0, 1, 2), ((60,), (0,)), "copy"),  # identity: one run
    ((1, 1), (1, 0), ((), ()), "copy"),
])
def test_perms_reduce_to_a_copy_or_a_batched_2d_transpose(shape: tuple[int, ...], perm: tuple[int, ...],
                                                           reduced: tuple[tuple[int, ...], ...], kind: str) -> None:
    assert reduce_perm(shape, perm) == reduced
    assert plan_transpose(shape, perm).kind == kind


def test_rank_6_int32_and_a_strided_input() -> None:
    x = np.arange(3 * 2 * 5 * 1 * 4 * 17, dtype=np.int32).reshape(3, 2, 5, 1, 4, 17)
    perm = (5, 2, 0, 4, 3, 1)
    ex = TransposeExecutor(x.shape, perm, np.int32, 2, min_bytes_per_thread=0)
    np.testing.assert_array_equal(ex.run(x), np.transpose(x, perm))
    strided = np.random.default_rng(0).standard_normal((6, 40)).astype(np.float32)[:, ::2]
    ex = TransposeExecutor(strided.shape, (1, 0), np.float32)
    np.testing.assert_array_equal(ex.run(strided), strided.T)
    assert ex.copies == 1  # a non-contiguous input is made contiguous first, and counted


def test_a_callers_output_array_is_written_in_place() -> None:
    shape, perm = (2, 17, 3, 33), (0, 2, 1, 3)
    proto = _model([helper.make_node("Transpose", ["x"], ["y"], perm=perm)], shape, (2, 3, 17, 33))
    cm = snippets_core.compile_model(proto, target="x86_64_avx512")
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    out = guarded_array((2, 3, 17, 33), np.float32)
    cm({"x": x}, outputs={"y": out})
    np.testing.assert_array_equal(out, np.transpose(x, perm))


@pytest.mark.parametrize("perm", PERMS, ids=["".join(map(str, p)) for p in PERMS])
def test_every_perm_of_2_byte_elements_against_numpy_under_guard_pages(perm: tuple[int, ...]) -> None:
    """bf16 and int16 (bf16 attention's K and context Transposes): the copy kernel's 32-word vectors and word tail
    mask, the tile kernel's widened rows narrowed back, at guard pages on both sides, 1 and 2 threads; bit-exact."""
    import ml_dtypes

    for shape in SHAPES[len(perm)]:
        rng = np.random.default_rng(sum(shape))
        for dtype in (np.dtype(ml_dtypes.bfloat16), np.dtype(np.int16)):
            x = rng.integers(-(2**15), 2**15, shape, dtype=np.int64).astype(np.int16).view(dtype)
            for at, threads in itertools.product(("end", "start"), (1, 2)):
                src = guarded_array(shape, dtype, at)
                src[...] = x
                alloc = lambda s, at=at, dtype=dtype: guarded_array(s, dtype, at)  # noqa: E731
                ex = TransposeExecutor(shape, perm, dtype, threads, alloc, min_bytes_per_thread=0)
                y = ex.run(src)
                assert y.dtype == dtype and y.flags.c_contiguous and ex.copies == 0
                np.testing.assert_array_equal(y.view(np.int16), np.transpose(x, perm).view(np.int16),
                                              err_msg=f"{dtype} {shape} {perm} {at} {threads}")


def test_a_bf16_transpose_in_a_model_is_a_jit_transpose() -> None:
    """A bf16 Transpose between bf16 ops is a JIT transpose Subgraph (not a numpy view), equal to numpy's."""
    import ml_dtypes

    graph = helper.make_graph([helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
                               helper.make_node("Relu", ["t"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, (1, 37, 4, 32))],
                              [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, (1, 4, 32, 37))])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    cm = snippets_core.compile_model(proto, target="x86_64_avx512")
    assert "JIT transpose [0, 2, 3, 1]" in cm.describe(), cm.describe()
    x = np.random.default_rng(3).standard_normal((1, 37, 4, 32)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(cm({"x": x})["y"].astype(np.float32),
                                  np.maximum(np.transpose(x, (0, 2, 3, 1)).astype(np.float32), 0))


def test_what_the_kernels_cannot_move_is_named() -> None:
    assert "4-byte" in transpose_supported((3, 5), (1, 0), np.dtype(np.float64))
    assert "not a permutation" in transpose_supported((3, 5), (0, 0), np.dtype(np.float32))
    assert transpose_supported((40_000_000, 2), (1, 0), np.dtype(np.float32)) is None  # 64-bit row pitches


def test_an_empty_tensor_transposes_to_an_empty_tensor() -> None:
    y = TransposeExecutor((0, 3, 5), (2, 0, 1), np.float32).run(np.empty((0, 3, 5), np.float32))
    assert y.shape == (5, 0, 3)


def _model(nodes, in_shape, out_shape):  # type: ignore[no-untyped-def]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("perm", [(0, 2, 1, 3), (0, 2, 3, 1), (0, 3, 1, 2), (0, 1, 3, 2), (3, 1, 0, 2)])
def test_a_transpose_between_eltwise_ops_against_the_reference_evaluator(perm: tuple[int, ...], threads: int) -> None:
    shape = (2, 17, 3, 33)
    out = tuple(shape[a] for a in perm)
    proto = _model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Transpose", ["a"], ["b"], perm=perm),
                    helper.make_node("Sigmoid", ["b"], ["y"])], shape, out)
    cm = snippets_core.compile_model(proto, target="x86_64_avx512", config={"num_threads": threads})
    placement = {name: (op, where) for name, op, where in cm.placement()}
    assert placement["Transpose_1"] == ("Subgraph", "x86_64_avx512"), cm.describe()
    assert "Subgraph Transpose_1: Transpose" in cm.describe()
    assert f"JIT transpose {list(perm)}, 1 shape(s)" in cm.describe()
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    (want,) = ReferenceEvaluator(proto).run(None, {"x": x})
    np.testing.assert_allclose(cm({"x": x})["y"], want, rtol=1e-6, atol=1e-6)


def test_dynamic_shapes_get_a_plan_per_shape_and_share_the_copy_kernel() -> None:
    proto = _model([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 1, 3])], ("B", "S", 12, 64),
                   ("B", 12, "S", 64))
    cm = snippets_core.compile_model(proto, target="x86_64_avx512", config={"num_threads": 2})
    assert [w for _, _, w in cm.placement()] == ["x86_64_avx512"], cm.describe()
    for b, s in ((1, 7), (2, 33), (1, 128), (1, 7)):
        x = np.random.default_rng(s).standard_normal((b, s, 12, 64)).astype(np.float32)
        (want,) = ReferenceEvaluator(proto).run(None, {"x": x})
        np.testing.assert_array_equal(cm({"x": x})["y"], want)
    assert "JIT transpose [0, 2, 1, 3], 3 shape(s): runs of 64 copied" in cm.describe()
    kernels = {TransposeExecutor((b, s, 12, 64), (0, 2, 1, 3), np.float32).kernel.address for b, s in ((1, 7), (2, 33))}
    assert len(kernels) == 1  # the copy kernel depends on the run length only
    tiles = {TransposeExecutor(shape, (0, 2, 1), np.float32).kernel.address for shape in ((2, 7, 33), (1, 40, 3))}
    assert len(tiles) == 1  # the tile kernel reads every shape-dependent value from its parameters and table


def test_a_transpose_of_another_element_type_stays_a_numpy_view_with_its_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = helper.make_graph([helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.DOUBLE, (3, 5))],
                              [helper.make_tensor_value_info("y", TensorProto.DOUBLE, (5, 3))])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    from snippets_core.cli import main

    path = tmp_path / "t.onnx"
    path.write_bytes(proto.SerializeToString())
    assert main(["inspect", str(path), "--target", "x86_64_avx512"]) == 0
    assert "not a JIT transpose: target:x86_64_avx512: Transpose of f64" in capsys.readouterr().out
    cm = snippets_core.compile_model(proto, target="x86_64_avx512")
    assert cm.placement()[0][1:] == ("Transpose", "reference")
    assert "4-byte" in cm.describe()
    x = np.random.default_rng(2).standard_normal((3, 5))
    np.testing.assert_array_equal(cm({"x": x})["y"], x.T)


def test_a_transpose_after_a_conv_primitive_reads_it_through_a_reorder() -> None:
    """The conv hands out NHWC memory; the transpose Subgraph is no element-wise op, so AssignLayouts gives it a
    plain input (a Reorder in between) and the perm still applies to the logical NCHW dims."""
    w = np.random.default_rng(4).standard_normal((8, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]), helper.make_node("Relu", ["t"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 9, 7))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 9, 7, 8))],
        [helper.make_tensor(name="w", data_type=TensorProto.FLOAT, dims=w.shape, vals=w.reshape(-1).tolist())])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    cm = snippets_core.compile_model(proto, target="x86_64_avx512")
    assert "Subgraph Transpose_1: Transpose" in cm.describe()
    x = np.random.default_rng(5).standard_normal((1, 3, 9, 7)).astype(np.float32)
    (want,) = ReferenceEvaluator(proto).run(None, {"x": x})
    np.testing.assert_allclose(cm({"x": x})["y"], want, rtol=1e-4, atol=1e-4)


def test_a_transpose_without_perm_reverses_the_axes() -> None:
    proto = _model([helper.make_node("Transpose", ["x"], ["y"])], (2, 3, 17), (17, 3, 2))
    cm = snippets_core.compile_model(proto, target="x86_64_avx512")
    x = np.random.default_rng(6).standard_normal((2, 3, 17)).astype(np.float32)
    np.testing.assert_array_equal(cm({"x": x})["y"], x.T)
    assert "JIT transpose [2, 1, 0], 1 shape(s)" in cm.describe()

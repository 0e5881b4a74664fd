"""Layouts lowered into strides: LoadReorder (TransposeDecomposition) and Brgemm layouts, PropagateLayout and the
kernel's planar data offsets. Numbers against numpy transposes; offsets against numpy's own strides."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.codegen.interpreter import InterpreterTarget
from snippets_core.codegen.subgraph_codegen import generate_subgraph
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Multiply
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.matmul import MatMul
from snippets_core.ir.ops.shape_ops import Transpose
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.ops.unary import Exp, Relu
from snippets_core.passes.pass_manager import PassPosition, PositionedPass
from snippets_core.passes.transpose_decomposition import TransposeDecomposition

DECOMPOSE = [PositionedPass(TransposeDecomposition(), PassPosition("softmax-decomposition"))]


def _transpose(x, order):  # type: ignore[no-untyped-def]
    return Transpose(x, Constant(np.array(order, dtype=np.int64)))


def _subgraph(body: Model) -> Subgraph:
    return Subgraph(*[Parameter(p.element_type, p.shape, name=p.name) for p in body.parameters], body=body)


@pytest.mark.parametrize(("shape", "order"), [
    ((2, 3, 5, 7), [0, 2, 3, 1]),
    ((2, 3, 5, 7), [0, 3, 1, 2]),
    ((2, 3, 5, 7), [3, 2, 1, 0]),
    ((5, 19), [1, 0]),
    ((4, 17, 3), [0, 2, 1]),
])
@pytest.mark.parametrize("vector_size", [4, 16])
def test_load_reorder_matches_numpy_transpose(shape, order, vector_size):
    p = Parameter("f32", shape, name="x")
    body = Model([Result(Relu(_transpose(p, order)), name="y")], [p])
    gen = generate_subgraph(_subgraph(body), InterpreterTarget(vector_size), positioned_passes=DECOMPOSE)
    assert any(e.type_name == "LoadReorder" for e in gen.linear_ir.exprs)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    (y,) = gen.kernel.run([x])
    np.testing.assert_array_equal(y.reshape(gen.output_shapes[0]), np.maximum(np.transpose(x, order), 0))


def test_load_reorder_feeding_an_eltwise_with_a_second_input():
    shape, order = (2, 6, 9), [0, 2, 1]
    p, q = Parameter("f32", shape, name="x"), Parameter("f32", (2, 9, 6), name="z")
    body = Model([Result(Multiply(Exp(_transpose(p, order)), q), name="y")], [p, q])
    gen = generate_subgraph(_subgraph(body), InterpreterTarget(8), positioned_passes=DECOMPOSE)
    rng = np.random.default_rng(2)
    x, z = rng.standard_normal(shape).astype(np.float32), rng.standard_normal((2, 9, 6)).astype(np.float32)
    (y,) = gen.kernel.run([x, z])
    np.testing.assert_allclose(y.reshape(2, 9, 6), np.exp(np.transpose(x, order).astype(np.float64)) * z, rtol=1e-6)


@pytest.mark.parametrize(("order_a", "order_b", "order_c"), [
    ([0, 2, 1, 3], None, None),
    (None, [0, 2, 1, 3], [0, 2, 1, 3]),
    ([0, 2, 1, 3], [0, 2, 1, 3], [0, 2, 1, 3]),
    ([2, 0, 1, 3], [1, 2, 0, 3], [1, 2, 0, 3]),
])
def test_brgemm_layouts_are_strides(order_a, order_b, order_c):
    """Transposes that keep the last dim fold into the Brgemm (FuseTransposeBrgemm); the lowering reads and
    writes through strides and the parallel domain is planar."""
    b, h, m, k, n = 2, 3, 37, 20, 70
    planar_a, planar_b = (b, h, m, k), (b, h, k, n)
    # stored shapes: the inverse permutation of what the Transpose makes planar
    stored_a = tuple(planar_a[i] for i in np.argsort(order_a)) if order_a else planar_a
    stored_b = tuple(planar_b[i] for i in np.argsort(order_b)) if order_b else planar_b
    pa, pb = Parameter("f32", stored_a, name="a"), Parameter("f32", stored_b, name="b")
    x = MatMul(_transpose(pa, order_a) if order_a else pa, _transpose(pb, order_b) if order_b else pb)
    y = _transpose(x, order_c) if order_c else x
    gen = generate_subgraph(_subgraph(Model([Result(y, name="y")], [pa, pb])), InterpreterTarget(16))
    brgemm = next(e for e in gen.linear_ir.exprs if e.type_name == "Brgemm")
    assert any(not d.is_planar for d in brgemm.input_descs + brgemm.output_descs)
    rng = np.random.default_rng(4)
    xa, xb = rng.standard_normal(stored_a).astype(np.float32), rng.standard_normal(stored_b).astype(np.float32)
    ta = np.transpose(xa, order_a) if order_a else xa
    tb = np.transpose(xb, order_b) if order_b else xb
    ref = ta.astype(np.float64) @ tb
    ref = np.transpose(ref, order_c) if order_c else ref
    (out,) = gen.kernel.run([xa, xb])
    np.testing.assert_allclose(out.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4)


def test_propagate_layout_gives_planar_data_offsets():
    """The kernel's per-index data offsets of an input read through [0,2,1,3] are numpy's byte strides of the
    transposed view, in planar order; the master shape is planar."""
    stored = (2, 37, 3, 20)
    pa, pb = Parameter("f32", stored, name="a"), Parameter("f32", (2, 3, 20, 8), name="b")
    y = MatMul(_transpose(pa, [0, 2, 1, 3]), pb)
    gen = generate_subgraph(_subgraph(Model([Result(y, name="y")], [pa, pb])), InterpreterTarget(16))
    ir = gen.linear_ir
    assert ir.parameters[0].output_descs[0].layout == (0, 2, 1, 3)
    assert ir.get_master_shape() == (2, 3, 37, 8)
    offsets = gen.kernel.data_offsets[0]
    view = np.transpose(np.empty(stored, dtype=np.float32), (0, 2, 1, 3))
    assert offsets == list(view.strides)

"""TransposeDecomposition on a Transpose of a value the body computes: the eltwise ops move behind reordered loads
of the Parameters, and the interpreter's kernel matches numpy float64 (such bodies once failed to compile)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from snippets_core.codegen.interpreter import InterpreterTarget
from snippets_core.codegen.subgraph_codegen import generate_subgraph
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node
from snippets_core.ir.ops.binary import Add, Multiply
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.shape_ops import Transpose
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.ops.unary import Relu
from snippets_core.passes.pass_manager import PassPosition, PositionedPass
from snippets_core.passes.transpose_decomposition import TransposeDecomposition

DECOMPOSE = [PositionedPass(TransposeDecomposition(), PassPosition("broadcast-to-move-broadcast"))]
SHAPE, ORDER = (2, 3, 5, 17), [0, 2, 3, 1]
TSHAPE = tuple(SHAPE[i] for i in ORDER)


def _t(x: Node) -> Node:
    return Transpose(x, Constant(np.array(ORDER, np.int64)))


def _subgraph(body: Model) -> Subgraph:
    return Subgraph(*[Parameter(p.element_type, p.shape, name=p.name) for p in body.parameters], body=body)


def _relu_t() -> tuple[Model, Callable[..., np.ndarray]]:
    x = Parameter("f32", SHAPE, name="x")
    return Model([Result(_t(Relu(x)), name="y")], [x]), lambda x: np.maximum(x, 0).transpose(ORDER)


def _t_relu() -> tuple[Model, Callable[..., np.ndarray]]:
    x = Parameter("f32", SHAPE, name="x")
    return Model([Result(Relu(_t(x)), name="y")], [x]), lambda x: np.maximum(x.transpose(ORDER), 0)


def _add_t_mul() -> tuple[Model, Callable[..., np.ndarray]]:
    x, z, w = Parameter("f32", SHAPE, name="x"), Parameter("f32", SHAPE, name="z"), Parameter("f32", TSHAPE, name="w")
    body = Model([Result(Multiply(_t(Add(x, z)), w), name="y")], [x, z, w])
    return body, lambda x, z, w: (x + z).transpose(ORDER) * w


@pytest.mark.parametrize("build", [_relu_t, _t_relu, _add_t_mul], ids=["relu_t", "t_relu", "add_t_mul"])
@pytest.mark.parametrize("vector_size", [4, 16])
def test_body_transposes_run_on_the_interpreter(build: Callable[[], tuple[Model, Callable[..., np.ndarray]]],
                                                vector_size: int) -> None:
    body, ref = build()
    gen = generate_subgraph(_subgraph(body), InterpreterTarget(vector_size), positioned_passes=DECOMPOSE)
    assert any(e.type_name == "LoadReorder" for e in gen.linear_ir.exprs)
    rng = np.random.default_rng(5)
    args = [rng.standard_normal(tuple(p.shape.dims)).astype(np.float32) for p in body.parameters]
    (y,) = gen.kernel.run(args)
    np.testing.assert_allclose(y.reshape(TSHAPE), ref(*[a.astype(np.float64) for a in args]), rtol=1e-6, atol=1e-6)


def test_a_value_used_transposed_and_plain_is_cloned_for_the_transposed_use() -> None:
    x = Parameter("f32", SHAPE, name="x")
    r = Relu(x)
    body = Model([Result(Multiply(_t(r), Constant(np.float32(2.0))), name="y"), Result(Add(r, x), name="y2")], [x])
    sg = _subgraph(body)
    assert TransposeDecomposition().run(sg)
    types = [n.type_name for n in sg.body.get_ordered_ops()]
    assert "Transpose" not in types and types.count("Relu") == 2 and types.count("LoadReorder") == 1, types
    # the plain use keeps the original Relu of the Parameter
    add = next(n for n in sg.body.get_ordered_ops() if n.type_name == "Add")
    assert [add.inputs[0].source.node.type_name, add.inputs[0].source.node.inputs[0].source.node.type_name] == [
        "Relu", "Parameter"]

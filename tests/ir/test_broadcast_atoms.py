"""Broadcast atoms: two different symbolic dims meeting in a broadcast give ``bcast(S,T)``, a named dim related to
both (whichever is not 1 at run time), canonical whatever the order of the meetings, evaluated from its names."""

from __future__ import annotations

import numpy as np

from snippets_core.ir import Model, Shape, broadcast_shapes
from snippets_core.ir.ops.binary import Add, Multiply
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.matmul import MatMul
from snippets_core.ir.ops.misc import ShapeOf
from snippets_core.ir.ops.select import Select
from snippets_core.ir.shape import SymDim, broadcast_constraints, broadcast_dim, broadcast_operands
from snippets_core.lowered.symbolic import dim_names, dims_named_everywhere

B, S, T, U = SymDim.of("B"), SymDim.of("S"), SymDim.of("T"), SymDim.of("U")


def test_distinct_symbols_give_one_canonical_atom() -> None:
    st = broadcast_dim(S, T)
    assert str(st) == "bcast(S,T)" and st == broadcast_dim(T, S)
    assert broadcast_dim(st, S) == st and broadcast_dim(T, st) == st  # meeting an operand again changes nothing
    assert str(broadcast_dim(st, U)) == "bcast(S,T,U)" == str(broadcast_dim(U, broadcast_dim(T, S)))
    assert broadcast_operands(st) == (S, T) and broadcast_operands(S) is None
    assert broadcast_dim(S, 1) == S and broadcast_dim(1, T) == T and broadcast_dim(S, 7) == 7
    assert broadcast_dim(S, None) is None  # an unknown dim stays unknown: it has no name to relate
    assert str(broadcast_dim(S, S + 1)) == "bcast(S,S+1)"


def test_an_atom_evaluates_to_the_operand_that_is_not_one() -> None:
    st = broadcast_dim(S, T)
    assert st.evaluate({"S": 1, "T": 5}) == 5 and st.evaluate({"S": 5, "T": 1}) == 5
    assert st.evaluate({"S": 5, "T": 5}) == 5 and st.evaluate({"S": 1, "T": 1}) == 1
    assert st.evaluate({"S": 5}) is None and (2 * st + 1).evaluate({"S": 1, "T": 4}) == 9
    assert st.base_names == {"S", "T"} and (B * st).base_names == {"B", "S", "T"}


def test_ops_after_a_broadcast_keep_the_atom() -> None:
    a = Parameter("f32", Shape([B, S, 8]), name="a")
    b = Parameter("f32", Shape([B, T, 8]), name="b")
    add = Add(a, b)
    assert str(add.outputs[0].shape) == "[B,bcast(S,T),8]"
    mm = MatMul(add, Constant(np.zeros((8, 4), np.float32)))
    assert str(mm.outputs[0].shape) == "[B,bcast(S,T),4]"
    sel = Select(Parameter("boolean", Shape([1, S, 1]), name="c"), mm, Constant(np.float32(0)))
    assert str(sel.outputs[0].shape) == "[B,bcast(S,T),4]"
    assert str(ShapeOf(sel).outputs[0].shape) == "[3]"
    assert [str(d) for d in broadcast_constraints([sel.outputs[0].shape, a.outputs[0].shape])] == ["bcast(S,T)"]
    # an atom is a dim name where a body input has it; one made inside the body is run-time broadcasting
    assert dim_names(add.outputs[0].shape) == ("B", "bcast(S,T)", None)
    made_inside = Model([Result(Add(Parameter("f32", Shape([B, S]), name="p"), Parameter("f32", Shape([B, T]),
                                                                                          name="q")))])
    assert not dims_named_everywhere(made_inside)
    given = Model([Result(Multiply(Parameter("f32", Shape([B, broadcast_dim(S, T)]), name="p"),
                                   Parameter("f32", Shape([B, 1]), name="q")))])
    assert dims_named_everywhere(given)
    assert str(broadcast_shapes(Shape([S]), Shape([1]))) == "[S]"

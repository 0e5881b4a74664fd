"""Symbolic dims: the SymDim algebra, Shape's symbols beside None, and per-op inference that relates dims."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.ir import Model, Shape, broadcast_shapes
from snippets_core.ir.const_eval import shape_value
from snippets_core.ir.ops.binary import Add, Equal, Multiply, Subtract
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.matmul import MatMul
from snippets_core.ir.ops.misc import ConstantOfShape, Range, ShapeOf, Slice
from snippets_core.ir.ops.reduce import ReduceProd, ReduceSum
from snippets_core.ir.ops.select import Select
from snippets_core.ir.ops.shape_ops import Broadcast, Concat, Gather, Reshape, Split, Squeeze, Transpose, Unsqueeze
from snippets_core.ir.shape import SymDim
from snippets_core.passes.constant_folding import ConstantFolding

B, S, P = SymDim.of("B"), SymDim.of("S"), SymDim.of("P")


def i64(*v: int) -> Constant:
    return Constant(np.asarray(v, np.int64))


def scalar(v: int) -> Constant:
    return Constant(np.asarray(v, np.int64))


def shape_str(node) -> str:  # type: ignore[no-untyped-def]
    return str(node.outputs[0].shape)


# --- the algebra ------------------------------------------------------------------------------------
def test_symdim_algebra_is_exact() -> None:
    assert S + 1 != S and S + 1 == 1 + S and S * 12 == 12 * S and 2 * B == B + B
    assert str(S + 1) == "S+1" and str(2 * B) == "2*B" and str(S * 12) == "12*S" and str(B * S * 768) == "768*B*S"
    assert str(S - 1) == "S-1" and str(P + S) == "P+S"
    assert (B * S * 768).exact_div(B * 12) == 64 * S
    assert (S + 1).exact_div(2) is None and (B * S).exact_div(P) is None
    assert (S + P - S).name == "P" and (S - S).constant == 0
    assert (S * 2 + 1).evaluate({"S": 10}) == 21 and (S + P).evaluate({"S": 1}) is None


def test_shape_keeps_none_in_dims_and_symbols_beside() -> None:
    s = Shape([B, S, 768])
    assert s.dims == (None, None, 768) and s.is_dynamic and not s.is_static
    assert s.sym_dims == (B, S, 768) and s.symbols == {"B", "S"}
    assert str(s) == "[B,S,768]" and str(Shape([None, 4])) == "[?,4]"
    # symbols are extra knowledge, not identity: shapes compare and hash by dims
    assert s == Shape([None, None, 768]) and hash(s) == hash(Shape([None, None, 768]))
    assert str(s[1:]) == "[S,768]"
    assert Shape([S - S + 3]).dims == (3,)  # a symbol-free expression is its number


@pytest.mark.parametrize(("a", "b", "want"), [
    ([B, S, 768], [768], "[B,S,768]"),
    ([B, 1, 1, S], [B, 12, S, S], "[B,12,S,S]"),
    ([S], [S + 1], "[bcast(S,S+1)]"),  # different expressions: whichever is not 1 at run time
    ([S, 4], [128, 4], "[128,4]"),  # S must be 1 or 128
    ([None, 4], [S, 1], "[?,4]"),
])
def test_broadcast(a, b, want) -> None:  # type: ignore[no-untyped-def]
    assert str(broadcast_shapes(Shape(a), Shape(b))) == want


# --- per-op inference -------------------------------------------------------------------------------
def x_bsh(hidden: int = 768) -> Parameter:
    return Parameter("f32", Shape([B, S, hidden]), name="x")


def test_matmul_relates_m_and_n() -> None:
    w = Constant(np.zeros((768, 3072), np.float32))
    assert shape_str(MatMul(x_bsh(), w)) == "[B,S,3072]"
    q = Parameter("f32", Shape([B, 12, S, 64]))
    k = Parameter("f32", Shape([B, 12, P + S, 64]))
    assert shape_str(MatMul(q, k, transpose_b=True)) == "[B,12,S,P+S]"


def test_concat_sums_the_axis() -> None:
    past = Parameter("f32", Shape([B, 12, P, 64]))
    new = Parameter("f32", Shape([B, 12, S, 64]))
    assert shape_str(Concat(past, new, axis=2)) == "[B,12,P+S,64]"
    one = Parameter("f32", Shape([B, 1]))
    assert shape_str(Concat(Parameter("f32", Shape([B, S])), one, axis=1)) == "[B,S+1]"


def test_reshape_with_zero_minus_one_and_flatten() -> None:
    x = x_bsh()
    assert shape_str(Reshape(x, i64(0, 0, 12, 64), special_zero=True)) == "[B,S,12,64]"
    assert shape_str(Reshape(x, i64(0, 0, -1, 64), special_zero=True)) == "[B,S,12,64]"
    flat = Reshape(x, i64(-1, 768))
    assert shape_str(flat) == "[B*S,768]"
    # back from [B*S, 768] with a target built from Shape(x): the -1 divides out exactly
    sx = ShapeOf(x)
    target = Concat(Unsqueeze(Gather(sx, scalar(0), scalar(0)), i64(0)), i64(-1, 12, 64), axis=0)
    assert shape_str(Reshape(flat, target)) == "[B,S,12,64]"


def test_reshape_target_from_shape_vector() -> None:
    """Reshape(x, Concat(Gather(Shape(x), 0), Gather(Shape(x), 1), 12, 64)) infers [B, S, 12, 64]."""
    x = x_bsh()
    sx = ShapeOf(x)
    dims = [Unsqueeze(Gather(sx, scalar(i), scalar(0)), i64(0)) for i in (0, 1)]
    target = Concat(*dims, i64(12, 64), axis=0)
    assert shape_value(target) == (B, S, 12, 64)
    r = Reshape(x, target)
    assert shape_str(r) == "[B,S,12,64]"
    assert shape_str(Transpose(r, i64(0, 2, 1, 3))) == "[B,12,S,64]"


def test_shape_vector_arithmetic() -> None:
    sx = ShapeOf(x_bsh())
    s = Gather(sx, i64(1), scalar(0))
    assert shape_value(s) == (S,)
    assert shape_value(Add(s, i64(1))) == (S + 1,)
    assert shape_value(Subtract(s, s)) == (0,)
    assert shape_value(Multiply(Gather(sx, i64(0, 1), scalar(0)), i64(2))) == (2 * B, 2 * S)
    assert shape_value(ReduceProd(sx, i64(0), keep_dims=False)) == (768 * B * S,)
    assert shape_value(Gather(sx, i64(2), scalar(0))) == (768,)
    # Where(Equal(shape, -1), ones, shape): the TorchScript exporter's expand(-1)
    sv = Gather(sx, i64(0, 1), scalar(0))
    ones = ConstantOfShape(ShapeOf(sv), value=np.ones(1, np.int64))
    assert shape_value(Select(Equal(sv, i64(-1)), ones, sv)) == (B, S)
    assert shape_value(ReduceSum(sx, i64(0))) is None  # no rule: unknown, never guessed


def test_slice_range_expand_gather_squeeze_split() -> None:
    x = x_bsh(64)
    sx = ShapeOf(x)
    s1 = Unsqueeze(Gather(sx, scalar(1), scalar(0)), i64(0))
    # a causal mask sliced out of a constant buffer with symbolic bounds
    buf = Constant(np.tril(np.ones((1, 1, 128, 128), bool)))
    rows = Slice(buf, Subtract(s1, s1), s1, i64(2), i64(1))
    assert shape_str(rows) == "[1,1,S,128]"
    assert shape_str(Slice(rows, i64(0), s1, i64(3), i64(1))) == "[1,1,S,S]"
    # constant bounds on a symbolic dim, and an untouched symbolic dim
    assert shape_str(Slice(x, i64(1), i64(2**63 - 1), i64(1), i64(1))) == "[B,S-1,64]"
    assert shape_str(Slice(x, i64(0), i64(-1), i64(1), i64(1))) == "[B,S-1,64]"
    assert shape_str(Slice(x, i64(0), i64(8), i64(2), i64(1))) == "[B,S,8]"
    pos = Range(scalar(0), Gather(sx, scalar(1), scalar(0)), scalar(1))
    assert shape_str(pos) == "[S]"
    target = Concat(Unsqueeze(Gather(sx, scalar(0), scalar(0)), i64(0)), s1, axis=0)
    assert shape_str(Broadcast(Unsqueeze(pos, i64(0)), target, mode="bidirectional")) == "[B,S]"
    row = Constant(np.zeros((1, 64), np.float32))
    assert shape_str(Broadcast(row, Concat(target, i64(64), axis=0))) == "[B,S,64]"
    emb = Constant(np.zeros((100, 64), np.float32))
    ids = Parameter("i64", Shape([B, S]))
    assert shape_str(Gather(emb, ids, scalar(0))) == "[B,S,64]"
    assert shape_str(Squeeze(Unsqueeze(x, i64(1)), i64(1))) == "[B,S,64]"
    assert [str(o.shape) for o in Split(x, scalar(2), num_splits=4).outputs] == ["[B,S,16]"] * 4
    assert shape_str(ConstantOfShape(Concat(s1, s1, axis=0))) == "[S,S]"


def test_constant_folding_folds_static_dims_and_keeps_symbolic_ones() -> None:
    x = x_bsh()
    sx = ShapeOf(x)
    hidden = Gather(sx, scalar(2), scalar(0))  # static: 768
    batch = Gather(sx, scalar(0), scalar(0))  # symbolic
    target = Concat(Unsqueeze(batch, i64(0)), i64(-1), Unsqueeze(hidden, i64(0)), axis=0)
    r = Reshape(x, target)
    m = Model([Result(r)], [x])
    assert ConstantFolding().run(m)
    kinds = [n.type_name for n in m.get_ordered_ops()]
    assert kinds.count("Gather") == 1  # the static one is a Constant now
    c = target.inputs[2].source.node
    assert c.type_name == "Constant" and c.value.tolist() == [768]
    assert shape_str(r) == "[B,S,768]"


def test_cnn_ops_keep_a_symbolic_batch() -> None:
    from snippets_core.ir.ops.nn import Convolution, Interpolate, MaxPool

    x = Parameter("f32", Shape([B, 3, 20, 20]))
    w = Constant(np.zeros((8, 3, 3, 3), np.float32))
    assert shape_str(Convolution(x, w, pads=[1, 1, 1, 1])) == "[B,8,20,20]"
    assert shape_str(MaxPool(x, kernel=[2, 2], strides=[2, 2])) == "[B,3,10,10]"
    assert shape_str(Interpolate(x, Constant(np.array([1, 1, 2, 2], np.float32)))) == "[B,3,40,40]"
    sizes = Constant(np.array([30, 40], np.int64))
    assert shape_str(Interpolate(x, sizes, shape_calculation_mode="sizes", axes=(2, 3))) == "[B,3,30,40]"
    assert shape_str(Interpolate(x, sizes, shape_calculation_mode="sizes", axes=(2, 3),
                                 keep_aspect_ratio_policy="not_larger")) == "[B,3,30,30]"
    hw = Parameter("f32", Shape([B, 3, S, S]))
    assert shape_str(Interpolate(hw, Constant(np.array([1, 1, 2, 2], np.float32)))) == "[B,3,2*S,2*S]"
    assert shape_str(Interpolate(hw, Constant(np.array([1, 1, 0.5, 1.5], np.float32)))) == \
        "[B,3,floor(S/2),S+floor(S/2)]"


def test_floor_atoms_are_canonical_and_evaluate() -> None:
    from snippets_core.ir.shape import sdim_ceildiv, sdim_floordiv

    h = SymDim.of("H")
    half = sdim_floordiv(h + 1, 2)
    assert str(half) == "floor((H+1)/2)" and half.name == "floor((H+1)/2)"  # a plain symbol of its own
    assert sdim_floordiv(2 * h + 3, 2) == h + 1  # multiples of the divisor come out
    assert sdim_floordiv(4 * h, 2) == 2 * h
    assert sdim_floordiv(half + 1, 2) == sdim_floordiv(h + 3, 4)  # a floor of a floor is one atom
    assert sdim_ceildiv(h, 2) == half
    assert str(sdim_floordiv(h - 1, 2) + 1) == "floor((H+1)/2)"  # (H-1)//2 + 1 == (H+1)//2
    assert half.base_names == {"H"} and (half * SymDim.of("W")).base_names == {"H", "W"}
    for v in range(0, 40):
        assert half.evaluate({"H": v}) == (v + 1) // 2
        assert sdim_floordiv(half + 1, 2).evaluate({"H": v}) == ((v + 1) // 2 + 1) // 2  # type: ignore[union-attr]
    assert half.evaluate({}) is None


@pytest.mark.parametrize(("kernel", "stride", "pad", "ceil"), [
    (3, 2, 1, False), (7, 2, 3, False), (3, 1, 1, False), (2, 2, 0, False), (3, 2, 0, True), (3, 2, 1, True),
    (1, 2, 0, False), (5, 3, 2, False)])
def test_window_ops_on_symbolic_spatial_dims(kernel: int, stride: int, pad: int, ceil: bool) -> None:
    """Conv and pool outputs over [B, C, H, W] are expressions of H and W whose value is the static inference's
    for every size."""
    from snippets_core.ir.ops.nn import Convolution, MaxPool

    x = Parameter("f32", Shape([B, 3, SymDim.of("H"), SymDim.of("W")]))
    pool = MaxPool(x, kernel=[kernel, kernel], strides=[stride, stride], pads=[pad] * 4, ceil_mode=ceil)
    conv = Convolution(x, Constant(np.zeros((4, 3, kernel, kernel), np.float32)), strides=[stride, stride],
                       pads=[pad] * 4)
    for node in (pool, conv):
        h, w = node.outputs[0].shape.sym_dims[2:]
        if ceil and pad + stride > kernel:
            assert h is None  # may drop its last window depending on H: unknown, not wrong
            continue
        for size in range(kernel, kernel + 12):
            static = type(node)(Parameter("f32", Shape([1, 3, size, size + 1])), *(
                [node.inputs[1].source] if node is conv else []), **{a: getattr(node, a) for a in node.ATTRS})
            want = static.outputs[0].shape.dims[2:]
            got = tuple(d if isinstance(d, int) else d.evaluate({"H": size, "W": size + 1}) for d in (h, w))
            assert got == want, (node.type_name, size)


def test_split_heads_dump_after_folding() -> None:
    """The printed IR of a head split whose target comes from Shape(x): the static hidden dim's arithmetic
    (Gather, Unsqueeze, Divide) is one Constant, the batch and sequence reads stay, shapes are symbolic."""
    from snippets_core.ir.ops.binary import Divide

    def c(name: str, v: object) -> Constant:
        return Constant(np.asarray(v, np.int64), name=name)

    x = Parameter("f32", Shape([B, S, 768]), name="x")
    sx = ShapeOf(x, name="shape")
    dims = [Unsqueeze(Gather(sx, c(f"i{i}", i), c(f"ax{i}", 0), name=f"dim{i}"), c(f"u{i}", [0]), name=f"udim{i}")
            for i in (0, 1, 2)]
    head_dim = Divide(dims[2], c("heads", [12]), name="head_dim")
    target = Concat(dims[0], dims[1], c("n_heads", [12]), head_dim, axis=0, name="target")
    y = Transpose(Reshape(x, target, name="split_heads"), c("perm", [0, 2, 1, 3]), name="to_bhsd")
    m = Model([Result(y, name="y")], [x], name="heads")
    ConstantFolding().run(m)
    assert m.to_text() == """\
model heads
  x = Parameter() {element_type=f32, shape=[B,S,768]} -> f32[B,S,768]
  shape = ShapeOf(x:0) {output_type=i64} -> i64[3]
  i0 = Constant() -> i64[]
  ax0 = Constant() -> i64[]
  dim0 = Gather(shape:0, i0:0, ax0:0) {batch_dims=0} -> i64[]
  u0 = Constant() -> i64[1]
  udim0 = Unsqueeze(dim0:0, u0:0) -> i64[1]
  i1 = Constant() -> i64[]
  ax1 = Constant() -> i64[]
  dim1 = Gather(shape:0, i1:0, ax1:0) {batch_dims=0} -> i64[]
  u1 = Constant() -> i64[1]
  udim1 = Unsqueeze(dim1:0, u1:0) -> i64[1]
  n_heads = Constant() -> i64[1]
  head_dim = Constant() -> i64[1]
  target = Concat(udim0:0, udim1:0, n_heads:0, head_dim:0) {axis=0} -> i64[4]
  split_heads = Reshape(x:0, target:0) {special_zero=False} -> f32[B,S,12,64]
  perm = Constant() -> i64[4]
  to_bhsd = Transpose(split_heads:0, perm:0) -> f32[B,12,S,64]
  y = Result(to_bhsd:0) -> f32[B,12,S,64]"""
    assert target.inputs[3].source.node.value.tolist() == [64]


def test_slice_of_a_symbolic_dim_with_an_int_end_is_unknown() -> None:
    x = Parameter("f32", Shape([B, S]))
    assert shape_str(Slice(x, i64(0), i64(8), i64(1), i64(1))) == "[B,?]"  # min(8, S)
    assert shape_str(Slice(x, i64(2), i64(2**31 - 1), i64(1), i64(1))) == "[B,S-2]"  # INT32_MAX: to the end
    assert shape_str(Slice(x, i64(-3), i64(-1), i64(1), i64(1))) == "[B,2]"

"""The smaller data-flow passes: each on a small body, the result as text and, where values can change,
evaluated against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.errors import UnsupportedOpError, ValidationError
from snippets_core.ir import OPS, ElementType, Model, Subgraph, evaluate_model
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.snippets import ConvertSaturation, Scalar
from snippets_core.lowered.port_descriptor import FULL_DIM, get_port_descriptor_info
from snippets_core.passes.align_element_types import AlignElementTypes
from snippets_core.passes.broadcast_to_move_broadcast import BroadcastToMoveBroadcast
from snippets_core.passes.canonicalization import BlockedShape, Canonicalization
from snippets_core.passes.constant_folding import ConstantFolding
from snippets_core.passes.convert_constants_to_scalars import ConvertConstantsToScalars
from snippets_core.passes.convert_power_to_power_static import ConvertPowerToPowerStatic
from snippets_core.passes.extract_constants import ExtractConstants
from snippets_core.passes.propagate_precision import PropagatePrecision, can_be_fused, can_be_removed
from snippets_core.passes.reduce_to_snippets_reduce import ReduceToSnippetsReduce
from snippets_core.passes.transform_convert_to_convert_truncation import TransformConvertToConvertTruncation
from snippets_core.passes.validate import Validate

F32, BF16, U8, I8 = ElementType.f32, ElementType.bf16, ElementType.u8, ElementType.i8


def op(type_name, *args, **kw):
    return OPS[type_name](*args, **kw)


def test_pass_names_are_kebab_case_of_the_class():
    import re
    for cls in (AlignElementTypes, BroadcastToMoveBroadcast, Canonicalization, ConstantFolding,
                ConvertConstantsToScalars, ConvertPowerToPowerStatic, ExtractConstants, PropagatePrecision,
                ReduceToSnippetsReduce, TransformConvertToConvertTruncation, Validate):
        kebab = re.sub(r"(?<!^)(?=[A-Z])", "-", cls.__name__).lower()
        assert cls.name == kebab


# --- Canonicalization -----------------------------------------------------------------------------------------
def to_nchw16c(x: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // 16, 16, h, w).transpose(0, 1, 3, 4, 2))


def test_canonicalization_blocked_and_planar_inputs(dump, golden, rng):
    a = Parameter(F32, [1, 32, 5, 5], name="a")
    b = Parameter(F32, [1, 1, 5, 5], name="b")
    c = Parameter(F32, [5], name="c")
    add = op("Add", a, b, name="add")
    mul = op("Multiply", add, c, name="mul")
    m = Model([Result(mul, name="out")], [a, b, c], name="body")
    shapes = (BlockedShape((1, 2, 5, 5, 16), (0, 1, 2, 3, 1)), BlockedShape.planar((1, 1, 5, 5)),
              BlockedShape.planar((5,)))
    assert Canonicalization(shapes).run(m) is True
    assert dump(m) == golden("""
        a = Parameter() -> f32[1,2,5,5,16]
        b = Parameter() -> f32[1,1,5,5]
        c = Parameter() -> f32[5]
        b/rank_normalization = RankNormalization(b) {num_prepend=0, num_append=1} -> f32[1,1,5,5,1]
        add = Add(a, b/rank_normalization) -> f32[1,2,5,5,16]
        c/rank_normalization = RankNormalization(c) {num_prepend=3, num_append=1} -> f32[1,1,1,5,1]
        mul = Multiply(add, c/rank_normalization) -> f32[1,2,5,5,16]
        out = Result(mul) -> f32[1,2,5,5,16]
    """)
    xa = rng.standard_normal((1, 32, 5, 5)).astype(np.float32)
    xb = rng.standard_normal((1, 1, 5, 5)).astype(np.float32)
    xc = rng.standard_normal(5).astype(np.float32)
    out = evaluate_model(m, {"a": to_nchw16c(xa), "b": xb, "c": xc})["out"]
    np.testing.assert_allclose(out, to_nchw16c((xa + xb) * xc), rtol=1e-6)


def test_canonicalization_planar_ranks_and_dynamic_dims():
    a = Parameter(F32, [None, 3, None, 8], name="a")
    b = Parameter(F32, [None, 8], name="b")
    m = Model([Result(op("Add", a, b, name="add"), name="out")], [a, b])
    shapes = (BlockedShape.planar((None, 3, None, 8)), BlockedShape.planar((None, 8)))
    assert Canonicalization(shapes).run(m) is True
    rn = m.results[0].inputs[0].source.node.inputs[1].source.node
    assert (rn.type_name, rn.num_prepend, rn.num_append) == ("RankNormalization", 2, 0)
    assert str(m.results[0].outputs[0].shape) == "[?,3,?,8]"
    assert Canonicalization(()).run(m) is False


def test_canonicalization_rejects_bad_layouts():
    a, b = Parameter(F32, [2, 3], name="a"), Parameter(F32, [3, 2], name="b")
    m = Model([Result(op("Add", a, op("Transpose", b, Constant(np.array([1, 0], np.int64)))))], [a, b])
    with pytest.raises(ValidationError, match="different layouts"):
        Canonicalization((BlockedShape((2, 3), (0, 1)), BlockedShape((3, 2), (1, 0)))).run(m)
    with pytest.raises(ValidationError, match="1 input shapes for 2 parameters"):
        Canonicalization((BlockedShape.planar((2, 3)),)).run(m)
    with pytest.raises(ValidationError, match="differ in rank"):
        BlockedShape((2, 3), (0,))


# --- AlignElementTypes ------------------------------------------------------------------------------------------
def test_align_element_types_inserts_saturating_converts(dump, golden):
    x = Parameter(F32, [4], name="x")
    m = Model([Result(op("Relu", x, name="relu"), name="out")], [x], name="body")
    assert AlignElementTypes((U8,), (I8,)).run(m) is True
    assert dump(m) == golden("""
        x = Parameter() -> u8[4]
        x/convert_f32 = ConvertSaturation(x) {destination_type=f32} -> f32[4]
        relu = Relu(x/convert_f32) -> f32[4]
        relu/convert_i8 = ConvertSaturation(relu) {destination_type=i8} -> i8[4]
        out = Result(relu/convert_i8) -> i8[4]
    """)
    out = evaluate_model(m, {"x": np.array([0, 100, 200, 255], np.uint8)})["out"]
    assert out.tolist() == [0, 100, 127, 127]
    assert AlignElementTypes((U8,), (I8,)).run(m) is False


def test_align_element_types_removes_a_convert_it_would_undo(dump, golden):
    x = Parameter(F32, [4], name="x")
    cvt = ConvertSaturation(x, destination_type=BF16, name="to_bf16")
    m = Model([Result(op("Relu", cvt, name="relu"), name="out")], [x], name="body")
    assert AlignElementTypes((BF16,), (BF16,)).run(m) is True
    assert dump(m) == golden("""
        x = Parameter() -> bf16[4]
        relu = Relu(x) -> bf16[4]
        out = Result(relu) -> bf16[4]
    """)
    with pytest.raises(ValidationError, match="2 input"):
        AlignElementTypes((F32, F32), (F32,)).run(m)


# --- converts, broadcasts, reductions -------------------------------------------------------------------------------
def test_transform_convert_to_convert_truncation(dump, golden):
    x = Parameter(F32, [3], name="x")
    m = Model([Result(op("Convert", x, destination_type="i8", name="cvt"), name="out")], [x])
    before = evaluate_model(m, {"x": np.array([-3.7, 0.5, 100.9], np.float32)})["out"]
    assert TransformConvertToConvertTruncation().run(m) is True
    assert dump(m) == golden("""
        x = Parameter() -> f32[3]
        cvt = ConvertTruncation(x) {destination_type=i8} -> i8[3]
        out = Result(cvt) -> i8[3]
    """)
    after = evaluate_model(m, {"x": np.array([-3.7, 0.5, 100.9], np.float32)})["out"]
    assert after.tolist() == before.tolist() == [-3, 0, 100]
    assert TransformConvertToConvertTruncation().run(m) is False


def broadcast_body(x_shape, target, y_shape):
    x = Parameter(F32, x_shape, name="x")
    y = Parameter(F32, y_shape, name="y")
    bc = op("Broadcast", x, Constant(np.array(target, np.int64), name="target"), name="bc")
    return Model([Result(op("Add", bc, y, name="add"), name="out")], [x, y], name="body")


def test_broadcast_last_dim_becomes_broadcast_move(dump, golden, rng):
    m = broadcast_body([2, 1], [2, 5], [2, 5])
    x, y = rng.standard_normal((2, 1)).astype(np.float32), rng.standard_normal((2, 5)).astype(np.float32)
    assert BroadcastToMoveBroadcast().run(m) is True
    assert dump(m) == golden("""
        x = Parameter() -> f32[2,1]
        y = Parameter() -> f32[2,5]
        bc = BroadcastMove(x) {broadcast_dim=5} -> f32[2,5]
        add = Add(bc, y) -> f32[2,5]
        out = Result(add) -> f32[2,5]
    """)
    np.testing.assert_allclose(evaluate_model(m, {"x": x, "y": y})["out"], x + y)


def test_broadcast_move_with_dynamic_dims(rng):
    x = Parameter(F32, [None, 1], name="x")
    y = Parameter(F32, [None, 5], name="y")
    bc = op("Broadcast", x, Constant(np.array([1, 5], np.int64)), mode="bidirectional", name="bc")
    m = Model([Result(op("Add", bc, y, name="add"), name="out")], [x, y])
    assert BroadcastToMoveBroadcast().run(m) is True
    move = m.results[0].inputs[0].source.node.inputs[0].source.node
    assert (move.type_name, move.broadcast_dim, str(move.outputs[0].shape)) == ("BroadcastMove", 5, "[?,5]")
    xv, yv = rng.standard_normal((3, 1)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_allclose(evaluate_model(m, {"x": xv, "y": yv})["out"], xv + yv)


def test_broadcast_of_outer_dims_is_left_to_implicit_broadcasting(rng):
    m = broadcast_body([1, 5], [3, 5], [3, 5])
    assert BroadcastToMoveBroadcast().run(m) is True
    assert m.count("Broadcast") == 0 and m.count("BroadcastMove") == 0
    x, y = rng.standard_normal((1, 5)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_allclose(evaluate_model(m, {"x": x, "y": y})["out"], x + y)


def test_broadcast_that_sets_the_output_shape_stays():
    x = Parameter(F32, [1, 5], name="x")
    bc = op("Broadcast", x, Constant(np.array([3, 5], np.int64)), name="bc")
    m = Model([Result(bc, name="out")], [x])
    assert BroadcastToMoveBroadcast().run(m) is False and m.count("Broadcast") == 1


@pytest.mark.parametrize("graph_op, keep, snippets_op, np_op", [
    ("ReduceSum", True, "SnippetsReduceSum", np.sum),
    ("ReduceMax", True, "SnippetsReduceMax", np.max),
    ("ReduceSum", False, "SnippetsReduceSum", np.sum),
])
def test_reduce_to_snippets_reduce(graph_op, keep, snippets_op, np_op, rng):
    x = Parameter(F32, [None, 7], name="x")
    red = op(graph_op, x, Constant(np.array([-1], np.int64), name="axes"), keep_dims=keep, name="red")
    m = Model([Result(red, name="out")], [x])
    assert ReduceToSnippetsReduce().run(m) is True
    assert m.count(graph_op) == 0 and m.count(snippets_op) == 1
    assert m.results[0].outputs[0].shape.rank == (2 if keep else 1)
    reduce = next(n for n in m.get_ordered_ops() if n.type_name == snippets_op)
    assert get_port_descriptor_info(reduce, "out", 0) == {"subtensor": (1, FULL_DIM)}
    xv = rng.standard_normal((3, 7)).astype(np.float32)
    np.testing.assert_allclose(evaluate_model(m, {"x": xv})["out"], np_op(xv, axis=-1, keepdims=keep), rtol=1e-6)


def test_reduce_over_several_axes_is_left_alone():
    x = Parameter(F32, [2, 3, 4], name="x")
    red = op("ReduceSum", x, Constant(np.array([1, 2], np.int64)), keep_dims=True)
    m = Model([Result(red)], [x])
    assert ReduceToSnippetsReduce().run(m) is False


# --- scalars, power, folding ------------------------------------------------------------------------------------------
def test_convert_constants_to_scalars(dump, golden):
    x = Parameter(F32, [2, 3], name="x")
    y = Parameter(F32, [3], name="y")
    a = op("Add", x, Constant(np.full((1, 1), 2.0, np.float32), name="two"), name="a")
    b = op("Multiply", y, Constant(np.full((1, 1, 1), 3.0, np.float32), name="three"), name="b")  # sets the rank
    s = op("ReduceSum", a, Constant(np.array([1], np.int64), name="axes"), keep_dims=True, name="s")  # value input
    w = op("Add", a, Constant(np.array([1.0, 2.0, 3.0], np.float32), name="vec"), name="w")
    m = Model([Result(s, name="o1"), Result(b, name="o2"), Result(w, name="o3")], [x, y], name="body")
    assert ConvertConstantsToScalars().run(m) is True
    assert dump(m) == golden("""
        x = Parameter() -> f32[2,3]
        y = Parameter() -> f32[3]
        two = Scalar() {value=[2]} -> f32[1]
        a = Add(x, two) -> f32[2,3]
        axes = Constant() {value=[1]} -> i64[1]
        s = ReduceSum(a, axes) {keep_dims=True} -> f32[2,1]
        o1 = Result(s) -> f32[2,1]
        three = Scalar() {value=[3]} -> f32[1,1,1]
        b = Multiply(y, three) -> f32[1,1,3]
        o2 = Result(b) -> f32[1,1,3]
        vec = Constant() {value=[1,2,3]} -> f32[3]
        w = Add(a, vec) -> f32[2,3]
        o3 = Result(w) -> f32[2,3]
    """)


def test_convert_power_to_power_static(dump, golden, rng):
    x = Parameter(F32, [None, 4], name="x")
    p = op("Power", x, Scalar(np.float32(3.0), name="e"), name="pow")
    n = op("Power", x, Parameter(F32, [4], name="y"), name="pow_dyn")
    m = Model([Result(p, name="out"), Result(n, name="out2")], [x, n.inputs[1].source.node])
    assert ConvertPowerToPowerStatic().run(m) is True
    assert m.count("Power") == 1 and m.count("PowerStatic") == 1
    assert m.results[0].inputs[0].source.node.power == 3.0
    xv = rng.standard_normal((2, 4)).astype(np.float32)
    out = evaluate_model(m, {"x": xv, "y": np.ones(4, np.float32)})["out"]
    np.testing.assert_allclose(out, xv ** 3, rtol=1e-6)


def test_constant_folding_folds_chains(dump, golden):
    x = Parameter(F32, [2], name="x")
    c = op("Multiply", op("Add", Constant(np.float32(1.0), name="one"), Constant(np.float32(2.0), name="two"),
                          name="sum"), Constant(np.float32(4.0), name="four"), name="prod")
    m = Model([Result(op("Add", x, c, name="add"), name="out")], [x], name="body")
    assert ConstantFolding().run(m) is True
    assert dump(m) == golden("""
        x = Parameter() -> f32[2]
        prod = Constant() {value=[12]} -> f32[]
        add = Add(x, prod) -> f32[2]
        out = Result(add) -> f32[2]
    """)
    assert ConstantFolding().run(m) is False


# --- PropagatePrecision -----------------------------------------------------------------------------------------
def test_propagate_precision_converts_to_a_supported_type(dump, golden):
    x, y = Parameter(BF16, [4], name="x"), Parameter(BF16, [4], name="y")
    m = Model([Result(op("Add", x, y, name="add"), name="out")], [x, y], name="body")
    assert PropagatePrecision({"Add": [(F32, F32)]}).run(m) is True
    assert dump(m) == golden("""
        x = Parameter() -> bf16[4]
        y = Parameter() -> bf16[4]
        x/convert_f32 = ConvertSaturation(x) {destination_type=f32} -> f32[4]
        y/convert_f32 = ConvertSaturation(y) {destination_type=f32} -> f32[4]
        add = Add(x/convert_f32, y/convert_f32) -> f32[4]
        add/convert_bf16 = ConvertSaturation(add) {destination_type=bf16} -> bf16[4]
        out = Result(add/convert_bf16) -> bf16[4]
    """)
    xv = np.array([1.0, 2.5, -3.0, 1e3], np.float32).astype(BF16.numpy)
    yv = np.array([0.125, 1.0, 3.0, 7.0], np.float32).astype(BF16.numpy)
    out = evaluate_model(m, {"x": xv, "y": yv})["out"]
    expect = (xv.astype(np.float32) + yv.astype(np.float32)).astype(BF16.numpy)
    assert out.dtype == BF16.numpy and out.astype(np.float32).tolist() == expect.astype(np.float32).tolist()


def test_propagate_precision_reuses_and_removes_converts():
    x = Parameter(U8, [4], name="x")
    to_f32 = ConvertSaturation(x, destination_type=F32, name="to_f32")
    relu = op("Relu", to_f32, name="relu")
    m = Model([Result(relu, name="out")], [x])
    # Relu runs on u8 directly: the u8 -> f32 convert is removed, and the output type restored for the Result
    assert PropagatePrecision(lambda n: [(U8,)] if n.type_name == "Relu" else []).run(m) is True
    assert relu.inputs[0].source.node is x
    assert m.results[0].input_type(0) is F32
    out = evaluate_model(m, {"x": np.array([0, 7, 255, 3], np.uint8)})["out"]
    assert out.dtype == np.float32 and out.tolist() == [0, 7, 255, 3]
    with pytest.raises(UnsupportedOpError, match="Relu"):
        PropagatePrecision({"Relu": [(F32, F32)]}).run(Model([Result(op("Relu", Parameter(F32, [2])))]))


@pytest.mark.parametrize("before, after, required, removed", [
    (F32, BF16, F32, False),   # f32 -> bf16 loses bits: must stay
    (BF16, F32, BF16, True),   # bf16 -> f32 -> bf16 is exact
    (I8, ElementType.i32, I8, True),
    (U8, ElementType.i32, U8, False),  # exact, but the reference rule wants equal signedness
    (F32, U8, F32, False),
])
def test_can_be_removed(before, after, required, removed):
    assert can_be_removed(before, after, required) is removed


def test_can_be_fused_table():
    assert can_be_fused(F32, U8) and can_be_fused(BF16, I8) and can_be_fused(F32, ElementType.i16)
    assert can_be_fused(ElementType.i32, I8) and not can_be_fused(I8, ElementType.i32)
    assert not can_be_fused(ElementType.i32, U8)  # signedness differs


# --- ExtractConstants and Validate -----------------------------------------------------------------------------------
def test_extract_constants_moves_non_scalars_out(rng):
    xb = Parameter(F32, [2, 3], name="xb")
    vec = Constant(np.array([1.0, -2.0, 3.0], np.float32), name="vec")
    body = Model([Result(op("Multiply", op("Add", xb, vec, name="add"), Scalar(np.float32(2.0), name="two"),
                                name="mul"), name="out")], [xb], name="body")
    x = Parameter(F32, [2, 3], name="x")
    sg = Subgraph(x, body=body, name="sg")
    outer = Model([Result(sg, name="y")], [x])
    xv = rng.standard_normal((2, 3)).astype(np.float32)
    assert ExtractConstants().run(sg) is True
    assert len(sg.inputs) == 2 and [p.name for p in body.parameters] == ["xb", "vec"]
    assert sg.inputs[1].source.node.type_name == "Constant" and body.count("Constant") == 0
    assert sg.rt_info["virtual_port_count"] == 1 and body.count("Scalar") == 1
    np.testing.assert_allclose(evaluate_model(outer, {"x": xv})["y"], (xv + vec.value) * 2, rtol=1e-6)
    assert ExtractConstants().run(sg) is False


def test_validate_names_the_unsupported_op():
    x = Parameter(F32, [2, 3], name="x")
    ok = Model([Result(op("Add", x, Scalar(np.float32(1.0))), name="o")], [x], name="ok")
    assert Validate().run(ok) is False
    bad_convert = Model([Result(op("Convert", x, destination_type="i8", name="cvt"))], [x], name="b1")
    with pytest.raises(ValidationError, match="Convert op 'cvt'"):
        Validate().run(bad_convert)
    bad_const = Model([Result(op("Add", x, Constant(np.ones(3, np.float32), name="vec")))], [x], name="b2")
    with pytest.raises(ValidationError, match="Constant op 'vec'"):
        Validate().run(bad_const)
    bad_softmax = Model([Result(op("Softmax", x, axis=0, name="sm"))], [x], name="b3")
    with pytest.raises(ValidationError, match="Softmax op 'sm'"):
        Validate().run(bad_softmax)

"""The snippets op set: shape inference and numpy references, checked against values worked out by hand
or computed with plain numpy in the test."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.errors import ShapeInferenceError, UnsupportedOpError
from snippets_core.ir import OPS, ElementType, Model, Shape, evaluate_model
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.ir.ops.snippets import (
    Brgemm,
    BroadcastLoad,
    BroadcastMove,
    Buffer,
    ConvertSaturation,
    ConvertTruncation,
    Fill,
    HorizonMax,
    HorizonSum,
    Kernel,
    Load,
    LoadReorder,
    LoopBegin,
    LoopEnd,
    Nop,
    PerfCountBegin,
    PerfCountEnd,
    PowerStatic,
    RankNormalization,
    RegSpillBegin,
    RegSpillEnd,
    Reorder,
    Scalar,
    SnippetsReduceMax,
    SnippetsReduceSum,
    SnippetsReshape,
    Store,
    VectorBuffer,
    convert_saturation,
    convert_truncation,
)

F32 = ElementType.f32
X = np.array([1.5, 2.5, -1.5, -2.5, 300.7, -300.7, 127.5, 255.5, 0.49], np.float32)


# --- converts: wrap-around vs clamp ---------------------------------------------------------------------------
@pytest.mark.parametrize("dst, trunc, sat", [
    # truncation: toward zero, then keep the low byte (300 = 0x12c -> 0x2c = 44; -300 -> 0xd4 = -44 / 212)
    ("i8", [1, 2, -1, -2, 44, -44, 127, -1, 0], [2, 2, -2, -2, 127, -128, 127, 127, 0]),
    ("u8", [1, 2, 255, 254, 44, 212, 127, 255, 0], [2, 2, 0, 0, 255, 0, 128, 255, 0]),
    ("i32", [1, 2, -1, -2, 300, -300, 127, 255, 0], [2, 2, -2, -2, 301, -301, 128, 256, 0]),
])
def test_convert_truncation_wraps_and_saturation_clamps(dst, trunc, sat):
    et = ElementType.parse(dst)
    t = convert_truncation(X, et)
    s = convert_saturation(X, et)
    assert t.dtype == et.numpy and s.dtype == et.numpy
    assert t.tolist() == trunc
    assert s.tolist() == sat


def test_convert_out_of_i32_range_and_nan():
    x = np.array([np.nan, 3e9, -3e9], np.float32)
    # cvttps2dq gives the "integer indefinite" 0x80000000 for all three; its low byte is 0
    assert convert_truncation(x, ElementType.i32).tolist() == [-2**31] * 3
    assert convert_truncation(x, ElementType.u8).tolist() == [0, 0, 0]
    assert convert_saturation(x, ElementType.i32).tolist() == [-2**31, 2**31 - 1, -2**31]
    assert convert_saturation(x, ElementType.i8).tolist() == [-128, 127, -128]
    assert convert_saturation(x, ElementType.u8).tolist() == [0, 255, 0]


def test_convert_int_to_int_and_to_float():
    x = np.array([-129, 128, 300, -1], np.int32)
    assert convert_truncation(x, ElementType.i8).tolist() == [127, -128, 44, -1]
    assert convert_saturation(x, ElementType.i8).tolist() == [-128, 127, 127, -1]
    assert convert_saturation(x, ElementType.u8).tolist() == [0, 128, 255, 0]
    assert convert_saturation(np.array([200], np.uint8), ElementType.i8).tolist() == [127]
    assert convert_truncation(np.array([200], np.uint8), ElementType.i8).tolist() == [-56]
    np.testing.assert_array_equal(convert_saturation(x, F32), x.astype(np.float32))


def test_convert_ops_infer_and_evaluate():
    p = Parameter(F32, [2, None], name="x")
    t = ConvertTruncation(p, destination_type="u8", name="t")
    s = ConvertSaturation(p, destination_type="u8", name="s")
    assert t.outputs[0].element_type is ElementType.u8 and t.outputs[0].shape == Shape([2, None])
    m = Model([Result(t, name="rt"), Result(s, name="rs")], [p])
    out = evaluate_model(m, {"x": np.array([[-1.5, 256.0], [3.5, 4.5]], np.float32)})
    assert out["rt"].tolist() == [[255, 0], [3, 4]]
    assert out["rs"].tolist() == [[0, 255], [4, 4]]


# --- memory access --------------------------------------------------------------------------------------------
def test_load_store_are_identity_and_keep_attrs():
    p = Parameter(F32, [3, 5], name="x")
    ld = Load(p, count=16, offset=2, name="ld")
    st = Store(ld, count=16, name="st")
    assert (ld.count, ld.offset, st.count, st.offset) == (16, 2, 16, 0)
    assert ld.is_memory_access_input_port(0) and not ld.is_memory_access_output_port(0)
    assert st.is_memory_access_output_port(0)
    m = Model([Result(st, name="r")], [p])
    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    np.testing.assert_array_equal(evaluate_model(m, {"x": x})["r"], x)
    clone = m.clone()
    assert [n.attrs() for n in clone.get_ordered_ops()] == [n.attrs() for n in m.get_ordered_ops()]
    with pytest.raises(ShapeInferenceError):
        Load(p, count=0)


def test_load_reorder_permutes():
    p = Parameter(F32, [2, 3, 4], name="x")
    lr = LoadReorder(p, count=1, order=[0, 2, 1], name="lr")
    assert lr.outputs[0].shape == Shape([2, 4, 3])
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(lr.evaluate(x)[0], x.transpose(0, 2, 1))
    with pytest.raises(ShapeInferenceError):
        LoadReorder(p, order=[0, 0, 1])


def test_broadcast_move_and_load():
    p = Parameter(F32, [2, 1], name="x")
    bm = BroadcastMove(p, broadcast_dim=5)
    bl = BroadcastLoad(p, broadcast_dim=5)
    assert bm.outputs[0].shape == Shape([2, 5]) == bl.outputs[0].shape
    x = np.array([[1.0], [2.0]], np.float32)
    np.testing.assert_array_equal(bm.evaluate(x)[0], np.repeat(x, 5, axis=1))
    with pytest.raises(ShapeInferenceError):
        BroadcastMove(Parameter(F32, [2, 3]), broadcast_dim=5)


def test_buffer_kinds_and_allocation_size():
    p = Parameter(ElementType.f16, [3, 10], name="x")
    inter = Buffer(p, name="b0")
    new = Buffer(shape=[64], name="scratch")
    assert not inter.is_new_memory and new.is_new_memory
    assert inter.allocation_size() == 3 * 10 * 2
    assert new.outputs[0].element_type is ElementType.u8 and new.allocation_size() == 64
    assert Buffer(Parameter(F32, [None, 4])).allocation_size() is None
    with pytest.raises(UnsupportedOpError, match="scratch"):
        new.evaluate()
    with pytest.raises(ShapeInferenceError):
        Buffer()


def test_loops_pass_data_through_and_check_port_counts():
    p = Parameter(F32, [4], name="x")
    begin = LoopBegin(name="lb")
    end = LoopEnd(p, begin.outputs[0], work_amount=4, increment=2, is_incremented=[True, True],
                  ptr_increments=[1, 1], finalization_offsets=[-4, -4], element_type_sizes=[4, 4], input_num=1,
                  output_num=1, loop_id=3, name="le")
    assert end.loop_begin is begin and end.loop_id == 3
    assert end.attrs()["loop_id"] == 3 and end.attrs()["finalization_offsets"] == (-4, -4)
    assert end.outputs[0].shape == Shape([4])
    np.testing.assert_array_equal(end.evaluate(np.ones(4, np.float32), begin.evaluate()[0])[0], np.ones(4))
    with pytest.raises(ShapeInferenceError, match="ptr_increments"):
        LoopEnd(begin.outputs[0], ptr_increments=[1], input_num=1, output_num=1)
    with pytest.raises(ShapeInferenceError, match="LoopBegin"):
        LoopEnd(p)


def test_control_ops_and_not_evaluable_ops():
    assert Kernel(region="lir").outputs == []
    with pytest.raises(UnsupportedOpError, match="Kernel"):
        Kernel().evaluate()
    rb = RegSpillBegin(regs_to_spill=["vmm3", "vmm4"])
    re = RegSpillEnd(rb)
    assert re.regs_to_spill == ("vmm3", "vmm4")
    with pytest.raises(UnsupportedOpError):
        re.evaluate(np.zeros(()))
    pb = PerfCountBegin()
    pe = PerfCountEnd(pb)
    pe.evaluate(pb.evaluate()[0])
    assert pe.iterations == 1 and pe.accumulation_ns >= 0
    a, b = Parameter(F32, [2]), Parameter(ElementType.i32, [3])
    nop = Nop(a, b)
    assert [(o.element_type, o.shape) for o in nop.outputs] == [(F32, Shape([2])), (ElementType.i32, Shape([3]))]


# --- values and vector ops ------------------------------------------------------------------------------------
def test_scalar_and_power_static():
    s = Scalar(np.float32(2.5), name="s")
    assert s.scalar == 2.5 and isinstance(s, OPS["Constant"])
    assert Scalar([[3.0]]).outputs[0].shape == Shape([1, 1])
    with pytest.raises(ShapeInferenceError):
        Scalar([1.0, 2.0])
    x = np.array([1.0, 4.0, 9.0], np.float32)
    p = PowerStatic(Parameter(F32, [3]), power=-0.5)
    np.testing.assert_allclose(p.evaluate(x)[0], 1 / np.sqrt(x), rtol=1e-6)


def test_fill_writes_the_pattern_from_offset():
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = Fill(Parameter(F32, [2, 4]), offset=3, fill_value=0xFF7FFFFF).evaluate(x)[0]
    assert out[:, 3].tolist() == [np.finfo(np.float32).min] * 2  # 0xff7fffff is the lowest f32
    np.testing.assert_array_equal(out[:, :3], x[:, :3])
    zero = Fill(Parameter(F32, [4]), offset=1, fill_value=0).evaluate(np.ones(4, np.float32))[0]
    assert zero.tolist() == [1, 0, 0, 0]


def test_horizon_and_snippets_reductions():
    x = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32)
    p = Parameter(F32, [3, None])
    hm = HorizonMax(p)
    assert hm.outputs[0].shape == Shape([3, 1])
    np.testing.assert_array_equal(hm.evaluate(x)[0], x.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(HorizonSum(p).evaluate(x)[0], x.sum(axis=-1, keepdims=True), rtol=1e-6)
    rmax = SnippetsReduceMax(p, axis=0)
    assert rmax.type_name == "SnippetsReduceMax" and OPS["ReduceMax"] is not SnippetsReduceMax
    assert rmax.outputs[0].shape == Shape([1, None])
    np.testing.assert_allclose(SnippetsReduceSum(p, axis=-1).evaluate(x)[0], x.sum(-1, keepdims=True), rtol=1e-6)
    assert VectorBuffer().outputs[0].shape == Shape([1])


def test_rank_normalization_reshape_reorder():
    p = Parameter(F32, [None, 3], name="x")
    rn = RankNormalization(p, num_prepend=2, num_append=1)
    assert rn.outputs[0].shape == Shape([1, 1, None, 3, 1])
    x = np.ones((4, 3), np.float32)
    assert rn.evaluate(x)[0].shape == (1, 1, 4, 3, 1)
    r = SnippetsReshape(Parameter(F32, [None, 6, 5]), target_shape=[0, 3, -1])
    assert r.type_name == "SnippetsReshape" and r.outputs[0].shape == Shape([None, 3, None])
    assert r.evaluate(np.zeros((2, 6, 5), np.float32))[0].shape == (2, 3, 10)
    assert SnippetsReshape(Parameter(F32, [2, 6]), target_shape=[3, -1]).outputs[0].shape == Shape([3, 4])
    with pytest.raises(ShapeInferenceError):
        SnippetsReshape(Parameter(F32, [2, 6]), target_shape=[5, 2])
    ro = Reorder(Parameter(F32, [2, 3, 4]), order=[2, 0, 1])
    assert ro.outputs[0].shape == Shape([4, 2, 3])


# --- Brgemm ------------------------------------------------------------------------------------------------------
def test_brgemm_types_shapes_and_layouts():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 5, 3)).astype(np.float32)
    b = rng.standard_normal((2, 3, 4)).astype(np.float32)
    g = Brgemm(Parameter(F32, [2, 5, 3]), Parameter(F32, [2, 3, 4]))
    assert g.outputs[0].shape == Shape([2, 5, 4])
    np.testing.assert_allclose(g.evaluate(a, b)[0], a @ b, rtol=1e-5)
    # B stored transposed ([N, K]) and read through layout_b; C stored as [M, batch, N]
    bt = np.ascontiguousarray(b.transpose(0, 2, 1))
    g2 = Brgemm(Parameter(F32, [2, 5, 3]), Parameter(F32, [2, 4, 3]), layout_b=[0, 2, 1], layout_c=[1, 0, 2])
    assert g2.outputs[0].shape == Shape([5, 2, 4])
    np.testing.assert_allclose(g2.evaluate(a, bt)[0], (a @ b).transpose(1, 0, 2), rtol=1e-5)
    ai = rng.integers(-128, 127, (4, 8)).astype(np.int8)
    bi = rng.integers(0, 255, (8, 2)).astype(np.uint8)
    gi = Brgemm(Parameter(ElementType.i8, [4, 8]), Parameter(ElementType.u8, [8, 2]))
    assert gi.outputs[0].element_type is ElementType.i32
    np.testing.assert_array_equal(gi.evaluate(ai, bi)[0], ai.astype(np.int64) @ bi.astype(np.int64))
    assert Brgemm(Parameter(ElementType.bf16, [4, 8]), Parameter(ElementType.bf16, [8, 2])).outputs[0].element_type is F32
    with pytest.raises(ShapeInferenceError, match="does not support"):
        Brgemm(Parameter(F32, [4, 8]), Parameter(ElementType.i8, [8, 2]))
    with pytest.raises(ShapeInferenceError, match="K dims"):
        Brgemm(Parameter(F32, [4, 8]), Parameter(F32, [7, 2]))

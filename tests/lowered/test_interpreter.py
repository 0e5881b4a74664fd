"""The LinearIR interpreter executes the final LinearIR; numpy is the oracle.

Each body goes through the whole lowering (OptimizeDomain, the control-flow, validation and
pre-generation pipelines) and the Generator with the interpreter target; its outputs must match a
numpy expression written independently in the test (float64 where accuracy matters).
"""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.codegen.interpreter import OutOfBoundsAccessError, compile_body, run_body
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add, Greater, Multiply, Subtract
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.ir.ops.select import Select
from snippets_core.ir.ops.snippets import (
    ConvertSaturation,
    ConvertTruncation,
    Scalar,
    SnippetsReduceMax,
    SnippetsReduceSum,
)
from snippets_core.ir.ops.softmax import Softmax
from snippets_core.ir.ops.unary import Exp, Relu
from snippets_core.lowered.linear_ir import Config
from snippets_core.passes.data_flow_pipeline import run_data_flow

RNG = np.random.default_rng(7)
WIDTHS = (4, 8, 16)


def rand(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def eltwise_body(shape0, shape1):
    """(p0 + p1) -> relu -> * p0 ; two outputs: that and exp(p0 + p1) - 1.5."""
    p0, p1 = Parameter("f32", shape0, name="p0"), Parameter("f32", shape1, name="p1")
    s = Add(p0, p1)
    out0 = Multiply(Relu(s), p0)
    out1 = Subtract(Exp(s), Scalar(np.float32(1.5)))
    return Model([Result(out0, name="r0"), Result(out1, name="r1")], [p0, p1])


def eltwise_ref(x0, x1):
    s = x0.astype(np.float64) + x1
    return [np.maximum(s, 0) * x0, np.exp(s) - 1.5]


def check(outs, refs, rtol=1e-5, atol=1e-6):
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs):
        assert o.shape == np.shape(r)
        np.testing.assert_allclose(o.astype(np.float64), r, rtol=rtol, atol=atol)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("last", range(1, 41))
def test_eltwise_every_last_dim(last, width):
    shape = (2, 3, last)
    x0, x1 = rand(shape), rand(shape)
    check(run_body(eltwise_body(shape, shape), [x0, x1], vector_size=width), eltwise_ref(x0, x1))


# every axis broadcast in one input or the other, ranks 2..4
BROADCASTS = [
    ((3, 5, 7), (1, 5, 7)), ((3, 5, 7), (3, 1, 7)), ((3, 5, 7), (3, 5, 1)), ((3, 5, 7), (7,)),
    ((1, 5, 7), (3, 5, 7)), ((3, 5, 1), (3, 5, 7)), ((3, 1, 1), (1, 5, 9)), ((2, 3, 4, 17), (2, 1, 4, 1)),
    ((2, 3, 4, 17), (1, 3, 1, 17)), ((6, 1), (1, 19)), ((5, 33), (1, 1)), ((2, 1, 4, 1), (1, 3, 1, 17)),
]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("shape0, shape1", BROADCASTS)
def test_eltwise_broadcasting(shape0, shape1, width):
    x0, x1 = rand(shape0), rand(shape1)
    check(run_body(eltwise_body(shape0, shape1), [x0, x1], vector_size=width), eltwise_ref(x0, x1))


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("shape, min_par", [((2, 3, 16, 17), 1), ((4, 5, 6, 7), 4), ((3, 2, 64, 9), 8)])
def test_domain_optimization_and_two_dim_tiles(shape, min_par, width):
    """Collapsed dims and tile rank 2 (outer loops inside the kernel) give the same numbers."""
    x0, x1 = rand(shape), rand(shape)
    cfg = Config(min_parallel_work_amount=min_par)
    check(run_body(eltwise_body(shape, shape), [x0, x1], vector_size=width, config=cfg), eltwise_ref(x0, x1))


@pytest.mark.parametrize("width", WIDTHS)
def test_tile_rank_two_without_domain_optimization(width):
    shape0, shape1 = (2, 5, 11), (2, 1, 11)
    x0, x1 = rand(shape0), rand(shape1)
    cfg = Config(enable_domain_optimization=False)
    ir, kernel = compile_body(eltwise_body(shape0, shape1), width, cfg)
    assert ir.loop_depth == 2
    outs = [o.reshape(r.shape) for o, r in zip(kernel.run([x0, x1]), eltwise_ref(x0, x1))]
    check(outs, eltwise_ref(x0, x1))


def _softmax_body(shape):
    p = Parameter("f32", shape, name="x")
    body = Model([Result(Softmax(p, axis=-1), name="y")], [p])
    run_data_flow(body)
    return body


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("last", [1, 3, 8, 13, 16, 40])
@pytest.mark.parametrize("domain_opt", [True, False])
def test_softmax(last, width, domain_opt):
    shape = (2, 3, last)
    x = rand(shape) * 3
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    ref = e / e.sum(-1, keepdims=True)
    cfg = Config(enable_domain_optimization=domain_opt)
    check(run_body(_softmax_body(shape), [x], vector_size=width, config=cfg), [ref], rtol=1e-5)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("last", [1, 5, 16, 37])
def test_reduce_max_and_sum_with_several_outputs(last, width):
    p = Parameter("f32", (3, 4, last), name="x")
    mx = SnippetsReduceMax(p, axis=-1)
    sm = SnippetsReduceSum(Relu(p), axis=-1)
    body = Model([Result(mx, name="max"), Result(sm, name="sum"), Result(Exp(p), name="exp")], [p])
    from snippets_core.passes.graph_utils import set_reduce_subtensors

    set_reduce_subtensors(mx)
    set_reduce_subtensors(sm)
    x = rand((3, 4, last))
    ref = [x.max(-1, keepdims=True), np.maximum(x.astype(np.float64), 0).sum(-1, keepdims=True), np.exp(x)]
    check(run_body(body, [x], vector_size=width), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("last", [1, 6, 19])
def test_select_and_compare(last, width):
    shape = (2, 3, last)
    p0, p1 = Parameter("f32", shape, name="a"), Parameter("f32", (2, 1, last), name="b")
    body = Model([Result(Select(Greater(p0, p1), p0, Multiply(p1, Scalar(np.float32(2.0)))), name="y")], [p0, p1])
    a, b = rand(shape), rand((2, 1, last))
    check(run_body(body, [a, b], vector_size=width), [np.where(a > b, a, b * 2.0)])


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("last", [2, 9, 20])
def test_convert_chain(last, width):
    """f32 -> i8 (saturating, round to even) -> f32 -> * 0.5, and f32 -> i32 (truncating)."""
    shape = (3, last)
    p = Parameter("f32", shape, name="x")
    sat = Multiply(ConvertTruncation(ConvertSaturation(p, destination_type="i8"), destination_type="f32"),
                   Scalar(np.float32(0.5)))
    trunc = ConvertTruncation(p, destination_type="i32")
    body = Model([Result(sat, name="sat"), Result(trunc, name="trunc")], [p])
    x = (rand(shape) * 200).astype(np.float32)
    ref_sat = np.clip(np.rint(x.astype(np.float64)), -128, 127) * 0.5
    ref_trunc = np.trunc(x).astype(np.int64)
    outs = run_body(body, [x], vector_size=width)
    check([outs[0]], [ref_sat])
    assert outs[1].dtype == np.int32
    np.testing.assert_array_equal(outs[1].astype(np.int64), ref_trunc)


def test_out_of_bounds_access_is_a_typed_error():
    """A pointer increment twice too large walks the main loop past the end of the input."""
    from snippets_core.codegen.generator import Generator
    from snippets_core.codegen.interpreter import InterpreterTarget

    shape = (4, 8, 12)
    ir, kernel = compile_body(eltwise_body(shape, shape), 4, Config(enable_domain_optimization=False))
    kernel.run([rand(shape), rand(shape)])  # the real lowering stays in bounds
    inner = next(e for e in ir.exprs if e.type_name == "LoopEnd" and not e.node.evaluate_once)
    inner.node.ptr_increments = tuple(2 * p for p in inner.node.ptr_increments)
    broken = Generator(InterpreterTarget(4)).generate(ir)
    with pytest.raises(OutOfBoundsAccessError, match="reads bytes"):
        broken.run([rand(shape), rand(shape)])


def test_too_long_access_count_is_caught():
    shape = (2, 3, 5)
    ir, _ = compile_body(eltwise_body(shape, shape), 8)
    store = next(e for e in ir.exprs if e.type_name == "Store")
    store.node.count = 8  # a tail store that writes a full vector: past the end of the output
    from snippets_core.codegen.generator import Generator
    from snippets_core.codegen.interpreter import InterpreterTarget

    kernel = Generator(InterpreterTarget(8)).generate(ir)
    with pytest.raises(OutOfBoundsAccessError, match=f"Store '{store.name}'"):
        kernel.run([rand(shape), rand(shape)])


@pytest.mark.parametrize("et", ["i32", "f16", "bf16", "u8", "i8"])
def test_element_types(et):
    """Memory accesses move elements of the tensor's own size; the math is the type's."""
    from snippets_core.ir.element_type import ElementType
    from snippets_core.ir.ops.binary import Maximum

    p0, p1 = Parameter(et, (3, 11), name="a"), Parameter(et, (1, 11), name="b")
    body = Model([Result(Maximum(Add(p0, p1), p0), name="r")], [p0, p1])
    dt = ElementType.parse(et).numpy
    a = (RNG.standard_normal((3, 11)) * 10).astype(dt)
    b = (RNG.standard_normal((1, 11)) * 10).astype(dt)
    (out,) = run_body(body, [a, b], vector_size=8)
    assert out.dtype == dt
    ref = np.maximum(a + b, a)  # numpy in the same type: wrap-around for integers, rounding for f16/bf16
    np.testing.assert_array_equal(out.astype(np.float64), ref.astype(np.float64))


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("domain_opt", [True, False])
@pytest.mark.parametrize("s0, s1, s2", [((3, 1), (3, 1), (3, 17)), ((2, 1, 5), (1, 4, 1), (2, 4, 5)),
                                        ((1, 6), (1, 6), (5, 6)), ((4, 1, 1), (4, 1, 1), (4, 3, 9))])
def test_broadcast_intermediate_is_also_an_output(s0, s1, s2, domain_opt, width):
    """A small (broadcast) value computed inside the big loop is stored as its own output too."""
    p0, p1, p2 = Parameter("f32", s0, name="a"), Parameter("f32", s1, name="b"), Parameter("f32", s2, name="c")
    a = Add(p0, p1)
    body = Model([Result(Multiply(Exp(a), p2), name="r0"), Result(Relu(a), name="r1"),
                  Result(Subtract(p2, a), name="r2")], [p0, p1, p2])
    x0, x1, x2 = rand(s0), rand(s1), rand(s2)
    s = x0.astype(np.float64) + x1
    outs = run_body(body, [x0, x1, x2], vector_size=width, config=Config(enable_domain_optimization=domain_opt))
    check(outs, [np.exp(s) * x2, np.maximum(s, 0), x2 - s])


def test_reshaped_and_rank_normalized_inputs_and_body_reuse():
    """Inputs read through SnippetsReshape/RankNormalization use the reshaped strides; one body lowers
    for several widths (lowering works on a copy)."""
    from snippets_core.ir.ops.snippets import RankNormalization, SnippetsReshape

    x, s, t = Parameter("f32", (2, 6, 5), name="x"), Parameter("f32", (6,), name="s"), Parameter("f32", (5,), name="t")
    body = Model([Result(Add(Add(x, SnippetsReshape(s, target_shape=(6, 1))), RankNormalization(t, num_prepend=2)),
                         name="y")], [x, s, t])
    before = body.to_text()
    xs, ss, ts = rand((2, 6, 5)), rand((6,)), rand((5,))
    for width in WIDTHS:
        check(run_body(body, [xs, ss, ts], vector_size=width), [xs + ss.reshape(6, 1).astype(np.float64) + ts])
    assert body.to_text() == before


def test_reshape_of_a_computed_value_is_rejected():
    from snippets_core.errors import UnsupportedOpError
    from snippets_core.ir.ops.snippets import SnippetsReshape

    p = Parameter("f32", (2, 6), name="p")
    body = Model([Result(Relu(SnippetsReshape(Exp(p), target_shape=(3, 4))), name="y")], [p])
    with pytest.raises(UnsupportedOpError, match="SnippetsReshape .* reshapes the computed value of Exp"):
        run_body(body, [rand((2, 6))], vector_size=4)

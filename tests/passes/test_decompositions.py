"""SoftmaxDecomposition, FakeQuantizeDecomposition and GNDecomposition: the decomposed body as text, and
its values before and after against numpy formulas written here (static and dynamic shapes)."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.ir import OPS, Model, evaluate_model
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.passes.constant_folding import ConstantFolding
from snippets_core.passes.convert_constants_to_scalars import ConvertConstantsToScalars
from snippets_core.passes.convert_power_to_power_static import ConvertPowerToPowerStatic
from snippets_core.passes.fake_quantize_decomposition import FakeQuantizeDecomposition
from snippets_core.passes.gn_decomposition import GNDecomposition
from snippets_core.passes.softmax_decomposition import SoftmaxDecomposition


def np_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# --- Softmax -----------------------------------------------------------------------------------------------------
def softmax_body(shape, axis=-1) -> Model:
    x = Parameter("f32", shape, name="x")
    sm = OPS["Softmax"](x, axis=axis, name="sm")
    return Model([Result(sm, name="out")], [x], name="body")


def test_softmax_decomposition_text(dump, golden):
    m = softmax_body([2, 3, 8])
    assert SoftmaxDecomposition().run(m) is True
    assert dump(m) == golden("""
        x = Parameter() -> f32[2,3,8]
        sm/reduce_max = SnippetsReduceMax(x) {axis=2} -> f32[2,3,1]
        sm/subtract = Subtract(x, sm/reduce_max) -> f32[2,3,8]
        sm/exp = Exp(sm/subtract) -> f32[2,3,8]
        sm/reduce_sum = SnippetsReduceSum(sm/exp) {axis=2} -> f32[2,3,1]
        sm/power_static = PowerStatic(sm/reduce_sum) {power=-1} -> f32[2,3,1]
        sm = Multiply(sm/exp, sm/power_static) -> f32[2,3,8]
        out = Result(sm) -> f32[2,3,8]
    """)
    assert SoftmaxDecomposition().run(m) is False


@pytest.mark.parametrize("shape, axis, run_shape", [
    ([2, 3, 8], -1, (2, 3, 8)),
    ([4, 17], 1, (4, 17)),
    ([None, None, 5], -1, (3, 2, 5)),   # dynamic dims: the pass only needs the rank
    ([2, 6, 3], 1, (2, 6, 3)),          # not the last axis: still exact numerics
])
def test_softmax_decomposition_values(shape, axis, run_shape, rng):
    m = softmax_body(shape, axis)
    x = (rng.standard_normal(run_shape) * 4).astype(np.float32)
    before = evaluate_model(m, {"x": x})["out"]
    SoftmaxDecomposition().run(m)
    assert m.count("Softmax") == 0
    after = evaluate_model(m, {"x": x})["out"]
    np.testing.assert_allclose(after, np_softmax(x, axis), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-7)


# --- FakeQuantize -------------------------------------------------------------------------------------------------
def fq_body(shape, il, ih, ol, oh, levels) -> Model:
    x = Parameter("f32", shape, name="x")
    consts = [Constant(np.asarray(v, np.float32), name=n) for v, n in zip((il, ih, ol, oh), ("il", "ih", "ol", "oh"))]
    fq = OPS["FakeQuantize"](x, *consts, levels=levels, name="fq")
    return Model([Result(fq, name="out")], [x], name="body")


def np_fq_decomposed(x, il, ih, ol, oh, levels):
    """The decomposition's own formula in float32, as the kernel computes it."""
    f = np.float32
    il, ih, ol, oh = (np.asarray(v, f) for v in (il, ih, ol, oh))
    isc = (f(levels - 1) / (ih - il)).astype(f)
    ish = (il * isc).astype(f)
    q = np.rint(np.minimum(np.maximum(x, il), ih) * isc - ish)
    return (q * ((oh - ol) / f(levels - 1)) + ol).astype(f)


def np_fq_reference(x, il, ih, ol, oh, levels):
    """FakeQuantize's definition, in float64."""
    x, il, ih, ol, oh = (np.asarray(v, np.float64) for v in (x, il, ih, ol, oh))
    n = levels - 1
    q = np.rint((np.clip(x, il, ih) - il) / (ih - il) * n) / n * (oh - ol) + ol
    return np.where(x <= il, ol, np.where(x > ih, oh, q))


def test_fq_decomposition_text(dump, golden):
    m = fq_body([2, 4], -1.0, 1.5, -2.0, 3.0, 256)
    assert FakeQuantizeDecomposition().run(m) is True
    ConstantFolding().run(m)
    # isc = 255 / 2.5 = 102, ish = -1 * 102 = -102, osc = 5 / 255
    assert dump(m) == golden("""
        x = Parameter() -> f32[2,4]
        il = Constant() {value=[-1]} -> f32[]
        fq/maximum = Maximum(x, il) -> f32[2,4]
        ih = Constant() {value=[1.5]} -> f32[]
        fq/minimum = Minimum(fq/maximum, ih) -> f32[2,4]
        fq/input_scale = Constant() {value=[102]} -> f32[]
        fq/apply_input_scale = Multiply(fq/minimum, fq/input_scale) -> f32[2,4]
        fq/input_shift = Constant() {value=[-102]} -> f32[]
        fq/apply_input_shift = Subtract(fq/apply_input_scale, fq/input_shift) -> f32[2,4]
        fq/round = Round(fq/apply_input_shift) {mode=half_to_even} -> f32[2,4]
        fq/output_scale = Constant() {value=[0.0196078]} -> f32[]
        fq/apply_output_scale = Multiply(fq/round, fq/output_scale) -> f32[2,4]
        ol = Constant() {value=[-2]} -> f32[]
        fq = Add(fq/apply_output_scale, ol) -> f32[2,4]
        out = Result(fq) -> f32[2,4]
    """)


def test_fq_identity_dequantization_is_skipped():
    m = fq_body([3], 0.0, 2.55, 0.0, 255.0, 256)  # osc = 1, ol = 0: the output is the rounded level
    FakeQuantizeDecomposition().run(m)
    assert [n.type_name for n in m.get_ordered_ops()][-2:] == ["Round", "Result"]
    x = np.array([-1.0, 1.0, 1.004], np.float32)  # isc = 255 / 2.55 = 100
    np.testing.assert_array_equal(evaluate_model(m, {"x": x})["out"], [0.0, 100.0, 100.0])


@pytest.mark.parametrize("shape, run_shape, ranges, levels", [
    ([2, 3, 5], (2, 3, 5), (-1.0, 1.5, -2.0, 3.0), 256),
    ([None, 4], (6, 4), (0.0, 2.0, 0.0, 2.0), 16),
    ([1, 3, None, None], (1, 3, 4, 5),
     ([[[[-1.0]], [[0.0]], [[-0.5]]]], [[[[1.0]], [[2.0]], [[0.25]]]], [[[[0.0]], [[-1.0]], [[1.0]]]], 1.0), 255),
])
def test_fq_decomposition_values(shape, run_shape, ranges, levels, rng):
    m = fq_body(shape, *ranges, levels)
    x = (rng.standard_normal(run_shape) * 1.5).astype(np.float32)
    before = evaluate_model(m, {"x": x})["out"]
    assert FakeQuantizeDecomposition().run(m) is True
    ConstantFolding().run(m)
    assert m.count("FakeQuantize") == 0
    after = evaluate_model(m, {"x": x})["out"]
    np.testing.assert_allclose(after, np_fq_decomposed(x, *ranges, levels), rtol=1e-6, atol=1e-6)
    ol, oh = (np.asarray(v, np.float64) for v in ranges[2:])
    step = np.max(np.abs(oh - ol)) / (levels - 1)
    # against the definition: equal up to float rounding, or one level apart where x sits on a rounding tie
    ref = np_fq_reference(x, *ranges, levels)
    diff = np.abs(after - ref)
    assert np.all(diff <= step + 1e-5)
    assert np.mean(diff > 1e-5) < 0.02
    np.testing.assert_allclose(after, before, atol=step + 1e-5)


def test_unsupported_fq_is_left_alone():
    assert FakeQuantizeDecomposition().run(fq_body([4], 0.0, 1.0, 0.0, 1.0, 2)) is False  # binarization
    assert FakeQuantizeDecomposition().run(fq_body([4], 1.0, 0.0, 0.0, 1.0, 256)) is False  # il > ih
    x = Parameter("f32", [4], name="x")
    il = Parameter("f32", [], name="il")
    fq = OPS["FakeQuantize"](x, il, *(Constant(np.float32(v)) for v in (1.0, 0.0, 1.0)), levels=256)
    assert FakeQuantizeDecomposition().run(Model([Result(fq)], [x, il])) is False  # non-constant range


# --- GroupNormalization -------------------------------------------------------------------------------------------
def gn_body(shape, c, groups, eps=1e-5) -> Model:
    x = Parameter("f32", shape, name="x")
    scale = Parameter("f32", [c], name="scale")
    bias = Parameter("f32", [c], name="bias")
    gn = OPS["GroupNormalization"](x, scale, bias, num_groups=groups, epsilon=eps, name="gn")
    return Model([Result(gn, name="out")], [x, scale, bias], name="body")


def np_group_norm(x, scale, bias, groups, eps):
    x64 = x.astype(np.float64)
    n, c = x.shape[:2]
    g = x64.reshape(n, groups, -1)
    mean = g.mean(-1, keepdims=True)
    var = ((g - mean) ** 2).mean(-1, keepdims=True)
    y = ((g - mean) / np.sqrt(var + eps)).reshape(x.shape)
    bshape = (1, c) + (1,) * (x.ndim - 2)
    return y * scale.reshape(bshape) + bias.reshape(bshape)


def test_gn_decomposition_text(dump, golden):
    m = gn_body([2, 6, 4, 5], 6, 3)
    assert GNDecomposition().run(m) is True
    ConvertConstantsToScalars().run(m)
    ConvertPowerToPowerStatic().run(m)
    # size = C/G * H*W = 2 * 20 = 40
    assert dump(m) == golden("""
        x = Parameter() -> f32[2,6,4,5]
        scale = Parameter() -> f32[6]
        bias = Parameter() -> f32[6]
        gn/reshape_to_groups = SnippetsReshape(x) {target_shape=(0,3,1,-1)} -> f32[2,3,1,40]
        gn/reduce_sum = SnippetsReduceSum(gn/reshape_to_groups) {axis=3} -> f32[2,3,1,1]
        gn/inv_group_size = Scalar() {value=[0.025]} -> f32[]
        gn/mean = Multiply(gn/reduce_sum, gn/inv_group_size) -> f32[2,3,1,1]
        gn/subtract_mean = Subtract(gn/reshape_to_groups, gn/mean) -> f32[2,3,1,40]
        gn/square = PowerStatic(gn/subtract_mean) {power=2} -> f32[2,3,1,40]
        gn/reduce_sum_square = SnippetsReduceSum(gn/square) {axis=3} -> f32[2,3,1,1]
        gn/inv_group_size_aux = Scalar() {value=[0.025]} -> f32[]
        gn/variance = Multiply(gn/reduce_sum_square, gn/inv_group_size_aux) -> f32[2,3,1,1]
        gn/epsilon = Scalar() {value=[1e-05]} -> f32[1]
        gn/add_epsilon = Add(gn/variance, gn/epsilon) -> f32[2,3,1,1]
        gn/sqrt = Sqrt(gn/add_epsilon) -> f32[2,3,1,1]
        gn/inv_std = PowerStatic(gn/sqrt) {power=-1} -> f32[2,3,1,1]
        gn/mvn = Multiply(gn/subtract_mean, gn/inv_std) -> f32[2,3,1,40]
        gn/reshape_to_channels = SnippetsReshape(gn/mvn) {target_shape=(0,3,2,-1)} -> f32[2,3,2,20]
        gn/reshape_scale = SnippetsReshape(scale) {target_shape=(1,3,-1,1)} -> f32[1,3,2,1]
        gn/scale = Multiply(gn/reshape_to_channels, gn/reshape_scale) -> f32[2,3,2,20]
        gn/reshape_bias = SnippetsReshape(bias) {target_shape=(1,3,-1,1)} -> f32[1,3,2,1]
        gn/bias = Add(gn/scale, gn/reshape_bias) -> f32[2,3,2,20]
        gn = SnippetsReshape(gn/bias) {target_shape=(0,6,4,5)} -> f32[2,6,4,5]
        out = Result(gn) -> f32[2,6,4,5]
    """)


@pytest.mark.parametrize("shape, run_shape, groups", [
    ([2, 6, 4, 5], (2, 6, 4, 5), 3),
    ([1, 8, 7], (1, 8, 7), 8),
    ([None, 6, None], (3, 6, 11), 2),        # dynamic N and spatial: 1/size is computed in the kernel
    ([None, 4, 3, None], (2, 4, 3, 5), 2),
])
def test_gn_decomposition_values(shape, run_shape, groups, rng):
    c = shape[1]
    m = gn_body(shape, c, groups, eps=1e-5)
    x = (rng.standard_normal(run_shape) * 3 + 1).astype(np.float32)
    scale = rng.standard_normal(c).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    feeds = {"x": x, "scale": scale, "bias": bias}
    before = evaluate_model(m, feeds)["out"]
    assert GNDecomposition().run(m) is True
    ConvertConstantsToScalars().run(m)
    ConvertPowerToPowerStatic().run(m)
    assert m.count("GroupNormalization") == 0 and m.count("Power") == 0
    after = evaluate_model(m, feeds)["out"]
    np.testing.assert_allclose(after, np_group_norm(x, scale, bias, groups, 1e-5), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(after, before, rtol=1e-4, atol=1e-4)


def test_gn_with_two_dynamic_spatial_dims_is_left_alone():
    assert GNDecomposition().run(gn_body([2, 6, None, None], 6, 3)) is False


def test_reductions_carry_their_subtensors_for_the_linear_ir():
    from snippets_core.lowered.port_descriptor import FULL_DIM, get_port_descriptor_info

    m = softmax_body([2, 3, 8], axis=1)
    SoftmaxDecomposition().run(m)
    reduces = [n for n in m.get_ordered_ops() if n.type_name.startswith("SnippetsReduce")]
    assert len(reduces) == 2
    for r in reduces:
        for port in ("in", "out"):
            assert get_port_descriptor_info(r, port, 0) == {"subtensor": (1, FULL_DIM, FULL_DIM)}
    g = gn_body([2, 6, 4, 5], 6, 3)
    GNDecomposition().run(g)
    sums = [n for n in g.get_ordered_ops() if n.type_name == "SnippetsReduceSum"]
    assert len(sums) == 2
    assert all(get_port_descriptor_info(s, "in", 0) == {"subtensor": (1, 1, 1, FULL_DIM)} for s in sums)
    dyn = softmax_body(None, axis=-1)  # dynamic rank: nothing to record yet
    SoftmaxDecomposition().run(dyn)
    assert all(get_port_descriptor_info(n, "in", 0) == {} for n in dyn.get_ordered_ops())

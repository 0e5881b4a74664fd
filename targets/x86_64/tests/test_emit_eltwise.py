"""Arithmetic, comparison, logical, select, power and across-lane emitter functions against numpy: bit-exact
where numpy's f32/i32 result is exactly rounded, within stated bounds otherwise."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.ir.ops.binary import _int_div_trunc
from snippets_x86_64.emitters import eltwise as E
from snippets_x86_64.emitters import horizon as H
from snippets_x86_64.emitters.base import kernel
from snippets_x86_64.emitters.testing import expected_writable, run_eltwise, written_registers

pytestmark = pytest.mark.avx512

SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.0, -1.0, 2.5, -2.5, 3.0, 1e30, -7.0],
                   dtype=np.float32)  # fmt: skip


def pairs(n: int = 3000, scale: float = 10.0) -> tuple[np.ndarray, np.ndarray]:
    """Random pairs plus every pair of special values (n not a multiple of 16: the tail is exercised)."""
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(n) * scale, np.repeat(SPECIAL, SPECIAL.size)]).astype(np.float32)
    y = np.concatenate([rng.standard_normal(n) * 3, np.tile(SPECIAL, SPECIAL.size)]).astype(np.float32)
    return x, y


def int_pairs(n: int = 3001) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(4)
    edges = np.array([0, 1, -1, 2**31 - 1, -(2**31), 7, -7, 255, -128], dtype=np.int64)
    x = np.concatenate([rng.integers(-(2**31), 2**31, n), np.repeat(edges, edges.size), rng.integers(-50, 50, n)])
    y = np.concatenate([rng.integers(-(2**31), 2**31, n), np.tile(edges, edges.size), rng.integers(-50, 50, n)])
    return x.astype(np.int32), y.astype(np.int32)


def same(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    want = np.asarray(want).astype(got.dtype)
    if got.dtype.kind == "f":
        return (got == want) | (np.isnan(got) & np.isnan(want))
    return got == want


F32_BINARY = {
    "add": (E.emit_add_f32, np.add),
    "sub": (E.emit_sub_f32, np.subtract),
    "mul": (E.emit_mul_f32, np.multiply),
    "div": (E.emit_div_f32, np.divide),
    "max": (E.emit_max_f32, np.maximum),
    "min": (E.emit_min_f32, np.minimum),
    "squared_difference": (E.emit_squared_difference_f32, lambda a, b: (a - b) * (a - b)),
    "prelu": (E.emit_prelu_f32, lambda a, b: np.where(a < 0, a * b, a)),
}


@pytest.mark.parametrize("alias", [None, 0, 1])
@pytest.mark.parametrize("name", sorted(F32_BINARY))
def test_f32_binary_bit_exact(name, alias):
    fn, ref = F32_BINARY[name]
    x, y = pairs()
    with np.errstate(all="ignore"):
        want = ref(x, y)
    got = run_eltwise(fn, x, y, alias=alias)
    ok = same(got, want)
    assert ok.all(), list(zip(x[~ok][:5], y[~ok][:5], got[~ok][:5]))
    assert written_registers(fn, 2, alias) <= expected_writable(fn, 2, alias)


@pytest.mark.parametrize("alias", [None, 0, 1])
@pytest.mark.parametrize(
    "name,fn,ref", [("fmod", E.emit_mod_f32, np.fmod), ("floor_mod", E.emit_floor_mod_f32, np.mod)]
)
def test_mod_exact_while_the_quotient_is_below_2_23(name, fn, ref, alias):
    x, y = pairs(scale=1e4)
    keep = ~(np.abs(x.astype(np.float64) / y) >= 2**23)  # keeps NaN quotients (0/0, inf/inf, NaN operands)
    x, y = x[keep], y[keep]
    with np.errstate(all="ignore"):
        want = ref(x, y)
    got = run_eltwise(fn, x, y, alias=alias)
    ok = same(got, want)
    assert ok.all(), list(zip(x[~ok][:5], y[~ok][:5], got[~ok][:5], want[~ok][:5]))


@pytest.mark.parametrize("alias", [None, 0, 1])
def test_power_dynamic(alias):
    x, y = pairs(scale=3)
    x = np.concatenate([x, [-2.0, -2.0, -0.0, -0.0, -1.0, -1.0, 1.0, np.nan, -np.inf, -np.inf, 0.0]]).astype(np.float32)
    y = np.concatenate([y, [3.0, 0.5, -3.0, -2.0, np.inf, -np.inf, np.nan, 0.0, 3.0, 2.0, -1.0]]).astype(np.float32)
    with np.errstate(all="ignore"):
        want = np.power(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
    got = run_eltwise(E.emit_power_f32, x, y, alias=alias)
    with np.errstate(all="ignore"):
        close = np.abs(got.astype(np.float64) - want) <= 2e-5 * np.abs(want.astype(np.float64))
    ok = same(got, want) | close
    assert ok.all(), list(zip(x[~ok][:5], y[~ok][:5], got[~ok][:5], want[~ok][:5]))


@pytest.mark.parametrize("power", [0.0, 1.0, 2.0, 3.0, -1.0, -2.0, 7.0, -7.0, 0.5, -0.5, 1.5, -2.5, 0.3, 100.0, 101.0])
def test_power_static(power):
    x = pairs()[0]
    with np.errstate(all="ignore"):
        want = np.power(x.astype(np.float64), power).astype(np.float32)
    got = run_eltwise(E.emit_power_static, x, power=power)
    exact_path = power == int(power) and abs(power) <= 64 or 2 * power == int(2 * power)
    rtol = 5e-7 * (abs(power) + 1) if exact_path else 1e-5
    with np.errstate(all="ignore"):
        close = np.abs(got.astype(np.float64) - want) <= rtol * np.abs(want.astype(np.float64))
    ok = same(got, want) | close
    assert ok.all(), list(zip(x[~ok][:5], got[~ok][:5], want[~ok][:5]))


F32_UNARY = {
    "abs": (E.emit_abs_f32, np.abs, {}),
    "neg": (E.emit_neg_f32, np.negative, {}),
    "relu": (E.emit_relu_f32, lambda x: np.maximum(x, np.float32(0)), {}),
    "sqrt": (E.emit_sqrt_f32, np.sqrt, {}),
    "clamp": (E.emit_clamp_f32, lambda x: np.clip(x, np.float32(-2.5), np.float32(6.0)), {"min": -2.5, "max": 6.0}),
    "hsigmoid": (E.emit_hsigmoid_f32, lambda x: np.clip(x + np.float32(3), 0, 6) * np.float32(1 / 6), {}),
    "hswish": (E.emit_hswish_f32, lambda x: x * np.clip(x + np.float32(3), 0, 6) * np.float32(1 / 6), {}),
    "hard_sigmoid": (E.emit_hard_sigmoid_f32, lambda x: np.clip(x * np.float32(0.2) + np.float32(0.5), 0, 1),
                     {"alpha": 0.2, "beta": 0.5}),
    "softsign": (E.emit_softsign_f32, lambda x: x / (1 + np.abs(x)), {}),
}  # fmt: skip


@pytest.mark.parametrize("alias", [None, 0])
@pytest.mark.parametrize("name", sorted(F32_UNARY))
def test_f32_unary_bit_exact(name, alias):
    fn, ref, attrs = F32_UNARY[name]
    x = pairs()[0]
    with np.errstate(all="ignore"):
        want = ref(x)
    got = run_eltwise(fn, x, alias=alias, **attrs)
    ok = same(got, want)
    assert ok.all(), list(zip(x[~ok][:5], got[~ok][:5], want[~ok][:5]))
    assert written_registers(fn, 1, alias, **attrs) <= expected_writable(fn, 1, alias)


I32_BINARY = {
    "add": (E.emit_add_i32, np.add),
    "sub": (E.emit_sub_i32, np.subtract),
    "mul": (E.emit_mul_i32, np.multiply),
    "max": (E.emit_max_i32, np.maximum),
    "min": (E.emit_min_i32, np.minimum),
    "xor": (E.emit_xor_i32, np.bitwise_xor),
    "squared_difference": (E.emit_squared_difference_i32, lambda a, b: (a - b) * (a - b)),
    "prelu": (E.emit_prelu_i32, lambda a, b: np.where(a < 0, a * b, a)),
    "fmod": (E.emit_mod_i32, lambda a, b: np.where(b == 0, 0, np.fmod(a, np.where(b == 0, 1, b)))),
    "floor_mod": (E.emit_floor_mod_i32, lambda a, b: np.where(b == 0, 0, np.mod(a, np.where(b == 0, 1, b)))),
}


@pytest.mark.parametrize("alias", [None, 0, 1])
@pytest.mark.parametrize("name", sorted(I32_BINARY))
def test_i32_binary_bit_exact(name, alias):
    fn, ref = I32_BINARY[name]
    x, y = int_pairs()
    with np.errstate(all="ignore"):
        want = ref(x, y)
    assert np.array_equal(run_eltwise(fn, x, y, alias=alias), want.astype(np.int32))


@pytest.mark.parametrize("alias", [None, 0, 1])
def test_i32_divide_truncates_like_the_core_reference(alias):
    rng = np.random.default_rng(9)
    edges = np.array([0, 1, -1, 2, -2, 3, 7, -7, 2**24 - 1, 2**24 + 1, 2**30, -(2**30), 2**31 - 1, -(2**31),
                      2**31 - 64, -(2**31) + 1, 1000003, -99991], dtype=np.int64)  # fmt: skip
    small = np.arange(-300, 301)
    x = np.concatenate([
        np.repeat(small, 41), np.repeat(edges, edges.size), rng.integers(-(2**31), 2**31, 40000),
        rng.integers(-(2**31), 2**31, 20000),
    ])  # fmt: skip
    y = np.concatenate([
        np.tile(np.arange(-20, 21), small.size), np.tile(edges, edges.size), rng.integers(-(2**31), 2**31, 40000),
        rng.integers(-(2**31), 2**31, 20000) >> rng.integers(0, 31, 20000),
    ])  # fmt: skip
    x, y = x.astype(np.int32), y.astype(np.int32)
    with np.errstate(over="ignore"):
        want = _int_div_trunc(x.astype(np.int64), y.astype(np.int64)).astype(np.int32)  # INT_MIN / -1 wraps
    got = run_eltwise(E.emit_div_i32, x, y, alias=alias)
    ok = got == want
    assert ok.all(), list(zip(x[~ok][:5], y[~ok][:5], got[~ok][:5], want[~ok][:5]))


@pytest.mark.parametrize(
    "fn,ref,attrs",
    [
        (E.emit_abs_i32, np.abs, {}),
        (E.emit_neg_i32, np.negative, {}),
        (E.emit_relu_i32, lambda x: np.maximum(x, 0), {}),
        (E.emit_sign_i32, np.sign, {}),
        (E.emit_clamp_i32, lambda x: np.clip(x, -3, 5), {"min": -3.5, "max": 5.5}),
        (E.emit_clamp_i32, lambda x: x, {"min": -1e20, "max": 1e20}),
        (E.emit_identity, lambda x: x, {}),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_i32_unary_bit_exact(fn, ref, attrs):
    x = int_pairs()[0]
    with np.errstate(all="ignore"):
        want = ref(x).astype(np.int32)
    for alias in (None, 0):
        assert np.array_equal(run_eltwise(fn, x, alias=alias, **attrs), want)


@pytest.mark.parametrize("op", sorted(E.COMPARISONS))
def test_comparisons_give_0_or_1(op):
    numpy_op = {"Equal": np.equal, "NotEqual": np.not_equal, "Greater": np.greater,
                "GreaterEqual": np.greater_equal, "Less": np.less, "LessEqual": np.less_equal}[op]  # fmt: skip
    f32_pred, i32_pred = E.COMPARISONS[op]
    x, y = pairs()
    y[::7] = x[::7]  # equal pairs
    with np.errstate(invalid="ignore"):
        want = numpy_op(x, y).astype(np.int32)
    for alias in (None, 0, 1):
        got = run_eltwise(E.emit_compare_f32, x, y, out_dtype=np.int32, alias=alias, predicate=f32_pred)
        assert np.array_equal(got, want)
    xi, yi = int_pairs()
    yi[::7] = xi[::7]
    got = run_eltwise(E.emit_compare_i32, xi, yi, predicate=i32_pred)
    assert np.array_equal(got, numpy_op(xi, yi).astype(np.int32))


def test_logical_ops_on_0_1():
    rng = np.random.default_rng(5)
    a, b = (rng.integers(0, 2, 999).astype(np.int32) for _ in range(2))
    assert np.array_equal(run_eltwise(E.emit_and_i32, a, b), np.logical_and(a, b).astype(np.int32))
    assert np.array_equal(run_eltwise(E.emit_or_i32, a, b), np.logical_or(a, b).astype(np.int32))
    assert np.array_equal(run_eltwise(E.emit_xor_i32, a, b), np.logical_xor(a, b).astype(np.int32))
    assert np.array_equal(run_eltwise(E.emit_logical_not, a), np.logical_not(a).astype(np.int32))


@pytest.mark.parametrize("alias", [None, 0, 1, 2])
def test_select(alias):
    rng = np.random.default_rng(6)
    c = rng.integers(0, 2, 1001).astype(np.int32)
    x, y = pairs(1001 - SPECIAL.size**2)
    got = run_eltwise(E.emit_select, c, x.view(np.int32), y.view(np.int32), alias=alias).view(np.float32)
    assert np.array_equal(got, np.where(c.astype(bool), x, y), equal_nan=True)


@pytest.mark.parametrize("alias", [None, 0, 1, 2])
def test_fused_mul_add(alias):
    x, y = pairs()
    z = np.roll(x, 5)
    with np.errstate(all="ignore"):
        # the f64 product is exact, its sum with z rounded twice (f64, then f32): at most one f32 ulp away
        want = (x.astype(np.float64) * y + z).astype(np.float32)
        got = run_eltwise(E.emit_fused_mul_add_f32, x, y, z, alias=alias)
        ok = same(got, want) | (np.abs(got - want) <= np.spacing(np.abs(want)))
    assert ok.all(), list(zip(x[~ok][:5], y[~ok][:5], z[~ok][:5], got[~ok][:5], want[~ok][:5]))
    xi, yi = int_pairs()
    zi = np.roll(xi, 3)
    with np.errstate(over="ignore"):
        assert np.array_equal(run_eltwise(E.emit_fused_mul_add_i32, xi, yi, zi, alias=alias), xi * yi + zi)


def test_horizon_max_and_sum_broadcast_the_result():
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((40, 16)) * 100).astype(np.float32)
    x[3, 7] = np.nan
    x[5, :] = -np.inf
    for alias in (None, 0):
        got = run_eltwise(H.emit_horizon_max, x.reshape(-1), alias=alias).reshape(40, 16)
        assert np.array_equal(got, np.broadcast_to(x.max(axis=1, keepdims=True), got.shape), equal_nan=True)
        got = run_eltwise(H.emit_horizon_sum, x.reshape(-1), alias=alias).reshape(40, 16)
        want = x.astype(np.float64).sum(axis=1, keepdims=True)
        ok = np.isclose(got, want, rtol=1e-5, atol=1e-3) | (np.isnan(got) & np.isnan(want))
        assert ok.all()
    assert written_registers(H.emit_horizon_max, 1) <= expected_writable(H.emit_horizon_max, 1)


@pytest.mark.parametrize("offset", [0, 1, 5, 15, 16, 20])
def test_fill(offset):
    x = np.arange(64, dtype=np.float32)
    got = run_eltwise(H.emit_fill, x, offset=offset, fill_value=0xFF7FFFFF).reshape(4, 16)
    want = x.reshape(4, 16).copy()
    want[:, offset:] = np.uint32(0xFF7FFFFF).view(np.float32)
    assert np.array_equal(got, want)


@kernel()
def scalar_ignoring_input(a, dst, src, aux, bits=0):
    """emit_scalar takes no input; the harness loads one."""
    H.emit_scalar(a, dst, aux, bits=bits)


def test_scalar_and_broadcast_move():
    dummy = np.ones(35, dtype=np.float32)
    got = run_eltwise(scalar_ignoring_input, dummy, bits=int(np.float32(-2.75).view(np.uint32)))
    assert (got == np.float32(-2.75)).all()
    assert (run_eltwise(scalar_ignoring_input, dummy, bits=0) == 0).all()
    x = np.arange(48, dtype=np.float32)
    assert np.array_equal(run_eltwise(H.emit_broadcast_move, x).reshape(3, 16), np.repeat(x[::16], 16).reshape(3, 16))

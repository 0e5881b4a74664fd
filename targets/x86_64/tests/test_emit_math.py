"""The f32 math emitter functions against numpy float64 over dense sweeps and special values.

Bounds are in f32 ulps over normal results (see snippets_x86_64.emitters.accuracy) and as absolute errors;
docs/x86_64_math.md has the measured numbers.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from snippets_x86_64.emitters import eltwise as E
from snippets_x86_64.emitters import math as M
from snippets_x86_64.emitters.accuracy import BINARY_CASES, CASES, geo, lin, measure, ulp_errors
from snippets_x86_64.emitters.testing import expected_writable, run_eltwise, written_registers

pytestmark = pytest.mark.avx512

#: (case name, domain) -> (max ulp over normal results, max abs error where |f| <= 1)
BOUNDS = {
    ("exp", "[-104, 89] + 1e4 pts near 0"): (1.0, 1e-7),
    ("log", "[1e-45, 3.4e38] geometric + [0.5, 2]"): (1.0, 1e-7),
    ("expm1 (Elu)", "[-20, 20]"): (3.0, 1e-7),
    ("sigmoid", "[-100, 100]"): (2.5, 1e-7),
    ("tanh", "[-20, 20]"): (1.5, 1e-7),
    ("erf", "[-6, 6]"): (3.0, 2e-7),
    ("gelu (erf)", "[-14, 14]"): (6.0, 4e-7),
    # conditioning: the f32 rounding of the argument of sigmoid(2u), |2u| up to 90, is amplified |2u| times
    ("gelu (tanh)", "[-30, 30]"): (200.0, 6e-7),
    ("elu (alpha 1)", "[-20, 20]"): (1.5, 1e-7),
    # e**-91 is a denormal: its lost bits show in x e**x near the smallest normal numbers
    ("swish (beta 1)", "[-100, 100]"): (50.0, 2e-6),
    ("softplus", "[-100, 100]"): (2.5, 5e-7),
    ("mish", "[-100, 100]"): (50.0, 1e-6),
    ("sin", "[-pi, pi]"): (1.5, 1e-7),
    ("sin", "[-1e4, 1e4]"): (130.0, 1e-7),  # large ulps only near the zeros, where k pi/2 is rounded
    ("sin", "[-1e6, 1e6]"): (1300.0, 1e-7),
    ("cos", "[-pi, pi]"): (1.5, 1e-7),
    ("cos", "[-1e4, 1e4]"): (10.0, 1e-7),
    ("pow x**0.3 (PowerStatic)", "[1e-30, 1e37]"): (55.0, 1e-7),  # e**(0.3 log x): |0.3 log x| up to 26
    ("pow x**1.5 (PowerStatic)", "[1e-30, 1e25]"): (1.5, 1e-7),
    ("pow x**-2.5 (PowerStatic)", "[1e-15, 1e15]"): (3.5, 2e-7),
    ("pow x**3 (PowerStatic)", "+-[1e-12, 1e12]"): (1.5, 1e-7),
    ("pow x**-1 (PowerStatic)", "+-[1e-37, 1e37]"): (0.5, 1e-7),
    ("pow x**y (Power)", "x in [0.5, 2], y in [-4, 4]"): (5.0, 1e-7),
    ("pow x**y (Power)", "x in [1e-3, 1e3] geometric, y in [-10, 10]"): (100.0, 1e-7),  # |y log x| up to 69
}


def test_every_case_has_a_bound():
    assert sorted(BOUNDS) == sorted((c.name, c.domain) for c in CASES + BINARY_CASES)


@pytest.mark.parametrize("case", CASES + BINARY_CASES, ids=lambda c: f"{c.name} {c.domain}")
def test_accuracy_against_float64(case):
    max_ulp, max_abs = BOUNDS[(case.name, case.domain)]
    m = measure(case)
    assert m.max_ulp <= max_ulp, f"{case.name}: {m.max_ulp:.2f} ulp at x={m.worst_x!r}"
    assert m.max_abs <= max_abs, f"{case.name}: abs error {m.max_abs:.3g}"


SPECIAL = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754942e-38, -1.1754942e-38, 1.0, -1.0, 0.5, -0.5,
     1e30, -1e30, 3.4028235e38, -3.4028235e38, 88.7, -88.7, 100.0, -100.0],
    dtype=np.float32,
)  # fmt: skip


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


#: function -> numpy reference on special values, and the relative tolerance there
SPECIAL_CASES = {
    "exp": (M.emit_exp, np.exp, 2e-7),
    "log": (M.emit_log, np.log, 2e-7),
    "expm1": (M.emit_expm1, np.expm1, 4e-7),
    "sigmoid": (M.emit_sigmoid, lambda x: np.exp(-np.logaddexp(0, -x)), 4e-7),
    "tanh": (M.emit_tanh, np.tanh, 2e-7),
    "erf": (M.emit_erf, _erf, 4e-7),
    "gelu_erf": (M.emit_gelu_erf, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), 1e-6),
    "elu": (M.emit_elu, lambda x: np.where(x > 0, x, np.expm1(x)), 4e-7),
    "softplus": (M.emit_softplus, lambda x: np.logaddexp(0, x), 4e-7),
    "sign": (M.emit_sign, np.sign, 0.0),
    "floor": (M.emit_floor, np.floor, 0.0),
    "ceil": (M.emit_ceil, np.ceil, 0.0),
    "trunc": (M.emit_trunc, np.trunc, 0.0),
    "round_half_to_even": (M.emit_round_half_to_even, np.rint, 0.0),
    "round_half_away": (M.emit_round_half_away, lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5), 0.0),
}


#: gelu(2**-149) is 2**-150 + 2**-299 (1 + erf rounds to 1 in float64, making the reference a tie that rounds
#: to 0); the kernel's max(x, 0) - V rounds the exact value correctly, to 2**-149: one denormal step apart
SPECIAL_ATOL = {"gelu_erf": 2.0**-149}


@pytest.mark.parametrize("name", sorted(SPECIAL_CASES))
def test_special_values(name):
    fn, ref, rtol = SPECIAL_CASES[name]
    got = run_eltwise(fn, SPECIAL)
    with np.errstate(all="ignore"):
        want = ref(SPECIAL.astype(np.float64)).astype(np.float32)
    atol = SPECIAL_ATOL.get(name, 0.0)
    with np.errstate(invalid="ignore"):
        close = np.abs(got.astype(np.float64) - want) <= np.maximum(rtol * np.abs(want), atol)
        ok = (got == want) | (np.isnan(got) & np.isnan(want)) | close
    assert ok.all(), list(zip(SPECIAL[~ok], got[~ok], want[~ok]))


def test_exp_denormal_results_and_overflow_edges():
    x = np.array([-87.3, -100.0, -103.0, -103.97, -104.0, -200.0, 88.72283, 88.7229, 1000.0], dtype=np.float32)
    err = ulp_errors(run_eltwise(M.emit_exp, x), np.exp(x.astype(np.float64)))
    assert err.max() <= 1.0, err


def test_sin_cos_of_infinity_and_nan_are_nan_and_huge_arguments_stay_in_range():
    x = np.array([np.inf, -np.inf, np.nan], dtype=np.float32)
    assert np.isnan(run_eltwise(M.emit_sin, x)).all()
    assert np.isnan(run_eltwise(M.emit_cos, x)).all()
    huge = np.array([1e30, -1e30, 3.4e38, 1e9, -1e12], dtype=np.float32)
    for fn in (M.emit_sin, M.emit_cos):
        assert (np.abs(run_eltwise(fn, huge)) <= 1).all()


def test_rounding_on_ties_and_large_values():
    x = np.concatenate([np.arange(-10.5, 10.6, 0.5), [0.49999997, -0.49999997, 8388607.5, 2.0**24 + 2]]).astype(
        np.float32
    )
    assert np.array_equal(run_eltwise(M.emit_round_half_to_even, x), np.rint(x))
    away = np.sign(x.astype(np.float64)) * np.floor(np.abs(x.astype(np.float64)) + 0.5)
    away[np.abs(x) == np.float32(0.49999997)] = 0.0  # the float64 reference is exact there
    assert np.array_equal(run_eltwise(M.emit_round_half_away, x), away.astype(np.float32))


UNARY = [
    M.emit_exp, M.emit_log, M.emit_expm1, M.emit_sigmoid, M.emit_tanh, M.emit_erf, M.emit_gelu_erf,
    M.emit_gelu_tanh, M.emit_elu, M.emit_swish, M.emit_softplus, M.emit_mish, M.emit_sin, M.emit_cos,
    M.emit_round_half_away, M.emit_sign, M.emit_floor,
]  # fmt: skip


@pytest.mark.parametrize("fn", UNARY, ids=lambda f: f.__name__)
def test_destination_may_be_the_source(fn):
    x = np.linspace(-20, 20, 1001, dtype=np.float32)
    assert np.array_equal(run_eltwise(fn, x), run_eltwise(fn, x, alias=0), equal_nan=True)


@pytest.mark.parametrize("fn", UNARY, ids=lambda f: f.__name__)
def test_writes_only_destination_and_declared_aux(fn):
    for alias in (None, 0):
        assert written_registers(fn, 1, alias) <= expected_writable(fn, 1, alias)


@pytest.mark.parametrize("power", [1.5, -2.5, 0.3, 100.0])
def test_power_static_general_writes_only_declared_registers(power):
    assert written_registers(E.emit_power_static, 1, power=power) <= expected_writable(E.emit_power_static, 1)


def test_gelu_erf_over_every_binade_against_float64():
    """gelu(x) = x/2 erfc(-x/sqrt 2) over a geometric sweep of both signs from the smallest denormal to FLT_MAX
    (the clamp at |x| = 14.85, the denormal tail below -13.3, huge x), and -0.0, +-inf, NaN."""
    x = np.concatenate([geo(1e-45, 3.4e38, 200_001, signed=True), lin(-16, 16, 100_001)])
    got = run_eltwise(M.emit_gelu_erf, x)
    want = x.astype(np.float64) / 2 * np.vectorize(math.erfc, otypes=[np.float64])(-x.astype(np.float64) / math.sqrt(2))
    err = ulp_errors(got, want)
    normal = np.abs(want) >= 2.0**-126
    assert err[normal].max() <= BOUNDS[("gelu (erf)", "[-14, 14]")][0], x[normal][np.argmax(err[normal])]
    # denormal results: within a few steps of 2**-149 (the exp's scaling rounds once, at the end)
    assert np.abs(got[~normal].astype(np.float64) - want[~normal]).max() <= 4 * 2.0**-149
    special = run_eltwise(M.emit_gelu_erf, np.array([-0.0, np.inf, -np.inf, np.nan, -np.nan], dtype=np.float32))
    assert special[0] == 0 and special[1] == np.inf and np.isnan(special[2:]).all()


def test_exp_over_every_binade_and_special_inputs_without_a_fixup():
    """exp's clamps keep a NaN (the input is their second operand) and map +-inf and huge arguments to the
    bounds: checked over a geometric sweep of both signs up to FLT_MAX against numpy float64."""
    x = np.concatenate([geo(1e-45, 3.4e38, 200_001, signed=True), [0.0, -0.0, np.inf, -np.inf, np.nan]])
    x = x.astype(np.float32)
    got = run_eltwise(M.emit_exp, x)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64))
    assert ulp_errors(got, want).max() <= BOUNDS[("exp", "[-104, 89] + 1e4 pts near 0")][0]
    assert np.isnan(got[-1]) and got[-2] == 0 and got[-3] == np.inf and got[-4] == 1 and got[-5] == 1

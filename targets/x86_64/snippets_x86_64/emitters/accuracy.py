"""Accuracy of the f32 math emitter functions against numpy float64, over dense sweeps of their ranges.

``python -m snippets_x86_64.emitters.accuracy`` prints the table of docs/x86_64_math.md; the tests assert bounds
on the same measurements. The error of a result y against the float64 reference r is counted in units in the
last place of r rounded to f32 (the spacing of f32 numbers there, 2**-149 at least); lanes where both are the
same infinity, both NaN, or y equals r rounded to f32 count 0. ``max ulp`` is taken over the results that are
normal f32 numbers (>= 2**-126 in magnitude); ``max abs`` over the results of magnitude <= 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from snippets_x86_64.emitters import eltwise as E
from snippets_x86_64.emitters import math as M
from snippets_x86_64.emitters.testing import run_eltwise

TINY = 2.0**-126


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    # x/2 erfc(-x/sqrt 2): no cancellation for x < 0 in the reference either
    return 0.5 * x * np.vectorize(math.erfc, otypes=[np.float64])(-x / math.sqrt(2.0))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    # 1 + tanh(u) = 2 sigmoid(2u), exactly; the sigmoid form does not cancel for x < 0
    return x * _sigmoid(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))


def lin(lo: float, hi: float, n: int = 400_001) -> np.ndarray:
    return np.linspace(lo, hi, n, dtype=np.float64).astype(np.float32)


def geo(lo: float, hi: float, n: int = 400_001, signed: bool = False) -> np.ndarray:
    x = np.geomspace(lo, hi, n).astype(np.float32)
    return np.concatenate([-x[::-1], x]) if signed else x


@dataclass(frozen=True)
class Case:
    """One function measured over one domain."""

    name: str
    fn: Callable[..., None]
    ref: Callable[[np.ndarray], np.ndarray]
    domain: str
    points: Callable[[], np.ndarray]
    attrs: dict = field(default_factory=dict)


CASES: tuple[Case, ...] = (
    Case("exp", M.emit_exp, np.exp, "[-104, 89] + 1e4 pts near 0", lambda: np.concatenate([lin(-104, 89), lin(-1, 1, 10_001)])),
    Case("log", M.emit_log, np.log, "[1e-45, 3.4e38] geometric + [0.5, 2]", lambda: np.concatenate([geo(1e-45, 3.4e38), lin(0.5, 2)])),
    Case("expm1 (Elu)", M.emit_expm1, np.expm1, "[-20, 20]", lambda: lin(-20, 20)),
    Case("sigmoid", M.emit_sigmoid, _sigmoid, "[-100, 100]", lambda: lin(-100, 100)),
    Case("tanh", M.emit_tanh, np.tanh, "[-20, 20]", lambda: lin(-20, 20)),
    Case("erf", M.emit_erf, _erf, "[-6, 6]", lambda: lin(-6, 6, 200_001)),
    Case("gelu (erf)", M.emit_gelu_erf, _gelu_erf, "[-14, 14]", lambda: lin(-14, 14, 200_001)),
    Case("gelu (tanh)", M.emit_gelu_tanh, _gelu_tanh, "[-30, 30]", lambda: lin(-30, 30)),
    Case("elu (alpha 1)", M.emit_elu, lambda x: np.where(x > 0, x, np.expm1(x)), "[-20, 20]", lambda: lin(-20, 20)),
    Case("swish (beta 1)", M.emit_swish, lambda x: x * _sigmoid(x), "[-100, 100]", lambda: lin(-100, 100)),
    Case("softplus", M.emit_softplus, _softplus, "[-100, 100]", lambda: lin(-100, 100)),
    Case("mish", M.emit_mish, lambda x: x * np.tanh(_softplus(x)), "[-100, 100]", lambda: lin(-100, 100)),
    Case("sin", M.emit_sin, np.sin, "[-pi, pi]", lambda: lin(-math.pi, math.pi)),
    Case("sin", M.emit_sin, np.sin, "[-1e4, 1e4]", lambda: lin(-1e4, 1e4)),
    Case("sin", M.emit_sin, np.sin, "[-1e6, 1e6]", lambda: lin(-1e6, 1e6)),
    Case("cos", M.emit_cos, np.cos, "[-pi, pi]", lambda: lin(-math.pi, math.pi)),
    Case("cos", M.emit_cos, np.cos, "[-1e4, 1e4]", lambda: lin(-1e4, 1e4)),
    Case("pow x**0.3 (PowerStatic)", E.emit_power_static, lambda x: x**0.3, "[1e-30, 1e37]", lambda: geo(1e-30, 1e37), {"power": 0.3}),
    Case("pow x**1.5 (PowerStatic)", E.emit_power_static, lambda x: x**1.5, "[1e-30, 1e25]", lambda: geo(1e-30, 1e25), {"power": 1.5}),
    Case("pow x**-2.5 (PowerStatic)", E.emit_power_static, lambda x: x**-2.5, "[1e-15, 1e15]", lambda: geo(1e-15, 1e15), {"power": -2.5}),
    Case("pow x**3 (PowerStatic)", E.emit_power_static, lambda x: x**3, "+-[1e-12, 1e12]", lambda: geo(1e-12, 1e12, signed=True), {"power": 3.0}),
    Case("pow x**-1 (PowerStatic)", E.emit_power_static, lambda x: 1 / x, "+-[1e-37, 1e37]", lambda: geo(1e-37, 1e37, signed=True), {"power": -1.0}),
)  # fmt: skip


def _pairs(lo: float, hi: float, ylo: float, yhi: float, log_x: bool) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = np.exp(rng.uniform(np.log(lo), np.log(hi), 400_000)) if log_x else rng.uniform(lo, hi, 400_000)
    return np.stack([x, rng.uniform(ylo, yhi, 400_000)]).astype(np.float32)


#: two-input functions: ``points`` gives a (2, n) array
BINARY_CASES: tuple[Case, ...] = (
    Case("pow x**y (Power)", E.emit_power_f32, lambda xy: np.power(xy[0], xy[1]), "x in [0.5, 2], y in [-4, 4]",
         lambda: _pairs(0.5, 2, -4, 4, False)),
    Case("pow x**y (Power)", E.emit_power_f32, lambda xy: np.power(xy[0], xy[1]),
         "x in [1e-3, 1e3] geometric, y in [-10, 10]", lambda: _pairs(1e-3, 1e3, -10, 10, True)),
)  # fmt: skip


@dataclass(frozen=True)
class Measured:
    max_ulp: float
    max_abs: float
    worst_x: float


def ulp_errors(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|y - ref| in f32 ulps of ref (0 where they agree as f32 values, infinities or NaNs)."""
    with np.errstate(all="ignore"):
        ref32 = ref.astype(np.float32)
        spacing = np.maximum(np.spacing(np.abs(ref32)).astype(np.float64), 2.0**-149)
        err = np.abs(y.astype(np.float64) - ref) / spacing
    same = (y.astype(np.float64) == ref32.astype(np.float64)) | (np.isnan(y) & np.isnan(ref))
    return np.where(same, 0.0, err)


def measure(case: Case) -> Measured:
    x = case.points()
    y = run_eltwise(case.fn, *x, **case.attrs) if x.ndim == 2 else run_eltwise(case.fn, x, **case.attrs)
    with np.errstate(all="ignore"):
        ref = case.ref(x.astype(np.float64))
    err = ulp_errors(y, ref)
    normal = np.abs(ref) >= TINY
    ulp = np.where(normal, err, 0.0)
    finite = np.isfinite(ref) & np.isfinite(y)
    worst = int(np.argmax(ulp))
    if x.ndim == 2:
        x = x[0]
    small = finite & (np.abs(ref) <= 1.0)
    max_abs = float(np.max(np.abs(y[small].astype(np.float64) - ref[small]))) if small.any() else 0.0
    return Measured(float(ulp[worst]), max_abs, float(x[worst]))


def table() -> str:
    lines = [
        r"| function | domain | max ulp (normal results) | max abs error where \|f\| <= 1 | worst x |",
        "|---|---|---|---|---|",
    ]
    for case in CASES + BINARY_CASES:
        m = measure(case)
        lines.append(f"| {case.name} | {case.domain} | {m.max_ulp:.2f} | {m.max_abs:.3g} | {m.worst_x:.7g} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())

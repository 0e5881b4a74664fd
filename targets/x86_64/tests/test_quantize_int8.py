"""The JIT activation quantizer (quantize_int8.py) against numpy: QuantizeLinear's ``saturate(rint(x / scale) +
zero_point)`` with the quotient IEEE-rounded in f32, on the values where a quotient off by an ulp would show (the
f32 neighbours of every rounding tie and saturation bound), for many scales; under guard pages."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.errors import UnsupportedByTarget
from snippets_x86_64.guarded import guarded_array, guarded_copy
from snippets_x86_64.quantize_int8 import QRANGE, quantize_params, quantize_rows


def _want(x: np.ndarray, scale: float, zp: int, signed: bool) -> np.ndarray:
    lo, hi = QRANGE[signed]
    with np.errstate(over="ignore"):
        quotient = (x / np.float32(scale)).astype(np.float64)  # IEEE f32 division, as ONNX's reference
    return np.clip(np.rint(quotient) + zp, lo, hi).astype(np.int64)


def _near_ties(scale: float, zp: int, signed: bool, ulps: int = 24) -> np.ndarray:
    """Every f32 within ``ulps`` of ``(k + 0.5) * scale`` for the half-integers k + 0.5 the grid can reach."""
    lo, hi = QRANGE[signed]
    ties = (np.arange(lo - zp - 2, hi - zp + 2) + 0.5) * scale
    centre = ties.astype(np.float32).view(np.int32).astype(np.int64)
    near = (centre[:, None] + np.arange(-ulps, ulps + 1)[None, :]).ravel()
    near = near[(near > -(1 << 31)) & (near < (1 << 31))].astype(np.int32).view(np.float32)
    return near[np.isfinite(near)]


def _run(x: np.ndarray, scale: float, zp: int, signed: bool, at: str = "end") -> np.ndarray:
    k = 37  # a row of 2 full vectors and a masked tail
    rows = -(-x.size // k)
    src = np.zeros(rows * k, np.float32)
    src[: x.size] = x
    xs = guarded_copy(src.reshape(rows, k), at)
    out = guarded_array((rows, k), np.int8 if signed else np.uint8, at)
    try:
        quantize_rows(xs, out, guarded_copy(quantize_params(scale, zp, signed), at))
    except UnsupportedByTarget as e:
        pytest.skip(str(e))
    return out.ravel()[: x.size].astype(np.int64)


@pytest.mark.parametrize("signed", [False, True])
def test_the_quotient_is_ieee_near_every_tie(signed: bool) -> None:
    rng = np.random.default_rng(5 + signed)
    scales = np.concatenate([rng.uniform(1e-4, 2.0, 120), 10.0 ** rng.uniform(-8, 6, 60),
                             [0.1, 0.05, 1 / 255, 0.0078125, 3.0, 1e-30, 1e30]]).astype(np.float32)
    for scale in scales:
        zp = int(rng.integers(0, 256)) - (128 if signed else 0)
        x = _near_ties(float(scale), zp, signed)
        got, want = _run(x, float(scale), zp, signed, "end" if zp % 2 else "start"), _want(x, float(scale), zp, signed)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, f"scale {scale!r} zp {zp}: x {x[bad[:4]]} -> {got[bad[:4]]}, numpy {want[bad[:4]]}"


def test_saturation_infinities_and_huge_values() -> None:
    x = np.asarray([np.inf, -np.inf, 3e38, -3e38, 1e30, -1e30, 0.0, -0.0, 1e-45, -1e-45], np.float32)
    for scale, zp, signed in ((0.02, 128, False), (1e-6, 0, True), (100.0, 3, False)):
        np.testing.assert_array_equal(_run(x, scale, zp, signed), _want(x, scale, zp, signed))

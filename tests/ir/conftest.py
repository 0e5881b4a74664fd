"""Shared helpers for the IR op tests: tolerances per element type and building one-op models."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.ir import ElementType

# f16/bf16 results are computed in f32 and rounded once: allow about one unit in the last place.
TOLERANCES = {
    "f64": {"rtol": 1e-12, "atol": 1e-12},
    "f32": {"rtol": 2e-6, "atol": 2e-6},
    "f16": {"rtol": 2e-3, "atol": 2e-3},
    "bf16": {"rtol": 1.6e-2, "atol": 1.6e-2},
}


def assert_close(actual: np.ndarray, expected: np.ndarray, et: str) -> None:
    """Compare in float64 with the tolerance of element type ``et``; also checks the dtype."""
    assert actual.dtype == ElementType.parse(et).numpy, (actual.dtype, et)
    np.testing.assert_allclose(np.asarray(actual, np.float64), np.asarray(expected, np.float64),
                               **TOLERANCES[et])


def as_type(values: np.ndarray, et: str) -> np.ndarray:
    return np.asarray(values).astype(ElementType.parse(et).numpy)


@pytest.fixture(params=["f32", "f16", "bf16"])
def real_type(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def close():
    """The :func:`assert_close` helper (test modules cannot import conftest under importlib mode)."""
    return assert_close

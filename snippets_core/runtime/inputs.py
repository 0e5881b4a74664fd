"""Turning a caller's input value into an array, with a typed error for values that are not numbers."""

from __future__ import annotations

from typing import Any

import numpy as np

from snippets_core.errors import InputError


def as_input_array(name: str, value: Any, dtype: np.dtype | None) -> np.ndarray:
    """``value`` (a nested list, a scalar, ...) as an array of ``dtype``; InputError naming the input when it
    cannot be one (a string, None, a ragged list, an object)."""
    if value is None:
        raise InputError(f"input {name!r} is None; expected an array")
    try:
        return np.asarray(value, dtype=dtype)
    except (ValueError, TypeError, OverflowError) as e:
        kind = type(value).__name__
        want = f"an array of {dtype}" if dtype is not None else "an array"
        raise InputError(f"input {name!r}: a {kind} cannot be converted to {want} ({e})") from None

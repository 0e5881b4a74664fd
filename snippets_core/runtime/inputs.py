"""Inputs from callers and files: a value turned into an array, .npz files read and written, each with a typed
error naming the input or the file."""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
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


def load_npz(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of an .npz file by name; InputError naming the file when it is missing, a directory, an .npy or
    not an .npz."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{path}: is a directory, expected an .npz file with one array per input name")
    if not p.is_file():
        raise InputError(f"{path}: no such file")
    try:
        data = np.load(p, allow_pickle=False)
        if isinstance(data, np.ndarray):  # an .npy holds one unnamed array
            raise InputError(f"{path}: a single array (.npy); expected an .npz with one array per input name, "
                             "e.g. np.savez('in.npz', x=array)")
        with data:
            return {k: data[k] for k in data.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError, zlib.error) as e:
        if "pickle" in str(e) and "Object arrays" not in str(e):  # numpy's word for "neither .npy nor .npz"
            raise InputError(f"{path}: not an .npz file (one array per input name, np.savez('in.npz', x=array))"
                             ) from None
        raise InputError(f"{path}: not a readable .npz file ({type(e).__name__}: {e})") from None


def save_npz(path: str | Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Write ``arrays`` to exactly ``path``; InputError naming it when it cannot be written."""
    # Through a file object: np.savez(path) would append ".npz" to a path without it, unknown to the user.
    try:
        with open(path, "wb") as f:
            np.savez(f, **arrays)
    except OSError as e:
        raise InputError(f"{path}: cannot write outputs ({e.strerror or e})") from None


def expect_output_arrays(outputs: Any, output_names: Sequence[str]) -> None:
    """InputError unless ``outputs`` (preallocated output arrays) is a mapping by output name."""
    if not isinstance(outputs, Mapping):
        raise InputError(f"outputs must be a dict of preallocated arrays by output name ({', '.join(output_names)}), "
                         f"got {type(outputs).__name__}")

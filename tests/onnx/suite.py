"""Helpers of the ONNX conformance tests: the node test cases (generated once per session from the
generators inside the onnx package, since this wheel ships no node test data), the exclusion tables,
and the comparison the onnx runner uses. Test modules and conftest.py load it by path under one module name, so its caches are shared."""

from __future__ import annotations

import functools
import importlib.util
import re
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnx
import pytest

HERE = Path(__file__).resolve().parent
SUMMARY_KEY = pytest.StashKey[list[str]]()
ONNX_DATA = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data"


def load_exclusions() -> ModuleType:
    """tests/onnx/backend_exclusions.py (loaded by path: the tests run with --import-mode=importlib)."""
    spec = importlib.util.spec_from_file_location("snippets_backend_exclusions", HERE / "backend_exclusions.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@functools.cache
def node_test_cases() -> tuple[Any, ...]:
    """Every node test case of the installed onnx, generated in memory (about 4 s, once per session)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators divide by zero on purpose, etc.
        cases = collect_testcases()
    return tuple(sorted(cases, key=lambda c: c.name))


def classify(case: Any, supported: frozenset[str], excl: ModuleType) -> tuple[bool, str]:
    """(included, reason): excluded when an op is in EXCLUDED_OPS or the name matches EXCLUDED_TESTS."""
    ops = sorted({n.op_type for n in case.model.graph.node})
    missing = [op for op in ops if op not in supported]
    if missing:
        reasons = [f"{op}: {excl.EXCLUDED_OPS[op]}" for op in missing if op in excl.EXCLUDED_OPS]
        unknown = [op for op in missing if op not in excl.EXCLUDED_OPS]
        if unknown:
            return False, "UNCLASSIFIED op(s) " + ", ".join(unknown)
        return False, "; ".join(reasons)
    for pattern, reason in excl.EXCLUDED_TESTS:
        if re.fullmatch(pattern, case.name):
            return False, reason
    return True, ""


def to_array(value: Any) -> np.ndarray:
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    return np.asarray(value)


def assert_similar_outputs(ref_outputs: list[np.ndarray], outputs: list[np.ndarray], rtol: float,
                           atol: float) -> None:
    """The onnx backend runner's comparison: count, shapes, dtypes, then assert_allclose (bf16 gets two
    bf16 ULPs of relative tolerance, compared in f32)."""
    assert len(outputs) == len(ref_outputs)
    for i, (out, ref) in enumerate(zip(outputs, ref_outputs)):
        out = np.asarray(out)
        np.testing.assert_array_equal(out.shape, ref.shape, err_msg=f"output {i} has an incorrect shape")
        if ref.dtype == object:
            np.testing.assert_array_equal(out, ref)
            continue
        assert out.dtype == ref.dtype, f"output {i}: dtype {out.dtype}, expected {ref.dtype}"
        output_rtol = rtol
        if out.dtype.name == "bfloat16":
            output_rtol = max(rtol, 2**-6)
            out, ref = out.astype(np.float32), ref.astype(np.float32)
        np.testing.assert_allclose(out, ref, rtol=output_rtol, atol=atol)


def record_summary(config: pytest.Config, line: str) -> None:
    config.stash.setdefault(SUMMARY_KEY, []).append(line)

"""The ONNX backend node tests (generated from the onnx package) run through SnippetsBackend.

Each included case is prepared with ``SnippetsBackend.prepare`` (target: ``SNIPPETS_BACKEND_TARGET`` or
``reference``) and compared with the expected outputs the onnx generators computed, with the onnx
runner's tolerances. A case is excluded only by tests/onnx/backend_exclusions.py, with its reason.
"""

from __future__ import annotations

import sys
from collections import Counter

import pytest

from snippets_core.frontends.onnx import SUPPORTED_OPS
from snippets_core.runtime.onnx_backend import SnippetsBackend

# conftest.py loads suite.py once as this module (test files are not importable by name here)
suite = sys.modules["snippets_onnx_suite"]
EXCL = suite.load_exclusions()
SUPPORTED = frozenset(SUPPORTED_OPS)
CASES = suite.node_test_cases()
CLASSIFIED = [(case, *suite.classify(case, SUPPORTED, EXCL)) for case in CASES]
INCLUDED = [case for case, included, _ in CLASSIFIED if included]

# ONNX op types that carry the op set of issue 2 (OpenVINO names -> the ONNX ops they are read from).
OPSET_VIA_ONNX = {
    "Abs": "Abs", "Ceiling": "Ceil", "Clamp": "Clip", "Elu": "Elu", "Erf": "Erf", "Exp": "Exp", "Floor": "Floor",
    "Gelu": "Gelu", "HSwish": "HardSwish", "HardSigmoid": "HardSigmoid", "LogicalNot": "Not", "Log": "Log",
    "Mish": "Mish", "Negative": "Neg", "Relu": "Relu", "Round": "Round", "Sigmoid": "Sigmoid", "Sign": "Sign",
    "Sin": "Sin", "Cos": "Cos", "Sinh": "Sinh", "Cosh": "Cosh", "Tan": "Tan", "Asin": "Asin", "Acos": "Acos",
    "Atan": "Atan", "Selu": "Selu", "SoftSign": "Softsign", "SoftPlus": "Softplus", "Sqrt": "Sqrt",
    "Swish": "Swish", "Tanh": "Tanh", "Add": "Add", "Subtract": "Sub", "Multiply": "Mul", "Divide": "Div",
    "Maximum": "Max", "Minimum": "Min", "Power": "Pow", "FloorMod": "Mod", "Mod": "Mod", "PRelu": "PRelu",
    "Equal": "Equal", "Greater": "Greater", "GreaterEqual": "GreaterOrEqual", "Less": "Less",
    "LessEqual": "LessOrEqual", "LogicalAnd": "And", "LogicalOr": "Or", "LogicalXor": "Xor", "Select": "Where",
    "Convert": "Cast", "Softmax": "Softmax", "LogSoftmax": "LogSoftmax", "ReduceMax": "ReduceMax",
    "ReduceSum": "ReduceSum", "ReduceMean": "ReduceMean", "ReduceMin": "ReduceMin", "ReduceProd": "ReduceProd",
    "MatMul": "MatMul", "Transpose": "Transpose", "Reshape": "Reshape", "Squeeze": "Squeeze",
    "Unsqueeze": "Unsqueeze", "Broadcast": "Expand", "Concat": "Concat", "Split": "Split", "Gather": "Gather",
    "LayerNormalization": "LayerNormalization", "GroupNormalization": "GroupNormalization",
}


@pytest.mark.parametrize("case", INCLUDED, ids=[c.name for c in INCLUDED])
def test_node(case) -> None:  # type: ignore[no-untyped-def]
    rep = SnippetsBackend.prepare(case.model, "CPU")
    for inputs, ref_outputs in case.data_sets:
        outputs = rep.run([suite.to_array(x) for x in inputs])
        suite.assert_similar_outputs([suite.to_array(r) for r in ref_outputs], list(outputs), case.rtol, case.atol)


def test_every_node_test_is_classified(pytestconfig: pytest.Config) -> None:
    """Every op of the onnx node tests is converted or excluded with a reason; report the counts."""
    unclassified = sorted({reason for _, included, reason in CLASSIFIED if reason.startswith("UNCLASSIFIED")})
    assert not unclassified, unclassified
    excluded = Counter(reason for _, included, reason in CLASSIFIED if not included)
    n_excl = sum(excluded.values())
    suite.record_summary(pytestconfig, f"node tests: {len(CASES)} generated, {len(INCLUDED)} included, "
                                       f"{n_excl} excluded")
    for reason, n in excluded.most_common(8):
        suite.record_summary(pytestconfig, f"  excluded {n:4d}: {reason[:100]}")
    assert len(INCLUDED) + n_excl == len(CASES)


def test_every_exclusion_pattern_is_used() -> None:
    import re

    names = [c.name for c in CASES]
    stale = [p for p, _ in EXCL.EXCLUDED_TESTS if not any(re.fullmatch(p, n) for n in names)]
    assert not stale, f"exclusion patterns that match no node test: {stale}"
    ops = {n.op_type for c in CASES for n in c.model.graph.node}
    stale_ops = sorted(op for op in EXCL.EXCLUDED_OPS if op not in ops and op in SUPPORTED)
    assert not stale_ops, f"excluded ops that the frontend now supports: {stale_ops}"


def test_included_tests_cover_the_op_set() -> None:
    """Each op of the op set that ONNX has is exercised by at least one included node test."""
    used = {n.op_type for c in INCLUDED for n in c.model.graph.node}
    missing = sorted(ours for ours, theirs in OPSET_VIA_ONNX.items() if theirs not in used)
    assert not missing, f"op-set ops without an included ONNX node test: {missing}"

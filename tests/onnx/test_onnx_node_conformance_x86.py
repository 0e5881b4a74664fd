"""The ONNX backend node tests of the ops the Tokenizer fuses, run on the x86_64_avx512 target.

Same cases and tolerances as test_onnx_node_conformance.py, compiled with ``snippets_mode=IgnoreCallback``
so that Softmax and the reductions are fused too (the CPU callback keeps them out of lone Subgraphs).
Each case also reports where its Subgraphs ran; the summary counts kernels and reference fallbacks.
"""

from __future__ import annotations

import sys

import pytest

from snippets_core.plugins.targets import load_target, target_names
from snippets_core.runtime.onnx_backend import SnippetsBackend

TARGET = "x86_64_avx512"

#: ONNX op types whose node tests exercise the fused path (eltwise, Where, Cast, Softmax, reductions)
FUSED_ONNX_OPS = frozenset({
    "Abs", "Ceil", "Clip", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSwish", "HardSigmoid", "Not", "Log", "Mish",
    "Neg", "Relu", "Round", "Sigmoid", "Sign", "Sin", "Cos", "Sqrt", "Swish", "Tanh", "Softplus", "Selu",
    "Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Mod", "PRelu", "LeakyRelu", "Equal", "Greater",
    "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or", "Xor", "Where", "Cast", "Softmax", "ReduceMax",
    "ReduceSum", "Sum", "Mean",
})


def _unavailable() -> str | None:
    if TARGET not in target_names():
        return f"target {TARGET} is not installed"
    return load_target(TARGET).available()


# conftest.py loads suite.py once as this module (test files are not importable by name here)
suite = sys.modules["snippets_onnx_suite"]
_REASON = _unavailable()
from snippets_core.frontends.onnx import SUPPORTED_OPS

_EXCL = suite.load_exclusions()
CASES = [
    case for case in suite.node_test_cases()
    if suite.classify(case, frozenset(SUPPORTED_OPS), _EXCL)[0]
    and {n.op_type for n in case.model.graph.node} <= FUSED_ONNX_OPS
]
PLACEMENT: dict[str, int] = {}


@pytest.mark.avx512
@pytest.mark.skipif(_REASON is not None, reason=str(_REASON))
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_on_x86(case) -> None:  # type: ignore[no-untyped-def]
    rep = SnippetsBackend.prepare(case.model, "CPU", target=TARGET, config={"snippets_mode": "IgnoreCallback"})
    for where in (st[2] for st in rep.compiled.placement() if st[1] == "Subgraph"):
        PLACEMENT[where] = PLACEMENT.get(where, 0) + 1
    for inputs, ref_outputs in case.data_sets:
        outputs = rep.run([suite.to_array(x) for x in inputs])
        suite.assert_similar_outputs([suite.to_array(r) for r in ref_outputs], list(outputs), case.rtol, case.atol)


@pytest.mark.skipif(_REASON is not None, reason=str(_REASON))
def test_most_fused_node_tests_run_as_x86_kernels(pytestconfig: pytest.Config) -> None:
    """Runs after the cases (same module, file order): most Subgraphs must be x86 kernels, not fallbacks.
    All 208 ran as kernels when this threshold was set (i8/u8 arithmetic and comparisons compute in i32 lanes
    and wrap like numpy; empty tensors lower to zero-iteration loops). What still falls back elsewhere (recorded
    in rt_info["SnippetsFallbackReason"]): narrow-integer ops outside target_machine.NARROW_OPS (Clamp, Power
    on i8...), u32/i64/f64 data, integer reductions."""
    if not PLACEMENT:
        pytest.skip("the x86 node cases did not run in this session (deselected)")
    on_x86, total = PLACEMENT.get(TARGET, 0), sum(PLACEMENT.values())
    suite.record_summary(pytestconfig, f"x86 node tests: {len(CASES)} cases; {on_x86} of {total} Subgraphs "
                                       f"ran as x86 kernels, {total - on_x86} on reference fallbacks")
    assert len(CASES) > 300
    assert on_x86 >= 0.97 * total

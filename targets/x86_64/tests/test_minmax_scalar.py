"""Maximum/Minimum with a Scalar operand compile to one vmaxps/vminps (no NaN patch) when the scalar cannot be
NaN (nor, as the second operand, zero); results are bit-exact against numpy's maximum/minimum on NaN, +-0,
+-inf and ties (numpy returns the second operand on a tie, the first where it is NaN), in either operand
order, and so are the general form's for NaN and zero scalars."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.ir.model import Model
from snippets_core.ir.node import OPS
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.runtime.compiled_model import compile_model

pytestmark = pytest.mark.avx512
SHAPE = (2, 3, 37)  # a masked tail after two full vectors
SCALARS = [-0.5, 1.5, 0.0, -0.0, float("inf"), float("-inf"), float("nan")]
REF = {"Maximum": np.maximum, "Minimum": np.minimum}


def data() -> np.ndarray:
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(SHAPE) * 2).astype(np.float32).reshape(-1)
    special = [np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, -0.5, 1.5, 1e-45, -1e-45, 3.4e38, -3.4e38]
    x[: len(special)] = special
    x[50::7] = -0.5  # ties with a scalar
    return x.reshape(SHAPE)


def run(op: str, value: float, scalar_first: bool) -> tuple[np.ndarray, str]:
    x = Parameter("f32", SHAPE, name="x")
    c = Constant(np.float32(value))
    node = OPS[op](c, x) if scalar_first else OPS[op](x, c)
    cm = compile_model(Model([Result(node, name="r")], [x]), target="x86_64_avx512",
                       config={"snippets_mode": "IgnoreCallback"})  # fmt: skip
    for sg in cm.subgraphs:
        assert "SnippetsFallbackReason" not in sg.rt_info, sg.rt_info["SnippetsFallbackReason"]
    assert op in [o.type_name for sg in cm.subgraphs for o in sg.body_ops], cm.describe()
    asm = "\n".join(step.run.kernel.disassemble() for step in cm._steps if hasattr(step.run, "kernel"))
    return cm({"x": data()})["r"], asm


@pytest.mark.parametrize("op", sorted(REF))
@pytest.mark.parametrize("value", SCALARS, ids=repr)
@pytest.mark.parametrize("scalar_first", [False, True], ids=["x,c", "c,x"])
def test_bit_exact_against_numpy(op, value, scalar_first):
    got, asm = run(op, value, scalar_first)
    x, c = data(), np.float32(value)
    want = REF[op](c, x) if scalar_first else REF[op](x, c)
    assert np.array_equal(got.view(np.uint32) & 0x7FC0_0000 == 0x7FC0_0000, np.isnan(want)), "NaN lanes differ"
    ok = np.isnan(want) | (got.view(np.uint32) == want.view(np.uint32))
    assert ok.all(), list(zip(x[~ok], got[~ok], want[~ok]))
    # the lean form where the scalar is not NaN (and, as the second operand, not zero): no NaN patch
    lean = not np.isnan(value) and (scalar_first or value != 0.0)
    assert ("vcmpunordps" not in asm) == lean, asm

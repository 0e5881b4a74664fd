"""Every arithmetic emitter inside a real kernel: a small model per op, compiled for x86_64_avx512 (register
allocation, aux registers, loops and masked tails by the rest of the code generator), checked against the
numpy reference interpreter, with the op required to run in a JIT kernel, not on its reference."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.ir.evaluate import evaluate_model
from snippets_core.ir.model import Model
from snippets_core.ir.node import OPS
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.runtime.compiled_model import compile_model

pytestmark = pytest.mark.avx512
TARGET = "x86_64_avx512"
SHAPE = [2, 3, 37]  # 37: a masked tail after two full vectors

UNARY = [("Abs", {}), ("Floor", {}), ("Ceiling", {}), ("Erf", {}), ("Exp", {}), ("Negative", {}), ("Relu", {}),
         ("Sigmoid", {}), ("Tanh", {}), ("HSwish", {}), ("Mish", {}), ("Sqrt", {}), ("Clamp", {"min": -1.0, "max": 2.0}),
         ("Elu", {"alpha": 0.5}), ("Round", {"mode": "half_away_from_zero"}), ("Round", {"mode": "half_to_even"}),
         ("Gelu", {"approximation_mode": "tanh"}), ("Gelu", {"approximation_mode": "erf"})]  # fmt: skip
BINARY = ["Add", "Subtract", "Multiply", "Divide", "Maximum", "Minimum", "Power", "SquaredDifference", "FloorMod",
          "Mod", "PRelu"]  # fmt: skip
COMPARISONS = ["Equal", "NotEqual", "Greater", "GreaterEqual", "Less", "LessEqual"]


def inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(31)
    x = (rng.standard_normal(SHAPE) * 3).astype(np.float32)
    y = (rng.standard_normal(SHAPE) * 3).astype(np.float32)
    y.reshape(-1)[::5] = x.reshape(-1)[::5]  # equal pairs for the comparisons
    return {"x": x, "y": y}


def check(build, op: str) -> None:  # type: ignore[no-untyped-def]
    x, y = Parameter("f32", SHAPE, name="x"), Parameter("f32", SHAPE, name="y")
    model = Model([Result(build(x, y), name="r")], [x, y])
    cm = compile_model(model, target=TARGET, config={"snippets_mode": "IgnoreCallback"})
    for sg in cm.subgraphs:
        assert "SnippetsFallbackReason" not in sg.rt_info, sg.rt_info["SnippetsFallbackReason"]
    fused = [o.type_name for sg in cm.subgraphs for o in sg.body_ops]
    assert op in fused, cm.describe()
    data = inputs()
    got = cm(data)["r"]
    with np.errstate(all="ignore"):
        want = evaluate_model(model, data)["r"]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=3e-5, atol=1e-5)


@pytest.mark.parametrize("op,attrs", UNARY, ids=lambda v: str(v))
def test_unary_in_a_kernel(op, attrs):
    check(lambda x, y: OPS["Add"](OPS[op](OPS["Multiply"](x, y), **attrs), x), op)


@pytest.mark.parametrize("op", BINARY)
def test_binary_in_a_kernel(op):
    if op == "Power":
        check(lambda x, y: OPS["Relu"](OPS["Power"](OPS["Abs"](x), y)), op)
    else:
        check(lambda x, y: OPS["Relu"](OPS[op](x, y)), op)


@pytest.mark.parametrize("op", COMPARISONS)
def test_comparison_feeding_select_in_a_kernel(op):
    check(lambda x, y: OPS["Select"](OPS[op](x, y), OPS["Exp"](x), y), op)


def test_logical_ops_in_a_kernel():
    def build(x, y):  # type: ignore[no-untyped-def]
        keep = OPS["LogicalAnd"](OPS["Greater"](x, y), OPS["LogicalNot"](OPS["Less"](x, Constant(np.float32(1.0)))))
        either = OPS["LogicalOr"](keep, OPS["LogicalXor"](OPS["Less"](y, x), OPS["Equal"](x, y)))
        return OPS["Select"](either, x, y)

    check(build, "LogicalXor")


@pytest.mark.parametrize("dtype", ["u8", "i8", "bf16", "f16"])
def test_convert_round_trip_in_a_kernel(dtype):
    def build(x, y):  # type: ignore[no-untyped-def]
        narrow = OPS["Convert"](OPS["Multiply"](x, y), destination_type=dtype)
        return OPS["Convert"](narrow, destination_type="f32")

    check(build, "Convert")


def test_swish_with_beta_and_softmax_in_kernels():
    check(lambda x, y: OPS["Swish"](OPS["Multiply"](x, y), Constant(np.float32(0.7))), "Swish")
    check(lambda x, y: OPS["Softmax"](OPS["Multiply"](x, y), axis=-1), "Softmax")

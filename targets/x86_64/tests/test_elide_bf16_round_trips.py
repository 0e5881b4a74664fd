"""ElideBF16RoundTrips: the f32 -> bf16 -> f32 converts PropagatePrecision puts between the bf16 ops of a body go,
what is stored keeps its rounding; the target option that keeps them; numbers against numpy float64."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh

import snippets_core
from snippets_core.errors import SnippetsError
from snippets_core.ir import OPS, ElementType, Model
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.passes.propagate_precision import PropagatePrecision
from snippets_x86_64.passes.elide_bf16_round_trips import ElideBF16RoundTrips, elide_bf16_positioned_passes

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16_NP = ml_dtypes.bfloat16
F32, BF16 = ElementType.f32, ElementType.bf16
#: the x86-64 eltwise emitters compute f32 only
F32_ONLY = {"Add": [(F32, F32)], "Multiply": [(F32, F32)], "Relu": [(F32,)]}


def _lines(m: Model) -> list[str]:
    out = []
    for n in m.get_ordered_ops():
        ins = ",".join(i.source.node.name for i in n.inputs)
        dst = getattr(n, "destination_type", None)
        out.append(f"{n.type_name}({ins}){'->' + str(dst) if dst is not None else ''}")
    return out


def _bf16_chain() -> Model:
    """x + y, then * y, then Relu, all bf16; the Add's bf16 result is also a second output."""
    x, y = Parameter(BF16, [2, 16], name="x"), Parameter(BF16, [2, 16], name="y")
    add = OPS["Add"](x, y, name="add")
    mul = OPS["Multiply"](add, y, name="mul")
    relu = OPS["Relu"](mul, name="relu")
    return Model([Result(relu, name="out"), Result(add, name="sum")], [x, y], name="body")


def test_round_trips_between_ops_go_and_stored_values_keep_their_rounding() -> None:
    m = _bf16_chain()
    assert PropagatePrecision(F32_ONLY).run(m)
    before = _lines(m)
    assert sum("->bf16" in line for line in before) == 3  # after Add, Multiply and Relu
    assert ElideBF16RoundTrips().run(m) is True
    after = _lines(m)
    # the Multiply's bf16 result only fed the Relu's widening: both converts are gone, the Relu reads the f32 product
    assert "Relu(mul)" in after
    # the Add's bf16 result is also a Result: its rounding stays (and the Multiply reads the rounded value back)
    assert any(line.startswith("ConvertSaturation(add)->bf16") for line in after)
    assert sum("->bf16" in line for line in after) == 2
    assert ElideBF16RoundTrips().run(m) is False


def test_the_option_keeps_the_per_op_rounding() -> None:
    assert [pp.pass_.name for pp in elide_bf16_positioned_passes({})] == ["elide-bf16-round-trips"]
    assert elide_bf16_positioned_passes({"bf16_intermediate": "bf16"}) == []
    with pytest.raises(SnippetsError, match="bf16_intermediate must be 'f32' or 'bf16', got 'f16'"):
        elide_bf16_positioned_passes({"bf16_intermediate": "f16"})


def _eltwise_model() -> bytes:
    nodes = [oh.make_node("Add", ["x", "y"], ["a"]), oh.make_node("Mul", ["a", "y"], ["m"]),
             oh.make_node("Add", ["m", "x"], ["z"])]
    io = [oh.make_tensor_value_info(n, TP.BFLOAT16, [4, 256]) for n in ("x", "y")]
    g = oh.make_graph(nodes, "g", io, [oh.make_tensor_value_info("z", TP.BFLOAT16, [4, 256])])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("mode", ["f32", "bf16"])
def test_a_bf16_eltwise_chain_against_float64(mode: str) -> None:
    """((x + y) * y + x) in bf16: by default the float64 value rounded once (but for f32 rounding of the
    intermediates landing on the other side of a tie); with ``bf16_intermediate: bf16`` rounded after every op."""
    rng = np.random.default_rng(7)
    x, y = (rng.standard_normal((4, 256)).astype(BF16_NP) for _ in range(2))
    cm = snippets_core.compile_model(_eltwise_model(), target="x86_64_avx512",
                                     config={"target_options": {"bf16_intermediate": mode}})
    assert "[reference]" not in cm.describe()
    z = cm({"x": x, "y": y})["z"].astype(np.float64)
    xd, yd = x.astype(np.float64), y.astype(np.float64)

    def r(v: np.ndarray) -> np.ndarray:
        return v.astype(np.float32).astype(BF16_NP).astype(np.float64)

    want = r((xd + yd) * yd + xd) if mode == "f32" else r(r(r(xd + yd) * yd) + xd)
    off = z != want
    assert off.sum() <= 2, off.sum()
    assert np.all(np.abs(z - want)[off] <= 2.0**-7 * np.abs(want)[off])
    other = r(r(r(xd + yd) * yd) + xd) if mode == "f32" else r((xd + yd) * yd + xd)
    assert (other != want).sum() > 20  # the two modes differ here: the test tells them apart

"""The ordered data-flow pipeline and CommonOptimizations: pass order per configuration, positioned passes,
and whole bodies (static and dynamic) evaluated against numpy after every pass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from snippets_core.errors import PassPositionError
from snippets_core.ir import OPS, ElementType, Model, Subgraph, evaluate_model
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.passes.canonicalization import BlockedShape
from snippets_core.passes.data_flow_pipeline import (
    CommonOptimizations,
    DataFlowConfig,
    common_optimizations_pipeline,
    data_flow_pipeline,
    run_data_flow,
)
from snippets_core.passes.pass_manager import Pass, PassPosition, PositionedPass

F32 = ElementType.f32
TAIL = ["layer-norm-decomposition", "graph-reduce-decomposition", "broadcast-to-move-broadcast",
        "reduce-to-snippets-reduce", "convert-constants-to-scalars",
        "convert-power-to-power-static", "constant-folding", "convert-constants-to-scalars"]


def op(type_name, *args, **kw):
    return OPS[type_name](*args, **kw)


@dataclass(frozen=True)
class CountOps(Pass):
    """Records how many ops of a type the body has when it runs (to check where a positioned pass ran)."""

    name: ClassVar[str] = "count-ops"
    type_name: str = "Softmax"
    seen: list = None  # type: ignore[assignment]

    def run(self, ir) -> bool:  # type: ignore[no-untyped-def]
        model = ir.body if isinstance(ir, Subgraph) else ir
        self.seen.append(model.count(self.type_name))
        return False


def test_default_order():
    assert data_flow_pipeline().names() == TAIL


def test_full_order_with_every_option():
    cfg = DataFlowConfig(blocked_input_shapes=(BlockedShape.planar((2, 3)),), input_precisions=(F32,),
                         output_precisions=(F32,), has_domain_sensitive_ops=True,
                         supported_precisions={"Add": [(F32, F32)]})
    assert data_flow_pipeline(cfg).names() == [
        "canonicalization", "align-element-types", "matmul-to-brgemm", "fuse-transpose-brgemm",
        "softmax-decomposition", "gn-decomposition", "layer-norm-decomposition", "graph-reduce-decomposition",
        "broadcast-to-move-broadcast", "reduce-to-snippets-reduce", "convert-constants-to-scalars",
        "convert-power-to-power-static", "propagate-precision", "constant-folding", "convert-constants-to-scalars"]


def test_flags_read_off_the_body():
    x = Parameter(F32, [2, 6, 4], name="x")
    gn = op("GroupNormalization", x, Parameter(F32, [6], name="s"), Parameter(F32, [6], name="b"), num_groups=2)
    cfg = DataFlowConfig.for_body(Model([Result(gn)]), blocked_input_shapes=[BlockedShape.planar((2, 6, 4))] * 3)
    assert cfg.has_domain_sensitive_ops and cfg.has_broadcast_sensitive_ops
    names = data_flow_pipeline(cfg).names()
    assert "canonicalization" not in names and "gn-decomposition" in names  # GN breaks implicit broadcasting
    eltwise = Model([Result(op("Relu", Parameter(F32, [2], name="y")))])
    assert not DataFlowConfig.for_body(eltwise).has_domain_sensitive_ops


def test_positioned_passes():
    seen: list[int] = []
    probe = CountOps(seen=seen)
    pipeline = data_flow_pipeline(DataFlowConfig(has_domain_sensitive_ops=True), [
        PositionedPass(probe, PassPosition("softmax-decomposition")),
        PositionedPass(probe, PassPosition("softmax-decomposition", after=True)),
        PositionedPass(probe, PassPosition.pipeline_end()),
    ])
    names = pipeline.names()
    assert names[2:5] == ["count-ops", "softmax-decomposition", "count-ops"] and names[-1] == "count-ops"
    x = Parameter(F32, [2, 5], name="x")
    pipeline.run(Model([Result(op("Softmax", x, axis=-1))], [x]))
    assert seen == [1, 0, 0]
    with pytest.raises(PassPositionError, match="no-such-pass"):
        data_flow_pipeline(positioned_passes=[PositionedPass(probe, PassPosition("no-such-pass"))])
    # a LinearIR pass handed to the data-flow pipeline is not placed there
    lowered = PositionedPass(probe, PassPosition.pipeline_start(), pipeline="control-flow")
    assert data_flow_pipeline(positioned_passes=[lowered]).names() == TAIL


def mixed_body(shape):
    """Softmax over the last axis, a Power by a constant, a Broadcast of the last dim and a reduction."""
    x = Parameter(F32, shape, name="x")
    y = Parameter(F32, [shape[0], 1], name="y")
    sm = op("Softmax", x, axis=-1, name="sm")
    sq = op("Power", sm, Constant(np.full((1, 1), 2.0, np.float32), name="two"), name="sq")
    half = op("Multiply", Constant(np.float32(0.25), name="q"), Constant(np.float32(2.0), name="d"), name="half")
    scaled = op("Multiply", sq, half, name="scaled")
    yb = op("Broadcast", y, Constant(np.array([1, 1], np.int64), name="ones_target"), mode="bidirectional", name="yb")
    add = op("Add", scaled, yb, name="add")
    red = op("ReduceSum", add, Constant(np.array([-1], np.int64), name="axes"), keep_dims=True, name="red")
    return Model([Result(add, name="o_add"), Result(red, name="o_red")], [x, y], name="body")


def np_mixed(x, y):
    e = np.exp(x - x.max(-1, keepdims=True))
    sm = e / e.sum(-1, keepdims=True)
    add = sm ** 2 * 0.5 + y
    return add, add.sum(-1, keepdims=True)


@pytest.mark.parametrize("shape, run_shape", [([3, 8], (3, 8)), ([None, None], (4, 9))])
def test_whole_pipeline_keeps_values_after_every_pass(shape, run_shape, rng):
    m = mixed_body(shape)
    x = rng.standard_normal(run_shape).astype(np.float32)
    y = rng.standard_normal((run_shape[0], 1)).astype(np.float32)
    want = np_mixed(x.astype(np.float64), y.astype(np.float64))
    pipeline = data_flow_pipeline(DataFlowConfig.for_body(m, supported_precisions={"Add": [(F32, F32)]}))
    trace: list[str] = []

    def check(p, model, changed):  # after each pass the body must still compute the same values
        trace.append(p.name)
        out = evaluate_model(model, {"x": x, "y": y})
        np.testing.assert_allclose(out["o_add"], want[0], rtol=1e-5, atol=1e-6, err_msg=p.name)
        np.testing.assert_allclose(out["o_red"], want[1], rtol=1e-5, atol=1e-5, err_msg=p.name)

    pipeline.after_pass.append(check)
    assert pipeline.run(m) is True
    assert trace == pipeline.names()
    kinds = sorted({n.type_name for n in m.get_ordered_ops()})
    assert kinds == ["Add", "Exp", "Multiply", "Parameter", "PowerStatic", "Result", "Scalar", "SnippetsReduceMax",
                     "SnippetsReduceSum", "Subtract"]
    assert m.results[0].outputs[0].shape.rank == 2


def quantized_subgraph():
    xb = Parameter(F32, [1, 3, 4], name="xb")
    ranges = [Constant(np.array(v, np.float32).reshape(1, 3, 1), name=n) for v, n in (
        ([-1.0, 0.0, -2.0], "il"), ([1.0, 2.0, 2.0], "ih"), ([-1.0, 0.0, -2.0], "ol"), ([1.0, 2.0, 2.0], "oh"))]
    fq = op("FakeQuantize", xb, *ranges, levels=256, name="fq")
    cvt = op("Convert", fq, destination_type="f16", name="cvt")
    body = Model([Result(cvt, name="out")], [xb], name="body")
    x = Parameter(F32, [1, 3, 4], name="x")
    sg = Subgraph(x, body=body, name="sg")
    return Model([Result(sg, name="y")], [x]), sg


def test_common_optimizations_on_a_quantized_subgraph(rng):
    outer, sg = quantized_subgraph()
    assert common_optimizations_pipeline(quantized=True).names() == [
        "transform-convert-to-convert-truncation", "fake-quantize-decomposition", "constant-folding",
        "extract-constants", "validate"]
    assert common_optimizations_pipeline().names() == ["transform-convert-to-convert-truncation", "validate"]
    x = rng.uniform(-3, 3, (1, 3, 4)).astype(np.float32)
    before = evaluate_model(outer, {"x": x})["y"]
    assert CommonOptimizations().run(sg) is True
    body = sg.body
    assert body.count("FakeQuantize") == 0 and body.count("Convert") == 0 and body.count("ConvertTruncation") == 1
    # the per-channel ranges became Subgraph inputs: il, ih, the folded scale and shift, output scale, ol
    assert len(sg.inputs) == 1 + sg.rt_info["virtual_port_count"] and len(sg.inputs) == len(body.parameters) > 1
    after = evaluate_model(outer, {"x": x})["y"]
    step = 4.0 / 255
    np.testing.assert_allclose(after.astype(np.float32), before.astype(np.float32), atol=step + 2e-3)
    lo = np.array([-1.0, 0.0, -2.0]).reshape(1, 3, 1)
    hi = np.array([1.0, 2.0, 2.0]).reshape(1, 3, 1)
    q = np.rint((np.clip(x, lo, hi) - lo) / (hi - lo) * 255) / 255 * (hi - lo) + lo  # FakeQuantize's definition
    np.testing.assert_allclose(after.astype(np.float64), q, atol=4.0 / 255 + 2e-3)


def test_common_optimizations_accepts_positioned_passes():
    _, sg = quantized_subgraph()
    seen: list[int] = []
    probe = CountOps(type_name="FakeQuantize", seen=seen)
    opt = CommonOptimizations(positioned_passes=(PositionedPass(probe, PassPosition("extract-constants")),))
    opt.run(sg)
    assert seen == [0]
    x = Parameter(F32, [4], name="x")
    plain = Subgraph(x, body=Model([Result(op("Relu", Parameter(F32, [4], name="xb")), name="o")]), name="plain")
    with pytest.raises(PassPositionError):  # not quantized: no extract-constants to anchor on
        CommonOptimizations(positioned_passes=(PositionedPass(probe, PassPosition("extract-constants")),)).run(plain)


def test_run_data_flow_on_a_subgraph_body(rng):
    xb = Parameter(F32, [None, 6], name="xb")
    body = Model([Result(op("Softmax", xb, axis=-1, name="sm"), name="o")], [xb], name="body")
    x = Parameter(F32, [None, 6], name="x")
    sg = Subgraph(x, body=body, name="sg")
    assert run_data_flow(sg) is True
    assert body.count("Softmax") == 0 and body.count("SnippetsReduceMax") == 1
    xv = rng.standard_normal((5, 6)).astype(np.float32)
    e = np.exp(xv - xv.max(-1, keepdims=True))
    np.testing.assert_allclose(sg.evaluate(xv)[0], e / e.sum(-1, keepdims=True), rtol=1e-5)

"""Structural checks of single control-flow passes on small bodies (what each pass must produce,
stated from the algorithm, independent of the implementation)."""

from __future__ import annotations

import numpy as np

from snippets_core.codegen.interpreter import InterpreterTarget
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add, Multiply
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.ir.ops.snippets import Scalar
from snippets_core.ir.ops.softmax import Softmax
from snippets_core.ir.ops.unary import Exp, Relu
from snippets_core.lowered.linear_ir import Config, LinearIR
from snippets_core.lowered.loop_info import ExpandedLoopInfo, SpecificLoopIterType
from snippets_core.lowered.passes.fuse_loops import FuseLoops
from snippets_core.lowered.passes.mark_loops import MarkLoops
from snippets_core.lowered.passes.move_result_out_of_loop import MoveResultOutOfLoop
from snippets_core.lowered.pipeline import lower
from snippets_core.passes.data_flow_pipeline import run_data_flow


def _types(ir, loop_id):
    return [e.type_name for e in ir.exprs if loop_id in e.loop_ids]


def test_mark_loops_breaks_at_results_and_fuse_loops_merges_branches():
    p0, p1 = Parameter("f32", (4, 10), name="p0"), Parameter("f32", (4, 10), name="p1")
    a = Add(p0, p1)
    body = Model([Result(Exp(a), name="r0"), Result(Relu(a), name="r1")], [p0, p1])
    ir = LinearIR(body, Config(vector_size=8))
    MarkLoops(8).run(ir)
    assert len(ir.loop_manager) == 2  # [Add, Exp] | Result | [Relu]
    FuseLoops().run(ir)
    MoveResultOutOfLoop().run(ir)
    (loop_id,) = ir.loop_manager.ids()
    assert _types(ir, loop_id) == ["Add", "Exp", "Relu"]
    info = ir.loop_manager.get_loop_info(loop_id)
    assert (info.work_amount, info.increment, len(info.input_ports), len(info.output_ports)) == (10, 8, 2, 2)
    assert [e.type_name for e in ir.exprs[-2:]] == ["Result", "Result"]


def test_scalar_with_two_consumers_is_copied_next_to_each():
    p = Parameter("f32", (3, 5), name="p")
    s = Scalar(np.float32(2.0))
    body = Model([Result(Multiply(Exp(Multiply(p, s)), s), name="r")], [p])
    ir = lower(body, Config(vector_size=4), InterpreterTarget(4))
    scalars = [i for i, e in enumerate(ir.exprs) if e.type_name == "Scalar"]
    assert len(scalars) >= 2
    for i in scalars:
        consumer = ir.exprs[i].consumers(0)[0].expr
        assert consumer.loop_ids == ir.exprs[i].loop_ids and ir.index(consumer) > i


def _softmax_ir(shape, width, domain_opt=True):
    p = Parameter("f32", shape, name="x")
    body = Model([Result(Softmax(p, axis=-1), name="y")], [p])
    run_data_flow(body)
    return lower(body, Config(vector_size=width, enable_domain_optimization=domain_opt), InterpreterTarget(width))


def test_softmax_lowering_structure():
    """Reduce loops with accumulators, one buffer for exp(x - max), 1/sum hoisted out of the last loop."""
    ir = _softmax_ir((2, 3, 16), 8, domain_opt=False)
    types = [e.type_name for e in ir.exprs]
    assert types.count("Buffer") == 1
    assert types.count("HorizonMax") == 1 and types.count("HorizonSum") == 1
    power = next(e for e in ir.exprs if e.type_name == "PowerStatic")
    mul = next(e for e in ir.exprs if e.type_name == "Multiply")
    assert len(power.loop_ids) < len(mul.loop_ids)  # ExtractLoopInvariants
    # the max accumulator keeps one register across its loop
    acc = next(e for e in ir.exprs if e.type_name == "Maximum")
    assert acc.output_descs[0].reg == acc.input_descs[1].reg


def test_specific_iterations_main_and_tail():
    p = Parameter("f32", (2, 19), name="p")
    body = Model([Result(Relu(p), name="r")], [p])
    ir = lower(body, Config(vector_size=8, enable_domain_optimization=False), InterpreterTarget(8))
    inner = [info for _, info in ir.loop_manager if info.dim_idx == 0]
    assert all(isinstance(i, ExpandedLoopInfo) for i in inner)
    kinds = sorted((i.type.value, i.work_amount, i.increment) for i in inner)
    assert kinds == sorted([(SpecificLoopIterType.MAIN_BODY.value, 16, 8), (SpecificLoopIterType.LAST_ITER.value, 3, 3)])
    counts = sorted(e.node.count for e in ir.exprs if e.type_name in ("Load", "Store"))
    assert counts == [3, 3, 8, 8]


def test_positioned_passes_in_the_lowering_pipelines():
    from dataclasses import dataclass, field
    from typing import ClassVar

    import pytest

    from snippets_core.errors import PassPositionError
    from snippets_core.lowered.passes.pass_base import LoweredPass
    from snippets_core.passes.pass_manager import PassPosition, PositionedPass

    @dataclass(frozen=True)
    class CountLoopEnds(LoweredPass):
        name: ClassVar[str] = "count-loop-ends"
        seen: list = field(default_factory=list)

        def run(self, ir):
            self.seen.append(sum(e.type_name == "LoopEnd" for e in ir.exprs))
            return False

    p = Parameter("f32", (2, 19), name="p")
    body = Model([Result(Relu(p), name="r")], [p])
    after_loops, at_end = CountLoopEnds(), CountLoopEnds()
    passes = [PositionedPass(after_loops, PassPosition("insert-loops", after=True)),
              PositionedPass(at_end, PassPosition.pipeline_end(), pipeline="pre-generation")]
    lower(body, Config(vector_size=8, enable_domain_optimization=False), InterpreterTarget(8), passes)
    assert after_loops.seen == [2]  # rows and columns
    assert at_end.seen == [3]  # plus the column tail
    with pytest.raises(PassPositionError, match="no-such-pass"):
        lower(body, Config(vector_size=8), InterpreterTarget(8),
              [PositionedPass(CountLoopEnds(), PassPosition("no-such-pass"))])


def test_split_loops_lets_a_finer_loop_fuse_into_a_coarser_one():
    """A processes 16-element blocks (subtensor), B reads A with vector increments of 4: B is split into
    a 16-step outer loop (fused with A's) and a 4-step inner loop over the block."""
    from snippets_core.lowered.passes.split_loops import SplitLoops
    from snippets_core.lowered.port_descriptor import set_port_descriptor

    p = Parameter("f32", (3, 64), name="p")
    a = Exp(p)
    set_port_descriptor(a, "in", 0, subtensor=(1, 16))
    set_port_descriptor(a, "out", 0, subtensor=(1, 16))
    b = Relu(a)
    ir = LinearIR(Model([Result(b, name="r")], [p]), Config(vector_size=4))
    MarkLoops(4).run(ir)
    ea, eb = ir.get_expr_by_node(a), ir.get_expr_by_node(b)
    assert ea.loop_ids != eb.loop_ids
    assert SplitLoops().run(ir)
    lm = ir.loop_manager
    assert len(eb.loop_ids) == len(ea.loop_ids) + 1 and eb.loop_ids[:-1] == ea.loop_ids
    outer, inner = lm.get_loop_info(ea.loop_ids[-1]), lm.get_loop_info(eb.loop_ids[-1])
    assert (outer.work_amount, outer.increment, outer.dim_idx) == (64, 16, 0)
    assert (inner.work_amount, inner.increment, inner.dim_idx) == (16, 4, 0)
    # the fused outer loop: data enters at A and leaves at B
    assert [p.expr_port for p in outer.input_ports] == [ea.get_input_port(0)]
    assert [p.expr_port for p in outer.output_ports] == [eb.get_output_port(0)]

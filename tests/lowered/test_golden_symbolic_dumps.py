"""Golden text dumps of the symbolic lowering (``Config.symbolic_dims``): the body of test_golden_dumps.py,
``Relu(p0[?,?] + p1[?,1])``, vector size 8, tile rank 2, lowered once for every shape.

Checked by hand against the static dumps of [3,17] (d0 = 17, d1 = 3): the inner loop runs d0 by 8 (static: 17),
its pointers go back by d0 (-17); the row loop moves p0 and the output by d0 (17) and p1 by 1, and back by d0*d1
(51) and d1 (3). After pre-generation a dynamic loop always has a main body of 8*(d0 // 8) (16) and a tail of
d0 % 8 (1) whose accesses move d0 % 8 elements; the tail keeps its counter (it runs once, or not at all when
d0 % 8 is 0, so it is not evaluated once), moves its pointers by its own size, and its finalization offset
(-d0) is folded into the row increment (d0 - d0 = 0), as the static -17 is (17 - 17 = 0); the row loop's
offsets are dropped because only the Result follows.
"""

from __future__ import annotations

from snippets_core.codegen.interpreter import InterpreterTarget
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.ir.ops.unary import Relu
from snippets_core.lowered.linear_ir import Config, LinearIR
from snippets_core.lowered.passes.optimize_domain import OptimizeDomain
from snippets_core.lowered.pipeline import control_flow_pipeline, pre_generation_pipeline

AFTER_CONTROL_FLOW = """\
LinearIR master_shape=[d1,d0] loop_depth=2
%0 = Parameter() -> f32[d1,d0]
%1 = Parameter() -> f32[d1,1]
%2 = LoopBegin() -> dynamic[]
%3 = BroadcastLoad(%1) {broadcast_dim=None offset=0} -> f32[d1,d0] loops=[1]
%4 = LoopBegin() -> dynamic[] loops=[1]
%5 = Load(%0) {count=8 offset=0} -> f32[d1,d0] loops=[1,0]
%6 = Add(%5, %3) {auto_broadcast=numpy} -> f32[d1,d0] loops=[1,0]
%7 = Relu(%6) -> f32[d1,d0] loops=[1,0]
%8 = Store(%7) {count=8 offset=0} -> f32[d1,d0] loops=[1,0]
%9 = LoopEnd(%0, %8, %4) {work_amount=d0 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-d0,-d0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=0 evaluate_once=False} -> \
f32[d1,d0], f32[d1,d0] loops=[1]
%10 = LoopEnd(%0, %1, %8, %2) {work_amount=d1 increment=1 is_incremented=[True,True,True] ptr_increments=[d0,1,d0] \
finalization_offsets=[-d0*d1,-d1,-d0*d1] element_type_sizes=[4,4,4] input_num=2 output_num=1 loop_id=1 \
evaluate_once=False} -> f32[d1,d0], f32[d1,1], f32[d1,d0]
%11 = Result(%8) -> f32[d1,d0]
loop 0 (unified): work_amount=d0 increment=8 in=[%5.in0@d0 (1,-d0,4), %6.in1@d0 not_processed (0,0,0)] out=[%8@d0 \
(1,-d0,4)]
loop 1 (unified): work_amount=d1 increment=1 in=[%5.in0@d1 (d0,-d0*d1,4), %3.in0@d1 (1,-d1,4)] out=[%8@d1 \
(d0,-d0*d1,4)]"""

AFTER_PRE_GENERATION = """\
LinearIR master_shape=[d1,d0] loop_depth=2
%0 = Parameter() -> f32[d1,d0]
%1 = Parameter() -> f32[d1,1]
%2 = LoopBegin() -> dynamic[]
%3 = BroadcastLoad(%1) {broadcast_dim=None offset=0} -> f32[d1,d0] loops=[2]
%4 = LoopBegin() -> dynamic[] loops=[2]
%5 = Load(%0) {count=8 offset=0} -> f32[d1,d0] loops=[2,0]
%6 = Add(%5, %3) {auto_broadcast=numpy} -> f32[d1,d0] loops=[2,0]
%7 = Relu(%6) -> f32[d1,d0] loops=[2,0]
%8 = Store(%7) {count=8 offset=0} -> f32[d1,d0] loops=[2,0]
%9 = LoopEnd(%0, %8, %4) {work_amount=8*((d0) // 8) increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=0 evaluate_once=False} -> \
f32[d1,d0], f32[d1,d0] loops=[2]
%10 = LoopBegin() -> dynamic[] loops=[2]
%11 = Load(%0) {count=((d0) % 8) offset=0} -> f32[d1,d0] loops=[2,1]
%12 = Add(%11, %3) {auto_broadcast=numpy} -> f32[d1,d0] loops=[2,1]
%13 = Relu(%12) -> f32[d1,d0] loops=[2,1]
%14 = Store(%13) {count=((d0) % 8) offset=0} -> f32[d1,d0] loops=[2,1]
%15 = LoopEnd(%0, %14, %10) {work_amount=((d0) % 8) increment=((d0) % 8) is_incremented=[True,True] \
ptr_increments=[1,1] finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=1 \
evaluate_once=False} -> f32[d1,d0], f32[d1,d0] loops=[2]
%16 = LoopEnd(%0, %1, %8, %2) {work_amount=d1 increment=1 is_incremented=[True,True,True] ptr_increments=[0,1,0] \
finalization_offsets=[0,0,0] element_type_sizes=[4,4,4] input_num=2 output_num=1 loop_id=2 evaluate_once=False} -> \
f32[d1,d0], f32[d1,1], f32[d1,d0]
%17 = Result(%8) -> f32[d1,d0]
loop 0 (expanded main): work_amount=8*((d0) // 8) increment=8 in=[%5.in0@d0 (1,0,4), %6.in1@d0 not_processed \
(0,0,0)] out=[%8@d0 (1,0,4)]
loop 1 (expanded last): work_amount=((d0) % 8) increment=((d0) % 8) in=[%11.in0@d0 (1,0,4), %12.in1@d0 \
not_processed (0,0,0)] out=[%14@d0 (1,0,4)]
loop 2 (expanded main): work_amount=d1 increment=1 in=[%5.in0@d1 (0,0,4), %3.in0@d1 (1,0,4)] out=[%8@d1 (0,0,4)]"""


def _lower() -> tuple[str, str]:
    p0, p1 = Parameter("f32", (None, None), name="p0"), Parameter("f32", (None, 1), name="p1")
    body = Model([Result(Relu(Add(p0, p1)), name="r")], [p0, p1])
    cfg = Config(vector_size=8, enable_domain_optimization=False, symbolic_dims=True)
    ir = LinearIR(body, cfg)
    OptimizeDomain().run(ir)
    control_flow_pipeline(cfg).run(ir)
    after_control_flow = ir.to_text()
    pre_generation_pipeline(InterpreterTarget(8)).run(ir)
    return after_control_flow, ir.to_text()


DUMPS = _lower()


def test_symbolic_after_control_flow_pipeline():
    assert DUMPS[0] == AFTER_CONTROL_FLOW


def test_symbolic_after_pre_generation_pipeline():
    assert DUMPS[1] == AFTER_PRE_GENERATION

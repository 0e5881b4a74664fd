"""Golden text dumps of a small body after key passes.

Body: ``Relu(p0[3,17] + p1[3,1])``, vector size 8, domain optimization off (tile rank 2). The expected
text was derived by hand from the algorithms: the inner loop runs 17 elements by 8 (a main body of 16
and a one-element tail), the outer loop 3 rows; p1 broadcasts along the row (pointer increment 0 in the
inner loop, 1 element per row), its one-element Load and BroadcastMove fuse into a BroadcastLoad, which ExtractLoopInvariants moves
before the inner loop (read once per row; only the row loop moves p1's pointer); after
pre-generation the tail's finalization offset (-17) is folded into the row increment (17 - 17 = 0)
and the last loop's offsets are dropped because only the Result follows; NormalizeLoopIDs numbers the
loops in the order their LoopEnds run (main 0, tail 1, rows 2).
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

AFTER_MARK_LOOPS = """\
LinearIR master_shape=[3,17] loop_depth=2
%0 = Parameter() -> f32[3,17]
%1 = Parameter() -> f32[3,1]
%2 = Add(%0, %1) {auto_broadcast=numpy} -> f32[3,17] loops=[1,0]
%3 = Relu(%2) -> f32[3,17] loops=[1,0]
%4 = Result(%3) -> f32[3,17]
loop 0 (unified): work_amount=17 increment=8 in=[%2.in0@d0 (0,0,0), %2.in1@d0 (0,0,0)] out=[%3@d0 (0,0,0)]
loop 1 (unified): work_amount=3 increment=1 in=[%2.in0@d1 (0,0,0), %2.in1@d1 (0,0,0)] out=[%3@d1 (0,0,0)]"""

AFTER_INSERT_LOAD_STORE = """\
LinearIR master_shape=[3,17] loop_depth=2
%0 = Parameter() -> f32[3,17]
%1 = Parameter() -> f32[3,1]
%2 = Load(%0) {count=8 offset=0} -> f32[3,17] loops=[1,0]
%3 = Load(%1) {count=1 offset=0} -> f32[3,1] loops=[1,0]
%4 = Add(%2, %3) {auto_broadcast=numpy} -> f32[3,17] loops=[1,0]
%5 = Relu(%4) -> f32[3,17] loops=[1,0]
%6 = Store(%5) {count=8 offset=0} -> f32[3,17] loops=[1,0]
%7 = Result(%6) -> f32[3,17]
loop 0 (unified): work_amount=17 increment=8 in=[%2.in0@d0 (0,0,0), %3.in0@d0 (0,0,0)] out=[%6@d0 (0,0,0)]
loop 1 (unified): work_amount=3 increment=1 in=[%2.in0@d1 (0,0,0), %3.in0@d1 (0,0,0)] out=[%6@d1 (0,0,0)]"""

AFTER_CONTROL_FLOW = """\
LinearIR master_shape=[3,17] loop_depth=2
%0 = Parameter() -> f32[3,17]
%1 = Parameter() -> f32[3,1]
%2 = LoopBegin() -> dynamic[]
%3 = BroadcastLoad(%1) {broadcast_dim=17 offset=0} -> f32[3,17] loops=[1]
%4 = LoopBegin() -> dynamic[] loops=[1]
%5 = Load(%0) {count=8 offset=0} -> f32[3,17] loops=[1,0]
%6 = Add(%5, %3) {auto_broadcast=numpy} -> f32[3,17] loops=[1,0]
%7 = Relu(%6) -> f32[3,17] loops=[1,0]
%8 = Store(%7) {count=8 offset=0} -> f32[3,17] loops=[1,0]
%9 = LoopEnd(%0, %8, %4) {work_amount=17 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-17,-17] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=0 evaluate_once=False} -> \
f32[3,17], f32[3,17] loops=[1]
%10 = LoopEnd(%0, %1, %8, %2) {work_amount=3 increment=1 is_incremented=[True,True,True] ptr_increments=[17,1,17] \
finalization_offsets=[-51,-3,-51] element_type_sizes=[4,4,4] input_num=2 output_num=1 loop_id=1 evaluate_once=False} \
-> f32[3,17], f32[3,1], f32[3,17]
%11 = Result(%8) -> f32[3,17]
loop 0 (unified): work_amount=17 increment=8 in=[%5.in0@d0 (1,-17,4), %6.in1@d0 not_processed (0,0,0)] out=[%8@d0 \
(1,-17,4)]
loop 1 (unified): work_amount=3 increment=1 in=[%5.in0@d1 (17,-51,4), %3.in0@d1 (1,-3,4)] out=[%8@d1 (17,-51,4)]"""

AFTER_PRE_GENERATION = """\
LinearIR master_shape=[3,17] loop_depth=2
%0 = Parameter() -> f32[3,17]
%1 = Parameter() -> f32[3,1]
%2 = LoopBegin() -> dynamic[]
%3 = BroadcastLoad(%1) {broadcast_dim=17 offset=0} -> f32[3,17] loops=[2]
%4 = LoopBegin() -> dynamic[] loops=[2]
%5 = Load(%0) {count=8 offset=0} -> f32[3,17] loops=[2,0]
%6 = Add(%5, %3) {auto_broadcast=numpy} -> f32[3,17] loops=[2,0]
%7 = Relu(%6) -> f32[3,17] loops=[2,0]
%8 = Store(%7) {count=8 offset=0} -> f32[3,17] loops=[2,0]
%9 = LoopEnd(%0, %8, %4) {work_amount=16 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=0 evaluate_once=False} -> \
f32[3,17], f32[3,17] loops=[2]
%10 = LoopBegin() -> dynamic[] loops=[2]
%11 = Load(%0) {count=1 offset=0} -> f32[3,17] loops=[2,1]
%12 = Add(%11, %3) {auto_broadcast=numpy} -> f32[3,17] loops=[2,1]
%13 = Relu(%12) -> f32[3,17] loops=[2,1]
%14 = Store(%13) {count=1 offset=0} -> f32[3,17] loops=[2,1]
%15 = LoopEnd(%0, %14, %10) {work_amount=1 increment=1 is_incremented=[True,True] ptr_increments=[0,0] \
finalization_offsets=[1,1] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=1 evaluate_once=True} -> \
f32[3,17], f32[3,17] loops=[2]
%16 = LoopEnd(%0, %1, %8, %2) {work_amount=3 increment=1 is_incremented=[True,True,True] ptr_increments=[0,1,0] \
finalization_offsets=[0,0,0] element_type_sizes=[4,4,4] input_num=2 output_num=1 loop_id=2 evaluate_once=False} -> \
f32[3,17], f32[3,1], f32[3,17]
%17 = Result(%8) -> f32[3,17]
loop 0 (expanded main): work_amount=16 increment=8 in=[%5.in0@d0 (1,0,4), %6.in1@d0 not_processed (0,0,0)] out=[%8@d0 \
(1,0,4)]
loop 1 (expanded last once): work_amount=1 increment=1 in=[%11.in0@d0 (0,1,4), %12.in1@d0 not_processed (0,0,0)] \
out=[%14@d0 (0,1,4)]
loop 2 (expanded main): work_amount=3 increment=1 in=[%5.in0@d1 (0,0,4), %3.in0@d1 (1,0,4)] out=[%8@d1 (0,0,4)]"""


def _lower_with_dumps() -> dict[str, str]:
    p0, p1 = Parameter("f32", (3, 17), name="p0"), Parameter("f32", (3, 1), name="p1")
    body = Model([Result(Relu(Add(p0, p1)), name="r")], [p0, p1])
    cfg = Config(vector_size=8, enable_domain_optimization=False)
    ir = LinearIR(body, cfg)
    OptimizeDomain().run(ir)
    dumps: dict[str, str] = {}
    cf = control_flow_pipeline(cfg)
    cf.after_pass.append(lambda p, ir, changed: dumps.__setitem__(p.name, ir.to_text()))
    cf.run(ir)
    pg = pre_generation_pipeline(InterpreterTarget(8))
    pg.after_pass.append(lambda p, ir, changed: dumps.__setitem__(p.name, ir.to_text()))
    pg.run(ir)
    return dumps


DUMPS = _lower_with_dumps()


def test_after_mark_loops():
    assert DUMPS["mark-loops"] == AFTER_MARK_LOOPS


def test_after_insert_load_store():
    assert DUMPS["insert-load-store"] == AFTER_INSERT_LOAD_STORE


def test_after_control_flow_pipeline():
    assert DUMPS["clean-repeated-data-pointer-shifts"] == AFTER_CONTROL_FLOW


def test_after_pre_generation_pipeline():
    assert DUMPS["optimize-loop-single-evaluation"] == AFTER_PRE_GENERATION

"""Golden text dumps after every control-flow and pre-generation pass, on small bodies.

Each body is lowered once (vector size 8, domain optimization off, interpreter target) with an
``after_pass`` hook that records ``LinearIR.to_text()`` after every pass, and for InitLiveRanges and
AssignRegisters also the register of every port. Every pinned pass has its expected dump written here;
a pass that must leave a body alone is checked to leave the dump identical to the one before it.

Each expected text was checked hunk by hunk, against the dump before it, with the pass's definition
(design guide "Control flow optimization pipeline", inventory 3.3-3.4, OpenVINO's lowered passes); the
comment above each says what the pass changed and why. ExtractLoopInvariants on row_broadcast is also
checked against an expectation written by hand from OpenVINO's rule (below). Node names are
explicit (dumps name expressions by position, so no global counter leaks in). Results are built as
``sb.result(...).node``: ``sb.model`` wraps a Result's Output in a second Result.

Bodies:
    eltwise        Relu(a[2,19] + b[2,1])       broadcast input, 19 = 2*8 + 3 so a tail loop
    softmax        Softmax(x[2,19], axis=-1)    reduce loops, fused loops, a Buffer, accumulators
    scalar         x[2,19] * 2.0                a Scalar moved to its consumer
    row_broadcast  a[4,8] - Exp(b[4,1])         last-dim-1 input, no tail, a loop evaluated once
    two_softmax    Softmax(Softmax(x[2,19]))    three Buffers allocated in place (buffer passes only)
"""

from __future__ import annotations

import functools

import pytest

from snippets_core.codegen.interpreter import InterpreterTarget
from snippets_core.frontends import builder as sb
from snippets_core.ir.model import Model
from snippets_core.lowered.linear_ir import Config, LinearIR
from snippets_core.lowered.pipeline import lower
from snippets_core.passes.data_flow_pipeline import run_data_flow


def _eltwise() -> Model:
    a = sb.parameter([2, 19], "f32", name="a")
    b = sb.parameter([2, 1], "f32", name="b")
    y = sb.relu(sb.add(a, b, name="add"), name="relu")
    return sb.model([sb.result(y, name="r").node], [a, b], name="eltwise")


def _softmax() -> Model:
    x = sb.parameter([2, 19], "f32", name="x")
    return sb.model([sb.result(sb.softmax(x, -1, name="sm"), name="r").node], [x], name="softmax")


def _scalar() -> Model:
    x = sb.parameter([2, 19], "f32", name="x")
    y = sb.multiply(x, sb.constant(2.0, "f32", name="c"), name="mul")
    return sb.model([sb.result(y, name="r").node], [x], name="scalar")


def _row_broadcast() -> Model:
    a = sb.parameter([4, 8], "f32", name="a")
    b = sb.parameter([4, 1], "f32", name="b")
    y = sb.subtract(a, sb.exp(b, name="exp"), name="sub")
    return sb.model([sb.result(y, name="r").node], [a, b], name="row_broadcast")


def _two_softmax() -> Model:
    x = sb.parameter([2, 19], "f32", name="x")
    y = sb.softmax(sb.softmax(x, -1, name="sm1"), -1, name="sm2")
    return sb.model([sb.result(y, name="r").node], [x], name="two_softmax")


BODIES = {
    "eltwise": _eltwise,
    "softmax": _softmax,
    "scalar": _scalar,
    "row_broadcast": _row_broadcast,
    "two_softmax": _two_softmax,
}
REG_PASSES = ("init-live-ranges", "assign-registers")


def _regs_text(ir: LinearIR) -> str:
    lines = []
    for i, e in enumerate(ir.exprs):
        ins = ",".join(str(d.reg) for d in e.input_descs)
        outs = ",".join(str(d.reg) for d in e.output_descs if d.reg is not None)
        lines.append(f"%{i} {e.type_name} in=[{ins}] out=[{outs}]")
    return "\n".join(lines)


def lower_with_dumps(body_name: str) -> dict[str, str]:
    body = BODIES[body_name]()
    run_data_flow(body)
    dumps: dict[str, str] = {}

    def hook(p, ir, changed) -> None:  # type: ignore[no-untyped-def]
        dumps[p.name] = ir.to_text()
        if p.name in REG_PASSES:
            dumps["regs:" + p.name] = _regs_text(ir)

    lower(body, Config(vector_size=8, enable_domain_optimization=False), InterpreterTarget(8), after_pass=[hook])
    return dumps


# Start: one expression per node, no loops yet (domain optimization is off: tile rank 2).
ELTWISE_OPTIMIZE_DOMAIN = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = Parameter() -> f32[2,1]
%2 = Add(%0, %1) {auto_broadcast=numpy} -> f32[2,19]
%3 = Relu(%2) -> f32[2,19]
%4 = Result(%3) -> f32[2,19]"""

# MarkLoops: Add and Relu share one loop nest: the inner loop walks the 19 columns by the
# vector size 8, the outer one the 2 rows by 1; ports are the nest's entry/exit ports, not yet initialised.
ELTWISE_MARK_LOOPS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = Parameter() -> f32[2,1]
%2 = Add(%0, %1) {auto_broadcast=numpy} -> f32[2,19] loops=[1,0]
%3 = Relu(%2) -> f32[2,19] loops=[1,0]
%4 = Result(%3) -> f32[2,19]
loop 0 (unified): work_amount=19 increment=8 in=[%2.in0@d0 (0,0,0), %2.in1@d0 (0,0,0)] out=[%3@d0 (0,0,0)]
loop 1 (unified): work_amount=2 increment=1 in=[%2.in0@d1 (0,0,0), %2.in1@d1 (0,0,0)] out=[%3@d1 (0,0,0)]"""

# InsertLoadStore: a Load per Parameter input (count = min(vector, last dim): 8 for a, 1 for b's
# [2,1]) and a Store before the Result; the loop ports move from Add/Relu to the new memory accesses.
ELTWISE_INSERT_LOAD_STORE = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = Parameter() -> f32[2,1]
%2 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%3 = Load(%1) {count=1 offset=0} -> f32[2,1] loops=[1,0]
%4 = Add(%2, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[1,0]
%5 = Relu(%4) -> f32[2,19] loops=[1,0]
%6 = Store(%5) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%7 = Result(%6) -> f32[2,19]
loop 0 (unified): work_amount=19 increment=8 in=[%2.in0@d0 (0,0,0), %3.in0@d0 (0,0,0)] out=[%6@d0 (0,0,0)]
loop 1 (unified): work_amount=2 increment=1 in=[%2.in0@d1 (0,0,0), %3.in0@d1 (0,0,0)] out=[%6@d1 (0,0,0)]"""

# InsertBroadcastMove: b's last dim (1) differs from Add's (19), so its scalar load is
# broadcast to a full vector before Add.
ELTWISE_INSERT_BROADCAST_MOVE = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = Parameter() -> f32[2,1]
%2 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%3 = Load(%1) {count=1 offset=0} -> f32[2,1] loops=[1,0]
%4 = BroadcastMove(%3) {broadcast_dim=19} -> f32[2,19] loops=[1,0]
%5 = Add(%2, %4) {auto_broadcast=numpy} -> f32[2,19] loops=[1,0]
%6 = Relu(%5) -> f32[2,19] loops=[1,0]
%7 = Store(%6) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%8 = Result(%7) -> f32[2,19]
loop 0 (unified): work_amount=19 increment=8 in=[%2.in0@d0 (0,0,0), %3.in0@d0 (0,0,0)] out=[%7@d0 (0,0,0)]
loop 1 (unified): work_amount=2 increment=1 in=[%2.in0@d1 (0,0,0), %3.in0@d1 (0,0,0)] out=[%7@d1 (0,0,0)]"""

# LoadMoveBroadcastToBroadcastLoad: the one-element Load and its BroadcastMove become one
# BroadcastLoad.
ELTWISE_LOAD_MOVE_BROADCAST_TO_BROADCAST_LOAD = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = Parameter() -> f32[2,1]
%2 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%3 = BroadcastLoad(%1) {broadcast_dim=19 offset=0} -> f32[2,19] loops=[1,0]
%4 = Add(%2, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[1,0]
%5 = Relu(%4) -> f32[2,19] loops=[1,0]
%6 = Store(%5) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%7 = Result(%6) -> f32[2,19]
loop 0 (unified): work_amount=19 increment=8 in=[%2.in0@d0 (0,0,0), %3.in0@d0 (0,0,0)] out=[%6@d0 (0,0,0)]
loop 1 (unified): work_amount=2 increment=1 in=[%2.in0@d1 (0,0,0), %3.in0@d1 (0,0,0)] out=[%6@d1 (0,0,0)]"""

# ExtractLoopInvariants: b's BroadcastLoad reads one element per row, so the column loop (d0) never moves
# its pointer: it leaves that loop (still in the row loop); Add's input from it becomes a register entry port.
ELTWISE_EXTRACT_LOOP_INVARIANTS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = Parameter() -> f32[2,1]
%2 = BroadcastLoad(%1) {broadcast_dim=19 offset=0} -> f32[2,19] loops=[1]
%3 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%4 = Add(%3, %2) {auto_broadcast=numpy} -> f32[2,19] loops=[1,0]
%5 = Relu(%4) -> f32[2,19] loops=[1,0]
%6 = Store(%5) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%7 = Result(%6) -> f32[2,19]
loop 0 (unified): work_amount=19 increment=8 in=[%3.in0@d0 (0,0,0), %4.in1@d0 (0,0,0)] out=[%6@d0 (0,0,0)]
loop 1 (unified): work_amount=2 increment=1 in=[%3.in0@d1 (0,0,0), %2.in0@d1 (0,0,0)] out=[%6@d1 (0,0,0)]"""

# InitLoops (ptr_increment, finalization_offset, data size): a moves 1 element per column and
# 19 per row and rewinds by the whole extent (-19, -2*19); b, now read before the inner loop, is a port of
# the row loop only and moves 1 per row (rewind -2); the output like a; Add's register input is not processed.
ELTWISE_INIT_LOOPS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = Parameter() -> f32[2,1]
%2 = BroadcastLoad(%1) {broadcast_dim=19 offset=0} -> f32[2,19] loops=[1]
%3 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%4 = Add(%3, %2) {auto_broadcast=numpy} -> f32[2,19] loops=[1,0]
%5 = Relu(%4) -> f32[2,19] loops=[1,0]
%6 = Store(%5) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%7 = Result(%6) -> f32[2,19]
loop 0 (unified): work_amount=19 increment=8 in=[%3.in0@d0 (1,-19,4), %4.in1@d0 not_processed (0,0,0)] out=[%6@d0 \
(1,-19,4)]
loop 1 (unified): work_amount=2 increment=1 in=[%3.in0@d1 (19,-38,4), %2.in0@d1 (1,-2,4)] out=[%6@d1 (19,-38,4)]"""

# InsertLoops: LoopBegin/LoopEnd pairs around each nest; a LoopEnd lists the data pointers it
# shifts (a, b, output) and the port info of its loop.
ELTWISE_INSERT_LOOPS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = Parameter() -> f32[2,1]
%2 = LoopBegin() -> dynamic[]
%3 = BroadcastLoad(%1) {broadcast_dim=19 offset=0} -> f32[2,19] loops=[1]
%4 = LoopBegin() -> dynamic[] loops=[1]
%5 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%6 = Add(%5, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[1,0]
%7 = Relu(%6) -> f32[2,19] loops=[1,0]
%8 = Store(%7) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%9 = LoopEnd(%0, %8, %4) {work_amount=19 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=0 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[1]
%10 = LoopEnd(%0, %1, %8, %2) {work_amount=2 increment=1 is_incremented=[True,True,True] ptr_increments=[19,1,19] \
finalization_offsets=[-38,-2,-38] element_type_sizes=[4,4,4] input_num=2 output_num=1 loop_id=1 evaluate_once=False} \
-> f32[2,19], f32[2,1], f32[2,19]
%11 = Result(%8) -> f32[2,19]
loop 0 (unified): work_amount=19 increment=8 in=[%5.in0@d0 (1,-19,4), %6.in1@d0 not_processed (0,0,0)] out=[%8@d0 \
(1,-19,4)]
loop 1 (unified): work_amount=2 increment=1 in=[%5.in0@d1 (19,-38,4), %3.in0@d1 (1,-2,4)] out=[%8@d1 (19,-38,4)]"""

# InsertSpecificIterations: 19 = 2*8 + 3: the inner loop becomes a main body of 16 by 8 (its
# finalization moved to the tail: 0) and a copied tail loop of 3 by 3 (Load/Store count 3) that rewinds by -19;
# the new tail loop gets the next free id 2. The outer loop is unchanged.
ELTWISE_INSERT_SPECIFIC_ITERATIONS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = Parameter() -> f32[2,1]
%2 = LoopBegin() -> dynamic[]
%3 = BroadcastLoad(%1) {broadcast_dim=19 offset=0} -> f32[2,19] loops=[1]
%4 = LoopBegin() -> dynamic[] loops=[1]
%5 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%6 = Add(%5, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[1,0]
%7 = Relu(%6) -> f32[2,19] loops=[1,0]
%8 = Store(%7) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%9 = LoopEnd(%0, %8, %4) {work_amount=16 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=0 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[1]
%10 = LoopBegin() -> dynamic[] loops=[1]
%11 = Load(%0) {count=3 offset=0} -> f32[2,19] loops=[1,2]
%12 = Add(%11, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[1,2]
%13 = Relu(%12) -> f32[2,19] loops=[1,2]
%14 = Store(%13) {count=3 offset=0} -> f32[2,19] loops=[1,2]
%15 = LoopEnd(%0, %14, %10) {work_amount=3 increment=3 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=2 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[1]
%16 = LoopEnd(%0, %1, %8, %2) {work_amount=2 increment=1 is_incremented=[True,True,True] ptr_increments=[19,1,19] \
finalization_offsets=[-38,-2,-38] element_type_sizes=[4,4,4] input_num=2 output_num=1 loop_id=1 evaluate_once=False} \
-> f32[2,19], f32[2,1], f32[2,19]
%17 = Result(%8) -> f32[2,19]
loop 0 (expanded main): work_amount=16 increment=8 in=[%5.in0@d0 (1,0,4), %6.in1@d0 not_processed (0,0,0)] out=[%8@d0 \
(1,0,4)]
loop 1 (expanded main): work_amount=2 increment=1 in=[%5.in0@d1 (19,-38,4), %3.in0@d1 (1,-2,4)] out=[%8@d1 (19,-38,4)]
loop 2 (expanded last): work_amount=3 increment=3 in=[%11.in0@d0 (1,-19,4), %12.in1@d0 not_processed (0,0,0)] \
out=[%14@d0 (1,-19,4)]"""

# NormalizeLoopIDs: ids follow the order the LoopEnds run: main 0, tail 1, rows 2.
ELTWISE_NORMALIZE_LOOP_IDS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = Parameter() -> f32[2,1]
%2 = LoopBegin() -> dynamic[]
%3 = BroadcastLoad(%1) {broadcast_dim=19 offset=0} -> f32[2,19] loops=[2]
%4 = LoopBegin() -> dynamic[] loops=[2]
%5 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[2,0]
%6 = Add(%5, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[2,0]
%7 = Relu(%6) -> f32[2,19] loops=[2,0]
%8 = Store(%7) {count=8 offset=0} -> f32[2,19] loops=[2,0]
%9 = LoopEnd(%0, %8, %4) {work_amount=16 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=0 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[2]
%10 = LoopBegin() -> dynamic[] loops=[2]
%11 = Load(%0) {count=3 offset=0} -> f32[2,19] loops=[2,1]
%12 = Add(%11, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[2,1]
%13 = Relu(%12) -> f32[2,19] loops=[2,1]
%14 = Store(%13) {count=3 offset=0} -> f32[2,19] loops=[2,1]
%15 = LoopEnd(%0, %14, %10) {work_amount=3 increment=3 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=1 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[2]
%16 = LoopEnd(%0, %1, %8, %2) {work_amount=2 increment=1 is_incremented=[True,True,True] ptr_increments=[19,1,19] \
finalization_offsets=[-38,-2,-38] element_type_sizes=[4,4,4] input_num=2 output_num=1 loop_id=2 evaluate_once=False} \
-> f32[2,19], f32[2,1], f32[2,19]
%17 = Result(%8) -> f32[2,19]
loop 0 (expanded main): work_amount=16 increment=8 in=[%5.in0@d0 (1,0,4), %6.in1@d0 not_processed (0,0,0)] out=[%8@d0 \
(1,0,4)]
loop 1 (expanded last): work_amount=3 increment=3 in=[%11.in0@d0 (1,-19,4), %12.in1@d0 not_processed (0,0,0)] \
out=[%14@d0 (1,-19,4)]
loop 2 (expanded main): work_amount=2 increment=1 in=[%5.in0@d1 (19,-38,4), %3.in0@d1 (1,-2,4)] out=[%8@d1 (19,-38,4)]"""

# CleanupLoopOffsets: the tail's finalization (-19) is folded into the row loop's increments of
# the same pointers (19 - 19 = 0); the last loop's finalization offsets are dropped because only the Result
# follows.
ELTWISE_CLEANUP_LOOP_OFFSETS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = Parameter() -> f32[2,1]
%2 = LoopBegin() -> dynamic[]
%3 = BroadcastLoad(%1) {broadcast_dim=19 offset=0} -> f32[2,19] loops=[2]
%4 = LoopBegin() -> dynamic[] loops=[2]
%5 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[2,0]
%6 = Add(%5, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[2,0]
%7 = Relu(%6) -> f32[2,19] loops=[2,0]
%8 = Store(%7) {count=8 offset=0} -> f32[2,19] loops=[2,0]
%9 = LoopEnd(%0, %8, %4) {work_amount=16 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=0 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[2]
%10 = LoopBegin() -> dynamic[] loops=[2]
%11 = Load(%0) {count=3 offset=0} -> f32[2,19] loops=[2,1]
%12 = Add(%11, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[2,1]
%13 = Relu(%12) -> f32[2,19] loops=[2,1]
%14 = Store(%13) {count=3 offset=0} -> f32[2,19] loops=[2,1]
%15 = LoopEnd(%0, %14, %10) {work_amount=3 increment=3 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=1 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[2]
%16 = LoopEnd(%0, %1, %8, %2) {work_amount=2 increment=1 is_incremented=[True,True,True] ptr_increments=[0,1,0] \
finalization_offsets=[0,0,0] element_type_sizes=[4,4,4] input_num=2 output_num=1 loop_id=2 evaluate_once=False} -> \
f32[2,19], f32[2,1], f32[2,19]
%17 = Result(%8) -> f32[2,19]
loop 0 (expanded main): work_amount=16 increment=8 in=[%5.in0@d0 (1,0,4), %6.in1@d0 not_processed (0,0,0)] out=[%8@d0 \
(1,0,4)]
loop 1 (expanded last): work_amount=3 increment=3 in=[%11.in0@d0 (1,0,4), %12.in1@d0 not_processed (0,0,0)] \
out=[%14@d0 (1,0,4)]
loop 2 (expanded main): work_amount=2 increment=1 in=[%5.in0@d1 (0,0,4), %3.in0@d1 (1,0,4)] out=[%8@d1 (0,0,4)]"""

# OptimizeLoopSingleEvaluation: the tail runs once (work_amount == increment == 3): its pointer
# increments move into its finalization offsets (0 + 1*3 = 3) and it is marked evaluate_once.
ELTWISE_OPTIMIZE_LOOP_SINGLE_EVALUATION = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = Parameter() -> f32[2,1]
%2 = LoopBegin() -> dynamic[]
%3 = BroadcastLoad(%1) {broadcast_dim=19 offset=0} -> f32[2,19] loops=[2]
%4 = LoopBegin() -> dynamic[] loops=[2]
%5 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[2,0]
%6 = Add(%5, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[2,0]
%7 = Relu(%6) -> f32[2,19] loops=[2,0]
%8 = Store(%7) {count=8 offset=0} -> f32[2,19] loops=[2,0]
%9 = LoopEnd(%0, %8, %4) {work_amount=16 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=0 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[2]
%10 = LoopBegin() -> dynamic[] loops=[2]
%11 = Load(%0) {count=3 offset=0} -> f32[2,19] loops=[2,1]
%12 = Add(%11, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[2,1]
%13 = Relu(%12) -> f32[2,19] loops=[2,1]
%14 = Store(%13) {count=3 offset=0} -> f32[2,19] loops=[2,1]
%15 = LoopEnd(%0, %14, %10) {work_amount=3 increment=3 is_incremented=[True,True] ptr_increments=[0,0] \
finalization_offsets=[3,3] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=1 evaluate_once=True} -> \
f32[2,19], f32[2,19] loops=[2]
%16 = LoopEnd(%0, %1, %8, %2) {work_amount=2 increment=1 is_incremented=[True,True,True] ptr_increments=[0,1,0] \
finalization_offsets=[0,0,0] element_type_sizes=[4,4,4] input_num=2 output_num=1 loop_id=2 evaluate_once=False} -> \
f32[2,19], f32[2,1], f32[2,19]
%17 = Result(%8) -> f32[2,19]
loop 0 (expanded main): work_amount=16 increment=8 in=[%5.in0@d0 (1,0,4), %6.in1@d0 not_processed (0,0,0)] out=[%8@d0 \
(1,0,4)]
loop 1 (expanded last once): work_amount=3 increment=3 in=[%11.in0@d0 (0,3,4), %12.in1@d0 not_processed (0,0,0)] \
out=[%14@d0 (0,3,4)]
loop 2 (expanded main): work_amount=2 increment=1 in=[%5.in0@d1 (0,0,4), %3.in0@d1 (1,0,4)] out=[%8@d1 (0,0,4)]"""

# InitLiveRanges: one abstract register per value, numbered in definition order (a, b, the two
# loop counters, the output pointer; each vector value its own vec register).
ELTWISE_REGS_INIT_LIVE_RANGES = """\
%0 Parameter in=[] out=[gpr[0]]
%1 Parameter in=[] out=[gpr[1]]
%2 LoopBegin in=[] out=[gpr[2]]
%3 BroadcastLoad in=[gpr[1]] out=[vec[0]]
%4 LoopBegin in=[] out=[gpr[3]]
%5 Load in=[gpr[0]] out=[vec[1]]
%6 Add in=[vec[1],vec[0]] out=[vec[2]]
%7 Relu in=[vec[2]] out=[vec[3]]
%8 Store in=[vec[3]] out=[gpr[4]]
%9 LoopEnd in=[gpr[0],gpr[4],gpr[3]] out=[]
%10 LoopEnd in=[gpr[0],gpr[1],gpr[4],gpr[2]] out=[]
%11 Result in=[gpr[4]] out=[]"""

# AssignRegisters (linear scan): data pointers get the ABI order (inputs gpr0, gpr1, output gpr2),
# loop counters gpr3 (outer), gpr4 (inner); Add cannot reuse vec0/vec1 (they end where it starts), Relu reuses
# vec0 which is free again.
ELTWISE_REGS_ASSIGN_REGISTERS = """\
%0 Parameter in=[] out=[gpr[0]]
%1 Parameter in=[] out=[gpr[1]]
%2 LoopBegin in=[] out=[gpr[3]]
%3 BroadcastLoad in=[gpr[1]] out=[vec[0]]
%4 LoopBegin in=[] out=[gpr[4]]
%5 Load in=[gpr[0]] out=[vec[1]]
%6 Add in=[vec[1],vec[0]] out=[vec[2]]
%7 Relu in=[vec[2]] out=[vec[1]]
%8 Store in=[vec[1]] out=[gpr[2]]
%9 LoopEnd in=[gpr[0],gpr[2],gpr[4]] out=[]
%10 LoopEnd in=[gpr[0],gpr[1],gpr[2],gpr[3]] out=[]
%11 Result in=[gpr[2]] out=[]"""

# Start: the data-flow passes decomposed Softmax into ReduceMax, Subtract, Exp, ReduceSum,
# PowerStatic(-1) and Multiply.
SOFTMAX_OPTIMIZE_DOMAIN = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = SnippetsReduceMax(%0) {axis=1} -> f32[2,1]
%2 = Subtract(%0, %1) {auto_broadcast=numpy} -> f32[2,19]
%3 = Exp(%2) -> f32[2,19]
%4 = SnippetsReduceSum(%3) {axis=1} -> f32[2,1]
%5 = PowerStatic(%4) {power=-1.0} -> f32[2,1]
%6 = Multiply(%3, %5) {auto_broadcast=numpy} -> f32[2,19]
%7 = Result(%6) -> f32[2,19]"""

# MarkLoops: the reductions get only the row loop (they process the 19 columns whole); Subtract/Exp
# form a two-level nest, PowerStatic/Multiply another; six loops in all.
SOFTMAX_MARK_LOOPS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = SnippetsReduceMax(%0) {axis=1} -> f32[2,1] loops=[0]
%2 = Subtract(%0, %1) {auto_broadcast=numpy} -> f32[2,19] loops=[2,1]
%3 = Exp(%2) -> f32[2,19] loops=[2,1]
%4 = SnippetsReduceSum(%3) {axis=1} -> f32[2,1] loops=[3]
%5 = PowerStatic(%4) {power=-1.0} -> f32[2,1] loops=[5,4]
%6 = Multiply(%3, %5) {auto_broadcast=numpy} -> f32[2,19] loops=[5,4]
%7 = Result(%6) -> f32[2,19]
loop 0 (unified): work_amount=2 increment=1 in=[%1.in0@d1 (0,0,0)] out=[%1@d1 (0,0,0)]
loop 1 (unified): work_amount=19 increment=8 in=[%2.in0@d0 (0,0,0), %2.in1@d0 (0,0,0)] out=[%3@d0 (0,0,0)]
loop 2 (unified): work_amount=2 increment=1 in=[%2.in0@d1 (0,0,0), %2.in1@d1 (0,0,0)] out=[%3@d1 (0,0,0)]
loop 3 (unified): work_amount=2 increment=1 in=[%4.in0@d1 (0,0,0)] out=[%4@d1 (0,0,0)]
loop 4 (unified): work_amount=19 increment=8 in=[%5.in0@d0 (0,0,0), %6.in0@d0 (0,0,0)] out=[%6@d0 (0,0,0)]
loop 5 (unified): work_amount=2 increment=1 in=[%5.in0@d1 (0,0,0), %6.in0@d1 (0,0,0)] out=[%6@d1 (0,0,0)]"""

# ReduceDecomposition: each reduction becomes an accumulator (VectorBuffer + Fill with the
# neutral value: -inf = 0xff800000 for max, 0 for sum), an inner loop of 19 by 8 with Fill(offset=8: no lanes
# filled in a full vector) and Maximum/Add into the accumulator, then a HorizonMax/HorizonSum. New inner loops
# 6 and 7.
SOFTMAX_REDUCE_DECOMPOSITION = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = VectorBuffer() -> f32[1] loops=[0]
%2 = Fill(%1) {offset=0 fill_value=4286578688} -> f32[1] loops=[0]
%3 = Fill(%0) {offset=8 fill_value=4286578688} -> f32[2,19] loops=[0,6]
%4 = Maximum(%3, %2) {auto_broadcast=numpy} -> f32[2,19] loops=[0,6]
%5 = HorizonMax(%4) -> f32[2,1] loops=[0]
%6 = Subtract(%0, %5) {auto_broadcast=numpy} -> f32[2,19] loops=[2,1]
%7 = Exp(%6) -> f32[2,19] loops=[2,1]
%8 = VectorBuffer() -> f32[1] loops=[3]
%9 = Fill(%8) {offset=0 fill_value=0} -> f32[1] loops=[3]
%10 = Fill(%7) {offset=8 fill_value=0} -> f32[2,19] loops=[3,7]
%11 = Add(%10, %9) {auto_broadcast=numpy} -> f32[2,19] loops=[3,7]
%12 = HorizonSum(%11) -> f32[2,1] loops=[3]
%13 = PowerStatic(%12) {power=-1.0} -> f32[2,1] loops=[5,4]
%14 = Multiply(%7, %13) {auto_broadcast=numpy} -> f32[2,19] loops=[5,4]
%15 = Result(%14) -> f32[2,19]
loop 0 (unified): work_amount=2 increment=1 in=[%3.in0@d1 (0,0,0)] out=[%5@d1 (0,0,0)]
loop 1 (unified): work_amount=19 increment=8 in=[%6.in0@d0 (0,0,0), %6.in1@d0 (0,0,0)] out=[%7@d0 (0,0,0)]
loop 2 (unified): work_amount=2 increment=1 in=[%6.in0@d1 (0,0,0), %6.in1@d1 (0,0,0)] out=[%7@d1 (0,0,0)]
loop 3 (unified): work_amount=2 increment=1 in=[%10.in0@d1 (0,0,0)] out=[%12@d1 (0,0,0)]
loop 4 (unified): work_amount=19 increment=8 in=[%13.in0@d0 (0,0,0), %14.in0@d0 (0,0,0)] out=[%14@d0 (0,0,0)]
loop 5 (unified): work_amount=2 increment=1 in=[%13.in0@d1 (0,0,0), %14.in0@d1 (0,0,0)] out=[%14@d1 (0,0,0)]
loop 6 (unified): work_amount=19 increment=8 in=[%3.in0@d0 (0,0,0)] out=[%4@d0 (0,0,0)]
loop 7 (unified): work_amount=19 increment=8 in=[%10.in0@d0 (0,0,0)] out=[%11@d0 (0,0,0)]"""

# FuseLoops: the four row loops (0, 2, 3, 5) fuse into loop 0 (same work amount, producer before
# consumer); the Subtract/Exp inner loop 1 fuses with the sum's inner loop 7 (Exp feeds the sum), so the sum's
# accumulator moves before it; the max loop 6 and Multiply's loop 4 stay separate (they are separated by the
# horizontal reductions).
SOFTMAX_FUSE_LOOPS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = VectorBuffer() -> f32[1] loops=[0]
%2 = Fill(%1) {offset=0 fill_value=4286578688} -> f32[1] loops=[0]
%3 = Fill(%0) {offset=8 fill_value=4286578688} -> f32[2,19] loops=[0,6]
%4 = Maximum(%3, %2) {auto_broadcast=numpy} -> f32[2,19] loops=[0,6]
%5 = HorizonMax(%4) -> f32[2,1] loops=[0]
%6 = VectorBuffer() -> f32[1] loops=[0]
%7 = Fill(%6) {offset=0 fill_value=0} -> f32[1] loops=[0]
%8 = Subtract(%0, %5) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%9 = Exp(%8) -> f32[2,19] loops=[0,1]
%10 = Fill(%9) {offset=8 fill_value=0} -> f32[2,19] loops=[0,1]
%11 = Add(%10, %7) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%12 = HorizonSum(%11) -> f32[2,1] loops=[0]
%13 = PowerStatic(%12) {power=-1.0} -> f32[2,1] loops=[0,4]
%14 = Multiply(%9, %13) {auto_broadcast=numpy} -> f32[2,19] loops=[0,4]
%15 = Result(%14) -> f32[2,19]
loop 0 (unified): work_amount=2 increment=1 in=[%3.in0@d1 (0,0,0), %8.in0@d1 (0,0,0)] out=[%14@d1 (0,0,0)]
loop 1 (unified): work_amount=19 increment=8 in=[%8.in0@d0 (0,0,0), %8.in1@d0 (0,0,0)] out=[%9@d0 (0,0,0), %11@d0 \
(0,0,0)]
loop 4 (unified): work_amount=19 increment=8 in=[%13.in0@d0 (0,0,0), %14.in0@d0 (0,0,0)] out=[%14@d0 (0,0,0)]
loop 6 (unified): work_amount=19 increment=8 in=[%3.in0@d0 (0,0,0)] out=[%4@d0 (0,0,0)]"""

# InsertBuffers: Exp (inner loop 1) feeds Multiply in a different inner loop (4), so its value
# goes through a Buffer inside the row loop.
SOFTMAX_INSERT_BUFFERS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = VectorBuffer() -> f32[1] loops=[0]
%2 = Fill(%1) {offset=0 fill_value=4286578688} -> f32[1] loops=[0]
%3 = Fill(%0) {offset=8 fill_value=4286578688} -> f32[2,19] loops=[0,6]
%4 = Maximum(%3, %2) {auto_broadcast=numpy} -> f32[2,19] loops=[0,6]
%5 = HorizonMax(%4) -> f32[2,1] loops=[0]
%6 = VectorBuffer() -> f32[1] loops=[0]
%7 = Fill(%6) {offset=0 fill_value=0} -> f32[1] loops=[0]
%8 = Subtract(%0, %5) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%9 = Exp(%8) -> f32[2,19] loops=[0,1]
%10 = Fill(%9) {offset=8 fill_value=0} -> f32[2,19] loops=[0,1]
%11 = Add(%10, %7) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%12 = Buffer(%9) {reg_group=-1 cluster_id=-1 offset=-1} -> f32[2,19] loops=[0]
%13 = HorizonSum(%11) -> f32[2,1] loops=[0]
%14 = PowerStatic(%13) {power=-1.0} -> f32[2,1] loops=[0,4]
%15 = Multiply(%12, %14) {auto_broadcast=numpy} -> f32[2,19] loops=[0,4]
%16 = Result(%15) -> f32[2,19]
loop 0 (unified): work_amount=2 increment=1 in=[%3.in0@d1 (0,0,0), %8.in0@d1 (0,0,0)] out=[%15@d1 (0,0,0)]
loop 1 (unified): work_amount=19 increment=8 in=[%8.in0@d0 (0,0,0), %8.in1@d0 (0,0,0)] out=[%9@d0 (0,0,0), %11@d0 \
(0,0,0)]
loop 4 (unified): work_amount=19 increment=8 in=[%14.in0@d0 (0,0,0), %15.in0@d0 (0,0,0)] out=[%15@d0 (0,0,0)]
loop 6 (unified): work_amount=19 increment=8 in=[%3.in0@d0 (0,0,0)] out=[%4@d0 (0,0,0)]"""

# InsertLoadStore: x is loaded in both the max loop and the Subtract loop, Exp is stored into
# the Buffer and loaded back in Multiply's loop, Multiply is stored for the Result. Register inputs (HorizonMax
# into Subtract, the accumulators) get no memory access.
SOFTMAX_INSERT_LOAD_STORE = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = VectorBuffer() -> f32[1] loops=[0]
%2 = Fill(%1) {offset=0 fill_value=4286578688} -> f32[1] loops=[0]
%3 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[0,6]
%4 = Fill(%3) {offset=8 fill_value=4286578688} -> f32[2,19] loops=[0,6]
%5 = Maximum(%4, %2) {auto_broadcast=numpy} -> f32[2,19] loops=[0,6]
%6 = HorizonMax(%5) -> f32[2,1] loops=[0]
%7 = VectorBuffer() -> f32[1] loops=[0]
%8 = Fill(%7) {offset=0 fill_value=0} -> f32[1] loops=[0]
%9 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[0,1]
%10 = Subtract(%9, %6) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%11 = Exp(%10) -> f32[2,19] loops=[0,1]
%12 = Store(%11) {count=8 offset=0} -> f32[2,19] loops=[0,1]
%13 = Fill(%11) {offset=8 fill_value=0} -> f32[2,19] loops=[0,1]
%14 = Add(%13, %8) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%15 = Buffer(%12) {reg_group=-1 cluster_id=-1 offset=-1} -> f32[2,19] loops=[0]
%16 = HorizonSum(%14) -> f32[2,1] loops=[0]
%17 = PowerStatic(%16) {power=-1.0} -> f32[2,1] loops=[0,4]
%18 = Load(%15) {count=8 offset=0} -> f32[2,19] loops=[0,4]
%19 = Multiply(%18, %17) {auto_broadcast=numpy} -> f32[2,19] loops=[0,4]
%20 = Store(%19) {count=8 offset=0} -> f32[2,19] loops=[0,4]
%21 = Result(%20) -> f32[2,19]
loop 0 (unified): work_amount=2 increment=1 in=[%3.in0@d1 (0,0,0), %9.in0@d1 (0,0,0)] out=[%20@d1 (0,0,0)]
loop 1 (unified): work_amount=19 increment=8 in=[%9.in0@d0 (0,0,0), %10.in1@d0 (0,0,0)] out=[%12@d0 (0,0,0), \
%14@d0 (0,0,0)]
loop 4 (unified): work_amount=19 increment=8 in=[%17.in0@d0 (0,0,0), %18.in0@d0 (0,0,0)] out=[%20@d0 (0,0,0)]
loop 6 (unified): work_amount=19 increment=8 in=[%3.in0@d0 (0,0,0)] out=[%5@d0 (0,0,0)]"""

# InsertBroadcastMove: PowerStatic's [2,1] value is broadcast to Multiply's 19 columns.
# HorizonMax's output needs none: a horizontal reduction leaves its result in every lane.
SOFTMAX_INSERT_BROADCAST_MOVE = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = VectorBuffer() -> f32[1] loops=[0]
%2 = Fill(%1) {offset=0 fill_value=4286578688} -> f32[1] loops=[0]
%3 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[0,6]
%4 = Fill(%3) {offset=8 fill_value=4286578688} -> f32[2,19] loops=[0,6]
%5 = Maximum(%4, %2) {auto_broadcast=numpy} -> f32[2,19] loops=[0,6]
%6 = HorizonMax(%5) -> f32[2,1] loops=[0]
%7 = VectorBuffer() -> f32[1] loops=[0]
%8 = Fill(%7) {offset=0 fill_value=0} -> f32[1] loops=[0]
%9 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[0,1]
%10 = Subtract(%9, %6) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%11 = Exp(%10) -> f32[2,19] loops=[0,1]
%12 = Store(%11) {count=8 offset=0} -> f32[2,19] loops=[0,1]
%13 = Fill(%11) {offset=8 fill_value=0} -> f32[2,19] loops=[0,1]
%14 = Add(%13, %8) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%15 = Buffer(%12) {reg_group=-1 cluster_id=-1 offset=-1} -> f32[2,19] loops=[0]
%16 = HorizonSum(%14) -> f32[2,1] loops=[0]
%17 = PowerStatic(%16) {power=-1.0} -> f32[2,1] loops=[0,4]
%18 = Load(%15) {count=8 offset=0} -> f32[2,19] loops=[0,4]
%19 = BroadcastMove(%17) {broadcast_dim=19} -> f32[2,19] loops=[0,4]
%20 = Multiply(%18, %19) {auto_broadcast=numpy} -> f32[2,19] loops=[0,4]
%21 = Store(%20) {count=8 offset=0} -> f32[2,19] loops=[0,4]
%22 = Result(%21) -> f32[2,19]
loop 0 (unified): work_amount=2 increment=1 in=[%3.in0@d1 (0,0,0), %9.in0@d1 (0,0,0)] out=[%21@d1 (0,0,0)]
loop 1 (unified): work_amount=19 increment=8 in=[%9.in0@d0 (0,0,0), %10.in1@d0 (0,0,0)] out=[%12@d0 (0,0,0), \
%14@d0 (0,0,0)]
loop 4 (unified): work_amount=19 increment=8 in=[%17.in0@d0 (0,0,0), %18.in0@d0 (0,0,0)] out=[%21@d0 (0,0,0)]
loop 6 (unified): work_amount=19 increment=8 in=[%3.in0@d0 (0,0,0)] out=[%5@d0 (0,0,0)]"""

# ExtractLoopInvariants: PowerStatic and its BroadcastMove read only values computed outside the
# inner loop 4 (stride 1 along it), so they are computed once per row before that loop.
SOFTMAX_EXTRACT_LOOP_INVARIANTS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = VectorBuffer() -> f32[1] loops=[0]
%2 = Fill(%1) {offset=0 fill_value=4286578688} -> f32[1] loops=[0]
%3 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[0,6]
%4 = Fill(%3) {offset=8 fill_value=4286578688} -> f32[2,19] loops=[0,6]
%5 = Maximum(%4, %2) {auto_broadcast=numpy} -> f32[2,19] loops=[0,6]
%6 = HorizonMax(%5) -> f32[2,1] loops=[0]
%7 = VectorBuffer() -> f32[1] loops=[0]
%8 = Fill(%7) {offset=0 fill_value=0} -> f32[1] loops=[0]
%9 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[0,1]
%10 = Subtract(%9, %6) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%11 = Exp(%10) -> f32[2,19] loops=[0,1]
%12 = Store(%11) {count=8 offset=0} -> f32[2,19] loops=[0,1]
%13 = Fill(%11) {offset=8 fill_value=0} -> f32[2,19] loops=[0,1]
%14 = Add(%13, %8) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%15 = Buffer(%12) {reg_group=-1 cluster_id=-1 offset=-1} -> f32[2,19] loops=[0]
%16 = HorizonSum(%14) -> f32[2,1] loops=[0]
%17 = PowerStatic(%16) {power=-1.0} -> f32[2,1] loops=[0]
%18 = BroadcastMove(%17) {broadcast_dim=19} -> f32[2,19] loops=[0]
%19 = Load(%15) {count=8 offset=0} -> f32[2,19] loops=[0,4]
%20 = Multiply(%19, %18) {auto_broadcast=numpy} -> f32[2,19] loops=[0,4]
%21 = Store(%20) {count=8 offset=0} -> f32[2,19] loops=[0,4]
%22 = Result(%21) -> f32[2,19]
loop 0 (unified): work_amount=2 increment=1 in=[%3.in0@d1 (0,0,0), %9.in0@d1 (0,0,0)] out=[%21@d1 (0,0,0)]
loop 1 (unified): work_amount=19 increment=8 in=[%9.in0@d0 (0,0,0), %10.in1@d0 (0,0,0)] out=[%12@d0 (0,0,0), \
%14@d0 (0,0,0)]
loop 4 (unified): work_amount=19 increment=8 in=[%19.in0@d0 (0,0,0), %20.in1@d0 (0,0,0)] out=[%21@d0 (0,0,0)]
loop 6 (unified): work_amount=19 increment=8 in=[%3.in0@d0 (0,0,0)] out=[%5@d0 (0,0,0)]"""

# InitLoops: memory ports move 1 per column and rewind by -19; the row loop moves 19 per row and
# rewinds by -38; register ports (HorizonMax into Subtract, accumulator outputs, the BroadcastMove into
# Multiply) are not_processed with no pointer arithmetic.
SOFTMAX_INIT_LOOPS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = VectorBuffer() -> f32[1] loops=[0]
%2 = Fill(%1) {offset=0 fill_value=4286578688} -> f32[1] loops=[0]
%3 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[0,6]
%4 = Fill(%3) {offset=8 fill_value=4286578688} -> f32[2,19] loops=[0,6]
%5 = Maximum(%4, %2) {auto_broadcast=numpy} -> f32[2,19] loops=[0,6]
%6 = HorizonMax(%5) -> f32[2,1] loops=[0]
%7 = VectorBuffer() -> f32[1] loops=[0]
%8 = Fill(%7) {offset=0 fill_value=0} -> f32[1] loops=[0]
%9 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[0,1]
%10 = Subtract(%9, %6) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%11 = Exp(%10) -> f32[2,19] loops=[0,1]
%12 = Store(%11) {count=8 offset=0} -> f32[2,19] loops=[0,1]
%13 = Fill(%11) {offset=8 fill_value=0} -> f32[2,19] loops=[0,1]
%14 = Add(%13, %8) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%15 = Buffer(%12) {reg_group=-1 cluster_id=-1 offset=-1} -> f32[2,19] loops=[0]
%16 = HorizonSum(%14) -> f32[2,1] loops=[0]
%17 = PowerStatic(%16) {power=-1.0} -> f32[2,1] loops=[0]
%18 = BroadcastMove(%17) {broadcast_dim=19} -> f32[2,19] loops=[0]
%19 = Load(%15) {count=8 offset=0} -> f32[2,19] loops=[0,4]
%20 = Multiply(%19, %18) {auto_broadcast=numpy} -> f32[2,19] loops=[0,4]
%21 = Store(%20) {count=8 offset=0} -> f32[2,19] loops=[0,4]
%22 = Result(%21) -> f32[2,19]
loop 0 (unified): work_amount=2 increment=1 in=[%3.in0@d1 (19,-38,4), %9.in0@d1 (19,-38,4)] out=[%21@d1 \
(19,-38,4)]
loop 1 (unified): work_amount=19 increment=8 in=[%9.in0@d0 (1,-19,4), %10.in1@d0 not_processed (0,0,0)] \
out=[%12@d0 (1,-19,4), %14@d0 not_processed (0,0,0)]
loop 4 (unified): work_amount=19 increment=8 in=[%19.in0@d0 (1,-19,4), %20.in1@d0 not_processed (0,0,0)] \
out=[%21@d0 (1,-19,4)]
loop 6 (unified): work_amount=19 increment=8 in=[%3.in0@d0 (1,-19,4)] out=[%5@d0 not_processed (0,0,0)]"""

# InsertLoops: LoopBegin/LoopEnd for the row loop and the three inner loops; each LoopEnd lists only
# its memory ports (the max loop only x).
SOFTMAX_INSERT_LOOPS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = LoopBegin() -> dynamic[]
%2 = VectorBuffer() -> f32[1] loops=[0]
%3 = Fill(%2) {offset=0 fill_value=4286578688} -> f32[1] loops=[0]
%4 = LoopBegin() -> dynamic[] loops=[0]
%5 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[0,6]
%6 = Fill(%5) {offset=8 fill_value=4286578688} -> f32[2,19] loops=[0,6]
%7 = Maximum(%6, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[0,6]
%8 = LoopEnd(%0, %4) {work_amount=19 increment=8 is_incremented=[True] ptr_increments=[1] \
finalization_offsets=[-19] element_type_sizes=[4] input_num=1 output_num=0 loop_id=6 evaluate_once=False} -> \
f32[2,19] loops=[0]
%9 = HorizonMax(%7) -> f32[2,1] loops=[0]
%10 = VectorBuffer() -> f32[1] loops=[0]
%11 = Fill(%10) {offset=0 fill_value=0} -> f32[1] loops=[0]
%12 = LoopBegin() -> dynamic[] loops=[0]
%13 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[0,1]
%14 = Subtract(%13, %9) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%15 = Exp(%14) -> f32[2,19] loops=[0,1]
%16 = Store(%15) {count=8 offset=0} -> f32[2,19] loops=[0,1]
%17 = Fill(%15) {offset=8 fill_value=0} -> f32[2,19] loops=[0,1]
%18 = Add(%17, %11) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%19 = LoopEnd(%0, %16, %12) {work_amount=19 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=1 evaluate_once=False} \
-> f32[2,19], f32[2,19] loops=[0]
%20 = Buffer(%16) {reg_group=-1 cluster_id=-1 offset=-1} -> f32[2,19] loops=[0]
%21 = HorizonSum(%18) -> f32[2,1] loops=[0]
%22 = PowerStatic(%21) {power=-1.0} -> f32[2,1] loops=[0]
%23 = BroadcastMove(%22) {broadcast_dim=19} -> f32[2,19] loops=[0]
%24 = LoopBegin() -> dynamic[] loops=[0]
%25 = Load(%20) {count=8 offset=0} -> f32[2,19] loops=[0,4]
%26 = Multiply(%25, %23) {auto_broadcast=numpy} -> f32[2,19] loops=[0,4]
%27 = Store(%26) {count=8 offset=0} -> f32[2,19] loops=[0,4]
%28 = LoopEnd(%20, %27, %24) {work_amount=19 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=4 evaluate_once=False} \
-> f32[2,19], f32[2,19] loops=[0]
%29 = LoopEnd(%0, %0, %27, %1) {work_amount=2 increment=1 is_incremented=[True,True,True] \
ptr_increments=[19,19,19] finalization_offsets=[-38,-38,-38] element_type_sizes=[4,4,4] input_num=2 output_num=1 \
loop_id=0 evaluate_once=False} -> f32[2,19], f32[2,19], f32[2,19]
%30 = Result(%27) -> f32[2,19]
loop 0 (unified): work_amount=2 increment=1 in=[%5.in0@d1 (19,-38,4), %13.in0@d1 (19,-38,4)] out=[%27@d1 \
(19,-38,4)]
loop 1 (unified): work_amount=19 increment=8 in=[%13.in0@d0 (1,-19,4), %14.in1@d0 not_processed (0,0,0)] \
out=[%16@d0 (1,-19,4), %18@d0 not_processed (0,0,0)]
loop 4 (unified): work_amount=19 increment=8 in=[%25.in0@d0 (1,-19,4), %26.in1@d0 not_processed (0,0,0)] \
out=[%27@d0 (1,-19,4)]
loop 6 (unified): work_amount=19 increment=8 in=[%5.in0@d0 (1,-19,4)] out=[%7@d0 not_processed (0,0,0)]"""

# AllocateBuffers: the single Buffer gets register group 0, cluster 0, offset 0 and 19 * 4 = 76
# bytes (one row: it lives inside the row loop).
SOFTMAX_ALLOCATE_BUFFERS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = LoopBegin() -> dynamic[]
%2 = VectorBuffer() -> f32[1] loops=[0]
%3 = Fill(%2) {offset=0 fill_value=4286578688} -> f32[1] loops=[0]
%4 = LoopBegin() -> dynamic[] loops=[0]
%5 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[0,6]
%6 = Fill(%5) {offset=8 fill_value=4286578688} -> f32[2,19] loops=[0,6]
%7 = Maximum(%6, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[0,6]
%8 = LoopEnd(%0, %4) {work_amount=19 increment=8 is_incremented=[True] ptr_increments=[1] \
finalization_offsets=[-19] element_type_sizes=[4] input_num=1 output_num=0 loop_id=6 evaluate_once=False} -> \
f32[2,19] loops=[0]
%9 = HorizonMax(%7) -> f32[2,1] loops=[0]
%10 = VectorBuffer() -> f32[1] loops=[0]
%11 = Fill(%10) {offset=0 fill_value=0} -> f32[1] loops=[0]
%12 = LoopBegin() -> dynamic[] loops=[0]
%13 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[0,1]
%14 = Subtract(%13, %9) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%15 = Exp(%14) -> f32[2,19] loops=[0,1]
%16 = Store(%15) {count=8 offset=0} -> f32[2,19] loops=[0,1]
%17 = Fill(%15) {offset=8 fill_value=0} -> f32[2,19] loops=[0,1]
%18 = Add(%17, %11) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%19 = LoopEnd(%0, %16, %12) {work_amount=19 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=1 evaluate_once=False} \
-> f32[2,19], f32[2,19] loops=[0]
%20 = Buffer(%16) {reg_group=0 cluster_id=0 offset=0 size=76} -> f32[2,19] loops=[0]
%21 = HorizonSum(%18) -> f32[2,1] loops=[0]
%22 = PowerStatic(%21) {power=-1.0} -> f32[2,1] loops=[0]
%23 = BroadcastMove(%22) {broadcast_dim=19} -> f32[2,19] loops=[0]
%24 = LoopBegin() -> dynamic[] loops=[0]
%25 = Load(%20) {count=8 offset=0} -> f32[2,19] loops=[0,4]
%26 = Multiply(%25, %23) {auto_broadcast=numpy} -> f32[2,19] loops=[0,4]
%27 = Store(%26) {count=8 offset=0} -> f32[2,19] loops=[0,4]
%28 = LoopEnd(%20, %27, %24) {work_amount=19 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=4 evaluate_once=False} \
-> f32[2,19], f32[2,19] loops=[0]
%29 = LoopEnd(%0, %0, %27, %1) {work_amount=2 increment=1 is_incremented=[True,True,True] \
ptr_increments=[19,19,19] finalization_offsets=[-38,-38,-38] element_type_sizes=[4,4,4] input_num=2 output_num=1 \
loop_id=0 evaluate_once=False} -> f32[2,19], f32[2,19], f32[2,19]
%30 = Result(%27) -> f32[2,19]
loop 0 (unified): work_amount=2 increment=1 in=[%5.in0@d1 (19,-38,4), %13.in0@d1 (19,-38,4)] out=[%27@d1 \
(19,-38,4)]
loop 1 (unified): work_amount=19 increment=8 in=[%13.in0@d0 (1,-19,4), %14.in1@d0 not_processed (0,0,0)] \
out=[%16@d0 (1,-19,4), %18@d0 not_processed (0,0,0)]
loop 4 (unified): work_amount=19 increment=8 in=[%25.in0@d0 (1,-19,4), %26.in1@d0 not_processed (0,0,0)] \
out=[%27@d0 (1,-19,4)]
loop 6 (unified): work_amount=19 increment=8 in=[%5.in0@d0 (1,-19,4)] out=[%7@d0 not_processed (0,0,0)]"""

# CleanRepeatedDataPointerShifts: both x ports of the row loop are the same pointer, so only
# the first keeps its shift (19, -38); the second becomes (0, 0).
SOFTMAX_CLEAN_REPEATED_DATA_POINTER_SHIFTS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = LoopBegin() -> dynamic[]
%2 = VectorBuffer() -> f32[1] loops=[0]
%3 = Fill(%2) {offset=0 fill_value=4286578688} -> f32[1] loops=[0]
%4 = LoopBegin() -> dynamic[] loops=[0]
%5 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[0,6]
%6 = Fill(%5) {offset=8 fill_value=4286578688} -> f32[2,19] loops=[0,6]
%7 = Maximum(%6, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[0,6]
%8 = LoopEnd(%0, %4) {work_amount=19 increment=8 is_incremented=[True] ptr_increments=[1] \
finalization_offsets=[-19] element_type_sizes=[4] input_num=1 output_num=0 loop_id=6 evaluate_once=False} -> \
f32[2,19] loops=[0]
%9 = HorizonMax(%7) -> f32[2,1] loops=[0]
%10 = VectorBuffer() -> f32[1] loops=[0]
%11 = Fill(%10) {offset=0 fill_value=0} -> f32[1] loops=[0]
%12 = LoopBegin() -> dynamic[] loops=[0]
%13 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[0,1]
%14 = Subtract(%13, %9) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%15 = Exp(%14) -> f32[2,19] loops=[0,1]
%16 = Store(%15) {count=8 offset=0} -> f32[2,19] loops=[0,1]
%17 = Fill(%15) {offset=8 fill_value=0} -> f32[2,19] loops=[0,1]
%18 = Add(%17, %11) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%19 = LoopEnd(%0, %16, %12) {work_amount=19 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=1 evaluate_once=False} \
-> f32[2,19], f32[2,19] loops=[0]
%20 = Buffer(%16) {reg_group=0 cluster_id=0 offset=0 size=76} -> f32[2,19] loops=[0]
%21 = HorizonSum(%18) -> f32[2,1] loops=[0]
%22 = PowerStatic(%21) {power=-1.0} -> f32[2,1] loops=[0]
%23 = BroadcastMove(%22) {broadcast_dim=19} -> f32[2,19] loops=[0]
%24 = LoopBegin() -> dynamic[] loops=[0]
%25 = Load(%20) {count=8 offset=0} -> f32[2,19] loops=[0,4]
%26 = Multiply(%25, %23) {auto_broadcast=numpy} -> f32[2,19] loops=[0,4]
%27 = Store(%26) {count=8 offset=0} -> f32[2,19] loops=[0,4]
%28 = LoopEnd(%20, %27, %24) {work_amount=19 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=4 evaluate_once=False} \
-> f32[2,19], f32[2,19] loops=[0]
%29 = LoopEnd(%0, %0, %27, %1) {work_amount=2 increment=1 is_incremented=[True,True,True] \
ptr_increments=[19,0,19] finalization_offsets=[-38,0,-38] element_type_sizes=[4,4,4] input_num=2 output_num=1 \
loop_id=0 evaluate_once=False} -> f32[2,19], f32[2,19], f32[2,19]
%30 = Result(%27) -> f32[2,19]
loop 0 (unified): work_amount=2 increment=1 in=[%5.in0@d1 (19,-38,4), %13.in0@d1 (0,0,4)] out=[%27@d1 (19,-38,4)]
loop 1 (unified): work_amount=19 increment=8 in=[%13.in0@d0 (1,-19,4), %14.in1@d0 not_processed (0,0,0)] \
out=[%16@d0 (1,-19,4), %18@d0 not_processed (0,0,0)]
loop 4 (unified): work_amount=19 increment=8 in=[%25.in0@d0 (1,-19,4), %26.in1@d0 not_processed (0,0,0)] \
out=[%27@d0 (1,-19,4)]
loop 6 (unified): work_amount=19 increment=8 in=[%5.in0@d0 (1,-19,4)] out=[%7@d0 not_processed (0,0,0)]"""

# InsertSpecificIterations: each of the three inner loops splits into a main body of 16 by 8
# (finalization 0) and a tail of 3 by 3 (Load/Store count 3, Fill offset 3: lanes 3..7 get the neutral value)
# rewinding by -19; tails are new loops 7, 8, 9 (one per split loop in order of the loop ids 1, 4, 6). The
# tail copies keep the main body's accumulators and registers.
SOFTMAX_INSERT_SPECIFIC_ITERATIONS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = LoopBegin() -> dynamic[]
%2 = VectorBuffer() -> f32[1] loops=[0]
%3 = Fill(%2) {offset=0 fill_value=4286578688} -> f32[1] loops=[0]
%4 = LoopBegin() -> dynamic[] loops=[0]
%5 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[0,6]
%6 = Fill(%5) {offset=8 fill_value=4286578688} -> f32[2,19] loops=[0,6]
%7 = Maximum(%6, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[0,6]
%8 = LoopEnd(%0, %4) {work_amount=16 increment=8 is_incremented=[True] ptr_increments=[1] \
finalization_offsets=[0] element_type_sizes=[4] input_num=1 output_num=0 loop_id=6 evaluate_once=False} -> \
f32[2,19] loops=[0]
%9 = LoopBegin() -> dynamic[] loops=[0]
%10 = Load(%0) {count=3 offset=0} -> f32[2,19] loops=[0,9]
%11 = Fill(%10) {offset=3 fill_value=4286578688} -> f32[2,19] loops=[0,9]
%12 = Maximum(%11, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[0,9]
%13 = LoopEnd(%0, %9) {work_amount=3 increment=3 is_incremented=[True] ptr_increments=[1] \
finalization_offsets=[-19] element_type_sizes=[4] input_num=1 output_num=0 loop_id=9 evaluate_once=False} -> \
f32[2,19] loops=[0]
%14 = HorizonMax(%7) -> f32[2,1] loops=[0]
%15 = VectorBuffer() -> f32[1] loops=[0]
%16 = Fill(%15) {offset=0 fill_value=0} -> f32[1] loops=[0]
%17 = LoopBegin() -> dynamic[] loops=[0]
%18 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[0,1]
%19 = Subtract(%18, %14) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%20 = Exp(%19) -> f32[2,19] loops=[0,1]
%21 = Store(%20) {count=8 offset=0} -> f32[2,19] loops=[0,1]
%22 = Fill(%20) {offset=8 fill_value=0} -> f32[2,19] loops=[0,1]
%23 = Add(%22, %16) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%24 = LoopEnd(%0, %21, %17) {work_amount=16 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=1 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[0]
%25 = LoopBegin() -> dynamic[] loops=[0]
%26 = Load(%0) {count=3 offset=0} -> f32[2,19] loops=[0,7]
%27 = Subtract(%26, %14) {auto_broadcast=numpy} -> f32[2,19] loops=[0,7]
%28 = Exp(%27) -> f32[2,19] loops=[0,7]
%29 = Store(%28) {count=3 offset=0} -> f32[2,19] loops=[0,7]
%30 = Fill(%28) {offset=3 fill_value=0} -> f32[2,19] loops=[0,7]
%31 = Add(%30, %16) {auto_broadcast=numpy} -> f32[2,19] loops=[0,7]
%32 = LoopEnd(%0, %29, %25) {work_amount=3 increment=3 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=7 evaluate_once=False} \
-> f32[2,19], f32[2,19] loops=[0]
%33 = Buffer(%21) {reg_group=0 cluster_id=0 offset=0 size=76} -> f32[2,19] loops=[0]
%34 = HorizonSum(%23) -> f32[2,1] loops=[0]
%35 = PowerStatic(%34) {power=-1.0} -> f32[2,1] loops=[0]
%36 = BroadcastMove(%35) {broadcast_dim=19} -> f32[2,19] loops=[0]
%37 = LoopBegin() -> dynamic[] loops=[0]
%38 = Load(%33) {count=8 offset=0} -> f32[2,19] loops=[0,4]
%39 = Multiply(%38, %36) {auto_broadcast=numpy} -> f32[2,19] loops=[0,4]
%40 = Store(%39) {count=8 offset=0} -> f32[2,19] loops=[0,4]
%41 = LoopEnd(%33, %40, %37) {work_amount=16 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=4 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[0]
%42 = LoopBegin() -> dynamic[] loops=[0]
%43 = Load(%33) {count=3 offset=0} -> f32[2,19] loops=[0,8]
%44 = Multiply(%43, %36) {auto_broadcast=numpy} -> f32[2,19] loops=[0,8]
%45 = Store(%44) {count=3 offset=0} -> f32[2,19] loops=[0,8]
%46 = LoopEnd(%33, %45, %42) {work_amount=3 increment=3 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=8 evaluate_once=False} \
-> f32[2,19], f32[2,19] loops=[0]
%47 = LoopEnd(%0, %0, %40, %1) {work_amount=2 increment=1 is_incremented=[True,True,True] \
ptr_increments=[19,0,19] finalization_offsets=[-38,0,-38] element_type_sizes=[4,4,4] input_num=2 output_num=1 \
loop_id=0 evaluate_once=False} -> f32[2,19], f32[2,19], f32[2,19]
%48 = Result(%40) -> f32[2,19]
loop 0 (expanded main): work_amount=2 increment=1 in=[%5.in0@d1 (19,-38,4), %18.in0@d1 (0,0,4)] out=[%40@d1 \
(19,-38,4)]
loop 1 (expanded main): work_amount=16 increment=8 in=[%18.in0@d0 (1,0,4), %19.in1@d0 not_processed (0,0,0)] \
out=[%21@d0 (1,0,4), %23@d0 not_processed (0,0,0)]
loop 4 (expanded main): work_amount=16 increment=8 in=[%38.in0@d0 (1,0,4), %39.in1@d0 not_processed (0,0,0)] \
out=[%40@d0 (1,0,4)]
loop 6 (expanded main): work_amount=16 increment=8 in=[%5.in0@d0 (1,0,4)] out=[%7@d0 not_processed (0,0,0)]
loop 7 (expanded last): work_amount=3 increment=3 in=[%26.in0@d0 (1,-19,4), %27.in1@d0 not_processed (0,0,0)] \
out=[%29@d0 (1,-19,4), %31@d0 not_processed (0,0,0)]
loop 8 (expanded last): work_amount=3 increment=3 in=[%43.in0@d0 (1,-19,4), %44.in1@d0 not_processed (0,0,0)] \
out=[%45@d0 (1,-19,4)]
loop 9 (expanded last): work_amount=3 increment=3 in=[%10.in0@d0 (1,-19,4)] out=[%12@d0 not_processed (0,0,0)]"""

# NormalizeLoopIDs: loops numbered in the order their LoopEnds run: max main 0, max tail 1,
# exp main 2, exp tail 3, multiply main 4, multiply tail 5, rows 6.
SOFTMAX_NORMALIZE_LOOP_IDS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = LoopBegin() -> dynamic[]
%2 = VectorBuffer() -> f32[1] loops=[6]
%3 = Fill(%2) {offset=0 fill_value=4286578688} -> f32[1] loops=[6]
%4 = LoopBegin() -> dynamic[] loops=[6]
%5 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[6,0]
%6 = Fill(%5) {offset=8 fill_value=4286578688} -> f32[2,19] loops=[6,0]
%7 = Maximum(%6, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[6,0]
%8 = LoopEnd(%0, %4) {work_amount=16 increment=8 is_incremented=[True] ptr_increments=[1] \
finalization_offsets=[0] element_type_sizes=[4] input_num=1 output_num=0 loop_id=0 evaluate_once=False} -> \
f32[2,19] loops=[6]
%9 = LoopBegin() -> dynamic[] loops=[6]
%10 = Load(%0) {count=3 offset=0} -> f32[2,19] loops=[6,1]
%11 = Fill(%10) {offset=3 fill_value=4286578688} -> f32[2,19] loops=[6,1]
%12 = Maximum(%11, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[6,1]
%13 = LoopEnd(%0, %9) {work_amount=3 increment=3 is_incremented=[True] ptr_increments=[1] \
finalization_offsets=[-19] element_type_sizes=[4] input_num=1 output_num=0 loop_id=1 evaluate_once=False} -> \
f32[2,19] loops=[6]
%14 = HorizonMax(%7) -> f32[2,1] loops=[6]
%15 = VectorBuffer() -> f32[1] loops=[6]
%16 = Fill(%15) {offset=0 fill_value=0} -> f32[1] loops=[6]
%17 = LoopBegin() -> dynamic[] loops=[6]
%18 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[6,2]
%19 = Subtract(%18, %14) {auto_broadcast=numpy} -> f32[2,19] loops=[6,2]
%20 = Exp(%19) -> f32[2,19] loops=[6,2]
%21 = Store(%20) {count=8 offset=0} -> f32[2,19] loops=[6,2]
%22 = Fill(%20) {offset=8 fill_value=0} -> f32[2,19] loops=[6,2]
%23 = Add(%22, %16) {auto_broadcast=numpy} -> f32[2,19] loops=[6,2]
%24 = LoopEnd(%0, %21, %17) {work_amount=16 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=2 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[6]
%25 = LoopBegin() -> dynamic[] loops=[6]
%26 = Load(%0) {count=3 offset=0} -> f32[2,19] loops=[6,3]
%27 = Subtract(%26, %14) {auto_broadcast=numpy} -> f32[2,19] loops=[6,3]
%28 = Exp(%27) -> f32[2,19] loops=[6,3]
%29 = Store(%28) {count=3 offset=0} -> f32[2,19] loops=[6,3]
%30 = Fill(%28) {offset=3 fill_value=0} -> f32[2,19] loops=[6,3]
%31 = Add(%30, %16) {auto_broadcast=numpy} -> f32[2,19] loops=[6,3]
%32 = LoopEnd(%0, %29, %25) {work_amount=3 increment=3 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=3 evaluate_once=False} \
-> f32[2,19], f32[2,19] loops=[6]
%33 = Buffer(%21) {reg_group=0 cluster_id=0 offset=0 size=76} -> f32[2,19] loops=[6]
%34 = HorizonSum(%23) -> f32[2,1] loops=[6]
%35 = PowerStatic(%34) {power=-1.0} -> f32[2,1] loops=[6]
%36 = BroadcastMove(%35) {broadcast_dim=19} -> f32[2,19] loops=[6]
%37 = LoopBegin() -> dynamic[] loops=[6]
%38 = Load(%33) {count=8 offset=0} -> f32[2,19] loops=[6,4]
%39 = Multiply(%38, %36) {auto_broadcast=numpy} -> f32[2,19] loops=[6,4]
%40 = Store(%39) {count=8 offset=0} -> f32[2,19] loops=[6,4]
%41 = LoopEnd(%33, %40, %37) {work_amount=16 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=4 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[6]
%42 = LoopBegin() -> dynamic[] loops=[6]
%43 = Load(%33) {count=3 offset=0} -> f32[2,19] loops=[6,5]
%44 = Multiply(%43, %36) {auto_broadcast=numpy} -> f32[2,19] loops=[6,5]
%45 = Store(%44) {count=3 offset=0} -> f32[2,19] loops=[6,5]
%46 = LoopEnd(%33, %45, %42) {work_amount=3 increment=3 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=5 evaluate_once=False} \
-> f32[2,19], f32[2,19] loops=[6]
%47 = LoopEnd(%0, %0, %40, %1) {work_amount=2 increment=1 is_incremented=[True,True,True] \
ptr_increments=[19,0,19] finalization_offsets=[-38,0,-38] element_type_sizes=[4,4,4] input_num=2 output_num=1 \
loop_id=6 evaluate_once=False} -> f32[2,19], f32[2,19], f32[2,19]
%48 = Result(%40) -> f32[2,19]
loop 0 (expanded main): work_amount=16 increment=8 in=[%5.in0@d0 (1,0,4)] out=[%7@d0 not_processed (0,0,0)]
loop 1 (expanded last): work_amount=3 increment=3 in=[%10.in0@d0 (1,-19,4)] out=[%12@d0 not_processed (0,0,0)]
loop 2 (expanded main): work_amount=16 increment=8 in=[%18.in0@d0 (1,0,4), %19.in1@d0 not_processed (0,0,0)] \
out=[%21@d0 (1,0,4), %23@d0 not_processed (0,0,0)]
loop 3 (expanded last): work_amount=3 increment=3 in=[%26.in0@d0 (1,-19,4), %27.in1@d0 not_processed (0,0,0)] \
out=[%29@d0 (1,-19,4), %31@d0 not_processed (0,0,0)]
loop 4 (expanded main): work_amount=16 increment=8 in=[%38.in0@d0 (1,0,4), %39.in1@d0 not_processed (0,0,0)] \
out=[%40@d0 (1,0,4)]
loop 5 (expanded last): work_amount=3 increment=3 in=[%43.in0@d0 (1,-19,4), %44.in1@d0 not_processed (0,0,0)] \
out=[%45@d0 (1,-19,4)]
loop 6 (expanded main): work_amount=2 increment=1 in=[%5.in0@d1 (19,-38,4), %18.in0@d1 (0,0,4)] out=[%40@d1 \
(19,-38,4)]"""

# CleanupLoopOffsets: only the loop ending right before the row LoopEnd (the Multiply tail) folds
# into it: its output rewind (-19) cancels the row loop's output increment (19 - 19 = 0); the Buffer rewind stays
# (the row loop does not shift the Buffer); the last loop drops its finalization offsets (only the Result
# follows).
SOFTMAX_CLEANUP_LOOP_OFFSETS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = LoopBegin() -> dynamic[]
%2 = VectorBuffer() -> f32[1] loops=[6]
%3 = Fill(%2) {offset=0 fill_value=4286578688} -> f32[1] loops=[6]
%4 = LoopBegin() -> dynamic[] loops=[6]
%5 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[6,0]
%6 = Fill(%5) {offset=8 fill_value=4286578688} -> f32[2,19] loops=[6,0]
%7 = Maximum(%6, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[6,0]
%8 = LoopEnd(%0, %4) {work_amount=16 increment=8 is_incremented=[True] ptr_increments=[1] \
finalization_offsets=[0] element_type_sizes=[4] input_num=1 output_num=0 loop_id=0 evaluate_once=False} -> \
f32[2,19] loops=[6]
%9 = LoopBegin() -> dynamic[] loops=[6]
%10 = Load(%0) {count=3 offset=0} -> f32[2,19] loops=[6,1]
%11 = Fill(%10) {offset=3 fill_value=4286578688} -> f32[2,19] loops=[6,1]
%12 = Maximum(%11, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[6,1]
%13 = LoopEnd(%0, %9) {work_amount=3 increment=3 is_incremented=[True] ptr_increments=[1] \
finalization_offsets=[-19] element_type_sizes=[4] input_num=1 output_num=0 loop_id=1 evaluate_once=False} -> \
f32[2,19] loops=[6]
%14 = HorizonMax(%7) -> f32[2,1] loops=[6]
%15 = VectorBuffer() -> f32[1] loops=[6]
%16 = Fill(%15) {offset=0 fill_value=0} -> f32[1] loops=[6]
%17 = LoopBegin() -> dynamic[] loops=[6]
%18 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[6,2]
%19 = Subtract(%18, %14) {auto_broadcast=numpy} -> f32[2,19] loops=[6,2]
%20 = Exp(%19) -> f32[2,19] loops=[6,2]
%21 = Store(%20) {count=8 offset=0} -> f32[2,19] loops=[6,2]
%22 = Fill(%20) {offset=8 fill_value=0} -> f32[2,19] loops=[6,2]
%23 = Add(%22, %16) {auto_broadcast=numpy} -> f32[2,19] loops=[6,2]
%24 = LoopEnd(%0, %21, %17) {work_amount=16 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=2 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[6]
%25 = LoopBegin() -> dynamic[] loops=[6]
%26 = Load(%0) {count=3 offset=0} -> f32[2,19] loops=[6,3]
%27 = Subtract(%26, %14) {auto_broadcast=numpy} -> f32[2,19] loops=[6,3]
%28 = Exp(%27) -> f32[2,19] loops=[6,3]
%29 = Store(%28) {count=3 offset=0} -> f32[2,19] loops=[6,3]
%30 = Fill(%28) {offset=3 fill_value=0} -> f32[2,19] loops=[6,3]
%31 = Add(%30, %16) {auto_broadcast=numpy} -> f32[2,19] loops=[6,3]
%32 = LoopEnd(%0, %29, %25) {work_amount=3 increment=3 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=3 evaluate_once=False} \
-> f32[2,19], f32[2,19] loops=[6]
%33 = Buffer(%21) {reg_group=0 cluster_id=0 offset=0 size=76} -> f32[2,19] loops=[6]
%34 = HorizonSum(%23) -> f32[2,1] loops=[6]
%35 = PowerStatic(%34) {power=-1.0} -> f32[2,1] loops=[6]
%36 = BroadcastMove(%35) {broadcast_dim=19} -> f32[2,19] loops=[6]
%37 = LoopBegin() -> dynamic[] loops=[6]
%38 = Load(%33) {count=8 offset=0} -> f32[2,19] loops=[6,4]
%39 = Multiply(%38, %36) {auto_broadcast=numpy} -> f32[2,19] loops=[6,4]
%40 = Store(%39) {count=8 offset=0} -> f32[2,19] loops=[6,4]
%41 = LoopEnd(%33, %40, %37) {work_amount=16 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=4 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[6]
%42 = LoopBegin() -> dynamic[] loops=[6]
%43 = Load(%33) {count=3 offset=0} -> f32[2,19] loops=[6,5]
%44 = Multiply(%43, %36) {auto_broadcast=numpy} -> f32[2,19] loops=[6,5]
%45 = Store(%44) {count=3 offset=0} -> f32[2,19] loops=[6,5]
%46 = LoopEnd(%33, %45, %42) {work_amount=3 increment=3 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=5 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[6]
%47 = LoopEnd(%0, %0, %40, %1) {work_amount=2 increment=1 is_incremented=[True,True,True] ptr_increments=[19,0,0] \
finalization_offsets=[0,0,0] element_type_sizes=[4,4,4] input_num=2 output_num=1 loop_id=6 evaluate_once=False} \
-> f32[2,19], f32[2,19], f32[2,19]
%48 = Result(%40) -> f32[2,19]
loop 0 (expanded main): work_amount=16 increment=8 in=[%5.in0@d0 (1,0,4)] out=[%7@d0 not_processed (0,0,0)]
loop 1 (expanded last): work_amount=3 increment=3 in=[%10.in0@d0 (1,-19,4)] out=[%12@d0 not_processed (0,0,0)]
loop 2 (expanded main): work_amount=16 increment=8 in=[%18.in0@d0 (1,0,4), %19.in1@d0 not_processed (0,0,0)] \
out=[%21@d0 (1,0,4), %23@d0 not_processed (0,0,0)]
loop 3 (expanded last): work_amount=3 increment=3 in=[%26.in0@d0 (1,-19,4), %27.in1@d0 not_processed (0,0,0)] \
out=[%29@d0 (1,-19,4), %31@d0 not_processed (0,0,0)]
loop 4 (expanded main): work_amount=16 increment=8 in=[%38.in0@d0 (1,0,4), %39.in1@d0 not_processed (0,0,0)] \
out=[%40@d0 (1,0,4)]
loop 5 (expanded last): work_amount=3 increment=3 in=[%43.in0@d0 (1,-19,4), %44.in1@d0 not_processed (0,0,0)] \
out=[%45@d0 (1,0,4)]
loop 6 (expanded main): work_amount=2 increment=1 in=[%5.in0@d1 (19,0,4), %18.in0@d1 (0,0,4)] out=[%40@d1 (0,0,4)]"""

# OptimizeLoopSingleEvaluation: the three tails run once: increments move into finalization
# offsets (-19 + 3 = -16; the output's 0 + 3 = 3) and they are marked evaluate_once.
SOFTMAX_OPTIMIZE_LOOP_SINGLE_EVALUATION = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = LoopBegin() -> dynamic[]
%2 = VectorBuffer() -> f32[1] loops=[6]
%3 = Fill(%2) {offset=0 fill_value=4286578688} -> f32[1] loops=[6]
%4 = LoopBegin() -> dynamic[] loops=[6]
%5 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[6,0]
%6 = Fill(%5) {offset=8 fill_value=4286578688} -> f32[2,19] loops=[6,0]
%7 = Maximum(%6, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[6,0]
%8 = LoopEnd(%0, %4) {work_amount=16 increment=8 is_incremented=[True] ptr_increments=[1] \
finalization_offsets=[0] element_type_sizes=[4] input_num=1 output_num=0 loop_id=0 evaluate_once=False} -> \
f32[2,19] loops=[6]
%9 = LoopBegin() -> dynamic[] loops=[6]
%10 = Load(%0) {count=3 offset=0} -> f32[2,19] loops=[6,1]
%11 = Fill(%10) {offset=3 fill_value=4286578688} -> f32[2,19] loops=[6,1]
%12 = Maximum(%11, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[6,1]
%13 = LoopEnd(%0, %9) {work_amount=3 increment=3 is_incremented=[True] ptr_increments=[0] \
finalization_offsets=[-16] element_type_sizes=[4] input_num=1 output_num=0 loop_id=1 evaluate_once=True} -> \
f32[2,19] loops=[6]
%14 = HorizonMax(%7) -> f32[2,1] loops=[6]
%15 = VectorBuffer() -> f32[1] loops=[6]
%16 = Fill(%15) {offset=0 fill_value=0} -> f32[1] loops=[6]
%17 = LoopBegin() -> dynamic[] loops=[6]
%18 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[6,2]
%19 = Subtract(%18, %14) {auto_broadcast=numpy} -> f32[2,19] loops=[6,2]
%20 = Exp(%19) -> f32[2,19] loops=[6,2]
%21 = Store(%20) {count=8 offset=0} -> f32[2,19] loops=[6,2]
%22 = Fill(%20) {offset=8 fill_value=0} -> f32[2,19] loops=[6,2]
%23 = Add(%22, %16) {auto_broadcast=numpy} -> f32[2,19] loops=[6,2]
%24 = LoopEnd(%0, %21, %17) {work_amount=16 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=2 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[6]
%25 = LoopBegin() -> dynamic[] loops=[6]
%26 = Load(%0) {count=3 offset=0} -> f32[2,19] loops=[6,3]
%27 = Subtract(%26, %14) {auto_broadcast=numpy} -> f32[2,19] loops=[6,3]
%28 = Exp(%27) -> f32[2,19] loops=[6,3]
%29 = Store(%28) {count=3 offset=0} -> f32[2,19] loops=[6,3]
%30 = Fill(%28) {offset=3 fill_value=0} -> f32[2,19] loops=[6,3]
%31 = Add(%30, %16) {auto_broadcast=numpy} -> f32[2,19] loops=[6,3]
%32 = LoopEnd(%0, %29, %25) {work_amount=3 increment=3 is_incremented=[True,True] ptr_increments=[0,0] \
finalization_offsets=[-16,-16] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=3 evaluate_once=True} -> \
f32[2,19], f32[2,19] loops=[6]
%33 = Buffer(%21) {reg_group=0 cluster_id=0 offset=0 size=76} -> f32[2,19] loops=[6]
%34 = HorizonSum(%23) -> f32[2,1] loops=[6]
%35 = PowerStatic(%34) {power=-1.0} -> f32[2,1] loops=[6]
%36 = BroadcastMove(%35) {broadcast_dim=19} -> f32[2,19] loops=[6]
%37 = LoopBegin() -> dynamic[] loops=[6]
%38 = Load(%33) {count=8 offset=0} -> f32[2,19] loops=[6,4]
%39 = Multiply(%38, %36) {auto_broadcast=numpy} -> f32[2,19] loops=[6,4]
%40 = Store(%39) {count=8 offset=0} -> f32[2,19] loops=[6,4]
%41 = LoopEnd(%33, %40, %37) {work_amount=16 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=4 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[6]
%42 = LoopBegin() -> dynamic[] loops=[6]
%43 = Load(%33) {count=3 offset=0} -> f32[2,19] loops=[6,5]
%44 = Multiply(%43, %36) {auto_broadcast=numpy} -> f32[2,19] loops=[6,5]
%45 = Store(%44) {count=3 offset=0} -> f32[2,19] loops=[6,5]
%46 = LoopEnd(%33, %45, %42) {work_amount=3 increment=3 is_incremented=[True,True] ptr_increments=[0,0] \
finalization_offsets=[-16,3] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=5 evaluate_once=True} -> \
f32[2,19], f32[2,19] loops=[6]
%47 = LoopEnd(%0, %0, %40, %1) {work_amount=2 increment=1 is_incremented=[True,True,True] ptr_increments=[19,0,0] \
finalization_offsets=[0,0,0] element_type_sizes=[4,4,4] input_num=2 output_num=1 loop_id=6 evaluate_once=False} \
-> f32[2,19], f32[2,19], f32[2,19]
%48 = Result(%40) -> f32[2,19]
loop 0 (expanded main): work_amount=16 increment=8 in=[%5.in0@d0 (1,0,4)] out=[%7@d0 not_processed (0,0,0)]
loop 1 (expanded last once): work_amount=3 increment=3 in=[%10.in0@d0 (0,-16,4)] out=[%12@d0 not_processed \
(0,0,0)]
loop 2 (expanded main): work_amount=16 increment=8 in=[%18.in0@d0 (1,0,4), %19.in1@d0 not_processed (0,0,0)] \
out=[%21@d0 (1,0,4), %23@d0 not_processed (0,0,0)]
loop 3 (expanded last once): work_amount=3 increment=3 in=[%26.in0@d0 (0,-16,4), %27.in1@d0 not_processed \
(0,0,0)] out=[%29@d0 (0,-16,4), %31@d0 not_processed (0,0,0)]
loop 4 (expanded main): work_amount=16 increment=8 in=[%38.in0@d0 (1,0,4), %39.in1@d0 not_processed (0,0,0)] \
out=[%40@d0 (1,0,4)]
loop 5 (expanded last once): work_amount=3 increment=3 in=[%43.in0@d0 (0,-16,4), %44.in1@d0 not_processed \
(0,0,0)] out=[%45@d0 (0,3,4)]
loop 6 (expanded main): work_amount=2 increment=1 in=[%5.in0@d1 (19,0,4), %18.in0@d1 (0,0,4)] out=[%40@d1 (0,0,4)]"""

# InitLiveRanges: abstract registers; each accumulator op (Maximum, Add) writes the register of
# its accumulator input; the Buffer shares the register of the Store that writes it.
SOFTMAX_REGS_INIT_LIVE_RANGES = """\
%0 Parameter in=[] out=[gpr[0]]
%1 LoopBegin in=[] out=[gpr[1]]
%2 VectorBuffer in=[] out=[vec[0]]
%3 Fill in=[vec[0]] out=[vec[1]]
%4 LoopBegin in=[] out=[gpr[2]]
%5 Load in=[gpr[0]] out=[vec[2]]
%6 Fill in=[vec[2]] out=[vec[3]]
%7 Maximum in=[vec[3],vec[1]] out=[vec[1]]
%8 LoopEnd in=[gpr[0],gpr[2]] out=[]
%9 HorizonMax in=[vec[1]] out=[vec[4]]
%10 VectorBuffer in=[] out=[vec[5]]
%11 Fill in=[vec[5]] out=[vec[6]]
%12 LoopBegin in=[] out=[gpr[3]]
%13 Load in=[gpr[0]] out=[vec[7]]
%14 Subtract in=[vec[7],vec[4]] out=[vec[8]]
%15 Exp in=[vec[8]] out=[vec[9]]
%16 Store in=[vec[9]] out=[gpr[4]]
%17 Fill in=[vec[9]] out=[vec[10]]
%18 Add in=[vec[10],vec[6]] out=[vec[6]]
%19 LoopEnd in=[gpr[0],gpr[4],gpr[3]] out=[]
%20 Buffer in=[gpr[4]] out=[gpr[4]]
%21 HorizonSum in=[vec[6]] out=[vec[11]]
%22 PowerStatic in=[vec[11]] out=[vec[12]]
%23 BroadcastMove in=[vec[12]] out=[vec[13]]
%24 LoopBegin in=[] out=[gpr[5]]
%25 Load in=[gpr[4]] out=[vec[14]]
%26 Multiply in=[vec[14],vec[13]] out=[vec[15]]
%27 Store in=[vec[15]] out=[gpr[6]]
%28 LoopEnd in=[gpr[4],gpr[6],gpr[5]] out=[]
%29 LoopEnd in=[gpr[0],gpr[0],gpr[6],gpr[1]] out=[]
%30 Result in=[gpr[6]] out=[]"""

# AssignRegisters: x gpr0, output gpr1, the Buffer gpr2 (inputs, outputs, buffers); the row loop
# counter gpr3, the inner loops reuse gpr4 one after another; HorizonMax's vec0 stays live across the Subtract
# loop, the accumulators keep vec1/vec2.
SOFTMAX_REGS_ASSIGN_REGISTERS = """\
%0 Parameter in=[] out=[gpr[0]]
%1 LoopBegin in=[] out=[gpr[3]]
%2 VectorBuffer in=[] out=[vec[0]]
%3 Fill in=[vec[0]] out=[vec[1]]
%4 LoopBegin in=[] out=[gpr[4]]
%5 Load in=[gpr[0]] out=[vec[0]]
%6 Fill in=[vec[0]] out=[vec[2]]
%7 Maximum in=[vec[2],vec[1]] out=[vec[1]]
%8 LoopEnd in=[gpr[0],gpr[4]] out=[]
%9 HorizonMax in=[vec[1]] out=[vec[0]]
%10 VectorBuffer in=[] out=[vec[1]]
%11 Fill in=[vec[1]] out=[vec[2]]
%12 LoopBegin in=[] out=[gpr[4]]
%13 Load in=[gpr[0]] out=[vec[1]]
%14 Subtract in=[vec[1],vec[0]] out=[vec[3]]
%15 Exp in=[vec[3]] out=[vec[1]]
%16 Store in=[vec[1]] out=[gpr[2]]
%17 Fill in=[vec[1]] out=[vec[3]]
%18 Add in=[vec[3],vec[2]] out=[vec[2]]
%19 LoopEnd in=[gpr[0],gpr[2],gpr[4]] out=[]
%20 Buffer in=[gpr[2]] out=[gpr[2]]
%21 HorizonSum in=[vec[2]] out=[vec[0]]
%22 PowerStatic in=[vec[0]] out=[vec[1]]
%23 BroadcastMove in=[vec[1]] out=[vec[0]]
%24 LoopBegin in=[] out=[gpr[4]]
%25 Load in=[gpr[2]] out=[vec[1]]
%26 Multiply in=[vec[1],vec[0]] out=[vec[2]]
%27 Store in=[vec[2]] out=[gpr[1]]
%28 LoopEnd in=[gpr[2],gpr[1],gpr[4]] out=[]
%29 LoopEnd in=[gpr[0],gpr[0],gpr[1],gpr[3]] out=[]
%30 Result in=[gpr[1]] out=[]"""

# Start: the data-flow passes turned the scalar Constant into a Scalar.
SCALAR_OPTIMIZE_DOMAIN = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = Scalar() {value=2.0} -> f32[]
%2 = Multiply(%0, %1) {auto_broadcast=numpy} -> f32[2,19]
%3 = Result(%2) -> f32[2,19]"""

# MarkLoops: the Scalar and Multiply share the nest (the Scalar is no loop port: it has no input).
SCALAR_MARK_LOOPS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = Scalar() {value=2.0} -> f32[] loops=[1,0]
%2 = Multiply(%0, %1) {auto_broadcast=numpy} -> f32[2,19] loops=[1,0]
%3 = Result(%2) -> f32[2,19]
loop 0 (unified): work_amount=19 increment=8 in=[%2.in0@d0 (0,0,0)] out=[%2@d0 (0,0,0)]
loop 1 (unified): work_amount=2 increment=1 in=[%2.in0@d1 (0,0,0)] out=[%2@d1 (0,0,0)]"""

# InsertLoadStore: Load of x (count 8), Store of the product; the Scalar is a register value.
SCALAR_INSERT_LOAD_STORE = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = Scalar() {value=2.0} -> f32[] loops=[1,0]
%2 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%3 = Multiply(%2, %1) {auto_broadcast=numpy} -> f32[2,19] loops=[1,0]
%4 = Store(%3) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%5 = Result(%4) -> f32[2,19]
loop 0 (unified): work_amount=19 increment=8 in=[%2.in0@d0 (0,0,0)] out=[%4@d0 (0,0,0)]
loop 1 (unified): work_amount=2 increment=1 in=[%2.in0@d1 (0,0,0)] out=[%4@d1 (0,0,0)]"""

# MoveScalarToConsumer: the Scalar moves right before its consumer Multiply (after the Load).
SCALAR_MOVE_SCALAR_TO_CONSUMER = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%2 = Scalar() {value=2.0} -> f32[] loops=[1,0]
%3 = Multiply(%1, %2) {auto_broadcast=numpy} -> f32[2,19] loops=[1,0]
%4 = Store(%3) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%5 = Result(%4) -> f32[2,19]
loop 0 (unified): work_amount=19 increment=8 in=[%1.in0@d0 (0,0,0)] out=[%4@d0 (0,0,0)]
loop 1 (unified): work_amount=2 increment=1 in=[%1.in0@d1 (0,0,0)] out=[%4@d1 (0,0,0)]"""

# InitLoops: x and the output move 1 per column (-19) and 19 per row (-38).
SCALAR_INIT_LOOPS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%2 = Scalar() {value=2.0} -> f32[] loops=[1,0]
%3 = Multiply(%1, %2) {auto_broadcast=numpy} -> f32[2,19] loops=[1,0]
%4 = Store(%3) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%5 = Result(%4) -> f32[2,19]
loop 0 (unified): work_amount=19 increment=8 in=[%1.in0@d0 (1,-19,4)] out=[%4@d0 (1,-19,4)]
loop 1 (unified): work_amount=2 increment=1 in=[%1.in0@d1 (19,-38,4)] out=[%4@d1 (19,-38,4)]"""

# InsertLoops: LoopBegin/LoopEnd pairs; the Scalar stays inside (it is rematerialised per use).
SCALAR_INSERT_LOOPS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = LoopBegin() -> dynamic[]
%2 = LoopBegin() -> dynamic[] loops=[1]
%3 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%4 = Scalar() {value=2.0} -> f32[] loops=[1,0]
%5 = Multiply(%3, %4) {auto_broadcast=numpy} -> f32[2,19] loops=[1,0]
%6 = Store(%5) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%7 = LoopEnd(%0, %6, %2) {work_amount=19 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=0 evaluate_once=False} \
-> f32[2,19], f32[2,19] loops=[1]
%8 = LoopEnd(%0, %6, %1) {work_amount=2 increment=1 is_incremented=[True,True] ptr_increments=[19,19] \
finalization_offsets=[-38,-38] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=1 evaluate_once=False} \
-> f32[2,19], f32[2,19]
%9 = Result(%6) -> f32[2,19]
loop 0 (unified): work_amount=19 increment=8 in=[%3.in0@d0 (1,-19,4)] out=[%6@d0 (1,-19,4)]
loop 1 (unified): work_amount=2 increment=1 in=[%3.in0@d1 (19,-38,4)] out=[%6@d1 (19,-38,4)]"""

# InsertSpecificIterations: main 16 by 8 (finalization 0), tail 3 by 3 (new loop 2) with its
# own copy of the Scalar.
SCALAR_INSERT_SPECIFIC_ITERATIONS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = LoopBegin() -> dynamic[]
%2 = LoopBegin() -> dynamic[] loops=[1]
%3 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%4 = Scalar() {value=2.0} -> f32[] loops=[1,0]
%5 = Multiply(%3, %4) {auto_broadcast=numpy} -> f32[2,19] loops=[1,0]
%6 = Store(%5) {count=8 offset=0} -> f32[2,19] loops=[1,0]
%7 = LoopEnd(%0, %6, %2) {work_amount=16 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=0 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[1]
%8 = LoopBegin() -> dynamic[] loops=[1]
%9 = Load(%0) {count=3 offset=0} -> f32[2,19] loops=[1,2]
%10 = Scalar() {value=2.0} -> f32[] loops=[1,2]
%11 = Multiply(%9, %10) {auto_broadcast=numpy} -> f32[2,19] loops=[1,2]
%12 = Store(%11) {count=3 offset=0} -> f32[2,19] loops=[1,2]
%13 = LoopEnd(%0, %12, %8) {work_amount=3 increment=3 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=2 evaluate_once=False} \
-> f32[2,19], f32[2,19] loops=[1]
%14 = LoopEnd(%0, %6, %1) {work_amount=2 increment=1 is_incremented=[True,True] ptr_increments=[19,19] \
finalization_offsets=[-38,-38] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=1 evaluate_once=False} \
-> f32[2,19], f32[2,19]
%15 = Result(%6) -> f32[2,19]
loop 0 (expanded main): work_amount=16 increment=8 in=[%3.in0@d0 (1,0,4)] out=[%6@d0 (1,0,4)]
loop 1 (expanded main): work_amount=2 increment=1 in=[%3.in0@d1 (19,-38,4)] out=[%6@d1 (19,-38,4)]
loop 2 (expanded last): work_amount=3 increment=3 in=[%9.in0@d0 (1,-19,4)] out=[%12@d0 (1,-19,4)]"""

# NormalizeLoopIDs: main 0, tail 1, rows 2.
SCALAR_NORMALIZE_LOOP_IDS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = LoopBegin() -> dynamic[]
%2 = LoopBegin() -> dynamic[] loops=[2]
%3 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[2,0]
%4 = Scalar() {value=2.0} -> f32[] loops=[2,0]
%5 = Multiply(%3, %4) {auto_broadcast=numpy} -> f32[2,19] loops=[2,0]
%6 = Store(%5) {count=8 offset=0} -> f32[2,19] loops=[2,0]
%7 = LoopEnd(%0, %6, %2) {work_amount=16 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=0 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[2]
%8 = LoopBegin() -> dynamic[] loops=[2]
%9 = Load(%0) {count=3 offset=0} -> f32[2,19] loops=[2,1]
%10 = Scalar() {value=2.0} -> f32[] loops=[2,1]
%11 = Multiply(%9, %10) {auto_broadcast=numpy} -> f32[2,19] loops=[2,1]
%12 = Store(%11) {count=3 offset=0} -> f32[2,19] loops=[2,1]
%13 = LoopEnd(%0, %12, %8) {work_amount=3 increment=3 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=1 evaluate_once=False} \
-> f32[2,19], f32[2,19] loops=[2]
%14 = LoopEnd(%0, %6, %1) {work_amount=2 increment=1 is_incremented=[True,True] ptr_increments=[19,19] \
finalization_offsets=[-38,-38] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=2 evaluate_once=False} \
-> f32[2,19], f32[2,19]
%15 = Result(%6) -> f32[2,19]
loop 0 (expanded main): work_amount=16 increment=8 in=[%3.in0@d0 (1,0,4)] out=[%6@d0 (1,0,4)]
loop 1 (expanded last): work_amount=3 increment=3 in=[%9.in0@d0 (1,-19,4)] out=[%12@d0 (1,-19,4)]
loop 2 (expanded main): work_amount=2 increment=1 in=[%3.in0@d1 (19,-38,4)] out=[%6@d1 (19,-38,4)]"""

# CleanupLoopOffsets: the tail's -19 cancels the row increments (19 - 19 = 0); the last loop drops
# its finalization offsets.
SCALAR_CLEANUP_LOOP_OFFSETS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = LoopBegin() -> dynamic[]
%2 = LoopBegin() -> dynamic[] loops=[2]
%3 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[2,0]
%4 = Scalar() {value=2.0} -> f32[] loops=[2,0]
%5 = Multiply(%3, %4) {auto_broadcast=numpy} -> f32[2,19] loops=[2,0]
%6 = Store(%5) {count=8 offset=0} -> f32[2,19] loops=[2,0]
%7 = LoopEnd(%0, %6, %2) {work_amount=16 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=0 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[2]
%8 = LoopBegin() -> dynamic[] loops=[2]
%9 = Load(%0) {count=3 offset=0} -> f32[2,19] loops=[2,1]
%10 = Scalar() {value=2.0} -> f32[] loops=[2,1]
%11 = Multiply(%9, %10) {auto_broadcast=numpy} -> f32[2,19] loops=[2,1]
%12 = Store(%11) {count=3 offset=0} -> f32[2,19] loops=[2,1]
%13 = LoopEnd(%0, %12, %8) {work_amount=3 increment=3 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=1 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[2]
%14 = LoopEnd(%0, %6, %1) {work_amount=2 increment=1 is_incremented=[True,True] ptr_increments=[0,0] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=2 evaluate_once=False} -> \
f32[2,19], f32[2,19]
%15 = Result(%6) -> f32[2,19]
loop 0 (expanded main): work_amount=16 increment=8 in=[%3.in0@d0 (1,0,4)] out=[%6@d0 (1,0,4)]
loop 1 (expanded last): work_amount=3 increment=3 in=[%9.in0@d0 (1,0,4)] out=[%12@d0 (1,0,4)]
loop 2 (expanded main): work_amount=2 increment=1 in=[%3.in0@d1 (0,0,4)] out=[%6@d1 (0,0,4)]"""

# OptimizeLoopSingleEvaluation: the tail runs once: finalization 0 + 1*3 = 3, increments 0.
SCALAR_OPTIMIZE_LOOP_SINGLE_EVALUATION = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = LoopBegin() -> dynamic[]
%2 = LoopBegin() -> dynamic[] loops=[2]
%3 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[2,0]
%4 = Scalar() {value=2.0} -> f32[] loops=[2,0]
%5 = Multiply(%3, %4) {auto_broadcast=numpy} -> f32[2,19] loops=[2,0]
%6 = Store(%5) {count=8 offset=0} -> f32[2,19] loops=[2,0]
%7 = LoopEnd(%0, %6, %2) {work_amount=16 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=0 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[2]
%8 = LoopBegin() -> dynamic[] loops=[2]
%9 = Load(%0) {count=3 offset=0} -> f32[2,19] loops=[2,1]
%10 = Scalar() {value=2.0} -> f32[] loops=[2,1]
%11 = Multiply(%9, %10) {auto_broadcast=numpy} -> f32[2,19] loops=[2,1]
%12 = Store(%11) {count=3 offset=0} -> f32[2,19] loops=[2,1]
%13 = LoopEnd(%0, %12, %8) {work_amount=3 increment=3 is_incremented=[True,True] ptr_increments=[0,0] \
finalization_offsets=[3,3] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=1 evaluate_once=True} -> \
f32[2,19], f32[2,19] loops=[2]
%14 = LoopEnd(%0, %6, %1) {work_amount=2 increment=1 is_incremented=[True,True] ptr_increments=[0,0] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=2 evaluate_once=False} -> \
f32[2,19], f32[2,19]
%15 = Result(%6) -> f32[2,19]
loop 0 (expanded main): work_amount=16 increment=8 in=[%3.in0@d0 (1,0,4)] out=[%6@d0 (1,0,4)]
loop 1 (expanded last once): work_amount=3 increment=3 in=[%9.in0@d0 (0,3,4)] out=[%12@d0 (0,3,4)]
loop 2 (expanded main): work_amount=2 increment=1 in=[%3.in0@d1 (0,0,4)] out=[%6@d1 (0,0,4)]"""

# InitLiveRanges: abstract registers; the Scalar's value is a vec register of its own.
SCALAR_REGS_INIT_LIVE_RANGES = """\
%0 Parameter in=[] out=[gpr[0]]
%1 LoopBegin in=[] out=[gpr[1]]
%2 LoopBegin in=[] out=[gpr[2]]
%3 Load in=[gpr[0]] out=[vec[0]]
%4 Scalar in=[] out=[vec[1]]
%5 Multiply in=[vec[0],vec[1]] out=[vec[2]]
%6 Store in=[vec[2]] out=[gpr[3]]
%7 LoopEnd in=[gpr[0],gpr[3],gpr[2]] out=[]
%8 LoopEnd in=[gpr[0],gpr[3],gpr[1]] out=[]
%9 Result in=[gpr[3]] out=[]"""

# AssignRegisters: x gpr0, output gpr1, loop counters gpr2/gpr3; Load vec0, Scalar vec1, product
# vec2 (both inputs end where Multiply starts).
SCALAR_REGS_ASSIGN_REGISTERS = """\
%0 Parameter in=[] out=[gpr[0]]
%1 LoopBegin in=[] out=[gpr[2]]
%2 LoopBegin in=[] out=[gpr[3]]
%3 Load in=[gpr[0]] out=[vec[0]]
%4 Scalar in=[] out=[vec[1]]
%5 Multiply in=[vec[0],vec[1]] out=[vec[2]]
%6 Store in=[vec[2]] out=[gpr[1]]
%7 LoopEnd in=[gpr[0],gpr[1],gpr[3]] out=[]
%8 LoopEnd in=[gpr[0],gpr[1],gpr[2]] out=[]
%9 Result in=[gpr[1]] out=[]"""

# Start: Subtract of a [4,8] and Exp of a [4,1] row value.
ROW_BROADCAST_OPTIMIZE_DOMAIN = """\
LinearIR master_shape=[4,8] loop_depth=2
%0 = Parameter() -> f32[4,8]
%1 = Parameter() -> f32[4,1]
%2 = Exp(%1) -> f32[4,1]
%3 = Subtract(%0, %2) {auto_broadcast=numpy} -> f32[4,8]
%4 = Result(%3) -> f32[4,8]"""

# MarkLoops: Exp and Subtract in one nest: 8 columns by 8 (one vector, no tail), 4 rows by 1.
ROW_BROADCAST_MARK_LOOPS = """\
LinearIR master_shape=[4,8] loop_depth=2
%0 = Parameter() -> f32[4,8]
%1 = Parameter() -> f32[4,1]
%2 = Exp(%1) -> f32[4,1] loops=[1,0]
%3 = Subtract(%0, %2) {auto_broadcast=numpy} -> f32[4,8] loops=[1,0]
%4 = Result(%3) -> f32[4,8]
loop 0 (unified): work_amount=8 increment=8 in=[%2.in0@d0 (0,0,0), %3.in0@d0 (0,0,0)] out=[%3@d0 (0,0,0)]
loop 1 (unified): work_amount=4 increment=1 in=[%2.in0@d1 (0,0,0), %3.in0@d1 (0,0,0)] out=[%3@d1 (0,0,0)]"""

# InsertLoadStore: b is loaded with count 1 (last dim 1), a with count 8; Store for the Result.
ROW_BROADCAST_INSERT_LOAD_STORE = """\
LinearIR master_shape=[4,8] loop_depth=2
%0 = Parameter() -> f32[4,8]
%1 = Parameter() -> f32[4,1]
%2 = Load(%1) {count=1 offset=0} -> f32[4,1] loops=[1,0]
%3 = Exp(%2) -> f32[4,1] loops=[1,0]
%4 = Load(%0) {count=8 offset=0} -> f32[4,8] loops=[1,0]
%5 = Subtract(%4, %3) {auto_broadcast=numpy} -> f32[4,8] loops=[1,0]
%6 = Store(%5) {count=8 offset=0} -> f32[4,8] loops=[1,0]
%7 = Result(%6) -> f32[4,8]
loop 0 (unified): work_amount=8 increment=8 in=[%2.in0@d0 (0,0,0), %4.in0@d0 (0,0,0)] out=[%6@d0 (0,0,0)]
loop 1 (unified): work_amount=4 increment=1 in=[%2.in0@d1 (0,0,0), %4.in0@d1 (0,0,0)] out=[%6@d1 (0,0,0)]"""

# InsertBroadcastMove: Exp's [4,1] value is broadcast to Subtract's 8 columns; it comes from Exp,
# not from a Load, so it is not fused into a BroadcastLoad (the next pass changes nothing).
ROW_BROADCAST_INSERT_BROADCAST_MOVE = """\
LinearIR master_shape=[4,8] loop_depth=2
%0 = Parameter() -> f32[4,8]
%1 = Parameter() -> f32[4,1]
%2 = Load(%1) {count=1 offset=0} -> f32[4,1] loops=[1,0]
%3 = Exp(%2) -> f32[4,1] loops=[1,0]
%4 = Load(%0) {count=8 offset=0} -> f32[4,8] loops=[1,0]
%5 = BroadcastMove(%3) {broadcast_dim=8} -> f32[4,8] loops=[1,0]
%6 = Subtract(%4, %5) {auto_broadcast=numpy} -> f32[4,8] loops=[1,0]
%7 = Store(%6) {count=8 offset=0} -> f32[4,8] loops=[1,0]
%8 = Result(%7) -> f32[4,8]
loop 0 (unified): work_amount=8 increment=8 in=[%2.in0@d0 (0,0,0), %4.in0@d0 (0,0,0)] out=[%7@d0 (0,0,0)]
loop 1 (unified): work_amount=4 increment=1 in=[%2.in0@d1 (0,0,0), %4.in0@d1 (0,0,0)] out=[%7@d1 (0,0,0)]"""

# InitLoops: b, read before the column loop, is a port of the row loop only: 1 per row (rewind -4); a and
# the output 1 per column (-8) and 8 per row (-32); Subtract's register input is not processed.
ROW_BROADCAST_INIT_LOOPS = """\
LinearIR master_shape=[4,8] loop_depth=2
%0 = Parameter() -> f32[4,8]
%1 = Parameter() -> f32[4,1]
%2 = Load(%1) {count=1 offset=0} -> f32[4,1] loops=[1]
%3 = Exp(%2) -> f32[4,1] loops=[1]
%4 = BroadcastMove(%3) {broadcast_dim=8} -> f32[4,8] loops=[1]
%5 = Load(%0) {count=8 offset=0} -> f32[4,8] loops=[1,0]
%6 = Subtract(%5, %4) {auto_broadcast=numpy} -> f32[4,8] loops=[1,0]
%7 = Store(%6) {count=8 offset=0} -> f32[4,8] loops=[1,0]
%8 = Result(%7) -> f32[4,8]
loop 0 (unified): work_amount=8 increment=8 in=[%5.in0@d0 (1,-8,4), %6.in1@d0 not_processed (0,0,0)] out=[%7@d0 \
(1,-8,4)]
loop 1 (unified): work_amount=4 increment=1 in=[%2.in0@d1 (1,-4,4), %5.in0@d1 (8,-32,4)] out=[%7@d1 (8,-32,4)]"""

# InsertLoops: LoopBegin/LoopEnd pairs; pointer order follows the loop ports (b, a, output).
ROW_BROADCAST_INSERT_LOOPS = """\
LinearIR master_shape=[4,8] loop_depth=2
%0 = Parameter() -> f32[4,8]
%1 = Parameter() -> f32[4,1]
%2 = LoopBegin() -> dynamic[]
%3 = Load(%1) {count=1 offset=0} -> f32[4,1] loops=[1]
%4 = Exp(%3) -> f32[4,1] loops=[1]
%5 = BroadcastMove(%4) {broadcast_dim=8} -> f32[4,8] loops=[1]
%6 = LoopBegin() -> dynamic[] loops=[1]
%7 = Load(%0) {count=8 offset=0} -> f32[4,8] loops=[1,0]
%8 = Subtract(%7, %5) {auto_broadcast=numpy} -> f32[4,8] loops=[1,0]
%9 = Store(%8) {count=8 offset=0} -> f32[4,8] loops=[1,0]
%10 = LoopEnd(%0, %9, %6) {work_amount=8 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-8,-8] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=0 evaluate_once=False} -> \
f32[4,8], f32[4,8] loops=[1]
%11 = LoopEnd(%1, %0, %9, %2) {work_amount=4 increment=1 is_incremented=[True,True,True] ptr_increments=[1,8,8] \
finalization_offsets=[-4,-32,-32] element_type_sizes=[4,4,4] input_num=2 output_num=1 loop_id=1 evaluate_once=False} \
-> f32[4,1], f32[4,8], f32[4,8]
%12 = Result(%9) -> f32[4,8]
loop 0 (unified): work_amount=8 increment=8 in=[%7.in0@d0 (1,-8,4), %8.in1@d0 not_processed (0,0,0)] out=[%9@d0 \
(1,-8,4)]
loop 1 (unified): work_amount=4 increment=1 in=[%3.in0@d1 (1,-4,4), %7.in0@d1 (8,-32,4)] out=[%9@d1 (8,-32,4)]"""

# InsertSpecificIterations: 8 columns by 8 and 4 rows by 1 divide evenly: no tail loops, the
# unified loop infos just become expanded main loops.
ROW_BROADCAST_INSERT_SPECIFIC_ITERATIONS = """\
LinearIR master_shape=[4,8] loop_depth=2
%0 = Parameter() -> f32[4,8]
%1 = Parameter() -> f32[4,1]
%2 = LoopBegin() -> dynamic[]
%3 = Load(%1) {count=1 offset=0} -> f32[4,1] loops=[1]
%4 = Exp(%3) -> f32[4,1] loops=[1]
%5 = BroadcastMove(%4) {broadcast_dim=8} -> f32[4,8] loops=[1]
%6 = LoopBegin() -> dynamic[] loops=[1]
%7 = Load(%0) {count=8 offset=0} -> f32[4,8] loops=[1,0]
%8 = Subtract(%7, %5) {auto_broadcast=numpy} -> f32[4,8] loops=[1,0]
%9 = Store(%8) {count=8 offset=0} -> f32[4,8] loops=[1,0]
%10 = LoopEnd(%0, %9, %6) {work_amount=8 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-8,-8] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=0 evaluate_once=False} -> \
f32[4,8], f32[4,8] loops=[1]
%11 = LoopEnd(%1, %0, %9, %2) {work_amount=4 increment=1 is_incremented=[True,True,True] ptr_increments=[1,8,8] \
finalization_offsets=[-4,-32,-32] element_type_sizes=[4,4,4] input_num=2 output_num=1 loop_id=1 evaluate_once=False} \
-> f32[4,1], f32[4,8], f32[4,8]
%12 = Result(%9) -> f32[4,8]
loop 0 (expanded main): work_amount=8 increment=8 in=[%7.in0@d0 (1,-8,4), %8.in1@d0 not_processed (0,0,0)] out=[%9@d0 \
(1,-8,4)]
loop 1 (expanded main): work_amount=4 increment=1 in=[%3.in0@d1 (1,-4,4), %7.in0@d1 (8,-32,4)] out=[%9@d1 (8,-32,4)]"""

# CleanupLoopOffsets: the inner loop's rewinds (-8) fold into the row increments of a and the
# output (8 - 8 = 0); b's row increment (1) stays; the last loop drops its finalization offsets.
ROW_BROADCAST_CLEANUP_LOOP_OFFSETS = """\
LinearIR master_shape=[4,8] loop_depth=2
%0 = Parameter() -> f32[4,8]
%1 = Parameter() -> f32[4,1]
%2 = LoopBegin() -> dynamic[]
%3 = Load(%1) {count=1 offset=0} -> f32[4,1] loops=[1]
%4 = Exp(%3) -> f32[4,1] loops=[1]
%5 = BroadcastMove(%4) {broadcast_dim=8} -> f32[4,8] loops=[1]
%6 = LoopBegin() -> dynamic[] loops=[1]
%7 = Load(%0) {count=8 offset=0} -> f32[4,8] loops=[1,0]
%8 = Subtract(%7, %5) {auto_broadcast=numpy} -> f32[4,8] loops=[1,0]
%9 = Store(%8) {count=8 offset=0} -> f32[4,8] loops=[1,0]
%10 = LoopEnd(%0, %9, %6) {work_amount=8 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[0,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=0 evaluate_once=False} -> \
f32[4,8], f32[4,8] loops=[1]
%11 = LoopEnd(%1, %0, %9, %2) {work_amount=4 increment=1 is_incremented=[True,True,True] ptr_increments=[1,0,0] \
finalization_offsets=[0,0,0] element_type_sizes=[4,4,4] input_num=2 output_num=1 loop_id=1 evaluate_once=False} -> \
f32[4,1], f32[4,8], f32[4,8]
%12 = Result(%9) -> f32[4,8]
loop 0 (expanded main): work_amount=8 increment=8 in=[%7.in0@d0 (1,0,4), %8.in1@d0 not_processed (0,0,0)] out=[%9@d0 \
(1,0,4)]
loop 1 (expanded main): work_amount=4 increment=1 in=[%3.in0@d1 (1,0,4), %7.in0@d1 (0,0,4)] out=[%9@d1 (0,0,4)]"""

# OptimizeLoopSingleEvaluation: the column loop runs once (8 == 8): increments fold into the
# finalization offsets (0 + 1*8 = 8) and it is marked evaluate_once.
ROW_BROADCAST_OPTIMIZE_LOOP_SINGLE_EVALUATION = """\
LinearIR master_shape=[4,8] loop_depth=2
%0 = Parameter() -> f32[4,8]
%1 = Parameter() -> f32[4,1]
%2 = LoopBegin() -> dynamic[]
%3 = Load(%1) {count=1 offset=0} -> f32[4,1] loops=[1]
%4 = Exp(%3) -> f32[4,1] loops=[1]
%5 = BroadcastMove(%4) {broadcast_dim=8} -> f32[4,8] loops=[1]
%6 = LoopBegin() -> dynamic[] loops=[1]
%7 = Load(%0) {count=8 offset=0} -> f32[4,8] loops=[1,0]
%8 = Subtract(%7, %5) {auto_broadcast=numpy} -> f32[4,8] loops=[1,0]
%9 = Store(%8) {count=8 offset=0} -> f32[4,8] loops=[1,0]
%10 = LoopEnd(%0, %9, %6) {work_amount=8 increment=8 is_incremented=[True,True] ptr_increments=[0,0] \
finalization_offsets=[8,8] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=0 evaluate_once=True} -> \
f32[4,8], f32[4,8] loops=[1]
%11 = LoopEnd(%1, %0, %9, %2) {work_amount=4 increment=1 is_incremented=[True,True,True] ptr_increments=[1,0,0] \
finalization_offsets=[0,0,0] element_type_sizes=[4,4,4] input_num=2 output_num=1 loop_id=1 evaluate_once=False} -> \
f32[4,1], f32[4,8], f32[4,8]
%12 = Result(%9) -> f32[4,8]
loop 0 (expanded main once): work_amount=8 increment=8 in=[%7.in0@d0 (0,8,4), %8.in1@d0 not_processed (0,0,0)] \
out=[%9@d0 (0,8,4)]
loop 1 (expanded main): work_amount=4 increment=1 in=[%3.in0@d1 (1,0,4), %7.in0@d1 (0,0,4)] out=[%9@d1 (0,0,4)]"""

# InitLiveRanges: abstract registers: data pointers a, b, loop counters, output; one vec per value.
ROW_BROADCAST_REGS_INIT_LIVE_RANGES = """\
%0 Parameter in=[] out=[gpr[0]]
%1 Parameter in=[] out=[gpr[1]]
%2 LoopBegin in=[] out=[gpr[2]]
%3 Load in=[gpr[1]] out=[vec[0]]
%4 Exp in=[vec[0]] out=[vec[1]]
%5 BroadcastMove in=[vec[1]] out=[vec[2]]
%6 LoopBegin in=[] out=[gpr[3]]
%7 Load in=[gpr[0]] out=[vec[3]]
%8 Subtract in=[vec[3],vec[2]] out=[vec[4]]
%9 Store in=[vec[4]] out=[gpr[4]]
%10 LoopEnd in=[gpr[0],gpr[4],gpr[3]] out=[]
%11 LoopEnd in=[gpr[1],gpr[0],gpr[4],gpr[2]] out=[]
%12 Result in=[gpr[4]] out=[]"""

# AssignRegisters: a gpr0, b gpr1, output gpr2; Load b vec0, Exp vec1, Load a reuses vec0,
# BroadcastMove vec2, Subtract reuses vec1.
ROW_BROADCAST_REGS_ASSIGN_REGISTERS = """\
%0 Parameter in=[] out=[gpr[0]]
%1 Parameter in=[] out=[gpr[1]]
%2 LoopBegin in=[] out=[gpr[3]]
%3 Load in=[gpr[1]] out=[vec[0]]
%4 Exp in=[vec[0]] out=[vec[1]]
%5 BroadcastMove in=[vec[1]] out=[vec[0]]
%6 LoopBegin in=[] out=[gpr[4]]
%7 Load in=[gpr[0]] out=[vec[1]]
%8 Subtract in=[vec[1],vec[0]] out=[vec[2]]
%9 Store in=[vec[2]] out=[gpr[2]]
%10 LoopEnd in=[gpr[0],gpr[2],gpr[4]] out=[]
%11 LoopEnd in=[gpr[1],gpr[0],gpr[2],gpr[3]] out=[]
%12 Result in=[gpr[2]] out=[]"""


# InsertBuffers (two chained softmaxes): everything fused into one row loop; the second softmax's
# max accumulates inside the first one's Multiply loop (4), its Subtract/Exp/sum inside loop 7. Three values
# cross inner loops: Exp1 -> Multiply1 (A), Multiply1 -> Subtract2 (B), Exp2 -> Multiply2 (C).
TWO_SOFTMAX_INSERT_BUFFERS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = VectorBuffer() -> f32[1] loops=[0]
%2 = Fill(%1) {offset=0 fill_value=4286578688} -> f32[1] loops=[0]
%3 = Fill(%0) {offset=8 fill_value=4286578688} -> f32[2,19] loops=[0,12]
%4 = Maximum(%3, %2) {auto_broadcast=numpy} -> f32[2,19] loops=[0,12]
%5 = HorizonMax(%4) -> f32[2,1] loops=[0]
%6 = VectorBuffer() -> f32[1] loops=[0]
%7 = Fill(%6) {offset=0 fill_value=0} -> f32[1] loops=[0]
%8 = Subtract(%0, %5) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%9 = Exp(%8) -> f32[2,19] loops=[0,1]
%10 = Fill(%9) {offset=8 fill_value=0} -> f32[2,19] loops=[0,1]
%11 = Add(%10, %7) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%12 = Buffer(%9) {reg_group=-1 cluster_id=-1 offset=-1} -> f32[2,19] loops=[0]
%13 = HorizonSum(%11) -> f32[2,1] loops=[0]
%14 = VectorBuffer() -> f32[1] loops=[0]
%15 = Fill(%14) {offset=0 fill_value=4286578688} -> f32[1] loops=[0]
%16 = PowerStatic(%13) {power=-1.0} -> f32[2,1] loops=[0,4]
%17 = Multiply(%12, %16) {auto_broadcast=numpy} -> f32[2,19] loops=[0,4]
%18 = Fill(%17) {offset=8 fill_value=4286578688} -> f32[2,19] loops=[0,4]
%19 = Maximum(%18, %15) {auto_broadcast=numpy} -> f32[2,19] loops=[0,4]
%20 = Buffer(%17) {reg_group=-1 cluster_id=-1 offset=-1} -> f32[2,19] loops=[0]
%21 = HorizonMax(%19) -> f32[2,1] loops=[0]
%22 = VectorBuffer() -> f32[1] loops=[0]
%23 = Fill(%22) {offset=0 fill_value=0} -> f32[1] loops=[0]
%24 = Subtract(%20, %21) {auto_broadcast=numpy} -> f32[2,19] loops=[0,7]
%25 = Exp(%24) -> f32[2,19] loops=[0,7]
%26 = Fill(%25) {offset=8 fill_value=0} -> f32[2,19] loops=[0,7]
%27 = Add(%26, %23) {auto_broadcast=numpy} -> f32[2,19] loops=[0,7]
%28 = Buffer(%25) {reg_group=-1 cluster_id=-1 offset=-1} -> f32[2,19] loops=[0]
%29 = HorizonSum(%27) -> f32[2,1] loops=[0]
%30 = PowerStatic(%29) {power=-1.0} -> f32[2,1] loops=[0,10]
%31 = Multiply(%28, %30) {auto_broadcast=numpy} -> f32[2,19] loops=[0,10]
%32 = Result(%31) -> f32[2,19]
loop 0 (unified): work_amount=2 increment=1 in=[%3.in0@d1 (0,0,0), %8.in0@d1 (0,0,0)] out=[%31@d1 (0,0,0)]
loop 1 (unified): work_amount=19 increment=8 in=[%8.in0@d0 (0,0,0), %8.in1@d0 (0,0,0)] out=[%9@d0 (0,0,0), %11@d0 \
(0,0,0)]
loop 4 (unified): work_amount=19 increment=8 in=[%16.in0@d0 (0,0,0), %17.in0@d0 (0,0,0)] out=[%17@d0 (0,0,0), \
%19@d0 (0,0,0)]
loop 7 (unified): work_amount=19 increment=8 in=[%24.in0@d0 (0,0,0), %24.in1@d0 (0,0,0)] out=[%25@d0 (0,0,0), \
%27@d0 (0,0,0)]
loop 10 (unified): work_amount=19 increment=8 in=[%30.in0@d0 (0,0,0), %31.in0@d0 (0,0,0)] out=[%31@d0 (0,0,0)]
loop 12 (unified): work_amount=19 increment=8 in=[%3.in0@d0 (0,0,0)] out=[%4@d0 (0,0,0)]"""

# AllocateBuffers: loop 4 reads A and writes B with the same pointer steps (1, -19, 4 bytes), as
# loop 7 reads B and writes C: each pair can work in place, so A, B and C form one cluster in one register
# group at offset 0, one row (19 * 4 = 76 bytes) in all.
TWO_SOFTMAX_ALLOCATE_BUFFERS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = LoopBegin() -> dynamic[]
%2 = VectorBuffer() -> f32[1] loops=[0]
%3 = Fill(%2) {offset=0 fill_value=4286578688} -> f32[1] loops=[0]
%4 = LoopBegin() -> dynamic[] loops=[0]
%5 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[0,12]
%6 = Fill(%5) {offset=8 fill_value=4286578688} -> f32[2,19] loops=[0,12]
%7 = Maximum(%6, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[0,12]
%8 = LoopEnd(%0, %4) {work_amount=19 increment=8 is_incremented=[True] ptr_increments=[1] \
finalization_offsets=[-19] element_type_sizes=[4] input_num=1 output_num=0 loop_id=12 evaluate_once=False} -> \
f32[2,19] loops=[0]
%9 = HorizonMax(%7) -> f32[2,1] loops=[0]
%10 = VectorBuffer() -> f32[1] loops=[0]
%11 = Fill(%10) {offset=0 fill_value=0} -> f32[1] loops=[0]
%12 = LoopBegin() -> dynamic[] loops=[0]
%13 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[0,1]
%14 = Subtract(%13, %9) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%15 = Exp(%14) -> f32[2,19] loops=[0,1]
%16 = Store(%15) {count=8 offset=0} -> f32[2,19] loops=[0,1]
%17 = Fill(%15) {offset=8 fill_value=0} -> f32[2,19] loops=[0,1]
%18 = Add(%17, %11) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%19 = LoopEnd(%0, %16, %12) {work_amount=19 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=1 evaluate_once=False} \
-> f32[2,19], f32[2,19] loops=[0]
%20 = Buffer(%16) {reg_group=0 cluster_id=0 offset=0 size=76} -> f32[2,19] loops=[0]
%21 = HorizonSum(%18) -> f32[2,1] loops=[0]
%22 = VectorBuffer() -> f32[1] loops=[0]
%23 = Fill(%22) {offset=0 fill_value=4286578688} -> f32[1] loops=[0]
%24 = PowerStatic(%21) {power=-1.0} -> f32[2,1] loops=[0]
%25 = BroadcastMove(%24) {broadcast_dim=19} -> f32[2,19] loops=[0]
%26 = LoopBegin() -> dynamic[] loops=[0]
%27 = Load(%20) {count=8 offset=0} -> f32[2,19] loops=[0,4]
%28 = Multiply(%27, %25) {auto_broadcast=numpy} -> f32[2,19] loops=[0,4]
%29 = Store(%28) {count=8 offset=0} -> f32[2,19] loops=[0,4]
%30 = Fill(%28) {offset=8 fill_value=4286578688} -> f32[2,19] loops=[0,4]
%31 = Maximum(%30, %23) {auto_broadcast=numpy} -> f32[2,19] loops=[0,4]
%32 = LoopEnd(%20, %29, %26) {work_amount=19 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=4 evaluate_once=False} \
-> f32[2,19], f32[2,19] loops=[0]
%33 = Buffer(%29) {reg_group=0 cluster_id=0 offset=0 size=76} -> f32[2,19] loops=[0]
%34 = HorizonMax(%31) -> f32[2,1] loops=[0]
%35 = VectorBuffer() -> f32[1] loops=[0]
%36 = Fill(%35) {offset=0 fill_value=0} -> f32[1] loops=[0]
%37 = LoopBegin() -> dynamic[] loops=[0]
%38 = Load(%33) {count=8 offset=0} -> f32[2,19] loops=[0,7]
%39 = Subtract(%38, %34) {auto_broadcast=numpy} -> f32[2,19] loops=[0,7]
%40 = Exp(%39) -> f32[2,19] loops=[0,7]
%41 = Store(%40) {count=8 offset=0} -> f32[2,19] loops=[0,7]
%42 = Fill(%40) {offset=8 fill_value=0} -> f32[2,19] loops=[0,7]
%43 = Add(%42, %36) {auto_broadcast=numpy} -> f32[2,19] loops=[0,7]
%44 = LoopEnd(%33, %41, %37) {work_amount=19 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=7 evaluate_once=False} \
-> f32[2,19], f32[2,19] loops=[0]
%45 = Buffer(%41) {reg_group=0 cluster_id=0 offset=0 size=76} -> f32[2,19] loops=[0]
%46 = HorizonSum(%43) -> f32[2,1] loops=[0]
%47 = PowerStatic(%46) {power=-1.0} -> f32[2,1] loops=[0]
%48 = BroadcastMove(%47) {broadcast_dim=19} -> f32[2,19] loops=[0]
%49 = LoopBegin() -> dynamic[] loops=[0]
%50 = Load(%45) {count=8 offset=0} -> f32[2,19] loops=[0,10]
%51 = Multiply(%50, %48) {auto_broadcast=numpy} -> f32[2,19] loops=[0,10]
%52 = Store(%51) {count=8 offset=0} -> f32[2,19] loops=[0,10]
%53 = LoopEnd(%45, %52, %49) {work_amount=19 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=10 evaluate_once=False} \
-> f32[2,19], f32[2,19] loops=[0]
%54 = LoopEnd(%0, %0, %52, %1) {work_amount=2 increment=1 is_incremented=[True,True,True] \
ptr_increments=[19,19,19] finalization_offsets=[-38,-38,-38] element_type_sizes=[4,4,4] input_num=2 output_num=1 \
loop_id=0 evaluate_once=False} -> f32[2,19], f32[2,19], f32[2,19]
%55 = Result(%52) -> f32[2,19]
loop 0 (unified): work_amount=2 increment=1 in=[%5.in0@d1 (19,-38,4), %13.in0@d1 (19,-38,4)] out=[%52@d1 \
(19,-38,4)]
loop 1 (unified): work_amount=19 increment=8 in=[%13.in0@d0 (1,-19,4), %14.in1@d0 not_processed (0,0,0)] \
out=[%16@d0 (1,-19,4), %18@d0 not_processed (0,0,0)]
loop 4 (unified): work_amount=19 increment=8 in=[%27.in0@d0 (1,-19,4), %28.in1@d0 not_processed (0,0,0)] \
out=[%29@d0 (1,-19,4), %31@d0 not_processed (0,0,0)]
loop 7 (unified): work_amount=19 increment=8 in=[%38.in0@d0 (1,-19,4), %39.in1@d0 not_processed (0,0,0)] \
out=[%41@d0 (1,-19,4), %43@d0 not_processed (0,0,0)]
loop 10 (unified): work_amount=19 increment=8 in=[%50.in0@d0 (1,-19,4), %51.in1@d0 not_processed (0,0,0)] \
out=[%52@d0 (1,-19,4)]
loop 12 (unified): work_amount=19 increment=8 in=[%5.in0@d0 (1,-19,4)] out=[%7@d0 not_processed (0,0,0)]"""

# CleanRepeatedDataPointerShifts: in loops 4 and 7 the read and the written Buffer share one
# register, so only the first keeps its shift (the written one becomes 0, 0); in the row loop the second x
# port likewise.
TWO_SOFTMAX_CLEAN_REPEATED_DATA_POINTER_SHIFTS = """\
LinearIR master_shape=[2,19] loop_depth=2
%0 = Parameter() -> f32[2,19]
%1 = LoopBegin() -> dynamic[]
%2 = VectorBuffer() -> f32[1] loops=[0]
%3 = Fill(%2) {offset=0 fill_value=4286578688} -> f32[1] loops=[0]
%4 = LoopBegin() -> dynamic[] loops=[0]
%5 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[0,12]
%6 = Fill(%5) {offset=8 fill_value=4286578688} -> f32[2,19] loops=[0,12]
%7 = Maximum(%6, %3) {auto_broadcast=numpy} -> f32[2,19] loops=[0,12]
%8 = LoopEnd(%0, %4) {work_amount=19 increment=8 is_incremented=[True] ptr_increments=[1] \
finalization_offsets=[-19] element_type_sizes=[4] input_num=1 output_num=0 loop_id=12 evaluate_once=False} -> \
f32[2,19] loops=[0]
%9 = HorizonMax(%7) -> f32[2,1] loops=[0]
%10 = VectorBuffer() -> f32[1] loops=[0]
%11 = Fill(%10) {offset=0 fill_value=0} -> f32[1] loops=[0]
%12 = LoopBegin() -> dynamic[] loops=[0]
%13 = Load(%0) {count=8 offset=0} -> f32[2,19] loops=[0,1]
%14 = Subtract(%13, %9) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%15 = Exp(%14) -> f32[2,19] loops=[0,1]
%16 = Store(%15) {count=8 offset=0} -> f32[2,19] loops=[0,1]
%17 = Fill(%15) {offset=8 fill_value=0} -> f32[2,19] loops=[0,1]
%18 = Add(%17, %11) {auto_broadcast=numpy} -> f32[2,19] loops=[0,1]
%19 = LoopEnd(%0, %16, %12) {work_amount=19 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=1 evaluate_once=False} \
-> f32[2,19], f32[2,19] loops=[0]
%20 = Buffer(%16) {reg_group=0 cluster_id=0 offset=0 size=76} -> f32[2,19] loops=[0]
%21 = HorizonSum(%18) -> f32[2,1] loops=[0]
%22 = VectorBuffer() -> f32[1] loops=[0]
%23 = Fill(%22) {offset=0 fill_value=4286578688} -> f32[1] loops=[0]
%24 = PowerStatic(%21) {power=-1.0} -> f32[2,1] loops=[0]
%25 = BroadcastMove(%24) {broadcast_dim=19} -> f32[2,19] loops=[0]
%26 = LoopBegin() -> dynamic[] loops=[0]
%27 = Load(%20) {count=8 offset=0} -> f32[2,19] loops=[0,4]
%28 = Multiply(%27, %25) {auto_broadcast=numpy} -> f32[2,19] loops=[0,4]
%29 = Store(%28) {count=8 offset=0} -> f32[2,19] loops=[0,4]
%30 = Fill(%28) {offset=8 fill_value=4286578688} -> f32[2,19] loops=[0,4]
%31 = Maximum(%30, %23) {auto_broadcast=numpy} -> f32[2,19] loops=[0,4]
%32 = LoopEnd(%20, %29, %26) {work_amount=19 increment=8 is_incremented=[True,True] ptr_increments=[1,0] \
finalization_offsets=[-19,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=4 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[0]
%33 = Buffer(%29) {reg_group=0 cluster_id=0 offset=0 size=76} -> f32[2,19] loops=[0]
%34 = HorizonMax(%31) -> f32[2,1] loops=[0]
%35 = VectorBuffer() -> f32[1] loops=[0]
%36 = Fill(%35) {offset=0 fill_value=0} -> f32[1] loops=[0]
%37 = LoopBegin() -> dynamic[] loops=[0]
%38 = Load(%33) {count=8 offset=0} -> f32[2,19] loops=[0,7]
%39 = Subtract(%38, %34) {auto_broadcast=numpy} -> f32[2,19] loops=[0,7]
%40 = Exp(%39) -> f32[2,19] loops=[0,7]
%41 = Store(%40) {count=8 offset=0} -> f32[2,19] loops=[0,7]
%42 = Fill(%40) {offset=8 fill_value=0} -> f32[2,19] loops=[0,7]
%43 = Add(%42, %36) {auto_broadcast=numpy} -> f32[2,19] loops=[0,7]
%44 = LoopEnd(%33, %41, %37) {work_amount=19 increment=8 is_incremented=[True,True] ptr_increments=[1,0] \
finalization_offsets=[-19,0] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=7 evaluate_once=False} -> \
f32[2,19], f32[2,19] loops=[0]
%45 = Buffer(%41) {reg_group=0 cluster_id=0 offset=0 size=76} -> f32[2,19] loops=[0]
%46 = HorizonSum(%43) -> f32[2,1] loops=[0]
%47 = PowerStatic(%46) {power=-1.0} -> f32[2,1] loops=[0]
%48 = BroadcastMove(%47) {broadcast_dim=19} -> f32[2,19] loops=[0]
%49 = LoopBegin() -> dynamic[] loops=[0]
%50 = Load(%45) {count=8 offset=0} -> f32[2,19] loops=[0,10]
%51 = Multiply(%50, %48) {auto_broadcast=numpy} -> f32[2,19] loops=[0,10]
%52 = Store(%51) {count=8 offset=0} -> f32[2,19] loops=[0,10]
%53 = LoopEnd(%45, %52, %49) {work_amount=19 increment=8 is_incremented=[True,True] ptr_increments=[1,1] \
finalization_offsets=[-19,-19] element_type_sizes=[4,4] input_num=1 output_num=1 loop_id=10 evaluate_once=False} \
-> f32[2,19], f32[2,19] loops=[0]
%54 = LoopEnd(%0, %0, %52, %1) {work_amount=2 increment=1 is_incremented=[True,True,True] \
ptr_increments=[19,0,19] finalization_offsets=[-38,0,-38] element_type_sizes=[4,4,4] input_num=2 output_num=1 \
loop_id=0 evaluate_once=False} -> f32[2,19], f32[2,19], f32[2,19]
%55 = Result(%52) -> f32[2,19]
loop 0 (unified): work_amount=2 increment=1 in=[%5.in0@d1 (19,-38,4), %13.in0@d1 (0,0,4)] out=[%52@d1 (19,-38,4)]
loop 1 (unified): work_amount=19 increment=8 in=[%13.in0@d0 (1,-19,4), %14.in1@d0 not_processed (0,0,0)] \
out=[%16@d0 (1,-19,4), %18@d0 not_processed (0,0,0)]
loop 4 (unified): work_amount=19 increment=8 in=[%27.in0@d0 (1,-19,4), %28.in1@d0 not_processed (0,0,0)] \
out=[%29@d0 (0,0,4), %31@d0 not_processed (0,0,0)]
loop 7 (unified): work_amount=19 increment=8 in=[%38.in0@d0 (1,-19,4), %39.in1@d0 not_processed (0,0,0)] \
out=[%41@d0 (0,0,4), %43@d0 not_processed (0,0,0)]
loop 10 (unified): work_amount=19 increment=8 in=[%50.in0@d0 (1,-19,4), %51.in1@d0 not_processed (0,0,0)] \
out=[%52@d0 (1,-19,4)]
loop 12 (unified): work_amount=19 increment=8 in=[%5.in0@d0 (1,-19,4)] out=[%7@d0 not_processed (0,0,0)]"""


#: the pass must leave the body's dump as the previous pass left it
UNCHANGED = "<unchanged>"

EXPECTED: dict[str, dict[str, str]] = {
    "eltwise": {
        "optimize-domain": ELTWISE_OPTIMIZE_DOMAIN,
        "mark-loops": ELTWISE_MARK_LOOPS,
        "reduce-decomposition": UNCHANGED,  # no reduction
        "fuse-loops": UNCHANGED,  # a single loop nest
        "split-loops": UNCHANGED,  # nothing fused, nothing to split
        "move-result-out-of-loop": UNCHANGED,  # the Result is already after the nest
        "insert-buffers": UNCHANGED,  # producer and consumer share every loop
        "insert-load-store": ELTWISE_INSERT_LOAD_STORE,
        "move-scalar-to-consumer": UNCHANGED,  # no Scalar
        "insert-broadcast-move": ELTWISE_INSERT_BROADCAST_MOVE,
        "load-move-broadcast-to-broadcast-load": ELTWISE_LOAD_MOVE_BROADCAST_TO_BROADCAST_LOAD,
        "extract-loop-invariants": ELTWISE_EXTRACT_LOOP_INVARIANTS,
        "init-loops": ELTWISE_INIT_LOOPS,
        "propagate-layout": UNCHANGED,  # planar layouts only
        "insert-loops": ELTWISE_INSERT_LOOPS,
        "allocate-buffers": UNCHANGED,  # no Buffer
        "clean-repeated-data-pointer-shifts": UNCHANGED,  # every pointer appears once per LoopEnd
        "regs:init-live-ranges": ELTWISE_REGS_INIT_LIVE_RANGES,
        "regs:assign-registers": ELTWISE_REGS_ASSIGN_REGISTERS,
        "insert-reg-spills": UNCHANGED,  # no ABI call on the interpreter target
        "insert-specific-iterations": ELTWISE_INSERT_SPECIFIC_ITERATIONS,
        "normalize-loop-ids": ELTWISE_NORMALIZE_LOOP_IDS,
        "cleanup-loop-offsets": ELTWISE_CLEANUP_LOOP_OFFSETS,
        "optimize-loop-single-evaluation": ELTWISE_OPTIMIZE_LOOP_SINGLE_EVALUATION,
    },
    "softmax": {
        "optimize-domain": SOFTMAX_OPTIMIZE_DOMAIN,
        "mark-loops": SOFTMAX_MARK_LOOPS,
        "reduce-decomposition": SOFTMAX_REDUCE_DECOMPOSITION,
        "fuse-loops": SOFTMAX_FUSE_LOOPS,
        "split-loops": UNCHANGED,  # every fused inner loop has increment 8: nothing to split
        "move-result-out-of-loop": UNCHANGED,  # the Result is already after the row loop
        "insert-buffers": SOFTMAX_INSERT_BUFFERS,
        "insert-load-store": SOFTMAX_INSERT_LOAD_STORE,
        "move-scalar-to-consumer": UNCHANGED,  # no Scalar
        "insert-broadcast-move": SOFTMAX_INSERT_BROADCAST_MOVE,
        "load-move-broadcast-to-broadcast-load": UNCHANGED,  # the BroadcastMove reads PowerStatic, not a Load
        "extract-loop-invariants": SOFTMAX_EXTRACT_LOOP_INVARIANTS,
        "init-loops": SOFTMAX_INIT_LOOPS,
        "propagate-layout": UNCHANGED,  # planar layouts only
        "insert-loops": SOFTMAX_INSERT_LOOPS,
        "allocate-buffers": SOFTMAX_ALLOCATE_BUFFERS,
        "clean-repeated-data-pointer-shifts": SOFTMAX_CLEAN_REPEATED_DATA_POINTER_SHIFTS,
        "regs:init-live-ranges": SOFTMAX_REGS_INIT_LIVE_RANGES,
        "regs:assign-registers": SOFTMAX_REGS_ASSIGN_REGISTERS,
        "insert-reg-spills": UNCHANGED,  # no ABI call on the interpreter target
        "insert-specific-iterations": SOFTMAX_INSERT_SPECIFIC_ITERATIONS,
        "normalize-loop-ids": SOFTMAX_NORMALIZE_LOOP_IDS,
        "cleanup-loop-offsets": SOFTMAX_CLEANUP_LOOP_OFFSETS,
        "optimize-loop-single-evaluation": SOFTMAX_OPTIMIZE_LOOP_SINGLE_EVALUATION,
    },
    "scalar": {
        "optimize-domain": SCALAR_OPTIMIZE_DOMAIN,
        "mark-loops": SCALAR_MARK_LOOPS,
        "reduce-decomposition": UNCHANGED,  # no reduction
        "fuse-loops": UNCHANGED,  # a single loop nest
        "split-loops": UNCHANGED,  # nothing fused
        "move-result-out-of-loop": UNCHANGED,  # the Result is already after the nest
        "insert-buffers": UNCHANGED,  # no loop boundary inside the body
        "insert-load-store": SCALAR_INSERT_LOAD_STORE,
        "move-scalar-to-consumer": SCALAR_MOVE_SCALAR_TO_CONSUMER,
        "insert-broadcast-move": UNCHANGED,  # a Scalar is already a broadcast register value
        "load-move-broadcast-to-broadcast-load": UNCHANGED,  # no BroadcastMove
        "extract-loop-invariants": UNCHANGED,  # a Scalar has no input: it stays beside its consumer
        "init-loops": SCALAR_INIT_LOOPS,
        "propagate-layout": UNCHANGED,  # planar layouts only
        "insert-loops": SCALAR_INSERT_LOOPS,
        "allocate-buffers": UNCHANGED,  # no Buffer
        "clean-repeated-data-pointer-shifts": UNCHANGED,  # every pointer appears once per LoopEnd
        "regs:init-live-ranges": SCALAR_REGS_INIT_LIVE_RANGES,
        "regs:assign-registers": SCALAR_REGS_ASSIGN_REGISTERS,
        "insert-reg-spills": UNCHANGED,  # no ABI call on the interpreter target
        "insert-specific-iterations": SCALAR_INSERT_SPECIFIC_ITERATIONS,
        "normalize-loop-ids": SCALAR_NORMALIZE_LOOP_IDS,
        "cleanup-loop-offsets": SCALAR_CLEANUP_LOOP_OFFSETS,
        "optimize-loop-single-evaluation": SCALAR_OPTIMIZE_LOOP_SINGLE_EVALUATION,
    },
    "row_broadcast": {
        "optimize-domain": ROW_BROADCAST_OPTIMIZE_DOMAIN,
        "mark-loops": ROW_BROADCAST_MARK_LOOPS,
        "reduce-decomposition": UNCHANGED,  # no reduction
        "fuse-loops": UNCHANGED,  # a single loop nest
        "split-loops": UNCHANGED,  # nothing fused
        "move-result-out-of-loop": UNCHANGED,  # the Result is already after the nest
        "insert-buffers": UNCHANGED,  # no loop boundary inside the body
        "insert-load-store": ROW_BROADCAST_INSERT_LOAD_STORE,
        "move-scalar-to-consumer": UNCHANGED,  # no Scalar
        "insert-broadcast-move": ROW_BROADCAST_INSERT_BROADCAST_MOVE,
        "load-move-broadcast-to-broadcast-load": UNCHANGED,  # the BroadcastMove reads Exp, not a Load
        "init-loops": ROW_BROADCAST_INIT_LOOPS,
        "propagate-layout": UNCHANGED,  # planar layouts only
        "insert-loops": ROW_BROADCAST_INSERT_LOOPS,
        "allocate-buffers": UNCHANGED,  # no Buffer
        "clean-repeated-data-pointer-shifts": UNCHANGED,  # every pointer appears once per LoopEnd
        "regs:init-live-ranges": ROW_BROADCAST_REGS_INIT_LIVE_RANGES,
        "regs:assign-registers": ROW_BROADCAST_REGS_ASSIGN_REGISTERS,
        "insert-reg-spills": UNCHANGED,  # no ABI call on the interpreter target
        "insert-specific-iterations": ROW_BROADCAST_INSERT_SPECIFIC_ITERATIONS,
        "normalize-loop-ids": UNCHANGED,  # ids already follow the LoopEnd order (columns 0, rows 1)
        "cleanup-loop-offsets": ROW_BROADCAST_CLEANUP_LOOP_OFFSETS,
        "optimize-loop-single-evaluation": ROW_BROADCAST_OPTIMIZE_LOOP_SINGLE_EVALUATION,
    },
    "two_softmax": {
        "insert-buffers": TWO_SOFTMAX_INSERT_BUFFERS,
        "allocate-buffers": TWO_SOFTMAX_ALLOCATE_BUFFERS,
        "clean-repeated-data-pointer-shifts": TWO_SOFTMAX_CLEAN_REPEATED_DATA_POINTER_SHIFTS,
    },
}


@functools.cache
def _dumps(body_name: str) -> dict[str, str]:
    return lower_with_dumps(body_name)


def _previous(dumps: dict[str, str], pass_name: str) -> str:
    """The dump of the pass that ran just before ``pass_name`` (register dumps are not passes)."""
    names = [k for k in dumps if not k.startswith("regs:")]
    return dumps[names[names.index(pass_name) - 1]]


CASES = [(body, name) for body, table in EXPECTED.items() for name in table]


@pytest.mark.parametrize(("body", "pass_name"), CASES, ids=[f"{b}-{p}" for b, p in CASES])
def test_dump_after_pass(body: str, pass_name: str) -> None:
    dumps = _dumps(body)
    expected = EXPECTED[body][pass_name]
    if expected == UNCHANGED:
        assert dumps[pass_name] == _previous(dumps, pass_name), f"{pass_name} must leave the {body} body unchanged"
    else:
        assert dumps[pass_name] == expected


def test_every_pinned_pass_is_in_the_pipelines() -> None:
    """A renamed or dropped pass must not silently drop out of these checks."""
    ran = set(_dumps("eltwise"))
    for table in EXPECTED.values():
        assert set(table) <= ran


# ExtractLoopInvariants as OpenVINO defines it (lowered/pass/extract_loop_invariants.cpp): an expression
# entering the innermost loop is hoisted when each of its loop input ports has extent 1 along that loop
# (stride 1 x dim 1), Loads included. b's one-element Load, its Exp and the BroadcastMove of the row value
# are then computed once per row, before the column loop. Only the expression lines are compared: the
# order of the column loop's ports is a convention of each implementation.
ROW_BROADCAST_EXTRACT_LOOP_INVARIANTS_EXPRS = """\
LinearIR master_shape=[4,8] loop_depth=2
%0 = Parameter() -> f32[4,8]
%1 = Parameter() -> f32[4,1]
%2 = Load(%1) {count=1 offset=0} -> f32[4,1] loops=[1]
%3 = Exp(%2) -> f32[4,1] loops=[1]
%4 = BroadcastMove(%3) {broadcast_dim=8} -> f32[4,8] loops=[1]
%5 = Load(%0) {count=8 offset=0} -> f32[4,8] loops=[1,0]
%6 = Subtract(%5, %4) {auto_broadcast=numpy} -> f32[4,8] loops=[1,0]
%7 = Store(%6) {count=8 offset=0} -> f32[4,8] loops=[1,0]
%8 = Result(%7) -> f32[4,8]"""


def test_extract_loop_invariants_hoists_row_broadcast_values() -> None:
    dumps = _dumps("row_broadcast")
    exprs = "\n".join(line for line in dumps["extract-loop-invariants"].split("\n") if not line.startswith("loop "))
    assert exprs == ROW_BROADCAST_EXTRACT_LOOP_INVARIANTS_EXPRS

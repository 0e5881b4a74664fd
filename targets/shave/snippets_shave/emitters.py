"""SHVX emitters: one per LinearIR expression kind, and the op -> emitter tables of the ShaveTargetMachine.

Register form: a value of element type ``t`` lives in a vector register as ``t`` lanes (4 f32 or 8 f16); the
LinearIR's ``vector_size`` says how many lanes carry data (4, or 8 when the whole body is f16), so an f16 value
in a 4-lane kernel uses the low half of its register. Memory accesses move exactly ``count`` elements
(``VLD``/``VST`` for a whole 16-byte vector, ``VLDN``/``VSTN`` otherwise), so a tail never touches bytes past
its buffer.

Arithmetic comes in two kinds (``DIRECT`` and ``COMPOSITE``):

* a *direct* op is one rounding SHVX instruction in the lane type (``VADD.f16`` computes in f32 and rounds once
  to f16, which is what numpy's float16 gives);
* a *composite* op is a sequence written on f32 lanes (exp, sigmoid, tanh, ...). On f16 data its input halves
  are widened to f32, the sequence runs on each half and the result is narrowed once, like the reference's
  "compute in f32, round back once".

Emitters translate, they do not allocate: the register allocator gets ``v0..v23`` and ``r2..r23``; every
emitter may use the fixed auxiliary registers :data:`AUX_V` (``v24..v31``) and :data:`AUX_R` (``r24..r26``),
which no value outlives. ``r27..r29`` belong to the kernel emitter (call loop), ``r0`` holds the args address,
``r31`` stays 0 (the link register, and the zero the loops compare against).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from snippets_core.codegen.emitter import Emitter
from snippets_core.errors import CodegenError
from snippets_core.ir.element_type import ElementType
from snippets_core.lowered.port_descriptor import Reg, RegType
from snippets_shave.asm import SREGS, VREGS, Assembler, SReg, VReg, r31
from snippets_shave.isa import LANES, pack_f16, pack_f32

if TYPE_CHECKING:
    from snippets_core.lowered.expression import Expression
    from snippets_shave.target_machine import ShaveTargetMachine

#: registers the allocator hands out
GPR_POOL: tuple[int, ...] = tuple(range(2, 24))
VEC_POOL: tuple[int, ...] = tuple(range(24))
#: scratch registers of the emitters (never live across expressions)
AUX_V: tuple[VReg, ...] = VREGS[24:32]
AUX_R: tuple[SReg, ...] = SREGS[24:27]
ZERO = r31  # 0 for the whole kernel (RET from the entry returns to address 0)

#: element type -> SHVX lane type
LANE_TYPES: dict[ElementType, str] = {ElementType.f32: "f32", ElementType.f16: "f16"}

LOG2E = math.log2(math.e)
LN2 = math.log(2.0)
F16_MAX = float(np.finfo(np.float16).max)


def lane_type(et: ElementType, what: str) -> str:
    t = LANE_TYPES.get(et)
    if t is None:
        raise CodegenError(f"{what}: element type {et} has no SHVX lanes (the shave target computes f32 and f16)")
    return t


def sreg(reg: Reg | None, what: str) -> SReg:
    if reg is None or reg.type != RegType.gpr:
        raise CodegenError(f"{what}: expected a general-purpose register, got {reg}")
    return SREGS[reg.idx]


def vreg(reg: Reg | None, what: str) -> VReg:
    if reg is None or reg.type != RegType.vec:
        raise CodegenError(f"{what}: expected a vector register, got {reg}")
    return VREGS[reg.idx]


def input_type(expr: Expression, port: int = 0) -> ElementType:
    src = expr.input_connectors[port].source
    return src.expr.node.outputs[src.index].element_type


def output_type(expr: Expression, port: int = 0) -> ElementType:
    return expr.node.outputs[port].element_type


def const(a: Assembler, dst: VReg, value: float, t: str, tmp: SReg = AUX_R[0]) -> None:
    """Every lane of ``dst`` = ``value`` in lane type ``t`` (f16 values are rounded to nearest even)."""
    a.MOVI(tmp, pack_f32(value) if t == "f32" else pack_f16(value))
    a.VBCAST(dst, tmp, t=t)


def splat_lane0(a: Assembler, dst: VReg, src: VReg, t: str) -> None:
    """Every lane of ``dst`` = lane 0 of ``src``."""
    a.VEXTRACT(AUX_R[0], src, 0, t=t)
    a.VBCAST(dst, AUX_R[0], t=t)


class ShaveEmitter(Emitter):
    """Base of the SHVX emitters: the registers as SHVX operands, and the assembler of the target machine."""

    def __init__(self, expr: Expression, tm: ShaveTargetMachine) -> None:
        super().__init__(expr)
        self.tm = tm
        #: lanes that carry data (the lowering's vector_size)
        self.valid_lanes = tm.valid_lanes

    def emit_code(self, in_regs: list[Reg | None], out_regs: list[Reg | None], aux: Any = None) -> None:
        self.emit(self.tm.asm, in_regs, out_regs)

    def emit(self, a: Assembler, ins: list[Reg | None], outs: list[Reg | None]) -> None:
        """Nothing to emit by default (Parameter, Result, Buffer, shape-only ops)."""

    @property
    def what(self) -> str:
        return f"{self.expr.type_name} '{self.expr.name}'"


class NopEmitter(ShaveEmitter):
    """Ops that generate no code: their value is a pointer or a register that already holds it."""


def buffer_offset(expr: Expression) -> int:
    """Bytes added at compile time: the place in the scratchpad of the Buffer accessed (0 otherwise)."""
    from snippets_core.lowered.passes.allocate_buffers import BUFFER_OFFSET

    return int(expr.node.rt_info.get(BUFFER_OFFSET, 0))


# --- memory ---------------------------------------------------------------------------------------------------


class LoadEmitter(ShaveEmitter):
    """``count`` elements at ``ptr + offset`` into the low lanes (a whole vector with VLD, else VLDN)."""

    def emit(self, a: Assembler, ins: list[Reg | None], outs: list[Reg | None]) -> None:
        et = input_type(self.expr)
        t = lane_type(et, self.what)
        count = int(self.expr.node.count)
        if not 1 <= count <= LANES[t]:
            raise CodegenError(f"{self.what}: {count} elements do not fit one {t} vector")
        offset = buffer_offset(self.expr) + int(self.expr.node.offset) * et.size
        ptr, dst = sreg(ins[0], self.what), vreg(outs[0], self.what)
        if count == LANES[t]:
            a.VLD(dst, ptr, offset, t=t)
        else:
            a.MOVI(AUX_R[0], count)
            a.VLDN(dst, ptr, offset, AUX_R[0], t=t)


class BroadcastLoadEmitter(ShaveEmitter):
    """One element at ``ptr + offset`` into every lane."""

    def emit(self, a: Assembler, ins: list[Reg | None], outs: list[Reg | None]) -> None:
        et = input_type(self.expr)
        t = lane_type(et, self.what)
        offset = buffer_offset(self.expr) + int(self.expr.node.offset) * et.size
        ptr, dst = sreg(ins[0], self.what), vreg(outs[0], self.what)
        if t == "f32":
            a.LD32(AUX_R[0], ptr, offset)
        else:
            a.LD16U(AUX_R[0], ptr, offset)
        a.VBCAST(dst, AUX_R[0], t=t)


class StoreEmitter(ShaveEmitter):
    """The low ``count`` lanes to ``ptr + offset``; nothing else is written."""

    def emit(self, a: Assembler, ins: list[Reg | None], outs: list[Reg | None]) -> None:
        et = output_type(self.expr)
        t = lane_type(et, self.what)
        count = int(self.expr.node.count)
        if not 1 <= count <= LANES[t]:
            raise CodegenError(f"{self.what}: {count} elements do not fit one {t} vector")
        offset = buffer_offset(self.expr) + int(self.expr.node.offset) * et.size
        src, ptr = vreg(ins[0], self.what), sreg(outs[0], self.what)
        if count == LANES[t]:
            a.VST(src, ptr, offset, t=t)
        else:
            a.MOVI(AUX_R[0], count)
            a.VSTN(src, ptr, offset, AUX_R[0], t=t)


# --- register-only helpers -----------------------------------------------------------------------------------


class BroadcastMoveEmitter(ShaveEmitter):
    def emit(self, a: Assembler, ins: list[Reg | None], outs: list[Reg | None]) -> None:
        t = lane_type(input_type(self.expr), self.what)
        splat_lane0(a, vreg(outs[0], self.what), vreg(ins[0], self.what), t)


class ScalarEmitter(ShaveEmitter):
    def emit(self, a: Assembler, ins: list[Reg | None], outs: list[Reg | None]) -> None:
        t = lane_type(output_type(self.expr), self.what)
        value = float(np.asarray(self.expr.node.value).reshape(-1)[0])
        const(a, vreg(outs[0], self.what), value, t)


class VectorBufferEmitter(NopEmitter):
    """A register whose lanes the following Fill overwrites: nothing to emit."""


def _fill_value(pattern: int, t: str) -> float:
    """The 32-bit pattern of a Fill as a value of lane type ``t`` (f16: the f32 value, saturated to f16)."""
    value = float(np.array(pattern & 0xFFFFFFFF, dtype=np.uint32).view(np.float32))
    if t == "f16" and math.isfinite(value):
        value = max(-F16_MAX, min(F16_MAX, value))
    return value


class FillEmitter(ShaveEmitter):
    """Lanes ``[offset, lanes)`` of the input take the fill value (an identity for the reductions)."""

    def emit(self, a: Assembler, ins: list[Reg | None], outs: list[Reg | None]) -> None:
        t = lane_type(input_type(self.expr), self.what)
        src, dst = vreg(ins[0], self.what), vreg(outs[0], self.what)
        offset = int(self.expr.node.offset)
        if offset >= LANES[t]:
            if dst != src:
                a.VMOV(dst, src, t=t)
            return
        fill, mask = AUX_V[0], AUX_V[1]
        const(a, fill, _fill_value(int(self.expr.node.fill_value), t), t)
        if offset == 0:
            a.VMOV(dst, fill, t=t)
            return
        a.MOVI(AUX_R[0], offset)
        a.VMASKN(mask, AUX_R[0], t=t)
        a.VSEL(dst, src, fill, mask, t=t)


class HorizonEmitter(ShaveEmitter):
    """Every lane = the max (sum) of the data lanes. Lanes past ``valid_lanes`` (an f16 value in a 4-lane
    kernel) are set to the identity first."""

    def emit(self, a: Assembler, ins: list[Reg | None], outs: list[Reg | None]) -> None:
        t = lane_type(input_type(self.expr), self.what)
        src, dst = vreg(ins[0], self.what), vreg(outs[0], self.what)
        is_max = self.expr.type_name == "HorizonMax"
        work = src
        if self.valid_lanes < LANES[t]:
            work, fill, mask = AUX_V[0], AUX_V[1], AUX_V[2]
            const(a, fill, -math.inf if is_max else 0.0, t)
            a.MOVI(AUX_R[0], self.valid_lanes)
            a.VMASKN(mask, AUX_R[0], t=t)
            a.VSEL(work, src, fill, mask, t=t)
        a.emit("VMAXX" if is_max else "VSUMX", AUX_V[3], work, t=t)
        splat_lane0(a, dst, AUX_V[3], t)


# --- loops ----------------------------------------------------------------------------------------------------


def _loop_end_of(begin: Expression) -> Expression:
    for c in begin.output_connectors[-1].get_consumers():
        if c.expr.type_name == "LoopEnd":
            return c.expr
    raise CodegenError(f"LoopBegin '{begin.name}' has no LoopEnd")


class LoopBeginEmitter(ShaveEmitter):
    """Loads the iteration count into the loop's gpr and marks the top of the body. A loop of W elements by
    I runs W // I times (the tail is a loop of its own, made by InsertSpecificIterations)."""

    def __init__(self, expr: Expression, tm: ShaveTargetMachine) -> None:
        super().__init__(expr, tm)
        end = _loop_end_of(expr).node
        if end.work_amount is None:
            raise CodegenError(f"loop {end.loop_id} has a dynamic work amount; a SHAVE blob needs static shapes")
        self.evaluate_once = bool(end.evaluate_once)
        self.iterations = 1 if self.evaluate_once else int(end.work_amount) // int(end.increment)
        uid = tm.new_label_id()
        self.body = f"loop{uid}_body"
        self.end = f"loop{uid}_end"

    def emit(self, a: Assembler, ins: list[Reg | None], outs: list[Reg | None]) -> None:
        if self.iterations == 0:
            a.JMP(self.end)
            return
        if self.iterations > 1:
            a.MOVI(sreg(outs[-1], self.what), self.iterations)
        a.label(self.body)


class LoopEndEmitter(ShaveEmitter):
    """Moves the pointers, counts down and loops back while iterations are left, then applies the
    finalization offsets (pointer increments are in elements; the node gives the element sizes)."""

    def emit(self, a: Assembler, ins: list[Reg | None], outs: list[Reg | None]) -> None:
        node = self.expr.node
        begin = self.expr.input_connectors[-1].source.expr.emitter
        if not isinstance(begin, LoopBeginEmitter):
            raise CodegenError(f"{self.what} is not paired with a SHAVE LoopBegin emitter")
        sizes = node.element_type_sizes or (0,) * (len(ins) - 1)
        increments = [int(p) * int(node.increment) * int(s) for p, s in zip(node.ptr_increments, sizes, strict=True)]
        finalization = [int(f) * int(s) for f, s in zip(node.finalization_offsets, sizes, strict=True)]
        ptrs = [sreg(r, self.what) for r in ins[:-1]]
        # a register shared by several ports (e.g. a Buffer read and written in the loop) moves once per port,
        # exactly as the LinearIR's per-port offsets say
        if begin.iterations == 1:
            for reg, inc, fin in zip(ptrs, increments, finalization, strict=True):
                shift = (0 if begin.evaluate_once else inc) + fin
                if shift:
                    a.ADDI(reg, reg, shift)
            return
        if begin.iterations > 1:
            counter = sreg(ins[-1], self.what)
            for reg, inc in zip(ptrs, increments, strict=True):
                if inc:
                    a.ADDI(reg, reg, inc)
            a.ADDI(counter, counter, -1)
            a.BNE(counter, ZERO, begin.body)
        else:
            a.label(begin.end)
        for reg, fin in zip(ptrs, finalization, strict=True):
            if fin:
                a.ADDI(reg, reg, fin)


# --- arithmetic -----------------------------------------------------------------------------------------------
# A direct op: (a, ins, out, t, node) -> emits one rounding instruction (plus non-rounding moves/selects).
# A composite op: (a, ins, out, tmp, node) on f32 lanes; ``out`` may alias an input, so it is written last;
# ``tmp`` holds four scratch registers.

Direct = Callable[[Assembler, list[VReg], VReg, str, Any], None]
Composite = Callable[[Assembler, list[VReg], VReg, list[VReg], Any], None]


def _binary(mnemonic: str) -> Direct:
    def emit(a: Assembler, ins: list[VReg], out: VReg, t: str, node: Any) -> None:
        a.emit(mnemonic, out, ins[0], ins[1], t=t)

    return emit


def _unary(mnemonic: str) -> Direct:
    def emit(a: Assembler, ins: list[VReg], out: VReg, t: str, node: Any) -> None:
        a.emit(mnemonic, out, ins[0], t=t)

    return emit


def _relu(a: Assembler, ins: list[VReg], out: VReg, t: str, node: Any) -> None:
    a.VBCAST(AUX_V[7], ZERO, t=t)
    a.VMAX(out, ins[0], AUX_V[7], t=t)


def _clamp(a: Assembler, ins: list[VReg], out: VReg, t: str, node: Any) -> None:
    # the bounds in the data's type, as the reference clips with np.asarray(min, x.dtype)
    const(a, AUX_V[6], float(node.min), t)
    const(a, AUX_V[7], float(node.max), t)
    a.VCLAMP(out, ins[0], AUX_V[6], AUX_V[7], t=t)


def _prelu(a: Assembler, ins: list[VReg], out: VReg, t: str, node: Any) -> None:
    x, slope = ins
    zero, mask, prod = AUX_V[5], AUX_V[6], AUX_V[7]
    a.VBCAST(zero, ZERO, t=t)
    a.VCMPGT(mask, zero, x, t=t)  # x < 0
    a.VMUL(prod, x, slope, t=t)
    a.VSEL(out, prod, x, mask, t=t)


def _convert_f32_to_f16(saturate: bool) -> Callable[[Assembler, VReg, VReg], None]:
    def emit(a: Assembler, x: VReg, out: VReg) -> None:
        src = x
        if saturate:  # ConvertSaturation clamps to the f16 range instead of overflowing to inf
            const(a, AUX_V[5], -F16_MAX, "f32")
            const(a, AUX_V[6], F16_MAX, "f32")
            a.VCLAMP(AUX_V[7], x, AUX_V[5], AUX_V[6], t="f32")
            src = AUX_V[7]
        a.VCVT(out, src, "f32", 0, t="f16")

    return emit


DIRECT: dict[str, Direct] = {
    "Add": _binary("VADD"),
    "Subtract": _binary("VSUB"),
    "Multiply": _binary("VMUL"),
    "Divide": _binary("VDIV"),
    "Maximum": _binary("VMAX"),
    "Minimum": _binary("VMIN"),
    "Abs": _unary("VABS"),
    "Negative": _unary("VNEG"),
    "Sqrt": _unary("VSQRT"),
    "Relu": _relu,
    "Clamp": _clamp,
    "PRelu": _prelu,
}


def _exp(a: Assembler, ins: list[VReg], out: VReg, tmp: list[VReg], node: Any) -> None:
    const(a, tmp[0], LOG2E, "f32")
    a.VMUL(tmp[1], ins[0], tmp[0], t="f32")
    a.VEXP2(out, tmp[1], t="f32")


def _log(a: Assembler, ins: list[VReg], out: VReg, tmp: list[VReg], node: Any) -> None:
    a.VLOG2(tmp[1], ins[0], t="f32")
    const(a, tmp[0], LN2, "f32")
    a.VMUL(out, tmp[1], tmp[0], t="f32")


def _sigmoid_into(a: Assembler, x: VReg, out: VReg, tmp: list[VReg]) -> None:
    """out = 1 / (1 + 2 ** (-x * log2(e))); large negative x overflow to inf and give 0, as they should."""
    const(a, tmp[0], -LOG2E, "f32")
    a.VMUL(tmp[1], x, tmp[0], t="f32")
    a.VEXP2(tmp[1], tmp[1], t="f32")
    const(a, tmp[0], 1.0, "f32")
    a.VADD(tmp[1], tmp[1], tmp[0], t="f32")
    a.VRCP(out, tmp[1], t="f32")


def _sigmoid(a: Assembler, ins: list[VReg], out: VReg, tmp: list[VReg], node: Any) -> None:
    _sigmoid_into(a, ins[0], out, tmp)


def _swish(a: Assembler, ins: list[VReg], out: VReg, tmp: list[VReg], node: Any) -> None:
    x = ins[0]
    z = x
    if len(ins) > 1:  # beta * x
        a.VMUL(tmp[2], ins[1], x, t="f32")
        z = tmp[2]
    _sigmoid_into(a, z, tmp[3], tmp)
    a.VMUL(out, x, tmp[3], t="f32")


def _tanh(a: Assembler, ins: list[VReg], out: VReg, tmp: list[VReg], node: Any) -> None:
    """sign(x) * (1 - e) / (1 + e) with e = 2 ** (-2 |x| log2(e)): no overflow for any x."""
    x = ins[0]
    a.VABS(tmp[1], x, t="f32")
    const(a, tmp[0], -2.0 * LOG2E, "f32")
    a.VMUL(tmp[1], tmp[1], tmp[0], t="f32")
    a.VEXP2(tmp[1], tmp[1], t="f32")
    const(a, tmp[0], 1.0, "f32")
    a.VSUB(tmp[2], tmp[0], tmp[1], t="f32")
    a.VADD(tmp[1], tmp[0], tmp[1], t="f32")
    a.VDIV(tmp[2], tmp[2], tmp[1], t="f32")
    a.VNEG(tmp[1], tmp[2], t="f32")
    a.VBCAST(tmp[0], ZERO, t="f32")
    a.VCMPGT(tmp[0], tmp[0], x, t="f32")
    a.VSEL(out, tmp[1], tmp[2], tmp[0], t="f32")


def _elu(a: Assembler, ins: list[VReg], out: VReg, tmp: list[VReg], node: Any) -> None:
    x = ins[0]
    const(a, tmp[0], LOG2E, "f32")
    a.VMUL(tmp[1], x, tmp[0], t="f32")
    a.VEXP2(tmp[1], tmp[1], t="f32")
    const(a, tmp[0], 1.0, "f32")
    a.VSUB(tmp[1], tmp[1], tmp[0], t="f32")
    const(a, tmp[0], float(node.alpha), "f32")
    a.VMUL(tmp[1], tmp[1], tmp[0], t="f32")
    a.VBCAST(tmp[0], ZERO, t="f32")
    a.VCMPGT(tmp[2], x, tmp[0], t="f32")
    a.VSEL(out, x, tmp[1], tmp[2], t="f32")


def _softplus(a: Assembler, ins: list[VReg], out: VReg, tmp: list[VReg], node: Any) -> None:
    """max(x, 0) + ln(1 + e ** -|x|): no overflow for large x."""
    x = ins[0]
    a.VABS(tmp[1], x, t="f32")
    const(a, tmp[0], -LOG2E, "f32")
    a.VMUL(tmp[1], tmp[1], tmp[0], t="f32")
    a.VEXP2(tmp[1], tmp[1], t="f32")
    const(a, tmp[0], 1.0, "f32")
    a.VADD(tmp[1], tmp[1], tmp[0], t="f32")
    a.VLOG2(tmp[1], tmp[1], t="f32")
    const(a, tmp[0], LN2, "f32")
    a.VMUL(tmp[1], tmp[1], tmp[0], t="f32")
    a.VBCAST(tmp[0], ZERO, t="f32")
    a.VMAX(tmp[2], x, tmp[0], t="f32")
    a.VADD(out, tmp[2], tmp[1], t="f32")


def _hsigmoid_into(a: Assembler, x: VReg, dst: VReg, tmp: list[VReg], divide: bool) -> None:
    const(a, tmp[0], 3.0, "f32")
    a.VADD(tmp[1], x, tmp[0], t="f32")
    a.VBCAST(tmp[0], ZERO, t="f32")
    const(a, tmp[2], 6.0, "f32")
    a.VCLAMP(tmp[1], tmp[1], tmp[0], tmp[2], t="f32")
    if divide:
        a.VDIV(dst, tmp[1], tmp[2], t="f32")
    else:
        a.VMOV(dst, tmp[1], t="f32")


def _hsigmoid(a: Assembler, ins: list[VReg], out: VReg, tmp: list[VReg], node: Any) -> None:
    _hsigmoid_into(a, ins[0], out, tmp, divide=True)


def _hswish(a: Assembler, ins: list[VReg], out: VReg, tmp: list[VReg], node: Any) -> None:
    # x * clip(x + 3, 0, 6) / 6, in the reference's order of operations
    _hsigmoid_into(a, ins[0], tmp[3], tmp, divide=False)
    a.VMUL(tmp[3], ins[0], tmp[3], t="f32")
    a.VDIV(out, tmp[3], tmp[2], t="f32")


def _squared_difference(a: Assembler, ins: list[VReg], out: VReg, tmp: list[VReg], node: Any) -> None:
    a.VSUB(tmp[0], ins[0], ins[1], t="f32")
    a.VMUL(out, tmp[0], tmp[0], t="f32")


def _power_static(a: Assembler, ins: list[VReg], out: VReg, tmp: list[VReg], node: Any) -> None:
    x, p = ins[0], float(node.power)
    special = {-1.0: "VRCP", 0.5: "VSQRT", -0.5: "VRSQRT"}
    if p in special:
        a.emit(special[p], out, x, t="f32")
    elif p == 0.0:
        const(a, out, 1.0, "f32")
    elif p == 1.0:
        a.VMOV(out, x, t="f32")
    elif p.is_integer() and abs(p) <= 16:
        # binary powering of |p|, then a reciprocal for negative powers
        n = int(abs(p))
        a.VMOV(tmp[1], x, t="f32")  # base
        first = True
        while n:
            if n & 1:
                if first:
                    a.VMOV(tmp[2], tmp[1], t="f32")
                    first = False
                else:
                    a.VMUL(tmp[2], tmp[2], tmp[1], t="f32")
            n >>= 1
            if n:
                a.VMUL(tmp[1], tmp[1], tmp[1], t="f32")
        if p < 0:
            a.VRCP(out, tmp[2], t="f32")
        else:
            a.VMOV(out, tmp[2], t="f32")
    else:
        # x ** p = 2 ** (p * log2 x); negative x gives NaN, as numpy does for a non-integer power
        a.VLOG2(tmp[1], x, t="f32")
        const(a, tmp[0], p, "f32")
        a.VMUL(tmp[1], tmp[1], tmp[0], t="f32")
        a.VEXP2(out, tmp[1], t="f32")


COMPOSITE: dict[str, Composite] = {
    "Exp": _exp,
    "Log": _log,
    "Sigmoid": _sigmoid,
    "Swish": _swish,
    "Tanh": _tanh,
    "Elu": _elu,
    "SoftPlus": _softplus,
    "HSigmoid": _hsigmoid,
    "HSwish": _hswish,
    "SquaredDifference": _squared_difference,
    "PowerStatic": _power_static,
}


class DirectEmitter(ShaveEmitter):
    """One rounding instruction in the value's lane type."""

    def emit(self, a: Assembler, ins: list[Reg | None], outs: list[Reg | None]) -> None:
        t = lane_type(output_type(self.expr), self.what)
        regs = [vreg(r, self.what) for r in ins]
        DIRECT[self.expr.type_name](a, regs, vreg(outs[0], self.what), t, self.expr.node)


class CompositeEmitter(ShaveEmitter):
    """A sequence on f32 lanes; f16 values are widened half by half and narrowed once."""

    def emit(self, a: Assembler, ins: list[Reg | None], outs: list[Reg | None]) -> None:
        t = lane_type(output_type(self.expr), self.what)
        fn = COMPOSITE[self.expr.type_name]
        regs = [vreg(r, self.what) for r in ins]
        out = vreg(outs[0], self.what)
        if len(regs) > 2:
            raise CodegenError(f"{self.what}: composite ops take at most two inputs")
        tmp = list(AUX_V[4:8])
        if t == "f32":
            fn(a, regs, out, tmp, self.expr.node)
            return
        halves = 2 if self.valid_lanes > 4 else 1
        lo = [AUX_V[i] for i in range(len(regs))]
        hi = [AUX_V[2 + i] for i in range(len(regs))]
        for i, r in enumerate(regs):
            a.VCVT(lo[i], r, "f16", 0, t="f32")
            if halves == 2:
                a.VCVT(hi[i], r, "f16", 1, t="f32")
        fn(a, lo, lo[0], tmp, self.expr.node)
        if halves == 2:
            fn(a, hi, hi[0], tmp, self.expr.node)
        a.VCVT(out, lo[0], "f32", 0, t="f16")
        if halves == 2:
            a.VCVT(out, hi[0], "f32", 1, t="f16")


class ConvertEmitter(ShaveEmitter):
    """f32 <-> f16 on the low four lanes (a kernel that converts has 4 data lanes); f32 -> f16 saturates for
    ConvertSaturation and overflows to inf otherwise, like the reference."""

    def emit(self, a: Assembler, ins: list[Reg | None], outs: list[Reg | None]) -> None:
        src_t = lane_type(input_type(self.expr), self.what)
        dst_t = lane_type(output_type(self.expr), self.what)
        x, out = vreg(ins[0], self.what), vreg(outs[0], self.what)
        if src_t == dst_t:
            if x != out:
                a.VMOV(out, x, t=dst_t)
            return
        if self.valid_lanes > 4:
            raise CodegenError(f"{self.what}: a conversion needs a 4-lane kernel")
        if src_t == "f16":
            a.VCVT(out, x, "f16", 0, t="f32")
        else:
            _convert_f32_to_f16(self.expr.type_name == "ConvertSaturation")(a, x, out)


#: ops without code (pointers and shapes only)
NOP_OPS = (
    "Parameter", "Result", "Buffer", "RankNormalization", "SnippetsReshape", "Reorder", "Nop",
    "PerfCountBegin", "PerfCountEnd",
)  # fmt: skip

EMITTERS: dict[str, type[ShaveEmitter]] = {
    **{op: NopEmitter for op in NOP_OPS},
    "VectorBuffer": VectorBufferEmitter,
    "Load": LoadEmitter,
    "BroadcastLoad": BroadcastLoadEmitter,
    "Store": StoreEmitter,
    "BroadcastMove": BroadcastMoveEmitter,
    "Scalar": ScalarEmitter,
    "Fill": FillEmitter,
    "HorizonMax": HorizonEmitter,
    "HorizonSum": HorizonEmitter,
    "LoopBegin": LoopBeginEmitter,
    "LoopEnd": LoopEndEmitter,
    **{op: DirectEmitter for op in DIRECT},
    **{op: CompositeEmitter for op in COMPOSITE},
    **{op: ConvertEmitter for op in ("Convert", "ConvertSaturation", "ConvertTruncation")},
}

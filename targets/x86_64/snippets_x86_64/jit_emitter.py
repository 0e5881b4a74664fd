"""The x86-64 Emitter base: what every emitter of this target receives and how it writes code.

An emitter is built by the TargetMachine's jitters table as ``cls(expr, h)``, where ``h`` is the
:class:`~snippets_x86_64.target_machine.X86_64TargetMachine` generating the kernel. When the KernelEmitter
reaches the expression it calls ``emit_code(in_regs, out_regs, aux)`` with the core's (physical) register
numbers; :meth:`JitEmitter.emit_code` maps them to assembly registers and calls :meth:`JitEmitter.emit`
with the kernel's Assembler ``h.asm``.

Register contract:

* gpr ``i`` is ``GP64[i]`` (hardware numbering), vec ``i`` is ``ZMM[i]``, mask ``i`` is ``K[i]``;
* every lane is 32 bits: f32/f16/bf16 elements are held as f32, integer and boolean elements as i32 (sign- or
  zero-extended); Loads widen from the memory type and Stores narrow to it (see ``memory_emitters``);
* ``aux`` holds registers the emitter may clobber: never one of its inputs or outputs, never a live
  value (the KernelEmitter spills live values to the stack if it must to free enough of them);
* an output register may be the same as an input register (the allocator reuses dead inputs).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.codegen.emitter import Emitter
from snippets_core.lowered.port_descriptor import Reg, RegType
from snippets_x86_64.asm import GP64, ZMM, Assembler, GpReg, K, MaskReg, VecReg

if TYPE_CHECKING:
    from snippets_core.lowered.expression import Expression
    from snippets_x86_64.target_machine import X86_64TargetMachine

AsmReg = GpReg | VecReg | MaskReg


@dataclass(frozen=True)
class AuxRegs:
    """Scratch registers handed to one emitter: general-purpose, vector (zmm) and op-mask (k1..k7)."""

    gprs: tuple[GpReg, ...] = ()
    vecs: tuple[VecReg, ...] = ()
    masks: tuple[MaskReg, ...] = ()


def to_asm(reg: Reg) -> AsmReg:
    """The assembly register of a physical core register."""
    table = {RegType.gpr: GP64, RegType.vec: ZMM, RegType.mask: K}
    return table[reg.type][reg.idx]


class JitEmitter(Emitter):
    """Base class of the x86-64 emitters (see the module docstring for the register contract)."""

    aux_gprs: ClassVar[int] = 0
    aux_vecs: ClassVar[int] = 0
    aux_masks: ClassVar[int] = 0

    def __init__(self, expr: Expression, h: X86_64TargetMachine) -> None:
        super().__init__(expr)
        self.h = h

    def aux_needs(self) -> tuple[int, int, int]:
        """(gprs, vecs, masks) this instance needs; emitters whose needs depend on attributes override it."""
        return self.aux_gprs, self.aux_vecs, self.aux_masks

    def emit_code(self, in_regs: list[Reg | None], out_regs: list[Reg | None], aux: AuxRegs | None = None) -> None:  # type: ignore[override]
        ins = [None if r is None else to_asm(r) for r in in_regs]
        outs = [None if r is None else to_asm(r) for r in out_regs]
        self.emit(self.h.asm, ins, outs, aux or AuxRegs())

    @abstractmethod
    def emit(self, a: Assembler, ins: list, outs: list, aux: AuxRegs) -> None:
        """Append the expression's instructions to ``a``."""


def lea_runtime(a: Assembler, h: X86_64TargetMachine, dst: GpReg, base: GpReg, offset: object, name: str) -> None:
    """``dst = base + offset``: ``offset`` a byte count known at compile time, or a dynamic one (a SymInt: a
    buffer's place after buffers of sizes known only at run time) read from the runtime-parameter block."""
    from snippets_core.lowered.symbolic import is_dynamic

    if is_dynamic(offset):
        a.mov(dst, h.runtime_value(name, offset))
        a.add(dst, base)
    else:
        a.lea(dst, base + int(offset))  # type: ignore[call-overload]


class NopEmitter(JitEmitter):
    """Ops that generate no code: Parameter, Result, Buffer (its pointer is set up by the kernel prologue),
    shape-only ops (RankNormalization, Reshape, Reorder: a new view of the same memory), VectorBuffer (a
    register whose lanes the following Fill overwrites), Nop, PerfCount marks."""

    def emit(self, a: Assembler, ins: list, outs: list, aux: AuxRegs) -> None:
        return None

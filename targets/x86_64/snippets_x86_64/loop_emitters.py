"""LoopBegin/LoopEnd and RegSpillBegin/RegSpillEnd.

A loop with static work amount ``W`` and increment ``I`` runs its body ``W // I`` times (the tail, if any,
is a separate loop made by InsertSpecificIterations). The work-amount counter lives in the gpr of the
LoopBegin's output and counts the iterations left, so the loop closes with ``dec; jnz``. After every
iteration each data pointer of the loop moves by ``ptr_increment * I * data_size`` bytes; after the loop by
``finalization_offset * data_size`` bytes. A loop marked ``evaluate_once`` (OptimizeLoopSingleEvaluation
folded its pointer arithmetic into the finalization offsets) has no counter and no jump. A loop whose work
amount is below one increment skips its body and only applies the finalization offsets.

A loop of a kernel lowered for every shape (``Config.symbolic_dims``) may have a dynamic work amount, increment
(a tail of dynamic size), pointer increments or finalization offsets: each such value is read from its stack
slot of the runtime-parameter block (``X86_64TargetMachine.runtime_value``; the configurator stores the
iteration count and byte shifts precomputed), so the loop loads its counter from memory, skips the body when it
is 0 (``test; jz``), and adds the shifts from memory; static values stay immediates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snippets_core.errors import CodegenError
from snippets_core.lowered.symbolic import loop_iterations
from snippets_x86_64.asm import Assembler, Label, Mem
from snippets_x86_64.jit_emitter import AuxRegs, JitEmitter

if TYPE_CHECKING:
    from snippets_core.ir.ops.snippets import LoopEnd
    from snippets_core.lowered.expression import Expression
    from snippets_x86_64.asm import GpReg
    from snippets_x86_64.target_machine import X86_64TargetMachine


def add_imm(a: Assembler, reg: GpReg, value: int | Mem, aux: AuxRegs | None = None) -> None:
    """``reg += value`` (nothing for 0); a value beyond 32 bits goes through an aux gpr; a runtime parameter
    (a stack slot) is added from memory."""
    if isinstance(value, Mem):
        a.add(reg, value)
        return
    if value == 0:
        return
    if -(2**31) <= value < 2**31:
        a.add(reg, value)
        return
    if aux is None or not aux.gprs:
        raise CodegenError(f"pointer shift {value} needs a 64-bit immediate and no scratch register was given")
    a.mov(aux.gprs[0], value)
    a.add(reg, aux.gprs[0])


def _loop_end_of(begin: Expression) -> Expression:
    for c in begin.output_connectors[-1].get_consumers():
        if c.expr.type_name == "LoopEnd":
            return c.expr
    raise CodegenError(f"LoopBegin '{begin.name}' has no LoopEnd")


class LoopBeginEmitter(JitEmitter):
    """Loads the iteration count and marks the top of the body."""

    def __init__(self, expr: Expression, h: X86_64TargetMachine) -> None:
        super().__init__(expr, h)
        self.end_expr = _loop_end_of(expr)
        end: LoopEnd = self.end_expr.node  # type: ignore[assignment]
        if end.work_amount is None:
            raise CodegenError(f"loop {end.loop_id} has an unknown work amount")
        self.work_amount = end.work_amount
        self.increment = end.increment
        self.evaluate_once = end.evaluate_once
        iterations = 1 if self.evaluate_once else loop_iterations(self.work_amount, self.increment)
        #: an int, or the stack slot of a count known only at run time
        self.iterations = h.runtime_value(f"loop{end.loop_id}.iterations", iterations)
        self.dynamic = isinstance(self.iterations, Mem)
        self.body = Label(f"loop{end.loop_id}.body")
        self.end = Label(f"loop{end.loop_id}.end")

    def emit(self, a: Assembler, ins: list, outs: list, aux: AuxRegs) -> None:
        if self.dynamic:
            a.mov(outs[-1], self.iterations)
            a.test(outs[-1], outs[-1])
            a.jz(self.end)
            a.bind(self.body)
            return
        if self.iterations == 0:
            a.jmp(self.end)
            return
        if self.iterations > 1:
            a.mov(outs[-1], self.iterations)
        a.bind(self.body)


class LoopEndEmitter(JitEmitter):
    """Moves the pointers, loops back while iterations are left, then applies the finalization offsets."""

    aux_gprs = 0

    def __init__(self, expr: Expression, h: X86_64TargetMachine) -> None:
        super().__init__(expr, h)
        node: LoopEnd = expr.node  # type: ignore[assignment]
        self.node = node
        sizes = node.element_type_sizes or (0,) * (len(expr.input_connectors) - 1)
        lid = node.loop_id
        self.increments = [h.runtime_value(f"loop{lid}.ptr_increment[{k}]", p * node.increment * s)
                           for k, (p, s) in enumerate(zip(node.ptr_increments, sizes))]
        self.finalization = [h.runtime_value(f"loop{lid}.finalization[{k}]", f * s)
                             for k, (f, s) in enumerate(zip(node.finalization_offsets, sizes))]

    def begin(self) -> LoopBeginEmitter:
        emitter = self.expr.input_connectors[-1].source.expr.emitter
        if not isinstance(emitter, LoopBeginEmitter):
            raise CodegenError(f"LoopEnd '{self.expr.name}' is not paired with an x86-64 LoopBegin emitter")
        return emitter

    def aux_needs(self) -> tuple[int, int, int]:
        wide = any(not isinstance(v, Mem) and not -(2**31) <= v < 2**31 for v in self.increments + self.finalization)
        return (1 if wide else 0), 0, 0

    def emit(self, a: Assembler, ins: list, outs: list, aux: AuxRegs) -> None:
        begin = self.begin()
        ptrs, counter = ins[:-1], ins[-1]
        if begin.dynamic:
            for reg, inc in zip(ptrs, self.increments):
                add_imm(a, reg, inc, aux)
            a.dec(counter)
            a.jnz(begin.body)
            a.bind(begin.end)
            for reg, fin in zip(ptrs, self.finalization):
                add_imm(a, reg, fin, aux)
            return
        if begin.iterations == 1:
            # one pass: the shift after it (none when evaluated once) and the finalization merge into one add
            for reg, inc, fin in zip(ptrs, self.increments, self.finalization):
                inc = 0 if begin.evaluate_once else inc
                if isinstance(inc, Mem) or isinstance(fin, Mem):  # runtime values: one add each
                    add_imm(a, reg, inc, aux)
                    add_imm(a, reg, fin, aux)
                else:
                    add_imm(a, reg, inc + fin, aux)
            return
        if begin.iterations > 1:
            for reg, inc in zip(ptrs, self.increments):
                add_imm(a, reg, inc, aux)
            a.dec(counter)
            a.jnz(begin.body)
        else:
            a.bind(begin.end)  # the LoopBegin jumped here: no iteration, only the finalization
        for reg, fin in zip(ptrs, self.finalization):
            add_imm(a, reg, fin, aux)


class RegSpillBeginEmitter(JitEmitter):
    """Saves ``regs_to_spill`` to stack slots (vector registers as whole zmm, gprs as qwords)."""

    def __init__(self, expr: Expression, h: X86_64TargetMachine) -> None:
        super().__init__(expr, h)
        from snippets_x86_64.jit_emitter import to_asm

        self.regs = [to_asm(r) for r in expr.node.regs_to_spill]
        self.slots = [h.asm.stack_slot(64 if r.kind == "vec" else 8) for r in self.regs]

    def emit(self, a: Assembler, ins: list, outs: list, aux: AuxRegs) -> None:
        for reg, slot in zip(self.regs, self.slots):
            self.h.save(a, reg, slot)


class RegSpillEndEmitter(JitEmitter):
    """Restores what the matching RegSpillBegin saved."""

    def emit(self, a: Assembler, ins: list, outs: list, aux: AuxRegs) -> None:
        begin = self.expr.input_connectors[0].source.expr.emitter
        if not isinstance(begin, RegSpillBeginEmitter):
            raise CodegenError(f"RegSpillEnd '{self.expr.name}' is not paired with a RegSpillBegin emitter")
        for reg, slot in zip(begin.regs, begin.slots):
            self.h.restore(a, reg, slot)

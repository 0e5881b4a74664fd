"""Load, Store and BroadcastLoad: vectors between memory and registers, with masked tails.

Register form (shared with the arithmetic emitters): every lane is 32 bits. f32/f16/bf16 elements are held
as f32, i32/u32/i16/u16/i8/u8/boolean elements as i32 (sign- or zero-extended). A Load widens from the
memory type, a Store narrows to it (by truncation, the low bits: values in range are unchanged, the IR's
Convert ops did any saturation, and the i32 result of a narrow-integer op that left the type's range, e.g. i8
100 + 100, wraps as numpy does; f32 -> f16/bf16 rounds to nearest even). A vector holds 16 elements whatever their type.

A full access (``count`` equal to the vector size) is a plain move (widening/narrowing moves read or write
memory directly). A shorter one (a tail, or a one-element access) is a masked move whose op-mask selects
exactly ``count`` elements, read from the constant pool with ``kmovw``: AVX-512 masked ``vmovups``/
``vmovdqu8``/``vmovdqu16`` never touch the memory of unselected elements, so a tail never reads or writes
past the end of its array (and never faults on an inaccessible page behind it). A tail whose size is known
only at run time reads its mask from its runtime-parameter slot instead; narrower types are moved
with the masked move first and widened/narrowed in registers. Masked loads zero the unselected lanes, so
those hold no garbage (NaN, denormals).

The byte offset added to the pointer is ``offset * sizeof(T)`` plus, for accesses to a Buffer, the place of
that buffer in the scratchpad (``BUFFER_OFFSET`` in the node's rt_info, set by AllocateBuffers).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from snippets_core.errors import CodegenError, UnsupportedByTarget
from snippets_core.ir.element_type import ElementType
from snippets_core.lowered.symbolic import as_dim, is_dynamic, low_mask
from snippets_x86_64.asm import Assembler, Mem, byte, dword, word
from snippets_x86_64.jit_emitter import AuxRegs, JitEmitter

if TYPE_CHECKING:
    from snippets_core.lowered.expression import Expression
    from snippets_x86_64.asm import GpReg, MaskReg, VecReg
    from snippets_x86_64.target_machine import X86_64TargetMachine

ET = ElementType

#: memory type -> how a 32-bit lane holds it: "f32" (floats) or "i32" (integers, booleans)
LANE_FORM = {
    ET.f32: "f32",
    ET.f16: "f32",
    ET.bf16: "f32",
    ET.i32: "i32",
    ET.u32: "i32",
    ET.i16: "i32",
    ET.u16: "i32",
    ET.i8: "i32",
    ET.u8: "i32",
    ET.boolean: "i32",
}
MEMORY_TYPES = tuple(LANE_FORM)

#: element size -> masked move of raw elements (the mask counts elements of that size)
_RAW_MOVE = {4: "vmovups", 2: "vmovdqu16", 1: "vmovdqu8"}


def buffer_offset(expr: Expression) -> Any:
    """Bytes added to the pointer: the place in the scratchpad of the Buffer accessed (0 otherwise); a SymInt for
    a Buffer placed after one whose size is known only at run time (SolveBufferMemory)."""
    from snippets_core.lowered.passes.allocate_buffers import BUFFER_OFFSET

    off = expr.node.rt_info.get(BUFFER_OFFSET, 0)
    return off if is_dynamic(off) else int(off)


def raw(reg: VecReg, nbytes: int) -> VecReg:
    """The register at the narrowest width (xmm, ymm, zmm) that holds ``nbytes`` of raw elements."""
    if nbytes <= 16:
        return reg.xmm
    if nbytes <= 32:
        return reg.ymm
    return reg.zmm


def element_type_of_input(expr: Expression, port: int = 0) -> ElementType:
    src = expr.input_connectors[port].source
    return src.expr.node.outputs[src.index].element_type


# --- widening (memory image -> 32-bit lanes) ---------------------------------------------------------------------
# each takes (a, dst zmm, src) where src is a memory operand of 16 elements or the register holding their raw image


def _widen_bf16(a: Assembler, dst: VecReg, src: VecReg | Mem) -> None:
    a.vpmovzxwd(dst, src)
    a.vpslld(dst, dst, 16)  # bf16 is the high half of an f32


WIDEN: dict[ElementType, Callable[[Assembler, VecReg, object], None]] = {
    ET.f16: lambda a, dst, src: a.vcvtph2ps(dst, src),
    ET.bf16: _widen_bf16,
    ET.i16: lambda a, dst, src: a.vpmovsxwd(dst, src),
    ET.u16: lambda a, dst, src: a.vpmovzxwd(dst, src),
    ET.i8: lambda a, dst, src: a.vpmovsxbd(dst, src),
    ET.u8: lambda a, dst, src: a.vpmovzxbd(dst, src),
    ET.boolean: lambda a, dst, src: a.vpmovzxbd(dst, src),
}

# --- narrowing (32-bit lanes -> raw image in the low bytes of a register) -----------------------------------------

NARROW: dict[ElementType, Callable[[Assembler, VecReg, VecReg], None]] = {
    ET.f16: lambda a, dst, src: a.vcvtps2ph(dst.ymm, src, 0),  # imm 0: round to nearest even
    ET.bf16: lambda a, dst, src: a.vcvtneps2bf16(dst.ymm, src),
    ET.i16: lambda a, dst, src: a.vpmovdw(dst.ymm, src),
    ET.u16: lambda a, dst, src: a.vpmovdw(dst.ymm, src),
    ET.i8: lambda a, dst, src: a.vpmovdb(dst.xmm, src),
    ET.u8: lambda a, dst, src: a.vpmovdb(dst.xmm, src),
    ET.boolean: lambda a, dst, src: a.vpmovdb(dst.xmm, src),
}


class MemoryEmitter(JitEmitter):
    """Shared by the memory emitters: the memory element type, the count, and the memory operand."""

    def __init__(self, expr: Expression, h: X86_64TargetMachine, element_type: ElementType, count: int) -> None:
        super().__init__(expr, h)
        if element_type not in LANE_FORM:
            raise UnsupportedByTarget(f"{expr.type_name} '{expr.name}': no memory access for element type {element_type}")
        self.element_type = element_type
        self.size = element_type.size
        self.count = count
        #: a tail of dynamic size: the stack slot of its op-mask (the runtime-parameter block holds it)
        self.mask_slot = h.runtime_value(f"tail_mask({count})", low_mask(count)) if is_dynamic(count) else None
        if self.mask_slot is None and (self.count < 1 or self.count > h.vector_size):
            raise CodegenError(
                f"{expr.type_name} '{expr.name}' moves {self.count} elements; a vector holds {h.vector_size}"
            )
        offset = buffer_offset(expr) + int(expr.node.offset) * self.size
        #: a Buffer at an offset known only at run time: the stack slot of that offset (added to the pointer in an
        #: aux gpr before the access), and the displacement is 0
        self.offset_slot = h.runtime_value(f"buffer_offset({offset})", offset) if is_dynamic(offset) else None
        self.byte_offset = 0 if self.offset_slot is not None else offset

    def address(self, a: Assembler, base: GpReg, aux: AuxRegs) -> Mem:
        """``[base + offset]``; a dynamic offset is added to ``base`` in the last aux gpr first."""
        if self.offset_slot is None:
            return base + self.byte_offset
        tmp = aux.gprs[-1]
        a.mov(tmp, self.offset_slot)
        a.add(tmp, base)
        return tmp + 0

    @property
    def offset_gprs(self) -> int:
        """The aux gprs :meth:`address` needs."""
        return 0 if self.offset_slot is None else 1

    @property
    def masked(self) -> bool:
        return self.mask_slot is not None or self.count < self.h.vector_size

    @property
    def full_bytes(self) -> int:
        return self.h.vector_size * self.size

    def load_mask(self, a: Assembler, aux: AuxRegs) -> MaskReg:
        """Put the mask of ``count`` elements into the aux mask register (from the constant pool)."""
        k = aux.masks[0]
        if self.mask_slot is not None:
            a.kmovw(k, word[self.mask_slot])  # the low 16 bits of the qword slot
            return k
        a.kmovw(k, word[a.const_data(((1 << self.count) - 1).to_bytes(2, "little"), 2)])
        return k


class LoadEmitter(MemoryEmitter):
    """Load (and LoadReorder, whose permutation is in the pointer arithmetic): ``count`` elements, widened."""

    def __init__(self, expr: Expression, h: X86_64TargetMachine) -> None:
        super().__init__(expr, h, element_type_of_input(expr), as_dim(expr.node.count))

    def aux_needs(self) -> tuple[int, int, int]:
        return self.offset_gprs, 0, 1 if self.masked else 0

    def emit(self, a: Assembler, ins: list, outs: list, aux: AuxRegs) -> None:
        src: Mem = self.address(a, ins[0], aux)
        dst = outs[0].zmm
        widen = WIDEN.get(self.element_type)
        if not self.masked:
            if widen is None:
                a.vmovups(dst, src)
            else:
                widen(a, dst, src)
            return
        k = self.load_mask(a, aux)
        image = raw(dst, self.full_bytes)
        a.emit(_RAW_MOVE[self.size], image.mask(k).z, src)
        if widen is not None:
            widen(a, dst, image)


class StoreEmitter(MemoryEmitter):
    """Store the low ``count`` elements of a register, narrowed to the memory type (the input register is
    left intact: the value may be read again after the Store)."""

    def __init__(self, expr: Expression, h: X86_64TargetMachine) -> None:
        et = expr.node.outputs[0].element_type
        super().__init__(expr, h, et, as_dim(expr.node.count))
        if et == ET.bf16 and "avx512_bf16" not in h.cpu_features:
            raise UnsupportedByTarget(f"Store '{expr.name}' of bf16 needs AVX512_BF16 (vcvtneps2bf16), which this CPU lacks")

    def aux_needs(self) -> tuple[int, int, int]:
        return self.offset_gprs, (1 if self.element_type in NARROW else 0), (1 if self.masked else 0)

    def emit(self, a: Assembler, ins: list, outs: list, aux: AuxRegs) -> None:
        dst: Mem = self.address(a, outs[0], aux)
        src = ins[0].zmm
        narrow = NARROW.get(self.element_type)
        if narrow is not None:
            image = raw(aux.vecs[0], self.full_bytes)
            narrow(a, image, src)
        else:
            image = src
        if not self.masked:
            a.vmovups(dst, image)
            return
        k = self.load_mask(a, aux)
        a.emit(_RAW_MOVE[self.size], dst.mask(k), image)


#: memory element size -> broadcast of one raw element from memory, and the size hint of its source
_BROADCAST = {4: ("vbroadcastss", dword), 2: ("vpbroadcastw", word), 1: ("vpbroadcastb", byte)}


class BroadcastLoadEmitter(MemoryEmitter):
    """Read one element, widen it, and broadcast it to every lane."""

    def __init__(self, expr: Expression, h: X86_64TargetMachine) -> None:
        super().__init__(expr, h, element_type_of_input(expr), 1)

    def aux_needs(self) -> tuple[int, int, int]:
        return self.offset_gprs, 0, 0

    def emit(self, a: Assembler, ins: list, outs: list, aux: AuxRegs) -> None:
        mnemonic, hint = _BROADCAST[self.size]
        dst = outs[0].zmm
        widen = WIDEN.get(self.element_type)
        src = self.address(a, ins[0], aux)
        if widen is None:
            a.emit(mnemonic, dst, hint[src])
            return
        image = raw(dst, self.full_bytes)
        a.emit(mnemonic, image, hint[src])
        widen(a, dst, image)


class TailFillEmitter(JitEmitter):
    """Fill of a tail of dynamic size (a reduction over a dim known only at run time): lanes ``[tail, 16)`` take
    the 32-bit pattern, under the op-mask ``0xFFFF - ((1 << tail) - 1)`` read from the runtime-parameter block
    (the static Fill is the arithmetic table's ``emit_fill``)."""

    def __init__(self, expr: Expression, h: X86_64TargetMachine) -> None:
        super().__init__(expr, h)
        node = expr.node
        self.mask_slot = h.runtime_value(f"fill_mask({node.offset})", 0xFFFF - low_mask(node.offset))
        self.fill_value = int(node.fill_value) & 0xFFFF_FFFF

    def aux_needs(self) -> tuple[int, int, int]:
        return 0, 0, 1

    def emit(self, a: Assembler, ins: list, outs: list, aux: AuxRegs) -> None:
        dst, src, k = outs[0].zmm, ins[0].zmm, aux.masks[0]
        if dst != src:
            a.vmovaps(dst, src)
        a.kmovw(k, word[self.mask_slot])
        a.vpbroadcastd(dst.mask(k), a.const_i32(self.fill_value))

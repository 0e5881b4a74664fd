"""Hand-written SHVX kernels, the reference for emitters and the workload of the simulator tests.

Every kernel follows docs/kernel_abi.md: it is entered with ``r0 = argsAddr``, reads its MemRefs at run time
(``numDims``, ``dimsAddr``, ``dataAddr``) so one ELF serves any shape, streams full 16-byte vectors, and
finishes with a partial ``VLDN``/``VSTN`` tail so it never touches bytes past a buffer. Buffers must be dense.

Register use: r2 numDims, r3 dims pointer, r4 element (or row) count, r7 lanes, r9 zero, r10/r11 input
pointers, r12 output pointer, r13-r17 temporaries; v0/v1 inputs, v2 result, v3-v4 temporaries, v16+ constants.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from snippets_shave.abi import (
    CLAMP_PARAMS,
    ELTWISE_BINARY_PARAMS,
    ELTWISE_UNARY_PARAMS,
    MEMREF_SIZE,
    REDUCE_PARAMS,
    SOFTMAX_PARAMS,
    ParamsLayout,
)
from snippets_shave.asm import (
    Assembler,
    SReg,
    VReg,
    r0,
    r2,
    r3,
    r4,
    r5,
    r6,
    r7,
    r8,
    r9,
    r10,
    r12,
    r13,
    r14,
    r15,
    r16,
    r17,
    v0,
    v1,
    v2,
    v3,
    v4,
    v16,
    v17,
    v20,
    v21,
)
from snippets_shave.elf import write_kernel_elf
from snippets_shave.isa import LANES, pack_f32

Body = Callable[[Assembler, list[VReg], VReg, str], None]

BINARY_OPS = {"add": "VADD", "sub": "VSUB", "mul": "VMUL", "div": "VDIV", "max": "VMAX", "min": "VMIN"}


def _count_elements(a: Assembler, memref_offset: int = 0) -> None:
    """r4 = product of the dims of the MemRef at ``memref_offset`` in the params struct."""
    a.LD32(r2, r0, memref_offset + 8)
    a.LD32(r3, r0, memref_offset + 12)
    a.MOVI(r4, 1)
    a.MOVI(r5, 0)
    a.label("dims")
    a.BGE(r5, r2, "dims_done")
    a.LD32(r6, r3, 0)
    a.MUL(r4, r4, r6)
    a.ADDI(r3, r3, 4)
    a.ADDI(r5, r5, 1)
    a.JMP("dims")
    a.label("dims_done")


def _broadcast_f32_scalar(a: Assembler, dst: VReg, reg: SReg, t: str) -> None:
    """Broadcast the f32 bits in ``reg`` to every lane of ``dst`` as type ``t`` (rounded to f16 if needed)."""
    a.VBCAST(dst, reg, t="f32")
    if t == "f16":
        a.VCVT(dst, dst, "f32", 0, t="f16")
        a.VEXTRACT(reg, dst, 0, t="f16")
        a.VBCAST(dst, reg, t="f16")


def streaming_kernel(
    name: str,
    layout: ParamsLayout,
    t: str,
    body: Body,
    setup: Callable[[Assembler], None] | None = None,
) -> bytes:
    """An ELF that applies ``body`` lane-wise over dense inputs (MemRefs 0..n-2) into the last MemRef."""
    n_in = len(layout.memrefs) - 1
    in_ptrs = [SReg(10 + i) for i in range(n_in)]
    in_regs = [VReg(i) for i in range(n_in)]
    a = Assembler()
    _count_elements(a)
    for i, ptr in enumerate(in_ptrs):
        a.LD32(ptr, r0, i * MEMREF_SIZE)
    a.LD32(r12, r0, n_in * MEMREF_SIZE)
    a.MOVI(r7, LANES[t])
    a.MOVI(r9, 0)
    if setup is not None:
        setup(a)
    a.label("loop")
    a.BLTU(r4, r7, "tail")
    for reg, ptr in zip(in_regs, in_ptrs, strict=True):
        a.VLD(reg, ptr, 0, t=t)
    body(a, in_regs, v2, t)
    a.VST(v2, r12, 0, t=t)
    for ptr in [*in_ptrs, r12]:
        a.ADDI(ptr, ptr, 16)
    a.SUB(r4, r4, r7)
    a.JMP("loop")
    a.label("tail")
    a.BEQ(r4, r9, "done")
    for reg, ptr in zip(in_regs, in_ptrs, strict=True):
        a.VLDN(reg, ptr, 0, r4, t=t)
    body(a, in_regs, v2, t)
    a.VSTN(v2, r12, 0, r4, t=t)
    a.label("done")
    a.RET()
    return write_kernel_elf(
        name, a.assemble(), params_signature=layout.signature, params_size=layout.size, labels=a.labels
    )


def eltwise_binary(op: str, t: str) -> bytes:
    """``out = op(in0, in1)`` for same-shape inputs; op in :data:`BINARY_OPS`."""
    mnemonic = BINARY_OPS[op]

    def body(a: Assembler, ins: list[VReg], out: VReg, t: str) -> None:
        a.emit(mnemonic, out, ins[0], ins[1], t=t)

    return streaming_kernel(f"eltwise_{op}_{t}", ELTWISE_BINARY_PARAMS, t, body)


def relu(t: str) -> bytes:
    def setup(a: Assembler) -> None:
        a.VBCAST(v16, r9, t=t)  # zero

    def body(a: Assembler, ins: list[VReg], out: VReg, t: str) -> None:
        a.VMAX(out, ins[0], v16, t=t)

    return streaming_kernel(f"relu_{t}", ELTWISE_UNARY_PARAMS, t, body, setup)


def clamp(t: str) -> bytes:
    """``ClampParams {input, output, f32 min, f32 max}``; for f16 data the bounds are rounded to f16."""

    def setup(a: Assembler) -> None:
        a.LD32(r13, r0, CLAMP_PARAMS.offset_of("min"))
        _broadcast_f32_scalar(a, v16, r13, t)
        a.LD32(r14, r0, CLAMP_PARAMS.offset_of("max"))
        _broadcast_f32_scalar(a, v17, r14, t)

    def body(a: Assembler, ins: list[VReg], out: VReg, t: str) -> None:
        a.VCLAMP(out, ins[0], v16, v17, t=t)

    return streaming_kernel(f"clamp_{t}", CLAMP_PARAMS, t, body, setup)


def sigmoid(t: str) -> bytes:
    """``1 / (1 + 2 ** (-x * log2(e)))`` in f32; f16 data is widened to f32 and narrowed once at the end."""

    def setup(a: Assembler) -> None:
        a.MOVI(r13, pack_f32(-math.log2(math.e)))
        a.VBCAST(v16, r13, t="f32")
        a.MOVI(r13, pack_f32(1.0))
        a.VBCAST(v17, r13, t="f32")

    def f32_sigmoid(a: Assembler, x: VReg, out: VReg) -> None:
        a.VMUL(out, x, v16, t="f32")
        a.VEXP2(out, out, t="f32")
        a.VADD(out, out, v17, t="f32")
        a.VRCP(out, out, t="f32")

    def body(a: Assembler, ins: list[VReg], out: VReg, t: str) -> None:
        if t == "f32":
            f32_sigmoid(a, ins[0], out)
            return
        a.VCVT(v3, ins[0], "f16", 0, t="f32")
        a.VCVT(v4, ins[0], "f16", 1, t="f32")
        f32_sigmoid(a, v3, v3)
        f32_sigmoid(a, v4, v4)
        a.VCVT(out, v3, "f32", 0, t="f16")
        a.VCVT(out, v4, "f32", 1, t="f16")

    return streaming_kernel(f"sigmoid_{t}", ELTWISE_UNARY_PARAMS, t, body, setup)


def softmax_last_axis_f32() -> bytes:
    """``SoftmaxParams {input, output, i64 axis}`` over the innermost axis of a dense f32 tensor.

    Per row: horizontal max (VMAX then VMAXX), ``e = 2 ** ((x - max) * log2(e))`` stored to the output while
    summing (the tail lanes masked with VMASKN/VSEL), horizontal sum (VSUMX), then a division pass.
    Traps with code 1 unless ``axis`` is the last logical dim.
    """
    a = Assembler()
    a.LD32(r2, r0, 8)
    a.LD32(r3, r0, 12)
    a.LD64(r13, r0, SOFTMAX_PARAMS.offset_of("axis"))
    a.ADDI(r6, r2, -1)
    a.BNE(r13, r6, "bad_axis")
    a.LD32(r8, r3, 0)  # L = innermost dim (dims are stored innermost first)
    a.MOVI(r4, 1)  # rows = product of the other dims
    a.MOVI(r5, 1)
    a.label("dims")
    a.BGE(r5, r2, "dims_done")
    a.ADDI(r3, r3, 4)
    a.LD32(r6, r3, 0)
    a.MUL(r4, r4, r6)
    a.ADDI(r5, r5, 1)
    a.JMP("dims")
    a.label("dims_done")
    a.LD32(r10, r0, 0)
    a.LD32(r12, r0, MEMREF_SIZE)
    a.MOVI(r7, 4)
    a.MOVI(r9, 0)
    a.SHLI(r17, r8, 2)  # row bytes
    a.MOVI(r13, pack_f32(math.log2(math.e)))
    a.VBCAST(v20, r13, t="f32")
    a.VBCAST(v21, r9, t="f32")
    a.BEQ(r8, r9, "done")

    a.label("row")
    a.BEQ(r4, r9, "done")
    # pass 1: row max; lanes a partial load leaves untouched keep the first element, which is harmless
    a.LD32(r13, r10, 0)
    a.VBCAST(v1, r13, t="f32")
    a.ADDI(r14, r10, 0)
    a.ADDI(r15, r8, 0)
    a.label("max_loop")
    a.BLTU(r15, r7, "max_tail")
    a.VLD(v0, r14, 0, t="f32")
    a.VMAX(v1, v1, v0, t="f32")
    a.ADDI(r14, r14, 16)
    a.SUB(r15, r15, r7)
    a.JMP("max_loop")
    a.label("max_tail")
    a.BEQ(r15, r9, "max_done")
    a.VMOV(v0, v1, t="f32")
    a.VLDN(v0, r14, 0, r15, t="f32")
    a.VMAX(v1, v1, v0, t="f32")
    a.label("max_done")
    a.VMAXX(v1, v1, t="f32")
    a.VEXTRACT(r13, v1, 0, t="f32")
    a.VBCAST(v1, r13, t="f32")
    # pass 2: exponentials into the output, and their sum
    a.VMOV(v2, v21, t="f32")
    a.ADDI(r14, r10, 0)
    a.ADDI(r16, r12, 0)
    a.ADDI(r15, r8, 0)
    a.label("exp_loop")
    a.BLTU(r15, r7, "exp_tail")
    a.VLD(v0, r14, 0, t="f32")
    a.VSUB(v0, v0, v1, t="f32")
    a.VMUL(v0, v0, v20, t="f32")
    a.VEXP2(v0, v0, t="f32")
    a.VST(v0, r16, 0, t="f32")
    a.VADD(v2, v2, v0, t="f32")
    a.ADDI(r14, r14, 16)
    a.ADDI(r16, r16, 16)
    a.SUB(r15, r15, r7)
    a.JMP("exp_loop")
    a.label("exp_tail")
    a.BEQ(r15, r9, "exp_done")
    a.VLDN(v0, r14, 0, r15, t="f32")
    a.VSUB(v0, v0, v1, t="f32")
    a.VMUL(v0, v0, v20, t="f32")
    a.VEXP2(v0, v0, t="f32")
    a.VSTN(v0, r16, 0, r15, t="f32")
    a.VMASKN(v3, r15, t="f32")
    a.VSEL(v0, v0, v21, v3, t="f32")
    a.VADD(v2, v2, v0, t="f32")
    a.label("exp_done")
    a.VSUMX(v2, v2, t="f32")
    a.VEXTRACT(r13, v2, 0, t="f32")
    a.VBCAST(v2, r13, t="f32")
    # pass 3: normalise in place in the output
    a.ADDI(r16, r12, 0)
    a.ADDI(r15, r8, 0)
    a.label("div_loop")
    a.BLTU(r15, r7, "div_tail")
    a.VLD(v0, r16, 0, t="f32")
    a.VDIV(v0, v0, v2, t="f32")
    a.VST(v0, r16, 0, t="f32")
    a.ADDI(r16, r16, 16)
    a.SUB(r15, r15, r7)
    a.JMP("div_loop")
    a.label("div_tail")
    a.BEQ(r15, r9, "next_row")
    a.VLDN(v0, r16, 0, r15, t="f32")
    a.VDIV(v0, v0, v2, t="f32")
    a.VSTN(v0, r16, 0, r15, t="f32")
    a.label("next_row")
    a.ADD(r10, r10, r17)
    a.ADD(r12, r12, r17)
    a.ADDI(r4, r4, -1)
    a.JMP("row")
    a.label("done")
    a.RET()
    a.label("bad_axis")
    a.TRAP(1)
    return write_kernel_elf(
        "softmax_f32",
        a.assemble(),
        params_signature=SOFTMAX_PARAMS.signature,
        params_size=SOFTMAX_PARAMS.size,
        labels=a.labels,
    )


def _rows_prologue(a: Assembler, axis_offset: int) -> None:
    """r8 = innermost dim L, r4 = rows (product of the other dims), r10/r12 = in/out data; trap 1 unless
    the i64 axis at ``axis_offset`` is the last logical dim."""
    a.LD32(r2, r0, 8)
    a.LD32(r3, r0, 12)
    a.LD64(r13, r0, axis_offset)
    a.ADDI(r6, r2, -1)
    a.BNE(r13, r6, "bad_axis")
    a.LD32(r8, r3, 0)
    a.MOVI(r4, 1)
    a.MOVI(r5, 1)
    a.label("dims")
    a.BGE(r5, r2, "dims_done")
    a.ADDI(r3, r3, 4)
    a.LD32(r6, r3, 0)
    a.MUL(r4, r4, r6)
    a.ADDI(r5, r5, 1)
    a.JMP("dims")
    a.label("dims_done")
    a.LD32(r10, r0, 0)
    a.LD32(r12, r0, MEMREF_SIZE)
    a.MOVI(r7, 4)
    a.MOVI(r9, 0)


def reduce_last_axis_f32(kind: str) -> bytes:
    """``ReduceParams {input, output, i64 axis}``: ``max`` or ``sum`` over the innermost axis of a dense f32
    tensor into one f32 per row (the output MemRef has the other dims, keep_dims or not).

    The tail uses VLDN's merge: lanes it does not load keep the accumulator's identity (the row's first
    element for max, zero for sum), so no mask is needed.
    """
    vertical, horizontal = {"max": ("VMAX", "VMAXX"), "sum": ("VADD", "VSUMX")}[kind]
    a = Assembler()
    _rows_prologue(a, REDUCE_PARAMS.offset_of("axis"))
    a.VBCAST(v21, r9, t="f32")
    if kind == "max":
        a.BEQ(r8, r9, "done")  # max of an empty row is undefined: leave the output alone
    a.label("row")
    a.BEQ(r4, r9, "done")
    if kind == "max":
        a.LD32(r13, r10, 0)
        a.VBCAST(v1, r13, t="f32")  # identity for max: the row's first element (L >= 1)
    else:
        a.VMOV(v1, v21, t="f32")
    a.ADDI(r15, r8, 0)
    a.label("loop")
    a.BLTU(r15, r7, "tail")
    a.VLD(v0, r10, 0, t="f32")
    a.emit(vertical, v1, v1, v0, t="f32")
    a.ADDI(r10, r10, 16)
    a.SUB(r15, r15, r7)
    a.JMP("loop")
    a.label("tail")
    a.BEQ(r15, r9, "reduce")
    a.VMOV(v0, v1 if kind == "max" else v21, t="f32")
    a.VLDN(v0, r10, 0, r15, t="f32")
    a.emit(vertical, v1, v1, v0, t="f32")
    a.SHLI(r16, r15, 2)
    a.ADD(r10, r10, r16)
    a.label("reduce")
    a.emit(horizontal, v1, v1, t="f32")
    a.VEXTRACT(r13, v1, 0, t="f32")
    a.ST32(r13, r12, 0)
    a.ADDI(r12, r12, 4)
    a.ADDI(r4, r4, -1)
    a.JMP("row")
    a.label("done")
    a.RET()
    a.label("bad_axis")
    a.TRAP(1)
    return write_kernel_elf(
        f"reduce_{kind}_f32",
        a.assemble(),
        params_signature=REDUCE_PARAMS.signature,
        params_size=REDUCE_PARAMS.size,
        labels=a.labels,
    )

"""The instruction table: DSL mnemonic -> iced-x86 ``Code`` chosen by the kinds of the operands.

Nothing here is written per instruction. The candidate encodings of a mnemonic come from iced's own opcode
tables (``OpCodeInfo``); an operand matches an operand slot by the slot's ``OpCodeOperandKind``; among the
encodings that match, the shortest wins (so ``vaddps xmm1, xmm2, xmm3`` gets VEX, ``zmm`` or ``{k1}`` gets
EVEX, ``add rax, 1`` gets the imm8 form). Adding an instruction to the DSL is adding its name to
:data:`MNEMONICS` (and an expected disassembly to the round-trip test).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from iced_x86 import (
    Code,
    Encoder,
    EncodingKind,
    Instruction,
    MemoryOperand,
    MemorySizeExt,
    Mnemonic,
    OpCodeInfo,
    OpCodeOperandKind,
    Register,
    RoundingControl,
)

from snippets_core.errors import CodegenError
from snippets_x86_64.asm.operands import Label, Masked, Mem, Operand, as_mem
from snippets_x86_64.asm.registers import GP8, GP16, GP32, GP64, XMM, YMM, ZMM, GpReg, MaskReg, Reg, VecReg

#: Every mnemonic the DSL emits. Grouped as the AVX-512 f32 kernels use them.
MNEMONICS: tuple[str, ...] = (
    # general purpose
    "mov", "movzx", "movsxd", "lea", "add", "sub", "imul", "div", "and", "or", "xor", "neg", "not",
    "shl", "shr", "sar", "cmp", "test", "inc", "dec", "push", "pop", "ret", "jmp", "call", "nop",
    "ja", "jae", "jb", "jbe", "je", "jne", "jg", "jge", "jl", "jle", "js", "jns", "jo", "jno", "jp", "jnp",
    "cmova", "cmovb", "cmove", "cmovne", "cmovg", "cmovge", "cmovl", "cmovle", "movsx",
    "bzhi", "shlx", "shrx", "sarx",  # BMI2: tail masks and shifts without flags or cl
    "cpuid", "xgetbv", "rdtsc", "sfence", "lfence", "mfence", "pause", "cmpxchg",
    "prefetcht0", "prefetcht1", "prefetcht2", "prefetchnta",
    # vector moves and broadcasts
    "vmovups", "vmovaps", "vmovdqu8", "vmovdqu16", "vmovdqu32", "vmovdqu64", "vmovss", "vmovd", "vmovq",
    "vmovdqa32", "vmovdqa64", "vmovntps", "vmovntdq",  # aligned and non-temporal (streaming) moves
    "vbroadcastss", "vpbroadcastd", "vpbroadcastw", "vpbroadcastb", "vpbroadcastq", "vbroadcastf32x4",
    "vbroadcastf32x8",
    # f32 arithmetic
    "vaddps", "vsubps", "vmulps", "vdivps", "vmaxps", "vminps", "vsqrtps", "vrcp14ps", "vrsqrt14ps",
    "vaddss", "vsubss", "vmulss", "vdivss", "vmaxss", "vminss",
    "vfmadd132ps", "vfmadd213ps", "vfmadd231ps", "vfmsub132ps", "vfmsub213ps", "vfmsub231ps",
    "vfnmadd132ps", "vfnmadd213ps", "vfnmadd231ps", "vfnmsub132ps", "vfnmsub213ps", "vfnmsub231ps",
    "vscalefps", "vgetexpps", "vgetmantps", "vfixupimmps", "vreduceps", "vroundps", "vrndscaleps",
    "vrangeps",  # min/max by magnitude with the sign chosen: |x| clamped in one instruction (Gelu)
    # logic
    "vandps", "vorps", "vxorps", "vandnps", "vpandd", "vpandnd", "vpord", "vpxord", "vpandq", "vporq", "vpxorq",
    "vpternlogd",
    # compares and selects
    "vcmpps", "vfpclassps", "vpcmpd", "vpcmpud", "vpcmpeqd", "vpcmpgtd", "vptestmd", "vptestnmd", "vblendmps", "vpblendmd",
    # conversions
    "vcvtps2dq", "vcvttps2dq", "vcvtdq2ps", "vcvtudq2ps", "vcvtps2udq", "vcvttps2udq", "vcvtps2ph", "vcvtph2ps",
    "vcvtneps2bf16", "vpmovdb", "vpmovsdb", "vpmovusdb", "vpmovdw", "vpmovsdw", "vpmovusdw",
    "vpmovwb", "vpmovswb", "vpmovuswb", "vpmovzxbd", "vpmovsxbd", "vpmovzxwd", "vpmovsxwd", "vpmovzxbw",
    "vpmovsxbw",
    # integer
    "vpslld", "vpsrld", "vpsrad", "vpsllvd", "vpsrlvd", "vpaddd", "vpsubd", "vpmulld", "vpminsd", "vpmaxsd",
    "vpminud", "vpmaxud", "vpabsd", "vpsravd",
    "vpmaxub", "vpmaxsb",  # byte maxima (the int8 MaxPool)
    "vpshufb",  # bytes within lanes (the packed stem's 3-byte pixels)
    "vpunpcklbw", "vpunpckhbw", "vpunpcklwd", "vpunpckhwd",  # byte and word interleaves (the int8 copy-B of V)
    # permutes and lane moves
    "vpermps", "vpermd", "vpermt2ps", "vpermi2ps", "vpermt2d", "vpermilps", "vshufps", "vshuff32x4", "vextractf32x4", "vextractf32x8", "vextractf128",
    "vinsertf32x4", "vinsertf32x8", "vmovshdup", "vmovhlps", "vunpcklps", "vunpckhps",
    # mask registers
    "kmovw", "kmovd", "kmovq", "kandw", "kandnw", "korw", "kxorw", "knotw", "kxnorw", "kortestw", "ktestw",
    "kshiftlw", "kshiftrw",
    "vzeroupper",
    # bf16 matrix products (the Brgemm micro-kernel): pair dot products and the word interleave of two B rows
    "vdpbf16ps", "vpermt2w",
    # int8 matrix products (the VNNI Brgemm): u8 x s8 quadruple dot products into s32 (wrapping, saturating)
    "vpdpbusd", "vpdpbusds",
)  # fmt: skip

#: Other spellings of the same instructions (the left side is what iced's decoder prints for the right).
ALIASES: dict[str, str] = {
    "jz": "je", "jnz": "jne", "jc": "jb", "jnc": "jae", "jnae": "jb", "jnb": "jae", "jna": "jbe", "jnbe": "ja",
    "jnge": "jl", "jnl": "jge", "jng": "jle", "jnle": "jg", "jpe": "jp", "jpo": "jnp",
}  # fmt: skip

#: ``vcmpps`` predicates (imm8), in the order of the Intel SDM table.
_CMP_NAMES = (
    "eq_oq", "lt_os", "le_os", "unord_q", "neq_uq", "nlt_us", "nle_us", "ord_q",
    "eq_uq", "nge_us", "ngt_us", "false_oq", "neq_oq", "ge_os", "gt_os", "true_uq",
    "eq_os", "lt_oq", "le_oq", "unord_s", "neq_us", "nlt_uq", "nle_uq", "ord_s",
    "eq_us", "nge_uq", "ngt_uq", "false_os", "neq_os", "ge_oq", "gt_oq", "true_us",
)  # fmt: skip
CMP_PREDICATES: dict[str, int] = {name: i for i, name in enumerate(_CMP_NAMES)}

#: ``vpcmpd``/``vpcmpud`` predicates.
VPCMP_PREDICATES: dict[str, int] = {"eq": 0, "lt": 1, "le": 2, "false": 3, "ne": 4, "nlt": 5, "nle": 6, "true": 7}

#: Embedded rounding for ``rc=`` (round to nearest even, down, up, toward zero; all imply SAE).
ROUNDING: dict[str, int] = {
    "rn": RoundingControl.ROUND_TO_NEAREST,
    "rd": RoundingControl.ROUND_DOWN,
    "ru": RoundingControl.ROUND_UP,
    "rz": RoundingControl.ROUND_TOWARD_ZERO,
}

_KIND_NAMES = {getattr(OpCodeOperandKind, n): n for n in dir(OpCodeOperandKind) if n.isupper()}
_ALL_CODES = sorted(getattr(Code, n) for n in dir(Code) if n.isupper())
_ENCODINGS = (EncodingKind.LEGACY, EncodingKind.VEX, EncodingKind.EVEX)


# ---------------------------------------------------------------------------------------------------------------
# Operand slot kinds: OpCodeOperandKind name -> predicate over a DSL operand (with masks stripped)


def _gp(bits: int, mem_ok: bool) -> Callable[[object], bool]:
    return lambda op: (isinstance(op, GpReg) and op.bits == bits) or (mem_ok and isinstance(op, Mem))


def _vec(bits: int, mem_ok: bool) -> Callable[[object], bool]:
    return lambda op: (isinstance(op, VecReg) and op.bits == bits) or (mem_ok and isinstance(op, Mem))


def _k(mem_ok: bool) -> Callable[[object], bool]:
    return lambda op: isinstance(op, MaskReg) or (mem_ok and isinstance(op, Mem))


def _fixed(register: int) -> Callable[[object], bool]:
    return lambda op: isinstance(op, Reg) and op.code == register


def _imm(low: int, high: int) -> Callable[[object], bool]:
    return lambda op: isinstance(op, int) and not isinstance(op, bool) and low <= op <= high


def _label(op: object) -> bool:
    return isinstance(op, Label)


def _slot_predicates() -> dict[int, Callable[[object], bool]]:
    table: dict[str, Callable[[object], bool]] = {
        "MEM": lambda op: isinstance(op, Mem) and not op.bcst,
        "K_REG": _k(False), "K_RM": _k(False), "K_VVVV": _k(False), "K_OR_MEM": _k(True),
        "AL": _fixed(Register.AL), "AX": _fixed(Register.AX), "EAX": _fixed(Register.EAX),
        "RAX": _fixed(Register.RAX), "CL": _fixed(Register.CL),
        "IMM8": _imm(-(2**7), 2**8 - 1), "IMM8SEX16": _imm(-(2**7), 2**7 - 1), "IMM8SEX32": _imm(-(2**7), 2**7 - 1),
        "IMM8SEX64": _imm(-(2**7), 2**7 - 1), "IMM16": _imm(-(2**15), 2**16 - 1), "IMM32": _imm(-(2**31), 2**32 - 1),
        "IMM32SEX64": _imm(-(2**31), 2**31 - 1), "IMM64": _imm(-(2**63), 2**64 - 1), "IMM8_CONST_1": _imm(1, 1),
        "BR64_1": _label, "BR64_4": _label,
    }  # fmt: skip
    for prefix, bits in (("R8", 8), ("R16", 16), ("R32", 32), ("R64", 64)):
        for suffix in ("REG", "RM", "VVVV", "OPCODE"):
            table[f"{prefix}_{suffix}"] = _gp(bits, False)
        table[f"{prefix}_OR_MEM"] = _gp(bits, True)
    for prefix, bits in (("XMM", 128), ("YMM", 256), ("ZMM", 512)):
        for suffix in ("REG", "RM", "VVVV"):
            table[f"{prefix}_{suffix}"] = _vec(bits, False)
        table[f"{prefix}_OR_MEM"] = _vec(bits, True)
    by_kind = {}
    for kind, name in _KIND_NAMES.items():
        by_kind[kind] = table.get(name, lambda op: False)
    return by_kind


_SLOT = _slot_predicates()


@dataclass(frozen=True)
class Form:
    """One encoding of a mnemonic: the iced Code and what its operand slots accept."""

    code: int
    kinds: tuple[int, ...]
    encoding: int
    memory_size: int
    broadcast_size: int
    can_broadcast: bool
    can_mask: bool
    can_zero: bool
    can_round: bool
    can_sae: bool


@cache
def forms(mnemonic: str) -> tuple[Form, ...]:
    """Every 64-bit-mode encoding iced knows for ``mnemonic`` (legacy, VEX or EVEX)."""
    out = []
    for code in _codes_by_mnemonic().get(getattr(Mnemonic, mnemonic.upper()), ()):
        info = OpCodeInfo(code)
        if not info.mode64 or info.encoding not in _ENCODINGS or not info.is_instruction:
            continue
        out.append(
            Form(
                code=code,
                kinds=tuple(info.op_kinds()),
                encoding=info.encoding,
                memory_size=MemorySizeExt.size(info.memory_size),
                broadcast_size=MemorySizeExt.size(info.broadcast_memory_size),
                can_broadcast=info.can_broadcast,
                can_mask=info.can_use_op_mask_register,
                can_zero=info.can_use_zeroing_masking,
                can_round=info.can_use_rounding_control,
                can_sae=info.can_suppress_all_exceptions,
            )
        )
    return tuple(out)


@cache
def _codes_by_mnemonic() -> dict[int, list[int]]:
    """Every iced Code by its mnemonic, in Code order: one pass over the table (1 ms) instead of one per mnemonic
    (0.7 ms each, x the 40-odd mnemonics of a model)."""
    out: dict[int, list[int]] = {}
    for code in _ALL_CODES:
        out.setdefault(Instruction.create(code).mnemonic, []).append(code)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Matching operands to forms


def _needs_evex(operands: tuple[object, ...], masked: Masked | None, rc: str | None, sae: bool) -> bool:
    if masked is not None or rc is not None or sae:
        return True
    for op in operands:
        if isinstance(op, VecReg) and (op.number >= 16 or op.bits == 512):
            return True
        if isinstance(op, Mem) and op.bcst:
            return True
    return False


def _fits(form: Form, operands: tuple[object, ...], masked: Masked | None, rc: str | None, sae: bool,
          evex: bool | None = None) -> bool:
    """Whether ``form`` takes these operands (``evex``: whether they need EVEX, when the caller knows)."""
    if len(form.kinds) != len(operands):
        return False
    if evex is None:
        evex = _needs_evex(operands, masked, rc, sae)
    if form.encoding != EncodingKind.EVEX and evex:
        return False
    if masked is not None and (not form.can_mask or (masked.zeroing and not form.can_zero)):
        return False
    if (rc is not None or sae) and any(isinstance(op, Mem) for op in operands):
        return False  # EVEX.b on a memory operand means broadcast: rounding and SAE are register-only
    if rc is not None and not form.can_round:
        return False
    if sae and not form.can_sae:
        return False
    for kind, op in zip(form.kinds, operands):
        if not _SLOT[kind](op):
            return False
        if isinstance(op, Mem):
            if op.bcst and not form.can_broadcast:
                return False
            # under broadcast a hint may name the element or the whole vector (zword[...] picks the 512-bit
            # form where only the memory operand tells the vector length, e.g. vfpclassps k1, [m]{1to16})
            sizes = (form.broadcast_size, form.memory_size) if op.bcst else (form.memory_size,)
            if op.size is not None and sizes[-1] and op.size not in sizes:
                return False
    return True


def _memory_operand(m: Mem) -> MemoryOperand:
    if m.label is not None:
        # RIP-relative: the displacement is the target address (a label id until the assembler resolves it)
        return MemoryOperand(Register.RIP, Register.NONE, 1, 0, 8, m.bcst)
    return MemoryOperand(
        Register.NONE if m.base is None else m.base.code,
        Register.NONE if m.index is None else m.index.code,
        m.scale,
        m.disp,
        # 0 lets iced omit a zero displacement (it still adds disp8 0 where the base needs one, e.g. r13);
        # 1 lets iced pick disp8 (compressed disp8*N under EVEX) or disp32
        1 if m.disp else (4 if m.base is None else 0),
        m.bcst,
    )


def _create(code: int, operands: tuple[object, ...], form: Form) -> Instruction:
    parts = []
    args: list[object] = []
    for kind, op in zip(form.kinds, operands):
        if isinstance(op, Reg):
            parts.append("reg")
            args.append(op.code)
        elif isinstance(op, Mem):
            parts.append("mem")
            args.append(_memory_operand(op))
        elif _KIND_NAMES[kind] == "IMM64":
            parts.append("i64" if op < 0 else "u64")
            args.append(op)
        else:
            parts.append("i32" if op < 0 else "u32")
            args.append(op)
    factory = getattr(Instruction, "create_" + "_".join(parts) if parts else "create")
    return factory(code, *args)


def _split_mask(operands: tuple[Operand, ...]) -> tuple[tuple[object, ...], Masked | None]:
    plain: list[object] = []
    masked = None
    for i, op in enumerate(operands):
        if isinstance(op, list):
            op = as_mem(op)
        if isinstance(op, Masked):
            if i != 0:
                raise CodegenError(f"only the destination (first operand) can carry an op-mask, got {op} at {i}")
            masked = op
            op = op.target
        plain.append(op)
    return tuple(plain), masked


def _describe(mnemonic: str, operands: tuple[object, ...]) -> str:
    return f"{mnemonic} " + ", ".join(str(op) for op in operands)


def _candidates(
    mnemonic: str, operands: tuple[object, ...], masked: Masked | None, rc: str | None, sae: bool
) -> list[Form]:
    evex = _needs_evex(operands, masked, rc, sae)
    candidates = [f for f in forms(mnemonic) if _fits(f, operands, masked, rc, sae, evex)]
    if not candidates:
        shown = operands if masked is None else (masked, *operands[1:])
        extra = (f" {{{rc}-sae}}" if rc else "") + (" {sae}" if sae else "")
        raise CodegenError(
            f"no encoding of `{_describe(mnemonic, shown)}`{extra}: iced has no {mnemonic} form "
            f"taking these operand kinds"
        )
    return candidates


def _select_branch(mnemonic: str, operands: tuple[object, ...]) -> Form:
    # The short form is chosen; the BlockEncoder widens it when the target is too far for rel8.
    candidates = _candidates(mnemonic, operands, None, None, False)
    return min(candidates, key=lambda f: (_KIND_NAMES[f.kinds[0]] != "BR64_1", f.code))


#: the form chosen per (mnemonic, operands with displacements reduced to their class, mask, rc, sae)
_FORMS_CHOSEN: dict[tuple, Form] = {}
#: the powers of two an EVEX displacement is compressed by (disp8*N)
_DISP8_SCALES = (1, 2, 4, 8, 16, 32, 64)


def _disp_class(disp: int) -> tuple[bool, ...]:
    """What the encoded length of a displacement depends on, for every form: zero or not, and for each N whether
    it is a disp8*N (N = 1: the plain disp8). Two displacements of a class pick the same form."""
    return (disp == 0, *(disp % n == 0 and -128 <= disp // n <= 127 for n in _DISP8_SCALES))


def _register_classes() -> dict[Reg, Reg]:
    """Each register -> the one that stands for its class in a selection key: registers of a class match the same
    operand slots and make every form equally long. General-purpose: the fixed-slot ones (al/ax/eax/rax, cl) and
    the bases that cost a SIB byte (rsp, r12) or a displacement (rbp, r13) stay themselves; the others go by
    whether they need REX (and the byte registers spl..dil always do). Vector: 0-7, 8-15 (REX/VEX.R-X-B), 16-31
    (EVEX only), per width. Mask registers: themselves."""
    out: dict[Reg, Reg] = {}
    for group in (GP16, GP32, GP64):
        for r in group:
            n = r.number
            out[r] = group[n if n in (0, 1, 4, 5, 12, 13) else (2 if n < 8 else 8)]
    for r in GP8:
        n = r.number
        out[r] = GP8[n if n in (0, 1) else (2 if n < 4 else 4 if n < 8 else 8)]
    for group in (XMM, YMM, ZMM):
        for r in group:
            out[r] = group[0 if r.number < 8 else 8 if r.number < 16 else 16]
    return out


_CLASS = _register_classes()


def _selection_key(operands: tuple[object, ...]) -> tuple[object, ...]:
    """The operands as the form choice sees them: registers by class, displacements by class."""
    key: list[object] = []
    for op in operands:
        if isinstance(op, Mem):
            base, index = _CLASS.get(op.base, op.base), _CLASS.get(op.index, op.index)
            key.append(Mem(base, index, op.scale, 0, op.size, op.bcst, op.label))
            key.append(_disp_class(op.disp))
        else:
            key.append(_CLASS.get(op, op) if isinstance(op, Reg) else op)
    return tuple(key)


def _select(mnemonic: str, operands: tuple[object, ...], masked: Masked | None, rc: str | None, sae: bool) -> Form:
    """The shortest encoding of ``mnemonic operands`` (then the lowest Code), chosen once per operand shape."""
    # the mask's target is operands[0]: only the mask register and zeroing are the mask's own
    key = (mnemonic, _selection_key(operands), None if masked is None else masked[1:], rc, sae)
    form = _FORMS_CHOSEN.get(key)
    if form is None:
        form = _FORMS_CHOSEN[key] = _choose(mnemonic, operands, masked, rc, sae)
    return form


def _choose(mnemonic: str, operands: tuple[object, ...], masked: Masked | None, rc: str | None, sae: bool) -> Form:
    candidates = _candidates(mnemonic, operands, masked, rc, sae)
    mem_sizes = {f.memory_size for f in candidates}
    if len(mem_sizes) > 1 and any(isinstance(op, Mem) and op.size is None for op in operands):
        raise CodegenError(
            f"`{_describe(mnemonic, operands)}`: the memory operand size is ambiguous, "
            f"write it with a size hint, e.g. dword[...], qword[...] or zword[...]"
        )
    if len(candidates) == 1:
        return candidates[0]
    encoder = Encoder(64)

    def length(form: Form) -> tuple[int, int]:
        return encoder.encode(_finish(_create(form.code, operands, form), masked, rc, sae), 0), form.code

    return min(candidates, key=length)


def _finish(instr: Instruction, masked: Masked | None, rc: str | None, sae: bool) -> Instruction:
    if masked is not None:
        instr.op_mask = masked.k.code
        instr.zeroing_masking = masked.zeroing
    if rc is not None:
        instr.rounding_control = ROUNDING[rc]
    if sae:
        instr.suppress_all_exceptions = True
    return instr


_POOL_STAND_IN = Label("constant")


def build(mnemonic: str, operands: tuple[Operand, ...], rc: str | None = None, sae: bool = False) -> Instruction:
    """One iced ``Instruction`` for ``mnemonic operands`` (branch targets are given later, see Assembler)."""
    mnemonic = ALIASES.get(mnemonic, mnemonic)
    if rc is not None and rc not in ROUNDING:
        raise CodegenError(f"{mnemonic}: unknown rounding {rc!r}, expected one of {sorted(ROUNDING)}")
    plain, masked = _split_mask(operands)
    if any(isinstance(op, Mem) and op.label is not None for op in plain):
        # the choice does not depend on which constant is addressed: select with one stand-in label
        key = tuple(op.with_label(_POOL_STAND_IN) if isinstance(op, Mem) and op.label else op for op in plain)
        form = _select(mnemonic, key, masked, rc, sae)
        return _finish(_create(form.code, plain, form), masked, rc, sae)
    if any(isinstance(op, Label) for op in plain):
        # a branch: the target (a label id) is patched in by the assembler once labels are bound
        return Instruction.create_branch(_select_branch(mnemonic, plain).code, 0)
    form = _select(mnemonic, plain, masked, rc, sae)
    return _finish(_create(form.code, plain, form), masked, rc, sae)

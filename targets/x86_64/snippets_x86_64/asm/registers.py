"""Register objects of the assembly DSL: general-purpose registers, vector registers and mask registers.

A register knows its iced-x86 ``Register`` value (``.code``), its hardware number and its width, and it
builds the operands that read like assembly: ``rsi + 64`` and ``rsi + rcx * 4`` are memory operands,
``zmm1.mask(k1).z`` is a zeroing-masked destination.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from iced_x86 import Register as IcedRegister

if TYPE_CHECKING:
    from snippets_x86_64.asm.operands import Masked, Mem, ScaledIndex

# Hardware order (the number a ModRM/REX field holds), shared by every width of the GP file.
_GP64 = ("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15")
_GP32 = ("eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi") + tuple(f"r{i}d" for i in range(8, 16))
_GP16 = ("ax", "cx", "dx", "bx", "sp", "bp", "si", "di") + tuple(f"r{i}w" for i in range(8, 16))
_GP8 = ("al", "cl", "dl", "bl", "spl", "bpl", "sil", "dil") + tuple(f"r{i}b" for i in range(8, 16))
# iced spells the byte registers r8l..r15l
_ICED_GP8 = ("AL", "CL", "DL", "BL", "SPL", "BPL", "SIL", "DIL") + tuple(f"R{i}L" for i in range(8, 16))


class Reg:
    """Base class of every register: a name, a hardware number and the iced ``Register`` value."""

    kind: ClassVar[str] = ""
    __slots__ = ("bits", "code", "name", "number")

    def __init__(self, name: str, number: int, bits: int, code: int) -> None:
        self.name = name
        self.number = number
        self.bits = bits
        self.code = code

    def __repr__(self) -> str:
        return self.name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Reg) and other.code == self.code

    def __hash__(self) -> int:
        return hash(self.code)


class GpReg(Reg):
    """A general-purpose register (64, 32, 16 or 8 bits). Adding an int or a scaled index makes a memory
    operand, multiplying by 1, 2, 4 or 8 makes a scaled index: ``rsi + rcx * 4 + 16``."""

    kind = "gp"
    __slots__ = ()

    @property
    def r64(self) -> GpReg:
        return GP64[self.number]

    @property
    def r32(self) -> GpReg:
        return GP32[self.number]

    @property
    def r16(self) -> GpReg:
        return GP16[self.number]

    @property
    def r8(self) -> GpReg:
        return GP8[self.number]

    def __add__(self, other: int | GpReg | ScaledIndex) -> Mem:
        if isinstance(other, int):  # the common ``rsi + 64``: made without the general checks where they hold
            if self.bits >= 32 and -(2**31) <= other < 2**31:
                return _operands._tuple_new(_operands.Mem, (self, None, 1, other, None, False, None))
            return _operands.Mem(self, None, 1, other)
        return _operands.Mem(self) + other

    __radd__ = __add__

    def __sub__(self, other: int) -> Mem:
        if isinstance(other, int):
            return _operands.Mem(self, None, 1, -other)
        return NotImplemented

    def __mul__(self, scale: int) -> ScaledIndex:
        return _operands.ScaledIndex(self, scale)

    __rmul__ = __mul__


class VecReg(Reg):
    """An xmm, ymm or zmm register (0..31). ``.xmm .ymm .zmm`` give the same register at another width;
    ``.mask(k)`` gives an op-masked operand (merge), ``.mask(k).z`` the zeroing form."""

    kind = "vec"
    __slots__ = ()

    @property
    def xmm(self) -> VecReg:
        return XMM[self.number]

    @property
    def ymm(self) -> VecReg:
        return YMM[self.number]

    @property
    def zmm(self) -> VecReg:
        return ZMM[self.number]

    def mask(self, k: MaskReg) -> Masked:
        return _operands.Masked(self, k)


class MaskReg(Reg):
    """An AVX-512 op-mask register k0..k7. ``k1.mask(k2)`` is a masked destination (for compares)."""

    kind = "k"
    __slots__ = ()

    def mask(self, k: MaskReg) -> Masked:
        return _operands.Masked(self, k)


def _iced(name: str) -> int:
    return getattr(IcedRegister, name.upper())


GP64 = tuple(GpReg(n, i, 64, _iced(n)) for i, n in enumerate(_GP64))
GP32 = tuple(GpReg(n, i, 32, _iced(n)) for i, n in enumerate(_GP32))
GP16 = tuple(GpReg(n, i, 16, _iced(n)) for i, n in enumerate(_GP16))
GP8 = tuple(GpReg(n, i, 8, _iced(c)) for i, (n, c) in enumerate(zip(_GP8, _ICED_GP8)))
XMM = tuple(VecReg(f"xmm{i}", i, 128, _iced(f"xmm{i}")) for i in range(32))
YMM = tuple(VecReg(f"ymm{i}", i, 256, _iced(f"ymm{i}")) for i in range(32))
ZMM = tuple(VecReg(f"zmm{i}", i, 512, _iced(f"zmm{i}")) for i in range(32))
K = tuple(MaskReg(f"k{i}", i, 64, _iced(f"k{i}")) for i in range(8))

# Module-level names, so `from snippets_x86_64.asm import rax, zmm0, k1` reads like assembly.
rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi, r8, r9, r10, r11, r12, r13, r14, r15 = GP64
eax, ecx, edx, ebx, esp, ebp, esi, edi, r8d, r9d, r10d, r11d, r12d, r13d, r14d, r15d = GP32
ax, cx, dx, bx, sp, bp, si, di, r8w, r9w, r10w, r11w, r12w, r13w, r14w, r15w = GP16
al, cl, dl, bl, spl, bpl, sil, dil, r8b, r9b, r10b, r11b, r12b, r13b, r14b, r15b = GP8
(xmm0, xmm1, xmm2, xmm3, xmm4, xmm5, xmm6, xmm7, xmm8, xmm9, xmm10, xmm11, xmm12, xmm13, xmm14, xmm15,
 xmm16, xmm17, xmm18, xmm19, xmm20, xmm21, xmm22, xmm23, xmm24, xmm25, xmm26, xmm27, xmm28, xmm29, xmm30,
 xmm31) = XMM  # fmt: skip
(ymm0, ymm1, ymm2, ymm3, ymm4, ymm5, ymm6, ymm7, ymm8, ymm9, ymm10, ymm11, ymm12, ymm13, ymm14, ymm15,
 ymm16, ymm17, ymm18, ymm19, ymm20, ymm21, ymm22, ymm23, ymm24, ymm25, ymm26, ymm27, ymm28, ymm29, ymm30,
 ymm31) = YMM  # fmt: skip
(zmm0, zmm1, zmm2, zmm3, zmm4, zmm5, zmm6, zmm7, zmm8, zmm9, zmm10, zmm11, zmm12, zmm13, zmm14, zmm15,
 zmm16, zmm17, zmm18, zmm19, zmm20, zmm21, zmm22, zmm23, zmm24, zmm25, zmm26, zmm27, zmm28, zmm29, zmm30,
 zmm31) = ZMM  # fmt: skip
k0, k1, k2, k3, k4, k5, k6, k7 = K

#: System V AMD64: integer arguments in this order, these survive calls (the callee saves them).
SYSV_ARGS = (rdi, rsi, rdx, rcx, r8, r9)
SYSV_CALLEE_SAVED = (rbx, rbp, r12, r13, r14, r15)

# operands.py imports this module; the operand types are read from it at call time (no import per ``rsi + 8``)
from snippets_x86_64.asm import operands as _operands  # noqa: E402

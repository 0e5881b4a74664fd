"""A PeachPy-style x86-64 assembly DSL encoded by iced-x86.

Registers are objects (``rax``, ``zmm0``, ``k1``), memory operands are written ``rsi + 64`` or
``qword[rsi + rcx * 8]``, AVX-512 decorations are operands (``zmm1.mask(k1).z``, ``bcst(rdx)``), and code reads
like assembly: ``a.vfmadd231ps(acc, x, y)``. :class:`Function` adds the System V prologue and epilogue.
"""

from __future__ import annotations

from snippets_x86_64.asm.assembler import Assembler, disassemble, make_formatter
from snippets_x86_64.asm.function import Function
from snippets_x86_64.asm.instructions import ALIASES, CMP_PREDICATES, MNEMONICS, ROUNDING, VPCMP_PREDICATES
from snippets_x86_64.asm.operands import (
    Label,
    Masked,
    Mem,
    ScaledIndex,
    as_mem,
    bcst,
    byte,
    dword,
    mem,
    qword,
    word,
    xword,
    yword,
    zword,
)
from snippets_x86_64.asm.registers import *
from snippets_x86_64.asm.registers import (
    GP8,
    GP16,
    GP32,
    GP64,
    SYSV_ARGS,
    SYSV_CALLEE_SAVED,
    XMM,
    YMM,
    ZMM,
    GpReg,
    K,
    MaskReg,
    Reg,
    VecReg,
)

__all__ = [
    "ALIASES",
    "CMP_PREDICATES",
    "GP8",
    "GP16",
    "GP32",
    "GP64",
    "MNEMONICS",
    "ROUNDING",
    "SYSV_ARGS",
    "SYSV_CALLEE_SAVED",
    "VPCMP_PREDICATES",
    "XMM",
    "YMM",
    "ZMM",
    "Assembler",
    "Function",
    "GpReg",
    "K",
    "Label",
    "MaskReg",
    "Masked",
    "Mem",
    "Reg",
    "ScaledIndex",
    "VecReg",
    "as_mem",
    "bcst",
    "byte",
    "disassemble",
    "dword",
    "make_formatter",
    "mem",
    "qword",
    "word",
    "xword",
    "yword",
    "zword",
]  # fmt: skip
# every register by its assembly name (rax, r8d, xmm17, zmm31, k1, ...)
__all__ += [reg.name for reg in (*GP64, *GP32, *GP16, *GP8, *XMM, *YMM, *ZMM, *K)]

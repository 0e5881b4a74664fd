"""Operands of the assembly DSL besides registers: memory, op-masked operands, size hints, labels.

``rsi + 64``, ``rsi + rcx * 4 - 8``, ``mem(rsi, rcx, 4, -8)`` and ``[rsi + 64]`` all describe the same kind
of memory operand; ``qword[rsi + 8]`` adds a size hint (needed only where the other operands do not fix the
size, e.g. ``mov qword[rsi], 1``); ``bcst(rdx)`` / ``(rdx + 0).broadcast`` is an AVX-512 embedded broadcast
(``{1to16}``); ``zmm1.mask(k1)`` merges, ``zmm1.mask(k1).z`` zeroes the unselected lanes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from snippets_core.errors import CodegenError
from snippets_x86_64.asm.registers import GpReg, MaskReg, Reg, VecReg

_SCALES = (1, 2, 4, 8)


@dataclass(frozen=True)
class ScaledIndex:
    """``rcx * 4``: an index register with its scale, waiting to be added to a base."""

    index: GpReg
    scale: int

    def __post_init__(self) -> None:
        if self.scale not in _SCALES:
            raise CodegenError(f"memory index scale must be one of {_SCALES}, got {self.index} * {self.scale}")


@dataclass(frozen=True)
class Mem:
    """A memory operand ``[base + index * scale + disp]``.

    ``size`` (bytes) is an optional hint set by ``byte/word/dword/qword/xword/yword/zword[...]``;
    ``bcst`` marks an AVX-512 embedded broadcast of one element to every lane. ``label`` makes it
    ``[rip + label]``, a constant of the pool (see ``Assembler.const_f32``): no base, index or displacement.
    """

    base: GpReg | None = None
    index: GpReg | None = None
    scale: int = 1
    disp: int = 0
    size: int | None = None
    bcst: bool = False
    label: Label | None = None

    def __post_init__(self) -> None:
        if self.label is not None and (self.base is not None or self.index is not None or self.disp):
            raise CodegenError(
                f"a constant-pool operand [rip+{self.label.name}] takes no base, index or displacement; "
                f"load its address with lea and index from there"
            )
        for reg in (self.base, self.index):
            if reg is not None and (not isinstance(reg, GpReg) or reg.bits not in (32, 64)):
                raise CodegenError(f"memory operands address through 64-bit (or 32-bit) GP registers, got {reg!r}")
        if self.index is not None and self.index.number == 4 and self.index.bits == 64:
            raise CodegenError("rsp cannot be an index register")
        if self.scale not in _SCALES:
            raise CodegenError(f"memory index scale must be one of {_SCALES}, got {self.scale}")
        if not -(2**31) <= self.disp < 2**31:
            raise CodegenError(f"memory displacement {self.disp} does not fit in 32 bits")

    def __add__(self, other: int | GpReg | ScaledIndex) -> Mem:
        if isinstance(other, int):
            return replace(self, disp=self.disp + other)
        if isinstance(other, GpReg):
            other = ScaledIndex(other, 1)
        if isinstance(other, ScaledIndex):
            if self.index is not None:
                raise CodegenError(f"memory operand {self} already has an index register")
            if self.base is None:
                return (
                    replace(self, base=other.index)
                    if other.scale == 1
                    else replace(self, index=other.index, scale=other.scale)
                )
            return replace(self, index=other.index, scale=other.scale)
        return NotImplemented

    __radd__ = __add__

    def __sub__(self, other: int) -> Mem:
        if isinstance(other, int):
            return replace(self, disp=self.disp - other)
        return NotImplemented

    @property
    def broadcast(self) -> Mem:
        """The same address as an embedded broadcast source (``{1toN}``)."""
        return replace(self, bcst=True)

    def mask(self, k: MaskReg) -> Masked:
        """A masked store destination: only the lanes selected by ``k`` are written."""
        return Masked(self, k)

    def __str__(self) -> str:
        if self.label is not None:
            return f"[rip+{self.label.name}]" + ("{bcst}" if self.bcst else "")
        parts = [] if self.base is None else [self.base.name]
        if self.index is not None:
            parts.append(self.index.name if self.scale == 1 else f"{self.index.name}*{self.scale}")
        text = "+".join(parts)
        if self.disp or not parts:
            text += f"{self.disp:+d}" if parts else str(self.disp)
        return f"[{text}]" + ("{bcst}" if self.bcst else "")


@dataclass(frozen=True)
class Masked:
    """An operand under an op-mask: ``zmm1.mask(k1)`` (merge) or ``zmm1.mask(k1).z`` (zeroing)."""

    target: VecReg | MaskReg | Mem
    k: MaskReg
    zeroing: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.k, MaskReg):
            raise CodegenError(f"an op-mask must be one of k1..k7, got {self.k!r}")
        if self.k.number == 0:
            raise CodegenError("k0 cannot be used as an op-mask (the encoding means 'no mask')")

    @property
    def z(self) -> Masked:
        """Zeroing-masking: lanes not selected by the mask are set to zero instead of kept."""
        if isinstance(self.target, Mem):
            raise CodegenError(f"zeroing-masking is not allowed on a memory destination {self.target}")
        return replace(self, zeroing=True)

    def __str__(self) -> str:
        return f"{self.target}{{{self.k}}}" + ("{z}" if self.zeroing else "")


class _SizeHint:
    """``qword[rsi + 8]``: a memory operand with an explicit size."""

    __slots__ = ("name", "size")

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.size = size

    def __getitem__(self, address: Mem | GpReg) -> Mem:
        return replace(as_mem(address), size=self.size)

    def __repr__(self) -> str:
        return self.name


byte = _SizeHint("byte", 1)
word = _SizeHint("word", 2)
dword = _SizeHint("dword", 4)
qword = _SizeHint("qword", 8)
xword = _SizeHint("xword", 16)
yword = _SizeHint("yword", 32)
zword = _SizeHint("zword", 64)


def mem(base: GpReg | None, index: GpReg | None = None, scale: int = 1, disp: int = 0) -> Mem:
    """``[base + index * scale + disp]`` spelled as a call."""
    return Mem(base, index, scale, disp)


def as_mem(address: Mem | GpReg | list) -> Mem:
    """A memory operand from ``rsi + 8``, ``rsi`` or the PeachPy spelling ``[rsi + 8]``."""
    if isinstance(address, list):
        if len(address) != 1:
            raise CodegenError(f"a bracketed memory operand holds one address, got {address!r}")
        address = address[0]
    if isinstance(address, Mem):
        return address
    if isinstance(address, GpReg):
        return Mem(address)
    raise CodegenError(f"not a memory address: {address!r}")


def bcst(address: Mem | GpReg | list) -> Mem:
    """An AVX-512 embedded broadcast source: ``a.vaddps(zmm0, zmm1, bcst(rdx))`` is ``[rdx]{1to16}``."""
    return as_mem(address).broadcast


class Label:
    """A branch target. Create it with ``Label("name")`` or ``a.new_label()``, bind it with ``a.bind(label)``
    (or create and bind at once with ``a.label("loop")``), jump to it with ``a.jnz(label)``."""

    __slots__ = ("name",)

    def __init__(self, name: str = "") -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Label({self.name!r})"


Operand = Reg | Mem | Masked | Label | int

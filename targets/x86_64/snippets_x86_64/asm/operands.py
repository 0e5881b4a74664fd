"""Operands of the assembly DSL besides registers: memory, op-masked operands, size hints, labels.

``rsi + 64``, ``rsi + rcx * 4 - 8``, ``mem(rsi, rcx, 4, -8)`` and ``[rsi + 64]`` all describe the same kind
of memory operand; ``qword[rsi + 8]`` adds a size hint (needed only where the other operands do not fix the
size, e.g. ``mov qword[rsi], 1``); ``bcst(rdx)`` / ``(rdx + 0).broadcast`` is an AVX-512 embedded broadcast
(``{1to16}``); ``zmm1.mask(k1)`` merges, ``zmm1.mask(k1).z`` zeroes the unselected lanes.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter

from snippets_core.errors import CodegenError
from snippets_x86_64.asm.registers import GpReg, MaskReg, Reg, VecReg

_SCALES = (1, 2, 4, 8)
#: builds an operand from fields known to be valid, skipping the checks of ``__new__`` (the DSL's hot path)
_tuple_new = tuple.__new__


@dataclass(frozen=True)
class ScaledIndex:
    """``rcx * 4``: an index register with its scale, waiting to be added to a base."""

    index: GpReg
    scale: int

    def __post_init__(self) -> None:
        if self.scale not in _SCALES:
            raise CodegenError(f"memory index scale must be one of {_SCALES}, got {self.index} * {self.scale}")


class Mem(tuple):
    """A memory operand ``[base + index * scale + disp]``.

    ``size`` (bytes) is an optional hint set by ``byte/word/dword/qword/xword/yword/zword[...]``;
    ``bcst`` marks an AVX-512 embedded broadcast of one element to every lane. ``label`` makes it
    ``[rip + label]``, a constant of the pool (see ``Assembler.const_f32``): no base, index or displacement.

    A frozen value with a tuple underneath, so that hashing and comparing it run in C (the Assembler looks each
    instruction up by its operands); the fields are read-only properties.
    """

    __slots__ = ()

    def __new__(
        cls,
        base: GpReg | None = None,
        index: GpReg | None = None,
        scale: int = 1,
        disp: int = 0,
        size: int | None = None,
        bcst: bool = False,
        label: Label | None = None,
    ) -> Mem:
        if label is not None and (base is not None or index is not None or disp):
            raise CodegenError(
                f"a constant-pool operand [rip+{label.name}] takes no base, index or displacement; "
                f"load its address with lea and index from there"
            )
        for reg in (base, index):
            if reg is not None and (not isinstance(reg, GpReg) or reg.bits not in (32, 64)):
                raise CodegenError(f"memory operands address through 64-bit (or 32-bit) GP registers, got {reg!r}")
        if index is not None and index.number == 4 and index.bits == 64:
            raise CodegenError("rsp cannot be an index register")
        if scale not in _SCALES:
            raise CodegenError(f"memory index scale must be one of {_SCALES}, got {scale}")
        if not -(2**31) <= disp < 2**31:
            raise CodegenError(f"memory displacement {disp} does not fit in 32 bits")
        return tuple.__new__(cls, (base, index, scale, disp, size, bcst, label))

    def __getnewargs__(self) -> tuple:  # copy and pickle call __new__ with the fields, not with one tuple
        return tuple(self)

    base = property(itemgetter(0))
    index = property(itemgetter(1))
    scale = property(itemgetter(2))
    disp = property(itemgetter(3))
    size = property(itemgetter(4))
    bcst = property(itemgetter(5))
    label = property(itemgetter(6))

    def __add__(self, other: int | GpReg | ScaledIndex) -> Mem:  # type: ignore[override]
        base, index, scale, disp, size, bcst, label = self
        if isinstance(other, int):
            if label is None and -(2**31) <= disp + other < 2**31:  # only the displacement changes: still valid
                return _tuple_new(Mem, (base, index, scale, disp + other, size, bcst, None))
            return Mem(base, index, scale, disp + other, size, bcst, label)
        if isinstance(other, GpReg):
            other = ScaledIndex(other, 1)
        if isinstance(other, ScaledIndex):
            if index is not None:
                raise CodegenError(f"memory operand {self} already has an index register")
            if base is None and other.scale == 1:
                return Mem(other.index, None, 1, disp, size, bcst, label)
            return Mem(base, other.index, other.scale, disp, size, bcst, label)
        return NotImplemented

    __radd__ = __add__

    def __sub__(self, other: int) -> Mem:
        if isinstance(other, int):
            base, index, scale, disp, size, bcst, label = self
            return Mem(base, index, scale, disp - other, size, bcst, label)
        return NotImplemented

    def __mul__(self, other: object) -> Mem:  # a tuple would repeat itself: no address arithmetic does that
        return NotImplemented

    __rmul__ = __mul__

    def with_label(self, label: Label) -> Mem:
        """The same constant-pool operand naming another constant."""
        base, index, scale, disp, size, bcst, _ = self
        return Mem(base, index, scale, disp, size, bcst, label)

    @property
    def broadcast(self) -> Mem:
        """The same address as an embedded broadcast source (``{1toN}``)."""
        base, index, scale, disp, size, _, label = self
        return Mem(base, index, scale, disp, size, True, label)

    def mask(self, k: MaskReg) -> Masked:
        """A masked store destination: only the lanes selected by ``k`` are written."""
        return Masked(self, k)

    def __repr__(self) -> str:
        return (f"Mem(base={self.base!r}, index={self.index!r}, scale={self.scale!r}, disp={self.disp!r}, "
                f"size={self.size!r}, bcst={self.bcst!r}, label={self.label!r})")

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


class Masked(tuple):
    """An operand under an op-mask: ``zmm1.mask(k1)`` (merge) or ``zmm1.mask(k1).z`` (zeroing). A frozen value
    with a tuple underneath, like :class:`Mem`."""

    __slots__ = ()

    def __new__(cls, target: VecReg | MaskReg | Mem, k: MaskReg, zeroing: bool = False) -> Masked:
        if not isinstance(k, MaskReg):
            raise CodegenError(f"an op-mask must be one of k1..k7, got {k!r}")
        if k.number == 0:
            raise CodegenError("k0 cannot be used as an op-mask (the encoding means 'no mask')")
        return tuple.__new__(cls, (target, k, zeroing))

    def __getnewargs__(self) -> tuple:
        return tuple(self)

    target = property(itemgetter(0))
    k = property(itemgetter(1))
    zeroing = property(itemgetter(2))

    @property
    def z(self) -> Masked:
        """Zeroing-masking: lanes not selected by the mask are set to zero instead of kept."""
        if isinstance(self.target, Mem):
            raise CodegenError(f"zeroing-masking is not allowed on a memory destination {self.target}")
        return Masked(self.target, self.k, True)

    def __repr__(self) -> str:
        return f"Masked(target={self.target!r}, k={self.k!r}, zeroing={self.zeroing!r})"

    def __str__(self) -> str:
        return f"{self.target}{{{self.k}}}" + ("{z}" if self.zeroing else "")


class _SizeHint:
    """``qword[rsi + 8]``: a memory operand with an explicit size."""

    __slots__ = ("name", "size")

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.size = size

    def __getitem__(self, address: Mem | GpReg) -> Mem:
        base, index, scale, disp, _, bcst, label = as_mem(address)
        # the fields were checked when ``address`` was made; only the size is new
        return _tuple_new(Mem, (base, index, scale, disp, self.size, bcst, label))

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

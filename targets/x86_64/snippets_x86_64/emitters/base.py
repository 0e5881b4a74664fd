"""What every emitter function shares: the auxiliary registers it is handed, and constants.

The math of every op is a pure function over the assembly DSL, e.g. ``emit_exp(a, dst, src, aux)``: it appends
instructions to the Assembler ``a`` that compute ``dst = exp(src)`` lane by lane and write nothing but ``dst``
and the auxiliary registers in ``aux``. ``dst`` may be the same register as any source (the register allocator
reuses a dead input's register); the aux registers never are. Such a function is declared with
:func:`kernel`, which records how many aux vector and mask registers it needs (:data:`NEEDS`), so the emitter
built on it can state them and a test can check that it writes nothing else.

Constants are 32-bit values in the Assembler's RIP-relative constant pool, read with an embedded broadcast
(``[rip+c]{1to16}``): they cost no register and the kernel needs no constant-table base register.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from snippets_core.errors import CodegenError
from snippets_x86_64.asm import Assembler, MaskReg, Mem, VecReg, bcst

F = TypeVar("F", bound=Callable[..., None])


@dataclass(frozen=True)
class Aux:
    """The auxiliary registers an emitter function may clobber: zmm registers and op-mask registers.

    Mask registers are used as write masks, so they are k1..k7 (k0 means "no mask" in that position).
    """

    vecs: tuple[VecReg, ...] = ()
    masks: tuple[MaskReg, ...] = ()

    def __post_init__(self) -> None:
        if any(k.number == 0 for k in self.masks):
            raise CodegenError("k0 cannot be an auxiliary mask register: emitters use their masks as write masks")


@dataclass(frozen=True)
class Needs:
    """How many auxiliary registers of each class an emitter function needs."""

    vecs: int = 0
    masks: int = 0

    def __or__(self, other: Needs) -> Needs:
        """Enough for either of two functions (used when one emitter calls one of several)."""
        return Needs(max(self.vecs, other.vecs), max(self.masks, other.masks))


#: emitter function -> its aux register needs (filled by :func:`kernel`)
NEEDS: dict[Callable[..., None], Needs] = {}


def kernel(vecs: int = 0, masks: int = 0) -> Callable[[F], F]:
    """Declare an emitter function and the aux registers it needs; the call checks it was given enough."""

    def wrap(fn: F) -> F:
        need = Needs(vecs, masks)

        def checked(a: Assembler, dst: VecReg, *args: object, **kwargs: object) -> None:
            aux = kwargs.get("aux")
            if aux is None:
                aux = next((x for x in args if isinstance(x, Aux)), Aux())
            if len(aux.vecs) < need.vecs or len(aux.masks) < need.masks:
                raise CodegenError(
                    f"{fn.__name__} needs {need.vecs} aux vector and {need.masks} aux mask registers, "
                    f"got {len(aux.vecs)} and {len(aux.masks)}"
                )
            fn(a, dst, *args, **kwargs)

        checked.__name__ = fn.__name__
        checked.__qualname__ = fn.__qualname__
        checked.__doc__ = fn.__doc__
        checked.__wrapped__ = fn  # type: ignore[attr-defined]
        NEEDS[checked] = need
        return checked  # type: ignore[return-value]

    return wrap


def needs(fn: Callable[..., None]) -> Needs:
    """The aux registers ``fn`` (a :func:`kernel` function) needs."""
    return NEEDS[fn]


# --- constants ----------------------------------------------------------------------------------------------


def f32(a: Assembler, value: float) -> Mem:
    """``[rip+c]{1to16}``: a float32 constant broadcast to every lane."""
    return bcst(a.const_f32(value))


def i32(a: Assembler, value: int) -> Mem:
    """``[rip+c]{1to16}``: a 32-bit integer (or bit pattern) constant broadcast to every lane."""
    return bcst(a.const_i32(value))


def f32_bits(value: float) -> int:
    """The bit pattern of ``value`` rounded to float32."""
    return int(np.float32(value).view(np.uint32))


def move(a: Assembler, dst: VecReg, src: VecReg) -> None:
    """``dst = src`` (nothing when they are the same register)."""
    if dst != src:
        a.vmovaps(dst, src)


def fixup_table(**responses: int) -> int:
    """The int32 table of ``vfixupimmps``: a 4-bit response per input class.

    Classes: ``qnan snan zero one ninf pinf neg pos`` (``one`` is +1.0). Responses: 0 keep dst, 1 the input,
    2 QNaN(input), 3 the default NaN, 4 -inf, 5 +inf, 6 inf with the input's sign, 7 -0, 8 +0, 9 -1, 10 +1,
    11 0.5, 12 90.0, 13 pi/2, 14 FLT_MAX, 15 -FLT_MAX.
    """
    order = ("qnan", "snan", "zero", "one", "ninf", "pinf", "neg", "pos")
    unknown = set(responses) - set(order)
    if unknown:
        raise CodegenError(f"unknown vfixupimmps input classes {sorted(unknown)}")
    return sum((responses.get(name, 0) & 0xF) << (4 * i) for i, name in enumerate(order))


# vfixupimmps responses, by name
KEEP, INPUT, QNAN, DEFAULT_NAN, NINF, PINF, SIGNED_INF, NZERO, PZERO, MINUS_ONE, PLUS_ONE = range(11)

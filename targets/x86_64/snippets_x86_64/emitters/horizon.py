"""Across-lane and register-setup ops: HorizonMax, HorizonSum, Fill, Scalar, BroadcastMove.

HorizonMax and HorizonSum reduce the 16 lanes of a register by halving (ymm, xmm, 64 and 32 bits) and leave
the result broadcast to every lane, so the consumer may read any lane. HorizonMax propagates a NaN lane (as
numpy ``max`` does). Fill overwrites lanes ``[offset, 16)`` with a 32-bit pattern (a masked broadcast under
a mask loaded from the constant pool). Scalar broadcasts a constant; BroadcastMove broadcasts lane 0.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from snippets_core.errors import CodegenError
from snippets_x86_64.asm import Assembler, VecReg
from snippets_x86_64.emitters.base import Aux, kernel, move
from snippets_x86_64.emitters.eltwise import minmax_f32

LANES = 16


def _fold(a: Assembler, dst: VecReg, src: VecReg, t: VecReg, step: Callable[[VecReg, VecReg, VecReg], None]) -> None:
    a.vextractf32x8(t.ymm, src, 1)
    step(t.ymm, t.ymm, src.ymm)
    a.vextractf32x4(dst.xmm, t.ymm, 1)  # src is dead from here on: dst may be src
    step(dst.xmm, dst.xmm, t.xmm)
    a.vmovhlps(t.xmm, t.xmm, dst.xmm)
    step(dst.xmm, dst.xmm, t.xmm)
    a.vmovshdup(t.xmm, dst.xmm)
    step(dst.xmm, dst.xmm, t.xmm)
    a.vbroadcastss(dst, dst.xmm)


@kernel(vecs=1, masks=1)
def emit_horizon_max(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """The maximum of the 16 f32 lanes, in every lane (NaN if a lane is NaN)."""
    k = aux.masks[0]
    _fold(a, dst, src, aux.vecs[0], lambda d, x, y: minmax_f32(a, "vmaxps", d, x, y, k))


@kernel(vecs=1)
def emit_horizon_max_any(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """The maximum of the 16 f32 lanes, in every lane, NaN lanes possibly dropped (``vmaxps`` alone: a Softmax's
    max, ``MAX_MAY_DROP_NAN``); half the dependent steps of :func:`emit_horizon_max`."""
    _fold(a, dst, src, aux.vecs[0], lambda d, x, y: a.vmaxps(d, x, y))


@kernel(vecs=1)
def emit_horizon_sum(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """The sum of the 16 f32 lanes (pairwise, as a tree), in every lane."""
    _fold(a, dst, src, aux.vecs[0], lambda d, x, y: a.vaddps(d, x, y))


@kernel(masks=1)
def emit_fill(a: Assembler, dst: VecReg, src: VecReg, aux: Aux, offset: int = 0, fill_value: int = 0) -> None:
    """Lanes ``[offset, 16)`` take the 32-bit pattern ``fill_value``, the others keep ``src``."""
    if offset < 0:
        raise CodegenError(f"Fill offset must be >= 0, got {offset}")
    pattern = a.const_i32(fill_value & 0xFFFF_FFFF)
    if offset >= LANES:
        move(a, dst, src)
    elif offset == 0:
        a.vpbroadcastd(dst, pattern)
    else:
        k = aux.masks[0]
        lanes = (0xFFFF << offset) & 0xFFFF
        a.kmovw(k, a.const_data(lanes.to_bytes(2, "little"), 2))
        move(a, dst, src)
        a.vpbroadcastd(dst.mask(k), pattern)


def scalar_bits(value: float | bool, form: str) -> int:
    """The 32-bit lane pattern of a scalar in a register form (``"f32"`` or ``"i32"``)."""
    if form == "f32":
        return int(np.float32(value).view(np.uint32))
    return int(value) & 0xFFFF_FFFF


@kernel()
def emit_scalar(a: Assembler, dst: VecReg, aux: Aux, bits: int = 0) -> None:
    """Every lane = the 32-bit pattern ``bits`` (a Scalar constant in its register form)."""
    if bits == 0:
        a.vpxord(dst, dst, dst)
    else:
        a.vpbroadcastd(dst, a.const_i32(bits))


@kernel()
def emit_broadcast_move(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """Every lane = lane 0 of src."""
    a.vbroadcastss(dst, src.xmm)

"""Element-type conversions between the register forms of f32, f16, bf16, i32, i8, u8 and boolean (and i16/u16).

Register forms. Every lane of a kernel's vector registers is 32 bits:

* **float form** (f32, f16, bf16): the value as an f32. f16 and bf16 values are exactly f32 values, so a Load
  of f16 widens with ``vcvtph2ps`` and of bf16 with a 16-bit shift, and a Store narrows back (the value is
  already rounded to the type, so the store's narrowing is exact);
* **integer form** (i32, i16, u16, i8, u8, boolean): the value as an i32, sign- or zero-extended (``vpmovsx*``
  / ``vpmovzx*`` on load, ``vpmov*`` truncating narrowing on store). A boolean is 0 or 1.

A conversion to f16 or bf16 rounds the f32 value to that type (nearest even, overflow to inf) and keeps it in
float form; a conversion to a narrow integer type wraps (truncation) or clamps (saturation) into its range and
keeps it in integer form. The three semantics follow the core's references:

* ``truncation`` (ConvertTruncation, ``convert_truncation``): float -> int rounds toward zero into i32
  (``vcvttps2dq``: NaN and out-of-range give INT_MIN), then keeps the low bits; int -> int wraps;
* ``saturation`` (ConvertSaturation, ``convert_saturation``): float -> int rounds to nearest even and clamps to
  the range (NaN gives the minimum of signed types, 0 of unsigned ones); int -> int clamps;
* ``convert`` (Convert, ``convert_array``): float -> int rounds toward zero and clamps, NaN gives 0;
  int -> int wraps.

Anything -> boolean is ``x != 0`` (NaN is true).
"""

from __future__ import annotations

from snippets_core.errors import UnsupportedByTarget, UnsupportedOpError
from snippets_core.ir.element_type import ElementType
from snippets_x86_64.asm import Assembler, MaskReg, VecReg
from snippets_x86_64.emitters.base import Aux, f32, i32, kernel, move
from snippets_x86_64.emitters.eltwise import bool_from_mask
from snippets_x86_64.emitters.math import cmp

FLOAT_FORM = (ElementType.f32, ElementType.f16, ElementType.bf16)
INT_FORM = (ElementType.i32, ElementType.i16, ElementType.u16, ElementType.i8, ElementType.u8, ElementType.boolean)
MODES = ("truncation", "saturation", "convert")

#: integer-form type -> (min, max, bits kept by wrapping, signed)
INT_RANGES: dict[ElementType, tuple[int, int, int, bool]] = {
    ElementType.i32: (-(2**31), 2**31 - 1, 32, True),
    ElementType.i16: (-(2**15), 2**15 - 1, 16, True),
    ElementType.u16: (0, 2**16 - 1, 16, False),
    ElementType.i8: (-128, 127, 8, True),
    ElementType.u8: (0, 255, 8, False),
    ElementType.boolean: (0, 1, 8, False),
}

TWO_POW_31 = 2147483648.0
INT_MAX = 2**31 - 1


def register_form(et: ElementType) -> str:
    """``"f32"`` or ``"i32"``: how a value of ``et`` lives in a vector register."""
    if et in FLOAT_FORM:
        return "f32"
    if et in INT_FORM:
        return "i32"
    raise UnsupportedByTarget(f"the x86_64_avx512 target has no register form for element type {et}")


def _wrap(a: Assembler, dst: VecReg, src: VecReg, to: ElementType) -> None:
    """Keep the low bits of i32 lanes as ``to`` (sign- or zero-extended again)."""
    _lo, _hi, bits, signed = INT_RANGES[to]
    if bits == 32:
        move(a, dst, src)
    elif signed:
        a.vpslld(dst, src, 32 - bits)
        a.vpsrad(dst, dst, 32 - bits)
    else:
        a.vpandd(dst, src, i32(a, (1 << bits) - 1))


def _clamp_int(a: Assembler, dst: VecReg, src: VecReg, to: ElementType) -> None:
    lo, hi, bits, _ = INT_RANGES[to]
    if bits == 32:
        move(a, dst, src)
        return
    a.vpmaxsd(dst, src, i32(a, lo))
    a.vpminsd(dst, dst, i32(a, hi))


def _round_f16(a: Assembler, dst: VecReg, src: VecReg, tmp: VecReg) -> None:
    a.vcvtps2ph(tmp.ymm, src, 0x08)  # round to nearest even, no precision exception
    a.vcvtph2ps(dst, tmp.ymm)


def _round_bf16(a: Assembler, dst: VecReg, src: VecReg, tmp: VecReg, k: MaskReg) -> None:
    # integer rounding to nearest even on the bit pattern; vcvtneps2bf16 would flush denormals to zero
    a.vpsrld(tmp, src, 16)
    a.vpandd(tmp, tmp, i32(a, 1))
    a.vpaddd(tmp, tmp, i32(a, 0x7FFF))
    a.vpaddd(tmp, tmp, src)
    a.vcmpps(k, src, src, cmp("unord_q"))
    a.vpord(tmp.mask(k), src, i32(a, 0x0040_0000))  # NaN: quiet, never rounded into inf
    a.vpandd(dst, tmp, i32(a, 0xFFFF_0000))


def _float_to_int(a: Assembler, dst: VecReg, src: VecReg, to: ElementType, mode: str, tmp: VecReg, k: MaskReg) -> None:
    lo, hi, bits, _signed = INT_RANGES[to]
    if mode == "truncation":
        a.vcvttps2dq(dst, src)  # NaN and out of range: INT_MIN, whose low bits are kept
        _wrap(a, dst, dst, to)
        return
    if bits == 32:
        if mode == "saturation":
            a.vcvtps2dq(tmp, src, rc="rn")  # NaN and x < -2**31 give INT_MIN, the minimum
        else:
            a.vcmpps(k, src, src, cmp("ord_q"))
            a.vcvttps2dq(tmp.mask(k).z, src)  # NaN gives 0
        a.vcmpps(k, src, f32(a, TWO_POW_31), cmp("ge_oq"))
        a.vpbroadcastd(tmp.mask(k), a.const_i32(INT_MAX))
        move(a, dst, tmp)
        return
    # narrow types: clamp in f32 first (vmaxps gives its second source, the bound, for NaN)
    a.vmaxps(tmp, src, f32(a, float(lo)))
    a.vminps(tmp, tmp, f32(a, float(hi)))
    if mode == "saturation":
        a.vcvtps2dq(dst, tmp, rc="rn")
    else:
        a.vcmpps(k, src, src, cmp("ord_q"))
        a.vcvttps2dq(dst.mask(k).z, tmp)  # NaN gives 0


def _to_boolean(a: Assembler, dst: VecReg, src: VecReg, form: str, k: MaskReg) -> None:
    if form == "f32":
        a.vcmpps(k, src, f32(a, 0.0), cmp("neq_uq"))  # NaN is true
    else:
        a.vptestmd(k, src, src)
    bool_from_mask(a, dst, k)


@kernel(vecs=1, masks=1)
def emit_convert(
    a: Assembler,
    dst: VecReg,
    src: VecReg,
    aux: Aux,
    src_type: ElementType = ElementType.f32,
    dst_type: ElementType = ElementType.f32,
    mode: str = "truncation",
) -> None:
    """Convert the register form of ``src_type`` to that of ``dst_type`` with the semantics ``mode``
    (``truncation``, ``saturation`` or ``convert``; see the module docstring)."""
    if mode not in MODES:
        raise UnsupportedOpError(f"unknown conversion mode {mode!r}, expected one of {MODES}")
    tmp, k = aux.vecs[0], aux.masks[0]
    src_form, dst_form = register_form(src_type), register_form(dst_type)
    if src_type == dst_type:
        move(a, dst, src)
    elif dst_type is ElementType.boolean:
        _to_boolean(a, dst, src, src_form, k)
    elif src_form == "f32" and dst_form == "f32":
        if dst_type is ElementType.f32:
            move(a, dst, src)
        elif dst_type is ElementType.f16:
            _round_f16(a, dst, src, tmp)
        else:
            _round_bf16(a, dst, src, tmp, k)
    elif src_form == "f32":
        _float_to_int(a, dst, src, dst_type, mode, tmp, k)
    elif dst_form == "f32":
        a.vcvtdq2ps(dst, src, rc="rn")
        if dst_type is ElementType.f16:
            _round_f16(a, dst, dst, tmp)
        elif dst_type is ElementType.bf16:
            _round_bf16(a, dst, dst, tmp, k)
    elif mode == "saturation":
        lo, hi, _, _ = INT_RANGES[src_type]
        dlo, dhi, _, _ = INT_RANGES[dst_type]
        if lo >= dlo and hi <= dhi:
            move(a, dst, src)
        else:
            _clamp_int(a, dst, src, dst_type)
    else:
        _wrap(a, dst, src, dst_type)

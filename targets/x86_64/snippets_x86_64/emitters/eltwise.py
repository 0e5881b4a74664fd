"""Arithmetic, comparison, logical and selection ops as pure emitter functions, per register form.

Every lane is 32 bits. A lane holds an f32 value (for f32, f16 and bf16 tensors) or an i32 value (for i32, i8,
u8 and boolean tensors, sign- or zero-extended); see ``convert.py``. ``*_f32`` functions work on the first form,
``*_i32`` on the second; the emitter table picks one by the expression's element types.

Booleans. A boolean lives in a register as the i32 0 or 1 (as a u8 0/1 byte does once widened), so it is
stored as a 0/1 byte by the u8 store, and converts to 0.0/1.0 with ``vcvtdq2ps``. Comparisons produce it
(compare into a mask, then a zero-masked broadcast of 1); LogicalAnd/Or/Xor/Not are then plain bitwise ops on
0/1; Select takes any non-zero lane as true (``vptestmd``).

NaN follows numpy: Maximum/Minimum/Relu/Clamp propagate a NaN operand (``vmaxps`` alone would return the
second operand), comparisons with NaN are false except NotEqual.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from snippets_x86_64.asm import VPCMP_PREDICATES, Assembler, MaskReg, VecReg
from snippets_x86_64.emitters.base import PINF, Aux, f32, fixup_table, i32, kernel, move
from snippets_x86_64.emitters.math import ABS_MASK, RND_TRUNC, SIGN_MASK, cmp, emit_exp, emit_log

# --- binary ops that are one instruction -------------------------------------------------------------------


def _binary(name: str, mnemonic: str, doc: str) -> Callable[..., None]:
    def emit(a: Assembler, dst: VecReg, x: VecReg, y: VecReg, aux: Aux) -> None:
        a.emit(mnemonic, dst, x, y)

    emit.__name__ = emit.__qualname__ = name
    emit.__doc__ = doc
    return kernel()(emit)


emit_add_f32 = _binary("emit_add_f32", "vaddps", "x + y")
emit_sub_f32 = _binary("emit_sub_f32", "vsubps", "x - y")
emit_mul_f32 = _binary("emit_mul_f32", "vmulps", "x * y")
emit_div_f32 = _binary("emit_div_f32", "vdivps", "x / y (correctly rounded)")
emit_add_i32 = _binary("emit_add_i32", "vpaddd", "x + y, wrapping")
emit_sub_i32 = _binary("emit_sub_i32", "vpsubd", "x - y, wrapping")
emit_mul_i32 = _binary("emit_mul_i32", "vpmulld", "x * y, the low 32 bits")
emit_max_i32 = _binary("emit_max_i32", "vpmaxsd", "max(x, y), signed")
emit_min_i32 = _binary("emit_min_i32", "vpminsd", "min(x, y), signed")
emit_and_i32 = _binary("emit_and_i32", "vpandd", "x & y (LogicalAnd on 0/1)")
emit_or_i32 = _binary("emit_or_i32", "vpord", "x | y (LogicalOr on 0/1)")
emit_xor_i32 = _binary("emit_xor_i32", "vpxord", "x ^ y (LogicalXor on 0/1, BitwiseXor)")


@kernel(vecs=5, masks=2)
def emit_div_i32(a: Assembler, dst: VecReg, x: VecReg, y: VecReg, aux: Aux) -> None:
    """x / y rounded toward zero (C, ONNX Div on integers), x / 0 = 0 (the core's reference), INT_MIN / -1
    wraps to INT_MIN (numpy's int32). Exact for all i32, on the magnitudes |x|, |y| (u32): an f32 quotient q0
    (off by at most ~400 for the largest quotients), one f32 correction trunc(r / |y|) from the exact
    remainder r = |x| - q0 |y| (wrapping arithmetic; its true value stays within i32), then one +-1 step where
    the remainder is still outside [0, |y|); the sign of x xor y last."""
    sign, uy, fy, q, r = aux.vecs[:5]
    k, nonzero = aux.masks[:2]
    ux = dst
    a.vpxord(sign, x, y)
    a.vptestmd(nonzero, y, y)
    a.vpabsd(uy, y)  # INT_MIN stays 0x80000000: 2**31 as u32
    a.vpabsd(ux, x)  # x and y are read for the last time: dst may have been either
    a.vcvtudq2ps(fy, uy)
    a.vcvtudq2ps(r, ux)
    a.vdivps(r, r, fy)
    a.vcvttps2udq(q, r)  # q0
    a.vpmulld(r, q, uy)
    a.vpsubd(r, ux, r)  # r = |x| - q0 |y|
    a.vcvtdq2ps(r, r)
    a.vdivps(r, r, fy)
    a.vcvttps2dq(r, r)
    a.vpaddd(q, q, r)  # q0 + trunc(r / |y|)
    a.vpmulld(r, q, uy)
    a.vpsubd(r, ux, r)
    one = i32(a, 1)
    a.vpcmpd(k, r, i32(a, 0), VPCMP_PREDICATES["lt"])  # one too many
    a.vpsubd(q.mask(k), q, one)
    a.vpaddd(r.mask(k), r, uy)
    a.vpcmpud(k, r, uy, VPCMP_PREDICATES["nlt"])  # one too few
    a.vpaddd(q.mask(k), q, one)
    a.vpsrad(sign, sign, 31)  # -1 where the quotient is negative
    a.vpxord(q, q, sign)
    a.vpsubd(q, q, sign)
    a.vmovaps(dst.mask(nonzero).z, q)


def _mod_i32(a: Assembler, x: VecReg, y: VecReg, aux: Aux) -> VecReg:
    """x - trunc(x/y) y into aux.vecs[5] (returned), 0 where y == 0; writes only aux registers."""
    cx, r = aux.vecs[5:7]
    a.vmovaps(cx, x)
    emit_div_i32(a, r, x, y, Aux(aux.vecs[:5], aux.masks[:2]))
    a.vpmulld(r, r, y)
    a.vpsubd(r, cx, r)
    a.vptestmd(aux.masks[0], y, y)
    a.vmovaps(cx.mask(aux.masks[0]).z, r)
    return cx


@kernel(vecs=7, masks=2)
def emit_mod_i32(a: Assembler, dst: VecReg, x: VecReg, y: VecReg, aux: Aux) -> None:
    """x - trunc(x/y) y, the sign of x (numpy ``fmod`` on integers); 0 where y == 0."""
    move(a, dst, _mod_i32(a, x, y, aux))


@kernel(vecs=7, masks=2)
def emit_floor_mod_i32(a: Assembler, dst: VecReg, x: VecReg, y: VecReg, aux: Aux) -> None:
    """x - floor(x/y) y, the sign of y (numpy ``mod`` on integers); 0 where y == 0."""
    r, t = _mod_i32(a, x, y, aux), aux.vecs[0]
    k, k2 = aux.masks[:2]
    a.vpxord(t, r, y)
    a.vptestmd(k, r, r)
    a.vpcmpd(k2.mask(k), t, i32(a, 0), VPCMP_PREDICATES["lt"])  # r != 0 with the sign opposite to y
    a.vpaddd(r.mask(k2), r, y)
    move(a, dst, r)


# --- f32 min/max, mod --------------------------------------------------------------------------------------


def minmax_f32(a: Assembler, mnemonic: str, dst: VecReg, x: VecReg, y: VecReg, k: MaskReg) -> None:
    """dst = ``mnemonic`` (vmaxps/vminps) of x and y as numpy computes it: x where x is NaN, else y where y is
    NaN or the operands are equal (+-0), else the larger/smaller; k is clobbered.

    ``vmaxps dst, x, y`` is (x > y ? x : y) and y when either is NaN, i.e. numpy's answer except where x is
    NaN: those lanes are patched (kept by merge-masking when dst is x)."""
    if dst == x:
        a.vcmpps(k, x, x, cmp("ord_q"))
        a.emit(mnemonic, dst.mask(k), x, y)
    else:
        a.vcmpps(k, x, x, cmp("unord_q"))
        a.emit(mnemonic, dst, x, y)
        a.vmovaps(dst.mask(k), x)


@kernel(masks=1)
def emit_max_f32(a: Assembler, dst: VecReg, x: VecReg, y: VecReg, aux: Aux) -> None:
    """max(x, y), NaN if either is NaN (numpy ``maximum``)."""
    minmax_f32(a, "vmaxps", dst, x, y, aux.masks[0])


@kernel(masks=1)
def emit_min_f32(a: Assembler, dst: VecReg, x: VecReg, y: VecReg, aux: Aux) -> None:
    """min(x, y), NaN if either is NaN (numpy ``minimum``)."""
    minmax_f32(a, "vminps", dst, x, y, aux.masks[0])


@kernel()
def emit_max_f32_const_x(a: Assembler, dst: VecReg, x: VecReg, y: VecReg, aux: Aux) -> None:
    """max(x, y) for an x that is never NaN (a Scalar): ``vmaxps dst, x, y`` is numpy's answer, y's NaN and
    y on ties included (see :func:`minmax_f32`)."""
    a.vmaxps(dst, x, y)


@kernel()
def emit_min_f32_const_x(a: Assembler, dst: VecReg, x: VecReg, y: VecReg, aux: Aux) -> None:
    """min(x, y) for an x that is never NaN (see :func:`emit_max_f32_const_x`)."""
    a.vminps(dst, x, y)


@kernel()
def emit_max_f32_const_y(a: Assembler, dst: VecReg, x: VecReg, y: VecReg, aux: Aux) -> None:
    """max(x, y) for a y that is neither NaN nor zero (a Scalar): ``vmaxps dst, y, x`` returns x when x is NaN;
    on ties it returns x too, which is y's bit pattern unless the tie is +-0."""
    a.vmaxps(dst, y, x)


@kernel()
def emit_min_f32_const_y(a: Assembler, dst: VecReg, x: VecReg, y: VecReg, aux: Aux) -> None:
    """min(x, y) for a y that is neither NaN nor zero (see :func:`emit_max_f32_const_y`)."""
    a.vminps(dst, y, x)


@kernel()
def emit_squared_difference_f32(a: Assembler, dst: VecReg, x: VecReg, y: VecReg, aux: Aux) -> None:
    """(x - y)**2."""
    a.vsubps(dst, x, y)
    a.vmulps(dst, dst, dst)


@kernel()
def emit_squared_difference_i32(a: Assembler, dst: VecReg, x: VecReg, y: VecReg, aux: Aux) -> None:
    """(x - y)**2, wrapping."""
    a.vpsubd(dst, x, y)
    a.vpmulld(dst, dst, dst)


@kernel(vecs=1, masks=1)
def emit_prelu_f32(a: Assembler, dst: VecReg, x: VecReg, slope: VecReg, aux: Aux) -> None:
    """x for x >= 0, slope * x otherwise."""
    k = aux.masks[0]
    a.vcmpps(k, x, f32(a, 0.0), cmp("lt_oq"))
    a.vmulps(aux.vecs[0], x, slope)
    a.vblendmps(dst.mask(k), x, aux.vecs[0])


@kernel(vecs=1, masks=1)
def emit_prelu_i32(a: Assembler, dst: VecReg, x: VecReg, slope: VecReg, aux: Aux) -> None:
    """x for x >= 0, slope * x (wrapping) otherwise."""
    k = aux.masks[0]
    a.vpcmpd(k, x, i32(a, 0), VPCMP_PREDICATES["lt"])
    a.vpmulld(aux.vecs[0], x, slope)
    a.vpblendmd(dst.mask(k), x, aux.vecs[0])


def _fmod(a: Assembler, x: VecReg, y: VecReg, aux: Aux) -> VecReg:
    """The C fmod of x and y into aux.vecs[0] (returned); writes only aux registers, so dst may alias x or y."""
    r, step, t, ay = aux.vecs[:4]
    k, k2 = aux.masks[:2]
    sign, absm = i32(a, SIGN_MASK), i32(a, ABS_MASK)
    a.vdivps(r, x, y)
    a.vrndscaleps(r, r, RND_TRUNC)
    a.vfnmadd213ps(r, y, x)  # x - q*y, exact for the right q
    a.vandps(ay, y, absm)
    a.vandps(t, x, sign)
    a.vorps(step, ay, t)  # |y| with the sign of x
    # r != 0 with the sign opposite to x: the quotient was one too large
    a.vxorps(t, r, x)
    a.vcmpps(k, r, f32(a, 0.0), cmp("neq_oq"))
    a.vptestmd(k2.mask(k), t, sign)
    a.vaddps(r.mask(k2), r, step)
    # |r| >= |y|: one too small
    a.vandps(t, r, absm)
    a.vcmpps(k2, t, ay, cmp("ge_oq"))
    a.vsubps(r.mask(k2), r, step)
    # fmod(finite x, +-inf) = x (the division gave 0 * inf)
    a.vcmpps(k, ay, f32(a, math.inf), cmp("eq_oq"))
    a.vandps(t, x, absm)
    a.vcmpps(k2.mask(k), t, f32(a, math.inf), cmp("lt_oq"))
    a.vmovaps(r.mask(k2), x)
    return r


@kernel(vecs=4, masks=2)
def emit_mod_f32(a: Assembler, dst: VecReg, x: VecReg, y: VecReg, aux: Aux) -> None:
    """C ``fmod``: x - trunc(x/y) y with the sign of x (numpy ``fmod``). The quotient is rounded, so the
    remainder (exact by FMA) is corrected by one |y| when it left the range; exact while |x/y| < 2**23.
    fmod(x, +-inf) = x for finite x; fmod(x, 0) and fmod(+-inf, y) are NaN."""
    move(a, dst, _fmod(a, x, y, aux))


@kernel(vecs=4, masks=2)
def emit_floor_mod_f32(a: Assembler, dst: VecReg, x: VecReg, y: VecReg, aux: Aux) -> None:
    """x - floor(x/y) y with the sign of y (numpy ``mod``): fmod, plus y where it is non-zero and its sign
    differs from y's."""
    r, t = aux.vecs[0], aux.vecs[2]
    k, k2 = aux.masks[:2]
    _fmod(a, x, y, aux)
    a.vxorps(t, r, y)
    a.vcmpps(k, r, f32(a, 0.0), cmp("neq_oq"))
    a.vptestmd(k2.mask(k), t, i32(a, SIGN_MASK))
    a.vaddps(r.mask(k2), r, y)
    move(a, dst, r)


# --- f32 and i32 unary -----------------------------------------------------------------------------------------


@kernel()
def emit_abs_f32(a: Assembler, dst: VecReg, x: VecReg, aux: Aux) -> None:
    """|x| (clears the sign bit)."""
    a.vandps(dst, x, i32(a, ABS_MASK))


@kernel()
def emit_neg_f32(a: Assembler, dst: VecReg, x: VecReg, aux: Aux) -> None:
    """-x (flips the sign bit)."""
    a.vxorps(dst, x, i32(a, SIGN_MASK))


@kernel()
def emit_abs_i32(a: Assembler, dst: VecReg, x: VecReg, aux: Aux) -> None:
    """|x| (INT_MIN stays INT_MIN, as numpy's wrap-around)."""
    a.vpabsd(dst, x)


@kernel(vecs=1)
def emit_neg_i32(a: Assembler, dst: VecReg, x: VecReg, aux: Aux) -> None:
    """-x, wrapping."""
    zero = aux.vecs[0]
    a.vpxord(zero, zero, zero)
    a.vpsubd(dst, zero, x)


@kernel(masks=1)
def emit_relu_f32(a: Assembler, dst: VecReg, x: VecReg, aux: Aux) -> None:
    """max(x, 0); NaN stays NaN."""
    k = aux.masks[0]
    a.vcmpps(k, x, f32(a, 0.0), cmp("nlt_uq"))
    a.vmovaps(dst.mask(k).z, x)


@kernel()
def emit_relu_i32(a: Assembler, dst: VecReg, x: VecReg, aux: Aux) -> None:
    """max(x, 0)."""
    a.vpmaxsd(dst, x, i32(a, 0))


@kernel()
def emit_sqrt_f32(a: Assembler, dst: VecReg, x: VecReg, aux: Aux) -> None:
    """Square root (correctly rounded; NaN for x < 0)."""
    a.vsqrtps(dst, x)


@kernel()
def emit_identity(a: Assembler, dst: VecReg, x: VecReg, aux: Aux) -> None:
    """x (Floor, Ceiling and Round of integers; Convert between types of one register form)."""
    move(a, dst, x)


def clamp_f32(a: Assembler, dst: VecReg, x: VecReg, lo: float, hi: float, tmp: VecReg) -> None:
    """dst = min(max(x, lo), hi) with NaN propagated (the constant is the first source, x the second)."""
    a.vbroadcastss(tmp, a.const_f32(lo))
    a.vmaxps(dst, tmp, x)
    a.vbroadcastss(tmp, a.const_f32(hi))
    a.vminps(dst, tmp, dst)


@kernel(vecs=1)
def emit_clamp_f32(
    a: Assembler, dst: VecReg, x: VecReg, aux: Aux, min: float = -math.inf, max: float = math.inf
) -> None:
    """min(max(x, min), max); NaN stays NaN."""
    clamp_f32(a, dst, x, min, max, aux.vecs[0])


@kernel()
def emit_clamp_i32(
    a: Assembler, dst: VecReg, x: VecReg, aux: Aux, min: float = -math.inf, max: float = math.inf
) -> None:
    """min(max(x, ceil(min)), floor(max)), the bounds taken inward and into the i32 range."""
    lo = -(2**31) if min < -(2**31) else math.ceil(min)
    hi = 2**31 - 1 if max > 2**31 - 1 else math.floor(max)
    a.vpmaxsd(dst, x, i32(a, lo))
    a.vpminsd(dst, dst, i32(a, hi))


@kernel(vecs=1)
def emit_hsigmoid_f32(a: Assembler, dst: VecReg, x: VecReg, aux: Aux) -> None:
    """min(max(x + 3, 0), 6) / 6."""
    a.vaddps(dst, x, f32(a, 3.0))
    clamp_f32(a, dst, dst, 0.0, 6.0, aux.vecs[0])
    a.vmulps(dst, dst, f32(a, 1.0 / 6.0))


@kernel(vecs=2)
def emit_hswish_f32(a: Assembler, dst: VecReg, x: VecReg, aux: Aux) -> None:
    """x min(max(x + 3, 0), 6) / 6."""
    t = aux.vecs[1]
    a.vaddps(t, x, f32(a, 3.0))
    clamp_f32(a, t, t, 0.0, 6.0, aux.vecs[0])
    a.vmulps(t, t, x)
    a.vmulps(dst, t, f32(a, 1.0 / 6.0))


@kernel(vecs=1)
def emit_hard_sigmoid_f32(
    a: Assembler, dst: VecReg, x: VecReg, aux: Aux, alpha: float = 0.2, beta: float = 0.5
) -> None:
    """max(0, min(1, alpha x + beta))."""
    a.vmulps(dst, x, f32(a, alpha))
    a.vaddps(dst, dst, f32(a, beta))
    clamp_f32(a, dst, dst, 0.0, 1.0, aux.vecs[0])


@kernel(vecs=1)
def emit_softsign_f32(a: Assembler, dst: VecReg, x: VecReg, aux: Aux) -> None:
    """x / (1 + |x|)."""
    t = aux.vecs[0]
    a.vandps(t, x, i32(a, ABS_MASK))
    a.vaddps(t, t, f32(a, 1.0))
    a.vdivps(dst, x, t)


@kernel(vecs=1, masks=1)
def emit_sign_i32(a: Assembler, dst: VecReg, x: VecReg, aux: Aux) -> None:
    """-1, 0 or 1."""
    k = aux.masks[0]
    a.vpcmpd(k, x, i32(a, 0), VPCMP_PREDICATES["nle"])
    a.vpsrad(aux.vecs[0], x, 31)  # -1 for x < 0, else 0
    a.vpbroadcastd(aux.vecs[0].mask(k), a.const_i32(1))
    move(a, dst, aux.vecs[0])


@kernel()
def emit_logical_not(a: Assembler, dst: VecReg, x: VecReg, aux: Aux) -> None:
    """not x, on the 0/1 form of booleans."""
    a.vpxord(dst, x, i32(a, 1))


# --- comparisons, select, fused multiply-add ---------------------------------------------------------------


def bool_from_mask(a: Assembler, dst: VecReg, k: MaskReg) -> None:
    """dst = 1 where ``k`` is set, else 0: the register form of a boolean."""
    a.vpbroadcastd(dst.mask(k).z, a.const_i32(1))


#: comparison op -> (vcmpps predicate, vpcmpd predicate)
COMPARISONS: dict[str, tuple[str, str]] = {
    "Equal": ("eq_oq", "eq"),
    "NotEqual": ("neq_uq", "ne"),
    "Greater": ("gt_oq", "nle"),
    "GreaterEqual": ("ge_oq", "nlt"),
    "Less": ("lt_oq", "lt"),
    "LessEqual": ("le_oq", "le"),
}


@kernel(masks=1)
def emit_compare_f32(a: Assembler, dst: VecReg, x: VecReg, y: VecReg, aux: Aux, predicate: str = "eq_oq") -> None:
    """x <op> y on f32 lanes as a boolean (0/1); ordered predicates are false on NaN, ``neq_uq`` true."""
    a.vcmpps(aux.masks[0], x, y, cmp(predicate))
    bool_from_mask(a, dst, aux.masks[0])


@kernel(masks=1)
def emit_compare_i32(a: Assembler, dst: VecReg, x: VecReg, y: VecReg, aux: Aux, predicate: str = "eq") -> None:
    """x <op> y on signed i32 lanes as a boolean (0/1)."""
    a.vpcmpd(aux.masks[0], x, y, VPCMP_PREDICATES[predicate])
    bool_from_mask(a, dst, aux.masks[0])


@kernel(masks=1)
def emit_select(a: Assembler, dst: VecReg, cond: VecReg, then: VecReg, else_: VecReg, aux: Aux) -> None:
    """then where cond is non-zero, else else_ (any 32-bit lanes: f32 and i32 alike)."""
    k = aux.masks[0]
    a.vptestmd(k, cond, cond)
    a.vpblendmd(dst.mask(k), else_, then)


@kernel()
def emit_fused_mul_add_f32(a: Assembler, dst: VecReg, x: VecReg, y: VecReg, z: VecReg, aux: Aux) -> None:
    """x * y + z with one rounding (FusedMulAdd)."""
    if dst == z and dst not in (x, y):
        a.vfmadd231ps(dst, x, y)
    elif dst == y:
        a.vfmadd213ps(dst, x, z)
    else:
        move(a, dst, x)
        a.vfmadd213ps(dst, y, z)


@kernel(vecs=1)
def emit_fused_mul_add_i32(a: Assembler, dst: VecReg, x: VecReg, y: VecReg, z: VecReg, aux: Aux) -> None:
    """x * y + z, wrapping."""
    a.vpmulld(aux.vecs[0], x, y)
    a.vpaddd(dst, aux.vecs[0], z)


# --- powers --------------------------------------------------------------------------------------------------

#: integer exponents up to this magnitude are computed by repeated squaring (exact to a few roundings)
MAX_SQUARING_POWER = 64


def power_static_function(power: float) -> Callable[..., None]:
    """The function for this constant exponent: the squaring one (2 aux vecs) or the general one."""
    return emit_power_static_small if power_static_needs(power)[1] == 0 else emit_power_static


def power_static_needs(power: float) -> tuple[int, int]:
    """Aux (vecs, masks) that this exponent needs."""
    if power == int(power) and abs(power) <= MAX_SQUARING_POWER:
        return 1, 0
    if 2 * power == int(2 * power) and abs(power) <= MAX_SQUARING_POWER:
        return 2, 0
    return 4, 1


def _power_squaring(a: Assembler, dst: VecReg, x: VecReg, b: VecReg, n: int, negative: bool) -> None:
    """dst = x**n (n >= 1) by repeated squaring of b; of 1/x when ``negative`` (no spurious overflow of x**n
    when the result is small). dst may be x."""
    if negative:
        a.vbroadcastss(b, a.const_f32(1.0))
        a.vdivps(b, b, x)
    else:
        move(a, b, x)
    first = True
    while n:
        if n & 1:
            if first:
                move(a, dst, b)
                first = False
            else:
                a.vmulps(dst, dst, b)
        n >>= 1
        if n:
            a.vmulps(b, b, b)


@kernel(vecs=2)
def emit_power_static_small(a: Assembler, dst: VecReg, x: VecReg, aux: Aux, power: float = 1.0) -> None:
    """x**power for integer and half-integer powers up to 64 in magnitude (see :func:`power_static_function`)."""
    b, r = aux.vecs[:2]
    n = int(abs(power))
    if power == 0.0:  # x**0 = 1 for every x, NaN included
        a.vbroadcastss(dst, a.const_f32(1.0))
    elif power == int(power):
        _power_squaring(a, dst, x, b, n, power < 0)
    elif power == 0.5:  # numpy's own fast path: sqrt, so (-inf)**0.5 is NaN there
        a.vsqrtps(dst, x)
    else:  # n + 1/2: |x|**n sqrt(x): NaN for finite x < 0; (-inf)**p is +inf or +0 (C pow)
        a.vsqrtps(r, x)
        a.vfixupimmps(r, x, i32(a, fixup_table(ninf=PINF)), 0)
        if n:
            a.vandps(dst, x, i32(a, ABS_MASK))
            _power_squaring(a, dst, dst, b, n, False)
            a.vmulps(dst, dst, r)
        else:
            move(a, dst, r)
        if power < 0:
            a.vbroadcastss(b, a.const_f32(1.0))
            a.vdivps(dst, b, dst)


@kernel(vecs=4, masks=1)
def emit_power_static(a: Assembler, dst: VecReg, x: VecReg, aux: Aux, power: float = 1.0) -> None:
    """x**power for a constant power: integers up to 64 by repeated squaring (of 1/x for negative powers),
    halves up to 64 as x**n sqrt(x) (``vsqrtps``), others as e**(power log x) (NaN for x < 0 when the power is not an integer,
    with the sign of x for odd integers)."""
    if power_static_needs(power)[1] == 0:
        emit_power_static_small(a, dst, x, Aux(aux.vecs[:2]), power=power)
        return
    t, s = aux.vecs[2], aux.vecs[3]
    a.vandps(t, x, i32(a, ABS_MASK))
    if power == int(power):
        a.vandps(s, x, i32(a, SIGN_MASK if int(power) % 2 else 0))
    else:  # finite x < 0: NaN; (-inf)**p is +inf or +0 as for +inf (C pow)
        k = aux.masks[0]
        a.vxorps(s, s, s)
        a.vcmpps(k, x, f32(a, 0.0), cmp("lt_oq"))
        a.vcmpps(k.mask(k), x, f32(a, -math.inf), cmp("neq_oq"))
        a.vbroadcastss(s.mask(k), a.const_f32(math.nan))
    emit_log(a, t, t, Aux(aux.vecs[:2], aux.masks[:1]))
    a.vmulps(t, t, f32(a, power))
    emit_exp(a, dst, t, Aux(aux.vecs[:2]))
    a.vorps(dst, dst, s)


@kernel(vecs=5, masks=2)
def emit_power_f32(a: Assembler, dst: VecReg, x: VecReg, y: VecReg, aux: Aux) -> None:
    """x**y lane by lane (numpy ``power`` on f32): e**(y log|x|), negative for x < 0 (or -0) and odd integer
    y, NaN for finite x < 0 and non-integer y, 1 where y == 0 or x == 1 or (|x| == 1 and |y| == inf)."""
    v0, v1, t, s, w = aux.vecs[:5]
    k, k2 = aux.masks[:2]
    absm = i32(a, ABS_MASK)
    # s = sign bit of the result: x's sign where y is an odd integer
    a.vmulps(w, y, f32(a, 0.5))
    a.vrndscaleps(t, w, RND_TRUNC)
    a.vcmpps(k, t, w, cmp("neq_oq"))  # y/2 not an integer ...
    a.vrndscaleps(t, y, RND_TRUNC)
    a.vcmpps(k2, t, y, cmp("eq_oq"))  # ... and y an integer: odd
    a.kandw(k, k, k2)
    a.vandps(s.mask(k).z, x, i32(a, SIGN_MASK))
    # NaN where x is finite, x < 0 and y is not an integer
    a.vandps(w, x, absm)
    a.vcmpps(k, w, f32(a, math.inf), cmp("lt_oq"))
    a.vcmpps(k.mask(k), x, f32(a, 0.0), cmp("lt_oq"))
    a.kandnw(k, k2, k)
    a.vorps(s.mask(k), s, i32(a, 0x7FC0_0000))
    # the magnitude
    emit_log(a, t, w, Aux((v0, v1), (k2,)))
    a.vmulps(t, t, y)
    # 1 where y == 0, x == 1, or |x| == 1 and |y| == inf (checked before dst, which may be x or y, is written)
    a.vcmpps(k, y, f32(a, 0.0), cmp("eq_oq"))
    a.vcmpps(k2, x, f32(a, 1.0), cmp("eq_oq"))
    a.korw(k, k, k2)
    a.vcmpps(k2, w, f32(a, 1.0), cmp("eq_oq"))
    a.vandps(w, y, absm)
    a.vcmpps(k2.mask(k2), w, f32(a, math.inf), cmp("eq_oq"))
    a.korw(k, k, k2)
    emit_exp(a, dst, t, Aux((v0, v1)))
    a.vorps(dst, dst, s)
    a.vbroadcastss(dst.mask(k), a.const_f32(1.0))

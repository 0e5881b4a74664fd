"""Transcendental and other floating-point functions as pure emitter functions over f32 lanes.

Each ``emit_<fn>(a, dst, src, aux)`` appends to the Assembler ``a`` the code that computes ``dst = fn(src)`` on
16 f32 lanes. ``dst`` may be ``src``; the code writes only ``dst`` and the aux registers it declares with
:func:`~snippets_x86_64.emitters.base.kernel`. Range reduction and polynomials, in the style of Cephes and
oneDNN's injectors, with AVX-512's ``vscalefps`` (2**n without integer tricks, exact over- and underflow),
``vgetexpps``/``vgetmantps`` (exponent and mantissa, denormals included), ``vrndscaleps`` (rounding) and
``vfixupimmps`` (special inputs: NaN, +-inf, zero) doing what scalar code does with branches.

The measured accuracy of each against numpy float64 is in docs/x86_64_math.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from snippets_x86_64.asm import CMP_PREDICATES, Assembler, VecReg
from snippets_x86_64.emitters.base import (
    DEFAULT_NAN,
    INPUT,
    MINUS_ONE,
    NINF,
    PINF,
    PLUS_ONE,
    QNAN,
    Aux,
    f32,
    fixup_table,
    i32,
    kernel,
)

# vrndscaleps immediates: rounding mode in bits 1:0, bit 3 suppresses the precision exception
RND_NEAREST, RND_FLOOR, RND_CEIL, RND_TRUNC = 0x08, 0x09, 0x0A, 0x0B

LOG2E = 1.4426950408889634
# ln2 split so that n * LN2_HI is exact for |n| < 2**12 (LN2_HI has 12 significant bits), both parts positive
# so that -inf * ln2 stays -inf in log
LN2_HI = 0.693145751953125
LN2_LO = 1.428606765330187e-06

# Cephes expf: exp(r) = 1 + r + r**2 * P(r) on |r| <= ln2/2
EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
# Cephes logf: log(1 + f) = f - f**2/2 + f**3 * P(f) on sqrt(1/2) - 1 <= f < sqrt(2) - 1
LOG_P = (
    7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
    -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1,
)  # fmt: skip

ABS_MASK = 0x7FFF_FFFF
SIGN_MASK = 0x8000_0000


def cmp(name: str) -> int:
    """The ``vcmpps`` immediate of a predicate name (``"lt_oq"``...)."""
    return CMP_PREDICATES[name]


def horner(a: Assembler, dst: VecReg, x: VecReg, coeffs: tuple[float, ...]) -> None:
    """``dst = ((c0 * x + c1) * x + ...) + cN`` (``dst`` must not be ``x``)."""
    a.vbroadcastss(dst, a.const_f32(coeffs[0]))
    for c in coeffs[1:]:
        a.vfmadd213ps(dst, x, f32(a, c))


def horner2(a: Assembler, *chains: tuple[VecReg, VecReg, tuple[float, ...]]) -> None:
    """:func:`horner` on independent ``(dst, x, coeffs)`` chains, their FMAs interleaved (longest chain first)
    so that one chain's latency hides behind the others'; each chain's last steps align with the ends."""
    longest = max(len(c[2]) for c in chains)
    for dst, _, coeffs in chains:
        a.vbroadcastss(dst, a.const_f32(coeffs[0]))
    for step in range(1, longest):
        for dst, x, coeffs in chains:
            j = step - (longest - len(coeffs))
            if j >= 1:
                a.vfmadd213ps(dst, x, f32(a, coeffs[j]))


# --- exp and log ------------------------------------------------------------------------------------------

# e**r = 1 + r + r**2 P(r) on |r| <= ln2/2 with a degree-4 P (a minimax fit of the relative error, f32
# coefficients: 3.9e-9, 0.06 f32 ulp): one FMA less than Cephes' degree-5 P, for exp, sigmoid and tanh, whose
# chains keep the FMA pipes busy
EXP6_P = (0.0013814610429108143, 0.008368710055947304, 0.04166838899254799, 0.1666652113199234, 0.4999999403953552)


def _exp_poly(a: Assembler, dst: VecReg, r: VecReg) -> None:
    """``dst = e**r`` for |r| <= ln2/2 (``dst`` must not be ``r``): 1 + r (1 + r P(r)), six FMAs."""
    horner(a, dst, r, EXP6_P)
    a.vfmadd213ps(dst, r, f32(a, 1.0))
    a.vfmadd213ps(dst, r, f32(a, 1.0))


@kernel(vecs=2)
def emit_exp(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """``e**x``: n = round(x log2 e), r = x - n ln2 (two FMAs), e**r by EXP6's degree-6 polynomial, then
    ``vscalefps`` multiplies by 2**n, over- and underflowing exactly.

    The clamps to [-104, 89] (beyond, exp is 0 or inf in f32: e**-104 rounds to 0, e**89 overflows) take the
    constant from a register as their *first* operand, so a NaN input (the second) passes through to the result
    with no ``vfixupimmps``; +-inf become the bounds, whose results are inf and 0. 13 operations on the FP pipes
    (Softmax's exp is one of them per element) where Cephes' polynomial and a fixup took 15."""
    r, n = aux.vecs[:2]
    a.vbroadcastss(n, a.const_f32(-104.0))
    a.vmaxps(r, n, src)
    a.vbroadcastss(n, a.const_f32(89.0))
    a.vminps(r, n, r)
    a.vmulps(n, r, f32(a, LOG2E))
    a.vrndscaleps(n, n, RND_NEAREST)
    a.vfnmadd231ps(r, n, f32(a, LN2_HI))
    a.vfnmadd231ps(r, n, f32(a, LN2_LO))
    _exp_poly(a, dst, r)  # src is dead from here on: dst may be src
    a.vscalefps(dst, dst, n)


@kernel(vecs=2, masks=1)
def emit_log(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """Natural logarithm: x = m 2**e with m in [sqrt(1/2), sqrt(2)) (``vgetmantps``/``vgetexpps``, denormals
    included), log x = e ln2 + log1p(m - 1) by a polynomial. log(+-0) = -inf, log(x < 0) = NaN."""
    m, e = aux.vecs[:2]
    k = aux.masks[0]
    a.vgetmantps(m, src, 0)  # [1, 2)
    a.vgetexpps(e, src)
    a.vcmpps(k, m, f32(a, math.sqrt(2.0)), cmp("gt_oq"))
    a.vmulps(m.mask(k), m, f32(a, 0.5))
    a.vaddps(e.mask(k), e, f32(a, 1.0))
    a.vsubps(m, m, f32(a, 1.0))
    # special inputs go through e: -inf * ln2 + finite = -inf, NaN stays NaN
    table = fixup_table(qnan=QNAN, snan=QNAN, zero=NINF, ninf=DEFAULT_NAN, neg=DEFAULT_NAN, pinf=PINF)
    a.vfixupimmps(e, src, i32(a, table), 0)
    horner(a, dst, m, LOG_P)
    a.vfmadd213ps(dst, m, f32(a, -0.5))
    a.vmulps(dst, dst, m)
    a.vfmadd213ps(dst, m, m)  # f + f**2 (f P(f) - 1/2)
    a.vfmadd231ps(dst, e, f32(a, LN2_LO))
    a.vfmadd231ps(dst, e, f32(a, LN2_HI))


@kernel(vecs=3, masks=1)
def emit_expm1(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """``e**x - 1`` without the cancellation near 0: on |x| < ln2/2 the exp polynomial without its 1,
    elsewhere exp(x) - 1."""
    small = aux.vecs[2]
    k = aux.masks[0]
    horner(a, small, src, EXP_P)
    a.vmulps(small, small, src)
    a.vfmadd213ps(small, src, src)  # x + x**2 P(x)
    a.vandps(aux.vecs[0], src, i32(a, ABS_MASK))
    a.vcmpps(k, aux.vecs[0], f32(a, 0.5 * math.log(2.0)), cmp("lt_oq"))
    emit_exp(a, dst, src, Aux(aux.vecs[:2]))
    a.vsubps(dst, dst, f32(a, 1.0))
    a.vmovaps(dst.mask(k), small)


@kernel(vecs=3, masks=1)
def emit_sigmoid(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """``1 / (1 + e**-x)`` through e = exp(-|x|) <= 1, so nothing overflows: 1/(1+e) for x >= 0, e/(1+e) else.

    exp(-|x|) needs no upper clamp and no special-value fixup: -|x| is clamped below at -104 with the
    constant as the *first* ``vmaxps`` operand, so a NaN input (the second operand) passes through to the
    result, and -inf becomes e**-104, which rounds to 0 like e**-inf."""
    y, n, p = aux.vecs[:3]
    k = aux.masks[0]
    a.vcmpps(k, src, f32(a, 0.0), cmp("lt_oq"))
    a.vbroadcastss(n, a.const_f32(-104.0))
    a.vorps(y, src, i32(a, SIGN_MASK))  # -|x|
    a.vmaxps(y, n, y)
    a.vmulps(n, y, f32(a, LOG2E))
    a.vrndscaleps(n, n, RND_NEAREST)
    a.vfnmadd231ps(y, n, f32(a, LN2_HI))
    a.vfnmadd231ps(y, n, f32(a, LN2_LO))  # r = -|x| - n ln2
    _exp_poly(a, p, y)  # src is dead from here on: dst may be src
    a.vscalefps(p, p, n)  # e = e**r 2**n
    a.vaddps(y, p, f32(a, 1.0))
    a.vbroadcastss(dst, a.const_f32(1.0))
    a.vmovaps(dst.mask(k), p)
    a.vdivps(dst, dst, y)


# Cephes tanhf: tanh(x) = x + x**3 P(x**2) on |x| < 0.625
TANH_P = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1)
TANH_SPLIT = 0.625
#: tanh(x) rounds to 1 in f32 for x > 9.01; the exp branch clamps |x| there
TANH_CLAMP = 10.0
LN2 = math.log(2.0)


@kernel(vecs=5, masks=1)
def emit_tanh(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """Hyperbolic tangent, computed negated as t = -tanh(|x|) and given the sign of x by one ``vpternlogd``:
    -(|x| + |x|**3 P(x**2)) on |x| < 0.625, else 2e/(e + 1) - 1 with e = exp(-2|x|) <= 0.29.

    The exp branch clamps |x| at 10 with the constant as the first ``vminps`` operand (a NaN passes through)
    and reduces -2|x| by n ln2 in one FMA: n <= 29 there, so ln2's f32 rounding moves e by < 6e-8 relative,
    which 2e/(e + 1) - 1 shrinks further."""
    ax, y, n, p, s = aux.vecs[:5]
    k = aux.masks[0]
    a.vandps(ax, src, i32(a, ABS_MASK))
    a.vcmpps(k, ax, f32(a, TANH_SPLIT), cmp("lt_oq"))
    a.vbroadcastss(y, a.const_f32(TANH_CLAMP))
    a.vminps(y, y, ax)
    a.vmulps(n, y, f32(a, -2.0 * LOG2E))
    a.vrndscaleps(n, n, RND_NEAREST)
    a.vaddps(y, y, y)  # an add, not a multiply: the FMA pipes are the busy ones
    a.vfnmsub231ps(y, n, f32(a, LN2))  # r = -2|x| - n ln2
    _exp_poly(a, p, y)
    a.vscalefps(p, p, n)  # e
    # -tanh|x| = (e - 1)/(e + 1) = 2e/(e + 1) - 1: the FMA rounds once after the product, whose error
    # (<= 0.45 of the result, e <= 0.29) is what the division leaves
    a.vaddps(y, p, f32(a, 1.0))
    a.vbroadcastss(n, a.const_f32(2.0))
    a.vdivps(n, n, y)
    a.vfmsub213ps(p, n, f32(a, 1.0))
    # |x| < 0.625: -(|x| + |x| z P(z)), z = x**2
    a.vmulps(y, ax, ax)
    horner(a, s, y, TANH_P)
    a.vmulps(s, s, y)
    a.vfnmsub213ps(s, ax, ax)
    # result = t with its sign bit flipped where x >= 0: t ^ (~x & SIGN), one vpternlogd (A, B, C) -> imm
    if dst == src:
        a.vmovaps(p.mask(k), s)
        a.vpternlogd(dst, p, i32(a, SIGN_MASK), _TERNLOG_B_XOR_NOTA_AND_C)
    else:
        a.vblendmps(dst.mask(k), p, s)
        a.vpternlogd(dst, src, i32(a, SIGN_MASK), _TERNLOG_A_XOR_NOTB_AND_C)


def _ternlog_imm(f: Callable[[int, int, int], int]) -> int:
    """The ``vpternlogd`` immediate of a boolean function of the operands (A = dst, B, C)."""
    return sum(f((i >> 2) & 1, (i >> 1) & 1, i & 1) << i for i in range(8))


_TERNLOG_B_XOR_NOTA_AND_C = _ternlog_imm(lambda x, b, c: b ^ ((1 - x) & c))
_TERNLOG_A_XOR_NOTB_AND_C = _ternlog_imm(lambda x, b, c: x ^ ((1 - b) & c))


# erf(x) = x P(x**2) on |x| < 1/2 (least-squares fit of the relative error, f32 coefficients)
ERF_SMALL_P = (
    0.004717317409813404, -0.026755178347229958, 0.11282754689455032, -0.3761260211467743, 1.1283791065216064,
)  # fmt: skip
ERF_SPLIT = 0.5
# erfc(x) = e**-x**2 t Q(t), t = 1 / (1 + x/2), on 1/2 <= x <= 10.5 (beyond, erfc is 0 in f32)
ERFC_T = 0.5
ERFC_Q = (
    -0.05812562629580498, 0.28496086597442627, -0.49465957283973694, 0.2911313772201538, -0.03721051663160324,
    0.20738160610198975, 0.24193912744522095, 0.2825259268283844, 0.2820785641670227,
)  # fmt: skip
ERFC_MAX = 10.5


def _erf_pieces(a: Assembler, dst: VecReg, src: VecReg, aux: Aux, scale: float) -> None:
    """For u = scale * |x|: dst = erfc(u) by the tail formula, vecs[6] = erf(u) by the small-|u| polynomial,
    mask 0 = (u < 1/2); vecs[2] = |x| (clamped), vecs[3] = the sign bit of x. u**2 is taken as x**2 scale**2
    in two parts (hi + lo, FMA), so e**-u**2 keeps its accuracy for large u."""
    v0, v1, ax, sign, zhi, zlo, small, e = aux.vecs[:8]
    k = aux.masks[0]
    a.vandps(ax, src, i32(a, ABS_MASK))
    a.vandps(sign, src, i32(a, SIGN_MASK))
    a.vbroadcastss(zhi, a.const_f32(ERFC_MAX / scale))
    a.vminps(ax, zhi, ax)  # the NaN operand last: vminps returns it
    sq = scale * scale  # 1 or 1/2: exact
    a.vmulps(zhi, ax, ax)
    a.vmovaps(zlo, zhi)
    a.vfmsub231ps(zlo, ax, ax)  # x*x - hi, exactly
    if sq != 1.0:
        a.vmulps(zhi, zhi, f32(a, sq))
        a.vmulps(zlo, zlo, f32(a, sq))
    a.vcmpps(k, zhi, f32(a, ERF_SPLIT * ERF_SPLIT), cmp("lt_oq"))
    # tail: t = 1 / (1 + u/2)
    a.vmulps(small, ax, f32(a, ERFC_T * scale))
    a.vaddps(small, small, f32(a, 1.0))
    a.vbroadcastss(e, a.const_f32(1.0))
    a.vdivps(small, e, small)
    horner(a, dst, small, ERFC_Q)
    a.vmulps(dst, dst, small)
    a.vxorps(e, zhi, i32(a, SIGN_MASK))
    emit_exp(a, e, e, Aux((v0, v1)))
    a.vfnmadd231ps(e, e, zlo)  # e**-(hi+lo) = e**-hi (1 - lo)
    a.vmulps(dst, dst, e)
    # small: erf(u) = u P(u**2)
    horner(a, small, zhi, ERF_SMALL_P)
    a.vmulps(small, small, ax)
    if scale != 1.0:
        a.vmulps(small, small, f32(a, scale))


@kernel(vecs=8, masks=1)
def emit_erf(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """The error function: x P(x**2) for |x| < 1/2, else 1 - erfc(|x|) with erfc = e**-x**2 t Q(t); odd."""
    _erf_pieces(a, dst, src, aux, 1.0)
    a.vsubps(dst, dst, f32(a, 1.0))
    a.vxorps(dst, dst, i32(a, SIGN_MASK))
    a.vmovaps(dst.mask(aux.masks[0]), aux.vecs[6])
    a.vorps(dst, dst, aux.vecs[3])


# Gelu (erf) in one formula for every x, without erf's small-|x| branch (gelu has no cancellation there): with
# a = |x|, V = a/2 erfc(a/sqrt 2) = a/2 t Q(t) e**(-a**2/2), t = 1/(1 + GELU_P a), and gelu(x) = max(x, 0) - V,
# i.e. x - V for x >= 0 and -V below. Q: a fit of the relative error on 0 <= a <= 13.3 (below -13.3 the results are
# denormal), its f32 coefficients rounded one at a time from the leading one with the rest refitted (0.68 ulp).
# p and the degree were picked by the error of t Q(t) evaluated in f32 from a rounded t: near x = 0 a rounding of
# t moves the result 0.8/p times as much, so a larger p (with a degree-9 Q) beat p = 0.26 with degree 8.
GELU_P = 0.5299999713897705
GELU_Q = (
    -0.1282617300748825, 0.778942346572876, -1.9849251508712769, 2.636828660964966, -1.7348997592926025,
    0.30991509556770325, -0.04053309187293053, 0.3181789219379425, 0.421843558549881, 0.4229111671447754,
)  # fmt: skip
#: e**(-a**2/2) is below the smallest denormal beyond 14.85: the clamp keeps a**2 finite and |n| <= 160
GELU_A_MAX = 14.85
# the code computes t/2 = 1/(2 + 2p a) (2 serves both this sum and the Newton step), so Q's coefficient of
# t**j is scaled by 2**j; e**(r/2) for |r| <= ln2 is EXP6's polynomial with its coefficient of r**k scaled by 2**-k
_GELU_QH = tuple(c * 2.0 ** (len(GELU_Q) - 1 - j) for j, c in enumerate(GELU_Q))
_EXP6_HALF = tuple(c * 2.0 ** -(len(EXP6_P) + 1 - j) for j, c in enumerate((*EXP6_P, 1.0, 1.0)))


#: ``vrangeps`` immediate: the operand of smaller magnitude (bits 1:0 = 10), its sign cleared (bits 3:2 = 10)
RANGE_MIN_ABS_CLEAR_SIGN = 0b1010


@kernel(vecs=6)
def emit_gelu_erf(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """``x/2 (1 + erf(x/sqrt 2))`` as max(x, 0) - |x|/2 erfc(|x|/sqrt 2), with erfc = t Q(t) e**(-x**2/2): one
    exp, one reciprocal (``vrcp14ps`` and a Newton step), no division and no branch per range; 33 vector
    operations on the FP pipes where the erf-based form took 52 and a ``vdivps``. Relatively accurate everywhere,
    the negative tail included. NaN stays NaN, -inf gives NaN like the formula (-inf * 0)."""
    ax, n, r, q, t, s = aux.vecs[:6]
    a.vrangeps(ax, src, f32(a, GELU_A_MAX), RANGE_MIN_ABS_CLEAR_SIGN)  # min(|x|, 14.85); NaN stays
    # t/2 = 1/(2 + 2p a): vrcp14ps (14 bits) and one Newton step t0 (2 - s t0); first, as the longest chain
    a.vbroadcastss(s, a.const_f32(2.0))
    a.vfmadd231ps(s, ax, f32(a, 2.0 * GELU_P))
    a.vrcp14ps(t, s)
    a.vfnmadd213ps(s, t, f32(a, 2.0))
    a.vmulps(t, t, s)
    # e**(-x**2/2) = 2**n e**(r/2), r = -x**2 - 2n ln2 in about [-ln2, ln2]: x**2 never rounded, the FMA takes
    # -(a a) + (-2n ln2_hi) (an exact product: |n| <= 160, ln2_hi has 12 bits) with one rounding
    a.vmulps(n, ax, ax)
    a.vmulps(n, n, f32(a, -0.5 * LOG2E))
    a.vrndscaleps(n, n, RND_NEAREST)
    a.vmulps(r, n, f32(a, -2.0 * LN2_HI))
    a.vfnmadd231ps(r, ax, ax)
    a.vfnmadd231ps(r, n, f32(a, 2.0 * LN2_LO))
    horner2(a, (s, t, _GELU_QH), (q, r, _EXP6_HALF))
    a.vmulps(t, t, ax)  # a t/2, off the chains' path
    a.vmulps(s, s, t)  # a/2 t Q(t)
    a.vmulps(q, q, s)
    a.vscalefps(q, q, n)  # V = a/2 erfc(a/sqrt 2), scaled last: one rounding where it is denormal
    # NaN and -inf into V: max(x, 0) (0 for a NaN: the constant is the second operand) - NaN = NaN
    a.vfixupimmps(q, src, i32(a, fixup_table(qnan=QNAN, snan=QNAN, ninf=DEFAULT_NAN)), 0)
    a.vmaxps(dst, src, f32(a, 0.0))
    a.vsubps(dst, dst, q)


@kernel(vecs=5, masks=1)
def emit_gelu_tanh(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """``x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))`` as ``x sigmoid(2 sqrt(2/pi) (x + 0.044715 x**3))``
    (the same function; sigmoid has no cancellation for x < 0)."""
    x, u = aux.vecs[3:5]
    c = 2.0 * math.sqrt(2.0 / math.pi)
    a.vmovaps(x, src)
    a.vmulps(u, src, src)
    a.vmulps(u, u, f32(a, 0.044715 * c))
    a.vaddps(u, u, f32(a, c))
    a.vmulps(u, u, x)
    emit_sigmoid(a, u, u, Aux(aux.vecs[:3], aux.masks[:1]))
    a.vmulps(dst, u, x)


@kernel(vecs=4, masks=1)
def emit_elu(a: Assembler, dst: VecReg, src: VecReg, aux: Aux, alpha: float = 1.0) -> None:
    """``x`` for x > 0, ``alpha (e**x - 1)`` otherwise (expm1, accurate near 0)."""
    e = aux.vecs[3]
    k = aux.masks[0]
    emit_expm1(a, e, src, Aux(aux.vecs[:3], aux.masks[:1]))
    if alpha != 1.0:
        a.vmulps(e, e, f32(a, alpha))
    a.vcmpps(k, src, f32(a, 0.0), cmp("gt_oq"))
    a.vblendmps(dst.mask(k), e, src)


@kernel(vecs=4, masks=1)
def emit_selu(a: Assembler, dst: VecReg, src: VecReg, aux: Aux, alpha: float = 1.0, lambda_: float = 1.0) -> None:
    """``lambda (x for x > 0, alpha (e**x - 1) otherwise)``."""
    emit_elu(a, dst, src, aux, alpha=alpha)
    a.vmulps(dst, dst, f32(a, lambda_))


@kernel(vecs=4, masks=1)
def emit_swish(a: Assembler, dst: VecReg, src: VecReg, aux: Aux, beta: float = 1.0) -> None:
    """``x sigmoid(beta x)`` with a constant beta."""
    x = aux.vecs[3]
    a.vmovaps(x, src)
    if beta != 1.0:
        a.vmulps(dst, src, f32(a, beta))
        emit_sigmoid(a, dst, dst, Aux(aux.vecs[:3], aux.masks[:1]))
    else:
        emit_sigmoid(a, dst, src, Aux(aux.vecs[:3], aux.masks[:1]))
    a.vmulps(dst, dst, x)


@kernel(vecs=4, masks=1)
def emit_swish_beta(a: Assembler, dst: VecReg, src: VecReg, beta: VecReg, aux: Aux) -> None:
    """``x sigmoid(beta x)`` with beta in a register (Swish with a second input)."""
    x = aux.vecs[3]
    a.vmovaps(x, src)
    a.vmulps(dst, src, beta)
    emit_sigmoid(a, dst, dst, Aux(aux.vecs[:3], aux.masks[:1]))
    a.vmulps(dst, dst, x)


@kernel(vecs=6, masks=1)
def emit_softplus(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """``log(1 + e**x)`` = max(x, 0) + log1p(e**-|x|); log1p(y) = log(u) y / (u - 1) with u = 1 + y (exact
    where u - 1 == y is not, y where u == 1)."""
    m, y, u, d = aux.vecs[2:6]
    k = aux.masks[0]
    a.vmaxps(m, src, f32(a, 0.0))
    a.vorps(y, src, i32(a, SIGN_MASK))
    emit_exp(a, y, y, Aux(aux.vecs[:2]))
    a.vaddps(u, y, f32(a, 1.0))
    a.vsubps(d, u, f32(a, 1.0))
    emit_log(a, u, u, Aux(aux.vecs[:2], aux.masks[:1]))
    a.vmulps(dst, u, y)
    a.vdivps(dst, dst, d)
    a.vcmpps(k, d, f32(a, 0.0), cmp("eq_oq"))
    a.vmovaps(dst.mask(k), y)
    a.vaddps(dst, dst, m)


@kernel(vecs=5)
def emit_mish(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """``x tanh(softplus(x))`` = x n / (n + 2) with n = e**x (e**x + 2) (no cancellation); e**x is taken at
    min(x, 20), beyond which the factor is 1."""
    x, e, n = aux.vecs[2:5]
    a.vmovaps(x, src)
    a.vminps(e, src, f32(a, 20.0))
    emit_exp(a, e, e, Aux(aux.vecs[:2]))
    a.vaddps(n, e, f32(a, 2.0))
    a.vmulps(n, n, e)
    a.vaddps(e, n, f32(a, 2.0))
    a.vdivps(dst, n, e)
    a.vmulps(dst, dst, x)


# --- sin and cos ----------------------------------------------------------------------------------------------

# pi/2 in three parts (Cephes DP1..3 doubled): k * PIO2_1 and k * PIO2_2 are exact for the k this reduction serves
PIO2_1, PIO2_2, PIO2_3 = 1.5703125, 4.837512969970703125e-4, 7.54978995489188216e-8
SIN_P = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)
COS_P = (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2)


def _sincos(a: Assembler, dst: VecReg, src: VecReg, aux: Aux, quadrant_shift: int) -> None:
    kq, r, q, s = aux.vecs[:4]
    k = aux.masks[0]
    a.vmulps(kq, src, f32(a, 2.0 / math.pi))
    a.vrndscaleps(kq, kq, RND_NEAREST)
    a.vmovaps(r, src)
    a.vfnmadd231ps(r, kq, f32(a, PIO2_1))
    a.vfnmadd231ps(r, kq, f32(a, PIO2_2))
    a.vfnmadd231ps(r, kq, f32(a, PIO2_3))
    a.vfixupimmps(r, src, i32(a, fixup_table(qnan=QNAN, snan=QNAN, ninf=DEFAULT_NAN, pinf=DEFAULT_NAN)), 0)
    a.vcvtps2dq(q, kq)
    if quadrant_shift:
        a.vpaddd(q, q, i32(a, quadrant_shift))
    z = kq
    a.vmulps(z, r, r)
    horner(a, s, z, SIN_P)
    a.vmulps(s, s, z)
    a.vfmadd213ps(s, r, r)  # sin r
    horner(a, dst, z, COS_P)
    a.vfmadd213ps(dst, z, f32(a, -0.5))
    a.vfmadd213ps(dst, z, f32(a, 1.0))  # cos r
    a.vptestnmd(k, q, i32(a, 1))
    a.vmovaps(dst.mask(k), s)  # even quadrant: sin r, odd: cos r
    a.vpslld(q, q, 30)
    a.vpandd(q, q, i32(a, SIGN_MASK))
    a.vpxord(dst, dst, q)  # quadrants 2 and 3 are negated
    # beyond |x| ~ 1e5 the reduction has lost its precision; keep such results in [-1, 1] (NaN stays NaN)
    a.vbroadcastss(s, a.const_f32(-1.0))
    a.vmaxps(dst, s, dst)
    a.vbroadcastss(s, a.const_f32(1.0))
    a.vminps(dst, s, dst)


@kernel(vecs=4, masks=1)
def emit_sin(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """Sine: x = k pi/2 + r (three-part Cody-Waite with FMA), then +-sin r or +-cos r by the quadrant k mod 4."""
    _sincos(a, dst, src, aux, 0)


@kernel(vecs=4, masks=1)
def emit_cos(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """Cosine: sin(x + pi/2), the quadrant moved by one."""
    _sincos(a, dst, src, aux, 1)


# --- rounding, sign and piecewise-linear functions -----------------------------------------------------------


@kernel()
def emit_floor(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """Largest integer <= x (``vrndscaleps``, round down)."""
    a.vrndscaleps(dst, src, RND_FLOOR)


@kernel()
def emit_ceil(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """Smallest integer >= x (``vrndscaleps``, round up)."""
    a.vrndscaleps(dst, src, RND_CEIL)


@kernel()
def emit_trunc(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """x rounded toward zero."""
    a.vrndscaleps(dst, src, RND_TRUNC)


@kernel()
def emit_round_half_to_even(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """x rounded to the nearest integer, ties to even."""
    a.vrndscaleps(dst, src, RND_NEAREST)


@kernel(vecs=2, masks=1)
def emit_round_half_away(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """x rounded to the nearest integer, ties away from zero: t = trunc(|x|), +1 where |x| - t >= 1/2
    (``trunc(|x| + 0.5)`` would round 0.49999997 up to 1), then the sign of x."""
    sign, t = aux.vecs[:2]
    k = aux.masks[0]
    a.vandps(sign, src, i32(a, SIGN_MASK))
    a.vandps(dst, src, i32(a, ABS_MASK))
    a.vrndscaleps(t, dst, RND_TRUNC)
    a.vsubps(dst, dst, t)
    a.vcmpps(k, dst, f32(a, 0.5), cmp("ge_oq"))
    a.vaddps(t.mask(k), t, f32(a, 1.0))
    a.vorps(dst, t, sign)


@kernel()
def emit_sign(a: Assembler, dst: VecReg, src: VecReg, aux: Aux) -> None:
    """-1, +-0 or 1 (NaN stays NaN), one ``vfixupimmps`` on the class of x."""
    table = fixup_table(
        qnan=QNAN, snan=QNAN, zero=INPUT, one=PLUS_ONE, ninf=MINUS_ONE, pinf=PLUS_ONE, neg=MINUS_ONE, pos=PLUS_ONE
    )
    a.vfixupimmps(dst, src, i32(a, table), 0)


def emit_divide(a: Assembler, x: VecReg, t: VecReg, c: float, bounded: bool = True) -> bool:
    """``x = x / c`` correctly rounded (as ``vdivps``, which QuantizeLinear uses) without a divide: ``q = x * r``
    with ``r = RN(1 / c)``, the exact residual ``x - q c`` (an FMA), ``q + residual * r`` (Markstein's correction:
    with ``r`` correctly rounded and ``q`` within an ulp, the result is the correctly rounded quotient; checked
    against ``vdivps`` on every tie of 95 scales and their neighbours in test_int8_mha.py). QuantizeLinear's
    requantization (``x / y_scale``) through it rounds as onnxruntime's. Three multiply-adds pipeline where a
    divide holds the divider ~5x as long. ``t`` is clobbered. Where ``x`` may be infinite or huge (a mask of -inf
    or float_min added, ``bounded`` False), ``q`` overflows to +-inf and the residual is NaN: a ``vfixupimmps``
    then takes ``q`` (the quotient vdivps gives). False (nothing emitted) for a ``c`` whose reciprocal is not a
    normal float32 (the caller divides)."""
    c32 = np.float32(c)
    with np.errstate(all="ignore"):
        r = np.float32(1.0) / c32
    tiny = np.finfo(np.float32).tiny
    if c32 == 0 or not np.isfinite(c32) or not np.isfinite(r) or abs(r) < tiny or abs(c32) < tiny:
        return False
    emit_divide_by(a, x, t, f32(a, float(r)), f32(a, float(c32)))
    if not bounded:  # q infinite: the residual was NaN, the quotient is q
        a.vfixupimmps(x, t, i32(a, fixup_table(ninf=INPUT, pinf=INPUT)), 0)
    return True


def emit_divide_by(a: Assembler, x: VecReg, t: VecReg, r: Any, c: Any) -> None:
    """``emit_divide``'s quotient for a divisor that is data (a kernel keyed on its shape reads the scale from a
    parameter block): ``r`` and ``c`` are operands (constants or broadcast loads) holding ``RN(1 / c)`` (computed
    in float32) and the float32 ``c``, whose reciprocal and itself are normal floats; ``x`` finite. ``t`` is
    clobbered."""
    a.vmulps(t, x, r)
    a.vfnmadd231ps(x, t, c)  # x - q c, exact
    a.vfmadd132ps(x, t, r)  # residual * r + q

"""The int8 VNNI Brgemm micro-kernel and its B repack, against numpy int64 (exact) and float64 arithmetic.

Every array the kernel reads or writes sits against a PROT_NONE page (after it, or before it), so a load or
store past any edge (the K tail of A's last row, the N tail of C and of the post-op vectors) faults.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from snippets_core.errors import CodegenError, InputError
from snippets_x86_64.brgemm_copy_b_int8 import K_GROUP, N_BLOCK, repack_b_int8
from snippets_x86_64.brgemm_int8 import Int8Geometry, Int8Output, post_op_vectors, run_int8
from snippets_x86_64.cpu import cpu_features
from snippets_x86_64.guarded import guarded_array, guarded_copy

pytestmark = [
    pytest.mark.avx512,
    pytest.mark.skipif("avx512_vnni" not in cpu_features(), reason="CPU lacks AVX512_VNNI (vpdpbusd)"),
]

RNG = np.random.default_rng(2026)
# (M, N, K): edges (1s, one full block, K % 4 = 1..3, N % 16 != 0, N over one 64-column block), then random ones
EDGES = [(1, 1, 1), (1, 16, 4), (6, 64, 8), (7, 65, 3), (40, 100, 300), (29, 17, 2), (13, 48, 299), (2, 128, 7)]
SHAPES = EDGES + [tuple(int(v) for v in RNG.integers(1, (41, 101, 301))) for _ in range(24)]


def _a(m: int, k: int, lda: int, signed: bool, at: str) -> np.ndarray:
    lo, hi = (-128, 128) if signed else (0, 256)
    full = guarded_array((m, lda), np.int8 if signed else np.uint8, at)
    full[...] = RNG.integers(lo, hi, (m, lda))
    return full[:, :k]


def _b(k: int, n: int) -> np.ndarray:
    return RNG.integers(-128, 128, (k, n)).astype(np.int8)


def _c(m: int, n: int, ldc: int, dtype, at: str) -> np.ndarray:  # type: ignore[no-untyped-def]
    full = guarded_array((m, ldc), dtype, at)
    full[...] = 0
    return full[:, :n]


def _packed(b: np.ndarray, at: str):  # type: ignore[no-untyped-def]
    p = repack_b_int8(b)
    return type(p)(data=guarded_copy(p.data, at), k=p.k, n=p.n, colsum=p.colsum)


def test_repack_layout_lane_by_lane():
    # the byte of B[k, n] is at block n // 64, K group k // 4, column n % 64, byte k % 4 (zero padding elsewhere)
    k, n = 10, 83
    b = _b(k, n)
    p = repack_b_int8(b)
    kp, np_ = 12, 96
    assert p.data.size == kp * np_
    data = p.data.view(np.int8)
    seen = np.zeros(data.size, dtype=bool)
    for kk in range(k):
        for nn in range(n):
            blk, col = divmod(nn, N_BLOCK)
            width = min(N_BLOCK, np_ - blk * N_BLOCK)
            at = blk * N_BLOCK * kp + (kk // K_GROUP) * width * K_GROUP + col * K_GROUP + kk % K_GROUP
            assert data[at] == b[kk, nn]
            seen[at] = True
    assert not data[~seen].any()
    assert np.array_equal(p.colsum, b.astype(np.int64).sum(0))


@pytest.mark.parametrize("signed", [False, True], ids=["u8", "s8"])
@pytest.mark.parametrize(("m", "n", "k"), SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
def test_s32_is_exact(m, n, k, signed):
    at = "start" if (m + n + k) % 2 else "end"
    lda, ldc = k + (m % 3), n + (k % 5)
    a, b = _a(m, k, lda, signed, at), _b(k, n)
    a_zp = int(RNG.integers(0, 256)) if not signed and m % 2 else 0
    p = _packed(b, at)
    comp = guarded_copy(post_op_vectors(p, a_zero_point=a_zp, a_signed=signed)[0], at)
    c = _c(m, n, ldc, np.int32, at)
    g = Int8Geometry(m, n, k, lda, ldc, a_signed=signed, compensation=bool(signed or a_zp))
    run_int8(g, a, p, c, comp)
    expected = (a.astype(np.int64) - a_zp) @ b.astype(np.int64)
    assert np.array_equal(c, expected)


def test_beta_adds_to_c():
    m, n, k = 9, 37, 21
    a, b = _a(m, k, k, True, "end"), _b(k, n)
    p = _packed(b, "end")
    comp = guarded_copy(post_op_vectors(p, a_signed=True)[0])
    c = _c(m, n, n, np.int32, "end")
    c[...] = RNG.integers(-(10**6), 10**6, (m, n))
    before = c.astype(np.int64)
    run_int8(Int8Geometry(m, n, k, k, n, a_signed=True, compensation=True, beta=True), a, p, c, comp)
    assert np.array_equal(c, before + a.astype(np.int64) @ b.astype(np.int64))


DEQUANT = [(1, 1, 1), (7, 65, 3), (40, 100, 300), (17, 33, 64), (5, 200, 130)]


def _quant_case(m, n, k, signed, at):  # type: ignore[no-untyped-def]
    a, b = _a(m, k, k, signed, at), _b(k, n)
    a_zp = 0 if signed else 113
    a_scale = 0.02
    b_scales = RNG.uniform(0.001, 0.01, n)
    bias = RNG.uniform(-5, 5, n)
    exact = (a.astype(np.int64) - a_zp) @ b.astype(np.int64)
    return a, b, a_zp, a_scale, b_scales, bias, exact


@pytest.mark.parametrize("signed", [False, True], ids=["u8", "s8"])
@pytest.mark.parametrize(("m", "n", "k"), DEQUANT, ids=[f"{m}x{n}x{k}" for m, n, k in DEQUANT])
def test_dequantize_to_f32(m, n, k, signed):
    a, b, a_zp, a_scale, b_scales, bias, exact = _quant_case(m, n, k, signed, "end")
    p = _packed(b, "end")
    comp, scale, bvec = (guarded_copy(v) for v in post_op_vectors(p, a_scale, a_zp, signed, b_scales, bias))
    c = _c(m, n, n, np.float32, "end")
    g = Int8Geometry(m, n, k, k, n, a_signed=signed, output=Int8Output.F32, compensation=True, bias=True)
    run_int8(g, a, p, c, comp, scale, bvec)
    expected = exact * (a_scale * b_scales) + bias
    np.testing.assert_allclose(c, expected, rtol=2e-6, atol=2e-5)


@pytest.mark.parametrize("out", [Int8Output.U8, Int8Output.S8], ids=["u8", "s8"])
@pytest.mark.parametrize(("m", "n", "k"), DEQUANT, ids=[f"{m}x{n}x{k}" for m, n, k in DEQUANT])
def test_requantize_rounds_half_to_even_and_saturates(m, n, k, out):
    a, b, a_zp, a_scale, b_scales, bias, exact = _quant_case(m, n, k, True, "start")
    y_scale, y_zp = 0.05, (128 if out == Int8Output.U8 else 3)
    p = _packed(b, "start")
    vectors = post_op_vectors(p, a_scale, a_zp, True, b_scales, bias, y_scale, y_zp)
    comp, scale, bvec = (guarded_copy(v, "start") for v in vectors)
    c = _c(m, n, n, np.uint8 if out == Int8Output.U8 else np.int8, "start")
    g = Int8Geometry(m, n, k, k, n, a_signed=True, output=out, compensation=True, bias=True)
    run_int8(g, a, p, c, comp, scale, bvec)
    # the kernel's arithmetic: one f32 fma of the exact accumulator with the f32 vectors, then round half to even
    pre = (exact * scale.astype(np.float64) + bvec.astype(np.float64)).astype(np.float32)
    lo, hi = (0, 255) if out == Int8Output.U8 else (-128, 127)
    expected = np.clip(np.rint(pre), lo, hi)
    assert np.array_equal(c.astype(np.int64), expected.astype(np.int64))
    # and it is the float64 definition up to the f32 roundings of scale and bias
    ideal = np.clip(np.rint(exact * (a_scale * b_scales) / y_scale + bias / y_scale + y_zp), lo, hi)
    assert np.abs(c.astype(np.int64) - ideal).max() <= 1


def test_requantize_ties_go_to_even():
    # acc * 0.5 lands on .5 exactly: 1 -> 0, 3 -> 2, 5 -> 2 (plus the zero point), -1 -> -0, -3 -> -2
    a = guarded_copy(np.array([[1], [3], [5], [127], [255]], dtype=np.uint8))
    b = np.array([[1, -1]], dtype=np.int8)
    p = _packed(b, "end")
    comp, scale, bias = post_op_vectors(p, 0.5, 0, False, 1.0, None, 1.0, 0)
    c = _c(5, 2, 2, np.int8, "end")
    g = Int8Geometry(5, 2, 1, 1, 2, output=Int8Output.S8, compensation=True)
    run_int8(g, a, p, c, comp, scale)
    assert c.tolist() == [[0, 0], [2, -2], [2, -2], [64, -64], [127, -128]]


def test_bad_geometry_and_arrays_are_typed_errors():
    with pytest.raises(InputError, match="positive"):
        Int8Geometry(0, 1, 1, 1, 1)
    with pytest.raises(InputError, match="beta"):
        Int8Geometry(1, 1, 1, 1, 1, output=Int8Output.F32, beta=True)
    with pytest.raises(InputError, match="int8"):
        repack_b_int8(np.zeros((2, 2), np.uint8))
    p = repack_b_int8(np.zeros((4, 4), np.int8))
    g = Int8Geometry(2, 4, 4, 4, 4)
    with pytest.raises(InputError, match="A must be uint8"):
        run_int8(g, np.zeros((2, 4), np.int8), p, np.zeros((2, 4), np.int32))
    with pytest.raises(InputError, match="C must be s32"):
        run_int8(g, np.zeros((2, 4), np.uint8), p, np.zeros((2, 4), np.float32))


def _disassembly(g: Int8Geometry, vectors: int | None = None) -> list[str]:
    from snippets_x86_64.asm import ZMM, Function, k1, k2, r10, r11, r12, r13, r14, rax
    from snippets_x86_64.brgemm_int8 import BrgemmInt8Kernel, Int8Regs

    kernel = BrgemmInt8Kernel(g)
    fn = Function("t", args=("a", "b", "c", "comp", "scale", "bias"))
    vecs = ZMM[: kernel.aux_needs()[1] if vectors is None else vectors]
    kernel.emit(fn, Int8Regs(*fn.args, pa=rax, pb=r10, cnt=r11, arow=r12, crow=r13, mcnt=r14, vecs=vecs,
                             n_mask=k1, k_mask=k2))  # fmt: skip
    return [line.split(": ", 1)[1] for line in fn.disassemble().splitlines()]


def test_register_blocking_of_a_64_column_block():
    # one 6 x 4 tile (24 accumulators): per K group 4 loads of B, 6 broadcasts of A, 24 vpdpbusd, as iced decodes it
    text = _disassembly(Int8Geometry(6, 64, 8, 8, 64))
    ops = [line.split(" ")[0] for line in text]
    assert ops.count("vpdpbusd") == 24 and ops.count("vpbroadcastd") == 6
    assert "vpdpbusd zmm23, zmm29, zmm27" in text  # row 5, vector 3: A broadcast in zmm29, B in zmm27
    assert ops.count("vmovdqu32") == 4 + 24  # B loads, C stores


@pytest.mark.parametrize("g", [Int8Geometry(40, 80, 5, 5, 80), Int8Geometry(40, 80, 5, 5, 80, a_signed=True),
                               Int8Geometry(3, 20, 9, 9, 20, a_signed=True, output=Int8Output.U8)])  # fmt: skip
def test_the_kernel_stays_in_the_registers_it_asks_for(g):
    # N = 80: a 64-column block (6 x 4 tile) then a 16-column one (a taller tile): aux_needs covers both
    from snippets_x86_64.brgemm_int8 import BrgemmInt8Kernel

    needs = BrgemmInt8Kernel(g).aux_needs()[1]
    assert needs <= 31
    used = {int(z) for line in _disassembly(g) for z in re.findall(r"[xyz]mm(\d+)", line)}
    assert max(used) < needs
    with pytest.raises(CodegenError, match="vector registers"):
        _disassembly(g, needs - 1)

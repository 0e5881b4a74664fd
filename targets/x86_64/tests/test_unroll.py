"""Unrolling innermost loops by two (snippets_x86_64.unroll): hand-written loops run through the JIT against
numpy (even and odd trip counts, invariant registers, a pointer that steps and resets), loops that must be
left alone (a value carried across iterations that is not a reduction's accumulator, a value read after the
loop, a scalar register written in the body), reductions whose accumulator is split in two, and compiled fused chains with tails 1..40, unrolled and not, against numpy float64."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from snippets_core.ir.model import Model
from snippets_core.ir.node import OPS
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64 import unroll
from snippets_x86_64.asm import YMM, ZMM, Function, bcst, rcx, rdx, zmm0, zmm1, zmm2, zmm5
from snippets_x86_64.cache import KERNEL_CACHE
from snippets_x86_64.unroll import unroll_inner_loops

pytestmark = pytest.mark.avx512
ARGS = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


def scale_loop(n: int, with_reset: bool = False) -> Function:
    """``out[i] = x[i] * 2 + c`` over n vectors; c (zmm5) is set before the loop and only read in it.
    ``with_reset`` adds a pointer that steps by 64 and is reset by -64 every iteration (net 0: c's row)."""
    f = Function("scale", args=("x", "out", "c"))
    x, out, c = f.args
    f.vbroadcastss(zmm5, c + 0)
    f.mov(rcx, n)
    head = f.label("loop")
    f.vmovups(zmm0, x + 0)
    f.vmulps(zmm0, zmm0, bcst(f.const_f32(2.0)))
    f.vaddps(zmm0, zmm0, zmm5)
    if with_reset:
        f.vaddps(zmm0, zmm0, bcst(c + 0))  # c read through a pointer the loop moves and resets
    f.vmovups(out + 0, zmm0)
    f.add(x, 64)
    f.add(out, 64)
    if with_reset:
        f.add(c, 64)
        f.add(c, -64)
    f.dec(rcx)
    f.jnz(head)
    return f


@pytest.mark.parametrize("n", range(1, 10))
@pytest.mark.parametrize("with_reset", [False, True])
def test_unrolled_loop_matches_numpy(n, with_reset):
    f = scale_loop(n, with_reset)
    assert unroll_inner_loops(f) == (n >= 2) + (n >= 4)  # by two, then by two again while two trips are left
    fn = f.finalize(None, ARGS)
    x = np.random.default_rng(n).standard_normal(16 * n + 16).astype(np.float32)
    out = np.full_like(x, 7.0)
    c = np.array([0.25] + [0.0] * 15, np.float32)
    fn(x.ctypes.data, out.ctypes.data, c.ctypes.data)
    want = x[: 16 * n] * np.float32(2.0) + np.float32(0.25)
    if with_reset:
        want = want + np.float32(0.25)  # c[0] through the stepped-and-reset pointer: the same element every time
    np.testing.assert_array_equal(out[: 16 * n], want)
    assert (out[16 * n :] == 7.0).all()  # nothing written beyond the n vectors
    if n >= 2:
        text = f.disassemble()
        assert "zmm" in text and "+0x40]" in text  # the second copy reads and writes one vector further


def _reduction_loop(n: int, op: str) -> Function:
    f = Function(op, args=("x", "out", "unused"))
    x, out, _ = f.args
    f.vbroadcastss(zmm1, f.const_f32({"vaddps": 0.0, "vmaxps": -1e30, "vminps": 1e30}[op]))
    f.mov(rcx, n)
    head = f.label("loop")
    f.vmovups(zmm2, x + 0)
    getattr(f, op)(zmm1, zmm2, zmm1)  # zmm1 is read before it is written in the body: loop-carried
    f.add(x, 64)
    f.dec(rcx)
    f.jnz(head)
    f.vmovups(out + 0, zmm1)
    return f


@pytest.mark.parametrize("n", range(1, 10))
@pytest.mark.parametrize("op", ["vaddps", "vmaxps", "vminps"])
def test_reduction_accumulator_is_split_and_folded_after_the_loop(n, op):
    f = _reduction_loop(n, op)
    assert unroll_inner_loops(f) == (n >= 2) + (n >= 4)
    fn = f.finalize(None, ARGS)
    x = np.random.default_rng(n).standard_normal(16 * n).astype(np.float32)
    got = np.zeros(16, np.float32)
    fn(x.ctypes.data, got.ctypes.data, 0)
    rows = x.reshape(n, 16).astype(np.float64)
    if op == "vaddps":
        np.testing.assert_allclose(got, rows.sum(0), rtol=1e-6, atol=1e-6)
    else:
        want = rows.max(0) if op == "vmaxps" else rows.min(0)
        np.testing.assert_array_equal(got, want.astype(np.float32))


def test_carried_register_that_is_not_a_reduction_is_not_unrolled():
    f = Function("scan", args=("x", "out", "unused"))
    x, out, _ = f.args
    f.vxorps(zmm1, zmm1, zmm1)
    f.mov(rcx, 6)
    head = f.label("loop")
    f.vaddps(zmm1, zmm1, x + 0)
    f.vmovups(x + 0, zmm1)  # the running sum is read in the body: a scan, not a reduction
    f.add(x, 64)
    f.dec(rcx)
    f.jnz(head)
    f.vmovups(out + 0, zmm1)
    assert unroll_inner_loops(f) == 0
    fn = f.finalize(None, ARGS)
    x = np.arange(16 * 6, dtype=np.float32)
    want = np.cumsum(x.reshape(6, 16), axis=0)
    got = np.zeros(16, np.float32)
    fn(x.ctypes.data, got.ctypes.data, 0)
    np.testing.assert_array_equal(got, want[-1])
    np.testing.assert_array_equal(x.reshape(6, 16), want)


def test_value_read_after_the_loop_is_not_unrolled():
    f = Function("last", args=("x", "out", "unused"))
    x, out, _ = f.args
    f.mov(rcx, 4)
    head = f.label("loop")
    f.vmovups(zmm2, x + 0)
    f.vmulps(zmm2, zmm2, zmm2)
    f.add(x, 64)
    f.dec(rcx)
    f.jnz(head)
    f.vmovups(out + 0, zmm2)  # the last iteration's square: live after the loop
    assert unroll_inner_loops(f) == 0
    fn = f.finalize(None, ARGS)
    x = np.arange(64, dtype=np.float32)
    got = np.zeros(16, np.float32)
    fn(x.ctypes.data, got.ctypes.data, 0)
    np.testing.assert_array_equal(got, x[48:] ** 2)


def test_scalar_register_written_in_the_body_is_not_unrolled():
    f = Function("gpr", args=("x", "out", "unused"))
    x, out, _ = f.args
    f.mov(rcx, 4)
    head = f.label("loop")
    f.mov(rdx, x)  # address arithmetic in the body
    f.vmovups(zmm0, rdx + 0)
    f.vmovups(out + 0, zmm0)
    f.add(x, 64)
    f.add(out, 64)
    f.dec(rcx)
    f.jnz(head)
    assert unroll_inner_loops(f) == 0


@pytest.mark.parametrize("crowded", ["free", "live", "dead"],
                         ids=["low-registers-free", "low-registers-taken", "low-registers-dead"])
def test_vex_encoded_body_is_renamed_within_the_first_16_registers(crowded):
    """ymm forms are VEX-encoded, which reaches only registers 0..15: the copies use free low registers, and the
    loop is left alone when none are free (zmm2..15 set before it and read after it). Registers written before
    the loop but dead across it (an FC's Brgemm accumulators before its epilogue loop) are free."""
    f = Function("vex", args=("x", "out", "unused"))
    x, out, _ = f.args
    if crowded != "free":
        for i in range(2, 16):
            f.vxorps(ZMM[i], ZMM[i], ZMM[i])
    f.mov(rcx, 8)
    head = f.label("loop")
    f.vmovups(YMM[0], x + 0)
    f.vaddps(YMM[1], YMM[0], YMM[0])
    f.vmovups(out + 0, YMM[1])
    f.add(x, 32)
    f.add(out, 32)
    f.dec(rcx)
    f.jnz(head)
    if crowded == "live":
        for i in range(2, 16):
            f.vaddps(ZMM[i], ZMM[i], ZMM[i])  # read after the loop: live across it
    assert unroll_inner_loops(f) == (0 if crowded == "live" else 2)
    fn = f.finalize(None, ARGS)
    xv = np.random.default_rng(2).standard_normal(64).astype(np.float32)
    got = np.zeros(64, np.float32)
    fn(xv.ctypes.data, got.ctypes.data, 0)
    np.testing.assert_array_equal(got, xv + xv)


# --- compiled chains -----------------------------------------------------------------------------------------


def chain_model(shape):  # type: ignore[no-untyped-def]
    """Row a's block: x*scale[c] + shift[c], SiLU, Tanh, -0.25, max -0.5, + x."""
    c = shape[1]
    x = Parameter("f32", shape, name="x")
    scale = Constant(np.linspace(0.5, 1.5, c, dtype=np.float32).reshape(1, c, 1, 1))
    shift = Constant(np.linspace(-0.5, 0.5, c, dtype=np.float32).reshape(1, c, 1, 1))
    t1 = OPS["Add"](OPS["Multiply"](x, scale), shift)
    t4 = OPS["Tanh"](OPS["Multiply"](t1, OPS["Sigmoid"](t1)))
    t6 = OPS["Maximum"](OPS["Subtract"](t4, Constant(np.float32(0.25))), Constant(np.float32(-0.5)))
    return Model([Result(OPS["Add"](t6, x), name="y")], [x])


def chain_ref(x: np.ndarray) -> np.ndarray:
    c = x.shape[1]
    x64 = x.astype(np.float64)
    t1 = x64 * np.linspace(0.5, 1.5, c, dtype=np.float32).reshape(1, c, 1, 1) + np.linspace(
        -0.5, 0.5, c, dtype=np.float32
    ).reshape(1, c, 1, 1)
    t4 = np.tanh(t1 / (1 + np.exp(-t1)))
    return np.maximum(t4 - 0.25, -0.5) + x64


@pytest.mark.parametrize("enabled", [True, False], ids=["unrolled", "plain"])
@pytest.mark.parametrize("last", [*range(1, 41), 64 + 5, 80])
def test_fused_chain_every_tail(enabled, last, monkeypatch):
    monkeypatch.setattr(unroll, "ENABLED", enabled)
    KERNEL_CACHE.clear()  # the in-memory cache would serve the other variant's kernel
    shape = (1, 3, 2, last)
    cm = compile_model(chain_model(shape), target="x86_64_avx512", config={"num_threads": 1})
    for sg in cm.subgraphs:
        assert "SnippetsFallbackReason" not in sg.rt_info, sg.rt_info["SnippetsFallbackReason"]
    x = (np.random.default_rng(last).standard_normal(shape) * 3).astype(np.float32)
    got = cm({"x": x})["y"]
    np.testing.assert_allclose(got.astype(np.float64), chain_ref(x), rtol=2e-6, atol=2e-6)

"""LRN (local response normalization across channels) as a JIT kernel on the NHWC layout of the conv primitives.

``y = x / (bias + alpha / size * sum of x^2 over the channel window)^beta``, the window ``[c - (size-1)//2,
c + size-1 - (size-1)//2]`` clipped to the channels. In NHWC a pixel's channels are contiguous, so the window sum of
a vector of 16 channels is ``size`` loads of the same pixel shifted by -lo..hi channels (unaligned), each squared
into the sum with an FMA; a shifted load that reaches before the first or past the last channel is masked (the
masks are fixed per vector and shift, so they are immediates). ``^-beta`` is two square roots for beta 0.75
(AlexNet, GoogLeNet, ZFNet), else ``exp(-beta log t)``.

Work items are image rows (their pixels are contiguous in NHWC), split over the threads in ranges. The kernel's
signature is the native pool's harness: ``lrn(unused, args, start, count)`` with ``args`` = [src, dst].
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np

from snippets_x86_64.aligned import empty_aligned
from snippets_x86_64.asm import Function, bcst, eax, k1, k2, k3, qword, r9, r12, rbx, rcx, rdx, rsi, zword
from snippets_x86_64.asm.registers import ZMM
from snippets_x86_64.cache import FUNCTION_CACHE, HARNESS_ARGTYPES
from snippets_x86_64.conv import VEC
from snippets_x86_64.conv_executor import MIN_FLOPS_PER_THREAD, data_address, split_items
from snippets_x86_64.emitters.base import Aux
from snippets_x86_64.emitters.math import emit_exp, emit_log
from snippets_x86_64.jit import JitFunction
from snippets_x86_64.native_pool import SplitCalls

FULL = 0xFFFF


def window(size: int) -> tuple[int, int]:
    """Channels (before, after) the centre in ONNX's LRN window."""
    lo = (size - 1) // 2
    return lo, size - 1 - lo


def shift_mask(c: int, v: int, d: int) -> int:
    """The lanes of vector ``v`` whose channel shifted by ``d`` is a channel (0 <= 16 v + lane + d < c)."""
    return sum(1 << lane for lane in range(VEC) if 0 <= v * VEC + lane + d < c)


def build_lrn_kernel(c: int, w: int, size: int, alpha: float, beta: float, bias: float) -> JitFunction:
    """The JIT function ``lrn(unused, args, start, count)`` over image rows of ``w`` NHWC pixels of ``c`` channels."""
    fn = Function("lrn", args=("unused", "args", "start", "count"))
    row = w * c * 4
    acc, tmp, x, s1, s2 = ZMM[0], ZMM[1], ZMM[2], ZMM[3], ZMM[4]
    aux = Aux((ZMM[5], ZMM[6], ZMM[7]), (k3,))
    nvec = -(-c // VEC)
    tail = shift_mask(c, nvec - 1, 0)
    fn.mov(eax, tail)
    fn.kmovw(k1, eax)
    fn.imul(rbx, rdx, row)
    fn.mov(r9, rbx)
    fn.add(rbx, qword[rsi])
    fn.add(r9, qword[rsi + 8])
    fn.imul(r12, rcx, w)
    fn.test(r12, r12)
    fn.jz(fn.exit)
    lo, hi = window(size)
    scale, one_bias = fn.const_f32(alpha / size), fn.const_f32(bias)
    loop = fn.new_label("pixel")
    fn.bind(loop)
    for v in range(nvec):
        last = v == nvec - 1 and tail != FULL
        fn.vxorps(acc, acc, acc)
        for d in range(-lo, hi + 1):
            mask = shift_mask(c, v, d)
            if not mask:
                continue
            src = zword[rbx + (v * VEC + d) * 4]
            if mask == FULL:
                fn.vmovups(tmp, src)
            else:
                fn.mov(eax, mask)
                fn.kmovw(k2, eax)
                fn.vmovups(tmp.mask(k2).z, src)
            fn.vfmadd231ps(acc, tmp, tmp)
        center = zword[rbx + v * VEC * 4]
        fn.vmovups(x.mask(k1).z if last else x, center)
        fn.vmulps(acc, acc, bcst(scale))
        fn.vaddps(acc, acc, bcst(one_bias))
        if beta == 0.75:  # t^-0.75 = 1 / (sqrt(t) * sqrt(sqrt(t))): correctly rounded steps
            fn.vsqrtps(s1, acc)
            fn.vsqrtps(s2, s1)
            fn.vmulps(s1, s1, s2)
            fn.vdivps(x, x, s1)
        else:
            emit_log(fn, s1, acc, aux)
            fn.vmulps(s1, s1, bcst(fn.const_f32(-beta)))
            emit_exp(fn, s2, s1, aux)
            fn.vmulps(x, x, s2)
        dst = zword[r9 + v * VEC * 4]
        fn.vmovups(dst.mask(k1) if last else dst, x)
    fn.add(rbx, c * 4)
    fn.add(r9, c * 4)
    fn.dec(r12)
    fn.jnz(loop)
    return fn.finalize(None, (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64))


class LRNExecutor:
    """One LRN over inputs of ``shape`` [N, C, H, W] (float32): ``run(x) -> y``, the result an NCHW view of a new
    NHWC array, like the conv primitives' (see docs/conv.md)."""

    def __init__(self, shape: tuple[int, int, int, int], size: int, alpha: float, beta: float, bias: float,
                 num_threads: int = 1, alloc: Callable[[tuple[int, ...]], np.ndarray] | None = None,
                 prepared: LRNExecutor | None = None) -> None:
        """``prepared``: the same LRN made for another shape, whose kernel and dispatch calls this one shares (a
        new shape makes only its thread split)."""
        self.shape = shape
        self.size, self.alpha, self.beta, self.bias = size, alpha, beta, bias
        n, c, h, w = shape
        self.new = alloc or empty_aligned
        if prepared is not None:
            self.kernel, self.calls = prepared.kernel, prepared.calls
        else:
            # the items are pixels (rows of one pixel): the kernel depends on the channels, not on N, H, W, so a
            # model with a dynamic image size builds it once
            spec = (c, 1, size, alpha, beta, bias)
            self.kernel = FUNCTION_CACHE.get("lrn", spec, lambda: build_lrn_kernel(*spec), HARNESS_ARGTYPES)
            self.calls = SplitCalls()
        work = n * c * h * w * (size + 8)
        self.chunks = split_items(n * h * w, num_threads if work >= MIN_FLOPS_PER_THREAD * num_threads else 1)
        self.call = self.calls.get(self.kernel, 2, self.chunks)
        #: layout changes (NCHW -> NHWC copies) made by the calls so far
        self.reorders = 0

    @property
    def result_shape(self) -> tuple[int, ...]:
        """The shape of what ``run`` returns."""
        return self.shape

    def run(self, x: np.ndarray) -> np.ndarray:
        n, c, h, w = self.shape
        xt = x.transpose(0, 2, 3, 1)
        if not (xt.flags.c_contiguous and xt.dtype == np.float32):
            self.reorders += 1
            src = self.new((n, h, w, c))
            src[...] = xt
            xt = src
        y = self.new((n, h, w, c))
        self.call.run_chunks(self.chunks, [data_address(xt), data_address(y)])
        return y.transpose(0, 3, 1, 2)

    def describe(self) -> str:
        n, c, h, w = self.shape
        return (f"lrn size {self.size} alpha {self.alpha:g} beta {self.beta:g} bias {self.bias:g} C{c} {h}x{w} N{n} "
                f"(NHWC)")

"""The executor of an int8 batched-MatMul Subgraph (TokenizeInt8MatMulSnippets): the attention MatMuls of a QDQ model.

Both operands are activations whose f32 values lie on per-tensor u8/i8 grids. Per call, per batch (head):

1. A's rows are quantized back to their integers by the JIT quantizer (:mod:`~snippets_x86_64.quantize_int8`;
   exact, the values are on the grid), a Transpose of the input read as a strided view and copied first;
2. B [K, N] is quantized the same way, made s8 (a u8 B minus 128, one ``xor 0x80``) and repacked into the VNNI
   layout with its column sums (:func:`~snippets_x86_64.brgemm_copy_b_int8.repack_b_int8`);
3. the int8 Brgemm (:mod:`~snippets_x86_64.brgemm_int8`) computes ``sum_k (qa - a_zp) * qb8`` (A's zero point
   compensated by B's column sums) and dequantizes it by ``a_scale * b_scale`` in registers;
4. B's own zero point (shifted by the 128 of a u8 B) adds ``-b_zp' * sum_k (qa - a_zp)``, one value per row: the
   kernel's post-ops are per column, so that row term is added after it (``out += r[:, None]``).

Sizes are read at run time (dynamic sequence lengths): a kernel per (M, N, K), compiled once and cached. The
batches are split between threads when each gets ``parallel_min_ns`` of estimated work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from snippets_core.errors import InputError
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.runtime.placement import Placement
from snippets_core.tokenization.tokenize_int8_matmul_snippets import INT8_BATCHED_MATMUL, Int8MatMulSpec, Int8Operand
from snippets_x86_64.brgemm_copy_b_int8 import repack_b_int8
from snippets_x86_64.brgemm_int8 import Int8Geometry, Int8Output, int8_function
from snippets_x86_64.quantize_int8 import quantize_function, quantize_params
from snippets_x86_64.runtime import FLOPS_PER_NS, POOL, TARGET_NAME

#: the int8 Brgemm's multiply-adds per ns against the f32 one's flops (vpdpbusd does 4x the work of an FMA, x2 flops)
INT8_MACS_PER_NS = 2.0 * FLOPS_PER_NS


def _view(x: np.ndarray, op: Int8Operand) -> np.ndarray:
    return x if op.perm is None else x.transpose(op.perm)


class Int8MatMulExecutor:
    """Runs one int8 batched-MatMul Subgraph (see the module docstring); ``threads`` split its batches."""

    def __init__(self, sg: Subgraph, threads: int, parallel_min_ns: int) -> None:
        self.spec: Int8MatMulSpec = sg.rt_info[INT8_BATCHED_MATMUL]
        self.threads = max(1, threads)
        self.parallel_min_ns = parallel_min_ns
        a, b = self.spec.a, self.spec.b
        self.qa = quantize_params(a.scale, a.zero_point, a.signed)
        self.qb = quantize_params(b.scale, b.zero_point, b.signed)
        # B's integers minus this are the s8 bytes the kernel reads (a u8 B is shifted by 128)
        self.b_shift = b.zero_point - (0 if b.signed else 128)
        self.scale = np.float32(np.float32(a.scale) * np.float32(b.scale))
        self._on_target = Placement(TARGET_NAME)
        #: where the last call ran (the snippets_core.runtime.placement protocol): always here
        self.last_placement = self._on_target
        #: allocates the per-call buffers the kernels read and write (tests put them against guard pages)
        self.empty: Any = np.empty
        #: repacks B (tests wrap it to put the packed bytes against guard pages)
        self.repack: Any = repack_b_int8

    def operands(self, args: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        """A [batch, M, K] and B [batch, K, N], f32, C-contiguous (inputs transposed and broadcast as the body
        says)."""
        s = self.spec
        xs = [np.asarray(args[s.a.index]), np.asarray(args[s.b.index])]
        for name, x in zip("AB", xs):
            if x.dtype != np.float32 or x.ndim < 3:
                raise InputError(f"the int8 batched MatMul takes f32 operands of rank >= 3, got {name} {x.dtype} "
                                 f"{list(x.shape)}")
        a, b = _view(xs[0], s.a), _view(xs[1], s.b)
        if s.transpose_b:
            b = b.swapaxes(-1, -2)
        if a.shape[-1] != b.shape[-2]:
            raise InputError(f"the int8 batched MatMul multiplies {list(a.shape)} by {list(b.shape)}: K differs")
        try:
            batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except ValueError as e:
            raise InputError(f"the int8 batched MatMul cannot broadcast {list(a.shape)} with {list(b.shape)}") from e
        a = np.ascontiguousarray(np.broadcast_to(a, (*batch, *a.shape[-2:])))
        b = np.ascontiguousarray(np.broadcast_to(b, (*batch, *b.shape[-2:])))
        return a, b

    def __call__(self, args: Sequence[Any], outs: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        a, b = self.operands(args)
        batch, (m, k), n = a.shape[:-2], a.shape[-2:], b.shape[-1]
        shape = (*batch, m, n)
        out = outs[0] if outs is not None and outs[0] is not None else np.empty(shape, np.float32)
        if out.dtype != np.float32 or out.shape != shape or not out.flags.c_contiguous or not out.flags.writeable:
            raise InputError(f"output array 0 must be a writeable C-contiguous float32{list(shape)}")
        nb = int(np.prod(batch, dtype=np.int64))
        if nb and m and n:
            a3, b3, c3 = a.reshape(nb, m, k), b.reshape(nb, k, n), out.reshape(nb, m, n)
            if k == 0:
                c3.fill(0.0)
            else:
                parts = self.parts(nb, m, n, k)
                bounds = [round(nb * p / parts) for p in range(parts + 1)]
                POOL.run([lambda lo=bounds[p], hi=bounds[p + 1]: self._run(a3[lo:hi], b3[lo:hi], c3[lo:hi])
                          for p in range(parts)])
        self.last_placement = self._on_target
        return [out]

    def parts(self, nb: int, m: int, n: int, k: int) -> int:
        """How many threads share the ``nb`` batches: each gets ``parallel_min_ns`` of estimated work at least."""
        work_ns = nb * m * n * k / INT8_MACS_PER_NS
        by_work = int(work_ns // self.parallel_min_ns) if self.parallel_min_ns > 0 else nb
        return max(1, min(self.threads, nb, by_work))

    def _run(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
        """One thread's batches: quantize its A rows, then per batch quantize, shift and repack B, multiply."""
        s = self.spec
        nb, m, k = a.shape
        n = b.shape[-1]
        qa = self.empty((nb, m, k), np.int8 if s.a.signed else np.uint8)
        quantize_function(k)(a.ctypes.data, qa.ctypes.data, nb * m, self.qa.ctypes.data)
        rows = None
        if self.b_shift:  # -b_shift * sum_k (qa - a_zp), dequantized: one value per row
            sums = qa.sum(axis=-1, dtype=np.int64) - np.int64(k) * s.a.zero_point
            rows = (sums * -self.b_shift).astype(np.float64) * float(self.scale)
            rows = rows.astype(np.float32)[..., None]
        fn = int8_function(Int8Geometry(m, n, k, lda=k, ldc=n, a_signed=s.a.signed, output=Int8Output.F32,
                                        compensation=True))
        scale, comp = self.empty(n, np.float32), self.empty(n, np.int32)
        scale.fill(self.scale)
        qb = self.empty((k, n), np.uint8)
        for i in range(nb):
            quantize_function(n)(b[i].ctypes.data, qb.ctypes.data, k, self.qb.ctypes.data)
            if not s.b.signed:
                np.bitwise_xor(qb, np.uint8(0x80), out=qb)
            packed = self.repack(qb.view(np.int8))
            comp[:] = packed.compensation(s.a.zero_point, s.a.signed)
            fn(qa[i].ctypes.data, packed.data.ctypes.data, c[i].ctypes.data, comp.ctypes.data, scale.ctypes.data, 0)
            if rows is not None:
                c[i] += rows[i]

    def describe(self) -> str:
        threads = f", batches split over {self.threads} threads" if self.threads > 1 else ""
        return f"int8 batched MatMul on the VNNI Brgemm: {self.spec.describe()}{threads}"


__all__ = ["INT8_MACS_PER_NS", "Int8MatMulExecutor"]

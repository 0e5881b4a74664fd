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
from snippets_x86_64.brgemm_copy_b_int8 import K_GROUP, LANES, N_BLOCK, S8_SHIFT
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
        #: per K: a packed B of ones (K x 16) and its compensation, for A's row sums
        self._ones: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __call__(self, args: Sequence[Any], outs: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        s = self.spec
        qa, qb = self.quantized(args)
        batch = np.broadcast_shapes(qa.shape[:-2], qb.shape[:-2])
        (m, k), n = qa.shape[-2:], qb.shape[-1]
        shape = (*batch, m, n)
        out = outs[0] if outs is not None and outs[0] is not None else np.empty(shape, np.float32)
        if out.dtype != np.float32 or out.shape != shape or not out.flags.c_contiguous or not out.flags.writeable:
            raise InputError(f"output array 0 must be a writeable C-contiguous float32{list(shape)}")
        nb = int(np.prod(batch, dtype=np.int64))
        if nb and m and n:
            if k == 0:
                out.fill(0.0)
            else:
                self.multiply(np.broadcast_to(qa, (*batch, m, k)), np.broadcast_to(qb, (*batch, k, n)), out)
        self.last_placement = self._on_target
        return [out]

    def multiply(self, qa: np.ndarray, qb: np.ndarray, out: np.ndarray) -> None:
        """``out [.., M, N] = dequantize(qa @ qb)`` for the integers ``qa`` [.., M, K] (u8/s8) and ``qb`` [.., K, N]
        (s8: a u8 B already shifted by 128), batch shapes equal."""
        s = self.spec
        (m, k), n = qa.shape[-2:], qb.shape[-1]
        nb = out.size // (m * n)
        if qa.strides[-1] != 1 or (m > 1 and qa.strides[-2] < k):  # rows: contiguous runs of K bytes, lda apart
            qa = np.ascontiguousarray(qa)
        lda = qa.strides[-2] if m > 1 else k
        a_ptrs = [qa[i].ctypes.data for i in np.ndindex(*qa.shape[:-2])]
        packed = self.pack(qb.reshape(nb, k, n) if qb.flags.c_contiguous else qb)
        kp, np_ = packed.shape[1:]
        b_bytes, b0 = kp * np_, packed.ctypes.data
        comp = self.empty((nb, np_), np.int32)
        comp.fill(0)
        shift = (S8_SHIFT if s.a.signed else 0) + s.a.zero_point
        if shift:  # A's zero point (and s8 shift) times B's column sums: the ones row times B on the kernel
            ones = self.empty(kp, np.uint8)
            ones[:k] = 1
            ones[k:] = 0
            sums = int8_function(Int8Geometry(1, n, kp, lda=kp, ldc=np_))
            for i in range(nb):
                sums(ones.ctypes.data, b0 + i * b_bytes, comp.ctypes.data + i * np_ * 4, 0, 0, 0)
            if np.abs(comp[:, :n]).max(initial=0) * shift > np.iinfo(np.int32).max:
                raise InputError(f"int8 compensation (a_zp {s.a.zero_point}) x column sums of B overflows int32")
            comp *= np.int32(shift)
        fn = int8_function(Int8Geometry(m, n, k, lda=max(lda, k), ldc=n, a_signed=s.a.signed, output=Int8Output.F32,
                                        compensation=True))
        scale = self.empty(np_, np.float32)
        scale.fill(self.scale)
        c0, c_bytes, comp0, sc = out.ctypes.data, m * n * 4, comp.ctypes.data, scale.ctypes.data
        parts = self.parts(nb, m, n, k)
        bounds = [round(nb * p / parts) for p in range(parts + 1)]

        def run(lo: int, hi: int) -> None:
            for i in range(lo, hi):
                fn(a_ptrs[i], b0 + i * b_bytes, c0 + i * c_bytes, comp0 + i * np_ * 4, sc, 0)

        POOL.run([lambda lo=bounds[p], hi=bounds[p + 1]: run(lo, hi) for p in range(parts)])
        if self.b_shift:  # -b_shift * sum_k (qa - a_zp), dequantized: one value per row, from the kernel too
            rows = self.row_sums(qa, a_ptrs, lda)
            out += (rows.astype(np.float32) * np.float32(-self.b_shift * float(self.scale))).reshape(
                out.shape[:-1])[..., None]

    def row_sums(self, qa: np.ndarray, a_ptrs: list[int], lda: int) -> np.ndarray:
        """``sum_k (qa - a_zp)`` per row ([nb, M] int32): A times a B of ones (16 columns) on the kernel, A's zero
        point (and s8 shift) compensated."""
        s = self.spec
        (m, k) = qa.shape[-2:]
        kp = -(-k // K_GROUP) * K_GROUP
        ones = self._ones.get(k)
        if ones is None:
            b = np.zeros((kp, LANES), np.int8)
            b[:k] = 1
            ones = self._ones[k] = (b.reshape(kp // K_GROUP, K_GROUP, LANES).transpose(0, 2, 1).copy(),
                                    np.full(LANES, ((S8_SHIFT if s.a.signed else 0) + s.a.zero_point) * k, np.int32))
        packed, comp = ones
        fn = int8_function(Int8Geometry(m, LANES, k, lda=max(lda, k), ldc=LANES, a_signed=s.a.signed,
                                        compensation=True))
        rows = self.empty((len(a_ptrs), m, LANES), np.int32)
        for i, a in enumerate(a_ptrs):
            fn(a, packed.ctypes.data, rows.ctypes.data + i * m * LANES * 4, comp.ctypes.data, 0, 0)
        return rows[..., 0]

    def quantized(self, args: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        """The integers of A [.., M, K] (u8/s8) and B [.., K, N] (s8: a u8 B shifted by 128): each input quantized
        whole in its own layout by the JIT quantizer, then viewed through the body's Transposes (the bytes, not the
        floats, are moved after)."""
        s = self.spec
        out = []
        for name, op, params in (("A", s.a, self.qa), ("B", s.b, self.qb)):
            x = np.asarray(args[op.index])
            if x.dtype != np.float32 or x.ndim < 3:
                raise InputError(f"the int8 batched MatMul takes f32 operands of rank >= 3, got {name} {x.dtype} "
                                 f"{list(x.shape)}")
            x = np.ascontiguousarray(x)
            q = self.empty(x.shape, np.int8 if op.signed else np.uint8)
            if x.size:
                quantize_function(x.shape[-1])(x.ctypes.data, q.ctypes.data, x.size // x.shape[-1],
                                               params.ctypes.data)
            if name == "B" and not op.signed:  # a u8 B minus 128 is the s8 the kernel reads: flip the sign bit
                np.bitwise_xor(q, np.uint8(0x80), out=q)
                q = q.view(np.int8)
            out.append(_view(q, op))
        a, b = out
        if s.transpose_b:
            b = b.swapaxes(-1, -2)
        if a.shape[-1] != b.shape[-2]:
            raise InputError(f"the int8 batched MatMul multiplies {list(a.shape)} by {list(b.shape)}: K differs")
        try:
            np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except ValueError as e:
            raise InputError(f"the int8 batched MatMul cannot broadcast {list(a.shape)} with {list(b.shape)}") from e
        return a, b

    def pack(self, qb: np.ndarray) -> np.ndarray:
        """Every batch of the s8 B [.., K, N] repacked at once into the VNNI layout of
        :func:`~snippets_x86_64.brgemm_copy_b_int8.repack_b_int8` (zero padded): [nb, Kp, Np] bytes in the order
        [N block, K group, column, 4]. The 4 K of a column are one 32-bit word: a B whose K is contiguous in memory
        (K^T of the attention) is repacked by moving words; otherwise the words are assembled from 4 rows."""
        (k, n) = qb.shape[-2:]
        nb = int(np.prod(qb.shape[:-2], dtype=np.int64))
        kp, np_ = -(-k // K_GROUP) * K_GROUP, -(-n // LANES) * LANES
        g = kp // K_GROUP
        packed = self.empty((nb, kp, np_), np.int8)
        words = packed.view(np.int32).reshape(nb, kp * np_ // K_GROUP)
        bt = qb.swapaxes(-1, -2)  # [.., N, K]
        if qb.strides[-2] == 1 and k == kp and n == np_:
            w = bt.view(np.int32).reshape(nb, n, g)  # [nb, N, K/4]: column n's words
        else:
            padded = np.zeros((nb, kp, np_), np.int8)
            padded[:, :k, :n] = qb.reshape(nb, k, n)
            u = padded.view(np.uint8).reshape(nb, g, K_GROUP, np_).astype(np.uint32)
            w = (u[:, :, 0] | (u[:, :, 1] << 8) | (u[:, :, 2] << 16) | (u[:, :, 3] << 24)).view(np.int32)
            w = w.swapaxes(1, 2)  # [nb, Np, K/4]
        full = np_ // N_BLOCK * N_BLOCK
        if full:  # [nb, blocks, 64, g] -> [nb, blocks, g, 64]
            words[:, : full * g].reshape(nb, full // N_BLOCK, g, N_BLOCK)[...] = \
                w[:, :full].reshape(nb, full // N_BLOCK, N_BLOCK, g).transpose(0, 1, 3, 2)
        if np_ > full:  # the last, narrower block
            words[:, full * g :].reshape(nb, g, np_ - full)[...] = w[:, full:].transpose(0, 2, 1)
        return packed

    def parts(self, nb: int, m: int, n: int, k: int) -> int:
        """How many threads share the ``nb`` batches: each gets ``parallel_min_ns`` of estimated work at least."""
        work_ns = nb * m * n * k / INT8_MACS_PER_NS
        by_work = int(work_ns // self.parallel_min_ns) if self.parallel_min_ns > 0 else nb
        return max(1, min(self.threads, nb, by_work))

    def describe(self) -> str:
        threads = f", batches split over {self.threads} threads" if self.threads > 1 else ""
        return f"int8 batched MatMul on the VNNI Brgemm: {self.spec.describe()}{threads}"


__all__ = ["INT8_MACS_PER_NS", "Int8MatMulExecutor"]

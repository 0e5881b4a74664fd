"""The executor of an int8 FullyConnected Subgraph (TokenizeInt8FCSnippets): the VNNI Brgemm on the int8 weight.

At compile time the weight is repacked once (:func:`~snippets_x86_64.brgemm_copy_b_int8.repack_b_int8`) and the
post-op vectors are made: the compensation of A's zero point and of the s8 shift, ``a_scale * w_scale[n]`` and the
bias (divided by the output scale, plus its zero point, when requantizing). Per call:

1. an f32 x is quantized into a scratch of bytes by the JIT quantizer (:mod:`~snippets_x86_64.quantize_int8`),
   on the constant grid of the Q->DQ pair, or (dynamic quantization) on the grid DynamicQuantizeLinear computes
   from x's range: then the scale and compensation vectors (N values) are made for this call;
2. the int8 Brgemm micro-kernel (:mod:`~snippets_x86_64.brgemm_int8`) runs with the dequantize / requantize
   post-ops in registers and stores f32, u8/s8 or s32.

Rows (M: every leading dim of x, static or not) run in blocks of :data:`ROW_BLOCK` on one kernel, the last block on
a kernel of its own rows (compiled once per row count, cached). On several threads the rows are split between
them (each quantizes and multiplies its own rows); an FC with fewer rows than :data:`MIN_ROWS_PER_THREAD` per
thread splits N instead, in whole 64-column blocks of the packed weight.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from snippets_core.errors import InputError
from snippets_core.ir.ops.quantize import dynamic_quantization_grid
from snippets_core.ir.ops.subgraph import Subgraph, release_constants
from snippets_core.runtime.placement import Placement
from snippets_core.tokenization.tokenize_int8_fc_snippets import DYNAMIC, F32, INT8_FULLY_CONNECTED, QUANTIZED, S8, \
    S32, U8, Int8FCSpec
from snippets_x86_64.brgemm_copy_b_int8 import N_BLOCK, repack_b_int8
from snippets_x86_64.brgemm_int8 import C_DTYPE, C_SIZE, Int8Geometry, Int8Output, int8_function, post_op_vectors
from snippets_x86_64.quantize_int8 import quantize_function, quantize_params
from snippets_x86_64.runtime import POOL, TARGET_NAME
from snippets_x86_64.runtime import _address as address  # 0.15 us; .ctypes.data ~2

#: rows per kernel call (the kernel's N-block loop walks them while a 64-column block of B stays in L1/L2)
ROW_BLOCK = 128
#: fewest rows a thread gets when the rows are split
MIN_ROWS_PER_THREAD = 8
OUTPUTS = {F32: Int8Output.F32, U8: Int8Output.U8, S8: Int8Output.S8, S32: Int8Output.S32}


class Int8FCExecutor:
    """Runs one int8 FullyConnected Subgraph (see the module docstring); ``threads`` split its rows or columns."""

    def __init__(self, spec: Int8FCSpec, threads: int) -> None:
        self.spec = spec
        self.threads = max(1, threads)
        self.packed = repack_b_int8(spec.weight)
        self.output = OUTPUTS[spec.output]
        self.has_bias = self.output in (Int8Output.U8, Int8Output.S8) or spec.bias is not None
        if spec.source != DYNAMIC:
            self.vectors = self.vectors_for(spec.a_scale, spec.a_zero_point)
            self.qparams = quantize_params(spec.a_scale, spec.a_zero_point, spec.a_signed)
        #: the addresses of the constant grid's vectors (``.ctypes`` costs ~1 us an array per call)
        self._vector_addrs = tuple(v.ctypes.data for v in self.vectors) if spec.source != DYNAMIC else None
        self._plans: dict[int, list[tuple[int, int, int, int]]] = {}
        #: per task of a plan: (first column, [(kernel, A byte offset, packed B address, C byte offset)])
        self._calls: dict[tuple[int, int, int, int], tuple[int, list[tuple[Any, int, int, int]]]] = {}
        self._k = spec.k
        self._lock = threading.Lock()
        self._scratch = np.empty(0, np.uint8)
        self._on_target = Placement(TARGET_NAME)
        #: where the last call ran (the snippets_core.runtime.placement protocol): always here
        self.last_placement = self._on_target

    def vectors_for(self, a_scale: float, a_zero_point: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(comp s32, scale f32, bias f32) for A's grid ``(a_scale, a_zero_point)``."""
        s = self.spec
        if s.source == DYNAMIC:
            # the graph computes Cast(acc) * (x_scale * w_scale) in f32: the same product, rounded the same way
            comp = self.packed.compensation(a_zero_point, False)
            bias = s.bias if s.bias is not None else np.zeros(s.n, np.float32)
            return comp, np.float32(a_scale) * s.w_scale, bias
        y_scale = s.y_scale if self.output in (Int8Output.U8, Int8Output.S8) else None
        return post_op_vectors(self.packed, a_scale, a_zero_point, s.a_signed, s.w_scale, s.bias, y_scale,
                               s.y_zero_point)

    def _geometry(self, rows: int, width: int) -> Int8Geometry:
        s = self.spec
        return Int8Geometry(rows, width, s.k, lda=s.k, ldc=s.n, a_signed=s.a_signed, output=self.output,
                            compensation=True, bias=self.has_bias)

    def plan(self, m: int) -> list[tuple[int, int, int, int]]:
        """Per thread: (first row, rows, first N block, N blocks); every kernel it needs compiled."""
        found = self._plans.get(m)
        if found is not None:
            return found
        n_blocks = -(-self.spec.n // N_BLOCK)
        parts = min(self.threads, m // MIN_ROWS_PER_THREAD)
        if parts >= 2:
            bounds = [round(m * p / parts) for p in range(parts + 1)]
            plan = [(bounds[p], bounds[p + 1] - bounds[p], 0, n_blocks) for p in range(parts)]
        elif self.threads >= 2 and n_blocks >= 2 and m:
            parts = min(self.threads, n_blocks)
            bounds = [round(n_blocks * p / parts) for p in range(parts + 1)]
            plan = [(0, m, bounds[p], bounds[p + 1] - bounds[p]) for p in range(parts)]
        else:
            plan = [(0, m, 0, n_blocks)] if m else []
        for _, rows, nb0, nbs in plan:
            for r in {min(ROW_BLOCK, rows), rows % ROW_BLOCK} - {0}:
                int8_function(self._geometry(r, self._width(nb0, nbs)))
        if self.spec.source != QUANTIZED:
            quantize_function(self.spec.k)
        self._plans[m] = plan
        return plan

    def _width(self, nb0: int, nbs: int) -> int:
        return min(self.spec.n, (nb0 + nbs) * N_BLOCK) - nb0 * N_BLOCK

    def __call__(self, args: Sequence[Any], outs: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        s = self.spec
        x = np.asarray(args[s.a_index])
        want = np.float32 if s.source != QUANTIZED else (np.int8 if s.a_signed else np.uint8)
        if x.dtype != want or x.ndim < 2 or x.shape[-1] != s.k:
            raise InputError(f"the int8 FullyConnected takes {np.dtype(want)} [.., M, {s.k}], got {x.dtype} "
                             f"{list(x.shape)}")
        lead = x.shape[:-1]
        m = math.prod(lead)
        x2 = np.ascontiguousarray(x).reshape(m, s.k)
        dtype = C_DTYPE[self.output]
        out = outs[0] if outs is not None and outs[0] is not None else np.empty((*lead, s.n), dtype)
        if out.dtype != dtype or out.shape != (*lead, s.n) or not out.flags.c_contiguous or not out.flags.writeable:
            raise InputError(f"output array 0 must be a writeable C-contiguous {np.dtype(dtype)}{[*lead, s.n]}")
        if s.source == DYNAMIC:
            scale, zp = dynamic_quantization_grid(x2)
            a_scale, a_zp = float(scale), int(zp)
            vectors, qparams = self.vectors_for(a_scale, a_zp), quantize_params(a_scale, a_zp, False)
        elif s.source != QUANTIZED:
            vectors, qparams = self.vectors, self.qparams
        else:
            vectors, qparams = self.vectors, None
        self.multiply(x2, out.reshape(m, s.n), vectors, qparams)
        return [out]

    def multiply(self, x2: np.ndarray, c2: np.ndarray, vectors: tuple[np.ndarray, np.ndarray, np.ndarray],
                 qparams: np.ndarray | None) -> None:
        """``c2 [M, N] = post(quantize(x2) @ W)``: ``x2`` [M, K] f32 quantized with ``qparams`` (None: x2 holds
        the int8 A), ``vectors`` the (comp, scale, bias) of A's grid; rows or N blocks split between the threads."""
        s = self.spec
        m = x2.shape[0]
        plan = self.plan(m)
        own = qparams is not None and self._lock.acquire(blocking=False)
        try:  # the quantized A's buffer is kept between calls (fresh pages cost more than the quantization)
            if qparams is None:
                q = x2
            elif own:
                if self._scratch.size < m * s.k:
                    self._scratch = np.empty(m * s.k, np.uint8)
                q = self._scratch[: m * s.k].reshape(m, s.k)
            else:  # a concurrent call
                q = np.empty((m, s.k), np.uint8)
            split_n = len(plan) > 1 and plan[0][1] == m
            if qparams is not None and (split_n or len(plan) == 1):
                quantize_function(self._k)(address(x2), address(q), m, address(qparams))
                qparams = None
            if len(plan) == 1:  # no hand-off to make
                self._run(plan[0], x2, q, c2, vectors, qparams)
            else:
                POOL.run([lambda t=t: self._run(t, x2, q, c2, vectors, qparams) for t in plan])
        finally:
            if own:
                self._lock.release()
        self.last_placement = self._on_target

    def _run(self, task: tuple[int, int, int, int], x: np.ndarray, q: np.ndarray, c: np.ndarray,
             vectors: tuple[np.ndarray, np.ndarray, np.ndarray], qparams: np.ndarray | None) -> None:
        """One thread's rows x N blocks: quantize its rows (when not done yet), then the kernel per row block."""
        k = self._k
        r0, rows, nb0, nbs = task
        if qparams is not None:
            quantize_function(k)(x.ctypes.data + r0 * k * 4, q.ctypes.data + r0 * k, rows, qparams.ctypes.data)
        calls = self._calls.get(task)
        if calls is None:  # resolved once per task: a head of one row is a few us of kernel and was 16 of Python
            n0 = nb0 * N_BLOCK
            width = self._width(nb0, nbs)
            b = self.packed.data.ctypes.data + self.packed.block_offset(nb0)
            calls = self._calls[task] = (n0, [(int8_function(self._geometry(min(ROW_BLOCK, r0 + rows - r), width)),
                                               r * k, b, (r * self.spec.n + n0) * C_SIZE[self.output])
                                              for r in range(r0, r0 + rows, ROW_BLOCK)])
        n0, fns = calls
        addrs = self._vector_addrs if vectors is getattr(self, "vectors", None) else [v.ctypes.data for v in vectors]
        comp, scale, bias = (a + n0 * 4 for a in addrs)
        qa, ca = address(q), address(c)
        for fn, a_at, b, c_at in fns:
            fn(qa + a_at, b, ca + c_at, comp, scale, bias)

    def describe(self) -> str:
        threads = f", rows or N blocks split over {self.threads} threads" if self.threads > 1 else ""
        return f"int8 FullyConnected on the VNNI Brgemm: {self.spec.describe()}{threads}"


def _release_weight_inputs(sg: Subgraph, spec: Int8FCSpec) -> None:
    """The f32 weight the tokenizer left outside the body (a Constant feeding the Subgraph, read only by its
    reference) replaced by a zero-stride placeholder where this Subgraph is its only reader: the kernel reads the
    spec's int8 copy, and the body cannot be evaluated any more (``release_constants`` marked it)."""
    keep = {spec.a_index, spec.residual_index()}
    for i, port in enumerate(sg.inputs):
        node = port.source.node
        value = getattr(node, "value", None)
        if i in keep or node.type_name != "Constant" or not isinstance(value, np.ndarray) or value.size <= 64:
            continue
        if all(c is sg for c in node.consumers()):
            node.value = np.broadcast_to(np.zeros((), value.dtype), value.shape)  # type: ignore[attr-defined]


def int8_fc_executor(sg: Subgraph, threads: int) -> Any:
    """The executor of an int8 FullyConnected (or convolution) Subgraph; with static rows, its kernels are compiled
    now."""
    spec = sg.rt_info[INT8_FULLY_CONNECTED]
    if spec.conv is not None:
        from snippets_x86_64.int8_conv_executor import int8_conv_executor

        x = sg.inputs[spec.a_index].shape
        ex = int8_conv_executor(spec, threads, x.to_tuple()[0] if x.is_static else None)
        # the kernel reads its own int8 weight (packed per batch size from the spec's): the body's f32 weight
        # constants are held no more (evaluating the body is then a ConstantsReleasedError)
        release_constants(sg, "packed into the int8 conv kernel's weights")
        _release_weight_inputs(sg, spec)
        return ex
    ex = Int8FCExecutor(spec, threads)
    x = sg.inputs[ex.spec.a_index].shape
    if x.is_static:
        ex.plan(math.prod(x.to_tuple()[:-1]))
    return ex


__all__ = ["MIN_ROWS_PER_THREAD", "ROW_BLOCK", "Int8FCExecutor", "int8_fc_executor"]

"""The executor of an int8 FullyConnected Subgraph (TokenizeInt8FCSnippets): the VNNI Brgemm on the int8 weight.

At compile time the weight is repacked once (:func:`~snippets_x86_64.brgemm_copy_b_int8.repack_b_int8`) and the
post-op vectors are made: the compensation of A's zero point and of the s8 shift, ``a_scale * w_scale[n]`` and the
bias (divided by the output scale, plus its zero point, when requantizing). A call is one JIT function
(:mod:`~snippets_x86_64.int8_fc_kernel`) over the native pool's threads: each thread quantizes its rows of the f32
x into a byte scratch (the JIT quantizer, :mod:`~snippets_x86_64.quantize_int8`, on the constant grid of the Q->DQ
pair) and runs the int8 Brgemm with the dequantize / requantize post-ops in registers, storing f32, u8/s8 or s32.

The row count is a runtime parameter of that function: one compiled function per way of splitting (rows, N blocks)
serves every M, so a new sequence length builds nothing. Rows are split between the threads (each quantizes and
multiplies its own); an FC with fewer than :data:`MIN_ROWS_PER_THREAD` rows per thread splits N instead, in whole
64-column blocks of the packed weight (A quantized once, first); one with less than ``parallel_min_ns`` of
estimated work per thread runs on the caller.

Dynamic quantization (DynamicQuantizeLinear) is JIT code too: x's min and max come from a reduce over the same rows
and threads (:func:`~snippets_x86_64.int8_fc_kernel.minmax_function`), then one function makes the grid, the
compensation ``zp * colsum[n]`` and the scales ``x_scale * w_scale[n]`` of the call
(:func:`~snippets_x86_64.int8_fc_kernel.dynamic_grid_function`) into buffers kept between calls.
"""

from __future__ import annotations

import ctypes
import math
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from snippets_core.errors import InputError
from snippets_core.ir.ops.subgraph import Subgraph, release_constants
from snippets_core.runtime.placement import Placement
from snippets_core.tokenization.tokenize_int8_fc_snippets import DYNAMIC, F32, INT8_FULLY_CONNECTED, QUANTIZED, S8, \
    S32, U8, Int8FCSpec
from snippets_x86_64.brgemm_copy_b_int8 import repack_b_int8
from snippets_x86_64.brgemm_int8 import C_DTYPE, Int8Output, post_op_vectors
from snippets_x86_64.int8_fc_kernel import ARGS, COLS, GRID_ARGS, ROW_BLOCK, ROWS, Int8FCKernelKey, \
    dynamic_grid_function, int8_fc_function, minmax_function
from snippets_x86_64.int8_matmul_executor import INT8_MACS_PER_NS
from snippets_x86_64.native_pool import SplitCall, split_items
from snippets_x86_64.quantize_int8 import quantize_function, quantize_params
from snippets_x86_64.runtime import PARALLEL_MIN_NS, TARGET_NAME
from snippets_x86_64.runtime import _address as address  # 0.15 us; .ctypes.data ~2

#: fewest rows a thread gets when the rows are split
MIN_ROWS_PER_THREAD = 8
#: row counts whose split is remembered (a plan is a few list operations: the cache only keeps the chunk lists the
#: native calls hold the same objects, so a repeated M rewrites no Job words)
PLANS_KEPT = 64
OUTPUTS = {F32: Int8Output.F32, U8: Int8Output.U8, S8: Int8Output.S8, S32: Int8Output.S32}


class Int8FCExecutor:
    """Runs one int8 FullyConnected Subgraph (see the module docstring); ``threads`` split its rows or columns
    when each gets ``parallel_min_ns`` of estimated work."""

    def __init__(self, spec: Int8FCSpec, threads: int, parallel_min_ns: int = PARALLEL_MIN_NS) -> None:
        self.spec = spec
        self.threads = max(1, threads)
        self.parallel_min_ns = parallel_min_ns
        self.packed = repack_b_int8(spec.weight)
        self.output = OUTPUTS[spec.output]
        self.has_bias = self.output in (Int8Output.U8, Int8Output.S8) or spec.bias is not None
        quantize = spec.source != QUANTIZED
        # the chain after the dequantization (Q->DQ pairs, the bias after one, ...): its vectors in one [count, N]
        # array the kernel reads, each op named by its row there
        post, rows = [], []
        for kind, p in spec.post_ops:
            if kind in ("add_c", "mul_c"):
                post.append((kind, len(rows)))
                rows.append(np.asarray(p, np.float32).reshape(spec.n))
            else:
                post.append((kind, p))
        self.post_vectors = np.array(rows, np.float32).reshape(len(rows), spec.n)
        key = Int8FCKernelKey(spec.k, spec.n, spec.a_signed, self.output, self.has_bias, quantize, ROWS, tuple(post))
        #: every function a call may use, compiled now: a new M compiles nothing
        self.functions = {ROWS: int8_fc_function(key)}
        if self.threads > 1 and key.blocks > 1:
            self.functions[COLS] = int8_fc_function(replace(key, quantize=False, mode=COLS))
        self._quantize = quantize_function(spec.k) if quantize else None
        self.n_blocks = key.blocks
        #: per (mode, threads): the native call (its argument block and Job made once)
        self._calls = {(mode, p): SplitCall(fn, len(ARGS), [(0, 0)] * p) for mode, fn in self.functions.items()
                       for p in range(1, self.threads + 1)}
        #: per M: (mode, chunks, the min/max reduce's chunks and their first rows as int64)
        self._plans: dict[int, tuple[str, list[tuple[int, int]], list[tuple[int, int]], np.ndarray]] = {}
        if spec.source == DYNAMIC:
            self._minmax = {p: SplitCall(minmax_function(spec.k), 2, [(0, 0)] * p)
                            for p in range(1, self.threads + 1)}
            self._grid = dynamic_grid_function(spec.n)
            self.colsum = self.packed.compensation(255, False) // 255  # checked: 255 * colsum fits int32
            self.w_scale = np.array(np.broadcast_to(np.asarray(spec.w_scale, np.float32), (spec.n,)))
            self.bias = (spec.bias if spec.bias is not None else np.zeros(spec.n, np.float32)).astype(np.float32)
            self.vectors = (np.empty(spec.n, np.int32), np.empty(spec.n, np.float32), self.bias)
            self.qparams = np.zeros(4, np.float32)
            self._range = np.empty(0, np.float32)
            self._grid_args = self._grid_block(self.qparams, *self.vectors[:2])
        else:
            y_scale = spec.y_scale if self.output in (Int8Output.U8, Int8Output.S8) else None
            self.vectors = post_op_vectors(self.packed, spec.a_scale, spec.a_zero_point, spec.a_signed,
                                           spec.w_scale, spec.bias, y_scale, spec.y_zero_point)
            self.qparams = quantize_params(spec.a_scale, spec.a_zero_point, spec.a_signed)
        self._bound: tuple[Any, ...] = ()
        self._words: list[int] = []
        self._lock = threading.Lock()
        self._scratch = np.empty(0, np.uint8)
        self._on_target = Placement(TARGET_NAME)
        #: where the last call ran (the snippets_core.runtime.placement protocol): always here
        self.last_placement = self._on_target

    def plan(self, m: int) -> tuple[str, list[tuple[int, int]]]:
        """How ``m`` rows are split: (``rows``, [(first row, rows)] per thread) or (``cols``, [(first N block,
        blocks)] per thread). Plain arithmetic: every function it names is already compiled."""
        return self._plan(m)[:2]

    def _plan(self, m: int) -> tuple[str, list[tuple[int, int]], list[tuple[int, int]], np.ndarray]:
        found = self._plans.get(m)
        if found is not None:
            return found
        s = self.spec
        by_work = self.threads
        if self.parallel_min_ns > 0:
            by_work = int(m * s.n * s.k / INT8_MACS_PER_NS // self.parallel_min_ns)
        parts = max(1, min(self.threads, by_work))
        if parts >= 2 and m >= parts * MIN_ROWS_PER_THREAD:
            plan = (ROWS, split_items(m, parts))
        elif parts >= 2 and COLS in self.functions:
            plan = (COLS, split_items(self.n_blocks, parts))
        else:
            plan = (ROWS, [(0, m)])
        reduce = plan[1] if plan[0] == ROWS else [(0, m)]  # N split: the rows are whole on each thread
        full = (*plan, reduce, np.array([r for r, _ in reduce], np.int64))
        if len(self._plans) >= PLANS_KEPT:
            self._plans.clear()
        self._plans[m] = full
        return full

    def _static_words(self) -> list[int]:
        """The argument words that do not change between calls (the weight, the constant grid's vectors), read
        again when a test has swapped the arrays for guarded copies."""
        bound = self._bound
        if not bound or bound[0] is not self.packed or bound[1] is not self.vectors or bound[2] is not self.qparams:
            comp, scale, bias = (address(v) for v in self.vectors)
            params = address(self.qparams) if self._quantize is not None else 0
            post = address(self.post_vectors) if self.post_vectors.size else 0
            self._words = [0, 0, 0, params, comp, scale, bias if self.has_bias else 0, address(self.packed.data), 0,
                           post]
            self._bound = (self.packed, self.vectors, self.qparams)
        return self._words

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
        if m:
            own = self._lock.acquire(blocking=False)
            try:
                self._multiply(x2, out, m, own)
            finally:
                if own:
                    self._lock.release()
        self.last_placement = self._on_target
        return [out]

    def _multiply(self, x2: np.ndarray, out: np.ndarray, m: int, own: bool) -> None:
        """One call on ``m`` rows; ``own``: this call holds the buffers kept between calls (else it makes its
        own: another thread runs this executor now)."""
        s = self.spec
        mode, chunks, reduce, starts = self._plan(m)
        words = list(self._static_words())
        xa = address(x2)
        words[0], words[2], words[8] = xa, address(out), m
        if self._quantize is None:
            words[1] = xa
        else:
            # the quantized rows' buffer is kept between calls (fresh pages cost more than the quantization)
            if not own:
                q = np.empty(m * s.k, np.uint8)
            elif self._scratch.size < m * s.k:
                q = self._scratch = np.empty(m * s.k, np.uint8)
            else:
                q = self._scratch
            words[1] = address(q)
            if s.source == DYNAMIC:  # (``grid`` holds this call's arrays until the call is done)
                grid = self._dynamic_grid(xa, m, reduce, starts, own)
                words[3:6] = [address(a) for a in grid]
            if mode == COLS:  # the threads share every row: quantized once, here
                self._quantize(xa, words[1], m, words[3])
        self._calls[mode, len(chunks)].run_chunks(chunks, words)

    def _grid_block(self, params: np.ndarray, comp: np.ndarray, scale: np.ndarray) -> ctypes.Array:
        """The argument block of the grid function writing into ``params``, ``comp`` and ``scale``."""
        return (ctypes.c_uint64 * len(GRID_ARGS))(0, 0, 0, address(self.colsum), address(self.w_scale),
                                                  address(params), address(comp), address(scale))

    def _dynamic_grid(self, xa: int, m: int, parts: list[tuple[int, int]], starts: np.ndarray, own: bool,
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """DynamicQuantizeLinear's grid of the ``m`` rows at ``xa`` and the call's post-op vectors, in JIT code: the
        min and max reduced over ``parts`` on the call's threads, then the grid function. Returns this call's
        (params, comp, scale): the executor's own, or (``own`` False: another thread runs this executor now) new."""
        s = self.spec
        if own:
            if self._range.size < 2 * m:
                self._range = np.empty(2 * m, np.float32)
            rng, block = self._range, self._grid_args
            arrays = (self.qparams, *self.vectors[:2])
        else:
            rng = np.empty(2 * m, np.float32)
            arrays = (np.empty(4, np.float32), np.empty(s.n, np.int32), np.empty(s.n, np.float32))
            block = self._grid_block(*arrays)
        ra = address(rng)
        self._minmax[len(parts)].run_chunks(parts, [xa, ra])
        block[0], block[1], block[2] = ra, len(parts), address(starts)
        self._grid(ctypes.addressof(block))
        return arrays

    def describe(self) -> str:
        threads = (f", rows or N blocks split over {self.threads} threads" if self.threads > 1 else "")
        return (f"int8 FullyConnected on the VNNI Brgemm: {self.spec.describe()}; rows a runtime parameter (blocks of "
                f"{ROW_BLOCK}, every M on the same function){threads}")


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


def int8_fc_executor(sg: Subgraph, threads: int, parallel_min_ns: int = PARALLEL_MIN_NS) -> Any:
    """The executor of an int8 FullyConnected (or convolution) Subgraph, its functions compiled now."""
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
    return Int8FCExecutor(spec, threads, parallel_min_ns)


__all__ = ["MIN_ROWS_PER_THREAD", "ROW_BLOCK", "Int8FCExecutor", "int8_fc_executor"]

"""The executor of an int8 MHA Subgraph: a QDQ attention on the kernel of :mod:`~snippets_x86_64.int8_mha`.

Per call: Q, K and V (f32 values on their grids) are quantized whole by the JIT quantizer (exact: the values are on
the grid), K and V straight to the s8 bytes the Brgemm reads (``k - 128`` for a u8 K: the quantizer's zero point
moved by -128), the rows split between threads; the mask branch is evaluated once per distinct mask (the side
vectors); then the kernel runs head by head (it repacks the head's K^T and V itself, the int8 copy-B), the heads
split between threads, each thread with its own scratch. Both phases are call tables (:func:`build_call_table`)
run on the native pool: no Python per head, no Python thread woken. One kernel per head dims and strides serves every
sequence length and batch: the rows of Q and the sequence are in a runtime-parameter block at the start of each
thread's scratch (``MHAGeometry.params``), rewritten only when the shape changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from snippets_core.errors import InputError
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.runtime.placement import Placement
from snippets_x86_64.brgemm_copy_b_int8 import S8_SHIFT
from snippets_x86_64.int8_matmul_executor import INT8_MACS_PER_NS
from snippets_x86_64.int8_mha import COLS, Int8MHAPlan, MHAGeometry, evaluate_side, int8_mha_function
from snippets_x86_64.asm import Function, qword, r8, r9, r12, rax, rbx, rcx, rdi, rdx, rsi
from snippets_x86_64.cache import FUNCTION_CACHE, HARNESS_ARGTYPES
from snippets_x86_64.jit import JitFunction
from snippets_x86_64.native_pool import SplitCall, split_items
from snippets_x86_64.quantize_int8 import quantize_function, quantize_params
from snippets_x86_64.runtime import TARGET_NAME
from snippets_x86_64.runtime import _address

#: qwords of one call record of a call table: the function, its six integer arguments, padding
RECORD = 8


def build_call_table(records: int) -> JitFunction:
    """``calls(unused, args, start, count)``, a native-pool harness: items ``start .. start + count`` of the call
    table at ``args[0]``, each ``records`` records ``[f, a0, .., a5, 0]``, calling ``f(a0, .., a5)`` (a record
    whose ``f`` is 0 is skipped: a thread with no rows of a tensor to quantize)."""
    fn = Function("int8_mha_calls", args=("unused", "args", "start", "count"))
    fn.imul(rbx, fn.arg("start"), records * RECORD * 8)
    fn.add(rbx, qword[fn.arg("args")])
    fn.mov(r12, fn.arg("count"))
    fn.test(r12, r12)
    fn.jz(fn.exit)
    top = fn.label("int8_mha_calls.item")
    for r in range(records):
        skip = fn.new_label(f"int8_mha_calls.skip{r}")
        fn.mov(rax, qword[rbx])
        fn.test(rax, rax)
        fn.jz(skip)
        for i, reg in enumerate((rdi, rsi, rdx, rcx, r8, r9)):
            fn.mov(reg, qword[rbx + 8 * (i + 1)])
        fn.call(rax)
        fn.bind(skip)
        fn.add(rbx, RECORD * 8)
    fn.dec(r12)
    fn.jnz(top)
    return fn.finalize(None, HARNESS_ARGTYPES)


class _CallTable:
    """A call table run over fixed chunks of items on the native pool (chunk 0 on the caller): one native call
    per phase, no Python per head, no thread pool hand-over through Python (a sleeping Python worker takes
    20-60 us to wake on a VM, more than the quantizing it would do)."""

    def __init__(self, records: int, chunks: list[tuple[int, int]]) -> None:
        kernel = FUNCTION_CACHE.get("int8_mha_calls", records, lambda: build_call_table(records), HARNESS_ARGTYPES)
        self.split = SplitCall(kernel, 1, chunks)

    def run_chunks_to(self, chunks: list[tuple[int, int]], table: np.ndarray) -> None:
        self.split.run_chunks(chunks if chunks != self.split.chunks else self.split.chunks, [_address(table)])


class Int8MHAExecutor:
    """Runs one int8 MHA Subgraph (see the module docstring); ``threads`` split its heads."""

    def __init__(self, sg: Subgraph, plan: Int8MHAPlan, threads: int, parallel_min_ns: int) -> None:
        self.plan = plan
        self.name = sg.name
        self.threads = max(1, threads)
        self.parallel_min_ns = parallel_min_ns
        p = plan
        self.params = [quantize_params(p.q.scale, p.q.zero_point, p.q.signed)] + [
            quantize_params(o.scale, o.zero_point - (0 if o.signed else S8_SHIFT), True) for o in (p.k, p.v)]
        self._on_target = Placement(TARGET_NAME)
        #: where the last call ran (the snippets_core.runtime.placement protocol): always here
        self.last_placement = self._on_target
        #: allocates the per-call buffers the kernels read and write (tests put them against guard pages)
        self.empty: Any = np.empty
        self._side_key: list[np.ndarray] | None = None
        self._side: list[np.ndarray] = []
        #: per thread: the scratch, and the (geometry, rows, sequence) its parameter block was written for
        self._scratch: dict[int, np.ndarray] = {}
        self._scratch_key: dict[int, tuple[MHAGeometry, int, int]] = {}
        #: bumped when the mask branch is recomputed (the side vectors are rebuilt from it)
        self._side_version = 0
        self._sides: np.ndarray | None = None
        self._sides_key: tuple[int, int, int] | None = None
        #: the call-table runners, per (phase, thread count)
        self._runners: dict[tuple[int, int], _CallTable] = {}
        #: the call tables' offsets for the last shape (and scratch addresses)
        self._tables_key: tuple[Any, ...] | None = None
        self._tables: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.uint64), np.zeros(0, np.uint64))

    def _check(self, x: np.ndarray, what: str) -> np.ndarray:
        if x.dtype != np.float32 or x.ndim != 4:
            raise InputError(f"int8 MHA '{self.name}': {what} must be a rank-4 float32 array, got {x.dtype} "
                             f"{list(x.shape)}")
        return np.ascontiguousarray(x)

    def side_values(self, args: Sequence[Any]) -> list[np.ndarray]:
        """The mask branch's values, recomputed only when an input it reads changed."""
        key = [np.asarray(args[i]) for i in sorted(set(self.plan.param_index.values()))
               if i not in (self.plan.q.index, self.plan.k.index, self.plan.v.index)]
        if self._side_key is None or len(key) != len(self._side_key) or any(
                a.shape != b.shape or not np.array_equal(a, b) for a, b in zip(key, self._side_key, strict=True)):
            self._side = evaluate_side(self.plan, list(args))
            self._side_version += 1
            self._side_key = [a.copy() for a in key]
        return self._side

    def __call__(self, args: Sequence[Any], outs: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        p = self.plan
        xs = [self._check(np.asarray(args[o.index]), w) for o, w in zip((p.q, p.k, p.v), "QKV", strict=True)]
        qb, kb, vb = (self.empty(x.shape, np.uint8 if i == 0 and not p.q.signed else np.int8)
                      for i, x in enumerate(xs))
        qv, kt, vv = qb.transpose(p.q.perm), kb.transpose(p.k.perm), vb.transpose(p.v.perm)
        (b, h, m, d), s, e = qv.shape, kt.shape[-1], vv.shape[-1]
        if kt.shape != (b, h, d, s) or vv.shape != (b, h, s, e):
            raise InputError(f"int8 MHA '{self.name}': Q {list(qv.shape)}, K^T {list(kt.shape)}, V {list(vv.shape)} "
                             "(planar [batch, heads, ...]) do not match")
        planar = (b, h, m, e)
        shape = planar if p.out_perm is None else tuple(planar[i] for i in p.out_perm)
        out = outs[0] if outs is not None and outs[0] is not None else np.empty(shape, np.float32)
        if out.dtype != np.float32 or out.shape != shape or not out.flags.writeable:
            raise InputError(f"int8 MHA '{self.name}': output array 0 must be a writeable float32{list(shape)}")
        self.last_placement = self._on_target
        if out.size == 0:
            return [out]
        if s == 0 or d == 0:
            raise InputError(f"int8 MHA '{self.name}': an empty sequence or head dim ({s}, {d}) has no softmax")
        ov = out if p.out_perm is None else out.transpose(np.argsort(p.out_perm))
        if ov.strides[-1] != 4 or qv.strides[-1] != 1:
            raise InputError(f"int8 MHA '{self.name}': the output rows or Q rows are not contiguous")
        side = self.side_values(args)
        if kt.strides[-2] != 1 or vv.strides[-1] != 1:
            raise InputError(f"int8 MHA '{self.name}': K's or V's head dim is not innermost")
        # a one-row Q or output has no row stride to speak of: take the one a longer sequence would have, so the
        # same kernel serves it
        lda_q = qv.strides[-2] if m > 1 or qv.strides[-2] >= d else d
        ldo = ov.strides[-2] // 4 if m > 1 or ov.strides[-2] >= 4 * e else e
        g = MHAGeometry(d, e, lda_q, ldo, len(side), kt.strides[-1], vv.strides[-2])
        nb = b * h
        sides = self.side_vectors(side, b, s)
        fn = int8_mha_function(p, g)
        parts = self.parts(nb, m, s, d + e)
        scratch = [self.scratch(g, t, m, s) for t in range(parts)]
        q0, k0, v0, o0, s0 = (_address(x) for x in (qb, kb, vb, out, sides))
        scr = tuple(_address(x) for x in scratch)
        chunks = split_items(nb, parts)
        key = (qv.shape, qv.strides, kt.shape, kt.strides, vv.shape, vv.strides, ov.shape, ov.strides, sides.shape,
               scr, id(fn))
        if self._tables_key != key:
            self._tables = self._call_tables(fn, xs, (qv, kt, vv, ov, sides), scr, chunks)
            self._tables_key = key
        quant_off, heads_off = self._tables
        # the call's arrays: their addresses added to the offsets (one add per table)
        quant = quant_off + np.array([[0, _address(x), y, 0, 0, 0, 0, 0] for x, y in zip(xs, (q0, k0, v0),
                                                                                        strict=True)], np.uint64)
        heads = heads_off + np.array([0, q0, k0, v0, o0, s0, 0, 0], np.uint64)
        self._calls(1, [(t, 1) for t in range(parts)]).run_chunks_to([(t, 1) for t in range(parts)], quant)
        self._calls(0, chunks).run_chunks_to(chunks, heads)
        return [out]

    def _call_tables(self, fn: JitFunction, xs: list[np.ndarray], views: tuple[np.ndarray, ...],
                     scr: tuple[int, ...], chunks: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        """The call tables of a shape, with byte offsets where the call's arrays go (added per call): per thread
        three quantizing records (its rows of Q, K and V), per head the kernel's record."""
        parts = len(scr)
        quant = np.zeros((parts, 3, RECORD), np.uint64)
        for j, (x, prm) in enumerate(zip(xs, self.params, strict=True)):
            k, rows = x.shape[-1], x.size // x.shape[-1]
            bounds = np.arange(parts + 1, dtype=np.uint64) * np.uint64(rows) // np.uint64(parts)
            quant[:, j, 0] = np.where(bounds[1:] > bounds[:-1], quantize_function(k).address, 0)
            quant[:, j, 1] = bounds[:-1] * np.uint64(k * 4)
            quant[:, j, 2] = bounds[:-1] * np.uint64(k)
            quant[:, j, 3] = bounds[1:] - bounds[:-1]
            quant[:, j, 4] = _address(prm)
        qv, kt, vv, ov, sides = views
        nb, h = qv.shape[0] * qv.shape[1], qv.shape[1]
        heads = np.zeros((nb, RECORD), np.uint64)
        bi, hi_ = np.divmod(np.arange(nb, dtype=np.uint64), np.uint64(h))
        heads[:, 0] = fn.address
        for col, x in enumerate((qv, kt, vv, ov), 1):
            heads[:, col] = bi * np.uint64(x.strides[0]) + hi_ * np.uint64(x.strides[1])
        heads[:, 5] = bi * np.uint64(sides.strides[0])
        for (start, count), at in zip(chunks, scr, strict=True):
            heads[start : start + count, 6] = at
        return quant, heads

    def _calls(self, kind: int, chunks: list[tuple[int, int]]) -> _CallTable:
        """The call-table runner of ``kind`` (0: heads, 1: quantizing) for this split."""
        runner = self._runners.get((kind, len(chunks)))
        if runner is None:
            runner = self._runners[(kind, len(chunks))] = _CallTable(3 if kind else 1, chunks)
        return runner

    def side_vectors(self, side: list[np.ndarray], b: int, s: int) -> np.ndarray:
        """The side vectors in groups of 64 columns, as the kernel walks them: [batch, group, side, 64]; rebuilt
        only when the mask branch's values or the shape changed."""
        key = (self._side_version, b, s)
        if self._sides_key == key and self._sides is not None:
            return self._sides
        groups = -(-s // COLS)
        sides = self.empty((b, groups, max(1, len(side)), COLS), np.float32)
        sides.fill(0.0)
        for i, v in enumerate(side):
            v = np.asarray(v, np.float32)
            try:  # [b or 1, 1, .., s]: a value per column (and batch)
                cols = np.zeros((b, groups * COLS), np.float32)
                cols[:, :s] = np.broadcast_to(v.reshape(-1, v.shape[-1]) if v.ndim else v.reshape(1, 1), (b, s))
            except ValueError as exc:
                raise InputError(f"int8 MHA '{self.name}': mask value of shape {list(v.shape)} does not give one "
                                 f"value per column of [{b}, {s}]") from exc
            sides[:, :, i, :] = cols.reshape(b, groups, COLS)
        self._sides, self._sides_key = sides, key
        return sides

    def scratch(self, g: MHAGeometry, t: int, m: int, s: int) -> np.ndarray:
        """Thread ``t``'s scratch for ``m`` rows and a sequence of ``s`` (kept between calls, grown when a longer
        sequence needs more), its runtime-parameter block written when the shape changed."""
        buf = self._scratch.get(t)
        if buf is not None and self._scratch_key.get(t) == (g, m, s):
            return buf
        size = g.scratch_size(s)
        if buf is None or buf.size < size:
            buf = self._scratch[t] = self.empty(size, np.uint8)
        prm = g.params(m, s, buf.ctypes.data)
        buf[: prm.nbytes] = prm.view(np.uint8)
        self._scratch_key[t] = (g, m, s)
        return buf

    def parts(self, nb: int, m: int, s: int, de: int) -> int:
        """How many threads share the ``nb`` heads: each gets ``parallel_min_ns`` of estimated work at least."""
        work_ns = nb * m * s * de / INT8_MACS_PER_NS
        by_work = int(work_ns // self.parallel_min_ns) if self.parallel_min_ns > 0 else nb
        return max(1, min(self.threads, nb, by_work))

    def describe(self) -> str:
        threads = f", heads split over {self.threads} threads" if self.threads > 1 else ""
        return self.plan.describe() + "; one kernel for every sequence length (runtime parameters)" + threads


__all__ = ["Int8MHAExecutor"]

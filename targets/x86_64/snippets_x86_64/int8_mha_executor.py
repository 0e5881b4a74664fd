"""The executor of an int8 MHA Subgraph: a QDQ attention on the kernel of :mod:`~snippets_x86_64.int8_mha`.

Per call: Q, K and V (f32 values on their grids) are quantized whole by the JIT quantizer (exact: the values are on
the grid), K and V straight to the s8 bytes the Brgemm reads (``k - 128`` for a u8 K: the quantizer's zero point
moved by -128); K^T (with its column of ones) and V are repacked into the VNNI layout for every head at once
(:func:`pack_words`); the mask branch is evaluated once per distinct mask (the side vectors); then the kernel runs
head by head, the heads split between threads, each thread with its own scratch. The sizes are read at run time:
a kernel per (rows, sequence, strides), compiled once and cached.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from snippets_core.errors import InputError
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.runtime.placement import Placement
from snippets_x86_64.brgemm_copy_b_int8 import K_GROUP, LANES, N_BLOCK, S8_SHIFT
from snippets_x86_64.int8_matmul_executor import INT8_MACS_PER_NS
from snippets_x86_64.int8_mha import Int8MHAPlan, Int8Operand, MHAGeometry, evaluate_side, int8_mha_function, pad
from snippets_x86_64.quantize_int8 import quantize_function, quantize_params
from snippets_x86_64.runtime import POOL, TARGET_NAME

#: the 4 bytes of a column of ones in one VNNI word
ONES_WORD = 0x01010101


def pack_words(w: np.ndarray, out: np.ndarray) -> None:
    """``w`` [nb, G, Np] (int32 VNNI words: K group, column) into ``out`` [nb, G * Np] in the Brgemm's order: N
    blocks of 64 columns, each [G, width] (:mod:`~snippets_x86_64.brgemm_copy_b_int8`)."""
    nb, g, np_ = w.shape
    full = np_ // N_BLOCK * N_BLOCK
    if full:
        out[:, : full * g].reshape(nb, full // N_BLOCK, g, N_BLOCK)[...] = \
            w[:, :, :full].reshape(nb, g, full // N_BLOCK, N_BLOCK).transpose(0, 2, 1, 3)
    if np_ > full:
        out[:, full * g :].reshape(nb, g, np_ - full)[...] = w[:, :, full:]


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
        self._scratch: dict[tuple[MHAGeometry, int], np.ndarray] = {}

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
        g = MHAGeometry(m, s, d, e, qv.strides[-2] if m > 1 else d, ov.strides[-2] // 4 if m > 1 else e, len(side))
        nb = b * h
        sides = self.empty((b, max(1, len(side)), g.np_), np.float32)
        sides.fill(0.0)
        for i, v in enumerate(side):
            v = np.asarray(v, np.float32)
            try:  # [b or 1, 1, .., s]: a value per column (and batch)
                sides[:, i, :s] = np.broadcast_to(v.reshape(-1, v.shape[-1]) if v.ndim else v.reshape(1, 1), (b, s))
            except ValueError as exc:
                raise InputError(f"int8 MHA '{self.name}': mask value of shape {list(v.shape)} does not give one "
                                 f"value per column of [{b}, {s}]") from exc
        fn = int8_mha_function(p, g)
        kp = self.empty((nb, pad(d, K_GROUP) // K_GROUP * g.np_), np.int32)
        vp = self.empty((nb, pad(s, K_GROUP) // K_GROUP * g.ep), np.int32)
        kp_bytes, vp_bytes = kp.shape[1] * 4, vp.shape[1] * 4
        qs, os_ = qv.strides, ov.strides
        parts = self.parts(nb, m, s, d + e)
        scratch = [self.scratch(g, t) for t in range(parts)]
        # the addresses once (``ndarray.ctypes`` costs microseconds per access)
        q0, k0, v0, o0, s0 = (x.ctypes.data for x in (qb, kp, vp, out, sides))
        calls = [(q0 + bi * qs[0] + hi_ * qs[1], k0 + i * kp_bytes, v0 + i * vp_bytes, o0 + bi * os_[0] + hi_ * os_[1],
                  s0 + bi * sides.strides[0]) for i in range(nb) for bi, hi_ in [divmod(i, h)]]
        scr = [x.ctypes.data for x in scratch]
        quant = [(quantize_function(x.shape[-1]), x.ctypes.data, q.ctypes.data, x.shape[-1], x.size // x.shape[-1],
                  prm.ctypes.data) for x, q, prm in zip(xs, (qb, kb, vb), self.params, strict=True)]

        def quantize(t: int) -> None:  # rows of Q, K, V: each thread a share of every tensor
            for f, x0, y0, k, rows, prm in quant:
                lo, hi = rows * t // parts, rows * (t + 1) // parts
                if hi > lo:
                    f(x0 + lo * k * 4, y0 + lo * k, hi - lo, prm)

        def run(t: int) -> None:  # heads lo..hi: K^T and V repacked, then the kernel per head
            lo, hi = nb * t // parts, nb * (t + 1) // parts
            for bi in range(lo // h, -(-hi // h)):
                h0, h1 = max(lo - bi * h, 0), min(hi - bi * h, h)
                self.pack_k(kt[bi, h0:h1], g, kp[bi * h + h0 : bi * h + h1])
                self.pack_v(vv[bi, h0:h1], g, vp[bi * h + h0 : bi * h + h1])
            for i in range(lo, hi):
                fn(*calls[i], scr[t])

        POOL.run([lambda t=t: quantize(t) for t in range(parts)])
        POOL.run([lambda t=t: run(t) for t in range(parts)])
        return [out]

    def scratch(self, g: MHAGeometry, t: int) -> np.ndarray:
        """Thread ``t``'s scratch for kernels of ``g`` (kept between calls)."""
        buf = self._scratch.get((g, t))
        if buf is None:
            buf = self._scratch[(g, t)] = self.empty(g.scratch_layout()["size"], np.uint8)
        return buf

    def pack_k(self, kt: np.ndarray, g: MHAGeometry, out: np.ndarray) -> None:
        """K'^T [nh, d, s] (s8) of ``nh`` heads into ``out`` [nh, words] in the VNNI layout, with a column of ones
        after the last (column S of the scores is then Q's row sum)."""
        nh, d, s = kt.shape
        dp, gk = pad(d, K_GROUP), pad(d, K_GROUP) // K_GROUP
        kn = kt.swapaxes(-1, -2)  # [nh, s, d]: a column's 4 K are consecutive bytes of a row
        if kn.strides[-1] != 1 or d != dp:
            padded = np.zeros((nh, s, dp), np.int8)
            padded[..., :d] = kn
            kn = padded
        w = np.zeros((nh, gk, g.np_), np.int32)
        w[..., :s] = kn.view(np.int32).transpose(0, 2, 1)  # [nh, s, gk] words -> [nh, gk, s]
        w[:, :, s] = ONES_WORD
        if d % K_GROUP:  # the ones stop at d: the last group's padding bytes stay zero
            w[:, -1, s] = ONES_WORD & ((1 << (8 * (d % K_GROUP))) - 1)
        pack_words(w, out)

    def pack_v(self, vv: np.ndarray, g: MHAGeometry, out: np.ndarray) -> None:
        """V' [nh, s, e] (s8) of ``nh`` heads into ``out`` [nh, words] in the VNNI layout: 4 consecutive rows of a
        column in one word."""
        nh, s, e = vv.shape
        sp4 = pad(s, K_GROUP)
        w = np.zeros((nh, sp4 // K_GROUP, g.ep, K_GROUP), np.int8)
        for i in range(K_GROUP):  # byte i of every word: rows i, i + 4, .. (four strided copies, not one byte gather)
            rows = vv[:, i::K_GROUP, :]
            w[:, : rows.shape[1], :e, i] = rows
        pack_words(w.view(np.int32).reshape(nh, sp4 // K_GROUP, g.ep), out)

    def parts(self, nb: int, m: int, s: int, de: int) -> int:
        """How many threads share the ``nb`` heads: each gets ``parallel_min_ns`` of estimated work at least."""
        work_ns = nb * m * s * de / INT8_MACS_PER_NS
        by_work = int(work_ns // self.parallel_min_ns) if self.parallel_min_ns > 0 else nb
        return max(1, min(self.threads, nb, by_work))

    def describe(self) -> str:
        threads = f", heads split over {self.threads} threads" if self.threads > 1 else ""
        return self.plan.describe() + threads


__all__ = ["Int8MHAExecutor", "pack_words"]

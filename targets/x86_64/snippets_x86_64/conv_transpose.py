"""ConvTranspose (ONNX ConvTranspose, the IR's ConvolutionBackpropData) as JIT convolutions: the sub-pixel
decomposition, on the conv kernel of :mod:`snippets_x86_64.conv`.

Output pixel ``o`` (along one axis, ``u = o + pad_begin`` in the uncropped result) sums ``x[i] * w[k]`` over
``s * i + k == u``. Its phase ``r = u mod s`` fixes the taps ``k = r, r + s, r + 2s, ...`` (``Kr = ceil((K - r) /
s)`` of them) and, with ``u = s q + r``, ``y[o] = sum_j x[q - j] * w[r + s j]``: a stride-1 convolution of ``x``
with that phase's taps, flipped. So a stride-``s`` ConvTranspose is ``s * s`` small dense convolutions (2x2 kernel,
stride 2: four 1x1; 4x4 stride 2: four 2x2), each writing every ``s``-th output pixel of every ``s``-th row: the
conv kernel's store pitch is ``s * M`` channels (``ConvGeometry.out_pitch``) and the work table's output row
offsets step ``s`` rows. No zeros are inserted and none multiplied: every FMA is a tap that contributes.

The phases read one zero-padded NHWC copy of the input (the rows and columns each phase reaches past the image);
their weights (``[C, M, KH, KW]`` into per-phase ``[M, C, Krh, Krw]``, flipped, then the conv packing, with the
bias/BatchNormalization fold and the post-ops of a conv primitive) are packed once; phases with the same kernel
share it, and their tables run in one dispatch split over the threads. Every output pixel belongs to exactly one
phase, so the output needs no clearing. Groups, dilations and a kernel smaller than the stride (a phase with no tap)
are not covered: the Subgraph runs on its reference with the reason (:func:`transpose_reject_reason`).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from snippets_x86_64.aligned import empty_aligned
from snippets_x86_64.cache import FUNCTION_CACHE, HARNESS_ARGTYPES
from snippets_x86_64.conv import ARG_POST, ROW, VEC, ConvGeometry, PostOp, build_conv_kernel, kernel_key, \
    pack_channels, pack_weights
from snippets_x86_64.conv_executor import MIN_FLOPS_PER_THREAD, split_items
from snippets_x86_64.reorder import run_split


def transpose_reject_reason(op: Any, x_shape: tuple[int, ...]) -> str | None:
    """None when the JIT ConvTranspose covers ``op`` (a ConvolutionBackpropData) on inputs of ``x_shape``."""
    w = op.inputs[1].shape.to_tuple()
    if len(w) != 4 or len(x_shape) != 4:
        return f"it is a {len(w) - 2}-D ConvTranspose; the JIT kernel is 2-D"
    if op.group != 1:
        return f"its group is {op.group}; the JIT ConvTranspose takes group 1"
    kernel = w[2:]
    geo = op._geometry(kernel)
    if any(d != 1 for d in geo.dilations):
        return f"its dilations are {tuple(geo.dilations)}; the JIT ConvTranspose takes 1"
    if any(k < s for k, s in zip(kernel, geo.strides)):
        return f"its kernel {tuple(kernel)} is smaller than its strides {tuple(geo.strides)} (phases with no tap)"
    _, pbs, _ = op._resolve(x_shape[2:], kernel)
    if any(p < 0 for p in pbs):
        return f"its begin pads {tuple(pbs)} are negative (an output larger than the full result)"
    return None


class _Axis:
    """One spatial axis: input size, kernel, stride, begin pad and output size; per phase ``r``: the taps ``Kr``
    and the range ``q0 .. q1`` of the phase's outputs ``o = s q + r - pad``."""

    def __init__(self, size: int, k: int, s: int, pad: int, out: int) -> None:
        self.size, self.k, self.s, self.pad, self.out = size, k, s, pad, out
        self.taps = [-(-(k - r) // s) for r in range(s)]
        self.q0 = [-(-(pad - r) // s) for r in range(s)]
        self.q1 = [(out - 1 + pad - r) // s for r in range(s)]
        # zero rows before and after the image that the phases' windows reach
        self.before = max(0, max(self.taps[r] - 1 - self.q0[r] for r in range(s)))
        self.after = max(0, max(self.q1[r] - (size - 1) for r in range(s)))
        self.padded = self.before + size + self.after


class ConvTransposeExecutor:
    """One 2-D ConvTranspose (group 1, dilation 1) with the post-ops of a conv primitive: ``run(x, residual=None)
    -> y``, NCHW views of NHWC arrays in and out (see the module docstring). ``w`` is ``[C, M, KH, KW]``;
    ``scale``/``shift`` per output channel are folded in, ``channel_data[i]`` is ``PostOp(index=i)``'s vector."""

    def __init__(self, x_shape: tuple[int, int, int, int], w: np.ndarray, strides: Sequence[int],
                 pads: Sequence[int], out_hw: Sequence[int], scale: np.ndarray | None, shift: np.ndarray | None,
                 post_ops: Sequence[PostOp] = (), channel_data: Sequence[np.ndarray] = (), num_threads: int = 1,
                 alloc: Callable[[tuple[int, ...]], np.ndarray] | None = None) -> None:
        n, c, h, wd = x_shape
        _, m, kh, kw = w.shape
        self.new = alloc or empty_aligned
        self.post_ops = tuple(post_ops)
        self.rows = _Axis(h, kh, strides[0], pads[0], out_hw[0])
        self.cols = _Axis(wd, kw, strides[1], pads[1], out_hw[1])
        self.shape = (n, c, h, wd)
        self.out_shape = (n, m, out_hw[0], out_hw[1])
        ax, ay = self.rows, self.cols
        hp, wp = ax.padded, ay.padded
        wt = np.asarray(w).transpose(1, 0, 2, 3)  # [M, C, KH, KW]
        panels: list[np.ndarray] = []
        by_kernel: dict[ConvGeometry, list[np.ndarray]] = {}
        at = 0
        bias = None
        for rh in range(ax.s):
            for rw in range(ay.s):
                q0h, q1h, q0w, q1w = ax.q0[rh], ax.q1[rh], ay.q0[rw], ay.q1[rw]
                if q1h < q0h or q1w < q0w:
                    continue  # an output smaller than the stride: no pixel of this phase
                th, tw = ax.taps[rh], ay.taps[rw]
                # tap t of the phase conv reads x[q - (T - 1) + t] with w[r + s (T - 1 - t)]: flipped
                wph = wt[:, :, rh + ax.s * np.arange(th - 1, -1, -1)][:, :, :, rw + ay.s * np.arange(tw - 1, -1, -1)]
                geo = ConvGeometry(n, c, hp, wp, m, 1, th, tw, 1, 1, 1, 1, 0, 0, q1h - q0h + 1, q1w - q0w + 1,
                                   out_pitch=ay.s * m)
                packed, bias, offsets = pack_weights(np.ascontiguousarray(wph), geo, scale, shift)
                panels.append(packed)
                by_kernel.setdefault(geo, []).append(self._table(geo, rh, rw, [at + o for o in offsets]))
                at += packed.size
        self.packed = self._keep(np.concatenate(panels))
        self.bias = self._keep(bias)  # type: ignore[arg-type]
        geo0 = next(iter(by_kernel))
        self.channel_data = [self._keep(pack_channels(v, geo0)) for v in channel_data]
        flops = 2 * n * m * out_hw[0] * out_hw[1] * c * kh * kw // (ax.s * ay.s)
        threads = num_threads if flops >= MIN_FLOPS_PER_THREAD * num_threads else 1
        #: per distinct phase kernel: (kernel, its phases' work table, the thread chunks)
        self.parts = []
        for geo, tables in by_kernel.items():
            table = self._keep_table(np.concatenate(tables))
            key = kernel_key(geo, False)  # the conv primitives' kernels: one per geometry but the batch
            kernel = FUNCTION_CACHE.get("conv", (key, self.post_ops),
                                        lambda g=key[0]: build_conv_kernel(g, self.post_ops), HARNESS_ARGTYPES)
            self.parts.append((kernel, table, split_items(len(table), threads)))
        self.geos = list(by_kernel)
        self.has_residual = any(op.kind == "residual" for op in self.post_ops)
        #: no window reaches past the image (a kernel the size of the stride, no pads: UNet's 2x2): the phases read
        #: an NHWC input in place, no padded copy
        self.unpadded = (hp, wp) == (h, wd)
        self.xp = None if self.unpadded else self._padded_buffer()
        self._xp_lock = threading.Lock()
        self.flops = flops

    def _keep(self, a: np.ndarray) -> np.ndarray:
        out = self.new(a.shape) if a.size * 4 >= 1 << 14 else np.empty(a.shape, np.float32)
        out[...] = a
        return out

    @staticmethod
    def _keep_table(t: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(t, dtype=np.int64)

    def _table(self, geo: ConvGeometry, rh: int, rw: int, offsets: list[int]) -> np.ndarray:
        """The conv work table of phase (rh, rw): one row per (image, channel block, phase output row), the source
        at the phase's first window in the padded input, the destination at output pixel ``(s q + r - pad)``."""
        ax, ay = self.rows, self.cols
        n, _, _, _ = self.shape
        m = self.out_shape[1]
        ho, wo = self.out_shape[2:]
        c4 = geo.c * 4
        blocks = geo.blocks()
        rows = []
        col0 = ay.q0[rw] - (ay.taps[rw] - 1) + ay.before  # padded column of the first window
        out_col = ay.s * ay.q0[rw] + rw - ay.pad
        for img in range(n):
            for b, (v0, nv) in enumerate(blocks):
                rem = m - (geo.nvp - 1) * VEC
                mask = (1 << rem) - 1 if v0 + nv == geo.nvp else 0xFFFF
                variant = 0 if nv == blocks[0][1] else 1
                for q in range(ax.q0[rh], ax.q1[rh] + 1):
                    src_row = q - (ax.taps[rh] - 1) + ax.before
                    src = ((img * geo.h + src_row) * geo.w + col0) * c4
                    o = ax.s * q + rh - ax.pad
                    dst = ((img * ho + o) * wo + out_col) * m * 4 + v0 * VEC * 4
                    rows.append((src, offsets[b] * 4, dst, v0 * VEC * 4, mask, variant))
        table = np.zeros((len(rows), ROW), np.int64)  # the static kernel reads the first six fields
        table[:, :6] = np.asarray(rows, dtype=np.int64).reshape(-1, 6)
        return table

    def run(self, x: np.ndarray, residual: np.ndarray | None = None) -> np.ndarray:
        """``x`` [N, C, H, W] -> [N, M, Ho, Wo] (an NCHW view of a new NHWC array); ``residual`` has the output's
        shape."""
        xt = x.transpose(0, 2, 3, 1)
        if self.unpadded and xt.flags.c_contiguous and xt.dtype == np.float32:
            return self._run(xt, residual)
        if self._xp_lock.acquire(blocking=False):  # a concurrent call (another Python thread) pads its own copy
            try:
                if self.xp is None:  # an input that is not NHWC: copied, as into a padded buffer with no border
                    self.xp = self._padded_buffer()
                return self._run(self._pad(xt, self.xp), residual)
            finally:
                self._xp_lock.release()
        return self._run(self._pad(xt, self._padded_buffer()), residual)

    def _padded_buffer(self) -> np.ndarray:
        n, c, _, _ = self.shape
        xp = self.new((n, self.rows.padded, self.cols.padded, c))
        xp[...] = 0.0
        return xp

    def _pad(self, xt: np.ndarray, xp: np.ndarray) -> np.ndarray:
        """``xt`` (NHWC) copied into the interior of the padded buffer ``xp``, whose border stays zero."""
        _, h, wd, _ = xt.shape
        xp[:, self.rows.before:self.rows.before + h, self.cols.before:self.cols.before + wd, :] = xt
        return xp

    def _run(self, src: np.ndarray, residual: np.ndarray | None) -> np.ndarray:
        n = self.shape[0]
        y = self.new((n, *self.out_shape[2:], self.out_shape[1]))
        res = y
        if self.has_residual:
            res = np.ascontiguousarray(residual.transpose(0, 2, 3, 1))  # type: ignore[union-attr]
        extra = [a.ctypes.data for a in self.channel_data]
        for kernel, table, chunks in self.parts:
            block = (ctypes.c_uint64 * (ARG_POST + len(extra)))(
                src.ctypes.data, self.packed.ctypes.data, y.ctypes.data, self.bias.ctypes.data, res.ctypes.data,
                table.ctypes.data, *extra)
            run_split(kernel, ctypes.addressof(block), chunks)
        return y.transpose(0, 3, 1, 2)

    def describe(self) -> str:
        n, c, h, w = self.shape
        _, m, ho, wo = self.out_shape
        kernels = ", ".join(f"{g.kh}x{g.kw}" for g in self.geos)
        return (f"convtranspose {self.rows.k}x{self.cols.k} s{self.rows.s}x{self.cols.s} {c}->{m} {h}x{w}->{ho}x{wo} "
                f"N{n} (NHWC, {self.rows.s * self.cols.s} phase convs on kernels {kernels}, "
                f"{self.flops / 1e9:.3f} GFLOP)")


def compile_conv_transpose(sg: Any, plan: Any, num_threads: int) -> tuple[ConvTransposeExecutor | None, str]:
    """The executor of a conv-primitive Subgraph whose body holds a ConvolutionBackpropData (``plan``: its
    :class:`~snippets_x86_64.conv_subgraph.ConvPlan`), or None and the reason it runs on its reference."""
    x_port = sg.body.parameters[0].outputs[0].shape
    if not x_port.is_static:
        return None, f"its input shape {x_port} is dynamic; the JIT ConvTranspose is specialized per shape"
    x_shape = x_port.to_tuple()
    op = plan.conv
    why = transpose_reject_reason(op, x_shape)
    if why is not None:
        return None, why
    kernel = plan.w.shape[2:]
    outs, pbs, _ = op._resolve(x_shape[2:], kernel)
    ex = ConvTransposeExecutor(x_shape, plan.w, op._geometry(kernel).strides, pbs, outs, plan.scale, plan.shift,
                               plan.post_ops, plan.channel_data, num_threads=num_threads)
    return ex, ex.describe()

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
from snippets_core.errors import InputError
from snippets_x86_64.cache import FUNCTION_CACHE, HARNESS_ARGTYPES, ShapeCache
from snippets_x86_64.conv import ARG_POST, HEAD, ROW, VEC, ConvGeometry, PostOp, build_conv_kernel, kernel_key, \
    pack_channels, pack_weights, pixels_per_block, table_items
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
    ``scale``/``shift`` per output channel are folded in, ``channel_data[i]`` is ``PostOp(index=i)``'s vector.
    ``dynamic``: the phase kernels read their row geometry from the tables (``conv.kernel_key``), so ``for_shape``
    makes another input shape's executor with new tables only (the packed weights and kernels shared)."""

    def __init__(self, x_shape: tuple[int, int, int, int], w: np.ndarray, strides: Sequence[int],
                 pads: Sequence[int], out_hw: Sequence[int], scale: np.ndarray | None, shift: np.ndarray | None,
                 post_ops: Sequence[PostOp] = (), channel_data: Sequence[np.ndarray] = (), num_threads: int = 1,
                 alloc: Callable[[tuple[int, ...]], np.ndarray] | None = None, dynamic: bool = False) -> None:
        _, m, kh, kw = w.shape
        c = x_shape[1]
        self.new = alloc or empty_aligned
        self.post_ops = tuple(post_ops)
        self.num_threads, self.dynamic, self.kernel, self.strides = num_threads, dynamic, (kh, kw), tuple(strides)
        self.m = m
        wt = np.asarray(w).transpose(1, 0, 2, 3)  # [M, C, KH, KW]
        sh, sw = self.strides
        panels: list[np.ndarray] = []
        #: per phase (rh, rw): its taps and its panel's block offsets (elements) in ``packed``; every phase is
        #: packed (a shape whose output is smaller than the stride skips some, another one does not)
        self.phases: dict[tuple[int, int], tuple[int, int, list[int]]] = {}
        at = 0
        bias = None
        for rh in range(sh):
            for rw in range(sw):
                th, tw = -(-(kh - rh) // sh), -(-(kw - rw) // sw)
                # tap t of the phase conv reads x[q - (T - 1) + t] with w[r + s (T - 1 - t)]: flipped
                wph = wt[:, :, rh + sh * np.arange(th - 1, -1, -1)][:, :, :, rw + sw * np.arange(tw - 1, -1, -1)]
                geo = self._phase_geo(c, m, th, tw)
                packed, bias, offsets = pack_weights(np.ascontiguousarray(wph), geo, scale, shift)
                panels.append(packed)
                self.phases[(rh, rw)] = (th, tw, [at + o for o in offsets])
                at += packed.size
        self.packed = self._keep(np.concatenate(panels))
        self.bias = self._keep(bias)  # type: ignore[arg-type]
        self.channel_data = [self._keep(pack_channels(v, self._phase_geo(c, m, 1, 1))) for v in channel_data]
        self.has_residual = any(op.kind == "residual" for op in self.post_ops)
        #: the phase kernels by key (``conv.kernel_key``): made once, each shape's tables index them
        self.kernels: dict[tuple, Any] = {}
        self._set_shape(tuple(x_shape), pads, out_hw)  # type: ignore[arg-type]

    def _phase_geo(self, c: int, m: int, th: int, tw: int, n: int = 0, hp: int = 0, wp: int = 0, ho: int = 0,
                   wo: int = 0) -> ConvGeometry:
        """The stride-1 conv of one phase over the padded input, storing every ``s``-th output pixel."""
        return ConvGeometry(n, c, hp, wp, m, 1, th, tw, 1, 1, 1, 1, 0, 0, ho, wo, out_pitch=self.strides[1] * m)

    def _set_shape(self, x_shape: tuple[int, int, int, int], pads: Sequence[int], out_hw: Sequence[int]) -> None:
        """The fields of one input shape: the axes, each phase's work table, the kernels' dispatch parts."""
        n, c, h, wd = x_shape
        m, (kh, kw) = self.m, self.kernel
        self.rows = _Axis(h, kh, self.strides[0], pads[0], out_hw[0])
        self.cols = _Axis(wd, kw, self.strides[1], pads[1], out_hw[1])
        self.shape = (n, c, h, wd)
        self.out_shape = (n, m, out_hw[0], out_hw[1])
        ax, ay = self.rows, self.cols
        by_kernel: dict[tuple, list[np.ndarray]] = {}
        geos: dict[tuple, ConvGeometry] = {}
        for (rh, rw), (th, tw, offsets) in self.phases.items():
            q0h, q1h, q0w, q1w = ax.q0[rh], ax.q1[rh], ay.q0[rw], ay.q1[rw]
            if q1h < q0h or q1w < q0w:
                continue  # an output smaller than the stride: no pixel of this phase
            geo = self._phase_geo(c, m, th, tw, n, ax.padded, ay.padded, q1h - q0h + 1, q1w - q0w + 1)
            key = kernel_key(geo, self.dynamic)  # the conv primitives' kernels: one per geometry but the batch,
            by_kernel.setdefault(key, []).append(self._table(geo, rh, rw, offsets))  # (dynamic: but the image)
            geos.setdefault(key, geo)
        flops = 2 * n * m * out_hw[0] * out_hw[1] * c * kh * kw // (ax.s * ay.s)
        threads = self.num_threads if flops >= MIN_FLOPS_PER_THREAD * self.num_threads else 1
        #: per distinct phase kernel: (kernel, its phases' work table, the thread chunks)
        self.parts = []
        for key, tables in by_kernel.items():
            table = np.ascontiguousarray(np.concatenate(tables), dtype=np.int64)
            kernel = self.kernels.get(key)
            if kernel is None:
                dynamic, post_ops = self.dynamic, self.post_ops
                kernel = self.kernels[key] = FUNCTION_CACHE.get(
                    "conv", (key, post_ops), lambda g=key[0]: build_conv_kernel(g, post_ops, dynamic), HARNESS_ARGTYPES)
            self.parts.append((kernel, table, split_items(table_items(table), threads)))
        self.geos = list(geos.values())
        #: no window reaches past the image (a kernel the size of the stride, no pads: UNet's 2x2): the phases read
        #: an NHWC input in place, no padded copy
        self.unpadded = (ax.padded, ay.padded) == (h, wd)
        #: the padded input copy, made on the shape's first call that needs one (its border zero)
        self.xp: np.ndarray | None = None
        self._xp_lock = threading.Lock()
        self.flops = flops

    def for_shape(self, x_shape: tuple[int, int, int, int], pads: Sequence[int], out_hw: Sequence[int],
                  ) -> ConvTransposeExecutor:
        """This ConvTranspose for another input shape: the packed weights and (dynamic) kernels are this one's; only
        the axes, the work tables and the padded input copy are new."""
        ex = ConvTransposeExecutor.__new__(ConvTransposeExecutor)
        ex.__dict__.update(self.__dict__)
        ex._set_shape(x_shape, pads, out_hw)
        return ex

    def _keep(self, a: np.ndarray) -> np.ndarray:
        out = self.new(a.shape) if a.size * 4 >= 1 << 14 else np.empty(a.shape, np.float32)
        out[...] = a
        return out

    def _table(self, geo: ConvGeometry, rh: int, rw: int, offsets: list[int]) -> np.ndarray:
        """The compact conv work table (``conv.work_table``'s layout) of phase (rh, rw): its (image, channel block,
        phase output row) items, the source at the phase's first window in the padded input, the destination at
        output pixel ``(s q + r - pad)``, and the row geometry a dynamic kernel reads (``conv.ROW``: the padded row's
        bytes, the row's pixel blocks). The phases of one kernel run as the segments of one table."""
        ax, ay = self.rows, self.cols
        n, m = geo.n, geo.m
        ho, wo = self.out_shape[2:]
        c4 = geo.c * 4
        blocks = geo.blocks()
        col0 = ay.q0[rw] - (ay.taps[rw] - 1) + ay.before  # padded column of the first window
        out_col = ay.s * ay.q0[rw] + rw - ay.pad
        q0 = ax.q0[rh]
        src0 = ((q0 - (ax.taps[rh] - 1) + ax.before) * geo.w + col0) * c4
        dst0 = ((ax.s * q0 + rh - ax.pad) * wo + out_col) * m * 4
        rem = m - (geo.nvp - 1) * VEC
        table = np.zeros((HEAD + len(blocks), ROW), np.int64)
        table[0, :4] = (n, ax.q1[rh] + 1 - q0, len(blocks), table.size * 8)
        table[1, :3] = (geo.w * c4, 0, ax.s * wo * m * 4)  # a phase row's steps: one padded row, s output rows
        table[2, :3] = (geo.h * geo.w * c4, 0, ho * wo * m * 4)  # (row 3, once per segment: 0)
        for b, (v0, nv) in enumerate(blocks):
            r = pixels_per_block(nv, geo.wo)
            table[HEAD + b] = (src0, offsets[b] * 4, v0 * VEC * 4 + dst0, v0 * VEC * 4,
                               (1 << rem) - 1 if v0 + nv == geo.nvp else 0xFFFF, 0 if nv == blocks[0][1] else 1,
                               geo.w * c4, geo.wo // r, r, geo.wo % r, 4, 0)
        return table

    def run(self, x: np.ndarray, residual: np.ndarray | None = None) -> np.ndarray:
        """``x`` [N, C, H, W] -> [N, M, Ho, Wo] (an NCHW view of a new NHWC array); ``residual`` has the output's
        shape."""
        xt = x.transpose(0, 2, 3, 1)
        if self.unpadded and xt.flags.c_contiguous and xt.dtype == np.float32:
            return self._run(xt, residual)
        if self._xp_lock.acquire(blocking=False):  # a concurrent call (another Python thread) pads its own copy
            try:
                if self.xp is None:  # (an unpadded one's input that is not NHWC: copied into a buffer with no border)
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
        if y.size == 0:  # an empty batch or output: no rows for the kernels
            return y.transpose(0, 3, 1, 2)
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


class DynamicConvTranspose(ShapeCache):
    """A ConvTranspose primitive with a dynamic N, H or W: its phase convolutions are the conv primitives' dynamic
    dense kernels (row geometry from the tables), made once with the packed weights at a stand-in shape; a new input
    shape resolves the output size and pads (the IR's ``_resolve``) and makes its work tables only."""

    kind = "one kernel per phase-conv shape for every N, H, W"

    def __init__(self, op: Any, plan: Any, stand_in: tuple[int, ...], num_threads: int) -> None:
        kernel = plan.w.shape[2:]
        strides = op._geometry(kernel).strides

        def make(shape: tuple[int, ...], first: ConvTransposeExecutor | None) -> ConvTransposeExecutor:
            if shape[1] != plan.w.shape[0]:
                raise InputError(f"ConvTranspose '{op.name}' takes {plan.w.shape[0]} input channels, the input has "
                                 f"shape {list(shape)}")
            outs, pbs, _ = op._resolve(shape[2:], kernel)
            if first is not None:
                return first.for_shape(shape, pbs, outs)  # type: ignore[arg-type]
            return ConvTransposeExecutor(shape, plan.w, strides, pbs, outs, plan.scale, plan.shift,  # type: ignore
                                         plan.post_ops, plan.channel_data, num_threads=num_threads, dynamic=True)

        super().__init__(make)
        self.residual = plan.residual
        self._first = self.make(stand_in, None)

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        ex = self.executor(inputs[0].shape)
        res = None if self.residual is None else inputs[self.residual]
        if res is not None and res.shape != ex.out_shape:
            try:
                res = np.broadcast_to(res, ex.out_shape)  # (made whole by the NHWC copy in ``run``)
            except ValueError:
                raise InputError(f"ConvTranspose: its residual of shape {list(res.shape)} does not broadcast to its "
                                 f"output's {list(ex.out_shape)}") from None
        return [ex.run(inputs[0], res)]


def compile_conv_transpose(sg: Any, plan: Any, num_threads: int) -> tuple[Any, str]:
    """The executor of a conv-primitive Subgraph whose body holds a ConvolutionBackpropData (``plan``: its
    :class:`~snippets_x86_64.conv_subgraph.ConvPlan`), or None and the reason it runs on its reference. A dynamic
    N, H or W: a :class:`DynamicConvTranspose` (``run(inputs) -> [y]``)."""
    from snippets_x86_64.conv_subgraph import stand_in_shape

    x_port = sg.body.parameters[0].outputs[0].shape
    op = plan.conv
    if not x_port.is_static:
        if not x_port.rank_is_static or x_port.rank != 4 or x_port[1] is None:
            return None, f"its input shape {x_port} has no static channel count"
        if op.output_shape:
            return None, "an output_shape with a dynamic input: its pads depend on the input size"
        stand_in = stand_in_shape(sg, plan.w.shape[2:], op._geometry(plan.w.shape[2:]))
        why = transpose_reject_reason(op, stand_in)
        if why is not None:
            return None, why
        dyn = DynamicConvTranspose(op, plan, stand_in, num_threads)
        kh, kw = plan.w.shape[2:]
        sh, sw = op._geometry((kh, kw)).strides
        return dyn, (f"convtranspose {kh}x{kw} s{sh}x{sw} {plan.w.shape[0]}->{plan.w.shape[1]} on runtime row "
                     f"geometry (NHWC, {sh * sw} phase convs on kernels "
                     f"{', '.join(f'{g.kh}x{g.kw}' for g in dyn._first.geos)}: one set for every N, H, W)")
    x_shape = x_port.to_tuple()
    why = transpose_reject_reason(op, x_shape)
    if why is not None:
        return None, why
    kernel = plan.w.shape[2:]
    outs, pbs, _ = op._resolve(x_shape[2:], kernel)
    ex = ConvTransposeExecutor(x_shape, plan.w, op._geometry(kernel).strides, pbs, outs, plan.scale, plan.shift,
                               plan.post_ops, plan.channel_data, num_threads=num_threads)
    return ex, ex.describe()

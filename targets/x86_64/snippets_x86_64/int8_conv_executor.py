"""The executor of an int8 convolution Subgraph (TokenizeInt8FCSnippets: a static QDQ 2-D Conv, a QLinearConv or a
dynamic ConvInteger) on the JIT int8 convolution (:mod:`snippets_x86_64.conv_int8`).

Made once (per batch size): the weight packed into the VNNI panels, the per-channel vectors (the zero-point
compensation, ``x_scale * w_scale[m]``, the bias), the work table, the kernel, and the padded NHWC byte buffer
whose border holds the zero point. Per call:

1. x (f32) is quantized by a JIT kernel straight into the buffer's interior (``quantize_pixels_function``: NHWC
   pixels in, rows split between the threads when large; a stem's NCHW x straight from its planes,
   ``quantize_planes_function``), on the Q->DQ pair's grid or, for dynamic quantization,
   on the grid DynamicQuantizeLinear computes from x's range (then the compensation and scale vectors, M values,
   are made for this call). An s8 grid is stored +128 (u8: what ``vpdpbusd`` multiplies), its zero point too. An
   already quantized x (QLinearConv, or the u8 an int8 convolution before it stored) is copied in (numpy: rows of
   bytes), or read in place when the convolution has no padding and 4k channels (a 1x1);
2. the kernel runs over the work items, split into one range per thread, and stores NHWC f32 (dequantized, bias,
   post-ops) or u8/s8 (requantized).

AssignLayouts gives the Subgraph NHWC (the target's ``preferred_layout``), so x arrives as an NCHW view of NHWC
memory and the output leaves as one: no transpose on either side. An NCHW x is transposed first (a reorder, counted
in ``reorders``).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from snippets_core.errors import InputError
from snippets_core.ir.ops.quantize import dynamic_quantization_grid
from snippets_core.runtime.placement import Placement
from snippets_core.tokenization.tokenize_int8_fc_snippets import DYNAMIC, F32, QUANTIZED, Int8FCSpec
from snippets_x86_64.aligned import empty_aligned
from snippets_x86_64.cache import ShapeCache
from snippets_x86_64.conv import PostOp
from snippets_x86_64.conv_executor import split_items
from snippets_x86_64.conv_int8 import Int8ConvKernel, Int8ConvShape, channel_vector, compensation, \
    kernel_function, post_params, requant_params
from snippets_x86_64.int8_pool import max_pool_function, pool_table
from snippets_x86_64.quantize_int8 import planes_args, quantize_params, quantize_pixels_function, \
    quantize_planes_function
from snippets_x86_64.native_pool import SplitCall
from snippets_x86_64.runtime import TARGET_NAME
from snippets_x86_64.runtime import _address as address  # 0.15 us; .ctypes.data ~2

#: input bytes from which the quantizing copy splits its rows between the threads (a memory-bound pass; a two-thread
#: SplitCall costs ~0.5 us to post, the worker's half of a 64 KiB copy saves ~1 us)
COPY_SPLIT_BYTES = 1 << 16
DTYPES = {"f32": np.float32, "u8": np.uint8, "s8": np.int8}


class _Batch:
    """What one input shape (N, H, W) needs: the kernel (the first shape's packed weight; one compiled kernel for
    every batch size of an H, W), the padded buffer and its border value, the copy's function, table and split, and
    the output kept for the next call."""

    def __init__(self, ex: Int8ConvExecutor, n: int, h: int, w: int, first: _Batch | None = None) -> None:
        self.shape = shape = ex.shape(n, h, w)
        c = shape.c
        self.kernel = Int8ConvKernel(shape, ex.w, ex.threads, None if first is None else first.kernel)
        # a dynamic H, W: the copies' size-agnostic functions, their sizes in the args after the first four
        dynamic = shape.dynamic
        self.copy = quantize_pixels_function(None if dynamic else w, c, shape.cp) \
            if ex.spec.source != QUANTIZED else None
        #: a stem (1..4 channels, one group: 4 bytes a pixel) quantizes its NCHW x straight from the planes, so
        #: the model's input needs no NHWC reorder (the target asks AssignLayouts for a plain x: reads_planes)
        self.planes = quantize_planes_function(*((None, c, None) if dynamic else (w, c, h * w)), shape.packed) \
            if ex.reads_planes else None
        self.copy_sizes = [w] if dynamic else []
        self.planes_sizes = planes_args(w, h * w) if dynamic else []
        self.xp = empty_aligned((n, shape.hp, shape.wp, shape.cp), np.uint8)
        #: the output of the last call, written again when nothing else holds it any more (``output``)
        self.y: np.ndarray | None = None
        self.border: int | None = None
        #: the vectors the kernel was last bound to (checked by its ``run``)
        self.bound: tuple[np.ndarray, ...] | None = None
        #: a quantized NHWC x is the kernel's input itself (no padding, channels a multiple of 4)
        self.in_place = (shape.hp, shape.wp, shape.cp) == (h, w, c)
        self.table = np.asarray([((i * shape.hp + shape.pt + r) * shape.wp + shape.pl) * shape.cp
                                 for i in range(n) for r in range(h)], np.int64)
        #: the planar copy's rows (NCHW x of a stem): (byte offset in the first plane, dst byte offset) per row
        self.planes_table = np.asarray([(i * c * h * w * 4 + r * w * 4, self.table[i * h + r]) for i in range(n)
                                        for r in range(h)], np.int64) if self.planes is not None else None
        self.table_at = self.table.ctypes.data
        self.planes_table_at = 0 if self.planes_table is None else self.planes_table.ctypes.data
        big = n * h * w * c * 4 >= COPY_SPLIT_BYTES
        chunks = split_items(n * h, ex.threads if big else 1)
        #: the quantizing copies' dispatch (args: src, dst, table, qparams), made once
        self.copy_call = None if self.copy is None else SplitCall(self.copy, 4 + len(self.copy_sizes), chunks)
        self.planes_call = None if self.planes is None else \
            SplitCall(self.planes, 4 + len(self.planes_sizes), chunks)
        self.lock = threading.Lock()
        #: the Subgraph's output: the convolution's, or the MaxPool's of its bytes (``Int8FCSpec.pool``)
        self.out_shape = shape.out_shape
        self.pool_in: np.ndarray | None = None
        p = ex.spec.pool
        if p is not None:  # the convolution writes the interior of the pool's padded input, whose border never wins
            assert p.out is not None and shape.out_frame is not None
            self.pool_in = np.full(shape.out_shape, np.iinfo(ex.out_dtype).min, ex.out_dtype)
            self.out_shape = (n, *p.out, shape.m)
            fn = max_pool_function(*p.kernel, p.strides[1], shape.m, p.out[1], shape.out_frame[1] * shape.m,
                                   self.pool_in.dtype == np.int8)
            self.pool_table = pool_table(n, *p.out, shape.m, p.strides[0], *shape.out_frame[:2])
            self.pool_call = SplitCall(fn, 3, split_items(n * p.out[0], ex.threads if big else 1))


class Int8ConvExecutor:
    """Runs one int8 convolution Subgraph (see the module docstring) on ``threads`` threads."""

    def __init__(self, spec: Int8FCSpec, threads: int) -> None:
        g = spec.conv
        assert g is not None
        self.spec, self.threads = spec, max(1, threads)
        #: the kernel's post-ops (constants compiled in) and the values its post-op block holds
        self.post_ops, post_values = kernel_post_ops(spec.post_ops)
        #: a Relu right before a Q->DQ pair (or the requantization) is that grid's clamp from 0
        self.post_ops, post_values, relu_last = fold_relu(self.post_ops, post_values, spec.output != F32)
        self.residual_index = spec.residual_index()
        #: an f32 residual, or the u8/s8 bytes of one another int8 convolution stored (qresidual)
        self.residual_dtype = next((np.int8 if v[3] else np.uint8 for k, v in spec.post_ops if k == "qresidual"),
                                   np.float32)
        kh, kw = g.kernel
        cg = spec.k // (kh * kw)
        self.channels = c = cg * g.group
        #: the weight [M, C/group, KH, KW] (the spec holds it as the GEMM's [KH*KW*C/group, M])
        self.w = np.ascontiguousarray(spec.weight.reshape(kh, kw, cg, spec.n).transpose(3, 2, 0, 1))
        if spec.output not in DTYPES:
            raise InputError(f"the int8 convolution stores f32, u8 or s8, not {spec.output}")
        self.output = spec.output
        self.out_dtype = DTYPES[self.output]
        self.in_dtype = (np.int8 if spec.a_signed else np.uint8) if spec.source == QUANTIZED else np.float32
        #: an s8 grid is stored +128 in the buffer: the zero point the kernel sees moves with it
        self.shift = 128 if spec.a_signed else 0
        #: the per-shape kernels and buffers, by input (N, H, W): the first shape's packed weight serves them all
        self.shapes = ShapeCache(lambda key, first: _Batch(self, *key, first))
        self._colsum: np.ndarray | None = None
        if spec.source != DYNAMIC:
            self.vectors = self._vectors(spec.a_scale, spec.a_zero_point)
            self.qparams = self._qparams(spec.a_scale, spec.a_zero_point)
        self.requant = requant_params(spec.y_scale, spec.y_zero_point, self.output) if self.output != F32 else None
        if relu_last and self.requant is not None:
            self.requant[1] = max(self.requant[1], 0.0)
        self.post = post_params(self.channel_shape, post_values) if self.post_ops else None
        self.reads_planes = reads_planes(spec)
        self.reorders = 0
        if g.spatial is None:  # the shape-agnostic kernel built now, on a stand-in of one window: shapes only table
            (kh, kw), (dh, dw) = g.kernel, g.dilations
            kernel_function(self.shape(1, (kh - 1) * dh + 1, (kw - 1) * dw + 1))
        #: where the last call ran (the snippets_core.runtime.placement protocol): always here
        self.last_placement = Placement(TARGET_NAME)

    def shape(self, n: int, h: int | None = None, w: int | None = None) -> Int8ConvShape:
        """The kernel's geometry for an input [n, C, h, w] (h, w: the static ones when not given)."""
        s, g = self.spec, self.spec.conv
        assert g is not None
        if h is not None and w is not None:
            g = g.resolved((h, w))
        if g.spatial is None or g.out is None:
            raise InputError(f"the int8 convolution's H and W are dynamic: give them, got {h}, {w}")
        (kh, kw), (sh, sw), (dh, dw) = g.kernel, g.strides, g.dilations
        # a MaxPool after it: the output written into the pool's padded input
        p = s.pool
        frame = None if p is None else (p.pads_begin[0] + g.out[0] + p.pads_end[0],
                                        p.pads_begin[1] + g.out[1] + p.pads_end[1], *p.pads_begin)
        # dynamic H, W: one shape-agnostic kernel (the row geometry in the work table) for every input shape
        dynamic = self.spec.conv.spatial is None
        return Int8ConvShape(n, self.channels, g.spatial[0], g.spatial[1], s.n, g.group, kh, kw, sh, sw, dh, dw,
                             g.pads_begin[0], g.pads_begin[1], g.out[0], g.out[1], self.output, self.post_ops,
                             dynamic=dynamic, out_frame=frame,
                             packed=not dynamic and reads_planes(s) and packs_taps(self.channels, kw, dw))

    @property
    def channel_shape(self) -> Int8ConvShape:
        """A geometry of this convolution's channels and post-ops alone (one output pixel): what lays out the
        per-channel vectors and the post-op block, the same for every input shape."""
        g = self.spec.conv
        assert g is not None
        (kh, kw), (dh, dw) = g.kernel, g.dilations
        return Int8ConvShape(1, self.channels, (kh - 1) * dh + 1, (kw - 1) * dw + 1, self.spec.n, g.group, kh, kw,
                             1, 1, dh, dw, 0, 0, 1, 1, self.output, self.post_ops)

    def _qparams(self, scale: float, zero_point: int) -> np.ndarray:
        """The quantizer's parameters for a grid: the clamp of the grid's type, the zero point shifted to u8."""
        p = quantize_params(scale, zero_point, self.spec.a_signed)
        p.view(np.int32)[3] = zero_point + self.shift
        return p

    def _vectors(self, a_scale: float, a_zero_point: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(comp s32, scale f32, bias f32) padded to whole vectors for A's grid."""
        s = self.spec
        shape = self.channel_shape
        if self._colsum is None:
            self._colsum = compensation(self.w, 1, shape).astype(np.int64)
        comp = (self._colsum * (a_zero_point + self.shift)).astype(np.int32)
        # dynamic: the graph computes Cast(acc) * (x_scale * w_scale) in f32; static: the same product rounded once
        scale = np.float32(a_scale) * s.w_scale if s.source == DYNAMIC else \
            (np.float64(a_scale) * s.w_scale.astype(np.float64)).astype(np.float32)
        bias = s.bias if s.bias is not None else np.zeros(s.n, np.float32)
        return comp, channel_vector(scale, shape, np.float32), channel_vector(bias, shape, np.float32)

    def batch(self, n: int, h: int | None = None, w: int | None = None) -> _Batch:
        """The kernel and buffers of an input [n, C, h, w] (made on first use, kept: ``shapes``)."""
        g = self.spec.conv
        assert g is not None
        if h is None or w is None:
            if g.spatial is None:
                raise InputError("the int8 convolution's H and W are dynamic: give them")
            h, w = g.spatial
        return self.shapes.executor((n, h, w))  # type: ignore[no-any-return]

    def __call__(self, args: Sequence[Any], outs: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        s, g = self.spec, self.spec.conv
        assert g is not None
        x = np.asarray(args[s.a_index])
        if x.dtype != self.in_dtype or x.ndim != 4 or x.shape[1] != self.channels or \
                (g.spatial is not None and x.shape[2:] != g.spatial):
            hw = "H, W" if g.spatial is None else f"{g.spatial[0]}, {g.spatial[1]}"
            raise InputError(f"the int8 convolution takes {np.dtype(self.in_dtype)} [N, {self.channels}, {hw}], got "
                             f"{x.dtype} {list(x.shape)}")
        residual = None
        if self.residual_index is not None:
            r = np.asarray(args[self.residual_index])
            residual = r.transpose(0, 2, 3, 1)
            if residual.dtype != self.residual_dtype:
                raise InputError(f"the int8 convolution's residual must be {np.dtype(self.residual_dtype)}, got "
                                 f"{residual.dtype}")
            if not residual.flags.c_contiguous:
                self.reorders += 1
                residual = np.ascontiguousarray(residual)
        b = self.batch(*x.shape[:1], *x.shape[2:])
        shape = b.shape
        if residual is not None and residual.shape != (shape.n, shape.ho, shape.wo, shape.m):
            raise InputError(f"the int8 convolution's residual must have its output's shape {[shape.n, shape.m, shape.ho, shape.wo]}, "
                             f"got {list(residual.transpose(0, 3, 1, 2).shape)}")
        planar = b.planes is not None and x.flags.c_contiguous
        xt = x.transpose(0, 2, 3, 1)
        if not xt.flags.c_contiguous and not planar:
            self.reorders += 1
            xt = np.ascontiguousarray(xt)
        if s.source == DYNAMIC:  # DynamicQuantizeLinear's grid of this x
            scale, zp = (float(v) for v in dynamic_quantization_grid(x))
            zp = int(zp)
            vectors, qparams = self._vectors(scale, zp), self._qparams(scale, zp)
        else:
            zp, vectors, qparams = s.a_zero_point, self.vectors, self.qparams
        own = b.lock.acquire(blocking=False)
        try:  # the buffer is kept between calls (only the interior is rewritten); a concurrent call gets its own
            xp = b.xp if own else np.empty_like(b.xp)
            if not own or b.border != zp:
                xp.fill(zp + self.shift)
                if own:
                    b.border = zp
            if b.copy is None and b.in_place and not self.shift:  # unpadded: the kernel reads the bytes as they lie
                xp = xt
            elif b.copy is None:  # x is already on the grid (QLinearConv, or the bytes of an int8 conv)
                inner = xp[:, shape.pt : shape.pt + shape.h, shape.pl : shape.pl + shape.w, : shape.c]
                np.copyto(inner, xt.view(np.uint8) ^ np.uint8(self.shift) if self.shift else xt)
            elif planar and x.size:  # NCHW f32 planes straight into the 4-byte pixels
                b.planes_call.run([address(x), address(xp), b.planes_table_at, address(qparams), *b.planes_sizes])
            elif xt.size:
                b.copy_call.run([address(xt), address(xp), b.table_at, address(qparams), *b.copy_sizes])
            y = self._output(b, own)
            conv_y = y
            if b.pool_in is not None:  # the convolution into the pool's padded input, then the MaxPool into y
                conv_y = b.pool_in if own else np.full_like(b.pool_in, np.iinfo(b.pool_in.dtype).min)
            if s.source == DYNAMIC or b.bound is not vectors:  # the vectors checked once (per call if dynamic)
                b.kernel.run(xp, conv_y, *vectors, residual, self.requant, self.post)
                b.bound = vectors
            else:
                b.kernel.launch(address(xp), address(conv_y), None if residual is None else address(residual))
            if b.pool_in is not None:
                b.pool_call.run([address(conv_y), address(y), b.pool_table.ctypes.data])
        finally:
            if own:
                b.lock.release()
        out = y.transpose(0, 3, 1, 2)
        if outs is not None and outs[0] is not None:
            if outs[0].dtype != self.out_dtype or outs[0].shape != out.shape:
                raise InputError(f"output array 0 must be {np.dtype(self.out_dtype)}{list(out.shape)}, got "
                                 f"{outs[0].dtype}{list(outs[0].shape)}")
            outs[0][...] = out
            return [outs[0]]
        return [out]

    def _output(self, b: _Batch, own: bool) -> np.ndarray:
        """The NHWC output array of this call: the last call's again when nothing else holds it any more (the
        runtime dropped it after its last reader: only ``b.y`` and this frame refer to it, no view of it lives),
        else a new one (kept for the next call). Saves the allocation and keeps the pages mapped and warm."""
        shape = b.shape
        y = b.y
        if own and y is not None:
            # a view's base is y, or the buffer y views (an aligned array): no reference past ours on either (y:
            # b.y, this frame, the argument; its buffer: y's, this frame, the argument)
            base = y.base
            if sys.getrefcount(y) == 3 and (base is None or sys.getrefcount(base) == 3):
                return y
        y = empty_aligned(b.out_shape, self.out_dtype)
        if own:
            b.y = y
        return y

    def describe(self) -> str:
        s, g = self.spec, self.spec.conv
        assert g is not None
        how = "copied" if s.source == QUANTIZED else "quantized (JIT) into it" + \
            (" from NCHW planes" if self.reads_planes else "")
        post = "".join(f", {kind}" for kind, _ in s.post_ops)
        # the kernel's own count (a small convolution stays on one thread: estimated_ns)
        used = max((b.kernel.threads for b in self.shapes.executors.values()), default=self.threads)
        threads = f", items split over {used} threads" if used > 1 else ""
        shapes = f"; {self.shapes.describe()}" if s.conv.spatial is None or len(self.shapes.executors) > 1 else ""
        return (f"int8 convolution (JIT, VNNI): {s.describe()}; the padded NHWC u8 input {how}, vpdpbusd over "
                f"the taps, dequantized (+ bias{post}){' and requantized' if self.output != F32 else ''} in registers"
                f"{threads}{shapes}")


def kernel_post_ops(ops: Sequence[tuple[str, Any]]) -> tuple[tuple[PostOp, ...], list[Any]]:
    """The int8 kernel's post-ops for a spec's ``(kind, parameters)`` chain: ``conv.PostOp`` with the constants the
    kernel compiles in (a clamp's bounds, a PRelu's slope, a swish's beta; a swish whose gate passes a Q->DQ pair
    is a ``qswish``), and one value per op for the post-op block (a grid, a per-channel vector, or None)."""
    kernel: list[PostOp] = []
    values: list[Any] = []
    for kind, v in ops:
        value = None
        if kind == "clamp":
            op = PostOp(kind, lo=v[0], hi=v[1])
        elif kind == "prelu":
            op = PostOp(kind, alpha=float(v))
        elif kind == "swish":
            op, value = PostOp("swish" if v[1] is None else "qswish", alpha=float(v[0])), v[1]
        elif kind == "qresidual":  # (input, scale, zero point, signed): the kernel reads the bytes
            op, value = PostOp("qresidual_s8" if v[3] else "qresidual_u8"), (v[1], v[2])
        else:  # the grid or the vector of an fq, mul_c, add_c, prelu_c; nothing for the others
            op, value = PostOp(kind), None if kind in ("relu", "residual", "hswish", "sigmoid") else v
        kernel.append(op)
        values.append(value)
    return tuple(kernel), values


def fold_relu(ops: tuple[PostOp, ...], values: list[Any], requantized: bool,
              ) -> tuple[tuple[PostOp, ...], list[Any], bool]:
    """The kernel's chain with each Relu that a Q->DQ pair follows (or, ``requantized``, that ends the chain)
    dropped into the grid's clamp: ``clamp(rint(max(x, 0) / s), lo, hi) == clamp(rint(x / s), max(lo, 0), hi)``
    (division by a positive scale keeps the sign; ``lo <= 0 <= hi`` on any grid that holds its zero point), one op
    per output vector less. Returns (ops, values, whether a final Relu went into the requantization's clamp)."""
    out_ops: list[PostOp] = []
    out_values: list[Any] = []
    for i, (op, v) in enumerate(zip(ops, values)):
        nxt = ops[i + 1].kind if i + 1 < len(ops) else None
        if op.kind == "relu" and nxt == "fq":
            values[i + 1] = (values[i + 1][0], max(float(values[i + 1][1]), 0.0), values[i + 1][2])
            continue
        if op.kind == "relu" and nxt is None and requantized:
            return tuple(out_ops), out_values, True
        out_ops.append(op)
        out_values.append(v)
    return tuple(out_ops), out_values, False


def reads_planes(spec: Int8FCSpec) -> bool:
    """The int8 convolution quantizes an NCHW f32 x straight from its planes (a stem: 1..4 input channels, one
    group, so a padded pixel is one dword): the target then prefers x plain, and no reorder runs before it."""
    g = spec.conv
    return g is not None and spec.source != QUANTIZED and g.group == 1 and spec.k // (g.kernel[0] * g.kernel[1]) <= 4


def packs_taps(c: int, kw: int, dw: int) -> bool:
    """A stem of ``c`` < 4 channels packs its taps (``Int8ConvShape.packed``: pixels of ``c`` bytes, a kernel row's
    ``kw * c`` bytes walked as one tap) when that walks fewer VNNI groups: a 7x7 RGB stem 6 a row instead of 7."""
    return dw == 1 and c < 4 and -(-kw * c // 4) < kw


def int8_conv_executor(spec: Int8FCSpec, threads: int, batch: int | None) -> Int8ConvExecutor:
    """The executor of an int8 convolution Subgraph; with a static batch, its kernels are compiled now."""
    ex = Int8ConvExecutor(spec, threads)
    if batch is not None:
        ex.batch(batch)
    return ex


__all__ = ["Int8ConvExecutor", "fold_relu", "int8_conv_executor", "packs_taps", "reads_planes"]

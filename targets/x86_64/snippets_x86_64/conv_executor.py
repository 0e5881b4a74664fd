"""ConvExecutor: runs the JIT convolution (:mod:`snippets_x86_64.conv`) on NCHW arrays, on both cores.

Made once per shape: the packed weight and bias, the work table and the padded NHWC input buffer (its border is
written once; a call rewrites only the interior, and a concurrent call from another Python thread uses a buffer
of its own). A call copies the input into the padded buffer (a reorder only when the input is not already NHWC),
runs the items split over the threads of the native pool and returns the new NHWC output as an NCHW view
(see docs/conv.md: the layout travels in the strides; AssignLayouts makes every input NHWC, so ``reorders`` stays 0).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence

import numpy as np

from snippets_x86_64.aligned import ALIGN, empty_aligned, zeros_aligned
from snippets_x86_64.cache import FUNCTION_CACHE, HARNESS_ARGTYPES, cached_pack_weights
from snippets_x86_64.conv import ARG_POST, VEC, ConvGeometry, PostOp, build_conv_kernel, build_copy_kernel, \
    choose_planar, copy_key, copy_table, flat_pixels, kernel_key, pack_channels, work_table
from snippets_x86_64.reorder import run_split

#: flops (or pooled taps) per thread below which a primitive runs on one thread (about 10 us of FMA work: a
#: wake-up of the native pool's worker and the join cost a few us)
MIN_FLOPS_PER_THREAD = 2_000_000
#: per-channel vector pre-ops the JIT input copy applies at most (its pointer registers)
COPY_MAX_VECTORS = 8


def _pad_vector(v: np.ndarray, c: int, name: str) -> np.ndarray:
    """A per-channel pre-op vector padded to whole zmm (1 past the channels for a divide: no inf in dead lanes)."""
    out = np.full(-(-c // VEC) * VEC, 1.0 if name == "divide" else 0.0, dtype=np.float32)
    out[:c] = v
    return out


class ConvExecutor:
    """One convolution with its post-ops: ``run(x, residual=None) -> y``, NCHW float32 in and out.

    ``scale``/``shift`` (per output channel, or None) are folded into the weight and bias: ``y = conv(x, w) *
    scale + shift`` before ``post_ops``; ``channel_data[i]`` is the per-channel vector of ``PostOp(index=i)``.
    """

    def __init__(self, geo: ConvGeometry, w: np.ndarray, scale: np.ndarray | None, shift: np.ndarray | None,
                 post_ops: Sequence[PostOp] = (), channel_data: Sequence[np.ndarray] = (),
                 num_threads: int = 1, alloc: Callable[[tuple[int, ...]], np.ndarray] | None = None,
                 pre_ops: Sequence[tuple[str, np.ndarray | None]] = (), plain_input: bool = False,
                 dynamic: bool = False, prepared: ConvExecutor | None = None, borders: tuple | None = None,
                 ) -> None:
        """``alloc(shape)`` makes each float32 buffer the kernel reads or writes (tests pass guarded memory);
        ``pre_ops`` are (numpy ufunc name, per-channel vector or None for Relu) applied to the input as it is
        copied into the padded buffer; ``plain_input``: the input arrives NCHW (AssignLayouts off, or it left this
        input plain), so a convolution with few input channels reads a planar padded copy (``choose_planar``);
        ``dynamic``: the shape-agnostic kernel of a dense convolution (``kernel_key``: the same code for every N, H,
        W); ``prepared``: the same primitive made for another shape, whose packed weights and kernels this one
        shares (``for_shape``); ``borders``: a dynamic depthwise/pool walk's border code for every size
        (``conv.merge_borders``; ``prepared``'s by default)."""
        self.pre_ops = [(getattr(np, name), v) for name, v in pre_ops]
        pre_ops = tuple(pre_ops)
        self.pre_op_spec, self.plain_input, self.num_threads, self.alloc = pre_ops, plain_input, num_threads, alloc
        geo = choose_planar(geo) if plain_input else geo
        self.geo = geo
        self.post_ops = tuple(post_ops)
        new = alloc or empty_aligned

        def keep(a: np.ndarray) -> np.ndarray:  # made once: aligned whatever its size (a depthwise panel is small)
            if alloc is None and a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable \
                    and a.ctypes.data % ALIGN == 0:
                return a  # freshly packed on the boundary (a disk-cache entry is read-only: copied)
            out = alloc(a.shape) if alloc is not None else empty_aligned(a.shape, np.float32, 0)
            out[...] = a
            return out

        self.w, self.scale, self.shift, self.dynamic = w, scale, shift, dynamic
        if prepared is not None and geo.mode == "conv":  # the packing depends on no dim of the input's but C
            self.packed, self.bias, offsets = prepared.packed, prepared.bias, prepared.offsets
            self.channel_data = prepared.channel_data
        else:
            if geo.mode == "conv":
                packed, bias, offsets = cached_pack_weights(w, geo, scale, shift)
            else:  # pooling: the "weights" are the reciprocal window counts per output pixel (avg), the bias unused
                packed, bias, offsets = w.astype(np.float32).ravel(), np.zeros(1, np.float32), []
            self.packed, self.bias = keep(packed), keep(bias)
            self.channel_data = [keep(pack_channels(v, geo)) for v in channel_data]
        self.offsets = offsets
        #: the geometry the kernel walks: ``geo``, or a pointwise conv's pixels re-cut into even rows
        self.kernel_geo = kgeo = flat_pixels(geo)
        self.borders = borders if borders is not None else prepared.borders if prepared is not None else None
        self.kernel_key = key = kernel_key(kgeo, dynamic, self.borders)
        self.table = work_table(kgeo, offsets, key[1] if dynamic and kgeo.depthwise else None)
        if prepared is not None and key == prepared.kernel_key:
            self.kernel = prepared.kernel
        else:
            # built from the key's geometry (no N, nor H, W for a dynamic dense conv: the code cannot depend on
            # them); a dynamic depthwise walk from this shape's, whose borders the key holds
            code_geo = kgeo if dynamic and kgeo.depthwise else key[0]
            self.kernel = FUNCTION_CACHE.get(
                "conv", (key, self.post_ops), lambda: build_conv_kernel(code_geo, self.post_ops, dynamic, key[1] or None),
                HARNESS_ARGTYPES)
        self.new = new
        #: the input can be read in place (NHWC, no padding): no copy when the producer wrote NHWC
        self.unpadded = geo.hp == geo.h and geo.wp == geo.w and not pre_ops and not geo.planar
        # an unpadded conv reads its NHWC input in place: its buffer is made only if an input ever needs a copy
        self.xp: np.ndarray | None = None if self.unpadded else self._padded_buffer()
        #: held while a call uses ``xp``; a concurrent call (another Python thread) gets a buffer of its own
        self._xp_lock = threading.Lock()
        self.has_residual = any(op.kind == "residual" for op in self.post_ops)
        #: layout changes (NCHW -> NHWC copies) made by the calls so far: the reorders at this primitive's edges
        self.reorders = 0
        self.fixed_args = (self.packed.ctypes.data, self.bias.ctypes.data, self.table.ctypes.data,
                           [a.ctypes.data for a in self.channel_data])
        # a small convolution runs on one thread: waking the other costs more than its half of the work
        work = geo.flops if geo.mode == "conv" else 8 * geo.flops  # a pooled tap: a load, not an FMA
        threads = num_threads if work >= MIN_FLOPS_PER_THREAD * num_threads else 1
        self.chunks = split_items(len(self.table), threads)
        #: the JIT copy of a contiguous NHWC input into the padded buffer, through the pre-ops (None: read in
        #: place, or more vector pre-ops than the kernel has pointer registers: numpy copies)
        self.copy = None
        if not self.unpadded and not geo.planar and sum(v is not None for _, v in pre_ops) <= COPY_MAX_VECTORS:
            if prepared is not None and prepared.copy is not None:
                self.copy_vectors, self.copy = prepared.copy_vectors, prepared.copy
            else:
                self.copy_vectors = [keep(_pad_vector(v, geo.c, name)) for name, v in pre_ops if v is not None]
                spec = (copy_key(geo), tuple((name, v is not None) for name, v in pre_ops))
                self.copy = FUNCTION_CACHE.get("conv_copy", spec, lambda: build_copy_kernel(*spec),
                                               HARNESS_ARGTYPES)
            self.copy_table = copy_table(geo)
            # a copy is a memory-bound pass: both threads only when it is large
            self.copy_chunks = split_items(geo.n * geo.h, num_threads if geo.n * geo.h * geo.w * geo.c >= 1 << 16
                                           else 1)

    def for_shape(self, geo: ConvGeometry) -> ConvExecutor:
        """This convolution for another input shape ``geo``: the packed weights and, for a dynamic one, the kernels
        are this one's; only the work table, the copy table and the padded buffer are new."""
        return ConvExecutor(geo, self.w, self.scale, self.shift, self.post_ops, (), self.num_threads, self.alloc,
                            self.pre_op_spec, self.plain_input, self.dynamic, prepared=self)

    def _padded_buffer(self) -> np.ndarray:
        """The padded NHWC input buffer with its border: zeros for a convolution or an average, -inf for a
        maximum (padding never wins)."""
        g = self.geo
        shape = (g.n, g.c, g.hp, g.wp) if g.planar else (g.n, g.hp, g.wp, g.cp)
        if self.alloc is None and g.mode != "max":
            return zeros_aligned(shape)
        xp = self.new(shape)
        xp[...] = -np.inf if g.mode == "max" else 0.0
        return xp

    def run(self, x: np.ndarray, residual: np.ndarray | None = None) -> np.ndarray:
        """``x`` [N, C, H, W] -> [N, M, Ho, Wo]; ``residual`` has the output's shape.

        The result is an NCHW view of a new NHWC array (strides carry the layout): a conv primitive that
        consumes it reads it with no reorder, another consumer sees an ordinary (strided) NCHW array."""
        if self._xp_lock.acquire(blocking=False):
            try:
                return self._run(x, residual, self.xp)
            finally:
                self._xp_lock.release()
        return self._run(x, residual, self._padded_buffer())

    def _run(self, x: np.ndarray, residual: np.ndarray | None, xp: np.ndarray | None) -> np.ndarray:
        g = self.geo
        xt = x.transpose(0, 2, 3, 1)
        if not (x if g.planar else xt).flags.c_contiguous:
            self.reorders += 1
        if g.planar:  # NCHW planes: whole input rows copied into the padded planes
            inner = xp[:, :, g.pt:g.pt + g.h, g.pl:g.pl + g.w]
            if self.pre_ops:
                self._apply_pre_ops(xt, inner.transpose(0, 2, 3, 1))
            else:
                inner[...] = x
            src = xp
        elif self.unpadded and xt.flags.c_contiguous and xt.dtype == np.float32:
            src = xt
        elif self.copy is not None and xt.flags.c_contiguous and xt.dtype == np.float32:
            vectors = [v.ctypes.data for v in self.copy_vectors]
            args = (ctypes.c_uint64 * (3 + len(vectors)))(xt.ctypes.data, xp.ctypes.data,  # type: ignore[union-attr]
                                                          self.copy_table.ctypes.data, *vectors)
            run_split(self.copy, ctypes.addressof(args), self.copy_chunks)
            src = xp
        else:
            if xp is None:  # only the caller holding ``_xp_lock`` gets ``self.xp``, so it may make it
                xp = self.xp = self._padded_buffer()
            top, left = (0, 0) if g.depthwise else (g.pt, g.pl)  # a depthwise walk skips the border itself
            inner = xp[:, top:top + g.h, left:left + g.w, :g.c]
            if self.pre_ops:
                self._apply_pre_ops(xt, inner)
            else:
                inner[...] = xt
            src = xp
        res = None
        if self.has_residual:
            res = residual.transpose(0, 2, 3, 1)  # type: ignore[union-attr]
            if not res.flags.c_contiguous:
                self.reorders += 1
                res = np.ascontiguousarray(res)
        y = self.new((g.n, g.ho, g.wo, g.m))
        self.run_nhwc(src, y, res)
        return y.transpose(0, 3, 1, 2)

    def _apply_pre_ops(self, xt: np.ndarray, inner: np.ndarray) -> None:
        """The input chain written into the padded buffer's interior: the first op reads ``xt``, the rest work
        in place (per-channel vectors broadcast along the last, channel, axis)."""
        src = xt
        for ufunc, v in self.pre_ops:
            ufunc(src, np.float32(0) if v is None else v, out=inner)
            src = inner

    def run_nhwc(self, src: np.ndarray, y: np.ndarray, res: np.ndarray | None = None) -> None:
        """The kernel on NHWC arrays: ``src`` (the padded input when there is padding), ``y`` written."""
        wei, bias, table, extra = self.fixed_args
        dst = y.ctypes.data  # (an ndarray's .ctypes costs ~1 us: once per array)
        block = (ctypes.c_uint64 * (ARG_POST + len(extra)))(
            src.ctypes.data, wei, dst, bias, dst if res is None else res.ctypes.data, table, *extra)
        run_split(self.kernel, ctypes.addressof(block), self.chunks)


def split_items(items: int, num_threads: int) -> list[tuple[int, int]]:
    """(start, count) of each thread's contiguous range of work items."""
    threads = max(1, min(num_threads, items))
    bounds = [items * t // threads for t in range(threads + 1)]
    return [(bounds[t], bounds[t + 1] - bounds[t]) for t in range(threads)]

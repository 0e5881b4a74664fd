"""ConvExecutor: runs the JIT convolution (:mod:`snippets_x86_64.conv`) on NCHW arrays, on both cores.

Made once: the packed weight and bias; per shape the work table, and the padded NHWC input buffer is one per
primitive, laid out for each shape (the JIT copy writes its interior and border at each call; a concurrent call
from another Python thread uses a buffer of its own). A call copies the input into the padded buffer (a reorder
only when the input is not already NHWC), runs the items split over the threads of the native pool and returns
the new NHWC output as an NCHW view (see docs/conv.md: the layout travels in the strides; AssignLayouts makes every
input NHWC, so ``reorders`` stays 0).
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from snippets_x86_64.aligned import ALIGN, empty_aligned, zeros_aligned
from snippets_x86_64.cache import FUNCTION_CACHE, HARNESS_ARGTYPES, cached_pack_weights
from snippets_x86_64.conv import ARG_POST, VEC, ConvGeometry, PostOp, build_conv_kernel, build_copy_kernel, \
    build_global_finish_kernel, choose_planar, copy_header, copy_key, finish_args, flat_pixels, kernel_key, HEAD, \
    pack_channels, table_spec, walk_table, with_dims, work_table
from snippets_x86_64.native_pool import SplitCalls, native_pool, split_items
from snippets_x86_64.row_copy import planar_copy
from snippets_x86_64.runtime import PARALLEL_MIN_NS
from snippets_x86_64.runtime import _address as data_address

if TYPE_CHECKING:
    from snippets_x86_64.jit import JitFunction

#: flops (or pooled taps) per thread below which an LRN runs on one thread (about 10 us of FMA work: a wake-up of
#: the native pool's worker and the join cost a few us)
MIN_FLOPS_PER_THREAD = 2_000_000
#: single-thread work rates the thread split estimates a convolution's time from (measured on the CNN zoo's
#: convolutions: a dense conv's multiply-adds run near the FMA peak; a depthwise one feeds each input vector to a few
#: FMAs only; a pool does a load and a max/add per tap), per ns
DENSE_FLOPS_PER_NS = 130.0
DEPTHWISE_FLOPS_PER_NS = 60.0
POOL_TAPS_PER_NS = 25.0
#: bytes per ns of a weight panel streamed from memory: a classifier's 1x1 conv on one pixel (a GEMV over 4 MiB)
#: takes as long as its weights take to read, far longer than its flops say
WEIGHT_BYTES_PER_NS = 40.0
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

    #: ``run`` may return before the workers' chunks are done (their output read only by convolutions, which wait
    #: for them: ``NativePool.run_deferred``); set by the static conv step whose consumers allow it
    defer = False

    def __init__(self, geo: ConvGeometry, w: np.ndarray, scale: np.ndarray | None, shift: np.ndarray | None,
                 post_ops: Sequence[PostOp] = (), channel_data: Sequence[np.ndarray] = (),
                 num_threads: int = 1, alloc: Callable[[tuple[int, ...]], np.ndarray] | None = None,
                 pre_ops: Sequence[tuple[str, np.ndarray | None]] = (), plain_input: bool = False,
                 dynamic: bool = False, prepared: ConvExecutor | None = None, borders: tuple | None = None,
                 out_pitch: int = 0, in_pitch: int = 0) -> None:
        """``alloc(shape)`` makes each float32 buffer the kernel reads or writes (tests pass guarded memory);
        ``pre_ops`` are (numpy ufunc name, per-channel vector or None for Relu) applied to the input as it is
        copied into the padded buffer; ``plain_input``: the input arrives NCHW (AssignLayouts off, or it left this
        input plain), so a convolution with few input channels reads a planar padded copy (``choose_planar``);
        ``dynamic``: the shape-agnostic kernel of a dense convolution (``kernel_key``: the same code for every N, H,
        W); ``prepared``: the same primitive made for another shape, whose packed weights and kernels this one
        shares (``for_shape``); ``borders``: a dynamic depthwise/pool walk's border code for every size
        (``conv.merge_borders``; ``prepared``'s by default); ``out_pitch``: the channels of the NHWC array
        ``run(out=...)`` writes into (a channel Concat's output, this primitive's channels a slice of it; 0: its own
        channel count); ``in_pitch``: the channels of the NHWC array the input is a channel slice of (a Concat's
        output in a chain), which the JIT input copy reads."""
        self.pre_ops = [(getattr(np, name), v) for name, v in pre_ops]
        pre_ops = tuple(pre_ops)
        self.pre_op_spec, self.plain_input, self.num_threads, self.alloc = pre_ops, plain_input, num_threads, alloc
        #: more vector pre-ops than the JIT copy has pointer registers: numpy copies the input
        self.numpy_copy = sum(v is not None for _, v in pre_ops) > COPY_MAX_VECTORS
        geo = choose_planar(geo) if plain_input else geo
        geo = replace(geo, out_pitch=out_pitch) if out_pitch else geo
        self.geo = geo
        self.post_ops = tuple(post_ops)
        new = alloc or empty_aligned
        keep = self._keep
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
        if geo.mode == "conv":  # packed: the original weight is not kept (held once, as the Subgraph's is released)
            self.w = None
        self.borders = borders if borders is not None else prepared.borders if prepared is not None else None
        self.new = new
        self.has_residual = any(op.kind == "residual" for op in self.post_ops)
        assert not (out_pitch and self.has_residual), "the kernel reads a residual with the output's pitch"
        # the row sums and the finish kernel are [N, Ho, Wo, M] and [N, M]: a global pool never writes a slice
        assert not (out_pitch and geo.global_pool), "a global pool epilogue's output is never a Concat slice"
        #: channels per pixel of the NHWC input the copy kernel reads (a Concat's in a chain, or the input's own)
        self.copy_pitch = in_pitch or geo.c
        #: the padded input buffer, shared by this primitive's executors of every shape (``PaddedBuffer``)
        self.pad = prepared.pad if prepared is not None else PaddedBuffer(alloc)
        self.kernel_key: tuple = ()
        #: the dispatch calls of every shape, by (kernel, argument words, chunk count): a new shape reuses one (its
        #: chunks rewritten in place) instead of making a Job and, on its second call, a JIT dispatch thunk
        self.calls = prepared.calls if prepared is not None else SplitCalls()
        self.copy: JitFunction | None = None
        #: ``in_place_path``'s fast call path, made on the first call of each shape
        self._in_place: tuple | None = None
        self.copy_vectors: list[np.ndarray] = []
        self._set_shape(geo, prepared)

    def _set_shape(self, geo: ConvGeometry, prepared: ConvExecutor | None, fields: ShapeFields | None = None) -> None:
        """The fields that depend on the input's N, H, W: the work table, the kernel when a shape needs another
        one, the copy header, the thread split (a new shape makes only these: ``for_shape``). What depends on the
        geometry alone (``ShapeFields``, ``fields`` when the caller found it) is made once per process for every
        primitive of that geometry; a new shape of a primitive pairs it with the primitive's own state (weights,
        kernels, dispatch calls): a few attribute stores, no table, no kernel lookup."""
        if fields is None:
            fields = shape_fields(self, geo, prepared)
        #: the geometry's shared fields (``ShapeFields``)
        self.fields = fields
        d = self.__dict__
        d.update(fields.record)  # the geometry's (shared, read-only) fields and the per-shape resets
        self.geo = geo
        dynamic, num_threads = self.dynamic, self.num_threads
        kgeo = fields.kernel_geo
        # a dynamic dense kernel's key holds no dim of the image's: the one it was made with (no comparison)
        if prepared is not None and (dynamic and not kgeo.depthwise or fields.kernel_key == prepared.kernel_key):
            self.kernel, self.kernel_key = prepared.kernel, prepared.kernel_key
        else:
            key = fields.kernel_key
            if key != self.kernel_key:
                # built from the key's geometry (no N, nor H, W for a dynamic dense conv: the code cannot depend on
                # them); a dynamic depthwise walk from this shape's, whose borders the key holds
                code_geo = kgeo if dynamic and kgeo.depthwise else key[0]
                post_ops = self.post_ops
                self.kernel = FUNCTION_CACHE.get(
                    "conv", (key, post_ops), lambda: build_conv_kernel(code_geo, post_ops, dynamic, key[1] or None),
                    HARNESS_ARGTYPES)
            self.kernel_key = key
        #: the input can be read in place (NHWC, no padding): no copy when the producer wrote NHWC
        self.unpadded = fields.unpadded and not self.pre_ops
        if geo.global_pool is not None:  # a dynamic finish reads Ho, Wo from its args: one for every shape
            #: a global pool epilogue: the kernel reduces each output row into the row's first pixel of ``_rows``
            #: (made once, used by the ``pad.lock`` holder), ``finish`` reduces the rows into the [N, M, 1, 1] output
            spec = ("dynamic", kgeo.m, kgeo.global_pool) if dynamic else kgeo
            self.finish = FUNCTION_CACHE.get("conv_gpool_finish", spec,
                                             lambda: build_global_finish_kernel(kgeo, dynamic), HARNESS_ARGTYPES)
            self.finish_words = tuple(finish_args(kgeo, 0, 0))[2:]
            self._rows = self.new((geo.n, geo.out_h, geo.out_w, geo.m))
        if prepared is not None and prepared.packed is self.packed:  # (the addresses of what is shared: known)
            self.fixed_args = prepared.fixed_args
        else:
            #: the kernel's argument words that no shape changes (the table's address is the shape's, in ``record``)
            self.fixed_args = (data_address(self.packed), data_address(self.bias),
                               [data_address(a) for a in self.channel_data])
        chunks = fields.chunks
        if prepared is not None and self.kernel is prepared.kernel and len(chunks) == len(prepared.chunks):
            self.call = prepared.call  # (``SplitCalls``' key: the kernel, the words, the chunk count)
        else:
            self.call = self.calls.get(self.kernel, ARG_POST + len(self.channel_data), chunks)
        #: the JIT copy of a contiguous NCHW input into a planar padded buffer (a stem's) when its rows split over
        #: the threads (None: numpy's strided copy, as fast on one thread; and for a dynamic conv, whose shapes
        #: build no kernels)
        self.planar_copy = planar_copy(geo.n, geo.c, geo.h, geo.w, geo.hp, geo.wp, geo.pt, geo.pl, num_threads) \
            if geo.planar and num_threads > 1 and not dynamic else None
        if self.planar_copy is not None and self.planar_copy.call.threads == 1:
            self.planar_copy = None
        #: the JIT copy of a contiguous NHWC input into the padded buffer, through the pre-ops (None: read in
        #: place, or more vector pre-ops than the kernel has pointer registers: numpy copies)
        if self.unpadded or geo.planar or self.numpy_copy:
            self.copy = None
            return
        if prepared is not None and prepared.copy is not None and prepared.copy_pitch == self.copy_pitch:
            self.copy_vectors, self.copy = prepared.copy_vectors, prepared.copy
        elif self.copy is None:
            self.copy_vectors = [self._keep(_pad_vector(v, geo.c, name)) for name, v in self.pre_op_spec
                                 if v is not None]
            spec = (copy_key(geo, self.copy_pitch), tuple((name, v is not None) for name, v in self.pre_op_spec))
            self.copy = FUNCTION_CACHE.get("conv_copy", spec, lambda: build_copy_kernel(*spec), HARNESS_ARGTYPES)
        self.copy_header, header_address, copy_chunks = fields.copy(self.copy_pitch)
        if prepared is not None and prepared.copy is self.copy and len(copy_chunks) == len(prepared.copy_chunks):
            self.copy_call = prepared.copy_call
        else:
            self.copy_call = self.calls.get(self.copy, 3 + len(self.copy_vectors), copy_chunks)
        self.copy_chunks = copy_chunks
        self.copy_words = [0, 0, header_address, *(data_address(v) for v in self.copy_vectors)]

    def _keep(self, a: np.ndarray) -> np.ndarray:
        """``a`` in memory made once: aligned whatever its size (a depthwise panel is small); a freshly packed array
        already on the boundary is kept as it is (a disk-cache entry is read-only: copied)."""
        if self.alloc is None and a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable \
                and a.ctypes.data % ALIGN == 0:
            return a
        out = self.alloc(a.shape) if self.alloc is not None else empty_aligned(a.shape, np.float32, 0)
        out[...] = a
        return out

    def for_shape(self, geo: ConvGeometry, divisor: np.ndarray | None = None) -> ConvExecutor:
        """This convolution for another input shape ``geo``: the packed weights and, for a dynamic one, the kernels
        are this one's; only the work table and the copy header are new, the padded buffer laid out again (an
        average pool's ``divisor``, its reciprocal window counts per output pixel, too)."""
        if self.geo.out_pitch and not geo.out_pitch:  # a Concat's slice at every shape: the pitch is its channels
            geo = with_dims(geo, out_pitch=self.geo.out_pitch)
        return self.with_fields(choose_planar(geo) if self.plain_input else geo, None, divisor)

    def with_fields(self, geo: ConvGeometry, fields: ShapeFields | None, divisor: np.ndarray | None = None,
                    ) -> ConvExecutor:
        """This convolution for the final geometry ``geo`` (its planar choice and output pitch made) whose
        ``ShapeFields`` are ``fields`` (None: looked up): the primitive's state (weights, kernels, dispatch calls,
        padded buffer) with the geometry's, which other primitives of that geometry share."""
        # an executor of the primitive's own class (``_shape_class``: this one's fields as class attributes) holding
        # the shape's fields only: no per-field construction, no copy of the shared fields on a new shape's path,
        # and a dict of a third the size for the collector to walk while the executor lives
        cls = self.__dict__.get("_shape_class")
        if cls is None:
            cls = self._shape_class = _shape_class(self)
        ex = object.__new__(cls)
        if divisor is not None:
            ex.w, ex.packed = divisor, self._keep(divisor.ravel())
            ex._set_shape(geo, self, fields)
        elif fields is None or not ex._shape_like(self, geo, fields):
            ex._set_shape(geo, self, fields)
        return ex

    def _shape_like(self, first: ConvExecutor, geo: ConvGeometry, fields: ShapeFields) -> bool:
        """``_set_shape`` for a new executor of ``first``'s shape class (its class attributes are ``first``'s fields)
        in the common case of a dynamic primitive (``first``'s kernel, weights, dispatch call and copy kernel, no
        global pool finish): only what differs from ``first``'s is stored in the instance (a smaller dict to make and
        for the collector to walk). False, having stored nothing, when the case is another (``_set_shape`` then)."""
        kgeo = fields.kernel_geo
        copies = not (fields.unpadded and not self.pre_ops or geo.planar or self.numpy_copy)
        if not self.dynamic or geo.global_pool is not None or kgeo.depthwise and fields.kernel_key != first.kernel_key \
                or copies and (first.copy is None or first.copy_pitch != self.copy_pitch):
            return False
        d = self.__dict__
        d.update(fields.record)  # the geometry's (shared, read-only) fields and the per-shape resets
        d["fields"], d["geo"] = fields, geo
        unpadded = fields.unpadded and not self.pre_ops
        if unpadded != first.unpadded:
            d["unpadded"] = unpadded
        chunks = fields.chunks
        if len(chunks) != len(first.chunks):
            d["call"] = self.calls.get(self.kernel, ARG_POST + len(self.channel_data), chunks)
        # ``in_place_path``'s fast call path, made here in the burst (warm) rather than at the shape's first call (its
        # primitive's own reasons to copy the input, the same at every shape, asked once: ``_shape_class``)
        d["_in_place"] = (geo, None) if self._copies_input else fields.in_place(self.has_residual)
        if not copies:
            if first.copy is not None:
                d["copy"] = None
            return True
        header, header_address, copy_chunks = fields.copy(self.copy_pitch)
        d["xp"] = first.pad.view(self)  # (warm here; checked by ``take`` at the shape's first call)
        if len(copy_chunks) != len(first.copy_chunks):
            d["copy_call"] = self.calls.get(self.copy, 3 + len(self.copy_vectors), copy_chunks)
        d["copy_header"], d["copy_chunks"] = header, copy_chunks
        words = first.copy_words.copy()  # (the pre-op vectors' addresses: the same)
        words[2] = header_address
        d["copy_words"] = words
        return True

    @property
    def result_shape(self) -> tuple[int, ...]:
        """The shape of what ``run`` returns (NCHW: an [N, M, Ho, Wo] view, [N, M, 1, 1] with a global pool)."""
        return self.fields.nchw  # (the geometry's tuple: a new shape's burst makes none)

    def _padded_buffer(self) -> np.ndarray:
        """A padded input buffer of this shape's own, with its border (a call from a second Python thread while
        another holds the shared one)."""
        return PaddedBuffer(self.alloc).take(self)

    def run(self, x: np.ndarray, residual: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """``x`` [N, C, H, W] -> [N, M, Ho, Wo]; ``residual`` has the output's shape.

        The result is an NCHW view of a new NHWC array (strides carry the layout): a conv primitive that
        consumes it reads it with no reorder, another consumer sees an ordinary (strided) NCHW array. With
        ``out_pitch``, ``out`` is where it goes: an [N, Ho, Wo, M] slice of an NHWC array of ``out_pitch`` channels."""
        fast = self._in_place  # (None on a new executor: ``ShapeFields.record`` resets it)
        if fast is None:
            fast = self._in_place = in_place_path(self)
        # the common case (a primitive's NHWC output read in place by the next): ~2 us of Python less per call
        if fast[1] is not None and out is None and x.strides == fast[1] and x.dtype == _F32 and (
                residual is None if fast[2] is None else residual is not None and residual.strides == fast[2]
                and residual.dtype == _F32):
            buf = np.empty(fast[3], np.uint8)
            dst = data_address(buf)
            skip = -dst % ALIGN
            y = np.ndarray(fast[4], _F32, buf, skip, fast[5])
            dst += skip
            wei, bias, extra = self.fixed_args
            words = [data_address(x), wei, dst, bias, dst if residual is None else data_address(residual),
                     self.table_address, *extra]
            if self.defer:  # the workers' chunks may still run when this returns (``NativePool.run_deferred``)
                self.call.run_chunks(fast[6], words, (x, residual, buf))
            else:
                self.call.run_chunks(self.chunks, words)
            return y
        pool = native_pool()
        if pool.pending is not None:  # the numpy code below may read an input a deferred call still writes
            with pool.lock:
                pool.sync()
        pad = self.pad
        if pad.lock.acquire(blocking=False):
            try:
                if self.unpadded:
                    return self._run(x, residual, None, out)
                if pad.owner is not self:
                    self.xp = pad.take(self)
                return self._run(x, residual, self.xp, out)
            finally:
                pad.lock.release()
        return self._run(x, residual, self._padded_buffer(), out)

    def _run(self, x: np.ndarray, residual: np.ndarray | None, xp: np.ndarray | None,
             out: np.ndarray | None = None) -> np.ndarray:
        g = self.geo
        xt = x.transpose(0, 2, 3, 1)
        if not x.flags.c_contiguous if g.planar else _pitch(xt) is None:  # (an NHWC channel slice is no reorder)
            self.reorders += 1
        if g.planar:  # NCHW planes: whole input rows copied into the padded planes
            inner = xp[:, :, g.pt:g.pt + g.h, g.pl:g.pl + g.w]
            if self.pre_ops:
                self._apply_pre_ops(xt, inner.transpose(0, 2, 3, 1))
            elif self.planar_copy is not None and x.flags.c_contiguous and x.dtype == np.float32:
                self.planar_copy.run(data_address(x), data_address(xp))  # type: ignore[arg-type]
            else:
                inner[...] = x
            src = xp
        elif self.unpadded and xt.flags.c_contiguous and xt.dtype == np.float32:
            src = xt
        elif self.copy is not None and xt.dtype == np.float32 and _pitch(xt) == self.copy_pitch:
            words = self.copy_words.copy()
            words[0], words[1] = data_address(xt), data_address(xp)  # type: ignore[arg-type]
            self.copy_call.run_chunks(self.copy_chunks, words)
            src = xp
        else:
            if xp is None:  # an unpadded conv whose input needs a copy after all (the caller holds ``pad.lock``)
                xp = self.xp = self.pad.take(self)
            top, left = (0, 0) if g.depthwise else (g.pt, g.pl)  # a depthwise walk skips the border itself
            inner = xp[:, top:top + g.h, left:left + g.w, :g.c]
            if self.pre_ops:
                self._apply_pre_ops(xt, inner)
            else:
                inner[...] = xt
            if self.copy is not None:  # ``take`` left the border to the copy kernel, which did not run
                fill_border(xp, g, -np.inf if g.mode == "max" else 0.0)
            src = xp
        res = None
        if self.has_residual:
            res = residual.transpose(0, 2, 3, 1)  # type: ignore[union-attr]
            if not res.flags.c_contiguous:
                self.reorders += 1
                res = np.ascontiguousarray(res)
        # a new output per call, not one kept per executor: malloc hands back the block a consumer just freed,
        # still in cache, where a kept one is cold by the next call (measured: shufflenet 10 % slower)
        if self.finish is not None:  # a global pool epilogue: the kernel's row sums, the finish into [N, M, 1, 1]
            rows = self._rows if xp is self.xp else self.new((g.n, g.out_h, g.out_w, g.m))
            y = self.new(self.out_shape)
            self.run_nhwc(src, rows, res)
            ends = (ctypes.c_uint64 * 6)(data_address(rows), data_address(y), *self.finish_words)
            self.finish(0, ctypes.addressof(ends), 0, g.n)
            return y
        y = self.new((g.n, g.out_h, g.out_w, g.m)) if out is None else out
        assert out is None or out.strides[2:] == (g.mo * 4, 4), "the slice must have the pitch the kernel was made for"
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
        wei, bias, extra = self.fixed_args
        dst = data_address(y)  # (0.15 us; an ndarray's .ctypes costs ~1 us)
        self.call.run_chunks(self.chunks, [data_address(src), wei, dst, bias, dst if res is None else data_address(res),
                                           self.table_address, *extra])


def _shape_class(ex: ConvExecutor) -> type:
    """A subclass of ``ex``'s class whose class attributes are ``ex``'s fields (a function among them, such as ``new``,
    kept as it is, not bound as a method): the executors of ``ex``'s other shapes read what they share with it there."""
    fields = {k: staticmethod(v) if hasattr(type(v), "__get__") else v for k, v in ex.__dict__.items()}
    # the buffers of ``ex``'s shape (each executor has its own, ``ShapeFields.record``): not kept alive by the class
    fields.update(xp=None, _rows=None)
    # ``in_place_path``'s reasons of the primitive's own to copy its input (its channels are every shape's)
    fields["_copies_input"] = bool(ex.pre_ops or ex.alloc is not None or ex.copy_pitch != ex.geo.c)
    return type(type(ex).__name__, (type(ex),), fields)


#: geometries whose ``ShapeFields`` the process keeps (the oldest dropped first): a few hundred image sizes of a
#: model's few dozen geometries
SHAPE_FIELDS_ENTRIES = 4096
_SHAPE_FIELDS: dict[tuple, ShapeFields] = {}
_SHAPE_FIELDS_LOCK = threading.Lock()


class ShapeFields:
    """What a conv or pool executor needs for one geometry that depends on nothing of the primitive's own (weights,
    post-ops, buffers): the geometry the kernel walks, which kernel (``kernel_key``), the work table (read-only: the
    primitives of this geometry share it), the thread split and, per input pitch, the copy header. Made once per
    process for each geometry: ResNet-50's 53 convolutions have 20-odd geometries, so a new image size makes 20-odd
    tables, and a size seen by another primitive (the blocks of a stage) makes none."""

    __slots__ = ("kernel_geo", "kernel_key", "table_spec", "table", "table_address", "unpadded", "out_shape", "nchw",
                 "work_ns", "chunks", "_copy_pitch", "_copy", "_copies", "_threads", "geo", "record", "_plain",
                 "_with_residual", "_layout")

    def __init__(self, ex: ConvExecutor, geo: ConvGeometry, prepared: ConvExecutor | None, weight_bytes: int) -> None:
        self.kernel_geo = kgeo = flat_pixels(geo)
        dynamic, threads = ex.dynamic, ex.num_threads
        depthwise = kgeo.depthwise
        # the table's per-block template depends on the channels only (``table_spec``: a planar stem's too)
        planar = geo.planar
        spec = getattr(prepared, "table_spec", None) if prepared is not None else None
        self.table_spec = spec = spec or table_spec(kgeo, ex.offsets)
        # a dynamic dense kernel's key holds no dim of the image's: the first shape's (then not compared, see
        # ``_set_shape``); a dynamic walk's is the first shape's when its border code covers this size, which the
        # walk's table finds as it indexes that code's row variants and border patterns (``walk_table``: None when
        # it does not cover it)
        table = None
        if dynamic and prepared is not None:
            key = prepared.kernel_key
            if depthwise:
                borders = ex.borders
                table = walk_table(kgeo, borders, spec) if borders is not None and key[1] is borders else None
                if table is None:
                    key = kernel_key(kgeo, True, borders)
        else:
            key = kernel_key(kgeo, dynamic, ex.borders)
        self.kernel_key = key
        if table is None:
            table = work_table(kgeo, ex.offsets, key[1] if dynamic and depthwise else None, spec)
        table.setflags(write=False)  # shared by the primitives of this geometry
        self.table, self.table_address = table, data_address(table)
        self.unpadded = not planar and geo.hp == geo.h and geo.wp == geo.w
        n, m = geo.n, geo.m
        #: the NCHW shape of what ``run`` returns (``result_shape``): one tuple for the in-place path's output and the
        #: next primitive's input shape (``ShapeCache.ahead``'s key there), not one made by each
        self.nchw = (n, m, 1, 1) if geo.global_pool is not None else (n, m, geo.out_h, geo.out_w)
        #: the global pool finish's [N, M, 1, 1] output (None without one: ``run`` makes the NHWC output of ``geo``)
        self.out_shape = out_shape = self.nchw if geo.global_pool is not None else None
        # split when each thread gets PARALLEL_MIN_NS of estimated work: a hand-over to a spinning worker costs
        # 1-2 us, so a depthwise conv of 15 us gains from a second thread, where the flops alone (half a dense
        # conv's rate) kept it on one
        self.work_ns = work_ns = estimated_ns(geo, weight_bytes)
        # (the items ``table_items`` reads from the header, known here: images x stored rows x blocks rows)
        self.chunks = chunks = _split(kgeo.n * kgeo.out_h * (len(table) - HEAD), 1 if threads == 1 else
                                      max(1, min(threads, int(work_ns // PARALLEL_MIN_NS))))
        # the copy of the one input pitch a geometry meets in practice (``copy``): slots, no dict per geometry (a new
        # shape's tracked objects are what the collector's young collections walk)
        self._copy_pitch: int | None = None
        self._copy: tuple[np.ndarray, int, list[tuple[int, int]]] | None = None
        self._copies: dict[int, tuple[np.ndarray, int, list[tuple[int, int]]]] | None = None
        #: the geometry these fields are of (the executor's ``geo``)
        self._threads, self.geo = threads, geo
        #: what an executor of this geometry takes as it is (one ``dict.update`` on a new shape): ``kernel_geo``, the
        #: geometry the kernel walks (``geo``, or a pointwise conv's pixels re-cut into even rows); the table, its
        #: template, the output's shape, the work estimate and split; and the per-shape state a new executor starts
        #: from: ``xp``, its view of the shared padded buffer (``PaddedBuffer.take`` makes it on the shape's first
        #: run), no global pool finish (set after), ``reorders``, the layout changes (NCHW -> NHWC copies) its calls
        #: made, the reorders at this primitive's edges
        self.record = {"kernel_geo": kgeo, "table_spec": spec, "table": table, "table_address": self.table_address,
                       "out_shape": out_shape,
                       "work_ns": work_ns, "chunks": chunks, "xp": None, "finish": None, "_rows": None,
                       "reorders": 0, "_in_place": None}
        #: ``in_place_path``'s tuple of this geometry without and with a residual (made on the first call asking)
        self._plain: tuple | None = None
        self._with_residual: tuple | None = None
        self._layout: tuple | None = None

    def layout(self) -> tuple[tuple[int, ...], int, float]:
        """The padded input buffer of this geometry for ``PaddedBuffer.take``: its shape, its size and the border's
        value (made once per geometry: a take at a shape's first call reads one tuple, no geometry property)."""
        made = self._layout
        if made is None:
            g = self.geo
            hp, wp = g.hp, g.wp
            fill = -np.inf if g.mode == "max" else 0.0
            made = self._layout = ((g.n, g.c, hp, wp), g.n * g.c * hp * wp, fill) if g.planar else \
                ((g.n, hp, wp, g.cp), g.n * hp * wp * g.cp, fill)
        return made

    def in_place(self, residual: bool) -> tuple:
        """``in_place_path`` for a primitive of this geometry that has no reason of its own to copy its input (pre-ops,
        a Concat's input pitch, a test's ``alloc``): made once per geometry and residual, not per executor."""
        made = self._with_residual if residual else self._plain
        if made is None:
            g = self.geo
            if not self.unpadded or g.mo != g.m or g.global_pool is not None:  # a copy, a Concat slice, a finish
                made = (g, None)
            else:
                n, oh, ow, m = g.n, g.out_h, g.out_w, g.m
                out_strides = nhwc_strides(oh, ow, m)
                made = (g, nhwc_strides(g.h, g.w, g.c), out_strides if residual else None,
                        n * oh * ow * m * 4 + ALIGN, self.nchw, out_strides,
                        deferred_chunks(self.chunks, self.work_ns))
            if residual:
                self._with_residual = made
            else:
                self._plain = made
        return made

    def copy(self, pitch: int) -> tuple[np.ndarray, int, list[tuple[int, int]]]:
        """The copy header (``copy_header``: the kernel works out each row from it) of an input whose pixels are
        ``pitch`` channels apart, its address and the copy's chunks (a memory-bound pass: both threads only when it
        is large). One pitch per geometry in practice: kept in two slots, a dict only for a second pitch."""
        if self._copy_pitch == pitch:
            return self._copy
        made = self._copies.get(pitch) if self._copies is not None else None
        if made is None:
            geo = self.geo
            header = copy_header(geo, pitch)
            header.flags.writeable = False
            big = geo.n * geo.h * geo.w * geo.c >= 1 << 14
            made = (header, data_address(header), _split(geo.n * geo.h, self._threads if big else 1))
            if self._copy_pitch is None:
                self._copy_pitch, self._copy = pitch, made
            else:
                if self._copies is None:
                    self._copies = {}
                self._copies[pitch] = made
        return made


#: (H, W, C) packed in an int -> the NCHW strides of a contiguous NHWC array of those dims (``nhwc_strides``)
_STRIDES: dict[int, tuple[int, int, int, int]] = {}


def nhwc_strides(h: int, w: int, c: int) -> tuple[int, int, int, int]:
    """The NCHW strides (bytes) of a contiguous [N, H, W, C] float32 array, one tuple per (H, W, C): a primitive's
    output strides are its consumer's input strides (``in_place``' tuples), made once for both."""
    key = (h << 42) | (w << 21) | c
    got = _STRIDES.get(key)
    if got is None:
        if len(_STRIDES) >= SHAPE_FIELDS_ENTRIES:
            _STRIDES.clear()
        got = _STRIDES[key] = (h * w * c * 4, 4, w * c * 4, c * 4)
    return got


@functools.lru_cache(maxsize=4096)
def _split(items: int, num_threads: int) -> list[tuple[int, int]]:
    """``split_items``, kept per (items, threads): a new shape's tables mostly have a row count seen before. The list
    is shared: read only (``SplitCall.run_chunks`` compares it by identity)."""
    return split_items(items, num_threads)


def new_shape_fields(ex: ConvExecutor, geo: ConvGeometry) -> ShapeFields:
    """The ``ShapeFields`` of ``geo`` for ``ex``'s primitive made now, not looked up by the geometry (the caller keeps
    them by its own key: ``ConvPlan.for_shape``'s signature and input shape)."""
    return ShapeFields(ex, geo, ex, ex.packed.nbytes if geo.mode == "conv" else 0)


def shape_fields(ex: ConvExecutor, geo: ConvGeometry, prepared: ConvExecutor | None) -> ShapeFields:
    """``ex``'s ``ShapeFields`` for ``geo``: made on the first call for this geometry in the process (by any
    primitive), then shared."""
    weight_bytes = ex.packed.nbytes if geo.mode == "conv" else 0
    key = (geo, ex.num_threads, ex.dynamic, ex.borders if ex.dynamic and geo.depthwise else None, weight_bytes)
    fields = _SHAPE_FIELDS.get(key)
    if fields is None:
        fields = ShapeFields(ex, geo, prepared, weight_bytes)
        with _SHAPE_FIELDS_LOCK:
            _SHAPE_FIELDS[key] = fields
            while len(_SHAPE_FIELDS) > SHAPE_FIELDS_ENTRIES:
                del _SHAPE_FIELDS[next(iter(_SHAPE_FIELDS))]
    return fields


#: primitive signature -> input shape -> the ``ShapeFields`` of its final geometry (``ShapeFields.geo``): a primitive
#: meeting a shape that another of its signature met (the blocks of a stage) resolves no window and hashes no geometry
#: (a dict per signature: the input shape, already made, is the key, no (signature, shape) tuple per entry)
_SHAPES: dict[int, dict[tuple[int, ...], ShapeFields]] = {}
#: entries in ``_SHAPES``' dicts
_shapes_kept = 0
#: primitive signatures (everything but the input shape that its geometry and ``ShapeFields`` depend on) -> small ints
_SIGNATURES: dict[tuple, int] = {}


def signature(spec: tuple) -> int:
    """A small int for ``spec``, the same for equal specs: a key part that hashes in no time."""
    sig = _SIGNATURES.get(spec)
    if sig is None:
        with _SHAPE_FIELDS_LOCK:
            sig = _SIGNATURES.setdefault(spec, len(_SIGNATURES))
    return sig


def shared_shape(sig: int, x_shape: tuple[int, ...]) -> ShapeFields | None:
    """The ``ShapeFields`` (its ``geo`` the final geometry) a primitive of signature ``sig`` has for the input shape
    ``x_shape``, when one was made (``keep_shape``)."""
    shapes = _SHAPES.get(sig)
    return None if shapes is None else shapes.get(x_shape)


def keep_shape(sig: int, x_shape: tuple[int, ...], ex: ConvExecutor) -> None:
    """Remember ``ex``'s ``ShapeFields`` for the primitives of signature ``sig`` and input shape ``x_shape`` (past
    ``SHAPE_FIELDS_ENTRIES`` in all, every signature's oldest shape is dropped)."""
    global _shapes_kept
    with _SHAPE_FIELDS_LOCK:
        shapes = _SHAPES.get(sig)
        if shapes is None:
            shapes = _SHAPES[sig] = {}
        if x_shape not in shapes:
            _shapes_kept += 1
        shapes[x_shape] = ex.fields
        if _shapes_kept > SHAPE_FIELDS_ENTRIES:
            for kept in _SHAPES.values():
                if kept:
                    del kept[next(iter(kept))]
                    _shapes_kept -= 1


class PaddedBuffer:
    """The padded input buffer of one primitive, shared by its executors of every input shape (a new shape makes no
    buffer of its own: no allocation, no fresh pages to fault in). ``take(ex)`` lays it out for ``ex``'s shape: a
    view of the storage (grown when too small; with a test's ``alloc``, made exactly the shape's size, so guard
    pages stay at its end) whose border is written again (zeros for a convolution or an average, -inf for a
    maximum: padding never wins), since another shape's interior lay there. ``owner``: the executor it was last laid
    out for (a repeated shape pays nothing); ``lock``: held by the call using it (the caller of ``take``)."""

    def __init__(self, alloc: Callable[[tuple[int, ...]], np.ndarray] | None) -> None:
        self.alloc = alloc
        self.storage: np.ndarray | None = None
        self.owner: ConvExecutor | None = None
        self.lock = threading.Lock()

    def take(self, ex: ConvExecutor) -> np.ndarray:
        xp = ex.xp
        if xp is not None and ex.copy is not None and xp.base is self.storage:
            self.owner = ex  # laid out in the burst (``view``); the copy kernel writes the border at every call
            return xp
        shape, size, fill = ex.fields.layout()
        st = self.storage
        if st is None or st.size < size or (self.alloc is not None and st.size != size):
            if self.alloc is not None:
                st = self.alloc((size,))
                st[...] = fill
            elif fill == 0.0:
                st = zeros_aligned((size,))  # calloc: untouched zero pages
            else:
                st = empty_aligned((size,), np.float32, 0)
                st[...] = fill
            self.storage, fresh = st, True
        else:
            fresh = False
        xp = st[:size].reshape(shape)
        if not fresh and ex.copy is None:  # (the copy kernel writes the border at every call: ``copy_header``)
            fill_border(xp, ex.geo, fill)  # the border only: the interior is what the copy writes
        self.owner = ex
        return xp

    def view(self, ex: ConvExecutor) -> np.ndarray:
        """``ex``'s view of the storage (grown first when too small), made in a new shape's burst for an executor whose
        copy kernel writes the border at every call: its first call's ``take`` then only checks that the storage is
        still the one it views (a view made between kernels cost 8-10 us, cold)."""
        shape, size, fill = ex.fields.layout()
        st = self.storage
        if st is None or st.size < size or (self.alloc is not None and st.size != size):
            return self.take(ex)
        return st[:size].reshape(shape)


def fill_border(xp: np.ndarray, g: ConvGeometry, fill: float) -> None:
    """The border of the padded buffer ``xp`` (of geometry ``g``) set to ``fill``, where another shape's rows may lie:
    what the copy kernel writes at each call, for a copy made by numpy."""
    rows = xp.transpose(0, 2, 3, 1) if g.planar else xp
    top, left = (0, 0) if g.depthwise else (g.pt, g.pl)
    rows[:, :top] = fill
    rows[:, top + g.h:] = fill
    inner = rows[:, top:top + g.h]
    inner[:, :, :left] = fill
    inner[:, :, left + g.w:] = fill


def estimated_ns(geo: ConvGeometry, weight_bytes: int) -> float:
    """The single-thread time of a convolution or pool (ns), for the thread split: its flops (taps) at the measured
    rate of its kind, or its weights' read from memory when that takes longer."""
    if geo.mode != "conv":
        rate = POOL_TAPS_PER_NS
    else:
        rate = DEPTHWISE_FLOPS_PER_NS if geo.depthwise else DENSE_FLOPS_PER_NS
    return max(geo.flops / rate, weight_bytes / WEIGHT_BYTES_PER_NS)


_F32 = np.dtype(np.float32)


def in_place_path(ex: ConvExecutor) -> tuple:
    """``ex.run``'s path for an NHWC input read in place (no padding, no pre-op, no copy): (the geometry it holds
    for, the NCHW strides of the contiguous NHWC input it takes, the residual's (None: no residual), the output
    buffer's bytes with the alignment slack, the output's NCHW shape and strides); the input strides are None when
    the primitive always needs its ``_run`` (a copy, a planar stem, a global pool finish, a Concat slice, a test's
    ``alloc``)."""
    if ex.pre_ops or ex.alloc is not None or ex.copy_pitch != ex.geo.c:  # the primitive's own reasons
        return (ex.geo, None)
    return ex.fields.in_place(ex.has_residual)  # the geometry's: made once for the primitives that share it


#: the caller's Python time between a deferred call's return and the next kernel's dispatch (ns): the caller's chunk
#: is that much shorter than a worker's, so both reach the next kernel together
DEFER_GAP_NS = 1500.0


def deferred_chunks(chunks: list[tuple[int, int]], work_ns: float) -> list[tuple[int, int]]:
    """``chunks`` re-cut for a deferred call: with ``T`` threads and ``W`` ns of work, the caller's chunk takes
    ``(W - (T - 1) * gap) / T`` so that its chunk plus the gap ends with the workers' (none when the gap is longer)."""
    threads = len(chunks)
    if threads < 2 or work_ns <= 0:
        return chunks
    items = sum(c for _, c in chunks)
    own = max(0, round(items * (work_ns - (threads - 1) * DEFER_GAP_NS) / (threads * work_ns)))
    rest = split_items(items - own, threads - 1)
    if len(rest) < threads - 1:  # fewer items than workers: keep the even split
        return chunks
    return [(0, own), *((own + s, c) for s, c in rest)]


def _pitch(xt: np.ndarray) -> int | None:
    """The channels per pixel of the NHWC array ``xt`` [N, H, W, C] is a channel slice of (C when it is contiguous),
    or None when its pixels are not evenly spaced rows of such an array."""
    n, h, w, c = xt.shape
    if xt.flags.c_contiguous:  # (numpy's flag ignores the strides of size-1 dims)
        return c
    s0, s1, s2, s3 = xt.strides
    if s3 != 4 or s2 % 4 or s2 < 4 * c or s1 != w * s2 or (n > 1 and s0 != h * s1):
        return None
    return s2 // 4


__all__ = ["ConvExecutor", "data_address", "estimated_ns", "split_items"]

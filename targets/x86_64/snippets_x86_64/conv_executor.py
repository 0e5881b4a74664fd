"""ConvExecutor: runs the JIT convolution (:mod:`snippets_x86_64.conv`) on NCHW arrays, on both cores.

Made once per shape: the packed weight and bias, the work table, the padded NHWC input buffer (its border is
zeroed once and never written again) and the NHWC output buffer. A call reorders the input into the padded
buffer's interior, runs the items split over the threads of the native pool, and reorders the output back to
NCHW (the reorders at the edges of the primitive: see docs/conv.md for the blocked-layout plan).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence

import numpy as np

from snippets_x86_64.conv import ARG_POST, ConvGeometry, PostOp, build_conv_kernel, pack_channels, pack_weights, \
    work_table
from snippets_x86_64.native_pool import native_pool


class ConvExecutor:
    """One convolution with its post-ops: ``run(x, residual=None) -> y``, NCHW float32 in and out.

    ``scale``/``shift`` (per output channel, or None) are folded into the weight and bias: ``y = conv(x, w) *
    scale + shift`` before ``post_ops``; ``channel_data[i]`` is the per-channel vector of ``PostOp(index=i)``.
    """

    def __init__(self, geo: ConvGeometry, w: np.ndarray, scale: np.ndarray | None, shift: np.ndarray | None,
                 post_ops: Sequence[PostOp] = (), channel_data: Sequence[np.ndarray] = (),
                 num_threads: int = 1, alloc: Callable[[tuple[int, ...]], np.ndarray] | None = None) -> None:
        """``alloc(shape)`` makes each float32 buffer the kernel reads or writes (tests pass guarded memory)."""
        self.geo = geo
        self.post_ops = tuple(post_ops)
        new = alloc or (lambda shape: np.empty(shape, dtype=np.float32))

        def keep(a: np.ndarray) -> np.ndarray:
            out = new(a.shape)
            out[...] = a
            return out

        packed, bias, offsets = pack_weights(w, geo, scale, shift)
        self.packed, self.bias = keep(packed), keep(bias)
        self.channel_data = [keep(pack_channels(v, geo)) for v in channel_data]
        self.table = work_table(geo, offsets)
        self.kernel = build_conv_kernel(geo, self.post_ops)
        self.xp = new((geo.n, geo.hp, geo.wp, geo.c))
        self.xp[...] = 0.0
        self.y = new((geo.n, geo.ho, geo.wo, geo.m))
        self.has_residual = any(op.kind == "residual" for op in self.post_ops)
        self.res = new(self.y.shape) if self.has_residual else self.y
        self.args = (ctypes.c_uint64 * (ARG_POST + len(self.channel_data)))(
            self.xp.ctypes.data, self.packed.ctypes.data, self.y.ctypes.data, self.bias.ctypes.data,
            self.res.ctypes.data, self.table.ctypes.data, *(a.ctypes.data for a in self.channel_data))
        items = len(self.table)
        threads = max(1, min(num_threads, items))
        bounds = [items * t // threads for t in range(threads + 1)]
        self.chunks = [(bounds[t], bounds[t + 1] - bounds[t]) for t in range(threads)]

    def run(self, x: np.ndarray, residual: np.ndarray | None = None) -> np.ndarray:
        """``x`` [N, C, H, W] -> [N, M, Ho, Wo] (a new array); ``residual`` has the output's shape."""
        g = self.geo
        self.xp[:, g.pt:g.pt + g.h, g.pl:g.pl + g.w, :] = x.transpose(0, 2, 3, 1)
        if self.has_residual:
            self.res[...] = residual.transpose(0, 2, 3, 1)  # type: ignore[union-attr]
        self.run_nhwc()
        return np.ascontiguousarray(self.y.transpose(0, 3, 1, 2))

    def run_nhwc(self) -> None:
        """Run the kernel on the buffers as they are (the padded input and residual already filled)."""
        args = ctypes.addressof(self.args)
        (start0, count0), rest = self.chunks[0], self.chunks[1:]
        if not rest:
            self.kernel(0, args, start0, count0)
            return
        pool = native_pool()
        addr = self.kernel.address
        with pool.lock:
            pool.run([(addr, 0, args, s, c) for s, c in rest], lambda: self.kernel(0, args, start0, count0))

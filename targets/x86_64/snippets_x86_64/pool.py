"""MaxPool and AveragePool as JIT kernels (and LRN, :mod:`snippets_x86_64.lrn`, built from here): the depthwise
convolution's walk (:mod:`snippets_x86_64.conv`) with ``vmaxps``/``vaddps`` instead of the FMA, on the same NHWC
layout (so a pool after a conv primitive reads its output in place, and a conv after a pool reads the pool's).

The walk reads the unpadded input in place and skips the taps outside the image (explicit and auto padding, and
the extra rows/columns that ``ceil_mode`` windows reach): each output starts from its first tap inside the image.
An average multiplies each output pixel by its reciprocal window count, computed once per shape: the taps inside
the image, or inside the image and its explicit/auto padding with ``count_include_pad`` (positions reached only
through ``ceil_mode`` never count).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from snippets_core.ir.node import Node
from snippets_x86_64.conv import ConvGeometry, with_dims
from snippets_x86_64.conv_executor import ConvExecutor
from snippets_x86_64.global_pool import MODES as GLOBAL_MODES
from snippets_x86_64.global_pool import GlobalPool
from snippets_x86_64.lrn import LRNExecutor

POOL_MODES = {"MaxPool": "max", "AvgPool": "avg"}


def pool_geometry(node: Node, x_shape: tuple[int, ...]) -> tuple[ConvGeometry, tuple[int, int, int, int]]:
    """The window walk of a 2-D pool over ``x_shape`` [N, C, H, W], and its pads (top, left, bottom, right)."""
    n, c, h, w = x_shape
    geo_w = node._geometry(node.kernel)  # type: ignore[attr-defined]
    (ho, wo), (pt, pl), (pb, pr) = geo_w.resolve((h, w))
    kh, kw = node.kernel  # type: ignore[attr-defined]
    geo = ConvGeometry(n, c, h, w, c, c, kh, kw, *geo_w.strides, *geo_w.dilations, pt, pl, ho, wo,
                       mode=POOL_MODES[node.type_name])
    return geo, (pt, pl, pb, pr)


#: input sizes per spatial axis whose output size and pads a dynamic pool keeps (``_pool_geometry_like``)
AXIS_SIZES = 1024


def _pool_geometry_like(node: Node, prepared: ConvExecutor, x_shape: tuple[int, ...],
                        ) -> tuple[ConvGeometry, tuple[int, int, int, int]]:
    """``pool_geometry(node, x_shape)`` for the pool ``prepared`` was made for at another shape (its channels): each
    axis's output size and pads from its size alone, kept per size on ``prepared`` (a new image whose H or W another
    had resolves nothing), the rest ``prepared``'s geometry (its output pitch is the one ``for_shape`` keeps)."""
    axes = prepared.__dict__.get("_pool_axes")
    if axes is None:
        axes = prepared._pool_axes = ({}, {}, node._geometry(node.kernel))  # type: ignore[attr-defined]
    n, _, h, w = x_shape
    got = []
    for i, size in enumerate((h, w)):
        cache = axes[i]
        dims = cache.get(size)
        if dims is None:
            out, pb, pe = axes[2].axis(i, size)
            if len(cache) >= AXIS_SIZES:
                cache.clear()
            dims = cache[size] = (int(out), pb, pe)
        got.append(dims)
    (ho, pt, pb), (wo, pl, pr) = got
    return with_dims(prepared.geo, n=n, h=h, w=w, pt=pt, pl=pl, ho=ho, wo=wo), (pt, pl, pb, pr)


def reciprocal_counts(geo: ConvGeometry, pads: tuple[int, int, int, int], include_pad: bool) -> np.ndarray:
    """[Ho, Wo]: 1 / (the taps of each window that count), float64 computed, f32 stored."""
    pt, pl, pb, pr = pads
    lo_h, hi_h = (-pt, geo.h + pb) if include_pad else (0, geo.h)
    lo_w, hi_w = (-pl, geo.w + pr) if include_pad else (0, geo.w)
    rows = np.arange(geo.ho)[:, None] * geo.sh - pt + np.arange(geo.kh)[None, :] * geo.dh
    cols = np.arange(geo.wo)[:, None] * geo.sw - pl + np.arange(geo.kw)[None, :] * geo.dw
    count_h = ((rows >= lo_h) & (rows < hi_h)).sum(axis=1)
    count_w = ((cols >= lo_w) & (cols < hi_w)).sum(axis=1)
    count = np.maximum(count_h[:, None] * count_w[None, :], 1)
    return (1.0 / count).astype(np.float32)


def build_pool_executor(node: Node, x_shape: tuple[int, ...], num_threads: int,
                        out_shape: tuple[int, ...] | None = None, dynamic: bool = False,
                        prepared: ConvExecutor | GlobalPool | LRNExecutor | None = None, borders: tuple | None = None,
                        alloc: Callable[[tuple[int, ...]], np.ndarray] | None = None, out_pitch: int = 0,
                        ) -> ConvExecutor | LRNExecutor | GlobalPool:
    """The kernel of a pooling primitive (MaxPool, AvgPool, LRN, or a ReduceMean/ReduceMax over H and W: a global
    pool, whose output is ``out_shape``, [N, C, 1, 1] by default) for inputs of ``x_shape``. ``dynamic``: a
    MaxPool/AvgPool's walk on runtime geometry (``conv.kernel_key``), whose kernel ``prepared`` (the same pool made
    for another shape) may already have; ``borders``: its border code for every size (``conv.merge_borders``);
    ``alloc`` makes a MaxPool's/AvgPool's buffers (tests pass guarded memory); ``out_pitch`` (a MaxPool/AvgPool
    writing into a Concat's slice) as ConvExecutor's."""
    if node.type_name in GLOBAL_MODES:
        return GlobalPool(x_shape, GLOBAL_MODES[node.type_name], out_shape, num_threads=num_threads,
                          prepared=prepared if isinstance(prepared, GlobalPool) else None)
    if node.type_name == "LRN":
        return LRNExecutor(x_shape, node.size, node.alpha, node.beta, node.bias,  # type: ignore[attr-defined,arg-type]
                           num_threads=num_threads, prepared=prepared if isinstance(prepared, LRNExecutor) else None)
    if isinstance(prepared, ConvExecutor) and prepared.geo.c == x_shape[1]:
        geo, pads = _pool_geometry_like(node, prepared, x_shape)
    else:
        geo, pads = pool_geometry(node, x_shape)
    if geo.mode == "avg":
        divisor = reciprocal_counts(geo, pads, bool(node.count_include_pad))  # type: ignore[attr-defined]
    else:
        divisor = np.zeros(1, np.float32)
    if isinstance(prepared, ConvExecutor):  # its kernel, the table's template: only the shape's fields are new
        return prepared.for_shape(geo, divisor if geo.mode == "avg" else None)
    return ConvExecutor(geo, divisor, None, None, num_threads=num_threads, dynamic=dynamic, borders=borders,
                        alloc=alloc, out_pitch=out_pitch)

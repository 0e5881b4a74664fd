"""A JIT 2-D convolution for AVX-512 (f32, NHWC), with its post-ops applied in registers before the store.

The kernel is a batch-reduce Brgemm over the kernel taps, the shape oneDNN's brgemm convolutions have: one work
item is an output row segment of one (image, group, output-channel block); for a block of ``R`` output pixels
x ``nv`` zmm of output channels (``R * nv`` accumulators), it reduces over kernel rows, kernel columns and input
channels with one ``vbroadcastss`` of an input value and ``nv`` FMAs against the repacked weight vectors.

* **Layout.** Input of a dense conv: a zero-padded NHWC copy (``[N, Hp, Wp, C]``; planar ``[N, C, Hp, Wp]`` for
  a stem with few channels and a plain input, ``choose_planar``), so every tap of every output pixel is in bounds
  and the inner loop has no border test; the copy is made by the executor (``build_copy_kernel`` for an NHWC
  input), whose padding never changes. An unpadded conv reads its NHWC input in place, a 1x1 one as one matrix
  over the pixels (``flat_pixels``). A depthwise conv or a pool reads the unpadded input in place and skips the
  taps outside the image in code (``_emit_dw_row``). Output: NHWC ``[N, Ho, Wo, M]``.
* **Weights** are repacked once (``pack_weights``): per (group, block of ``nv`` output-channel vectors),
  ``[KH][KW][Cg][nv*16]`` contiguous, zero-padded past the group's last channel, so the weight pointer only
  ever advances. Per-channel scale/shift that follow the convolution (bias, a folded BatchNormalization) are
  folded into the packed weight and bias at that time.
* **Work items** come from a compact table, made per shape: a header (item counts, each moving field's steps per
  output row and per image) and one row per channel block (its input, weight, output and bias offsets, store mask,
  variant and row geometry); the harness (``emit_table_kernel``) works out each item's row and image offsets. Items
  run in order (output rows innermost, so consecutive items reuse one weight block from L2) and are split over
  threads in ranges.
* **Post-ops** (:class:`PostOp`): per-channel add/multiply by packed vectors, a residual add (NHWC, same shape
  as the output), Relu, Clamp, PRelu with a scalar slope (LeakyRelu), HSwish, applied to the accumulators.

The kernel's signature is the native pool's harness: ``conv(unused, args, start, count)`` runs items
``start .. start+count`` with ``args`` = [src, weights, dst, bias, residual, table, per-channel post-op data].
"""

from __future__ import annotations

import ctypes
import functools
import os
import struct
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from snippets_x86_64.asm import (
    CMP_PREDICATES,
    Function,
    bcst,
    dword,
    k1,
    k2,
    qword,
    r8,
    r9,
    r10,
    r11,
    r12,
    r12d,
    r13,
    r14,
    r15,
    rax,
    rbp,
    rbx,
    rcx,
    rdi,
    rdx,
    rsi,
    word,
    zword,
)
from snippets_x86_64.aligned import empty_aligned
from snippets_x86_64.asm.registers import ZMM
from snippets_x86_64.emitters.base import Aux
from snippets_x86_64.emitters.math import emit_sigmoid

if TYPE_CHECKING:
    from snippets_x86_64.jit import JitFunction

#: lanes of a zmm of f32
VEC = 16
#: output-channel vectors per work item at most (4 zmm = 64 channels, the brgemm N block)
MAX_NV = 4
#: input channels unrolled per iteration of the reduction loop
UNROLL = 4
#: fields of a work-table block row (int64): src, weights, dst, bias offsets in bytes, store mask, variant, then the
#: row geometry a shape-agnostic kernel (``build_conv_kernel(..., dynamic=True)``) reads instead of immediates: the
#: input bytes between kernel rows, the full pixel blocks of the row, their size, the tail block's size, the bytes
#: between input channels (a planar buffer's plane), which right-border code a depthwise walk runs (``dw_borders``).
#: A work table is compact: ``HEAD`` header rows, one row per channel block, then a walk's row variants; the kernel's
#: harness (``emit_table_kernel``) adds each item's row and image offsets to the fields that move (src, weights, dst)
ROW = 12
RT_PITCH, RT_NFULL, RT_RFULL, RT_RTAIL, RT_CH, RT_RIGHT = range(6, 12)
#: a dense conv with a pool epilogue (no right border code) reads there the input bytes between the conv rows of a
#: pool window (``sh * Wp`` pixels: the image width is a runtime value); its pixel block fields count whole windows
RT_ROW = RT_RIGHT
#: a depthwise or pool walk (whose input is never planar: no channel pitch to read) reads there which left border
#: code runs (``dw_borders``: a window whose pads change with the size, auto_pad SAME at stride 2, has two)
RT_LEFT = RT_CH
#: a work table's header: row 0 holds the images, the stored rows per image, the channel blocks, the bytes from this
#: header to the next segment's (a ConvTranspose's phases: one segment each, in one table) and the address of a walk's
#: row variants (one int64 per stored row, added to the block's variant; 0: none); row 1 what each field of a block
#: row gains per stored row, row 2 per image, row 3 once (a walk's source corner). The items are (image, block, row),
#: or (image, row, block) for a walk.
HEAD = 4
TB_N, TB_ROWS, TB_BLOCKS, TB_BYTES, TB_VARS = range(5)
#: fixed args before the per-channel post-op arrays: src, weights, dst, bias, residual, table
ARG_SRC, ARG_WEI, ARG_DST, ARG_BIAS, ARG_RES, ARG_TAB, ARG_POST = range(7)


@dataclass(frozen=True)
class PostOp:
    """One step after the accumulation: ``kind`` in :data:`POST_OP_KINDS`; ``lo``/``hi`` for clamp, ``alpha`` for
    prelu and the beta of swish (``x * sigmoid(beta x)``); ``index`` of the per-channel array for add_c/mul_c."""

    kind: str
    lo: float = 0.0
    hi: float = 0.0
    alpha: float = 0.0
    index: int = 0


POST_OP_KINDS = ("add_c", "mul_c", "residual", "relu", "clamp", "prelu", "prelu_c", "hswish", "sigmoid", "swish")


@dataclass(frozen=True)
class ConvDims:
    """The sizes of a 2-D convolution over one input shape: the fields and the window arithmetic the f32 kernel
    (``ConvGeometry``) and the int8 one (``conv_int8.Int8ConvShape``) share. ``hp``/``wp``: the padded input copy,
    every tap of every output row inside it (the end pads are whatever makes every window fit)."""

    n: int
    c: int
    h: int
    w: int
    m: int
    group: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int
    ho: int
    wo: int

    @property
    def cg(self) -> int:
        return self.c // self.group

    @property
    def mg(self) -> int:
        return self.m // self.group

    @property
    def hp(self) -> int:
        return max((self.ho - 1) * self.sh + (self.kh - 1) * self.dh + 1, self.pt + self.h)

    @property
    def wp(self) -> int:
        return max((self.wo - 1) * self.sw + (self.kw - 1) * self.dw + 1, self.pl + self.w)


@dataclass(frozen=True)
class ConvGeometry(ConvDims):
    """A 2-D convolution resolved against one input shape (pads are final, auto_pad applied)."""

    #: "conv", or a pooling over the same windows: "max", "avg" (the divisor per output pixel comes as the
    #: "weights": one reciprocal count per output pixel)
    mode: str = "conv"
    #: the padded input copy is planar (NCHW): a convolution with few input channels (an RGB stem) whose NCHW
    #: input is copied row by row instead of transposed channel by channel into NHWC
    planar: bool = False
    #: a MaxPool/AveragePool applied to the output in registers after the post-ops (``PoolEpilogue``): the kernel
    #: stores the pooled [N, pool.ho, pool.wo, M] only
    pool: PoolEpilogue | None = None
    #: "mean" or "max" over each image's pixels after the post-ops (a GlobalAveragePool/GlobalMaxPool epilogue): the
    #: kernel adds each output row's pixels into its row's first pixel of the output buffer, and
    #: ``build_global_finish_kernel`` reduces those rows into [N, M]
    global_pool: str | None = None
    #: channels between neighbouring output pixels, 0 for ``m``: a producer of a channel Concat writes its
    #: channels into a slice of the Concat's NHWC output (the destination pointer at the slice's first channel)
    out_pitch: int = 0

    @property
    def out_h(self) -> int:
        """Rows of the tensor the kernel stores (the pooled rows with a pool epilogue)."""
        return self.ho if self.pool is None else self.pool.ho

    @property
    def out_w(self) -> int:
        return self.wo if self.pool is None else self.pool.wo

    @property
    def mo(self) -> int:
        """Channels per pixel of the output the kernel writes (``m``, or the Concat's channel count)."""
        return self.out_pitch or self.m

    @property
    def px_bytes(self) -> int:
        """Bytes between neighbouring input columns of the buffer the kernel reads."""
        return 4 if self.planar else self.cp * 4

    @property
    def ch_bytes(self) -> int:
        """Bytes between neighbouring input channels of that buffer."""
        return self.hp * self.wp * 4 if self.planar else 4

    @property
    def hp(self) -> int:
        """Rows of the padded input copy (``ConvDims.hp``; a depthwise conv or a pool reads the input itself: its
        kernel skips the taps outside the image). (``ConvDims.hp`` written out: ``super()`` costs a new shape's
        path more than the arithmetic.)"""
        if self.depthwise:
            return self.h
        return max((self.ho - 1) * self.sh + (self.kh - 1) * self.dh + 1, self.pt + self.h)

    @property
    def wp(self) -> int:
        if self.depthwise:
            return self.w
        return max((self.wo - 1) * self.sw + (self.kw - 1) * self.dw + 1, self.pl + self.w)

    @functools.cached_property
    def depthwise(self) -> bool:
        """One input and one output channel per group: the channels are the vector lanes (no reduction over C).
        Asked ~180 times per new shape of a model: kept in the instance's dict, which ``with_dims`` copies (it never
        changes ``mode``, ``group``, ``c`` or ``m``; ``dataclasses.replace`` makes a fresh dict)."""
        return self.mode != "conv" or (self.group > 1 and self.group == self.c == self.m)

    @property
    def vec_groups(self) -> int:
        """Groups of the vector layout of weights, bias and outputs (depthwise: one, all channels)."""
        return 1 if self.depthwise else self.group

    @property
    def vec_channels(self) -> int:
        """Output channels per vector group."""
        return self.m if self.depthwise else self.mg

    @property
    def cp(self) -> int:
        """Channels per pixel of the input the kernel reads (the channel tail of a depthwise walk is a masked
        load)."""
        return self.c

    def row_taps(self, oh: int) -> tuple[int, int]:
        """The kernel rows ``[lo, hi)`` of output row ``oh`` that fall inside the image (depthwise and pools)."""
        rows = [i for i in range(self.kh) if 0 <= oh * self.sh - self.pt + i * self.dh < self.h]
        return (rows[0], rows[-1] + 1) if rows else (0, 0)

    def col_taps(self, ow: int) -> tuple[int, ...]:
        """The kernel columns of output column ``ow`` that fall inside the image."""
        return tuple(j for j in range(self.kw) if 0 <= ow * self.sw - self.pl + j * self.dw < self.w)

    def row_variants(self) -> list[tuple[int, int]]:
        """The distinct row-tap ranges over the output rows, in order of first use (one code path each)."""
        return self.row_variant_index()[0]

    def row_variant_index(self) -> tuple[list[tuple[int, int]], np.ndarray]:
        """``row_variants`` and, per output row, the index of its variant: numpy over the rows (a dynamic shape
        makes them on its first call, once: cached on the dims they depend on), the same ranges as ``row_taps``. The
        index array is read-only."""
        variants, index = _row_variant_index(self.ho, self.h, self.sh, self.pt, self.kh, self.dh)
        return list(variants), index

    @property
    def nvp(self) -> int:
        """Output-channel vectors per vector group (the last one partial when not a multiple of 16)."""
        return -(-self.vec_channels // VEC)

    def blocks(self) -> list[tuple[int, int]]:
        """(first vector, vector count) of each output-channel block of a group: as even as the vector count
        allows, larger ones first (5 vectors are 3 + 2, not 4 + 1: a 1-vector block does one FMA per load)."""
        return list(channel_blocks(self.nvp, self.dw_reuse))

    @property
    def dw_reuse(self) -> bool:
        """A depthwise convolution walked one channel vector at a time with its taps' weights in registers and each
        input vector loaded once per kernel row (``_emit_dw_reuse_block``): stride and dilation 1 along W, and room
        for the taps, a 14-pixel block and the input vector in the 32 zmm registers. (At stride 2 it saves a third of
        the loads but measured 3-10 % slower: one vector per item reads 64 of each pixel's bytes per pass.)"""
        return self.mode == "conv" and self.depthwise and self.sw == 1 and self.dw == 1 \
            and self.kh * self.kw + DW_REUSE_PIXELS + 1 <= ZMM_COUNT

    @property
    def flops(self) -> int:
        if self.mode != "conv":
            return self.n * self.m * self.ho * self.wo * self.kh * self.kw
        return 2 * self.n * self.m * self.ho * self.wo * self.cg * self.kh * self.kw


@functools.lru_cache(maxsize=1024)
def _row_variant_index(ho: int, h: int, sh: int, pt: int, kh: int, dh: int) -> tuple[tuple[tuple[int, int], ...],
                                                                                    np.ndarray]:
    """``ConvGeometry.row_variant_index`` of these dims (a depthwise walk's table, its key and its borders each ask).
    Only the border rows (a tap above or below the image) are worked out one by one: every row between them has all
    ``kh`` taps, so a new shape costs a few rows of Python and one array, whatever its height."""
    top = min(ho, -(-pt // sh))  # rows whose first tap lies above the image
    last = h - 1 + pt - (kh - 1) * dh  # the last input start whose last tap is inside
    bottom = max(top, min(ho, last // sh + 1 if last >= 0 else 0))  # rows from here on reach below it

    def taps(oh: int) -> tuple[int, int]:
        rows = [i for i in range(kh) if 0 <= oh * sh - pt + i * dh < h]
        return (rows[0], rows[-1] + 1) if rows else (0, 0)

    order: dict[tuple[int, int], int] = {}
    head = [order.setdefault(taps(oh), len(order)) for oh in range(top)]
    full = order.setdefault((0, kh), len(order)) if bottom > top else 0
    tail = [order.setdefault(taps(oh), len(order)) for oh in range(bottom, ho)]
    index = np.full(ho, full, np.int64)
    index[:top] = head
    index[bottom:] = tail
    index.flags.writeable = False
    return tuple(order), index


@functools.lru_cache(maxsize=1024)
def channel_blocks(nvp: int, one_vector: bool) -> tuple[tuple[int, int], ...]:
    """``ConvGeometry.blocks`` of ``nvp`` vectors (``one_vector``: a ``dw_reuse`` walk), made once per count (the
    int8 kernel's blocks too)."""
    count = nvp if one_vector else -(-nvp // MAX_NV)
    sizes = [nvp // count + (1 if b < nvp % count else 0) for b in range(count)]
    return tuple((sum(sizes[:b]), n) for b, n in enumerate(sizes))


#: pixels per work item of a pointwise convolution at most (a row of the flattened image, see ``flat_pixels``)
FLAT_CHUNK = 196
#: work items a pointwise convolution is cut into at least, when the image allows (two threads, balanced)
FLAT_MIN_ITEMS = 8


def flat_pixels(geo: ConvGeometry) -> ConvGeometry:
    """A 1x1, stride 1, unpadded convolution is a plain Brgemm over the NHWC pixels: the image is re-cut into
    rows of a divisor of H*W pixels (same memory, no copy), so that a 7x7 or 14x14 map is not one short row with
    a register-block tail per image row, and the work splits into enough items for both threads. (Asked per new
    shape of every primitive: the cheap field tests first, the cut cached on its ints.)"""
    if geo.kh != 1 or geo.kw != 1 or geo.sh != 1 or geo.sw != 1 or geo.pt or geo.pl or geo.ho != geo.h \
            or geo.wo != geo.w or geo.mode != "conv" or geo.planar or geo.pool is not None or geo.depthwise:
        return geo
    rows = _flat_rows(geo.h, geo.w, geo.n * geo.group * len(channel_blocks(-(-geo.mg // VEC), False)))
    if rows is None:
        return geo
    return with_dims(geo, h=rows[0], w=rows[1], ho=rows[0], wo=rows[1])


@functools.lru_cache(maxsize=1024)
def _flat_rows(h: int, w: int, items_per_row: int) -> tuple[int, int] | None:
    """``flat_pixels``' cut of an ``h`` x ``w`` image: (rows, pixels per row), None to keep the image rows."""
    pixels = h * w
    chunk = _flat_chunk(pixels, items_per_row)
    if chunk < min(w, 12):  # a prime-ish pixel count: the image rows are the better cut
        return None
    return pixels // chunk, chunk


def with_dims(geo: ConvGeometry, **dims: Any) -> ConvGeometry:
    """``dataclasses.replace(geo, **dims)`` without the per-field construction (a few us less on a new shape's path:
    the fields are plain ints, nothing to validate). Never ``mode``, ``group``, ``c`` or ``m``: the cached
    ``depthwise`` in the copied dict depends on them."""
    out = object.__new__(ConvGeometry)
    out.__dict__.update(geo.__dict__)
    out.__dict__.update(dims)
    return out


@functools.lru_cache(maxsize=1024)
def _flat_chunk(pixels: int, items_per_row: int) -> int:
    """``flat_pixels``' row length: the largest divisor of ``pixels`` up to ``FLAT_CHUNK`` that still cuts the
    work into ``FLAT_MIN_ITEMS`` items (``items_per_row`` per row of pixels), else the largest divisor."""
    largest = 0
    for d in range(min(pixels, FLAT_CHUNK), 0, -1):  # from the top: a new image size stops at the first good one
        if pixels % d == 0:
            if items_per_row * (pixels // d) >= FLAT_MIN_ITEMS:
                return d
            largest = largest or d
    return largest


#: input channels up to which a convolution reads a planar (NCHW) padded copy
PLANAR_MAX_C = 4


def planar_fits(c: int, group: int, kh: int, kw: int) -> bool:
    """A dense, non-pointwise convolution with at most ``PLANAR_MAX_C`` input channels reads its input planar
    (the target asks AssignLayouts to leave such an input NCHW: ``X86_64Target.preferred_input_layout``)."""
    return group == 1 and c <= PLANAR_MAX_C and not (kh == kw == 1)


def choose_planar(geo: ConvGeometry) -> ConvGeometry:
    """``geo`` with a planar input copy when it has few input channels (see ``ConvGeometry.planar``)."""
    if geo.mode == "conv" and planar_fits(geo.c, geo.group, geo.kh, geo.kw):
        return with_dims(geo, planar=True)  # (a new shape's stem: no dataclass construction)
    return geo


def pixels_per_block(nv: int, wo: int) -> int:
    """Output pixels per register block: ``R * nv`` accumulators + ``nv`` weights + 2 broadcasts + 1 temp, at
    most; then as even as the row allows with the same block count (a 7-pixel row is 4 + 3, not 6 + 1: the tail
    block costs the weight loads of a full one)."""
    most = min(max_pixels_per_block(nv), wo)
    return -(-wo // -(-wo // most))


def max_pixels_per_block(nv: int) -> int:
    """The widest register block of ``nv`` output-channel vectors (``pixels_per_block`` of a long row)."""
    return max(1, min((ZMM_COUNT - nv - 3) // nv, 14))


ZMM_COUNT = 32
#: pixels per register block of a ``dw_reuse`` depthwise walk at most (``pixels_per_block`` of one vector)
DW_REUSE_PIXELS = 14


#: weight elements from which pack_weights fills half of each panel on a second thread (below, handing the work
#: over costs more than it saves); ResNet-50's 53 convolutions: 42 -> 25 ms on two otherwise idle cores
PACK_SPLIT_ELEMENTS = 1 << 17


_HELPER: dict[int, ThreadPoolExecutor] = {}


def helper_pool() -> ThreadPoolExecutor | None:
    """The compile's helper thread (None on a single CPU): half of pack_weights, half of hashing a weight for the
    disk cache, where numpy and hashlib drop the GIL. One per process: a forked child does not inherit the thread,
    so it makes its own."""
    if (os.cpu_count() or 1) < 2:
        return None
    pool = _HELPER.get(os.getpid())
    if pool is None:
        pool = _HELPER.setdefault(os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="snippets-pack"))
    return pool


def pack_weights(w: np.ndarray, geo: ConvGeometry, scale: np.ndarray | None, bias: np.ndarray | None,
                 ) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """``w`` [M, Cg, KH, KW] into per-(group, block) ``[KH][KW][Cg][nv*16]`` panels, ``scale`` (per output
    channel) multiplied in; the bias padded to whole vectors per group. Returns (packed, bias, block offsets in
    elements, one per (group, block))."""
    if geo.depthwise:  # [KH][KW][whole vectors]: channel blocks are slices of it
        w = w.astype(np.float64)
        if scale is not None:
            w = w * scale.reshape(-1, 1, 1, 1)
        panel = np.zeros((geo.kh, geo.kw, geo.nvp * VEC), dtype=np.float32)
        panel[..., : geo.m] = w[:, 0].transpose(1, 2, 0)
        offsets = [v0 * VEC for v0, _ in geo.blocks()]
        return panel.ravel(), pack_channels(np.zeros(geo.m) if bias is None else bias, geo), offsets
    # each panel is written once, in place in the result, straight from a [group, KH, KW, Cg, Mg] view of ``w``
    # (output channels innermost: a strided read of contiguous runs); the scale is multiplied in float64 and
    # rounded once to f32. One pass and one allocation: ResNet-50's 53 convolutions 80 -> 42 ms (it was a
    # transposed copy, then a zero-filled panel per block, then their concatenation, then the executor's copy)
    wg = w.reshape(geo.group, geo.mg, geo.cg, geo.kh, geo.kw).transpose(0, 3, 4, 2, 1)
    sc = None if scale is None else np.asarray(scale, np.float64).reshape(geo.group, 1, 1, 1, geo.mg)
    blocks = geo.blocks()
    taps = geo.kh * geo.kw * geo.cg
    # on a 64-byte boundary, as the executor keeps it (so it keeps this array, not an aligned copy)
    packed = empty_aligned((geo.group * sum(nv for _, nv in blocks) * VEC * taps,), np.float32, 0)
    spans, offsets, at = [], [], 0  # (group, first channel, end channel, panel) per block
    for g in range(geo.group):
        for v0, nv in blocks:
            size = taps * nv * VEC
            spans.append((g, v0 * VEC, min((v0 + nv) * VEC, geo.mg), packed[at : at + size].reshape(
                geo.kh, geo.kw, geo.cg, nv * VEC)))
            offsets.append(at)
            at += size

    def fill(c0: int, c1: int) -> None:  # input channels [c0, c1) of every panel
        for g, lo, hi, whole in spans:
            panel = whole[:, :, c0:c1]
            panel[..., hi - lo :] = 0  # the channels past the group's last one
            if sc is not None:
                np.multiply(wg[g, :, :, c0:c1, lo:hi], sc[g, ..., lo:hi], out=panel[..., : hi - lo],
                            dtype=np.float64, casting="same_kind")
            else:
                panel[..., : hi - lo] = wg[g, :, :, c0:c1, lo:hi]

    pool = helper_pool() if w.size >= PACK_SPLIT_ELEMENTS and geo.cg >= 2 else None
    if pool is None:
        fill(0, geo.cg)
    else:  # half the input channels on the helper thread: numpy drops the GIL in its copy and multiply loops
        half = pool.submit(fill, geo.cg // 2, geo.cg)
        fill(0, geo.cg // 2)
        half.result()
    b = np.zeros((geo.group, geo.nvp * VEC), dtype=np.float32)
    if bias is not None:
        b[:, : geo.mg] = bias.reshape(geo.group, geo.mg)
    return packed, b.ravel(), offsets


def pack_channels(values: np.ndarray, geo: ConvGeometry) -> np.ndarray:
    """A per-output-channel vector padded to whole zmm per group (the bias layout)."""
    b = np.zeros((geo.vec_groups, geo.nvp * VEC), dtype=np.float32)
    b[:, : geo.vec_channels] = np.asarray(values, dtype=np.float32).reshape(geo.vec_groups, geo.vec_channels)
    return b.ravel()


def table_spec(geo: ConvGeometry, offsets: Sequence[int]) -> tuple:
    """What a work table's per-block template depends on (``_block_template``'s arguments): the channels, groups and
    blocks, never the image (a group's input channel offset is read only with several groups, and a planar buffer,
    whose plane changes with the size, has one): an executor keeps it for its next shapes."""
    groups = geo.vec_groups
    return (groups, geo.nvp, geo.vec_channels, channel_blocks(geo.nvp, geo.dw_reuse),
            geo.cg * geo.ch_bytes if groups > 1 else 0, geo.mg, geo.depthwise,
            tuple(offsets) if geo.mode == "conv" else ())


def work_table(geo: ConvGeometry, offsets: Sequence[int], borders: tuple | None = None, spec: tuple | None = None,
               ) -> np.ndarray:
    """The compact work table (``HEAD`` + blocks rows of ``ROW`` int64): the header (the item counts, the moving
    fields' steps per stored row and per image, a walk's source corner and the address of its row variants) and one
    row per (group, output-channel block). The kernel's harness numbers the items (image, block, stored row), stored
    rows innermost (depthwise and pools: (image, stored row, block)), as many as ``table_items``, and adds each one's
    row and image offsets itself. The table is a few per-shape scalars (the counts, steps, the row geometry of each
    block kind) laid out by one ``take`` with the blocks' fields, both cached on the channels (``_dense_layout``,
    ``_walk_layout``): its cost does not grow with the image, the blocks or the batch. ``spec``:
    ``table_spec(geo, offsets)`` when the caller kept it."""
    spec = spec or table_spec(geo, offsets)
    if geo.depthwise:
        table = walk_table(geo, borders, spec)
        if table is None:
            raise ValueError(f"the walk's border code does not cover an image of {geo.h}x{geo.w} (``covers``)")
        return table
    n, out_h, wo = geo.n, geo.out_h, geo.wo
    row_dst = geo.out_w * geo.mo * 4
    const, index, pack, kinds = _dense_layout(*spec)
    # with a pool epilogue a stored row is a pooled row, which reads the conv rows of its windows (pool.sh conv
    # rows apart)
    pool = geo.pool
    step = 1 if pool is None else pool.sh
    hp, wp = geo.hp, geo.wp  # (properties: each read once)
    px, ch = (4, hp * wp * 4) if geo.planar else (geo.c * 4, 4)
    # a row's units (pixels; pooled windows with a pool epilogue) in blocks: a dynamic kernel reads their counts
    units, conv_rows = wo, 0
    if pool is not None:
        units, conv_rows = pool.wo, geo.sh * wp * px
        sizes = [pooled_per_block(nv, pool) or 1 for nv in kinds]
    elif geo.global_pool is not None:  # every block sums its pixels in one order (the widest block: ``_emit_row``)
        sizes = [_block_pixels((spec[3][0][1],), wo)[0]] * len(kinds)
    else:
        sizes = _block_pixels(kinds, wo)
    scalars = [n, out_h, step * geo.sh * wp * px, row_dst, geo.c * hp * wp * 4, out_h * row_dst, geo.dh * wp * px,
               ch, conv_rows]
    for r in sizes:
        scalars += (units // r, r, units % r)
    return np.frombuffer(const + pack(*scalars), np.int64).take(index)


def walk_table(geo: ConvGeometry, borders: tuple | None, spec: tuple) -> WorkTable | None:
    """``work_table`` of a depthwise or pool walk whose kernel has the border code ``borders`` (None: this size's
    own), or None when that code does not cover this size (``covers``: a row variant or border pattern it lacks),
    found by the same lookups that index the table's variants and patterns (a new shape asks no ``covers`` first)."""
    # depthwise and pools read the unpadded input: (oh*sh - pt, -pl) may lie outside, never read
    rows = _walk_rows(geo.ho, geo.h, geo.sh, geo.pt, geo.kh, geo.dh, borders[0] if borders else None)
    if rows is None:
        return None
    var_of_oh, variants, var_at = rows
    left = right = 0
    if borders is not None:  # indexes into the kernel's lists
        pattern = border_pattern(borders, geo)
        if pattern is None:
            return None
        left, right = pattern
    n, out_h, wo = geo.n, geo.out_h, geo.wo
    row_dst = geo.out_w * geo.mo * 4
    c4 = geo.cp * 4
    a, b = interior_columns(geo)  # a dynamic walk's interior columns: loops of the widest block, the rest by bits
    cols = b - a
    const, index, pack, loops = _walk_layout(*spec, variants)
    scalars = [n, out_h, var_at, geo.sh * geo.w * c4, wo * 4 if geo.mode != "conv" else 0, row_dst,
               geo.h * geo.w * c4, out_h * row_dst, -(geo.pt * geo.w + geo.pl) * c4, geo.dh * geo.w * c4, left, right]
    for loop in loops:  # the interior's blocks of each loop block
        scalars += divmod(cols, loop)
    table = np.frombuffer(const + pack(*scalars), np.int64).take(index).view(WorkTable)
    table.rows = var_of_oh  # read by the kernel through the header's address
    return table


class WorkTable(np.ndarray):
    """A walk's work table (``work_table``): an int64 array that keeps its row variants alive (the header holds their
    address; the array is ``_walk_rows``' cached one, which the cache may drop while the table is in use)."""

    rows: np.ndarray | None = None


def table_items(table: np.ndarray) -> int:
    """The work items of a compact table (``work_table``; every segment of a ConvTranspose's): what the thread split
    divides."""
    n, rows, blocks, size = table[0, :4].tolist()
    if size >= table.nbytes:  # one segment
        return n * rows * blocks
    flat, items, at = table.reshape(-1), 0, 0
    while at < len(flat):
        n, rows, blocks, size = flat[at:at + 4].tolist()
        if size < (HEAD + blocks) * ROW * 8:  # not a compact table's header (the harness would walk off it too)
            raise ValueError(f"not a compact work table: a segment of {size} bytes holds {blocks} blocks")
        items, at = items + n * rows * blocks, at + size // 8
    return items


@functools.lru_cache(maxsize=1024)
def _walk_rows(ho: int, h: int, sh: int, pt: int, kh: int, dh: int, border_rows: tuple | None,
               ) -> tuple[np.ndarray, int, int] | None:
    """A walk's row variant per output row, the count of variants the kernel has and the array's address: indexes
    into ``border_rows`` (``dw_borders``' row variants of the kernel) when given, else into this size's own
    (``row_variant_index``). Cached on the ints it depends on (a pool and the depthwise convs of a stage share
    them); read-only."""
    variants, index = _row_variant_index(ho, h, sh, pt, kh, dh)
    if border_rows is not None and border_rows[:len(variants)] != variants:  # the kernel numbers them otherwise
        if not all(v in border_rows for v in variants):
            return None  # a row variant the kernel has no code for
        index = np.asarray([border_rows.index(v) for v in variants], np.int64)[index]
        index.flags.writeable = False
    return index, len(variants if border_rows is None else border_rows), index.__array_interface__["data"][0]


#: the per-shape scalars of a dense table (``work_table``), in order, then ``DENSE_KIND`` per block kind: the images,
#: stored rows, the source's and destination's steps per row and per image, the kernel-row pitch, the channel pitch
#: (planar), a pool window's conv-row bytes
DENSE_SCALARS = ("n", "rows", "row0", "row2", "img0", "img2", "pitch", "ch", "conv_rows")
DENSE_KIND = ("nfull", "rfull", "rtail")
#: a walk's: the row variants' address, its row steps (a pool's reciprocal counts too), the source's corner, which
#: border code runs; per loop block, the interior's full blocks and the rest
WALK_SCALARS = ("n", "rows", "vars", "row0", "row1", "row2", "img0", "img2", "corner", "pitch", "left", "right")
WALK_KIND = ("nfull", "rtail")


def _layout(fields: np.ndarray, kinds: list[int], header: tuple[tuple, ...], geometry: tuple,
            scalars: tuple[str, ...], per_kind: tuple[str, ...]) -> tuple[bytes, np.ndarray, Callable[..., bytes],
                                                                       tuple[int, ...]]:
    """A table layout: (the constant int64s as bytes, the ``take`` index of every table cell into those constants
    followed by the per-shape scalars, the scalars' packer, the distinct block kinds). ``fields``: each block's first
    six fields; ``header``: ``HEAD`` rows of cells; ``geometry``: the other fields of a block row. A cell is an int (a
    constant), a name of ``scalars``, a name of ``per_kind`` (the block's kind's) or ``"kind"`` (the kind itself)."""
    distinct = tuple(dict.fromkeys(kinds))
    names = list(scalars) + [(name, k) for k in range(len(distinct)) for name in per_kind]
    const: list[int] = [0]
    cells: list[Any] = []  # an int: a constant's place; a tuple: a scalar's

    def cell(value: Any) -> None:
        if isinstance(value, int):
            const.append(value)
            cells.append(len(const) - 1)
        else:
            cells.append((names.index(value),))

    for line in header:
        for value in line + (0,) * (ROW - len(line)):
            cell(value)
    for row, kind in zip(fields.tolist(), kinds):
        k = distinct.index(kind)
        for value in row:
            cell(value)
        for value in geometry:
            cell(kind if value == "kind" else (value, k) if value in per_kind else value)
    index = np.array([c if isinstance(c, int) else len(const) + c[0] for c in cells], np.intp).reshape(-1, ROW)
    index.flags.writeable = False
    return np.array(const, np.int64).tobytes(), index, struct.Struct(f"<{len(names)}q").pack, distinct


@functools.lru_cache(maxsize=512)
def _dense_layout(*spec: Any) -> tuple[bytes, np.ndarray, Callable[..., bytes], tuple[int, ...]]:
    """A dense table's ``_layout`` (``_block_template(*spec)``): the kinds are the blocks' vector counts (two at most:
    the blocks are as even as the vectors allow), each with its own pixel blocks."""
    template = _block_template(*spec)
    count = len(template)
    header = (("n", "rows", count, (HEAD + count) * ROW * 8), ("row0", 0, "row2"), ("img0", 0, "img2"), ())
    geometry = ("pitch", "nfull", "rfull", "rtail", "ch", "conv_rows")
    return _layout(template[:, :RT_PITCH], [int(v) for v in template[:, RT_RFULL]], header, geometry, DENSE_SCALARS,
                   DENSE_KIND)


@functools.lru_cache(maxsize=512)
def _walk_layout(*spec: Any) -> tuple[bytes, np.ndarray, Callable[..., bytes], tuple[int, ...]]:
    """A depthwise or pool walk's ``_layout`` for a kernel of ``variants`` row variants (the last argument after
    ``table_spec``'s): ``_block_template`` with each block's variant (its vector count's first; the kernel adds the
    row's); the kinds are the blocks' loop blocks (the widest register block of their vector count,
    ``max_pixels_per_block``, in ``RT_RFULL``), each with its own interior counts."""
    *spec, variants = spec
    template = _block_template(*spec)
    fields = template[:, :RT_PITCH].copy()
    fields[:, 5] *= variants
    count = len(template)
    header = (("n", "rows", count, (HEAD + count) * ROW * 8, "vars"), ("row0", "row1", "row2"), ("img0", 0, "img2"),
              ("corner",))
    return _layout(fields, [max_pixels_per_block(int(nv)) for nv in template[:, RT_RFULL]], header,
                   ("pitch", "nfull", "kind", "rtail", "left", "right"), WALK_SCALARS, WALK_KIND)


@functools.lru_cache(maxsize=4096)
def _block_pixels(nvs: tuple[int, ...], wo: int) -> tuple[int, ...]:
    """``pixels_per_block`` of each block's vector count on a row of ``wo`` outputs (at least 1)."""
    return tuple(pixels_per_block(nv, wo) if wo > 0 else max_pixels_per_block(nv) for nv in nvs)


@functools.lru_cache(maxsize=512)
def _block_template(vec_groups: int, nvp: int, vec_channels: int, blocks: tuple[tuple[int, int], ...], group_src: int,
                    mg: int, depthwise: bool, offsets: tuple[int, ...]) -> np.ndarray:
    """The work-table fields of each (group, channel block) that no image dim changes: the source's channel offset,
    the weight block, the output's channel offset, the bias block, the store mask, the variant (row variant 0), and
    the block's vector count (in ``RT_RFULL``, for ``work_table``). Read-only: callers copy it."""
    out = np.zeros((vec_groups * len(blocks), ROW), np.int64)
    rem = vec_channels - (nvp - 1) * VEC
    for k, (g, (v0, nv)) in enumerate((g, blk) for g in range(vec_groups) for blk in blocks):
        out[k, 0] = v0 * VEC * 4 if depthwise else g * group_src
        out[k, 1] = offsets[k] * 4 if offsets else 0
        out[k, 2] = (g * mg + v0 * VEC) * 4
        out[k, 3] = (g * nvp + v0) * VEC * 4
        out[k, 4] = (1 << rem) - 1 if v0 + nv == nvp else 0xFFFF
        out[k, 5] = int(nv != blocks[0][1])
        out[k, RT_RFULL] = nv
    out.flags.writeable = False
    return out


def kernel_key(geo: ConvGeometry, dynamic: bool, borders: tuple | None = None) -> tuple:
    """What ``build_conv_kernel`` specializes on: never the batch (the table holds each image's offsets). With
    ``dynamic`` a dense convolution's code depends on neither the image size nor the pads (the row pitch and the
    row's pixel blocks come from the table, the padding is in the buffer): one kernel serves every N, H, W; a
    depthwise or pooling walk's on its border taps only (``dw_borders``; ``merge_borders`` of every size a dynamic
    dim can take, tiny maps included: one kernel for all), never on the pads: the table holds the source's corner
    and picks the row and column border code (auto_pad SAME, whose pads change with the size, builds none per
    shape)."""
    if dynamic and not geo.depthwise:
        pool = None if geo.pool is None else replace(geo.pool, ho=0, wo=0)  # the pooled rows come from the table
        return with_dims(geo, n=0, h=0, w=0, ho=0, wo=0, pt=0, pl=0, pool=pool), ()
    if dynamic:  # ``borders`` (merge_borders: every size's) when they cover this size, else its own
        return with_dims(geo, n=0, h=0, w=0, ho=0, wo=0, pt=0, pl=0), borders if borders and covers(borders, geo) \
            else dw_borders(geo)
    return with_dims(geo, n=0), ()


def build_conv_kernel(geo: ConvGeometry, post_ops: tuple[PostOp, ...], dynamic: bool = False,
                      borders: tuple | None = None) -> JitFunction:
    """The JIT function ``conv(unused, args, start, count)`` for ``geo`` (see the module docstring). ``dynamic``
    (a dense convolution): the row pitch, the pixel blocks of a row and a planar buffer's plane come from each
    table row, so the kernel serves every image size (``kernel_key``); the blocks are the static kernel's. A dynamic
    depthwise or pooling walk has code for the row variants and border columns of ``borders`` (``dw_borders(geo)``
    when None)."""
    fn = Function("conv", args=("unused", "args", "start", "count"))
    blocks = geo.blocks()
    nvs = [blocks[0][1]] + ([blocks[-1][1]] if blocks[-1][1] != blocks[0][1] else [])
    if dynamic and geo.depthwise:
        borders = borders or dw_borders(geo)
    row_vars = list(borders[0]) if borders else geo.row_variants() if geo.depthwise else [(0, geo.kh)]
    variants = [(nv, rows) for nv in nvs for rows in row_vars]  # the table's variant indexes this list

    def load() -> None:  # (the residual row is at the output row's offset: r11, a moving field)
        fn.mov(r10, qword[r15 + 24])
        fn.kmovw(k1, word[r15 + 32])

    def variant(nv: int, rows: tuple[int, int]) -> None:
        if geo.depthwise and dynamic:
            _emit_dw_row_dynamic(fn, geo, nv, rows, post_ops, borders)
        elif geo.depthwise:
            _emit_dw_row(fn, geo, nv, rows, post_ops)
        elif dynamic:
            _emit_row_dynamic(fn, geo, nv, post_ops)
        elif geo.pool is not None:
            _emit_pooled_row(fn, geo, nv, post_ops)
        else:
            _emit_row(fn, geo, nv, post_ops)

    return emit_table_kernel(fn, ROW, ARG_TAB, load, 40, [functools.partial(variant, *v) for v in variants],
                             walk=geo.depthwise)


def emit_table_kernel(fn: Function, row: int, tab_arg: int, load: Callable[[], None], variant_at: int,
                      variants: Sequence[Callable[[], None]], walk: bool = False,
                      moving: Sequence[tuple[int, Any, int]] = ((0, rbx, ARG_SRC), (1, r8, ARG_WEI), (2, r9, ARG_DST),
                                                                 (2, r11, ARG_RES)),
                      ) -> JitFunction:
    """The native pool's harness ``(unused, args, start, count)`` over a compact work table (``args[tab_arg]``, rows
    of ``row`` int64 fields: the header of ``HEAD`` rows, the channel blocks, a walk's row variants; see ``ROW``) for
    the f32 and the int8 conv kernels. The items are (image, block, stored row), rows innermost, or with ``walk``
    (image, row, block): ``start`` is unravelled by two ``div``s, the counters and the (image, row) part of each
    moving field kept in stack slots (the variant code uses nearly every GPR). Per item r15 points at its block's
    row, and each ``(field, register, arg)`` of ``moving`` gets ``args[arg]`` + the block's field + the row's and the
    image's steps of it + the header's constant; ``load`` reads the kernel's other per-block fields (``[r15 + 8 *
    field]``; it leaves rdi alone), then the code of the variant the block's int64 at byte ``variant_at`` names
    (plus, with ``walk``, the row's variant) runs (``variants[i]`` emits variant ``i``). A table of several segments (a ConvTranspose's phases, each a header and
    its blocks, ``TB_BYTES`` apart) runs them in order: the items are numbered across the segments."""
    slot = fn.stack_slot(8 * (5 + len(moving)))
    s_hdr, s_row, s_blk, s_img, s_rvar = (slot + 8 * i for i in range(5))
    offs = [slot + 8 * (5 + k) for k in range(len(moving))]
    inner, outer = (s_blk, s_row) if walk else (s_row, s_blk)
    inner_n, outer_n = (TB_BLOCKS, TB_ROWS) if walk else (TB_ROWS, TB_BLOCKS)
    seek, found, fresh, top = (fn.new_label(x) for x in ("seek", "found", "fresh", "item"))
    nxt, wrap, new_outer, new_img = (fn.new_label(x) for x in ("next", "wrap", "new_outer", "new_img"))
    fn.mov(r14, rcx)
    fn.test(r14, r14)
    fn.jz(fn.exit)
    fn.mov(rax, qword[rsi + tab_arg * 8])
    fn.mov(r8, rdx)
    # the segment holding item ``start`` (r8): skip whole segments (an empty one too), then unravel the rest
    fn.bind(seek)
    fn.mov(r9, qword[rax + TB_N * 8])
    fn.imul(r9, qword[rax + TB_ROWS * 8])
    fn.imul(r9, qword[rax + TB_BLOCKS * 8])
    fn.cmp(r8, r9)
    fn.jb(found)
    fn.sub(r8, r9)
    fn.add(rax, qword[rax + TB_BYTES * 8])
    fn.jmp(seek)
    fn.bind(found)
    fn.mov(s_hdr, rax)
    fn.mov(r10, rax)
    fn.mov(r9, qword[r10 + TB_ROWS * 8])
    fn.imul(r9, qword[r10 + TB_BLOCKS * 8])
    fn.mov(rax, r8)
    fn.xor(rdx, rdx)
    fn.div(r9)
    fn.mov(s_img, rax)
    fn.mov(rax, rdx)
    fn.xor(rdx, rdx)
    fn.div(qword[r10 + inner_n * 8])
    fn.mov(outer, rax)
    fn.mov(inner, rdx)
    # a new (image, row) or block: each moving field's image and row part, a walk's row variant, the block's row
    fn.bind(fresh)
    fn.mov(rax, s_hdr)
    fn.mov(rcx, s_row)
    fn.mov(rdx, s_img)
    for (field, reg, arg), off in zip(moving, offs):
        fn.mov(reg, rcx)
        fn.imul(reg, qword[rax + (row + field) * 8])
        fn.mov(rdi, rdx)
        fn.imul(rdi, qword[rax + (2 * row + field) * 8])
        fn.add(reg, rdi)
        fn.add(reg, qword[rax + (3 * row + field) * 8])
        fn.add(reg, qword[rsi + arg * 8])
        fn.mov(off, reg)
    if walk:
        fn.mov(rdi, qword[rax + TB_VARS * 8])
        fn.mov(rdi, qword[rdi + rcx * 8])
        fn.mov(s_rvar, rdi)
    fn.imul(r15, s_blk, row * 8)
    fn.add(r15, rax)
    fn.add(r15, HEAD * row * 8)
    fn.bind(top)
    for (field, reg, _), off in zip(moving, offs):
        fn.mov(reg, off)
        fn.add(reg, qword[r15 + field * 8])
    load()
    var = qword[r15 + variant_at]
    if walk:  # (rdi: no ``load`` touches it)
        fn.mov(rdi, s_rvar)
        fn.add(rdi, var)
        var = rdi
    labels = [fn.new_label(f"variant{i}") for i in range(len(variants))]
    for i in range(1, len(variants)):
        fn.cmp(var, i)
        fn.je(labels[i])
    for label, emit in zip(labels, variants):
        fn.bind(label)
        emit()
        fn.jmp(nxt)
    fn.bind(nxt)
    fn.dec(r14)
    fn.jz(fn.exit)
    # the next item: the inner counter on (a dense conv's next row: each moving field one row step on; a walk's next
    # block: r15 one row on), else the outer one, the image, the segment
    fn.mov(rax, s_hdr)
    fn.mov(rcx, inner)
    fn.inc(rcx)
    fn.cmp(rcx, qword[rax + inner_n * 8])
    fn.jae(wrap)
    fn.mov(inner, rcx)
    if walk:
        fn.add(r15, row * 8)
    else:
        for (field, _, _), off in zip(moving, offs):
            fn.mov(rdi, qword[rax + (row + field) * 8])
            fn.add(off, rdi)
    fn.jmp(top)
    fn.bind(wrap)
    fn.mov(qword[inner], 0)
    fn.mov(rcx, outer)
    fn.inc(rcx)
    fn.cmp(rcx, qword[rax + outer_n * 8])
    fn.jb(new_outer)
    fn.mov(qword[outer], 0)
    fn.mov(rcx, s_img)
    fn.inc(rcx)
    fn.cmp(rcx, qword[rax + TB_N * 8])
    fn.jb(new_img)
    fn.add(rax, qword[rax + TB_BYTES * 8])  # the next segment's first item (past any empty one)
    fn.xor(r8, r8)
    fn.jmp(seek)
    fn.bind(new_img)
    fn.mov(s_img, rcx)
    fn.jmp(fresh)
    fn.bind(new_outer)
    fn.mov(outer, rcx)
    fn.jmp(fresh)
    return fn.finalize(None, (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64))


def _emit_row(fn: Function, geo: ConvGeometry, nv: int, post_ops: tuple[PostOp, ...]) -> None:
    """One output row segment of ``nv`` channel vectors: full pixel blocks in a loop, then the tail block."""
    # a global pool sums every channel block's pixels in one order (the block of the widest variant): channels
    # with equal values stay equal (a softmax over them stays flat)
    r_full = pixels_per_block(nv if geo.global_pool is None else geo.blocks()[0][1], geo.wo)
    src_step = r_full * geo.sw * geo.px_bytes
    dst_step = r_full * geo.mo * 4
    if geo.global_pool is not None:  # every block of the row reduces into the row's slot (r9 stays)
        _emit_global_init(fn, geo, nv)
    steps = [(rbx, src_step)] + ([(r9, dst_step)] if geo.global_pool is None else []) + [(r11, dst_step)]
    emit_pixel_loop(fn, geo.wo, r_full, lambda r: _emit_block(fn, geo, nv, r, post_ops), steps)


def emit_pixel_loop(fn: Function, wo: int, r_full: int, block: Callable[[int], None],
                    steps: Sequence[tuple[Any, int]]) -> None:
    """A row of ``wo`` output pixels (the f32 and the int8 conv kernels): ``block(r)`` emits a register block of
    ``r`` pixels; the full blocks of ``r_full`` run in a loop (counted in r12) that advances each ``(register,
    bytes)`` of ``steps`` per block, then the tail block."""
    n_full, r_tail = divmod(wo, r_full)
    if n_full:
        loop = fn.new_label("pixels")
        fn.mov(r12, n_full)
        fn.bind(loop)
        block(r_full)
        for reg, step in steps:
            fn.add(reg, step)
        fn.dec(r12)
        fn.jnz(loop)
    if r_tail:
        block(r_tail)


def _emit_row_dynamic(fn: Function, geo: ConvGeometry, nv: int, post_ops: tuple[PostOp, ...]) -> None:
    """``_emit_row`` with the row read from the table: ``RT_NFULL`` blocks of ``RT_RFULL`` pixels in a loop, then
    one of ``RT_RTAIL``; one loop per block size ``pixels_per_block`` can pick and one tail per size, selected by
    compares (a few per output row, against thousands of FMAs). With a pool epilogue the unit is a pool window (a
    block of ``q`` windows holds their ``q * KH * KW`` conv pixels, the conv rows one ``RT_ROW`` apart, in r11: no
    residual comes with a pool); with a global pool every block reduces into the row's slot (r9 stays)."""
    pk = geo.pool
    if pk is not None:
        win = pk.kh * pk.kw
        most = (ZMM_COUNT - nv - 3) // (win * nv)
        fn.mov(r11, qword[r15 + RT_ROW * 8])
        steps = [(rbx, pk.sw * geo.sw * geo.px_bytes), (r9, geo.mo * 4)]

        def block(q: int) -> None:
            _emit_block(fn, geo, nv, q * win, post_ops, dynamic=True, pooled=q)
    else:
        most = max_pixels_per_block(nv)
        dst_px = geo.mo * 4
        steps = [(rbx, geo.sw * geo.px_bytes)] + ([(r9, dst_px)] if geo.global_pool is None else []) + [(r11, dst_px)]
        if geo.global_pool is not None:  # every block of the row reduces into the row's slot
            _emit_global_init(fn, geo, nv)

        def block(q: int) -> None:
            _emit_block(fn, geo, nv, q, post_ops, dynamic=True)
    emit_pixel_loop_dynamic(fn, range(most, 0, -1), most, block, steps, (RT_NFULL, RT_RFULL, RT_RTAIL))


def emit_pixel_loop_dynamic(fn: Function, sizes: Sequence[int], most: int, block: Callable[[int], None],
                            steps: Sequence[tuple[Any, int]], fields: tuple[int, int, int]) -> None:
    """``emit_pixel_loop`` on a row read from the table (the f32 and the int8 conv kernels' dynamic rows): the int64
    fields ``fields`` of the item (r15) hold the count of full blocks, their size (one of ``sizes``, the largest
    first: the compares fall through to it) and the tail block's size (below ``most``); one loop per size and one
    tail per size, selected by compares (a few per output row, against thousands of multiply-adds). ``steps``:
    ``(register, bytes per pixel)``."""
    n_at, r_at, t_at = (f * 8 for f in fields)
    tail, end = fn.new_label("tail"), fn.new_label("row_end")
    fulls = {r: fn.new_label(f"full{r}") for r in sizes}
    tails = {r: fn.new_label(f"tail{r}") for r in range(1, most)}
    fn.mov(r12, qword[r15 + n_at])
    fn.test(r12, r12)
    fn.jz(tail)
    for r in sizes[1:]:
        fn.cmp(qword[r15 + r_at], r)
        fn.je(fulls[r])
    for r in sizes:
        fn.bind(fulls[r])
        block(r)
        for reg, step in steps:
            fn.add(reg, r * step)
        fn.dec(r12)
        fn.jnz(fulls[r])
        fn.jmp(tail)
    fn.bind(tail)
    for r in range(1, most):
        fn.cmp(qword[r15 + t_at], r)
        fn.je(tails[r])
    fn.jmp(end)
    for r in range(1, most):
        fn.bind(tails[r])
        block(r)
        fn.jmp(end)
    fn.bind(end)


def _emit_dw_row(fn: Function, geo: ConvGeometry, nv: int, rows: tuple[int, int], post_ops: tuple[PostOp, ...],
                 ) -> None:
    """A depthwise/pool output row whose kernel rows ``rows`` are inside the image: the border columns (some
    taps outside the image) as straight-line blocks that skip those taps, the interior columns in a loop."""
    r_full = pixels_per_block(nv, geo.wo)
    a, b = interior_columns(geo)
    at = 0  # the output column the row pointers (rbx, r9, r11, and r8 for avg) point at

    def advance(pixels: int) -> None:
        _advance_dw(fn, geo, pixels)

    def static(lo: int, hi: int) -> None:
        for ow in range(lo, hi, r_full):
            cols = [geo.col_taps(o) for o in range(ow, min(ow + r_full, hi))]
            _emit_dw_block(fn, geo, nv, rows, cols, ow - at, post_ops)

    static(0, a)
    n_full = (b - a) // r_full
    if n_full:
        advance(a)
        at = a
        loop = fn.new_label("pixels")
        fn.mov(r12, n_full)
        fn.bind(loop)
        _emit_dw_block(fn, geo, nv, rows, [tuple(range(geo.kw))] * r_full, 0, post_ops)
        advance(r_full)
        fn.dec(r12)
        fn.jnz(loop)
        at = a + n_full * r_full
    static(a + n_full * r_full, b)
    static(b, geo.wo)


def interior_columns(geo: ConvGeometry) -> tuple[int, int]:
    """The output columns ``[a, b)`` whose taps all lie inside the image (a depthwise walk's loop; the rest are its
    border columns), ``(Wo, Wo)`` when there is none."""
    a = min(geo.wo, -(-geo.pl // geo.sw))  # the first column whose first tap is inside
    last = geo.w + geo.pl - (geo.kw - 1) * geo.dw - 1  # the last input start whose last tap is inside
    b = min(geo.wo, last // geo.sw + 1) if last >= 0 else 0
    return (a, b) if a < b else (geo.wo, geo.wo)


def _advance_dw(fn: Function, geo: ConvGeometry, pixels: int) -> None:
    """A depthwise/pool walk's row pointers (rbx, r9, r11, and r8 for avg) ``pixels`` output columns on."""
    if pixels:
        fn.add(rbx, pixels * geo.sw * geo.cp * 4)
        fn.add(r9, pixels * geo.mo * 4)
        fn.add(r11, pixels * geo.mo * 4)
        if geo.mode == "avg":
            fn.add(r8, pixels * 4)


def dw_borders(geo: ConvGeometry) -> tuple:
    """What a dynamic depthwise/pool kernel's code depends on beyond the windows: the row-tap variants (top, middle,
    bottom), the left border patterns (the column taps of the left border columns), the right border patterns and
    the whole-row patterns it has code for (here one: ``geo``'s). An image too small for an interior column (its left
    and right borders meet) has no left nor right pattern: its whole row is one straight-line pattern. Made from the
    two axes' ints (cached on those: a new shape's kernel key, ``covers``, and its table each ask)."""
    return (_row_variant_index(geo.ho, geo.h, geo.sh, geo.pt, geo.kh, geo.dh)[0],
            *_col_borders(geo.wo, geo.w, geo.sw, geo.pl, geo.kw, geo.dw))


@functools.lru_cache(maxsize=1024)
def _col_borders(wo: int, w: int, sw: int, pl: int, kw: int, dw: int) -> tuple[tuple, tuple, tuple]:
    """``dw_borders``' column patterns of a row of ``wo`` outputs over ``w`` inputs: (left patterns, right patterns,
    whole-row patterns), one pattern in all."""
    def taps(ow: int) -> tuple[int, ...]:
        return tuple(j for j in range(kw) if 0 <= ow * sw - pl + j * dw < w)

    a = min(wo, -(-pl // sw))  # the first column whose first tap is inside (``interior_columns``)
    last = w + pl - (kw - 1) * dw - 1
    b = min(wo, last // sw + 1) if last >= 0 else 0
    if a >= b:
        return (), (), (tuple(taps(o) for o in range(wo)),)
    return (tuple(taps(o) for o in range(a)),), (tuple(taps(o) for o in range(b, wo)),), ()


def merge_borders(geometries: list[ConvGeometry]) -> tuple:
    """One ``dw_borders`` that serves all of ``geometries`` (sizes of one window walk, ``border_sizes``): the union
    of their row variants, left and right border patterns and whole-row patterns, the table selecting each shape's
    (``RT_LEFT``, ``RT_RIGHT``), so one kernel serves every size, a window whose pads change with the size included
    (auto_pad SAME: its left border follows the size's parity at stride 2)."""
    parts: list[dict] = [{}, {}, {}, {}]
    for geo in geometries:
        for part, patterns in zip(parts, dw_borders(geo)):
            part.update(dict.fromkeys(patterns))
    return tuple(tuple(part) for part in parts)  # type: ignore[return-value]


def border_pattern(borders: tuple, geo: ConvGeometry) -> tuple[int, int] | None:
    """The indexes of ``geo``'s column patterns among ``borders``'s (the table's ``RT_LEFT``, ``RT_RIGHT``): its
    left and right border patterns, or (0, past the right ones) its whole-row pattern (an image with no interior
    column); None when ``borders`` lacks one (``covers``)."""
    left, right, whole = _col_borders(geo.wo, geo.w, geo.sw, geo.pl, geo.kw, geo.dw)
    if right:
        lefts, rights = borders[1], borders[2]
        if left[0] not in lefts or right[0] not in rights:
            return None
        return lefts.index(left[0]), rights.index(right[0])
    if whole[0] not in borders[3]:
        return None
    return 0, len(borders[2]) + borders[3].index(whole[0])


def covers(borders: tuple, geo: ConvGeometry) -> bool:
    """``borders`` (``merge_borders``) has code for ``geo``'s rows and border columns."""
    rows, lefts, rights, wholes = dw_borders(geo)
    kernel_rows = borders[0]
    if not all(r in kernel_rows for r in rows):
        return False
    return wholes[0] in borders[3] if wholes else lefts[0] in borders[1] and rights[0] in borders[2]


def _emit_dw_row_dynamic(fn: Function, geo: ConvGeometry, nv: int, rows: tuple[int, int],
                         post_ops: tuple[PostOp, ...], borders: tuple) -> None:
    """``_emit_dw_row`` for every image width ``borders`` (``dw_borders``/``merge_borders``) covers: the left border
    columns straight-line, the interior in a loop of the widest blocks (``RT_NFULL`` of them) and the rest of it in
    blocks of 8, 4, 2, 1 selected by the bits of ``RT_RTAIL``, then the right border columns of the pattern
    ``RT_RIGHT`` selects; an ``RT_RIGHT`` past the right patterns selects a whole-row pattern instead (an image
    with no interior column: every column straight-line). The left border is the pattern ``RT_LEFT`` selects when
    there are several (pads that change with the size). The kernel rows are one pitch (``RT_PITCH``) apart."""
    r_full = max_pixels_per_block(nv)
    _, lefts, rights, wholes = borders

    def border(cols: tuple) -> None:
        for at in range(0, len(cols), r_full):
            _emit_dw_block(fn, geo, nv, rows, list(cols[at:at + r_full]), at, post_ops, dynamic=True)

    end = fn.new_label("row_end")
    whole_labels = [fn.new_label(f"whole{k}") for k in range(len(wholes))]
    for k, label in enumerate(whole_labels):
        if rights or k + 1 < len(wholes):  # the last one falls through when there is no interior path
            fn.cmp(qword[r15 + RT_RIGHT * 8], len(rights) + k)
            fn.je(label)
    if rights:
        _emit_dw_interior(fn, geo, nv, rows, post_ops, lefts, rights, border, end)
    for label, cols in zip(whole_labels, wholes):
        fn.bind(label)
        border(cols)
        fn.jmp(end)
    fn.bind(end)


def _emit_dw_interior(fn: Function, geo: ConvGeometry, nv: int, rows: tuple[int, int], post_ops: tuple[PostOp, ...],
                      lefts: tuple, rights: tuple, border: Callable[[tuple], None], end: Any) -> None:
    """A dynamic walk's row with interior columns (``_emit_dw_row_dynamic``): the left border pattern ``RT_LEFT``
    selects, the interior loop and tail, the right border pattern ``RT_RIGHT`` selects, then a jump to ``end``."""
    r_full = max_pixels_per_block(nv)
    full = [tuple(range(geo.kw))]
    interior = fn.new_label("interior")
    labels = [fn.new_label(f"left{k}") for k in range(len(lefts))]
    for k in range(1, len(lefts)):
        fn.cmp(qword[r15 + RT_LEFT * 8], k)
        fn.je(labels[k])
    for k, (label, cols) in enumerate(zip(labels, lefts)):
        fn.bind(label)
        border(cols)
        _advance_dw(fn, geo, len(cols))
        if k + 1 < len(lefts):  # the last one falls through
            fn.jmp(interior)
    fn.bind(interior)
    loop, rest = fn.new_label("pixels"), fn.new_label("rest")
    fn.mov(r12, qword[r15 + RT_NFULL * 8])
    fn.test(r12, r12)
    fn.jz(rest)
    fn.bind(loop)
    _emit_dw_block(fn, geo, nv, rows, full * r_full, 0, post_ops, dynamic=True)
    _advance_dw(fn, geo, r_full)
    fn.dec(r12)
    fn.jnz(loop)
    fn.bind(rest)
    for bit in (8, 4, 2, 1):
        if bit < r_full:
            skip = fn.new_label(f"rest{bit}")
            fn.test(qword[r15 + RT_RTAIL * 8], bit)
            fn.jz(skip)
            _emit_dw_block(fn, geo, nv, rows, full * bit, 0, post_ops, dynamic=True)
            _advance_dw(fn, geo, bit)
            fn.bind(skip)
    labels = [fn.new_label(f"right{k}") for k in range(len(rights))]
    for k in range(1, len(rights)):
        fn.cmp(qword[r15 + RT_RIGHT * 8], k)
        fn.je(labels[k])
    for label, cols in zip(labels, rights):
        fn.bind(label)
        border(cols)
        fn.jmp(end)


def _emit_block(fn: Function, geo: ConvGeometry, nv: int, r: int, post_ops: tuple[PostOp, ...],
                dynamic: bool = False, pooled: int = 0) -> None:
    """``r`` pixels x ``nv`` vectors: zero, reduce over (kh, kw, ic), post-ops, store. ``dynamic``: the kernel-row
    pitch (and a planar buffer's channel pitch) from the table row (``RT_PITCH``, ``RT_CH``) instead of immediates;
    a planar buffer's few channels (at most ``PLANAR_MAX_C``) are then unrolled, each one pitch past the last. With
    ``pooled`` (a pool epilogue) the ``r`` pixels are the ``pooled`` windows of the pool, window by window, stored
    reduced."""
    pix = geo.sw * geo.px_bytes  # bytes between the input pixels of neighbouring outputs
    if pooled and dynamic:  # a window's conv rows are r11 (``RT_ROW``) bytes apart: indexed, by scale 1 or 2
        offs: list[Any] = _pool_window_offsets(geo, pooled, dynamic=True)
    elif pooled:
        offs = _pool_window_offsets(geo, pooled)
    else:
        offs = [i * pix for i in range(r)]

    def pixel(base: Any, i: int, disp: int) -> Any:
        """The input of block pixel ``i`` from ``base``, ``disp`` bytes on."""
        if isinstance(offs[i], tuple):
            a, col = offs[i]
            return dword[(base + r11 * a if a else base) + (disp + col)]
        return dword[base + (disp + offs[i])]
    acc = [[ZMM[i * nv + j] for j in range(nv)] for i in range(r)]
    wv = [ZMM[r * nv + j] for j in range(nv)]
    bc = [ZMM[r * nv + nv], ZMM[r * nv + nv + 1]]
    tmp = ZMM[r * nv + nv + 2]
    for row in acc:
        for z in row:
            fn.vxorps(z, z, z)
    ch = geo.ch_bytes
    vbytes = nv * VEC * 4  # weight bytes per input channel
    turn = [0]

    planar_dynamic = dynamic and geo.planar

    def body(count: int) -> None:
        if planar_dynamic:
            fn.mov(rdx, rbp)
        for u in range(count):
            for j in range(nv):
                fn.vmovups(wv[j], zword[r13 + (u * vbytes + j * 64)])
            for i in range(r):
                b = bc[turn[0] % 2]
                turn[0] += 1
                fn.vbroadcastss(b, pixel(rdx, i, 0) if planar_dynamic else pixel(rbp, i, u * ch))
                for j in range(nv):
                    fn.vfmadd231ps(acc[i][j], wv[j], b)
            if planar_dynamic and u + 1 < count:
                fn.add(rdx, qword[r15 + RT_CH * 8])

    n_unrolled, rest = divmod(geo.cg, UNROLL)
    if planar_dynamic:  # a runtime channel pitch: no immediate displacements, the few channels unrolled
        n_unrolled, rest = 0, geo.cg
    emit_tap_walk(fn, geo.kh, geo.kw, body, n_unrolled, rest, ch, vbytes, geo.dw * geo.px_bytes,
                  qword[r15 + RT_PITCH * 8] if dynamic else geo.dh * geo.wp * geo.px_bytes)
    _emit_post_ops(fn, geo, acc, [*bc, tmp, *wv], post_ops)
    if pooled:
        _emit_pool_store(fn, geo, acc, pooled)
        return
    if geo.global_pool is not None:
        _emit_global_store(fn, geo, acc, tmp)
        return
    for i in range(r):
        for j in range(nv):
            dst = zword[r9 + (i * geo.mo * 4 + j * 64)]
            fn.vmovups(dst.mask(k1) if j == nv - 1 else dst, acc[i][j])


def emit_tap_walk(fn: Function, kh: int, kw: int, body: Callable[[int], None], n_unrolled: int, rest: int,
                  ch_step: int, vbytes: int, col_step: int, row_step: Any) -> None:
    """The reduction of a dense conv register block over (kernel rows, kernel columns, input channel steps), read in
    place from the padded input (the f32 and the int8 conv kernels): rbx the block's first input pixel, r8 its
    weights; rax walks the kernel rows (``row_step`` bytes: an immediate or a table field), rbp the taps
    (``col_step`` bytes) and their channels, r13 the weights (``vbytes`` per channel step). ``body(count)`` emits
    ``count`` channel steps (``ch_step`` input bytes each) from rbp and r13: ``n_unrolled`` times ``UNROLL`` of them
    in a loop (counted in rdx), then ``rest``."""
    fn.mov(rax, rbx)
    fn.mov(r13, r8)
    fn.mov(rdi, kh)
    kh_loop, kw_loop = fn.new_label("kh"), fn.new_label("kw")
    fn.bind(kh_loop)
    fn.mov(rbp, rax)
    fn.mov(rcx, kw)
    fn.bind(kw_loop)
    if n_unrolled:
        ic_loop = fn.new_label("ic")
        fn.mov(rdx, n_unrolled)
        fn.bind(ic_loop)
        body(UNROLL)
        fn.add(rbp, UNROLL * ch_step)
        fn.add(r13, UNROLL * vbytes)
        fn.dec(rdx)
        fn.jnz(ic_loop)
    if rest:
        body(rest)
        fn.add(r13, rest * vbytes)
    # rbp walked the unrolled channel steps (the rest's are displacements): to the next tap
    fn.add(rbp, col_step - n_unrolled * UNROLL * ch_step)
    fn.dec(rcx)
    fn.jnz(kw_loop)
    fn.add(rax, row_step)
    fn.dec(rdi)
    fn.jnz(kh_loop)


def _emit_dw_reuse_block(fn: Function, geo: ConvGeometry, rows: tuple[int, int], r: int, at: int,
                         post_ops: tuple[PostOp, ...], dynamic: bool = False) -> None:
    """Depthwise, one channel vector, ``r`` pixels whose kernel columns are all inside the image (``dw_reuse``):
    the taps' weights sit in registers, and per kernel row each of the ``r + KW - 1`` input vectors is loaded once
    and multiplied into the up to KW accumulators that read it (a third of the loads of an FMA per tap with a memory
    operand, for 3x3). The channel tail's lanes load as zeros (masked, never faulting) and are never stored."""
    acc = [[ZMM[p]] for p in range(r)]
    taps = [(i, j) for i in range(*rows) for j in range(geo.kw)]
    wr = {tap: ZMM[r + k] for k, tap in enumerate(taps)}
    x = ZMM[r + len(taps)]
    for i, j in taps:
        fn.vmovups(wr[(i, j)], zword[r8 + (i * geo.kw + j) * geo.nvp * VEC * 4])
    for row in acc:
        fn.vxorps(row[0], row[0], row[0])
    row_base = _dw_row_base(fn, geo, rows, dynamic)
    for i in range(*rows):
        base, row_off = row_base(i)
        for q in range(r + geo.kw - 1):
            fn.vmovups(x.mask(k1).z, zword[base + row_off + (q + at) * geo.cp * 4])
            for j in range(geo.kw):
                if 0 <= q - j < r:
                    fn.vfmadd231ps(acc[q - j][0], wr[(i, j)], x)
    _emit_post_ops(fn, geo, acc, [x, *wr.values(), *ZMM[r + len(taps) + 1:]], post_ops, at)
    for p in range(r):
        fn.vmovups(zword[r9 + (at + p) * geo.mo * 4].mask(k1), acc[p][0])


def _emit_dw_block(fn: Function, geo: ConvGeometry, nv: int, rows: tuple[int, int], cols: list[tuple[int, ...]],
                   at: int, post_ops: tuple[PostOp, ...], dynamic: bool = False) -> None:
    """Depthwise: ``len(cols)`` pixels (from ``at`` pixels past the row pointers) x ``nv`` channel vectors, the
    taps unrolled, each an FMA of an input vector; kernel rows ``rows`` and, per pixel, columns ``cols[p]`` are
    inside the image, the rest are skipped. Pooling is the same walk with vmaxps/vaddps (each accumulator
    starts from its pixel's first tap). The last vector's lanes past the channels are masked (k1) on every load:
    the input is read in place."""
    r = len(cols)
    if geo.dw_reuse and all(len(c) == geo.kw for c in cols) and rows[1] > rows[0]:
        _emit_dw_reuse_block(fn, geo, rows, r, at, post_ops, dynamic)
        return
    row_base = _dw_row_base(fn, geo, rows, dynamic)
    acc = [[ZMM[i * nv + j] for j in range(nv)] for i in range(r)]
    wv = [ZMM[r * nv + j] for j in range(nv)]
    free = [ZMM[r * nv + nv + k] for k in range(3)]
    pix = geo.sw * geo.cp * 4
    started = [False] * r
    if geo.mode == "conv":
        for row in acc:
            for z in row:
                fn.vxorps(z, z, z)
    for i in range(*rows):
        base, row_off = row_base(i)
        for j in range(geo.kw):
            users = [p for p in range(r) if j in cols[p]]
            if not users:
                continue
            off = row_off + (j * geo.dw + at * geo.sw) * geo.cp * 4
            if geo.mode == "conv":
                tap = i * geo.kw + j
                for v in range(nv):
                    fn.vmovups(wv[v], zword[r8 + (tap * geo.nvp * VEC * 4 + v * 64)])
            for p in users:
                for v in range(nv):
                    src = zword[base + (off + p * pix + v * 64)]
                    z = acc[p][v]
                    dst = z.mask(k1) if v == nv - 1 else z
                    if geo.mode == "conv":
                        fn.vfmadd231ps(dst, wv[v], src)
                    elif not started[p]:
                        fn.vmovups(dst.z if v == nv - 1 else dst, src)
                    else:
                        (fn.vmaxps if geo.mode == "max" else fn.vaddps)(dst, z, src)
                started[p] = True
    for p in range(r):
        if geo.mode != "conv" and not started[p]:  # a ceil_mode window wholly outside the image
            for z in acc[p]:
                fn.vxorps(z, z, z)
    if geo.mode == "avg":
        for p in range(r):
            for z in acc[p]:
                fn.vmulps(z, z, bcst(r8 + (at + p) * 4))
    if geo.mode == "conv":
        _emit_post_ops(fn, geo, acc, [*free, *wv], post_ops, at)
    for p in range(r):
        for v in range(nv):
            dst = zword[r9 + ((at + p) * geo.mo * 4 + v * 64)]
            fn.vmovups(dst.mask(k1) if v == nv - 1 else dst, acc[p][v])


def _dw_row_base(fn: Function, geo: ConvGeometry, rows: tuple[int, int], dynamic: bool):  # noqa: ANN202
    """``base(i)`` -> (register, byte offset) of kernel row ``i``'s input row, for ``i`` over ``rows`` in order: rbx
    and an immediate; in a dynamic kernel rax, stepped by the table's pitch (``RT_PITCH``) before each row."""
    if not dynamic:
        return lambda i: (rbx, i * geo.dh * geo.w * geo.cp * 4)
    fn.mov(rax, rbx)
    at = [0]  # the kernel row rax points at

    def base(i: int) -> tuple:
        for _ in range(i - at[0]):
            fn.add(rax, qword[r15 + RT_PITCH * 8])
        at[0] = i
        return rax, 0

    return base


def _emit_post_ops(fn: Function, geo: ConvGeometry, acc: list[list], free: list,
                   post_ops: tuple[PostOp, ...], at: int = 0, bias: bool = True, post_arg: int = ARG_POST) -> None:
    """The post-op chain on every accumulator; the bias (with any folded shift) comes first. ``free``: the
    zmm registers not holding accumulators (the broadcast and weight registers are dead here); ``at``: the
    block's first pixel past the row pointers (the residual's). The int8 kernel (conv_int8.py) runs stretches of
    its chain here: ``bias`` False (it dequantized already), its per-channel arrays' pointers from arg ``post_arg``."""
    nv = len(acc[0])
    tmp = free[2]
    aux = Aux(tuple(free[:3]), (k2,))
    if bias:
        fn.mov(rdx, qword[rsi + ARG_BIAS * 8])
        for j in range(nv):
            fn.vmovups(tmp, zword[rdx + r10 + j * 64])
            for row in acc:
                fn.vaddps(row[j], row[j], tmp)
    for op in post_ops:
        if op.kind in ("add_c", "mul_c"):
            fn.mov(rdx, qword[rsi + (post_arg + op.index) * 8])
            for j in range(nv):
                fn.vmovups(tmp, zword[rdx + r10 + j * 64])
                for row in acc:
                    (fn.vaddps if op.kind == "add_c" else fn.vmulps)(row[j], row[j], tmp)
        elif op.kind == "residual":
            for i, row in enumerate(acc):
                for j, z in enumerate(row):
                    src = zword[r11 + ((at + i) * geo.mo * 4 + j * 64)]
                    if j == nv - 1:  # the group's last vector may be partial: a masked load never faults
                        fn.vmovups(tmp.mask(k1).z, src)
                        fn.vaddps(z, z, tmp)
                    else:
                        fn.vaddps(z, z, src)
        elif op.kind == "relu":
            fn.vxorps(tmp, tmp, tmp)
            for row in acc:
                for z in row:
                    fn.vmaxps(z, z, tmp)
        elif op.kind == "clamp":
            lo, hi = fn.const_f32(op.lo), fn.const_f32(op.hi)
            for row in acc:
                for z in row:
                    fn.vmaxps(z, z, bcst(lo))
                    fn.vminps(z, z, bcst(hi))
        elif op.kind == "prelu":
            fn.vxorps(tmp, tmp, tmp)
            alpha = fn.const_f32(op.alpha)
            for row in acc:
                for z in row:
                    fn.vcmpps(k2, z, tmp, CMP_PREDICATES["lt_oq"])
                    fn.vmulps(z.mask(k2), z, bcst(alpha))
        elif op.kind == "prelu_c":  # a slope per channel: the vector from the per-channel data
            fn.mov(rdx, qword[rsi + (post_arg + op.index) * 8])
            zero, slope = free[0], free[1]
            fn.vxorps(zero, zero, zero)
            for j in range(nv):
                fn.vmovups(slope, zword[rdx + r10 + j * 64])
                for row in acc:
                    fn.vcmpps(k2, row[j], zero, CMP_PREDICATES["lt_oq"])
                    fn.vmulps(row[j].mask(k2), row[j], slope)
        elif op.kind == "hswish":
            three, zero6, sixth = fn.const_f32(3.0), fn.const_f32(6.0), fn.const_f32(1.0 / 6.0)
            for row in acc:
                for z in row:
                    fn.vaddps(tmp, z, bcst(three))
                    fn.vmaxps(tmp, tmp, bcst(fn.const_f32(0.0)))
                    fn.vminps(tmp, tmp, bcst(zero6))
                    fn.vmulps(tmp, tmp, bcst(sixth))
                    fn.vmulps(z, z, tmp)
        elif op.kind == "sigmoid":
            for row in acc:
                for z in row:
                    emit_sigmoid(fn, z, z, aux)
        elif op.kind == "swish":
            gate = free[3]
            for row in acc:
                for z in row:
                    if op.alpha != 1.0:
                        fn.vmulps(gate, z, bcst(fn.const_f32(op.alpha)))
                        emit_sigmoid(fn, gate, gate, aux)
                    else:
                        emit_sigmoid(fn, gate, z, aux)
                    fn.vmulps(z, z, gate)
        else:
            raise AssertionError(f"post-op {op.kind!r} reached the emitter")


@dataclass(frozen=True)
class PoolEpilogue:
    """A MaxPool/AveragePool over disjoint, whole windows of a convolution's output (stride >= window, or a single
    window along that axis; no padding, no partial ``ceil_mode`` window: ``pool_epilogue`` says when), applied to the accumulators after the
    post-ops: a work item is one pooled row, a register block holds whole windows, and only the pooled values are
    stored (a stem's conv + MaxPool writes a quarter of the bytes and skips a pass over its output)."""

    mode: str  # "max" or "avg"
    kh: int
    kw: int
    sh: int
    sw: int
    #: the pooled output's rows and columns
    ho: int
    wo: int


def pooled_per_block(nv: int, pool: PoolEpilogue) -> int:
    """Pool windows per register block: ``windows * kh * kw * nv`` accumulators + ``nv`` weights + 2 broadcasts + 1
    temp fit the 32 zmm (0: not even one window), then as even over the pooled row as that block count allows."""
    win = pool.kh * pool.kw
    most = min((ZMM_COUNT - nv - 3) // (win * nv), pool.wo)
    return -(-pool.wo // -(-pool.wo // most)) if most > 0 else 0


def pool_epilogue(geo: ConvGeometry, pool: ConvGeometry, pads: tuple[int, int, int, int],
                  post_ops: tuple[PostOp, ...]) -> tuple[PoolEpilogue | None, str]:
    """The epilogue form of the pooling ``pool`` (its window walk over the conv output, ``pool_geometry``) after
    the convolution ``geo``, or None and why the kernel does not cover it (the pool then runs as its own kernel)."""
    if geo.depthwise:
        return None, "a depthwise convolution's walk has no pool epilogue"
    overlap = (pool.sh < pool.kh and pool.ho > 1) or (pool.sw < pool.kw and pool.wo > 1)
    if overlap or (pool.dh, pool.dw) != (1, 1):
        return None, (f"overlapping or dilated windows ({pool.kh}x{pool.kw} stride {pool.sh}x{pool.sw} dilation "
                      f"{pool.dh}x{pool.dw}): the epilogue pools whole, disjoint windows")
    if any(pads) or (pool.ho - 1) * pool.sh + pool.kh > geo.ho or (pool.wo - 1) * pool.sw + pool.kw > geo.wo:
        return None, "padded or partial (ceil_mode) windows: the epilogue pools whole windows inside the output"
    if any(op.kind == "residual" for op in post_ops):
        return None, "a residual Add before the pool: the epilogue stores pooled pixels only"
    epi = PoolEpilogue(pool.mode, pool.kh, pool.kw, pool.sh, pool.sw, pool.ho, pool.wo)
    nv = max(n for _, n in geo.blocks())
    if pooled_per_block(nv, epi) == 0:
        return None, f"a {pool.kh}x{pool.kw} window x {nv} channel vectors does not fit the registers"
    return epi, ""


def _pool_window_offsets(geo: ConvGeometry, pooled: int, dynamic: bool = False) -> list[Any]:
    """Input byte offsets of the conv pixels of ``pooled`` neighbouring windows, window by window, row-major
    (``dynamic``: as (window row, column bytes) pairs, for a kernel that reads the conv rows' pitch at run time)."""
    pk, pix = geo.pool, geo.sw * geo.px_bytes
    assert pk is not None
    pixels = [(a, (q * pk.sw + b) * pix) for q in range(pooled) for a in range(pk.kh) for b in range(pk.kw)]
    row = geo.sh * geo.wp * geo.px_bytes
    return pixels if dynamic else [a * row + col for a, col in pixels]


def _emit_pooled_row(fn: Function, geo: ConvGeometry, nv: int, post_ops: tuple[PostOp, ...]) -> None:
    """One pooled output row of ``nv`` channel vectors: blocks of whole windows in a loop, then the tail block."""
    pk = geo.pool
    assert pk is not None
    q_full = pooled_per_block(nv, pk)
    n_full, q_tail = divmod(pk.wo, q_full)
    win = pk.kh * pk.kw
    if n_full:
        loop = fn.new_label("windows")
        fn.mov(r12, n_full)
        fn.bind(loop)
        _emit_block(fn, geo, nv, q_full * win, post_ops, pooled=q_full)
        fn.add(rbx, q_full * pk.sw * geo.sw * geo.px_bytes)
        fn.add(r9, q_full * geo.mo * 4)
        fn.dec(r12)
        fn.jnz(loop)
    if q_tail:
        _emit_block(fn, geo, nv, q_tail * win, post_ops, pooled=q_tail)


def _emit_pool_store(fn: Function, geo: ConvGeometry, acc: list[list], pooled: int) -> None:
    """Reduce each window's accumulators (a pairwise tree: short dependency chains) and store the pooled pixels."""
    pk = geo.pool
    assert pk is not None
    win, nv = pk.kh * pk.kw, len(acc[0])
    op = fn.vmaxps if pk.mode == "max" else fn.vaddps
    for q in range(pooled):
        for j in range(nv):
            zs = [acc[q * win + k][j] for k in range(win)]
            while len(zs) > 1:
                for a, b in zip(zs[0::2], zs[1::2]):
                    op(a, a, b)
                zs = zs[0::2]
            if pk.mode == "avg":
                fn.vmulps(zs[0], zs[0], bcst(fn.const_f32(1.0 / win)))
            dst = zword[r9 + (q * geo.mo * 4 + j * 64)]
            fn.vmovups(dst.mask(k1) if j == nv - 1 else dst, zs[0])


def global_epilogue(geo: ConvGeometry, mode: str) -> tuple[ConvGeometry | None, str]:
    """``geo`` with a global ``mode`` pool ("mean"/"max") as its epilogue, or None and why the kernel does not
    cover it (the global pool kernel then runs on the output)."""
    if geo.depthwise:
        return None, "a depthwise convolution's walk has no global pool epilogue"
    return replace(geo, global_pool=mode), ""


def _emit_global_init(fn: Function, geo: ConvGeometry, nv: int) -> None:
    """The row's slot (its first output pixel) starts at the reduction's identity: 0 for a mean, -inf for a max."""
    init = ZMM[31]
    if geo.global_pool == "max":
        fn.vbroadcastss(init, fn.const_f32(float("-inf")))
    else:
        fn.vxorps(init, init, init)
    for j in range(nv):
        dst = zword[r9 + j * 64]
        fn.vmovups(dst.mask(k1) if j == nv - 1 else dst, init)


def _emit_global_store(fn: Function, geo: ConvGeometry, acc: list[list], tmp: ZMM) -> None:
    """The block's pixels reduced (a pairwise tree) into the row's slot, read, combined and written back (the last
    vector masked: its lanes past the group's channels belong to the next pixel's channels)."""
    op = fn.vmaxps if geo.global_pool == "max" else fn.vaddps
    for j in range(len(acc[0])):
        zs = [row[j] for row in acc]
        while len(zs) > 1:
            for a, b in zip(zs[0::2], zs[1::2]):
                op(a, a, b)
            zs = zs[0::2]
        slot = zword[r9 + j * 64]
        if j == len(acc[0]) - 1:
            fn.vmovups(tmp.mask(k1).z, slot)
            op(zs[0], zs[0], tmp)
            fn.vmovups(slot.mask(k1), zs[0])
        else:
            op(zs[0], zs[0], slot)
            fn.vmovups(slot, zs[0])


#: the words of a dynamic finish kernel's args after [row sums, out]: the rows per image, the bytes between rows and
#: between images, and ``1 / (Ho * Wo)`` (an f32 in the low half; 1 for a max)
FINISH_ROWS, FINISH_ROW_PITCH, FINISH_IMAGE_PITCH, FINISH_SCALE = range(2, 6)


def finish_args(geo: ConvGeometry, rows: int, out: int) -> Any:
    """The args block of ``build_global_finish_kernel(geo, dynamic=True)`` for ``geo``'s shape (row sums at
    ``rows``, the [N, M] output at ``out``)."""
    scale = np.float32(1.0 / max(geo.ho * geo.wo, 1)).view(np.uint32) if geo.global_pool == "mean" else 0
    return (ctypes.c_uint64 * 6)(rows, out, geo.ho, geo.wo * geo.m * 4, geo.ho * geo.wo * geo.m * 4, int(scale))


def build_global_finish_kernel(geo: ConvGeometry, dynamic: bool = False) -> JitFunction:
    """``finish(unused, args, start, count)`` with ``args`` = [row sums, out]: per image, the slots of its output
    rows (each row's first pixel of an [N, Ho, Wo, M] buffer) reduced into ``out`` [N, M], times ``1 / (Ho * Wo)``
    for a mean. One item per image (``start``, ``count``). ``dynamic``: one kernel for every Ho, Wo, which it reads
    from ``args`` (``finish_args``)."""
    fn = Function("conv_gpool_finish", args=("unused", "args", "start", "count"))
    op = fn.vmaxps if geo.global_pool == "max" else fn.vaddps
    nvp, rem = -(-geo.m // VEC), geo.m % VEC
    row_pitch, image_pitch = geo.wo * geo.m * 4, geo.ho * geo.wo * geo.m * 4
    acc, tmp = ZMM[0], ZMM[1]
    fn.mov(r12d, (1 << rem) - 1 if rem else 0xFFFF)
    fn.kmovw(k1, r12d)
    if dynamic:
        fn.mov(rbx, rdx)
        fn.imul(rbx, qword[rsi + FINISH_IMAGE_PITCH * 8])
    else:
        fn.imul(rbx, rdx, image_pitch)
    fn.add(rbx, qword[rsi + ARG_SRC * 8])
    fn.imul(r9, rdx, geo.m * 4)
    fn.add(r9, qword[rsi + 8])
    fn.mov(r14, rcx)
    fn.test(r14, r14)
    fn.jz(fn.exit)
    images = fn.new_label("images")
    fn.bind(images)
    for v in range(nvp):
        masked = v == nvp - 1 and rem
        fn.vmovups(acc.mask(k1).z if masked else acc, zword[rbx + v * 64])
        if dynamic or geo.ho > 1:
            rows, done = fn.new_label("rows"), fn.new_label("rows_done")
            if dynamic:
                fn.mov(rax, rbx)
                fn.add(rax, qword[rsi + FINISH_ROW_PITCH * 8])
                fn.mov(rcx, qword[rsi + FINISH_ROWS * 8])
                fn.dec(rcx)
                fn.jle(done)
            else:
                fn.lea(rax, rbx + row_pitch)
                fn.mov(rcx, geo.ho - 1)
            fn.bind(rows)
            if masked:
                fn.vmovups(tmp.mask(k1).z, zword[rax + v * 64])
                op(acc, acc, tmp)
            else:
                op(acc, acc, zword[rax + v * 64])
            if dynamic:
                fn.add(rax, qword[rsi + FINISH_ROW_PITCH * 8])
            else:
                fn.add(rax, row_pitch)
            fn.dec(rcx)
            fn.jnz(rows)
            fn.bind(done)
        if geo.global_pool == "mean":
            fn.vmulps(acc, acc, bcst(rsi + FINISH_SCALE * 8) if dynamic
                      else bcst(fn.const_f32(1.0 / (geo.ho * geo.wo))))
        dst = zword[r9 + v * 64]
        fn.vmovups(dst.mask(k1) if masked else dst, acc)
    if dynamic:
        fn.add(rbx, qword[rsi + FINISH_IMAGE_PITCH * 8])
    else:
        fn.add(rbx, image_pitch)
    fn.add(r9, geo.m * 4)
    fn.dec(r14)
    fn.jnz(images)
    return fn.finalize(None, (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64))


#: pre-op name (a numpy ufunc's, as ConvPlan.pre_ops has them) -> the AVX-512 instruction applying it per channel
PRE_OP_INSTRUCTIONS = {"add": "vaddps", "subtract": "vsubps", "multiply": "vmulps", "divide": "vdivps",
                       "maximum": "vmaxps"}
#: registers holding the per-channel vectors' pointers in the copy kernel: at most this many vector pre-ops
_COPY_VEC_REGS = (r8, r10, r11, r13, rax, rcx, rdi, rbp)


#: the copy header's words (int64; ``copy_header``): the byte offset in the padded buffer of image 0's first interior
#: row (its left border included; the bytes of an image's top border rows), the buffer's row and the input's row in
#: bytes, the pixels of a row, the rows of an image, the bytes between the end of an image's last interior row and the
#: next image's first (its bottom and the next one's top border rows), the left and right border pixels of a row, the
#: border's float32 bits, the top and bottom border pixels of an image
COPY_HEADER = ("dst_first", "dst_row", "src_row", "pixels", "rows", "image_gap", "left", "right", "fill", "top",
               "bottom")
(CH_DST_FIRST, CH_DST_ROW, CH_SRC_ROW, CH_PIXELS, CH_ROWS, CH_IMAGE_GAP, CH_LEFT, CH_RIGHT, CH_FILL, CH_TOP,
 CH_BOTTOM) = range(len(COPY_HEADER))


def copy_header(geo: ConvGeometry, in_pitch: int = 0) -> np.ndarray:
    """The copy kernel's runtime geometry (``COPY_HEADER``): it works out each input row's source and destination from
    the row's index, so a new image size makes these 11 words, not a table of a row per (image, input row), and the
    kernel depends on the channels alone (``copy_key``). ``in_pitch``: the input's pixels are that many channels apart
    (0: ``geo.c``; see ``copy_key``). The kernel writes the border too (each row's left and right pixels, an image's
    top rows before its first row and bottom rows after its last, with the ``fill``: 0, or -inf for a maximum): a
    buffer another shape used holds that shape's rows where this one has its border, and a new shape's
    ``PaddedBuffer.take`` then writes nothing (a few rows of stores per call, in the stream the copy writes anyway,
    where ``take`` wrote them cold, 13-20 us per primitive in ResNet-50's new-shape call)."""
    top, left = (0, 0) if geo.depthwise else (geo.pt, geo.pl)
    wp, cp4, h = geo.wp, geo.cp * 4, geo.h
    fill = 0xFF800000 if geo.mode == "max" else 0  # float32 -inf: padding never wins a maximum
    return np.array([top * wp * cp4, wp * cp4, geo.w * (in_pitch or geo.c) * 4, geo.w, h, (geo.hp - h) * wp * cp4,
                     left, wp - geo.w - left, fill, top * wp, (geo.hp - h - top) * wp], np.int64)


def copy_key(geo: ConvGeometry, in_pitch: int = 0) -> tuple[int, ...]:
    """What ``build_copy_kernel``'s code depends on: the channels of the input and of the buffer's pixels, and the
    input's pixel pitch when it is a channel slice of a wider NHWC array (a Concat's output in a chain)."""
    return (geo.c, geo.cp) if in_pitch in (0, geo.c) else (geo.c, geo.cp, in_pitch)


def build_copy_kernel(channels: tuple[int, ...], ops: tuple[tuple[str, bool], ...]) -> JitFunction:
    """``copy(unused, args, start, count)``: input rows ``start .. start+count`` (of every image's, in order) of a
    contiguous NHWC input (of ``channels`` = ``copy_key``: the input's channels and the buffer's per pixel) into the
    padded buffer, through ``ops`` ((name in :data:`PRE_OP_INSTRUCTIONS`, whether it has a per-channel vector); a
    vector-less ``maximum`` is Relu), vectorized over the channels, the border pixels around them written with the
    header's fill (each row's left and right ones, an image's top and bottom rows with its first and last row).
    Where a row goes and comes from is worked out from its index and the copy header (``copy_header``): the first
    row's by whole images and rows, the next ones by one row's step (and the gap between images after an image's
    last). ``args`` = [src, dst, copy header, the per-channel vectors (whole zmm, in ``ops`` order)]."""
    if sum(has for _, has in ops) > len(_COPY_VEC_REGS):
        raise AssertionError("more vector pre-ops than pointer registers: ConvExecutor copies with numpy then")
    c, cp, *wider = channels
    pitch = wider[0] if wider else c  # the input's channels per pixel
    fn = Function("conv_copy", args=("unused", "args", "start", "count"))
    nvec, nvp = -(-c // VEC), -(-cp // VEC)
    rem, rem_p = c - (nvec - 1) * VEC, cp - (nvp - 1) * VEC  # (a buffer's pixel may be narrower than a zmm)
    fn.mov(r12d, (1 << rem) - 1)
    fn.kmovw(k1, r12d)
    fn.mov(r12d, (1 << rem_p) - 1)
    fn.kmovw(k2, r12d)
    fn.mov(r14, rcx)
    fn.test(r14, r14)
    fn.jz(fn.exit)
    fn.mov(r15, qword[rsi + 16])
    # the first row's pointers: source start * src_row on; destination its image's (whole images, rows * dst_row +
    # gap, skipped one at a time: a chunk starts once) plus its row's; rdx keeps the row in the image (no div here)
    fn.mov(rbx, rdx)
    fn.imul(rbx, qword[r15 + CH_SRC_ROW * 8])
    fn.add(rbx, qword[rsi + ARG_SRC * 8])
    fn.mov(r9, qword[rsi + 8])
    fn.add(r9, qword[r15 + CH_DST_FIRST * 8])
    fn.mov(r12, qword[r15 + CH_ROWS * 8])
    fn.imul(r12, qword[r15 + CH_DST_ROW * 8])
    fn.add(r12, qword[r15 + CH_IMAGE_GAP * 8])
    images, first_row = fn.new_label("images"), fn.new_label("first_row")
    fn.bind(images)
    fn.cmp(rdx, qword[r15 + CH_ROWS * 8])
    fn.jb(first_row)
    fn.sub(rdx, qword[r15 + CH_ROWS * 8])
    fn.add(r9, r12)
    fn.jmp(images)
    fn.bind(first_row)
    fn.mov(r12, rdx)
    fn.imul(r12, qword[r15 + CH_DST_ROW * 8])
    fn.add(r9, r12)
    ptrs = []
    for i, (_, has) in enumerate(ops):
        if has:
            reg = _COPY_VEC_REGS[len(ptrs)]
            fn.mov(reg, qword[rsi + (3 + len(ptrs)) * 8])
            ptrs.append(reg)
        else:
            ptrs.append(None)
    zero, x, fill = ZMM[31], ZMM[0], ZMM[30]
    fn.vxorps(zero, zero, zero)
    fn.vbroadcastss(fill, dword[r15 + CH_FILL * 8])

    def border(field: int, at: Any = r9) -> None:
        """The border pixels of header word ``field``, ``fill`` in every lane, from ``at`` on (and past them)."""
        done, loop = fn.new_label("border_done"), fn.new_label("border")
        fn.mov(r12, qword[r15 + field * 8])
        fn.test(r12, r12)
        fn.jz(done)
        fn.bind(loop)
        for v in range(nvp):
            dst = zword[at + v * 64]
            fn.vmovups(dst.mask(k2) if v == nvp - 1 and rem_p != VEC else dst, fill)
        fn.add(at, cp * 4)
        fn.dec(r12)
        fn.jnz(loop)
        fn.bind(done)

    rows, pixels, row_end, same_image, inside = (fn.new_label(n) for n in ("rows", "pixels", "row_end",
                                                                          "same_image", "inside"))
    fn.bind(rows)
    fn.test(rdx, rdx)
    fn.jnz(inside)
    fn.mov(rsi, r9)  # an image's first row: its top border rows, just before it
    fn.sub(rsi, qword[r15 + CH_DST_FIRST * 8])
    border(CH_TOP, rsi)
    fn.bind(inside)
    border(CH_LEFT)
    fn.mov(r12, qword[r15 + CH_PIXELS * 8])
    fn.test(r12, r12)
    fn.jz(row_end)
    fn.bind(pixels)
    for v in range(nvec):
        last = v == nvec - 1 and rem != VEC
        src = zword[rbx + v * 64]
        fn.vmovups(x.mask(k1).z if last else x, src)
        for (name, _), reg in zip(ops, ptrs):
            operand = zero if reg is None else zword[reg + v * 64]
            getattr(fn, PRE_OP_INSTRUCTIONS[name])(x, x, operand)
        dst = zword[r9 + v * 64]
        fn.vmovups(dst.mask(k1) if last else dst, x)
    fn.add(rbx, pitch * 4)
    fn.add(r9, cp * 4)
    fn.dec(r12)
    fn.jnz(pixels)
    fn.bind(row_end)
    border(CH_RIGHT)  # r9: the next row's left border (its image's), or past this image's last row
    fn.inc(rdx)
    fn.cmp(rdx, qword[r15 + CH_ROWS * 8])
    fn.jne(same_image)
    fn.xor(rdx, rdx)
    border(CH_BOTTOM)  # an image's last row: its bottom border rows, then past the next image's top ones
    fn.add(r9, qword[r15 + CH_DST_FIRST * 8])
    fn.bind(same_image)
    fn.dec(r14)
    fn.jnz(rows)
    return fn.finalize(None, (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64))

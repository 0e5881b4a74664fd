"""A JIT int8 2-D convolution for AVX512-VNNI (u8 NHWC activations x s8 weights), the int8 sibling of ``conv.py``.

The kernel is a batch-reduce over the kernel taps, as the f32 one: one work item is an output row of one (image,
group, block of up to 4 zmm = 64 output channels); a register block of ``R`` output pixels x ``nv`` zmm of s32
accumulators reduces over kernel rows, kernel columns and input channels 4 at a time: per (tap, group of 4 input
channels) ``nv`` loads of packed weights, ``R`` broadcasts of 4 input bytes (``vpbroadcastd``) and ``R * nv``
``vpdpbusd`` (64 multiply-adds each). No im2col: the taps are read in place from the padded input.

* **Input**: a padded NHWC byte buffer ``[N, Hp, Wp, Cp]``, every window in bounds, ``Cp = group * Cg4`` with
  ``Cg4`` the group's channels rounded up to 4 (the VNNI group). The border and the padded channels hold the
  zero point (the quantized 0.0); the weights past ``Cg`` are zero, so those bytes add nothing. Unsigned: an s8
  grid is stored shifted by +128 (its zero point too), which is the same convolution.
* **Weights** (s8, per output channel scales) are packed once per (group, block):
  ``[KH][KW][Cg4/4][nv*16][4]``: one group of 4 input channels of one tap is ``nv`` zmm of 16 output channels x 4
  bytes, the layout ``vpdpbusd`` reads (the VNNI 4-channel interleave).
* **Epilogue** (in registers, per accumulator): ``- comp[m]`` (``zp * sum`` of the channel's weights, made with the
  packing), ``vcvtdq2ps``, ``* scale[m] + bias[m]`` (one FMA: the dequantized f32, ``scale = x_scale *
  w_scale[m]``), then the post-ops in order (:data:`POST_OPS`: the f32 conv's eltwise chain, run by ``conv.py``'s
  own emitter a stretch at a time, with the Q->DQ pairs between its ops as ``fq`` steps), then the store: f32, or
  requantized to u8/s8 as QuantizeLinear does (``x / y_scale`` correctly rounded without a divide, clamp,
  ``vcvtps2dq`` half to even, ``+ y_zp``, ``vpmovdb``), so a quantized conv hands the next one bytes.
* **Work table**: one row per item, byte offsets of the input row, weight block, output row, post-op vectors and
  residual row, the store mask (output-channel tail) and the variant (full block or the tail block), and for a
  dynamic H, W the row geometry (``Int8ConvShape.dynamic``: one kernel for every input shape); the kernel is
  the native pool's harness ``conv_int8(unused, args, start, count)``, items split into one range per thread.

``args`` = [src, weights, dst, comp, scale, bias, residual, table, qparams, post, chan0, chan1, ..] (qparams:
``1 / y_scale, lo, hi`` f32, ``y_zp`` s32 and ``y_scale``, with ``lo = qmin - y_zp``, ``hi = qmax - y_zp``; post: the
post-ops' parameters, :func:`post_params`; chan ``i``: the address of the ``i``-th per-channel vector in it, where the
f32 emitter reads a per-channel post-op's array).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from snippets_core.errors import InputError, UnsupportedByTarget
from snippets_x86_64.asm import Function, bcst, dword, k1, k2, qword, r8, r9, r10, r11, r13, r15, rbp, rbx, rcx, \
    rdx, rsi, word, zword
from snippets_x86_64.asm.registers import ZMM
from snippets_x86_64.conv import HEAD, POST_OP_KINDS, UNROLL, ConvDims, PostOp, _emit_post_ops, channel_blocks, \
    emit_pixel_loop, emit_pixel_loop_dynamic, emit_table_kernel, emit_tap_walk, table_items
from snippets_x86_64.emitters.base import Aux
from snippets_x86_64.emitters.math import emit_divide_by, emit_sigmoid

if TYPE_CHECKING:
    from snippets_x86_64.jit import JitFunction

#: s32 lanes per zmm; input channels per VNNI group
LANES, K_GROUP = 16, 4
#: output pixels per register block at most
MAX_PIXELS = 28
ZMM_COUNT = 32
#: fields of a work-table row (int64): src, weights, dst, vectors, residual offsets in bytes, store mask, variant,
#: then the row geometry a shape-agnostic kernel (``Int8ConvShape.dynamic``) reads instead of immediates: the input
#: bytes between kernel rows, the full pixel blocks of the row, their size, the tail block's size
ROW = 11
RT_PITCH, RT_NFULL, RT_RFULL, RT_RTAIL = range(7, 11)
ARG_SRC, ARG_WEI, ARG_DST, ARG_COMP, ARG_SCALE, ARG_BIAS, ARG_RES, ARG_TAB, ARG_QPARAMS, ARG_POST, ARG_CHAN = range(11)
#: bytes per output element
OUT_SIZE = {"f32": 4, "u8": 1, "s8": 1}
#: the saturation range of a requantized output
OUT_RANGE = {"u8": (0, 255), "s8": (-128, 127)}
#: the epilogue's steps after the dequantization: every post-op of the f32 conv (``conv.POST_OP_KINDS``: the residual
#: add, per-channel multiply/add (a BatchNormalization), Relu, Clamp, PRelu, HSwish, Sigmoid, Swish), a FakeQuantize
#: on a per-tensor grid (``fq``: ``clamp(rint(v * (1 / s)), lo, hi) * s``, a Q->DQ pair between two ops) and a swish
#: whose gate passes such a pair (``qswish``: ``x * fq(sigmoid(alpha x))``, QDQ's ``x * DQ(Q(Sigmoid(x)))``), and
#: the residual add of u8/s8 bytes another int8 convolution stored (``qresidual_u8``/``_s8``: ``+ (q - zp) * s``,
#: DequantizeLinear's value: a quarter of an f32 residual's memory, and the producer requantizes in registers)
QRESIDUAL = {"qresidual_u8": False, "qresidual_s8": True}
INT8_POST_OPS = ("fq", "qswish", *QRESIDUAL)
POST_OPS = (*POST_OP_KINDS, *INT8_POST_OPS)
#: the post-ops reading a per-channel vector (one whole zmm per group's vector, indexed like comp/scale/bias)
CHANNEL_POST_OPS = ("mul_c", "add_c", "prelu_c")
#: bytes of an fq's parameters in the post-op block (s, lo, hi, 1 / s; a qresidual's s, zp as s32)
FQ_BYTES = 16
#: f32 values of the qparams block of a requantized output (``requant_params``)
QPARAMS = 8


@dataclass(frozen=True)
class Int8ConvShape(ConvDims):
    """One int8 convolution resolved against an input shape: sizes, strides, dilations, begin pads (the end pads
    are whatever makes every window fit: ``hp``, ``wp``; the fields and window arithmetic of ``ConvDims``, shared
    with the f32 kernel), the output kind and the post-ops in order (``conv.PostOp``, or a kind alone for one with
    no compiled-in constant; a per-channel one's ``index`` is set here: its place among them)."""

    output: str = "f32"
    post_ops: tuple[PostOp | str, ...] = ()
    #: the kernel reads the row geometry (the input's row pitch, the output row's pixel blocks) from the work table:
    #: one kernel serves every H, W (and batch) of these channels, taps and strides (``kernel_key``)
    dynamic: bool = False
    #: the output written into the interior of a larger NHWC buffer (a MaxPool's padded input): its (rows, columns,
    #: top, left); only the work table's output offsets change (None: the dense [N, Ho, Wo, M])
    out_frame: tuple[int, int, int, int] | None = None
    #: a stem's taps packed (``packs_taps``): pixels of ``c`` bytes (not rounded up to 4), a kernel row's ``kw * c``
    #: bytes lie together in the row, so the kernel walks them as ``ceil(kw * c / 4)`` VNNI groups of one tap (a
    #: 7x7 RGB stem: 6 groups a kernel row instead of 7 of 3 useful bytes); the bytes past them weigh 0
    packed: bool = False

    def __post_init__(self) -> None:
        ops, channel = [], 0
        for op in self.post_ops:
            op = PostOp(op) if isinstance(op, str) else op
            if op.kind in CHANNEL_POST_OPS:
                op, channel = replace(op, index=channel), channel + 1
            ops.append(op)
        object.__setattr__(self, "post_ops", tuple(ops))
        sizes = (self.n, self.c, self.h, self.w, self.m, self.group, self.kh, self.kw, self.sh, self.sw, self.dh,
                 self.dw, self.ho, self.wo)
        if min(sizes) <= 0 or min(self.pt, self.pl) < 0:
            raise InputError(f"int8 convolution needs positive sizes and non-negative pads, got {self}")
        if self.c % self.group or self.m % self.group:
            raise InputError(f"int8 convolution: {self.c} input and {self.m} output channels do not split into "
                             f"{self.group} groups")
        if self.output not in OUT_SIZE:
            raise InputError(f"int8 convolution output must be one of {sorted(OUT_SIZE)}, got {self.output!r}")
        bad = [p for p in self.kinds if p not in POST_OPS]
        if bad:
            raise InputError(f"int8 convolution post-ops must be among {POST_OPS}, got {bad}")
        if self.packed and not (self.group == 1 and self.dw == 1 and not self.dynamic):
            raise InputError(f"int8 convolution: packed taps need one group, no horizontal dilation and static "
                             f"sizes, got {self}")
        if self.pt >= self.hp or self.pl >= self.wp or (self.ho - 1) * self.sh + (self.kh - 1) * self.dh < 0:
            raise InputError(f"int8 convolution pads {self.pt}, {self.pl} leave no input in the window")

    @property
    def kinds(self) -> tuple[str, ...]:
        """The post-ops' kinds in order."""
        return tuple(op.kind for op in self.post_ops)  # type: ignore[union-attr]

    @property
    def mo(self) -> int:
        """Channels per output pixel (the f32 emitter's residual pitch): the output is dense NHWC."""
        return self.m

    @property
    def res_size(self) -> int:
        """Bytes per residual element: f32, or the bytes of a quantized residual."""
        return 1 if any(k in QRESIDUAL for k in self.kinds) else 4

    @property
    def channel_arrays(self) -> int:
        """The per-channel post-op vectors (the ``chan`` args)."""
        return sum(k in CHANNEL_POST_OPS for k in self.kinds)

    @property
    def cg4(self) -> int:
        """A group's input channels in the padded buffer: rounded up to the VNNI group of 4."""
        return -(-self.cg // K_GROUP) * K_GROUP

    @property
    def cp(self) -> int:
        """Bytes per pixel of the padded input."""
        return self.c if self.packed else self.group * self.cg4

    @property
    def tap_groups(self) -> int:
        """VNNI groups of 4 bytes per tap the kernel walks (packed: one tap a kernel row)."""
        return -(-self.kw * self.c // K_GROUP) if self.packed else self.cg4 // K_GROUP

    @property
    def wp(self) -> int:
        """Pixels per padded input row (packed: the last window's last VNNI group may read up to 3 bytes past it,
        whose weights are 0: one or a few more pixels of border)."""
        wp = super().wp
        if not self.packed:
            return wp
        over = self.tap_groups * K_GROUP - self.kw * self.c  # bytes read past the last window
        return max(wp, (self.wo - 1) * self.sw + self.kw + -(-over // self.c))

    @property
    def nvp(self) -> int:
        """Output-channel vectors per group (the last one partial when ``mg`` is not a multiple of 16)."""
        return -(-self.mg // LANES)

    def blocks(self) -> list[tuple[int, int]]:
        """(first vector, vector count) of each output-channel block of a group, as even as the count allows (the f32
        kernel's blocks: at most ``conv.MAX_NV`` vectors, larger ones first)."""
        return list(channel_blocks(self.nvp, False))

    def kernel_key(self) -> Int8ConvShape:
        """The geometry the kernel's code depends on: the batch never (the table walks the images); a dynamic one's
        H, W, pads and output size neither (stand-ins: one window)."""
        if not self.dynamic:
            return replace(self, n=1, out_frame=None)
        h, w = (self.kh - 1) * self.dh + 1, (self.kw - 1) * self.dw + 1
        return replace(self, n=1, h=h, w=w, pt=0, pl=0, ho=1, wo=1, out_frame=None)

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        """The NHWC output array: dense, or the frame it is written into."""
        if self.out_frame is None:
            return self.n, self.ho, self.wo, self.m
        return self.n, self.out_frame[0], self.out_frame[1], self.m

    @property
    def macs(self) -> int:
        return self.n * self.m * self.ho * self.wo * self.cg * self.kh * self.kw


def max_pixels(nv: int) -> int:
    """Output pixels per register block at most: ``R * nv`` accumulators + ``nv`` weights + 2 broadcasts fit the 32
    zmm."""
    return max(1, min((ZMM_COUNT - nv - 2) // nv, MAX_PIXELS))


def pixels_per_block(nv: int, wo: int) -> int:
    """Output pixels per register block of a row of ``wo``: at most ``max_pixels``, then as even as the row allows
    with the same block count (the tail block costs a full one's weight loads)."""
    most = min(max_pixels(nv), wo)
    return -(-wo // -(-wo // most))


def pack_weights_int8(w: np.ndarray, geo: Int8ConvShape) -> tuple[np.ndarray, list[int]]:
    """``w`` s8 [M, Cg, KH, KW] into the per-(group, block) VNNI panels ``[KH][KW][Cg4/4][nv*16][4]`` (zero past the
    channels). Returns (packed bytes, the byte offset of each (group, block) panel)."""
    if w.dtype != np.int8 or w.shape != (geo.m, geo.cg, geo.kh, geo.kw):
        raise InputError(f"int8 convolution weight must be int8 {[geo.m, geo.cg, geo.kh, geo.kw]}, got {w.dtype} "
                         f"{list(w.shape)}")
    panels, offsets, at = [], [], 0
    # packed taps: one "tap" a kernel row, its kw * c bytes as the channels
    kw, cg, cg4 = (1, geo.kw * geo.cg, geo.tap_groups * K_GROUP) if geo.packed else (geo.kw, geo.cg, geo.cg4)
    for g in range(geo.group):
        wg = w[g * geo.mg : (g + 1) * geo.mg].transpose(2, 3, 1, 0).reshape(geo.kh, kw, cg, geo.mg)
        for v0, nv in geo.blocks():
            lo, hi = v0 * LANES, min((v0 + nv) * LANES, geo.mg)
            t = np.zeros((geo.kh, kw, cg4, nv * LANES), np.int8)
            t[:, :, :cg, : hi - lo] = wg[..., lo:hi]
            panel = t.reshape(geo.kh, kw, cg4 // K_GROUP, K_GROUP, nv * LANES).transpose(0, 1, 2, 4, 3)
            panels.append(np.ascontiguousarray(panel).ravel())
            offsets.append(at)
            at += panel.size
    return np.concatenate(panels), offsets


def channel_vector(values: np.ndarray, geo: Int8ConvShape, dtype: type) -> np.ndarray:
    """A per-output-channel vector padded to whole zmm per group (the layout of comp, scale and bias)."""
    out = np.zeros((geo.group, geo.nvp * LANES), dtype)
    out[:, : geo.mg] = np.asarray(values).reshape(geo.group, geo.mg)
    return out.ravel()


def compensation(w: np.ndarray, zero_point: int, geo: Int8ConvShape) -> np.ndarray:
    """``zero_point * sum`` of each output channel's weights (s32, padded like the other vectors): subtracted from
    the accumulators, it turns ``sum q * w`` into ``sum (q - zero_point) * w``."""
    sums = w.reshape(geo.m, -1).astype(np.int64).sum(axis=1) * int(zero_point)
    return channel_vector(sums.astype(np.int32), geo, np.int32)


def post_offsets(geo: Int8ConvShape) -> list[int]:
    """The byte offset of each post-op's parameters in the post-op block (per-channel vectors are whole zmm per
    group, indexed like comp/scale/bias; an fq's or a qswish's grid has 16 bytes)."""
    offsets, at = [], 0
    for op in geo.kinds:
        offsets.append(at)
        at += FQ_BYTES if op in INT8_POST_OPS else geo.group * geo.nvp * LANES * 4 if op in CHANNEL_POST_OPS else 0
    return offsets + [at]


def post_params(geo: Int8ConvShape, values: list) -> np.ndarray:
    """The post-op block for ``values`` (one per post-op: ``(s, lo, hi)`` of an fq's or a qswish's grid (1 / s is
    stored beside them), the [M] vector of a per-channel op, None for the others), as f32, at least one vector
    long."""
    if len(values) != len(geo.post_ops):
        raise InputError(f"int8 convolution: {len(values)} post-op parameters for {len(geo.post_ops)} post-ops")
    offsets = post_offsets(geo)
    block = np.zeros(max(offsets[-1] // 4, LANES), np.float32)
    for op, at, v in zip(geo.kinds, offsets, values):
        if op in QRESIDUAL:
            s, zp = float(v[0]), int(v[1])
            lo, hi = (-128, 127) if QRESIDUAL[op] else (0, 255)
            if not (s > 0 and np.isfinite(np.float32(s))) or not lo <= zp <= hi:
                raise InputError(f"int8 convolution {op} needs a positive scale and a zero point in [{lo}, {hi}], "
                                 f"got {v}")
            block[at // 4] = s
            block.view(np.int32)[at // 4 + 1] = zp
        elif op in INT8_POST_OPS:
            s, lo, hi = (float(t) for t in v)
            if not s > 0 or lo > hi:
                raise InputError(f"int8 convolution {op} needs a positive scale and lo <= hi, got {v}")
            r, c = divisor(s, op)
            block[at // 4 : at // 4 + 4] = (c, lo, hi, r)
        elif op in CHANNEL_POST_OPS:
            vec = channel_vector(np.asarray(v, np.float32), geo, np.float32)
            block[at // 4 : at // 4 + vec.size] = vec
    return block


def divisor(scale: float, what: str) -> tuple[np.float32, np.float32]:
    """``(RN(1 / s), s)`` in float32 for a scale the kernel divides by as QuantizeLinear does (``emit_divide_by``:
    ``x / s`` correctly rounded, ties to even after it as onnxruntime's); both must be normal floats."""
    c = np.float32(scale)
    tiny = np.finfo(np.float32).tiny
    with np.errstate(all="ignore"):
        r = np.float32(1.0) / c
    if not (c > 0 and np.isfinite(c) and np.isfinite(r) and r >= tiny and c >= tiny):
        raise InputError(f"int8 convolution {what} needs a positive scale whose reciprocal is a normal float32, "
                         f"got {scale}")
    return r, c


def requant_params(y_scale: float, y_zero_point: int, output: str) -> np.ndarray:
    """The qparams block of a requantized output (:data:`QPARAMS` f32): ``1 / y_scale`` (float32's), ``qmin - y_zp,
    qmax - y_zp``, ``y_zp`` (s32), ``y_scale``, 3 unused."""
    r, c = divisor(y_scale, "requantization")
    qmin, qmax = OUT_RANGE.get(output, (0, 255))
    block = np.zeros(QPARAMS, np.float32)
    block[:5] = (r, qmin - y_zero_point, qmax - y_zero_point, 0, c)
    block.view(np.int32)[3] = y_zero_point
    return block


def work_table(geo: Int8ConvShape, offsets: list[int]) -> np.ndarray:
    """The compact work table (``conv.work_table``'s layout, rows of ``ROW`` fields): the header (the images, output
    rows and blocks; the steps of the moving fields src, dst and residual per output row and per image), then one row
    per (group, output-channel block). The harness (``conv.emit_table_kernel``) runs its items (image, group, block,
    output row), output rows innermost (consecutive items reuse one weight block from L1/L2)."""
    osz, rsz = OUT_SIZE[geo.output], geo.res_size
    blocks = geo.blocks()
    rem = geo.mg - (geo.nvp - 1) * LANES
    pitch = geo.dh * geo.wp * geo.cp
    hq, wq, qt, ql = geo.out_frame or (geo.ho, geo.wo, 0, 0)
    count = geo.group * len(blocks)
    rows = [(geo.n, geo.ho, count, (HEAD + count) * ROW * 8) + (0,) * (ROW - 4),
            (geo.sh * geo.wp * geo.cp, 0, wq * geo.m * osz, 0, geo.wo * geo.m * rsz) + (0,) * (ROW - 5),
            (geo.hp * geo.wp * geo.cp, 0, hq * wq * geo.m * osz, 0, geo.ho * geo.wo * geo.m * rsz) + (0,) * (ROW - 5),
            (0,) * ROW]
    for g in range(geo.group):
        for b, (v0, nv) in enumerate(blocks):
            chan = g * geo.mg + v0 * LANES
            # a dynamic kernel's row: full blocks of the most pixels, one tail block (``_emit_row``)
            r = max_pixels(nv)
            rows.append((g * geo.cg4, offsets[g * len(blocks) + b], ((qt * wq + ql) * geo.m + chan) * osz,
                         (g * geo.nvp + v0) * LANES * 4, chan * rsz, (1 << rem) - 1 if v0 + nv == geo.nvp else 0xFFFF,
                         0 if nv == blocks[0][1] else 1, pitch, geo.wo // r, r, geo.wo % r))
    return np.asarray(rows, dtype=np.int64)


def build_int8_conv_kernel(geo: Int8ConvShape) -> JitFunction:
    """The JIT function ``conv_int8(unused, args, start, count)`` for ``geo`` (module docstring). Only the shape
    is compiled in: weights, vectors and grids are data."""
    from snippets_x86_64.cpu import cpu_features

    if "avx512_vnni" not in cpu_features():
        raise UnsupportedByTarget("the int8 convolution needs AVX512_VNNI (vpdpbusd); this CPU lacks it")
    fn = Function("conv_int8", args=("unused", "args", "start", "count"))
    blocks = geo.blocks()
    nvs = [blocks[0][1]] + ([blocks[-1][1]] if blocks[-1][1] != blocks[0][1] else [])

    def load() -> None:
        fn.mov(r10, qword[r15 + 24])
        fn.kmovw(k1, word[r15 + 40])

    # the moving fields: the input, weight, output and residual rows (the residual's pixels may differ from the
    # output's in size and in frame)
    moving = ((0, rbx, ARG_SRC), (1, r8, ARG_WEI), (2, r9, ARG_DST), (4, r11, ARG_RES))
    return emit_table_kernel(fn, ROW, ARG_TAB, load, 48, [functools.partial(_emit_row, fn, geo, nv) for nv in nvs],
                             moving=moving)


def _emit_row(fn: Function, geo: Int8ConvShape, nv: int) -> None:
    """One output row of ``nv`` channel vectors: full pixel blocks in a loop, then the tail block (a dynamic
    kernel: their count and the tail's size from the table; the full blocks always of ``max_pixels``, so one loop
    and a tail per size)."""
    if geo.dynamic:
        most = max_pixels(nv)
        steps = [(rbx, geo.sw * geo.cp), (r9, geo.m * OUT_SIZE[geo.output]), (r11, geo.m * geo.res_size)]
        emit_pixel_loop_dynamic(fn, [most], most, lambda r: _emit_block(fn, geo, nv, r), steps,
                                (RT_NFULL, RT_RFULL, RT_RTAIL))
        return
    r_full = pixels_per_block(nv, geo.wo)
    steps = [(rbx, r_full * geo.sw * geo.cp), (r9, r_full * geo.m * OUT_SIZE[geo.output]),
             (r11, r_full * geo.m * geo.res_size)]
    emit_pixel_loop(fn, geo.wo, r_full, lambda r: _emit_block(fn, geo, nv, r), steps)


def _emit_block(fn: Function, geo: Int8ConvShape, nv: int, r: int) -> None:
    """``r`` pixels x ``nv`` vectors: zero, reduce over (kh, kw, channel groups), epilogue, store."""
    acc = [[ZMM[i * nv + j] for j in range(nv)] for i in range(r)]
    wv = [ZMM[r * nv + j] for j in range(nv)]
    bc = [ZMM[r * nv + nv], ZMM[r * nv + nv + 1]]
    for row in acc:
        for z in row:
            fn.vpxord(z, z, z)
    pix = geo.sw * geo.cp  # bytes between the input pixels of neighbouring outputs
    vbytes = nv * LANES * K_GROUP  # weight bytes per channel group
    groups = geo.tap_groups
    turn = [0]

    def body(count: int) -> None:
        for u in range(count):
            for j in range(nv):
                fn.vmovdqu32(wv[j], zword[r13 + (u * vbytes + j * 64)])
            for i in range(r):
                b = bc[turn[0] % 2]
                turn[0] += 1
                fn.vpbroadcastd(b, dword[rbp + (u * K_GROUP + i * pix)])
                for j in range(nv):
                    fn.vpdpbusd(acc[i][j], b, wv[j])

    emit_tap_walk(fn, geo.kh, 1 if geo.packed else geo.kw, body, *divmod(groups, UNROLL), K_GROUP, vbytes,
                  geo.dw * geo.cp,
                  qword[r15 + RT_PITCH * 8] if geo.dynamic else geo.dh * geo.wp * geo.cp)
    _emit_epilogue(fn, geo, acc, [*bc, *wv, *ZMM[r * nv + nv + 2 : ZMM_COUNT]])


def _emit_epilogue(fn: Function, geo: Int8ConvShape, acc: list[list], free: list) -> None:
    """Compensation, dequantization (scale, bias), the post-ops, requantization and the stores. ``free``: the
    weight and broadcast registers, dead after the reduction, and any the block leaves unused (at least 4)."""
    nv = len(acc[0])
    tmp, tmp2 = free[0], free[1]
    offsets = post_offsets(geo)
    assert len(free) >= 4, "the swish gate and the sigmoid's 3 auxiliaries"
    fn.mov(rdx, qword[rsi + ARG_COMP * 8])
    for j in range(nv):
        fn.vmovdqu32(tmp, zword[rdx + r10 + j * 64])
        for row in acc:
            fn.vpsubd(row[j], row[j], tmp)
    fn.mov(rdx, qword[rsi + ARG_SCALE * 8])
    fn.mov(rcx, qword[rsi + ARG_BIAS * 8])
    for j in range(nv):
        fn.vmovups(tmp, zword[rdx + r10 + j * 64])
        fn.vmovups(tmp2, zword[rcx + r10 + j * 64])
        for row in acc:
            fn.vcvtdq2ps(row[j], row[j])
            fn.vfmadd213ps(row[j], tmp, tmp2)
    stretch: list[PostOp] = []  # the f32 conv's ops since the last int8 step: conv.py emits them

    def flush() -> None:
        if stretch:
            _emit_post_ops(fn, geo, acc, free, tuple(stretch), bias=False, post_arg=ARG_CHAN)  # type: ignore[arg-type]
            stretch.clear()

    for op, at in zip(geo.post_ops, offsets):
        if op.kind not in INT8_POST_OPS:  # type: ignore[union-attr]
            stretch.append(op)  # type: ignore[arg-type]
            continue
        flush()
        fn.mov(rdx, qword[rsi + ARG_POST * 8])
        if op.kind == "fq":  # type: ignore[union-attr]
            grid = _load_grid(fn, free, (at + 12, at, at + 4, at + 8))
            for row in acc:
                for z in row:
                    _emit_fq(fn, z, tmp, grid)
            continue
        if op.kind in QRESIDUAL:  # type: ignore[union-attr]
            widen = fn.vpmovsxbd if QRESIDUAL[op.kind] else fn.vpmovzxbd  # type: ignore[union-attr]
            scale, zp = _load_grid(fn, free, (at, at + 4))
            for i, row in enumerate(acc):
                for j, z in enumerate(row):
                    src = r11 + (i * geo.m + j * LANES)
                    widen(tmp.mask(k1).z if j == nv - 1 else tmp, src)  # (masked: the group's partial vector)
                    fn.vpsubd(tmp, tmp, zp)
                    fn.vcvtdq2ps(tmp, tmp)
                    fn.vmulps(tmp, tmp, scale)
                    fn.vaddps(z, z, tmp)
            continue
        gate, aux = free[3], Aux(tuple(free[:3]), (k2,))  # qswish: x * fq(sigmoid(alpha x))
        alpha = op.alpha  # type: ignore[union-attr]
        for row in acc:
            for z in row:
                if alpha != 1.0:
                    fn.vmulps(gate, z, bcst(fn.const_f32(alpha)))
                emit_sigmoid(fn, gate, gate if alpha != 1.0 else z, aux)
                _emit_fq(fn, gate, tmp, [bcst(rdx + o) for o in (at + 12, at, at + 4, at + 8)])  # (free: aux)
                fn.vmulps(z, z, gate)
    flush()
    osz = OUT_SIZE[geo.output]
    if geo.output == "f32":
        for i, row in enumerate(acc):
            for j, z in enumerate(row):
                dst = zword[r9 + (i * geo.m * 4 + j * 64)]
                fn.vmovups(dst.mask(k1) if j == nv - 1 else dst, z)
        return
    # requantized as QuantizeLinear: x / y_scale correctly rounded (emit_divide_by: three multiply-adds, where a
    # vdivps per vector cost the small convs a third of their time), clamped first (exact integers after rounding),
    # then rounded half to even; the low byte of each lane is the u8/s8 value
    fn.mov(rdx, qword[rsi + ARG_QPARAMS * 8])
    r, c, lo, hi, zp = _load_grid(fn, free, (0, 16, 4, 8, 12))
    for i, row in enumerate(acc):
        for j, z in enumerate(row):
            emit_divide_by(fn, z, tmp, r, c)
            fn.vmaxps(z, z, lo)
            fn.vminps(z, z, hi)
            fn.vcvtps2dq(z, z, rc="rn")
            fn.vpaddd(z, z, zp)
            dst = r9 + (i * geo.m * osz + j * LANES)
            fn.vpmovdb(dst.mask(k1) if j == nv - 1 else dst, z)


def _load_grid(fn: Function, free: list, offsets: tuple[int, ...]) -> list:
    """The grid's 32-bit parameters at ``rdx + offsets`` as operands: broadcast once into the free registers past
    the two temporaries when enough are free (the block's vectors then read registers, not a broadcast load each),
    else broadcast memory operands."""
    if len(free) < 2 + len(offsets):
        return [bcst(rdx + o) for o in offsets]
    regs = free[2 : 2 + len(offsets)]
    for reg, o in zip(regs, offsets):
        fn.vpbroadcastd(reg, dword[rdx + o])
    return regs


def _emit_fq(fn: Function, z: ZMM, t: ZMM, grid: list) -> None:
    """``z`` onto the per-tensor grid ``(1 / s, s, lo, hi)`` (operands: ``_load_grid``), kept in f32: ``z / s`` as
    QuantizeLinear rounds it (``emit_divide_by``; ``t`` clobbered), the step times the scale."""
    r, s, lo, hi = grid
    emit_divide_by(fn, z, t, r, s)
    fn.vmaxps(z, z, lo)
    fn.vminps(z, z, hi)
    fn.vrndscaleps(z, z, 0)  # to nearest, ties to even
    fn.vmulps(z, z, s)


def kernel_function(geo: Int8ConvShape) -> JitFunction:
    """The compiled kernel for ``geo`` (``Int8ConvShape.kernel_key``: every batch size shares one, and a dynamic
    geometry's every H, W), from the process-wide function cache."""
    from snippets_x86_64.cache import FUNCTION_CACHE, HARNESS_ARGTYPES

    key = geo.kernel_key()
    return FUNCTION_CACHE.get("conv_int8", key, lambda: build_int8_conv_kernel(key), HARNESS_ARGTYPES)


class Int8ConvKernel:
    """One int8 convolution ready to run: the packed weight, the work table and the kernel (cached per shape), the
    items split into one range per thread. ``run`` takes the padded input, the per-channel vectors (comp s32,
    scale and bias f32, as :func:`channel_vector` lays them out) and writes the NHWC output."""

    def __init__(self, geo: Int8ConvShape, w: np.ndarray, threads: int = 1, first: Int8ConvKernel | None = None) -> None:
        """``first``: this convolution's kernel for another input shape, whose packed weight this one shares (the
        panels depend on the channels and the taps only)."""
        from snippets_x86_64.aligned import empty_aligned
        from snippets_x86_64.native_pool import SplitCall, split_items

        self.geo = geo
        if first is None:
            packed, self.offsets = pack_weights_int8(w, geo)
            self.packed = empty_aligned(packed.shape, np.int8, 0)
            self.packed[...] = packed
        else:
            self.packed, self.offsets = first.packed, first.offsets
        self.table = work_table(geo, self.offsets)
        # the code does not depend on the batch (the table walks the images): one kernel for every batch size, and
        # a dynamic one's for every H, W
        self.kernel = kernel_function(geo)
        # a small convolution runs on one thread: waking the other costs more than its half (~4 us a hand-off)
        threads = threads if estimated_ns(geo) >= MIN_NS_PER_THREAD * threads else 1
        self.chunks = split_items(table_items(self.table), threads)
        #: the dispatch: one argument block and Job made once (~0.5 us a two-thread call, not ~4.5 us)
        self.call = SplitCall(self.kernel, ARG_CHAN + geo.channel_arrays, self.chunks)
        self._dummy = np.zeros(LANES, np.float32)

    @property
    def threads(self) -> int:
        return len(self.chunks)

    def run(self, xp: np.ndarray, y: np.ndarray, comp: np.ndarray, scale: np.ndarray, bias: np.ndarray,
            residual: np.ndarray | None = None, qparams: np.ndarray | None = None,
            post: np.ndarray | None = None) -> None:
        """The kernel on ``xp`` (u8 [N, Hp, Wp, Cp]) into ``y`` (NHWC [N, Ho, Wo, M] of the output type); the
        arrays are checked (this runs once per call, not per item)."""
        g = self.geo
        want = {"xp": (xp, np.uint8, (g.n, g.hp, g.wp, g.cp)),
                "y": (y, {"f32": np.float32, "u8": np.uint8, "s8": np.int8}[g.output], g.out_shape),
                "comp": (comp, np.int32, (g.group * g.nvp * LANES,)),
                "scale": (scale, np.float32, (g.group * g.nvp * LANES,)),
                "bias": (bias, np.float32, (g.group * g.nvp * LANES,))}
        if "residual" in g.kinds:
            want["residual"] = (residual, np.float32, (g.n, g.ho, g.wo, g.m))
        for kind, signed in QRESIDUAL.items():
            if kind in g.kinds:
                want["residual"] = (residual, np.int8 if signed else np.uint8, (g.n, g.ho, g.wo, g.m))
        if g.output != "f32":
            want["qparams"] = (qparams, np.float32, (QPARAMS,))
        if any(op in (*INT8_POST_OPS, *CHANNEL_POST_OPS) for op in g.kinds):
            want["post"] = (post, np.float32, (max(post_offsets(g)[-1] // 4, LANES),))
        for name, (a, dtype, shape) in want.items():
            if a is None or a.dtype != dtype or a.shape != shape or not a.flags.c_contiguous:
                got = None if a is None else f"{a.dtype} {list(a.shape)}"
                raise InputError(f"int8 convolution {name} must be C-contiguous {np.dtype(dtype)} {list(shape)}, "
                                 f"got {got}")
        self.bind(comp, scale, bias, qparams, post)
        self.launch(xp.ctypes.data, y.ctypes.data, None if residual is None else residual.ctypes.data)

    def bind(self, comp: np.ndarray, scale: np.ndarray, bias: np.ndarray, qparams: np.ndarray | None = None,
             post: np.ndarray | None = None) -> None:
        """Fix the per-channel vectors and parameter blocks the next launches read (checked by ``run``; the
        executor binds its own once, and per call only for dynamic quantization); they must stay alive."""
        dummy = self._dummy.ctypes.data
        at = dummy if post is None else post.ctypes.data
        offsets = post_offsets(self.geo)
        chans = [at + o for k, o in zip(self.geo.kinds, offsets) if k in CHANNEL_POST_OPS]
        self._words = [0, self.packed.ctypes.data, 0, comp.ctypes.data, scale.ctypes.data, bias.ctypes.data, dummy,
                       self.table.ctypes.data, dummy if qparams is None else qparams.ctypes.data, at, *chans]
        self._bound = (comp, scale, bias, qparams, post)

    def launch(self, src: int, dst: int, residual: int | None = None) -> None:
        """The kernel over every item on the bound vectors: ``src`` the padded u8 input, ``dst`` the NHWC output,
        ``residual`` an f32 NHWC tensor of the output's shape (addresses of arrays of the geometry's shapes)."""
        words = self._words.copy()  # (the SplitCall gives a concurrent call a block of its own)
        words[ARG_SRC], words[ARG_DST] = src, dst
        if residual is not None:  # (bind put the dummy there)
            words[ARG_RES] = residual
        self.call.run(words)


#: estimated kernel nanoseconds per thread below which the convolution runs on one thread
MIN_NS_PER_THREAD = 4_400
#: measured on one core (cnn_block_qdq's convs, ResNet-50's): multiply-adds per ns of the reduction, and ns per
#: output element of the epilogue (dequantize and store) and of each post-op after it
MACS_PER_NS, EPILOGUE_NS, POST_OP_NS = 450, 0.05, 0.02


def estimated_ns(geo: Int8ConvShape) -> float:
    """The kernel's time on one core: the reduction, plus the epilogue, which dominates a stem (3 input channels:
    9 vpdpbusd per accumulator, then its whole chain): cnn_block_qdq's 3->32 stem has a third of the multiply-adds
    of its 32->32 conv and takes as long (25 us each)."""
    outputs = geo.n * geo.ho * geo.wo * geo.m
    return geo.macs / MACS_PER_NS + outputs * (EPILOGUE_NS + POST_OP_NS * len(geo.post_ops))


__all__ = ["Int8ConvKernel", "Int8ConvShape", "build_int8_conv_kernel", "channel_vector", "compensation",
           "estimated_ns", "kernel_function", "pack_weights_int8", "post_params", "requant_params", "work_table"]

"""The executor of an int8 convolution Subgraph (a static QDQ 2-D Conv, TokenizeInt8FCSnippets): the convolution as
one GEMM over its windows on the VNNI Brgemm, the sibling of the f32 conv primitive (``conv.py``) for int8.

Per call: x (f32 NCHW) is transposed to NHWC, quantized by the JIT quantizer on the Q->DQ pair's grid into a
padded NHWC byte buffer whose border holds the zero point (the quantized 0.0: the f32 convolution pads the
dequantized values with zeros); the windows are gathered (im2col: one strided copy of bytes, ``[N*Ho*Wo,
KH*KW*C]``); an :class:`~snippets_x86_64.int8_fc_executor.Int8FCExecutor` multiplies them by the weight (repacked
once, rows ordered [kh, kw, c]) with the per-channel dequantization and the bias as post-ops, rows split between
the threads; the NHWC result is written into the NCHW output. The data movement (transpose, im2col, transpose
back) is numpy, ~2 bytes moved per byte of the quantized input times KH*KW, against C*KH*KW*M multiply-adds per
output pixel in the kernel; a batch-reduce int8 conv kernel reading the padded input in place would remove it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from snippets_core.errors import InputError
from snippets_core.ir.ops.quantize import dynamic_quantization_grid
from snippets_core.tokenization.tokenize_int8_fc_snippets import DYNAMIC, QUANTIZE, QUANTIZED, Int8FCSpec
from snippets_x86_64.brgemm_int8 import C_DTYPE
from snippets_x86_64.int8_fc_executor import Int8FCExecutor
from snippets_x86_64.quantize_int8 import quantize_function, quantize_params


class Int8ConvExecutor:
    """Runs one int8 convolution Subgraph (see the module docstring) on ``threads`` threads."""

    def __init__(self, spec: Int8FCSpec, threads: int) -> None:
        assert spec.conv is not None
        self.spec = spec
        self.geo = spec.conv
        kh, kw = self.geo.kernel
        self.channels = spec.k // (kh * kw)
        # the GEMM over the windows: its A (the gathered windows) is already quantized
        # the GEMM over the windows (a dynamic grid's vectors are made per call)
        self.gemm = Int8FCExecutor(replace(spec, source=DYNAMIC if spec.source == DYNAMIC else QUANTIZED, conv=None,
                                           a_index=0), threads)
        #: None: x is already quantized (QLinearConv), its bytes are only moved
        self.qparams = quantize_params(spec.a_scale, spec.a_zero_point, spec.a_signed) \
            if spec.source == QUANTIZE else None
        self.qdtype = np.int8 if spec.a_signed else np.uint8
        self.in_dtype = self.qdtype if spec.source == QUANTIZED else np.float32
        self.out_dtype = C_DTYPE[self.gemm.output]
        self._lock = threading.Lock()
        self._scratch: dict[int, dict[str, Any]] = {}
        self.last_placement = self.gemm.last_placement

    def __call__(self, args: Sequence[Any], outs: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        g, s = self.geo, self.spec
        x = np.asarray(args[s.a_index])
        if x.dtype != self.in_dtype or x.ndim != 4 or x.shape[1] != self.channels or x.shape[2:] != g.spatial:
            raise InputError(f"the int8 convolution takes {np.dtype(self.in_dtype)} [N, {self.channels}, "
                             f"{g.spatial[0]}, {g.spatial[1]}], got {x.dtype} {list(x.shape)}")
        n, c, h, w = x.shape
        (kh, kw), (sh, sw), (dh, dw) = g.kernel, g.strides, g.dilations
        (ho, wo), (pt, pl) = g.out, g.pads_begin
        hp, wp = h + pt + g.pads_end[0], w + pl + g.pads_end[1]
        qparams, zp, vectors = self.qparams, s.a_zero_point, self.gemm.vectors if s.source != DYNAMIC else None
        if s.source == DYNAMIC:  # DynamicQuantizeLinear's grid of this x
            scale, zp = (float(v) for v in dynamic_quantization_grid(x))
            zp = int(zp)
            qparams, vectors = quantize_params(scale, zp, False), self.gemm.vectors_for(scale, zp)
        own = self._lock.acquire(blocking=False)
        try:  # the buffers are kept between calls (fresh pages cost more than the copies); a concurrent call
            # gets its own
            buf = self._scratch.get(n) if own else None
            if buf is None:
                buf = self._new_buffers(n)
                if own:
                    self._scratch[n] = buf
            padded, cols, y = buf["padded"], buf["cols"], buf["y"]
            if buf["border"] != zp:  # the border holds the zero point (the interior is rewritten below)
                padded.fill(zp)
                buf["border"] = zp
            if qparams is None:
                padded[:, pt : pt + h, pl : pl + w] = x.transpose(0, 2, 3, 1)
            elif x.size:
                xt, q = buf["xt"], buf["q"]
                np.copyto(xt, x.transpose(0, 2, 3, 1))
                quantize_function(w * c)(xt.ctypes.data, q.ctypes.data, n * h, qparams.ctypes.data)
                padded[:, pt : pt + h, pl : pl + w] = q
            # every window in bounds: pads_end was grown at tokenization so the last one fits the padded input
            windows = as_strided(padded, (n, ho, wo, kh, kw, c),
                                 (hp * wp * c, sh * wp * c, sw * c, dh * wp * c, dw * c, 1), writeable=False)
            np.copyto(cols.reshape(windows.shape), windows)
            self.gemm.multiply(cols, y, vectors, None)  # type: ignore[arg-type]
            out = outs[0] if outs is not None and outs[0] is not None else np.empty((n, s.n, ho, wo), self.out_dtype)
            if out.dtype != self.out_dtype or out.shape != (n, s.n, ho, wo):
                raise InputError(f"output array 0 must be {np.dtype(self.out_dtype)}{[n, s.n, ho, wo]}, got "
                                 f"{out.dtype}{list(out.shape)}")
            out[...] = y.reshape(n, ho, wo, s.n).transpose(0, 3, 1, 2)
        finally:
            if own:
                self._lock.release()
        return [out]

    def _new_buffers(self, n: int) -> dict[str, Any]:
        """The per-call arrays of a batch of ``n``: NHWC x and its quantized bytes, the padded input, the gathered
        windows, the GEMM's NHWC output; ``border``: the value the padded border holds (None: not filled yet)."""
        g, s, c = self.geo, self.spec, self.channels
        (h, w), (ho, wo) = g.spatial, g.out
        hp, wp = h + g.pads_begin[0] + g.pads_end[0], w + g.pads_begin[1] + g.pads_end[1]
        return {"xt": np.empty((n, h, w, c), np.float32), "q": np.empty((n, h, w, c), self.qdtype),
                "padded": np.empty((n, hp, wp, c), self.qdtype), "cols": np.empty((n * ho * wo, s.k), self.qdtype),
                "y": np.empty((n * ho * wo, s.n), self.out_dtype), "border": None}

    def describe(self) -> str:
        how = "copied" if self.spec.source == QUANTIZED else "quantized (JIT)"
        return (f"int8 convolution: the padded NHWC input {how}, its windows gathered (numpy im2col), "
                f"then {self.gemm.describe()}")


__all__ = ["Int8ConvExecutor"]

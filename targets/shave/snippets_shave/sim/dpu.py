"""The NCE (DPU) model of the simulator: what one DPU variant computes, and the checks a loader makes on it.

A variant reads its operands from its tile's CMX and writes its output there (docs/dpu.md):

* inputs are f16, i8 or u8 (each operand on its own); every value is widened exactly to f32;
* products are summed in f32 (the NCE's MAC array accumulates in f32 for f16 inputs; int8 products are exact
  in f32 up to 2**24, which bounds the accumulation length of an int8 variant we accept);
* the output is rounded once to f16 (round to nearest even), as the NCE's output data unit (ODU) does.

MATMUL: ``output[M, N] = input[M, K] @ weights[K, N]`` (``weights[N, K]`` with ``transpose_b``). CONV:
``output[N, OC, OH, OW]`` of ``input[N, C, H, W]`` and ``weights[OC, C, KH, KW]`` with zero padding, strides
and dilations. MAXPOOL/AVGPOOL: windows of ``input[N, C, H, W]`` (padding never wins a max; an average divides
by the whole window or, with ``exclude_pad``, by its unpadded part). ADD/MUL: ``input`` and ``weights`` of the
output's shape, element by element.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from snippets_shave.blob import DpuOp, DpuTask, Location, TensorRef
from snippets_shave.constants import DTYPE_TO_NUMPY, DType
from snippets_shave.errors import BlobFormatError

#: element types the NCE reads
DPU_INPUT_DTYPES = (DType.F16, DType.I8, DType.U8)
#: the NCE's output element type
DPU_OUTPUT_DTYPE = DType.F16
#: an int8 variant must keep every f32 partial sum exact: K * 128 * 128 (or 255 * 128) below 2**24
MAX_INT8_REDUCTION = (1 << 24) // (255 * 128)


def window_out(size: int, kernel: int, stride: int, pad_lo: int, pad_hi: int, dilation: int = 1) -> int:
    """Output positions of a window sliding over ``size`` positions (the ONNX/NCE formula, floor mode)."""
    return (size + pad_lo + pad_hi - dilation * (kernel - 1) - 1) // stride + 1


def reduction_length(p: DpuTask) -> int:
    """Products summed into one output value (1 for eltwise and pools)."""
    if p.op == DpuOp.MATMUL:
        return int(p.input.dims[-1])
    if p.op == DpuOp.CONV:
        return int(np.prod(p.weights.dims[1:])) if p.weights is not None else 0
    return 1


def macs(p: DpuTask) -> int:
    """Multiply-accumulates (window reads, for pools and eltwise) of one variant: the timing model's work."""
    out = int(np.prod(p.output.dims, dtype=np.int64))
    if p.op in (DpuOp.MAXPOOL, DpuOp.AVGPOOL):
        return out * int(np.prod(p.kernel, dtype=np.int64))
    return out * reduction_length(p)


def _expected_output(p: DpuTask, where: str) -> tuple[int, ...]:
    """The output dims the op and its operands imply; a BlobFormatError naming the field when they disagree."""
    x = tuple(p.input.dims)
    if p.op == DpuOp.MATMUL:
        w = tuple(p.weights.dims)  # type: ignore[union-attr]
        if len(x) != 2 or len(w) != 2:
            raise BlobFormatError(f"{where}: MATMUL takes input [M, K] and weights [K, N], got {x} and {w}")
        k, n = (w[1], w[0]) if p.transpose_b else w
        if x[1] != k:
            raise BlobFormatError(f"{where}: MATMUL input K = {x[1]} but weights K = {k}")
        return (x[0], n)
    if p.op in (DpuOp.ADD, DpuOp.MUL):
        w = tuple(p.weights.dims)  # type: ignore[union-attr]
        if w != x:
            raise BlobFormatError(f"{where}: {p.op.name} operands {x} and {w} differ")
        return x
    if len(x) != 4:
        raise BlobFormatError(f"{where}: {p.op.name} takes input [N, C, H, W], got {x}")
    if len(p.kernel) != 2 or len(p.strides) != 2 or len(p.pads) != 4:
        raise BlobFormatError(f"{where}: {p.op.name} needs kernel [KH, KW], strides [SH, SW], pads [t, l, b, r]")
    dil = p.dilations or (1, 1)
    if len(dil) != 2 or min(dil) < 1 or min(p.kernel) < 1 or min(p.strides) < 1:
        raise BlobFormatError(f"{where}: kernel, strides and dilations must be positive")
    if max(p.pads[0], p.pads[2]) >= p.kernel[0] * dil[0] or max(p.pads[1], p.pads[3]) >= p.kernel[1] * dil[1]:
        raise BlobFormatError(f"{where}: pads {list(p.pads)} as large as the window {list(p.kernel)}")
    oh = window_out(x[2], p.kernel[0], p.strides[0], p.pads[0], p.pads[2], dil[0])
    ow = window_out(x[3], p.kernel[1], p.strides[1], p.pads[1], p.pads[3], dil[1])
    channels = x[1]
    if p.op == DpuOp.CONV:
        w = tuple(p.weights.dims)  # type: ignore[union-attr]
        if len(w) != 4 or w[1] != x[1] or tuple(w[2:]) != tuple(p.kernel):
            raise BlobFormatError(f"{where}: CONV weights {w} do not fit input {x} and kernel {list(p.kernel)}")
        channels = w[0]
    return (x[0], channels, oh, ow)


def check_dpu_task(p: DpuTask, where: str) -> None:
    """Every static fact the runtime relies on: CMX operands of the same tile, dense, of NCE element types,
    shapes that agree with the op (the loader calls this; regions are checked by the loader)."""
    needs_weights = p.op in (DpuOp.MATMUL, DpuOp.CONV, DpuOp.ADD, DpuOp.MUL)
    if needs_weights != (p.weights is not None):
        raise BlobFormatError(f"{where}: {p.op.name} {'needs' if needs_weights else 'takes no'} weights")
    operands = [("input", p.input), ("output", p.output)] + ([("weights", p.weights)] if p.weights else [])
    tiles = {ref.index for _, ref in operands}
    for name, ref in operands:
        if ref.location != Location.CMX or len(tiles) != 1:
            raise BlobFormatError(f"{where}.{name}: a DPU reads and writes the CMX of its own tile only")
        if ref.strides_bits:
            raise BlobFormatError(f"{where}.{name}: DPU operands are dense (no strides)")
        allowed = (DPU_OUTPUT_DTYPE,) if name == "output" else DPU_INPUT_DTYPES
        if ref.dtype not in allowed:
            raise BlobFormatError(f"{where}.{name}: {ref.dtype.name}; the NCE takes {[d.name for d in allowed]}")
    window = p.op in (DpuOp.CONV, DpuOp.MAXPOOL, DpuOp.AVGPOOL)
    unused = [name for name, value, used in (
        ("kernel", p.kernel, window), ("strides", p.strides, window), ("pads", p.pads, window),
        ("dilations", p.dilations, p.op == DpuOp.CONV), ("transpose_b", p.transpose_b, p.op == DpuOp.MATMUL),
        ("exclude_pad", p.exclude_pad, p.op == DpuOp.AVGPOOL),
    ) if value and not used]  # fmt: skip
    if unused:
        raise BlobFormatError(f"{where}: {p.op.name} takes no {', '.join(unused)}")
    if p.variants < 1 or p.variant >= p.variants:
        raise BlobFormatError(f"{where}: variant {p.variant} of {p.variants}")
    expected = _expected_output(p, where)
    if tuple(p.output.dims) != expected:
        raise BlobFormatError(f"{where}.output: dims {tuple(p.output.dims)}, the op computes {expected}")
    int8 = any(ref.dtype != DType.F16 for _, ref in operands[:1] + operands[2:])
    if int8 and reduction_length(p) > MAX_INT8_REDUCTION:
        raise BlobFormatError(f"{where}: an int8 reduction of {reduction_length(p)} products is not exact in f32")


def _read(ref: TensorRef, memory: np.ndarray) -> np.ndarray:
    dtype = DTYPE_TO_NUMPY[ref.dtype]
    raw = memory[ref.offset : ref.offset + ref.nbytes]
    return np.frombuffer(raw.tobytes(), dtype=dtype).reshape(ref.dims).astype(np.float32)


def _pad(x: np.ndarray, pads: tuple[int, ...], value: float) -> np.ndarray:
    t, left, b, r = pads
    return np.pad(x, ((0, 0), (0, 0), (t, b), (left, r)), constant_values=value)


def _windows(x: np.ndarray, p: DpuTask, oh: int, ow: int) -> np.ndarray:
    """``[N, C, KH, KW, OH, OW]`` view of the (padded) input's windows."""
    kh, kw = p.kernel
    sh, sw = p.strides
    dh, dw = p.dilations or (1, 1)
    rows = (np.arange(kh) * dh)[:, None] + np.arange(oh) * sh
    cols = (np.arange(kw) * dw)[:, None] + np.arange(ow) * sw
    return x[:, :, rows[:, None, :, None], cols[None, :, None, :]]


def _conv(x: np.ndarray, w: np.ndarray, p: DpuTask, out_dims: tuple[int, ...]) -> np.ndarray:
    n, oc, oh, ow = out_dims
    win = _windows(_pad(x, p.pads, 0.0), p, oh, ow)  # [N, C, KH, KW, OH, OW]
    cols = win.reshape(n, -1, oh * ow)  # im2col: [N, C*KH*KW, OH*OW], f32
    flat = w.reshape(oc, -1)
    out = np.stack([flat @ cols[i] for i in range(n)])  # f32 x f32 summed in f32
    return out.reshape(out_dims)


def _pool(x: np.ndarray, p: DpuTask, out_dims: tuple[int, ...]) -> np.ndarray:
    _, _, oh, ow = out_dims
    if p.op == DpuOp.MAXPOOL:
        return _windows(_pad(x, p.pads, -np.inf), p, oh, ow).max(axis=(2, 3))
    sums = _windows(_pad(x, p.pads, 0.0), p, oh, ow).sum(axis=(2, 3), dtype=np.float32)
    if p.exclude_pad:
        ones = np.ones((1, 1, *x.shape[2:]), np.float32)
        counts = _windows(_pad(ones, p.pads, 0.0), p, oh, ow).sum(axis=(2, 3), dtype=np.float32)
    else:
        counts = np.float32(p.kernel[0] * p.kernel[1])
    return sums / counts


_OPS: dict[DpuOp, Callable[[np.ndarray, np.ndarray | None, DpuTask, tuple[int, ...]], np.ndarray]] = {
    DpuOp.MATMUL: lambda x, w, p, _: x @ (w.T if p.transpose_b else w),  # type: ignore[union-attr]
    DpuOp.CONV: lambda x, w, p, dims: _conv(x, w, p, dims),  # type: ignore[arg-type]
    DpuOp.MAXPOOL: lambda x, _w, p, dims: _pool(x, p, dims),
    DpuOp.AVGPOOL: lambda x, _w, p, dims: _pool(x, p, dims),
    DpuOp.ADD: lambda x, w, _p, _d: x + w,
    DpuOp.MUL: lambda x, w, _p, _d: x * w,
}


def run_dpu(p: DpuTask, cmx: np.ndarray) -> None:
    """Execute one variant on its tile's CMX bytes (``cmx``: a writable uint8 view)."""
    x = _read(p.input, cmx)
    w = _read(p.weights, cmx) if p.weights is not None else None
    dims = tuple(int(d) for d in p.output.dims)
    out = _OPS[p.op](x, w, p, dims).astype(np.float32).astype(np.float16)
    cmx[p.output.offset : p.output.offset + p.output.nbytes] = np.frombuffer(out.tobytes(), np.uint8)

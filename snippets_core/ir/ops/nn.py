"""Reference-only neural-network ops: convolution, pooling and local response normalization.

These ops exist so that exported CNNs (alexnet, resnet, inception, ...) run end to end; no target fuses
them, they run on their numpy references. Layouts follow ONNX: ``[N, C, *spatial]`` activations and
``[M, C/group, *kernel]`` weights. Convolution and pooling are written with strided window views and one
matmul per kernel so that the light real models run in seconds.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from collections.abc import Sequence

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.element_type import ElementType, is_float_dtype
from snippets_core.ir.node import Node, Output
from snippets_core.ir.shape import Dim, SDim, Shape, SymDim, sdim_add, sdim_ceildiv, sdim_floordiv, sdim_mul

AUTO_PADS = ("explicit", "same_upper", "same_lower", "valid")


def _tuple(values: Sequence[int] | None, n: int, default: int) -> tuple[int, ...]:
    if values is None or len(values) == 0:
        return (default,) * n
    return tuple(int(v) for v in values)


class WindowGeometry:
    """Per-spatial-axis kernel, strides, dilations and pads, resolved against an input size.

    ``auto_pad`` follows ONNX: ``same_upper``/``same_lower`` give ``ceil(in / stride)`` outputs with the
    odd padding element at the end/beginning; ``valid`` pads nothing; ``explicit`` uses the given pads.
    """

    def __init__(self, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                 pads_begin: Sequence[int], pads_end: Sequence[int], auto_pad: str, ceil_mode: bool) -> None:
        self.kernel = tuple(kernel)
        self.strides = tuple(strides)
        self.dilations = tuple(dilations)
        self.pads_begin = tuple(pads_begin)
        self.pads_end = tuple(pads_end)
        self.auto_pad = auto_pad
        self.ceil_mode = ceil_mode

    def sym_out(self, i: int, size: SDim) -> SDim:
        """The output size of spatial axis ``i`` for an input size that may be symbolic (``H`` gives
        ``floor((H+1)/2)`` for a 3x3 stride-2 pad-1 window); None when unknown, or when a ceil-mode window
        would need the value of ``H`` to drop its last window."""
        if not isinstance(size, SymDim):
            return self.axis(i, size)[0]
        k, s, d = self.kernel[i], self.strides[i], self.dilations[i]
        extent = (k - 1) * d + 1
        if self.auto_pad in ("same_upper", "same_lower"):
            return sdim_ceildiv(size, s)
        pb, pe = (0, 0) if self.auto_pad == "valid" else (self.pads_begin[i], self.pads_end[i])
        span = sdim_add(size, pb + pe - extent)
        if not self.ceil_mode:
            return sdim_add(sdim_floordiv(span, s), 1)
        # ceil((span)/s)+1, less one when the last window starts past the input and begin pad; it never does
        # when the end pad is shorter than the window's reach past the last stride: (out-1)*s < span+s <= size+pb
        if pe + s > extent:
            return None
        return sdim_add(sdim_ceildiv(span, s), 1)

    def axis(self, i: int, size: Dim) -> tuple[Dim, int, int]:
        """(output size, pad begin, pad end) for spatial axis ``i`` of input size ``size``."""
        k, s, d = self.kernel[i], self.strides[i], self.dilations[i]
        extent = (k - 1) * d + 1
        if self.auto_pad in ("same_upper", "same_lower"):
            if size is None:
                return None, 0, 0
            out = -(-size // s)
            total = max((out - 1) * s + extent - size, 0)
            small, big = total // 2, total - total // 2
            return (out, small, big) if self.auto_pad == "same_upper" else (out, big, small)
        pb, pe = (0, 0) if self.auto_pad == "valid" else (self.pads_begin[i], self.pads_end[i])
        if size is None:
            return None, pb, pe
        span = size + pb + pe - extent
        if span < 0:
            raise ShapeInferenceError(f"window of extent {extent} does not fit input size {size} with pads "
                                      f"({pb}, {pe}) on spatial axis {i}")
        if self.ceil_mode:
            out = -(-span // s) + 1
            # The last window must start inside the input or the begin padding (as PyTorch and ONNX do).
            if (out - 1) * s >= size + pb:
                out -= 1
        else:
            out = span // s + 1
        return out, pb, pe

    def resolve(self, spatial: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
        outs, pbs, pes = [], [], []
        for i, size in enumerate(spatial):
            o, pb, pe = self.axis(i, size)
            outs.append(int(o))  # type: ignore[arg-type]
            pbs.append(pb)
            pes.append(pe)
        return outs, pbs, pes


def _padded(x: np.ndarray, pbs: Sequence[int], pes: Sequence[int], outs: Sequence[int],
            geo: WindowGeometry, fill: float) -> np.ndarray:
    """``x`` padded with ``fill`` so that every window of every output position is in bounds."""
    widths = [(0, 0), (0, 0)]
    for i, (pb, pe, o) in enumerate(zip(pbs, pes, outs)):
        need = (o - 1) * geo.strides[i] + (geo.kernel[i] - 1) * geo.dilations[i] + 1
        have = x.shape[2 + i] + pb + pe
        widths.append((pb, pe + max(need - have, 0)))
    if all(w == (0, 0) for w in widths):
        return x
    return np.pad(x, widths, mode="constant", constant_values=fill)


def _windows(xp: np.ndarray, outs: Sequence[int], geo: WindowGeometry) -> itertools.product:
    """For each kernel position, the strided view of ``xp`` it reads: ``[N, C, *outs]``."""
    ranges = [range(k) for k in geo.kernel]
    for pos in itertools.product(*ranges):
        index = [slice(None), slice(None)]
        for i, p in enumerate(pos):
            start = p * geo.dilations[i]
            index.append(slice(start, start + (outs[i] - 1) * geo.strides[i] + 1, geo.strides[i]))
        yield pos, xp[tuple(index)]


class _WindowOp(Node):
    """Shared attributes and shape inference of convolution and pooling."""

    _abstract = True

    def _geometry(self, kernel: Sequence[int]) -> WindowGeometry:
        n = len(kernel)
        pads = _tuple(self.pads, 2 * n, 0)  # type: ignore[attr-defined]
        return WindowGeometry(kernel, _tuple(self.strides, n, 1), _tuple(self.dilations, n, 1),  # type: ignore
                              pads[:n], pads[n:], self.auto_pad, getattr(self, "ceil_mode", False))  # type: ignore

    def _check_common(self, rank_of_kernel: int) -> None:
        if self.auto_pad not in AUTO_PADS:  # type: ignore[attr-defined]
            raise ShapeInferenceError(f"auto_pad must be one of {AUTO_PADS}, got {self.auto_pad!r}")  # type: ignore
        for attr, n in (("strides", rank_of_kernel), ("dilations", rank_of_kernel), ("pads", 2 * rank_of_kernel)):
            v = getattr(self, attr)
            if v is not None and len(v) not in (0, n):
                raise ShapeInferenceError(f"{attr} has {len(v)} values, expected {n}")

    def _spatial_out(self, x: Shape, kernel: Sequence[int]) -> list[SDim]:
        geo = self._geometry(kernel)
        return [geo.sym_out(i, d) for i, d in enumerate(x.sym_dims[2:])]


class Convolution(_WindowOp):
    """ONNX Conv without bias: ``y[n, m] = sum_c,k x[n, g*Cg + c, s*o + d*k - pad] * w[m, c, k]``.

    ``group`` splits the input channels into groups convolved with their own ``M/group`` filters
    (depthwise convolution is ``group == C``). ``pads`` is ``[begin..., end...]`` as in ONNX.
    """

    ATTRS = ("strides", "dilations", "pads", "auto_pad", "group")

    def __init__(self, x: Output | Node, w: Output | Node, *, strides: Sequence[int] | None = None,
                 dilations: Sequence[int] | None = None, pads: Sequence[int] | None = None,
                 auto_pad: str = "explicit", group: int = 1, name: str | None = None) -> None:
        self.strides = None if strides is None else tuple(int(v) for v in strides)
        self.dilations = None if dilations is None else tuple(int(v) for v in dilations)
        self.pads = None if pads is None else tuple(int(v) for v in pads)
        self.auto_pad = auto_pad
        self.group = int(group)
        super().__init__(x, w, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if len(self.inputs) != 2:
            raise ShapeInferenceError(f"Convolution takes 2 inputs (data, weights), got {len(self.inputs)}")
        x, w = self.input_shape(0), self.input_shape(1)
        et = self.input_type(0)
        if not et.is_real:
            raise ShapeInferenceError(f"Convolution needs a real element type, got {et}")
        if not w.is_static:
            raise ShapeInferenceError(f"Convolution weights must have a static shape, got {w}")
        if w.rank < 3:
            raise ShapeInferenceError(f"Convolution weights must be [M, C/group, *kernel], got {w}")
        n_sp = w.rank - 2
        self._check_common(n_sp)
        if self.group < 1 or w[0] % self.group:
            raise ShapeInferenceError(f"group {self.group} does not divide {w[0]} output channels")
        if x.rank_is_static:
            if x.rank != w.rank:
                raise ShapeInferenceError(f"data {x} and weights {w} ranks differ")
            if x[1] is not None and x[1] != w[1] * self.group:
                raise ShapeInferenceError(f"data has {x[1]} channels but weights expect {w[1]} x group {self.group}")
            return [(et, Shape([x.sym(0), w[0], *self._spatial_out(x, w.dims[2:])]))]
        return [(et, Shape.dynamic(w.rank))]

    def evaluate(self, x: np.ndarray, w: np.ndarray) -> list[np.ndarray]:
        kernel = w.shape[2:]
        geo = self._geometry(kernel)
        outs, pbs, pes = geo.resolve(x.shape[2:])
        xp = _padded(x, pbs, pes, outs, geo, 0.0)
        n, g = x.shape[0], self.group
        cg, m = w.shape[1], w.shape[0]
        wg = w.reshape(g, m // g, cg, -1)  # [g, Mg, Cg, K]
        k_count = wg.shape[-1]
        p = math.prod(outs)
        # im2col: [N, g, Cg, K, P] then one batched matmul per group.
        cols = np.empty((n, g, cg, k_count, p), dtype=x.dtype)
        for ki, (_, view) in enumerate(_windows(xp, outs, geo)):
            cols[:, :, :, ki, :] = view.reshape(n, g, cg, p)
        cols = cols.reshape(n, g, cg * k_count, p)
        wmat = wg.reshape(g, m // g, cg * k_count)
        y = np.matmul(wmat[None], cols)  # [N, g, Mg, P]
        return [y.reshape(n, m, *outs).astype(x.dtype, copy=False)]


class ConvolutionBackpropData(_WindowOp):
    """ONNX ConvTranspose without bias: the gradient of Convolution with respect to its input.

    Weights are ``[C, M/group, *kernel]``. ``output_padding`` adds zeros at the end of each spatial
    axis; ``output_shape`` (when given) fixes the spatial output size and the pads follow from it.
    """

    ATTRS = ("strides", "dilations", "pads", "auto_pad", "group", "output_padding", "output_shape")

    def __init__(self, x: Output | Node, w: Output | Node, *, strides: Sequence[int] | None = None,
                 dilations: Sequence[int] | None = None, pads: Sequence[int] | None = None,
                 auto_pad: str = "explicit", group: int = 1, output_padding: Sequence[int] | None = None,
                 output_shape: Sequence[int] | None = None, name: str | None = None) -> None:
        self.strides = None if strides is None else tuple(int(v) for v in strides)
        self.dilations = None if dilations is None else tuple(int(v) for v in dilations)
        self.pads = None if pads is None else tuple(int(v) for v in pads)
        self.auto_pad = auto_pad
        self.group = int(group)
        self.output_padding = None if output_padding is None else tuple(int(v) for v in output_padding)
        self.output_shape = None if output_shape is None else tuple(int(v) for v in output_shape)
        super().__init__(x, w, name=name)

    def _resolve(self, spatial: Sequence[SDim], kernel: Sequence[int]) -> tuple[list[SDim], list[int], list[int]]:
        n = len(kernel)
        s = _tuple(self.strides, n, 1)
        d = _tuple(self.dilations, n, 1)
        op = _tuple(self.output_padding, n, 0)
        pads = _tuple(self.pads, 2 * n, 0)
        outs: list[SDim] = []
        pbs: list[int] = []
        pes: list[int] = []
        for i, size in enumerate(spatial):
            extent = (kernel[i] - 1) * d[i] + 1
            if self.output_shape and self.auto_pad not in ("same_upper", "same_lower"):
                # As the ONNX reference: the explicit begin pads hold, the output is cut (or zero-extended)
                # at the end to output_shape.
                pb = 0 if self.auto_pad == "valid" else pads[i]
                outs.append(self.output_shape[-n + i])
                pbs.append(pb)
                pes.append(0)
                continue
            if self.auto_pad in ("same_upper", "same_lower"):
                # ONNX: total = s * (in - 1) + output_padding + extent - out; SAME_UPPER puts total // 2 at the
                # beginning, SAME_LOWER the rest. A negative total (an output larger than the full result)
                # reads zeros.
                if not isinstance(size, int):
                    outs.append(self.output_shape[-n + i] if self.output_shape else sdim_mul(size, s[i]))
                    pbs.append(0)
                    pes.append(0)
                    continue
                target = self.output_shape[-n + i] if self.output_shape else size * s[i]
                total = s[i] * (size - 1) + op[i] + extent - target
                half = total // 2
                pb, pe = (half, total - half) if self.auto_pad == "same_upper" else (total - half, half)
                outs.append(target)
            else:
                pb, pe = (0, 0) if self.auto_pad == "valid" else (pads[i], pads[n + i])
                outs.append(sdim_add(sdim_mul(size, s[i]), op[i] + extent - pb - pe - s[i]))
            pbs.append(pb)
            pes.append(pe)
        return outs, pbs, pes

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if len(self.inputs) != 2:
            raise ShapeInferenceError(f"ConvolutionBackpropData takes 2 inputs, got {len(self.inputs)}")
        x, w = self.input_shape(0), self.input_shape(1)
        et = self.input_type(0)
        if not w.is_static or w.rank < 3:
            raise ShapeInferenceError(f"weights must be static [C, M/group, *kernel], got {w}")
        self._check_common(w.rank - 2)
        if not x.rank_is_static:
            return [(et, Shape.dynamic(w.rank))]
        if x[1] is not None and x[1] != w[0]:
            raise ShapeInferenceError(f"data has {x[1]} channels but weights have {w[0]}")
        outs, _, _ = self._resolve(x.sym_dims[2:], w.dims[2:])  # type: ignore[arg-type]
        return [(et, Shape([x.sym(0), w[1] * self.group, *outs]))]

    def evaluate(self, x: np.ndarray, w: np.ndarray) -> list[np.ndarray]:
        kernel = w.shape[2:]
        n_sp = len(kernel)
        s = _tuple(self.strides, n_sp, 1)
        d = _tuple(self.dilations, n_sp, 1)
        outs, pbs, _ = self._resolve(x.shape[2:], kernel)
        n, c = x.shape[:2]
        g = self.group
        mg = w.shape[1]
        full = [s[i] * (x.shape[2 + i] - 1) + (kernel[i] - 1) * d[i] + 1 for i in range(n_sp)]
        # Scatter-add each kernel tap into a buffer of the full (unpadded) output.
        buf = np.zeros((n, g, mg, *full), dtype=np.float64)
        xg = x.reshape(n, g, c // g, *x.shape[2:]).astype(np.float64)
        wg = w.reshape(g, c // g, mg, *kernel).astype(np.float64)
        for pos in itertools.product(*[range(k) for k in kernel]):
            tap = wg[(slice(None), slice(None), slice(None), *pos)]  # [g, Cg, Mg]
            contrib = np.einsum("ngc...,gcm->ngm...", xg, tap)
            index = [slice(None)] * 3
            for i, p in enumerate(pos):
                start = p * d[i]
                index.append(slice(start, start + s[i] * (x.shape[2 + i] - 1) + 1, s[i]))
            buf[tuple(index)] += contrib
        # Crop the pads; negative pads (outputs larger than the full result) read zeros.
        before = [max(-pbs[i], 0) for i in range(n_sp)]
        after = [max(pbs[i] + outs[i] - full[i], 0) for i in range(n_sp)]  # type: ignore[operator]
        buf = np.pad(buf, [(0, 0)] * 3 + list(zip(before, after)))
        crop = [slice(None)] * 3 + [slice(pbs[i] + before[i], pbs[i] + before[i] + outs[i])  # type: ignore
                                    for i in range(n_sp)]
        y = buf[tuple(crop)].reshape(n, g * mg, *outs)
        return [y.astype(x.dtype)]


class _Pool(_WindowOp):
    _abstract = True
    ATTRS = ("kernel", "strides", "dilations", "pads", "auto_pad", "ceil_mode")

    def __init__(self, x: Output | Node, *, kernel: Sequence[int], strides: Sequence[int] | None = None,
                 dilations: Sequence[int] | None = None, pads: Sequence[int] | None = None,
                 auto_pad: str = "explicit", ceil_mode: bool = False, name: str | None = None, **extra: object) -> None:
        self.kernel = tuple(int(v) for v in kernel)
        self.strides = None if strides is None else tuple(int(v) for v in strides)
        self.dilations = None if dilations is None else tuple(int(v) for v in dilations)
        self.pads = None if pads is None else tuple(int(v) for v in pads)
        self.auto_pad = auto_pad
        self.ceil_mode = bool(ceil_mode)
        for k, v in extra.items():
            setattr(self, k, v)
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if len(self.inputs) != 1:
            raise ShapeInferenceError(f"{self.type_name} takes 1 input, got {len(self.inputs)}")
        x = self.input_shape(0)
        self._check_common(len(self.kernel))
        if not x.rank_is_static:
            return [(self.input_type(0), Shape.dynamic(len(self.kernel) + 2))]
        if x.rank != len(self.kernel) + 2:
            raise ShapeInferenceError(f"input {x} does not fit a {len(self.kernel)}-D kernel")
        return [(self.input_type(0), Shape([x.sym(0), x.sym(1), *self._spatial_out(x, self.kernel)]))]


class MaxPool(_Pool):
    """ONNX MaxPool: the maximum over each window; padding never wins. With ``with_indices`` a second
    i64 output holds the flat index of each maximum in the input (the first one on ties), with the
    spatial dims in row-major (``storage_order`` 0) or column-major (1) order."""

    ATTRS = _Pool.ATTRS + ("with_indices", "storage_order")

    def __init__(self, x: Output | Node, *, kernel: Sequence[int], with_indices: bool = False,
                 storage_order: int = 0, **kwargs: object) -> None:
        super().__init__(x, kernel=kernel, with_indices=bool(with_indices), storage_order=int(storage_order),
                         **kwargs)  # type: ignore[arg-type]

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if self.storage_order not in (0, 1):
            raise ShapeInferenceError(f"storage_order must be 0 or 1, got {self.storage_order}")
        (spec,) = super().infer()
        return [spec, (ElementType.i64, spec[1])] if self.with_indices else [spec]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        geo = self._geometry(self.kernel)
        outs, pbs, pes = geo.resolve(x.shape[2:])
        low = -np.inf if is_float_dtype(x.dtype) else np.iinfo(x.dtype).min
        xp = _padded(x, pbs, pes, outs, geo, low)
        y = None
        best_pos: np.ndarray | None = None
        for ki, (_, view) in enumerate(_windows(xp, outs, geo)):
            if y is None:
                y = view.copy()
                best_pos = np.zeros(view.shape, dtype=np.int64)
            else:
                better = view > y  # strict: the first maximum in kernel order wins ties
                y = np.where(better, view, y)
                best_pos = np.where(better, ki, best_pos)
        if not self.with_indices:
            return [y]
        return [y, self._indices(x.shape, outs, pbs, geo, best_pos)]  # type: ignore[arg-type]

    def _indices(self, shape: Sequence[int], outs: Sequence[int], pbs: Sequence[int], geo: WindowGeometry,
                 best_pos: np.ndarray) -> np.ndarray:
        """Flat input indices of the winning kernel positions ``best_pos`` (an index into the kernel)."""
        spatial = list(shape[2:])
        taps = np.stack(np.unravel_index(best_pos, geo.kernel), axis=0)  # [n_sp, N, C, *outs]
        coords = []
        for i, o in enumerate(outs):
            grid = np.arange(o).reshape([o if j == i else 1 for j in range(len(outs))])
            coords.append(grid * geo.strides[i] + taps[i] * geo.dilations[i] - pbs[i])
        order = range(len(spatial)) if self.storage_order == 0 else reversed(range(len(spatial)))
        flat = np.zeros(best_pos.shape, dtype=np.int64)
        for i in order:
            flat = flat * spatial[i] + coords[i]
        n, c = shape[:2]
        plane = int(np.prod(spatial))
        nc = (np.arange(n)[:, None] * c + np.arange(c)[None, :]).reshape(n, c, *([1] * len(spatial)))
        return (nc * plane + flat).astype(np.int64)


class AvgPool(_Pool):
    """ONNX AveragePool: the mean over each window. With ``count_include_pad`` the explicit/auto padding
    counts in the divisor; positions beyond it (added by ``ceil_mode``) never count."""

    ATTRS = _Pool.ATTRS + ("count_include_pad",)

    def __init__(self, x: Output | Node, *, kernel: Sequence[int], count_include_pad: bool = False,
                 **kwargs: object) -> None:
        super().__init__(x, kernel=kernel, count_include_pad=bool(count_include_pad), **kwargs)  # type: ignore

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        geo = self._geometry(self.kernel)
        outs, pbs, pes = geo.resolve(x.shape[2:])
        xp = _padded(x.astype(np.float64), pbs, pes, outs, geo, 0.0)
        # The divisor: ones over the real input (and over its padding when count_include_pad), zeros elsewhere.
        ones = np.ones((1, 1, *x.shape[2:]))
        if self.count_include_pad:
            ones = np.pad(ones, [(0, 0), (0, 0)] + list(zip(pbs, pes)), constant_values=1.0)
            mask = _padded(ones, [0] * len(pbs), [0] * len(pbs), outs, geo, 0.0)
        else:
            mask = _padded(ones, pbs, pes, outs, geo, 0.0)
        total = np.zeros((x.shape[0], x.shape[1], *outs))
        count = np.zeros((1, 1, *outs))
        for (_, view), (_, mview) in zip(_windows(xp, outs, geo), _windows(mask, outs, geo)):
            total += view
            count += mview
        return [(total / np.maximum(count, 1.0)).astype(x.dtype)]


class LRN(Node):
    """Local response normalization across channels (ONNX LRN):
    ``y = x / (bias + alpha / size * sum_{window over C} x^2) ^ beta``."""

    ATTRS = ("alpha", "beta", "bias", "size")

    def __init__(self, x: Output | Node, *, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0, size: int,
                 name: str | None = None) -> None:
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.bias = float(bias)
        self.size = int(size)
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        x = self.input_shape(0)
        if x.rank_is_static and x.rank < 2:
            raise ShapeInferenceError(f"LRN needs [N, C, ...], got {x}")
        if self.size < 1:
            raise ShapeInferenceError(f"size must be positive, got {self.size}")
        return [(self.input_type(0), x)]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        sq = x.astype(np.float64) ** 2
        c = x.shape[1]
        before, after = (self.size - 1) // 2, -(-(self.size - 1) // 2)
        padded = np.pad(sq, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
        csum = np.cumsum(padded, axis=1)
        csum = np.concatenate([np.zeros_like(csum[:, :1]), csum], axis=1)
        window = csum[:, self.size:self.size + c] - csum[:, :c]
        y = x / (self.bias + self.alpha / self.size * window) ** self.beta
        return [y.astype(x.dtype)]


COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
INTERPOLATE_MODES = ("nearest", "linear", "cubic")


def _scaled(dim: SDim, scale: float) -> SDim:
    """``floor(dim * scale)`` of a symbolic dim where the scale is a short binary fraction (2, 0.5, 1.5: what
    exporters write), exactly as the float product rounds; None for other scales."""
    ratio = Fraction(scale)
    if dim is None or ratio.denominator > 1024:
        return None
    return sdim_floordiv(sdim_mul(dim, ratio.numerator), ratio.denominator)


class Interpolate(Node):
    """ONNX Resize: resample the axes of ``x`` to ``target`` sizes (``shape_calculation_mode='sizes'``, i64)
    or by ``target`` scales (``'scales'``, f32), one entry per axis of ``axes`` (all axes when ``axes`` is
    None). An optional third input is the ``roi`` of ``tf_crop_and_resize`` (``[starts..., ends...]``).

    Resampling is separable: each axis is resized in turn with per-output-position taps and weights
    (nearest: one tap by ``nearest_mode``; linear: two; cubic: four with ``cubic_coeff_a``; with
    ``antialias`` the linear/cubic kernels widen by 1/scale when downsampling). Taps outside the input read
    the edge value, or get zero weight with ``exclude_outside``.
    """

    ATTRS = ("mode", "shape_calculation_mode", "axes", "coordinate_transformation_mode", "nearest_mode",
             "cubic_coeff_a", "exclude_outside", "extrapolation_value", "antialias", "keep_aspect_ratio_policy")

    def __init__(self, x: Output | Node, target: Output | Node, *roi: Output | Node, mode: str = "nearest",
                 shape_calculation_mode: str = "scales", axes: Sequence[int] | None = None,
                 coordinate_transformation_mode: str = "half_pixel", nearest_mode: str = "round_prefer_floor",
                 cubic_coeff_a: float = -0.75, exclude_outside: bool = False, extrapolation_value: float = 0.0,
                 antialias: bool = False, keep_aspect_ratio_policy: str = "stretch", name: str | None = None) -> None:
        self.mode = mode
        self.shape_calculation_mode = shape_calculation_mode
        self.axes = None if axes is None else tuple(int(a) for a in axes)
        self.coordinate_transformation_mode = coordinate_transformation_mode
        self.nearest_mode = nearest_mode
        self.cubic_coeff_a = float(cubic_coeff_a)
        self.exclude_outside = bool(exclude_outside)
        self.extrapolation_value = float(extrapolation_value)
        self.antialias = bool(antialias)
        self.keep_aspect_ratio_policy = keep_aspect_ratio_policy
        super().__init__(x, target, *roi, name=name)

    def _check(self) -> None:
        for attr, allowed in (("mode", INTERPOLATE_MODES), ("shape_calculation_mode", ("sizes", "scales")),
                              ("coordinate_transformation_mode", COORDINATE_MODES), ("nearest_mode", NEAREST_MODES),
                              ("keep_aspect_ratio_policy", ("stretch", "not_larger", "not_smaller"))):
            if getattr(self, attr) not in allowed:
                raise ShapeInferenceError(f"{attr} must be one of {allowed}, got {getattr(self, attr)!r}")

    def _plan(self, shape: Sequence[int], target: np.ndarray) -> tuple[list[int], list[float], list[int]]:
        """(full output shape, per-axis scales, the resized axes) for an input of ``shape``."""
        rank = len(shape)
        axes = list(range(rank)) if self.axes is None else [a + rank if a < 0 else a for a in self.axes]
        target = np.asarray(target).reshape(-1)
        if len(target) != len(axes):
            raise ShapeInferenceError(f"{self.shape_calculation_mode} has {len(target)} values for {len(axes)} axes")
        out, scales = list(shape), [1.0] * rank
        if self.shape_calculation_mode == "scales":
            for a, s in zip(axes, target.tolist()):
                if s <= 0:
                    raise ShapeInferenceError(f"scale {s} must be positive")
                scales[a] = float(s)
                out[a] = int(shape[a] * float(s))
            return out, scales, axes
        for a, size in zip(axes, target.tolist()):
            scales[a] = int(size) / shape[a] if shape[a] else 1.0
            out[a] = int(size)
        if self.keep_aspect_ratio_policy != "stretch":
            pick = min if self.keep_aspect_ratio_policy == "not_larger" else max
            s = pick(scales[a] for a in axes)
            for a in axes:
                scales[a] = s
                out[a] = int(s * shape[a] + 0.5)
        return out, scales, axes

    def infer(self) -> list[tuple[ElementType, Shape]]:
        self._check()
        if len(self.inputs) not in (2, 3):
            raise ShapeInferenceError(f"Interpolate takes 2 or 3 inputs (data, sizes|scales[, roi]), "
                                      f"got {len(self.inputs)}")
        x = self.input_shape(0)
        et = self.input_type(0)
        if not x.rank_is_static:
            return [(et, Shape.dynamic())]
        from snippets_core.ir.const_eval import constant_value

        target = constant_value(self.inputs[1].source)
        if target is None:
            return [(et, self._symbolic_sizes(x))]
        if not x.is_static:
            return [(et, self._dynamic_out(x, target))]
        out, _, _ = self._plan(x.to_tuple(), target)
        return [(et, Shape(out))]

    def _symbolic_sizes(self, x: Shape) -> Shape:
        """The output when ``sizes`` is a shape vector read from other tensors (``F.interpolate(x,
        size=skip.shape[2:])``): the sizes as they are, symbolic; unknown for scales or a kept aspect ratio."""
        from snippets_core.ir.const_eval import shape_value

        sizes = shape_value(self.inputs[1].source) if self.shape_calculation_mode == "sizes" else None
        rank = x.rank
        axes = list(range(rank)) if self.axes is None else [a + rank if a < 0 else a for a in self.axes]
        if sizes is None or len(sizes) != len(axes) or self.keep_aspect_ratio_policy != "stretch":
            return Shape.dynamic(rank)
        dims = list(x.sym_dims)
        for a, v in zip(axes, sizes):
            dims[a] = v
        return Shape(dims)

    def _dynamic_out(self, x: Shape, target: np.ndarray) -> Shape:
        """Per axis when some input dims are dynamic: axes not resized (or scaled by 1) keep their dims,
        symbolic or not (an upsample of [B, C, 20, 20] is [B, C, 40, 40]); a kept aspect ratio depends on
        every resized dim, so its axes stay unknown unless they are all static."""
        rank = x.rank
        axes = list(range(rank)) if self.axes is None else [a + rank if a < 0 else a for a in self.axes]
        values = np.asarray(target).reshape(-1).tolist()
        if len(values) != len(axes):
            raise ShapeInferenceError(f"{self.shape_calculation_mode} has {len(values)} values for {len(axes)} axes")
        dims = list(x.sym_dims)
        if self.shape_calculation_mode == "sizes" and self.keep_aspect_ratio_policy != "stretch":
            if not all(isinstance(dims[a], int) and dims[a] for a in axes):
                return Shape([None if a in axes else d for a, d in enumerate(dims)])
            pick = min if self.keep_aspect_ratio_policy == "not_larger" else max
            scale = pick(int(v) / dims[a] for a, v in zip(axes, values))  # type: ignore[operator]
            for a in axes:
                dims[a] = int(scale * dims[a] + 0.5)  # type: ignore[operator]
            return Shape(dims)
        for a, v in zip(axes, values):
            if self.shape_calculation_mode == "sizes":
                dims[a] = int(v)
            elif float(v) != 1.0:
                dims[a] = int(dims[a] * float(v)) if isinstance(dims[a], int) else _scaled(dims[a], float(v))
        return Shape(dims)

    def _x_original(self, y: np.ndarray, scale: float, size_in: int, size_out: int,
                    roi: tuple[float, float] | None) -> np.ndarray:
        mode = self.coordinate_transformation_mode
        width = scale * size_in  # the un-rounded output length
        if mode == "align_corners":
            return np.zeros_like(y) if width == 1 else y * (size_in - 1) / (width - 1)
        if mode == "asymmetric":
            return y / scale
        if mode == "tf_crop_and_resize":
            lo, hi = roi if roi is not None else (0.0, 1.0)
            base = np.full_like(y, (hi - lo) * (size_in - 1) / 2) if width == 1 else \
                y * (hi - lo) * (size_in - 1) / (width - 1)
            return base + lo * (size_in - 1)
        if mode == "pytorch_half_pixel":
            return np.full_like(y, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
        if mode == "half_pixel_symmetric":
            offset = size_in / 2 * (1 - size_out / width)
            return offset + (y + 0.5) / scale - 0.5
        return (y + 0.5) / scale - 0.5

    def _taps(self, ratio: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
        """(tap offsets k relative to base = ceil(x) - 1, weights [out, taps]) for ratios in (0, 1]."""
        r = ratio[:, None]
        if self.mode == "nearest":
            integer = ratio == 1.0
            choose_high = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                           "floor": np.zeros_like(integer), "ceil": np.ones_like(integer)}[self.nearest_mode]
            high = (integer | choose_high).astype(np.float64)[:, None]
            return np.array([0, 1]), np.concatenate([1 - high, high], axis=1)
        a = self.cubic_coeff_a
        if self.antialias and scale < 1.0:
            if self.mode == "linear":
                start = int(np.floor(-1 / scale) + 1)
                k = np.arange(start, 2 - start)
                w = np.clip(1 - np.abs((k[None, :] - r) * scale), 0, 1)
            else:
                start = int(np.floor(-2 / scale) + 1)
                k = np.arange(start, 2 - start)
                w = _cubic_kernel(np.abs(scale * (k[None, :] - r)), a)
            return k, w / w.sum(axis=1, keepdims=True)
        if self.mode == "linear":
            return np.array([0, 1]), np.concatenate([1 - r, r], axis=1)
        k = np.arange(-1, 3)
        return k, _cubic_kernel(np.abs(k[None, :] - r), a)

    def _resize_axis(self, x: np.ndarray, axis: int, scale: float, size_out: int,
                     roi: tuple[float, float] | None) -> np.ndarray:
        size_in = x.shape[axis]
        y = np.arange(size_out, dtype=np.float64)
        xo = self._x_original(y, scale, size_in, size_out, roi)
        base = np.ceil(xo).astype(np.int64) - 1
        ratio = xo - base  # in (0, 1]: an integer coordinate is "ratio 1 above the pixel to its left"
        k, w = self._taps(ratio, scale)
        idx = base[:, None] + k[None, :]
        if self.exclude_outside:
            w = np.where((idx < 0) | (idx >= size_in), 0.0, w)
            w = w / w.sum(axis=1, keepdims=True)
        idx = np.clip(idx, 0, size_in - 1)
        moved = np.moveaxis(x, axis, -1)
        out = np.einsum("...ok,ok->...o", moved[..., idx], w)
        if self.coordinate_transformation_mode == "tf_crop_and_resize":
            outside = (xo < 0) | (xo > size_in - 1)
            out = np.where(outside, self.extrapolation_value, out)
        return np.moveaxis(out, -1, axis)

    def evaluate(self, x: np.ndarray, target: np.ndarray, *roi: np.ndarray) -> list[np.ndarray]:
        out_shape, scales, axes = self._plan(x.shape, target)
        rank = x.ndim
        roi_full: np.ndarray | None = None
        if roi and np.asarray(roi[0]).size:
            r = np.asarray(roi[0], dtype=np.float64).reshape(-1)
            roi_full = np.concatenate([np.zeros(rank), np.ones(rank)])
            n = len(r) // 2
            for i, a in enumerate(axes if n == len(axes) else range(rank)):
                roi_full[a], roi_full[rank + a] = r[i], r[n + i]
        y = x.astype(np.float64)
        for a in axes:
            axis_roi = None if roi_full is None else (float(roi_full[a]), float(roi_full[rank + a]))
            if scales[a] == 1.0 and out_shape[a] == y.shape[a] and (axis_roi in (None, (0.0, 1.0))):
                continue
            y = self._resize_axis(y, a, scales[a], out_shape[a], axis_roi)
        if x.dtype.kind in "iu":
            info = np.iinfo(x.dtype)
            y = np.clip(np.rint(y), info.min, info.max)
        return [y.astype(x.dtype)]


def _cubic_kernel(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with parameter ``a`` at distances ``d >= 0``."""
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))

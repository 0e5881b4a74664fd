"""ConvertQDQToFakeQuantize: a QuantizeLinear -> DequantizeLinear pair becomes one FakeQuantize."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node, Output, replace_node
from snippets_core.ir.ops.fake_quantize import FakeQuantize
from snippets_core.ir.ops.binary import Maximum, Minimum
from snippets_core.ir.ops.io import Constant
from snippets_core.ir.ops.quantize import QDQ_FORM, QUANT_RANGES, QUANTIZATION_GRID, QDQForm, QuantGrid
from snippets_core.ir.pass_manager import Pass
from snippets_core.ir.shape import normalize_axis
from snippets_core.passes.graph_utils import nodes_of_type


def _constant(node: Node, i: int) -> np.ndarray | None:
    src = node.inputs[i].source.node
    return np.asarray(src.value) if isinstance(src, Constant) else None


def _per_channel_shape(param: np.ndarray, rank: int, axis: int) -> tuple[int, ...] | None:
    """The broadcast shape of a scale / zero point on data of ``rank``: () per tensor, [1..C..1] per axis."""
    if param.size == 1 and param.ndim <= 1:
        return ()
    if param.ndim != 1:
        return None
    dims = [1] * rank
    dims[normalize_axis(axis, rank, "axis")] = param.size
    return tuple(dims)


@dataclass(frozen=True)
class ConvertQDQToFakeQuantize(Pass):
    """Rewrite ``DequantizeLinear(QuantizeLinear(x, s, z), s, z)`` into ``FakeQuantize(x, il, ih, il, ih,
    levels)`` with ``il = (qmin - z) * s``, ``ih = (qmax - z) * s`` and ``levels = qmax - qmin + 1`` (256 for
    8-bit types, 65536 for 16-bit ones), as OpenVINO's frontend does, so the eltwise Tokenizer fuses the pair
    with the ops around it and FakeQuantizeDecomposition lowers it inside the Subgraph. When ``z - qmin`` is
    odd, the grid is extended by one step (levels + 1) and followed by Maximum/Minimum to ``[il, ih]``, so
    ties round to even *quantized values* as QuantizeLinear does (OpenVINO's plain mapping rounds those ties
    the other way).

    Both nodes must have the same constant scale and zero point, per tensor or per axis on the same axis;
    the data, the scale and the dequantized output must share one real type. Blocked quantization and pairs
    whose quantized tensor has another consumer are left alone (they run on the ops' references). A
    per-tensor pair whose input already is on the same grid (an earlier pair's output, through Reshape,
    Transpose, Squeeze, Unsqueeze or MaxPool) is the identity on its values and is removed.

    Numerics: the FakeQuantize carries the pair's scale and zero point (``rt_info[QDQ_FORM]``), and
    FakeQuantizeDecomposition lowers it to QuantizeLinear's and DequantizeLinear's own f32 arithmetic
    (``clamp(rint(x / s), qmin - z, qmax - z) * s``): the result is Q then DQ's bit for bit, ties included. (The
    FakeQuantize's own decomposition, ``x * ((levels - 1) / (ih - il)) - shift``, lands on the other step where
    ``x / s`` is within a float rounding of a tie.)
    """

    name: ClassVar[str] = "convert-q-dq-to-fake-quantize"

    def run(self, ir: Model) -> bool:
        changed = False
        made: dict[int, tuple[object, ...]] = {}  # node id -> the per-tensor grid its output is on
        for dq in nodes_of_type(ir, "DequantizeLinear"):
            grid = _match(dq)
            if grid is None:
                continue
            source = _through_moves(grid.x).node
            if grid.key is not None and made.get(source.id) == grid.key:
                # already on this grid (ORT's quantizer repeats Q->DQ after Reshape/Transpose): the pair is
                # the identity on those values, so it goes, and with it a lone FakeQuantize Subgraph
                replace_node(dq, [grid.x])
            else:
                node = grid.build(dq.name)
                replace_node(dq, node)
                if grid.key is not None:
                    made[node.id] = grid.key
                    # an int8 FullyConnected reading this output quantizes its input on this grid instead
                    node.rt_info[QUANTIZATION_GRID] = QuantGrid(grid.qtype, float(grid.scale), int(grid.zero_point))
            changed = True
        return changed


#: ops that move values without changing them: a quantization grid survives them
#: ops whose output values are some of their input's (a max pool picks values, its padding never wins): values on a
#: grid stay on it
_MOVES = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "MaxPool")


def _through_moves(out: Output) -> Output:
    while out.node.type_name in _MOVES:
        out = out.node.inputs[0].source
    return out


@dataclass(frozen=True)
class _Grid:
    """A matched Q->DQ pair: its input, element type, quantized type, scale and zero point (broadcast)."""

    x: Output
    qtype: ElementType
    scale: np.ndarray
    zero_point: np.ndarray

    @property
    def key(self) -> tuple[object, ...] | None:
        """What identifies a per-tensor grid (per-axis grids do not survive a Transpose/Reshape: None)."""
        if self.scale.shape:
            return None
        return (self.x.element_type, self.qtype, float(self.scale), int(self.zero_point))

    def build(self, name: str) -> Node:
        et = self.x.element_type
        lo, hi = QUANT_RANGES[self.qtype]
        s64, z64 = self.scale.astype(np.float64), self.zero_point.astype(np.float64)
        il, ih = (lo - z64) * s64, (hi - z64) * s64
        levels = hi - lo + 1
        # FakeQuantize rounds the step counted from in_low, Q the step counted from 0: a tie rounds to the
        # same neighbour only when they differ by an even count (zp - qmin). Where it is odd the grid gets
        # one more step below in_low (elsewhere one above in_high, so levels agree across channels) and a
        # Maximum/Minimum to [il, ih] after it restores Q's saturation.
        odd = ((z64 - lo) % 2).astype(bool)
        # a grid as wide as the float type (onnxruntime quantizes BERT's mask * float_min): its ends are clipped to
        # the finite range and it is not extended below (its ties, 1e36 apart, do not occur)
        fmax = float(np.finfo(et.numpy).max)
        odd &= il - s64 >= -fmax
        if odd.any():
            levels += 1
            fq_il, fq_ih = np.where(odd, il - s64, il), np.where(odd, ih, ih + s64)
            qmin, qmax = np.where(odd, lo - 1, lo), np.where(odd, hi, hi + 1)
        else:
            fq_il, fq_ih = il, ih
            qmin, qmax = np.asarray(lo), np.asarray(hi)
        il, ih, fq_il, fq_ih = (np.clip(v, -fmax, fmax) for v in (il, ih, fq_il, fq_ih))

        def const(v: np.ndarray, tag: str) -> Constant:
            return Constant(np.ascontiguousarray(np.asarray(v, dtype=et.numpy)), name=f"{name}/{tag}")

        fq = FakeQuantize(self.x, const(fq_il, "input_low"), const(fq_ih, "input_high"), const(fq_il, "output_low"),
                          const(fq_ih, "output_high"), levels=levels, name=name if not odd.any() else f"{name}/fq")
        fq.rt_info[QDQ_FORM] = QDQForm(self.scale.astype(et.numpy), self.zero_point.astype(np.int64),
                                       np.broadcast_to(qmin, self.scale.shape).astype(np.int64),
                                       np.broadcast_to(qmax, self.scale.shape).astype(np.int64))
        if not odd.any():
            return fq
        low = Maximum(fq, const(il, "saturate_low"), name=f"{name}/saturate_low")
        return Minimum(low, const(ih, "saturate_high"), name=name)


def _match(dq: Node) -> _Grid | None:
    """The Q->DQ pair ending in ``dq`` when one FakeQuantize can express it, else None."""
    q = dq.inputs[0].source.node
    if q.type_name != "QuantizeLinear" or len(q.outputs[0].targets) != 1:
        return None
    if q.block_size or dq.block_size:  # type: ignore[attr-defined]
        return None
    x = q.inputs[0].source
    et = x.element_type
    if not et.is_real or dq.outputs[0].element_type is not et or q.inputs[1].source.element_type is not et:
        return None
    if not x.shape.rank_is_static:
        return None
    params = [_constant(n, i) for n in (q, dq) for i in (1, 2)]
    if any(p is None for p in params):
        return None
    qs, qz, ds, dz = params  # type: ignore[misc]
    pairs = ((qs, q), (qz, q), (ds, dq), (dz, dq))
    shapes = {_per_channel_shape(p, x.shape.rank, n.axis) for p, n in pairs}  # type: ignore[arg-type,attr-defined]
    shapes.discard(())
    if None in shapes or len(shapes) > 1:
        return None
    shape = shapes.pop() if shapes else ()

    def full(p: np.ndarray) -> np.ndarray:
        return np.broadcast_to(p.reshape(()) if p.size == 1 else p.reshape(shape), shape)

    s, z = full(qs), full(qz)  # type: ignore[arg-type]
    if not (np.array_equal(s, full(ds)) and np.array_equal(z, full(dz))):  # type: ignore[arg-type]
        return None
    return _Grid(x, q.outputs[0].element_type, np.asarray(s), np.asarray(z))

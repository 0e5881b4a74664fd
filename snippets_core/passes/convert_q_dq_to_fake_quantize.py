"""ConvertQDQToFakeQuantize: a QuantizeLinear -> DequantizeLinear pair becomes one FakeQuantize."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.ir.model import Model
from snippets_core.ir.node import Node, replace_node
from snippets_core.ir.ops.fake_quantize import FakeQuantize
from snippets_core.ir.ops.io import Constant
from snippets_core.ir.ops.quantize import QUANT_RANGES
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
    with the ops around it and FakeQuantizeDecomposition lowers it inside the Subgraph.

    Both nodes must have the same constant scale and zero point, per tensor or per axis on the same axis;
    the data, the scale and the dequantized output must share one real type. Blocked quantization and pairs
    whose quantized tensor has another consumer are left alone (they run on the ops' references).

    Numerics: for ``x`` on the grid the two agree exactly, and so do the saturated ends. The FakeQuantize
    computes ``(x - il) / (ih - il) * (levels - 1)`` rather than ``x / s``, so where ``x / s`` falls within
    a float rounding of a tie (``k + 0.5``) the rounding may go to the other neighbour: one quantization
    step, the issue's tolerance. With power-of-two scales both formulas are exact and the results equal.
    """

    name: ClassVar[str] = "convert-q-dq-to-fake-quantize"

    def run(self, ir: Model) -> bool:
        changed = False
        for dq in nodes_of_type(ir, "DequantizeLinear"):
            fq = self._fake_quantize(dq)
            if fq is not None:
                replace_node(dq, fq)
                changed = True
        return changed

    @staticmethod
    def _fake_quantize(dq: Node) -> FakeQuantize | None:
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
        lo, hi = QUANT_RANGES[q.outputs[0].element_type]
        s64, z64 = s.astype(np.float64), z.astype(np.float64)
        il = np.ascontiguousarray(((lo - z64) * s64).astype(et.numpy))
        ih = np.ascontiguousarray(((hi - z64) * s64).astype(et.numpy))
        consts = [Constant(v.copy(), name=f"{dq.name}/{tag}") for v, tag in
                  ((il, "input_low"), (ih, "input_high"), (il, "output_low"), (ih, "output_high"))]
        return FakeQuantize(x, *consts, levels=hi - lo + 1, name=dq.name)

"""LayerNormDecomposition: LayerNormalization as snippets reductions and element-wise ops."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node, Output, replace_node
from snippets_core.ir.ops.io import Constant
from snippets_core.ir.ops.snippets import PowerStatic, SnippetsReduceSum
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.shape import normalize_axis
from snippets_core.passes.graph_utils import body_of, make, nodes_of_type
from snippets_core.passes.pass_manager import Pass
from snippets_core.passes.graph_reduce_decomposition import inverse_count, reduce_last


#: element types whose LayerNormalization is computed in f32 (ONNX's default ``stash_type``: the mean and the
#: variance in float32; rounding each intermediate to bf16 would lose ~2 digits on a row with a large mean)
WIDENED = (ElementType.bf16, ElementType.f16)


def _to_f32(x: Output, name: str) -> Node | None:
    """A ConvertSaturation of ``x`` to f32 when ``x`` is bf16/f16, else None."""
    if x.element_type not in WIDENED:
        return None
    return make("ConvertSaturation", x, destination_type=ElementType.f32, name=name)


@dataclass(frozen=True)
class LayerNormDecomposition(Pass):
    """Decompose ``LayerNormalization(x, scale, bias, axis, epsilon)`` normalized over the last axis only
    (static rank; other axes would need a reshape of computed values, which the lowering does not do)::

        mean = ReduceSum(x) * (1/count);  d = x - mean
        var  = ReduceSum(d * d) * (1/count)
        y    = d * PowerStatic(var + epsilon, -0.5) * scale (+ bias)

    The two-pass form (centre first, then square) keeps the variance exact for data with a large mean,
    where ``E[x^2] - E[x]^2`` would cancel. bf16/f16 inputs are converted to f32 first and the result back
    (:data:`WIDENED`). The final node takes the LayerNormalization's name."""

    name: ClassVar[str] = "layer-norm-decomposition"

    def run(self, ir: Model | Subgraph) -> bool:
        model = body_of(ir)
        changed = False
        for ln in nodes_of_type(model, "LayerNormalization"):
            x = ln.inputs[0].source
            if not x.shape.rank_is_static or x.shape.rank == 0:
                continue
            if normalize_axis(ln.axis, x.shape.rank) != x.shape.rank - 1:  # type: ignore[attr-defined]
                continue
            n = ln.name
            out_type = x.element_type
            wide = _to_f32(x, f"{n}/to_f32")
            x = wide.outputs[0] if wide is not None else x
            dt = x.element_type.numpy
            total = reduce_last(x, SnippetsReduceSum, f"{n}/sum")
            mean = make("Multiply", total, inverse_count(x, f"{n}/mean"), name=f"{n}/mean")
            d = make("Subtract", x, mean, name=f"{n}/centered")
            sq = make("Multiply", d, d, name=f"{n}/square")
            sq_total = reduce_last(sq.outputs[0], SnippetsReduceSum, f"{n}/sum_square")
            var = make("Multiply", sq_total, inverse_count(x, f"{n}/variance"), name=f"{n}/variance")
            eps = Constant(np.asarray(ln.epsilon, dtype=dt), name=f"{n}/epsilon")  # type: ignore[attr-defined]
            var_eps = make("Add", var, eps, name=f"{n}/add_epsilon")
            inv_std = PowerStatic(var_eps, power=-0.5, name=f"{n}/inv_std")
            normed = make("Multiply", d, inv_std, name=f"{n}/normalized")
            has_bias = len(ln.inputs) > 2
            narrow = wide is not None
            scale, bias = (_to_f32(ln.inputs[i].source, f"{n}/{what}_to_f32") or ln.inputs[i].source
                           if i < len(ln.inputs) else None for i, what in ((1, "scale"), (2, "bias")))
            y = make("Multiply", normed, scale, name=f"{n}/scale" if has_bias or narrow else n)
            if has_bias:
                y = make("Add", y, bias, name=f"{n}/bias" if narrow else n)
            if narrow:  # back to the model's type, rounded once
                y = make("ConvertSaturation", y, destination_type=out_type, name=n)
            y.rt_info = dict(ln.rt_info)
            replace_node(ln, y)
            changed = True
        return changed

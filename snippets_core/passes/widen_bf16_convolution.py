"""WidenBF16Convolution: a bf16 Convolution as the f32 one around Converts, so the f32 conv primitive runs it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.node import replace_node
from snippets_core.ir.ops.io import Constant
from snippets_core.passes.graph_utils import make, nodes_of_type
from snippets_core.passes.pass_manager import Pass

#: rt_info key on a node computed in a wider type than the model asked for: what and why (describe() shows it)
PRECISION_NOTE = "SnippetsPrecisionNote"
#: element types whose convolutions are widened
NARROW = (ElementType.bf16, ElementType.f16)


@dataclass(frozen=True)
class WidenBF16Convolution(Pass):
    """Before tokenization, on a target whose conv primitive computes f32 only: ``Convolution(x, W)`` with bf16
    (or f16) ``x`` and a constant ``W`` of the same type becomes::

        Convert(x -> f32) -> Convolution(x32, W converted to f32 here, once) -> Convert(-> bf16)

    The values are the same: bf16 values are exact in f32, the products of two of them too, so the f32 conv sums
    what a bf16 conv accumulating in f32 sums, and the last Convert rounds the result to bf16 (nearest even) as
    the model's output type asks. The weight is held in f32 (twice the bytes of bf16) and the conv runs at the
    f32 rate: a first step, named in ``rt_info[PRECISION_NOTE]`` of the new conv (describe() shows it). The
    Converts fuse into the eltwise Subgraphs around the conv."""

    name: ClassVar[str] = "widen-bf16-convolution"

    def run(self, model: Model) -> bool:
        changed = False
        for conv in nodes_of_type(model, "Convolution"):
            x, w = conv.inputs[0], conv.inputs[1]
            src = w.source.node
            if x.element_type not in NARROW or w.element_type != x.element_type or not isinstance(src, Constant):
                continue
            et = x.element_type
            x32 = make("Convert", x.source, destination_type=ElementType.f32, name=f"{conv.name}/to_f32")
            w32 = Constant(np.asarray(src.value).astype(np.float32), name=f"{src.name}/f32")
            attrs = {a: getattr(conv, a) for a in conv.ATTRS}
            wide = make("Convolution", x32, w32, name=f"{conv.name}/f32", **attrs)
            wide.rt_info = dict(conv.rt_info)
            wide.rt_info[PRECISION_NOTE] = (f"{et.value} Convolution computed in f32 (its weight converted to f32 at "
                                            f"compile time; the result rounded to {et.value} after it)")
            back = make("Convert", wide, destination_type=et, name=conv.name)
            replace_node(conv, back)
            changed = True
        return changed


__all__ = ["PRECISION_NOTE", "WidenBF16Convolution"]

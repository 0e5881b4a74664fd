"""ConvertFCToBF16: f32 FullyConnected MatMuls computed in bf16, for an inference precision of bf16."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node, Output, replace_node
from snippets_core.ir.ops.io import Constant
from snippets_core.passes.graph_utils import make, nodes_of_type
from snippets_core.passes.pass_manager import Pass
from snippets_core.passes.widen_bf16_convolution import PRECISION_NOTE


def _bf16_source(x: Output) -> Output | None:
    """The bf16 tensor ``x`` was widened from (a ``Convert(bf16 -> f32)``), whose values ``x`` holds exactly."""
    node = x.node
    if node.type_name == "Convert" and node.inputs[0].element_type == ElementType.bf16:
        return node.inputs[0].source
    return None


@dataclass(frozen=True)
class ConvertFCToBF16(Pass):
    """Before tokenization, with ``inference_precision: bf16`` (OpenVINO's ``INFERENCE_PRECISION_HINT``): every
    ``MatMul(x, W)`` of an f32 activation and an f32 constant weight becomes

        MatMul(Convert(x -> bf16), W rounded to bf16 here, once) -> Convert(-> f32)

    which TokenizeFCSnippets takes as a bf16 FullyConnected (the weight packed as k-pairs for ``vdpbf16ps``, the
    Convert back to f32 and the f32 post-ops after it in the same kernel). The activation and the weight lose their
    low 16 bits (about 2^-9 relative each), the sum is f32, and the MatMul's bf16 result rounds it once more
    before the f32 post-ops (the activations between ops are bf16, as under OpenVINO's hint). A weight stored in
    bf16 and Cast to f32 (folded into an f32 constant) loses nothing, and an activation Cast from bf16 is read as
    the bf16 tensor it was; MatMuls reading the same activation share one Convert. Only where ``accept`` (the
    target's FC veto) takes the bf16 MatMul: on a CPU without a bf16 kernel nothing changes."""

    name: ClassVar[str] = "convert-fc-to-bf16"
    accept: Callable[[Node], bool] = field(default=lambda node: True)

    def run(self, model: Model) -> bool:
        from snippets_core.tokenization.tokenize_fc_snippets import constant_weight, is_fc_matmul

        changed = False
        rounded: dict[tuple[int, int], Output] = {}  # one Convert per activation (Q, K and V read the same x)
        for mm in nodes_of_type(model, "MatMul"):
            w = constant_weight(mm)
            x = mm.inputs[0].source
            if w is None or is_fc_matmul(mm) is not None or x.element_type != ElementType.f32:
                continue
            if mm.inputs[1].element_type != ElementType.f32:
                continue
            import ml_dtypes

            xb = _bf16_source(x) or rounded.get((x.node.id, x.index))
            new_nodes: list[Node] = []
            if xb is None:
                conv = make("Convert", x, destination_type=ElementType.bf16, name=f"{mm.name}/to_bf16")
                new_nodes.append(conv)
                xb = conv.outputs[0]
            wb = Constant(np.asarray(w.value).astype(ml_dtypes.bfloat16), name=f"{w.name}/bf16")  # type: ignore[attr-defined]
            low = make("MatMul", xb, wb, transpose_a=mm.transpose_a, transpose_b=mm.transpose_b,  # type: ignore[attr-defined]
                       name=f"{mm.name}/bf16")
            new_nodes.append(low)
            if not self.accept(low):
                for n in new_nodes:
                    n.disconnect()
                continue
            low.rt_info = dict(mm.rt_info)
            low.rt_info[PRECISION_NOTE] = ("f32 MatMul computed in bf16 (inference_precision bf16: the weight and the "
                                           "activation rounded to bf16, f32 accumulation)")
            if new_nodes[:-1]:
                rounded[(x.node.id, x.index)] = xb
            back = make("Convert", low, destination_type=ElementType.f32, name=mm.name)
            replace_node(mm, back)
            changed = True
        return changed


__all__ = ["ConvertFCToBF16"]

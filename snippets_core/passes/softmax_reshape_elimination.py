"""SoftmaxReshapeElimination: drop a Reshape -> Softmax -> Reshape that only flattens the dims before the last."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.model import Model
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.shape import normalize_axis
from snippets_core.passes.graph_utils import body_of, make, nodes_of_type, replace_output
from snippets_core.passes.pass_manager import Pass


@dataclass(frozen=True)
class SoftmaxReshapeElimination(Pass):
    """A body pass of CommonOptimizations (OpenVINO ``SoftmaxReshapeElimination``).

    ``Reshape0 -> Softmax(last axis) -> Reshape1(Constant shape)`` where Reshape1 restores Reshape0's input
    shape and the last dim is unchanged computes the same as a Softmax over the last axis of the original
    tensor: both Reshapes go and the Softmax takes the original rank (axis ``rank - 1``).
    """

    name: ClassVar[str] = "softmax-reshape-elimination"

    def run(self, ir: Model | Subgraph) -> bool:
        body = body_of(ir)
        changed = False
        for softmax in nodes_of_type(body, "Softmax"):
            reshape0 = softmax.inputs[0].source.node
            targets = softmax.outputs[0].targets
            if reshape0.type_name != "Reshape" or len(targets) != 1 or targets[0].node.type_name != "Reshape":
                continue
            reshape1 = targets[0].node
            if len(reshape0.outputs[0].targets) != 1 or reshape1.inputs[1].source.node.type_name != "Constant":
                continue
            in_shape, out_shape = reshape0.inputs[0].shape, reshape1.outputs[0].shape
            sm_shape = softmax.inputs[0].shape
            if not (in_shape.is_static and out_shape.is_static and sm_shape.is_static) or in_shape != out_shape:
                continue
            if in_shape.rank == 0 or sm_shape.rank == 0 or in_shape[-1] != sm_shape[-1]:
                continue
            try:
                if normalize_axis(softmax.axis, sm_shape.rank) != sm_shape.rank - 1:  # type: ignore[attr-defined]
                    continue
            except ShapeInferenceError:
                continue
            new = make("Softmax", reshape0.inputs[0].source, axis=in_shape.rank - 1, name=softmax.name)
            new.rt_info = dict(softmax.rt_info)
            replace_output(reshape1.outputs[0], new.outputs[0])
            for n in (reshape1, softmax, reshape0):
                n.disconnect()
            changed = True
        return changed


__all__ = ["SoftmaxReshapeElimination"]

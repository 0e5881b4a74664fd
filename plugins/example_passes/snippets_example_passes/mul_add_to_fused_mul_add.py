"""MulAddToFusedMulAdd: ``Add(Multiply(a, b), c)`` becomes ``FusedMulAdd(a, b, c)`` in a Subgraph body."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.passes.graph_utils import body_of, nodes_of_type
from snippets_core.passes.pass_manager import Pass
from snippets_example_passes.fused_mul_add import FusedMulAdd

#: element types the pass fuses: the ones every emitter the plugin registers takes (see plugin.py)
FUSED_TYPES = (ElementType.f32,)


def _fusable_multiply(value: Output) -> Node | None:
    """The Multiply producing ``value`` if the Add is its only consumer, else None."""
    node = value.node
    if node.type_name != "Multiply" or len(value.targets) != 1:
        return None  # another consumer still needs the rounded product
    if value.element_type not in FUSED_TYPES:
        return None
    return node


@dataclass(frozen=True)
class MulAddToFusedMulAdd(Pass):
    """Fuse ``Add(Multiply(a, b), c)`` (the product on either Add input; input 0 is tried first) into
    ``FusedMulAdd(a, b, c)`` when the Multiply has no other consumer and the element type is f32 (the
    CPU plugin's ``MulAddToFMA``). The result differs from the unfused ops only by the product's rounding,
    which the fused op skips. The FusedMulAdd takes the Add's name, tensor names and rt_info.
    """

    name: ClassVar[str] = "mul-add-to-fused-mul-add"

    def run(self, ir: Model | Subgraph) -> bool:
        model = body_of(ir)
        changed = False
        for add in nodes_of_type(model, "Add"):  # topological order: the output does not depend on set order
            for i in (0, 1):
                mul = _fusable_multiply(add.inputs[i].source)
                if mul is None:
                    continue
                a, b = (inp.source for inp in mul.inputs)
                fused = FusedMulAdd(a, b, add.inputs[1 - i].source, name=add.name)
                fused.rt_info = dict(add.rt_info)
                model.replace_node(add, fused)
                mul.disconnect()  # its only consumer is gone: drop it from its inputs' consumers too
                changed = True
                break
        return changed

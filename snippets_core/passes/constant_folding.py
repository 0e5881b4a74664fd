"""ConstantFolding: nodes whose inputs are all constants become constants."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.errors import SnippetsError
from snippets_core.ir.const_eval import known_shape_vector
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node, replace_node
from snippets_core.ir.ops.io import Constant
from snippets_core.ir.ops.snippets import MemoryAccess
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.passes.graph_utils import body_of
from snippets_core.passes.pass_manager import Pass

#: ops that move data or order code rather than compute a value: never folded
NOT_FOLDABLE = ("Parameter", "Result", "Constant", "Scalar", "Buffer", "LoopBegin", "LoopEnd", "Kernel", "Nop",
                "PerfCountBegin", "PerfCountEnd", "RegSpillBegin", "RegSpillEnd", "VectorBuffer", "Subgraph")


def _foldable(node: Node) -> bool:
    if node.type_name in NOT_FOLDABLE or isinstance(node, MemoryAccess) or not node.inputs:
        return False
    return all(isinstance(i.source.node, Constant) for i in node.inputs)


def _shape_vector(node: Node) -> np.ndarray | None:
    """The value of a one-output node computing a shape vector from static dims, e.g. ``Gather(Shape(x), 2)``
    where only ``x``'s dim 0 is dynamic (see const_eval.known_shape_vector)."""
    if node.type_name in NOT_FOLDABLE or isinstance(node, MemoryAccess) or len(node.outputs) != 1:
        return None
    return known_shape_vector(node.outputs[0])


@dataclass(frozen=True)
class ConstantFolding(Pass):
    """Evaluate every node whose inputs are all Constants (Scalars included) with its numpy reference and
    replace its outputs by Constants named ``<node>`` (``<node>:<i>`` for extra outputs), in topological
    order so chains fold completely. Nodes whose reference fails are left as they are. Shape vectors whose
    entries are all known from static dims (a ShapeOf of a static shape, a Gather of a static dim of a
    partly dynamic one) fold too; those with symbolic entries stay, and shape inference reads them."""

    name: ClassVar[str] = "constant-folding"

    def run(self, ir: Model | Subgraph) -> bool:
        model = body_of(ir)
        changed = False
        for node in model.get_ordered_ops():
            known = None if _foldable(node) else _shape_vector(node)
            if known is not None:
                c = Constant(known, name=node.name)
                c.rt_info = dict(node.rt_info)
                replace_node(node, [c.outputs[0]])
                changed = True
                continue
            if not _foldable(node):
                continue
            try:
                values = node.evaluate(*[i.source.node.value for i in node.inputs])  # type: ignore[attr-defined]
            except (SnippetsError, ArithmeticError, ValueError, TypeError, NotImplementedError):
                continue
            consts = []
            for i, (out, v) in enumerate(zip(node.outputs, values)):
                v = np.asarray(v)
                if out.element_type not in (ElementType.dynamic, ElementType.string):
                    v = v.astype(out.element_type.numpy, copy=False)
                c = Constant(v, name=node.name if i == 0 else f"{node.name}:{i}")
                c.rt_info = dict(node.rt_info)
                consts.append(c.outputs[0])
            replace_node(node, consts)
            changed = True
        return changed

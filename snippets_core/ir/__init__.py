"""The graph IR: element types, shapes, nodes, models, the op set and the reference interpreter."""

from __future__ import annotations

from snippets_core.ir import ops  # noqa: F401  (registers the op set)
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.evaluate import evaluate_model
from snippets_core.ir.model import Model
from snippets_core.ir.node import OPS, Input, Node, Output, replace_node, topological_sort
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.shape import Shape, broadcast_shapes

__all__ = ["OPS", "ElementType", "Input", "Model", "Node", "Output", "Shape", "Subgraph", "broadcast_shapes",
           "evaluate_model", "replace_node", "topological_sort"]

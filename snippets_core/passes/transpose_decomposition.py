"""TransposeDecomposition: a Transpose that moves the innermost dim becomes an element-wise reordering load."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.errors import UnsupportedByTarget
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.io import Constant, Parameter
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.port_hints import set_port_descriptor
from snippets_core.passes.graph_utils import body_of, make, nodes_of_type, replace_output
from snippets_core.passes.pass_manager import Pass
from snippets_core.tokenization.tokenize_snippets import BINARY_ELTWISE, TERNARY_ELTWISE, UNARY_ELTWISE

#: ops that commute with a Transpose of their (same-rank) inputs: op(x, y).T == op(x.T, y.T)
_ELTWISE = UNARY_ELTWISE | BINARY_ELTWISE | TERNARY_ELTWISE | {"PowerStatic", "FusedMulAdd"}


def is_supported_transpose_order(order: list[int]) -> bool:
    """Orders that move the innermost dim (the others fold into a Brgemm); empty means "reverse all"."""
    return not order or order[-1] != len(order) - 1


def _transpose_order(transpose: Node) -> list[int] | None:
    """The full order of a decomposable Transpose, or None (non-Constant order, dynamic rank, innermost dim kept)."""
    order_node = transpose.inputs[1].source.node
    shape = transpose.inputs[0].shape
    if not isinstance(order_node, Constant) or not shape.rank_is_static:
        return None
    order = [int(v) for v in np.asarray(order_node.value).reshape(-1)]
    if not is_supported_transpose_order(order):
        return None
    return order or list(range(shape.rank))[::-1]


def _lifted(value: Output, order: list[int], transpose: Node) -> Output:
    """``value.transpose(order)`` computed from Transposes of Parameters: the eltwise ops between are cloned
    onto transposed inputs (rank-0 and all-ones operands need no reorder, Constants are reordered now)."""
    node = value.node
    if value.shape.rank_is_static and value.shape.rank == 0:
        return value
    if not value.shape.rank_is_static or value.shape.rank != len(order):
        raise UnsupportedByTarget(f"Transpose '{transpose.name}' reads '{node.name}' of shape {value.shape}, "
                                  f"whose rank differs from the order {order}")
    if isinstance(node, Parameter):
        return make("Transpose", value, Constant(np.array(order, np.int64)), name=f"{transpose.name}/{node.name}")
    if isinstance(node, Constant):
        return Constant(np.transpose(np.asarray(node.value), order), node.outputs[0].element_type,
                        name=f"{node.name}/transposed").outputs[0]
    if node.type_name not in _ELTWISE or len(node.outputs) != 1:
        raise UnsupportedByTarget(f"Transpose '{transpose.name}' reads {node.type_name} '{node.name}': only "
                                  "eltwise ops between a Parameter and a Transpose are reordered in a kernel")
    return node.clone_with_new_inputs([_lifted(i.source, order, transpose) for i in node.inputs]).outputs[0]


@dataclass(frozen=True)
class TransposeDecomposition(Pass):
    """A data-flow pass on bodies with domain-sensitive ops (OpenVINO ``TransposeDecomposition``).

    ``Parameter -> Transpose(Constant order)`` with an order that moves the last dim becomes
    ``LoadReorder(count=1, order) -> Store(count=1)``: only scalar access is possible when the innermost
    dim changes. Port descriptors: subtensor [1] everywhere, the order as the layout of the load's input.
    The access pattern is a Parameter's, so a Transpose of a value computed in the body (``Relu -> Transpose``)
    is first moved up to the Parameters through the eltwise ops that compute it (``op(x).T == op(x.T)``; the
    ops are cloned when their result is also used untransposed). A Transpose of a non-eltwise result cannot
    be moved: that is UnsupportedByTarget, so the Subgraph runs on its reference with the reason shown.
    """

    name: ClassVar[str] = "transpose-decomposition"

    def run(self, ir: Model | Subgraph) -> bool:
        body = body_of(ir)
        changed = False
        for transpose in nodes_of_type(body, "Transpose"):
            order = _transpose_order(transpose)
            if order is not None and not isinstance(transpose.inputs[0].source.node, Parameter):
                replace_output(transpose.outputs[0], _lifted(transpose.inputs[0].source, order, transpose))
                transpose.disconnect()
                changed = True
        for transpose in nodes_of_type(body, "Transpose"):
            order = _transpose_order(transpose)
            src = transpose.inputs[0].source
            if order is None or not isinstance(src.node, Parameter):
                continue
            load = make("LoadReorder", src, count=1, order=order, name=f"{transpose.name}/load")
            store = make("Store", load, count=1, name=f"{transpose.name}/store")
            set_port_descriptor(load, "in", 0, subtensor=[1], layout=order)
            set_port_descriptor(load, "out", 0, subtensor=[1])
            set_port_descriptor(store, "in", 0, subtensor=[1])
            set_port_descriptor(store, "out", 0, subtensor=[1])
            replace_output(transpose.outputs[0], store.outputs[0])
            transpose.disconnect()
            changed = True
        return changed


__all__ = ["TransposeDecomposition", "is_supported_transpose_order"]

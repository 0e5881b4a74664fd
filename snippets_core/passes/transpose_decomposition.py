"""TransposeDecomposition: a Transpose that moves the innermost dim becomes an element-wise reordering load."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.ir.model import Model
from snippets_core.ir.ops.io import Constant, Parameter
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.port_hints import set_port_descriptor
from snippets_core.passes.graph_utils import body_of, make, nodes_of_type, replace_output
from snippets_core.passes.pass_manager import Pass


def is_supported_transpose_order(order: list[int]) -> bool:
    """Orders that move the innermost dim (the others fold into a Brgemm); empty means "reverse all"."""
    return not order or order[-1] != len(order) - 1


@dataclass(frozen=True)
class TransposeDecomposition(Pass):
    """A data-flow pass on bodies with domain-sensitive ops (OpenVINO ``TransposeDecomposition``).

    ``Parameter -> Transpose(Constant order)`` with an order that moves the last dim becomes
    ``LoadReorder(count=1, order) -> Store(count=1)``: only scalar access is possible when the innermost
    dim changes. Port descriptors: subtensor [1] everywhere, the order as the layout of the load's input.
    Only Transposes right after a Parameter are taken: the access pattern is the Parameter's.
    """

    name: ClassVar[str] = "transpose-decomposition"

    def run(self, ir: Model | Subgraph) -> bool:
        body = body_of(ir)
        changed = False
        for transpose in nodes_of_type(body, "Transpose"):
            src = transpose.inputs[0].source
            order_node = transpose.inputs[1].source.node
            if not isinstance(src.node, Parameter) or not isinstance(order_node, Constant):
                continue
            order = [int(v) for v in np.asarray(order_node.value).reshape(-1)]
            rank = src.shape.rank if src.shape.rank_is_static else None
            if rank is None or not is_supported_transpose_order(order):
                continue
            if not order:
                order = list(range(rank))[::-1]
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

"""FuseTransposeBrgemm: Transposes that keep the innermost dim fold into a Brgemm's strided reads/writes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.ir.model import Model
from snippets_core.ir.node import Node
from snippets_core.ir.ops.io import Constant
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.passes.graph_utils import body_of, make, nodes_of_type, replace_output
from snippets_core.passes.matmul_to_brgemm import init_brgemm_ports
from snippets_core.passes.pass_manager import Pass


def is_supported_transpose_order(order: list[int]) -> bool:
    """Brgemm reads and writes rows with a stride: any order that leaves the innermost dim in place."""
    return bool(order) and order[-1] == len(order) - 1


def fusable_order(transpose: Node) -> list[int] | None:
    """The Constant order of ``transpose`` when a Brgemm can fold it, else None."""
    if transpose.type_name != "Transpose":
        return None
    order_node = transpose.inputs[1].source.node
    if not isinstance(order_node, Constant):
        return None
    order = [int(v) for v in np.asarray(order_node.value).reshape(-1)]
    return order if is_supported_transpose_order(order) else None


def _compose(outer: tuple[int, ...], inner: list[int]) -> tuple[int, ...]:
    """The read order of a Brgemm input through a Transpose (``inner``) and the Brgemm's own layout."""
    if not outer:
        return tuple(inner)
    return tuple(inner[o] for o in outer)


@dataclass(frozen=True)
class FuseTransposeBrgemm(Pass):
    """A data-flow pass after MatMulToBrgemm (OpenVINO ``FuseTransposeBrgemm``).

    ``Transpose(x, order) -> Brgemm`` input becomes ``x -> Brgemm`` with ``layout_a``/``layout_b`` = the
    order composed with the Brgemm's layout; ``Brgemm -> Transpose(order)`` becomes a Brgemm with
    ``layout_c`` = the inverse order (it stores its planar result transposed). Only orders that keep the
    last dim (see :func:`is_supported_transpose_order`), Transposes with one consumer, and outputs not yet
    laid out are fused. The port descriptors get the same layouts.
    """

    name: ClassVar[str] = "fuse-transpose-brgemm"

    def run(self, ir: Model | Subgraph) -> bool:
        body = body_of(ir)
        changed = False
        for brgemm in nodes_of_type(body, "Brgemm"):
            inputs = [brgemm.inputs[0].source, brgemm.inputs[1].source]
            layouts = [tuple(brgemm.layout_a), tuple(brgemm.layout_b)]  # type: ignore[attr-defined]
            layout_c = tuple(brgemm.layout_c)  # type: ignore[attr-defined]
            removed: list[Node] = []
            for i in (0, 1):
                transpose = inputs[i].node
                order = fusable_order(transpose)
                if order is None or len(transpose.outputs[0].targets) != 1:
                    continue
                producer = transpose.inputs[0].source.node
                if producer.type_name == "Brgemm" and producer.layout_c:  # type: ignore[attr-defined]
                    continue  # already strided on that side
                inputs[i] = transpose.inputs[0].source
                layouts[i] = _compose(layouts[i], order)
                removed.append(transpose)
            out_transpose = None
            targets = brgemm.outputs[0].targets
            if not layout_c and len(targets) == 1:
                order = fusable_order(targets[0].node)
                if order is not None and targets[0].index == 0:
                    out_transpose = targets[0].node
                    inverse = [0] * len(order)
                    for k, o in enumerate(order):
                        inverse[o] = k
                    layout_c = tuple(inverse)
            if not removed and out_transpose is None:
                continue
            new = make("Brgemm", inputs[0], inputs[1], offset_a=brgemm.offset_a, offset_b=brgemm.offset_b,  # type: ignore[attr-defined]
                       offset_c=brgemm.offset_c, layout_a=layouts[0], layout_b=layouts[1],  # type: ignore[attr-defined]
                       layout_c=layout_c, name=brgemm.name)
            new.rt_info = dict(brgemm.rt_info)
            init_brgemm_ports(new)
            if out_transpose is not None:
                replace_output(out_transpose.outputs[0], new.outputs[0])
                out_transpose.disconnect()
            else:
                replace_output(brgemm.outputs[0], new.outputs[0])
            brgemm.disconnect()
            for t in removed:
                t.disconnect()
            changed = True
        return changed


__all__ = ["FuseTransposeBrgemm", "fusable_order", "is_supported_transpose_order"]

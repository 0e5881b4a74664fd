"""ExplicitTransposeMatMulInputs: MatMul transpose flags become Transpose ops the Brgemm path understands."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.ir.model import Model
from snippets_core.ir.node import Input, Node
from snippets_core.ir.ops.io import Constant, Parameter
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.passes.graph_utils import body_of, make, nodes_of_type
from snippets_core.passes.pass_manager import Pass


def are_weights_scalar(node: Node) -> bool:
    """Every input but the first is a static one-element tensor: the op commutes with a Transpose."""
    return all(i.shape.is_static and i.shape.size == 1 for i in node.inputs[1:])


def _swapped_identity(rank: int) -> list[int]:
    order = list(range(rank))
    order[-1], order[-2] = order[-2], order[-1]
    return order


def _single_consumer(node: Node) -> bool:
    return len(node.outputs) == 1 and len(node.outputs[0].targets) == 1


@dataclass(frozen=True)
class ExplicitTransposeMatMulInputs(Pass):
    """A body pass of CommonOptimizations (OpenVINO ``ExplicitTransposeMatMulInputs``).

    For a MatMul with ``transpose_a``/``transpose_b`` and static inputs, the flag is cleared and the swap of
    the last two dims moves to a Transpose: the nearest Transpose up the input (through ops with scalar
    weights only) gets its last two order entries swapped, or a new Transpose is inserted after the
    Parameter that feeds the chain, or, failing both, right before the MatMul. Transposes next to
    Parameters are what ExtractUnsupportedTransposes, FuseTransposeBrgemm and TransposeDecomposition handle.

    ``keep_transposed`` (optional) says the backend's Brgemm reads this MatMul's transposed input itself
    (the CPU plugin's callback): its flags then stay and MatMulToBrgemm turns them into port layouts.
    """

    name: ClassVar[str] = "explicit-transpose-matmul-inputs"
    keep_transposed: Callable[[Node], bool] | None = None

    def run(self, ir: Model | Subgraph) -> bool:
        body = body_of(ir)
        changed = False
        for mm in nodes_of_type(body, "MatMul"):
            if not (mm.transpose_a or mm.transpose_b):  # type: ignore[attr-defined]
                continue
            if not (mm.inputs[0].shape.is_static and mm.inputs[1].shape.is_static):
                continue
            if self.keep_transposed is not None and self.keep_transposed(mm):
                continue
            flags = {"transpose_a": mm.transpose_a, "transpose_b": mm.transpose_b}  # type: ignore[attr-defined]
            for i, key in enumerate(("transpose_a", "transpose_b")):
                if flags[key] and mm.inputs[i].shape.rank >= 2:
                    self._extract(mm.inputs[i])
                    flags[key] = False
            new = make("MatMul", mm.inputs[0].source, mm.inputs[1].source, **flags, name=mm.name)
            new.rt_info = dict(mm.rt_info)
            body.replace_node(mm, new)
            changed = True
        if changed:
            body.validate()
        return changed

    @staticmethod
    def _extract(inp: Input) -> None:
        rank = inp.shape.rank
        parent = inp.source.node
        chain: list[Node] = []  # scalar-weight ops between the Transpose/Parameter and the MatMul
        chain_ok = _single_consumer(parent)
        while parent.type_name not in ("Transpose", "Parameter") and chain_ok and parent.inputs:
            if not are_weights_scalar(parent):
                chain_ok = False
                break
            chain.append(parent)
            parent = parent.inputs[0].source.node
            chain_ok = _single_consumer(parent)
        if chain_ok and parent.type_name == "Transpose":
            order_node = parent.inputs[1].source.node
            if isinstance(order_node, Constant) and order_node.value.size == rank:
                order = [int(v) for v in np.asarray(order_node.value).reshape(-1)]
                order[-1], order[-2] = order[-2], order[-1]
                parent.set_input(1, Constant(np.asarray(order, dtype=order_node.value.dtype), name=order_node.name))
                for n in [parent, *reversed(chain)]:
                    n.revalidate()  # the swapped shape flows down to the MatMul
                return
        order = Constant(np.asarray(_swapped_identity(rank), dtype=np.int32))
        if chain_ok and isinstance(parent, Parameter) and parent.outputs[0].shape.rank == rank:
            # right after the Parameter: the scalar-weight ops in between do not care about the layout
            consumer = parent.outputs[0].targets[0]
            transpose = make("Transpose", parent.outputs[0], order, name=f"{parent.name}/transpose")
            consumer.replace_source(transpose.outputs[0])
            for n in reversed(chain):
                n.revalidate()
            return
        transpose = make("Transpose", inp.source, order, name=f"{inp.node.name}/transpose{inp.index}")
        inp.replace_source(transpose.outputs[0])


__all__ = ["ExplicitTransposeMatMulInputs", "are_weights_scalar"]

"""ExtractUnsupportedTransposes: Transposes on body inputs that would be decomposed move out of the Subgraph."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.ir.element_type import ElementType
from snippets_core.ir.node import Node
from snippets_core.ir.ops.io import Constant
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.passes.graph_utils import make
from snippets_core.passes.pass_manager import Pass

#: the element types a target's BrgemmCopyB repacks (``is_brgemm_fusable_or_copy_b_transpose``)
COPY_B_TYPES = (ElementType.f32, ElementType.bf16)


def is_brgemm_fusable_transpose(transpose: Node) -> bool:
    """FuseTransposeBrgemm folds it: a Constant order that keeps the innermost dim, feeding a MatMul."""
    order_node = transpose.inputs[1].source.node
    if not isinstance(order_node, Constant):
        return False
    order = [int(v) for v in np.asarray(order_node.value).reshape(-1)]
    targets = transpose.outputs[0].targets
    feeds_matmul = len(targets) == 1 and targets[0].node.type_name in ("MatMul", "Brgemm")
    return bool(order) and order[-1] == len(order) - 1 and feeds_matmul


def is_brgemm_fusable_or_copy_b_transpose(transpose: Node) -> bool:
    """Also keeps a Transpose that a target repacks with a BrgemmCopyB: the B input (port 1) of a MatMul
    without ``transpose_b``, with a Constant order that puts the stored innermost dim on B's rows (K), as
    ``Transpose(K, [0,1,3,2])`` or ``[0,2,3,1]`` in attention, on f32 or bf16. For targets that set the
    tokenization knob ``mha_transposed_b_in_subgraph``."""
    if is_brgemm_fusable_transpose(transpose):
        return True
    order_node = transpose.inputs[1].source.node
    if not isinstance(order_node, Constant):
        return False
    order = [int(v) for v in np.asarray(order_node.value).reshape(-1)]
    targets = transpose.outputs[0].targets
    if len(targets) != 1 or targets[0].node.type_name != "MatMul" or targets[0].index != 1:
        return False
    if getattr(targets[0].node, "transpose_b", False) or transpose.inputs[0].element_type not in COPY_B_TYPES:
        return False  # the repacking copies f32 and bf16
    return len(order) >= 2 and order[-2] == len(order) - 1


@dataclass(frozen=True)
class ExtractUnsupportedTransposes(Pass):
    """A Subgraph pass of CommonOptimizations (OpenVINO ``ExtractUnsupportedTransposes``).

    A body Parameter whose only consumer is a Transpose with a Constant order that ``is_supported`` rejects
    loses that Transpose: it is recreated outside, between the Subgraph input and the Subgraph, where the
    reference kernel runs it (faster than the element-by-element TransposeDecomposition inside a kernel).
    By default only Transposes that fold into a Brgemm stay. Only Subgraphs with a MatMul are touched (MHA,
    MatMul): an eltwise Subgraph built around a Transpose is there to run it. Disable the pass to measure the
    decomposition.
    """

    name: ClassVar[str] = "extract-unsupported-transposes"
    is_supported: Callable[[Node], bool] = is_brgemm_fusable_transpose

    def run(self, ir: Subgraph) -> bool:
        if not isinstance(ir, Subgraph):
            raise TypeError(f"ExtractUnsupportedTransposes runs on a Subgraph, got {type(ir).__name__}")
        body = ir.body
        if len(body.parameters) != len(ir.inputs):
            return False
        if not any(n.type_name in ("MatMul", "Brgemm") for n in body.get_ordered_ops()):
            return False  # an eltwise Subgraph around a Transpose exists to run that Transpose
        moved = False
        for i, param in enumerate(body.parameters):
            targets = param.outputs[0].targets
            if len(targets) != 1 or targets[0].node.type_name != "Transpose" or targets[0].index != 0:
                continue
            transpose = targets[0].node
            if any(t.node.type_name == "Result" for t in transpose.outputs[0].targets):
                continue  # a lone Transpose Subgraph would be left empty
            order_node = transpose.inputs[1].source.node
            if not isinstance(order_node, Constant) or self.is_supported(transpose):
                continue
            outer = make("Transpose", ir.inputs[i].source, Constant(order_node.value, name=order_node.name),
                         name=f"{ir.name}/{transpose.name}")
            ir.set_input(i, outer)
            for t in transpose.outputs[0].targets:
                t.replace_source(param.outputs[0])
            transpose.disconnect()
            moved = True
        if moved:
            ir.revalidate()
        return moved


__all__ = ["ExtractUnsupportedTransposes", "is_brgemm_fusable_or_copy_b_transpose", "is_brgemm_fusable_transpose"]

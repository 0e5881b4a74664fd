"""ExtractReshapesFromMHA: move a Reshape pair around two bias Adds off the MHA path (Swin-style attention)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node
from snippets_core.ir.ops.io import Constant
from snippets_core.ir.shape import broadcast_shapes
from snippets_core.passes.graph_utils import make, nodes_of_type, replace_output
from snippets_core.passes.pass_manager import Pass


def _static_single_consumer(node: Node) -> bool:
    return node.outputs[0].shape.is_static and len(node.outputs[0].targets) == 1


def _numpy_add(node: Node) -> bool:
    return node.type_name == "Add" and getattr(node, "auto_broadcast", "numpy") == "numpy"


@dataclass(frozen=True)
class ExtractReshapesFromMHA(Pass):
    """A model pass run before TokenizeMHASnippets (OpenVINO ``ExtractReshapesFromMHA``).

    ``MatMul -> Reshape -> Add(s1) -> Add(s2) -> Reshape`` back to the MatMul's shape becomes
    ``MatMul -> Add(Reshape(Add(s1, s2)))`` when ``s1 + s2`` has as many elements as the MatMul output: the
    Reshapes leave the path between MatMul0 and Softmax, so the MHA tokenizer can take the pattern.
    ``matmul_supported`` says whether the MatMul can start an MHA (the tokenizer's own check by default).
    """

    name: ClassVar[str] = "extract-reshapes-from-mha"
    matmul_supported: Callable[[Node], bool] | None = None

    def run(self, model: Model) -> bool:
        changed = False
        for reshape2 in nodes_of_type(model, "Reshape"):
            if self._rewrite(reshape2):
                changed = True
        return changed

    def _supported(self, matmul: Node) -> bool:
        if self.matmul_supported is not None:
            return self.matmul_supported(matmul)
        from snippets_core.tokenization.tokenize_mha_snippets import is_matmul0_supported

        return is_matmul0_supported(matmul) is None

    def _rewrite(self, reshape2: Node) -> bool:
        if not reshape2.outputs[0].shape.is_static or reshape2.inputs[1].source.node.type_name != "Constant":
            return False
        add2 = reshape2.inputs[0].source.node
        if not (_numpy_add(add2) and _static_single_consumer(add2)):
            return False
        add1 = add2.inputs[0].source.node
        if not (_numpy_add(add1) and _static_single_consumer(add1)):
            return False
        reshape1 = add1.inputs[0].source.node
        if reshape1.type_name != "Reshape" or reshape1.inputs[1].source.node.type_name != "Constant":
            return False
        if not _static_single_consumer(reshape1):
            return False
        matmul = reshape1.inputs[0].source.node
        if matmul.type_name != "MatMul" or not _static_single_consumer(matmul) or not self._supported(matmul):
            return False
        mm_shape = matmul.outputs[0].shape
        if reshape2.outputs[0].shape != mm_shape:
            return False
        s1, s2 = add1.inputs[1].source, add2.inputs[1].source
        if not (s1.shape.is_static and s2.shape.is_static):
            return False
        try:
            merged = broadcast_shapes(s1.shape, s2.shape)
        except ShapeInferenceError:
            return False
        # The Adds must keep Reshape1's shape: then s1 + s2 only lacks leading unit dims and reshapes as is.
        if add2.outputs[0].shape != reshape1.outputs[0].shape or merged.size != mm_shape.size:
            return False
        bias = make("Add", s1, s2, name=f"{add1.name}/extracted")
        target = Constant(np.asarray(mm_shape.to_tuple(), dtype=np.int64))
        bias_reshaped = make("Reshape", bias, target, special_zero=True, name=f"{reshape1.name}/extracted")
        new_add = make("Add", matmul.outputs[0], bias_reshaped, name=add2.name)
        replace_output(reshape2.outputs[0], new_add.outputs[0])
        for n in (reshape2, add2, add1, reshape1):
            n.disconnect()
        return True


__all__ = ["ExtractReshapesFromMHA"]

"""Validate: check that a body holds only what the lowering supports after the data-flow passes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from snippets_core.errors import ShapeInferenceError, ValidationError
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.shape import normalize_axis
from snippets_core.passes.graph_utils import body_of
from snippets_core.passes.pass_manager import Pass


def _constant_ok(node: Node) -> bool:
    """One element (a future Scalar), or the single input of a Transpose order / Broadcast target."""
    targets = node.outputs[0].targets
    return node.value.size == 1 or (  # type: ignore[attr-defined]
        len(targets) == 1 and targets[0].node.type_name in ("Transpose", "Broadcast"))


def _matmul_ok(node: Node) -> bool:
    return not node.transpose_a and not node.transpose_b  # type: ignore[attr-defined]


def _softmax_ok(node: Node) -> bool:
    shape = node.input_shape(0)
    if not shape.rank_is_static:
        return node.axis == -1  # type: ignore[attr-defined]
    return normalize_axis(node.axis, shape.rank) == shape.rank - 1  # type: ignore[attr-defined]


def _never(node: Node) -> bool:
    return False


#: op type -> check (OpenVINO ``snippets::pass::Validate``): a graph Convert must have become a
#: ConvertTruncation, FakeQuantize must be decomposed, graph Reshape must not be in a body
CHECKS: dict[str, Callable[[Node], bool]] = {
    "Constant": _constant_ok,
    "Convert": _never,
    "MatMul": _matmul_ok,
    "Softmax": _softmax_ok,
    "FakeQuantize": _never,
    "Reshape": _never,
}


@dataclass(frozen=True)
class Validate(Pass):
    """Re-infer every node of the body and run the per-op checks of :data:`CHECKS`; a
    :class:`ValidationError` names the op and node that is not supported. Changes nothing."""

    name: ClassVar[str] = "validate"

    def run(self, ir: Model | Subgraph) -> bool:
        model = body_of(ir)
        try:
            model.validate()
        except ShapeInferenceError as e:
            raise ValidationError(f"body '{model.name}' fails shape inference: {e}") from None
        for node in model.get_ordered_ops():
            check = CHECKS.get(node.type_name)
            if check is not None and not check(node):
                raise ValidationError(f"snippets validation of body '{model.name}' failed: "
                                      f"{node.type_name} op '{node.name}' is not supported")
        return False

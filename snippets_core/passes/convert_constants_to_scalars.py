"""ConvertConstantsToScalars: one-element Constants become Scalars baked into the kernel."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.snippets import Scalar
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.passes.graph_utils import body_of, nodes_of_type
from snippets_core.passes.pass_manager import Pass


def _consumers(out: Output) -> list[Node]:
    return list({t.node.id: t.node for t in out.targets}.values())


def _reinfer_same(consumers: list[Node]) -> bool:
    """Re-infer the consumers; True if each gives the outputs it had (so nothing downstream changes)."""
    for c in consumers:
        before = [(o.element_type, o.shape) for o in c.outputs]
        try:
            after = c.infer()
        except ShapeInferenceError:
            return False
        if list(after) != before:
            return False
    return True


@dataclass(frozen=True)
class ConvertConstantsToScalars(Pass):
    """Replace each one-element ``Constant`` by a ``Scalar`` (OpenVINO ``ConvertConstantsToScalars``).

    As in OpenVINO the Scalar has shape ``[]`` for a rank-0 constant and ``[1]`` otherwise, so a
    ``[1,1,1,1]`` constant does not raise the rank of its consumers. Where that would change what a
    consumer infers (the constant sets the output rank, or the consumer reads the value for its shape,
    as reduction axes do) the Scalar keeps the constant's shape, or the constant stays.
    """

    name: ClassVar[str] = "convert-constants-to-scalars"

    def run(self, ir: Model | Subgraph) -> bool:
        model = body_of(ir)
        changed = False
        for const in nodes_of_type(model, "Constant"):
            if const.value.size != 1:  # type: ignore[attr-defined]
                continue
            out = const.outputs[0]
            consumers = _consumers(out)
            value = const.value  # type: ignore[attr-defined]
            shapes = [() if value.ndim == 0 else (1,)]
            if value.shape not in shapes:
                shapes.append(value.shape)
            for shape in shapes:
                scalar = Scalar(value.reshape(shape), name=const.name)
                scalar.rt_info = dict(const.rt_info)
                scalar.outputs[0].names = set(out.names)
                for t in out.targets:
                    t.replace_source(scalar.outputs[0])
                if _reinfer_same(consumers):
                    changed = True
                    break
                scalar.outputs[0].replace(out)  # undo: the consumers read the Constant again
        return changed

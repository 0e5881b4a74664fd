"""ExtractConstants: non-scalar Constants leave the body and become Subgraph inputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from snippets_core.ir.node import Input
from snippets_core.ir.ops.io import Constant, Parameter
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.passes.graph_utils import nodes_of_type
from snippets_core.passes.pass_manager import Pass


#: ops whose non-data inputs (order, target shape) must stay Constants in the body
_SHAPE_INPUT_OPS = ("Transpose", "Reshape", "SnippetsReshape")


@dataclass(frozen=True)
class ExtractConstants(Pass):
    """A Subgraph pass (OpenVINO ``ExtractConstants``): each body Constant with more than one element is
    replaced by a new body Parameter (same name, type and shape), and a copy of the Constant outside
    feeds the matching new Subgraph input. Scalars stay in the kernel, and so do the order / target shape
    of a Transpose or Reshape (OpenVINO skips those too: they describe the op, they are not data). The
    number of inputs added is kept in ``subgraph.rt_info['virtual_port_count']``."""

    name: ClassVar[str] = "extract-constants"

    def run(self, ir: Subgraph) -> bool:
        if not isinstance(ir, Subgraph):
            raise TypeError(f"ExtractConstants runs on a Subgraph, got {type(ir).__name__}")
        body = ir.body
        moved = 0
        for const in nodes_of_type(body, "Constant"):
            if const.value.size == 1:  # type: ignore[attr-defined]
                continue
            if any(t.node.type_name in _SHAPE_INPUT_OPS and t.index > 0 for t in const.outputs[0].targets):
                continue
            param = Parameter(const.outputs[0].element_type, const.outputs[0].shape, name=const.name)
            const.outputs[0].replace(param.outputs[0])
            body.add_parameters([param])
            outer = Constant(const.value, name=f"{ir.name}/{const.name}")  # type: ignore[attr-defined]
            # the IR has no "append an input" call: an Input built on the node registers itself as a consumer
            ir.inputs.append(Input(ir, len(ir.inputs), outer.outputs[0]))
            moved += 1
        if moved:
            ir.rt_info["virtual_port_count"] = ir.rt_info.get("virtual_port_count", 0) + moved
            ir.revalidate()
        return bool(moved)

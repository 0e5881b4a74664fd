"""ConvertPowerToPowerStatic: Power with a Scalar exponent becomes PowerStatic."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from snippets_core.ir.model import Model
from snippets_core.ir.node import replace_node
from snippets_core.ir.ops.snippets import PowerStatic, Scalar
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.passes.graph_utils import body_of, nodes_of_type
from snippets_core.passes.pass_manager import Pass


@dataclass(frozen=True)
class ConvertPowerToPowerStatic(Pass):
    """``Power(x, Scalar e)`` -> ``PowerStatic(x, power=e)`` (OpenVINO ``ConvertPowerToPowerStatic``),
    when the Scalar does not broadcast ``x`` to another shape."""

    name: ClassVar[str] = "convert-power-to-power-static"

    def run(self, ir: Model | Subgraph) -> bool:
        model = body_of(ir)
        changed = False
        for pw in nodes_of_type(model, "Power"):
            exponent = pw.inputs[1].source.node
            x = pw.inputs[0].source
            if not isinstance(exponent, Scalar) or x.shape != pw.outputs[0].shape:
                continue
            if not x.element_type.is_real:
                continue  # an integer power stays an integer op; PowerStatic emitters work on floats
            new = PowerStatic(x, power=float(exponent.scalar), name=pw.name)
            new.rt_info = dict(pw.rt_info)
            replace_node(pw, new)
            changed = True
        return changed

"""MoveScalarToConsumer: each Scalar sits right before its (single) consumer, in its loops."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


def place_scalars_before_consumers(ir: LinearIR) -> bool:
    """Give every consumer of a Scalar its own copy, placed right before it with the consumer's loop
    ids: a Scalar is rematerialized in a register where it is used instead of living across loops."""
    from snippets_core.ir.ops.snippets import Scalar

    changed = False
    for expr in list(ir.exprs):
        if expr.type_name != "Scalar":
            continue
        consumers = expr.consumers(0)
        for k, c in enumerate(consumers):
            if k == 0:
                scalar = expr
            else:
                node = Scalar(expr.node.value, name=f"{expr.name}_{k}")
                scalar = ir.insert_node(node, ir.index(c.expr), loop_ids=c.expr.loop_ids, consumers=[c],
                                        update_loop_ports=False)
                changed = True
            target = ir.index(c.expr)
            if ir.index(scalar) != target - 1:
                ir.move(scalar, target)
                changed = True
            if scalar.loop_ids != c.expr.loop_ids:
                scalar.set_loop_ids(c.expr.loop_ids)
                changed = True
    return changed


@dataclass(frozen=True)
class MoveScalarToConsumer(LoweredPass):
    """Move each Scalar right before its consumer (inside the consumer's loops), copying Scalars that
    have several consumers, so a scalar never has to stay in a register across loops."""

    name: ClassVar[str] = "move-scalar-to-consumer"

    def run(self, ir: LinearIR) -> bool:
        return place_scalars_before_consumers(ir)

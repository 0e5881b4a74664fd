"""BroadcastToMoveBroadcast: a Broadcast becomes a BroadcastMove on the last dim, or nothing at all."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.model import Model
from snippets_core.ir.node import Output
from snippets_core.ir.ops.snippets import BroadcastMove
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.shape import Shape
from snippets_core.passes.graph_utils import body_of, nodes_of_type, replace_output
from snippets_core.passes.pass_manager import Pass


def _shapes_kept(old: Output, new_shape: Shape) -> bool:
    """True if every consumer of ``old`` infers the same outputs when ``old`` has ``new_shape`` instead."""
    saved = old.shape
    old.shape = new_shape
    try:
        for consumer in {t.node.id: t.node for t in old.targets}.values():
            before = [(o.element_type, o.shape) for o in consumer.outputs]
            try:
                after = consumer.infer()
            except ShapeInferenceError:
                return False
            if [(et, s) for et, s in after] != before:
                return False
        return True
    finally:
        old.shape = saved


@dataclass(frozen=True)
class BroadcastToMoveBroadcast(Pass):
    """Replace ``Broadcast`` nodes (OpenVINO ``BroadcastToMoveBroadcast``).

    Only the last dim needs explicit work: if it grows, a ``BroadcastMove`` to the output's last dim takes
    the Broadcast's place; the other dims are left to the implicit (numpy) broadcasting of the consumers,
    so the Broadcast simply disappears when the last dim already matches. A Broadcast whose consumers
    would then infer different shapes (a Result, an op that does not broadcast) is left in place and
    reported by the lowering as unsupported.
    """

    name: ClassVar[str] = "broadcast-to-move-broadcast"

    def run(self, ir: Model | Subgraph) -> bool:
        model = body_of(ir)
        changed = False
        for bc in nodes_of_type(model, "Broadcast"):
            data, out = bc.inputs[0].source, bc.outputs[0]
            if not (data.shape.rank_is_static and out.shape.rank_is_static) or out.shape.rank == 0:
                continue
            in_last = data.shape[-1] if data.shape.rank else 1
            out_last = out.shape[-1]
            if in_last == out_last and in_last is not None:
                replacement_shape = data.shape
                make_move = False
            elif in_last == 1:
                replacement_shape = Shape(list(data.shape.dims[:-1] if data.shape.rank else ()) + [out_last])
                make_move = True
            else:
                continue  # a dynamic last dim on the input: whether it broadcasts is known only at run time
            if not _shapes_kept(out, replacement_shape):
                continue
            if make_move:
                move = BroadcastMove(data, broadcast_dim=out_last, name=bc.name)
                move.rt_info = dict(bc.rt_info)
                replace_output(out, move.outputs[0])
            else:
                replace_output(out, data)
            bc.disconnect()
            changed = True
        if changed:
            model.validate()
        return changed

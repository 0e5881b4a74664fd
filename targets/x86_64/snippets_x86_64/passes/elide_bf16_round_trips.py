"""ElideBF16RoundTrips: a bf16 value that is only widened back to f32 inside a body stays f32."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from snippets_core.errors import InputError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.passes.graph_utils import body_of
from snippets_core.passes.pass_manager import Pass, PassPosition, PositionedPass

#: the converts PropagatePrecision inserts, the Convert ops of the model (float -> float: all three round to
#: nearest even, and widening is exact)
_CONVERTS = ("ConvertSaturation", "ConvertTruncation", "Convert")
#: the narrow float types an f32 register holds exactly (the round trip only rounds)
_NARROW = (ElementType.bf16, ElementType.f16)


def _is_convert(node: Node, src: ElementType, dst: ElementType) -> bool:
    return (node.type_name in _CONVERTS and node.inputs[0].element_type == src
            and node.destination_type == dst)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class ElideBF16RoundTrips(Pass):
    """Data-flow pass after PropagatePrecision (the CPU plugin's way with a bf16 model: its eltwise ops run in
    f32, ``ConvertPrecision bf16 -> f32``, and only memory holds bf16).

    The x86-64 eltwise emitters compute in f32, so PropagatePrecision wraps each bf16 op of a body in converts:
    ``f32 -> bf16`` after it (the op's bf16 result) and ``bf16 -> f32`` before the next op, an f32 -> bf16 ->
    f32 rounding per op (seven instructions a vector, three times in a Gelu epilogue, six times in a bf16
    Softmax). A ``-> bf16`` convert (or f16) whose every consumer is a ``-> f32`` convert is dropped together
    with them: the next op reads the f32 value. At least one end must be a pass's ``ConvertSaturation``: a
    Cast to bf16 and back written in the model (ConvertTruncation or Convert at both ends) is kept. What is
    stored (a Result, a Buffer, a Brgemm input) keeps its rounding, so every tensor in memory is still the bf16
    the model asks for; values between two ops carry more precision than bf16 (closer to the float64 oracle, as
    OpenVINO computes them). The target option ``bf16_intermediate: "bf16"`` leaves the pass out and keeps the
    per-op rounding."""

    name: ClassVar[str] = "elide-bf16-round-trips"

    def run(self, ir: Model | Subgraph) -> bool:
        body = body_of(ir)
        changed = False
        for node in list(body.get_ordered_ops()):
            if node.type_name not in _CONVERTS or node.inputs[0].element_type != ElementType.f32:
                continue
            narrow = node.destination_type  # type: ignore[attr-defined]
            targets = list(node.outputs[0].targets)
            if narrow not in _NARROW or not targets:
                continue
            if not all(_is_convert(t.node, narrow, ElementType.f32) for t in targets):
                continue
            if node.type_name != "ConvertSaturation" and any(t.node.type_name != "ConvertSaturation" for t in targets):
                continue  # a Cast to bf16 and back written in the model (both ends are its ops) rounds on purpose
            wide = node.inputs[0].source
            for t in targets:
                t.node.outputs[0].replace(wide)
                t.node.disconnect()
            node.disconnect()
            changed = True
        return changed


def elide_bf16_positioned_passes(target_options: Mapping[str, Any]) -> list[PositionedPass]:
    """:class:`ElideBF16RoundTrips` right after PropagatePrecision, unless ``bf16_intermediate`` is ``"bf16"``
    (``"f32"``, the default, keeps the values between ops in f32)."""
    mode = str(target_options.get("bf16_intermediate", "f32")).lower()
    if mode not in ("f32", "bf16"):
        raise InputError(f"target_options.bf16_intermediate must be 'f32' or 'bf16', got {mode!r}")
    if mode == "bf16":
        return []
    return [PositionedPass(ElideBF16RoundTrips(), PassPosition("propagate-precision", after=True))]


__all__ = ["ElideBF16RoundTrips", "elide_bf16_positioned_passes"]

"""TransformConvertToConvertTruncation: every original Convert becomes a ConvertTruncation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from snippets_core.ir.model import Model
from snippets_core.ir.node import replace_node
from snippets_core.ir.ops.snippets import ConvertTruncation
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.passes.graph_utils import body_of, nodes_of_type
from snippets_core.passes.pass_manager import Pass


@dataclass(frozen=True)
class TransformConvertToConvertTruncation(Pass):
    """Replace each graph ``Convert`` by a ``ConvertTruncation`` of the same destination type and name.

    The converts the passes insert later are ``ConvertSaturation``; the user's converts keep C semantics
    (round toward zero, wrap around). For in-range values the two agree with the graph Convert.
    """

    name: ClassVar[str] = "transform-convert-to-convert-truncation"

    def run(self, ir: Model | Subgraph) -> bool:
        model = body_of(ir)
        converts = nodes_of_type(model, "Convert")
        for conv in converts:
            new = ConvertTruncation(conv.inputs[0].source, destination_type=conv.destination_type, name=conv.name)
            new.rt_info = dict(conv.rt_info)
            replace_node(conv, new)
        return bool(converts)

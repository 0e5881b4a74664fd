"""EnumerateNodes: give every node of a Model its index in topological order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from snippets_core.ir.model import Model
from snippets_core.ir.pass_manager import Pass
from snippets_core.tokenization.marks import set_topological_order


@dataclass(frozen=True)
class EnumerateNodes(Pass):
    """Store each node's position in ``model.get_ordered_ops()`` in rt_info ``TopologicalOrder``.

    The Tokenizer compares these indices to reject merges that would make a cycle.
    """

    name: ClassVar[str] = "enumerate-nodes"

    def run(self, model: Model) -> bool:
        for order, node in enumerate(model.get_ordered_ops()):
            set_topological_order(node, order)
        return True

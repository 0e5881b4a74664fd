"""TokenizeTransposeSnippets: every Transpose left outside the Subgraphs into a single-op Subgraph of its own.

Runs only for a target whose tokenization defaults set ``transpose_primitives`` (it runs such a Subgraph as one
JIT transpose kernel: strided copies of contiguous runs, or batched 2-D tile transposes), after every other
tokenizer and the Subgraph-level optimizations (ExtractUnsupportedTransposes may leave Transposes behind), before
AssignLayouts. A Transpose is taken when its order is a Constant and its input is not a Constant (constant
folding computes that one once); the target's callback (``tokenizer="transpose"``) may veto it, e.g. for an element
type its kernel does not move. The Subgraph is Completed and carries ``rt_info[TRANSPOSE]``; the order Constant
goes into the body.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from snippets_core.ir.model import Model
from snippets_core.ir.node import Node
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.pass_manager import Pass
from snippets_core.tokenization.config import TokenizationCallback, TokenizationConfig, ask_callback
from snippets_core.tokenization.marks import mark_completed
from snippets_core.tokenization.tokenization_utils import create_single_node_subgraph

#: rt_info key on a Subgraph holding one Transpose (value True)
TRANSPOSE = "SnippetsTranspose"
#: rt_info key on a Transpose the callback kept out of a transpose Subgraph: why (``snippets inspect`` shows it)
TRANSPOSE_REJECT_REASON_KEY = "SnippetsTransposeRejectReason"


def is_transpose_subgraph(node: Node) -> bool:
    """A Subgraph this tokenizer made."""
    return isinstance(node, Subgraph) and bool(node.rt_info.get(TRANSPOSE))


def _standalone_transpose(node: Node) -> bool:
    if node.type_name != "Transpose" or len(node.inputs) != 2:
        return False
    data, order = (i.source.node for i in node.inputs)
    return order.type_name == "Constant" and data.type_name != "Constant"


@dataclass(frozen=True)
class TokenizeTransposeSnippets(Pass):
    """Wrap each Transpose with a Constant order that is still outside the Subgraphs into a Completed Subgraph
    marked ``TRANSPOSE`` (see the module docstring). ``callback`` is the target's veto (``tokenizer="transpose"``)."""

    name: ClassVar[str] = "tokenize-transpose-snippets"
    config: TokenizationConfig = field(default_factory=TokenizationConfig)
    callback: TokenizationCallback | None = None

    def run(self, model: Model) -> bool:
        if not self.config.enabled or not self.config.transpose_primitives:
            return False
        changed = False
        for node in model.get_ordered_ops():
            if not _standalone_transpose(node):
                continue
            why = ask_callback(self.callback, self.config, node, "TokenizeTransposeSnippets")
            if why is not None:  # describe() and `snippets inspect` show why it stays on its reference
                node.rt_info[TRANSPOSE_REJECT_REASON_KEY] = node.rt_info["SnippetsFallbackReason"] = why
                continue
            sg = create_single_node_subgraph(node)
            sg.rt_info[TRANSPOSE] = True
            mark_completed(sg)
            changed = True
        return changed


__all__ = ["TRANSPOSE", "TRANSPOSE_REJECT_REASON_KEY", "TokenizeTransposeSnippets", "is_transpose_subgraph"]

"""MarkInt8MHA: record which inputs of each MHA Subgraph are values on a per-tensor u8/i8 quantization grid.

A statically quantized (QDQ) transformer feeds its attention Q, K and V that each went through a Q->DQ pair
(ConvertQDQToFakeQuantize made it a FakeQuantize), maybe moved by Reshapes/Transposes (the head split). Once the
eltwise Tokenizer has taken those FakeQuantizes into Subgraphs the grids are no longer visible from the MHA, so
this pass runs right after TokenizeMHASnippets and writes, per MHA Subgraph input, the grid its values lie on
(``None``: not on a grid) into ``rt_info[INT8_MHA_INPUT_GRIDS]``. A target with int8 Brgemms reads it to run the
attention's two MatMuls on the integers (the MHA guide's INT8 path); any other target ignores it. Runs with the
``int8_fc`` and ``int8_mha`` tokenization knobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from snippets_core.ir.model import Model
from snippets_core.ir.node import Node
from snippets_core.ir.ops.quantize import QUANTIZATION_GRID, QuantGrid
from snippets_core.ir.pass_manager import Pass
from snippets_core.tokenization.config import TokenizationConfig
from snippets_core.tokenization.tokenize_int8_fc_snippets import _ACTIVATION_TYPES, _MOVES

#: rt_info key on an MHA Subgraph: a tuple, per Subgraph input, of the QuantGrid its values lie on, or None
INT8_MHA_INPUT_GRIDS = "SnippetsInt8MHAInputGrids"


def value_grid(node: Node) -> QuantGrid | None:
    """The per-tensor u8/i8 grid the (only) output of ``node`` lies on, looking through value moves; or None."""
    while node.type_name in _MOVES and QUANTIZATION_GRID not in node.rt_info:
        node = node.inputs[0].source.node
    grid = node.rt_info.get(QUANTIZATION_GRID)
    if grid is None or grid.qtype not in _ACTIVATION_TYPES or node.type_name == "Constant":
        return None
    return grid


def is_mha_subgraph(node: Node) -> bool:
    """Whether ``node`` is a Subgraph holding an attention (two MatMuls and a Softmax)."""
    if node.type_name != "Subgraph":
        return False
    kinds = [n.type_name for n in node.body.get_ordered_ops()]  # type: ignore[attr-defined]
    return kinds.count("MatMul") == 2 and kinds.count("Softmax") == 1


@dataclass(frozen=True)
class MarkInt8MHA(Pass):
    """Write the quantization grids of each MHA Subgraph's inputs into its rt_info (see the module docstring)."""

    name: ClassVar[str] = "mark-int8-mha"
    config: TokenizationConfig = field(default_factory=TokenizationConfig)

    def run(self, model: Model) -> bool:
        if not self.config.enabled or not self.config.int8_fc or not self.config.int8_mha:
            return False
        changed = False
        for node in model.get_ordered_ops():
            if not is_mha_subgraph(node):
                continue
            grids = tuple(value_grid(i.source.node) for i in node.inputs)
            if any(g is not None for g in grids):
                node.rt_info[INT8_MHA_INPUT_GRIDS] = grids
                changed = True
        return changed


__all__ = ["INT8_MHA_INPUT_GRIDS", "MarkInt8MHA", "is_mha_subgraph", "value_grid"]

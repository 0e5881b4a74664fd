"""MarkPackedWeightBrgemm: Brgemms whose B is a FullyConnected weight read it packed in panels."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.passes.graph_utils import body_of, nodes_of_type
from snippets_core.passes.pass_manager import Pass
from snippets_x86_64.brgemm_copy_b import MARK_PACKED_PASS, PACKED_B, PANEL, packed_weight_body_inputs, weight_source


#: weight element types packed at compile time (bf16 as k-pairs: ``snippets_x86_64.bf16_pack``)
PACKED_TYPES = (ElementType.f32, ElementType.bf16)


@dataclass(frozen=True)
class MarkPackedWeightBrgemm(Pass):
    """Data-flow pass before InsertBrgemmCopyB: a Brgemm whose B is a FullyConnected weight Parameter (a constant,
    marked by TokenizeFCSnippets) reads it packed in panels (``pack_b_panels``, done once at compile time by
    ``snippets_x86_64.fc_executor``), transposed or not, so it gets no runtime BrgemmCopyB; ``PACKED_B`` on the
    Brgemm tells the blocking (:class:`BrgemmFCBlocking`) and the emitter."""

    name: ClassVar[str] = MARK_PACKED_PASS
    panel: int = PANEL

    def run(self, ir: Model | Subgraph) -> bool:
        body = body_of(ir)
        weights = {id(body.parameters[i]) for i in packed_weight_body_inputs(body)}
        changed = False
        for brgemm in nodes_of_type(body, "Brgemm"):
            src = weight_source(brgemm)
            if id(src) in weights and src.outputs[0].element_type in PACKED_TYPES:
                shape = src.outputs[0].shape
                if shape.is_static and int(np.prod(shape.to_tuple()[:-2], dtype=np.int64)) == 1:
                    brgemm.rt_info[PACKED_B] = self.panel
                    changed = True
        return changed


__all__ = ["MarkPackedWeightBrgemm"]

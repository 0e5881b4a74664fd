"""ValidateShapes: every port descriptor agrees with the connector it sits on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.errors import ValidationError
from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


@dataclass(frozen=True)
class ValidateShapes(LoweredPass):
    """Each input descriptor has a static shape of the same rank as its source's output descriptor."""

    name: ClassVar[str] = "validate-shapes"

    def run(self, ir: LinearIR) -> bool:
        for e in ir.exprs:
            for i, conn in enumerate(e.input_connectors):
                src = conn.source.descriptor
                dst = e.input_descs[i]
                if len(src.shape) != len(dst.shape) or any(d < 0 for d in dst.shape):
                    raise ValidationError(f"expression {e.name} ({e.type_name}) input {i}: shape {list(dst.shape)} "
                                          f"does not fit its source shape {list(src.shape)}")
        return False

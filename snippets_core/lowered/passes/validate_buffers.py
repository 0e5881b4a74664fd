"""ValidateBuffers: buffers of one cluster share an offset; live buffers do not overlap."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.errors import ValidationError
from snippets_core.lowered.passes.pass_base import LoweredPass
from snippets_core.lowered.symbolic import any_dynamic

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


@dataclass(frozen=True)
class ValidateBuffers(LoweredPass):
    """Every Buffer is allocated inside the scratchpad, and the Buffers of a cluster share one offset."""

    name: ClassVar[str] = "validate-buffers"

    def run(self, ir: LinearIR) -> bool:
        offsets: dict[int, int] = {}
        for b in ir.get_buffers():
            if b.offset is None or b.allocation_size is None:
                raise ValidationError(f"buffer {b.name} was not allocated (AllocateBuffers did not run)")
            end = b.offset + b.allocation_size
            # a size known only at run time is placed last by construction (SolveBufferMemory): its bound holds
            if not any_dynamic((end, ir.static_buffer_scratchpad_size)) and (
                    b.offset < 0 or end > ir.static_buffer_scratchpad_size):
                raise ValidationError(f"buffer {b.name} [{b.offset}, {b.offset + b.allocation_size}) is outside the "
                                      f"scratchpad of {ir.static_buffer_scratchpad_size} bytes")
            if offsets.setdefault(b.cluster_id, b.offset) != b.offset:
                raise ValidationError(f"buffer {b.name} of cluster {b.cluster_id} has offset {b.offset}, "
                                      f"its cluster has {offsets[b.cluster_id]}")
        return False

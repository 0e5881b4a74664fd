"""InitBuffersDefault: the non-optimized buffer allocation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


@dataclass(frozen=True)
class InitBuffersDefault(LoweredPass):
    """Every Buffer gets its own register group, cluster and memory, one after another."""

    name: ClassVar[str] = "init-buffers-default"

    def run(self, ir: LinearIR) -> bool:
        offset = 0
        for i, b in enumerate(ir.get_buffers()):
            b.reg_group = i
            b.cluster_id = i
            b.offset = offset
            offset += b.allocation_size or 0
        ir.static_buffer_scratchpad_size = offset
        return bool(ir.get_buffers())

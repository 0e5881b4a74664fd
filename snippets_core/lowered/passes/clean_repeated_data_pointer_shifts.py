"""CleanRepeatedDataPointerShifts: one pointer register is moved once per loop iteration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.loop_info import LoopPortDesc, UnifiedLoopInfo
from snippets_core.lowered.loop_utils import data_pointer_connector, data_pointer_key, processed_ports, sync_loop_end
from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


@dataclass(frozen=True)
class CleanRepeatedDataPointerShifts(LoweredPass):
    """When several ports of a loop use the same pointer register (one Parameter read by two Loads,
    Buffers of one register group), keep the pointer arithmetic of the first and zero the others."""

    name: ClassVar[str] = "clean-repeated-data-pointer-shifts"

    def run(self, ir: LinearIR) -> bool:
        changed = False
        for e in ir.exprs:
            if e.type_name != "LoopEnd":
                continue
            info = ir.loop_manager.get_loop_info(e.node.loop_id)
            if not isinstance(info, UnifiedLoopInfo):
                continue
            seen: set[tuple[str, int]] = set()
            n_in = len(info.input_ports)
            for k, p in processed_ports(info):
                key = data_pointer_key(data_pointer_connector(p))
                if key not in seen:
                    seen.add(key)
                    continue
                descs = info.input_port_descs if k < n_in else info.output_port_descs
                idx = k if k < n_in else k - n_in
                if descs[idx].ptr_increment != 0 or descs[idx].finalization_offset != 0:
                    descs[idx] = LoopPortDesc(0, 0, descs[idx].data_size)
                    changed = True
            sync_loop_end(e, info)
        return changed

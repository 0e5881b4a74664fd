"""NormalizeBufferRegisterGroups: register groups numbered 0..n-1 in order of first use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


@dataclass(frozen=True)
class NormalizeBufferRegisterGroups(LoweredPass):
    """Renumber buffer register groups densely, in LinearIR order."""

    name: ClassVar[str] = "normalize-buffer-register-groups"

    def run(self, ir: LinearIR) -> bool:
        ids: dict[int, int] = {}
        for b in ir.get_buffers():
            b.reg_group = ids.setdefault(b.reg_group, len(ids))
        return bool(ids)

"""Validate: the whole LinearIR is consistent before pre-generation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.errors import ValidationError
from snippets_core.lowered.op_kinds import MEMORY_ACCESS_PORTS
from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


@dataclass(frozen=True)
class Validate(LoweredPass):
    """Every input is produced earlier in the list, connectors and ports agree both ways, LoopBegin and
    LoopEnd pair up and nest, and no compute op is left outside memory accesses (its inputs come from
    Loads or registers, never straight from a Parameter or Buffer)."""

    name: ClassVar[str] = "validate"

    def run(self, ir: LinearIR) -> bool:
        pos = {id(e): i for i, e in enumerate(ir.exprs)}
        stack: list[int] = []
        for i, e in enumerate(ir.exprs):
            for k, conn in enumerate(e.input_connectors):
                src = conn.source.expr
                if id(src) not in pos or pos[id(src)] >= i:
                    raise ValidationError(f"expression {e.name} ({e.type_name}) reads input {k} from {src.name}, "
                                          "which does not come before it")
                if not conn.found_consumer(e.get_input_port(k)):
                    raise ValidationError(f"connector of {src.name} does not list {e.name} input {k} as consumer")
                if src.type_name in ("Parameter", "Buffer") and e.type_name not in (
                        "Load", "LoadReorder", "BroadcastLoad", "LoopEnd", "Result", "RankNormalization",
                        "SnippetsReshape", "Reorder", *MEMORY_ACCESS_PORTS):
                    raise ValidationError(f"expression {e.name} ({e.type_name}) reads memory of {src.name} "
                                          "without a Load")
            if e.type_name == "LoopBegin":
                stack.append(i)
            elif e.type_name == "LoopEnd":
                begin = e.input_connectors[-1].source.expr
                if not stack or ir.exprs[stack[-1]] is not begin:
                    raise ValidationError(f"LoopEnd {e.name} (loop {e.node.loop_id}) does not close the innermost "
                                          "open LoopBegin")
                stack.pop()
        if stack:
            raise ValidationError(f"LoopBegin {ir.exprs[stack[-1]].name} has no LoopEnd")
        return False

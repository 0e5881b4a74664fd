"""MarkLoops: group consecutive, connected, compatible expressions into loops."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.errors import UnsupportedOpError, ValidationError
from snippets_core.lowered.loop_manager import LoopManager
from snippets_core.lowered.op_kinds import LOADS, NOT_IN_LOOPS, SHAPE_ONLY, STORES
from snippets_core.lowered.passes.move_scalar_to_consumer import place_scalars_before_consumers
from snippets_core.lowered.passes.pass_base import LoweredPass
from snippets_core.lowered.port_descriptor import FULL_DIM

if TYPE_CHECKING:
    from snippets_core.lowered.expression import Expression
    from snippets_core.lowered.linear_ir import LinearIR


def _connected_without_conflict(prev: Expression, cur: Expression) -> bool:
    """``cur`` reads an output of ``prev``, and both ports agree on shape, layout and subtensor."""
    connected = False
    for conn in prev.output_connectors:
        for c in conn.get_consumers():
            if c.expr is not cur:
                continue
            a, b = conn.source.descriptor, c.descriptor
            if a.shape != b.shape or a.layout != b.layout or a.subtensor != b.subtensor:
                return False
            connected = True
    return connected


def mark_loop_nest(ir: LinearIR, begin: int, end: int, loop_depth: int, vector_size: int) -> list[int]:
    """Create the loops (innermost first) over ``ir.exprs[begin:end]`` from the exit ports' shapes and
    subtensors: dim ``d`` gets a loop unless the subtensor says the whole dim is processed at once."""
    exprs = ir.exprs[begin:end]
    entries, exits = LoopManager.get_io_loop_ports(exprs)
    shape_ports = exits or entries
    loop_subtensor: list[int] | None = None
    loop_tensor = [1] * loop_depth
    for port in shape_ports:
        desc = port.descriptor
        shape = desc.preordered_shape
        sub = list(desc.subtensor)
        if not sub:
            sub = [1] * loop_depth
            sub[-1] = vector_size
        # a memory access moves at most part of the innermost dim: the dims its subtensor leaves out are
        # walked one by one (a scalar LoadReorder/Store pair), other ops process them whole
        pad = 1 if port.expr.type_name in LOADS or port.expr.type_name in STORES else FULL_DIM
        while len(sub) < loop_depth:
            sub.insert(0, pad)
        if loop_subtensor is None:
            loop_subtensor = sub
        elif loop_subtensor[-loop_depth:] != sub[-loop_depth:]:
            raise ValidationError(f"incompatible subtensors in one loop at {port!r}: {sub} vs {loop_subtensor}")
        for d in range(loop_depth):
            if sub[-1 - d] == FULL_DIM:
                continue
            dim = shape[-1 - d] if d < len(shape) else 1
            cur = loop_tensor[-1 - d]
            if cur == 1:
                loop_tensor[-1 - d] = dim
            elif dim not in (1, cur):
                raise ValidationError(f"loop over dim {d} mixes sizes {cur} and {dim} (at {port!r})")
    assert loop_subtensor is not None
    ids = []
    for d in range(loop_depth):
        inc = loop_subtensor[-1 - d]
        if inc == FULL_DIM:
            continue
        ids.append(ir.loop_manager.mark_loop(ir, begin, end, loop_tensor[-1 - d], inc, d, entries, exits))
    return ids


def _check_shape_only_ops(ir: LinearIR) -> None:
    """A shape-only op must reinterpret memory (an input), not a computed register value: a reshape in
    the middle of a body changes the iteration domain (GroupNormalization-style bodies)."""
    for e in ir.exprs:
        if e.type_name not in SHAPE_ONLY:
            continue
        src = e.input_expr(0)
        while src.type_name in SHAPE_ONLY:
            src = src.input_expr(0)
        if src.type_name not in ("Parameter", "Buffer"):
            raise UnsupportedOpError(f"{e.type_name} '{e.name}' reshapes the computed value of {src.type_name} "
                                     f"'{src.name}'; the lowering only reshapes inputs")


@dataclass(frozen=True)
class MarkLoops(LoweredPass):
    """Split the expression list into runs of expressions each reading the previous one with matching
    port descriptors, and give each run a loop nest of ``ir.loop_depth`` loops (the innermost with
    increment ``vector_size``). Parameters, Results, Buffers and shape-only ops stay outside loops;
    Scalars are first moved next to their consumers and join their loops."""

    name: ClassVar[str] = "mark-loops"
    vector_size: int = 16

    def run(self, ir: LinearIR) -> bool:
        _check_shape_only_ops(ir)
        place_scalars_before_consumers(ir)
        exprs = ir.exprs
        changed = False
        i = 0
        while i < len(exprs):
            if exprs[i].type_name in NOT_IN_LOOPS:
                i += 1
                continue
            begin = i
            prev = None if exprs[i].type_name == "Scalar" else exprs[i]
            j = i + 1
            while j < len(exprs):
                cur = exprs[j]
                if cur.type_name in NOT_IN_LOOPS:
                    break
                if cur.type_name != "Scalar":
                    if prev is not None and not _connected_without_conflict(prev, cur):
                        break
                    prev = cur
                j += 1
            end = j
            while end > begin + 1 and exprs[end - 1].type_name == "Scalar":
                end -= 1  # a trailing Scalar belongs to the next run, where its consumer is
            mark_loop_nest(ir, begin, end, ir.loop_depth, self.vector_size)
            changed = True
            i = end
        return changed

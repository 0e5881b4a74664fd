"""BrgemmBlocking: M, N and K blocking loops around each Brgemm (OpenVINO ``BrgemmBlocking``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from snippets_core.config import int_option
from snippets_core.errors import InputError
from snippets_core.lowered.brgemm_utils import BRGEMM_BETA, BRGEMM_OPS, planar_dims
from snippets_core.lowered.loop_info import LoopPort, LoopPortType, SpecificIterationHandlers, UnifiedLoopInfo
from snippets_core.lowered.passes.pass_base import LoweredPass
from snippets_core.lowered.port_descriptor import FULL_DIM
from snippets_core.lowered.symbolic import is_dynamic
from snippets_core.passes.pass_manager import PassPosition, PositionedPass

if TYPE_CHECKING:
    from snippets_core.lowered.expression import Expression
    from snippets_core.lowered.linear_ir import LinearIR

#: rt_info key on a Brgemm node a BrgemmBlocking has handled
BRGEMM_BLOCKED = "snippets.brgemm_blocked"

INC = LoopPortType.INCREMENTED
KEEP = LoopPortType.NOT_INCREMENTED

#: per blocked dim: (A subtensor index, B subtensor index, C subtensor index), None where the dim is absent
_SUBTENSOR_POSITIONS: dict[str, tuple[int | None, int | None, int | None]] = {
    "m": (-2, None, -2),
    "n": (None, -1, -1),
    "k": (-1, -2, None),
}
#: per blocked dim: (type, planar dim from the innermost) of the loop ports on A, B and C
_LOOP_PORTS: dict[str, tuple[tuple[LoopPortType, int], ...]] = {
    "m": ((INC, 1), (KEEP, 1), (INC, 1)),
    "n": ((KEEP, 0), (INC, 0), (INC, 0)),
    "k": ((INC, 0), (INC, 1), (KEEP, 0)),
}


def set_brgemm_block(expr: Expression, dim: str, block: int) -> None:
    """Set the subtensors of the Brgemm's ports along ``dim`` ("m", "n" or "k") to ``block``."""
    positions = _SUBTENSOR_POSITIONS[dim]
    ports = [(True, 0), (True, 1), (False, 0)]
    for (is_input, i), pos in zip(ports, positions):
        if pos is None:
            continue
        desc = expr.input_descs[i] if is_input else expr.output_descs[i]
        sub = list(desc.subtensor) or [FULL_DIM, FULL_DIM]
        while len(sub) < 2:
            sub.insert(0, FULL_DIM)
        sub[pos] = block
        new = desc.with_(subtensor=tuple(sub))
        if is_input:
            expr.set_input_port_descriptor(i, new)
        else:
            expr.set_output_port_descriptor(i, new)


@dataclass(frozen=True)
class UpdateBrgemmBlock:
    """Specific-iteration handler: the Brgemms of a tail (or first) iteration compute a block of ``amount``
    along ``dim``."""

    dim: str

    def __call__(self, ir: LinearIR, body: list[Expression], amount: int) -> None:
        for e in body:
            if e.type_name in BRGEMM_OPS:
                set_brgemm_block(e, self.dim, amount)


@dataclass(frozen=True)
class SetBrgemmBeta:
    """Specific-iteration handler of the K loop: the first K block writes C (beta 0), the others add to it."""

    beta: float

    def __call__(self, ir: LinearIR, body: list[Expression], amount: int) -> None:
        for e in body:
            if e.type_name in BRGEMM_OPS:
                e.node.rt_info[BRGEMM_BETA] = self.beta


def default_k_block(k: int) -> int:
    """512, or 1024 when K is larger than 1024 (the reference's heuristic); a K known only at run time is not
    blocked (see BrgemmBlocking.run), 512 is only a placeholder for it."""
    if is_dynamic(k):
        return 512
    return 1024 if k > 1024 else 512


@dataclass(frozen=True)
class BrgemmBlocking(LoweredPass):
    """Blocks each Brgemm by M, N and K: a dim larger than its block gets a loop with the block as increment
    (a dim no larger than its block is processed whole, FULL_DIM), loops nested M -> N -> K (outermost
    first). Port subtensors become the blocks; the tail iteration of each loop shrinks them
    (:class:`UpdateBrgemmBlock`); the K loop peels its first iteration, which writes C while the others
    accumulate (:class:`SetBrgemmBeta`). ``k_block = 0`` picks 512, or 1024 when K > 1024.

    The M loop is the one SplitLoops shares with the ops between two Brgemms (MHA). A Brgemm is blocked once:
    a target or plugin tunes the blocks by placing its own BrgemmBlocking before ``brgemm-blocking``."""

    name: ClassVar[str] = "brgemm-blocking"
    m_block: int = 32
    n_block: int = 64
    k_block: int = 0

    def run(self, ir: LinearIR) -> bool:
        changed = False
        for expr in list(ir.exprs):
            if expr.type_name not in BRGEMM_OPS or expr.node.rt_info.get(BRGEMM_BLOCKED):
                continue  # a tuned BrgemmBlocking placed before this one has blocked it already
            expr.node.rt_info[BRGEMM_BLOCKED] = True
            m, n, k = planar_dims(expr)
            blocks = {"m": (m, self.m_block), "n": (n, self.n_block), "k": (k, self.k_block or default_k_block(k))}
            base = len(expr.loop_ids)
            for dim in ("k", "n", "m"):  # innermost first
                size, block = blocks[dim]
                # a dynamic M or N always gets its loop: its body runs size // block times (maybe 0) and the tail
                # block (size % block, a runtime value) once or not at all, whatever the size turns out to be. A
                # dynamic K stays whole (one block of runtime depth, beta 0): the K loop peels its first block to
                # write C, and with K < block at run time that block would be the tail instead
                if block <= 0 or (dim == "k" and is_dynamic(size)) or (not is_dynamic(size) and size <= block):
                    continue
                set_brgemm_block(expr, dim, block)
                self._mark_loop(ir, expr, dim, size, block, base)
                changed = True
        return changed

    @staticmethod
    def _mark_loop(ir: LinearIR, expr: Expression, dim: str, size: int, block: int, base: int) -> None:
        (ta, da), (tb, db), (tc, dc) = _LOOP_PORTS[dim]
        handlers = SpecificIterationHandlers(last_iter=[UpdateBrgemmBlock(dim)])
        if dim == "k":
            expr.node.rt_info[BRGEMM_BETA] = 1.0
            handlers.first_iter.append(SetBrgemmBeta(0.0))
        info = UnifiedLoopInfo(
            size, block,
            [LoopPort(expr.get_input_port(0), ta, da), LoopPort(expr.get_input_port(1), tb, db)],
            [LoopPort(expr.get_output_port(0), tc, dc)],
            handlers, dim_idx=1 if dim == "m" else 0)
        loop_id = ir.loop_manager.add_loop_info(info)
        expr.loop_ids.insert(base, loop_id)


#: ``target_options`` keys of the blocking knobs -> BrgemmBlocking fields
BLOCK_OPTIONS = {"brgemm_m_block": "m_block", "brgemm_n_block": "n_block", "brgemm_k_block": "k_block"}


def blocking_from_options(target_options: Mapping[str, Any]) -> list[PositionedPass]:
    """A tuned BrgemmBlocking placed before the default ``brgemm-blocking`` (which then leaves the Brgemms
    alone) when ``target_options`` sets ``brgemm_m_block``, ``brgemm_n_block`` or ``brgemm_k_block``
    (``brgemm_k_block: 0`` is the default heuristic); no pass otherwise."""
    blocks = {f: int_option(target_options, key, 0, minimum=None) for key, f in BLOCK_OPTIONS.items()
              if key in target_options}
    if any(v < 0 for v in blocks.values()) or blocks.get("m_block") == 0 or blocks.get("n_block") == 0:
        raise InputError(f"Brgemm blocks must be positive (0 only for the default K block), got {blocks}")
    if not blocks:
        return []
    return [PositionedPass(BrgemmBlocking(**blocks), PassPosition("brgemm-blocking"), pipeline="control-flow")]


__all__ = ["BLOCK_OPTIONS", "BRGEMM_BLOCKED", "BrgemmBlocking", "SetBrgemmBeta", "UpdateBrgemmBlock", "blocking_from_options", "default_k_block", "set_brgemm_block"]

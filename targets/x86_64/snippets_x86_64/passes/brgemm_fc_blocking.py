"""BrgemmFCBlocking: the blocking of a FullyConnected Brgemm, whose B is a weight packed in panels."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.brgemm_utils import BRGEMM_OPS, planar_dims
from snippets_core.lowered.passes.brgemm_blocking import BRGEMM_BLOCKED, BrgemmBlocking, set_brgemm_block
from snippets_core.lowered.passes.pass_base import LoweredPass
from snippets_core.lowered.symbolic import is_dynamic
from snippets_x86_64.brgemm_copy_b import PACKED_B

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR

#: rows of A and C per call of a packed-weight Brgemm when ``m_block`` is 0
DEFAULT_FC_M_BLOCK = 128


def fc_m_block(m: int, requested: int = 0) -> int:
    """Rows per Brgemm call: ``requested``, or ``DEFAULT_FC_M_BLOCK`` rows; the M tail gets its own call.
    Every call streams the whole packed weight once (panel by panel, each panel reused by all the rows of the
    block while it is in L1/L2). A model's weights do not stay in L3 between calls (BERT's layer has 28 MB), so
    each block reads them from DRAM: the default covers the whole 128-row block of a dynamic-M FC (one weight
    pass per call; 64 rows read it twice, 10% slower on BERT), at the price of a taller post-op Buffer. A dynamic
    M (known only at run time) always gets the block: its loop runs ``M // block`` full blocks and one tail block
    of ``M % block`` rows (the runtime-extent micro-kernel), whatever M turns out to be."""
    block = requested or DEFAULT_FC_M_BLOCK
    return max(1, block if is_dynamic(m) else min(m, block))


@dataclass(frozen=True)
class BrgemmFCBlocking(LoweredPass):
    """Control-flow pass before ``brgemm-blocking``: a Brgemm marked ``PACKED_B`` gets an M loop only. N and K are
    whole in each call: the emitter walks the weight's panels itself (a counted loop over 64-column panels, K in
    chunks whose panel rows fit L1), so each output block is written once, with beta 0, and the post-ops that
    follow in the M loop read a block that was just written."""

    name: ClassVar[str] = "brgemm-fc-blocking"
    m_block: int = 0

    def run(self, ir: LinearIR) -> bool:
        changed = False
        for expr in list(ir.exprs):
            if expr.type_name not in BRGEMM_OPS or not expr.node.rt_info.get(PACKED_B):
                continue
            if expr.node.rt_info.get(BRGEMM_BLOCKED):
                continue
            expr.node.rt_info[BRGEMM_BLOCKED] = True
            m, _, _ = planar_dims(expr)
            block = fc_m_block(m, self.m_block)
            if is_dynamic(m) or block < m:
                set_brgemm_block(expr, "m", block)
                BrgemmBlocking._mark_loop(ir, expr, "m", m, block, len(expr.loop_ids))
            changed = True
        return changed


__all__ = ["DEFAULT_FC_M_BLOCK", "BrgemmFCBlocking", "fc_m_block"]

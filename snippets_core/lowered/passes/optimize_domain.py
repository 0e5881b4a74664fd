"""OptimizeDomain: collapse the innermost dims of an eltwise body and choose the tile rank."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.passes.pass_base import LoweredPass
from snippets_core.lowered.port_descriptor import FULL_DIM

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


def _collapse_last_dim(dims: list[int]) -> None:
    """[a, b, c, d] -> [1, a, b, c*d]: merge the last two dims and shift the rest right."""
    dims[-1] *= dims[-2]
    for i in range(len(dims) - 2, 0, -1):
        dims[i] = dims[i - 1]
    dims[0] = 1


def can_increase_jit_work_amount(master: list[int], min_parallel_work_amount: int, total_work_amount: int) -> bool:
    """True if the kernel may take one more dim and still leave enough work for the threads."""
    return len(master) > 2 and master[-1] * master[-2] * min_parallel_work_amount <= total_work_amount


def optimize(input_shapes: list[list[int]], master: list[int], total_work_amount: int,
             min_parallel_work_amount: int, min_jit_work_amount: int) -> int:
    """Collapse the last two dims of every shape (in place) while the kernel has too little work, the
    threads keep enough, and no input broadcasts on those dims. Returns the number of collapses."""
    if len(master) <= 2:
        return 0
    min_rank = min(len(s) for s in input_shapes)

    def last_dims_not_broadcast() -> bool:
        return all(s[-1] == master[-1] and s[-2] == master[-2] for s in input_shapes)

    collapsed = 0
    while (master[-1] < min_jit_work_amount and collapsed + 1 < min_rank
           and can_increase_jit_work_amount(master, min_parallel_work_amount, total_work_amount)
           and last_dims_not_broadcast()):
        for s in input_shapes:
            _collapse_last_dim(s)
        _collapse_last_dim(master)
        collapsed += 1
    return collapsed


@dataclass(frozen=True)
class OptimizeDomain(LoweredPass):
    """Make the kernel's innermost loop long enough (``min_kernel_work_amount``) by merging the last
    two dims while every input has them unbroadcast and the parallel domain keeps at least
    ``min_parallel_work_amount`` work; then raise the tile rank to 2 if the domain still allows it.
    The tile rank is written to ``ir.loop_depth`` (1 for dynamic shapes, 2 when the optimization is
    disabled or an op processes whole dims)."""

    name: ClassVar[str] = "optimize-domain"

    def run(self, ir: LinearIR) -> bool:
        config = ir.config
        if ir.empty():
            return False
        ir.loop_depth = 1
        # an op that processes whole dims (a reduction, a Brgemm) would see other elements once dims
        # are merged: such a body is domain-sensitive whatever the config says
        whole_dims = any(FULL_DIM in d.subtensor for e in ir.exprs for d in e.input_descs + e.output_descs)
        if not config.enable_domain_optimization or whole_dims:
            ir.loop_depth = 2  # not allowed to optimize: assume a 2D tile
            return False
        if ir.is_dynamic or config.symbolic_dims:
            # a kernel for every shape keeps the dims apart (as OpenVINO does for dynamic shapes), and so does a
            # static compile in that mode, so that both lower to the same structure (the configurator's oracle)
            return False
        master = list(ir.get_master_shape())
        blocked = False
        input_shapes: list[list[int]] = []
        for param in ir.parameters:
            consumers = param.consumers(0)
            first = consumers[0].expr if consumers else None
            if first is not None and first.type_name == "RankNormalization" and first.node.num_append != 0:
                # appended dims are broadcast: collapsing is not allowed (the tile rank may still grow)
                blocked = True
            producer = first if blocked and first is not None else param
            input_shapes.append(list(producer.output_descs[0].preordered_shape))
        total = prod(master)
        collapsed = 0 if blocked else optimize(input_shapes, master, total, config.min_parallel_work_amount,
                                                config.min_kernel_work_amount)
        if collapsed:
            ir.shape_infer(input_shapes)
        if can_increase_jit_work_amount(master, config.min_parallel_work_amount, total) and \
                collapsed != len(master) - 1:
            ir.loop_depth += 1
        return collapsed > 0

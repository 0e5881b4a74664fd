"""The control-flow and pre-generation pipelines, in their mandatory order, and ``lower``.

    lower(body, config, target_machine) -> LinearIR   # ready for Generator(target).generate(ir)

Positioned passes (from targets and plugins) are placed relative to these names; the list of names
is the contract.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from snippets_core.errors import PassPositionError
from snippets_core.lowered.brgemm_utils import BRGEMM_OPS
from snippets_core.lowered.linear_ir import Config, LinearIR
from snippets_core.lowered.passes.allocate_buffers import AllocateBuffers
from snippets_core.lowered.passes.assign_registers import AssignRegisters
from snippets_core.lowered.passes.brgemm_blocking import BrgemmBlocking
from snippets_core.lowered.passes.clean_repeated_data_pointer_shifts import CleanRepeatedDataPointerShifts
from snippets_core.lowered.passes.cleanup_loop_offsets import CleanupLoopOffsets
from snippets_core.lowered.passes.extract_loop_invariants import ExtractLoopInvariants
from snippets_core.lowered.passes.fuse_loops import FuseLoops
from snippets_core.lowered.passes.init_live_ranges import InitLiveRanges
from snippets_core.lowered.passes.init_loops import InitLoops
from snippets_core.lowered.passes.insert_broadcast_move import InsertBroadcastMove
from snippets_core.lowered.passes.insert_buffers import InsertBuffers
from snippets_core.lowered.passes.insert_load_store import InsertLoadStore
from snippets_core.lowered.passes.insert_loops import InsertLoops
from snippets_core.lowered.passes.insert_reg_spills import InsertRegSpills
from snippets_core.lowered.passes.insert_specific_iterations import InsertSpecificIterations
from snippets_core.lowered.passes.load_move_broadcast_to_broadcast_load import LoadMoveBroadcastToBroadcastLoad
from snippets_core.lowered.passes.mark_loops import MarkLoops
from snippets_core.lowered.passes.move_result_out_of_loop import MoveResultOutOfLoop
from snippets_core.lowered.passes.move_scalar_to_consumer import MoveScalarToConsumer
from snippets_core.lowered.passes.normalize_loop_ids import NormalizeLoopIDs
from snippets_core.lowered.passes.optimize_domain import OptimizeDomain
from snippets_core.lowered.passes.optimize_loop_single_evaluation import OptimizeLoopSingleEvaluation
from snippets_core.lowered.passes.propagate_layout import PropagateLayout
from snippets_core.lowered.passes.split_loops import SplitLoops
from snippets_core.lowered.port_descriptor import RegType
from snippets_core.passes.pass_manager import PassHook, PassPipeline, PositionedPass

if TYPE_CHECKING:
    from snippets_core.ir.model import Model


class TargetRegisters(Protocol):
    """What lowering needs from a target: its register pools and register needs. Codegen's TargetMachine
    provides it; lowering names this protocol instead, so it does not import code generation (a layer above)."""

    def reg_pool(self, reg_type: RegType) -> Sequence[int]: ...

    def specific_reg_types(self) -> Mapping[str, RegType]: ...

    def abi_call_ops(self) -> frozenset[str]: ...


def control_flow_pipeline(config: Config) -> PassPipeline:
    """MarkLoops ... CleanRepeatedDataPointerShifts (Subgraph::control_flow_transformations)."""
    from snippets_core.lowered.passes.reduce_decomposition import ReduceDecomposition
    from snippets_core.lowered.passes.validate_shapes import ValidateShapes
    from snippets_core.lowered.passes.validate_unified_loops import ValidateUnifiedLoops

    vs = config.vector_size
    return PassPipeline("control-flow", [
        MarkLoops(vs), BrgemmBlocking(config.brgemm_m_block, config.brgemm_n_block, config.brgemm_k_block),
        ReduceDecomposition(vs), FuseLoops(), SplitLoops(), MoveResultOutOfLoop(), InsertBuffers(),
        InsertLoadStore(vs), MoveScalarToConsumer(), InsertBroadcastMove(), LoadMoveBroadcastToBroadcastLoad(),
        ExtractLoopInvariants(),
        ValidateShapes(), ValidateUnifiedLoops(), InitLoops(), PropagateLayout(), InsertLoops(),
        AllocateBuffers(config.are_buffers_optimized), CleanRepeatedDataPointerShifts(),
    ])


def validation_pipeline() -> PassPipeline:
    from snippets_core.lowered.passes.validate import Validate
    from snippets_core.lowered.passes.validate_buffers import ValidateBuffers

    return PassPipeline("validation", [ValidateBuffers(), Validate()])


def pre_generation_pipeline(target: TargetRegisters) -> PassPipeline:
    """InitRegisters (InitLiveRanges, AssignRegisters, InsertRegSpills), InsertSpecificIterations,
    NormalizeLoopIDs, ValidateExpandedLoops, CleanupLoopOffsets, OptimizeLoopSingleEvaluation. The order is mandatory."""
    from snippets_core.lowered.passes.validate_expanded_loops import ValidateExpandedLoops

    return PassPipeline("pre-generation", [
        InitLiveRanges(tuple(sorted(target.specific_reg_types().items()))),
        AssignRegisters(target.reg_pool(RegType.gpr), target.reg_pool(RegType.vec), target.reg_pool(RegType.mask)),
        InsertRegSpills(target.abi_call_ops()), InsertSpecificIterations(), NormalizeLoopIDs(), ValidateExpandedLoops(),
        CleanupLoopOffsets(), OptimizeLoopSingleEvaluation(),
    ])


def lower(body: Model, config: Config, target: TargetRegisters,
          positioned_passes: Iterable[PositionedPass] = (), disabled: Iterable[str] = (),
          after_pass: Iterable[PassHook] = ()) -> LinearIR:
    """Build the LinearIR of a body Model (after the data-flow passes) and run OptimizeDomain, the
    control-flow, validation and pre-generation pipelines. Positioned passes whose ``pipeline`` (or
    pass kind) is "control-flow" or "pre-generation" are placed in that pipeline. ``after_pass`` hooks
    (``hook(pass, ir, changed)``, e.g. LinearIR dumps) run after every pass, OptimizeDomain included.
    ``body`` is left untouched: the LinearIR works on a copy (its edits rewire nodes)."""
    hooks = list(after_pass)
    ir = LinearIR(body.clone(), config)
    optimize_domain = OptimizeDomain()
    changed = optimize_domain.run(ir)
    if any(e.type_name in BRGEMM_OPS for e in ir.exprs):
        # a matrix product's kernel walks rows and columns: the tile rank covers both (M loops, buffers)
        ir.loop_depth = max(ir.loop_depth, 2)
    for hook in hooks:
        hook(optimize_domain, ir, bool(changed))
    pipelines = {"control-flow": control_flow_pipeline(config), "validation": validation_pipeline(),
                 "pre-generation": pre_generation_pipeline(target)}
    for pp in positioned_passes:
        if pp.pipeline_kind in pipelines:
            pipelines[pp.pipeline_kind].register_positioned(pp)
        elif pp.pipeline_kind != "data-flow":  # placed by the data-flow pipeline; any other kind is a typo
            raise PassPositionError(f"{pp.describe()}: unknown pipeline '{pp.pipeline_kind}'; the pipelines are: "
                                    f"data-flow, {', '.join(pipelines)}")
    for p in pipelines.values():
        for name in disabled:
            p.disable(name)
        p.after_pass.extend(hooks)
        p.run(ir)
    return ir

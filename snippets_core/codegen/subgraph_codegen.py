"""The whole per-Subgraph pipeline in one place: data-flow passes on a copy of the body, the lowering
to a LinearIR (control-flow, validation and pre-generation pipelines), then the Generator.

Every target (the interpreter, x86-64, SHAVE) reaches code through here, via ``generate_subgraph(sg, target)``
(a function here rather than a Subgraph method, so the IR knows nothing of code generation).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from snippets_core.ir.model import Model
from snippets_core.ir.shape import Shape

if TYPE_CHECKING:
    from snippets_core.codegen.target_machine import TargetMachine
    from snippets_core.debug.config import DebugConfig
    from snippets_core.ir.ops.subgraph import Subgraph
    from snippets_core.lowered.linear_ir import Config, LinearIR
    from snippets_core.passes.data_flow_pipeline import DataFlowConfig
    from snippets_core.passes.pass_manager import PositionedPass


@dataclass(frozen=True)
class GeneratedSubgraph:
    """What generation produced: the target's Kernel, the final LinearIR (for dumps such as
    ``snippets inspect --lir``), the body after the data-flow passes and the output shapes."""

    kernel: Any
    linear_ir: LinearIR
    body: Model
    output_shapes: tuple[tuple[int, ...], ...]


def generate_subgraph(
    sg: Subgraph,
    target: TargetMachine,
    *,
    positioned_passes: Iterable[PositionedPass] = (),
    disabled_passes: Iterable[str] = (),
    input_shapes: Sequence[tuple[int, ...]] | None = None,
    lowering_config: Config | None = None,
    data_flow_config: DataFlowConfig | None = None,
    debug: DebugConfig | None = None,
) -> GeneratedSubgraph:
    """Generate ``sg``'s kernel for ``target``. ``input_shapes`` fixes dynamic dims (one shape per
    Subgraph input); the Subgraph itself is left untouched, except that with perf counters on, the
    kernel's counters are appended to ``sg.rt_info`` (see ``snippets_core.debug.perf_count``).

    ``debug`` (default: the ``SNIPPETS_*`` environment variables) turns on LinearIR dumps after the named
    passes and of the final LinearIR, and perf counters (InsertPerfCount at the end of the control-flow
    pipeline; the clock must be one of ``target.perf_clocks``, a target without them refuses)."""
    from snippets_core.codegen.generator import Generator
    from snippets_core.debug.config import DebugConfig
    from snippets_core.lowered.linear_ir import Config
    from snippets_core.lowered.pipeline import lower
    from snippets_core.passes.data_flow_pipeline import DataFlowConfig, data_flow_pipeline
    from snippets_core.passes.graph_utils import has_domain_sensitive_ops

    debug = DebugConfig.from_env() if debug is None else debug
    positioned = list(positioned_passes)
    disabled = tuple(disabled_passes)
    if debug.perf_count is not None:
        from snippets_core.debug.config import DebugConfigError
        from snippets_core.lowered.passes.insert_perf_count import InsertPerfCount
        from snippets_core.passes.pass_manager import PassPosition, PositionedPass

        clocks = tuple(getattr(target, "perf_clocks", ()))
        if not clocks:
            raise DebugConfigError(f"{debug.sources.get('perf_count', 'perf_count')}: target '{target.name}' has no "
                                   "perf-counter emitters (its TargetMachine declares no perf_clocks)")
        debug.perf_mode(clocks[0], clocks)  # a clock the target lacks is an error before any work
        positioned.append(PositionedPass(InsertPerfCount(loops=debug.perf_count_loops), PassPosition.pipeline_end(), pipeline="control-flow"))
    body = sg.body.clone()
    if input_shapes is not None:
        for p, s in zip(body.parameters, input_shapes):
            p.shape = Shape(s)
        body.validate()
    sensitive = has_domain_sensitive_ops(sg.body)
    if data_flow_config is None:
        data_flow_config = DataFlowConfig.for_body(body, blocked_input_shapes=_rank_alignment(body))
    elif not data_flow_config.blocked_input_shapes:
        data_flow_config = replace(data_flow_config, blocked_input_shapes=_rank_alignment(body))
    dcfg = data_flow_config
    pipeline = data_flow_pipeline(dcfg, positioned)
    for name in disabled:
        pipeline.disable(name)
    pipeline.run(body)
    lcfg = lowering_config or Config(need_fill_tail_register=sensitive)
    if lcfg.symbolic_dims:
        _check_symbolic(body)
    # Domain-sensitive ops (softmax, MatMul, ...) need their dims kept apart, so no domain collapsing.
    lcfg = replace(lcfg, vector_size=target.vector_size,
                   enable_domain_optimization=lcfg.enable_domain_optimization and not sensitive)
    dumper = None
    if debug.dump_lir is not None:
        from snippets_core.debug.dump import LirDumper

        dumper = LirDumper(debug.dump_lir, sg.name)
    ir = lower(body, lcfg, target, positioned, disabled, after_pass=[dumper.after_pass] if dumper else [])
    if dumper is not None:
        dumper.final(ir)
    kernel = Generator(target).generate(ir)
    if debug.perf_count is not None:
        from snippets_core.lowered.perf_counters import PERF_COUNTERS, SUBGRAPH_PERF_COUNTERS

        counters = [e.node.rt_info[PERF_COUNTERS] for e in ir.exprs
                    if e.type_name == "PerfCountBegin" and PERF_COUNTERS in e.node.rt_info]
        sg.rt_info.setdefault(SUBGRAPH_PERF_COUNTERS, []).extend(counters)
    from snippets_core.lowered.linear_ir import symbolic_shape

    # a body lowered for every shape has outputs whose dynamic dims are SymInts (the configurator evaluates them)
    out_shapes = tuple(symbolic_shape(r.outputs[0].shape, ir.named_dims) if lcfg.symbolic_dims
                       else r.outputs[0].shape.to_tuple() for r in body.results)
    return GeneratedSubgraph(kernel, ir, body, out_shapes)


#: ops that move data between dims: a dynamic dim is named by its position from the innermost (lowered/symbolic.py),
#: which they would break when they move a dynamic dim; their Subgraphs get a kernel per shape
_DIM_MOVING_OPS = frozenset({"Reshape", "SnippetsReshape", "Gather", "Concat", "Split", "Slice", "Squeeze",
                             "Unsqueeze"})
#: ops that move dims but may keep the dynamic ones in place: a Transpose that does not permute them, a matrix
#: product whose dynamic dims are batch dims (M, N and K static)
_DIM_KEEPING_OPS = frozenset({"Transpose", "LoadReorder", "MatMul"})


def _dynamic_positions(shape: Shape) -> frozenset[int]:
    """Where a shape's dynamic dims are, counted from the innermost (0 = the last dim)."""
    dims = shape.dims or ()
    return frozenset(len(dims) - 1 - i for i, d in enumerate(dims) if d is None)


def _check_symbolic(body: Model) -> None:
    """Raise DynamicShapeError for a body whose dynamic dims the positional symbols would misname. A body whose
    dynamic dims all carry frontend names (``Shape.syms``) is lowered with those names, so a Transpose or a
    MatMul (a dynamic M, N or K) keeps each dim's identity; ops that reshape data still get a kernel per shape."""
    from snippets_core.lowered.brgemm_utils import BRGEMM_OPS
    from snippets_core.lowered.symbolic import DynamicShapeError, dims_named_everywhere

    named = dims_named_everywhere(body)
    for n in body.get_ordered_ops():
        if any(not o.shape.rank_is_static for o in [*n.outputs, *(i.source for i in n.inputs)]):
            raise DynamicShapeError(f"{n.type_name} '{n.name}' has a tensor of dynamic rank")
        if named and n.type_name not in _DIM_MOVING_OPS:
            continue
        outs = frozenset().union(*(_dynamic_positions(o.shape) for o in n.outputs))
        ins = [_dynamic_positions(i.shape) for i in n.inputs]
        if not outs and not any(ins):
            continue
        if n.type_name in _DIM_MOVING_OPS:
            raise DynamicShapeError(f"{n.type_name} '{n.name}' moves data between dims; lowering it for every "
                                    "shape is not supported yet")
        if n.type_name in _DIM_KEEPING_OPS or n.type_name in BRGEMM_OPS:
            matmul = n.type_name not in ("Transpose", "LoadReorder")
            if matmul and any(k < 2 for k in outs.union(*ins)):
                raise DynamicShapeError(f"{n.type_name} '{n.name}' has a dynamic M, N or K; its Brgemm is "
                                        "compiled per shape")
            if any(not p <= outs for p in ins) or (not matmul and any(p != outs for p in ins)):
                raise DynamicShapeError(f"{n.type_name} '{n.name}' moves a dynamic dim; lowering it for every "
                                        "shape is not supported yet")


def _rank_alignment(body: Model) -> tuple:  # type: ignore[type-arg]
    """Planar input layouts when the body's inputs differ in rank (e.g. a rank-0 scalar input next to a
    tensor), so Canonicalization aligns them with RankNormalization before the LinearIR is built; an
    empty tuple (Canonicalization off) when the ranks already agree."""
    from snippets_core.passes.canonicalization import BlockedShape

    shapes = [p.shape for p in body.parameters]
    if not all(s.rank_is_static for s in shapes) or len({s.rank for s in shapes}) <= 1:
        return ()
    return tuple(BlockedShape.planar(s.dims) for s in shapes)

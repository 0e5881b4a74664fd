"""The data-flow pipeline of a Subgraph body (OpenVINO ``Subgraph::data_flow_transformations``) and
``CommonOptimizations`` (run once per Subgraph after tokenization).

Order of :func:`data_flow_pipeline`::

    canonicalization            only with blocked input shapes and no broadcast-sensitive ops
    align-element-types         only with input/output precisions
    matmul-to-brgemm            only with domain-sensitive ops
    fuse-transpose-brgemm       (TransposeDecomposition goes here too once the LinearIR turns a port layout
    softmax-decomposition        into pointer increments; until then a target registers it by position)
    gn-decomposition
    layer-norm-decomposition
    graph-reduce-decomposition
    broadcast-to-move-broadcast
    reduce-to-snippets-reduce
    convert-constants-to-scalars
    convert-power-to-power-static
    propagate-precision         only with a supported-precisions table
    constant-folding
    convert-constants-to-scalars
    + positioned passes (before/after any name above, pipeline start/end)

Order of :func:`common_optimizations_pipeline` (runs on a Subgraph; body passes act on its body)::

    transform-convert-to-convert-truncation
    fake-quantize-decomposition, constant-folding   only when quantized (CommonFakeQuantizeDecomposition)
    extract-constants                               only when quantized
    validate
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.passes.align_element_types import AlignElementTypes
from snippets_core.passes.broadcast_to_move_broadcast import BroadcastToMoveBroadcast
from snippets_core.passes.canonicalization import BlockedShape, Canonicalization
from snippets_core.passes.constant_folding import ConstantFolding
from snippets_core.passes.convert_constants_to_scalars import ConvertConstantsToScalars
from snippets_core.passes.convert_power_to_power_static import ConvertPowerToPowerStatic
from snippets_core.passes.extract_constants import ExtractConstants
from snippets_core.passes.fake_quantize_decomposition import FakeQuantizeDecomposition
from snippets_core.passes.fuse_transpose_brgemm import FuseTransposeBrgemm
from snippets_core.passes.gn_decomposition import GNDecomposition
from snippets_core.passes.graph_utils import has_broadcast_sensitive_ops, has_domain_sensitive_ops, is_quantized
from snippets_core.passes.layer_norm_decomposition import LayerNormDecomposition
from snippets_core.passes.matmul_to_brgemm import MatMulToBrgemm
from snippets_core.passes.pass_manager import Pass, PassPipeline, PositionedPass
from snippets_core.passes.propagate_precision import PropagatePrecision, SupportedPrecisions
from snippets_core.passes.graph_reduce_decomposition import GraphReduceDecomposition
from snippets_core.passes.reduce_to_snippets_reduce import ReduceToSnippetsReduce
from snippets_core.passes.softmax_decomposition import SoftmaxDecomposition
from snippets_core.passes.transform_convert_to_convert_truncation import TransformConvertToConvertTruncation
from snippets_core.passes.validate import Validate


@dataclass(frozen=True)
class DataFlowConfig:
    """What the data-flow pipeline needs to know about a body and its target.

    ``has_domain_sensitive_ops`` / ``has_broadcast_sensitive_ops`` are usually read off the body
    (:meth:`for_body`). ``supported_precisions`` is the target machine's table (see PropagatePrecision).
    """

    blocked_input_shapes: tuple[BlockedShape, ...] = ()
    input_precisions: tuple[ElementType, ...] = ()
    output_precisions: tuple[ElementType, ...] = ()
    has_domain_sensitive_ops: bool = False
    has_broadcast_sensitive_ops: bool = False
    supported_precisions: SupportedPrecisions | None = None

    @staticmethod
    def for_body(body: Model | Subgraph, **kwargs) -> DataFlowConfig:  # type: ignore[no-untyped-def]
        model = body.body if isinstance(body, Subgraph) else body
        kwargs.setdefault("has_domain_sensitive_ops", has_domain_sensitive_ops(model))
        kwargs.setdefault("has_broadcast_sensitive_ops", has_broadcast_sensitive_ops(model))
        for key in ("input_precisions", "output_precisions"):
            kwargs[key] = tuple(ElementType.parse(t) for t in kwargs.get(key, ()))
        kwargs["blocked_input_shapes"] = tuple(kwargs.get("blocked_input_shapes", ()))
        return DataFlowConfig(**kwargs)


def data_flow_pipeline(config: DataFlowConfig | None = None,
                       positioned_passes: Iterable[PositionedPass] = ()) -> PassPipeline:
    """The ordered data-flow passes for one body (see the module docstring), with ``positioned_passes``
    placed by name; an unknown anchor is a PassPositionError."""
    cfg = config or DataFlowConfig()
    passes: list[Pass] = []
    if cfg.blocked_input_shapes and not cfg.has_broadcast_sensitive_ops:
        passes.append(Canonicalization(cfg.blocked_input_shapes))
    if cfg.input_precisions or cfg.output_precisions:
        passes.append(AlignElementTypes(cfg.input_precisions, cfg.output_precisions))
    if cfg.has_domain_sensitive_ops:
        # TransposeDecomposition is not in the default list: its LoadReorder is only right where the lowering
        # applies the load's layout to the pointer increments, which InitLoops does not do yet.
        passes += [MatMulToBrgemm(), FuseTransposeBrgemm(), SoftmaxDecomposition(), GNDecomposition()]
    passes += [LayerNormDecomposition(), GraphReduceDecomposition(), BroadcastToMoveBroadcast(),
               ReduceToSnippetsReduce(), ConvertConstantsToScalars(), ConvertPowerToPowerStatic()]
    if cfg.supported_precisions is not None:
        passes.append(PropagatePrecision(cfg.supported_precisions))
    passes += [ConstantFolding(), ConvertConstantsToScalars()]
    pipeline = PassPipeline("data-flow", passes)
    pipeline.register_positioned_passes(_data_flow_only(positioned_passes))
    return pipeline


def _data_flow_only(pps: Iterable[PositionedPass]) -> list[PositionedPass]:
    return [pp for pp in pps if pp.pipeline_kind == "data-flow"]


def common_optimizations_pipeline(quantized: bool = False,
                                  positioned_passes: Iterable[PositionedPass] = ()) -> PassPipeline:
    """The passes of :class:`CommonOptimizations` (see the module docstring); run it on a Subgraph."""
    passes: list[Pass] = [TransformConvertToConvertTruncation()]
    if quantized:
        passes += [FakeQuantizeDecomposition(), ConstantFolding(), ExtractConstants()]
    passes.append(Validate())
    pipeline = PassPipeline("common-optimizations", passes)
    pipeline.register_positioned_passes(positioned_passes)
    return pipeline


@dataclass(frozen=True)
class CommonOptimizations(Pass):
    """Run once per Subgraph after tokenization (OpenVINO ``CommonOptimizations``): the pipeline of
    :func:`common_optimizations_pipeline`, quantized when the body holds a FakeQuantize."""

    name: ClassVar[str] = "common-optimizations"
    positioned_passes: tuple[PositionedPass, ...] = field(default_factory=tuple)

    def run(self, ir: Subgraph) -> bool:
        if not isinstance(ir, Subgraph):
            raise TypeError(f"CommonOptimizations runs on a Subgraph, got {type(ir).__name__}")
        return common_optimizations_pipeline(is_quantized(ir.body), self.positioned_passes).run(ir)


def run_data_flow(body: Model | Subgraph, positioned_passes: Sequence[PositionedPass] = (),
                  **config) -> bool:  # type: ignore[no-untyped-def]
    """Build the pipeline for ``body`` (flags read off it, ``config`` as for DataFlowConfig) and run it."""
    return data_flow_pipeline(DataFlowConfig.for_body(body, **config), positioned_passes).run(body)


__all__ = ["CommonOptimizations", "DataFlowConfig", "common_optimizations_pipeline", "data_flow_pipeline",
           "run_data_flow"]

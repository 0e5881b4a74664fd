"""The pass pipelines a target's Subgraphs go through, with every positioned pass of the target and the plugins
at its place, marked with who contributed it (``snippets plugins --target T``).

The pipelines are built the way :func:`snippets_core.codegen.subgraph_codegen.generate_subgraph` builds them,
for a body that has every optional data-flow pass on; each optional pass says when it runs. Pass names and
order do not depend on the machine (only the pre-generation passes' register pools do), so the
pre-generation pipeline is built with the interpreter's machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from snippets_core.errors import PluginError, SnippetsError

#: data-flow passes that run only on some bodies, and when
OPTIONAL_PASSES = {
    "canonicalization": "only when the body's inputs differ in rank",
    "align-element-types": "only when the target sets input/output precisions",
    "matmul-to-brgemm": "only on bodies with MatMul, Softmax, Transpose or GroupNormalization",
    "fuse-transpose-brgemm": "only on bodies with MatMul, Softmax, Transpose or GroupNormalization",
    "softmax-decomposition": "only on bodies with MatMul, Softmax, Transpose or GroupNormalization",
    "gn-decomposition": "only on bodies with MatMul, Softmax, Transpose or GroupNormalization",
    "propagate-precision": "only on targets with a precision table (x86_64_avx512)",
}

#: the pipelines in the order a Subgraph goes through them
PIPELINE_ORDER = ("data-flow", "control-flow", "validation", "pre-generation")


@dataclass(frozen=True)
class PipelineEntry:
    """One pass of a pipeline: its name and class, ``origin`` "core" or the contributing plugin ("target:T" for
    a target's own), ``position`` where a positioned pass asked to go, ``note`` when it runs if not always."""

    pipeline: str
    name: str
    cls: str
    origin: str = "core"
    position: str = ""
    note: str = ""


def _core_pipelines() -> dict[str, Any]:
    from snippets_core.codegen.interpreter import InterpreterTarget
    from snippets_core.ir.element_type import ElementType
    from snippets_core.lowered.linear_ir import Config
    from snippets_core.lowered.pipeline import control_flow_pipeline, pre_generation_pipeline, validation_pipeline
    from snippets_core.passes.canonicalization import BlockedShape
    from snippets_core.passes.data_flow_pipeline import DataFlowConfig, data_flow_pipeline

    every_pass = DataFlowConfig(blocked_input_shapes=(BlockedShape.planar((1,)),),
                                input_precisions=(ElementType.f32,), has_domain_sensitive_ops=True,
                                supported_precisions={})
    return {"data-flow": data_flow_pipeline(every_pass), "control-flow": control_flow_pipeline(Config()),
            "validation": validation_pipeline(), "pre-generation": pre_generation_pipeline(InterpreterTarget())}


def effective_pipelines(target_name: str, host: Any, config: Any = None) -> list[PipelineEntry]:
    """Every pass a Subgraph compiled for ``target_name`` goes through, pipeline by pipeline, in order, with the
    positioned passes of ``host``'s plugins (and the target's own, once the target is registered with ``host``).
    A positioned pass whose anchor or pipeline does not exist is a PluginError naming the plugin and the pass."""
    pipelines = _core_pipelines()
    owners: dict[int, tuple[str, str]] = {}
    for owner, pp in host.positioned_passes_by_plugin(target_name, config):
        kind = pp.pipeline_kind
        if kind not in pipelines:
            raise PluginError(f"plugin '{owner}': pass '{pp.pass_.name}' is for pipeline '{kind}', which does not "
                              f"exist; the pipelines are: {', '.join(PIPELINE_ORDER)}")
        try:
            pipelines[kind].register_positioned(pp)
        except SnippetsError as e:
            raise PluginError(f"plugin '{owner}': {e}") from e
        owners[id(pp.pass_)] = (owner, str(pp.position))
    entries = []
    for kind in PIPELINE_ORDER:
        for p in pipelines[kind].passes:
            owner, position = owners.get(id(p), ("core", ""))
            note = OPTIONAL_PASSES.get(p.name, "") if owner == "core" and kind == "data-flow" else ""
            entries.append(PipelineEntry(kind, p.name, type(p).__name__, owner, position, note))
    return entries


def format_pipelines(entries: Sequence[PipelineEntry], target_name: str) -> str:
    """The pipelines as text: one numbered line per pass, positioned passes marked ``[plugin]``."""
    lines = [f"pass pipelines for target {target_name} (positioned passes marked [plugin] with their position):"]
    width = max((len(e.name) for e in entries), default=0)
    cls_width = max((len(e.cls) for e in entries), default=0)
    for kind in PIPELINE_ORDER:
        lines.append(f"{kind}:")
        for i, e in enumerate((e for e in entries if e.pipeline == kind), 1):
            tail = f"[{e.origin}] {e.position}" if e.origin != "core" else e.note
            lines.append(f"  {i:2d}  {e.name.ljust(width)}  {e.cls.ljust(cls_width)}  {tail}".rstrip())
    return "\n".join(lines)

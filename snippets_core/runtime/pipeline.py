"""The model-level pipeline that compile_model runs before code generation: plugin markup, then
tokenization (MHA first, then eltwise), then the per-Subgraph common optimizations."""

from __future__ import annotations

from dataclasses import replace

from snippets_core.config import CompileConfig
from snippets_core.ir.model import Model
from snippets_core.runtime.targets import ResolvedTarget


def run_tokenization(model: Model, target: ResolvedTarget, config: CompileConfig) -> None:
    """Mark nodes the target fuses elsewhere, then replace fusable regions by Subgraph nodes."""
    from snippets_core.tokenization import TokenizationConfig, TokenizeSnippets

    host = target.host
    host.mark_skipped(model, target.name)
    knobs = {**target.tokenization_defaults(), **dict(config.tokenization)}
    knobs.setdefault("concurrency", config.num_threads)
    tcfg = TokenizationConfig.from_dict(knobs)
    tcfg = replace(tcfg, callback=lambda node: host.tokenization_callback(node, target.name))
    TokenizeSnippets(tcfg).run(model)

"""Data-flow passes on Models and Subgraph bodies, and the pass pipeline machinery."""

from __future__ import annotations

from snippets_core.passes.pass_manager import Pass, PassPipeline, PassPosition, PositionedPass

__all__ = ["Pass", "PassPipeline", "PassPosition", "PositionedPass"]

"""An example snippets plugin: a positioned pass (Multiply+Add -> FusedMulAdd) with its emitters per target, and
two bisecting aids that keep chosen op types and nodes out of the fused Subgraphs."""

from __future__ import annotations

__version__ = "0.1.0"

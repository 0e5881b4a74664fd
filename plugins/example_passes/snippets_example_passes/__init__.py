"""An example snippets plugin: keeps chosen op types and nodes out of the fused Subgraphs."""

from __future__ import annotations

__version__ = "0.1.0"

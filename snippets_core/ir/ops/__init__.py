"""The op set: one module per op family. Importing this package registers every op in ``OPS``."""

from __future__ import annotations

from snippets_core.ir.node import OPS
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops import snippets as snippets_ops  # noqa: F401  (the snippets op set for bodies)

__all__ = ["OPS", "Constant", "Parameter", "Result"]

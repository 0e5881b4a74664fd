"""The op set: one module per op family. Importing this package registers every op in ``OPS``."""
# ruff: noqa: I001  (one import line per op module, so each family adds its own line without conflicts)

from __future__ import annotations

from snippets_core.ir.node import OPS
from snippets_core.ir.ops import binary  # noqa: F401
from snippets_core.ir.ops import convert  # noqa: F401
from snippets_core.ir.ops import fake_quantize  # noqa: F401
from snippets_core.ir.ops import logical  # noqa: F401
from snippets_core.ir.ops import matmul  # noqa: F401
from snippets_core.ir.ops import misc  # noqa: F401
from snippets_core.ir.ops import nn  # noqa: F401
from snippets_core.ir.ops import normalization  # noqa: F401
from snippets_core.ir.ops import quantize  # noqa: F401
from snippets_core.ir.ops import reduce  # noqa: F401
from snippets_core.ir.ops import reorder  # noqa: F401
from snippets_core.ir.ops import select  # noqa: F401
from snippets_core.ir.ops import shape_ops  # noqa: F401
from snippets_core.ir.ops import softmax  # noqa: F401
from snippets_core.ir.ops import unary  # noqa: F401
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops import snippets as snippets_ops  # noqa: F401  (the snippets op set for bodies)

__all__ = ["OPS", "Constant", "Parameter", "Result"]

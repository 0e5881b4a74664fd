"""Base of the passes that transform a LinearIR (the control-flow and pre-generation pipelines)."""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, ClassVar

from snippets_core.passes.pass_manager import Pass

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR


class LoweredPass(Pass):
    """A pass over a LinearIR; subclasses are ``@dataclass(frozen=True)`` with a ``name``."""

    kind: ClassVar[str] = "control-flow"

    @abstractmethod
    def run(self, ir: LinearIR) -> bool:
        """Transform ``ir`` in place; return True if anything changed."""

"""TargetMachine: what a code-generation target tells the Generator.

A target gives the vector width (lanes per element type), its register pools, and the jitters
table: for each op ``type_name`` an emitter factory and the precisions the emitter supports. The
core never imports a target; a target subclasses :class:`TargetMachine` in its own package.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from snippets_core.errors import UnsupportedByTarget
from snippets_core.ir.element_type import ElementType
from snippets_core.lowered.port_descriptor import RegType

if TYPE_CHECKING:
    from snippets_core.codegen.emitter import Emitter, KernelEmitter
    from snippets_core.lowered.expression import Expression
    from snippets_core.lowered.linear_ir import LinearIR

Precisions = Sequence[tuple[ElementType, ...]]


@dataclass(frozen=True)
class Jitter:
    """One row of the jitters table: how to build the emitter of an expression, and which input
    element-type tuples it supports (an empty list means any)."""

    factory: Callable[[Expression], Emitter]
    supported_precisions: Callable[[Expression], Precisions] = lambda expr: ()


class TargetMachine(ABC):
    """The target-specific half of code generation."""

    #: the target's name (its entry-point name for installed targets)
    name: str = "target"

    def __init__(self) -> None:
        self.jitters: dict[str, Jitter] = {}

    # --- machine facts --------------------------------------------------------------------------------------
    @abstractmethod
    def lanes(self, element_type: ElementType) -> int:
        """Elements of ``element_type`` in one vector register."""

    @property
    def vector_size(self) -> int:
        """Lanes for 32-bit elements: the ``vector_size`` of the lowering Config."""
        return self.lanes(ElementType.f32)

    @abstractmethod
    def reg_pool(self, reg_type: RegType) -> tuple[int, ...]:
        """Physical register numbers the register allocator may hand out for a class."""

    def abi_call_ops(self) -> frozenset[str]:
        """Op types whose emitters call out of the kernel (InsertRegSpills saves live registers)."""
        return frozenset()

    def specific_reg_types(self) -> dict[str, RegType]:
        """Register class of the outputs of target-specific ops (Generator::get_specific_op_out_reg_type)."""
        return {}

    def is_supported(self) -> bool:
        return True

    # --- the jitters table --------------------------------------------------------------------------------
    def has(self, type_name: str) -> bool:
        return type_name in self.jitters

    def get(self, expr: Expression) -> Emitter:
        """The emitter of ``expr``; an UnsupportedByTarget (the declared reason to fall back) naming the op when the target has none or
        does not support its input precisions."""
        jitter = self.jitters.get(expr.type_name)
        if jitter is None:
            raise UnsupportedByTarget(f"target '{self.name}' has no emitter for op {expr.type_name} "
                                     f"(expression '{expr.name}')")
        supported = list(jitter.supported_precisions(expr))
        if supported:
            types = tuple(c.source.expr.node.outputs[c.source.index].element_type for c in expr.input_connectors)
            if types not in supported:
                raise UnsupportedByTarget(
                    f"target '{self.name}': op {expr.type_name} (expression '{expr.name}') does not support input "
                    f"precisions {list(map(str, types))}; supported: {[list(map(str, s)) for s in supported]}")
        return jitter.factory(expr)

    @abstractmethod
    def make_kernel_emitter(self, ir: LinearIR, compile_params: Any = None) -> KernelEmitter:
        """The KernelEmitter that emits the whole LinearIR (after every emitter is initialised)."""

    @abstractmethod
    def get_snippet(self, kernel_emitter: KernelEmitter) -> Any:
        """The finished Kernel (machine code, an ELF, or an interpreted program)."""

"""Loop descriptions kept by the LoopManager.

A loop is described by its work amount (how many elements along one dim), its increment (how many
per iteration) and its ports: the expression ports through which data enters (input ports) and
leaves (output ports) the loop. InitLoops fills each port's pointer increment, finalization offset
and data size (a :class:`LoopPortDesc`). InsertSpecificIterations expands a :class:`UnifiedLoopInfo`
into :class:`ExpandedLoopInfo` s, one per specific iteration (first, main body, last/tail).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from snippets_core.lowered.expression import ExpressionPort


class LoopPortType(Enum):
    """How a loop treats a port's data pointer."""

    INCREMENTED = "incremented"
    NOT_INCREMENTED = "not_incremented"
    #: the port is a loop port only for bookkeeping; the loop never touches its pointer
    NOT_PROCESSED = "not_processed"


@dataclass(frozen=True)
class LoopPort:
    """A port of a loop: which expression port, whether the loop moves its pointer, along which dim
    (counted from the innermost: 0 is the last dim)."""

    expr_port: ExpressionPort
    type: LoopPortType = LoopPortType.INCREMENTED
    dim_idx: int = 0

    @property
    def is_incremented(self) -> bool:
        return self.type == LoopPortType.INCREMENTED

    def with_(self, **changes: Any) -> LoopPort:
        return replace(self, **changes)


@dataclass(frozen=True)
class LoopPortDesc:
    """Pointer arithmetic of a loop port, in elements: the shift after each iteration, the shift after
    the whole loop, and the element size (bytes) that turns both into bytes."""

    ptr_increment: int = 0
    finalization_offset: int = 0
    data_size: int = 0


class SpecificLoopIterType(Enum):
    FIRST_ITER = "first"
    MAIN_BODY = "main"
    LAST_ITER = "last"


@dataclass
class SpecificIterationHandlers:
    """Passes run on the copy of a loop body made for one specific iteration. Each handler is a
    callable ``(linear_ir, begin_index, end_index, expanded_loop_info) -> None``."""

    first_iter: list[Callable[..., None]] = field(default_factory=list)
    main_body: list[Callable[..., None]] = field(default_factory=list)
    last_iter: list[Callable[..., None]] = field(default_factory=list)

    def for_type(self, t: SpecificLoopIterType) -> list[Callable[..., None]]:
        return {SpecificLoopIterType.FIRST_ITER: self.first_iter, SpecificLoopIterType.MAIN_BODY: self.main_body,
                SpecificLoopIterType.LAST_ITER: self.last_iter}[t]


class LoopInfo:
    """A loop's work amount, increment, the dim it iterates (0 = innermost) and its ports."""

    def __init__(self, work_amount: int, increment: int, input_ports: list[LoopPort],
                 output_ports: list[LoopPort], dim_idx: int | None = None) -> None:
        self.work_amount = work_amount
        self.increment = increment
        self.input_ports = list(input_ports)
        self.output_ports = list(output_ports)
        if dim_idx is None:
            dim_idx = next((p.dim_idx for p in self.all_ports() if p.is_incremented), 0)
        self.dim_idx = dim_idx

    def all_ports(self) -> list[LoopPort]:
        return self.input_ports + self.output_ports

    def replace_port(self, old: ExpressionPort, new: list[ExpressionPort]) -> bool:
        """Replace the loop port on ``old`` by ports on ``new`` (keeping type and dim); True if found."""
        for ports in (self.input_ports, self.output_ports):
            for i, p in enumerate(ports):
                if p.expr_port == old:
                    ports[i:i + 1] = [p.with_(expr_port=n) for n in new]
                    self._on_ports_replaced(ports is self.input_ports, i, len(new))
                    return True
        return False

    def _on_ports_replaced(self, is_input: bool, i: int, n: int) -> None:
        """Subclasses keep their per-port lists aligned with the ports."""


class UnifiedLoopInfo(LoopInfo):
    """A loop before it is split into specific iterations: one pointer description per port and the
    handlers the specific iterations run."""

    def __init__(self, work_amount: int, increment: int, input_ports: list[LoopPort],
                 output_ports: list[LoopPort], handlers: SpecificIterationHandlers | None = None,
                 dim_idx: int | None = None) -> None:
        super().__init__(work_amount, increment, input_ports, output_ports, dim_idx)
        self.input_port_descs = [LoopPortDesc() for _ in self.input_ports]
        self.output_port_descs = [LoopPortDesc() for _ in self.output_ports]
        self.handlers = handlers or SpecificIterationHandlers()

    def _on_ports_replaced(self, is_input: bool, i: int, n: int) -> None:
        descs = self.input_port_descs if is_input else self.output_port_descs
        descs[i:i + 1] = [descs[i]] * n

    def port_descs(self) -> list[LoopPortDesc]:
        return self.input_port_descs + self.output_port_descs


class ExpandedLoopInfo(LoopInfo):
    """One specific iteration of a unified loop (first, main body or tail), with its own work amount,
    increment and pointer arithmetic. ``evaluate_once`` marks a loop whose body runs exactly once."""

    def __init__(self, work_amount: int, increment: int, input_ports: list[LoopPort], output_ports: list[LoopPort],
                 ptr_increments: list[int], finalization_offsets: list[int], data_sizes: list[int],
                 type_: SpecificLoopIterType, unified: UnifiedLoopInfo, evaluate_once: bool = False) -> None:
        super().__init__(work_amount, increment, input_ports, output_ports, unified.dim_idx)
        self.ptr_increments = list(ptr_increments)
        self.finalization_offsets = list(finalization_offsets)
        self.data_sizes = list(data_sizes)
        self.type = type_
        self.unified = unified
        self.evaluate_once = evaluate_once

    def _on_ports_replaced(self, is_input: bool, i: int, n: int) -> None:
        j = i if is_input else len(self.input_ports) + i
        for lst in (self.ptr_increments, self.finalization_offsets, self.data_sizes):
            lst[j:j + 1] = [lst[j]] * n

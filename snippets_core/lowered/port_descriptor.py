"""Port descriptors: how an Expression sees the tensor on one of its ports.

A :class:`PortDescriptor` is a frozen value: the planar shape of the tensor on the port, the layout
(the order in which dims are laid out in memory; identity for planar data), the subtensor (the part of
the tensor one emitter invocation processes on a loop iteration) and the register the port's value lives
in once registers are assigned. Passes change a port by replacing its descriptor
(``expr.set_input_port_descriptor(i, desc.with_(subtensor=...))``).

Data-flow passes that want to pass a subtensor or a layout to the LinearIR (SoftmaxDecomposition,
ReduceToSnippetsReduce, MatMulToBrgemm, ...) record it on the node with :func:`set_port_descriptor`
(``snippets_core.ir.port_hints``, re-exported here); the LinearIR reads it when it builds the Expression.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

# the node-level hints live in the IR, so data-flow passes can leave them without importing the LinearIR
from snippets_core.ir.port_hints import FULL_DIM, RT_INFO_KEY, get_port_descriptor_info, set_port_descriptor
from snippets_core.lowered.symbolic import as_dim

__all__ = ["FULL_DIM", "RT_INFO_KEY", "PortDescriptor", "Reg", "RegType", "get_port_descriptor_info",
           "set_port_descriptor"]


class RegType(Enum):
    """Register classes a target has: general purpose (pointers, counters), vector and mask."""

    gpr = "gpr"
    vec = "vec"
    mask = "mask"
    undefined = "undefined"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Reg:
    """A register: its class and index. Abstract (before AssignRegisters) or physical (after)."""

    type: RegType
    idx: int

    def __str__(self) -> str:
        return f"{self.type.value}[{self.idx}]"


@dataclass(frozen=True)
class PortDescriptor:
    """Shape, layout, subtensor and register of one Expression port (a value type)."""

    shape: tuple[int, ...] = ()
    subtensor: tuple[int, ...] = ()
    layout: tuple[int, ...] = ()
    reg: Reg | None = None

    def __post_init__(self) -> None:
        # a dim known only at run time stays a SymInt (see lowered/symbolic.py); so does a subtensor of a dynamic
        # tail (the last block of a Brgemm loop over a dynamic dim)
        object.__setattr__(self, "shape", tuple(as_dim(d) for d in self.shape))
        object.__setattr__(self, "subtensor", tuple(as_dim(d) for d in self.subtensor))
        layout = tuple(int(d) for d in self.layout) if self.layout else tuple(range(len(self.shape)))
        object.__setattr__(self, "layout", layout)

    def with_(self, **changes: Any) -> PortDescriptor:
        """A copy with some fields changed."""
        return replace(self, **changes)

    @property
    def is_planar(self) -> bool:
        return self.layout == tuple(range(len(self.layout)))

    @property
    def preordered_shape(self) -> tuple[int, ...]:
        """The shape in memory order (the planar shape permuted by the layout)."""
        return tuple(self.shape[i] for i in self.layout)

    def __str__(self) -> str:
        sub = ",".join("FULL" if d == FULL_DIM else str(d) for d in self.subtensor)
        parts = [f"shape=[{','.join(map(str, self.shape))}]"]
        if self.subtensor:
            parts.append(f"subtensor=[{sub}]")
        if not self.is_planar:
            parts.append(f"layout=[{','.join(map(str, self.layout))}]")
        if self.reg is not None:
            parts.append(f"reg={self.reg}")
        return " ".join(parts)

"""The LinearIR interpreter's machine model and emitter base: pointers, registers and memory of one kernel call,
and the emitter every interpreter emitter derives from. Apart from ``interpreter.py`` so that emitters in other
modules (``interpreter_brgemm.py``) build on it without an import cycle; ``interpreter.py`` re-exports it all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from snippets_core.codegen.emitter import Emitter
from snippets_core.codegen.runtime_params import RuntimeParams
from snippets_core.errors import CodegenError
from snippets_core.ir.element_type import ElementType
from snippets_core.lowered.port_descriptor import Reg, RegType
from snippets_core.lowered.symbolic import is_dynamic

if TYPE_CHECKING:
    from snippets_core.codegen.interpreter import InterpreterTarget
    from snippets_core.lowered.expression import Expression


class OutOfBoundsAccessError(CodegenError):
    """A generated access would read or write outside the memory it points into."""


@dataclass
class Pointer:
    """A data pointer: a memory region and a byte address inside (or, wrongly, outside) it."""

    region: str
    addr: int

    def __add__(self, delta: int) -> Pointer:
        return Pointer(self.region, self.addr + int(delta))


@dataclass
class MachineState:
    """Registers and memory of one kernel call."""

    vector_size: int
    memory: dict[str, np.ndarray]
    gpr: dict[int, Any] = field(default_factory=dict)
    vec: dict[int, np.ndarray] = field(default_factory=dict)
    pc: int = 0
    #: the runtime-parameter block of this call's shapes (a kernel lowered for every shape)
    params: tuple[int, ...] = ()

    def read(self, reg: Reg | None) -> Any:
        if reg is None:
            raise CodegenError("an expression reads a value that has no register")
        bank = self.gpr if reg.type == RegType.gpr else self.vec
        try:
            return bank[reg.idx]
        except KeyError:
            raise CodegenError(f"register {reg} is read before anything was written to it") from None

    def write(self, reg: Reg | None, value: Any) -> None:
        if reg is None:
            return
        (self.gpr if reg.type == RegType.gpr else self.vec)[reg.idx] = value


def poison(dtype: np.dtype, n: int) -> np.ndarray:
    """Lanes nobody wrote: NaN for floats, a byte pattern for integers."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f" or dtype == ElementType.bf16.numpy:
        return np.full(n, np.nan, dtype=dtype)
    if dtype.kind == "b":
        return np.ones(n, dtype=dtype)
    return np.frombuffer(b"\xa5" * (n * dtype.itemsize), dtype=dtype).copy()


Step = Callable[[MachineState], None]


def runtime_params_of(target: Any) -> RuntimeParams:
    """The RuntimeParams of the kernel a target is generating (made on first use: a TargetMachine written on
    top of the interpreter's emitters need not know about them)."""
    params = getattr(target, "runtime_params", None)
    if params is None:
        params = target.runtime_params = RuntimeParams()
    return params


# --- emitters ------------------------------------------------------------------------------------------------

class InterpreterEmitter(Emitter):
    """Emits a closure over the machine state."""

    def __init__(self, expr: Expression, target: InterpreterTarget) -> None:
        super().__init__(expr)
        self.target = target
        self.lanes = target.vector_size

    def emit_code(self, in_regs=None, out_regs=None, aux=None) -> Step:  # type: ignore[no-untyped-def,override]
        return self.step()

    def step(self) -> Step:
        return lambda st: None

    def value(self, name: str, x: Any) -> Callable[[MachineState], int]:
        """A getter of ``x`` at run time: the constant, or its slot of the runtime-parameter block."""
        if not is_dynamic(x):
            return lambda st: x
        k = runtime_params_of(self.target).add(name, x)
        return lambda st: st.params[k]

    def oob(self, what: str, ptr: Pointer, nbytes: int, size: int) -> OutOfBoundsAccessError:
        e = self.expr
        return OutOfBoundsAccessError(
            f"{e.type_name} '{e.name}' {what} bytes [{ptr.addr}, {ptr.addr + nbytes}) of region '{ptr.region}' "
            f"({size} bytes)")

"""Typed errors of the SHAVE target.

Every error is a subclass of :class:`snippets_core.errors.SnippetsError`, so users catch one base class.
Errors about bytes coming from a file (blob, ELF, instruction words) are :class:`BlobFormatError` subclasses;
errors raised while a valid blob runs are :class:`SimulationError` subclasses.
"""

from __future__ import annotations

from snippets_core.errors import BlobFormatError, CodegenError, SnippetsError, UnsupportedOpError


class InstructionDecodeError(BlobFormatError):
    """A 64-bit word is not a valid SHVX instruction (unknown opcode, bad type, non-zero unused field)."""


class AssemblyError(CodegenError):
    """An instruction given to the assembler has wrong operands, an unknown label or an out-of-range value."""


class ElfFormatError(BlobFormatError):
    """A kernel ELF is truncated, malformed, or does not follow the SHVX kernel layout."""


class KernelAbiError(BlobFormatError):
    """A kernel params struct or WIN_E image does not follow the kernel arguments contract."""


class BarrierCountError(BlobFormatError):
    """A barrier's producer/consumer counts disagree with the task lists."""


class StaticShapeError(UnsupportedOpError):
    """A model with dynamic input dims was given to the shave target, whose blobs are compiled for one shape:
    the message names the inputs and says how to fix their dims (``snippets compile --shape``)."""


class SimulationError(SnippetsError):
    """A valid blob failed while it ran in the simulator."""


class WindowFault(SimulationError):
    """A kernel or DMA accessed an address outside the mapped windows, or wrote a read-only window."""


class KernelTrap(SimulationError):
    """A kernel executed TRAP, fell off the end of its code or returned to a bad address."""


class StepLimitExceeded(SimulationError):
    """A kernel ran more instructions than the simulator's budget (a runaway loop)."""


class RuntimeKernelError(SimulationError):
    """The Runtime Kernel misused the FIFO/barrier/window hardware: a barrier id out of range, a count taken
    below zero, a launch without its windows (the message names the SHAVE and its task)."""


class DeadlockError(SimulationError):
    """No executor can make progress while tasks remain, or barriers are not drained at the end."""


__all__ = [
    "AssemblyError",
    "BarrierCountError",
    "BlobFormatError",
    "DeadlockError",
    "ElfFormatError",
    "InstructionDecodeError",
    "KernelAbiError",
    "KernelTrap",
    "RuntimeKernelError",
    "SimulationError",
    "StepLimitExceeded",
    "WindowFault",
]


class BarrierLimitError(BlobFormatError):
    """A schedule needs more live barriers than the platform has physical barriers (after reuse), or a blob
    names a physical barrier beyond the platform's limit; the message names the barrier and the task."""


class UnproducedBarrierError(BlobFormatError):
    """A task waits on a barrier no task updates: it would wait forever (the message names both)."""


class BarrierCycleError(BlobFormatError):
    """The tasks' barriers and queue orders form a cycle: no order runs them all (names tasks on the cycle)."""


class ChecksumError(BlobFormatError):
    """A blob's bytes do not match the CRC-32 in its header: it was corrupted after it was written."""

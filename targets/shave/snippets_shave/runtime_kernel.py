"""The Runtime Kernel: the HLD's management kernel, written in SHVX and stored in the blob's ``ActKernelRuntime``.

Every SHAVE runs it from boot (modelled on ``nnActEntry``): it takes the next invocation record from its tile's
work FIFO, waits for the record's wait barriers, consumes them, points WIN_D at the kernel's code and WIN_E at
the invocation's data window, calls the kernel's entry with the params pointer, and updates the producer
barriers; an empty FIFO halts it. The compiler generates it (:func:`runtime_kernel_elf`) as an ELF linked at
WIN_C like the other kernels, and the simulator executes its machine code (``sim/runtime.py``).

The contract with the host (``RUNTIME_VERSION``), which fills the records when it loads a blob:

* WIN_C ``[0, RUNTIME_CODE_BUFFER)`` holds the Runtime Kernel's ``.text``/``.rodata``; the tile's invocation
  records follow at ``WIN_C + RUNTIME_CODE_BUFFER`` (read-only), each 8-byte aligned, in FIFO order.
* Entry registers: ``r0`` = address of the first record, ``r1`` = the records' size in bytes, ``r30`` = SP (top
  of this SHAVE's stack), every other register 0. The kernel keeps ``RUNTIME_FRAME_BYTES`` of the stack for
  itself; a compute kernel's SP is below that frame.
* The work FIFO holds record addresses (``FIFOPOP``); the image handles of ``WINSET`` are the blob's kernel
  index (WIN_D) and the record's position in its tile's list (WIN_E: a fresh copy of that invocation's image).
* ``LAUNCH`` gives the kernel a clean register file (``r0``, ``r1``, ``r30`` from the caller, ``r31`` = 0) and
  returns with every register but SP clobbered, so the runtime keeps its record pointer in its frame.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache

from snippets_shave.asm import Assembler, SReg, r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r30
from snippets_shave.constants import RUNTIME_CODE_BUFFER, RUNTIME_FRAME_BYTES, WIN_C
from snippets_shave.elf import write_kernel_elf

RUNTIME_NAME = "runtime"  # the ELF entry symbol and the IR's @VPU.SW::@runtime
RUNTIME_SIGNATURE = ":"  # no MemRefs, no scalars: its arguments are the entry registers above
RECORDS_BASE = WIN_C + RUNTIME_CODE_BUFFER
WINDOW_D, WINDOW_E = 1, 2  # WINSET operands

# One invocation record (little-endian), then num_wait + num_update u16 virtual barrier ids, padded to 8 bytes.
RECORD = struct.Struct("<IIIIIIHHI")
OFF_TASK_ID, OFF_TEXT, OFF_ENTRY, OFF_DATA, OFF_ARGS, OFF_ARGS_SIZE, OFF_NWAIT, OFF_NUPDATE = (
    0, 4, 8, 12, 16, 20, 24, 26,
)  # fmt: skip
OFF_IDS = RECORD.size


@dataclass(frozen=True)
class InvocationRecord:
    """What the host writes for one ACT_SHAVE task (the model's ``VpuActKernelInvocation``)."""

    task_id: int
    text_handle: int  # the kernel's index in the blob (its WIN_D image)
    entry: int  # WIN_D address of the kernel's entry point
    data_handle: int  # the task's position in its tile's list (its WIN_E image)
    args_addr: int  # WIN_E address of the params struct
    args_size: int
    wait: tuple[int, ...]
    update: tuple[int, ...]

    def pack(self) -> bytes:
        head = RECORD.pack(
            self.task_id, self.text_handle, self.entry, self.data_handle, self.args_addr, self.args_size,
            len(self.wait), len(self.update), 0,
        )  # fmt: skip
        ids = struct.pack(f"<{len(self.wait) + len(self.update)}H", *self.wait, *self.update)
        body = head + ids
        return body + bytes(-len(body) % 8)


def pack_records(records: list[InvocationRecord]) -> tuple[bytes, tuple[int, ...]]:
    """The record table of one tile and the WIN_C address of each record (what the host pushes to the FIFO)."""
    table = bytearray()
    addresses = []
    for rec in records:
        addresses.append(RECORDS_BASE + len(table))
        table += rec.pack()
    return bytes(table), tuple(addresses)


def _each_barrier(a: Assembler, name: str, count: SReg, ids: SReg, op: str) -> None:
    """``op`` on each of the ``count`` u16 barrier ids at ``ids`` (advances ``ids`` past them; uses r7, r8)."""
    a.MOVI(r7, 0)
    a.label(f"{name}_loop")
    a.BGEU(r7, count, f"{name}_end")
    a.LD16U(r8, ids, 0)
    a.emit(op, r8)
    a.ADDI(ids, ids, 2)
    a.ADDI(r7, r7, 1)
    a.JMP(f"{name}_loop")
    a.label(f"{name}_end")


def runtime_kernel_program() -> Assembler:
    """The Runtime Kernel's code (labels kept for the ELF's symbol table)."""
    a = Assembler()
    a.ADDI(r30, r30, -RUNTIME_FRAME_BYTES)  # the runtime's own frame; kernels get the stack below it
    a.label("next")
    a.FIFOPOP(r2)  # r2 = the next record, 0 once the FIFO is empty
    a.MOVI(r3, 0)
    a.BEQ(r2, r3, "halt")
    a.ST32(r2, r30, 0)  # LAUNCH clobbers every register but SP
    a.LD16U(r4, r2, OFF_NWAIT)
    a.LD16U(r5, r2, OFF_NUPDATE)
    a.ADDI(r6, r2, OFF_IDS)
    _each_barrier(a, "wait", r4, r6, "BWAIT")  # producers of every wait barrier done; r6 -> update ids
    _each_barrier(a, "armed", r5, r6, "BCUR")  # every update barrier is the current instance of its id
    a.ADDI(r6, r2, OFF_IDS)
    _each_barrier(a, "consume", r4, r6, "BCONS")
    a.LD32(r9, r2, OFF_TEXT)
    a.WINSET(WINDOW_D, r9)
    a.LD32(r9, r2, OFF_DATA)
    a.WINSET(WINDOW_E, r9)
    a.LD32(r9, r2, OFF_ENTRY)
    a.LD32(r0, r2, OFF_ARGS)
    a.LD32(r1, r2, OFF_ARGS_SIZE)
    a.LAUNCH(r9)
    a.LD32(r2, r30, 0)
    a.LD16U(r4, r2, OFF_NWAIT)
    a.LD16U(r5, r2, OFF_NUPDATE)
    a.ADDI(r6, r2, OFF_IDS)
    a.SHLI(r9, r4, 1)
    a.ADD(r6, r6, r9)  # the update ids follow the wait ids
    _each_barrier(a, "produce", r5, r6, "BPROD")
    a.JMP("next")
    a.label("halt")
    a.HALT()
    return a


@lru_cache(maxsize=1)
def runtime_kernel_elf() -> bytes:
    """The Runtime Kernel as an ELF linked at WIN_C (deterministic bytes, built once)."""
    a = runtime_kernel_program()
    return write_kernel_elf(
        RUNTIME_NAME, a.assemble(), params_signature=RUNTIME_SIGNATURE, params_size=0, labels=dict(a.labels),
        base=WIN_C,
    )  # fmt: skip


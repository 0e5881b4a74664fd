"""snippets target for a simulated activation SHAVE.

Modules: :mod:`.isa` (SHVX instruction table, encode/decode), :mod:`.asm` (assembler DSL), :mod:`.elf`
(kernel ELF writer/loader), :mod:`.abi` (kernel arguments contract), :mod:`.blob` (FlatBuffers blob
writer/reader), :mod:`.schedule` (building blobs from kernels, DMA and barriers), :mod:`.sim` (simulator),
:mod:`.target` (the ``shave`` target entry point). Heavy modules are imported lazily by their users.
"""

from __future__ import annotations

__version__ = "0.1.0"

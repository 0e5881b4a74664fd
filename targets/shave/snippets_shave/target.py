"""The ``shave`` target: machine facts of the simulated activation SHAVE and its hooks.

Found by the core through the entry point ``shave`` in the group ``snippets.targets``; the core instantiates
:class:`ShaveTarget` and registers it as a pluggy plugin, so its ``@hookimpl`` methods apply when compiling
for this target. Nothing heavy is imported at module level: listing targets stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import pluggy

if TYPE_CHECKING:
    from snippets_core.ir.node import Node
    from snippets_shave.blob import Target

# the same marker as snippets_core.plugins.hookimpl (pluggy markers are plain values keyed by project name)
hookimpl = pluggy.HookimplMarker("snippets")


class ShaveTarget:
    """A simulated NPU activation SHAVE (37XX-like): SHVX kernels in ELF files, scheduled in an ASHV blob."""

    name: ClassVar[str] = "shave"
    description: ClassVar[str] = "simulated NPU activation SHAVE: SHVX kernels, FlatBuffers blob, DMA/barrier simulator"

    #: one SHVX vector register
    vector_bytes: ClassVar[int] = 16
    lanes_f32: ClassVar[int] = 4
    lanes_f16: ClassVar[int] = 8
    vector_registers: ClassVar[int] = 32
    scalar_registers: ClassVar[int] = 32
    #: r0 args, r1 args size, r30 SP, r31 LR are taken by the calling convention
    reserved_scalar_registers: ClassVar[tuple[int, ...]] = (0, 1, 30, 31)

    def available(self) -> str | None:
        """Always available: the SHAVE is simulated in Python."""
        return None

    def default_hardware(self) -> Target:
        """The hardware a blob is made for unless configured: 37XX (2 tiles, 2 SHAVEs each, 2 MiB CMX)."""
        from snippets_shave.blob import Target

        return Target()

    @hookimpl
    def snippets_tokenization_callback(self, node: Node, target_name: str) -> str | None:
        if target_name != self.name:
            return None
        from snippets_shave.tokenization_callback import tokenization_callback

        return tokenization_callback(node)

    def __repr__(self) -> str:
        return f"<target {self.name}>"

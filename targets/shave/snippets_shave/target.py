"""The ``shave`` target: machine facts of the simulated activation SHAVE and its hooks.

Found by the core through the entry point ``shave`` in the group ``snippets.targets``; the core instantiates
:class:`ShaveTarget` and registers it as a pluggy plugin, so its ``@hookimpl`` methods apply when compiling
for this target. Nothing heavy is imported at module level: listing targets stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import pluggy

if TYPE_CHECKING:
    from snippets_core.codegen.subgraph_codegen import GeneratedSubgraph
    from snippets_core.config import CompileConfig
    from snippets_core.ir.model import Model
    from snippets_core.ir.node import Node
    from snippets_core.ir.ops.subgraph import Subgraph
    from snippets_shave.blob import Target
    from snippets_shave.compiler import ShaveCompiledModel

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

    def tokenization_defaults(self) -> dict[str, object]:
        """Tokenizer knobs of this machine: data pointers a kernel keeps in its 22 allocatable gprs."""
        from snippets_shave.target_machine import MAX_DATA_POINTERS

        return {"data_ptr_gpr_count": MAX_DATA_POINTERS}

    def compile_model(self, model: Model, config: CompileConfig, host: Any) -> ShaveCompiledModel:
        """The whole tokenized model as one blob (the core calls this instead of compiling Subgraph by
        Subgraph): see :mod:`snippets_shave.compiler`. Ops outside Subgraphs are an UnsupportedOpError."""
        from snippets_shave.compiler import compile_model

        return compile_model(model, config, host, self)

    def generate_subgraph(self, sg: Subgraph, config: CompileConfig, host: Any) -> GeneratedSubgraph:
        """One Subgraph's kernel and final LinearIR, as the compiler makes them (``snippets inspect --lir``)."""
        from snippets_shave.compiler import generate_subgraph

        return generate_subgraph(sg, config, host)

    # --- artifacts, for `snippets inspect` and `snippets simulate` --------------------------------------------
    def recognizes_artifact(self, head: bytes) -> bool:
        """True for the first bytes of an ASHV blob (the FlatBuffers file identifier at offset 4)."""
        return len(head) >= 8 and head[4:8] == b"ASHV"

    def inspect_artifact(self, data: bytes) -> str:
        """The schedule of a blob in the HLD's MLIR-like text."""
        from snippets_shave.inspect import format_schedule

        return format_schedule(data)

    def simulate_artifact(
        self,
        path: str,
        inputs: str,
        outputs: str | None = None,
        *,
        seed: int | None = None,
        check_races: bool = False,
    ) -> dict[str, Any]:
        """Run a blob file on an .npz of inputs in the simulator; optionally save the outputs as an .npz."""
        from snippets_shave.sim import simulate_files

        return simulate_files(path, inputs, outputs, seed=seed, check_races=check_races)

    @hookimpl
    def snippets_tokenization_callback(self, node: Node, target_name: str) -> str | None:
        if target_name != self.name:
            return None
        from snippets_shave.tokenization_callback import tokenization_callback

        return tokenization_callback(node)

    def __repr__(self) -> str:
        return f"<target {self.name}>"

"""Code generation: the target-independent Generator and the bases a target implements
(TargetMachine with its jitters table, Emitter, KernelEmitter), plus the built-in LinearIR
interpreter target (``snippets_core.codegen.interpreter``)."""

from __future__ import annotations

from snippets_core.codegen.emitter import Emitter, KernelEmitter
from snippets_core.codegen.generator import Generator
from snippets_core.codegen.target_machine import Jitter, TargetMachine

__all__ = ["Emitter", "Generator", "Jitter", "KernelEmitter", "TargetMachine"]

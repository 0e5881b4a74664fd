"""Generator: the target-independent half of code generation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from snippets_core.codegen.target_machine import TargetMachine
    from snippets_core.lowered.linear_ir import LinearIR


class Generator:
    """Builds every expression's emitter through the TargetMachine's jitters table, then has the
    target's KernelEmitter emit the kernel and returns the target's Kernel. The LinearIR must have
    gone through the pre-generation pipeline (registers assigned, loops expanded)."""

    def __init__(self, target: TargetMachine) -> None:
        self.target = target

    def generate(self, ir: LinearIR, compile_params: Any = None) -> Any:
        from snippets_core.errors import CodegenError

        if not self.target.is_supported():
            raise CodegenError(f"target '{self.target.name}' cannot generate code on this machine")
        for expr in ir.exprs:
            expr.emitter = self.target.get(expr)
        kernel = self.target.make_kernel_emitter(ir, compile_params)
        kernel.emit_code([], [])
        for expr in ir.exprs:
            expr.emitter.emit_data()
        return self.target.get_snippet(kernel)

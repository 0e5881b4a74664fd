"""The FusedMulAdd emitter of the built-in ``interpreter`` target: a numpy closure over the machine state,
written like the emitters of :mod:`snippets_core.codegen.interpreter`."""

from __future__ import annotations

import numpy as np

from snippets_core.codegen.interpreter import InterpreterEmitter, MachineState, Step
from snippets_core.errors import UnsupportedOpError
from snippets_example_passes.fused_mul_add import fused_mul_add
from snippets_example_passes.mul_add_to_fused_mul_add import FUSED_TYPES


class FusedMulAddEmitter(InterpreterEmitter):
    """``dst = a * b + c`` on the lane vectors, rounded once (see :func:`fused_mul_add`)."""

    def step(self) -> Step:
        expr = self.expr
        types = [c.source.expr.node.outputs[c.source.index].element_type for c in expr.input_connectors]
        if any(t not in FUSED_TYPES for t in types):
            raise UnsupportedOpError(
                f"target 'interpreter': FusedMulAdd '{expr.name}' takes {[str(t) for t in FUSED_TYPES]} inputs, "
                f"got {[str(t) for t in types]}"
            )
        dtypes = [t.numpy for t in types]
        (ra, rb, rc), out = self.in_regs, self.out_regs[0]

        def run(st: MachineState) -> None:
            a, b, c = (np.asarray(st.read(r)).astype(dt, copy=False) for r, dt in zip((ra, rb, rc), dtypes))
            st.write(out, fused_mul_add(a, b, c))

        return run

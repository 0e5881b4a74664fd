"""MoveSoftmaxAxisLast: a Softmax over an inner axis as a Transpose pair around a Softmax over the last axis."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.model import Model
from snippets_core.ir.node import replace_node
from snippets_core.ir.ops.io import Constant
from snippets_core.ir.shape import normalize_axis
from snippets_core.passes.graph_utils import make, nodes_of_type
from snippets_core.passes.pass_manager import Pass


@dataclass(frozen=True)
class MoveSoftmaxAxisLast(Pass):
    """``Softmax(x, axis=k)`` with ``k`` not the last axis (static rank) ->
    ``Transpose(Softmax(Transpose(x, swap k and last), axis=-1), swap back)``.

    Runs on the whole model before tokenization. The kernels reduce rows of the innermost dim only, so this
    is the form they fuse; the two Transposes stay outside the Subgraph where a target has no in-kernel
    transpose (numpy views there, made contiguous once by the kernel's executor). The values are exactly
    those of the original Softmax. The final Transpose takes the Softmax's name."""

    name: ClassVar[str] = "move-softmax-axis-last"

    def run(self, ir: Model) -> bool:
        changed = False
        for sm in nodes_of_type(ir, "Softmax"):
            shape = sm.inputs[0].shape
            if not shape.rank_is_static or shape.rank < 2:
                continue
            try:
                axis = normalize_axis(sm.axis, shape.rank)  # type: ignore[attr-defined]
            except ShapeInferenceError:
                continue  # an invalid axis: the op reports it when it runs
            last = shape.rank - 1
            if axis == last:
                continue
            order = list(range(shape.rank))
            order[axis], order[last] = last, axis  # a swap is its own inverse
            n = sm.name
            # one order Constant per Transpose: a shared one would join a body as a node of its own
            perm_in = Constant(np.array(order, np.int64), name=f"{n}/order")
            perm_out = Constant(np.array(order, np.int64), name=f"{n}/order_back")
            to_last = make("Transpose", sm.inputs[0].source, perm_in, name=f"{n}/to_last")
            inner = make("Softmax", to_last, axis=last, name=f"{n}/last_axis")
            back = make("Transpose", inner, perm_out, name=n)
            back.rt_info = dict(sm.rt_info)
            replace_node(sm, back)
            changed = True
        return changed

"""GroupNormToRows: GroupNormalization as a normalization of rows (one per group) between two reshapes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.ir.model import Model
from snippets_core.ir.node import Output, replace_node
from snippets_core.ir.ops.io import Constant
from snippets_core.passes.graph_utils import make, nodes_of_type
from snippets_core.passes.pass_manager import Pass


def _i64(values: list[int], name: str) -> Output:
    return Constant(np.array(values, np.int64), name=name).outputs[0]


@dataclass(frozen=True)
class GroupNormToRows(Pass):
    """``GroupNormalization(x [N, C, S...], scale [C], bias [C], G, eps)``, C and S static, rewritten on the
    whole model before tokenization::

        r = Reshape(x, [N, G, C/G * prod(S)])                      a view
        d = r - ReduceMean(r, -1);  y = d / Sqrt(ReduceMean(d * d, -1) + eps)
        Reshape(y, [N, C, S...]) * Reshape(scale, [C, 1...]) + Reshape(bias, [C, 1...])

    The kernels reduce rows of the innermost dim and do not reshape computed values, so the group statistics
    become last-axis reductions of one kernel, the reshapes stay views between kernels, and the per-channel
    affine is a second kernel. (GNDecomposition does the same inside one body, which the x86 lowering cannot
    take.) The final Add takes the GroupNormalization's name."""

    name: ClassVar[str] = "group-norm-to-rows"

    def run(self, ir: Model) -> bool:
        changed = False
        for gn in nodes_of_type(ir, "GroupNormalization"):
            x, scale, bias = (i.source for i in gn.inputs)
            shape = x.shape
            if not shape.rank_is_static or shape.rank < 2 or any(d is None for d in shape.dims[1:]):
                continue
            c, spatial = shape.dims[1], list(shape.dims[2:])
            g = gn.num_groups  # type: ignore[attr-defined]
            n = gn.name
            dt = x.element_type.numpy
            rows = make("Reshape", x, _i64([0, g, -1], f"{n}/rows_shape"), special_zero=True, name=f"{n}/rows")
            axes = _i64([-1], f"{n}/axes")
            mean = make("ReduceMean", rows, axes, keep_dims=True, name=f"{n}/mean")
            d = make("Subtract", rows, mean, name=f"{n}/centered")
            var = make("ReduceMean", make("Multiply", d, d, name=f"{n}/square"), axes, keep_dims=True,
                       name=f"{n}/variance")
            eps = Constant(np.asarray(gn.epsilon, dt), name=f"{n}/epsilon")  # type: ignore[attr-defined]
            std = make("Sqrt", make("Add", var, eps, name=f"{n}/add_epsilon"), name=f"{n}/std")
            normed = make("Divide", d, std, name=f"{n}/normalized")
            back = make("Reshape", normed, _i64([0, c, *spatial], f"{n}/back_shape"), special_zero=True,
                        name=f"{n}/channels")
            per_channel = [c] + [1] * len(spatial)
            s = make("Reshape", scale, _i64(per_channel, f"{n}/scale_shape"), name=f"{n}/scale_per_channel")
            b = make("Reshape", bias, _i64(per_channel, f"{n}/bias_shape"), name=f"{n}/bias_per_channel")
            y = make("Add", make("Multiply", back, s, name=f"{n}/scale"), b, name=n)
            y.rt_info = dict(gn.rt_info)
            replace_node(gn, y)
            changed = True
        return changed

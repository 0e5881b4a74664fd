"""MoveReductionAxesLast: reductions over trailing axes as one last-axis reduction between two reshapes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node, Output, replace_node
from snippets_core.ir.ops.io import Constant
from snippets_core.ir.ops.base import normalize_axes
from snippets_core.passes.graph_utils import make, nodes_of_type
from snippets_core.passes.pass_manager import Pass

#: the reductions a kernel computes over the last axis (ReduceSum/Max directly, the rest decomposed)
ROW_REDUCTIONS = ("ReduceMax", "ReduceSum", "ReduceMean", "ReduceMin", "ReduceL2")


def _i64(values: list[int], name: str) -> Output:
    return Constant(np.array(values, np.int64), name=name).outputs[0]


def _reduced_axes(node: Node) -> list[int] | None:
    shape = node.inputs[0].shape
    src = node.inputs[1].source.node
    if not shape.rank_is_static or shape.rank == 0 or not isinstance(src, Constant):
        return None
    raw = [int(v) for v in np.asarray(src.value).reshape(-1)]
    if not raw:
        return None
    try:
        return sorted(set(normalize_axes(raw, shape.rank, "axes")))
    except ShapeInferenceError:
        return None  # invalid axes: the op reports them when it runs


@dataclass(frozen=True)
class MoveReductionAxesLast(Pass):
    """``Reduce*(x, axes k..r-1, keep_dims)``, unless it is already the kept last axis alone, rewritten on the
    whole model before tokenization::

        Reshape(x, [d0..dk-1, -1]) -> Reduce(axis -1, keep_dims) -> Reshape(output shape)

    The kernels reduce rows of the innermost dim and do not reshape computed values; the Reshapes are views
    between kernels (a global average pool over H, W becomes one row reduction per channel). Reductions that
    leave an inner axis are not rewritten: a Transpose moving the axes last is a strided numpy copy, about
    100x slower on [8,64,64,64] than numpy's own reduction over axis 1. The values are those of the
    original reduction. The final Reshape takes the reduction's name."""

    name: ClassVar[str] = "move-reduction-axes-last"

    def run(self, ir: Model) -> bool:
        changed = False
        for red in nodes_of_type(ir, *ROW_REDUCTIONS):
            axes = _reduced_axes(red)
            if axes is None:
                continue
            x = red.inputs[0].source
            rank = x.shape.rank
            if axes != list(range(axes[0], rank)) or (len(axes) == 1 and red.keep_dims):  # type: ignore[attr-defined]
                continue  # an inner axis stays, or already a row reduction
            out_shape = red.outputs[0].shape
            n = red.name
            kept = list(range(axes[0]))
            # the leading (kept) dims are copied by 0 (special_zero), so dynamic ones stay dynamic
            rows = make("Reshape", x, _i64([0] * len(kept) + [-1], f"{n}/rows_shape"), special_zero=True,
                        name=f"{n}/rows")
            reduced = make(red.type_name, rows, _i64([-1], f"{n}/last_axis"), keep_dims=True, name=f"{n}/row")
            if out_shape.is_static:
                target = _i64(list(out_shape.to_tuple()), f"{n}/out_shape")
                back = make("Reshape", reduced, target, name=n)
            else:  # dynamic leading dims
                tail = [1] * len(axes) if red.keep_dims else []  # type: ignore[attr-defined]
                back = make("Reshape", reduced, _i64([0] * len(kept) + tail, f"{n}/out_shape"), special_zero=True,
                            name=n)
            back.rt_info = dict(red.rt_info)
            replace_node(red, back)
            changed = True
        return changed

"""ReduceToSnippetsReduce: graph ReduceMax/ReduceSum over one axis become the snippets reductions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.ir.model import Model
from snippets_core.ir.node import Node, replace_node
from snippets_core.ir.ops.io import Constant
from snippets_core.ir.ops.snippets import SnippetsReduceMax, SnippetsReduceSum, SnippetsReshape
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.shape import normalize_axis
from snippets_core.passes.graph_utils import body_of, nodes_of_type, set_reduce_subtensors
from snippets_core.passes.pass_manager import Pass

#: graph reduction -> snippets reduction
SNIPPETS_REDUCE: dict[str, type[Node]] = {"ReduceMax": SnippetsReduceMax, "ReduceSum": SnippetsReduceSum}


@dataclass(frozen=True)
class ReduceToSnippetsReduce(Pass):
    """``ReduceMax/ReduceSum(x, axes=Constant[one axis], keep_dims)`` -> ``SnippetsReduceMax/Sum(x, axis)``
    (OpenVINO ``ReduceToSnippetsReduce``). With ``keep_dims=False`` the reduction must be over the last axis
    of a static rank; a ``SnippetsReshape`` then drops the kept 1. Other reductions are left as they are.
    The reduction's subtensor (full dims from ``axis`` on) is recorded for the LinearIR."""

    name: ClassVar[str] = "reduce-to-snippets-reduce"

    def run(self, ir: Model | Subgraph) -> bool:
        model = body_of(ir)
        changed = False
        for red in nodes_of_type(model, *SNIPPETS_REDUCE):
            axes_node = red.inputs[1].source.node
            if not isinstance(axes_node, Constant) or axes_node.value.size != 1:
                continue
            x = red.inputs[0].source
            axis = int(np.asarray(axes_node.value).reshape(-1)[0])
            rank_known = x.shape.rank_is_static
            if rank_known:
                axis = normalize_axis(axis, x.shape.rank)
            cls = SNIPPETS_REDUCE[red.type_name]
            if red.keep_dims:
                new = reduced = cls(x, axis=axis, name=red.name)
            else:
                if not rank_known or axis != x.shape.rank - 1:
                    continue
                reduced = cls(x, axis=axis, name=f"{red.name}/reduce")
                new = SnippetsReshape(reduced, target_shape=[0] * (x.shape.rank - 1), name=red.name)
            set_reduce_subtensors(reduced)
            new.rt_info = {**red.rt_info, **new.rt_info}
            replace_node(red, new)
            changed = True
        return changed

"""SoftmaxDecomposition: Softmax as reductions and element-wise ops the lowering understands."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from snippets_core.ir.model import Model
from snippets_core.ir.node import replace_node
from snippets_core.ir.ops.snippets import MAX_MAY_DROP_NAN, PowerStatic, SnippetsReduceMax, SnippetsReduceSum
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.shape import normalize_axis
from snippets_core.passes.graph_utils import body_of, make, nodes_of_type, set_reduce_subtensors
from snippets_core.passes.pass_manager import Pass


@dataclass(frozen=True)
class SoftmaxDecomposition(Pass):
    """``Softmax(x, axis)`` -> ``x -> ReduceMax -> Subtract(x, max) -> Exp -> ReduceSum -> PowerStatic(-1)
    -> Multiply(exp, .)`` (OpenVINO ``SoftmaxDecomposition``); the reductions are the snippets ones over
    ``axis`` (kept as given when the rank is dynamic), with their subtensors recorded for the LinearIR
    (full dims from ``axis`` on). The final Multiply takes the Softmax's name. The ReduceMax is marked
    ``MAX_MAY_DROP_NAN``: the row is NaN through the Subtract whenever x has a NaN."""

    name: ClassVar[str] = "softmax-decomposition"

    def run(self, ir: Model | Subgraph) -> bool:
        model = body_of(ir)
        nodes = nodes_of_type(model, "Softmax")
        for sm in nodes:
            x = sm.inputs[0].source
            axis = sm.axis
            if x.shape.rank_is_static:
                axis = normalize_axis(axis, x.shape.rank)
            n = sm.name
            reduce_max = SnippetsReduceMax(x, axis=axis, name=f"{n}/reduce_max")
            # a NaN in x makes x - max NaN, the sum NaN and the whole row NaN whatever the max is: the max may
            # skip NaN lanes (and +inf - +inf is NaN either way)
            reduce_max.rt_info[MAX_MAY_DROP_NAN] = True
            sub = make("Subtract", x, reduce_max, name=f"{n}/subtract")
            exp = make("Exp", sub, name=f"{n}/exp")
            reduce_sum = SnippetsReduceSum(exp, axis=axis, name=f"{n}/reduce_sum")
            power = PowerStatic(reduce_sum, power=-1.0, name=f"{n}/power_static")
            mul = make("Multiply", exp, power, name=n)
            set_reduce_subtensors(reduce_max)
            set_reduce_subtensors(reduce_sum)
            mul.rt_info = dict(sm.rt_info)
            replace_node(sm, mul)
        return bool(nodes)

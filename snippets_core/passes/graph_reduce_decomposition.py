"""GraphReduceDecomposition: graph reductions the lowering has no op for, as snippets reductions and eltwise ops."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.ir.model import Model
from snippets_core.ir.node import Node, Output, replace_node
from snippets_core.ir.ops.io import Constant
from snippets_core.ir.ops.snippets import PowerStatic, SnippetsReduceMax, SnippetsReduceSum, SnippetsReshape
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.passes.graph_utils import body_of, make, nodes_of_type, set_reduce_subtensors
from snippets_core.passes.pass_manager import Pass
from snippets_core.tokenization.tokenize_snippets import is_last_axis_reduction

#: graph reductions this pass rewrites (ReduceMax/ReduceSum are ReduceToSnippetsReduce's)
DECOMPOSED_REDUCTIONS = ("ReduceMean", "ReduceMin", "ReduceL2")


def reduce_last(x: Output, cls: type[Node], name: str) -> Output:
    """``cls`` (a snippets reduction) of ``x`` over its last axis, kept as 1."""
    red = cls(x, axis=x.shape.rank - 1, name=name)
    set_reduce_subtensors(red)
    return red.outputs[0]


def inverse_count(x: Output, name: str) -> Output:
    """``1 / x.shape[-1]``: a constant when the dim is static, else computed in the kernel as
    ``PowerStatic(ReduceSum(x*0 + 1), -1)`` (as GNDecomposition does), so the body stays shape-agnostic."""
    dt = x.element_type.numpy
    n = x.shape.dims[-1]
    if n is not None:
        return Constant(np.asarray(1.0 / n, dtype=dt), name=f"{name}/inv_count").outputs[0]
    zeros = make("Multiply", x, Constant(np.asarray(0, dt), name=f"{name}/zero"), name=f"{name}/zeros")
    ones = make("Add", zeros, Constant(np.asarray(1, dt), name=f"{name}/one"), name=f"{name}/ones")
    count = reduce_last(ones.outputs[0], SnippetsReduceSum, f"{name}/count")
    return PowerStatic(count, power=-1.0, name=f"{name}/inv_count").outputs[0]


@dataclass(frozen=True)
class GraphReduceDecomposition(Pass):
    """Graph reductions over the last axis that have no snippets op, rewritten with the two snippets reductions
    (the ones the LinearIR lowers)::

        ReduceMean(x) -> SnippetsReduceSum(x) * (1 / count)
        ReduceMin(x)  -> Negative(SnippetsReduceMax(Negative(x)))
        ReduceL2(x)   -> Sqrt(SnippetsReduceSum(x * x))

    With ``keep_dims=False`` a SnippetsReshape drops the kept 1 (as in ReduceToSnippetsReduce). Reductions
    over other axes are left as they are. The last node takes the reduction's name."""

    name: ClassVar[str] = "graph-reduce-decomposition"

    def run(self, ir: Model | Subgraph) -> bool:
        model = body_of(ir)
        changed = False
        for red in nodes_of_type(model, *DECOMPOSED_REDUCTIONS):
            if not is_last_axis_reduction(red):
                continue
            x = red.inputs[0].source
            n = red.name
            y = self._decompose(red.type_name, x, n if red.keep_dims else f"{n}/keep_dims")
            if not red.keep_dims:
                y = SnippetsReshape(y, target_shape=[0] * (x.shape.rank - 1), name=n).outputs[0]
            y.node.rt_info = {**red.rt_info, **y.node.rt_info}
            replace_node(red, [y])
            changed = True
        return changed

    @staticmethod
    def _decompose(kind: str, x: Output, name: str) -> Output:
        if kind == "ReduceMean":
            total = reduce_last(x, SnippetsReduceSum, f"{name}/sum")
            return make("Multiply", total, inverse_count(x, name), name=name).outputs[0]
        if kind == "ReduceMin":
            neg = make("Negative", x, name=f"{name}/negate")
            top = reduce_last(neg.outputs[0], SnippetsReduceMax, f"{name}/max")
            return make("Negative", top, name=name).outputs[0]
        sq = make("Multiply", x, x, name=f"{name}/square")
        total = reduce_last(sq.outputs[0], SnippetsReduceSum, f"{name}/sum")
        return make("Sqrt", total, name=name).outputs[0]

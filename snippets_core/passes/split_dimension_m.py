"""SplitDimensionM: split the M dimension of an MHA Subgraph so the parallel domain has more work.

A Subgraph pass of CommonOptimizations (OpenVINO ``split_dimension_m.cpp``). The kernel of an MHA Subgraph
iterates over M (rows of MatMul0) and the batch dims before it are the parallel domain. When the batch is
smaller than the thread count (or not a multiple of it), M is split into ``batch_m x new_m``: ``batch_m``
joins the parallel domain and ``new_m`` stays in the kernel. The body gets one more dim; Reshapes outside
the Subgraph keep the outer model's shapes unchanged::

    A-side inputs   [..., M, K]   -> Reshape [..., batch_m, new_m, K]
    B-side inputs   [..., K, N]   -> Reshape [..., 1, K, N]           (an inserted 1 broadcasts over batch_m)
    body            Transpose orders get the new dim, Softmax works on the new last axis
    outputs         [..., batch_m, new_m, N] -> Reshape [..., M, N]

The heuristics (:func:`split`) pick ``(batch_m, new_m)`` from the MatMul0 output shape and the concurrency.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node
from snippets_core.ir.ops.io import Constant, Parameter
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.shape import Shape
from snippets_core.passes.graph_utils import has_domain_sensitive_ops, make
from snippets_core.passes.pass_manager import Pass

#: a kernel should keep at least this many rows of M (smaller M blocks waste the Brgemm micro-kernel)
MIN_KERNEL_M = 32
#: ops whose Constant shapes would have to follow the split (SoftmaxReshapeElimination removes the MHA ones)
SHAPE_FIXING_OPS = ("Reshape", "SnippetsReshape", "GroupNormalization")
#: rt_info key on a Subgraph that was split: ``(batch_m, new_m)``; a second run leaves it alone
SPLIT_M_RT_INFO = "SplitDimensionM"


# --- heuristics ----------------------------------------------------------------------------------------------
def is_prime(value: int) -> bool:
    if value in (2, 3):
        return True
    if value < 2 or value % 2 == 0 or value % 3 == 0:
        return False
    d = 5
    while d * d <= value:
        if value % d == 0 or value % (d + 2) == 0:
            return False
        d += 6
    return True


def split_ideally(batch: int, m: int, concurrency: int) -> tuple[int, int]:
    """M split so that batch * batch_m is exactly the concurrency (each thread runs the kernel once), or
    M split by the concurrency when the kernel keeps at least MIN_KERNEL_M rows; else (1, m)."""
    lower = concurrency // batch
    if lower * batch == concurrency and m % lower == 0:
        return lower, m // lower
    if m % concurrency == 0 and m // concurrency >= MIN_KERNEL_M:
        return concurrency, m // concurrency
    return 1, m


def split_minimize_kernel_wa(batch: int, m: int, concurrency: int) -> tuple[int, int]:
    """The smallest kernel M that is still >= MIN_KERNEL_M (so the largest batch_m), if batch * batch_m
    reaches the concurrency; else (1, m)."""
    best = (1, m)
    d = 2
    while d * d < m:  # divisors below sqrt(m); the cofactor covers the rest
        if m % d == 0:
            if d >= MIN_KERNEL_M:
                return m // d, d
            if m // d >= MIN_KERNEL_M:
                best = (d, m // d)
        d += 1
    return best if best[0] * batch >= concurrency else (1, m)


def split_fallback_increase_parallel_wa(batch: int, m: int, concurrency: int) -> tuple[int, int]:
    """The older rule: the largest divisor of m below ceil(2 * concurrency / batch) that makes the parallel
    work reach the concurrency."""
    upper = -(-2 * concurrency // batch)
    for d in range(upper - 1, 1, -1):
        if m % d == 0:
            return (d, m // d) if d * batch >= concurrency else (1, m)
    return 1, m


def split(shape: Sequence[int], concurrency: int) -> tuple[int, int] | None:
    """``(batch_m, new_m)`` for a MatMul0 output ``shape`` [..., M, N], or None when splitting does not pay:
    M is prime, the batch already divides evenly over the threads, or no heuristic finds a split."""
    if len(shape) < 2 or concurrency < 1:
        return None
    batch = math.prod(shape[:-2])
    m = shape[-2]
    if batch < 1 or is_prime(m) or batch % concurrency == 0:
        return None
    batch_m, new_m = split_ideally(batch, m, concurrency)
    if batch_m != 1:
        return batch_m, new_m
    batch_m, new_m = split_minimize_kernel_wa(batch, m, concurrency)
    if batch_m != 1:
        return batch_m, new_m
    if batch < concurrency:
        batch_m, new_m = split_fallback_increase_parallel_wa(batch, m, concurrency)
    return (batch_m, new_m) if batch_m != 1 else None


def is_supported_matmul(node: Node) -> bool:
    """A MatMul whose M can be split: not transposed A, static output of rank >= 2."""
    out = node.outputs[0].shape
    return node.type_name == "MatMul" and not node.transpose_a and out.is_static and out.rank >= 2  # type: ignore[attr-defined]


def can_be_optimized(matmul: Node, concurrency: int) -> bool:
    """Whether SplitDimensionM would split an MHA whose MatMul0 is ``matmul`` (for tokenization callbacks)."""
    return is_supported_matmul(matmul) and split(matmul.outputs[0].shape.to_tuple(), concurrency) is not None


def updated_order(order: Sequence[int], m_index: int) -> list[int]:
    """A Transpose order after dim ``m_index`` of its input became two dims (m_index, m_index + 1)."""
    new: list[int] = []
    for o in order:
        if o < m_index:
            new.append(o)
        elif o == m_index:
            new += [o, o + 1]
        else:
            new.append(o + 1)
    return new


def reshape_m_dim(shape: Sequence[int], m_index: int, batch_m: int, new_m: int) -> list[int]:
    """[.., M, ..] -> [.., batch_m, new_m, ..]; a unit dim only gets a 1 inserted (it broadcasts)."""
    if shape[m_index] == 1:
        return unsqueeze_m_dim(shape, m_index)
    return [*shape[:m_index], batch_m, new_m, *shape[m_index + 1:]]


def unsqueeze_m_dim(shape: Sequence[int], m_index: int) -> list[int]:
    return [*shape[:m_index], 1, *shape[m_index:]]


def _constant_ints(node: Node, i: int) -> list[int] | None:
    src = node.inputs[i].source.node
    if not isinstance(src, Constant):
        return None
    return [int(v) for v in np.asarray(src.value).reshape(-1)]


# --- the pass ------------------------------------------------------------------------------------------------
class _Plan:
    """What the split changes, gathered before anything is touched so an unsupported body is left intact."""

    def __init__(self) -> None:
        self.param_shapes: dict[int, list[int]] = {}  # body parameter index -> new shape
        self.orders: dict[int, tuple[Node, list[int]]] = {}  # Transpose id -> (node, new order)
        self.targets: dict[int, tuple[Node, list[int]]] = {}  # Broadcast id -> (node, new target shape)
        self.softmaxes: list[Node] = []


@dataclass(frozen=True)
class SplitDimensionM(Pass):
    """Split M of an MHA Subgraph into ``batch_m x new_m`` (see the module docstring). Runs on a Subgraph
    with domain-sensitive ops and static inputs; ``concurrency`` is the number of threads of one inference."""

    name: ClassVar[str] = "split-dimension-m"
    concurrency: int = 1

    def run(self, ir: Subgraph) -> bool:
        if not isinstance(ir, Subgraph):
            raise TypeError(f"SplitDimensionM runs on a Subgraph, got {type(ir).__name__}")
        body = ir.body
        if SPLIT_M_RT_INFO in ir.rt_info or not has_domain_sensitive_ops(body):
            return False
        if len(body.parameters) != len(ir.inputs) or not all(p.shape.is_static for p in body.parameters):
            return False
        matmul0 = next((n for n in body.get_ordered_ops() if n.type_name == "MatMul"), None)
        if matmul0 is None or not is_supported_matmul(matmul0):
            return False
        mm_shape = matmul0.outputs[0].shape.to_tuple()
        found = split(mm_shape, self.concurrency)
        if found is None:
            return False
        if not self._validates_on_a_copy(body, mm_shape, *found):
            return False
        plan = self._plan(body, mm_shape, *found)
        assert plan is not None, "the plan succeeded on a copy of the same body"
        self._apply(ir, plan)
        ir.rt_info[SPLIT_M_RT_INFO] = found
        return True

    # --- planning ------------------------------------------------------------------------------------------
    def _validates_on_a_copy(self, body: Model, mm_shape: tuple[int, ...], batch_m: int, new_m: int) -> bool:
        """Split a copy of the body first: a body the rules did not foresee must stay untouched, not half-split."""
        trial = body.clone()
        plan = self._plan(trial, mm_shape, batch_m, new_m)
        if plan is None:
            return False
        self._apply_body(trial, plan)
        for i, shape in plan.param_shapes.items():
            trial.parameters[i].shape = Shape(shape)  # what Subgraph.infer does with the reshaped inputs
        try:
            trial.validate()
        except ShapeInferenceError:
            return False
        return True

    def _plan(self, body: Model, mm_shape: tuple[int, ...], batch_m: int, new_m: int) -> _Plan | None:
        if any(n.type_name in SHAPE_FIXING_OPS for n in body.get_ordered_ops()):
            return None  # their target shapes would need the split too
        params = body.parameters
        index_of = {p.id: i for i, p in enumerate(params)}
        m_dim = mm_shape[-2]
        plan = _Plan()

        def new_shape(shape: list[int], m_index: int, split_m: bool) -> list[int] | None:
            if not 0 <= m_index < len(shape):
                return None
            if split_m and shape[m_index] not in (1, m_dim):
                return None  # a dim the split cannot follow: leave the Subgraph as it is
            return reshape_m_dim(shape, m_index, batch_m, new_m) if split_m else unsqueeze_m_dim(shape, m_index)

        def transpose_m_index(transpose: Node, is_input: bool) -> int | None:
            order = _constant_ints(transpose, 1)
            if order is None or len(order) < 2:
                return None
            m_index = order[-2] if is_input else len(order) - 2
            plan.orders[transpose.id] = (transpose, updated_order(order, m_index))
            return m_index

        def plan_parameter(node: Node, split_m: bool) -> bool:
            if not isinstance(node, Parameter):
                return node.type_name == "Constant"  # scalar constants broadcast anyway
            i = index_of[node.id]
            if i in plan.param_shapes:
                return True
            shape = list(node.shape.to_tuple())
            if len(shape) < 2:
                plan.param_shapes[i] = shape  # rank 0/1 inputs broadcast over the new dims unchanged
                return True
            targets = node.outputs[0].targets
            m_index: int | None = len(shape) - 2
            if targets and targets[0].node.type_name == "Transpose":
                m_index = transpose_m_index(targets[0].node, is_input=True)
            updated = None if m_index is None else new_shape(shape, m_index, split_m)
            if updated is None:
                return False
            plan.param_shapes[i] = updated
            return True

        def plan_second_branch(matmul: Node) -> bool:
            parent = matmul.inputs[1].source.node
            while not isinstance(parent, (Parameter, Constant)):
                if not parent.inputs:
                    return False
                if len(parent.inputs) > 1:
                    for inp in parent.inputs:
                        if not plan_parameter(inp.source.node, split_m=False):
                            return False
                parent = parent.inputs[0].source.node
            return plan_parameter(parent, split_m=False)

        for op in body.get_ordered_ops():
            if op.type_name == "MatMul":
                if not plan_second_branch(op):
                    return None
            elif op.type_name == "Softmax":
                plan.softmaxes.append(op)
            elif op.type_name == "Broadcast":
                target = _constant_ints(op, 1)
                updated = None if target is None else new_shape(target, len(target) - 2, True)
                if updated is None:
                    return None
                plan.targets[op.id] = (op, updated)
        for p in params:
            if not plan_parameter(p, split_m=True):
                return None
        for r in body.results:
            producer = r.inputs[0].source.node
            if producer.type_name == "Transpose" and transpose_m_index(producer, is_input=False) is None:
                return None
        return plan

    # --- applying ------------------------------------------------------------------------------------------
    @staticmethod
    def _apply_body(body: Model, plan: _Plan) -> None:
        for transpose, order in plan.orders.values():
            transpose.set_input(1, Constant(np.asarray(order, dtype=np.int64), name=transpose.inputs[1].source.node.name))
        for broadcast, target in plan.targets.values():
            broadcast.set_input(1, Constant(np.asarray(target, dtype=np.int64), name=broadcast.inputs[1].source.node.name))
        for softmax in plan.softmaxes:
            # the body gains a dim: the last axis keeps its meaning only as -1
            new = make("Softmax", softmax.inputs[0].source, axis=-1, name=softmax.name)
            new.rt_info = dict(softmax.rt_info)
            body.replace_node(softmax, new)

    def _apply(self, sg: Subgraph, plan: _Plan) -> None:
        body = sg.body
        self._apply_body(body, plan)
        for i, shape in sorted(plan.param_shapes.items()):
            if list(body.parameters[i].shape.to_tuple()) == shape:
                continue
            src = sg.inputs[i].source
            reshape = make("Reshape", src, Constant(np.asarray(shape, dtype=np.int64)), special_zero=False,
                           name=f"{sg.name}/split_m_input{i}")
            sg.set_input(i, reshape)
        old_shapes = [o.shape.to_tuple() for o in sg.outputs]
        sg.revalidate()
        base = sg.name
        for i, out in enumerate(sg.outputs):
            if len(old_shapes[i]) == 0 or out.shape.to_tuple() == old_shapes[i]:
                continue
            targets = out.targets
            name = base if len(sg.outputs) == 1 else f"{base}.{i}"
            reshape = make("Reshape", out, Constant(np.asarray(old_shapes[i], dtype=np.int64)),
                           special_zero=False, name=name)
            reshape.outputs[0].names |= out.names
            out.names = set()
            for t in targets:
                t.replace_source(reshape.outputs[0])
        # the Reshape after the Subgraph now carries the original name (as in the reference)
        sg.name = f"{base}_original"


__all__ = [
    "MIN_KERNEL_M", "SPLIT_M_RT_INFO", "SplitDimensionM", "can_be_optimized", "is_prime", "is_supported_matmul",
    "reshape_m_dim", "split", "split_fallback_increase_parallel_wa", "split_ideally", "split_minimize_kernel_wa",
    "unsqueeze_m_dim", "updated_order",
]

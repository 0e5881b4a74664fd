"""Values known before run time: constants, and what can be computed from constants and static shapes.

Ops whose inputs are "shape-like" (a Reshape target, a Transpose order, reduction axes, a Broadcast
target) need those values to infer static output shapes. :func:`constant_value` finds them by walking up
the producers: a Constant gives its value, a ``ShapeOf``/``Shape`` node whose input shape is static gives
that shape, and any other node whose inputs all have known values is evaluated with its numpy reference.
"""

from __future__ import annotations

import numpy as np

from snippets_core.errors import SnippetsError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.node import Node, Output, as_output

SHAPE_OF_TYPES = ("ShapeOf", "Shape")
"""Type names of ops whose output depends only on their input's shape."""

# Ops whose values are never known ahead: the graph inputs, and ops that read nothing yet.
_NEVER_CONSTANT = ("Parameter",)


def constant_value(output: Output | Node) -> np.ndarray | None:
    """The value of ``output`` if it is known without running the model, else ``None``.

    The result has the output's element type (numpy dtype). Nothing is cached on the nodes, so the
    answer is always that of the graph as it is now (graphs are edited between calls).
    """
    out = as_output(output)
    memo: dict[int, list[np.ndarray] | None] = {}
    # An explicit post-order walk: the producers of a value can be a long chain (no recursion limit).
    stack: list[tuple[Node, bool]] = [(out.node, False)]
    entered: set[int] = set()
    while stack:
        node, ready = stack.pop()
        if node.id in memo or (not ready and node.id in entered):
            continue  # done, or already waiting for its inputs (a cycle)
        preds = _needed_inputs(node)
        if not ready and any(p.node.id not in memo for p in preds):
            entered.add(node.id)
            stack.append((node, True))
            stack.extend((p.node, False) for p in reversed(preds) if p.node.id not in memo)
            continue
        memo[node.id] = _node_values(node, memo)  # a cycle leaves an input missing: read as unknown
    values = memo[out.node.id]
    return None if values is None else values[out.index]


def _needed_inputs(node: Node) -> list[Output]:
    """The inputs whose values ``node`` needs (a ShapeOf needs only its input's shape, not its value)."""
    if node.type_name == "Constant" or node.type_name in _NEVER_CONSTANT:
        return []
    if node.type_name in SHAPE_OF_TYPES:
        return [i.source for i in node.inputs[1:]]
    return [i.source for i in node.inputs]


def _get(out: Output, memo: dict[int, list[np.ndarray] | None]) -> np.ndarray | None:
    values = memo.get(out.node.id)
    return None if values is None else values[out.index]


def _node_values(node: Node, memo: dict[int, list[np.ndarray] | None]) -> list[np.ndarray] | None:
    if node.type_name == "Constant":
        return [node.value]  # type: ignore[attr-defined]
    if node.type_name in _NEVER_CONSTANT or not node.inputs:
        return None
    if node.type_name in SHAPE_OF_TYPES:
        shape = node.input_shape(0)
        if not shape.is_static:
            return None
        # A zero-strided stand-in: the op reads only the shape, so no memory of that size is needed.
        try:
            dtype = node.input_type(0).numpy
        except ValueError:
            dtype = np.dtype(np.float32)
        args = [np.broadcast_to(np.zeros((), dtype=dtype), shape.to_tuple())]
        args += [_get(i.source, memo) for i in node.inputs[1:]]
    else:
        args = [_get(i.source, memo) for i in node.inputs]
    if any(a is None for a in args):
        return None
    try:
        outs = node.evaluate(*args)
    except (NotImplementedError, SnippetsError, ArithmeticError, ValueError, IndexError, TypeError):
        # A value that cannot be computed now (an op without a reference, a bad constant) is simply
        # unknown here; the op's own shape inference or the run reports the real problem.
        return None
    result = []
    for o, v in zip(node.outputs, outs):
        v = np.asarray(v)
        if o.element_type not in (ElementType.dynamic, ElementType.string):
            v = v.astype(o.element_type.numpy, copy=False)
        result.append(v)
    return result

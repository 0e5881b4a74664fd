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
from snippets_core.ir.shape import SymValue

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


# --- shape vectors with symbolic entries -------------------------------------------------------------
_MAX_SHAPE_VECTOR = 64  # a shape vector is short; longer integer constants are data, not shapes


def shape_value(output: Output | Node) -> SymValue | None:
    """The elements of ``output`` when it is a shape vector (an integer tensor of rank 0 or 1) whose
    entries are known before run time as ints or symbolic dims: ``Shape(x)`` of ``x: [B, S, 768]`` is
    ``(B, S, 768)``, and Gather/Slice/Concat/Unsqueeze/arithmetic on it follow (each op's
    :meth:`Node.sym_value`). None when unknown. An entry may be None (unknown) in a known-length vector.
    """
    memo: dict[tuple[int, int], SymValue | None] = {}

    def value_of(out: Output, depth: int) -> SymValue | None:
        key = (out.node.id, out.index)
        if key in memo:
            return memo[key]
        memo[key] = None  # a cycle reads as unknown
        result = None
        if depth < 64 and _is_shape_vector(out):
            node = out.node
            if node.type_name == "Constant":
                arr = np.asarray(node.value).reshape(-1)  # type: ignore[attr-defined]
                result = tuple(int(a) for a in arr)
            elif out.index == 0:
                try:
                    result = node.sym_value(lambda i: value_of(node.inputs[i].source, depth + 1))
                except (SnippetsError, ArithmeticError, ValueError, IndexError, TypeError):
                    result = None  # a bad shape vector: the op's own inference reports it, not a consumer's
        if result is not None and out.shape.is_static and len(result) != out.shape.size:
            result = None  # an op's rule disagreeing with its shape inference: trust neither
        memo[key] = result
        return result

    return value_of(as_output(output), 0)


def _is_shape_vector(out: Output) -> bool:
    s = out.shape
    if not s.rank_is_static or s.rank > 1 or (s.rank == 1 and (s.dims[0] is None or s.dims[0] > _MAX_SHAPE_VECTOR)):
        return False
    return out.element_type.is_integral  # booleans too: Equal/Where pick entries of shape vectors


def shape_value_ints(output: Output | Node) -> list[int] | None:
    """:func:`shape_value` when every entry is a known int, else None."""
    v = shape_value(output)
    if v is None or not all(isinstance(d, int) for d in v):
        return None
    return list(v)  # type: ignore[arg-type]


def known_shape_vector(out: Output) -> np.ndarray | None:
    """The value of ``out`` as an array (its element type and shape) when it is a shape vector whose
    entries are all known ints although its inputs are not constants (``Gather(Shape(x), 2)`` where
    ``x``'s dim 2 is static), so that loading and ConstantFolding can replace it by a Constant."""
    if out.node.type_name == "Constant" or not out.shape.is_static:
        return None
    ints = shape_value_ints(out)
    if ints is None:
        return None
    return np.asarray(ints, dtype=out.element_type.numpy).reshape(out.shape.to_tuple())

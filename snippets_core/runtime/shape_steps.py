"""Plan-time handling of the ops that only move shapes: folded into constants, or run as numpy views.

Real exports carry shape arithmetic between the kernels (``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``
to merge attention heads, ``Unsqueeze`` of a mask). Run node by node through the reference, each costs a
step of tens of microseconds. When the shapes are static, every value that depends on no graph input is
computed once at compile time (:func:`fold`); a Reshape/Squeeze/Unsqueeze of a static output shape becomes
a numpy reshape, a view of a contiguous array (:func:`view_executor`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from snippets_core.errors import ShapeInferenceError, SnippetsError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.evaluate import evaluate_node
from snippets_core.ir.layout import INPUT_LAYOUTS, PLAIN, layout_named, physical
from snippets_core.ir.node import Node
from snippets_core.ir.shape import SymDim

#: ops whose output is their data input with another shape
VIEW_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten"})
#: ops whose outputs are consecutive slices of their data input along one axis
SPLIT_OPS = frozenset({"Split", "VariadicSplit"})
#: ops that read only their input's shape
SHAPE_OF_OPS = frozenset({"ShapeOf", "Shape"})
#: a folded value larger than this is computed per call instead of being kept alive with the model
FOLD_MAX_BYTES = 64 << 20
#: ops never folded: their value changes per call although their inputs do not
UNFOLDABLE = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                        "Bernoulli"})

Executor = Callable[[list[np.ndarray]], Sequence[np.ndarray]]


def fold(node: Node, args: Sequence[int], known: Mapping[int, np.ndarray]) -> list[np.ndarray] | None:
    """The outputs of ``node`` computed at compile time, when they depend on no graph input: all its input
    slots are in ``known`` (constants and values folded before), or it reads only a static shape. None
    when it must run per call (or evaluating it now fails: the call then reports the error as usual)."""
    if not node.inputs or node.type_name in UNFOLDABLE or any(o.element_type is ElementType.dynamic
                                                               for o in node.outputs):
        return None
    if any(t.node.type_name == "Result" for o in node.outputs for t in o.targets):
        return None  # a model output stays a fresh array per call: a caller may write into what it gets
    if node.type_name in SHAPE_OF_OPS:
        shape = node.inputs[0].shape
        if not shape.is_static:
            return None
        # a zero-strided stand-in: the op reads the shape only
        values = [np.broadcast_to(np.zeros((), np.float32), shape.to_tuple())]
        values += [known[a] for a in args[1:] if a in known]
        if len(values) != len(args):
            return None
    elif all(a in known for a in args):
        values = [known[a] for a in args]
    else:
        return None
    try:
        outs = evaluate_node(node, values)
    except SnippetsError:
        return None
    if sum(o.nbytes for o in outs) > FOLD_MAX_BYTES:
        return None
    return [o if o.flags.c_contiguous else o.copy() for o in outs]  # (ascontiguousarray makes 0-d 1-d)


def view_executor(node: Node) -> Executor | None:
    """A reshape to the node's static output shape for a shape-only op (whose shape inputs are compile-time
    values), else None. numpy reshapes a contiguous array without copying. Split/VariadicSplit along a static
    axis become basic slices (see :func:`_split_executor`)."""
    if node.type_name in SPLIT_OPS:
        return _split_executor(node)
    if node.type_name not in VIEW_OPS or len(node.outputs) != 1:
        return None
    out = node.outputs[0].shape
    if not out.is_static or not node.inputs[0].shape.is_static:
        return _symbolic_view(node)
    shape = out.to_tuple()
    layout = layout_named(node.rt_info.get(INPUT_LAYOUTS, (PLAIN.name,))[0])
    if not layout.is_plain:  # a flatten for a MatMul whose weight AssignLayouts put in this layout's order

        def run_in_layout(args: list[np.ndarray]) -> tuple[np.ndarray]:
            return (physical(args[0], layout).reshape(shape),)

        return run_in_layout

    def run(args: list[np.ndarray]) -> tuple[np.ndarray]:
        return (args[0].reshape(shape),)

    return run


def _symbolic_view(node: Node) -> Executor | None:
    """A reshape for a shape-only op with dynamic dims whose output dims are each static or a dim symbol that
    the input has (``[B, S, 768] -> [B, S, 12, 64]``): the output shape is read from the input's per call, a
    view as in the static case (the reference would run the op's shape inputs through its evaluator, ~15 us a
    step). An output dim that is an expression of the input's symbols (a classifier's flatten ``[N, C*H*W]``) is
    evaluated from them per call. None when an output dim is unknown or depends on other symbols."""
    src, out = node.inputs[0].shape, node.outputs[0].shape
    if not src.rank_is_static or not out.rank_is_static:
        return None
    where = {d: j for j, d in enumerate(src.sym_dims) if d is not None and not isinstance(d, int)}
    names = {d.name: j for d, j in where.items() if d.name is not None}  # type: ignore[union-attr]
    plan: list[int] = []  # per output dim: its static size, or -1 - (the input dim it copies)
    exprs: dict[int, SymDim] = {}  # output dim -> its expression of the input's named dims
    for k, d in enumerate(out.sym_dims):
        if isinstance(d, int):
            plan.append(d)
        elif d is not None and d in where:
            plan.append(-1 - where[d])
        elif isinstance(d, SymDim) and d.names <= {n for e in where for n in e.names}:  # type: ignore[union-attr]
            plan.append(0)
            exprs[k] = d
        else:
            return None
    named = all(n in names or SymDim.of(n).base_names <= names.keys() for e in exprs.values() for n in e.names)
    if len(exprs) > 1 and not named:
        return None  # several expressions, not all of plain input names: not worth a reference run's saving
    reference = _reference(node)
    rank = len(src.sym_dims)

    def ref(args: list[np.ndarray]) -> Sequence[np.ndarray]:
        """An input that contradicts the model's dims: the reference names what is wrong, or, when the plan dropped
        the shape chain (a view reads no shape input), a typed error says so."""
        if any(a is None for a in args[1:]):
            raise ShapeInferenceError(f"{node.type_name} '{node.name}': input of shape {list(args[0].shape)} "
                                      f"contradicts the model's {src} -> {out}")
        return reference(args)

    if exprs and not layout_named(node.rt_info.get(INPUT_LAYOUTS, (PLAIN.name,))[0]).is_plain:
        return None
    if exprs:
        def run_expr(args: list[np.ndarray]) -> Sequence[np.ndarray]:
            x = args[0]
            if x.ndim != rank:
                return ref(args)
            env = {n: x.shape[j] for n, j in names.items()}
            # evaluated from the input's named dims; else one expression of its dims is what numpy infers for a -1
            # ([N, C*H*W] of [N, C, floor((H+31)/32)-6, ...]; not for an empty input, where -1 is ambiguous)
            shape = tuple((exprs[k].evaluate(env) if named else -1) if k in exprs else
                          d if d >= 0 else x.shape[-1 - d] for k, d in enumerate(plan))
            try:
                return (x.reshape(shape),)
            except (ValueError, TypeError):
                return ref(args)

        return run_expr

    dynamic = [j for j, d in enumerate(plan) if d < 0]
    if len(dynamic) == 1:  # one dim from the input (a batch): numpy infers it, one compare checks it (~0.6 us)
        j, i = dynamic[0], -1 - plan[dynamic[0]]
        template = tuple(-1 if k == j else d for k, d in enumerate(plan))

        def run_one(args: list[np.ndarray]) -> Sequence[np.ndarray]:
            x = args[0]
            if x.ndim == rank:
                try:
                    y = x.reshape(template)
                except ValueError:
                    return ref(args)
                if y.shape[j] == x.shape[i]:
                    return (y,)
            return ref(args)  # an input that contradicts the model's dims: the reference names what is wrong

        return run_one

    def run(args: list[np.ndarray]) -> Sequence[np.ndarray]:
        x = args[0]
        shape = tuple(d if d >= 0 else x.shape[-1 - d] for d in plan)
        if x.ndim != rank or math.prod(shape) != x.size:
            return ref(args)  # an input that contradicts the model's dims: the reference names what is wrong
        return (x.reshape(shape),)

    return run


def _reference(node: Node) -> Executor:
    def run(args: list[np.ndarray]) -> Sequence[np.ndarray]:
        return evaluate_node(node, list(args))

    return run


def _split_executor(node: Node) -> Executor | None:
    """Split/VariadicSplit as basic slices along the axis (known at compile time, its sizes static; other dims may
    be dynamic), each made contiguous: a strided copy, where the reference indexes with ``np.take`` (ten times
    slower on a QKV projection)."""
    from snippets_core.ir.const_eval import constant_value

    shape = node.inputs[0].shape
    # only the split axis must be static (a QKV projection's [B, S, 2304] split into three [B, S, 768])
    if not shape.rank_is_static or not all(o.shape.rank_is_static for o in node.outputs):
        return None
    axis_value = constant_value(node.inputs[1].source)
    if axis_value is None or axis_value.size != 1:
        return None
    axis = int(axis_value.reshape(-1)[0]) % shape.rank
    slices, start = [], 0
    for o in node.outputs:
        n = o.shape.sym_dims[axis]
        if not isinstance(n, int):
            return None
        slices.append((slice(None),) * axis + (slice(start, start + n),))
        start += n
    if start != shape.sym_dims[axis]:
        return None

    ref = _reference(node)

    def run(args: list[np.ndarray]) -> Sequence[np.ndarray]:
        x = args[0]
        if x.ndim != shape.rank or x.shape[axis] != start:
            return ref(args)  # an input that contradicts the model's dims: the reference names what is wrong
        return [np.ascontiguousarray(x[sl]) for sl in slices]

    return run

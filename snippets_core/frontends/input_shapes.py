"""Fixing the dynamic dims of a model's inputs before compiling (``snippets compile --shape x=1,3,224``), for
targets whose artifacts are compiled for one shape (a shave blob) or to specialize a model on a known shape.

Given an ONNX model (path, bytes or ModelProto), the dims are fixed on the graph inputs before the frontend
reads it; given a :class:`~snippets_core.ir.Model`, a copy gets the shapes and shape inference runs again.
Either way the shape-only subgraphs (Shape, Slice, Concat, ... feeding a Reshape) then fold into constants,
as for a model exported with static shapes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from snippets_core.errors import InputError, SnippetsError
from snippets_core.ir.const_eval import SHAPE_OF_TYPES, constant_value
from snippets_core.ir.model import Model
from snippets_core.ir.ops.io import Constant
from snippets_core.ir.shape import Shape


def _fmt(dims: Sequence[int | None] | None) -> str:
    return "[...]" if dims is None else "[" + ",".join("?" if d is None else str(d) for d in dims) + "]"


def check_shape_fits(name: str, declared: Sequence[int | None] | None, shape: Sequence[int]) -> tuple[int, ...]:
    """``shape`` as a tuple of ints if it fits ``declared`` (same rank, equal static dims), else an InputError
    naming the input and both shapes."""
    dims = tuple(shape)
    if any(not isinstance(d, int) or isinstance(d, bool) or d < 0 for d in dims):
        raise InputError(f"shape {list(dims)} of input {name!r}: dims must be non-negative integers")
    if declared is not None and (len(declared) != len(dims) or any(d is not None and d != s
                                                                   for d, s in zip(declared, dims))):
        raise InputError(f"shape {_fmt(dims)} does not fit the declared shape {_fmt(declared)} of input {name!r}")
    return dims


def fold_shape_subgraphs(model: Model) -> int:
    """Replace each ShapeOf of a static shape, and each node computed only from those and constants (the
    Slice/Gather/Concat chains exporters build reshape targets with), by a Constant; returns how many. With the
    input dims fixed, these are the ops a target that runs only fused kernels (shave) would otherwise reject."""
    folded = 0
    for node in model.get_ordered_ops():
        if len(node.outputs) != 1 or not node.inputs or node.type_name in ("Constant", "Result"):
            continue
        if node.type_name not in SHAPE_OF_TYPES and not all(isinstance(i.source.node, Constant) for i in node.inputs):
            continue
        value = constant_value(node.outputs[0])
        if value is None:
            continue
        model.replace_node(node, Constant(value, name=node.name))
        node.disconnect()
        folded += 1
    return folded


def _unknown_names(shapes: Mapping[str, Any], inputs: Sequence[str]) -> None:
    unknown = sorted(set(shapes) - set(inputs))
    if unknown:
        raise InputError(f"no input named {unknown[0]!r}; the model's inputs are: {', '.join(inputs)}")


def _fix_onnx(source: Any, shapes: Mapping[str, Sequence[int]]) -> Model:
    from snippets_core.frontends.onnx import load_model_proto, read_onnx

    proto, _ = load_model_proto(source)
    fixed = type(proto)()
    fixed.CopyFrom(proto)  # the caller's proto stays as it was
    initializers = {t.name for t in fixed.graph.initializer}
    inputs = [v for v in fixed.graph.input if v.name not in initializers]
    _unknown_names(shapes, [v.name for v in inputs])
    for v in inputs:
        if v.name not in shapes:
            continue
        tensor = v.type.tensor_type
        declared = ([d.dim_value if d.WhichOneof("value") == "dim_value" else None for d in tensor.shape.dim]
                    if tensor.HasField("shape") else None)
        dims = check_shape_fits(v.name, declared, shapes[v.name])
        tensor.shape.ClearField("dim")
        for d in dims:
            tensor.shape.dim.add().dim_value = d
    model = read_onnx(fixed)
    fold_shape_subgraphs(model)
    return model


def _fix_model(model: Model, shapes: Mapping[str, Sequence[int]]) -> Model:
    _unknown_names(shapes, model.input_names)
    fixed = model.clone()
    for p in fixed.parameters:
        if p.name in shapes:
            p.shape = Shape(check_shape_fits(p.name, p.shape.dims, shapes[p.name]))
    try:
        fixed.validate()
    except InputError:
        raise
    except SnippetsError as e:
        given = ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(shapes.items()))
        raise InputError(f"model '{model.name}' with input shapes {given}: {e}") from e
    fold_shape_subgraphs(fixed)
    return fixed


def fix_input_shapes(model: Any, shapes: Mapping[str, Sequence[int]]) -> Model:
    """A Model whose inputs named in ``shapes`` have those shapes. ``model`` is an ONNX path, bytes or ModelProto
    (the dims are fixed before reading) or a Model (left untouched: a copy is returned). A name the model has no
    input for, a shape of another rank or one that contradicts a static dim is an InputError naming it."""
    if isinstance(model, Model):
        return _fix_model(model, shapes)
    return _fix_onnx(model, shapes)

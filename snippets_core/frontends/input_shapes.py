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


def fix_onnx_inputs(source: Any, shapes: Mapping[str, Sequence[int]] | None = None,
                    dims: Mapping[str, int] | None = None) -> Any:
    """A copy of the ONNX model ``source`` (path, bytes or ModelProto) whose graph inputs named in ``shapes`` have
    those shapes and whose symbolic dims named in ``dims`` (``{"batch": 8}``, onnxruntime's free dimension
    overrides) have those sizes. A name that matches no input (no symbolic dim) is an InputError listing them."""
    from snippets_core.frontends.onnx import load_model_proto

    shapes, dims = dict(shapes or {}), dict(dims or {})
    proto, _ = load_model_proto(source)
    fixed = type(proto)()
    fixed.CopyFrom(proto)  # the caller's proto stays as it was
    initializers = {t.name for t in fixed.graph.initializer}
    inputs = [v for v in fixed.graph.input if v.name not in initializers]
    _unknown_names(shapes, [v.name for v in inputs])
    symbolic = sorted({d.dim_param for v in inputs for d in v.type.tensor_type.shape.dim if d.dim_param})
    unknown = sorted(set(dims) - set(symbolic))
    if unknown:
        raise InputError(f"no input has a dim named {unknown[0]!r}; the inputs' named dims are: "
                         f"{', '.join(symbolic) or 'none'}")
    for name, size in dims.items():
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise InputError(f"dim {name!r} = {size!r}: a size must be a non-negative integer")
    for v in inputs:
        tensor = v.type.tensor_type
        if v.name in shapes:
            declared = ([d.dim_value if d.WhichOneof("value") == "dim_value" else None for d in tensor.shape.dim]
                        if tensor.HasField("shape") else None)
            new = check_shape_fits(v.name, declared, shapes[v.name])
            tensor.shape.ClearField("dim")
            for d in new:
                tensor.shape.dim.add().dim_value = d
    # a dim name means one size across the graph (as onnxruntime applies its overrides): outputs and value_info too
    for v in [*inputs, *fixed.graph.output, *fixed.graph.value_info]:
        if v.name in shapes:
            continue
        for d in v.type.tensor_type.shape.dim:
            if d.dim_param in dims:
                d.dim_value = dims[d.dim_param]  # the oneof: clears dim_param
    return fixed


def _fix_onnx(source: Any, shapes: Mapping[str, Sequence[int]] | None, dims: Mapping[str, int] | None) -> Model:
    from snippets_core.frontends.onnx import read_onnx

    model = read_onnx(fix_onnx_inputs(source, shapes, dims))
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


def fix_input_shapes(model: Any, shapes: Mapping[str, Sequence[int]] | None = None, *,
                     dims: Mapping[str, int] | None = None) -> Model:
    """A Model whose inputs named in ``shapes`` have those shapes, and (ONNX only) whose symbolic dims named in
    ``dims`` have those sizes. ``model`` is an ONNX path, bytes or ModelProto (the dims are fixed before reading)
    or a Model (left untouched: a copy is returned). A name the model has no input for, a shape of another rank
    or one that contradicts a static dim is an InputError naming it."""
    if isinstance(model, Model):
        if dims:
            raise InputError("named dims (dims=...) are fixed on an ONNX model (path, bytes or ModelProto); "
                             "for a Model give whole input shapes")
        return _fix_model(model, shapes or {})
    return _fix_onnx(model, shapes, dims)

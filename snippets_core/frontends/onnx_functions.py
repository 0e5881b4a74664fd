"""Expansion of ONNX ops that ONNX itself defines as functions (Attention, RMSNormalization, SwiGLU, ...).

An op without a converter but with a function body in its ONNX schema is replaced by the nodes of that
body, with the node's inputs, outputs and attributes substituted in and internal names prefixed by the
node's name. The body's own opset import says which op versions its nodes follow. Context-dependent
bodies (whose nodes depend on the input types) are built by onnx from the inputs' types.
"""

from __future__ import annotations

from typing import Any

import onnx
from onnx import AttributeProto, FunctionProto, NodeProto, TypeProto

from snippets_core.errors import UnsupportedOpError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.node import Output

_ET_TO_ONNX = {
    ElementType.f32: onnx.TensorProto.FLOAT, ElementType.f64: onnx.TensorProto.DOUBLE,
    ElementType.f16: onnx.TensorProto.FLOAT16, ElementType.bf16: onnx.TensorProto.BFLOAT16,
    ElementType.i64: onnx.TensorProto.INT64, ElementType.i32: onnx.TensorProto.INT32,
    ElementType.i16: onnx.TensorProto.INT16, ElementType.i8: onnx.TensorProto.INT8,
    ElementType.u64: onnx.TensorProto.UINT64, ElementType.u32: onnx.TensorProto.UINT32,
    ElementType.u16: onnx.TensorProto.UINT16, ElementType.u8: onnx.TensorProto.UINT8,
    ElementType.boolean: onnx.TensorProto.BOOL,
}


def has_function_body(op_type: str, opset: int) -> bool:
    """True if ONNX defines ``op_type`` (default domain, at ``opset``) by a function body."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain="")
    except onnx.defs.SchemaError:
        return False
    return bool(schema.function_opset_versions or schema.context_dependent_function_opset_versions)


def _type_proto(out: Output | None) -> TypeProto:
    if out is None:
        return TypeProto()
    shape = None if not out.shape.rank_is_static else [d for d in out.shape.dims]  # type: ignore[union-attr]
    return onnx.helper.make_tensor_type_proto(_ET_TO_ONNX.get(out.element_type, onnx.TensorProto.UNDEFINED), shape)


def _pick(versions: list[int], opset: int) -> int | None:
    """The newest body version not newer than the model's opset."""
    fitting = [v for v in versions if v <= opset]
    return max(fitting) if fitting else None


def function_body(node: NodeProto, opset: int, inputs: list[Output | None], where: str) -> FunctionProto:
    """The FunctionProto that defines ``node`` at ``opset`` (context-dependent bodies see ``inputs``' types)."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, domain="")
        plain = _pick(list(schema.function_opset_versions), opset)
        context = _pick(list(schema.context_dependent_function_opset_versions), opset)
        body = FunctionProto()
        if plain is not None and (context is None or plain >= context):
            body.ParseFromString(schema.get_function_with_opset_version(plain))
        elif context is not None:
            full = NodeProto()
            full.CopyFrom(node)
            _add_default_attributes(full, schema)
            data = schema.get_context_dependent_function_with_opset_version(
                context, full.SerializeToString(), [_type_proto(o).SerializeToString() for o in inputs])
            body.ParseFromString(data)
        else:
            raise UnsupportedOpError(f"{where}: ONNX defines no function body for opset {opset}")
    except (onnx.defs.SchemaError, RuntimeError, ValueError) as e:
        raise UnsupportedOpError(f"{where}: its ONNX function body cannot be built: {e}") from None
    return body


def _add_default_attributes(node: NodeProto, schema: Any) -> None:
    present = {a.name for a in node.attribute}
    for name, attr in schema.attributes.items():
        if name not in present and attr.default_value and attr.default_value.name:
            node.attribute.append(attr.default_value)


def expand(node: NodeProto, opset: int, inputs: list[Output | None], prefix: str,
           where: str) -> tuple[list[NodeProto], int]:
    """(the body's nodes with names substituted, the default-domain opset the body is written in)."""
    body = function_body(node, opset, inputs, where)
    schema = onnx.defs.get_schema(node.op_type, opset, domain="")
    full = NodeProto()
    full.CopyFrom(node)
    _add_default_attributes(full, schema)
    attrs = {a.name: a for a in full.attribute}
    names: dict[str, str] = {}
    for formal, actual in zip(body.input, list(node.input) + [""] * len(body.input)):
        names[formal] = actual
    for formal, actual in zip(body.output, node.output):
        if actual:
            names[formal] = actual

    def rename(name: str) -> str:
        if name == "":
            return ""
        return names.get(name, f"{prefix}/{name}")

    nodes = []
    for inner in body.node:
        new = NodeProto()
        new.CopyFrom(inner)
        del new.input[:]
        del new.output[:]
        del new.attribute[:]
        new.input.extend(rename(n) for n in inner.input)
        new.output.extend(rename(n) for n in inner.output)
        for a in inner.attribute:
            if a.HasField("ref_attr_name"):
                if a.ref_attr_name in attrs:  # an unset optional attribute stays unset
                    copy = AttributeProto()
                    copy.CopyFrom(attrs[a.ref_attr_name])
                    copy.name = a.name
                    new.attribute.append(copy)
            else:
                if a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
                    raise UnsupportedOpError(f"{where}: its ONNX function body has control flow")
                new.attribute.append(a)
        nodes.append(new)
    body_opset = next((o.version for o in body.opset_import if o.domain in ("", "ai.onnx")), opset)
    return nodes, int(body_opset)

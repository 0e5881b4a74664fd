"""The ONNX frontend: ``read_onnx(path | bytes | ModelProto) -> Model``.

Each ONNX op type maps to a converter in :data:`CONVERTERS` (``op_type -> function(ctx) -> outputs``).
A converter reads the node through a :class:`NodeContext` (inputs, attributes, the opset version) and
builds op-set nodes with ``ctx.make``; version differences (Softmax's axis before opset 13, Reduce axes as
attribute or input, Split/Squeeze/Unsqueeze/Clip/Pad/Slice attributes that became inputs, ...) are handled
inside the converter. Ops that the fusable op set lacks are decomposed into it when that keeps fusion
possible (Gemm, BatchNormalization, Flatten, LeakyRelu, ...) or mapped onto the reference-only ops in
``ir/ops/nn.py`` and ``ir/ops/misc.py``.

Nodes whose inputs are all constants are folded into Constants while reading, so weights computed by
``ConstantOfShape`` and shape arithmetic on static shapes reach the graph as literal values.

Every failure a user can provoke raises :class:`ModelFormatError` or :class:`UnsupportedOpError` naming
the file, the node (name and op type) and, where it applies, the attribute.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from snippets_core.errors import ModelFormatError, ShapeInferenceError, SnippetsError, UnsupportedOpError
from snippets_core.frontends.onnx_functions import expand as expand_function
from snippets_core.frontends.onnx_functions import has_function_body
from snippets_core.frontends.onnx_lenient import checkable, inline_local_functions, topological_order
from snippets_core.frontends.onnx_quant import mark_dequantized_constant
from snippets_core.frontends.onnx_types import element_type_of
from snippets_core.ir import ops as _ops  # noqa: F401  (registers the op set)
from snippets_core.ir.const_eval import known_shape_vector
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.node import OPS, Node, Output
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.shape import Shape, SymDim

try:
    import onnx
    from google.protobuf.message import DecodeError
    from onnx import TensorProto, numpy_helper
except ImportError:  # pragma: no cover - onnx is a dependency of snippets-core
    onnx = None  # type: ignore[assignment]
    DecodeError = ValueError  # type: ignore[assignment,misc]

# What onnx and protobuf raise on bad input; each is caught and re-raised as a typed snippets error.
_ONNX_ERRORS: tuple[type[BaseException], ...] = (DecodeError, ValueError, TypeError, RuntimeError, OSError,
                                                 KeyError, IndexError, AttributeError)
if onnx is not None:
    _ONNX_ERRORS += (onnx.checker.ValidationError, onnx.defs.SchemaError)
# What an op's numpy reference may raise on constants it cannot fold.
_FOLD_ERRORS = (SnippetsError, ArithmeticError, ValueError, TypeError, IndexError, NotImplementedError)

MIN_OPSET = 7
"""The oldest default-domain opset the frontend claims (older models are refused with a typed error)."""

# Ops whose value depends on more than their inputs: never folded into constants.
_NOT_FOLDABLE = ("Parameter", "Constant", "Result", "Subgraph")
# Folding a constant subgraph larger than this would only move memory from run time to read time.
_FOLD_LIMIT_BYTES = 1 << 30


# ----------------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------------


def load_model_proto(source: Any) -> tuple[Any, str]:
    """(ModelProto, label for messages) from a path, bytes or a ModelProto; ModelFormatError on bad input."""
    if onnx is None:  # pragma: no cover
        raise ModelFormatError("reading ONNX needs the 'onnx' package")
    if isinstance(source, onnx.ModelProto):
        return source, f"model '{source.graph.name or '<unnamed>'}'"
    if isinstance(source, (bytes, bytearray, memoryview)):
        label = "<bytes>"
        data = bytes(source)
        base_dir = None
    elif isinstance(source, (str, os.PathLike)):
        label = os.fspath(source)
        if not os.path.exists(label):
            raise ModelFormatError(f"{label}: no such ONNX file")
        if os.path.isdir(label):
            raise ModelFormatError(f"{label}: is a directory, not an ONNX file")
        try:
            with open(label, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ModelFormatError(f"{label}: cannot read: {e.strerror or e}") from None
        base_dir = os.path.dirname(os.path.abspath(label))
    else:
        raise ModelFormatError(f"read_onnx expects a path, bytes or onnx.ModelProto, got {type(source).__name__}")
    if not data:
        raise ModelFormatError(f"{label}: the file is empty")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except _ONNX_ERRORS as e:
        raise ModelFormatError(f"{label}: not a valid ONNX protobuf (truncated or corrupt): {e}") from None
    # Protobuf parses many byte strings into *some* message; a model without a graph or opset is not ONNX.
    if not proto.HasField("graph") or not proto.opset_import:
        raise ModelFormatError(f"{label}: not an ONNX model (no graph or no opset_import)")
    if base_dir is not None and _has_external_data(proto):
        try:
            from onnx.external_data_helper import load_external_data_for_model

            load_external_data_for_model(proto, base_dir)
        except _ONNX_ERRORS as e:
            raise ModelFormatError(f"{label}: cannot load external tensor data: {e}") from None
    return proto, label


def _has_external_data(proto: Any) -> bool:
    return any(t.data_location == TensorProto.EXTERNAL for t in proto.graph.initializer)


def _check(proto: Any, label: str, order: list[int]) -> None:
    """Run onnx.checker with the rules onnxruntime and OpenVINO do not enforce relaxed (``onnx_lenient``); ops
    unknown to snippets are reported (all of them) as unsupported before a format error."""
    checked, _ = checkable(proto, order)
    try:
        onnx.checker.check_model(checked)
    except _ONNX_ERRORS as e:
        _raise_unknown_ops(proto, label, order)
        msg = str(e).strip().splitlines()
        raise ModelFormatError(f"{label}: the ONNX checker rejects the model: {' '.join(msg)[:600]}") from None


def _is_unknown_op(node: Any, opset: int) -> bool:
    """Neither a converter nor an ONNX function body reads ``node``."""
    return node.domain not in ("", "ai.onnx") or (node.op_type not in CONVERTERS
                                                  and not has_function_body(node.op_type, opset))


def _raise_unknown_ops(proto: Any, label: str, order: Sequence[int]) -> None:
    """One UnsupportedOpError naming every op of the graph that snippets cannot read (op type, nodes, count)."""
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    nodes = proto.graph.node
    unknown = [(i, nodes[i]) for i in order if _is_unknown_op(nodes[i], opset)]
    if unknown:
        raise _unsupported_ops(label, unknown)


def _node_label(node: Any, index: int) -> str:
    return node.name or f"{node.op_type}_{index}"


SUPPORTED_OPS_HINT = "the supported ops are listed by `snippets ops` and in docs/onnx_conformance.md"


def _unsupported_ops(label: str, unknown: Sequence[tuple[int, Any]]) -> UnsupportedOpError:
    """The error for nodes no converter reads: one node is named with its op; several are grouped by op type
    (in order of first use) with their count and first node names."""
    if len(unknown) == 1:
        index, node = unknown[0]
        name = _node_label(node, index)
        if node.domain not in ("", "ai.onnx"):
            why = f"op domain '{node.domain}' is not supported (only the default ONNX domain is)"
        else:
            why = f"ONNX op {node.op_type} is not supported by snippets"
        message = f"{label}: node '{name}' ({node.op_type}): {why}; {SUPPORTED_OPS_HINT}"
    else:
        groups: dict[tuple[str, str], list[str]] = {}
        for index, node in unknown:
            domain = "" if node.domain == "ai.onnx" else node.domain
            groups.setdefault((domain, node.op_type), []).append(_node_label(node, index))
        parts = []
        for (domain, op_type), names in groups.items():
            op = f"{op_type} (domain '{domain}')" if domain else op_type
            shown = ", ".join(f"'{n}'" for n in names[:3]) + (", ..." if len(names) > 3 else "")
            parts.append(f"{op} x{len(names)} ({shown})")
        message = (f"{label}: {len(groups)} op types in {len(unknown)} nodes are not supported by snippets: "
                   f"{'; '.join(parts)}; {SUPPORTED_OPS_HINT}")
    return UnsupportedOpError(message, [(n.domain, n.op_type, _node_label(n, i)) for i, n in unknown])


# ----------------------------------------------------------------------------------------------------------
# Per-node context
# ----------------------------------------------------------------------------------------------------------


class NodeContext:
    """What a converter sees of one ONNX node: its inputs, attributes and opset, and a node factory."""

    def __init__(self, reader: _GraphReader, node: Any, index: int, opset: int) -> None:
        self.reader = reader
        self.proto = node
        self.op_type: str = node.op_type
        self.name: str = _node_label(node, index)
        self.opset: int = opset
        self.attrs: dict[str, Any] = {a.name: a for a in node.attribute}
        self.created: list[Node] = []

    # --- messages ------------------------------------------------------------------------------------
    def where(self) -> str:
        return f"{self.reader.label}: node '{self.name}' ({self.op_type})"

    def unsupported(self, what: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{self.where()}: {what}")

    def bad_attr(self, attr: str, value: Any, why: str = "is not supported") -> UnsupportedOpError:
        return UnsupportedOpError(f"{self.where()}: attribute '{attr}' = {value!r} {why}")

    # --- inputs -----------------------------------------------------------------------------------------
    @property
    def n_inputs(self) -> int:
        """Number of inputs, not counting trailing omitted optional ones."""
        names = list(self.proto.input)
        while names and not names[-1]:
            names.pop()
        return len(names)

    def has_input(self, i: int) -> bool:
        return i < len(self.proto.input) and bool(self.proto.input[i])

    def input(self, i: int) -> Output:
        if not self.has_input(i):
            raise ModelFormatError(f"{self.where()}: required input {i} is missing")
        return self.reader.value(self.proto.input[i], self)

    def opt_input(self, i: int) -> Output | None:
        return self.input(i) if self.has_input(i) else None

    def inputs(self) -> list[Output]:
        return [self.input(i) for i in range(self.n_inputs)]

    def value(self, out: Output | None) -> np.ndarray | None:
        """The value of ``out`` if known while reading (a constant or foldable), else None."""
        if out is None:
            return None
        if isinstance(out.node, Constant):
            return out.node.value
        from snippets_core.ir.const_eval import constant_value

        return constant_value(out)

    def const_input(self, i: int, what: str) -> np.ndarray | None:
        """Input ``i``'s value when present; UnsupportedOpError if present but not known before run time."""
        out = self.opt_input(i)
        if out is None:
            return None
        v = self.value(out)
        if v is None:
            raise self.unsupported(f"input {i} ({what}) must be a constant, it is computed at run time")
        return v

    # --- attributes ---------------------------------------------------------------------------------------
    def attr(self, name: str, default: Any = None) -> Any:
        a = self.attrs.get(name)
        if a is None:
            return default
        try:
            value = onnx.helper.get_attribute_value(a)
        except _ONNX_ERRORS as e:
            raise ModelFormatError(f"{self.where()}: attribute '{name}' cannot be read: {e}") from None
        if isinstance(value, bytes):
            return value.decode("utf-8", errors="replace")
        if isinstance(value, onnx.TensorProto):
            return self.reader.tensor_value(value, f"attribute '{name}' of {self.where()}")
        if isinstance(value, onnx.GraphProto) or (isinstance(value, list) and value and
                                                   isinstance(value[0], onnx.GraphProto)):
            raise self.unsupported(f"attribute '{name}' holds a subgraph; control flow is not supported")
        if isinstance(value, list):
            return [v.decode("utf-8", errors="replace") if isinstance(v, bytes) else v for v in value]
        return value

    def attr_ints(self, name: str, default: Sequence[int] | None = None) -> list[int] | None:
        v = self.attr(name)
        return list(default) if v is None and default is not None else (None if v is None else [int(x) for x in v])

    def check_attr(self, name: str, allowed: Sequence[Any], default: Any) -> Any:
        v = self.attr(name, default)
        if v not in allowed:
            raise self.bad_attr(name, v, f"is not supported (supported: {', '.join(repr(a) for a in allowed)})")
        return v

    # --- building -----------------------------------------------------------------------------------------
    def make(self, type_name: str, *inputs: Output | Node, **attrs: Any) -> Node:
        """Create an op-set node (named after the ONNX node), folding it if all its inputs are constants."""
        cls = OPS.get(type_name)
        if cls is None:
            raise self.unsupported(f"needs the op {type_name}, which is not in this build's op set")
        node_name = f"{self.name}/{type_name}_{len(self.created)}"
        try:
            node = cls(*inputs, **attrs, name=node_name)
        except ShapeInferenceError as e:
            raise ShapeInferenceError(f"{self.where()}: {e}") from None
        except (TypeError, ValueError) as e:
            raise ModelFormatError(f"{self.where()}: cannot build {type_name}: {e}") from None
        folded = self.reader.fold(node)
        self.created.append(folded)
        return folded

    def const(self, value: Any, like: Output | ElementType | str | None = None) -> Output:
        """A Constant; ``like`` gives its element type (an output's, or an element type)."""
        et = like.element_type if isinstance(like, Output) else like
        if et is not None and et is not ElementType.dynamic:
            arr = np.asarray(value, dtype=ElementType.parse(et).numpy)
        else:
            arr = np.asarray(value)
        node = Constant(arr, name=f"{self.name}/Constant_{len(self.created)}")
        self.created.append(node)
        return node.output

    def i64(self, values: Sequence[int] | np.ndarray) -> Output:
        return self.const(np.asarray(values, dtype=np.int64).reshape(-1), ElementType.i64)


# ----------------------------------------------------------------------------------------------------------
# Graph reading
# ----------------------------------------------------------------------------------------------------------


class _GraphReader:
    def __init__(self, proto: Any, label: str, fold_constants: bool, order: list[int]) -> None:
        self.proto = proto
        self.label = label
        self.order = order
        self.fold_constants = fold_constants
        self.opset = _default_opset(proto, label)
        self.values: dict[str, Output] = {}
        # ConstantOfShape folds by (shape, fill value, type): the onnx package's light models make every weight
        # a fill (ResNet-50: 239 of them, 102 MiB, 46 MiB of distinct ones); equal fills share one read-only array
        self.fills: dict[tuple[Any, ...], np.ndarray] = {}

    def tensor_value(self, t: Any, what: str) -> np.ndarray:
        element_type_of(t.data_type, what)
        try:
            arr = numpy_helper.to_array(t)
        except _ONNX_ERRORS as e:
            raise ModelFormatError(f"{self.label}: {what}: tensor data cannot be decoded: {e}") from None
        return np.asarray(arr)

    def value(self, name: str, ctx: NodeContext) -> Output:
        try:
            return self.values[name]
        except KeyError:
            raise ModelFormatError(f"{ctx.where()}: input '{name}' is not produced by any node, initializer or "
                                   "graph input") from None

    def fold(self, node: Node) -> Node:
        """Replace ``node`` by a Constant when all its inputs are Constants (and it is cheap enough)."""
        if not self.fold_constants or node.type_name in _NOT_FOLDABLE or not node.inputs or len(node.outputs) != 1:
            return node
        out = node.outputs[0]
        if not all(isinstance(i.source.node, Constant) for i in node.inputs):
            known = known_shape_vector(out)  # a shape vector whose entries come from static dims
            if known is None:
                return node
            node.disconnect()
            return Constant(known, name=node.name)
        if (out.shape.is_static and out.element_type not in (ElementType.dynamic, ElementType.string)
                and out.shape.size * out.element_type.size > _FOLD_LIMIT_BYTES):
            return node
        fill_key = None
        if node.type_name == "ConstantOfShape":
            fill = node.value  # type: ignore[attr-defined]
            dims = tuple(node.inputs[0].source.node.value.reshape(-1).tolist())  # type: ignore[attr-defined]
            fill_key = (dims, fill.dtype.str, fill.tobytes(), out.element_type)
        value = self.fills.get(fill_key) if fill_key is not None else None
        if value is None:
            try:
                (value,) = node.evaluate(*[i.source.node.value for i in node.inputs])  # type: ignore[attr-defined]
            except _FOLD_ERRORS:  # an op that cannot run on these constants stays in the graph, fails at run time
                return node
            value = np.asarray(value)
            if out.element_type not in (ElementType.dynamic, ElementType.string):
                value = value.astype(out.element_type.numpy, copy=False)
            if fill_key is not None:
                value.setflags(write=False)
                self.fills[fill_key] = value
        inputs = [i.source.node.value for i in node.inputs]  # type: ignore[attr-defined]
        node.disconnect()
        folded = Constant(value, name=node.name)
        if node.type_name == "DequantizeLinear":  # the int8 FullyConnected reads the weight as quantized
            mark_dequantized_constant(folded, node, inputs)
        return folded

    def read(self) -> Model:
        g = self.proto.graph
        initializers = {}
        for t in g.initializer:
            arr = self.tensor_value(t, f"initializer '{t.name}'")
            c = Constant(arr, name=t.name)
            c.outputs[0].names.add(t.name)
            initializers[t.name] = c
            self.values[t.name] = c.outputs[0]
        for t in g.sparse_initializer:
            raise UnsupportedOpError(f"{self.label}: sparse initializer '{t.values.name}' is not supported")
        params: list[Parameter] = []
        for vi in g.input:
            if vi.name in initializers:  # ir_version < 4: initializers are listed as inputs too
                continue
            et, shape = _value_info_type(vi, f"{self.label}: graph input '{vi.name}'")
            p = Parameter(et, shape, name=vi.name)
            params.append(p)
            self.values[vi.name] = p.outputs[0]
        _raise_unknown_ops(self.proto, self.label, self.order)
        for index in self.order:
            self._convert(g.node[index], index)
        results = []
        for vi in g.output:
            if vi.name not in self.values:
                raise ModelFormatError(f"{self.label}: graph output '{vi.name}' is not produced by any node")
            results.append(Result(self.values[vi.name], name=vi.name))
        if not results:
            raise ModelFormatError(f"{self.label}: the graph has no outputs")
        return Model(results, params, name=g.name or "model")

    def _convert(self, node: Any, index: int, opset: int | None = None) -> None:
        opset = self.opset if opset is None else opset
        if node.domain in ("", "ai.onnx") and node.op_type not in CONVERTERS and has_function_body(node.op_type, opset):
            self._expand(node, index, opset)
            return
        if node.domain not in ("", "ai.onnx") or node.op_type not in CONVERTERS:
            raise _unsupported_ops(self.label, [(index, node)])
        ctx = NodeContext(self, node, index, opset)
        if ctx.opset < MIN_OPSET:
            _check_legacy_schema(ctx)
        try:
            outs = CONVERTERS[node.op_type](ctx)
        except SnippetsError as e:
            msg = str(e)
            if ctx.where() not in msg:
                raise type(e)(f"{ctx.where()}: {msg}") from None
            raise
        present = [(i, n) for i, n in enumerate(node.output) if n]
        for i, name in present:
            if i >= len(outs) or outs[i] is None:
                raise ctx.unsupported(f"output {i} ('{name}') is not supported")
            out = outs[i]
            out.names.add(name)
            self.values[name] = out
        # The node that produces the ONNX node's first output carries the ONNX node's name.
        if present and outs and outs[0] is not None:
            first = outs[0].node
            if first in ctx.created and not isinstance(first, Parameter):
                first.name = ctx.name

    def _expand(self, node: Any, index: int, opset: int) -> None:
        """Convert an op that ONNX defines as a function through the nodes of its body."""
        name = _node_label(node, index)
        where = f"{self.label}: node '{name}' ({node.op_type})"
        inputs = [self.values.get(n) if n else None for n in node.input]
        inner_nodes, body_opset = expand_function(node, opset, inputs, name, where)
        for i, inner in enumerate(inner_nodes):
            if not inner.name:
                inner.name = f"{name}/{inner.op_type}_{i}"
            self._convert(inner, i, body_opset)


# Ops whose pre-opset-7 versions the converters handle: legacy broadcast/axis of binary ops, channel-wise
# PRelu slopes, is_test of BatchNormalization/Dropout; the others differ only by the ignorable
# consumed_inputs attribute.
LEGACY_HANDLED = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less", "Gemm", "PRelu",
    "BatchNormalization", "AveragePool", "MaxPool", "Dropout", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Neg",
    "Abs", "Sqrt", "Ceil", "Floor", "Reciprocal", "Elu", "LeakyRelu", "HardSigmoid", "Selu", "Clip", "Sum", "Max",
    "Min", "Mean",
})


def _check_legacy_schema(ctx: NodeContext) -> None:
    """Models importing an opset older than MIN_OPSET are read only where the op's schema is the one
    in effect at MIN_OPSET too (e.g. Not-1) or the converter handles the older version (LEGACY_HANDLED),
    so no unhandled pre-7 semantics can slip through."""
    try:
        then = onnx.defs.get_schema(ctx.op_type, ctx.opset).since_version
        at_min = onnx.defs.get_schema(ctx.op_type, MIN_OPSET).since_version
    except _ONNX_ERRORS:
        raise ctx.unsupported(f"ONNX has no schema for this op at opset {ctx.opset}") from None
    if then != at_min and ctx.op_type not in LEGACY_HANDLED:
        raise ctx.unsupported(f"opset {ctx.opset} selects the pre-opset-{MIN_OPSET} version {then} of "
                              f"{ctx.op_type}, which is not supported (opsets {MIN_OPSET} and newer are)")


def _default_opset(proto: Any, label: str) -> int:
    for o in proto.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    raise ModelFormatError(f"{label}: the model imports no default-domain ONNX opset")


def _value_info_type(vi: Any, what: str) -> tuple[ElementType, Shape]:
    t = vi.type
    kind = t.WhichOneof("value")
    if kind is None or (kind == "tensor_type" and t.tensor_type.elem_type == TensorProto.UNDEFINED):
        raise ModelFormatError(f"{what} has no element type")
    if kind != "tensor_type":
        raise UnsupportedOpError(f"{what} is a {kind}; only tensors are supported")
    tt = t.tensor_type
    et = element_type_of(tt.elem_type, what)
    if not tt.HasField("shape"):
        return et, Shape(None)
    # A named dim (dim_param "batch_size", "s0") is a symbolic dim: inputs that share a name share the size.
    dims = [d.dim_value if d.HasField("dim_value") else SymDim.of(d.dim_param) if d.dim_param else None
            for d in tt.shape.dim]
    return et, Shape(dims)


def read_onnx(source: Any, *, check: bool = True, fold_constants: bool = True) -> Model:
    """Read an ONNX model (a path, the bytes of a file, or an ``onnx.ModelProto``) into a Model.

    ``check`` runs ``onnx.checker`` first (its complaints become ModelFormatError), without the rules that
    onnxruntime and OpenVINO do not enforce either (``onnx_lenient.RELAXATIONS``: missing shapes and output
    types are inferred, unsorted nodes are sorted, model-local functions are inlined). ``fold_constants``
    replaces nodes whose inputs are all constants by their values.
    """
    proto, label = load_model_proto(source)
    proto = inline_local_functions(proto, label)
    order = topological_order(proto.graph, label)
    if check:
        _check(proto, label, order)
    try:
        return _GraphReader(proto, label, fold_constants, order).read()
    except (ModelFormatError, UnsupportedOpError):
        raise
    except SnippetsError as e:
        # A shape or type conflict inside a model file is a problem with the file.
        raise ModelFormatError(str(e) if label in str(e) else f"{label}: {e}") from None


# The converters live in a companion module; importing it fills CONVERTERS.
CONVERTERS: dict[str, Callable[[NodeContext], Sequence[Output | None]]] = {}

from snippets_core.frontends import onnx_converters as _converters

CONVERTERS.update(_converters.CONVERTERS)
EXPANDED_OPS: tuple[str, ...] = (
    "Attention", "BlackmanWindow", "CausalConvWithState", "CenterCropPad", "HammingWindow", "HannWindow",
    "NegativeLogLikelihoodLoss", "RMSNormalization", "RotaryEmbedding", "SoftmaxCrossEntropyLoss", "SwiGLU",
)
"""ONNX ops without a converter that read_onnx reads through their ONNX function bodies, verified by the
node tests (any other op with a function body is tried the same way, and fails with a typed error naming
the body's op that is not supported)."""
SUPPORTED_OPS: tuple[str, ...] = tuple(sorted(set(CONVERTERS) | set(EXPANDED_OPS)))
"""ONNX op types (default domain) that read_onnx reads: by a converter or through a function body."""

__all__ = ["CONVERTERS", "EXPANDED_OPS", "MIN_OPSET", "SUPPORTED_OPS", "NodeContext", "element_type_of", "load_model_proto",
           "read_onnx"]

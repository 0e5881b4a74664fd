"""Where the ONNX frontend is more lenient than ``onnx.checker``: the rules onnxruntime and OpenVINO do not enforce.

``onnx.checker.check_model`` stops at the first rule a model breaks, so a rule cannot be switched off by catching
its message. Instead :func:`checkable` gives the checker a copy of the model in which each relaxed rule is
satisfied by a placeholder that the (non-full) checker only looks at for that rule (a shape of rank 0 where
the shape is missing, a graph name, ...); every other rule (single static assignment, unique names, known
op domains and schemas, attribute types, tensor data) still runs on the real model. The reader then infers
what the placeholders stood for: a missing output shape or element type comes from the producing node, a
missing input shape becomes a dynamic rank.

docs/onnx_conformance.md ("What is relaxed") lists each rule with the peers' behaviour.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from snippets_core.errors import ModelFormatError

try:
    import onnx
    from onnx import TensorProto
except ImportError:  # pragma: no cover - onnx is a dependency of snippets-core
    onnx = None  # type: ignore[assignment]


def _node_label(node: Any, index: int) -> str:
    return node.name or f"{node.op_type}_{index}"


def _tensor_without_shape(vi: Any) -> bool:
    return vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape")


def _output_without_type(vi: Any) -> bool:
    """No type at all, or a tensor type whose element type is UNDEFINED (onnxruntime refuses the latter,
    OpenVINO reads both); the producing node says what the type is."""
    t = vi.type
    return t.WhichOneof("value") is None or (t.HasField("tensor_type") and t.tensor_type.elem_type == 0)


def _initializers_not_in_inputs(proto: Any) -> list[Any]:
    if proto.ir_version >= 4:
        return []
    listed = {vi.name for vi in proto.graph.input}
    return [t for t in proto.graph.initializer if t.name not in listed]


def _fix_shapeless_io(proto: Any) -> None:
    for vi in (*proto.graph.input, *proto.graph.output):
        if _tensor_without_shape(vi):
            vi.type.tensor_type.shape.SetInParent()  # rank 0: the non-full checker does not read dims


def _fix_untyped_outputs(proto: Any) -> None:
    for vi in proto.graph.output:
        if _output_without_type(vi):
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
            vi.type.tensor_type.shape.SetInParent()


def _fix_initializers_not_in_inputs(proto: Any) -> None:
    for t in _initializers_not_in_inputs(proto):
        proto.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))


@dataclass(frozen=True)
class Relaxation:
    """One onnx.checker rule the frontend does not enforce, because onnxruntime and OpenVINO do not."""

    name: str
    #: the checker's rule, and what the reader does instead
    rule: str
    #: whether ``proto`` breaks the rule
    applies: Callable[[Any], bool]
    #: satisfies the rule on a copy handed to the checker
    fix: Callable[[Any], None]


RELAXATIONS: tuple[Relaxation, ...] = (
    Relaxation(
        "shapeless-graph-io",
        "graph inputs and outputs need a shape; an output's shape is inferred from its producer, an input "
        "without one has a dynamic rank",
        lambda p: any(_tensor_without_shape(vi) for vi in (*p.graph.input, *p.graph.output)),
        _fix_shapeless_io,
    ),
    Relaxation(
        "untyped-graph-output",
        "graph outputs need a type with an element type; the producer's type is used",
        lambda p: any(_output_without_type(vi) for vi in p.graph.output),
        _fix_untyped_outputs,
    ),
    Relaxation(
        "unnamed-graph",
        "the graph needs a non-empty name; the model is called 'model'",
        lambda p: not p.graph.name,
        lambda p: setattr(p.graph, "name", "model"),
    ),
    Relaxation(
        "unset-ir-version",
        "the model needs an ir_version; the newest one this onnx knows is assumed",
        lambda p: p.ir_version == 0,
        lambda p: setattr(p, "ir_version", onnx.IR_VERSION),
    ),
    Relaxation(
        "initializer-not-in-inputs",
        "before ir_version 4 every initializer is also a graph input; initializers are constants either way",
        lambda p: bool(_initializers_not_in_inputs(p)),
        _fix_initializers_not_in_inputs,
    ),
)
"""The relaxed rules, each applied to the checker's copy only when the model breaks it."""


def inline_local_functions(proto: Any, label: str) -> Any:
    """``proto`` with calls of its model-local functions (``ModelProto.functions``, what exporters write for
    modules) replaced by their bodies, as onnxruntime does; ``proto`` itself when it has none."""
    if not proto.functions:
        return proto
    try:
        from onnx.inliner import inline_local_functions as inline

        return inline(proto)
    except (ValueError, TypeError, RuntimeError, onnx.checker.ValidationError) as e:
        raise ModelFormatError(f"{label}: cannot inline the model's local functions: {e}") from None


def topological_order(graph: Any, label: str) -> list[int]:
    """Indices of ``graph``'s nodes with every node after the producers of its inputs, keeping the file's order
    where it allows (onnxruntime and OpenVINO sort unsorted graphs too). ModelFormatError for an input no node,
    initializer or graph input defines, and for a cycle."""
    nodes = list(graph.node)
    defined = {vi.name for vi in graph.input} | {t.name for t in graph.initializer} | {""}
    available = set(defined)
    for node in nodes:  # the common case: already sorted
        if any(n not in available for n in node.input):
            break
        available.update(node.output)
    else:
        return list(range(len(nodes)))
    producers: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for name in node.output:
            if name:
                producers.setdefault(name, i)
    waiting_on: list[set[int]] = []
    consumers: dict[int, list[int]] = {}
    for i, node in enumerate(nodes):
        deps = set()
        for name in node.input:
            if name in defined:
                continue
            if name not in producers:
                raise ModelFormatError(f"{label}: node '{_node_label(node, i)}' ({node.op_type}) reads '{name}', "
                                       "which no node, initializer or graph input defines")
            deps.add(producers[name])
        waiting_on.append(deps)
        for d in deps:
            consumers.setdefault(d, []).append(i)
    ready = [i for i, deps in enumerate(waiting_on) if not deps]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for c in consumers.get(i, ()):
            waiting_on[c].discard(i)
            if not waiting_on[c]:
                heapq.heappush(ready, c)
    if len(order) != len(nodes):
        stuck = [i for i in range(len(nodes)) if waiting_on[i]]
        names = ", ".join(f"'{_node_label(nodes[i], i)}' ({nodes[i].op_type})" for i in stuck[:5])
        more = f" and {len(stuck) - 5} more" if len(stuck) > 5 else ""
        raise ModelFormatError(f"{label}: the graph has a cycle: nodes {names}{more} depend on each other's outputs")
    return order


def checkable(proto: Any, order: list[int]) -> tuple[Any, list[str]]:
    """(the model to give onnx.checker, names of the relaxations applied): ``proto`` itself when it breaks no
    relaxed rule and is sorted, else a copy with the relaxed rules satisfied and the nodes in ``order``."""
    applied = [r for r in RELAXATIONS if r.applies(proto)]
    unsorted = order != list(range(len(proto.graph.node)))
    if not applied and not unsorted:
        return proto, []
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for r in applied:
        r.fix(copy)
    if unsorted:
        nodes = [copy.graph.node[i] for i in order]
        sorted_nodes = [onnx.NodeProto() for _ in nodes]
        for dst, src in zip(sorted_nodes, nodes):
            dst.CopyFrom(src)
        del copy.graph.node[:]
        copy.graph.node.extend(sorted_nodes)
    return copy, [r.name for r in applied] + (["unsorted-nodes"] if unsorted else [])

"""Small graph helpers the data-flow passes share: find the body, look ops up by type name, name new nodes.

Passes dispatch on ``type_name`` (through :data:`~snippets_core.ir.node.OPS`) rather than importing op
classes, so a pass module loads even when an op family it rewrites is not installed.
"""

from __future__ import annotations

from typing import Any

from snippets_core.errors import UnsupportedOpError
from snippets_core.ir.model import Model
from snippets_core.ir.node import OPS, Node, Output
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.port_hints import FULL_DIM, set_port_descriptor
from snippets_core.ir.shape import normalize_axis

#: ops whose presence makes a body "domain sensitive": the lowering may not collapse or reorder their dims
DOMAIN_SENSITIVE_OPS = ("Transpose", "Softmax", "MatMul", "Broadcast", "GroupNormalization", "SnippetsReshape",
                        "Reshape")
#: ops that break the implicit broadcasting Canonicalization relies on
BROADCAST_SENSITIVE_OPS = ("GroupNormalization", "SnippetsReshape", "Reshape")


def body_of(ir: Model | Subgraph) -> Model:
    """The Model a data-flow pass works on: a Model itself, or a Subgraph's body."""
    if isinstance(ir, Subgraph):
        return ir.body
    if isinstance(ir, Model):
        return ir
    raise TypeError(f"a data-flow pass runs on a Model or a Subgraph, got {type(ir).__name__}")


def op_class(type_name: str) -> type[Node]:
    """The op class registered under ``type_name``; a typed error if that op family is not loaded."""
    try:
        return OPS[type_name]
    except KeyError:
        raise UnsupportedOpError(f"op {type_name} is not registered (is its op module imported?)") from None


def make(type_name: str, *inputs: Output | Node, **attrs: Any) -> Node:
    """Create an op by type name."""
    return op_class(type_name)(*inputs, **attrs)


def nodes_of_type(model: Model, *type_names: str) -> list[Node]:
    """The body's nodes of the given types, in topological order (a snapshot: safe to edit while looping)."""
    return [n for n in model.get_ordered_ops() if n.type_name in type_names]


def has_ops(model: Model, type_names: tuple[str, ...]) -> bool:
    return any(n.type_name in type_names for n in model.get_ordered_ops())


def has_domain_sensitive_ops(model: Model) -> bool:
    return has_ops(model, DOMAIN_SENSITIVE_OPS)


def has_broadcast_sensitive_ops(model: Model) -> bool:
    return has_ops(model, BROADCAST_SENSITIVE_OPS)


def is_quantized(model: Model) -> bool:
    return has_ops(model, ("FakeQuantize",))


def replace_output(old: Output, new: Output) -> None:
    """Route every consumer of ``old`` to ``new`` and carry the tensor names over (Results keep theirs)."""
    new.names |= old.names
    for inp in old.targets:
        if inp.node is not new.node:
            inp.replace_source(new)


def unique_name(model: Model, base: str) -> str:
    """``base`` if no node of ``model`` has that name, else ``base_1``, ``base_2``, ... (deterministic)."""
    taken = {n.name for n in model.get_ordered_ops()}
    if base not in taken:
        return base
    i = 1
    while f"{base}_{i}" in taken:
        i += 1
    return f"{base}_{i}"


def set_reduce_subtensors(reduce: Node) -> None:
    """Record the subtensor of a snippets reduction on its ports for the LinearIR (OpenVINO
    ``ReduceBase::compute_and_set_reduce_subtensors``): 1 for the dims before ``axis``, FULL_DIM from it on,
    so one emitter invocation sees whole reduced rows. Nothing is recorded while the rank is dynamic."""
    shape = reduce.input_shape(0)
    if not shape.rank_is_static:
        return
    axis = normalize_axis(reduce.axis, shape.rank)  # type: ignore[attr-defined]
    subtensor = [1] * axis + [FULL_DIM] * (shape.rank - axis)
    set_port_descriptor(reduce, "in", 0, subtensor=subtensor)
    set_port_descriptor(reduce, "out", 0, subtensor=subtensor)

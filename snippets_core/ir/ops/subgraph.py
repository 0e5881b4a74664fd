"""Subgraph: a node that holds a body Model, the unit the Tokenizer creates and a target compiles."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from snippets_core.errors import ShapeInferenceError, SnippetsError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node, Output
from snippets_core.ir.shape import Shape


#: rt_info key on a Subgraph whose body Constants a target released once it packed them (value: why)
CONSTANTS_RELEASED = "SnippetsConstantsReleased"
#: constants this small stay: they cost nothing and keep the body readable
_KEEP_ELEMENTS = 64


class ConstantsReleasedError(SnippetsError):
    """A Subgraph whose body constants were released (the target keeps only its packed copy) was evaluated."""


def release_constants(sg: Subgraph, why: str) -> int:
    """Replace the large Constants of ``sg``'s body by zero-stride placeholders of the same shape and type (no
    memory), after a target packed them into a kernel of its own, so the weights are held once; evaluating the
    body afterwards is a ConstantsReleasedError, never a result from the placeholders. Returns the bytes freed."""
    freed = 0
    for node in sg.body.get_ordered_ops():
        value = getattr(node, "value", None)
        if node.type_name != "Constant" or not isinstance(value, np.ndarray) or value.size <= _KEEP_ELEMENTS:
            continue
        freed += value.nbytes
        node.value = np.broadcast_to(np.zeros((), value.dtype), value.shape)  # type: ignore[attr-defined]
    sg.rt_info[CONSTANTS_RELEASED] = why
    return freed


def release_input_constants(sg: Subgraph, indices: Sequence[int], why: str) -> int:
    """As :func:`release_constants`, for the Constants outside ``sg`` that feed its inputs ``indices`` (a
    FullyConnected weight that ExtractConstants moved out of the body) and that ``sg`` alone reads: the target
    packed them and passes its copy instead. Returns the bytes freed (0, and ``sg`` unmarked, when none was)."""
    freed = 0
    for i in indices:
        node = sg.inputs[i].source.node
        value = getattr(node, "value", None)
        if node.type_name != "Constant" or not isinstance(value, np.ndarray) or value.size <= _KEEP_ELEMENTS:
            continue
        if any(t.node is not sg for out in node.outputs for t in out.targets):
            continue  # another consumer reads the original
        freed += value.nbytes
        node.value = np.broadcast_to(np.zeros((), value.dtype), value.shape)  # type: ignore[attr-defined]
    if freed:
        sg.rt_info[CONSTANTS_RELEASED] = why
    return freed


class Subgraph(Node):
    """A fused region. Input ``i`` feeds ``body.parameters[i]``; output ``j`` is ``body.results[j]``.

    Until a target generates a kernel for it, a Subgraph evaluates its body on the reference
    interpreter, so a tokenized model runs before any target exists.
    """

    ATTRS = ("body",)

    def __init__(self, *inputs: Output | Node, body: Model, name: str | None = None) -> None:
        self.body = body
        super().__init__(*inputs, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        params = self.body.parameters
        if len(params) != len(self.inputs):
            raise ShapeInferenceError(f"Subgraph has {len(self.inputs)} inputs but its body has {len(params)} parameters")
        changed = False
        for p, inp in zip(params, self.inputs):
            if p.element_type != inp.element_type:
                raise ShapeInferenceError(
                    f"input {inp.index} is {inp.element_type} but body parameter {p.name} is {p.element_type}")
            if p.shape != inp.shape:
                p.shape = inp.shape
                changed = True
        if changed:
            self.body.validate()
        return [(r.outputs[0].element_type, r.outputs[0].shape) for r in self.body.results]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        from snippets_core.ir.evaluate import evaluate_model

        if CONSTANTS_RELEASED in self.rt_info:
            raise ConstantsReleasedError(f"Subgraph '{self.name}' cannot run on its reference: its body constants "
                                         f"were released ({self.rt_info[CONSTANTS_RELEASED]})")
        outs = evaluate_model(self.body, {p.name: a for p, a in zip(self.body.parameters, args)})
        return [outs[r.name] for r in self.body.results]

    def clone_with_new_inputs(self, inputs: Sequence[Output | Node]) -> Node:
        new = Subgraph(*inputs, body=self.body.clone(), name=self.name)
        new.rt_info = dict(self.rt_info)
        return new

    @property
    def body_ops(self) -> list[Node]:
        """The body's computing ops (no Parameters, Constants or Results)."""
        return [n for n in self.body.get_ordered_ops() if n.type_name not in ("Parameter", "Constant", "Result")]

    def attrs(self) -> dict[str, Any]:
        return {"body": self.body}

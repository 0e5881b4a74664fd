"""The run-time check of the broadcasts that shape inference related symbolically.

Two different symbolic dims meeting in a broadcast (an Add of ``[B, S]`` and ``[B, T]``) make the broadcast atom
``bcast(S,T)`` (see :mod:`snippets_core.ir.shape`): shape inference assumed that ``S == T`` or that one of them is
1, as numpy broadcasting requires. Nothing else checks it before a kernel runs (a kernel lowered for ``S == T``
would read past the shorter input), so a call binds the symbols from its input shapes and checks every atom's
operands here, with an :class:`~snippets_core.errors.InputError` naming the op, both dims, their sizes and the
model inputs they come from.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from snippets_core.errors import InputError
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node
from snippets_core.ir.shape import Shape, SymDim, broadcast_constraints, broadcast_operands


@dataclass(frozen=True)
class _Check:
    """One broadcast atom: its operands and the op where they first met (for the message)."""

    operands: tuple[SymDim, ...]
    origin: str


class BroadcastChecks:
    """``check(arrays)`` raises an InputError when the dims of a call's inputs do not broadcast where the model
    relates them by a broadcast atom. ``inputs``: the model input names in the order of the checked arrays.
    Falsy when the model has no broadcast atom whose operands its inputs give (then a call pays nothing)."""

    def __init__(self, model: Model, inputs: Sequence[str]) -> None:
        shapes = {p.name: p.shape for p in model.parameters}
        #: plain symbol -> (position in the checked list, axis, input name) where a call reads it
        self.sources: dict[str, tuple[int, int, str]] = {}
        for k, name in enumerate(inputs):
            shape = shapes.get(name)
            for axis, sym in enumerate(shape.syms or () if shape is not None else ()):
                if sym is not None and sym.name is not None and broadcast_operands(sym) is None:
                    self.sources.setdefault(sym.name, (k, axis, name))
        nodes = list(_nodes(model))
        self.checks: list[_Check] = []
        for atom in broadcast_constraints(o.shape for n in nodes for o in n.outputs):
            operands = broadcast_operands(atom)
            assert operands is not None
            if all(op.base_names <= self.sources.keys() for op in operands):
                self.checks.append(_Check(operands, _origin(nodes, atom)))

    def __bool__(self) -> bool:
        return bool(self.checks)

    def check(self, arrays: Sequence[tuple[int, np.ndarray]]) -> None:
        env = {n: arrays[k][1].shape[axis] for n, (k, axis, _) in self.sources.items()}
        for c in self.checks:
            values = [op.evaluate(env) for op in c.operands]
            if len({v for v in values if v != 1}) > 1:
                raise InputError(self._message(c, values))

    def _message(self, c: _Check, values: list[int | None]) -> str:
        def where(op: SymDim) -> str:
            if op.name in self.sources:
                return f"input {self.sources[op.name][2]!r} dim {self.sources[op.name][1]}"
            return ", ".join(f"{n} from input {self.sources[n][2]!r} dim {self.sources[n][1]}"
                             for n in sorted(op.base_names))

        dims = " with ".join(f"{op} = {v} ({where(op)})" for op, v in zip(c.operands, values))
        return f"{c.origin} broadcasts {dims}: they must be equal, or one of them 1"


def _nodes(model: Model) -> Iterator[Node]:
    """Every node of ``model`` and of the bodies of its Subgraphs (where a tokenized broadcast now is)."""
    for n in model.get_ordered_ops():
        yield n
        body = getattr(n, "body", None)
        if isinstance(body, Model):
            yield from _nodes(body)


def _uses(shape: Shape, name: str) -> bool:
    return any(sym is not None and name in sym.names for sym in shape.syms or ())


def _origin(nodes: list[Node], atom: SymDim) -> str:
    """The op that made ``atom``: the first whose output uses it and whose inputs do not (inside a Subgraph's body
    when it was tokenized: the Subgraph only carries it)."""
    name = atom.name
    assert name is not None
    for n in nodes:
        made = any(_uses(o.shape, name) for o in n.outputs) and not any(_uses(i.shape, name) for i in n.inputs)
        if made and not isinstance(getattr(n, "body", None), Model):
            return f"{n.type_name} '{n.name}'"
    return f"the model ({atom})"

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
from typing import Any

import numpy as np

from snippets_core.errors import InputError, SnippetsError
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node
from snippets_core.ir.shape import Shape, SymDim, assumed_broadcasts, broadcast_constraints, broadcast_operands


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
        #: plain symbol -> (position in the checked list, axis, input name) where a call reads it
        self.sources = input_sources(model, inputs)
        nodes = list(model_nodes(model))
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


def input_sources(model: Model, inputs: Sequence[str]) -> dict[str, tuple[int, int, str]]:
    """Plain symbol -> (position of the input in ``inputs``, axis, input name) of the first input dim that is it."""
    shapes = {p.name: p.shape for p in model.parameters}
    sources: dict[str, tuple[int, int, str]] = {}
    for k, name in enumerate(inputs):
        shape = shapes.get(name)
        for axis, sym in enumerate(shape.syms or () if shape is not None else ()):
            if sym is not None and sym.name is not None and broadcast_operands(sym) is None:
                sources.setdefault(sym.name, (k, axis, name))
    return sources


def model_nodes(model: Model) -> Iterator[Node]:
    """Every node of ``model`` and of the bodies of its Subgraphs (where a tokenized broadcast now is)."""
    for n in model.get_ordered_ops():
        yield n
        body = getattr(n, "body", None)
        if isinstance(body, Model):
            yield from model_nodes(body)


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


# --- broadcasts of dims that no model input gives: checked at the step --------------------------------------------
#: the name of a dim known only at run time, read from a step's input: the producing value and the axis
_RUNTIME_DIM = "{value}[{axis}]"


@dataclass(frozen=True)
class _Pair:
    """Two dims that a node broadcasts together, as the step's input dims give them."""

    a: SymDim | int
    b: SymDim | int
    origin: str


class StepBroadcastChecks:
    """The broadcasts a step's node assumes about dims that only its input arrays give: a dim that shape inference
    could not know (``?``: computed from data by a Reshape, Expand, NonZero, Range, ...) meeting another dim, or a
    symbolic dim meeting a static one (the symbol must be 1 or that size). Made at compile time by running the
    node's shape inference (its Subgraph body's, for a Subgraph) again with each unknown dim of its inputs named
    after the value and axis it is read from (``Expand_0[1]``), recording what :func:`broadcast_dim` assumed.
    ``check(arrays)`` binds those names (and the symbols the inputs carry) from the arrays' shapes and raises an
    :class:`InputError` naming the op and both dims before the step runs, so no kernel sees such shapes. Falsy
    when the node assumes nothing that a step must check (two different symbols meeting are broadcast atoms,
    which :class:`BroadcastChecks` checks on the model's inputs)."""

    def __init__(self, node: Node) -> None:
        from snippets_core.ir.ops.subgraph import Subgraph

        #: name -> (input, axis) where a call reads it
        self.sources: dict[str, tuple[int, int]] = {}
        self.where: dict[str, str] = {}  # name -> what it is, for the message
        self.runtime: set[str] = set()  # the names of dims known only at run time
        shapes: list[Shape] = []
        for i, inp in enumerate(node.inputs):
            shape = inp.shape
            if shape.dims is None:
                shapes.append(shape)
                continue
            src = inp.source
            value = src.node.name if len(src.node.outputs) == 1 else f"{src.node.name}:{src.index}"
            dims: list[SymDim | int] = []
            for axis, d in enumerate(shape.sym_dims):
                if d is None:
                    name = _RUNTIME_DIM.format(value=value, axis=axis)
                    self.where[name] = f"dim {axis} of {src.node.type_name} '{value}'"
                    self.runtime.add(name)
                    d = SymDim.of(name)
                if isinstance(d, SymDim) and d.name is not None:
                    self.sources.setdefault(d.name, (i, axis))
                    self.where.setdefault(d.name, f"dim {axis} of '{value}'")
                dims.append(d)
            shapes.append(Shape(dims))
        self.pairs: list[_Pair] = []
        if self.runtime and not _may_meet(node):
            # one dynamic input and inputs of static dims 1 where it has unknown ones (a conv's weights and bias):
            # no broadcast to check, so no clone of the body to infer (a CNN of unnamed dims has dozens of such steps)
            return
        try:
            if not self.runtime:  # every dim is known or symbolic already: inference as it is, nothing cloned
                self._inferred_pairs(node)
            elif isinstance(node, Subgraph):
                self._body_pairs(node, shapes)
            else:
                self._node_pairs(node, shapes)
        except SnippetsError:  # inference that cannot take the named dims: the step's own checks stay the only ones
            self.pairs = []

    def _keep(self, pairs: list[tuple[SymDim | int, SymDim | int]], origin: str) -> None:
        for a, b in pairs:
            if isinstance(a, int) or isinstance(b, int) or (a.names | b.names) & self.runtime:
                self.pairs.append(_Pair(a, b, origin))

    def _inferred_pairs(self, node: Node) -> None:
        from snippets_core.ir.ops.subgraph import Subgraph

        # infer() returns what the outputs already hold (the model is inferred), so nothing changes here; a node of
        # one input broadcasts nothing
        with assumed_broadcasts() as pairs:
            for n in node.body.get_ordered_ops() if isinstance(node, Subgraph) else [node]:  # type: ignore
                if len(n.inputs) > 1:
                    seen = len(pairs)
                    n.infer()
                    where = f" (in Subgraph '{node.name}')" if n is not node else ""
                    self._keep(pairs[seen:], f"{n.type_name} '{n.name}'{where}")

    def _node_pairs(self, node: Node, shapes: list[Shape]) -> None:
        from snippets_core.ir.ops.io import Constant, Parameter

        stand_ins = [Constant(i.source.node.value) if isinstance(i.source.node, Constant)  # type: ignore[attr-defined]
                     else Parameter(i.element_type, s) for i, s in zip(node.inputs, shapes)]
        with assumed_broadcasts() as pairs:
            node.clone_with_new_inputs([s.outputs[0] for s in stand_ins])
        self._keep(pairs, f"{node.type_name} '{node.name}'")

    def _body_pairs(self, sg: Node, shapes: list[Shape]) -> None:
        body = sg.body.clone()  # type: ignore[attr-defined]
        for p, shape in zip(body.parameters, shapes):
            p.shape = shape
        with assumed_broadcasts() as pairs:
            for n in body.get_ordered_ops():
                seen = len(pairs)
                n.revalidate()
                self._keep(pairs[seen:], f"{n.type_name} '{n.name}' (in Subgraph '{sg.name}')")

    def __bool__(self) -> bool:
        return bool(self.pairs)

    def check(self, arrays: Sequence[np.ndarray]) -> None:
        env = {n: arrays[i].shape[axis] for n, (i, axis) in self.sources.items()}
        for p in self.pairs:
            a = p.a if isinstance(p.a, int) else p.a.evaluate(env)
            b = p.b if isinstance(p.b, int) else p.b.evaluate(env)
            if a is not None and b is not None and a != b and 1 not in (a, b):
                raise InputError(f"{p.origin} broadcasts {self._dim(p.a, a)} with {self._dim(p.b, b)}: they must "
                                 "be equal, or one of them 1")

    def _dim(self, d: SymDim | int, value: int) -> str:
        if isinstance(d, int):
            return f"the static dim {d}"
        if d.name is not None and d.name in self.where:
            text = self.where[d.name]
            return f"{text} = {value} (known only at run time)" if d.name in self.runtime else f"{d} = {value} ({text})"
        return f"{d} = {value}"


def _may_meet(node: Node) -> bool:
    """Whether two dynamic inputs of ``node``, or a dynamic input's unknown dim and a static dim > 1 of another input
    (right-aligned), may meet in a broadcast."""
    dims = [i.shape.dims for i in node.inputs]
    dynamic = [d for d in dims if d is None or None in d]
    if len(dynamic) != 1:
        return len(dynamic) > 1
    (dyn,) = dynamic
    if dyn is None:  # a rank not known: nothing to name (the op's reference names what does not broadcast)
        return False
    unknown = {k - len(dyn) for k, d in enumerate(dyn) if d is None}  # counted from the innermost, as numpy aligns
    return any(d is not None and d > 1 and k - len(s) in unknown for s in dims if s is not dyn for k, d in enumerate(s))


class CheckedStep:
    """A step's executor behind its :class:`StepBroadcastChecks` (everything else, such as ``describe`` or
    ``last_placement``, is the executor's)."""

    def __init__(self, run: Any, checks: StepBroadcastChecks) -> None:
        self._run, self._checks = run, checks

    def __call__(self, args: list[np.ndarray], *outs: Any) -> Any:
        self._checks.check(args)
        return self._run(args, *outs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._run, name)

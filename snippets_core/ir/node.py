"""Nodes and their ports: the edges of the graph IR.

A :class:`Node` has input ports (:class:`Input`, each fed by exactly one :class:`Output`) and output
ports (:class:`Output`, each with an element type, a shape and an ordered list of consumers). Ops are
subclasses of ``Node``; each declares its attributes in ``ATTRS``, infers its outputs in
:meth:`Node.infer` and computes its numpy reference in :meth:`Node.evaluate`.

Convention for op constructors: ``Op(*inputs, <attributes as keywords>, name=None)``. The generic
:meth:`Node.clone_with_new_inputs` relies on it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

import numpy as np

from snippets_core.errors import ShapeInferenceError, SnippetsError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.shape import Shape, SymValue

OPS: dict[str, type[Node]] = {}
"""Every op class by its ``type_name`` (filled as op modules are imported)."""

_ids = itertools.count()


class Output:
    """An output port of a node: the source of an edge."""

    __slots__ = ("_targets", "element_type", "index", "names", "node", "shape")

    def __init__(self, node: Node, index: int, element_type: ElementType, shape: Shape) -> None:
        self.node = node
        self.index = index
        self.element_type = element_type
        self.shape = shape
        self._targets: list[Input] = []
        self.names: set[str] = set()

    @property
    def targets(self) -> list[Input]:
        """The input ports this output feeds, in the order they were connected."""
        return list(self._targets)

    def get_target_inputs(self) -> list[Input]:
        return list(self._targets)

    @property
    def rank(self) -> int:
        return self.shape.rank

    def replace(self, new: Output) -> None:
        """Reconnect every consumer of this output to ``new``."""
        for inp in list(self._targets):
            inp.replace_source(new)

    def __repr__(self) -> str:
        return f"{self.node.name}:{self.index}<{self.element_type}{self.shape}>"


class Input:
    """An input port of a node: the end of an edge."""

    __slots__ = ("_source", "index", "node")

    def __init__(self, node: Node, index: int, source: Output) -> None:
        self.node = node
        self.index = index
        self._source = source
        source._targets.append(self)

    @property
    def source(self) -> Output:
        return self._source

    @property
    def element_type(self) -> ElementType:
        return self._source.element_type

    @property
    def shape(self) -> Shape:
        return self._source.shape

    def replace_source(self, new: Output) -> None:
        self._source._targets.remove(self)
        self._source = new
        new._targets.append(self)

    def __repr__(self) -> str:
        return f"{self.node.name}.in{self.index}<-{self._source!r}"


def as_output(value: Output | Node) -> Output:
    if isinstance(value, Output):
        return value
    if isinstance(value, Node):
        if len(value.outputs) != 1:
            raise SnippetsError(f"node {value.name} has {len(value.outputs)} outputs; pass one of them")
        return value.outputs[0]
    raise TypeError(f"expected a node output, got {type(value).__name__}")


class Node:
    """A node of the graph IR. Subclasses are the ops."""

    type_name: ClassVar[str] = "Node"
    ATTRS: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "type_name" not in cls.__dict__:
            cls.type_name = cls.__name__
        if not cls.__dict__.get("_abstract", False):
            OPS.setdefault(cls.type_name, cls)

    def __init__(self, *inputs: Output | Node, name: str | None = None) -> None:
        self.id = next(_ids)
        self.name = name or f"{self.type_name}_{self.id}"
        self.rt_info: dict[str, Any] = {}
        self.inputs: list[Input] = [Input(self, i, as_output(v)) for i, v in enumerate(inputs)]
        self.outputs: list[Output] = []
        self.revalidate()

    # --- what an op defines -------------------------------------------------------------------
    def infer(self) -> list[tuple[ElementType, Shape]]:
        """Validate the inputs and return (element type, shape) for each output."""
        raise NotImplementedError(f"{type(self).__name__} does not define infer()")

    def evaluate(self, *args: np.ndarray) -> Sequence[np.ndarray]:
        """The numpy reference: input arrays in, one array per output out."""
        raise NotImplementedError(f"{type(self).__name__} has no reference evaluation")

    def sym_value(self, value: Callable[[int], SymValue | None]) -> SymValue | None:
        """The elements of this node's output when it is a small integer tensor (rank 0 or 1) whose
        entries are known as ints or symbolic dims before run time (a shape vector: ``ShapeOf``, and the
        Gather/Concat/Slice/arithmetic ops that torch exports build targets with), else None.

        ``value(i)`` gives input ``i``'s elements the same way (computed only when asked). Ops that carry
        shape vectors override this; see :func:`snippets_core.ir.const_eval.shape_value`.
        """
        return None

    # --- generic machinery --------------------------------------------------------------------
    def attrs(self) -> dict[str, Any]:
        return {a: getattr(self, a) for a in self.ATTRS}

    def revalidate(self) -> None:
        """Re-run shape and type inference, keeping the Output objects (and their consumers)."""
        try:
            specs = self.infer()
        except ShapeInferenceError as e:
            raise ShapeInferenceError(f"{self.type_name} node '{self.name}': {e}") from None
        for i, (et, shape) in enumerate(specs):
            if i < len(self.outputs):
                self.outputs[i].element_type = et
                self.outputs[i].shape = shape
            else:
                self.outputs.append(Output(self, i, et, shape))
        if len(self.outputs) > len(specs):
            if any(o._targets for o in self.outputs[len(specs):]):
                raise ShapeInferenceError(f"{self.type_name} node '{self.name}' lost a consumed output")
            del self.outputs[len(specs):]

    validate_and_infer_types = revalidate

    def input_value(self, i: int) -> Output:
        return self.inputs[i].source

    def input_values(self) -> list[Output]:
        return [i.source for i in self.inputs]

    @property
    def output(self) -> Output:
        """The single output of a one-output node."""
        return as_output(self)

    def input_shape(self, i: int) -> Shape:
        return self.inputs[i].source.shape

    def input_type(self, i: int) -> ElementType:
        return self.inputs[i].source.element_type

    def consumers(self) -> list[Node]:
        """Distinct consumer nodes of all outputs, in a stable order."""
        seen: dict[int, Node] = {}
        for o in self.outputs:
            for t in o._targets:
                seen.setdefault(t.node.id, t.node)
        return list(seen.values())

    def clone_with_new_inputs(self, inputs: Sequence[Output | Node]) -> Node:
        new = type(self)(*inputs, **self.attrs(), name=self.name)
        new.rt_info = dict(self.rt_info)
        return new

    def set_input(self, i: int, value: Output | Node) -> None:
        self.inputs[i].replace_source(as_output(value))

    def disconnect(self) -> None:
        """Detach this node's inputs from their sources (the node is being removed)."""
        for inp in self.inputs:
            if inp in inp._source._targets:
                inp._source._targets.remove(inp)

    def __repr__(self) -> str:
        ins = ", ".join(f"{i.source.node.name}:{i.source.index}" for i in self.inputs)
        return f"{self.type_name} {self.name}({ins})"


def replace_node(old: Node, new: Node | Sequence[Output]) -> None:
    """Make consumers of ``old``'s outputs use ``new``'s outputs (same count) and detach ``old``."""
    new_outs = new.outputs if isinstance(new, Node) else list(new)
    if len(new_outs) != len(old.outputs):
        raise SnippetsError(f"cannot replace {old.name}: {len(old.outputs)} outputs vs {len(new_outs)}")
    for o, n in zip(old.outputs, new_outs):
        if o is not n:
            n.names |= o.names
            o.replace(n)
    old.disconnect()


def topological_sort(roots: Iterable[Node], first: Iterable[Node] = ()) -> list[Node]:
    """Nodes reachable from ``roots`` (through inputs), producers before consumers.

    Deterministic: a depth-first walk in input order; nodes in ``first`` come first when they are
    reachable (used to keep Parameters in their declared order).
    """
    order: list[Node] = []
    done: set[int] = set()
    for f in first:
        if f.id not in done:
            done.add(f.id)
            order.append(f)
    for root in roots:
        if root.id in done:
            continue
        stack: list[tuple[Node, int]] = [(root, 0)]
        visiting = {root.id}
        while stack:
            node, i = stack[-1]
            if i < len(node.inputs):
                stack[-1] = (node, i + 1)
                src = node.inputs[i].source.node
                if src.id in done:
                    continue
                if src.id in visiting:
                    raise SnippetsError(f"the graph has a cycle through node {src.name}")
                visiting.add(src.id)
                stack.append((src, 0))
            else:
                stack.pop()
                visiting.discard(node.id)
                done.add(node.id)
                order.append(node)
    return order

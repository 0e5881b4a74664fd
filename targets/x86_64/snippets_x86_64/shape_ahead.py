"""A new input shape's per-shape call states of every dynamic Subgraph, made up front in one burst.

A dynamic Subgraph's executor makes, on the first call of a shape, that shape's runtime-parameter block and call
states (``DynamicKernelExecutor._prepare``, a runtime-M FC's ``plan``): about 23 us each with the interpreter's data
warm, but ~140 us each when made one Subgraph at a time between the kernels, which evict that data. So the first
dynamic Subgraph that meets a new shape binds the model's symbolic dims (``batch``, ``seq``: the frontend's
``dim_param`` names, kept through shape inference as ``Shape.syms``) from its input shapes, evaluates the input
shapes of every other dynamic Subgraph of the model (connected to it) from those symbols, and has each make its
state for them at once (as ``cache.ShapeCache.ahead`` does for a CNN's primitives). A Subgraph whose input dims are not all
known from the bound symbols is left to make its state on its own call, as before; a shape an executor refuses, or one that
would need a kernel of its own, is left to that call too (it raises or compiles there, not here).
"""

from __future__ import annotations

import weakref
from typing import Any

from snippets_core.errors import SnippetsError
from snippets_core.ir.shape import SymDim

#: a new shape makes the states of the model's other dynamic Subgraphs up front (off: each makes its own on its
#: first call of the shape, as before)
ENABLED = True

#: the executor of each dynamic Subgraph that can make a shape's state ahead (``prepare_ahead``), by node id
_BY_NODE: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def follow(sg: Any, executor: Any) -> Any:
    """Register ``executor`` (of the Subgraph node ``sg``) to make new shapes' states ahead; returns it."""
    if executor is not None and hasattr(executor, "prepare_ahead"):
        executor._ahead_node = sg
        executor._ahead_others = None
        _BY_NODE[sg.id] = executor
    return executor


def _input_dims(node: Any) -> list[tuple[Any, ...]] | None:
    dims = []
    for inp in node.inputs:
        if not inp.shape.rank_is_static:
            return None
        dims.append(inp.shape.sym_dims)
    return dims


def _others(executor: Any) -> list[tuple[Any, list[tuple[Any, ...]]]]:
    """The other registered executors of ``executor``'s model (the Subgraphs its Subgraph is connected to, both
    ways: a BERT layer's K and V projections read what the Q projection reads), each with its input dims; found
    on its first new shape and kept on the executor (a cycle between executors the collector frees with them)."""
    found = executor._ahead_others
    if found is None:
        found = []
        start = executor._ahead_node
        seen = {id(start)}
        todo = [start]
        while todo:  # breadth first: a Subgraph before the ones further away
            node = todo.pop(0)
            near = [inp.source.node for inp in node.inputs]
            near += [inp.node for out in node.outputs for inp in out.targets]
            for nxt in near:
                if id(nxt) in seen:
                    continue
                seen.add(id(nxt))
                todo.append(nxt)
                other = _BY_NODE.get(nxt.id)
                dims = _input_dims(nxt) if other is not None else None
                if dims is not None:
                    found.append((other, dims))
        executor._ahead_others = found
    return found


def bind(dims: list[tuple[Any, ...]], shapes: tuple[tuple[int, ...], ...]) -> dict[str, int]:
    """The values of the plain symbols (``S``, not ``S+1``) in ``dims`` that ``shapes`` give."""
    env: dict[str, int] = {}
    for ds, shape in zip(dims, shapes):
        if len(ds) != len(shape):
            continue
        for d, v in zip(ds, shape):
            name = d.name if type(d) is SymDim else None
            if name is not None:
                env.setdefault(name, v)
    return env


def shapes_of(dims: list[tuple[Any, ...]], env: dict[str, int]) -> tuple[tuple[int, ...], ...] | None:
    """``dims`` evaluated with the symbols of ``env`` (None when a dim is not known from them)."""
    out = []
    for ds in dims:
        shape = []
        for d in ds:
            if type(d) is int:
                shape.append(d)
                continue
            v = d.evaluate(env) if type(d) is SymDim else None
            if v is None or v < 0:
                return None
            shape.append(v)
        out.append(tuple(shape))
    return tuple(out)


def ahead(executor: Any, shapes: tuple[tuple[int, ...], ...]) -> int:
    """``executor`` met the new input ``shapes``: the model's other executors make their states for the shapes
    these give them. Returns how many states were made."""
    node = getattr(executor, "_ahead_node", None)
    if node is None:
        return 0
    dims = _input_dims(node)
    env = bind(dims, shapes) if dims is not None else {}
    if not env:
        return 0
    made = 0
    for other, other_dims in _others(executor):
        sh = shapes_of(other_dims, env)
        if sh is None:
            continue
        try:
            made += bool(other.prepare_ahead(sh))
        except SnippetsError:  # a shape it refuses: its own call, if it comes, says so
            continue
    return made

"""The reference interpreter: evaluate a Model node by node with each op's numpy reference."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from snippets_core.errors import InputError, SnippetsError, UnsupportedOpError
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node


def evaluate_node(node: Node, args: list[np.ndarray]) -> list[np.ndarray]:
    """Run one node's reference; errors from numpy are re-raised naming the node."""
    try:
        outs = node.evaluate(*args)
    except SnippetsError:
        raise
    except NotImplementedError:
        raise UnsupportedOpError(f"op {node.type_name} (node '{node.name}') has no reference evaluation") from None
    except Exception as e:  # numpy raises many kinds; the user needs to know which node failed
        if isinstance(e, ValueError) and getattr(node, "auto_broadcast", None) == "numpy":
            _check_broadcast(node, args)  # dims that do not broadcast are the caller's input, named as such
        raise SnippetsError(f"evaluating {node.type_name} node '{node.name}' failed: {type(e).__name__}: {e}") from e
    if len(outs) != len(node.outputs):
        raise SnippetsError(f"{node.type_name} node '{node.name}' produced {len(outs)} outputs, "
                            f"expected {len(node.outputs)}")
    return [np.asarray(o) for o in outs]


def _check_broadcast(node: Node, args: list[np.ndarray]) -> None:
    """An InputError naming the first dims of ``args`` that do not broadcast (numpy's rule: right-aligned, equal or
    1), for an element-wise op whose reference failed: the sizes come from the caller's inputs."""
    rank = max(np.ndim(a) for a in args)
    for axis in range(rank):
        # (input, its own axis, size) of every input that has this right-aligned axis and is not 1 there
        dims = [(i, axis - rank + np.ndim(a), np.shape(a)[axis - rank + np.ndim(a)]) for i, a in enumerate(args)
                if axis - rank + np.ndim(a) >= 0 and np.shape(a)[axis - rank + np.ndim(a)] != 1]
        other = next((d for d in dims if d[2] != dims[0][2]), None)
        if other is not None:
            (i, ai, a), (j, aj, b) = dims[0], other
            src = [node.inputs[k].source.node.name for k in (i, j)]
            raise InputError(f"{node.type_name} '{node.name}' broadcasts dim {ai} of '{src[0]}' = {a} with dim {aj} "
                             f"of '{src[1]}' = {b}: they must be equal, or one of them 1")


def evaluate_model(model: Model, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Evaluate ``model`` on ``inputs`` (by Parameter name); returns arrays by Result name.

    Values are dropped as soon as their last consumer has run, so peak memory stays near the
    largest live set rather than the sum of all tensors.
    """
    from snippets_core.ir.ops.io import Parameter, Result

    order = model.get_ordered_ops()
    remaining: dict[int, int] = {}
    for n in order:
        for i in n.inputs:
            remaining[i.source.node.id] = remaining.get(i.source.node.id, 0) + 1
    values: dict[int, list[np.ndarray]] = {}
    out: dict[str, np.ndarray] = {}
    for n in order:
        if isinstance(n, Parameter):
            if n.name not in inputs:
                raise InputError(f"model '{model.name}': missing input '{n.name}'")
            values[n.id] = [np.asarray(inputs[n.name])]
            continue
        args = [values[i.source.node.id][i.source.index] for i in n.inputs]
        values[n.id] = evaluate_node(n, args)
        for i in n.inputs:
            sid = i.source.node.id
            remaining[sid] -= 1
            if remaining[sid] == 0:
                values.pop(sid, None)
        if isinstance(n, Result):
            out[n.name] = values[n.id][0]
    return {r.name: out[r.name] for r in model.results}

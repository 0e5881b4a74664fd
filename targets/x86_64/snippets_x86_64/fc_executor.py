"""Executors of FullyConnected Subgraphs: the packed weights made once and passed on every call, and a split of N
between the threads when the FC has one row (M = 1 cannot be split, so the parallel domain has one index).

``compile_subgraph`` calls :func:`fc_executor` on every Subgraph it compiled; a Subgraph without a packed weight
keeps its executor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from snippets_core.config import CompileConfig
from snippets_core.errors import SnippetsError
from snippets_core.ir.ops.io import Parameter
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.shape import Shape
from snippets_x86_64.brgemm_copy_b import MARK_PACKED_PASS, PANEL, packed_weight_body_inputs, packed_weights


#: rt_info key on an FC Subgraph whose one-row split along N could not be compiled: why (it runs whole)
SPLIT_N_SKIPPED = "SnippetsFCSplitNSkipped"


class PackedWeightExecutor:
    """Runs a FullyConnected Subgraph's executor with its constant weights replaced by their packed copies, made
    once at compile time and kept here (the on-disk kernel cache does not store them: the kernel reads whatever
    weight it is given, so the copies are recomputed when a model is compiled)."""

    def __init__(self, inner: Any, packed: dict[int, np.ndarray]) -> None:
        self.inner = inner
        self.packed = packed

    def __getattr__(self, name: str) -> Any:  # kernel, num_threads, ... of the executor it wraps
        return getattr(self.inner, name)

    def __call__(self, args: Sequence[Any], outs: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        ins = list(args)
        for i, w in self.packed.items():
            ins[i] = w
        return self.inner(ins, outs)


class SplitNExecutor:
    """An FC with one row on ``parts`` threads: each runs the kernel compiled for ``N / parts`` columns on its
    slice of the packed weight (whole panels, contiguous), of the inputs that vary along N (bias, residual) and of
    the output (contiguous too: there is one row)."""

    def __init__(self, parts: list[Any], packed: dict[int, np.ndarray], sliced: list[int], out_shapes: list[tuple],
                 out_types: list[np.dtype], width: int) -> None:
        from snippets_x86_64.runtime import POOL

        self.parts = parts
        self.pool = POOL
        self.width = width
        #: per part, the packed weights' slices (a part's panels are consecutive in the packed copy)
        self.weights = [{i: w.reshape(-1)[p * w.size // len(parts) : (p + 1) * w.size // len(parts)]
                         .reshape(parts[0].input_specs[i][1]) for i, w in packed.items()} for p in range(len(parts))]
        self.sliced = sliced
        self.out_shapes, self.out_types = out_shapes, out_types

    def __call__(self, args: Sequence[Any], outs: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        results = [o if o is not None else np.empty(s, t)
                   for o, s, t in zip(outs or [None] * len(self.out_shapes), self.out_shapes, self.out_types)]
        c = self.width
        tasks = []
        for p, ex in enumerate(self.parts):
            ins = [np.asarray(a)[..., p * c : (p + 1) * c] if i in self.sliced else a for i, a in enumerate(args)]
            for i, w in self.weights[p].items():
                ins[i] = w
            part_outs = [r[..., p * c : (p + 1) * c] for r in results]
            tasks.append(lambda ex=ex, ins=ins, part_outs=part_outs: ex(ins, part_outs))
        self.pool.run(tasks)
        return results


def _one_row(sg: Subgraph) -> tuple[int, int] | None:
    """(N, the A input's index) when ``sg`` is a static FC whose output has one row; else None."""
    body = sg.body
    if len(body.results) != 1 or not all(p.outputs[0].shape.is_static for p in body.parameters):
        return None
    out = body.results[0].inputs[0].shape
    if not out.is_static or math.prod(out.to_tuple()[:-1]) != 1:
        return None
    mms = [n for n in body.get_ordered_ops() if n.type_name == "MatMul"]
    if len(mms) != 1 or mms[0].inputs[0].source.node.type_name != "Parameter":
        return None
    return int(out[-1]), body.parameters.index(mms[0].inputs[0].source.node)  # type: ignore[arg-type]


def split_n(sg: Subgraph, config: CompileConfig, host: Any, packed: dict[int, np.ndarray]) -> SplitNExecutor | None:
    """A :class:`SplitNExecutor` for a one-row FC on several threads whose N splits into whole panels per thread;
    None otherwise."""
    from snippets_x86_64.runtime import KernelExecutor, _executor_options, _kernel_for, _specs

    found = _one_row(sg)
    if found is None or config.num_threads < 2 or len(packed) != 1:
        return None
    n, a_index = found
    parts = min(config.num_threads, n // PANEL)
    if parts < 2 or n % (parts * PANEL):
        return None
    width = n // parts
    (w_index,) = packed
    transposed = packed_weight_body_inputs(sg.body)[w_index]
    body = sg.body.clone()
    sliced = []
    for i, p in enumerate(body.parameters):
        dims = list(p.outputs[0].shape.to_tuple())
        if i == w_index:
            dims[-2 if transposed else -1] = width
        elif i != a_index and dims and dims[-1] == n:
            dims[-1] = width
            sliced.append(i)
        p.shape = Shape(dims)
    body.validate()
    part = Subgraph(*[Parameter(p.outputs[0].element_type, p.outputs[0].shape, name=p.name).outputs[0]
                      for p in body.parameters], body=body, name=f"{sg.name}/n_part")
    part.rt_info.update(sg.rt_info)
    kernel = _kernel_for(part, config, host, None)
    ins, outs = _specs(part)
    min_bytes, native = _executor_options(config)
    executors = [KernelExecutor(kernel, ins, outs, 1, min_bytes, native) for _ in range(parts)]
    full_outs = [(np.dtype(t), tuple(s[:-1]) + (n,)) for t, s in outs]
    return SplitNExecutor(executors, packed, sliced, [s for _, s in full_outs], [t for t, _ in full_outs], width)


def fc_executor(sg: Subgraph, executor: Any, config: CompileConfig, host: Any) -> Any:
    """``executor`` fed with the packed weights of ``sg`` (itself when ``sg`` has none or packing is disabled); a
    one-row FC on several threads is split along N instead."""
    if executor is None or MARK_PACKED_PASS in config.disabled_passes:
        return executor
    packed = packed_weights(sg)
    if not packed:
        return executor
    try:
        split = split_n(sg, config, host, packed)
    except SnippetsError as exc:  # the split is an optimization: the whole-N kernel is compiled and runs
        sg.rt_info[SPLIT_N_SKIPPED] = f"{type(exc).__name__}: {exc}"
        split = None
    return split if split is not None else PackedWeightExecutor(executor, packed)


__all__ = ["PackedWeightExecutor", "SplitNExecutor", "fc_executor", "split_n"]

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

from snippets_core.config import CompileConfig, ConfigError
from snippets_core.errors import SnippetsError
from snippets_core.ir.ops.io import Parameter
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.shape import Shape
from snippets_x86_64.brgemm_copy_b import MARK_PACKED_PASS, PANEL, packed_weight_body_inputs, packed_weights
from snippets_x86_64.runtime import POOL, _output_specs


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


#: fewest rows a thread gets when a dynamic-M FC's rows are split between threads
ROW_SPLIT_MIN = 16
_MISSING: Any = object()


class DynamicFCExecutor:
    """A FullyConnected Subgraph with dynamic dims (M: batch x sequence) over a ShapeSpecializingExecutor: the
    kernel of each input shape reads the packed weights; a shape that runs on the reference gets the original
    ones. SplitDimensionM cannot split a dynamic M at compile time, so when the input has one batch index and
    enough rows, the rows are split here between the threads: each runs the kernel specialized for its rows on
    its row slices of x, of the M-sized post-op inputs and of the output (contiguous: one batch index)."""

    def __init__(self, inner: Any, packed: dict[int, np.ndarray], a_index: int | None, threads: int) -> None:
        self.inner = inner
        self.packed = packed
        self.a_index = a_index
        self.threads = threads
        #: output specs by input shapes (shape inference on a body clone: once per shape, not per call)
        self._out_specs: dict[tuple, list] = {}

    def __getattr__(self, name: str) -> Any:  # executors, reasons, ... of the executor it wraps
        return getattr(self.inner, name)

    def _kernel(self, arrays: list[np.ndarray]) -> Any:
        """The KernelExecutor of these input shapes, or None when they run on the reference."""
        shapes = tuple(a.shape for a in arrays)
        ex = self.inner.executors.get(shapes, _MISSING)
        if ex is _MISSING:
            self.inner._check(arrays)
            ex = self.inner._specialize(shapes)
        return ex

    def _row_parts(self, arrays: list[np.ndarray]) -> list[slice]:
        if self.a_index is None or self.threads < 2:
            return []
        x = arrays[self.a_index]
        if x.ndim < 2 or math.prod(x.shape[:-2]) != 1 or x.shape[-2] < 2 * ROW_SPLIT_MIN:
            return []
        m = x.shape[-2]
        parts = min(self.threads, m // ROW_SPLIT_MIN)
        step = -(-m // parts)
        return [slice(r, min(r + step, m)) for r in range(0, m, step)]

    def __call__(self, args: Sequence[Any], outs: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        arrays = [a if isinstance(a, np.ndarray) else np.asarray(a) for a in args]
        rows = self._row_parts(arrays)
        m = arrays[self.a_index].shape[-2] if rows else 0  # type: ignore[index]
        parts = []
        for r in rows:
            # inputs with M rows (x, a residual) are cut; those broadcast along M (bias) are not
            part = [a[..., r, :] if a.ndim >= 2 and a.shape[-2] == m and math.prod(a.shape[:-2]) == 1 else a
                    for a in arrays]
            ex = self._kernel(part)
            if ex is None:
                parts = []
                break
            parts.append((ex, part, r))
        if not parts:
            ex = self._kernel(arrays)
            if ex is None:  # the reference evaluates the body: it must see the weights as they are
                return self.inner(arrays, outs)
            self.inner.last_placement = self.inner._on_target  # where this call ran (placement protocol)
            return ex([self.packed.get(i, a) for i, a in enumerate(arrays)], outs)
        shapes = tuple(a.shape for a in arrays)
        spec = self._out_specs.get(shapes)
        if spec is None:
            spec = self._out_specs[shapes] = _output_specs(self.inner.sg, shapes)
        results = [o if o is not None else np.empty(s, t)
                   for o, (t, s) in zip(outs or [None] * len(spec), spec)]
        tasks = []
        for ex, part, r in parts:
            ins = [self.packed.get(i, a) for i, a in enumerate(part)]
            tasks.append(lambda ex=ex, ins=ins, r=r: ex(ins, [o[..., r, :] for o in results]))
        POOL.run(tasks)
        self.inner.last_placement = self.inner._on_target
        return results


def _a_input(sg: Subgraph) -> int | None:
    """The body Parameter index of the FC's input x (the MatMul's A), or None."""
    mms = [n for n in sg.body.get_ordered_ops() if n.type_name == "MatMul"]
    if len(mms) != 1 or mms[0].inputs[0].source.node.type_name != "Parameter":
        return None
    return sg.body.parameters.index(mms[0].inputs[0].source.node)  # type: ignore[arg-type]


def _one_row(sg: Subgraph) -> tuple[int, int] | None:
    """(N, the A input's index) when ``sg`` is a static FC whose output has one row; else None."""
    body = sg.body
    if len(body.results) != 1 or not all(p.outputs[0].shape.is_static for p in body.parameters):
        return None
    out = body.results[0].inputs[0].shape
    if not out.is_static or math.prod(out.to_tuple()[:-1]) != 1:
        return None
    a_index = _a_input(sg)
    return None if a_index is None else (int(out[-1]), a_index)


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


def fc_executor(sg: Subgraph, executor: Any, config: CompileConfig, host: Any, split: bool = True) -> Any:
    """``executor`` fed with the packed weights of ``sg`` (itself when ``sg`` has none or packing is disabled); a
    one-row FC on several threads is split along N instead, a dynamic one along its rows (unless ``split`` is
    False: the debug executor runs the one kernel it instrumented)."""
    if executor is None or MARK_PACKED_PASS in config.disabled_passes:
        return executor
    from snippets_x86_64.runtime import ShapeSpecializingExecutor

    packed = packed_weights(sg)
    if not packed:
        return executor
    if isinstance(executor, ShapeSpecializingExecutor):
        return DynamicFCExecutor(executor, packed, _a_input(sg), config.num_threads)
    split_option = dict(config.target_options).get("fc_split_n", True)
    if not isinstance(split_option, bool):
        raise ConfigError(f"target_options.fc_split_n must be true or false, got {split_option!r}")
    if not split or not split_option:
        return PackedWeightExecutor(executor, packed)
    try:
        by_n = split_n(sg, config, host, packed)
    except SnippetsError as exc:  # the split is an optimization: the whole-N kernel is compiled and runs
        sg.rt_info[SPLIT_N_SKIPPED] = f"{type(exc).__name__}: {exc}"
        by_n = None
    return by_n if by_n is not None else PackedWeightExecutor(executor, packed)


__all__ = ["DynamicFCExecutor", "PackedWeightExecutor", "SplitNExecutor", "fc_executor", "split_n"]

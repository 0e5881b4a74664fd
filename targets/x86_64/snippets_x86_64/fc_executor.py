"""Executors of FullyConnected Subgraphs: the packed weights made once and passed on every call, and a split of N
between the threads when the FC has one row (M = 1 cannot be split, so the parallel domain has one index). A
dynamic M (batch x sequence) runs on one kernel that reads M from its runtime-parameter block
(:class:`RuntimeRowsFCExecutor`).

``compile_subgraph`` calls :func:`fc_executor` on every Subgraph it compiled; a Subgraph without a packed weight
keeps its executor.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from snippets_core.config import CompileConfig, ConfigError, int_option
from snippets_core.errors import InputError, SnippetsError, UnsupportedByTarget
from snippets_core.ir.ops.subgraph import Subgraph, release_input_constants
from snippets_core.ir.shape import SDim, Shape, SymDim
from snippets_x86_64.brgemm_copy_b import MARK_PACKED_PASS, PANEL, packed_weight_body_inputs, packed_weights
from snippets_x86_64.buffers import pooled_empty
from snippets_core.runtime.placement import Placement, fallback_reason
from snippets_x86_64.passes.brgemm_fc_blocking import DEFAULT_FC_M_BLOCK
from snippets_x86_64 import shape_ahead
from snippets_x86_64.runtime import POOL, TARGET_NAME, _address, _output_specs, fixed_subgraph


#: rt_info key on a static FC Subgraph whose rows could not be split into kernels of their own: why (it runs whole)
ROW_PARTS_SKIPPED = "SnippetsFCRowPartsSkipped"
#: rt_info key on an FC Subgraph whose split along N (one row, or a dynamic FC's smallest row block) could not be
#: compiled: why (it runs whole, or split along M)
SPLIT_N_SKIPPED = "SnippetsFCSplitNSkipped"


class PackedWeightExecutor:
    """Runs a FullyConnected Subgraph's executor with its constant weights replaced by their packed copies, made
    once at compile time and kept here (the on-disk kernel cache does not store them: the kernel reads whatever
    weight it is given, so the copies are recomputed when a model is compiled)."""

    def __init__(self, inner: Any, packed: dict[int, np.ndarray]) -> None:
        self.inner = inner
        self.packed = packed
        self._packed_items = tuple(packed.items())

    def __getattr__(self, name: str) -> Any:  # kernel, num_threads, ... of the executor it wraps
        return getattr(self.inner, name)

    def __call__(self, args: Sequence[Any], outs: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        ins = list(args)
        for i, w in self._packed_items:
            ins[i] = w
        return self.inner(ins, outs)


class SplitNExecutor:
    """An FC with one row on ``parts`` threads: each runs the kernel compiled for ``N / parts`` columns on its
    slice of the packed weight (whole panels, contiguous), of the inputs that vary along N (bias, residual) and of
    the output (contiguous too: there is one row), all started in one native dispatch
    (:class:`~snippets_x86_64.runtime.PartsLauncher`; a Python thread pool's hand-over cost more than the 768 x 768
    kernel itself)."""

    def __init__(self, parts: list[Any], packed: dict[int, np.ndarray], sliced: set[int], out_shapes: list[tuple],
                 out_types: list[np.dtype], width: int) -> None:
        from snippets_x86_64.runtime import PartsLauncher

        self.parts = parts
        self.launcher = PartsLauncher(parts)
        self.width = width
        #: per part, the packed weights' slices
        self.weights = _weight_slices(packed, len(parts), parts[0].input_specs)
        self.sliced = sliced
        self.out_shapes, self.out_types = out_shapes, out_types
        self.num_threads = len(parts)

    def __call__(self, args: Sequence[Any], outs: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        specs = self.parts[0].input_specs
        if len(args) != len(specs):
            raise InputError(f"the Subgraph takes {len(specs)} inputs, got {len(args)}")
        ins = []
        for i, a in enumerate(args):
            if i in self.weights[0]:
                ins.append(None)
                continue
            a = np.ascontiguousarray(a)
            dtype, shape = specs[i]
            want = (*shape[:-1], shape[-1] * len(self.parts)) if i in self.sliced else shape
            if a.dtype != dtype or a.shape != want:
                raise InputError(f"Subgraph input {i} must be {dtype}{list(want)}, got {a.dtype}{list(a.shape)}")
            ins.append(a)
        results = []
        for j, (s, t) in enumerate(zip(self.out_shapes, self.out_types)):
            o = outs[j] if outs is not None and outs[j] is not None else np.empty(s, t)
            if not (isinstance(o, np.ndarray) and o.dtype == t and o.shape == tuple(s) and o.flags.c_contiguous
                    and o.flags.writeable):
                raise InputError(f"output array {j} must be a writeable C-contiguous {np.dtype(t)}{list(s)}")
            results.append(o)
        base = [_address(a) if a is not None else 0 for a in (*ins, *results)]
        n_in = len(ins)
        ptrs = []
        for p in range(len(self.parts)):
            part = []
            for i, a in enumerate(ins):
                if a is None:
                    part.append(_address(self.weights[p][i]))
                elif i in self.sliced:  # one row: its column slice is contiguous
                    part.append(base[i] + p * self.width * a.itemsize)
                else:
                    part.append(base[i])
            part += [base[n_in + j] + p * self.width * r.itemsize for j, r in enumerate(results)]
            ptrs.append(part)
        self.launcher.launch(ptrs)
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
    found = _one_row(sg)
    if found is None:
        return None
    n, _ = found
    columns = _column_parts(sg, config, host, packed, n, "n_part")
    if columns is None:
        return None
    parts, sliced, width = columns
    full_outs = [(t, (*s[:-1], n)) for t, s in parts[0].output_specs]
    return SplitNExecutor(parts, packed, sliced, [s for _, s in full_outs], [t for t, _ in full_outs], width)


def _column_body(sg: Subgraph, config: CompileConfig, packed: dict[int, np.ndarray], n: int, suffix: str,
                 roles: list[str] | None = None, rows: SDim = 1) -> tuple[Subgraph, set[int], int, int] | None:
    """``sg`` cut to ``N / T`` columns (``T`` the threads, at most one per panel, N whole panels per thread): the
    Subgraph, the body inputs cut along N (bias, residual), the width and ``T``; with ``roles``, the row-indexed
    inputs folded to ``[rows, C]`` (``rows`` may be the runtime dim M). None when N does not split so, or x also
    feeds a post-op (``x + x @ W``: its columns are not the output's)."""
    threads = min(config.num_threads, n // PANEL)
    a_index = _a_input(sg)
    if (threads < 2 or n % (threads * PANEL) or len(packed) != 1 or a_index is None
            or len(sg.body.parameters[a_index].outputs[0].targets) != 1):
        return None
    width = n // threads
    (w_index,) = packed
    transposed = packed_weight_body_inputs(sg.body)[w_index]
    body = sg.body.clone()
    sliced = set()
    for i, p in enumerate(body.parameters):
        dims = list(p.outputs[0].shape.sym_dims)
        if i == w_index:
            dims[-2 if transposed else -1] = width
        elif i != a_index and dims and dims[-1] == n:
            dims[-1] = width
            sliced.add(i)
        if roles is not None:
            dims = _folded(dims, roles[i], rows)
        p.shape = Shape(dims)
    return fixed_subgraph(sg, body, suffix), sliced, width, threads


def _column_parts(sg: Subgraph, config: CompileConfig, host: Any, packed: dict[int, np.ndarray], n: int, suffix: str
                  ) -> tuple[list[Any], set[int], int] | None:
    """The single-thread KernelExecutors of the static ``sg`` cut to ``N / T`` columns (:func:`_column_body`), one
    per thread, the inputs cut along N and the width; None when N does not split so."""
    from snippets_x86_64.runtime import KernelExecutor, _executor_options, _kernel_for, _specs

    found = _column_body(sg, config, packed, n, suffix)
    if found is None:
        return None
    part, sliced, width, threads = found
    kernel = _kernel_for(part, config, host, None)
    ins, outs = _specs(part)
    min_bytes, native = _executor_options(config)
    return [KernelExecutor(kernel, ins, outs, 1, min_bytes, native) for _ in range(threads)], sliced, width


def _weight_slices(packed: dict[int, np.ndarray], parts: int, specs: list[tuple[np.dtype, tuple]]
                   ) -> list[dict[int, np.ndarray]]:
    """Per part, its slice of each packed weight (of a part's shape in ``specs``): a part's panels are consecutive
    in the packed copy."""
    return [{i: w.reshape(-1)[p * w.size // parts : (p + 1) * w.size // parts].reshape(specs[i][1])
             for i, w in packed.items()} for p in range(parts)]


def row_split_subgraph(sg: Subgraph, config: CompileConfig) -> Subgraph:
    """The Subgraph whose kernel a static FullyConnected ``sg`` runs: ``sg`` itself, or on several threads a copy
    whose M SplitDimensionM split into ``batch_m x new_m`` (``[.., M, K]`` -> ``[.., batch_m, new_m, K]``, the
    weight and bias get unit dims), so the kernel's parallel domain has an index per thread. The x86 target turns
    tokenization's ``fc_split_m_dimension`` off: the split lives here instead of in Reshapes around the Subgraph,
    since the split arrays are the caller's in the same memory order (the executor keeps ``sg``'s shapes and passes
    their addresses), and each Reshape step cost the model's call about a microsecond (18 of them on
    transformer_block at 2 threads)."""
    from snippets_core.passes.split_dimension_m import SplitDimensionM
    from snippets_core.tokenization import FULLY_CONNECTED

    knobs = dict(config.tokenization)
    concurrency = knobs.get("concurrency", config.num_threads)
    if (concurrency < 2 or not knobs.get("split_m_dimension", True) or SplitDimensionM.name in config.disabled_passes
            or not sg.rt_info.get(FULLY_CONNECTED)):
        return sg
    part = fixed_subgraph(sg, sg.body.clone(), "split_m")
    return part if SplitDimensionM(concurrency).run(part) else sg


ROW, WHOLE = "row", "whole"
#: the runtime dim of the rows (batch x sequence, folded) in the body a dynamic-M FC's one kernel is lowered from
ROWS = SymDim.of("M")
#: row counts whose per-thread executors a RuntimeRowsFCExecutor keeps (least recently used dropped: remade from
#: the configurator's block, never compiled)
ROW_SHAPES = 64


def _row_roles(sg: Subgraph, packed: dict[int, np.ndarray]) -> tuple[list[str], tuple[int, ...]] | str:
    """Per body Parameter, ``ROW`` (its leading dims are the FC's dynamic M dims: x, a residual) or ``WHOLE``
    (static, one row: the weight, a bias), and the shape of A's leading dims; or why an input is neither."""
    a_index = _a_input(sg)
    if a_index is None:
        return "the FC's input x is not a Subgraph input"
    params = [p.outputs[0].shape for p in sg.body.parameters]
    if not params[a_index].rank_is_static or params[a_index].rank < 2:
        return "x has no row dims"
    lead = params[a_index].sym_dims[:-1]
    if any(isinstance(d, int) and d != 1 for d in lead) or all(isinstance(d, int) for d in lead):
        return f"x's row dims {params[a_index]} are not dynamic dims and 1s"
    roles = []
    for i, shape in enumerate(params):
        dims = shape.sym_dims if shape.rank_is_static else None
        if i in packed or (dims is not None and shape.is_static and math.prod(shape.to_tuple()[:-1]) == 1):
            roles.append(WHOLE)
        elif dims is not None and len(dims) == len(lead) + 1 and dims[:-1] == lead and isinstance(dims[-1], int):
            roles.append(ROW)
        else:
            return f"input {i} of shape {shape} is neither row-indexed like x nor one row"
    results = [r.inputs[0].shape for r in sg.body.results]
    if any(not r.rank_is_static or r.sym_dims[:-1] != lead or not isinstance(r.sym_dims[-1], int)
           for r in results):
        return f"an output's shape ({', '.join(map(str, results))}) is not x's rows by N"
    return roles, tuple(1 if isinstance(d, int) else -1 for d in lead)


class _ColumnKernel:
    """The runtime-M kernel of a dynamic FC cut to ``N / T`` columns (:func:`_column_body`), for few rows on ``T``
    threads: each runs it on its consecutive panels of the packed weight and its columns of the bias and residual,
    so each streams ``1 / T`` of the weight (an M split gives every thread the whole weight for a few rows)."""

    def __init__(self, kernel: Any, configurator: Any, packed: dict[int, np.ndarray], roles: list[str],
                 sliced: set[int], width: int, threads: int, in_specs: list[tuple[np.dtype, tuple]],
                 out_specs: list[tuple[np.dtype, tuple]]) -> None:
        self.kernel = kernel
        self.configurator = configurator
        self.roles = roles
        #: the inputs cut along N (besides the weight): a bias, a residual
        self.sliced = sliced
        self.width = width
        self.threads = threads
        self.in_specs, self.out_specs = in_specs, out_specs
        #: per part, the packed weights' slices (a part's panels are consecutive in the packed copy)
        self.weights = _weight_slices(packed, threads, in_specs)
        #: per part and data position (inputs, then outputs), ``(k, offset)``: the part's address for one row is
        #: ``k * the array's + offset`` (a weight slice's own address; a column cut's offset into its row)
        self.one_row: list[list[tuple[int, int]]] = []
        for p in range(threads):
            part = []
            for i, (d, _) in enumerate(in_specs):
                if i in self.weights[p]:
                    part.append((0, self.weights[p][i].__array_interface__["data"][0]))
                else:
                    part.append((1, p * width * d.itemsize if i in sliced else 0))
            part += [(1, p * width * d.itemsize) for d, _ in out_specs]
            self.one_row.append(part)
        #: the row-indexed inputs cut along N (a residual): with several rows, copied per part
        self.row_sliced = [i for i in sorted(sliced) if roles[i] == ROW]


class _RowsPlan:
    """What a call of ``m`` rows runs: per part (first row, rows) and its single-chunk KernelExecutor, launched
    together (one native dispatch); ``columns``: the parts are the column cuts of :class:`_ColumnKernel`."""

    __slots__ = ("starts", "executors", "launcher", "columns")

    def __init__(self, starts: list[int], executors: list[Any], columns: bool) -> None:
        from snippets_x86_64.runtime import PartsLauncher

        self.starts = starts
        self.executors = executors
        self.launcher = PartsLauncher(executors) if len(executors) > 1 else None
        self.columns = columns


class RuntimeRowsFCExecutor:
    """A FullyConnected Subgraph of a dynamic M (rows: batch x sequence) on **one kernel for every M**: the body is
    lowered with its row-indexed inputs folded to ``[M, C]`` (M a runtime dim), so the kernel reads M from its
    runtime-parameter block: ``M // 128`` full row blocks in a runtime loop (the static packed micro-kernel) and
    one tail block of ``M % 128`` rows on runtime register tiles (whole 6-row tiles in a loop, the rows left on a
    variant picked at run time). FC rows are independent, so on several threads each runs the kernel on its
    consecutive rows (the configurator's block for its row count); fewer than ``ROW_SPLIT_MIN`` rows per thread
    (the one-row FC of a classifier or a decoding step) run split along N instead (:class:`_ColumnKernel`), as the
    static one-row FC does. The weight (packed), the bias and the other one-row inputs are passed whole; nothing
    is compiled after compile time: a new M costs the runtime-parameter block and the call states of its parts."""

    def __init__(self, kernel: Any, configurator: Any, packed: dict[int, np.ndarray], roles: list[str],
                 lead: tuple[int, ...], fallback: Any, config: CompileConfig, estimate: Any,
                 in_specs: list[tuple[np.dtype, tuple]], out_specs: list[tuple[np.dtype, tuple]],
                 shapes: list[tuple[int, ...]], columns: _ColumnKernel | None = None) -> None:
        from snippets_x86_64.runtime import _executor_options, _parallel_min_ns

        self.kernel = kernel
        self.configurator = configurator
        self.packed = packed
        self.roles = roles
        #: leading-dim template of x (-1: a dynamic dim); a row-indexed array must have x's leading dims
        self.lead = lead
        #: the per-shape executor for calls whose row inputs do not share x's leading dims (run-time broadcasting)
        self.fallback = fallback
        self.threads = config.num_threads
        #: rows per block of the kernel's row loop
        self.m_block = int_option(dict(config.target_options), "fc_m_block", 0, minimum=0) or DEFAULT_FC_M_BLOCK
        self._min_bytes, self._native = _executor_options(config)
        self._min_ns = _parallel_min_ns(config)
        #: the estimated single-thread time (ns) of the kernel for given part shapes
        self._estimate = estimate
        #: per kernel input/output, (dtype, shape) with the rows of a row-indexed one as ``-1``
        self.in_specs, self.out_specs = in_specs, out_specs
        #: per Subgraph input, its shape (a row-indexed one's rows as ``-1``): what a call's arrays must have
        self.shapes = shapes
        self.columns = columns
        self._on_target = Placement(TARGET_NAME)
        #: where the last call ran (the snippets_core.runtime.placement protocol)
        self.last_placement = self._on_target
        #: calls that went to ``fallback``
        self.calls_per_shape = 0
        #: row counts planned (each cost one runtime-parameter block per part and its call states)
        self.new_shapes = 0
        self.a_index = roles.index(ROW)
        self._in_types = [d for d, _ in in_specs]
        self._out_types = [d for d, _ in out_specs]
        #: per data position (inputs, then outputs), the bytes of one row (0: passed whole)
        self._row_bytes = [d.itemsize * s[-1] if r == ROW else 0 for (d, s), r in zip(in_specs, roles)]
        self._row_bytes += [d.itemsize * s[-1] for d, s in out_specs]
        self._packed_items = tuple(packed.items())
        self._unpacked = [i for i in range(len(roles)) if i not in packed]
        #: per row count, its parts (see plan); per set of input shapes, M and the output shapes (see _check)
        self._plans: OrderedDict[int, _RowsPlan] = OrderedDict()
        self._shapes: OrderedDict[tuple, tuple[int, list[tuple[int, ...]]] | None] = OrderedDict()
        self._lock = threading.Lock()

    def _part(self, kernel: Any, configurator: Any, in_specs: list, out_specs: list, rows: int) -> Any:
        """A single-chunk KernelExecutor of ``kernel`` for ``rows`` rows (its runtime-parameter block)."""
        from snippets_x86_64.runtime import KernelExecutor

        ins = [(d, (rows, s[-1]) if r == ROW else s) for (d, s), r in zip(in_specs, self.roles)]
        outs = [(d, (rows, s[-1])) for d, s in out_specs]
        cfg = configurator.configure(tuple(s for _, s in ins))
        return KernelExecutor(kernel, ins, outs, 1, 0, self._native, cfg)

    def _parts(self, m: int) -> int:
        """Threads a call of ``m`` rows splits its rows between: each gets ``ROW_SPLIT_MIN`` rows and, as a static
        kernel's split asks, enough bytes or enough estimated work."""
        parts = min(self.threads, m // ROW_SPLIT_MIN)
        if parts < 2:
            return 1
        shapes = tuple((m, s[-1]) if r == ROW else s for (_, s), r in zip(self.in_specs, self.roles))
        nbytes = sum(d.itemsize * math.prod(s) for d, s in zip(self._in_types, shapes))
        nbytes += sum(d.itemsize * m * s[-1] for d, s in self.out_specs)
        by_size = nbytes // self._min_bytes if self._min_bytes > 0 else parts
        by_work = int(self._estimate(shapes) // self._min_ns) if self._min_ns > 0 else parts
        return max(1, min(parts, max(by_size, by_work)))

    def plan(self, m: int) -> _RowsPlan:
        """The parts of a call of ``m`` rows (made once per row count, kept in a bounded LRU)."""
        plan = self._plans.get(m)
        if plan is not None:
            return plan
        with self._lock:
            cols = self.columns
            if cols is not None and m < self.threads * ROW_SPLIT_MIN:
                part = self._part(cols.kernel, cols.configurator, cols.in_specs, cols.out_specs, m)
                executors = [part] + [self._part(cols.kernel, cols.configurator, cols.in_specs, cols.out_specs, m)
                                      for _ in range(cols.threads - 1)]
                plan = _RowsPlan([0] * cols.threads, executors, True)
            else:
                from snippets_x86_64.runtime import _split

                chunks = _split(m, self._parts(m))
                executors = [self._part(self.kernel, self.configurator, self.in_specs, self.out_specs, n)
                             for _, n in chunks]
                plan = _RowsPlan([start for start, _ in chunks], executors, False)
            self.new_shapes += 1
            self._plans[m] = plan
            if len(self._plans) > ROW_SHAPES:
                self._plans.popitem(last=False)
        return plan

    def _check(self, arrays: list[np.ndarray], shapes: tuple) -> tuple[int, list[tuple[int, ...]]] | None:
        """M and the outputs' shapes of a call with these input shapes (checked once per set of shapes); None when
        the row inputs do not share x's leading dims (run-time broadcasting: the per-shape executor)."""
        lead = shapes[self.a_index][:-1]
        if len(lead) != len(self.lead) or any(t == 1 and d != 1 for t, d in zip(self.lead, lead)) or any(
            r == ROW and s[:-1] != lead for s, r in zip(shapes, self.roles)
        ):  # a row input broadcast along a dynamic dim at run time (or a bad shape: the per-shape path says)
            entry = None
        else:
            for i, (s, shape, r) in enumerate(zip(shapes, self.shapes, self.roles)):
                if s[-1:] != shape[-1:] or (r == WHOLE and i not in self.packed and s != shape):
                    want = [*lead, shape[-1]] if r == ROW else list(shape)
                    raise InputError(f"Subgraph input {i} must have shape {want}, got {list(s)}")
            entry = (math.prod(lead), [(*lead, shape[-1]) for _, shape in self.out_specs])
        self._shapes[shapes] = entry
        if len(self._shapes) > ROW_SHAPES:
            self._shapes.popitem(last=False)
        return entry

    def prepare_ahead(self, shapes: tuple[tuple[int, ...], ...]) -> bool:
        """Check input ``shapes`` and make the plan of their row count before their call (``shape_ahead``):
        False when known already or not for this kernel (run-time broadcasting; a bad shape raises)."""
        if shapes in self._shapes or len(shapes) != len(self.roles):
            return False
        entry = self._check([], shapes)
        if entry is None or not entry[0] or entry[0] in self._plans:
            return False
        self.plan(entry[0])
        return True

    def __call__(self, args: Sequence[Any], outs: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        arrays = list(args)
        if len(arrays) != len(self.roles):
            raise InputError(f"the Subgraph takes {len(self.roles)} inputs, got {len(arrays)}")
        types = self._in_types
        for i, a in enumerate(arrays):
            if type(a) is not np.ndarray:
                a = arrays[i] = np.asarray(a)
            if a.dtype is not types[i] and a.dtype != types[i]:
                raise InputError(f"Subgraph input {i} must be {types[i]}, got {a.dtype}")
        shapes = tuple([a.shape for a in arrays])
        entry = self._shapes.get(shapes, _MISSING)
        if entry is _MISSING:
            entry = self._check(arrays, shapes)
            if entry is not None and entry[0]:  # a new shape: its plan, then the other Subgraphs'
                self._plans.get(entry[0]) or self.plan(entry[0])
                if shape_ahead.ENABLED:
                    shape_ahead.ahead(self, shapes)
        if entry is None:
            self.calls_per_shape += 1
            results = self.fallback(arrays, outs)
            self.last_placement = self.fallback.last_placement
            return results
        m, fulls = entry
        results = []
        for j, (full, dtype) in enumerate(zip(fulls, self._out_types)):
            o = outs[j] if outs is not None and outs[j] is not None else None
            if o is None:
                o = pooled_empty(full, dtype)  # a large output in a buffer kept between calls (buffers.py)
            elif not (isinstance(o, np.ndarray) and o.dtype == dtype and o.shape == full and o.flags.c_contiguous
                      and o.flags.writeable):
                raise InputError(f"output array {j} must be a writeable C-contiguous {dtype}{list(full)}")
            results.append(o)
        self.last_placement = self._on_target
        if m == 0:  # no rows: nothing to compute
            return results
        plan = self._plans.get(m) or self.plan(m)
        # C-contiguous inputs (no copy when they are) and the packed weights: each part's addresses are the arrays'
        # plus its first row times the row's bytes (no view to make and check per part)
        data = arrays
        for i in self._unpacked:
            if not data[i].flags.c_contiguous:
                data[i] = np.ascontiguousarray(data[i])
        if plan.columns:
            self._run_columns(plan, m, data, results)
            return results
        for i, w in self._packed_items:
            data[i] = w
        addrs = [_address(a) for a in data]
        addrs += [_address(o) for o in results]
        if plan.launcher is None:
            plan.executors[0].launch(addrs)
        else:
            steps = self._row_bytes
            plan.launcher.launch([[p + at * b for p, b in zip(addrs, steps)] for at in plan.starts])
        return results

    def _run_columns(self, plan: _RowsPlan, m: int, data: list[np.ndarray], results: list[np.ndarray]) -> None:
        """``m`` rows split along N: part ``p`` reads x in place, its panels of the packed weight and its columns of
        the bias and residual, and writes its columns of the output: in place for one row (contiguous), else
        through a block of its own (its columns are strided in the output) copied out after."""
        cols = self.columns
        assert cols is not None and plan.launcher is not None
        addrs = [_address(a) for a in (*data, *results)]
        if m == 1:  # every cut is contiguous: the part's address is the array's plus its offset
            plan.launcher.launch([[a * k + off for a, (k, off) in zip(addrs, part)] for part in cols.one_row])
            return
        c, n_in = cols.width, len(data)
        blocks = []  # alive until the parts have run
        part_outs = []
        ptrs = []
        for p, part in enumerate(cols.one_row):
            ptr = [a * k + off for a, (k, off) in zip(addrs, part)]
            for i in cols.row_sliced:  # a residual's columns: strided, copied into a block of the part's own
                block = np.ascontiguousarray(data[i].reshape(m, -1)[:, p * c : (p + 1) * c])
                blocks.append(block)
                ptr[i] = _address(block)
            outs = [np.empty((m, c), d) for d in self._out_types]
            part_outs.append(outs)
            ptr[n_in:] = [_address(o) for o in outs]
            ptrs.append(ptr)
        plan.launcher.launch(ptrs)
        for p, outs in enumerate(part_outs):
            for o, so in zip(results, outs):
                o.reshape(m, -1)[:, p * c : (p + 1) * c] = so

    run = __call__

    def describe(self) -> str:
        n = len(self.kernel.info.runtime_params)
        text = (f"one kernel for every M ({n} runtime parameters: {self.m_block}-row blocks in a runtime loop, "
                f"the tail rows on runtime register tiles), {self.new_shapes} row count(s) configured")
        if self.threads > 1:
            text += f"; rows split between up to {self.threads} threads"
        if self.columns is not None:
            text += (f"; fewer than {self.threads * ROW_SPLIT_MIN} rows split along N into {self.columns.threads} "
                     "parts")
        if self.calls_per_shape:
            text += f"; {self.calls_per_shape} call(s) with run-time broadcasting: {self.fallback.describe()}"
        return text


def _folded(dims: list[SDim], role: str, rows: SDim) -> list[SDim]:
    """A body input's dims in a runtime-M body: a row-indexed one ``[rows, C]``; a whole one of rank > 2 without
    its leading 1s (``[1, 1, N]`` -> ``[1, N]``: the same memory; beside rank-2 rows, a rank-3 bias would make the
    output ``[1, M, N]``, whose runtime dim the lowering does not keep by name)."""
    if role == ROW:
        return [rows, dims[-1]]
    return dims[-2:] if len(dims) > 2 and all(d == 1 for d in dims[:-2]) else dims


def _rows_body(sg: Subgraph, roles: list[str]) -> Subgraph:
    """``sg`` with its row-indexed inputs folded to ``[M, C]`` (M the runtime dim :data:`ROWS`)."""
    body = sg.body.clone()
    for p, r in zip(body.parameters, roles):
        p.shape = Shape(_folded(list(p.outputs[0].shape.sym_dims), r, ROWS))
    return fixed_subgraph(sg, body, "rows")


def _runtime_kernel(part: Subgraph, config: CompileConfig, host: Any) -> tuple[Any, Any, list, list]:
    """The kernel of ``part`` lowered for every M, its configurator and its input/output specs (rows as -1)."""
    from snippets_core.lowered.runtime_configurator import RuntimeConfigurator
    from snippets_x86_64.runtime import _kernel_for

    kernel = _kernel_for(part, config, host, None, symbolic=True)
    info = kernel.info
    configurator = RuntimeConfigurator(info.input_dims, info.output_dims, [c for _, c in info.runtime_params],
                                       info.domain_codes())

    def spec(t: Any) -> tuple[np.dtype, tuple]:
        return t.element_type.numpy, tuple(-1 if not isinstance(d, int) else d for d in t.shape.sym_dims)

    ins = [spec(p.outputs[0]) for p in part.body.parameters]
    outs = [spec(r.inputs[0].source) for r in part.body.results]
    return kernel, configurator, ins, outs


def runtime_rows(sg: Subgraph, config: CompileConfig, host: Any, packed: dict[int, np.ndarray],
                 fallback: Any) -> RuntimeRowsFCExecutor | str:
    """A :class:`RuntimeRowsFCExecutor` for the dynamic-M FC ``sg``, or why it has none (then a kernel per shape)."""
    from snippets_core.errors import ShapeInferenceError
    from snippets_core.lowered.symbolic import DynamicShapeError
    from snippets_x86_64.runtime import work_estimator

    options = dict(config.target_options)
    enabled = options.get("fc_runtime_m", True)
    if not isinstance(enabled, bool):
        raise ConfigError(f"target_options.fc_runtime_m must be true or false, got {enabled!r}")
    if not enabled:
        return "target_options.fc_runtime_m is false"
    found = _row_roles(sg, packed)
    if isinstance(found, str):
        return found
    roles, lead = found
    part = _rows_body(sg, roles)
    try:
        kernel, configurator, ins, outs = _runtime_kernel(part, config, host)
    except (DynamicShapeError, ShapeInferenceError) as exc:  # declared: a kernel per shape
        return fallback_reason(exc)
    columns = None
    split_option = options.get("fc_split_n", True)
    out = sg.body.results[0].inputs[0].shape
    if split_option and len(sg.body.results) == 1 and isinstance(out.sym_dims[-1], int):
        try:
            cut = _column_body(sg, config, packed, int(out.sym_dims[-1]), "columns", roles, ROWS)
            if cut is not None:
                col_part, sliced, width, threads = cut
                ck, cc, c_ins, c_outs = _runtime_kernel(col_part, config, host)
                columns = _ColumnKernel(ck, cc, packed, roles, sliced, width, threads, c_ins, c_outs)
        except SnippetsError as exc:  # an optimization: few rows keep their M split
            sg.rt_info[SPLIT_N_SKIPPED] = f"{type(exc).__name__}: {exc}"
    shapes = [tuple(-1 if not isinstance(d, int) else d for d in p.outputs[0].shape.sym_dims)
              for p in sg.body.parameters]
    return RuntimeRowsFCExecutor(kernel, configurator, packed, roles, lead, fallback, config, work_estimator(part),
                                 ins, outs, shapes, columns)


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
        per_shape = DynamicFCExecutor(executor, packed, _a_input(sg), config.num_threads)
        if not split:
            return per_shape
        try:
            by_rows = runtime_rows(sg, config, host, packed, per_shape)
        except UnsupportedByTarget as exc:  # declared: a kernel per shape (each may still run or fall back)
            by_rows = fallback_reason(exc)
        if isinstance(by_rows, str):
            executor.why_per_shape = f"no runtime-M kernel: {by_rows}"
            return per_shape
        return by_rows
    split_option = dict(config.target_options).get("fc_split_n", True)
    if not isinstance(split_option, bool):
        raise ConfigError(f"target_options.fc_split_n must be true or false, got {split_option!r}")
    if not split:
        return PackedWeightExecutor(executor, packed)
    by_n = None
    if split_option:
        try:
            by_n = split_n(sg, config, host, packed)
        except SnippetsError as exc:  # the split is an optimization: the whole-N kernel is compiled and runs
            sg.rt_info[SPLIT_N_SKIPPED] = f"{type(exc).__name__}: {exc}"
    # a static kernel never runs the reference: it reads only the packed copy, so the weights are held once
    if by_n is not None:
        release_input_constants(sg, sorted(packed), "packed into the FullyConnected kernel's weights")
        return by_n
    try:
        by_rows = row_parts(sg, executor, config, host, packed)
    except SnippetsError as exc:  # an optimization too: the whole kernel runs
        sg.rt_info[ROW_PARTS_SKIPPED] = f"{type(exc).__name__}: {exc}"
        by_rows = None
    release_input_constants(sg, sorted(packed), "packed into the FullyConnected kernel's weights")
    return PackedWeightExecutor(by_rows if by_rows is not None else executor, packed)


def row_parts(sg: Subgraph, whole: Any, config: CompileConfig, host: Any, packed: dict[int, np.ndarray]) -> Any:
    """A :class:`~snippets_x86_64.runtime.RowSplitExecutor` for a static FC whose kernel has fewer parallel
    indices than threads (SplitDimensionM found no even split: a prime M such as ViT's 197 rows) but whose rows
    carry work for several (see :func:`~snippets_x86_64.runtime.split_static_rows`); None otherwise. The row inputs
    are those with x's leading dims (x, a residual); the others must be one row or the packed weight."""
    from snippets_x86_64.runtime import split_static_rows

    a_index = _a_input(sg)
    if a_index is None:
        return None
    lead = whole.input_specs[a_index][1][:-1]
    rows_in = tuple(i for i, (_, s) in enumerate(whole.input_specs) if s[:-1] == lead)
    if any(i not in rows_in and i not in packed and math.prod(s[:-1]) != 1
           for i, (_, s) in enumerate(whole.input_specs)) or any(s[:-1] != lead for _, s in whole.output_specs):
        return None
    return split_static_rows(sg, whole, config, host, rows_in, ROW_SPLIT_MIN)


__all__ = ["DynamicFCExecutor", "PackedWeightExecutor", "RuntimeRowsFCExecutor", "SplitNExecutor", "fc_executor",
           "row_parts", "row_split_subgraph", "runtime_rows", "split_n"]

"""Executors of FullyConnected Subgraphs: the packed weights made once and passed on every call, and a split of N
between the threads when the FC has one row (M = 1 cannot be split, so the parallel domain has one index).

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
from snippets_core.ir.shape import Shape
from snippets_x86_64.brgemm_copy_b import MARK_PACKED_PASS, PANEL, packed_weight_body_inputs, packed_weights
from snippets_core.runtime.placement import Placement, fallback_reason
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
        self.weights = _weight_slices(packed, parts)
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


def _column_parts(sg: Subgraph, config: CompileConfig, host: Any, packed: dict[int, np.ndarray], n: int, suffix: str,
                  roles: list[str] | None = None, rows: int = 0) -> tuple[list[Any], set[int], int] | None:
    """The single-thread KernelExecutors of ``sg`` compiled for ``N / T`` columns, one per thread (``T`` the
    threads, at most one per panel, N whole panels per thread), the body inputs cut along N (bias, residual) and
    the width; with ``roles``, the row-indexed inputs folded to ``rows`` rows. None when N does not split so, or x
    also feeds a post-op (``x + x @ W``: its columns are not the output's)."""
    from snippets_x86_64.runtime import KernelExecutor, _executor_options, _kernel_for, _specs

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
        if roles is not None and roles[i] == ROW:
            dims = [1] * (len(dims) - 2) + [rows, dims[-1]]
        p.shape = Shape(dims)
    part = fixed_subgraph(sg, body, suffix)
    kernel = _kernel_for(part, config, host, None)
    ins, outs = _specs(part)
    min_bytes, native = _executor_options(config)
    return [KernelExecutor(kernel, ins, outs, 1, min_bytes, native) for _ in range(threads)], sliced, width


def _weight_slices(packed: dict[int, np.ndarray], parts: list[Any]) -> list[dict[int, np.ndarray]]:
    """Per part, its slice of each packed weight: a part's panels are consecutive in the packed copy."""
    return [{i: w.reshape(-1)[p * w.size // len(parts) : (p + 1) * w.size // len(parts)]
             .reshape(parts[0].input_specs[i][1]) for i, w in packed.items()} for p in range(len(parts))]


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


#: rows of the kernel a dynamic-M FC runs on every M (``target_options.fc_row_block``; 0: a kernel per shape)
DEFAULT_ROW_BLOCK = 128
#: block counts whose executor a RowBlockFCExecutor keeps (least recently used dropped: recreated, never compiled)
BLOCK_EXECUTORS = 64
ROW, WHOLE = "row", "whole"


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


class RowBlockFCExecutor:
    """A FullyConnected Subgraph of a dynamic M (rows: batch x sequence) on kernels compiled for static blocks of
    rows: FC rows are independent (the post-ops are per-row eltwise), so for M rows the largest kernel (``rows``
    rows) runs on consecutive ``rows``-row slices of the row-indexed inputs (x, a residual; viewed as [M, K]: no
    copy) and of the output, the smaller tail kernels (``rows / 2``, ``rows / 4``, ... rows) on what is left, and
    the last few rows through a zero-padded scratch block of the smallest kernel that holds them. The weight
    (packed), the bias and the other one-row inputs are passed whole. No shape compiles anything after compile
    time."""

    def __init__(self, kernels: dict[int, Any], packed: dict[int, np.ndarray], roles: list[str],
                 lead: tuple[int, ...], fallback: Any, blocks: Any = None, columns: ColumnSplitBlock | None = None
                 ) -> None:
        #: the KernelExecutor of each block height, largest first
        self.kernels = dict(sorted(kernels.items(), reverse=True))
        self.rows = next(iter(self.kernels))
        self.kernel = self.kernels[self.rows]
        self.packed = packed
        self.roles = roles
        #: leading-dim template of x (-1: a dynamic dim); a row-indexed array must have x's leading dims
        self.lead = lead
        #: the per-shape executor for calls whose row inputs do not share x's leading dims (run-time broadcasting)
        self.fallback = fallback
        self._on_target = Placement(TARGET_NAME)
        #: where the last call ran (the snippets_core.runtime.placement protocol)
        self.last_placement = self._on_target
        self._scratch_lock = threading.Lock()
        #: padded blocks by height, made on first use (inputs, outputs)
        self._scratch: dict[int, tuple[list[np.ndarray], list[np.ndarray]]] = {}
        #: calls that went to ``fallback``
        self.calls_per_shape = 0
        self.a_index = roles.index(ROW)
        #: the KernelExecutor that runs ``rows``-row blocks, one per parallel-domain index (see _block_kernel), or
        #: None; its executors per block count (the domain is the call's, the kernel is the same)
        self.blocks = blocks
        self._by_blocks: OrderedDict[int, Any] = OrderedDict()
        self.threads = blocks.num_threads if blocks is not None else 1
        self._in_types = [d for d, _ in self.kernel.input_specs]
        self._out_types = [d for d, _ in self.kernel.output_specs]
        #: per data position (inputs, then outputs), the bytes of one row (0: passed whole)
        self._row_bytes = [d.itemsize * s[-1] if r == ROW else 0 for (d, s), r in zip(self.kernel.input_specs, roles)]
        self._row_bytes += [d.itemsize * s[-1] for d, s in self.kernel.output_specs]
        #: per set of input shapes, what a call runs (see _shape_plan), least recently used first
        self._plans: OrderedDict[tuple, Any] = OrderedDict()
        #: the smallest block height split along N between the threads (see ColumnSplitBlock), or None
        self.columns = columns
        self._column_rows = columns.rows if columns is not None else 0

    def _blocks_executor(self, nb: int) -> Any:
        """The executor of ``nb`` full blocks on the block kernel: the harness runs domain indices ``0..nb-1``
        (its outermost index never wraps, the kernel offsets each block by its index), split between the threads
        in contiguous runs of blocks: one dispatch per FC call, one weight pass per ``rows`` rows per thread."""
        ex = self._by_blocks.get(nb)
        if ex is None:
            from snippets_core.lowered.runtime_configurator import RuntimeConfig
            from snippets_x86_64.runtime import KernelExecutor

            b = self.blocks
            ins = [(d, (*s[:-3], nb, *s[-2:]) if r == ROW else s) for (d, s), r in zip(b.input_specs, self.roles)]
            outs = [(d, (*s[:-3], nb, *s[-2:])) for d, s in b.output_specs]
            cfg = RuntimeConfig((), (nb,), tuple(s for _, s in outs))
            ex = KernelExecutor(b.kernel, ins, outs, b.num_threads, 0, b.native_threads, cfg)
            self._by_blocks[nb] = ex
            if len(self._by_blocks) > BLOCK_EXECUTORS:
                self._by_blocks.popitem(last=False)
        return ex

    def _new_scratch(self, rows: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        run = self.kernels[rows]
        ins = [np.zeros(s, d) for (d, s), r in zip(run.input_specs, self.roles) if r == ROW]
        return ins, [np.zeros(s, d) for d, s in run.output_specs]

    def plan(self, m: int) -> list[tuple[int, int, int]]:
        """(first row, rows, kernel height) of each call for M rows: full blocks of the largest kernel, then
        greedily the smaller ones; what is left (fewer rows than the smallest kernel, or a remainder that fills
        a kernel to within 1/8) goes padded into the smallest kernel that holds it."""
        calls, at = [], 0
        sizes = list(self.kernels)
        while at < m:
            left = m - at
            fits = [s for s in sizes if s >= left]
            if fits and (fits[-1] - left) * 8 <= fits[-1] or left < sizes[-1]:
                calls.append((at, left, fits[-1]))
                break
            size = next(s for s in sizes if s <= left)
            calls.append((at, size, size))
            at += size
        return calls

    def _shape_plan(self, arrays: list[np.ndarray]) -> tuple[int, list[tuple[int, ...]], list[tuple]] | None:
        """What a call with these input shapes runs, checked once per shape: M, the outputs' shapes and the calls
        (executor or None for a padded block, first row, rows, kernel height); None when the row inputs do not
        share x's leading dims (run-time broadcasting: the per-shape executor)."""
        shapes = tuple(a.shape for a in arrays)
        entry = self._plans.get(shapes, _MISSING)
        if entry is not _MISSING:
            return entry
        lead = arrays[self.a_index].shape[:-1]
        if len(lead) != len(self.lead) or any(t == 1 and d != 1 for t, d in zip(self.lead, lead)) or any(
            r == ROW and a.shape[:-1] != lead for a, r in zip(arrays, self.roles)
        ):  # a row input broadcast along a dynamic dim at run time (or a bad shape: the per-shape path says)
            entry = None
        else:
            for i, (a, (_, shape)) in enumerate(zip(arrays, self.kernel.input_specs)):
                if self.roles[i] == WHOLE and i not in self.packed and a.shape != shape:
                    raise InputError(f"Subgraph input {i} must have shape {list(shape)}, got {list(a.shape)}")
            m = math.prod(lead)
            calls: list[tuple] = []
            rows = self.rows
            nb = (m // rows // self.threads) * self.threads if self.blocks is not None else 0
            if nb > 1:
                calls.append((self._blocks_executor(nb), 0, nb * rows, rows))
            done = nb * rows if nb > 1 else 0
            for at, n, size in self.plan(m - done):
                # None: through scratch blocks (padded rows, or the smallest height split along N)
                whole = n == size and size != self._column_rows
                calls.append((self.kernels[size] if whole else None, done + at, n, size))
            entry = (m, [lead + shape[-1:] for _, shape in self.kernel.output_specs], calls)
        self._plans[shapes] = entry
        if len(self._plans) > BLOCK_EXECUTORS:
            self._plans.popitem(last=False)
        return entry

    def __call__(self, args: Sequence[Any], outs: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        arrays = [a if isinstance(a, np.ndarray) else np.asarray(a) for a in args]
        if len(arrays) != len(self.roles):
            raise InputError(f"the Subgraph takes {len(self.roles)} inputs, got {len(arrays)}")
        for i, (a, dtype) in enumerate(zip(arrays, self._in_types)):
            if a.dtype != dtype:
                raise InputError(f"Subgraph input {i} must be {dtype}, got {a.dtype}")
        entry = self._shape_plan(arrays)
        if entry is None:
            self.calls_per_shape += 1
            results = self.fallback(arrays, outs)
            self.last_placement = self.fallback.last_placement
            return results
        m, fulls, calls = entry
        results = []
        for j, (full, dtype) in enumerate(zip(fulls, self._out_types)):
            o = outs[j] if outs is not None and outs[j] is not None else None
            if o is None:
                o = np.empty(full, dtype)
            elif not (isinstance(o, np.ndarray) and o.dtype == dtype and o.shape == full and o.flags.c_contiguous
                      and o.flags.writeable):
                raise InputError(f"output array {j} must be a writeable C-contiguous {dtype}{list(full)}")
            results.append(o)
        # the row inputs C-contiguous (no copy when they are): the kernels read row slices of them, each call's
        # addresses are the arrays' plus its first row times the row's bytes (no view to make and check per call)
        data = [(a if a.flags.c_contiguous else np.ascontiguousarray(a)) if r == ROW else self.packed.get(i, a)
                for i, (a, r) in enumerate(zip(arrays, self.roles))]
        data += results
        addrs = [_address(a) for a in data]
        steps = self._row_bytes
        for run, at, n, size in calls:
            if run is not None:
                run.launch([p + at * b for p, b in zip(addrs, steps)])
            else:
                flat = [f.reshape(m, f.shape[-1]) if r == ROW else f for f, r in zip(data, self.roles)]
                flat_outs = [o.reshape(m, o.shape[-1]) for o in results]
                if size == self._column_rows:
                    self.columns.run(flat, flat_outs, at, n)  # type: ignore[union-attr]
                else:
                    self._run_padded(self.kernels[size], size, flat, flat_outs, at, n)
        self.last_placement = self._on_target
        return results

    def _run_padded(self, run: Any, size: int, flat: list[np.ndarray], flat_outs: list[np.ndarray], at: int,
                    n: int) -> None:
        """Rows ``at:at+n`` (fewer than ``size``) through the zero-padded scratch block of the ``size`` kernel."""
        own = self._scratch_lock.acquire(blocking=False)
        try:  # a concurrent call gets scratch of its own
            if own:
                s_ins, s_outs = self._scratch.get(size) or self._scratch.setdefault(size, self._new_scratch(size))
            else:
                s_ins, s_outs = self._new_scratch(size)
            ins, k = [], 0
            for f, r in zip(flat, self.roles):
                if r == ROW:
                    pad = s_ins[k]
                    k += 1
                    pad.reshape(size, -1)[:n] = f[at : at + n]
                    ins.append(pad)
                else:
                    ins.append(f)
            run(ins, s_outs)
            for o, so in zip(flat_outs, s_outs):
                o[at : at + n] = so.reshape(size, -1)[:n]
        finally:
            if own:
                self._scratch_lock.release()

    run = __call__

    def describe(self) -> str:
        sizes = ", ".join(map(str, self.kernels))
        text = (f"kernels of {sizes} rows for every M (full blocks of {self.rows}, the tail on the smaller ones, "
                f"the last rows padded)")
        if self.columns is not None:
            text += f"; {self.columns.rows} rows split along N into {len(self.columns.parts)} parts"
        if self.calls_per_shape:
            text += f"; {self.calls_per_shape} call(s) with run-time broadcasting: {self.fallback.describe()}"
        return text


class ColumnSplitBlock:
    """``rows`` rows of an FC on ``T`` threads split along N: each thread runs the kernel compiled for ``N / T``
    columns on its consecutive panels of the packed weight and its slices of the inputs that vary along N (bias,
    residual), all started in one dispatch (:class:`~snippets_x86_64.runtime.PartsLauncher`). A part's output
    columns are strided in the output, so its kernel writes a contiguous scratch block that is copied out after;
    x's rows are read in place (through one zero-padded scratch block when fewer than ``rows``), a residual's
    columns are copied into the part's scratch. So each thread streams ``1 / T`` of the weight for all the rows,
    where the M split of a small block gives each thread a few rows and the whole weight (ViT's last 5 of 197
    rows, padded to 8: 4 rows per thread, each reading every panel from L3)."""

    def __init__(self, parts: list[Any], packed: dict[int, np.ndarray], roles: list[str], sliced: set[int],
                 width: int, rows: int) -> None:
        from snippets_x86_64.runtime import PartsLauncher

        self.parts = parts
        self.launcher = PartsLauncher(parts)
        self.roles = roles
        #: the inputs cut along N (besides the weight): a bias, a residual
        self.sliced = sliced
        self.width = width
        self.rows = rows
        #: per part, the packed weights' slices
        self.weights = _weight_slices(packed, parts)
        self._lock = threading.Lock()
        self._scratch: tuple[dict[int, np.ndarray], list[dict[int, np.ndarray]], list[list[np.ndarray]]] | None = None

    def _new_scratch(self) -> tuple[dict[int, np.ndarray], list[dict[int, np.ndarray]], list[list[np.ndarray]]]:
        """Zero-padded blocks: the shared ones of the whole-row inputs (x), per part those of the inputs cut along
        N and the outputs."""
        specs = self.parts[0].input_specs
        rows_in = [i for i, r in enumerate(self.roles) if r == ROW]
        shared = {i: np.zeros(specs[i][1], specs[i][0]) for i in rows_in if i not in self.sliced}
        per_part = [{i: np.zeros(specs[i][1], specs[i][0]) for i in rows_in if i in self.sliced} for _ in self.parts]
        outs = [[np.zeros(s, d) for d, s in ex.output_specs] for ex in self.parts]
        return shared, per_part, outs

    def run(self, flat: list[np.ndarray], flat_outs: list[np.ndarray], at: int, n: int) -> None:
        """Rows ``at:at+n`` (at most ``rows``) of the [M, C]-viewed row inputs ``flat`` (C-contiguous) into
        ``flat_outs``."""
        own = self._lock.acquire(blocking=False)
        try:  # a concurrent call gets scratch of its own
            if not own:
                scratch = self._new_scratch()
            else:
                if self._scratch is None:
                    self._scratch = self._new_scratch()
                scratch = self._scratch
            shared, per_part, part_outs = scratch
            c, rows = self.width, self.rows
            base: list[int] = []  # per input, the address part 0 reads; the cut ones move by c elements per part
            for i, (f, r) in enumerate(zip(flat, self.roles)):
                if r == ROW and i not in self.sliced:
                    if n == rows:  # read in place
                        base.append(_address(f) + at * f.strides[0])
                    else:
                        pad = shared[i]
                        pad.reshape(rows, -1)[:n] = f[at : at + n]
                        base.append(_address(pad))
                elif r == ROW:
                    src = f[at : at + n]
                    for p, pads in enumerate(per_part):
                        pads[i].reshape(rows, -1)[:n] = src[:, p * c : (p + 1) * c]
                    base.append(0)
                elif i in self.weights[0]:
                    base.append(0)
                else:
                    if not f.flags.c_contiguous:
                        f = flat[i] = np.ascontiguousarray(f)
                    base.append(_address(f))
            ptrs = []
            for p in range(len(self.parts)):
                part = [_address(per_part[p][i]) if r == ROW and i in self.sliced
                        else _address(self.weights[p][i]) if i in self.weights[p]
                        else a + p * c * flat[i].itemsize if i in self.sliced else a
                        for i, (a, r) in enumerate(zip(base, self.roles))]
                ptrs.append(part + [_address(o) for o in part_outs[p]])
            self.launcher.launch(ptrs)
            for p, outs in enumerate(part_outs):
                for o, so in zip(flat_outs, outs):
                    o[at : at + n, p * c : (p + 1) * c] = so.reshape(rows, -1)[:n]
        finally:
            if own:
                self._lock.release()


def _column_block(sg: Subgraph, config: CompileConfig, host: Any, roles: list[str], packed: dict[int, np.ndarray],
                  rows: int) -> ColumnSplitBlock | None:
    """A :class:`ColumnSplitBlock` of ``rows`` rows for the dynamic-M FC ``sg`` on several threads whose N splits
    into whole panels per thread; None otherwise."""
    out = sg.body.results[0].inputs[0].shape
    if config.num_threads < 2 or len(sg.body.results) != 1 or not isinstance(out.sym_dims[-1], int):
        return None
    n = int(out.sym_dims[-1])
    columns = _column_parts(sg, config, host, packed, n, f"columns{rows}", roles, rows)
    if columns is None:
        return None
    parts, sliced, width = columns
    return ColumnSplitBlock(parts, packed, roles, sliced, width, rows)


#: the smallest tail kernel of a RowBlockFCExecutor (``target_options.fc_row_tail``): fewer rows are padded
DEFAULT_ROW_TAIL = 8


def _row_block_kernel(sg: Subgraph, config: CompileConfig, host: Any, roles: list[str], lead: tuple[int, ...],
                      rows: int) -> Any:
    """The KernelExecutor of ``sg`` with its row-indexed inputs folded to a static block of ``rows`` rows."""
    from snippets_x86_64.runtime import KernelExecutor, _executor_options, _kernel_for, _specs

    body = sg.body.clone()
    block_lead = [1] * (len(lead) - 1) + [rows]  # leading dims folded: [B, S, K] runs as [1, rows, K]
    threads = config.num_threads
    if threads > 1 and rows % threads == 0:
        # the block's rows split between the threads as SplitDimensionM splits a static M (it cannot split a
        # dynamic one at compile time): [T, rows / T, K] has a parallel domain of T, one index per thread
        block_lead = [1] * (len(lead) - 2) + [threads, rows // threads]
    for p, r in zip(body.parameters, roles):
        if r == ROW:
            p.shape = Shape([*block_lead, p.outputs[0].shape.sym_dims[-1]])
    part = fixed_subgraph(sg, body, f"row_block{rows}")
    kernel = _kernel_for(part, config, host, None)
    ins, outs = _specs(part)
    return KernelExecutor(kernel, ins, outs, config.num_threads, *_executor_options(config))


def _block_kernel(sg: Subgraph, config: CompileConfig, host: Any, roles: list[str], rows: int) -> Any:
    """A KernelExecutor of ``sg`` for ``[J, rows, C]`` row inputs whose parallel domain is ``(J,)``: one index is
    one block of ``rows`` rows on one thread (a whole weight pass per ``rows`` rows, where the row-block kernel
    splits its block between the threads); None when the lowering gives it another domain."""
    from snippets_x86_64.runtime import KernelExecutor, _executor_options, _kernel_for, _specs

    j = max(config.num_threads, 2)  # a dim of 1 would be lowered as broadcast (no offset per index)
    body = sg.body.clone()
    for p, r in zip(body.parameters, roles):
        if r == ROW:
            dims = p.outputs[0].shape.sym_dims
            if len(dims) < 3:  # [M, K]: no dim to hold the block index
                return None
            p.shape = Shape([*[1] * (len(dims) - 3), j, rows, dims[-1]])
    part = fixed_subgraph(sg, body, f"blocks{rows}")
    kernel = _kernel_for(part, config, host, None)
    if kernel.info.parallel_domain != (j,):
        return None
    ins, outs = _specs(part)
    return KernelExecutor(kernel, ins, outs, config.num_threads, *_executor_options(config))


def row_block(sg: Subgraph, config: CompileConfig, host: Any, packed: dict[int, np.ndarray],
              fallback: Any) -> RowBlockFCExecutor | str:
    """A :class:`RowBlockFCExecutor` for the dynamic-M FC ``sg``, or why it has none (then a kernel per shape)."""
    options = dict(config.target_options)
    rows = int_option(options, "fc_row_block", DEFAULT_ROW_BLOCK, minimum=0)
    if rows == 0:
        return "target_options.fc_row_block is 0"
    smallest = int_option(options, "fc_row_tail", DEFAULT_ROW_TAIL, minimum=1)
    found = _row_roles(sg, packed)
    if isinstance(found, str):
        return found
    roles, lead = found
    sizes = [rows]
    while sizes[-1] % 2 == 0 and sizes[-1] // 2 >= smallest:
        sizes.append(sizes[-1] // 2)
    kernels = {size: _row_block_kernel(sg, config, host, roles, lead, size) for size in sizes}
    try:
        columns = _column_block(sg, config, host, roles, packed, sizes[-1])
    except SnippetsError as exc:  # an optimization: the smallest block keeps its M split
        sg.rt_info[SPLIT_N_SKIPPED] = f"{type(exc).__name__}: {exc}"
        columns = None
    return RowBlockFCExecutor(kernels, packed, roles, lead, fallback, _block_kernel(sg, config, host, roles, rows),
                              columns)


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
            by_rows = row_block(sg, config, host, packed, per_shape)
        except UnsupportedByTarget as exc:  # declared: a kernel per shape (each may still run or fall back)
            by_rows = fallback_reason(exc)
        if isinstance(by_rows, str):
            executor.why_per_shape = f"no row-block kernel: {by_rows}"
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


__all__ = ["ColumnSplitBlock", "DynamicFCExecutor", "PackedWeightExecutor", "RowBlockFCExecutor", "SplitNExecutor",
           "fc_executor", "row_block", "row_parts", "row_split_subgraph", "split_n"]

"""Compiling a Subgraph for x86-64 and running its kernel over the parallel domain on N threads.

``compile_subgraph(sg, config, host)`` runs the core pipeline on a copy of the Subgraph's body (data-flow
passes, the LinearIR pipelines, plugins' positioned passes), generates the kernel with the
X86_64TargetMachine (or takes it from the kernel cache) and returns a :class:`KernelExecutor`. A Subgraph
with something the target declares it does not generate (:class:`~snippets_core.errors.UnsupportedByTarget`:
an op without an emitter, an element type, too many live values) returns None: it runs on its reference, and
``sg.rt_info["SnippetsFallbackReason"]`` says why. Any other exception (a bug in a pass or an emitter, a
plugin's bad anchor) is raised: it is never turned into a silent fallback. A Subgraph with dynamic dims gets a
:class:`DynamicKernelExecutor`: one kernel lowered with symbolic dims, whose runtime-parameter block the core's
RuntimeConfigurator computes per input shape (see docs/architecture.md, "Dynamic shapes"); a Subgraph that cannot
be lowered so (DynamicShapeError: a dynamic M/N/K of a Brgemm, a Transpose moving a dynamic dim...) gets a
:class:`ShapeSpecializingExecutor`: a kernel per set of input shapes, generated on first use. Both report per
call where it ran (``last_placement``, see :mod:`snippets_core.runtime.placement`) and say which in
``describe()``.

The executor splits the parallel domain into contiguous chunks, one per thread; each thread has its own
call arguments and its own slice of the buffer scratchpad, and runs its chunk with one call of the JIT
harness. The other threads are the native workers of :mod:`snippets_x86_64.native_pool` (the caller posts,
runs its own chunk and waits in one native call; idle workers spin briefly before they sleep, since waking a
sleeping thread costs more than a small kernel), or, with ``target_options["thread_pool"] = "python"`` or when
another thread's call holds the native pool, those of the persistent Python :class:`ThreadPool`. A kernel is
split only when each thread gets ``target_options["parallel_min_ns"]`` of estimated work (:func:`estimated_ns`,
default 4 us) or ``parallel_min_bytes`` bytes of inputs and outputs (default 256 KiB); smaller ones run on the
calling thread.

Arrays: inputs must have the body's element types and shapes (InputError otherwise); a non-contiguous
input is copied to a contiguous one first (the kernel addresses memory by row-major strides). Outputs are
fresh arrays, or the preallocated ``outs`` (C-contiguous, right shape and dtype) when given.
"""

from __future__ import annotations

import ctypes
import math
import os
import queue
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from snippets_core.errors import CodegenError, InputError, ShapeInferenceError, UnsupportedByTarget
from snippets_core.runtime.placement import FALLBACK_KEY, REFERENCE, Placement, fallback_reason, subgraph_error
from snippets_x86_64 import shape_ahead
from snippets_x86_64.buffers import SMALL_PAGES_MIN_BYTES, pooled_empty
from snippets_x86_64.cache import KERNEL_CACHE, cache_dir_from, cache_key
from snippets_x86_64.native_pool import THUNK_AFTER, Job, build_thunk, native_pool

if TYPE_CHECKING:
    from snippets_core.codegen.subgraph_codegen import GeneratedSubgraph
    from snippets_core.config import CompileConfig
    from snippets_core.ir.model import Model
    from snippets_core.ir.ops.subgraph import Subgraph
    from snippets_core.lowered.runtime_configurator import RuntimeConfig
    from snippets_x86_64.kernel import Kernel

TARGET_NAME = "x86_64_avx512"
PARALLEL_MIN_BYTES = 256 * 1024
#: estimated nanoseconds of work a thread must get for a kernel to be split (a hand-over to a spinning native
#: worker costs about 1-2 us; below twice that a split chunk would not pay for it)
PARALLEL_MIN_NS = 4000
#: the rates of the work estimate (one core, f32, AVX-512, measured on the examples' kernels on a Zen 5 and a
#: Sapphire Rapids: Brgemm flops, eltwise element-ops, bytes in and out of a kernel)
FLOPS_PER_NS, ELEMENT_OPS_PER_NS, BYTES_PER_NS = 200.0, 20.0, 40.0
#: the scratchpad of each thread starts on a cache line
_ALIGN = 64
#: calls of one shape's call state (a dynamic kernel's, or a runtime-M FC part's) before it gets a JIT dispatch
#: thunk: a thunk costs ~46 us to make and saves ~0.8 us per call, and a new shape's second call made one for every
#: dynamic Subgraph (0.4 ms in the BERT layer's, 0.5 ms in MobileNet-v2's residual Adds): past 64 calls of one
#: shape it has paid for itself twice over. A static kernel's only call state gets it at the second call (THUNK_AFTER).
DYNAMIC_THUNK_AFTER = 64


# --- the thread pool -------------------------------------------------------------------------------------------


class ThreadPool:
    """Persistent worker threads; ``run(tasks)`` runs ``tasks[0]`` on the caller and the others on workers
    ``0..len-2``, and returns when all are done (re-raising the first error). A task that itself calls ``run``
    (an executor nested in another's task) runs its tasks on its own thread: posting them to the pool's workers
    could post to the very worker that waits for them."""

    def __init__(self) -> None:
        self._queues: list[queue.SimpleQueue] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._local = threading.local()

    def _grow(self, n: int) -> None:
        with self._lock:
            while len(self._queues) < n:
                q: queue.SimpleQueue = queue.SimpleQueue()
                threading.Thread(
                    target=self._work, args=(q,), name=f"snippets-x86-{len(self._queues)}", daemon=True
                ).start()
                self._queues.append(q)

    def _work(self, q: queue.SimpleQueue) -> None:
        self._local.nested = True
        while True:
            task, done = q.get()
            try:
                task()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, which re-raises it
                done.put(exc)
            else:
                done.put(None)

    def run(self, tasks: Sequence[Callable[[], Any]]) -> None:
        if len(tasks) == 1:
            tasks[0]()
            return
        if getattr(self._local, "nested", False):
            _run_here(tasks)
            return
        if self._pid != os.getpid():  # a forked child inherits no worker threads: start its own
            self._queues, self._lock, self._pid = [], threading.Lock(), os.getpid()
        if len(self._queues) < len(tasks) - 1:
            self._grow(len(tasks) - 1)
        done: queue.SimpleQueue = queue.SimpleQueue()
        for q, task in zip(self._queues, tasks[1:]):
            q.put((task, done))
        error: BaseException | None = None
        try:
            tasks[0]()
        except BaseException as exc:  # noqa: BLE001 - re-raised after the workers are done
            error = exc
        for _ in tasks[1:]:
            result = done.get()
            if result is not None and error is None:
                error = result
        if error is not None:
            raise error


def _run_here(tasks: Sequence[Callable[[], Any]]) -> None:
    """Every task on the calling thread, in order; the first error is raised once all have run (as ``run``)."""
    error: BaseException | None = None
    for task in tasks:
        try:
            task()
        except BaseException as exc:  # noqa: BLE001 - re-raised after the other tasks ran
            error = error or exc
    if error is not None:
        raise error


POOL = ThreadPool()


# --- the executor ------------------------------------------------------------------------------------------------


def _aligned_empty(nbytes: int) -> tuple[np.ndarray, int]:
    """A byte array with a 64-byte aligned region of ``nbytes``; returns (array, aligned address)."""
    buf = np.empty(max(nbytes, 1) + _ALIGN, dtype=np.uint8)
    addr = buf.ctypes.data
    return buf, addr + (-addr) % _ALIGN


def _slow_address(a: np.ndarray) -> int:
    """The data address of an array through the buffer protocol (``c_char.from_buffer`` is five times cheaper
    than ``.ctypes``, but needs a writeable, non-empty buffer)."""
    if a.flags.writeable and a.size:
        try:
            return ctypes.addressof(ctypes.c_char.from_buffer(a))
        except ValueError:  # dtypes the buffer protocol cannot express (ml_dtypes' bfloat16)
            pass
    return a.__array_interface__["data"][0]


#: where an ndarray object keeps its data pointer: numpy's public ``PyArrayObject_fields`` puts ``char *data``
#: right after the object header (ob_refcnt, ob_type)
_DATA_FIELD = 2 * ctypes.sizeof(ctypes.c_void_p)
_read_pointer = ctypes.c_void_p.from_address


def _fast_address(a: np.ndarray) -> int:
    """The data address of an ndarray read from its object (0.15 us, a buffer export costs 0.6-3 us)."""
    return _read_pointer(id(a) + _DATA_FIELD).value or 0


def _fast_address_works() -> bool:
    """Whether this interpreter and numpy lay an ndarray out as :func:`_fast_address` reads it (CPython with
    numpy's object layout; checked on owners, views, read-only and empty arrays against the array interface)."""
    import platform

    if platform.python_implementation() != "CPython":
        return False
    base = np.arange(64, dtype=np.float32)
    read_only = base[8:].reshape(8, 7)
    read_only.flags.writeable = False
    samples = [base, base[3:], base.reshape(8, 8).T, read_only, np.empty(0, np.int8), np.zeros((2, 3), np.float64)]
    return all(_fast_address(a) == a.__array_interface__["data"][0] for a in samples)


_address = _fast_address if _fast_address_works() else _slow_address


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The strides numpy gives a C-contiguous array of ``shape``."""
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


def _split(work: int, parts: int) -> list[tuple[int, int]]:
    """(start, count) of ``parts`` contiguous chunks of ``range(work)``, sizes differing by at most one."""
    base, extra = divmod(work, parts)
    out, start = [], 0
    for t in range(parts):
        n = base + (1 if t < extra else 0)
        out.append((start, n))
        start += n
    return out


class _CallState:
    """Per-thread call arguments and scratchpad for one set of threads."""

    def __init__(self, kernel: Kernel, chunks: list[tuple[int, int]], domain: tuple[int, ...] | None = None,
                 params: Sequence[int] = (), thunk_after: int = THUNK_AFTER) -> None:
        info = kernel.info
        self.thunk_after = thunk_after
        domain = info.parallel_domain if domain is None else domain
        size = params[info.scratchpad_slot] if info.scratchpad_slot >= 0 else info.scratchpad_size
        self.scratch_stride = -(-size // _ALIGN) * _ALIGN
        self.scratch, base = _aligned_empty(self.scratch_stride * len(chunks)) if info.has_scratchpad else (None, 0)
        self.args = []
        self.tasks = []
        self.starts = []
        #: per chunk (harness, kernel, call_args, start, count) for the native pool
        self.native: list[tuple[int, int, int, int, int]] = []
        harness = kernel.harness.cfunc
        for t, (start, count) in enumerate(chunks):
            ca = (ctypes.c_uint64 * max(info.call_args_len, 1))()
            if info.has_scratchpad:
                ca[info.n_inputs + info.n_outputs] = base + t * self.scratch_stride
            if params:  # the runtime-parameter block of this call's shapes (two's complement for negative shifts)
                ca[info.params_base:] = [v & 0xFFFF_FFFF_FFFF_FFFF for v in params]
            # an empty domain (a zero dim) has one chunk of no calls: its start index is never read
            first = () if not (domain and count) else (0,) * len(domain) if start == 0 else np.unravel_index(
                start, domain)  # (unravel_index costs ~3 us: a new shape makes a call state per dynamic Subgraph)
            idx = (ctypes.c_int64 * max(len(domain), 1))(*first)
            self.args.append(ca)
            self.starts.append(idx)
            self.tasks.append(_bind(harness, kernel.address, ctypes.addressof(ca), ctypes.addressof(idx), count))
            self.native.append(
                (kernel.harness.address, kernel.address, ctypes.addressof(ca), ctypes.addressof(idx), count)
            )
        self._single: Callable[[], Any] | None = None
        self._single_calls = 0
        #: the data addresses the call arguments hold (None: unknown, written by someone else)
        self.ptrs: list[int] | None = None

    @cached_property
    def job(self) -> Job:
        """The native pool's view of the chunks (the first on the caller), made at the first parallel call: a
        one-chunk call state (most of a new shape's) never needs it."""
        return Job(self.native, self.thunk_after)

    def run_single(self) -> None:
        """Run the one chunk on the calling thread (through a no-argument thunk from the second call on)."""
        single = self._single
        if single is None:
            self._single_calls += 1
            if self._single_calls < self.thunk_after:
                self.tasks[0]()
                return
            harness, *args = self.native[0]
            self._thunk = build_thunk(harness, tuple(args))  # kept: it owns the thunk's page
            single = self._single = self._thunk.cfunc
        single()


def _bind(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    return lambda: fn(*args)


class KernelExecutor:
    """Runs a compiled kernel on numpy arrays: ``executor(inputs, outs=None) -> outputs``."""

    def __init__(
        self,
        kernel: Kernel,
        input_specs: Sequence[tuple[np.dtype, tuple[int, ...]]],
        output_specs: Sequence[tuple[np.dtype, tuple[int, ...]]],
        num_threads: int,
        parallel_min_bytes: int = PARALLEL_MIN_BYTES,
        native_threads: bool = True,
        runtime_config: RuntimeConfig | None = None,
        *,
        work_ns: float | None = None,
        parallel_min_ns: int = PARALLEL_MIN_NS,
    ) -> None:
        self.kernel = kernel
        #: the parallel domain and runtime-parameter block of these shapes (a kernel lowered for every shape)
        self.domain = kernel.info.parallel_domain if runtime_config is None else runtime_config.parallel_domain
        self.params = () if runtime_config is None else runtime_config.values
        #: run workers' chunks on the native pool (False: the Python thread pool)
        self.native_threads = native_threads
        self.input_specs = [(np.dtype(d), tuple(s)) for d, s in input_specs]
        self.output_specs = [(np.dtype(d), tuple(s)) for d, s in output_specs]
        info = kernel.info
        if len(self.input_specs) != info.n_inputs or len(self.output_specs) != info.n_outputs:
            raise CodegenError(
                f"kernel has {info.n_inputs} inputs and {info.n_outputs} outputs, the Subgraph "
                f"{len(self.input_specs)} and {len(self.output_specs)}"
            )
        work = math.prod(self.domain)
        nbytes = sum(d.itemsize * math.prod(s) for d, s in (*self.input_specs, *self.output_specs))
        #: the estimated single-thread time of a call (ns), when known: see :func:`estimated_ns`
        self.work_ns = getattr(kernel, "work_ns", None) if work_ns is None else work_ns
        # split when each thread gets enough bytes (parallel_min_bytes 0: always) or enough estimated work
        by_size = nbytes // parallel_min_bytes if parallel_min_bytes > 0 else num_threads
        by_work = int(self.work_ns // parallel_min_ns) if self.work_ns is not None and parallel_min_ns > 0 else 0
        self.num_threads = max(1, min(num_threads, work, max(by_size, by_work)))
        self.chunks = _split(work, self.num_threads)
        self._state = _CallState(kernel, self.chunks, self.domain, self.params,
                                 THUNK_AFTER if runtime_config is None else DYNAMIC_THUNK_AFTER)
        self._busy = threading.Lock()
        self._n_data = info.n_inputs + info.n_outputs
        self._n_in = info.n_inputs
        #: the inlined call of __call__ applies: one chunk on the caller, addresses read from the array objects
        self._one_chunk = len(self._state.tasks) == 1 and _address is _fast_address
        self._in_fast = [(d, s, _c_strides(s, d.itemsize)) for d, s in self.input_specs]
        #: per data position, (weakref to the array of the last call, its address): see _addresses
        self._memo: list[tuple[weakref.ref, int] | None] = [None] * self._n_data
        #: per output, how a call makes it: large ones from the buffers kept between calls (buffers.BUFFERS) or
        #: with small pages (buffers.small_pages), the others numpy's
        self._new_outputs = [(pooled_empty if d.itemsize * math.prod(s) >= SMALL_PAGES_MIN_BYTES else np.empty,
                              s, d) for d, s in self.output_specs]

    def _input(self, i: int, a: Any) -> np.ndarray:
        """The i-th input as a C-contiguous array of the kernel's type and shape (copies if needed)."""
        dtype, shape = self.input_specs[i]
        if not isinstance(a, np.ndarray):
            a = np.asarray(a)
        if a.dtype != dtype:
            raise InputError(f"kernel input {i} must be {dtype}, got {a.dtype}")
        if a.shape != shape:
            raise InputError(f"kernel input {i} must have shape {list(shape)}, got {list(a.shape)}")
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        return a

    def _output(self, j: int, o: Any) -> np.ndarray:
        dtype, shape = self.output_specs[j]
        if o is None:
            return pooled_empty(shape, dtype)
        if (
            not isinstance(o, np.ndarray)
            or o.dtype != dtype
            or o.shape != shape
            or not o.flags.c_contiguous
            or not o.flags.writeable
        ):
            got = f"{getattr(o, 'dtype', type(o).__name__)}{list(getattr(o, 'shape', []))}"
            raise InputError(f"output array {j} must be a writeable C-contiguous {dtype}{list(shape)}, got {got}")
        return o

    def arrays(self, args: Sequence[Any], outs: Sequence[np.ndarray | None] | None = None
               ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """A call's inputs, checked against the specs (C-contiguous copies where needed), and its outputs (fresh
        arrays, or ``outs`` checked)."""
        specs = self.input_specs
        if len(args) != len(specs):
            raise InputError(f"the kernel takes {len(specs)} inputs, got {len(args)}")
        ins = list(args)
        for i, a in enumerate(ins):
            dtype, shape = specs[i]
            # the common case costs four attribute checks; anything else goes through the slow path
            if type(a) is not np.ndarray or a.dtype != dtype or a.shape != shape or not a.flags.c_contiguous:
                ins[i] = self._input(i, a)
        if outs is None:
            results = [new(shape, dtype) for new, shape, dtype in self._new_outputs]
        else:
            if len(outs) != len(self.output_specs):
                raise InputError(f"the kernel has {len(self.output_specs)} outputs, got {len(outs)} arrays")
            results = [self._output(j, o) for j, o in enumerate(outs)]
        return ins, results

    def __call__(self, args: Sequence[Any], outs: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        # The common call (exact C-contiguous arrays of the specs, fresh outputs, one chunk, nobody else running
        # it) inlines arrays/_addresses/launch: each layer of Python calls costs ~0.2 us, and a small model makes
        # a dozen kernel calls.
        if outs is None and self._one_chunk and len(args) == self._n_in:
            # a builtin dtype is a singleton and C-contiguity is the C strides (checked cheaper than .flags); an
            # array that fails either test (a size-1 dim with odd strides) takes the full check below
            for a, (dtype, shape, strides) in zip(args, self._in_fast):
                if type(a) is not np.ndarray or a.dtype is not dtype or a.shape != shape or a.strides != strides:
                    break
            else:
                results = [new(shape, dtype) for new, shape, dtype in self._new_outputs]
                if self._busy.acquire(blocking=False):
                    try:
                        state = self._state
                        ptrs = [_fast_address(a) for a in (*args, *results)]
                        if ptrs != state.ptrs:
                            state.args[0][:self._n_data] = ptrs
                            state.ptrs = ptrs
                        single = state._single
                        if single is not None:
                            single()
                        else:
                            state.run_single()
                    finally:
                        self._busy.release()
                    return results
        ins, results = self.arrays(args, outs)
        self.launch(self._addresses([*ins, *results]))
        return results

    def launch(self, ptrs: list[int]) -> None:
        """Run the kernel on data addresses (inputs then outputs) the caller vouches for: arrays of this
        executor's specs, C-contiguous, alive until this returns (an executor that slices its arrays itself,
        such as the row-block FC, computes the addresses of its slices instead of making views to check)."""
        if self._busy.acquire(blocking=False):
            try:
                self._launch(self._state, ptrs)
            finally:
                self._busy.release()
        else:  # called again from another thread while running: that call gets its own arguments
            self._launch(_CallState(self.kernel, self.chunks, self.domain, self.params), ptrs)

    def _addresses(self, arrays: Sequence[np.ndarray]) -> list[int]:
        """The data addresses of a call's arrays. A view (an array that does not own its data, such as the
        Subgraph's constants on every call) that is the same object as at that position in the last call costs
        a weakref check instead of reading its address again (which matters where :func:`_address` is the slow
        buffer export). A view's data address is fixed for its life (only an owner can be resized, and not
        while a view holds it), and the weakref dies with the view, so a new array at a recycled ``id`` is never
        taken for the old one."""
        if _address is _fast_address:
            return [_fast_address(a) for a in arrays]
        memo = self._memo
        ptrs = []
        for i, a in enumerate(arrays):
            m = memo[i]
            if m is not None and m[0]() is a:
                ptrs.append(m[1])
                continue
            p = _address(a)
            memo[i] = (weakref.ref(a), p) if not a.flags.owndata else None
            ptrs.append(p)
        return ptrs

    def _launch(self, state: _CallState, ptrs: list[int]) -> None:
        if ptrs != state.ptrs:  # numpy's allocator often hands back the same buffers: then nothing to write
            n = self._n_data
            for ca in state.args:
                ca[:n] = ptrs
            state.ptrs = ptrs
        if len(state.tasks) == 1:
            state.run_single()
            return
        _run_job(state.job, state.tasks, self.native_threads)

    run = __call__


def _run_job(job: Job, tasks: list[Callable[[], Any]], native: bool) -> None:
    """Run a job's chunks, the first on the caller: on the native pool, or on the Python pool when ``native`` is
    off or the native pool is busy with another caller's kernel."""
    if native:
        pool = native_pool()
        if pool.lock.acquire(blocking=False):
            try:
                pool.run_job(job)
            finally:
                pool.lock.release()
            return
    POOL.run(tasks)


class PartsLauncher:
    """Runs one call of each of several single-chunk KernelExecutors at once, one per thread (the caller runs the
    first): a call cut into kernels of its own (an FC's columns, see ``fc_executor.SplitNExecutor``) costs one
    native-pool dispatch, as a kernel split over its parallel domain does. The parts' call states are this
    launcher's: the executors are not called otherwise."""

    def __init__(self, executors: Sequence[KernelExecutor]) -> None:
        if any(len(e.chunks) != 1 for e in executors):
            raise CodegenError("a PartsLauncher runs executors of one chunk each")
        self.executors = list(executors)
        self._n_data = [e._n_data for e in executors]
        self._job = Job([e._state.native[0] for e in executors])
        self._tasks = [e._state.tasks[0] for e in executors]
        self._native = all(e.native_threads for e in executors)
        self._busy = threading.Lock()

    def launch(self, ptrs: Sequence[Sequence[int]]) -> None:
        """Run part ``i`` on the data addresses ``ptrs[i]`` (as :meth:`KernelExecutor.launch` vouches for them)."""
        if not self._busy.acquire(blocking=False):  # another thread's call holds the states: parts one by one
            for e, p in zip(self.executors, ptrs):
                e._launch(_CallState(e.kernel, e.chunks, e.domain, e.params), list(p))
            return
        try:
            for e, n, p in zip(self.executors, self._n_data, ptrs):
                e._state.args[0][:n] = p
                e._state.ptrs = None
            _run_job(self._job, self._tasks, self._native)
        finally:
            self._busy.release()


# --- compile_subgraph --------------------------------------------------------------------------------------------


_NO_WORK = frozenset({"Parameter", "Result", "Constant"})


def estimated_ns(body: Model) -> float | None:
    """The estimated single-thread run time of a kernel for ``body`` (static shapes), from its matrix products'
    flops, its other ops' element counts and the bytes of its inputs and outputs; None when a shape is dynamic.
    Only the thread split uses it: a kernel is split only if each thread gets ``parallel_min_ns`` of it."""
    flops = elements = nbytes = 0
    for n in body.get_ordered_ops():
        if n.type_name in _NO_WORK:
            if n.type_name == "Constant":
                continue
            o = n.outputs[0] if n.outputs else n.inputs[0]
            if not o.shape.is_static:
                return None
            nbytes += math.prod(o.shape.to_tuple()) * o.element_type.numpy.itemsize
            continue
        for o in n.outputs:
            if not o.shape.is_static:
                return None
            size = math.prod(o.shape.to_tuple())
            if n.type_name in ("MatMul", "Brgemm"):
                a = n.inputs[0].shape.to_tuple()
                k = a[-2] if getattr(n, "transpose_a", False) and len(a) > 1 else a[-1]
                flops += 2 * size * k
            else:
                elements += size
    return flops / FLOPS_PER_NS + elements / ELEMENT_OPS_PER_NS + nbytes / BYTES_PER_NS


def work_estimator(sg: Subgraph) -> Callable[[Sequence[tuple[int, ...]]], float | None]:
    """:func:`estimated_ns` of ``sg``'s body for given input shapes, as a function of the shapes: the body's
    symbolic dims are bound from the input shapes and each term evaluated, no body clone and shape inference per
    new shape (0.1-0.4 ms of a new shape's cost). Bodies whose dims are not all expressions of the input dims are
    estimated the slow way."""
    from snippets_core.errors import ShapeInferenceError as _NoRank

    weighted: list[tuple[float, tuple[Any, ...]]] = []  # (ns per unit, dims whose product is the units)
    try:
        for n in sg.body.get_ordered_ops():
            if n.type_name == "Constant":
                continue
            if n.type_name in _NO_WORK:
                o = n.outputs[0] if n.outputs else n.inputs[0]
                weighted.append((o.element_type.numpy.itemsize / BYTES_PER_NS, o.shape.sym_dims))
                continue
            for o in n.outputs:
                if n.type_name in ("MatMul", "Brgemm"):
                    a = n.inputs[0].shape.sym_dims
                    k = a[-2] if getattr(n, "transpose_a", False) and len(a) > 1 else a[-1]
                    weighted.append((2 / FLOPS_PER_NS, (*o.shape.sym_dims, k)))
                else:
                    weighted.append((1 / ELEMENT_OPS_PER_NS, o.shape.sym_dims))
        where = {d.name: (i, j) for i, p in enumerate(sg.body.parameters)
                 for j, d in enumerate(p.outputs[0].shape.sym_dims) if not isinstance(d, int) and d is not None
                 and d.name is not None}
    except _NoRank:
        weighted, where = [], {}
    names = {x for _, dims in weighted for d in dims if not isinstance(d, int) and d is not None for x in d.names}
    if not weighted or any(d is None for _, dims in weighted for d in dims) or not names <= set(where):
        return lambda shapes: estimated_ns(_shaped_body(sg, shapes))

    def estimate(shapes: Sequence[tuple[int, ...]]) -> float:
        bound = {name: shapes[i][j] for name, (i, j) in where.items()}
        total = 0.0
        for w, dims in weighted:
            units = 1
            for d in dims:
                units *= d if isinstance(d, int) else sum(c * math.prod(bound[x] for x in mono) for mono, c in d.terms)
            total += w * units
        return total

    return estimate


def _specs(sg: Subgraph) -> tuple[list[tuple[np.dtype, tuple[int, ...]]], list[tuple[np.dtype, tuple[int, ...]]]]:
    body = sg.body
    ins = [(p.outputs[0].element_type.numpy, p.outputs[0].shape.to_tuple()) for p in body.parameters]
    outs = [(r.outputs[0].element_type.numpy, r.outputs[0].shape.to_tuple()) for r in body.results]
    return ins, outs


def _is_static(model: Model) -> bool:
    return all(o.shape.is_static for n in model.get_ordered_ops() for o in n.outputs)


def lowering_config(body: Model, num_threads: int) -> Any:
    """The LinearIR Config for this machine: 16 lanes, the CPU plugin's domain-optimization knobs."""
    from snippets_core.lowered.linear_ir import Config
    from snippets_core.passes.graph_utils import has_domain_sensitive_ops

    sensitive = has_domain_sensitive_ops(body)
    return Config(
        vector_size=16,
        loop_depth=1,
        enable_domain_optimization=not sensitive,
        min_parallel_work_amount=max(1, num_threads),
        min_kernel_work_amount=256,
        need_fill_tail_register=sensitive,
    )


def generate_subgraph(
    sg: Subgraph,
    config: CompileConfig,
    host: Any,
    input_shapes: Sequence[tuple[int, ...]] | None = None,
    symbolic: bool = False,
) -> GeneratedSubgraph:
    """The core's per-Subgraph pipeline (``generate_subgraph``: data-flow passes with PropagatePrecision fed by
    this target's precisions, lowering, the plugins' positioned passes, the Generator) with an
    X86_64TargetMachine; the Subgraph is left untouched. ``input_shapes`` fixes dynamic dims. Returns the
    Kernel and the final LinearIR."""
    from snippets_core.codegen.subgraph_codegen import generate_subgraph as core_generate_subgraph
    from snippets_core.passes.data_flow_pipeline import DataFlowConfig
    from snippets_x86_64.target_machine import X86_64TargetMachine, propagation_precisions

    positioned = list(host.positioned_passes(TARGET_NAME, config)) if host is not None else []
    plugin_emitters = host.register_emitters(TARGET_NAME) if host is not None else {}
    tm = X86_64TargetMachine(plugin_emitters=plugin_emitters)
    return core_generate_subgraph(
        sg,
        tm,
        positioned_passes=positioned,
        disabled_passes=config.disabled_passes,
        lowering_config=replace(lowering_config(sg.body, config.num_threads), symbolic_dims=symbolic),
        # PropagatePrecision inserts the converts that make every op's inputs a type its emitter takes
        data_flow_config=DataFlowConfig.for_body(sg.body, supported_precisions=propagation_precisions),
        input_shapes=input_shapes,
    )


#: target_options that only steer the runtime (not part of the kernel cache key)
RUNTIME_OPTIONS = frozenset({"cache_dir", "native_steps", "parallel_min_bytes", "parallel_min_ns", "thread_pool"})


def _key_parts(config: CompileConfig, host: Any) -> list[Any]:
    from snippets_x86_64.cpu import cpu_features
    from snippets_x86_64.target_machine import arithmetic_emitters

    positioned = list(host.positioned_passes(TARGET_NAME, config)) if host is not None else []
    plugins = host.register_emitters(TARGET_NAME) if host is not None else {}
    table = {**arithmetic_emitters(), **plugins}
    return [
        ("threads", config.num_threads),
        ("disabled", sorted(config.disabled_passes)),
        ("positioned", [repr(p) for p in positioned]),
        ("emitters", [(op, _qualname(table[op])) for op in sorted(table)]),
        # the sources of every plugin that contributed passes or emitters: an edited pass makes new kernels
        ("plugin_sources", host.source_fingerprint(TARGET_NAME, config) if host is not None else []),
        # options that shape the code (e.g. Brgemm blocks); the runtime-only ones do not
        ("options", {k: v for k, v in dict(config.target_options).items() if k not in RUNTIME_OPTIONS}),
        # instructions chosen by CPU feature (a disk cache may be shared between machines)
        ("cpu", sorted(cpu_features())),
    ]


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"


def _kernel_for(sg: Subgraph, config: CompileConfig, host: Any, shapes: tuple[tuple[int, ...], ...] | None,
                symbolic: bool = False) -> Kernel:
    """The kernel of ``sg`` (for these input shapes when its own are dynamic, or for every shape with
    ``symbolic``), from the cache or generated."""
    cache_dir = cache_dir_from(dict(config.target_options))
    parts = _key_parts(config, host) + ([("input_shapes", shapes)] if shapes is not None else [])
    parts += [("symbolic_dims", True)] if symbolic else []
    key = cache_key(sg.body, parts)
    kernel = KERNEL_CACHE.get(key, cache_dir)
    if kernel is None:
        kernel = generate_subgraph(sg, config, host, shapes, symbolic=symbolic).kernel
        KERNEL_CACHE.put(key, kernel, cache_dir)
    kernel.cache_key = key
    if not symbolic:  # a kernel for one set of shapes: its work is known (a symbolic one's, per call shape)
        kernel.work_ns = estimated_ns(sg.body if shapes is None else _shaped_body(sg, shapes))
    return kernel


def _shaped_body(sg: Subgraph, shapes: Sequence[tuple[int, ...]]) -> Model:
    """A copy of the body with these input shapes, shapes inferred."""
    from snippets_core.ir.shape import Shape

    body = sg.body.clone()
    for p, shape in zip(body.parameters, shapes):
        p.shape = Shape(shape)
    body.validate()
    return body


def _output_specs(sg: Subgraph, shapes: Sequence[tuple[int, ...]]) -> list[tuple[np.dtype, tuple[int, ...]]]:
    """Element types and shapes of the outputs for these input shapes (the body's own shape inference)."""
    body = _shaped_body(sg, shapes)
    return [(r.outputs[0].element_type.numpy, r.outputs[0].shape.to_tuple()) for r in body.results]


def _executor_options(config: CompileConfig) -> tuple[int, bool]:
    options = dict(config.target_options)
    pool = options.get("thread_pool", "native")
    if pool not in ("python", "native"):
        from snippets_core.config import ConfigError

        raise ConfigError(f"target_options['thread_pool'] must be 'python' or 'native', got {pool!r}")
    from snippets_core.config import int_option

    return int_option(options, "parallel_min_bytes", PARALLEL_MIN_BYTES, minimum=0), pool == "native"


def _parallel_min_ns(config: CompileConfig) -> int:
    from snippets_core.config import int_option

    return int_option(dict(config.target_options), "parallel_min_ns", PARALLEL_MIN_NS, minimum=0)


#: rt_info key on an MHA Subgraph with quantized inputs that stays on the f32 MHA kernel: why
INT8_MHA_REJECT_REASON_KEY = "SnippetsInt8MHARejectReason"


def _int8_mha_executor(sg: Subgraph, config: CompileConfig) -> Any:
    """The int8 MHA executor of an MHA Subgraph whose Q, K, V are quantized (MarkInt8MHA), or None (the f32 MHA
    kernel runs it; why is in ``rt_info[INT8_MHA_REJECT_REASON_KEY]``)."""
    from snippets_core.tokenization.mark_int8_mha import INT8_MHA_INPUT_GRIDS

    grids = sg.rt_info.get(INT8_MHA_INPUT_GRIDS)
    if grids is None:
        return None
    from snippets_x86_64.cpu import cpu_features
    from snippets_x86_64.int8_mha import Int8MHAReject, plan_int8_mha
    from snippets_x86_64.int8_mha_executor import Int8MHAExecutor

    if "avx512_vnni" not in cpu_features():
        sg.rt_info[INT8_MHA_REJECT_REASON_KEY] = "the CPU lacks AVX512_VNNI"
        return None
    try:
        plan = plan_int8_mha(sg.body, grids)
    except Int8MHAReject as exc:
        sg.rt_info[INT8_MHA_REJECT_REASON_KEY] = str(exc)
        return None
    sg.rt_info.pop(INT8_MHA_REJECT_REASON_KEY, None)
    return Int8MHAExecutor(sg, plan, config.num_threads, _parallel_min_ns(config))


def compile_subgraph(sg: Subgraph, config: CompileConfig, host: Any) -> Any:
    """An executor running ``sg`` on this machine, or None (reason in ``sg.rt_info``) to use the reference when
    the target declares it does not generate something in it (UnsupportedByTarget); other errors are raised.
    A Subgraph with dynamic dims gets a :class:`DynamicKernelExecutor` (or a :class:`ShapeSpecializingExecutor`)."""
    from snippets_core.debug.config import debug_config
    from snippets_core.tokenization.tokenize_int8_fc_snippets import is_int8_fc

    if is_int8_fc(sg):  # one int8 kernel on the packed int8 weight, with its own executor
        from snippets_x86_64.int8_fc_executor import int8_fc_executor

        return int8_fc_executor(sg, config.num_threads, _parallel_min_ns(config))
    from snippets_core.tokenization.tokenize_int8_matmul_snippets import is_int8_matmul

    if is_int8_matmul(sg):  # both operands quantized per call, B repacked per batch, the int8 Brgemm
        from snippets_x86_64.int8_matmul_executor import Int8MatMulExecutor

        return Int8MatMulExecutor(sg, config.num_threads, _parallel_min_ns(config))
    mha = _int8_mha_executor(sg, config)
    if mha is not None:
        return mha
    debug = debug_config(config)  # a bad SNIPPETS_* debug setting is an error, not a fallback
    if debug.enabled:  # dumps, perf counters, segfault detector: see snippets_x86_64.debug_caps
        from snippets_x86_64.debug_caps import compile_subgraph_debug
        from snippets_x86_64.fc_executor import fc_executor

        # the kernel reads a FullyConnected weight packed: the debug executor gets it packed too (whole, one kernel)
        return fc_executor(sg, compile_subgraph_debug(sg, config, host, debug), config, host, split=False)
    from snippets_x86_64.brgemm_copy_b import MARK_PACKED_PASS, packed_weight_body_inputs
    from snippets_x86_64.fc_executor import fc_executor, row_split_subgraph

    if not _is_static(sg.body):
        sg.rt_info.pop(FALLBACK_KEY, None)
        if packed_weight_body_inputs(sg.body) and MARK_PACKED_PASS not in config.disabled_passes:
            # a FullyConnected: only M is dynamic; its Brgemm reads the weight packed (once, here), one kernel
            # reads M from its runtime parameters (fc_executor.runtime_rows), a kernel per shape where it cannot
            return shape_ahead.follow(sg, fc_executor(sg, ShapeSpecializingExecutor(sg, config, host), config, host))
        from snippets_core.lowered.symbolic import DynamicShapeError

        try:  # one kernel for every shape, its runtime parameters computed per shape
            kernel = _kernel_for(sg, config, host, None, symbolic=True)
            return shape_ahead.follow(sg, DynamicKernelExecutor(sg, config, host, kernel))
        # declared (or code that needs static shapes, or a gap that may hold for some shapes only): a kernel per
        # shape, said by describe()
        except (DynamicShapeError, ShapeInferenceError, UnsupportedByTarget) as exc:
            specializing = ShapeSpecializingExecutor(sg, config, host)
            specializing.why_per_shape = fallback_reason(exc)
            return specializing
        except Exception as exc:  # anything else is an error naming the Subgraph, never a silent change
            raise subgraph_error(exc, sg.name, TARGET_NAME) from exc
    try:  # an FC's kernel may have its M split between the threads: it runs on sg's arrays (the same memory)
        kernel = _kernel_for(row_split_subgraph(sg, config), config, host, None)
    except UnsupportedByTarget as exc:  # the declared reason: the Subgraph runs on its reference
        sg.rt_info[FALLBACK_KEY] = fallback_reason(exc)
        return None
    ins, outs = _specs(sg)
    executor = KernelExecutor(kernel, ins, outs, config.num_threads, *_executor_options(config),
                              parallel_min_ns=_parallel_min_ns(config))
    wrapped = fc_executor(sg, executor, config, host)
    if wrapped is executor and config.num_threads > 1:  # not an FC: a row-wise body may split its rows
        rows_in = row_inputs(sg)
        if rows_in is not None:
            wrapped = split_static_rows(sg, executor, config, host, rows_in, ROW_SPLIT_MIN_ROWS) or executor
    executor = wrapped
    sg.rt_info.pop(FALLBACK_KEY, None)
    sg.rt_info["SnippetsCacheKey"] = kernel.cache_key
    return executor


class DynamicKernelExecutor:
    """Runs a Subgraph whose body has dynamic dims on one kernel lowered for every shape (OpenVINO's dynamic
    Subgraph): on a call with new input shapes, the :class:`RuntimeConfigurator` computes the runtime-parameter
    block (parallel domain, data offsets, loop counts, pointer shifts, tail masks) and a :class:`KernelExecutor`
    with per-thread call arguments holding that block is kept for those shapes (bounded LRU of ``MAX_SHAPES``).
    Shapes the kernel cannot take (a dynamic dim that is 1 on one input and larger on another: numpy
    broadcasting decided at run time) get a kernel of their own, counted in ``describe()``."""

    MAX_SHAPES = 128

    def __init__(self, sg: Subgraph, config: CompileConfig, host: Any, kernel: Kernel) -> None:
        from snippets_core.lowered.runtime_configurator import RuntimeConfigurator

        self.sg = sg
        self.config = config
        self.host = host
        self.kernel = kernel
        info = kernel.info
        self.configurator = RuntimeConfigurator(
            info.input_dims, info.output_dims, [c for _, c in info.runtime_params], info.domain_codes()
        )
        self.input_types = [p.outputs[0].element_type.numpy for p in sg.body.parameters]
        self.output_types = [r.outputs[0].element_type.numpy for r in sg.body.results]
        #: the Subgraph's own output ranks: the kernel's output dims are rank-normalized (leading 1s prepended
        #: when the body's inputs differ in rank), the arrays handed on must keep the body's shapes
        self.output_ranks = [r.outputs[0].shape.rank for r in sg.body.results]
        self._options = _executor_options(config)
        self._min_ns = _parallel_min_ns(config)
        self._estimate = work_estimator(sg)
        self._executors: OrderedDict[tuple[tuple[int, ...], ...], Any] = OrderedDict()
        self._per_shape: ShapeSpecializingExecutor | None = None
        self._lock = threading.Lock()
        self._on_target = Placement(TARGET_NAME)
        #: where the last call ran (the snippets_core.runtime.placement protocol): here, except for a shape given a
        #: kernel of its own, which says where it ran
        self.last_placement = self._on_target
        #: new shapes seen (each cost one configurator run and one call state), and those given their own kernel
        self.new_shapes = 0
        self.per_shape_kernels = 0
        #: the inputs that have the output's rows when the body is row-wise (see row_inputs), else None
        self._row_inputs = row_inputs(sg) if config.num_threads > 1 else None
        #: shapes whose rows were split between the threads (RowSplitExecutor)
        self.row_splits = 0

    def _split_rows(self, whole: KernelExecutor, shapes: tuple[tuple[int, ...], ...]) -> RowSplitExecutor | None:
        """A :class:`RowSplitExecutor` for these shapes when the kernel's parallel domain has fewer indices than
        threads (a LayerNorm's is its batch: 1) but its rows carry enough work for each thread; else None."""
        rows_in = self._row_inputs
        assert rows_in is not None
        lead = shapes[rows_in[0]][:-1]
        rows = lead[-1] if lead else 0
        if math.prod(lead[:-1]) != 1 or whole.work_ns is None or rows < 2 * ROW_SPLIT_MIN_ROWS:
            return None
        parts = min(self.config.num_threads, rows // ROW_SPLIT_MIN_ROWS,
                    int(whole.work_ns // self._min_ns) if self._min_ns > 0 else self.config.num_threads)
        if parts < 2:
            return None
        executors = []
        for start, count in _split(rows, parts):
            part = tuple((*s[:-2], count, s[-1]) if i in rows_in else s for i, s in enumerate(shapes))
            cfg = self.configurator.configure(part)
            ins = list(zip(self.input_types, part))
            outs = list(zip(self.output_types, map(_body_rank, cfg.output_shapes, self.output_ranks)))
            executors.append((start, KernelExecutor(self.kernel, ins, outs, 1, *self._options, runtime_config=cfg)))
        self.row_splits += 1
        return RowSplitExecutor(whole, executors, rows_in)

    def _prepare(self, shapes: tuple[tuple[int, ...], ...], arrays: Sequence[np.ndarray]) -> Any:
        from snippets_core.lowered.symbolic import DynamicShapeError

        for i, (a, dtype) in enumerate(zip(arrays, self.input_types)):
            if a.dtype != dtype:
                raise InputError(f"Subgraph input {i} must be {dtype}, got {a.dtype}")
        with self._lock:
            executor = self._executors.get(shapes)
            if executor is not None:
                return executor
            try:
                cfg = self.configurator.configure(shapes)
            except DynamicShapeError:
                if self._per_shape is None:
                    self._per_shape = ShapeSpecializingExecutor(self.sg, self.config, self.host)
                    self._per_shape.why_per_shape = "numpy broadcasting of a dynamic dim decided at run time"
                executor = self._per_shape
                self.per_shape_kernels += 1
            else:
                ins = list(zip(self.input_types, shapes))
                outs = list(zip(self.output_types, map(_body_rank, cfg.output_shapes, self.output_ranks)))
                executor = KernelExecutor(
                    self.kernel, ins, outs, self.config.num_threads, *self._options, runtime_config=cfg,
                    # the work estimate only decides a split between threads (and costs a shape inference)
                    work_ns=self._estimate(shapes) if self.config.num_threads > 1 else None,
                    parallel_min_ns=self._min_ns,
                )
                if self._row_inputs is not None and executor.num_threads < self.config.num_threads:
                    executor = self._split_rows(executor, shapes) or executor
            self.new_shapes += 1
            self._executors[shapes] = executor
            if len(self._executors) > self.MAX_SHAPES:
                self._executors.popitem(last=False)
            return executor

    def prepare_ahead(self, shapes: tuple[tuple[int, ...], ...]) -> bool:
        """Make the call state of input ``shapes`` before their call (``shape_ahead``): False when it is kept
        already or the shapes would need a kernel of their own (made, if they come, by their call)."""
        if shapes in self._executors or len(shapes) != len(self.input_types):
            return False
        self.configurator.configure(shapes)  # a DynamicShapeError (run-time broadcasting) leaves it to the call
        self._prepare(shapes, ())
        return True

    def __call__(self, args: Sequence[Any], outs: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        arrays = [a if isinstance(a, np.ndarray) else np.asarray(a) for a in args]
        if len(arrays) != len(self.input_types):
            raise InputError(f"the Subgraph takes {len(self.input_types)} inputs, got {len(arrays)}")
        shapes = tuple(a.shape for a in arrays)
        executor = self._executors.get(shapes)
        if executor is None:
            executor = self._prepare(shapes, arrays)
            if shape_ahead.ENABLED:  # the other Subgraphs' states of this shape, in one burst (shape_ahead.py)
                shape_ahead.ahead(self, shapes)
        results = executor(arrays, outs)
        self.last_placement = executor.last_placement if executor is self._per_shape else self._on_target
        return results

    run = __call__

    def describe(self) -> str:
        n = len(self.kernel.info.runtime_params)
        text = f"one kernel for every shape ({n} runtime parameters), {self.new_shapes} shape(s) configured"
        if self.per_shape_kernels:
            text += f", {self.per_shape_kernels} with a kernel of their own (run-time broadcasting)"
        if self.row_splits:
            text += f", {self.row_splits} with their rows split between the threads"
        return text


#: fewest rows a thread gets when a row-wise kernel's rows are split between the threads
ROW_SPLIT_MIN_ROWS = 8


def row_inputs(sg: Subgraph) -> tuple[int, ...] | None:
    """The body inputs that have the output's rows, when every output row of ``sg`` depends only on the same row
    of those inputs (the other inputs and the constants broadcast along the rows): eltwise ops, and at least one
    LayerNormalization or reduction over the last axis only (a LayerNorm, its TorchScript decomposition, a softmax
    written out), whose kernel's domain stops before the rows. Such a kernel runs on any slice of rows; None for
    any other body (an eltwise body's domain covers its rows already)."""
    from snippets_core.ir.shape import normalize_axis
    from snippets_core.tokenization.tokenize_snippets import (
        BINARY_ELTWISE, ROW_REDUCTIONS, TERNARY_ELTWISE, UNARY_ELTWISE,
    )

    body = sg.body
    out = body.results[0].inputs[0].shape if body.results else None
    if out is None or not out.rank_is_static or out.rank < 2 or not isinstance(out.sym_dims[-1], int):
        return None
    rank, dims = out.rank, out.sym_dims
    if any(r.inputs[0].shape != out for r in body.results):
        return None

    def broadcasts(shape: Any) -> bool:  # one row: static, every dim but the last 1
        return shape.is_static and math.prod(shape.to_tuple()[:-1]) == 1

    rows = False  # a row op (the domain of an eltwise body already covers the rows)
    for n in body.get_ordered_ops():
        t = n.type_name
        if t in ("Parameter", "Result") or t in UNARY_ELTWISE or t in BINARY_ELTWISE or t in TERNARY_ELTWISE:
            continue
        if t == "Constant":
            if not broadcasts(n.outputs[0].shape):
                return None
            continue
        x = n.inputs[0].shape if n.inputs else None
        if x is None or not x.rank_is_static:
            return None
        if t == "LayerNormalization" and normalize_axis(n.axis, x.rank) == x.rank - 1:  # type: ignore[attr-defined]
            rows = True
            continue
        if t in ROW_REDUCTIONS and n.keep_dims:  # type: ignore[attr-defined]
            axes = n.inputs[1].source.node
            if axes.type_name == "Constant" and [normalize_axis(int(a), x.rank)
                                                 for a in np.asarray(axes.value).reshape(-1)] == [x.rank - 1]:
                rows = True
                continue
        return None
    if not rows:
        return None
    found = []
    for i, p in enumerate(body.parameters):
        shape = p.outputs[0].shape
        if shape.rank_is_static and shape.rank == rank and shape.sym_dims == dims:
            found.append(i)
        elif not (shape.rank_is_static and shape.rank <= rank and broadcasts(shape)):
            return None
    return tuple(found) or None


def fixed_subgraph(sg: Subgraph, body: Any, suffix: str) -> Subgraph:
    """A Subgraph of ``body`` (a clone of ``sg``'s whose Parameters got static shapes) with ``sg``'s rt_info."""
    from snippets_core.ir.ops.io import Parameter
    from snippets_core.ir.ops.subgraph import Subgraph

    body.validate()
    part = Subgraph(*[Parameter(p.outputs[0].element_type, p.outputs[0].shape, name=p.name).outputs[0]
                      for p in body.parameters], body=body, name=f"{sg.name}/{suffix}")
    part.rt_info.update(sg.rt_info)
    return part


def split_static_rows(sg: Subgraph, whole: KernelExecutor, config: CompileConfig, host: Any, rows_in: Sequence[int],
                      min_rows: int) -> RowSplitExecutor | None:
    """A :class:`RowSplitExecutor` for a static Subgraph whose rows are independent (a row-wise body, an FC) and
    whose kernel has fewer parallel indices than threads (a LayerNorm's domain is its batch; an FC of a prime M
    that SplitDimensionM could not split): a kernel compiled for each thread's consecutive rows (at most two
    heights) with the ``rows_in`` inputs folded to ``[1.., rows, C]``, when each thread gets ``parallel_min_ns``
    of work and ``min_rows`` rows; None otherwise."""
    from snippets_core.ir.shape import Shape

    threads, min_ns = config.num_threads, _parallel_min_ns(config)
    if threads < 2 or not rows_in or math.prod(whole.domain) >= threads or whole.work_ns is None:
        return None
    lead = whole.input_specs[rows_in[0]][1][:-1]
    m = math.prod(lead)
    parts = min(threads, m // min_rows, int(whole.work_ns // min_ns) if min_ns > 0 else threads)
    if parts < 2:
        return None
    by_rows: dict[int, tuple[Kernel, list, list]] = {}
    executors = []
    for start, count in _split(m, parts):
        if count not in by_rows:
            body = sg.body.clone()
            for i in rows_in:
                p = body.parameters[i]
                p.shape = Shape([*[1] * (len(lead) - 1), count, p.outputs[0].shape.to_tuple()[-1]])
            part = fixed_subgraph(sg, body, f"rows{count}")
            ins, outs = _specs(part)
            by_rows[count] = (_kernel_for(part, config, host, None), ins, outs)
        kernel, ins, outs = by_rows[count]
        executors.append((start, KernelExecutor(kernel, ins, outs, 1, *_executor_options(config))))
    return RowSplitExecutor(whole, executors, tuple(rows_in))


class RowSplitExecutor:
    """One shape of a row-wise Subgraph (see :func:`row_inputs`) whose kernel's parallel domain has fewer indices
    than threads (a LayerNorm of [1, S, C]: its domain is the batch; a static FC of a prime M) run as one call per
    thread, each on its consecutive rows: the kernel lowered for every shape with each part's runtime parameters,
    or a kernel compiled for the part's rows; the parts start in one dispatch (:class:`PartsLauncher`) on the row
    slices' addresses (C-contiguous: no copy)."""

    def __init__(self, whole: KernelExecutor, parts: list[tuple[int, KernelExecutor]], rows_in: tuple[int, ...]
                 ) -> None:
        #: the executor of the whole shape: its specs check the call's arrays
        self.whole = whole
        self.parts = parts
        self.launcher = PartsLauncher([ex for _, ex in parts])
        self.num_threads = len(parts)
        #: per data position (inputs, then outputs), the bytes of one row (0: read whole)
        self._row_bytes = [d.itemsize * s[-1] if i in rows_in else 0 for i, (d, s) in enumerate(whole.input_specs)]
        self._row_bytes += [d.itemsize * s[-1] for d, s in whole.output_specs]

    def __getattr__(self, name: str) -> Any:  # kernel, specs, domain of the whole shape's executor
        if name == "whole":  # not set yet (a copy being made)
            raise AttributeError(name)
        return getattr(self.whole, name)

    def __call__(self, args: Sequence[Any], outs: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        ins, results = self.whole.arrays(args, outs)
        base = [_address(a) for a in (*ins, *results)]
        self.launcher.launch([[p + start * b for p, b in zip(base, self._row_bytes)] for start, _ in self.parts])
        return results

    run = __call__


def _body_rank(shape: tuple[int, ...], rank: int) -> tuple[int, ...]:
    """``shape`` without the leading 1s that rank normalization prepended to reach the body's ``rank``."""
    extra = len(shape) - rank
    assert extra >= 0 and all(d == 1 for d in shape[:extra]), (shape, rank)
    return shape[extra:]


class ShapeSpecializingExecutor:
    """Runs a Subgraph whose body has dynamic dims but cannot be lowered for every shape: on the first call with a
    new set of input shapes it generates (or takes from the kernel cache) a kernel for exactly those shapes and keeps
    its KernelExecutor, at most ``MAX_SPECIALIZATIONS`` of them (least recently used dropped first: a dropped shape
    is compiled again, it never changes where a call runs). Shapes with something the target declares it does not
    generate (UnsupportedByTarget) run on the Subgraph's reference, ``reasons`` says why per shape; any other error
    is raised naming the Subgraph and the shapes. After each call ``last_placement`` says where that call ran;
    ``describe()`` counts the compiles and the shapes on the reference."""

    MAX_SPECIALIZATIONS = 64

    def __init__(self, sg: Subgraph, config: CompileConfig, host: Any) -> None:
        self.sg = sg
        self.config = config
        self.host = host
        self.input_types = [p.outputs[0].element_type.numpy for p in sg.body.parameters]
        self.input_dims = [p.outputs[0].shape for p in sg.body.parameters]
        #: per set of input shapes, its KernelExecutor, or None for a declared fallback; least recently used first
        self.executors: OrderedDict[tuple[tuple[int, ...], ...], KernelExecutor | None] = OrderedDict()
        self.reasons: dict[tuple[tuple[int, ...], ...], str] = {}
        self._on_target = Placement(TARGET_NAME)
        #: where the last call ran (the snippets_core.runtime.placement protocol)
        self.last_placement = self._on_target
        self._lock = threading.Lock()
        #: why this Subgraph has no kernel for every shape (set by compile_subgraph)
        self.why_per_shape = ""
        #: kernels obtained for new shapes (generated or from the kernel cache)
        self.compiles = 0

    def _check(self, arrays: Sequence[np.ndarray]) -> None:
        if len(arrays) != len(self.input_types):
            raise InputError(f"the Subgraph takes {len(self.input_types)} inputs, got {len(arrays)}")
        for i, (a, dtype, dims) in enumerate(zip(arrays, self.input_types, self.input_dims)):
            if a.dtype != dtype:
                raise InputError(f"Subgraph input {i} must be {dtype}, got {a.dtype}")
            if dims.rank_is_static and (
                a.ndim != dims.rank or any(d is not None and d != n for d, n in zip(dims.dims, a.shape))
            ):
                raise InputError(f"Subgraph input {i} must have shape {dims}, got {list(a.shape)}")

    def _specialize(self, shapes: tuple[tuple[int, ...], ...]) -> KernelExecutor | None:
        with self._lock:
            if shapes in self.executors:
                return self.executors[shapes]
            executor: KernelExecutor | None = None
            try:
                kernel = _kernel_for(self.sg, self.config, self.host, shapes)
                ins = list(zip(self.input_types, shapes))
                outs = _output_specs(self.sg, shapes)
                executor = KernelExecutor(kernel, ins, outs, self.config.num_threads, *_executor_options(self.config),
                                          parallel_min_ns=_parallel_min_ns(self.config))
                self.compiles += 1
            except UnsupportedByTarget as exc:  # the declared reason: these shapes run on the reference
                self.reasons[shapes] = f"input shapes {list(shapes)}: {fallback_reason(exc)}"
            except Exception as exc:  # anything else is an error naming the Subgraph, never a silent fallback
                raise subgraph_error(exc, self.sg.name, TARGET_NAME, shapes) from exc
            while len(self.executors) >= self.MAX_SPECIALIZATIONS:
                old, _ = self.executors.popitem(last=False)
                self.reasons.pop(old, None)
            self.executors[shapes] = executor
            return executor

    def __call__(self, args: Sequence[Any], outs: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        arrays = [a if isinstance(a, np.ndarray) else np.asarray(a) for a in args]
        shapes = tuple(a.shape for a in arrays)
        executor = self.executors.get(shapes, _MISSING)
        if executor is _MISSING:
            self._check(arrays)
            executor = self._specialize(shapes)
        else:
            try:
                self.executors.move_to_end(shapes)
            except KeyError:  # dropped by another thread's call since the lookup: the executor still runs
                pass
        if executor is not None:
            results = executor(arrays, outs)
            self.last_placement = self._on_target
            return results
        self.last_placement = Placement(REFERENCE, self.reasons.get(shapes))
        results = [np.asarray(r) for r in self.sg.evaluate(*arrays)]
        if outs is not None:
            for j, (o, r) in enumerate(zip(outs, results)):
                if o is not None:
                    if not isinstance(o, np.ndarray) or o.shape != r.shape or o.dtype != r.dtype:
                        raise InputError(f"output array {j} must be {r.dtype}{list(r.shape)}")
                    np.copyto(o, r)
                    results[j] = o
        return results

    run = __call__

    def describe(self) -> str:
        why = f" ({self.why_per_shape})" if self.why_per_shape else ""
        return f"a kernel per input shape{why}: {self.compiles} compiled, {len(self.reasons)} on the reference"


_MISSING: Any = object()


__all__ = [
    "DynamicKernelExecutor",
    "KernelExecutor",
    "PartsLauncher",
    "RowSplitExecutor",
    "ShapeSpecializingExecutor",
    "ThreadPool",
    "compile_subgraph",
    "generate_subgraph",
    "lowering_config",
    "fixed_subgraph",
    "row_inputs",
    "split_static_rows",
]

"""A compiled model's runs of static kernel steps as one native call list: no Python between the kernels.

A static step (a conv primitive of a fixed shape, a static Subgraph's :class:`KernelExecutor`) has the same kernels,
argument words and thread split on every call; only its data addresses change, and inside a run of such steps not
even those need to: the values that no step outside the run reads (nor the caller) live in buffers planned once, by
liveness, the way OpenVINO's memory solver plans a CNN's intermediates (a buffer a step's last reader frees is the
next step's output: warm in cache). :func:`native_steps` turns each maximal run of consecutive static steps into a
:class:`NativeRun`: per call it checks the run's inputs against what it was frozen for (dtype, shape, strides), writes
their addresses and those of fresh arrays for the values that leave the run into the argument words, and makes one
ctypes call, :class:`~snippets_x86_64.native_pool.CallList`, that calls every kernel in turn (a step split over the
threads through the native pool's dispatch, joined before the next). What leaves a run is always a new array: a
later call never overwrites what a caller holds.

A run that cannot go native on a call (another Python thread is in it, an input of another layout, the pool closed)
says so (returns False) and the compiled model runs its steps one by one, as without it.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from snippets_x86_64.aligned import ALIGN
from snippets_x86_64.native_pool import CallList, Job, NativePool, native_pool
from snippets_x86_64.runtime import KernelExecutor, _CallState, _c_strides
from snippets_x86_64.runtime import _address as data_address

#: an operand of a step: ("in", i) its i-th argument, ("out", j) its j-th output
Operand = tuple[str, int]
_F32 = np.dtype(np.float32)


@dataclass
class OutSpec:
    """An output as the step hands it out: ``np.ndarray(shape, dtype, buf, skip, strides)`` over a buffer of
    ``nbytes`` (the kernels write at the buffer's aligned address)."""

    dtype: np.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    nbytes: int


@dataclass
class StepForm:
    """A static step as native calls: what it takes (per argument: dtype, shape, strides; None: not read), what it
    gives, and its calls (entries of a :class:`CallList`), whose argument words at ``patches[operand]`` hold that
    operand's address."""

    ins: list[tuple[np.dtype, tuple[int, ...], tuple[int, ...]] | None]
    outs: list[OutSpec]
    entries: list[tuple[tuple[int, int, int, int, int], Job | None]] = field(default_factory=list)
    patches: dict[Operand, list[tuple[Any, int]]] = field(default_factory=dict)
    #: what the argument words point at and that nothing else holds (private buffers, blocks, call states)
    keep: list[Any] = field(default_factory=list)
    #: where numpy copies argument 0 before the run's native calls (a dynamic stem's padded planes): the step must be
    #: the first of its run (``starts_run``)
    prologue: np.ndarray | None = None

    def patch(self, operand: Operand, block: Any, index: int) -> None:
        self.patches.setdefault(operand, []).append((block, index))


def _buffer(nbytes: int) -> tuple[np.ndarray, int]:
    buf = np.empty(nbytes + ALIGN, np.uint8)
    addr = data_address(buf)
    return buf, addr + (-addr % ALIGN)


def _split_entries(form: StepForm, pool: NativePool, kernel: int, words: Sequence[int | Operand],
                   chunks: Sequence[tuple[int, int]]) -> None:
    """Entries of a harness kernel ``kernel(0, block, start, count)`` over ``chunks`` with an argument block of its own
    (``words``: an address, or an operand patched per call)."""
    block = (ctypes.c_uint64 * max(len(words), 1))()
    for i, w in enumerate(words):
        if isinstance(w, tuple):
            form.patch(w, block, i)
        else:
            block[i] = w & 0xFFFF_FFFF_FFFF_FFFF
    addr = ctypes.addressof(block)
    form.keep.append(block)
    if len(chunks) == 1:
        form.entries.append(CallList.call(kernel, 0, addr, chunks[0][0], chunks[0][1]))
    else:
        job = Job([(kernel, 0, addr, s, c) for s, c in chunks], thunk_after=1 << 62)
        form.keep.append(job)
        form.entries.append(CallList.dispatch(pool, job))


def conv_form(run: Any, pool: NativePool, shapes: Sequence[tuple[int, ...] | None]) -> StepForm | None:
    """A static conv primitive's step (``compile_conv_subgraph``'s ``run``) as native calls (``_conv_form``)."""
    from snippets_x86_64.conv_executor import ConvExecutor

    ex = getattr(run, "executor", None)
    out_shape = getattr(run, "out_shape", None)
    if not isinstance(ex, ConvExecutor) or out_shape is None:
        return None
    return _conv_form(ex, run.residual, tuple(out_shape), pool)


def dynamic_conv_form(run: Any, pool: NativePool, shapes: Sequence[tuple[int, ...] | None]) -> StepForm | None:
    """A dynamic conv primitive (:class:`~snippets_x86_64.conv_subgraph.DynamicConv`) at input shape ``shapes[0]``: the
    executor its shape cache made for that shape (a repeated shape's: None before its first call) as native calls."""
    from snippets_x86_64.conv_executor import ConvExecutor
    from snippets_x86_64.conv_subgraph import DynamicConv

    if type(run) is not DynamicConv or run.into is not None or not shapes or not shapes[0] or shapes[0][0] == 0:
        return None
    ex = run.executors.get(tuple(shapes[0]))
    if not isinstance(ex, ConvExecutor):  # (not made yet, or a conv then a pool kernel)
        return None
    out = ex.result_shape
    return _conv_form(ex, run.plan.residual, out[:2] if run.flat else out, pool)


def _conv_fits(ex: Any) -> bool:
    """A conv executor whose call can be its kernels alone: no Concat slice, no pre-ops that numpy applies, no test
    allocator."""
    g = ex.geo
    if g.planar:
        return ex.alloc is None and not ex.pre_ops and g.mo == g.m
    return ex.alloc is None and g.mo == g.m and ex.copy_pitch == g.c and not ex.numpy_copy and (
        ex.unpadded or ex.copy is not None)


def _conv_form(ex: Any, residual: int | None, out_shape: tuple[int, ...], pool: NativePool) -> StepForm | None:
    """A conv executor's call as native calls, or None when it has a reason to stay in Python (``_conv_fits``)."""
    from snippets_x86_64.conv_executor import nhwc_strides  # (the NHWC layout conv primitives pass between them)

    if not _conv_fits(ex):
        return None
    g = ex.geo
    n_args = 1 if residual is None else residual + 1
    x_shape = (g.n, g.c, g.h, g.w)
    # only the data input and the residual are read
    ins: list[tuple[np.dtype, tuple[int, ...], tuple[int, ...]] | None] = [None] * n_args
    ins[0] = (_F32, x_shape, _c_strides(x_shape, 4) if g.planar else nhwc_strides(g.h, g.w, g.c))
    if residual is not None:
        ins[residual] = (_F32, (g.n, g.m, g.out_h, g.out_w), nhwc_strides(g.out_h, g.out_w, g.m))
    if g.global_pool is not None:  # [N, M, 1, 1], contiguous: the body's [N, M] is the same memory
        out = OutSpec(_F32, out_shape, _c_strides(out_shape, 4), 4 * g.n * g.m)
    elif out_shape == (g.n, g.m, g.out_h, g.out_w):
        out = OutSpec(_F32, out_shape, nhwc_strides(g.out_h, g.out_w, g.m),
                      4 * g.n * g.out_h * g.out_w * g.m)
    else:
        return None
    form = StepForm(ins, [out])
    form.keep.append(ex)  # its tables (a dynamic shape's may leave the shape caches while this run holds them)
    src: int | Operand = ("in", 0)
    if g.planar:  # NCHW planes copied into the padded planes of this run's own buffer
        from snippets_x86_64.row_copy import planar_copy

        xp = ex._padded_buffer()
        form.keep.append(xp)
        src = data_address(xp)
        if ex.dynamic:  # numpy's copy before the run's calls (a JIT row copy would be a kernel per shape)
            form.prologue = xp[:, :, g.pt:g.pt + g.h, g.pl:g.pl + g.w]
        else:  # the JIT row copy of each input row
            rows = ex.planar_copy or planar_copy(g.n, g.c, g.h, g.w, g.hp, g.wp, g.pt, g.pl, ex.num_threads)
            form.keep.append(rows)
            _split_entries(form, pool, rows.kernel.address, [("in", 0), src, rows._table_address], rows.call.chunks)
    elif not ex.unpadded:  # the JIT copy into a padded buffer of this run's own (its border written once, here)
        xp = ex._padded_buffer()
        form.keep.append(xp)
        src = data_address(xp)
        _split_entries(form, pool, ex.copy.address, [("in", 0), src, *ex.copy_words[2:]], ex.copy_chunks)
    wei, bias, extra = ex.fixed_args
    dst: int | Operand = ("out", 0)
    if g.global_pool is not None:  # the kernel's row sums into a buffer of this run's own, the finish into the output
        rows, dst = _buffer(4 * g.n * g.out_h * g.out_w * g.m)
        form.keep.append(rows)
    res: int | Operand = dst if residual is None else ("in", residual)
    _split_entries(form, pool, ex.kernel.address, [src, wei, dst, bias, res, ex.table_address, *extra], ex.chunks)
    if g.global_pool is not None:
        _split_entries(form, pool, ex.finish.address, [dst, ("out", 0), *ex.finish_words], [(0, g.n)])
    return form


def kernel_form(run: Any, pool: NativePool, shapes: Sequence[tuple[int, ...] | None]) -> StepForm | None:
    """A static Subgraph's :class:`KernelExecutor` as native calls: C-contiguous inputs and outputs of its specs, a
    call state of this run's own (argument blocks, start indices, scratchpad)."""
    if type(run) is not KernelExecutor or not run.native_threads:
        return None
    ins = [(d, s, _c_strides(s, d.itemsize)) for d, s in run.input_specs]
    outs = [OutSpec(d, s, _c_strides(s, d.itemsize), d.itemsize * int(np.prod(s))) for d, s in run.output_specs]
    form = StepForm(ins, outs)
    state = _CallState(run.kernel, run.chunks, run.domain, run.params, thunk_after=1 << 62)
    form.keep.append(state)
    operands = [("in", i) for i in range(len(ins))] + [("out", j) for j in range(len(outs))]
    for ca in state.args:
        for p, op in enumerate(operands):
            form.patch(op, ca, p)
    if len(state.native) == 1:
        harness, kernel, ca, idx, count = state.native[0]
        form.entries.append(CallList.call(harness, kernel, ca, idx, count))
    else:
        form.entries.append(CallList.dispatch(pool, state.job))
    return form


def packed_weight_form(run: Any, pool: NativePool, shapes: Sequence[tuple[int, ...] | None]) -> StepForm | None:
    """A FullyConnected's :class:`~snippets_x86_64.fc_executor.PackedWeightExecutor` over a static kernel: the kernel's
    form with the packed weights' addresses written once (their arguments are not read from the model's slots)."""
    from snippets_x86_64.fc_executor import PackedWeightExecutor

    if type(run) is not PackedWeightExecutor or type(run.inner) is not KernelExecutor:
        return None
    form = kernel_form(run.inner, pool, shapes)
    if form is None:
        return None
    for i, w in run._packed_items:
        if form.ins[i] != (w.dtype, w.shape, w.strides):  # (the Python call would copy it: not this form)
            return None
        for block, index in form.patches.pop(("in", i), []):
            block[index] = data_address(w)
        form.ins[i] = None
    form.keep.append(run)
    return form


#: the step kinds that have a native form, tried in turn: each takes the step's executor, the pool and its input
#: shapes (a dynamic step's form is of one shape)
FORMS: tuple[Callable[[Any, NativePool, Sequence[tuple[int, ...] | None]], StepForm | None], ...] = (
    conv_form, dynamic_conv_form, kernel_form, packed_weight_form)


def step_form(run: Any, pool: NativePool, shapes: Sequence[tuple[int, ...] | None]) -> StepForm | None:
    """``run``'s native form at input ``shapes``, or None (the step runs in Python)."""
    for make in FORMS:
        form = make(run, pool, shapes)
        if form is not None:
            return form
    return None


def may_run_native(run: Any) -> bool:
    """Whether a step's executor is of a kind with a native form at some shape (a model's runs are cut at the others;
    a run is made per input shape, :class:`ShapeRuns`)."""
    from snippets_x86_64.conv_subgraph import DynamicConv

    from snippets_x86_64.conv_executor import ConvExecutor

    if type(run) is DynamicConv:  # judged by the executor made at compile time (a stem's planar copy at every shape)
        first = getattr(run, "_first", None)
        return run.into is None and isinstance(first, ConvExecutor) and _conv_fits(first)
    ex = getattr(run, "executor", None)
    if isinstance(ex, ConvExecutor) and getattr(run, "out_shape", None) is not None:
        return _conv_fits(ex)
    from snippets_x86_64.fc_executor import PackedWeightExecutor

    if type(run) is PackedWeightExecutor:
        run = run.inner
    return type(run) is KernelExecutor and run.native_threads


class LayoutMismatch(Exception):
    """Internal: a step of a run reads a value in another dtype, shape or layout than its producer in the run gives
    it (the run is not made: its steps run in Python)."""


class NativeRun:
    """Consecutive static steps of a compiled model run as one :class:`CallList` (see the module docstring).
    ``steps``: the plan's indices it covers; ``run(slots) -> bool`` runs them on the model's value slots (False: not
    this call, run them one by one); ``step_seconds()``: each step's time in the last native run."""

    def __init__(self, steps: Sequence[int], forms: Sequence[StepForm], args: Sequence[tuple[int, ...]],
                 outs: Sequence[tuple[int, ...]], escaping: set[int], pool: NativePool) -> None:
        self.steps = tuple(steps)
        self.pool = pool
        self._lock = threading.Lock()
        made_at: dict[int, tuple[int, int]] = {}  # slot -> (position in the run, output index)
        last_read: dict[int, int] = {}
        for p, a in enumerate(args):
            for s in a:
                last_read[s] = p
        #: (slot, dtype, shape, strides, patches) of the run's inputs, checked and written per call
        inputs: dict[int, tuple[Any, ...]] = {}
        #: (slot, nbytes, shape, dtype, strides, patches) of the values that leave the run: a new array per call
        fresh: list[tuple[Any, ...]] = []
        self._keep: list[Any] = []
        free: list[tuple[int, np.ndarray, int]] = []  # (bytes, buffer, address): planned buffers no value holds
        held: dict[int, tuple[int, np.ndarray, int]] = {}
        entries: list[tuple[tuple[int, int, int, int, int], Job | None]] = []
        self._first_entry: list[int] = []
        #: (slot, array) copied with numpy before the native calls (``StepForm.prologue``)
        self._prologue: tuple[int, np.ndarray] | None = None
        for p, (form, a, o) in enumerate(zip(forms, args, outs)):
            self._keep.append(form.keep)
            if form.prologue is not None:
                if p != 0:
                    raise LayoutMismatch(f"step {steps[p]} copies its input in Python: it must start its run")
                self._prologue = (a[0], form.prologue)
            for i, slot in enumerate(a):
                if i >= len(form.ins) or form.ins[i] is None:  # an argument its calls do not read
                    continue
                patches = form.patches.get(("in", i), [])
                if slot in made_at:  # a value made inside the run: its address is known now
                    q, j = made_at[slot]
                    spec = forms[q].outs[j]
                    if (spec.dtype, spec.shape, spec.strides) != form.ins[i]:
                        raise LayoutMismatch(f"step {steps[p]} reads slot {slot} in another layout than it is made")
                    if slot in held:
                        for block, index in patches:
                            block[index] = held[slot][2]
                    else:  # (a value leaving the run: written per call with the fresh array's address)
                        next(f for f in fresh if f[0] == slot)[5].extend(patches)
                else:
                    dtype, shape, strides = form.ins[i]
                    inputs.setdefault(slot, (slot, dtype, shape, strides, []))[4].extend(patches)
            for j, slot in enumerate(o):
                spec = form.outs[j]
                patches = list(form.patches.get(("out", j), []))
                made_at[slot] = (p, j)
                if slot in escaping:
                    fresh.append((slot, spec.nbytes + ALIGN, spec.shape, spec.dtype, spec.strides, patches))
                    continue
                fits = [b for b in free if b[0] >= spec.nbytes]
                if fits:
                    buf = min(fits, key=lambda b: b[0])
                    free.remove(buf)
                else:
                    arr, addr = _buffer(spec.nbytes)
                    buf = (spec.nbytes, arr, addr)
                    self._keep.append(arr)
                held[slot] = buf
                for block, index in patches:
                    block[index] = buf[2]
            # after the step's outputs took theirs: the buffers whose values this step read last (or nobody reads)
            for slot in {*a, *o}:
                if slot in held and last_read.get(slot, p) <= p:
                    free.insert(0, held.pop(slot))
            self._first_entry.append(len(entries))
            entries.extend(form.entries)
        self._inputs = list(inputs.values())
        self._fresh = fresh
        self._fresh_slots = [f[0] for f in fresh]
        self._calls = CallList([e for e, _ in entries], [j for _, j in entries], pool)
        self._first_entry.append(len(entries))

    def __call__(self, slots: list[Any]) -> bool:
        if not self._lock.acquire(blocking=False):  # another Python thread runs it: that call's buffers are in use
            return False
        try:
            for slot, dtype, shape, strides, patches in self._inputs:
                a = slots[slot]
                if type(a) is not np.ndarray or a.dtype is not dtype or a.shape != shape or a.strides != strides:
                    return False
                addr = data_address(a)
                for block, index in patches:
                    block[index] = addr
            made = []
            for _, nbytes, shape, dtype, strides, patches in self._fresh:
                buf = np.empty(nbytes, np.uint8)
                addr = data_address(buf)
                skip = -addr % ALIGN
                made.append(np.ndarray(shape, dtype, buf, skip, strides))
                addr += skip
                for block, index in patches:
                    block[index] = addr
            pool = native_pool()
            if pool is not self.pool or pool.closed:  # a forked child's new pool, or interpreter exit
                return False
            if self._prologue is not None:
                slot, inner = self._prologue
                inner[...] = slots[slot]
            with pool.lock:
                if pool.pending is not None:  # a deferred call before the run may still write its input
                    pool.sync()
                self._calls.run()
            for slot, y in zip(self._fresh_slots, made):
                slots[slot] = y
            return True
        finally:
            self._lock.release()

    def describe(self) -> str:
        """The native calls, planned buffers and values leaving the run."""
        held = sum(a.nbytes for a in self._keep if isinstance(a, np.ndarray))
        return (f"{self._calls.n} kernel calls, {held / 2**20:.1f} MiB of planned buffers, {len(self._fresh)} "
                f"value(s) leaving it")

    def step_seconds(self) -> list[float]:
        """Each step's time in the last native run, from the TSC stamps taken before each call."""
        first, calls = self._first_entry, self._calls
        return [calls.seconds(first[p], first[p + 1]) for p in range(len(self.steps))]


def starts_run(run: Any) -> bool:
    """A step whose native form copies its input in Python before the run's calls (a dynamic planar stem): it can
    only be the first step of a run."""
    from snippets_x86_64.conv_subgraph import DynamicConv

    return type(run) is DynamicConv and run._first.geo.planar


def _layout(run: Any) -> tuple[str, str]:
    """(the layout a native step reads its inputs in, the one it writes): "nhwc" for a conv primitive's maps (a global
    pool's [N, M] output is "c"), "c" (C-contiguous) for a kernel's arrays."""
    from snippets_x86_64.conv_subgraph import DynamicConv

    if type(run) is not DynamicConv and getattr(run, "out_shape", None) is None:  # a kernel's (or a packed FC's)
        return "c", "c"
    ex = getattr(run, "_first", None) or run.executor
    return "c" if ex.geo.planar else "nhwc", "c" if ex.geo.global_pool is not None else "nhwc"


#: input shapes a run keeps a native run for (the oldest dropped first): each holds its planned buffers
SHAPES_PER_RUN = 4
#: calls of a shape that run in Python before a run with dynamic steps is made for it: making one costs about two
#: calls' savings (MobileNet-v2, 51 steps: 0.7 ms of blocks and forms, and its buffers' first touch, against ~0.3 ms
#: saved a call), so a shape seen once or twice (a stream of new image sizes) is not charged for it
CALLS_BEFORE_RUN = 3


class ShapeRuns:
    """A run of consecutive steps whose executors have native forms, as a :class:`NativeRun` per input shape: the
    run's input shapes decide every step's (a dynamic conv's executor is its shape cache's for that shape). A static
    run is made on its first call; a run with dynamic steps on a shape's call after :data:`CALLS_BEFORE_RUN` (a shape
    that repeats: the first calls of a new shape run in Python, as before, and pay nothing for this). A shape some
    step has no native form for (a residual that broadcasts, an empty batch) runs in Python, and so does a call while
    another thread's holds the run.
    ``steps``: the plan's indices it covers; ``run(slots) -> bool`` (False: run them one by one)."""

    def __init__(self, steps: Sequence[int], plan: Sequence[tuple[Any, tuple[int, ...], tuple[int, ...]]],
                 leaving: set[int]) -> None:
        from snippets_x86_64.conv_subgraph import DynamicConv

        self.steps = tuple(steps)
        self._plan = list(plan)
        self._leaving = leaving
        made = {o for _, _, outs in plan for o in outs}
        #: the slots the run reads from outside (their shapes key its native runs)
        self._in_slots = sorted({a for _, args, _ in plan for a in args if a not in made})
        self._sightings = CALLS_BEFORE_RUN if any(type(run) is DynamicConv for run, _, _ in plan) else 0
        self._runs: dict[tuple, NativeRun | None] = {}
        self._seen: dict[tuple, int] = {}
        self._lock = threading.Lock()
        self._last: NativeRun | None = None

    def __call__(self, slots: list[Any]) -> bool:
        try:
            key = tuple([slots[s].shape for s in self._in_slots])
        except AttributeError:  # (not an array: the steps say what is wrong)
            return False
        run = self._runs.get(key)
        if run is None:
            run = self._learn(key, slots)
            if run is None:
                return False
        self._last = run
        return run(slots)

    def _learn(self, key: tuple, slots: list[Any]) -> NativeRun | None:
        """The native run of the input shapes ``key`` when they are seen often enough (None: this call in Python)."""
        if key in self._runs or not self._lock.acquire(blocking=False):
            return None
        try:
            seen = self._seen[key] = self._seen.get(key, 0) + 1
            if seen <= self._sightings:
                if len(self._seen) > 4 * SHAPES_PER_RUN:
                    self._seen.clear()
                return None
            run = self._make(dict(zip(self._in_slots, key)))
            if len(self._runs) >= SHAPES_PER_RUN:
                # the oldest shape's run goes, and so does its count: it earns a run again by repeating, so more
                # shapes than SHAPES_PER_RUN taking turns do not make a run (and touch its buffers) at every call
                old = next(iter(self._runs))
                del self._runs[old]
                self._seen.pop(old, None)
            self._runs[key] = run
            return run
        finally:
            self._lock.release()

    def _make(self, shapes: dict[int, tuple[int, ...]]) -> NativeRun | None:
        pool = native_pool()
        forms = []
        for run, args, outs in self._plan:
            form = step_form(run, pool, [shapes.get(a) for a in args])
            if form is None:
                return None
            shapes.update((o, spec.shape) for o, spec in zip(outs, form.outs))
            forms.append(form)
        try:
            return NativeRun(self.steps, forms, [p[1] for p in self._plan], [p[2] for p in self._plan], self._leaving,
                             pool)
        except LayoutMismatch:  # a step reads a value in another layout than its producer gives it: Python
            return None

    def describe(self) -> str:
        """One line for ``describe()``: the steps it covers and its native runs."""
        made = [r for r in self._runs.values() if r is not None]
        what = made[-1].describe() if made else "no native run yet"
        return (f"steps {self.steps[0]}..{self.steps[-1]} as one native call list per input shape "
                f"({len(made)} shape(s)); {what}")

    def step_seconds(self) -> list[float]:
        """Each step's time in the last native run."""
        assert self._last is not None
        return self._last.step_seconds()


def native_steps_option(config: Any) -> bool:
    """``target_options.native_steps`` (default true): run static steps as native call lists."""
    from snippets_core.config import ConfigError

    value = dict(config.target_options).get("native_steps", True)
    if not isinstance(value, bool):
        raise ConfigError(f"target_options.native_steps must be true or false, got {value!r}")
    return value


def native_steps(steps: Sequence[tuple[Any, tuple[int, ...], tuple[int, ...]]], escaping: set[int],
                 ) -> list[ShapeRuns]:
    """The runs of consecutive steps (``(executor, argument slots, output slots)`` in plan order, the executor None
    for a step that must stay in Python) whose executors have native forms (:func:`may_run_native`), as
    :class:`ShapeRuns`; ``escaping``: the slots something reads besides the steps (the model's outputs). A run of one
    step is left to Python (nothing between kernels to save there but the Python it already has)."""
    if native_pool().closed:
        return []
    able = [run is not None and may_run_native(run) for run, _, _ in steps]
    # a value passed between two steps of a run must be in the layout its reader takes (a conv primitive's NHWC output
    # into an eltwise kernel's C-contiguous input needs the copy its Python call makes): such a reader stays in Python
    made_by: dict[int, int] = {}
    for k, (run, args, outs) in enumerate(steps):
        if able[k] and any(a in made_by and able[made_by[a]] and _layout(steps[made_by[a]][0])[1] != _layout(run)[0]
                           for a in args):
            able[k] = False
        made_by.update((o, k) for o in outs)
    readers: dict[int, list[int]] = {}
    for k, (_, args, _) in enumerate(steps):
        for slot in args:
            readers.setdefault(slot, []).append(k)
    runs: list[ShapeRuns] = []
    k = 0
    while k < len(steps):
        if not able[k]:
            k += 1
            continue
        stop = k + 1
        while stop < len(steps) and able[stop] and not starts_run(steps[stop][0]):
            stop += 1
        if stop - k > 1:
            inside = range(k, stop)
            leaving = {o for q in inside for o in steps[q][2]
                       if o in escaping or any(r >= stop for r in readers.get(o, ()))}
            runs.append(ShapeRuns(list(inside), [steps[q] for q in inside], leaving))
        k = stop
    return runs


__all__ = ["NativeRun", "OutSpec", "ShapeRuns", "StepForm", "native_steps", "step_form"]

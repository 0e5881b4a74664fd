"""compile_model and CompiledModel: whole-model execution, fused kernels and reference kernels together.

The compiled model is a flat plan of steps in topological order. Each step reads and writes numbered
value slots; Subgraphs run on the chosen target's executor, every other node on its numpy reference.
Everything that can be decided once (slot numbers, which values die after which step, input checks)
is decided at compile time so the call path stays lean: values that depend on no input (shape arithmetic
on static shapes) are folded into constants, and shape-only ops run as numpy views (see shape_steps).

Placement is reported per call: an executor that may run a call somewhere else than where it was compiled
for (see :mod:`snippets_core.runtime.placement`) says where after each call, and ``last_run_stats``,
``placement()`` and ``describe()`` show the last call's places, with the target's reason for each fallback.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from snippets_core.config import CompileConfig, ConfigError
from snippets_core.errors import InputError, UnsupportedByTarget
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.evaluate import evaluate_node
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.passes.widen_bf16_convolution import PRECISION_NOTE
from snippets_core.ir.shape import Shape, SymDim
from snippets_core.runtime.broadcast_checks import BroadcastChecks, CheckedStep, StepBroadcastChecks
from snippets_core.runtime.gc_pause import paused_gc
from snippets_core.runtime.inputs import as_input_array, expect_output_arrays
from snippets_core.runtime.layout_steps import compile_in_layout
from snippets_core.runtime.placement import (
    FALLBACK_KEY,
    REFERENCE,
    Placement,
    ReportsPlacement,
    fallback_reason,
    subgraph_error,
)
from snippets_core.runtime.shape_fold import FOLDED, ShapeFolder, symbol_sources
from snippets_core.runtime.shape_steps import VIEW_OPS, fold, view_executor
from snippets_core.runtime.window_checks import WindowChecks
from snippets_core.runtime.targets import ResolvedTarget, resolve_target

Executor = Callable[[list[np.ndarray]], Sequence[np.ndarray]]
#: a Subgraph's executor and where it runs, or None (it runs on its reference, with the target's reason if any)
SubgraphCompiler = Callable[[Subgraph], "tuple[Executor, str] | None"]


@dataclass
class Step:
    """One node of the plan: which slots it reads and writes, how it runs, and where."""

    node: Node
    args: tuple[int, ...]
    outs: tuple[int, ...]
    run: Executor
    where: str
    frees: tuple[int, ...] = ()
    #: per output: the model output name it is, when nothing else reads it and the executor can write
    #: into a caller's array (``run(args, outs)``); then preallocated outputs are written in place
    direct: tuple[str | None, ...] | None = None
    #: the executor, when it reports per call where it ran (else every call runs at ``where``)
    reporter: ReportsPlacement | None = None
    #: why a Subgraph compiled to run on its reference does (the target's declared reason)
    reason: str | None = None
    #: broadcasts of dims only the step's input arrays give, checked before it runs (the plan wraps ``run``)
    checks: StepBroadcastChecks | None = None


@dataclass(frozen=True)
class InputSpec:
    name: str
    slot: int
    dtype: np.dtype
    element_type: ElementType
    dims: tuple[int | None, ...] | None
    #: the shape when every dim is static, else None (the fast path of the input check compares it)
    static_shape: tuple[int, ...] | None


@dataclass
class RunStats:
    """Timing of the last call: seconds per step, grouped by where it ran. ``fallbacks`` maps each Subgraph
    that ran on its reference in that call to the target's reason."""

    steps: list[tuple[str, str, str, float]] = field(default_factory=list)  # (name, op, where, seconds)
    fallbacks: dict[str, str] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(s[3] for s in self.steps)

    def by_where(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for _, _, where, t in self.steps:
            out[where] = out.get(where, 0.0) + t
        return out


class CompiledModel:
    """A model compiled for one target. Call it with a dict of input arrays by name.

    ``cm(inputs)`` returns a dict of numpy arrays by output name; ``cm(inputs, outputs={...})`` writes
    into preallocated arrays (of the right shape and dtype) and returns them. ``cm.subgraphs`` lists the
    fused Subgraphs; ``cm.describe()`` says what runs where; ``cm.last_run_stats`` times the last call.
    """

    def __init__(self, model: Model, target: ResolvedTarget, config: CompileConfig,
                 executors: Mapping[int, tuple[Executor, str]] | SubgraphCompiler) -> None:
        self.model = model
        self.target = target
        self.target_name = target.name
        self.config = config
        self.subgraphs: list[Subgraph] = [n for n in model.get_ordered_ops() if isinstance(n, Subgraph)]
        self.last_run_stats = RunStats()  # (sets _stats, _stamps, _placed)
        self._build_plan(executors)
        #: the call path's plan: entries (native run or None, its steps as (index, plan tuple), the slots freed after
        #: a native run, its stamp placeholders); one step per entry until ``_freeze``
        self._entries = [(None, ((k, p),), (), ()) for k, p in enumerate(self._plan)]
        #: native runs by their first step (``_freeze``); calls before the freeze (the first decides what a step may
        #: defer and warms what is made on first use)
        self._native_runs: dict[int, Any] = {}
        self._calls_before_freeze = 1

    # --- plan -------------------------------------------------------------------------------------
    def _build_plan(self, executors: Mapping[int, tuple[Executor, str]] | SubgraphCompiler) -> None:
        """``executors``: the compiled Subgraphs by node id, or the function that compiles one. Given the function,
        only the Subgraphs that run per call are compiled: not those folded per input shape or whose values no
        step reads (a Cast of a causal mask computed once per shape would otherwise build a kernel never called)."""
        lazy = None if isinstance(executors, Mapping) else executors
        order = self.model.get_ordered_ops()
        slot_of: dict[tuple[int, int], int] = {}
        n_slots = 0
        for n in order:
            for o in n.outputs:
                slot_of[(n.id, o.index)] = n_slots
                n_slots += 1
        self._n_slots = n_slots
        self._constants: list[tuple[int, np.ndarray]] = []
        self._inputs: list[InputSpec] = []
        self._results: list[tuple[str, int, ElementType]] = []
        steps: list[Step] = []
        known: dict[int, np.ndarray] = {}  # slots whose value is known at compile time
        # values decided by the inputs' shapes only: computed once per new shape (see shape_fold)
        folder = ShapeFolder(symbol_sources([(p.shape, slot_of[(p.id, 0)]) for p in self.model.parameters]))
        for n in order:
            outs = tuple(slot_of[(n.id, o.index)] for o in n.outputs)
            if isinstance(n, Parameter):
                et = n.element_type
                static = n.shape.to_tuple() if n.shape.is_static else None
                self._inputs.append(InputSpec(n.name, outs[0], et.numpy if et is not ElementType.dynamic else None,
                                              et, n.shape.dims, static))
                continue
            if isinstance(n, Constant):
                self._constants.append((outs[0], n.value))
                known[outs[0]] = n.value
                continue
            args = tuple(slot_of[(i.source.node.id, i.source.index)] for i in n.inputs)
            if isinstance(n, Result):
                self._results.append((n.name, args[0], n.outputs[0].element_type))
                continue
            reason = None
            # (a Subgraph too: a Cast of a causal mask tokenized into a kernel would run per call)
            if folder.take(n, args, outs, known):
                steps.append(Step(n, (), outs, folder.executor(outs), FOLDED))
                continue
            if lazy is not None and isinstance(n, Subgraph) and not all(a in known for a in args):
                # compiled below if a live step: its placement changes no other node's plan (it is not a constant)
                steps.append(Step(n, args, outs, _not_compiled, ""))
                continue
            compiled = lazy(n) if lazy is not None and isinstance(n, Subgraph) else (
                None if lazy is not None else executors.get(n.id))  # type: ignore[union-attr]
            if compiled is not None:
                run, where = compiled
            else:
                folded = fold(n, args, known)
                if folded is not None:  # depends on no input: computed once, here
                    for slot, v in zip(outs, folded):
                        self._constants.append((slot, v))
                        known[slot] = v
                    continue
                view = view_executor(n)
                if view is not None:
                    run, where = view, "view"
                else:
                    run, where = _reference_executor(n), REFERENCE
                    reason = n.rt_info.get(FALLBACK_KEY) if isinstance(n, Subgraph) else None
            reporter = run if isinstance(run, ReportsPlacement) else None
            steps.append(Step(n, args, outs, run, where, reporter=reporter, reason=reason))
        if folder:  # a folded step reads only the inputs that give its symbols: the others leave the plan
            folder.finish(known)
            for st in steps:
                if st.where == FOLDED:
                    st.args = folder.key_args()
        steps = _live_steps(steps, {s for _, s, _ in self._results})
        for st in steps:
            if st.run is _not_compiled:
                compiled = lazy(st.node)  # type: ignore[misc, arg-type]
                st.run, st.where = compiled if compiled is not None else (_reference_executor(st.node), REFERENCE)
                st.reporter = st.run if isinstance(st.run, ReportsPlacement) else None
                st.reason = st.node.rt_info.get(FALLBACK_KEY) if compiled is None else None
        folder.keep(o for st in steps if st.where == FOLDED for o in st.outs)
        self._shape_folder = folder
        # Free each slot after its last reader (results are read at the end, so they are never freed).
        keep = {s for _, s, _ in self._results} | {s for s, _ in self._constants}
        last_use: dict[int, int] = {}
        for k, st in enumerate(steps):
            for a in st.args:
                last_use[a] = k
        frees: dict[int, list[int]] = {}
        for slot, k in last_use.items():
            if slot not in keep:
                frees.setdefault(k, []).append(slot)
        for k, st in enumerate(steps):
            st.frees = tuple(sorted(frees.get(k, ())))
        readers: dict[int, int] = {}
        for st in steps:
            for a in st.args:
                readers[a] = readers.get(a, 0) + 1
        result_of_slot: dict[int, str] = {}
        for name, slot, _ in self._results:
            readers[slot] = readers.get(slot, 0) + 1
            result_of_slot.setdefault(slot, name)
        for st in steps:
            if isinstance(st.node, Subgraph) and _accepts_outs(st.run):
                direct = tuple(result_of_slot.get(o) if readers.get(o) == 1 else None for o in st.outs)
                if any(direct):
                    st.direct = direct
        for st in steps:  # broadcasts of dims that only the step's input arrays give: checked before it runs
            if st.where not in (FOLDED, "view") and any(_dynamic(i.shape) for i in st.node.inputs):
                checks = StepBroadcastChecks(st.node)
                st.checks = checks if checks else None
        self._steps = steps
        #: the call path's view of the steps: one flat tuple each (attribute lookups on a Step and its node cost
        #: about a microsecond per step, a few percent of a small model's call)
        self._plan = [(CheckedStep(st.run, st.checks) if st.checks else st.run, st.args, st.outs, st.frees,
                       st.node.name, st.node.type_name, st.where, st.reporter, st.reason, st.direct) for st in steps]
        self._output_name_set = frozenset(r[0] for r in self._results)
        self._result_specs = {
            r.name: (r.outputs[0].element_type.numpy, r.outputs[0].shape.to_tuple())
            for r in self.model.results
            if r.outputs[0].shape.is_static and r.outputs[0].element_type not in (ElementType.string, ElementType.dynamic)
        }
        declared = {p.name for p in self.model.parameters}
        self._input_names = [s.name for s in self._inputs if s.name in declared]

    def _freeze(self) -> None:
        """Ask the target for native runs of consecutive static steps (a target's ``native_steps``: one native call
        runs their kernels in turn, their intermediate values in buffers planned once) and make them the call path's
        entries; the other steps stay one per entry. Done once, on the second call."""
        make = getattr(self.target.obj, "native_steps", None)
        if make is None:
            return
        steps = [(run if reporter is None and where not in (FOLDED, "view", REFERENCE) else None, args, outs)
                 for run, args, outs, _, _, _, where, reporter, _, _ in self._plan]
        runs = make(steps, {slot for _, slot, _ in self._results}, self.config)
        if not runs:
            return
        by_first = {r.steps[0]: r for r in runs}
        entries, k = [], 0
        while k < len(self._plan):
            r = by_first.get(k)
            if r is None:
                entries.append((None, ((k, self._plan[k]),), (), ()))
                k += 1
                continue
            inside = tuple((q, self._plan[q]) for q in r.steps)
            frees = tuple(sorted({s for _, p in inside for s in p[3]}))
            # the inner steps' stamps: filled from the run's own clock when last_run_stats is read
            entries.append((r, inside, frees, [None] * (len(r.steps) - 1)))
            k = r.steps[-1] + 1
        self._native_runs = by_first
        self._entries = entries

    # --- calling ----------------------------------------------------------------------------------
    @property
    def input_names(self) -> list[str]:
        return list(self._input_names)

    @property
    def output_names(self) -> list[str]:
        return [r[0] for r in self._results]

    def _check_inputs(self, inputs: Mapping[str, Any]) -> list[tuple[int, np.ndarray]]:
        if not isinstance(inputs, Mapping):
            raise InputError(f"inputs must be a dict of arrays by name ({', '.join(self._input_names)}), "
                             f"got {type(inputs).__name__}")
        out = []
        for spec in self._inputs:
            a = inputs.get(spec.name)
            # the common case (an exact ndarray of a static shape) costs three comparisons
            if type(a) is not np.ndarray or a.dtype != spec.dtype or a.shape != spec.static_shape:
                a = self._check_input(spec, inputs)
            out.append((spec.slot, a))
        if len(inputs) != len(self._inputs):
            unknown = [k for k in inputs if k not in self._input_names]
            raise InputError(f"unknown input {unknown[0]!r}; the model's inputs are: {', '.join(self._input_names)}")
        if self._symbol_checks:
            self._check_symbols(out)
        if self._broadcast_checks:
            self._broadcast_checks.check(out)
        if self._window_checks:
            self._window_checks.check(out)
        return out

    @cached_property
    def _window_checks(self) -> WindowChecks:
        """Convolution and pooling windows must fit their symbolic inputs (see window_checks)."""
        return WindowChecks(self.model, [spec.name for spec in self._inputs])

    @cached_property
    def _broadcast_checks(self) -> BroadcastChecks:
        """Dims related by a broadcast atom (``bcast(S,T)``) must broadcast at run time (see broadcast_checks)."""
        return BroadcastChecks(self.model, [spec.name for spec in self._inputs])

    @cached_property
    def _symbol_checks(self) -> tuple[tuple[int, int, str | None, SymDim, str], ...]:
        """(position in the checked list, axis, the plain name or None, symbol, input name) for every symbolic
        input dim, plain names first (they bind the values that expressions such as ``S+1`` are checked
        against); empty when nothing is shared or related, so such a model pays one truth test per call."""
        shapes = {p.name: p.shape for p in self.model.parameters}
        checks = []
        for k, spec in enumerate(self._inputs):
            shape = shapes.get(spec.name)
            if shape is not None and shape.syms is not None:
                checks += [(k, axis, sym.name, sym, spec.name) for axis, sym in enumerate(shape.syms) if sym]
        # A name that appears once and that no expression uses has nothing to agree with: not checked.
        uses = [c[2] for c in checks] + [n for c in checks if c[2] is None for n in c[3].names]
        checks = [c for c in checks if c[2] is None or uses.count(c[2]) > 1]
        return tuple(sorted(checks, key=lambda c: c[2] is None))

    def _check_symbols(self, arrays: list[tuple[int, np.ndarray]]) -> None:
        """Inputs that share a symbolic dim (``S`` in ``[B, S]`` and ``[B, S, 768]``) must agree on its size."""
        env: dict[str, int] = {}
        for k, axis, plain, sym, _ in self._symbol_checks:
            size = arrays[k][1].shape[axis]
            if plain is not None:
                if env.setdefault(plain, size) != size:
                    self._symbol_error(arrays, k, axis, sym, size)
            else:
                want = sym.evaluate(env)
                if want is not None and want != size:
                    self._symbol_error(arrays, k, axis, sym, size)

    def _symbol_error(self, arrays: list[tuple[int, np.ndarray]], k: int, axis: int, sym: SymDim, size: int) -> None:
        """The InputError for dim ``axis`` of input ``k``: names both inputs, the symbol and both sizes."""
        name = self._inputs[k].name
        first: dict[str, tuple[int, str, int]] = {}  # symbol -> (size, input, axis) where it was bound
        for k2, axis2, plain, _, name2 in self._symbol_checks:
            if plain is not None:
                first.setdefault(plain, (arrays[k2][1].shape[axis2], name2, axis2))
        if sym.name is not None:
            size0, name0, axis0 = first[sym.name]
            raise InputError(f"inputs {name0!r} and {name!r} disagree on the symbolic dim {sym.name}: {sym.name} = "
                             f"{size0} in {name0!r} (dim {axis0}) but {size} in {name!r} (dim {axis})")
        env = {n: v[0] for n, v in first.items()}
        which = " and ".join(sorted(f"{n} = {first[n][0]} in {first[n][1]!r}" for n in sym.names))
        raise InputError(f"input {name!r} has dim {axis} of size {size}, but the model declares it {sym} "
                         f"= {sym.evaluate(env)} ({which})")

    def _check_input(self, spec: InputSpec, inputs: Mapping[str, Any]) -> np.ndarray:
        """The slow path of the input check: conversions and the error messages."""
        if spec.name not in inputs:
            unknown = [k for k in inputs if k not in self._input_names]
            if unknown:  # a misspelt name explains the missing one best
                raise InputError(f"unknown input {unknown[0]!r}; the model's inputs are: "
                                 f"{', '.join(self._input_names)}")
            raise InputError(f"missing input {spec.name!r}; the model's inputs are: {', '.join(self._input_names)}")
        a = inputs[spec.name]
        if not isinstance(a, np.ndarray):
            a = as_input_array(spec.name, a, spec.dtype)
        elif spec.dtype is not None and a.dtype != spec.dtype:
            raise InputError(f"input {spec.name!r} must be {spec.element_type} ({spec.dtype}), got {a.dtype}")
        if spec.dims is not None and (
            a.ndim != len(spec.dims) or any(d is not None and d != s for d, s in zip(spec.dims, a.shape))
        ):
            declared = next((p.shape for p in self.model.parameters if p.name == spec.name), Shape(spec.dims))
            why = (f"rank {a.ndim} instead of {len(spec.dims)}" if a.ndim != len(spec.dims) else ", ".join(
                f"dim {i} is {s} where the model fixes {d}" for i, (d, s) in enumerate(zip(spec.dims, a.shape))
                if d is not None and d != s))
            raise InputError(f"input {spec.name!r} must have shape {declared}, got {list(a.shape)}: {why}")
        return a

    @property
    def last_run_stats(self) -> RunStats:
        """Seconds per step of the last call, and where each ran. Built from the call's clock stamps when asked
        for: the call path pays one clock read per step and nothing else for it."""
        if self._stats is None:
            stamps, placed = self._native_stamps(self._stamps), self._placed
            steps, fallbacks = [], {}
            for k, (_, _, _, _, name, op, where, reporter, reason, _) in enumerate(self._plan[:len(stamps) - 1]):
                if reporter is not None:
                    p = placed[k]
                    where = p.where
                    if p.reason is not None:
                        fallbacks[name] = p.reason
                elif reason is not None:
                    fallbacks[name] = reason
                steps.append((name, op, where, stamps[k + 1] - stamps[k]))
            self._stats = RunStats(steps, fallbacks)
        return self._stats

    def _native_stamps(self, stamps: list[float | None]) -> list[float]:
        """``stamps`` with the placeholders of each native run's inner steps filled from the run's own clock (the
        TSC before each kernel call): each step's kernel time, the run's Python around the calls in its first step."""
        if None not in stamps:
            return stamps  # type: ignore[return-value]
        out = list(stamps)
        for first, r in self._native_runs.items():
            if first + 1 < len(out) and out[first + 1] is None:
                secs = r.step_seconds()
                last = first + len(secs)
                t = out[last] - sum(secs[1:])  # type: ignore[operator]
                for q in range(1, len(secs)):
                    out[first + q] = t
                    t += secs[q]
        return out  # type: ignore[return-value]

    @last_run_stats.setter
    def last_run_stats(self, stats: RunStats) -> None:
        self._stats, self._stamps, self._placed = stats, [], {}

    def __call__(self, inputs: Mapping[str, Any], outputs: Mapping[str, np.ndarray] | None = None,
                 ) -> dict[str, np.ndarray]:
        slots: list[Any] = [None] * self._n_slots
        for slot, a in self._check_inputs(inputs):
            slots[slot] = a
        for slot, v in self._constants:
            slots[slot] = v
        if outputs is not None:
            self._check_outputs(outputs)
        # One clock stamp per step (a step's time runs to the next stamp, its slot bookkeeping included); the
        # stats are assembled from them only when last_run_stats is read.
        stamps: list[float] = []
        stamp = stamps.append
        clock = time.perf_counter
        placed: dict[int, Placement] = {}
        self._stats, self._stamps, self._placed = None, stamps, placed
        if self._calls_before_freeze:
            self._calls_before_freeze -= 1
        elif self._calls_before_freeze == 0:
            self._calls_before_freeze = -1
            self._freeze()
        stamp(clock())
        for native, steps, native_frees, holes in self._entries:
            if native is not None and native(slots):  # the run's steps in one native call
                for s in native_frees:
                    slots[s] = None
                stamps += holes
                stamp(clock())
                continue
            for k, (run, args, outs, frees, _, _, _, reporter, _, direct) in steps:
                if direct is not None and outputs is not None:
                    res = run([slots[a] for a in args], [outputs.get(n) if n else None for n in direct])
                else:
                    res = run([slots[a] for a in args])
                if reporter is not None:  # read right after the call: where this call ran
                    placed[k] = reporter.last_placement
                for s, v in zip(outs, res):
                    slots[s] = v
                for s in frees:
                    slots[s] = None
                stamp(clock())
        result: dict[str, np.ndarray] = {}
        for name, slot, et in self._results:
            v = np.asarray(slots[slot])
            if not v.flags.c_contiguous:  # a view (a layout-keeping primitive's NCHW view of NHWC, a transpose):
                v = np.ascontiguousarray(v)  # callers get what onnxruntime gives, a C-contiguous array
            if outputs is not None and name in outputs:
                dst = outputs[name]
                if dst is not v:  # not written in place by a kernel: copy
                    if not isinstance(dst, np.ndarray) or dst.shape != v.shape or dst.dtype != v.dtype:
                        raise InputError(f"output array {name!r} must be {v.dtype}{list(v.shape)}, got {_desc(dst)}")
                    np.copyto(dst, v)
                v = dst
            result[name] = v
        return result

    def _check_outputs(self, outputs: Mapping[str, np.ndarray]) -> None:
        """Preallocated outputs: known names, and the right dtype/shape where the model fixes them."""
        expect_output_arrays(outputs, self.output_names)
        for name, dst in outputs.items():
            if name not in self._output_name_set:
                raise InputError(f"unknown output {name!r}; the model's outputs are: {', '.join(self.output_names)}")
            spec = self._result_specs.get(name)
            if spec is None:
                continue
            dtype, shape = spec
            if (not isinstance(dst, np.ndarray) or dst.dtype != dtype or dst.shape != shape
                    or not dst.flags.c_contiguous or not dst.flags.writeable):
                raise InputError(f"output array {name!r} must be a writeable C-contiguous "
                                 f"{np.dtype(dtype)}{list(shape)}, got {_desc(dst)}")

    run = __call__

    # --- reporting --------------------------------------------------------------------------------
    def perf_counters(self) -> Any:
        """Perf-counter readings per Subgraph (when compiled with SNIPPETS_PERF_COUNT; see docs/debug.md)."""
        from snippets_core.debug.perf_count import perf_counters

        return perf_counters(self)

    def _places(self) -> list[Placement]:
        """Per step, where it ran in the last call (where it was compiled to run before the first call)."""
        ran = self.last_run_stats
        if len(ran.steps) == len(self._steps):
            return [Placement(where, ran.fallbacks.get(name)) for name, _, where, _ in ran.steps]
        return [st.reporter.last_placement if st.reporter is not None else Placement(st.where, st.reason)
                for st in self._steps]

    def placement(self) -> list[tuple[str, str, str]]:
        """(node name, op type, where it ran) for every computing node, in execution order: where the last call
        ran it (a dynamic-shape Subgraph may run some input shapes on its reference), or before the first call,
        where it was compiled to run."""
        return [(st.node.name, st.node.type_name, p.where) for st, p in zip(self._steps, self._places())]

    def describe(self) -> str:
        """A human-readable account of what was fused and where each part ran in the last call (before the
        first call: where it is compiled to run), with the target's reason for every fallback."""
        lines = [f"model '{self.model.name}' compiled for target '{self.target_name}'"]
        n_fused = sum(len(sg.body_ops) for sg in self.subgraphs)
        places = self._places()
        others = [(st, p) for st, p in zip(self._steps, places) if not isinstance(st.node, Subgraph)]
        lines.append(f"  {len(self.subgraphs)} Subgraph(s) fusing {n_fused} op(s); {len(others)} op(s) outside")
        for st, p in zip(self._steps, places):
            if isinstance(st.node, Subgraph):
                ops = ", ".join(op.type_name for op in st.node.body_ops)
                why = f" (fallback: {p.reason})" if p.reason else ""
                lines.append(f"  [{p.where}] Subgraph {st.node.name}: {ops}{why}")
                notes = [op.rt_info[PRECISION_NOTE] for op in st.node.body_ops if op.rt_info.get(PRECISION_NOTE)]
                lines += [f"      {note}" for note in notes]  # computed wider than the model asked, and why
                how = getattr(st.run, "describe", None)  # a dynamic Subgraph's executor: one kernel, or one per shape
                if callable(how):
                    lines.append(f"      {how()}")
        counts: dict[tuple[str, str], int] = {}
        for st, p in others:
            counts[(st.node.type_name, p.where)] = counts.get((st.node.type_name, p.where), 0) + 1
        for (op, where), c in sorted(counts.items()):
            lines.append(f"  [{where}] {op} x{c}")
        if self._shape_folder:
            lines.append(f"  [{FOLDED}] {self._shape_folder.describe()}")
        for r in self._native_runs.values():  # (from the second call on: see _freeze)
            lines.append(f"  [native] {r.describe()}")
        # why a heavy op was left to its reference kernel (e.g. a 3-D Convolution: TokenizeConvSnippets)
        for st in self._steps:
            why = st.node.rt_info.get("SnippetsConvRejectReason") or (
                st.where == "reference" and (st.node.rt_info.get("SnippetsFallbackReason")
                                             or _low_precision_reason(st.node)))
            if why:
                lines.append(f"  [{st.where}] {st.node.type_name} '{st.node.name}': {why}")
        return "\n".join(lines)


#: rt_info keys where the Tokenizers leave why a node did not start a Subgraph, in the order they are asked
_REJECT_KEYS = ("SnippetsFCRejectReason", "SnippetsRejectReason", "SnippetsTransposeRejectReason")
_LOW_PRECISION = frozenset({"bf16", "f16"})


def _low_precision_reason(node: Node) -> str | None:
    """Why a node on bf16/f16 tensors (a model that asks for that precision) runs on its numpy reference: the
    Tokenizer's reason, or that none takes it; None for other nodes (f32 ops outside Subgraphs are expected)."""
    types = {p.element_type.value for p in (*node.inputs, *node.outputs)}
    low = sorted(types & _LOW_PRECISION)
    if not low or isinstance(node, Subgraph):
        return None
    for key in _REJECT_KEYS:
        if node.rt_info.get(key):
            return f"{low[0]} {node.type_name} left to numpy: {node.rt_info[key]}"
    return f"{low[0]} {node.type_name} left to numpy: no Tokenizer of this target takes it"


def _desc(a: Any) -> str:
    return f"{getattr(a, 'dtype', type(a).__name__)}{list(getattr(a, 'shape', []))}"


def _dynamic(shape: Shape) -> bool:
    return shape.dims is not None and None in shape.dims


def _accepts_outs(run: Callable[..., Any]) -> bool:
    """True if an executor takes a second argument: the arrays to write its outputs into."""
    try:
        params = list(inspect.signature(run).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


def _live_steps(steps: list[Step], results: set[int]) -> list[Step]:
    """The steps whose outputs something reads. A view step reads only its data input (its shape comes from the
    input's dims, see :func:`~snippets_core.runtime.shape_steps.view_executor`), so the ``Shape -> Gather ->
    Unsqueeze -> Concat`` chain that feeds a dynamic Reshape's shape input is dead: it is dropped here rather than
    run per call (four reference steps, 30-100 us, around every attention block of a torch export)."""
    needed = set(results)
    live: list[Step] = []
    for st in reversed(steps):
        if not any(o in needed for o in st.outs):
            continue
        live.append(st)
        needed.update(st.args[:1] if st.where == "view" and st.node.type_name in VIEW_OPS else st.args)
    live.reverse()
    return live


def _not_compiled(args: list[np.ndarray]) -> Sequence[np.ndarray]:
    """The placeholder of a Subgraph step until the plan knows that the step runs (then it is compiled)."""
    raise AssertionError("a Subgraph step left uncompiled")


def _reference_executor(node: Node) -> Executor:
    def run(args: list[np.ndarray]) -> Sequence[np.ndarray]:
        return evaluate_node(node, args)

    return run


def _load(model: Model | str | Path | bytes | Any) -> Model:
    if isinstance(model, Model):
        return model.clone()
    from snippets_core.frontends.onnx import read_onnx

    return read_onnx(model)


def compile_model(model: Model | str | Path | bytes | Any, target: str | None = None,
                  config: CompileConfig | Mapping[str, Any] | None = None) -> CompiledModel:
    """Tokenize ``model`` (a Model, an ONNX path/bytes/ModelProto) and compile it for ``target``.

    ``target`` is ``"reference"`` (node-by-node numpy), ``"interpreter"`` (the LinearIR interpreter) or
    the entry-point name of an installed target (``snippets targets`` lists them); ``None`` picks
    ``"reference"``. The caller's Model is never modified.
    """
    with paused_gc():
        return _compile_model(model, target, config)


def _compile_model(model: Model | str | Path | bytes | Any, target: str | None,
                   config: CompileConfig | Mapping[str, Any] | None) -> CompiledModel:
    cfg = CompileConfig.from_mapping(config)
    m = _load(model)
    tgt = resolve_target(target, cfg)
    if cfg.disabled_passes:
        check_disabled_passes(cfg.disabled_passes, tgt, cfg)
    from snippets_core.runtime.pipeline import run_tokenization

    run_tokenization(m, tgt, cfg)
    whole_model = getattr(tgt.obj, "compile_model", None)
    if whole_model is not None:  # a target that compiles the whole model at once (e.g. into one blob)
        return whole_model(m, cfg, tgt.host)

    def compile_one(sg: Subgraph) -> tuple[Executor, str] | None:
        try:
            ex = compile_in_layout(sg, lambda s: tgt.compile_subgraph(s, cfg))  # s: sg, or its NHWC twin
        except UnsupportedByTarget as exc:  # the one declared reason to run a Subgraph on its reference
            sg.rt_info[FALLBACK_KEY] = fallback_reason(exc)
            return None
        except Exception as exc:  # anything else is an error naming the Subgraph, never a silent fallback
            error = subgraph_error(exc, sg.name, tgt.name)
            if error is exc:
                raise
            raise error from exc
        if ex is None:
            return None
        sg.rt_info.pop(FALLBACK_KEY, None)
        return ex, tgt.name

    return CompiledModel(m, tgt, cfg, compile_one)  # compiles the Subgraphs that run per call


def known_pass_names(target: ResolvedTarget, config: CompileConfig) -> list[str]:
    """Every pass name ``disabled_passes`` may name for ``target``: the core's passes, the target's own and the
    plugins' positioned passes. Importing the pass packages is paid only when some pass is disabled."""
    import importlib
    import pkgutil

    from snippets_core.passes.pass_manager import Pass

    packages = ["snippets_core.passes", "snippets_core.lowered.passes", "snippets_core.tokenization"]
    if target.obj is not None:  # the target's package may define passes it adds without a hook
        packages.append(type(target.obj).__module__.split(".")[0])
    for pkg_name in packages:
        pkg = importlib.import_module(pkg_name)
        for info in pkgutil.walk_packages(getattr(pkg, "__path__", []), prefix=pkg_name + "."):
            if not info.ispkg and ".tests" not in info.name:
                importlib.import_module(info.name)
    names = {pp.pass_.name for pp in target.host.positioned_passes(target.name, config)}
    todo = list(Pass.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if "name" in vars(cls) and isinstance(cls.name, str):
            names.add(cls.name)
    return sorted(names)


def check_disabled_passes(disabled: Sequence[str], target: ResolvedTarget, config: CompileConfig) -> None:
    """A ConfigError listing the known pass names when ``disabled`` names a pass that does not exist (a typo
    would otherwise silently disable nothing)."""
    known = known_pass_names(target, config)
    unknown = [n for n in disabled if n not in known]
    if unknown:
        raise ConfigError(f"disabled_passes: unknown pass name(s) {', '.join(map(repr, unknown))}; "
                           f"known passes: {', '.join(known)}")

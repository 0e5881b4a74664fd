"""Debug capabilities of the x86-64 target: rdtsc perf counters, the segfault detector, and generation through
``generate_subgraph`` for dumps and ``snippets inspect --lir/--asm``.

* Perf counters (``SNIPPETS_PERF_COUNT=rdtsc`` or ``1``): the core's InsertPerfCount wraps the kernel body in
  PerfCountBegin/PerfCountEnd. PerfCountBegin reads the time-stamp counter into its output gpr (the edge to
  its PerfCountEnd, so each thread keeps its own start); PerfCountEnd adds ``rdtsc - start`` and one call to
  the region's :class:`~snippets_core.debug.perf_count.PerfCounters` with ``lock add`` (threads share them).
  ``rax``, ``rcx``, ``rdx`` are saved to stack slots around the sequence, so no live value is disturbed.
* Segfault detector (``SNIPPETS_SEGFAULT_DETECTOR=1``): before the code of every expression that emits code
  (the reference's ``jit_uni_segfault_detector_emitter``), the kernel stores ``index + 1`` into a shared debug
  page; the executor runs each call in a forked child and turns a child killed by a signal into a
  :class:`~snippets_core.debug.segfault.KernelFaultError` naming the Subgraph, the expression and its
  LinearIR line.

Kernels built this way carry absolute addresses (counters, debug page): they bypass the kernel cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from snippets_core.config import int_option
from snippets_core.errors import CodegenError, UnsupportedByTarget
from snippets_x86_64.asm import qword, rax, rcx, rdx
from snippets_x86_64.jit_emitter import AuxRegs, JitEmitter

if TYPE_CHECKING:
    from snippets_core.codegen.emitter import Emitter
    from snippets_core.codegen.subgraph_codegen import GeneratedSubgraph
    from snippets_core.config import CompileConfig
    from snippets_core.debug.config import DebugConfig
    from snippets_core.debug.segfault import DebugPage
    from snippets_core.ir.ops.subgraph import Subgraph
    from snippets_core.lowered.expression import Expression
    from snippets_x86_64.asm import Assembler
    from snippets_x86_64.runtime import KernelExecutor
    from snippets_x86_64.target_machine import X86_64TargetMachine

#: the clocks the x86-64 PerfCount emitters read
PERF_CLOCKS = ("rdtsc",)
#: ops whose emitters are not wrapped by the segfault detector: no code (NOP_OPS), or paired emitters that
#: their partner finds by type (LoopBegin for LoopEnd, RegSpillBegin for RegSpillEnd)
_UNWRAPPED = ("LoopBegin", "RegSpillBegin")


def _lock_last(a: Assembler) -> None:
    """Give the instruction just emitted a ``lock`` prefix (the DSL has no lock form; iced encodes the flag)."""
    a.lock_last()


def _read_tsc(a: Assembler) -> None:
    """rax = the 64-bit time-stamp counter (clobbers rdx)."""
    a.rdtsc()
    a.shl(rdx, 32)
    a.or_(rax, rdx)


class PerfCountBeginEmitter(JitEmitter):
    """``out = rdtsc`` (the start of the region, in the gpr of the edge to the PerfCountEnd)."""

    def emit(self, a: Assembler, ins: list, outs: list, aux: AuxRegs) -> None:
        from snippets_core.debug.perf_count import PERF_COUNTERS

        counters = self.expr.node.rt_info.get(PERF_COUNTERS)
        if counters is not None:
            counters.unit = "cycles"
        out = outs[0]
        if out is None:
            raise CodegenError(f"PerfCountBegin '{self.expr.name}' has no register for its start time")
        s_ax, s_dx = a.stack_slot(8), a.stack_slot(8)
        a.mov(s_ax, rax)
        a.mov(s_dx, rdx)
        _read_tsc(a)
        if out.number != rax.number:
            a.mov(out, rax)
            a.mov(rax, s_ax)
        if out.number != rdx.number:
            a.mov(rdx, s_dx)


class PerfCountEndEmitter(JitEmitter):
    """``counters.total += rdtsc - start; counters.calls += 1`` (locked: every thread adds to the same counters)."""

    def emit(self, a: Assembler, ins: list, outs: list, aux: AuxRegs) -> None:
        from snippets_core.debug.perf_count import PERF_COUNTERS

        counters = self.expr.input_connectors[0].source.expr.node.rt_info.get(PERF_COUNTERS)
        start = ins[0]
        if counters is None or start is None:
            raise CodegenError(f"PerfCountEnd '{self.expr.name}' is not paired with a counted PerfCountBegin")
        slots = [a.stack_slot(8) for _ in range(3)]
        for slot, reg in zip(slots, (rax, rcx, rdx)):
            a.mov(slot, reg)
        a.mov(rcx, start)  # before rdtsc overwrites rax/rdx, which may hold the start
        _read_tsc(a)
        a.sub(rax, rcx)
        a.mov(rcx, counters.address)
        a.add(qword[rcx], rax)
        _lock_last(a)
        a.add(qword[rcx + 8], 1)
        _lock_last(a)
        for slot, reg in zip(slots, (rax, rcx, rdx)):
            a.mov(reg, slot)


class SegfaultDetectorEmitter(JitEmitter):
    """Wraps an emitter: stores ``k + 1`` into the debug page, then emits the wrapped code; ``k`` numbers the
    wrapped expressions in emission order (:meth:`SegfaultDetector.site` maps it back to LinearIR positions)."""

    def __init__(self, inner: Emitter, expr: Expression, h: X86_64TargetMachine, detector: SegfaultDetector) -> None:
        super().__init__(expr, h)
        self.inner = inner
        self.detector = detector

    def aux_needs(self) -> tuple[int, int, int]:
        inner = self.inner
        if hasattr(inner, "aux_needs"):
            return inner.aux_needs()
        return inner.aux_gprs, inner.aux_vecs, inner.aux_masks

    def emit_code(self, in_regs: list, out_regs: list, aux: AuxRegs | None = None) -> None:  # type: ignore[override]
        a = self.h.asm
        index = self.detector.record(self.expr)
        slot = self.detector.slot(a)
        a.mov(slot, rax)
        a.mov(rax, self.detector.page.address)
        a.mov(qword[rax], index + 1)
        a.mov(rax, slot)
        aux = aux or AuxRegs()
        if isinstance(self.inner, JitEmitter):
            self.inner.emit_code(in_regs, out_regs, aux)
        else:  # the arithmetic table's emitters take aux register numbers by class (as the KernelEmitter does)
            numbers = {
                "gpr": [r.number for r in aux.gprs],
                "vec": [r.number for r in aux.vecs],
                "mask": [r.number for r in aux.masks],
            }
            self.inner.emit_code(in_regs, out_regs, numbers)

    def emit(self, a: Assembler, ins: list, outs: list, aux: AuxRegs) -> None:
        raise CodegenError("SegfaultDetectorEmitter emits through emit_code")  # never called: emit_code is overridden

    def emit_data(self) -> None:
        self.inner.emit_data()


class SegfaultDetector:
    """The debug page of one kernel, the stack slot that saves ``rax`` around the index stores, and the
    expressions in the order their indexes were given."""

    def __init__(self) -> None:
        from snippets_core.debug.segfault import DebugPage

        self.page: DebugPage = DebugPage()
        self.emitted: list[Expression] = []
        self._slot: Any = None
        self._slot_asm: Any = None

    def slot(self, a: Assembler) -> Any:
        if self._slot is None or self._slot_asm is not a:
            self._slot, self._slot_asm = a.stack_slot(8), a
        return self._slot

    def record(self, expr: Expression) -> int:
        self.emitted.append(expr)
        return len(self.emitted) - 1

    def site(self, subgraph: str, ir: Any) -> Any:
        """The FaultSite of the final LinearIR, indexed like the page (emission order of wrapped expressions)."""
        from snippets_core.debug.segfault import FaultSite

        full = FaultSite.of(subgraph, ir)
        pos = [ir.index(e) for e in self.emitted]
        return FaultSite(
            subgraph,
            tuple(full.ops[p] for p in pos),
            tuple(full.names[p] for p in pos),
            tuple(full.lir_lines[p] for p in pos),
            tuple(pos),
        )


def _wrap(tm: X86_64TargetMachine, detector: SegfaultDetector) -> None:
    """Wrap every code-emitting row of the jitters table with the segfault detector."""
    from snippets_core.codegen.target_machine import Jitter
    from snippets_x86_64.target_machine import NOP_OPS

    for op, row in list(tm.jitters.items()):
        if op in NOP_OPS or op in _UNWRAPPED:
            continue

        def factory(expr: Expression, _row: Jitter = row) -> Emitter:
            return SegfaultDetectorEmitter(_row.factory(expr), expr, tm, detector)

        tm.jitters[op] = Jitter(factory, row.supported_precisions)


def debug_target_machine(debug: DebugConfig, plugin_emitters: Any = None) -> tuple[X86_64TargetMachine, Any]:
    """An X86_64TargetMachine with the rdtsc PerfCount emitters and, when enabled, the segfault detector."""
    from snippets_core.codegen.target_machine import Jitter
    from snippets_x86_64.target_machine import X86_64TargetMachine

    tm = X86_64TargetMachine(plugin_emitters=plugin_emitters)
    tm.perf_clocks = PERF_CLOCKS  # type: ignore[attr-defined]
    if debug.perf_count is not None:
        tm.jitters["PerfCountBegin"] = Jitter(lambda expr: PerfCountBeginEmitter(expr, tm))
        tm.jitters["PerfCountEnd"] = Jitter(lambda expr: PerfCountEndEmitter(expr, tm))
    detector = None
    if debug.segfault_detector:
        detector = SegfaultDetector()
        _wrap(tm, detector)
    return tm, detector


def generate_subgraph(
    sg: Subgraph,
    config: CompileConfig,
    host: Any,
    debug: DebugConfig | None = None,
) -> tuple[GeneratedSubgraph, Any]:
    """``sg`` through ``generate_subgraph`` with this target's machine, passes, precisions and lowering config;
    returns the GeneratedSubgraph and the segfault detector (None when off)."""
    from snippets_core.codegen.subgraph_codegen import generate_subgraph
    from snippets_core.debug.config import debug_config
    from snippets_core.passes.data_flow_pipeline import DataFlowConfig
    from snippets_x86_64.runtime import TARGET_NAME, lowering_config
    from snippets_x86_64.target_machine import propagation_precisions

    debug = debug_config(config) if debug is None else debug
    positioned = list(host.positioned_passes(TARGET_NAME, config)) if host is not None else []
    plugin_emitters = host.register_emitters(TARGET_NAME) if host is not None else {}
    tm, detector = debug_target_machine(debug, plugin_emitters)
    # the same precisions as without debug caps: PropagatePrecision must not saturate what numpy wraps
    dcfg = DataFlowConfig.for_body(sg.body, supported_precisions=propagation_precisions)
    gen = generate_subgraph(
        sg,
        tm,
        positioned_passes=positioned,
        disabled_passes=config.disabled_passes,
        lowering_config=lowering_config(sg.body, config.num_threads),
        data_flow_config=dcfg,
        debug=debug,
    )
    return gen, detector


class IsolatedKernelExecutor:
    """A KernelExecutor whose calls run in a forked child (the segfault detector): outputs are written to shared
    memory; a child killed by a signal is a KernelFaultError naming the expression that was executing."""

    def __init__(self, executor: KernelExecutor, page: DebugPage, site: Any) -> None:
        self.executor = executor
        self.page = page
        self.site = site
        self.kernel = executor.kernel

    def __call__(self, args: Any, outs: Any = None) -> list[Any]:
        from snippets_core.debug.segfault import shared_array
        from snippets_core.errors import InputError
        from snippets_x86_64.runtime import _address

        ex = self.executor
        if len(args) != len(ex.input_specs):
            raise InputError(f"the kernel takes {len(ex.input_specs)} inputs, got {len(args)}")
        ins = [ex._input(i, a) for i, a in enumerate(args)]
        if outs is not None and len(outs) != len(ex.output_specs):
            raise InputError(f"the kernel has {len(ex.output_specs)} outputs, got {len(outs)} arrays")
        dests = [
            None if outs is None else ex._output(j, o) for j, o in enumerate(outs or [None] * len(ex.output_specs))
        ]
        shared = [shared_array(shape, dtype) for dtype, shape in ex.output_specs]
        self.run_pointers([_address(a) for a in ins] + [_address(o) for o in shared])
        results = []
        for dst, src in zip(dests, shared):
            if dst is None:
                results.append(src)
            else:
                dst[...] = src
                results.append(dst)
        return results

    run = __call__

    def run_pointers(self, ptrs: list[int]) -> None:
        """One call over the whole parallel domain with these data pointers (inputs then outputs), in a child."""
        from snippets_core.debug.segfault import run_isolated
        from snippets_x86_64.runtime import _CallState

        ex = self.executor
        state = _CallState(ex.kernel, ex.chunks)

        def run() -> None:
            for ca in state.args:
                ca[: len(ptrs)] = ptrs
            for task in state.tasks:  # one thread in the child: the chunks one after another
                task()

        run_isolated(run, self.page, self.site)


def compile_subgraph_debug(sg: Subgraph, config: CompileConfig, host: Any, debug: DebugConfig) -> Any:
    """``runtime.compile_subgraph`` with debug capabilities on: generation through ``generate_subgraph`` (dumps,
    perf counters), no kernel cache, and the isolated executor under the segfault detector. A Subgraph the
    target declares it does not generate falls back to its reference as usual; other errors are raised."""
    from snippets_core.runtime.placement import fallback_reason
    from snippets_x86_64.runtime import FALLBACK_KEY, PARALLEL_MIN_BYTES, KernelExecutor, _is_static, _specs

    try:
        if not _is_static(sg.body):
            raise UnsupportedByTarget("dynamic shapes are not supported by the x86-64 target with debug capabilities on")
        gen, detector = generate_subgraph(sg, config, host, debug)
        ins, outs = _specs(sg)
        min_bytes = int_option(config.target_options, "parallel_min_bytes", PARALLEL_MIN_BYTES, minimum=0)
        executor: Any = KernelExecutor(gen.kernel, ins, outs, config.num_threads, min_bytes)
    except UnsupportedByTarget as exc:  # the declared reason; any other error is raised, never a silent fallback
        sg.rt_info[FALLBACK_KEY] = fallback_reason(exc)
        return None
    sg.rt_info.pop(FALLBACK_KEY, None)
    if detector is not None:
        executor = IsolatedKernelExecutor(executor, detector.page, detector.site(sg.name, gen.linear_ir))
    # The kernel writes into memory owned by the LinearIR's nodes (perf counters) and by the detector (its
    # debug page): the executor keeps them alive for as long as it can run, whatever happens to the Subgraph.
    executor.debug_keepalive = (gen, detector)
    return executor

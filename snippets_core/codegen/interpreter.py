"""The LinearIR interpreter: a TargetMachine whose emitters are numpy closures.

It executes the *final* LinearIR (after InsertLoops, AllocateBuffers, register assignment,
InsertSpecificIterations, CleanupLoopOffsets and OptimizeLoopSingleEvaluation) the way machine code
would: data pointers are byte addresses into flat memory regions (inputs, outputs, the buffer
scratchpad), vector registers hold ``vector_size`` lanes, loops count their work amount down by their
increment and move pointers by ``ptr_increment * increment * data_size`` per iteration and by
``finalization_offset * data_size`` at the end, tails load and store fewer lanes. Lanes a load does
not fill hold a poison value, so results that depend on them come out wrong. Every memory access
is bounds-checked: an access outside its region raises :class:`OutOfBoundsAccessError` naming the
expression - the proof that the passes never make a real kernel touch memory it does not own.

A LinearIR lowered for every shape (``Config.symbolic_dims``) runs the same way: each dynamic value an emitter
reads (a loop's iteration count, a pointer shift, a tail's count, a data offset, the parallel domain) is a slot
of the kernel's :class:`~snippets_core.codegen.runtime_params.RuntimeParams`, and ``run`` gets the block from
the same :class:`~snippets_core.lowered.runtime_configurator.RuntimeConfigurator` as a compiled kernel. A loop
with a dynamic count counts iterations (its tail runs once or not at all) instead of elements.

    ir = lower(body, Config(vector_size=8), InterpreterTarget(8))
    kernel = Generator(InterpreterTarget(8)).generate(ir)
    outputs = kernel.run(inputs)               # host loop over the parallel domain

or simply ``run_body(body, inputs, vector_size=8)``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from snippets_core.codegen.emitter import KernelEmitter
from snippets_core.codegen.generator import Generator
from snippets_core.codegen.interpreter_base import (
    InterpreterEmitter,
    MachineState,
    OutOfBoundsAccessError,
    Pointer,
    Step,
    poison,
    runtime_params_of,
)
from snippets_core.codegen.interpreter_brgemm import BrgemmEmitter
from snippets_core.codegen.subgraph_codegen import generate_subgraph
from snippets_core.codegen.target_machine import Jitter, TargetMachine
from snippets_core.errors import CodegenError, InputError, ShapeInferenceError, UnsupportedByTarget
from snippets_core.ir.element_type import ElementType
from snippets_core.codegen.runtime_params import RuntimeParams
from snippets_core.lowered.port_descriptor import RegType
from snippets_core.lowered.symbolic import DynamicShapeError, is_dynamic, loop_iterations

if TYPE_CHECKING:
    from snippets_core.ir.model import Model
    from snippets_core.lowered.expression import Expression
    from snippets_core.lowered.linear_ir import Config, LinearIR


class NopEmitter(InterpreterEmitter):
    """Parameter, Result, Buffer, shape-only ops: nothing happens at run time."""


def _compiled_offset(expr: Expression) -> Any:
    """Byte offset of the Buffer accessed in the scratchpad: an int, or (a buffer placed after one of a size known
    only at run time) a SymInt the emitter reads from the runtime-parameter block."""
    from snippets_core.lowered.passes.allocate_buffers import BUFFER_OFFSET

    off = expr.node.rt_info.get(BUFFER_OFFSET, 0)
    return off if is_dynamic(off) else int(off)


class LoadEmitter(InterpreterEmitter):
    """Load ``count`` elements into the low lanes; the others are poison. ``broadcast`` (BroadcastLoad)
    loads one element into every lane."""

    broadcast = False

    def step(self) -> Step:
        node = self.expr.node
        src = self.expr.input_connectors[0].source
        dtype = src.expr.node.outputs[src.index].element_type.numpy
        size = np.dtype(dtype).itemsize
        count_of = self.value(f"{self.expr.name}.count", 1 if self.broadcast else node.count)
        offset_of = self.value(f"{self.expr.name}.buffer_offset", _compiled_offset(self.expr) + node.offset * size)
        lanes, in_reg, out_reg, broadcast = self.lanes, self.in_regs[0], self.out_regs[0], self.broadcast
        if not is_dynamic(node.count) and (1 if self.broadcast else node.count) > lanes:
            raise CodegenError(f"{self.expr.type_name} '{self.expr.name}' loads {node.count} elements into {lanes} "
                               "lanes")

        def run(st: MachineState) -> None:
            count = count_of(st)
            ptr = st.read(in_reg) + offset_of(st)
            mem = st.memory[ptr.region]
            nbytes = count * size
            if ptr.addr < 0 or ptr.addr + nbytes > mem.size:
                raise self.oob("reads", ptr, nbytes, mem.size)
            vals = mem[ptr.addr:ptr.addr + nbytes].view(dtype)
            if broadcast:
                st.write(out_reg, np.full(lanes, vals[0], dtype=dtype))
            else:
                v = poison(dtype, lanes)
                v[:count] = vals
                st.write(out_reg, v)
        return run


class BroadcastLoadEmitter(LoadEmitter):
    broadcast = True


class StoreEmitter(InterpreterEmitter):
    """Store the low ``count`` lanes."""

    def step(self) -> Step:
        node = self.expr.node
        dtype = node.outputs[0].element_type.numpy
        size = np.dtype(dtype).itemsize
        count_of = self.value(f"{self.expr.name}.count", node.count)
        offset_of = self.value(f"{self.expr.name}.buffer_offset", _compiled_offset(self.expr) + node.offset * size)
        in_reg, out_reg = self.in_regs[0], self.out_regs[0]

        def run(st: MachineState) -> None:
            count = count_of(st)
            ptr = st.read(out_reg) + offset_of(st)
            mem = st.memory[ptr.region]
            nbytes = count * size
            if ptr.addr < 0 or ptr.addr + nbytes > mem.size:
                raise self.oob("writes", ptr, nbytes, mem.size)
            vals = np.asarray(st.read(in_reg)[:count]).astype(dtype, copy=False)
            mem[ptr.addr:ptr.addr + nbytes] = np.ascontiguousarray(vals).view(np.uint8)
        return run


class BroadcastMoveEmitter(InterpreterEmitter):
    def step(self) -> Step:
        i, o, lanes = self.in_regs[0], self.out_regs[0], self.lanes
        return lambda st: st.write(o, np.full(lanes, st.read(i)[0]))


class ScalarEmitter(InterpreterEmitter):
    def step(self) -> Step:
        value = self.expr.node.value.reshape(-1)[0]
        o, lanes = self.out_regs[0], self.lanes
        return lambda st: st.write(o, np.full(lanes, value))


class VectorBufferEmitter(InterpreterEmitter):
    def step(self) -> Step:
        o, lanes = self.out_regs[0], self.lanes
        dtype = self.expr.node.outputs[0].element_type.numpy
        return lambda st: st.write(o, poison(dtype, lanes))


class FillEmitter(InterpreterEmitter):
    def step(self) -> Step:
        node = self.expr.node
        et = node.inputs[0].element_type
        if et.size != 4:  # a reduction over bf16/f16 lanes: the 32-bit identity pattern does not fit them
            raise UnsupportedByTarget(f"Fill '{self.expr.name}' writes a 32-bit pattern; the interpreter keeps "
                                      f"{et.value} lanes as {et.value}")
        i, o, offset_of = self.in_regs[0], self.out_regs[0], self.value(f"{self.expr.name}.offset", node.offset)
        pattern = np.asarray(node.fill_value, dtype=np.uint32)

        def run(st: MachineState) -> None:
            offset = offset_of(st)
            v = np.array(st.read(i), copy=True)
            if v.dtype.itemsize != 4:
                raise CodegenError(f"Fill '{self.expr.name}' needs 32-bit lanes, got {v.dtype}")
            v[offset:] = pattern.view(v.dtype)
            st.write(o, v)
        return run


class HorizonEmitter(InterpreterEmitter):
    def step(self) -> Step:
        reduce = np.max if self.expr.type_name == "HorizonMax" else np.sum
        i, o, lanes = self.in_regs[0], self.out_regs[0], self.lanes

        def run(st: MachineState) -> None:
            v = st.read(i)
            st.write(o, np.full(lanes, reduce(v), dtype=v.dtype))
        return run


class ComputeEmitter(InterpreterEmitter):
    """Any element-wise op: its own numpy reference applied to the lane vectors."""

    def step(self) -> Step:
        node = self.expr.node
        ins, o = self.in_regs, self.out_regs[0]
        dtypes = [src.expr.node.outputs[src.index].element_type.numpy
                  for src in (c.source for c in self.expr.input_connectors)]

        def run(st: MachineState) -> None:
            args = [np.asarray(st.read(r)).astype(dt, copy=False) for r, dt in zip(ins, dtypes)]
            with np.errstate(all="ignore"):
                st.write(o, np.asarray(node.evaluate(*args)[0]))
        return run


class LoopBeginEmitter(InterpreterEmitter):
    """Load the work amount into the counter; skip the loop when it is below one increment."""

    def __init__(self, expr: Expression, target: InterpreterTarget) -> None:
        super().__init__(expr, target)
        self.end_pc = -1  # set by the kernel emitter

    def step(self) -> Step:
        end = next(c.expr for c in self.expr.output_connectors[-1].get_consumers() if c.expr.type_name == "LoopEnd")
        node = end.node
        o = self.out_regs[-1]
        if is_dynamic(node.work_amount) or is_dynamic(node.increment):
            iterations = self.value(f"loop{node.loop_id}.iterations", loop_iterations(node.work_amount, node.increment))

            def run_dynamic(st: MachineState) -> None:
                n = iterations(st)
                st.write(o, n)
                if n == 0:
                    st.pc = self.end_pc
            return run_dynamic

        def run(st: MachineState) -> None:
            st.write(o, node.work_amount)
            if not node.evaluate_once and node.work_amount < node.increment:
                st.pc = self.end_pc  # the LoopEnd applies the finalization offsets
        return run


class LoopEndEmitter(InterpreterEmitter):
    """Move the pointers, count down, jump back while a whole increment is left; then finalize."""

    def __init__(self, expr: Expression, target: InterpreterTarget) -> None:
        super().__init__(expr, target)
        self.body_pc = -1

    def step(self) -> Step:
        node = self.expr.node
        ptr_regs = self.in_regs[:-1]
        counter = self.in_regs[-1]
        sizes = node.element_type_sizes
        lid = node.loop_id
        inc_of = [self.value(f"loop{lid}.ptr_increment[{k}]", p * node.increment * s)
                  for k, (p, s) in enumerate(zip(node.ptr_increments, sizes))]
        fin_of = [self.value(f"loop{lid}.finalization[{k}]", f * s)
                  for k, (f, s) in enumerate(zip(node.finalization_offsets, sizes))]

        def shift(st: MachineState, deltas: list[Callable[[MachineState], int]]) -> None:
            for r, d in zip(ptr_regs, deltas):
                v = d(st)
                if v:
                    st.write(r, st.read(r) + v)

        inc, fin = inc_of, fin_of
        if is_dynamic(node.work_amount) or is_dynamic(node.increment):
            def run_dynamic(st: MachineState) -> None:  # the counter holds the iterations left
                left = st.read(counter)
                if left > 0:
                    shift(st, inc)
                    st.write(counter, left - 1)
                    if left > 1:
                        st.pc = self.body_pc
                        return
                shift(st, fin)
            return run_dynamic

        def run(st: MachineState) -> None:
            if not node.evaluate_once:
                left = st.read(counter)
                if left >= node.increment:
                    shift(st, inc)
                    left -= node.increment
                    st.write(counter, left)
                    if left >= node.increment:
                        st.pc = self.body_pc
                        return
            shift(st, fin)
        return run


class PerfCountBeginEmitter(InterpreterEmitter):
    """Reads the clock (``time.perf_counter_ns``) into its output register, the edge to its PerfCountEnd."""

    def step(self) -> Step:
        from time import perf_counter_ns

        from snippets_core.lowered.perf_counters import PERF_COUNTERS

        counters = self.expr.node.rt_info.get(PERF_COUNTERS)
        if counters is not None:
            counters.unit = "ns"
        o = self.out_regs[0]
        return lambda st: st.write(o, perf_counter_ns())


class PerfCountEndEmitter(InterpreterEmitter):
    """Adds the time since its PerfCountBegin (read from the edge's register) and one call to the counters."""

    def step(self) -> Step:
        from time import perf_counter_ns

        from snippets_core.lowered.perf_counters import PERF_COUNTERS

        counters = self.expr.input_connectors[0].source.expr.node.rt_info.get(PERF_COUNTERS)
        i = self.in_regs[0]
        if counters is None:
            return lambda st: None
        return lambda st: counters.add(perf_counter_ns() - st.read(i))


def _compute_types() -> tuple[type, ...]:
    from snippets_core.ir.ops.base import BinaryEltwise, UnaryEltwise
    from snippets_core.ir.ops.convert import Convert
    from snippets_core.ir.ops.select import Select
    from snippets_core.ir.ops.snippets import ConvertSaturation, ConvertTruncation

    return (UnaryEltwise, BinaryEltwise, Select, Convert, ConvertSaturation, ConvertTruncation)


_SPECIAL: dict[str, type[InterpreterEmitter]] = {
    "Parameter": NopEmitter, "Result": NopEmitter, "Buffer": NopEmitter, "RankNormalization": NopEmitter,
    "SnippetsReshape": NopEmitter, "Reorder": NopEmitter, "Nop": NopEmitter,
    "PerfCountBegin": PerfCountBeginEmitter, "PerfCountEnd": PerfCountEndEmitter, "RegSpillBegin": NopEmitter, "RegSpillEnd": NopEmitter,
    "Load": LoadEmitter, "BroadcastLoad": BroadcastLoadEmitter, "Store": StoreEmitter,
    "BroadcastMove": BroadcastMoveEmitter, "Scalar": ScalarEmitter, "VectorBuffer": VectorBufferEmitter,
    "Fill": FillEmitter, "HorizonMax": HorizonEmitter, "HorizonSum": HorizonEmitter,
    "LoopBegin": LoopBeginEmitter, "LoopEnd": LoopEndEmitter, "Brgemm": BrgemmEmitter,
}


# --- the target machine ---------------------------------------------------------------------------------------

class InterpreterTarget(TargetMachine):
    """A TargetMachine that 'generates' numpy closures. ``vector_size`` is the lanes of every vector
    register (4, 8, 16 model SSE, AVX2, AVX-512 for f32). ``plugin_emitters`` ({op type name: factory},
    from ``host.register_emitters("interpreter")``) add rows to the jitters table."""

    name = "interpreter"
    #: the clocks its PerfCount emitters read (the first is the default)
    perf_clocks = ("chrono",)

    def __init__(self, vector_size: int = 16, gprs: int = 15, vecs: int = 32,
                 plugin_emitters: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self._lanes = vector_size
        self._gprs, self._vecs = gprs, vecs
        #: the dynamic values of the kernel being generated (a LinearIR lowered for every shape)
        self.runtime_params = RuntimeParams()
        from snippets_core.ir.node import OPS

        for type_name, cls in sorted(OPS.items()):
            if type_name in _SPECIAL:
                self.jitters[type_name] = Jitter(lambda expr, c=_SPECIAL[type_name]: c(expr, self))
            elif issubclass(cls, _compute_types()):
                self.jitters[type_name] = Jitter(lambda expr: ComputeEmitter(expr, self))
        # Emitters plugins register for "interpreter" (snippets_register_emitters) are built like the built-in
        # ones, as factory(expr, target); a plugin's row replaces a built-in row of the same op.
        for type_name, factory in sorted((plugin_emitters or {}).items()):
            self.jitters[type_name] = (factory if isinstance(factory, Jitter)
                                       else Jitter(lambda expr, f=factory: f(expr, self)))

    def lanes(self, element_type: ElementType) -> int:
        return self._lanes

    def reg_pool(self, reg_type: RegType) -> tuple[int, ...]:
        return {RegType.gpr: tuple(range(self._gprs)), RegType.vec: tuple(range(self._vecs)),
                RegType.mask: ()}.get(reg_type, ())

    def make_kernel_emitter(self, ir: LinearIR, compile_params: Any = None) -> InterpreterKernelEmitter:
        emitter = InterpreterKernelEmitter(ir, compile_params)
        emitter.runtime_params = self.runtime_params
        return emitter

    def get_snippet(self, kernel_emitter: KernelEmitter) -> InterpretedKernel:
        assert isinstance(kernel_emitter, InterpreterKernelEmitter)
        self.runtime_params = RuntimeParams()  # the next kernel has its own block
        return kernel_emitter.kernel


class InterpreterKernelEmitter(KernelEmitter):
    """Collects the closures of every expression and resolves the loop jumps."""

    runtime_params: RuntimeParams | None = None

    def emit_code(self, in_regs=None, out_regs=None, aux=None) -> None:  # type: ignore[no-untyped-def,override]
        ir = self.ir
        pos = {id(e): i for i, e in enumerate(ir.exprs)}
        for i, e in enumerate(ir.exprs):
            if isinstance(e.emitter, LoopEndEmitter):
                begin = e.input_connectors[-1].source.expr
                e.emitter.body_pc = pos[id(begin)] + 1
                begin.emitter.end_pc = i
        program = [e.emitter.emit_code() for e in ir.exprs]
        # the block the emitters registered their dynamic values in (a target subclass may build this emitter)
        params = getattr(self, "runtime_params", None)
        if params is None:
            params = next((runtime_params_of(e.emitter.target) for e in ir.exprs
                           if isinstance(e.emitter, InterpreterEmitter)), RuntimeParams())
        self.kernel = InterpretedKernel(self, program, params)


class InterpretedKernel:
    """The interpreter's Kernel: ``run(inputs)`` plays the host, calling the kernel once per index of
    the parallel domain with the data pointers moved by the per-dim data offsets."""

    def __init__(self, emitter: InterpreterKernelEmitter, program: list[Step],
                 runtime_params: RuntimeParams | None = None) -> None:
        from snippets_core.lowered.runtime_configurator import RuntimeConfigurator

        ir = emitter.ir
        self.program = program
        self.vector_size = ir.config.vector_size
        params = runtime_params if runtime_params is not None else RuntimeParams()
        # data offsets and the parallel domain: a dynamic one is a slot of the block, read per call
        self.data_offsets = emitter.data_offsets
        #: per data pointer and domain dim: (the offset, False) or (its slot of the block, True)
        self._offsets = [[(params.add(f"offset[{k}][{j}]", o), True) if is_dynamic(o) else (o, False)
                          for j, o in enumerate(offs)] for k, offs in enumerate(emitter.data_offsets)]
        self.data_ptr_regs = emitter.data_ptr_regs
        self.buffer_regs = emitter.buffer_regs
        #: per buffer register: its start in the scratchpad, (offset, False) or (its slot of the block, True)
        self._buffer_bases = [(params.add(f"buffer_base[{g}]", o), True) if is_dynamic(o) else (o, False)
                              for g, o in enumerate(emitter.buffer_bases)]
        self.parallel_domain = emitter.parallel_domain
        self.scratchpad_size = emitter.scratchpad_size
        #: the slot of a scratchpad size known only at run time (-1: static)
        self._scratchpad_slot = params.add("scratchpad_size", self.scratchpad_size) if is_dynamic(
            self.scratchpad_size) else -1
        self.input_specs = [(p.node.outputs[0].element_type, p.output_descs[0].shape) for p in ir.parameters]
        self.output_specs = []
        for r in ir.results:
            src = r.input_connectors[0].source
            self.output_specs.append((src.expr.node.outputs[src.index].element_type, r.input_descs[0].shape))
        #: the RuntimeConfigurator of a kernel lowered for every shape (None: a static kernel)
        self.configurator: RuntimeConfigurator | None = None
        if len(params) or any(is_dynamic(d) for d in self.parallel_domain):
            def codes(shape: Sequence[Any]) -> tuple[int | str, ...]:
                return tuple(d.code() if is_dynamic(d) else int(d) for d in shape)

            self.configurator = RuntimeConfigurator([codes(s) for _, s in self.input_specs],
                                                    [codes(s) for _, s in self.output_specs],
                                                    params.codes, codes(self.parallel_domain))

    def __call__(self, memory: dict[str, np.ndarray], indexes: Sequence[int], params: tuple[int, ...] = ()) -> None:
        """One kernel call for one parallel-domain index (the static kernel signature), with the runtime-parameter
        block of a kernel lowered for every shape."""
        st = MachineState(self.vector_size, memory, params=params)
        names = [f"in{i}" for i in range(len(self.input_specs))] + [f"out{j}" for j in range(len(self.output_specs))]
        for name, reg, offs in zip(names, self.data_ptr_regs, self._offsets):
            st.write(reg, Pointer(name, sum(i * (params[o] if dyn else o) for i, (o, dyn) in zip(indexes, offs))))
        for reg, (o, dyn) in zip(self.buffer_regs, self._buffer_bases):
            st.write(reg, Pointer("scratchpad", params[o] if dyn else o))
        program = self.program
        n = len(program)
        while st.pc < n:
            pc = st.pc
            program[pc](st)
            if st.pc == pc:  # no jump: fall through
                st.pc = pc + 1

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Execute the kernel over the whole parallel domain; outputs have the LinearIR result shapes."""
        if len(inputs) != len(self.input_specs):
            raise InputError(f"the kernel takes {len(self.input_specs)} inputs, got {len(inputs)}")
        input_shapes = [s for _, s in self.input_specs]
        output_shapes = [s for _, s in self.output_specs]
        domain, params = self.parallel_domain, ()
        if self.configurator is not None:
            cfg = self.configurator.configure([np.shape(a) for a in inputs])
            input_shapes = [np.shape(a) for a in inputs]
            output_shapes, domain, params = list(cfg.output_shapes), cfg.parallel_domain, cfg.values
        memory: dict[str, np.ndarray] = {}
        for i, (arr, (et, _), shape) in enumerate(zip(inputs, self.input_specs, input_shapes)):
            arr = np.ascontiguousarray(np.asarray(arr, dtype=et.numpy))
            if arr.size != int(np.prod(shape, dtype=np.int64)):
                raise InputError(f"input {i} has {arr.size} elements, the kernel expects shape {list(shape)}")
            memory[f"in{i}"] = arr.reshape(-1).view(np.uint8).copy()
        outs = []
        for j, ((et, _), shape) in enumerate(zip(self.output_specs, output_shapes)):
            out = poison(et.numpy, int(np.prod(shape, dtype=np.int64)))
            outs.append((out, shape))
            memory[f"out{j}"] = out.view(np.uint8)
        for idx in itertools.product(*(range(d) for d in domain)):
            size = params[self._scratchpad_slot] if self._scratchpad_slot >= 0 else self.scratchpad_size
            memory["scratchpad"] = np.full(size, 0xFF, dtype=np.uint8)
            self(memory, idx, params)
        return [out.reshape(shape) for out, shape in outs]


def compile_body(body: Model, vector_size: int = 16, config: Config | None = None) -> tuple[LinearIR, InterpretedKernel]:
    """Lower a body Model (after the data-flow passes) and generate its interpreted kernel."""
    from dataclasses import replace

    from snippets_core.lowered.linear_ir import Config as _Config
    from snippets_core.lowered.pipeline import lower

    target = InterpreterTarget(vector_size)
    cfg = replace(config or _Config(), vector_size=vector_size)
    ir = lower(body, cfg, target)
    return ir, Generator(target).generate(ir)


def run_body(body: Model, inputs: Sequence[np.ndarray], vector_size: int = 16,
             config: Config | None = None) -> list[np.ndarray]:
    """Lower, generate and execute a body; outputs take the body's result shapes."""
    shapes = [r.outputs[0].shape.to_tuple() for r in body.results]
    _, kernel = compile_body(body, vector_size, config)
    return [o.reshape(s) for o, s in zip(kernel.run(inputs), shapes)]


def compile_subgraph(sg: Any, vector_size: int = 16, positioned_passes: Sequence[Any] = (),
                     disabled_passes: Sequence[str] = (), config: Config | None = None,
                     plugin_emitters: Mapping[str, Any] | None = None, debug: Any = None,
                     ) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
    """An executor for a Subgraph node: its body goes through the data-flow passes, the lowering and
    the Generator for the interpreter target, now. A body with dynamic dims is lowered once with symbolic dims
    (one kernel for every shape, its runtime parameters from the RuntimeConfigurator); a body that cannot be (a
    DynamicShapeError, or a ShapeInferenceError of code that needs static shapes, or an UnsupportedByTarget that may
    hold only for some shapes) is generated once per distinct set of input shapes.
    Unsupported ops are an UnsupportedOpError naming the op.
    ``plugin_emitters`` are the plugins' emitters for "interpreter" (see :class:`InterpreterTarget`);
    ``debug`` is a DebugConfig (default: the environment's)."""
    kernels: dict[tuple[Any, ...], tuple[InterpretedKernel, list[tuple[int, ...]]]] = {}

    def build(shapes: list[tuple[int, ...]]) -> tuple[InterpretedKernel, list[tuple[int, ...]]]:
        key = tuple(shapes)
        if key not in kernels:
            gen = generate_subgraph(sg, InterpreterTarget(vector_size, plugin_emitters=plugin_emitters),
                                    positioned_passes=positioned_passes,
                                    disabled_passes=disabled_passes, input_shapes=shapes, lowering_config=config,
                                    debug=debug)
            kernels[key] = (gen.kernel, list(gen.output_shapes))
        return kernels[key]

    def execute(inputs: list[np.ndarray]) -> list[np.ndarray]:
        kernel, out_shapes = build([tuple(np.shape(a)) for a in inputs])
        return [o.reshape(s) for o, s in zip(kernel.run(inputs), out_shapes)]

    static = [p.shape for p in sg.body.parameters]
    if all(s.is_static for s in static):
        build([s.to_tuple() for s in static])
    else:
        from dataclasses import replace

        from snippets_core.lowered.linear_ir import Config as _Config

        lcfg = replace(config or _Config(need_fill_tail_register=True), symbolic_dims=True)
        try:
            gen = generate_subgraph(sg, InterpreterTarget(vector_size, plugin_emitters=plugin_emitters),
                                    positioned_passes=positioned_passes, disabled_passes=disabled_passes,
                                    lowering_config=lcfg, debug=debug)
        except (DynamicShapeError, ShapeInferenceError, UnsupportedByTarget):
            pass  # code that needs static shapes, or a declared gap: a kernel per set of input shapes, on first use
        else:
            dynamic_kernel: InterpretedKernel = gen.kernel

            def execute_dynamic(inputs: list[np.ndarray]) -> list[np.ndarray]:
                try:
                    return dynamic_kernel.run(inputs)
                except DynamicShapeError:  # a dim of 1 against the same dim > 1 (the configurator binds first, so
                    return execute(inputs)  # nothing ran): run-time broadcasting gets a kernel for these shapes

            return execute_dynamic

    return execute


# a LoadReorder's permutation lives in its pointer increments and the kernel's data offsets (InitLoops,
# PropagateLayout); the access itself is a Load
_SPECIAL["LoadReorder"] = LoadEmitter

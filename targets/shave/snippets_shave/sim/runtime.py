"""The runtime model: DMA engines, and SHAVEs that run the blob's Runtime Kernel, driven by barriers (§4, §5.6).

A discrete-event loop over :class:`Engine` objects. A DMA engine runs its list in order: the head waits until
each of its wait barriers has P == 0, consumes them (C -= 1), copies, and later produces (P -= 1 on its update
barriers). Each SHAVE executes the Runtime Kernel's machine code (``runtime_kernel.py``): it pops invocation
records from its tile's FIFO, waits on and consumes barriers, launches the kernels and produces barriers, all
through the SHVX system instructions; the loop steps it from one system instruction to the next, so those are
the points where engines interleave. A DPU runs its list of NCE variants in order like a DMA engine
(:mod:`snippets_shave.sim.dpu` computes one). ``seed=None`` picks ready engines round-robin; a seed picks them at
random, so tests can check that outputs do not depend on the interleaving. Nothing runnable while work
remains is a :class:`DeadlockError`.

A new kind of executor is an :class:`Engine` subclass (``runnable``, ``step``, ``blocked``) that waits on and
updates barriers through the run's :class:`BarrierUnit`; an in-order queue (a DPU's variants) only needs an
:class:`InOrderEngine` with its ``execute``. ``sim/checker.py`` is another engine (the Python SHAVE loop that
checks the Runtime Kernel's schedule).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from snippets_core.errors import BlobFormatError, InputError
from snippets_shave.blob import Blob, DpuTask, Location
from snippets_shave.constants import DTYPE_TO_NUMPY, RUNTIME_CODE_BUFFER, WIN_F
from snippets_shave.errors import DeadlockError, RuntimeKernelError, SimulationError, StepLimitExceeded
from snippets_shave.runtime_kernel import RECORDS_BASE, WINDOW_D
from snippets_shave.sim.dpu import run_dpu
from snippets_shave.sim.interp import AddressSpace, CoreState, Window, execute, run_segment
from snippets_shave.sim.loader import LoadedBlob, LoadedTask, earlier_instances, load_blob
from snippets_shave.sim.timing import estimate

DEFAULT_STEP_LIMIT = 50_000_000  # instructions per invocation
DEFAULT_RUNTIME_STEP_LIMIT = 5_000_000  # Runtime Kernel instructions per SHAVE (its own, not the kernels')


@dataclass(frozen=True)
class TraceEvent:
    executor: str  # "DMA0", "tile1.shave0"
    task: str
    event: str  # "start" or "end"


@dataclass
class SimResult:
    outputs: dict[str, np.ndarray]
    trace: list[TraceEvent] = field(default_factory=list)
    instructions: int = 0  # executed by the compute kernels
    task_instructions: dict[int, int] = field(default_factory=dict)  # per ACT task id (the timing model's work)
    #: the simulated time of the schedule (:mod:`snippets_shave.sim.timing`); set by :func:`simulate`
    timing: Any = None
    runtime_instructions: int = 0  # executed by the Runtime Kernel on every SHAVE


def _copy_with_descriptor(src: np.ndarray, dst: np.ndarray, task: LoadedTask) -> None:
    d = task.descriptor
    assert d is not None and task.src is not None and task.dst is not None
    k = np.arange(d.len, dtype=np.int64)
    planes = np.arange(d.num_planes, dtype=np.int64)[:, None]
    src_idx = task.src.offset + planes * d.src_plane_stride + (k // d.src_width) * d.src_stride + k % d.src_width
    dst_idx = task.dst.offset + planes * d.dst_plane_stride + (k // d.dst_width) * d.dst_stride + k % d.dst_width
    dst[dst_idx.ravel()] = src[src_idx.ravel()]


class BarrierUnit:
    """The barrier hardware: producer (P) and consumer (C) counts per virtual barrier.

    Barriers sharing a physical id are its successive instances (increasing virtual id): one is *current* once
    every earlier instance has drained (P = C = 0), and a task touches a barrier only when it is current."""

    def __init__(self, blob: Blob) -> None:
        self.producers = [b.producers for b in blob.barriers]
        self.consumers = [b.consumers for b in blob.barriers]
        self.earlier = earlier_instances(blob)

    def __len__(self) -> int:
        return len(self.producers)

    def current(self, b: int) -> bool:
        return all(self.producers[e] == 0 and self.consumers[e] == 0 for e in self.earlier[b])

    def released(self, b: int) -> bool:
        """A waiter may go: every producer has updated the barrier, and it is the current instance."""
        return self.producers[b] == 0 and self.current(b)

    def task_ready(self, wait: tuple[int, ...], update: tuple[int, ...]) -> bool:
        return all(self.producers[b] == 0 for b in wait) and all(self.current(b) for b in (*wait, *update))

    def consume(self, b: int) -> None:
        self.consumers[b] -= 1

    def produce(self, b: int) -> None:
        self.producers[b] -= 1

    def states(self, ids: tuple[int, ...]) -> str:
        return ", ".join(f"b{b} (P={self.producers[b]})" for b in ids) or "nothing (or a physical barrier)"

    def undrained(self) -> list[str]:
        pairs = zip(self.producers, self.consumers, strict=True)
        return [f"barriers[{i}] P={p} C={c}" for i, (p, c) in enumerate(pairs) if p or c]


@dataclass
class RunState:
    """What every engine of one run shares: the loaded blob, memories, barriers, the result and the limits."""

    loaded: LoadedBlob
    views: dict[tuple[Location, int], np.ndarray]
    cmx: list[Window]
    text_windows: list[Window]  # WIN_D image per kernel (read-only, shared)
    runtime_windows: list[Window]  # WIN_C per tile: the Runtime Kernel's code, then the tile's records
    barriers: BarrierUnit
    result: SimResult
    step_limit: int
    runtime_step_limit: int


class Engine(ABC):
    """One executor of the simulated NPU. The run loop picks a ``runnable`` engine and calls ``step`` (one
    observable action: it may wait on, consume or produce barriers); when none is runnable, every engine's
    ``blocked`` lists the work it still has (empty: finished), and a non-empty list is a deadlock."""

    name: str

    @abstractmethod
    def runnable(self) -> bool: ...

    @abstractmethod
    def step(self) -> None: ...

    @abstractmethod
    def blocked(self) -> list[str]: ...


class InOrderEngine(Engine):
    """An engine that runs its task list in order, head-of-line: the head waits until its wait barriers are
    released (and every barrier it touches is current), then one step consumes them and does its work
    (:meth:`execute`), and a later step produces its update barriers. DMA engines are one; a DPU is another."""

    def __init__(self, run: RunState, name: str, tasks: tuple[LoadedTask, ...]) -> None:
        self.name = name
        self.run = run
        self.queue = deque(tasks)
        self.running: LoadedTask | None = None

    @abstractmethod
    def execute(self, task: LoadedTask) -> None:
        """Do the task's work (its barriers are consumed, its producers not yet updated)."""

    def runnable(self) -> bool:
        if self.running is not None:
            return True
        return bool(self.queue) and self.run.barriers.task_ready(self.queue[0].task.wait, self.queue[0].task.update)

    def step(self) -> None:
        bars, trace = self.run.barriers, self.run.result.trace
        if self.running is not None:
            task, self.running = self.running, None
            for b in task.task.update:
                bars.produce(b)
            trace.append(TraceEvent(self.name, task.task.name, "end"))
            return
        task = self.queue.popleft()
        for b in task.task.wait:
            bars.consume(b)
        self.execute(task)
        self.running = task
        trace.append(TraceEvent(self.name, task.task.name, "start"))

    def blocked(self) -> list[str]:
        if not self.queue:
            return []
        head = self.queue[0]
        return [f"{self.name}: {head.where} waits {self.run.barriers.states(head.task.wait)}"]


class DmaEngine(InOrderEngine):
    """A DMA engine: a flat copy, or a strided one through its descriptor."""

    def __init__(self, run: RunState, engine: int, tasks: tuple[LoadedTask, ...]) -> None:
        super().__init__(run, f"DMA{engine}", tasks)

    def execute(self, task: LoadedTask) -> None:
        assert task.src is not None and task.dst is not None
        src, dst = self.run.views[task.src.key], self.run.views[task.dst.key]
        if task.descriptor is None:
            dst[task.dst.offset : task.dst.offset + task.dst.size] = src[
                task.src.offset : task.src.offset + task.src.size
            ]
        else:
            _copy_with_descriptor(src, dst, task)


class DpuEngine(InOrderEngine):
    """One DPU: its NCE variants in order, each computed on its tile's CMX (docs/dpu.md)."""

    def __init__(self, run: RunState, dpu: int, tasks: tuple[LoadedTask, ...]) -> None:
        super().__init__(run, f"DPU{dpu}", tasks)
        self.tile = dpu // run.loaded.target.dpus_per_tile

    def execute(self, task: LoadedTask) -> None:
        payload = task.task.payload
        assert isinstance(payload, DpuTask)
        run_dpu(payload, self.run.views[(Location.CMX, self.tile)])


# A tile's work FIFO: (record address in WIN_C, the task it describes), in ACT_SHAVE list order.
Fifo = deque[tuple[int, LoadedTask]]


def execute_invocation(
    run: RunState, task: LoadedTask, mem: AddressSpace, args: tuple[int, int], sp: int, tile: int, shave: int
) -> CoreState:
    """Run one kernel invocation to its return on a SHAVE whose windows ``mem`` are set for it: a clean register
    file with ``r0, r1 = args``, ``r30 = sp``, ``r31 = 0`` (docs/kernel_abi.md); errors name the task."""
    kernel = run.loaded.kernels[task.kernel]
    state = CoreState(mem, len(kernel.program))
    state.r[0], state.r[1] = args
    state.r[30] = sp
    where = f"tile{tile}.shave{shave}"
    run.result.trace.append(TraceEvent(where, task.task.name, "start"))
    try:
        executed = execute(kernel.program, kernel.entry_index, state, run.step_limit)
    except SimulationError as exc:
        raise type(exc)(f"{task.where} on tile {tile}, SHAVE {shave}: {exc}") from None
    run.result.instructions += executed
    run.result.task_instructions[task.task.id] = executed
    run.result.trace.append(TraceEvent(where, task.task.name, "end"))
    return state


class ShaveCore(Engine):
    """A SHAVE running the Runtime Kernel; it is also the FIFO/barrier/window hardware its system instructions
    reach (``CoreState.hw``). Each step runs the kernel from one system instruction to the next."""

    def __init__(self, run: RunState, tile: int, shave: int, fifo: Fifo) -> None:
        self.name = f"tile{tile}.shave{shave}"
        self.run, self.tile, self.shave, self.fifo = run, tile, shave, fifo
        self.queue = run.loaded.tile_queues[tile]
        self.program = run.loaded.runtime.program
        self.mem = AddressSpace([run.runtime_windows[tile], None, None, run.cmx[tile]])
        self.state = CoreState(self.mem, len(self.program), hw=self)
        table, _ = run.loaded.records[tile]
        self.state.r[0], self.state.r[1] = RECORDS_BASE, len(table)
        self.state.r[30] = WIN_F + (shave + 1) * run.loaded.stack_sizes[tile]
        self.pc = run.loaded.runtime.entry_index
        self.halted = False
        self.steps = 0
        self.task: LoadedTask | None = None  # the invocation it last took from the FIFO
        self.text_handle: int | None = None
        self.data_handle: int | None = None
        self.in_kernel = False  # inside LAUNCH: errors belong to the compute kernel's task

    def where(self) -> str:
        return self.name + (f" ({self.task.where})" if self.task is not None else "")

    # -- Engine ---------------------------------------------------------------------------------------------
    def runnable(self) -> bool:
        if self.halted:
            return False
        guard = self.program.guards[self.pc]
        return guard is None or guard(self.state)

    def step(self) -> None:
        limit = self.run.runtime_step_limit
        try:
            self.pc, steps = run_segment(self.program, self.pc, self.state, limit - self.steps)
        except SimulationError as exc:
            if self.in_kernel:
                raise  # a compute kernel's error, already named after its task
            if isinstance(exc, StepLimitExceeded):
                raise StepLimitExceeded(
                    f"{self.where()}: the Runtime Kernel ran more than {limit} instructions (a runaway runtime kernel)"
                ) from None
            raise type(exc)(f"{self.where()}: Runtime Kernel: {exc}") from None
        self.steps += steps
        self.run.result.runtime_instructions += steps
        self.halted = self.pc < 0

    def blocked(self) -> list[str]:
        if self.halted:
            return []
        ins = self.program.instructions[self.pc] if self.pc < len(self.program) else None
        what = self.task.where if self.task is not None else "no task"
        if ins is not None and ins.mnemonic == "BCUR":
            b = self.state.r[ins.operands[0]]
            return [f"{self.name}: {what} waits for b{b} to be the current instance of its physical barrier"]
        waits = self.task.task.wait if self.task is not None else ()
        return [f"{self.name}: {what} waits {self.run.barriers.states(waits)}"]

    # -- the hardware the Runtime Kernel's system instructions reach ---------------------------------------
    def fifo_pop(self) -> int:
        if not self.fifo:
            return 0
        address, self.task = self.fifo.popleft()
        return address

    def halt(self) -> None:
        self.halted = True

    def _barrier(self, b: int, pc: int) -> int:
        if not 0 <= b < len(self.run.barriers):
            raise RuntimeKernelError(f"word {pc}: barrier {b}, but the blob has {len(self.run.barriers)}")
        return b

    def barrier_ready(self, b: int, producers_done: bool, pc: int) -> bool:
        bars = self.run.barriers
        b = self._barrier(b, pc)
        return bars.released(b) if producers_done else bars.current(b)

    def stalled(self, mnemonic: str, b: int, pc: int) -> None:
        raise DeadlockError(f"{mnemonic} at word {pc}: barrier b{b} is not released")

    def barrier_count(self, b: int, produce: bool, pc: int) -> None:
        bars = self.run.barriers
        b = self._barrier(b, pc)
        counts = bars.producers if produce else bars.consumers
        if counts[b] <= 0 or not bars.current(b):
            kind = "producer" if produce else "consumer"
            raise RuntimeKernelError(f"word {pc}: barrier b{b} has no {kind} left to count (or is not current)")
        (bars.produce if produce else bars.consume)(b)

    def set_window(self, window: int, handle: int, mem: AddressSpace, pc: int) -> None:
        if window == WINDOW_D:
            if not 0 <= handle < len(self.run.text_windows):
                raise RuntimeKernelError(f"WINSET at word {pc}: no kernel image {handle}")
            mem.windows[1] = self.run.text_windows[handle]
            self.text_handle = handle
            return
        if not 0 <= handle < len(self.queue):
            raise RuntimeKernelError(f"WINSET at word {pc}: tile {self.tile} has no invocation {handle}")
        mem.windows[2] = Window("WIN_E", bytearray(self.queue[handle].window), True)  # a fresh copy per call
        self.data_handle = handle

    def launch(self, state: CoreState, entry: int, pc: int) -> None:
        if self.text_handle is None or self.data_handle is None:
            raise RuntimeKernelError(f"LAUNCH at word {pc} before WINSET mapped a kernel and its data window")
        task = self.queue[self.data_handle]
        if task.kernel != self.text_handle or entry != self.run.loaded.kernels[task.kernel].elf.entry:
            raise RuntimeKernelError(
                f"LAUNCH at word {pc}: entry {entry:#x} in kernel image {self.text_handle} is not the entry point "
                f"of {task.where}'s kernel"
            )
        self.in_kernel = True
        args = (state.r[0], state.r[1])
        done = execute_invocation(self.run, task, state.mem, args, state.r[30], self.tile, self.shave)
        self.in_kernel = False
        sp = state.r[30]
        state.r[:] = done.r  # every register but SP comes back clobbered
        state.r[30] = sp
        state.vb[:] = done.vb


# Builds one engine per SHAVE of a tile; ShaveCore runs the Runtime Kernel, sim/checker.py the Python loop.
ShaveFactory = Callable[[RunState, int, int, Fifo], Engine]


class Simulator:
    """Runs a loaded blob; one instance can run many inputs."""

    def __init__(
        self,
        loaded: LoadedBlob,
        *,
        step_limit: int = DEFAULT_STEP_LIMIT,
        runtime_step_limit: int = DEFAULT_RUNTIME_STEP_LIMIT,
        shave: ShaveFactory = ShaveCore,
    ) -> None:
        self.loaded = loaded
        self.step_limit = step_limit
        self.runtime_step_limit = runtime_step_limit
        self.shave = shave
        self._text = [Window("WIN_D", bytearray(k.image), False) for k in loaded.kernels]
        self._win_c = []
        for table, _ in loaded.records:
            code = bytearray(RUNTIME_CODE_BUFFER + len(table))
            code[: len(loaded.runtime.image)] = loaded.runtime.image
            code[RUNTIME_CODE_BUFFER:] = table
            self._win_c.append(Window("WIN_C", code, False))

    def _memories(self, inputs: dict[str, np.ndarray]) -> dict[tuple[Location, int], bytearray]:
        header = self.loaded.blob.header
        expected = [ref.name for ref in header.inputs]
        if sorted(inputs) != sorted(expected):
            raise InputError(f"blob {header.name!r} takes inputs {expected}, got {sorted(inputs)}")
        values = []
        for ref in header.inputs:
            value = np.asarray(inputs[ref.name])
            want = DTYPE_TO_NUMPY[ref.dtype]
            if value.shape != tuple(ref.dims) or value.dtype != want:
                raise InputError(
                    f"input {ref.name!r}: expected {want} {tuple(ref.dims)}, got {value.dtype} {value.shape}"
                )
            values.append(value)
        mem = {key: bytearray(size) for key, size in self.loaded.memory_sizes.items()}
        for i, value in enumerate(values):
            mem[(Location.NET_INPUT, i)][:] = np.ascontiguousarray(value).tobytes()
        for i, data in enumerate(self.loaded.blob.constants):
            mem[(Location.CONSTANT, i)][:] = data
        return mem

    def run(self, inputs: dict[str, np.ndarray], seed: int | None = None) -> SimResult:
        loaded = self.loaded
        blob = loaded.blob
        mem = self._memories(inputs)
        views = {
            key: np.frombuffer(ba, dtype=np.uint8) if len(ba) else np.zeros(0, np.uint8) for key, ba in mem.items()
        }
        cmx = [Window("WIN_F", mem[(Location.CMX, t)], True) for t in range(blob.header.target.tiles)]
        run = RunState(
            loaded, views, cmx, self._text, self._win_c, BarrierUnit(blob), SimResult({}), self.step_limit,
            self.runtime_step_limit,
        )  # fmt: skip
        engines: list[Engine] = [DmaEngine(run, e, q) for e, q in enumerate(loaded.dma_queues)]
        engines += [DpuEngine(run, d, q) for d, q in enumerate(loaded.dpu_queues)]
        fifos: list[Fifo] = []
        for t, queue in enumerate(loaded.tile_queues):
            fifos.append(deque(zip(loaded.records[t][1], queue, strict=True)))
            engines += [self.shave(run, t, s, fifos[t]) for s in range(blob.header.target.shaves_per_tile)]
        rng = random.Random(seed) if seed is not None else None
        turn = 0
        while True:
            ready = [e for e in engines if e.runnable()]
            if not ready:
                break
            engine = rng.choice(ready) if rng is not None else ready[turn % len(ready)]
            turn += 1
            engine.step()
        blocked = [line for e in engines for line in e.blocked()]
        for t, fifo in enumerate(fifos):
            if fifo:
                blocked.append(f"tile{t}: {len(fifo)} more invocations queued behind blocked or halted SHAVEs")
        if blocked:
            raise DeadlockError("deadlock, no executor can proceed:\n  " + "\n  ".join(blocked))
        left = run.barriers.undrained()
        if left:
            raise DeadlockError("barriers not drained at the end of the schedule: " + ", ".join(left))
        result = run.result
        for i, ref in enumerate(blob.header.outputs):
            data = mem[(Location.NET_OUTPUT, i)]
            result.outputs[ref.name] = np.frombuffer(bytes(data), dtype=DTYPE_TO_NUMPY[ref.dtype]).reshape(ref.dims)
        return result


def simulate(
    blob: bytes | Blob | LoadedBlob,
    inputs: dict[str, np.ndarray],
    *,
    seed: int | None = None,
    step_limit: int = DEFAULT_STEP_LIMIT,
    check_races: bool = False,
    runtime_step_limit: int = DEFAULT_RUNTIME_STEP_LIMIT,
    shave: ShaveFactory = ShaveCore,
) -> SimResult:
    """Load (validating everything first) and run a blob; returns outputs, the task trace, the instruction count
    and the simulated time of the schedule (``result.timing``, :mod:`snippets_shave.sim.timing`).

    ``check_races`` first runs the static race checker (:mod:`snippets_shave.sim.races`) and raises
    ``RaceError`` if two unordered tasks touch the same bytes and one of them writes. ``shave`` builds the
    SHAVE engines: the Runtime Kernel (default), or ``sim.checker.PythonShaveLoop`` to check its schedule."""
    loaded = blob if isinstance(blob, LoadedBlob) else load_blob(blob)
    if check_races:
        from snippets_shave.sim.races import check_races as _check

        _check(loaded)
    sim = Simulator(loaded, step_limit=step_limit, runtime_step_limit=runtime_step_limit, shave=shave)
    result = sim.run(inputs, seed=seed)
    result.timing = estimate(loaded, result.task_instructions)
    return result


def run(
    blob: bytes | Blob | LoadedBlob,
    inputs: dict[str, np.ndarray],
    *,
    seed: int | None = None,
    step_limit: int = DEFAULT_STEP_LIMIT,
    check_races: bool = False,
    runtime_step_limit: int = DEFAULT_RUNTIME_STEP_LIMIT,
) -> dict[str, np.ndarray]:
    """Run a blob and return its outputs by name."""
    res = simulate(
        blob, inputs, seed=seed, step_limit=step_limit, check_races=check_races, runtime_step_limit=runtime_step_limit
    )
    return res.outputs


def simulate_files(
    blob_path: str | Path,
    inputs_path: str | Path,
    outputs_path: str | Path | None = None,
    *,
    seed: int | None = None,
    check_races: bool = False,
) -> dict[str, np.ndarray]:
    """``snippets simulate model.blob --inputs IN.npz --outputs OUT.npz``: run a blob file on an .npz of
    inputs (array names = input names) and optionally save the outputs as an .npz."""
    try:
        data = Path(blob_path).read_bytes()
    except OSError as exc:
        raise BlobFormatError(f"cannot read blob {str(blob_path)!r}: {exc.strerror}") from None
    from snippets_core.runtime.inputs import load_npz, save_npz

    outputs = run(data, load_npz(inputs_path), seed=seed, check_races=check_races)
    if outputs_path is not None:
        save_npz(outputs_path, outputs)
    return outputs

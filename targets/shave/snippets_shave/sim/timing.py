"""The timing model: when each task of a blob would start and end on the NPU, and the blob's total time.

The functional simulator (:mod:`snippets_shave.sim.runtime`) decides *what* each task computes; this module
decides *when*, from a cost per task and the same scheduling rules, in a separate discrete-event pass so that
the two never disagree on results. The costs (:class:`TimingModel`, docs/dpu.md lists the numbers and why):

* a DMA task: ``dma_latency_cycles + bytes / dma_bytes_per_cycle`` on its engine, one task at a time;
* a DPU variant: ``dpu_variant_cycles + MACs / dpu_macs_per_cycle`` (f16; int8 at twice the rate) on its DPU,
  one variant at a time, in list order;
* an ACT SHAVE invocation: ``act_launch_cycles + instructions / shave_instructions_per_cycle``, the
  instructions being those the functional run executed for that task; each SHAVE of a tile pops the tile's
  FIFO in order when idle and holds its task until the barriers allow it (head of line, as the runtime does);
* a barrier: released ``barrier_latency_cycles`` after its last producer ends; a task starts once every barrier
  it waits on is released and every earlier instance of a physical barrier it uses has drained.

Tests check properties of the schedule (which task starts before which), never a timing of our own code.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from math import ceil

from snippets_shave.blob import DpuTask
from snippets_shave.constants import DType
from snippets_shave.errors import DeadlockError
from snippets_shave.sim.loader import LoadedBlob, LoadedTask, earlier_instances


@dataclass(frozen=True)
class TimingModel:
    """Cycle costs of a 37xx-like NPU (all engines on one clock; docs/dpu.md says where each number comes from)."""

    clock_mhz: float = 1300.0
    #: f16 multiply-accumulates per cycle of one DPU (int8: twice as many)
    dpu_macs_per_cycle: int = 1024
    #: fixed cost of one variant (workload descriptor fetch, pipeline fill)
    dpu_variant_cycles: int = 64
    #: model-ISA instructions one SHAVE retires per cycle (one 128-bit vector instruction = 4 f32 / 8 f16 lanes)
    shave_instructions_per_cycle: float = 1.0
    #: runtime cost of launching one invocation on a SHAVE
    act_launch_cycles: int = 200
    #: bytes one DMA engine moves per cycle, and the fixed cost of a descriptor
    dma_bytes_per_cycle: int = 32
    dma_latency_cycles: int = 100
    #: from the last producer's end to a waiter seeing the barrier released
    barrier_latency_cycles: int = 20

    def cycles_to_us(self, cycles: int) -> float:
        return cycles / self.clock_mhz


@dataclass
class Timing:
    """The simulated schedule: start and end cycle of every task (by task id) and the whole blob's time."""

    model: TimingModel
    start: dict[int, int] = field(default_factory=dict)
    end: dict[int, int] = field(default_factory=dict)
    executor: dict[int, str] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)

    @property
    def total_cycles(self) -> int:
        return max(self.end.values(), default=0)

    @property
    def total_us(self) -> float:
        return self.model.cycles_to_us(self.total_cycles)

    def by_name(self, name: str) -> tuple[int, int]:
        """(start, end) of the task called ``name``."""
        for tid, n in self.names.items():
            if n == name:
                return self.start[tid], self.end[tid]
        raise KeyError(name)

    def busy(self) -> dict[str, int]:
        """Busy cycles per executor kind (DMA, DPU, SHAVE)."""
        out: dict[str, int] = {}
        for tid, where in self.executor.items():
            kind = "SHAVE" if where.startswith("tile") else where.rstrip("0123456789")
            out[kind] = out.get(kind, 0) + self.end[tid] - self.start[tid]
        return out


def task_cycles(task: LoadedTask, model: TimingModel, instructions: dict[int, int]) -> int:
    """The cost of one task under ``model`` (ACT tasks: the instructions the functional run executed)."""
    payload = task.task.payload
    if isinstance(payload, DpuTask):
        from snippets_shave.sim.dpu import macs

        f16 = payload.input.dtype == DType.F16 or (payload.weights is not None and payload.weights.dtype == DType.F16)
        rate = model.dpu_macs_per_cycle * (1 if f16 else 2)
        return model.dpu_variant_cycles + ceil(macs(payload) / rate)
    if task.src is not None:
        d = task.descriptor
        nbytes = d.len * d.num_planes if d is not None else task.src.size
        return model.dma_latency_cycles + ceil(nbytes / model.dma_bytes_per_cycle)
    return model.act_launch_cycles + ceil(instructions.get(task.task.id, 0) / model.shave_instructions_per_cycle)


def estimate(loaded: LoadedBlob, instructions: dict[int, int], model: TimingModel | None = None) -> Timing:
    """Run the blob's schedule in simulated time (see the module docstring); ``instructions`` by ACT task id."""
    model = model or TimingModel()
    blob = loaded.blob
    timing = Timing(model)
    producers = [b.producers for b in blob.barriers]
    consumers = [b.consumers for b in blob.barriers]
    released = [0] * len(blob.barriers)  # cycle at which a barrier with no producers left becomes visible
    earlier = earlier_instances(blob)

    # serial executors (DMA engines, DPUs): a queue and the cycle at which it is free
    serial = [(f"DMA{e}", deque(q)) for e, q in enumerate(loaded.dma_queues)]
    serial += [(f"DPU{d}", deque(q)) for d, q in enumerate(loaded.dpu_queues)]
    free_at = [0] * len(serial)
    busy = [False] * len(serial)
    spt = blob.header.target.shaves_per_tile
    fifo = [deque(q) for q in loaded.tile_queues]
    held: list[list[LoadedTask | None]] = [[None] * spt for _ in fifo]
    shave_free = [[0] * spt for _ in fifo]
    shave_busy = [[False] * spt for _ in fifo]
    events: list[tuple[int, int, str, int, int]] = []  # (cycle, seq, kind, a, b)
    seq = 0
    now = 0
    remaining = sum(len(q) for _, q in serial) + sum(len(q) for q in fifo)

    def ready(task: LoadedTask) -> bool:
        bars = task.task
        if any(producers[b] or released[b] > now for b in bars.wait):
            return False
        return all(producers[e] == 0 and consumers[e] == 0 for b in (*bars.wait, *bars.update) for e in earlier[b])

    def start(task: LoadedTask, where: str, kind: str, a: int, b: int) -> None:
        nonlocal seq
        for bar in task.task.wait:
            consumers[bar] -= 1
        end = now + task_cycles(task, model, instructions)
        timing.start[task.task.id], timing.end[task.task.id] = now, end
        timing.executor[task.task.id], timing.names[task.task.id] = where, task.task.name
        heapq.heappush(events, (end, seq, kind, a, b))
        seq += 1

    def finish(task_id: int, task: LoadedTask) -> None:
        for bar in task.task.update:
            producers[bar] -= 1
            if producers[bar] == 0:
                released[bar] = timing.end[task_id] + model.barrier_latency_cycles

    running: dict[tuple[str, int, int], LoadedTask] = {}
    while remaining:
        started = True
        while started:  # start everything that can start at `now`
            started = False
            for i, (where, q) in enumerate(serial):
                if not busy[i] and free_at[i] <= now and q and ready(q[0]):
                    task = q.popleft()
                    start(task, where, "serial", i, 0)
                    running[("serial", i, 0)] = task
                    busy[i] = started = True
            for t, q in enumerate(fifo):
                for s in range(spt):
                    if shave_busy[t][s] or shave_free[t][s] > now:
                        continue
                    if held[t][s] is None and q:
                        held[t][s] = q.popleft()
                    task = held[t][s]
                    if task is not None and ready(task):
                        held[t][s] = None
                        start(task, f"tile{t}.shave{s}", "act", t, s)
                        running[("act", t, s)] = task
                        shave_busy[t][s] = started = True
        pending = [r for r in released if r > now]
        if not events and not pending:
            raise DeadlockError("timing model: no task can start and none is running (the blob cannot finish)")
        now = min(([events[0][0]] if events else []) + pending)
        while events and events[0][0] <= now:
            _, _, kind, a, b = heapq.heappop(events)
            task = running.pop((kind, a, b))
            finish(task.task.id, task)
            remaining -= 1
            if kind == "serial":
                busy[a], free_at[a] = False, now
            else:
                shave_busy[a][b], shave_free[a][b] = False, now
    return timing

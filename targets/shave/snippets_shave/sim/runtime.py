"""The runtime model: DMA engines and per-tile SHAVE FIFOs driven by barriers (shave_blob.md §4, §5.6).

A discrete-event loop over every executor. A DMA engine runs its list in order: the head waits until each of
its wait barriers has P == 0, consumes them (C -= 1), copies, and later produces (P -= 1 on its update
barriers). Each tile has one FIFO in ACT_SHAVE list order; each of its SHAVEs pops the next invocation when
idle, then (head-of-line, like nnActEntry) waits for its barriers, consumes, runs the kernel, and produces.
``seed=None`` picks ready actions round-robin; a seed picks them at random, so tests can check that outputs
do not depend on the interleaving. A DPU runs its list of NCE variants in order like a DMA engine
(:mod:`snippets_shave.sim.dpu` computes one). Nothing runnable while tasks remain is a :class:`DeadlockError`.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from snippets_core.errors import BlobFormatError, InputError
from snippets_shave.blob import Blob, Location
from snippets_shave.constants import DTYPE_TO_NUMPY, WIN_E, WIN_F
from snippets_shave.errors import DeadlockError, SimulationError
from snippets_shave.sim.dpu import run_dpu
from snippets_shave.sim.interp import AddressSpace, CoreState, Window, execute
from snippets_shave.sim.loader import LoadedBlob, LoadedTask, Region, earlier_instances, load_blob
from snippets_shave.sim.timing import estimate

DEFAULT_STEP_LIMIT = 50_000_000  # instructions per invocation


@dataclass(frozen=True)
class TraceEvent:
    executor: str  # "DMA0", "tile1.shave0"
    task: str
    event: str  # "start" or "end"


@dataclass
class SimResult:
    outputs: dict[str, np.ndarray]
    trace: list[TraceEvent] = field(default_factory=list)
    instructions: int = 0
    #: instructions each ACT task executed, by task id (the timing model's SHAVE work)
    task_instructions: dict[int, int] = field(default_factory=dict)
    #: the simulated time of the schedule (:mod:`snippets_shave.sim.timing`); set by :func:`simulate`
    timing: Any = None


def _copy_with_descriptor(src: np.ndarray, dst: np.ndarray, task: LoadedTask) -> None:
    d = task.descriptor
    assert d is not None and task.src is not None and task.dst is not None
    k = np.arange(d.len, dtype=np.int64)
    planes = np.arange(d.num_planes, dtype=np.int64)[:, None]
    src_idx = task.src.offset + planes * d.src_plane_stride + (k // d.src_width) * d.src_stride + k % d.src_width
    dst_idx = task.dst.offset + planes * d.dst_plane_stride + (k // d.dst_width) * d.dst_stride + k % d.dst_width
    dst[dst_idx.ravel()] = src[src_idx.ravel()]


class Simulator:
    """Runs a loaded blob; one instance can run many inputs."""

    def __init__(self, loaded: LoadedBlob, *, step_limit: int = DEFAULT_STEP_LIMIT) -> None:
        self.loaded = loaded
        self.step_limit = step_limit
        self._text = [bytearray(k.image) for k in loaded.kernels]

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
        producers = [b.producers for b in blob.barriers]
        consumers = [b.consumers for b in blob.barriers]
        dma_q = [deque(q) for q in loaded.dma_queues]
        dma_running: list[LoadedTask | None] = [None] * len(dma_q)
        dpu_q = [deque(q) for q in loaded.dpu_queues]
        dpu_running: list[LoadedTask | None] = [None] * len(dpu_q)
        dpus_per_tile = blob.header.target.dpus_per_tile
        fifo = [deque(q) for q in loaded.tile_queues]
        spt = blob.header.target.shaves_per_tile
        held: list[list[LoadedTask | None]] = [[None] * spt for _ in fifo]
        running: list[list[LoadedTask | None]] = [[None] * spt for _ in fifo]
        rng = random.Random(seed) if seed is not None else None
        result = SimResult({})
        turn = 0

        # a task may start only when every barrier it waits on or updates is its physical id's current instance
        earlier = earlier_instances(blob)

        def current(b: int) -> bool:
            return all(producers[e] == 0 and consumers[e] == 0 for e in earlier[b])

        def ready(task: LoadedTask) -> bool:
            return all(producers[b] == 0 for b in task.task.wait) and all(
                current(b) for b in (*task.task.wait, *task.task.update)
            )

        def consume(task: LoadedTask) -> None:
            for b in task.task.wait:
                consumers[b] -= 1

        def produce(task: LoadedTask) -> None:
            for b in task.task.update:
                producers[b] -= 1

        def region_view(region: Region) -> np.ndarray:
            return views[region.key]

        while True:
            actions: list[tuple[str, int, int]] = []
            for e, q in enumerate(dma_q):
                if dma_running[e] is not None:
                    actions.append(("dma_end", e, 0))
                elif q and ready(q[0]):
                    actions.append(("dma_start", e, 0))
            for d, q in enumerate(dpu_q):
                if dpu_running[d] is not None:
                    actions.append(("dpu_end", d, 0))
                elif q and ready(q[0]):
                    actions.append(("dpu_start", d, 0))
            for t in range(len(fifo)):
                for s in range(spt):
                    if running[t][s] is not None:
                        actions.append(("act_end", t, s))
                    elif held[t][s] is not None:
                        if ready(held[t][s]):  # type: ignore[arg-type]
                            actions.append(("act_start", t, s))
                    elif fifo[t]:
                        actions.append(("pop", t, s))
            if not actions:
                break
            kind, a, b = rng.choice(actions) if rng is not None else actions[turn % len(actions)]
            turn += 1
            if kind == "dma_start":
                task = dma_q[a].popleft()
                consume(task)
                assert task.src is not None and task.dst is not None
                src, dst = region_view(task.src), region_view(task.dst)
                if task.descriptor is None:
                    dst[task.dst.offset : task.dst.offset + task.dst.size] = src[
                        task.src.offset : task.src.offset + task.src.size
                    ]
                else:
                    _copy_with_descriptor(src, dst, task)
                dma_running[a] = task
                result.trace.append(TraceEvent(f"DMA{a}", task.task.name, "start"))
            elif kind == "dma_end":
                task = dma_running[a]  # type: ignore[assignment]
                dma_running[a] = None
                produce(task)
                result.trace.append(TraceEvent(f"DMA{a}", task.task.name, "end"))
            elif kind == "dpu_start":
                task = dpu_q[a].popleft()
                consume(task)
                run_dpu(task.task.payload, views[(Location.CMX, a // dpus_per_tile)])  # type: ignore[arg-type]
                dpu_running[a] = task
                result.trace.append(TraceEvent(f"DPU{a}", task.task.name, "start"))
            elif kind == "dpu_end":
                task = dpu_running[a]  # type: ignore[assignment]
                dpu_running[a] = None
                produce(task)
                result.trace.append(TraceEvent(f"DPU{a}", task.task.name, "end"))
            elif kind == "pop":
                held[a][b] = fifo[a].popleft()
            elif kind == "act_start":
                task = held[a][b]  # type: ignore[assignment]
                held[a][b] = None
                consume(task)
                executed = self._run_kernel(task, cmx[a], a, b)
                result.instructions += executed
                result.task_instructions[task.task.id] = executed
                running[a][b] = task
                result.trace.append(TraceEvent(f"tile{a}.shave{b}", task.task.name, "start"))
            else:  # act_end
                task = running[a][b]  # type: ignore[assignment]
                running[a][b] = None
                produce(task)
                result.trace.append(TraceEvent(f"tile{a}.shave{b}", task.task.name, "end"))

        blocked = [
            f"DMA{e}: {q[0].where} waits {self._barrier_states(q[0], producers)}" for e, q in enumerate(dma_q) if q
        ] + [f"DPU{d}: {q[0].where} waits {self._barrier_states(q[0], producers)}" for d, q in enumerate(dpu_q) if q]
        for t in range(len(fifo)):
            for s in range(spt):
                task = held[t][s]
                if task is not None:
                    blocked.append(f"tile{t}.shave{s}: {task.where} waits {self._barrier_states(task, producers)}")
            if fifo[t] and all(h is not None for h in held[t]):
                blocked.append(f"tile{t}: {len(fifo[t])} more invocations queued behind blocked SHAVEs")
        if blocked:
            raise DeadlockError("deadlock, no executor can proceed:\n  " + "\n  ".join(blocked))
        left = [
            f"barriers[{i}] P={p} C={c}" for i, (p, c) in enumerate(zip(producers, consumers, strict=True)) if p or c
        ]
        if left:
            raise DeadlockError("barriers not drained at the end of the schedule: " + ", ".join(left))
        for i, ref in enumerate(blob.header.outputs):
            data = mem[(Location.NET_OUTPUT, i)]
            result.outputs[ref.name] = np.frombuffer(bytes(data), dtype=DTYPE_TO_NUMPY[ref.dtype]).reshape(ref.dims)
        return result

    @staticmethod
    def _barrier_states(task: LoadedTask, producers: list[int]) -> str:
        return ", ".join(f"b{b} (P={producers[b]})" for b in task.task.wait) or "nothing (or a physical barrier)"

    def _run_kernel(self, task: LoadedTask, cmx: Window, tile: int, shave: int) -> int:
        kernel = self.loaded.kernels[task.kernel]
        windows: list[Window | None] = [
            None,
            Window("WIN_D", self._text[task.kernel], False),
            Window("WIN_E", bytearray(task.window), True),
            cmx,
        ]
        state = CoreState(AddressSpace(windows), len(kernel.program))
        state.r[0] = WIN_E + task.args_offset
        state.r[1] = kernel.layout.size
        state.r[30] = WIN_F + (shave + 1) * self.loaded.stack_sizes[tile]
        state.r[31] = 0
        try:
            return execute(kernel.program, kernel.entry_index, state, self.step_limit)
        except SimulationError as exc:
            raise type(exc)(f"{task.where} on tile {tile}, SHAVE {shave}: {exc}") from None


def simulate(
    blob: bytes | Blob | LoadedBlob,
    inputs: dict[str, np.ndarray],
    *,
    seed: int | None = None,
    step_limit: int = DEFAULT_STEP_LIMIT,
    check_races: bool = False,
) -> SimResult:
    """Load (validating everything first) and run a blob; returns outputs, the task trace, the instruction count
    and the simulated time of the schedule (``result.timing``, :mod:`snippets_shave.sim.timing`).

    ``check_races`` first runs the static race checker (:mod:`snippets_shave.sim.races`) and raises
    ``RaceError`` if two unordered tasks touch the same bytes and one of them writes."""
    loaded = blob if isinstance(blob, LoadedBlob) else load_blob(blob)
    if check_races:
        from snippets_shave.sim.races import check_races as _check

        _check(loaded)
    result = Simulator(loaded, step_limit=step_limit).run(inputs, seed=seed)
    result.timing = estimate(loaded, result.task_instructions)
    return result


def run(
    blob: bytes | Blob | LoadedBlob,
    inputs: dict[str, np.ndarray],
    *,
    seed: int | None = None,
    step_limit: int = DEFAULT_STEP_LIMIT,
    check_races: bool = False,
) -> dict[str, np.ndarray]:
    """Run a blob and return its outputs by name."""
    return simulate(blob, inputs, seed=seed, step_limit=step_limit, check_races=check_races).outputs


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

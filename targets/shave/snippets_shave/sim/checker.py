"""The Python SHAVE loop: an independent checker of the Runtime Kernel's schedule.

Before the Runtime Kernel ran in the simulator, this loop was the runtime model (a port of ``nnActEntry``):
each SHAVE pops the next invocation of its tile's FIFO when idle, waits (head-of-line) until the invocation's
wait barriers are released and every barrier it touches is the current instance of its physical id, consumes
them, runs the kernel, and later produces its update barriers. It reads the blob's tasks directly, never the
Runtime Kernel or its records, so running a blob with ``simulate(..., shave=PythonShaveLoop)`` and with the
default :class:`~snippets_shave.sim.runtime.ShaveCore` checks one against the other (tests/test_runtime_kernel.py).
"""

from __future__ import annotations

from snippets_shave.constants import WIN_E, WIN_F
from snippets_shave.sim.interp import AddressSpace, Window
from snippets_shave.sim.loader import LoadedTask
from snippets_shave.sim.runtime import Engine, Fifo, RunState, execute_invocation


class PythonShaveLoop(Engine):
    """One SHAVE of the Python loop: each step is a pop, a start (consume, run the kernel) or an end (produce)."""

    def __init__(self, run: RunState, tile: int, shave: int, fifo: Fifo) -> None:
        self.name = f"tile{tile}.shave{shave}"
        self.run, self.tile, self.shave, self.fifo = run, tile, shave, fifo
        self.sp = WIN_F + (shave + 1) * run.loaded.stack_sizes[tile]
        self.held: LoadedTask | None = None
        self.running: LoadedTask | None = None

    def runnable(self) -> bool:
        if self.running is not None:
            return True
        if self.held is not None:
            return self.run.barriers.task_ready(self.held.task.wait, self.held.task.update)
        return bool(self.fifo)

    def step(self) -> None:
        bars = self.run.barriers
        if self.running is not None:
            for b in self.running.task.update:
                bars.produce(b)
            self.running = None
        elif self.held is None:
            self.held = self.fifo.popleft()[1]
        else:
            task, self.held = self.held, None
            for b in task.task.wait:
                bars.consume(b)
            kernel = self.run.loaded.kernels[task.kernel]
            windows: list[Window | None] = [
                self.run.runtime_windows[self.tile],
                self.run.text_windows[task.kernel],
                Window("WIN_E", bytearray(task.window), True),
                self.run.cmx[self.tile],
            ]
            args = (WIN_E + task.args_offset, kernel.layout.size)
            execute_invocation(self.run, task, AddressSpace(windows), args, self.sp, self.tile, self.shave)
            self.running = task

    def blocked(self) -> list[str]:
        if self.held is None:
            return []
        return [f"{self.name}: {self.held.where} waits {self.run.barriers.states(self.held.task.wait)}"]

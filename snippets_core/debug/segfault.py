"""The segfault detector's target-independent half: a shared debug page, a forked child that runs the
kernel, and the typed error that names the expression which was executing when the child died.

A target that supports the detector (x86-64) stores ``index + 1`` of each expression into
:attr:`DebugPage.address` before the expression's code, and runs its kernels through :func:`run_isolated`:
the kernel runs in a forked child process, so a SIGSEGV (or SIGBUS, SIGILL, SIGFPE) kills the child only.
The page is ``MAP_SHARED``, so the parent reads the last index the child stored and raises
:class:`KernelFaultError` with the Subgraph, the expression index, its op and its LinearIR line.
Outputs the child writes must live in shared memory too: :func:`shared_array`.
"""

from __future__ import annotations

import faulthandler
import mmap
import os
import resource
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from snippets_core.errors import CodegenError

#: what the child's exit code means when it did not die from a signal
_EXIT_OK = 0
_EXIT_PYTHON_ERROR = 70


class KernelFaultError(CodegenError):
    """A JIT kernel died from a signal (run under the segfault detector). ``expr_index`` is the position in
    the final LinearIR of the expression that was executing (None when the fault came before the first one)."""

    def __init__(
        self,
        message: str,
        *,
        subgraph: str,
        signal_name: str,
        expr_index: int | None,
        op: str | None,
        lir_line: str | None,
    ) -> None:
        super().__init__(message)
        self.subgraph = subgraph
        self.signal_name = signal_name
        self.expr_index = expr_index
        self.op = op
        self.lir_line = lir_line


class DebugPage:
    """One ``MAP_SHARED`` page; the kernel writes the running expression's ``index + 1`` (uint64) at offset 0."""

    def __init__(self) -> None:
        self._mm = mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
        self.words = np.frombuffer(self._mm, dtype=np.uint64)

    @property
    def address(self) -> int:
        return int(self.words.ctypes.data)

    def reset(self) -> None:
        self.words[0] = 0

    def last_index(self) -> int | None:
        """The index of the last expression that started, or None."""
        v = int(self.words[0])
        return v - 1 if v else None


def shared_array(shape: Sequence[int], dtype: Any) -> np.ndarray:
    """A C-contiguous array in ``MAP_SHARED`` memory: what a forked child writes there, the parent sees."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    mm = mmap.mmap(-1, max(count * dtype.itemsize, 1), flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
    return np.frombuffer(mm, dtype=dtype, count=count).reshape(tuple(shape))


@dataclass(frozen=True)
class FaultSite:
    """What the error names: the Subgraph and, per expression index, its op, name and LinearIR line."""

    subgraph: str
    ops: tuple[str, ...]
    names: tuple[str, ...]
    lir_lines: tuple[str, ...]
    #: the LinearIR position of each entry (by default entry k is expression k)
    positions: tuple[int, ...] | None = None

    @staticmethod
    def of(subgraph: str, ir: Any) -> FaultSite:
        """From the final LinearIR (``ir.to_text()`` has a header line, then one line per expression)."""
        lines = ir.to_text().splitlines()[1 : 1 + len(ir.exprs)]
        return FaultSite(subgraph, tuple(e.type_name for e in ir.exprs), tuple(e.name for e in ir.exprs), tuple(lines))

    def error(self, sig: int, index: int | None) -> KernelFaultError:
        name = _signal_name(sig)
        if index is None or not 0 <= index < len(self.ops):
            return KernelFaultError(
                f"Subgraph '{self.subgraph}': the kernel died from {name} before its first expression "
                f"(in the kernel prologue or the call harness)",
                subgraph=self.subgraph,
                signal_name=name,
                expr_index=None,
                op=None,
                lir_line=None,
            )
        pos = self.positions[index] if self.positions is not None else index
        return KernelFaultError(
            f"Subgraph '{self.subgraph}': the kernel died from {name} in expression %{pos} "
            f"{self.ops[index]} '{self.names[index]}'; LinearIR line: {self.lir_lines[index]}",
            subgraph=self.subgraph,
            signal_name=name,
            expr_index=pos,
            op=self.ops[index],
            lir_line=self.lir_lines[index],
        )


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def run_isolated(run: Callable[[], Any], page: DebugPage, site: FaultSite) -> None:
    """Run ``run()`` in a forked child; raise :class:`KernelFaultError` if the child dies from a signal.

    The child runs on one thread (the others do not exist after ``fork``), imports nothing (another thread may
    have held the import lock at the fork), writes only shared memory that the parent reads, and leaves through
    ``os._exit`` (no atexit handlers, no flushing of the parent's buffers)."""
    page.reset()
    pid = os.fork()
    if pid == 0:  # the child
        code = _EXIT_PYTHON_ERROR
        try:
            faulthandler.disable()  # the parent reports the fault; no traceback dump from the child
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # and no core file
            run()
            code = _EXIT_OK
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        raise site.error(os.WTERMSIG(status), page.last_index())
    code = os.WEXITSTATUS(status)
    if code != _EXIT_OK:
        raise CodegenError(
            f"Subgraph '{site.subgraph}': the isolated kernel run failed in the child process (exit code {code})"
        )

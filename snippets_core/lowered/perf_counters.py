"""The counters one PerfCountBegin/PerfCountEnd region accumulates into (see ``snippets_core.debug.perf_count``
for the report). InsertPerfCount (a lowered pass) creates them, so they live at the lowered layer.
"""

from __future__ import annotations

import mmap

import numpy as np

#: rt_info key of a PerfCountBegin node: its PerfCounters
PERF_COUNTERS = "snippets.perf_counters"
#: rt_info key of a Subgraph: the PerfCounters of every kernel generated for it
SUBGRAPH_PERF_COUNTERS = "snippets.perf_counters"


class PerfCounters:
    """The counters of one measured region of one kernel: total time and number of calls.

    ``data`` is a 2-element uint64 array ``[total, calls]`` that JIT code may update in place (its address is
    stable for the object's life). It lives in ``MAP_SHARED`` memory, so a kernel run in a forked child (the
    segfault detector) still counts. ``unit`` is set by the emitter that measures ("ns" or "cycles")."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.unit = "ns"
        self._mm = mmap.mmap(-1, 16, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
        self.data = np.frombuffer(self._mm, dtype=np.uint64, count=2)
        self.data[:] = 0  # touch the page now, so the first measured call does not take its page fault

    @property
    def address(self) -> int:
        """Address of ``data`` (``total`` at +0, ``calls`` at +8) for machine code to accumulate into."""
        return int(self.data.ctypes.data)

    @property
    def total(self) -> int:
        return int(self.data[0])

    @property
    def calls(self) -> int:
        return int(self.data[1])

    def add(self, elapsed: int) -> None:
        self.data[0] += np.uint64(max(int(elapsed), 0))
        self.data[1] += np.uint64(1)

    def reset(self) -> None:
        self.data[:] = 0

    def __repr__(self) -> str:
        return f"<PerfCounters {self.label}: {self.calls} calls, {self.total} {self.unit}>"

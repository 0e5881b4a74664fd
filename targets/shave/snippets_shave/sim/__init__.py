"""The ASHV simulator: load and validate a blob, then run its DMA engines and SHAVE queues.

``run(blob, inputs, seed=None, step_limit=...) -> {name: array}``; ``simulate`` also returns the trace.
"""

from __future__ import annotations

from snippets_shave.sim.loader import LoadedBlob, load_blob
from snippets_shave.sim.runtime import DEFAULT_STEP_LIMIT, SimResult, Simulator, TraceEvent, run, simulate

__all__ = ["DEFAULT_STEP_LIMIT", "LoadedBlob", "SimResult", "Simulator", "TraceEvent", "load_blob", "run", "simulate"]

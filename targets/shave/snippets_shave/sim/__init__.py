"""The ASHV simulator: load and validate a blob, then run its DMA engines and SHAVE queues.

``run(blob, inputs, seed=None, step_limit=..., check_races=False) -> {name: array}``; ``simulate`` also
returns the trace; ``find_races(load_blob(blob))`` checks a schedule for unordered conflicting accesses.
"""

from __future__ import annotations

from snippets_shave.sim.loader import LoadedBlob, load_blob
from snippets_shave.sim.races import RaceError, check_races, find_races
from snippets_shave.sim.runtime import (
    DEFAULT_STEP_LIMIT,
    SimResult,
    Simulator,
    TraceEvent,
    run,
    simulate,
    simulate_files,
)

__all__ = [
    "DEFAULT_STEP_LIMIT",
    "LoadedBlob",
    "RaceError",
    "SimResult",
    "Simulator",
    "TraceEvent",
    "check_races",
    "find_races",
    "load_blob",
    "run",
    "simulate",
    "simulate_files",
]

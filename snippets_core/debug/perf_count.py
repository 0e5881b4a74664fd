"""Perf counters: what PerfCountBegin/PerfCountEnd measure, and the per-Subgraph report.

:class:`~snippets_core.lowered.passes.insert_perf_count.InsertPerfCount` puts a :class:`PerfCounters` in the
``rt_info`` of each PerfCountBegin node it inserts; the target's PerfCount emitters accumulate into it (the
LinearIR interpreter with ``time.perf_counter_ns``, in ns; x86-64 with ``rdtsc``, in cycles, through the
address of :attr:`PerfCounters.data`). ``generate_subgraph`` collects them on the Subgraph (``rt_info``), and
:func:`perf_counters` reads them back for a compiled model::

    cm = compile_model(model, target="interpreter", config={"target_options": {"debug": {"perf_count": "chrono"}}})
    cm(inputs)
    print(format_perf(perf_counters(cm)))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# the counter record is built by InsertPerfCount (lowered), so it lives there; re-exported for the report's users
from snippets_core.lowered.perf_counters import PERF_COUNTERS, SUBGRAPH_PERF_COUNTERS, PerfCounters

__all__ = ["PERF_COUNTERS", "SUBGRAPH_PERF_COUNTERS", "PerfCounters", "PerfRow", "format_perf", "perf_counters",
           "reset_perf_counters", "subgraph_counters"]


@dataclass(frozen=True)
class PerfRow:
    """One line of the report: a Subgraph's region, summed over the kernels generated for it."""

    subgraph: str
    region: str
    unit: str
    calls: int
    total: int

    @property
    def mean(self) -> float:
        return self.total / self.calls if self.calls else 0.0


def subgraph_counters(sg: Any) -> list[PerfCounters]:
    """The PerfCounters of every kernel generated for ``sg`` (empty when perf counters were off)."""
    return list(sg.rt_info.get(SUBGRAPH_PERF_COUNTERS, ()))


def perf_counters(cm: Any) -> list[PerfRow]:
    """Per Subgraph of a compiled model (in execution order) and region: calls, total and mean."""
    rows = []
    for sg in cm.subgraphs:
        by_region: dict[tuple[str, str], list[int]] = {}
        for c in subgraph_counters(sg):
            acc = by_region.setdefault((c.label, c.unit), [0, 0])
            acc[0] += c.calls
            acc[1] += c.total
        for (region, unit), (calls, total) in by_region.items():
            rows.append(PerfRow(sg.name, region, unit, calls, total))
    return rows


def reset_perf_counters(cm: Any) -> None:
    for sg in cm.subgraphs:
        for c in subgraph_counters(sg):
            c.reset()


def format_perf(rows: list[PerfRow]) -> str:
    """The report as a table: subgraph, region, calls, total, mean (in each row's unit)."""
    if not rows:
        return "perf counters: none (no Subgraph ran a kernel with perf counters)"
    table = [("subgraph", "region", "calls", "total", "mean", "unit")]
    for r in rows:
        table.append((r.subgraph, r.region, str(r.calls), str(r.total), f"{r.mean:.1f}", r.unit))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = ["perf counters:"]
    for row in table:
        lines.append(
            "  "
            + "  ".join(
                c.rjust(w) if i in (2, 3, 4) else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))
            ).rstrip()
        )
    return "\n".join(lines)

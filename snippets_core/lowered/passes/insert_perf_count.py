"""InsertPerfCount: PerfCountBegin/PerfCountEnd around the kernel body (a debug capability)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from snippets_core.errors import ValidationError
from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR

#: rt_info key of a PerfCountBegin/End node: the number of its region in the kernel (0, 1, ...)
PERF_REGION = "snippets.perf_region"
#: rt_info key: the region's label ("kernel")
PERF_LABEL = "snippets.perf_label"


@dataclass(frozen=True)
class InsertPerfCount(LoweredPass):
    """Measure the kernel body: a PerfCountBegin right after the last Parameter and a PerfCountEnd right
    before the first Result (the reference's default region), both outside every loop. With ``loops``, each
    outermost loop (LoopBegin ... LoopEnd) is measured too; the tail iteration that InsertSpecificIterations
    later places right after a loop's LoopEnd lands inside that loop's region. The emitters read the target's
    clock and accumulate the time and the number of calls into the region's PerfCounters (``rt_info`` of the
    PerfCountBegin). Placed at the end of the control-flow pipeline when perf counters are enabled."""

    name: ClassVar[str] = "insert-perf-count"
    loops: bool = False

    def run(self, ir: LinearIR) -> bool:
        if any(e.type_name in ("PerfCountBegin", "PerfCountEnd") for e in ir.exprs):
            return False  # already measured (the pass ran twice)
        params = [i for i, e in enumerate(ir.exprs) if e.type_name == "Parameter"]
        results = [i for i, e in enumerate(ir.exprs) if e.type_name == "Result"]
        if not results:
            raise ValidationError("InsertPerfCount: the LinearIR has no Result to end the measured region at")
        begin_pos = params[-1] + 1 if params else 0
        end_pos = results[0]
        if end_pos < begin_pos:
            raise ValidationError(
                f"InsertPerfCount: the first Result (%{end_pos}) comes before the last "
                f"Parameter (%{begin_pos - 1}); no region to measure"
            )
        outer = []
        if self.loops:
            # (LoopBegin, LoopEnd) of each outermost loop, found before any insertion moves the positions
            for i, e in enumerate(ir.exprs):
                if e.type_name == "LoopEnd" and not e.loop_ids:
                    outer.append((e.input_connectors[-1].source.expr, e))
        _wrap(ir, ir.exprs[begin_pos - 1] if begin_pos else None, ir.exprs[end_pos], 0, "kernel")
        for k, (lb, le) in enumerate(outer, start=1):
            _wrap(ir, None, None, k, f"outer loop {k - 1}", first=lb, last=le)
        ir.enumerate_expressions()
        return True


def _wrap(ir: LinearIR, after: Any, before: Any, region: int, label: str, first: Any = None, last: Any = None) -> None:
    """Insert a PerfCountBegin/End pair: after expression ``after`` (or before ``first``; at the start when both
    are None) and before expression ``before`` (or after ``last``)."""
    from snippets_core.lowered.perf_counters import PERF_COUNTERS, PerfCounters
    from snippets_core.ir.ops.snippets import PerfCountBegin, PerfCountEnd

    tag = label.replace(" ", "_")
    begin = PerfCountBegin(name=f"perf_count_begin_{tag}")
    begin.rt_info.update({PERF_REGION: region, PERF_LABEL: label, PERF_COUNTERS: PerfCounters(label)})
    pos = ir.index(first) if first is not None else (ir.index(after) + 1 if after is not None else 0)
    b = ir.insert_node(begin, pos, loop_ids=[], update_loop_ports=False)
    end = PerfCountEnd(b.node, name=f"perf_count_end_{tag}")
    end.rt_info.update({PERF_REGION: region, PERF_LABEL: label})
    pos = ir.index(last) + 1 if last is not None else ir.index(before)
    ir.insert_node(end, pos, loop_ids=[], update_loop_ports=False)

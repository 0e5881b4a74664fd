"""InsertPerfCount: PerfCountBegin/PerfCountEnd around the kernel body (a debug capability)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

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
    before the first Result (the reference's default region), both outside every loop. Its emitters read
    the target's clock and accumulate the time and the number of calls per kernel. Placed at the end of the
    control-flow pipeline when perf counters are enabled."""

    name: ClassVar[str] = "insert-perf-count"

    def run(self, ir: LinearIR) -> bool:
        from snippets_core.debug.perf_count import PERF_COUNTERS, PerfCounters
        from snippets_core.ir.ops.snippets import PerfCountBegin, PerfCountEnd

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
        begin = PerfCountBegin(name="perf_count_begin_kernel")
        begin.rt_info[PERF_REGION] = 0
        begin.rt_info[PERF_LABEL] = "kernel"
        begin.rt_info[PERF_COUNTERS] = PerfCounters("kernel")
        b = ir.insert_node(begin, begin_pos, loop_ids=[], update_loop_ports=False)
        end = PerfCountEnd(b.node, name="perf_count_end_kernel")
        end.rt_info[PERF_REGION] = 0
        end.rt_info[PERF_LABEL] = "kernel"
        ir.insert_node(end, end_pos + 1, loop_ids=[], update_loop_ports=False)
        ir.enumerate_expressions()
        return True

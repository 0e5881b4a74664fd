"""A readable, stable text dump of a LinearIR (the format golden tests compare against).

Expressions are named by position (``%3``; ``%3.1`` for output 1), never by node name, so dumps do
not depend on global node counters. One line per expression, then one line per loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from snippets_core.lowered.expression import BufferExpression
from snippets_core.lowered.loop_info import ExpandedLoopInfo, LoopInfo, UnifiedLoopInfo

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR

_SKIP_ATTRS = ("element_type", "shape")


def _fmt_value(v: Any) -> str:
    if isinstance(v, np.ndarray):
        if v.size == 1:
            return _fmt_value(v.reshape(()).item())
        return f"<{v.dtype}{list(v.shape)}>"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_fmt_value(x) for x in v) + "]"
    if hasattr(v, "get_ordered_ops"):
        return "<body>"
    return str(v)


def linear_ir_to_text(ir: LinearIR, with_descriptors: bool = False) -> str:
    pos = {id(e): i for i, e in enumerate(ir.exprs)}

    def port_name(port: Any) -> str:
        e = port.expr
        i = pos.get(id(e), "?")
        if port.is_input:
            return f"%{i}.in{port.index}"
        return f"%{i}" if e.output_count == 1 else f"%{i}.{port.index}"

    lines = [f"LinearIR master_shape=[{','.join(map(str, ir.get_master_shape()))}] loop_depth={ir.loop_depth}"]
    for i, e in enumerate(ir.exprs):
        ins = ", ".join(
            port_name(c.source) if pos.get(id(c.source.expr)) is not None else "<outside>" for c in e.input_connectors
        )
        attrs = [f"{k}={_fmt_value(v)}" for k, v in e.node.attrs().items() if k not in _SKIP_ATTRS]
        if isinstance(e, BufferExpression) and e.offset is not None:
            attrs.append(f"size={e.allocation_size}")
        outs = ", ".join(
            f"{o.element_type}[{','.join(map(str, d.shape))}]" for o, d in zip(e.node.outputs, e.output_descs)
        )
        line = f"%{i} = {e.type_name}({ins})"
        if attrs:
            line += " {" + " ".join(attrs) + "}"
        if outs:
            line += f" -> {outs}"
        if e.loop_ids:
            line += f" loops=[{','.join(map(str, e.loop_ids))}]"
        lines.append(line)
        if with_descriptors:
            for j, d in enumerate(e.input_descs):
                lines.append(f"    in{j}: {d}")
            for j, d in enumerate(e.output_descs):
                cons = ", ".join(port_name(c) for c in e.output_connectors[j].get_consumers())
                lines.append(f"    out{j}: {d} -> [{cons}]")
    for loop_id, info in ir.loop_manager:
        lines.append(_loop_line(loop_id, info, port_name))
    return "\n".join(lines)


def _loop_line(loop_id: int, info: LoopInfo, port_name: Any) -> str:
    kind = "unified" if isinstance(info, UnifiedLoopInfo) else "expanded"
    head = f"loop {loop_id} ({kind}"
    if isinstance(info, ExpandedLoopInfo):
        head += f" {info.type.value}" + (" once" if info.evaluate_once else "")
    head += f"): work_amount={info.work_amount} increment={info.increment}"

    def port(p: Any, extra: str) -> str:
        mark = {"incremented": "", "not_incremented": " not_inc", "not_processed": " not_processed"}[p.type.value]
        return f"{port_name(p.expr_port)}@d{p.dim_idx}{mark}{extra}"

    ports = info.all_ports()
    if isinstance(info, UnifiedLoopInfo):
        descs = info.port_descs()
        extras = [f" ({d.ptr_increment},{d.finalization_offset},{d.data_size})" for d in descs]
    elif isinstance(info, ExpandedLoopInfo):
        extras = [f" ({a},{b},{c})" for a, b, c in zip(info.ptr_increments, info.finalization_offsets, info.data_sizes)]
    else:
        extras = [""] * len(ports)
    n_in = len(info.input_ports)
    ins = ", ".join(port(p, x) for p, x in zip(ports[:n_in], extras[:n_in]))
    outs = ", ".join(port(p, x) for p, x in zip(ports[n_in:], extras[n_in:]))
    return f"{head} in=[{ins}] out=[{outs}]"

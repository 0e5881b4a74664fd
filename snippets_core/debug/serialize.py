"""SerializeControlFlow / SerializeDataFlow: a LinearIR as an OpenVINO-IR-style XML file.

Each Expression is a ``<layer>`` (type = op type, version "SnippetsOpset") with its attributes, loop
ids, position and port descriptors in ``<data>``, and typed ``<port>`` s (inputs numbered first, then
outputs, as in OpenVINO IR); each consumer of a PortConnector is an ``<edge>``. The data-flow variant
leaves out LoopBegin/LoopEnd and their edges.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from snippets_core.lowered.text_dump import _fmt_value
from snippets_core.lowered.expression import BufferExpression
from snippets_core.lowered.passes.pass_base import LoweredPass

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR

_CONTROL = ("LoopBegin", "LoopEnd")


def _port(parent: ET.Element, pid: int, precision: str, shape: tuple[int, ...]) -> None:
    port = ET.SubElement(parent, "port", id=str(pid), precision=precision)
    for d in shape:
        ET.SubElement(port, "dim").text = str(d)


def linear_ir_to_xml(ir: LinearIR, data_flow: bool = False, name: str = "LinearIR") -> str:
    """The XML text of ``ir`` (control flow: every expression; data flow: no loop markers)."""
    exprs = [e for e in ir.exprs if not (data_flow and e.type_name in _CONTROL)]
    ids = {id(e): i for i, e in enumerate(exprs)}
    net = ET.Element("net", name=name, version="11")
    layers = ET.SubElement(net, "layers")
    edges = ET.SubElement(net, "edges")
    for i, e in enumerate(exprs):
        layer = ET.SubElement(layers, "layer", id=str(i), name=e.name, type=e.type_name, version="SnippetsOpset")
        data = {k: _fmt_value(v) for k, v in e.node.attrs().items() if k not in ("element_type", "shape")}
        data["loop_ids"] = _fmt_value(list(e.loop_ids))
        data["execution_number"] = str(int(e.exec_num))
        for k, d in enumerate(e.input_descs):
            data[f"in{k}"] = str(d)
        for k, d in enumerate(e.output_descs):
            data[f"out{k}"] = str(d)
        if isinstance(e, BufferExpression) and e.offset is not None:
            data.update(
                reg_group=str(e.reg_group),
                cluster_id=str(e.cluster_id),
                offset=str(e.offset),
                allocation_size=str(e.allocation_size),
            )
        ET.SubElement(layer, "data", {k: data[k] for k in sorted(data)})
        if e.input_count:
            inputs = ET.SubElement(layer, "input")
            for k, conn in enumerate(e.input_connectors):
                src = conn.source
                _port(inputs, k, str(src.expr.node.outputs[src.index].element_type), e.input_descs[k].shape)
        if e.output_count:
            outputs = ET.SubElement(layer, "output")
            for k, d in enumerate(e.output_descs):
                _port(outputs, e.input_count + k, str(e.node.outputs[k].element_type), d.shape)
        for k, conn in enumerate(e.input_connectors):
            src = conn.source
            if id(src.expr) in ids:
                ET.SubElement(
                    edges,
                    "edge",
                    {
                        "from-layer": str(ids[id(src.expr)]),
                        "from-port": str(src.expr.input_count + src.index),
                        "to-layer": str(i),
                        "to-port": str(k),
                    },
                )
    ET.indent(net)
    return '<?xml version="1.0"?>\n' + ET.tostring(net, encoding="unicode") + "\n"


@dataclass(frozen=True)
class SerializeControlFlow(LoweredPass):
    """Write the LinearIR, loop markers included, to ``path`` as XML."""

    name: ClassVar[str] = "serialize-control-flow"
    path: str = "linear_ir_control_flow.xml"

    def run(self, ir: LinearIR) -> bool:
        Path(self.path).write_text(linear_ir_to_xml(ir, data_flow=False))
        return False


@dataclass(frozen=True)
class SerializeDataFlow(LoweredPass):
    """Write the LinearIR without LoopBegin/LoopEnd to ``path`` as XML."""

    name: ClassVar[str] = "serialize-data-flow"
    path: str = "linear_ir_data_flow.xml"

    def run(self, ir: LinearIR) -> bool:
        Path(self.path).write_text(linear_ir_to_xml(ir, data_flow=True))
        return False

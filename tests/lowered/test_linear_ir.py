"""LinearIR construction and editing through its own methods, the text dump, and XML serialization
(parsed back with the standard library's XML parser)."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from snippets_core.codegen.interpreter import InterpreterTarget
from snippets_core.debug.serialize import SerializeControlFlow, SerializeDataFlow
from snippets_core.errors import ShapeInferenceError, ValidationError
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.ir.ops.snippets import BroadcastLoad, Load
from snippets_core.ir.ops.unary import Relu
from snippets_core.lowered.linear_ir import Config, LinearIR
from snippets_core.lowered.passes.mark_loops import MarkLoops
from snippets_core.lowered.pipeline import lower
from snippets_core.lowered.port_descriptor import FULL_DIM, PortDescriptor


def _body(shape0=(2, 8), shape1=(2, 8)):
    p0, p1 = Parameter("f32", shape0, name="p0"), Parameter("f32", shape1, name="p1")
    return Model([Result(Relu(Add(p0, p1)), name="r")], [p0, p1])


def test_expressions_ports_and_connectors():
    ir = LinearIR(_body())
    assert [e.type_name for e in ir.exprs] == ["Parameter", "Parameter", "Add", "Relu", "Result"]
    add = ir.exprs[2]
    assert add.input_expr(0) is ir.parameters[0] and add.input_expr(1) is ir.parameters[1]
    consumers = ir.parameters[0].output_connectors[0].get_consumers()
    assert consumers == [add.get_input_port(0)]
    assert add.get_input_port(0).get_connected_ports() == [ir.parameters[0].get_output_port(0)]
    assert add.input_descs[0] == PortDescriptor((2, 8))
    assert ir.get_master_shape() == (2, 8)
    assert ir.get_expr_by_node(add.node) is add


def test_port_descriptor_is_a_value():
    d = PortDescriptor((3, 4), (1, FULL_DIM))
    assert d.layout == (0, 1) and d.is_planar
    assert d.with_(layout=(1, 0)).preordered_shape == (4, 3)
    assert "subtensor=[1,FULL]" in str(d)
    with pytest.raises(AttributeError):
        d.shape = (1,)  # type: ignore[misc]


def test_insert_node_reroutes_consumers_and_loop_ports():
    ir = LinearIR(_body())
    MarkLoops(4).run(ir)
    add = ir.exprs[2]
    p0 = ir.parameters[0]
    load = ir.insert_node(Load(p0.node.outputs[0], count=4), ir.index(add), loop_ids=add.loop_ids,
                          consumers=[add.get_input_port(0)])
    assert add.input_expr(0) is load and load.input_expr(0) is p0
    assert add.node.inputs[0].source.node is load.node  # the node graph follows
    info = ir.loop_manager.get_loop_info(add.loop_ids[0])
    assert load.get_input_port(0) in [p.expr_port for p in info.input_ports]
    assert add.get_input_port(0) not in [p.expr_port for p in info.input_ports]


def test_replace_with_node_and_erase():
    ir = LinearIR(_body((2, 8), (2, 1)))
    p1 = ir.parameters[1]
    add = ir.exprs[2]
    load = ir.insert_node(Load(p1.node.outputs[0], count=1), ir.index(add), consumers=[add.get_input_port(1)])
    bl = ir.replace_with_node([load], BroadcastLoad(p1.node.outputs[0], broadcast_dim=8))
    assert add.input_expr(1) is bl and load not in ir.exprs
    with pytest.raises(ValidationError, match="still read"):
        ir.erase(bl)


def test_move_keeps_other_order():
    ir = LinearIR(_body())
    names = [e.type_name for e in ir.exprs]
    ir.move(ir.exprs[1], 0)
    assert [e.type_name for e in ir.exprs] == names  # two Parameters swapped
    assert ir.exprs[0] is ir.parameters[1]


def test_dynamic_shapes_are_rejected_with_the_node_name():
    p = Parameter("f32", (None, 8), name="dyn")
    with pytest.raises(ShapeInferenceError, match="dyn"):
        LinearIR(Model([Result(Relu(p), name="r")], [p]))


def test_debug_print_shows_descriptors_and_registers():
    ir = lower(_body(), Config(vector_size=4), InterpreterTarget(4))
    buf = io.StringIO()
    ir.debug_print(buf)
    text = buf.getvalue()
    assert "reg=gpr[0]" in text and "reg=vec[" in text and "LoopEnd" in text


@pytest.mark.parametrize("data_flow", [False, True])
def test_xml_serialization(tmp_path, data_flow):
    ir = lower(_body((2, 9), (2, 1)), Config(vector_size=4), InterpreterTarget(4))
    path = tmp_path / "lir.xml"
    (SerializeDataFlow if data_flow else SerializeControlFlow)(str(path)).run(ir)
    root = ET.parse(path).getroot()
    layers = root.find("layers").findall("layer")
    kept = [e for e in ir.exprs if not (data_flow and e.type_name in ("LoopBegin", "LoopEnd"))]
    assert [la.get("type") for la in layers] == [e.type_name for e in kept]
    kept_ids = {id(e) for e in kept}
    expected_edges = sum(1 for e in kept for c in e.input_connectors if id(c.source.expr) in kept_ids)
    assert len(root.find("edges").findall("edge")) == expected_edges
    for edge in root.find("edges"):
        src = layers[int(edge.get("from-layer"))]
        out_ids = [p.get("id") for p in src.find("output").findall("port")]
        assert edge.get("from-port") in out_ids
    load = next(la for la in layers if la.get("type") == "Load")
    assert load.find("data").get("count") == "4"
    assert [d.text for d in load.find("output").find("port").findall("dim")] == ["2", "9"]
    assert not data_flow or all(la.get("type") not in ("LoopBegin", "LoopEnd") for la in layers)
    assert np.all([la.get("version") == "SnippetsOpset" for la in layers])

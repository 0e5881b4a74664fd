"""The IR core on small graphs: topological order, text dumps, clone, replace/insert/remove, validation."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.errors import ShapeInferenceError, SnippetsError, ValidationError
from snippets_core.frontends import builder as sb
from snippets_core.ir import Model, Shape, evaluate_model, replace_node, topological_sort
from snippets_core.ir.ops.io import Parameter
from snippets_core.ir.ops.unary import Relu, Sigmoid


def diamond():
    """x -> relu -> (exp, neg) -> add -> result, plus a second input y feeding the add."""
    x = sb.parameter([2, 3], "f32", name="x")
    y = sb.parameter([3], "f32", name="y")
    r = sb.relu(x, name="relu")
    e = sb.exp(r, name="exp")
    n = sb.negative(r, name="neg")
    a = sb.add(sb.add(e, n, name="add0"), y, name="add1")
    return sb.model([a], [x, y], name="diamond"), (x, y, r, e, n, a)


def test_topological_order_is_deterministic_and_producers_first():
    m, _ = diamond()
    names = [n.name for n in m.get_ordered_ops()]
    assert names == ["x", "y", "relu", "exp", "neg", "add0", "add1", "add1_out0"]
    order = m.get_ordered_ops()
    pos = {n.id: i for i, n in enumerate(order)}
    for n in order:
        for i in n.inputs:
            assert pos[i.source.node.id] < pos[n.id]


def test_parameters_default_to_reachable_order():
    x = sb.parameter([2], "f32", name="b_second")
    y = sb.parameter([2], "f32", name="a_first")
    m = sb.model([sb.add(y, x)])
    assert m.input_names == ["a_first", "b_second"]


def test_to_text():
    m, _ = diamond()
    expected = """\
model diamond
  x = Parameter() {element_type=f32, shape=[2,3]} -> f32[2,3]
  y = Parameter() {element_type=f32, shape=[3]} -> f32[3]
  relu = Relu(x:0) -> f32[2,3]
  exp = Exp(relu:0) -> f32[2,3]
  neg = Negative(relu:0) -> f32[2,3]
  add0 = Add(exp:0, neg:0) {auto_broadcast=numpy} -> f32[2,3]
  add1 = Add(add0:0, y:0) {auto_broadcast=numpy} -> f32[2,3]
  add1_out0 = Result(add1:0) -> f32[2,3]"""
    assert m.to_text() == expected


def test_evaluate_model_against_numpy():
    m, _ = diamond()
    x = np.array([[-1, 0.5, 2], [3, -4, 0]], np.float32)
    y = np.array([1, 2, 3], np.float32)
    (out,) = evaluate_model(m, {"x": x, "y": y}).values()
    r = np.maximum(x.astype(np.float64), 0)
    np.testing.assert_allclose(out, np.exp(r) - r + y, rtol=1e-6)


def test_clone_is_deep_and_equivalent():
    m, _ = diamond()
    c = m.clone()
    old_ids = {n.id for n in m.get_ordered_ops()}
    assert not old_ids & {n.id for n in c.get_ordered_ops()}
    assert c.to_text() == m.to_text()
    x = np.ones((2, 3), np.float32)
    y = np.arange(3, dtype=np.float32)
    (out_clone,) = evaluate_model(c, {"x": x, "y": y}).values()
    (out_orig,) = evaluate_model(m, {"x": x, "y": y}).values()
    np.testing.assert_array_equal(out_clone, out_orig)
    # editing the clone leaves the original alone
    relu = next(n for n in c.get_ordered_ops() if n.name == "relu")
    c.replace_node(relu, Sigmoid(relu.inputs[0].source, name="sig"))
    assert "Sigmoid" not in m.to_text() and "sig = Sigmoid(x:0)" in c.to_text()


def test_clone_keeps_rt_info_and_attributes():
    x = sb.parameter([4], "f32", name="x")
    g = sb.gelu(x, "tanh", name="g")
    g.node.rt_info["mark"] = "kept"
    c = sb.model([g]).clone()
    g2 = next(n for n in c.get_ordered_ops() if n.name == "g")
    assert g2 is not g.node and g2.rt_info == {"mark": "kept"} and g2.approximation_mode == "tanh"


def test_replace_node_rewires_consumers_and_keeps_names():
    m, (x, _, r, *_) = diamond()
    new = Sigmoid(x, name="sig")
    replace_node(r.node, new)
    assert [t.node.name for t in new.outputs[0].targets] == ["exp", "neg"]
    assert r.targets == [] and r.node.inputs[0] not in x.targets
    assert "relu" not in [k.name for k in m.get_ordered_ops()]
    with pytest.raises(SnippetsError, match="1 outputs vs 2"):
        replace_node(new, sb.split(sb.parameter([4], "f32"), 0, 2))


def test_insert_and_remove_node():
    m, (_, _, r, *_) = diamond()
    ins = m.insert_node_after(r, lambda o: Relu(o, name="relu2"))
    assert ins.inputs[0].source is r and [t.node.name for t in ins.outputs[0].targets] == ["exp", "neg"]
    m.remove_node(ins)
    assert [t.node.name for t in r.targets] == ["exp", "neg"]
    names = [k.name for k in m.get_ordered_ops()]
    assert "relu2" not in names and names.index("relu") < names.index("exp")


def test_validate_propagates_new_parameter_shapes():
    m, (x, *_, a) = diamond()
    x.node.shape = Shape([5, 3])
    m.validate()
    assert a.shape == Shape([5, 3])
    x.node.shape = Shape([5, 4])
    with pytest.raises(ShapeInferenceError, match="Add node 'add1'.*not numpy-broadcastable"):
        m.validate()


def test_validate_reports_undeclared_parameters():
    x = sb.parameter([2], "f32", name="x")
    y = sb.parameter([2], "f32", name="y")
    m = Model([sb.add(x, y)], [x.node], name="partial")
    with pytest.raises(ValidationError, match="parameter y is used but not declared"):
        m.validate()


def test_cycle_is_detected():
    x = sb.parameter([2], "f32")
    a = sb.relu(x)
    b = sb.exp(a)
    a.node.set_input(0, b)
    with pytest.raises(SnippetsError, match="cycle"):
        topological_sort([b.node])


def test_missing_input_is_a_typed_error():
    m, _ = diamond()
    with pytest.raises(SnippetsError, match="missing input 'y'"):
        evaluate_model(m, {"x": np.zeros((2, 3), np.float32)})


def test_parameter_dynamic_shapes_flow_through_ops():
    x = Parameter("f32", [None, 3], name="x")
    m = sb.model([sb.reduce_sum(sb.relu(x.output), [1])])
    assert m.results[0].outputs[0].shape == Shape([None])
    (out,) = evaluate_model(m, {"x": np.ones((4, 3), np.float32)}).values()
    np.testing.assert_array_equal(out, [3, 3, 3, 3])


def test_builder_make_and_unknown_op():
    x = sb.parameter([2, 2], "f32")
    assert sb.make("Relu", x).node.type_name == "Relu"
    assert len(sb.make("Split", x, sb.constant(np.int64(0)), num_splits=2)) == 2
    with pytest.raises(SnippetsError, match="unknown op type 'NoSuchOp'"):
        sb.make("NoSuchOp", x)


def test_a_results_own_output_names_that_result():
    """Model([sb.result(y)]) keeps the Result as the model output instead of wrapping it in a second one."""
    from snippets_core.frontends import builder as sb

    x = sb.parameter([2, 3], "f32", name="x")
    r = sb.result(sb.relu(x))
    m = sb.model([r])
    assert [n.type_name for n in m.get_ordered_ops()] == ["Parameter", "Relu", "Result"]
    assert m.results[0] is r.node

"""AssignLayouts on small models with a made-up target preference: the layouts written on every edge, the
reorders inserted (and only those), and the values through the reorders against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir import OPS, ElementType, Model, evaluate_model
from snippets_core.ir.layout import INPUT_LAYOUTS, NHWC, OUTPUT_LAYOUTS, PLAIN, LayoutError, layout_named, same_memory
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.ir.ops.reorder import Reorder
from snippets_core.passes.assign_layouts import REORDER, AssignLayouts, is_layout_agnostic, reorder_count
from snippets_core.tokenization.tokenization_utils import create_single_node_subgraph

F32 = ElementType.f32


def op(type_name, *args, **kw):  # type: ignore[no-untyped-def]
    return OPS[type_name](*args, **kw)


def nhwc_for(*names: str):  # type: ignore[no-untyped-def]
    """A target preference: NHWC for the nodes called ``names``, plain for the rest."""
    return lambda node: NHWC if node.name in names else None


def reorders(model: Model) -> list[tuple[str, str, str]]:
    """(the reordered value's producer, from, to) per Reorder, in topological order."""
    return [(n.inputs[0].source.node.name, n.body_ops[0].src, n.body_ops[0].dst)
            for n in model.get_ordered_ops() if n.rt_info.get(REORDER)]


def test_pass_name_is_kebab_case_of_the_class() -> None:
    assert AssignLayouts.name == "assign-layouts"


def chain(shape=(2, 5, 3, 4)):  # type: ignore[no-untyped-def]
    """x -> a -> b -> c -> y, each a Relu (any op the target may claim)."""
    x = Parameter(F32, list(shape), name="x")
    a = op("Relu", x, name="a")
    b = op("Relu", a, name="b")
    c = op("Relu", b, name="c")
    return Model([Result(c, name="y")], [x]), (a, b, c)


def test_consecutive_preferring_nodes_read_each_other_without_reorder() -> None:
    model, (a, b, c) = chain()
    assert AssignLayouts(nhwc_for("a", "b")).run(model)
    assert reorders(model) == [("x", "plain", "NHWC"), ("b", "NHWC", "plain")]
    assert a.rt_info[INPUT_LAYOUTS] == ("NHWC",) and a.rt_info[OUTPUT_LAYOUTS] == ("NHWC",)
    assert b.inputs[0].source is a.outputs[0]  # no reorder between a and b
    assert c.rt_info[INPUT_LAYOUTS] == ("plain",)
    x = np.random.default_rng(0).standard_normal((2, 5, 3, 4)).astype(np.float32)
    got = evaluate_model(model, {"x": x})["y"]
    np.testing.assert_array_equal(got, np.maximum(x, 0))


def test_a_target_without_preferences_changes_nothing() -> None:
    model, _ = chain()
    assert not AssignLayouts().run(model)
    assert reorder_count(model) == 0
    assert all(n.rt_info.get(OUTPUT_LAYOUTS) in (None, ("plain",)) for n in model.get_ordered_ops())


def test_a_per_input_preference_reads_that_input_in_its_own_layout() -> None:
    """The target's ``preferred_input`` (an RGB stem read planar by an NHWC conv): ``a`` reads x plain, with no
    reorder at the model's input, and still writes NHWC for ``b``; inputs it has no say on keep the node's layout."""
    model, (a, b, c) = chain()
    plain_x = lambda node, index: PLAIN if node.name == "a" else None  # noqa: E731
    assert AssignLayouts(nhwc_for("a", "b"), plain_x).run(model)
    assert reorders(model) == [("b", "NHWC", "plain")]
    assert a.inputs[0].source.node.name == "x"
    assert a.rt_info[INPUT_LAYOUTS] == ("plain",) and a.rt_info[OUTPUT_LAYOUTS] == ("NHWC",)
    assert b.rt_info[INPUT_LAYOUTS] == ("NHWC",) and b.inputs[0].source is a.outputs[0]
    x = np.random.default_rng(1).standard_normal((2, 5, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(evaluate_model(model, {"x": x})["y"], np.maximum(x, 0))


def test_a_per_input_preference_applies_only_where_the_value_already_lies_in_it() -> None:
    """b would read plain, but a wrote NHWC: reading it plain would be a reorder, so b reads NHWC as it lies."""
    model, (a, b, c) = chain()
    assert AssignLayouts(nhwc_for("a", "b"), lambda node, index: PLAIN if node.name == "b" else None).run(model)
    assert b.rt_info[INPUT_LAYOUTS] == ("NHWC",) and b.inputs[0].source is a.outputs[0]
    assert reorders(model) == [("x", "plain", "NHWC"), ("b", "NHWC", "plain")]


def test_a_per_input_preference_is_ignored_for_nodes_without_a_preference() -> None:
    model, (a, _, _) = chain()
    assert AssignLayouts(nhwc_for("b"), lambda node, index: NHWC).run(model)
    assert a.rt_info[INPUT_LAYOUTS] == ("plain",)  # ``a`` is plain: the per-input choice does not apply
    assert reorders(model) == [("a", "plain", "NHWC"), ("b", "NHWC", "plain")]


def test_one_reorder_per_edge_and_layout_however_many_readers() -> None:
    x = Parameter(F32, [1, 3, 4, 4], name="x")
    a, b = op("Relu", x, name="a"), op("Abs", x, name="b")
    model = Model([Result(op("Add", a, b, name="s"), name="y")], [x])
    AssignLayouts(nhwc_for("a", "b", "s")).run(model)
    assert reorders(model) == [("x", "plain", "NHWC"), ("s", "NHWC", "plain")]


def test_no_reorder_where_both_layouts_lie_the_same() -> None:
    """[N, C, 1, 1] is the same memory in NCHW and NHWC (a global pool's output before the classifier)."""
    model, _ = chain((2, 64, 1, 1))
    AssignLayouts(nhwc_for("a", "b")).run(model)
    assert reorder_count(model) == 0
    assert same_memory(NHWC, PLAIN, (2, 1, 5, 5)) and not same_memory(NHWC, PLAIN, (2, 3, 5, 5))
    # a dynamic dim may exceed 1: a dynamic batch still lies the same, a dynamic H does not
    assert same_memory(NHWC, PLAIN, (None, 3, 1, 1)) and not same_memory(NHWC, PLAIN, (2, 3, None, 1))


def test_tensors_of_another_rank_stay_plain() -> None:
    x = Parameter(F32, [6, 7], name="x")
    a = op("Relu", x, name="a")
    model = Model([Result(a, name="y")], [x])
    AssignLayouts(nhwc_for("a")).run(model)
    assert reorder_count(model) == 0 and a.rt_info[OUTPUT_LAYOUTS] == ("plain",)


def test_an_elementwise_subgraph_keeps_the_layout_its_inputs_share() -> None:
    model, (a, b, c) = chain()
    sg = create_single_node_subgraph(b)  # an element-wise Subgraph between two NHWC nodes: no reorder around it
    assert is_layout_agnostic(sg)
    AssignLayouts(nhwc_for("a", "c")).run(model)
    assert sg.rt_info[INPUT_LAYOUTS] == ("NHWC",) and sg.rt_info[OUTPUT_LAYOUTS] == ("NHWC",)
    assert reorders(model) == [("x", "plain", "NHWC"), ("c", "NHWC", "plain")]


def test_mixed_inputs_make_an_elementwise_subgraph_read_plain() -> None:
    x = Parameter(F32, [1, 3, 4, 4], name="x")
    a = op("Relu", x, name="a")
    s = op("Add", a, x, name="s")
    model = Model([Result(s, name="y")], [x])
    sg = create_single_node_subgraph(s)
    AssignLayouts(nhwc_for("a")).run(model)
    assert sg.rt_info[INPUT_LAYOUTS] == ("plain", "plain")
    assert reorders(model) == [("x", "plain", "NHWC"), ("a", "NHWC", "plain")]


def test_a_per_channel_subgraph_runs_on_nhwc_through_its_physical_twin() -> None:
    """An element-wise Subgraph with a per-channel Constant and a broadcasting [N, C, 1, 1] input between NHWC
    nodes keeps NHWC (the [N, C, 1, 1] input lies the same in both layouts: no reorder for it either); its physical
    twin, fed the NHWC memory, computes the same values as the body on the logical arrays."""
    from snippets_core.ir.layout import logical, physical
    from snippets_core.runtime.layout_steps import physical_subgraph, runs_in_layout, twin_constants

    x, g = Parameter(F32, [2, 3, 4, 5], name="x"), Parameter(F32, [2, 3, 1, 1], name="g")
    a = op("Relu", x, name="a")
    k = op("Constant", np.arange(3, dtype=np.float32).reshape(3, 1, 1) + 1, name="k")
    m = op("Multiply", op("Add", a, g, name="s"), k, name="m")
    c = op("Relu", m, name="c")
    model = Model([Result(c, name="y")], [x, g])
    add_sg = create_single_node_subgraph(m.inputs[0].source.node)  # Add(a, g)
    sg = create_single_node_subgraph(m)  # Multiply(., k), k inside
    AssignLayouts(nhwc_for("a", "c")).run(model)
    assert add_sg.rt_info[INPUT_LAYOUTS] == ("NHWC", "NHWC") and sg.rt_info[OUTPUT_LAYOUTS] == ("NHWC",)
    assert reorders(model) == [("x", "plain", "NHWC"), ("c", "NHWC", "plain")]
    assert runs_in_layout(sg) and is_layout_agnostic(sg)
    twin = physical_subgraph(sg)
    # k [3, 1, 1] is an input (a non-scalar Constant): laid out once, as [1, 1, 1, 3]
    assert [str(p.shape) for p in twin.body.parameters] == ["[2,4,5,3]", "[1,1,1,3]"]
    assert sg.rt_info[INPUT_LAYOUTS] == ("NHWC", "plain")
    v = np.random.default_rng(2).standard_normal((2, 3, 4, 5)).astype(np.float32)
    nhwc = np.ascontiguousarray(v.transpose(0, 2, 3, 1))
    (got,) = twin.evaluate(nhwc, twin_constants(sg)[1])
    np.testing.assert_allclose(logical(got, NHWC), v * (np.arange(3) + 1).reshape(3, 1, 1), rtol=1e-6)
    assert physical(logical(got, NHWC), NHWC).flags.c_contiguous


def test_non_elementwise_or_other_rank_subgraphs_are_not_layout_agnostic() -> None:
    x = Parameter(F32, [1, 3, 4, 4], name="x")
    r = op("ReduceSum", x, op("Constant", np.array([1], np.int64), name="ax"), keep_dims=True, name="r")
    Model([Result(r, name="y")], [x])
    assert not is_layout_agnostic(create_single_node_subgraph(r))
    x3 = Parameter(F32, [3, 4, 4], name="x3")
    e = op("Exp", x3, name="e")
    Model([Result(e, name="y")], [x3])
    assert not is_layout_agnostic(create_single_node_subgraph(e))


def test_reorder_reference_moves_memory_and_keeps_values() -> None:
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 5)).astype(np.float32)
    p = Parameter(F32, [2, 3, 4, 5], name="p")
    to_nhwc = Reorder(p, src="plain", dst="NHWC")
    (y,) = to_nhwc.evaluate(x)
    np.testing.assert_array_equal(y, x)
    assert y.transpose(0, 2, 3, 1).flags.c_contiguous
    (z,) = Reorder(to_nhwc, src="NHWC", dst="plain").evaluate(y)
    np.testing.assert_array_equal(z, x)
    assert z.flags.c_contiguous


def test_bad_layouts_are_typed_errors() -> None:
    with pytest.raises(LayoutError, match="unknown layout 'nChw8c'; known layouts: plain, NHWC"):
        layout_named("nChw8c")
    with pytest.raises(ShapeInferenceError, match="layout NHWC does not fit a tensor"):
        Reorder(Parameter(F32, [3, 4], name="p"), src="plain", dst="NHWC")

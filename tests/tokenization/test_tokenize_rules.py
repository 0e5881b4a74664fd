"""The Tokenizer's rules one by one: cycles, Result children, the pointer budget, marks, the callback and
modes, constants, broadcastable outputs, which ops and element types it takes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from snippets_core.frontends import builder as sb
from snippets_core.ir import Model, Subgraph
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.tokenization import (
    SnippetsMode,
    TokenizationConfig,
    TokenizationConfigError,
    TokenizeSnippets,
    is_completed,
    mark_completed,
    set_skipped_by_plugin,
    tokenize,
)

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: make the sibling helper module importable
from tok_helpers import body_types, outer_types, subgraphs, tokenize_and_compare


# --- cycles ---------------------------------------------------------------------------------------------------
def test_diamond_through_an_untokenizable_node_is_not_merged() -> None:
    # Relu feeds Add directly and through Sin (not tokenizable): {Relu, Add} would read Sin, which reads it.
    x = sb.parameter([2, 8], name="x")
    r = sb.relu(x, name="relu")
    m = sb.model([sb.add(r, sb.sin(r), name="add")])
    tokenize_and_compare(m)
    first, second = subgraphs(m)
    assert body_types(first) == ["Relu"] and body_types(second) == ["Add"]
    assert outer_types(m) == ["Parameter", "Subgraph", "Sin", "Subgraph", "Result"]


def test_only_the_parent_that_closes_a_cycle_is_left_out() -> None:
    # e = a * d, d = exp(y) + sin(a): merging e with {a} would pass through Sin; merging with {exp, add} is fine.
    x, y = sb.parameter([4, 4], name="x"), sb.parameter([4, 4], name="y")
    a = sb.relu(x, name="a")
    d = sb.add(sb.exp(y, name="c"), sb.sin(a), name="d")
    m = sb.model([sb.multiply(a, d, name="e")])
    tokenize_and_compare(m)
    first, second = subgraphs(m)
    assert body_types(first) == ["Relu"]
    assert body_types(second) == ["Exp", "Add", "Multiply"]
    # Inputs in the order the merge meets them: the rejected {Relu} first (Multiply's input 0), then {Exp, Add}'s.
    assert [i.source.node.type_name for i in second.inputs] == ["Subgraph", "Parameter", "Sin"]


# --- Results --------------------------------------------------------------------------------------------------
def test_a_node_with_two_results_is_alone() -> None:
    x = sb.parameter([3, 3], name="x")
    r = sb.relu(sb.exp(x))
    m = sb.model([sb.result(r, name="a").node, sb.result(r, name="b").node])
    tokenize_and_compare(m)
    first, second = subgraphs(m)
    assert body_types(first) == ["Exp"] and body_types(second) == ["Relu"]
    assert [r.inputs[0].source.node for r in m.results] == [second, second]


def test_results_stay_outside_and_keep_their_names() -> None:
    x = sb.parameter([2, 3], name="x")
    a = sb.abs(x, name="abs")
    m = sb.model([sb.result(sb.negative(a), name="y").node, sb.result(a, name="z").node])
    tokenize_and_compare(m)
    assert m.output_names == ["y", "z"]
    assert all(isinstance(r, Result) for r in m.results)


# --- the data-pointer budget ------------------------------------------------------------------------------------
def add_chain(n_inputs: int) -> Model:
    params = [sb.parameter([2, 4], name=f"p{i}") for i in range(n_inputs)]
    acc = sb.add(params[0], params[1], name="add1")
    for i in range(2, n_inputs):
        acc = sb.add(acc, params[i], name=f"add{i}")
    return sb.model([acc])


def test_wide_graph_splits_at_the_pointer_budget() -> None:
    m = add_chain(12)
    tokenize_and_compare(m, TokenizationConfig(data_ptr_gpr_count=11))
    first, second = subgraphs(m)
    # 10 inputs + 1 output fill the 11 pointers; the next Add would need a 12th.
    assert len(first.inputs) == 10 and len(first.outputs) == 1
    assert len(second.inputs) == 3 and second.inputs[0].source is first.outputs[0]
    assert body_types(first) == ["Add"] * 9 and body_types(second) == ["Add"] * 2


@pytest.mark.parametrize(("budget", "count"), [(12, 2), (13, 1)])
def test_pointer_budget_is_a_knob(budget: int, count: int) -> None:
    m = add_chain(12)
    tokenize_and_compare(m, TokenizationConfig(data_ptr_gpr_count=budget))
    assert len(subgraphs(m)) == count


def test_budget_counts_buffers_of_softmax() -> None:
    # Softmax (last axis) needs a Buffer: with a budget of 3, x -> Softmax -> Add(., y) can't be one Subgraph
    # (2 inputs + 1 output + 1 Buffer); with 4 it can.
    for budget, count in ((3, 2), (4, 1)):
        x, y = sb.parameter([2, 8], name="x"), sb.parameter([2, 8], name="y")
        m = sb.model([sb.add(sb.softmax(x, -1), y)])
        tokenize_and_compare(m, TokenizationConfig(data_ptr_gpr_count=budget))
        assert len(subgraphs(m)) == count


# --- SkippedByPlugin, callback, modes ---------------------------------------------------------------------------------
def chain() -> Model:
    x, y = sb.parameter([2, 5], name="x"), sb.parameter([2, 5], name="y")
    return sb.model([sb.exp(sb.relu(sb.add(x, y, name="add"), name="relu"), name="exp")])


def _node(m: Model, name: str):
    return next(n for n in m.get_ordered_ops() if n.name == name)


def test_skipped_by_plugin_stays_outside() -> None:
    m = chain()
    set_skipped_by_plugin(_node(m, "relu"))
    tokenize_and_compare(m)
    assert outer_types(m) == ["Parameter", "Parameter", "Subgraph", "Relu", "Subgraph", "Result"]


def test_skipped_matmul_is_still_taken() -> None:
    # Plugins mark MatMul/Transpose skipped for their own reasons; the reference tokenizes them anyway.
    a, b = sb.parameter([1, 2, 4, 8], name="a"), sb.parameter([1, 2, 8, 4], name="b")
    mm = sb.matmul(a, b, name="mm")
    set_skipped_by_plugin(mm.node)
    m = sb.model([mm])
    tokenize_and_compare(m)
    (sg,) = subgraphs(m)
    assert body_types(sg) == ["MatMul"]


def test_callback_veto_and_ignore_callback() -> None:
    calls: list[str] = []

    def veto_relu(node):
        calls.append(node.name)
        return "fused by the target" if node.type_name == "Relu" else None

    m = chain()
    tokenize_and_compare(m, TokenizationConfig(callback=veto_relu))
    assert outer_types(m) == ["Parameter", "Parameter", "Subgraph", "Relu", "Subgraph", "Result"]
    assert calls == ["add", "relu", "exp"]

    calls.clear()
    m = chain()
    tokenize_and_compare(m, TokenizationConfig(callback=veto_relu, snippets_mode=SnippetsMode.IgnoreCallback))
    (sg,) = subgraphs(m)
    assert body_types(sg) == ["Add", "Relu", "Exp"] and calls == []


def test_disable_mode_changes_nothing() -> None:
    m = chain()
    before = m.to_text()
    assert TokenizeSnippets(TokenizationConfig(snippets_mode="Disable")).run(m) is False
    assert m.to_text() == before and subgraphs(m) == []


def test_callback_must_return_a_reason_or_none() -> None:
    with pytest.raises(TokenizationConfigError, match="node 'add'"):
        tokenize(chain(), TokenizationConfig(callback=lambda n: True))


# --- constants --------------------------------------------------------------------------------------------------
def test_scalar_constants_go_inside_non_scalar_ones_become_inputs() -> None:
    x = sb.parameter([2, 3], name="x")
    y = sb.multiply(sb.add(x, sb.constant(np.float32(1.5), name="scalar")),
                    sb.constant(np.full((1, 1), 2.0, np.float32), name="one_elem"))
    z = sb.subtract(y, sb.constant(np.arange(3, dtype=np.float32).reshape(1, 3), name="row"))
    m = sb.model([z])
    tokenize_and_compare(m)
    (sg,) = subgraphs(m)
    assert [i.source.node.name for i in sg.inputs] == ["x", "row"]
    assert body_types(sg, with_constants=True).count("Constant") == 2


def test_shared_inputs_are_deduplicated() -> None:
    # Two Subgraphs read x; merged by the Add, they share one input.
    x = sb.parameter([2, 3], name="x")
    m = sb.model([sb.add(sb.relu(x), sb.exp(x))])
    tokenize_and_compare(m)
    (sg,) = subgraphs(m)
    assert len(sg.inputs) == 1 and len(sg.body.parameters) == 1


def test_transpose_order_constant_goes_inside() -> None:
    x = sb.parameter([2, 3, 4], name="x")
    m = sb.model([sb.relu(sb.transpose(sb.exp(x), [0, 2, 1]))])
    tokenize_and_compare(m)
    (sg,) = subgraphs(m)
    assert body_types(sg) == ["Exp", "Transpose", "Relu"] and len(sg.inputs) == 1


# --- broadcastable outputs -----------------------------------------------------------------------------------------
def test_outputs_that_do_not_broadcast_are_not_merged() -> None:
    # {Relu, Transpose} would have outputs [2,3] (Relu also feeds Sin) and [3,2]: one loop nest can't write both.
    x = sb.parameter([2, 3], name="x")
    r = sb.relu(x)
    m = sb.model([sb.transpose(r, [1, 0]), sb.sin(r)])
    tokenize_and_compare(m)
    first, second = subgraphs(m)
    assert body_types(first) == ["Relu"] and body_types(second) == ["Transpose"]


def test_outputs_that_broadcast_are_merged() -> None:
    x, y = sb.parameter([2, 1], name="x"), sb.parameter([3, 2, 4], name="y")
    r = sb.relu(x)
    m = sb.model([sb.add(r, y), sb.sin(r)])
    tokenize_and_compare(m)
    (sg,) = subgraphs(m)
    assert [str(o.shape) for o in sg.outputs] == ["[2,1]", "[3,2,4]"]


# --- Completed Subgraphs ------------------------------------------------------------------------------------------
def _pre_tokenized(completed: bool) -> Model:
    x = sb.parameter([2, 4], name="x")
    bx = Parameter("f32", [2, 4], name="x")
    body = Model([sb.exp(bx.output)], [bx], name="body")
    sg = Subgraph(x, body=body, name="mha")
    if completed:
        mark_completed(sg)
    return sb.model([sb.relu(sg.output)])


@pytest.mark.parametrize(("completed", "count"), [(True, 2), (False, 1)])
def test_completed_subgraphs_are_not_extended(completed: bool, count: int) -> None:
    m = _pre_tokenized(completed)
    tokenize_and_compare(m)
    assert len(subgraphs(m)) == count
    assert is_completed(subgraphs(m)[0]) is completed


# --- which ops ---------------------------------------------------------------------------------------------------
def _count_after(m: Model, config: TokenizationConfig | None = None) -> int:
    tokenize_and_compare(m, config)
    return len(subgraphs(m))


@pytest.mark.parametrize(("order", "to_matmul", "count"), [
    ([0, 2, 3, 1], False, 1),   # moves the innermost dim: decomposed into loops
    ([0, 2, 1, 3], False, 0),   # keeps the innermost dim: only next to a MatMul
    ([0, 2, 1, 3], True, 1),
])
def test_transpose_rules(order: list[int], to_matmul: bool, count: int) -> None:
    x = sb.parameter([1, 2, 3, 4], name="x")
    t = sb.transpose(x, order)
    out = sb.matmul(t, sb.parameter([1, 3, 4, 5], name="w")) if to_matmul else t
    m = sb.model([out])
    assert _count_after(m) == count
    if to_matmul:
        assert body_types(subgraphs(m)[0]) == ["Transpose", "MatMul"]


def test_transpose_with_computed_order_is_not_taken() -> None:
    x = sb.parameter([2, 3, 4], name="x")
    order = sb.parameter([3], "i64", name="order")
    m = sb.model([sb.make("Transpose", x, order)], [x, order])
    tokenize(m)
    assert subgraphs(m) == []


@pytest.mark.parametrize(("axis", "count"), [(-1, 1), (3, 1), (1, 0)])
def test_softmax_only_on_the_last_axis(axis: int, count: int) -> None:
    assert _count_after(sb.model([sb.softmax(sb.parameter([1, 2, 3, 8]), axis)])) == count


@pytest.mark.parametrize(("axes", "keep_dims", "count"), [([-1], True, 1), ([2], True, 1), ([1], True, 0),
                                                          ([-1], False, 0), ([1, 2], True, 0)])
def test_reduce_rules(axes: list[int], keep_dims: bool, count: int) -> None:
    x = sb.parameter([2, 3, 8])
    assert _count_after(sb.model([sb.reduce_sum(x, axes, keep_dims)])) == count
    assert _count_after(sb.model([sb.reduce_max(sb.parameter([2, 3, 8]), axes, keep_dims)])) == count


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMin", "ReduceL2"])
@pytest.mark.parametrize(("axes", "keep_dims", "count"), [([-1], True, 1), ([2], True, 1), ([1], True, 0),
                                                          ([-1], False, 0), ([1, 2], True, 0)])
def test_decomposed_reduce_rules(op: str, axes: list[int], keep_dims: bool, count: int) -> None:
    # the reductions GraphReduceDecomposition rewrites follow ReduceSum's rules: the last axis, kept
    x = sb.parameter([2, 3, 8])
    m = sb.model([sb.make(op, x, sb.constant(np.array(axes, np.int64)), keep_dims=keep_dims)])
    assert _count_after(m) == count


@pytest.mark.parametrize(("axis", "count"), [(-1, 1), (2, 1), (1, 0)])
def test_layer_norm_only_on_the_last_axis(axis: int, count: int) -> None:
    x = sb.parameter([2, 3, 8])
    scale = sb.constant(np.ones(8, np.float32))
    assert _count_after(sb.model([sb.make("LayerNormalization", x, scale, axis=axis)])) == count


@pytest.mark.parametrize(("shape_a", "shape_b", "et", "count"), [
    ([1, 2, 4, 8], [1, 2, 8, 4], "f32", 1),
    ([2, 4, 8], [2, 8, 4], "f32", 0),           # rank 3: left to other tokenizers
    ([1, 2, 4, 8], [1, 2, 8, 4], "f16", 0),     # f16 x f16 is not a supported MatMul
])
def test_matmul_rules(shape_a, shape_b, et, count) -> None:
    a, b = sb.parameter(shape_a, et), sb.parameter(shape_b, et)
    assert _count_after(sb.model([sb.matmul(a, b)])) == count


@pytest.mark.parametrize(("mode", "count"), [("numpy", 1), ("bidirectional", 0)])
def test_broadcast_rules(mode: str, count: int) -> None:
    assert _count_after(sb.model([sb.broadcast(sb.parameter([1, 4]), [3, 4], mode)])) == count


def test_fake_quantize_rules() -> None:
    x = sb.parameter([1, 3, 4, 4])
    ok = sb.fake_quantize(x, -1.0, 1.0, 0.0, 255.0, 256)
    binarization = sb.fake_quantize(x, -1.0, 1.0, 0.0, 1.0, 2)
    inverted = sb.fake_quantize(x, 1.0, -1.0, 0.0, 255.0, 256)
    m = sb.model([ok, binarization, inverted])
    tokenize_and_compare(m)
    assert [n.type_name for n in m.get_ordered_ops() if "FakeQuantize" in n.type_name] == ["FakeQuantize"] * 2
    (sg,) = subgraphs(m)
    assert sg.outputs[0].targets[0].node is m.results[0]


@pytest.mark.parametrize("op", ["Log", "Sin", "ReduceProd", "HSigmoid", "SoftPlus", "Sign", "BitwiseXor"])
def test_ops_outside_the_lists_are_not_taken(op: str) -> None:
    if op == "BitwiseXor":
        m = sb.model([sb.bitwise_xor(sb.parameter([4], "u8"), sb.parameter([4], "u8"))])
    elif op == "ReduceProd":
        m = sb.model([sb.make(op, sb.parameter([4, 4]), sb.constant(np.array([-1], np.int64)), keep_dims=True)])
    else:
        m = sb.model([sb.make(op, sb.parameter([4, 4]))])
    assert _count_after(m) == 0


def test_all_unary_ops_of_the_list_are_taken() -> None:
    x = sb.parameter([3, 4], name="x")
    y = x
    for op in ["Abs", "Floor", "Ceiling", "Erf", "Exp", "Negative", "Relu", "Sigmoid", "Tanh", "HSwish", "Mish"]:
        y = sb.make(op, y)
    y = sb.sqrt(sb.gelu(sb.elu(sb.clamp(sb.swish(sb.round(y), 1.5), -2.0, 2.0), 0.5), "tanh"))
    m = sb.model([sb.logical_not(sb.greater(y, 0.5))])
    tokenize_and_compare(m)
    (sg,) = subgraphs(m)
    assert len(body_types(sg)) == 19


def test_binary_and_select_ops_of_the_list_are_taken() -> None:
    a, b = sb.parameter([2, 3], name="a"), sb.parameter([1, 3], name="b")
    y = a
    for f in (sb.add, sb.subtract, sb.multiply, sb.maximum, sb.minimum, sb.squared_difference, sb.prelu):
        y = f(y, b)
    bp = sb.add(sb.abs(b), 1.0)
    y = sb.divide(sb.floor_mod(sb.mod(y, bp), bp), bp)
    y = sb.power(sb.abs(y), b)
    cmp = sb.logical_xor(sb.logical_or(sb.logical_and(sb.equal(y, b), sb.not_equal(y, a)), sb.less(y, a)),
                         sb.logical_and(sb.less_equal(y, b), sb.logical_or(sb.greater_equal(y, b), sb.greater(a, b))))
    m = sb.model([sb.select(cmp, y, a)])
    tokenize_and_compare(m)
    (sg,) = subgraphs(m)
    assert sorted(set(body_types(sg))) == sorted({
        "Add", "Subtract", "Multiply", "Maximum", "Minimum", "SquaredDifference", "PRelu", "Abs", "Mod", "FloorMod",
        "Divide", "Power", "Equal", "NotEqual", "LogicalAnd", "Less", "LogicalOr", "GreaterEqual", "Greater",
        "LessEqual", "LogicalXor", "Select"})


# --- element types and shapes ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("et", "count"), [("f32", 1), ("bf16", 1), ("f16", 1), ("i8", 1), ("u8", 1),
                                           ("f64", 0), ("i32", 0), ("i64", 0), ("u16", 0)])
def test_element_types(et: str, count: int) -> None:
    assert _count_after(sb.model([sb.add(sb.parameter([2, 3], et), sb.parameter([2, 3], et))])) == count


def test_convert_to_an_unsupported_type_is_not_taken() -> None:
    m = sb.model([sb.convert(sb.relu(sb.parameter([2, 3])), "i32")])
    tokenize_and_compare(m)
    assert outer_types(m) == ["Parameter", "Subgraph", "Convert", "Result"]


def test_dynamic_rank_is_not_taken_dynamic_dims_are() -> None:
    m = sb.model([sb.relu(sb.parameter(None))])
    tokenize(m)
    assert subgraphs(m) == []
    m = sb.model([sb.relu(sb.parameter([None, 3]))])
    (sg,) = tokenize(m)
    assert str(sg.outputs[0].shape) == "[?,3]"


def test_a_node_of_constants_only_is_not_taken() -> None:
    m = sb.model([sb.add(sb.relu(sb.constant(np.ones((2, 2), np.float32))), sb.parameter([2, 2]))])
    tokenize_and_compare(m)
    assert outer_types(m).count("Relu") == 1 and len(subgraphs(m)) == 1


def test_pass_convention() -> None:
    p = TokenizeSnippets()
    assert p.name == "tokenize-snippets" and p.config == TokenizationConfig()
    with pytest.raises(AttributeError):
        p.config = TokenizationConfig()  # type: ignore[misc]
    m = chain()
    assert p.run(m) is True and len(subgraphs(m)) == 1
    assert TokenizeSnippets().run(m) is False  # nothing left to take


@pytest.mark.parametrize(("data_et", "order_et", "count"), [("f32", "i32", 1), ("f32", "i64", 1), ("i32", "i64", 0)])
def test_index_inputs_may_be_i32_or_i64_data_may_not(data_et: str, order_et: str, count: int) -> None:
    # The CPU plugin narrows i64 shape-like inputs to i32 and accepts i32 only there.
    x = sb.parameter([2, 3, 4], data_et)
    order = sb.constant(np.array([0, 2, 1]), order_et)
    assert _count_after(sb.model([sb.transpose(x, order)])) == count

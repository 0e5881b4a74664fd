"""The MHA data-flow and common-optimization passes one by one: IR dumps against expected text, values against
numpy (each body is evaluated by the reference interpreter before and after the pass)."""

from __future__ import annotations

import numpy as np
import pytest

import snippets_core
from snippets_core.frontends import builder as sb
from snippets_core.ir import Model, Subgraph, evaluate_model
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.lowered.port_descriptor import FULL_DIM, get_port_descriptor_info
from snippets_core.passes.explicit_transpose_matmul_inputs import ExplicitTransposeMatMulInputs
from snippets_core.passes.extract_unsupported_transposes import ExtractUnsupportedTransposes
from snippets_core.passes.fuse_transpose_brgemm import FuseTransposeBrgemm
from snippets_core.passes.matmul_to_brgemm import MatMulToBrgemm
from snippets_core.passes.softmax_reshape_elimination import SoftmaxReshapeElimination
from snippets_core.passes.transpose_decomposition import TransposeDecomposition


def inputs_for(model: Model, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {p.name: rng.standard_normal(p.shape.to_tuple()).astype(np.float32) for p in model.parameters}


def only_output(model: Model, inputs: dict[str, np.ndarray]) -> np.ndarray:
    (out,) = evaluate_model(model, inputs).values()
    return out


def types(model: Model) -> list[str]:
    return [n.type_name for n in model.get_ordered_ops() if n.type_name not in ("Parameter", "Constant", "Result")]


# --- MatMulToBrgemm ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("transpose_a, transpose_b", [(False, False), (False, True), (True, False), (True, True)])
def test_matmul_to_brgemm(transpose_a, transpose_b, rng) -> None:
    a = sb.parameter([2, 3, 8, 5] if transpose_a else [2, 3, 5, 8], name="a")
    b = sb.parameter([1, 3, 7, 8] if transpose_b else [1, 3, 8, 7], name="b")
    model = sb.model([sb.matmul(a, b, transpose_a, transpose_b, name="mm")], name="body")
    inputs = inputs_for(model, rng)
    x, y = inputs["a"].astype(np.float64), inputs["b"].astype(np.float64)
    want = np.matmul(np.swapaxes(x, -1, -2) if transpose_a else x, np.swapaxes(y, -1, -2) if transpose_b else y)
    assert MatMulToBrgemm().run(model)
    assert types(model) == ["Brgemm"]
    (brgemm,) = [n for n in model.get_ordered_ops() if n.type_name == "Brgemm"]
    assert brgemm.layout_a == ((0, 1, 3, 2) if transpose_a else ())
    assert brgemm.layout_b == ((0, 1, 3, 2) if transpose_b else ())
    for port, i in (("in", 0), ("in", 1), ("out", 0)):
        assert get_port_descriptor_info(brgemm, port, i)["subtensor"] == (FULL_DIM, FULL_DIM)
    assert get_port_descriptor_info(brgemm, "in", 1).get("layout") == ((0, 1, 3, 2) if transpose_b else None)
    np.testing.assert_allclose(only_output(model, inputs), want, rtol=1e-5, atol=1e-5)


def test_matmul_to_brgemm_restores_a_narrow_output_type(rng) -> None:
    a, b = sb.parameter([1, 2, 4, 8], "f16", name="a"), sb.parameter([1, 2, 8, 4], "f16", name="b")
    model = sb.model([sb.matmul(a, b, name="mm")])
    assert MatMulToBrgemm().run(model)
    assert types(model) == ["Brgemm", "ConvertTruncation"]  # Brgemm accumulates f16 in f32
    inputs = {k: v.astype(np.float16) for k, v in inputs_for(model, rng).items()}
    out = only_output(model, inputs)
    assert out.dtype == np.float16
    want = np.matmul(inputs["a"].astype(np.float32), inputs["b"].astype(np.float32))
    np.testing.assert_allclose(out.astype(np.float32), want, rtol=2e-3, atol=2e-3)


def test_matmul_to_brgemm_leaves_vector_matmuls() -> None:
    model = sb.model([sb.matmul(sb.parameter([8]), sb.parameter([8, 3]))])
    assert not MatMulToBrgemm().run(model)


# --- FuseTransposeBrgemm -------------------------------------------------------------------------------------
def test_fuse_transpose_brgemm_inputs_and_output(dump, golden, rng) -> None:
    q = sb.parameter([1, 16, 2, 8], name="q")
    k = sb.parameter([1, 2, 8, 16], name="k")
    v = sb.parameter([1, 16, 2, 8], name="v")
    t0 = sb.transpose(q, [0, 2, 1, 3], name="t0")
    mm0 = sb.matmul(t0, k, name="mm0")
    t2 = sb.transpose(v, [0, 2, 1, 3], name="t2")
    t3 = sb.transpose(sb.matmul(mm0, t2, name="mm1"), [0, 2, 1, 3], name="t3")
    model = sb.model([t3], name="body")
    inputs = inputs_for(model, rng)
    want = np.transpose(np.matmul(np.matmul(np.transpose(inputs["q"], (0, 2, 1, 3)).astype(np.float64),
                                            inputs["k"]), np.transpose(inputs["v"], (0, 2, 1, 3))), (0, 2, 1, 3))
    assert MatMulToBrgemm().run(model)
    assert FuseTransposeBrgemm().run(model)
    assert dump(model) == golden("""
        q = Parameter() -> f32[1,16,2,8]
        k = Parameter() -> f32[1,2,8,16]
        v = Parameter() -> f32[1,16,2,8]
        mm0 = Brgemm(q, k) {offset_a=0, offset_b=0, offset_c=0, layout_a=(0,2,1,3), layout_b=(), layout_c=()} -> f32[1,2,16,16]
        mm1 = Brgemm(mm0, v) {offset_a=0, offset_b=0, offset_c=0, layout_a=(), layout_b=(0,2,1,3), layout_c=(0,2,1,3)} -> f32[1,16,2,8]
        t3_out0 = Result(mm1) -> f32[1,16,2,8]
    """)
    np.testing.assert_allclose(only_output(model, inputs), want, rtol=1e-4, atol=1e-5)
    mm1 = next(n for n in model.get_ordered_ops() if n.name == "mm1")
    assert get_port_descriptor_info(mm1, "out", 0)["layout"] == (0, 2, 1, 3)


def test_fuse_transpose_brgemm_composes_with_a_transposed_b(rng) -> None:
    # Transpose [0,2,1,3] then transpose_b: the Brgemm reads B through both
    a = sb.parameter([1, 2, 5, 8], name="a")
    b = sb.parameter([1, 7, 2, 8], name="b")
    model = sb.model([sb.matmul(a, sb.transpose(b, [0, 2, 1, 3]), transpose_b=True, name="mm")])
    inputs = inputs_for(model, rng)
    want = np.matmul(inputs["a"].astype(np.float64), np.transpose(inputs["b"], (0, 2, 3, 1)))
    MatMulToBrgemm().run(model)
    assert FuseTransposeBrgemm().run(model)
    (brgemm,) = [n for n in model.get_ordered_ops() if n.type_name == "Brgemm"]
    assert brgemm.layout_b == (0, 2, 3, 1) and types(model) == ["Brgemm"]
    np.testing.assert_allclose(only_output(model, inputs), want, rtol=1e-4, atol=1e-5)


def test_fuse_transpose_brgemm_skips_orders_that_move_the_last_dim() -> None:
    a, b = sb.parameter([1, 2, 5, 8], name="a"), sb.parameter([1, 2, 7, 8], name="b")
    model = sb.model([sb.matmul(a, sb.transpose(b, [0, 1, 3, 2]))])
    MatMulToBrgemm().run(model)
    assert not FuseTransposeBrgemm().run(model)
    assert types(model) == ["Transpose", "Brgemm"]


# --- TransposeDecomposition ----------------------------------------------------------------------------------
def test_transpose_decomposition(dump, golden, rng) -> None:
    x = sb.parameter([1, 4, 3, 5], name="x")
    model = sb.model([sb.relu(sb.transpose(x, [0, 2, 3, 1], name="t"), name="relu")], name="body")
    inputs = inputs_for(model, rng)
    assert TransposeDecomposition().run(model)
    assert dump(model) == golden("""
        x = Parameter() -> f32[1,4,3,5]
        t/load = LoadReorder(x) {count=1, offset=0, order=(0,2,3,1)} -> f32[1,3,5,4]
        t/store = Store(t/load) {count=1, offset=0} -> f32[1,3,5,4]
        relu = Relu(t/store) -> f32[1,3,5,4]
        relu_out0 = Result(relu) -> f32[1,3,5,4]
    """)
    load = model.get_ordered_ops()[1]
    assert get_port_descriptor_info(load, "in", 0) == {"subtensor": (1,), "layout": (0, 2, 3, 1)}
    np.testing.assert_array_equal(only_output(model, inputs), np.maximum(np.transpose(inputs["x"], (0, 2, 3, 1)), 0))


def test_transpose_decomposition_takes_only_moving_orders() -> None:
    x = sb.parameter([1, 4, 3, 5], name="x")
    keep_last = sb.model([sb.transpose(x, [0, 2, 1, 3])])
    assert not TransposeDecomposition().run(keep_last)


def test_transpose_decomposition_moves_a_computed_input_behind_the_reordered_load(dump, golden, rng) -> None:
    """Relu -> Transpose: the Relu is cloned onto a reordered load of the Parameter (Relu(x).T == Relu(x.T))."""
    x = sb.parameter([1, 4, 3, 5], name="x")
    model = sb.model([sb.transpose(sb.relu(x, name="relu"), [0, 2, 3, 1], name="t")], name="body")
    inputs = inputs_for(model, rng)
    assert TransposeDecomposition().run(model)
    assert dump(model) == golden("""
        x = Parameter() -> f32[1,4,3,5]
        t/x/load = LoadReorder(x) {count=1, offset=0, order=(0,2,3,1)} -> f32[1,3,5,4]
        t/x/store = Store(t/x/load) {count=1, offset=0} -> f32[1,3,5,4]
        relu = Relu(t/x/store) -> f32[1,3,5,4]
        t_out0 = Result(relu) -> f32[1,3,5,4]
    """)
    np.testing.assert_array_equal(only_output(model, inputs), np.maximum(np.transpose(inputs["x"], (0, 2, 3, 1)), 0))


# --- ExplicitTransposeMatMulInputs ---------------------------------------------------------------------------
def test_explicit_transpose_swaps_an_existing_transpose(dump, golden, rng) -> None:
    # MatMul(q, Transpose(k) * 0.5, transpose_b): the Transpose's order takes the swap, through the scalar op
    k = sb.parameter([1, 2, 8, 7], name="k")
    t1 = sb.transpose(k, [0, 1, 3, 2], name="t1")  # [1,2,7,8]
    scaled = sb.multiply(t1, np.float32(0.5), name="mul")
    q = sb.parameter([1, 2, 6, 8], name="q")
    model = sb.model([sb.matmul(q, scaled, transpose_b=True, name="mm")], name="body")
    inputs = inputs_for(model, rng)
    before = only_output(model, inputs)
    assert ExplicitTransposeMatMulInputs().run(model)
    text = dump(model)
    assert "t1 = Transpose(k, Constant" in text and "mm = MatMul(q, mul) {transpose_a=False, transpose_b=False}" in text
    (t1_node,) = [n for n in model.get_ordered_ops() if n.name == "t1"]
    assert list(t1_node.inputs[1].source.node.value) == [0, 1, 2, 3]
    np.testing.assert_allclose(only_output(model, inputs), before, rtol=1e-5, atol=1e-6)


def test_explicit_transpose_after_a_parameter(rng) -> None:
    q, k = sb.parameter([1, 2, 6, 8], name="q"), sb.parameter([1, 2, 7, 8], name="k")
    model = sb.model([sb.matmul(q, sb.multiply(k, np.float32(2.0), name="mul"), transpose_b=True, name="mm")])
    inputs = inputs_for(model, rng)
    want = np.matmul(inputs["q"].astype(np.float64), np.swapaxes(inputs["k"] * 2.0, -1, -2))
    assert ExplicitTransposeMatMulInputs().run(model)
    assert types(model) == ["Transpose", "Multiply", "MatMul"]
    transpose = model.get_ordered_ops()[[n.type_name for n in model.get_ordered_ops()].index("Transpose")]
    assert transpose.inputs[0].source.node.name == "k"
    assert list(transpose.inputs[1].source.node.value) == [0, 1, 3, 2]
    np.testing.assert_allclose(only_output(model, inputs), want, rtol=1e-5, atol=1e-5)


def test_explicit_transpose_before_the_matmul_when_weights_are_not_scalar(rng) -> None:
    q, k = sb.parameter([1, 2, 6, 8], name="q"), sb.parameter([1, 2, 7, 8], name="k")
    w = np.linspace(0.5, 1.5, 8, dtype=np.float32).reshape(1, 1, 1, 8)
    model = sb.model([sb.matmul(q, sb.multiply(k, w, name="mul"), transpose_b=True, name="mm")])
    inputs = inputs_for(model, rng)
    want = np.matmul(inputs["q"].astype(np.float64), np.swapaxes(inputs["k"] * w, -1, -2))
    assert ExplicitTransposeMatMulInputs().run(model)
    assert types(model) == ["Multiply", "Transpose", "MatMul"]
    np.testing.assert_allclose(only_output(model, inputs), want, rtol=1e-5, atol=1e-5)


def test_explicit_transpose_keep_callback() -> None:
    q, k = sb.parameter([1, 2, 6, 8], name="q"), sb.parameter([1, 2, 7, 8], name="k")
    model = sb.model([sb.matmul(q, k, transpose_b=True)])
    assert not ExplicitTransposeMatMulInputs(keep_transposed=lambda mm: True).run(model)
    assert types(model) == ["MatMul"]


# --- SoftmaxReshapeElimination -------------------------------------------------------------------------------
def test_softmax_reshape_elimination(dump, golden, rng) -> None:
    x = sb.parameter([1, 2, 4, 6], name="x")
    r0 = sb.reshape(x, [8, -1], name="r0")
    r1 = sb.reshape(sb.softmax(r0, 1, name="sm"), [1, 2, 4, 6], name="r1")
    model = sb.model([sb.relu(r1, name="relu")], name="body")
    inputs = inputs_for(model, rng)
    assert SoftmaxReshapeElimination().run(model)
    assert dump(model) == golden("""
        x = Parameter() -> f32[1,2,4,6]
        sm = Softmax(x) {axis=3} -> f32[1,2,4,6]
        relu = Relu(sm) -> f32[1,2,4,6]
        relu_out0 = Result(relu) -> f32[1,2,4,6]
    """)
    e = np.exp(inputs["x"] - inputs["x"].max(-1, keepdims=True))
    np.testing.assert_allclose(only_output(model, inputs), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_softmax_reshape_elimination_needs_the_shape_restored_and_the_last_dim_kept() -> None:
    x = sb.parameter([1, 2, 4, 6], name="x")
    other_shape = sb.model([sb.reshape(sb.softmax(sb.reshape(x, [8, 6]), 1), [2, 4, 6])])
    assert not SoftmaxReshapeElimination().run(other_shape)
    x = sb.parameter([1, 2, 4, 6], name="x")
    last_dim_changes = sb.model([sb.reshape(sb.softmax(sb.reshape(x, [4, 12]), 1), [1, 2, 4, 6])])
    assert not SoftmaxReshapeElimination().run(last_dim_changes)


# --- ExtractUnsupportedTransposes ----------------------------------------------------------------------------
def subgraph_with_transposes(order_b: list[int]) -> tuple[Model, Subgraph]:
    """An outer model: Subgraph(a, b) whose body is MatMul(Transpose(a, [0,2,1,3]), Transpose(b, order_b))."""
    a_p, b_p = Parameter("f32", [1, 6, 2, 8], name="a"), Parameter("f32", [1, 7, 2, 8], name="b")
    t0 = sb.transpose(a_p, [0, 2, 1, 3], name="t0")
    t1 = sb.transpose(b_p, order_b, name="t1")
    body = Model([Result(sb.matmul(t0, t1, name="mm"), name="mm")], [a_p, b_p], name="body")
    a, b = sb.parameter([1, 6, 2, 8], name="a"), sb.parameter([1, 7, 2, 8], name="b")
    sg = Subgraph(a, b, body=body, name="sg")
    return sb.model([sg.outputs[0]], [a, b], name="outer"), sg


def test_extract_unsupported_transposes(rng) -> None:
    model, sg = subgraph_with_transposes([0, 2, 3, 1])
    inputs = inputs_for(model, rng)
    want = np.matmul(np.transpose(inputs["a"], (0, 2, 1, 3)).astype(np.float64), np.transpose(inputs["b"], (0, 2, 3, 1)))
    assert ExtractUnsupportedTransposes().run(sg)
    # the [0,2,3,1] Transpose runs outside; the Brgemm-fusable one stays
    assert types(model) == ["Transpose", "Subgraph"]
    assert [n.type_name for n in sg.body.get_ordered_ops()].count("Transpose") == 1
    assert sg.body.parameters[1].shape.to_tuple() == (1, 2, 8, 7)
    np.testing.assert_allclose(only_output(model, inputs), want, rtol=1e-5, atol=1e-5)
    assert not ExtractUnsupportedTransposes().run(sg)


def test_extract_unsupported_transposes_custom_support() -> None:
    model, sg = subgraph_with_transposes([0, 2, 3, 1])
    assert not ExtractUnsupportedTransposes(is_supported=lambda t: True).run(sg)
    assert types(model) == ["Subgraph"]


def test_disabled_extraction_keeps_the_transpose_for_decomposition(rng) -> None:
    # MatMul0 with transpose_b on a Parameter: the explicit Transpose is extracted unless the pass is disabled
    q, k = sb.parameter([1, 2, 16, 8], name="q"), sb.parameter([1, 2, 16, 8], name="k")
    v = sb.parameter([1, 2, 16, 8], name="v")
    out = sb.matmul(sb.softmax(sb.matmul(q, k, transpose_b=True, name="matmul0"), 3), v, name="matmul1")
    model = sb.model([out], name="mha_tb")
    inputs = inputs_for(model, rng)
    s = np.matmul(inputs["q"].astype(np.float64), np.swapaxes(inputs["k"], -1, -2))
    e = np.exp(s - s.max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True)) @ inputs["v"]
    config = {"snippets_mode": "IgnoreCallback", "split_m_dimension": False}
    cm = snippets_core.compile_model(model, target="reference", config=config)
    assert types(cm.model) == ["Transpose", "Subgraph"]
    np.testing.assert_allclose(cm(inputs)["matmul1_out0"], want, rtol=1e-4, atol=1e-5)
    cm = snippets_core.compile_model(model, target="reference",
                                     config={**config, "disabled_passes": ["extract-unsupported-transposes"]})
    (sg,) = [n for n in cm.model.get_ordered_ops() if isinstance(n, Subgraph)]
    assert types(cm.model) == ["Subgraph"]
    np.testing.assert_allclose(cm(inputs)["matmul1_out0"], want, rtol=1e-4, atol=1e-5)
    from snippets_core.passes.data_flow_pipeline import run_data_flow

    run_data_flow(sg)
    # not in the default pipeline until the lowering applies load layouts; a target registers it by position
    assert "Transpose" in types(sg.body)
    assert TransposeDecomposition().run(sg)
    assert "LoadReorder" in types(sg.body) and "Transpose" not in types(sg.body)
    np.testing.assert_allclose(evaluate_model(cm.model, inputs)["matmul1_out0"], want, rtol=1e-4, atol=1e-5)

"""TokenizeMHASnippets and the MHA path end to end, against numpy.

The models follow the reference's ``subgraph_mha.cpp`` builders; the node and Subgraph counts are those of
the reference's CPU functional tests (``shared_tests_instances/snippets/mha*.cpp``, ``matmul.cpp``,
``transpose_matmul.cpp``), which run in IgnoreCallback mode, where the CPU plugin also turns SplitDimensionM
off. Each model is compiled with ``compile_model(target="reference")`` (Subgraph bodies run on the reference
interpreter) and compared with a numpy attention written in ``test_mha_models.py``; then every body also goes
through the data-flow pipeline (MatMulToBrgemm, FuseTransposeBrgemm, TransposeDecomposition, the
decompositions) and must still compute the same numbers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import snippets_core
from snippets_core.frontends import builder as sb
from snippets_core.ir import Model, evaluate_model
from snippets_core.passes.data_flow_pipeline import run_data_flow
from snippets_core.runtime.pipeline import run_mha_common_optimizations
from snippets_core.tokenization import (
    REJECT_REASON_KEY,
    TokenizationConfig,
    TokenizeMHASnippets,
    TokenizeSnippets,
    is_completed,
    set_skipped_by_plugin,
)

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: make the sibling module importable
from test_mha_models import (
    attention,
    body_types,
    fusion_order,
    mha,
    mha_matmul0_transposed_b,
    mha_matmul0_transposed_b_reference,
    mha_reference,
    mha_select,
    mha_select_reference,
    mha_wo_transpose,
    node_count,
    random_inputs,
    softmax,
    subgraphs,
)

#: the reference's functional tests: callbacks ignored, SplitDimensionM off (split_m = !IgnoreCallback)
IGNORE = {"snippets_mode": "IgnoreCallback", "split_m_dimension": False}
#: ... with the CPU plugin's Transpose ranks (3D Transposes regressed there, ticket 122706)
IGNORE_CPU_RANKS = {**IGNORE, "mha_supported_transpose_ranks": [4]}


def compile_and_check(model: Model, expected, config: dict, nodes: int | None = None, sgs: int | None = None,
                      seed: int = 0):  # type: ignore[no-untyped-def]
    inputs = random_inputs(model, seed)
    want = expected(inputs)
    cm = snippets_core.compile_model(model, target="reference", config=config)
    if nodes is not None:
        assert node_count(cm.model) == nodes, cm.model.to_text()
    if sgs is not None:
        assert len(subgraphs(cm.model)) == sgs, cm.model.to_text()
    (name,) = cm.output_names
    np.testing.assert_allclose(cm(inputs)[name], want, rtol=2e-4, atol=2e-5)
    lowered = cm.model.clone()
    for sg in subgraphs(lowered):
        run_data_flow(sg)
    np.testing.assert_allclose(evaluate_model(lowered, inputs)[name], want, rtol=2e-4, atol=2e-5)
    return cm


def mha_subgraph(model: Model):  # type: ignore[no-untyped-def]
    found = [sg for sg in subgraphs(model) if "MatMul" in body_types(sg)]
    assert len(found) == 1, model.to_text()
    return found[0]


# --- the reference's MHA variants -----------------------------------------------------------------------------
SHAPES_4D = [
    [[1, 128, 12, 64], [1, 128, 12, 64], [1, 12, 128, 128], [1, 128, 12, 64]],
    [[1, 128, 16, 64], [1, 128, 16, 64], [1, 16, 1, 1], [1, 128, 16, 64]],
    [[1, 128, 16, 64], [1, 128, 16, 64], [1, 1, 1, 128], [1, 128, 16, 64]],
    [[2, 68, 6, 92], [2, 68, 6, 92], [1, 1, 68, 68], [2, 68, 6, 92]],
    [[1, 58, 16, 34], [1, 58, 16, 34], [1, 1, 1, 58], [1, 58, 16, 34]],
]
SHAPES_3D = [
    [[128, 12, 64], [128, 12, 64], [12, 128, 128], [128, 12, 64]],
    [[68, 6, 92], [68, 6, 92], [1, 68, 68], [68, 6, 92]],
    [[16, 2, 92], [68, 2, 92], [1, 16, 68], [68, 2, 92]],
]


@pytest.mark.parametrize("with_mul", [False, True])
@pytest.mark.parametrize("shapes", SHAPES_4D)
def test_mha_4d(shapes, with_mul) -> None:
    # the decomposed Transpose on K (with its Multiply) is an eltwise Subgraph, the rest one MHA Subgraph
    cm = compile_and_check(mha(shapes, with_mul), lambda i: mha_reference(i, with_mul), IGNORE, nodes=2, sgs=2)
    sg = mha_subgraph(cm.model)
    assert body_types(sg) == ["Transpose", "MatMul", "Add", "Softmax", "Transpose", "MatMul", "Transpose"]
    assert is_completed(sg) and sg.name == "transpose3"


@pytest.mark.parametrize("shapes", SHAPES_3D)
def test_mha_3d(shapes) -> None:
    # CPU ranks: no 3D Transposes in the MHA; the decomposed one is an eltwise Subgraph, 3 stay outside
    compile_and_check(mha(shapes), mha_reference, IGNORE_CPU_RANKS, nodes=5, sgs=2)
    # the default ranks (3, 4) fold the 3D fusion-order Transposes into the MHA
    cm = compile_and_check(mha(shapes), mha_reference, IGNORE, nodes=2, sgs=2)
    assert body_types(mha_subgraph(cm.model)).count("Transpose") == 3


def test_mha_with_reshapes_around_softmax() -> None:
    shapes = SHAPES_4D[3]
    cm = compile_and_check(mha(shapes, with_reshape=True), mha_reference, IGNORE, nodes=2, sgs=2)
    # taken as a pair, then dropped by SoftmaxReshapeElimination
    assert "Reshape" not in body_types(mha_subgraph(cm.model))


@pytest.mark.parametrize("shapes", [
    [[1, 128, 12, 64], [1, 128, 12, 64], [1, 12, 128, 128], [1, 12, 128, 128], [1, 12, 128, 128], [1, 128, 12, 64]],
    [[1, 94, 12, 54], [1, 94, 12, 54], [1, 12, 94, 94], [1, 12, 94, 94], [1, 12, 94, 94], [1, 94, 12, 54]],
    [[1, 128, 12, 64], [1, 128, 12, 64], [1, 12, 128, 128], [1, 12, 1, 1], [1, 12, 1, 1], [1, 128, 12, 64]],
    [[2, 52, 6, 102], [2, 52, 6, 102], [1, 6, 52, 52], [1, 6, 1, 1], [1, 6, 1, 1], [2, 52, 6, 102]],
])
def test_mha_select(shapes) -> None:
    # Less + decomposed Transpose outside (comparisons are not MHA intermediate ops), the rest in the MHA
    model = mha_select(shapes)
    cm = compile_and_check(model, mha_select_reference, IGNORE, nodes=3, sgs=3)
    types = body_types(mha_subgraph(cm.model))
    assert "Select" in types and "Reshape" not in types
    assert ("Broadcast" in types) == (shapes[3] != shapes[2])


@pytest.mark.parametrize("shapes", [
    [[1, 12, 197, 64], [1, 12, 64, 197], [1, 12, 197, 64]],
    [[1, 12, 12, 64], [1, 12, 64, 48], [1, 12, 48, 64]],
    [[12, 197, 64], [12, 64, 197], [12, 197, 64]],
    [[12, 128, 100], [12, 100, 128], [12, 128, 100]],
])
def test_mha_without_transposes(shapes) -> None:
    compile_and_check(mha_wo_transpose(shapes), lambda i: attention(i["q"], i["k"], i["v"]), IGNORE, 1, 1)


def test_mha_with_multiply_scale_and_add_mask() -> None:
    shapes = [[1, 12, 197, 64], [1, 12, 64, 197], [1, 12, 197, 64]]
    cm = compile_and_check(mha_wo_transpose(shapes, scale=0.125, mask=True),
                           lambda i: attention(i["q"], i["k"], i["v"], i["mask"], 0.125), IGNORE, 1, 1)
    assert body_types(mha_subgraph(cm.model)) == ["MatMul", "Multiply", "Add", "Softmax", "MatMul"]


def test_mha_transposed_b_matmul0() -> None:
    shapes = [[1, 128, 12, 64], [1, 128, 12, 64], [1, 12, 128, 128], [1, 128, 12, 64]]
    # Transpose1 and the scalar Multiply stay outside (nothing on MatMul0's B input is tokenized); the flag
    # becomes an explicit Transpose that ExtractUnsupportedTransposes moves out; the Multiply is eltwise
    cm = compile_and_check(mha_matmul0_transposed_b(shapes), mha_matmul0_transposed_b_reference, IGNORE, 4, 2)
    sg = mha_subgraph(cm.model)
    assert body_types(sg) == ["Transpose", "MatMul", "Add", "Softmax", "Transpose", "MatMul", "Transpose"]
    assert not any(n.transpose_b for n in sg.body.get_ordered_ops() if n.type_name == "MatMul")


def test_mha_transposed_b_structure_as_the_reference_unit_test() -> None:
    # MHA tokenization and common optimizations alone (no eltwise Tokenizer), as in the reference's unit test
    model = mha_matmul0_transposed_b([[1, 16, 2, 8], [1, 16, 2, 8], [1, 2, 16, 16], [1, 16, 2, 8]])
    inputs = random_inputs(model)
    cfg = TokenizationConfig(split_m_dimension=False)
    assert TokenizeMHASnippets(cfg).run(model)
    run_mha_common_optimizations(model, cfg)
    outside = [n.type_name for n in model.get_ordered_ops() if n.type_name not in ("Parameter", "Constant", "Result")]
    assert outside == ["Transpose", "Multiply", "Transpose", "Subgraph"]
    transpose_b = model.get_ordered_ops()[[n.type_name for n in model.get_ordered_ops()].index("Multiply") + 2]
    assert list(transpose_b.inputs[1].source.node.value) == [0, 1, 3, 2]
    (out,) = evaluate_model(model, inputs).values()
    np.testing.assert_allclose(out, mha_matmul0_transposed_b_reference(inputs), rtol=2e-4, atol=2e-5)


def test_eltwise_after_matmul1() -> None:
    q, k, v = sb.parameter([1, 2, 32, 16], name="q"), sb.parameter([1, 2, 16, 32], name="k"), sb.parameter(
        [1, 2, 32, 16], name="v")
    bias = sb.parameter([1, 1, 1, 16], name="bias")
    mm1 = sb.matmul(sb.softmax(sb.matmul(q, k, name="matmul0"), 3), v, name="matmul1")
    out = sb.transpose(sb.relu(sb.add(mm1, bias, name="add1"), name="relu"), [0, 2, 1, 3], name="transpose3")
    model = sb.model([out], name="mha_eltwise_after")
    # the eltwise ops after MatMul1 are taken; Transpose3 then is not (nothing may sit between them)
    cm = compile_and_check(model, lambda i: np.transpose(np.maximum(attention(i["q"], i["k"], i["v"]) + i["bias"], 0),
                                                         (0, 2, 1, 3)), IGNORE, nodes=2, sgs=1)
    sg = mha_subgraph(cm.model)
    assert body_types(sg) == ["MatMul", "Softmax", "MatMul", "Add", "Relu"]
    assert sg.name == "relu"


# --- MatMul alone, with bias, with Transposes (eltwise Tokenizer, then the Brgemm data flow) -------------------
@pytest.mark.parametrize("shapes", [([2, 1, 3, 5], [1, 3, 5, 3]), ([3, 1, 32, 14], [1, 3, 14, 37]),
                                    ([1, 2, 37, 23], [2, 1, 23, 37])])
def test_matmul_alone_and_with_bias(shapes) -> None:
    a, b = sb.parameter(shapes[0], name="a"), sb.parameter(shapes[1], name="b")
    model = sb.model([sb.matmul(a, b, name="matmul")], name="matmul")
    compile_and_check(model, lambda i: np.matmul(i["a"].astype(np.float64), i["b"]), IGNORE, nodes=1, sgs=1)
    a, b = sb.parameter(shapes[0], name="a"), sb.parameter(shapes[1], name="b")
    mm = sb.matmul(a, b, name="matmul")
    bias = sb.parameter([1, 1, 1, mm.shape[-1]], name="bias")
    model = sb.model([sb.add(mm, bias, name="add")], name="matmul_bias")
    compile_and_check(model, lambda i: np.matmul(i["a"].astype(np.float64), i["b"]) + i["bias"], IGNORE, 1, 1)


@pytest.mark.parametrize("position", [0, 1, 2])
def test_transpose_matmul(position) -> None:
    # the reference's TransposeMatMul: a [0,2,1,3] Transpose on input 0, input 1 or the output
    shapes = {0: ([1, 49, 2, 23], [2, 2, 23, 39]), 1: ([1, 2, 49, 23], [2, 23, 1, 39]),
              2: ([1, 2, 49, 23], [2, 2, 23, 39])}[position]
    a, b = sb.parameter(shapes[0], name="a"), sb.parameter(shapes[1], name="b")
    if position == 0:
        out = sb.matmul(sb.transpose(a, [0, 2, 1, 3]), b)
    elif position == 1:
        out = sb.matmul(a, sb.transpose(b, [0, 2, 1, 3]))
    else:
        out = sb.transpose(sb.matmul(a, b), [0, 2, 1, 3])
    model = sb.model([out], name="transpose_matmul")

    def expected(i):  # type: ignore[no-untyped-def]
        x, y = i["a"].astype(np.float64), i["b"]
        if position == 0:
            return np.matmul(np.transpose(x, (0, 2, 1, 3)), y)
        if position == 1:
            return np.matmul(x, np.transpose(y, (0, 2, 1, 3)))
        return np.transpose(np.matmul(x, y), (0, 2, 1, 3))

    cm = compile_and_check(model, expected, IGNORE, nodes=1, sgs=1)
    (sg,) = subgraphs(cm.model)
    assert sorted(body_types(sg)) == ["MatMul", "Transpose"]
    lowered = sg.clone_with_new_inputs([i.source for i in sg.inputs])
    run_data_flow(lowered)
    (brgemm,) = [n for n in lowered.body.get_ordered_ops() if n.type_name == "Brgemm"]
    assert "Transpose" not in body_types(lowered)  # folded into the Brgemm's strides
    layouts = [brgemm.layout_a, brgemm.layout_b, brgemm.layout_c]
    assert layouts[position] == (0, 2, 1, 3) and all(not layouts[k] for k in range(3) if k != position)


# --- rules and reject reasons -----------------------------------------------------------------------------------
def small_mha(**kwargs) -> Model:  # type: ignore[no-untyped-def]
    return mha([[1, 16, 2, 8], [1, 16, 2, 8], [1, 2, 16, 16], [1, 16, 2, 8]], **kwargs)


def matmul0(model: Model):  # type: ignore[no-untyped-def]
    return next(n for n in model.get_ordered_ops() if n.name == "matmul0")


def test_completed_subgraph_and_fused_names() -> None:
    model = small_mha()
    assert TokenizeMHASnippets(TokenizationConfig()).run(model)
    (sg,) = subgraphs(model)
    assert is_completed(sg)
    assert sg.rt_info["originalLayersNames"] == "transpose0,matmul0,add,softmax,transpose2,matmul1,transpose3"
    assert [p.name for p in sg.body.parameters] == ["q", "transpose1", "bias", "v"]
    # the eltwise Tokenizer does not grow a Completed Subgraph
    TokenizeSnippets(TokenizationConfig(snippets_mode="IgnoreCallback")).run(model)
    assert body_types(mha_subgraph(model)) == body_types(sg)


def test_softmax_not_on_the_last_axis_is_rejected_with_a_reason() -> None:
    q, k, v = (sb.parameter([1, 2, 16, 16], name=n) for n in "qkv")
    out = sb.matmul(sb.softmax(sb.matmul(q, k, name="matmul0"), 2), v)
    model = sb.model([out])
    assert not TokenizeMHASnippets(TokenizationConfig()).run(model)
    assert "not over the last axis" in matmul0(model).rt_info[REJECT_REASON_KEY]


def test_register_budget() -> None:
    def model_with_masks(n: int) -> Model:
        q, k, v = sb.parameter([1, 2, 16, 8], name="q"), sb.parameter([1, 2, 8, 16], name="k"), sb.parameter(
            [1, 2, 16, 8], name="v")
        x = sb.matmul(q, k, name="matmul0")
        for j in range(n):
            x = sb.add(x, sb.parameter([1, 2, 16, 16], name=f"mask{j}"))
        return sb.model([sb.matmul(sb.softmax(x, 3), v)])

    # inputs 3 + n, one output, one Buffer; above 5 inputs/outputs one of the 11 registers goes to the M loop
    ok = model_with_masks(5)
    assert TokenizeMHASnippets(TokenizationConfig()).run(ok)
    too_many = model_with_masks(6)
    assert not TokenizeMHASnippets(TokenizationConfig()).run(too_many)
    assert "needs 11 data pointers" in matmul0(too_many).rt_info[REJECT_REASON_KEY]
    assert TokenizeMHASnippets(TokenizationConfig(data_ptr_gpr_count=12)).run(model_with_masks(6))


@pytest.mark.parametrize("mode, tokenized", [("Enable", False), ("IgnoreCallback", True), ("Disable", False)])
def test_callback_and_modes(mode, tokenized) -> None:
    model = small_mha()
    asked = []

    def veto(node):  # type: ignore[no-untyped-def]
        asked.append(node.name)
        return "parallel work too small"

    cfg = TokenizationConfig(snippets_mode=mode)
    assert TokenizeMHASnippets(cfg, callback=veto).run(model) is tokenized
    assert bool(subgraphs(model)) is tokenized
    if mode == "Enable":
        assert asked == ["matmul0"]
        assert matmul0(model).rt_info[REJECT_REASON_KEY] == "vetoed by the target: parallel work too small"
    else:
        assert asked == []


def test_dynamic_mha_gating() -> None:
    def dyn() -> Model:
        return mha([[1, None, 2, 8], [1, 16, 2, 8], [1, 2, None, 16], [1, 16, 2, 8]])

    model = dyn()
    assert not TokenizeMHASnippets(TokenizationConfig(is_dynamic_mha_token_enabled=False)).run(model)
    assert "dynamic" in matmul0(model).rt_info[REJECT_REASON_KEY]
    assert TokenizeMHASnippets(TokenizationConfig()).run(dyn())


@pytest.mark.parametrize("make, reason", [
    (lambda: sb.model([sb.matmul(sb.softmax(sb.matmul(*(sb.parameter([1, 1, 2, 4, 4]) for _ in "ab"),
                                                      name="matmul0"), 4), sb.parameter([1, 1, 2, 4, 4]))]),
     "ranks 3 and 4"),
    # (the precision is checked before the chain is followed: Softmax would not even take i32)
    (lambda: sb.model([sb.matmul(*(sb.parameter([2, 4, 4], "i32") for _ in "ab"), name="matmul0")]),
     "no Brgemm precision"),
    (lambda: sb.model([sb.relu(sb.matmul(*(sb.parameter([2, 4, 4]) for _ in "ab"), name="matmul0"))]),
     "no Softmax after MatMul0"),
])
def test_reject_reasons(make, reason) -> None:
    model = make()
    assert not TokenizeMHASnippets(TokenizationConfig()).run(model)
    assert reason in matmul0(model).rt_info[REJECT_REASON_KEY]


def test_two_consumers_of_matmul0_are_rejected() -> None:
    q, k, v = (sb.parameter([1, 2, 16, 16], name=n) for n in "qkv")
    mm0 = sb.matmul(q, k, name="matmul0")
    model = sb.model([sb.matmul(sb.softmax(mm0, 3), v), sb.relu(mm0)])
    assert not TokenizeMHASnippets(TokenizationConfig()).run(model)
    assert "2 consumers" in matmul0(model).rt_info[REJECT_REASON_KEY]


def test_branch_inputs_with_scalar_weights_are_pulled_in() -> None:
    def build(scalar: bool, skipped: bool = False) -> Model:
        q, k, v = sb.parameter([1, 2, 16, 8], name="q"), sb.parameter([1, 2, 8, 16], name="k"), sb.parameter(
            [1, 2, 16, 8], name="v")
        mask = sb.parameter([1, 1, 16, 16], name="mask")
        weight = np.float32(-1e4) if scalar else np.full([1, 1, 1, 16], -1e4, np.float32)
        branch = sb.multiply(mask, weight, name="mask_scale")
        if skipped:
            set_skipped_by_plugin(branch.node)
        x = sb.add(sb.matmul(q, k, name="matmul0"), branch, name="add")
        return sb.model([sb.matmul(sb.softmax(x, 3), v, name="matmul1")])

    for scalar, skipped, inside in ((True, False, True), (False, False, False), (True, True, False)):
        model = build(scalar, skipped)
        inputs = random_inputs(model)
        assert TokenizeMHASnippets(TokenizationConfig()).run(model)
        assert ("Multiply" in body_types(mha_subgraph(model))) is inside
        (out,) = evaluate_model(model, inputs).values()
        w = np.float32(-1e4)
        np.testing.assert_allclose(out, attention(inputs["q"], inputs["k"], inputs["v"], inputs["mask"] * w),
                                   rtol=2e-4, atol=2e-5)


def test_transpose_on_output_knob_and_ranks() -> None:
    model = small_mha()
    assert TokenizeMHASnippets(TokenizationConfig(mha_token_enable_transpose_on_output=False)).run(model)
    assert body_types(mha_subgraph(model))[-1] == "MatMul"
    model = small_mha()
    assert TokenizeMHASnippets(TokenizationConfig(mha_supported_transpose_ranks=(3,))).run(model)
    assert "Transpose" not in body_types(mha_subgraph(model))


def test_extract_reshapes_from_mha() -> None:
    # Swin-style bias: MatMul0 -> Reshape 5D -> Add -> Add -> Reshape back; the Reshapes leave the MHA path
    q, k, v = sb.parameter([2, 16, 8], name="q"), sb.parameter([2, 8, 16], name="k"), sb.parameter([2, 16, 8],
                                                                                                   name="v")
    s1, s2 = sb.parameter([2, 4, 1, 4, 4], name="s1"), sb.parameter([2, 1, 4, 1, 1], name="s2")
    r1 = sb.reshape(sb.matmul(q, k, name="matmul0"), [2, 4, 4, 4, 4], name="reshape1")
    r2 = sb.reshape(sb.add(sb.add(r1, s1, name="add1"), s2, name="add2"), [2, 16, 16], name="reshape2")
    model = sb.model([sb.matmul(sb.softmax(r2, 2), v, name="matmul1")], name="swin")

    def expected(i):  # type: ignore[no-untyped-def]
        bias = (i["s1"].astype(np.float64) + i["s2"]).reshape(2, 16, 16)
        return softmax(np.matmul(i["q"].astype(np.float64), i["k"]) + bias) @ i["v"]

    cm = compile_and_check(model, expected, IGNORE)
    assert body_types(mha_subgraph(cm.model)) == ["MatMul", "Add", "Softmax", "MatMul"]
    cm = compile_and_check(model, expected, {**IGNORE, "disabled_passes": ["extract-reshapes-from-mha"]})
    assert not any("MatMul" in body_types(sg) and "Softmax" in body_types(sg) for sg in subgraphs(cm.model))


def test_disabled_mha_tokenizer_falls_back_to_eltwise() -> None:
    cm = compile_and_check(small_mha(), mha_reference, {**IGNORE, "disabled_passes": ["tokenize-mha-snippets"]})
    assert not any(is_completed(sg) for sg in subgraphs(cm.model))


def test_fusion_order_helpers() -> None:
    from snippets_core.tokenization.tokenize_mha_snippets import (
        get_decomposed_transpose_order,
        get_fusion_transpose_order,
    )

    assert get_fusion_transpose_order(4) == [0, 2, 1, 3] == fusion_order(4)
    assert get_fusion_transpose_order(3) == [1, 0, 2]
    assert get_decomposed_transpose_order(4) == [0, 2, 3, 1]
    assert get_decomposed_transpose_order(5) == [0, 1, 3, 4, 2]


def mha_fq(lo: np.ndarray) -> Model:
    """MatMul0 -> FakeQuantize(lo..-lo) -> Softmax -> FakeQuantize(0..1) -> MatMul1."""
    q, k, v = sb.parameter([1, 2, 16, 8], name="q"), sb.parameter([1, 2, 8, 16], name="k"), sb.parameter(
        [1, 2, 16, 8], name="v")
    fq0 = sb.fake_quantize(sb.matmul(q, k, name="matmul0"), lo, -lo, lo, -lo, 256, name="fq0")
    fq1 = sb.fake_quantize(sb.softmax(fq0, 3), 0.0, 1.0, 0.0, 1.0, 256, name="fq1")
    return sb.model([sb.matmul(fq1, v, name="matmul1")], name="mha_fq")


def test_fake_quantize_between_the_matmuls() -> None:
    lo = np.float32(-3.0)

    def fq(x, il, ih, levels=256):  # type: ignore[no-untyped-def]
        n = levels - 1
        return np.where(x <= il, il, np.where(x > ih, ih, np.rint((x - il) / (ih - il) * n) / n * (ih - il) + il))

    def expected(i):  # type: ignore[no-untyped-def]
        return fq(softmax(fq(np.matmul(i["q"], i["k"]).astype(np.float64), -3.0, 3.0)), 0.0, 1.0) @ i["v"]

    model = mha_fq(lo)
    inputs = random_inputs(model)
    cm = snippets_core.compile_model(model, target="reference", config=IGNORE)
    sg = mha_subgraph(cm.model)
    # both FakeQuantizes are in the body; CommonOptimizations has decomposed them (Round marks each)
    types = body_types(sg)
    assert types[0] == "MatMul" and types[-1] == "MatMul" and "Softmax" in types
    assert "FakeQuantize" not in types and types.count("Round") == 2
    np.testing.assert_allclose(cm(inputs)["matmul1_out0"], expected(inputs), rtol=1e-4, atol=1e-5)


def test_fake_quantize_hidden_constants_count_against_the_budget() -> None:
    # per-head ranges leave 6 non-scalar constants after FakeQuantize decomposition: 3 + 1 + 6 = 10 > 5
    model = mha_fq(np.array([-3.0, -2.0], np.float32).reshape(1, 2, 1, 1))
    assert not TokenizeMHASnippets(TokenizationConfig()).run(model)
    assert matmul0(model).rt_info[REJECT_REASON_KEY] == (
        "needs 11 data pointers (inputs/outputs 10, buffers 1) but only 10 registers are available")
    model = mha_fq(np.array([-3.0, -2.0], np.float32).reshape(1, 2, 1, 1))
    assert TokenizeMHASnippets(TokenizationConfig(data_ptr_gpr_count=12)).run(model)
    assert mha_subgraph(model).rt_info["VirtualPortCount"] == 6


def test_dynamic_mha_runs_on_the_reference() -> None:
    model = mha([[1, None, 2, 8], [1, None, 2, 8], [1, 2, None, None], [1, None, 2, 8]])
    cm = snippets_core.compile_model(model, target="reference", config=IGNORE)
    sg = mha_subgraph(cm.model)
    assert not sg.inputs[0].shape.is_static
    for s in (16, 5):
        rng = np.random.default_rng(s)
        inputs = {n: rng.standard_normal([1, s, 2, 8]).astype(np.float32) for n in "qkv"}
        inputs["bias"] = rng.standard_normal([1, 2, s, s]).astype(np.float32)
        np.testing.assert_allclose(cm(inputs)["transpose3_out0"], mha_reference(inputs), rtol=2e-4, atol=2e-5)


def test_plugin_callback_is_asked_as_the_mha_tokenizer() -> None:
    from snippets_core.plugins import hookimpl
    from snippets_core.plugins.host import get_host

    asked: list[tuple[str, str]] = []

    class Plugin:
        veto_mha = True

        @hookimpl
        def snippets_tokenization_callback(self, node, target_name, tokenizer):  # type: ignore[no-untyped-def]
            asked.append((node.type_name, tokenizer))
            if node.type_name == "MatMul" and tokenizer == "eltwise":
                return "MatMul alone is not fused"
            if tokenizer == "mha" and self.veto_mha:
                return "not enough parallel work"
            return None

    config = {"block_plugins": ["example_passes"]}  # a private plugin host for this test (a real block list)
    host = get_host(config)
    plugin = Plugin()
    host.register(plugin, "test-mha-callback")
    try:
        model = small_mha()
        cm = compile_and_check(model, mha_reference, config)
        assert ("MatMul", "mha") in asked and not any(is_completed(sg) for sg in subgraphs(cm.model))
        reasons = [n.rt_info.get(REJECT_REASON_KEY, "") for n in cm.model.get_ordered_ops() if n.name == "matmul0"]
        assert reasons and "not enough parallel work" in reasons[0]
        plugin.veto_mha = False
        cm = compile_and_check(small_mha(), mha_reference, config)
        assert is_completed(mha_subgraph(cm.model))
    finally:
        host.unregister("test-mha-callback")

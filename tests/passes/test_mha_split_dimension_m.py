"""SplitDimensionM: the heuristics (the reference's 14 unit vectors of ``utils/split_dim_m.cpp``), the order
and shape helpers, and the pass on MHA models (outputs unchanged against numpy, body shapes as the reference's
``MHASplitMFunction`` has them)."""

from __future__ import annotations

import numpy as np
import pytest

import snippets_core
from snippets_core.frontends import builder as sb
from snippets_core.ir import Model, Subgraph, evaluate_model
from snippets_core.passes.data_flow_pipeline import run_data_flow
from snippets_core.passes.split_dimension_m import (
    SPLIT_M_RT_INFO,
    SplitDimensionM,
    can_be_optimized,
    is_prime,
    reshape_m_dim,
    split,
    updated_order,
)


# (batch, M, concurrency) -> (batch_m, kernel_m), None when the reference does not split
@pytest.mark.parametrize("batch, m, concurrency, expected", [
    (40, 32, 40, None),
    (65, 32, 40, None),
    (20, 32, 40, (2, 16)),
    (30, 60, 40, (2, 30)),
    (10, 100, 40, (4, 25)),
    (15, 45, 40, (5, 9)),
    (25, 50, 40, (2, 25)),
    (5, 16384, 40, (8, 2048)),
    (5, 16384, 32, (32, 512)),
    (48, 4097, 32, (17, 241)),
    (48, 6600, 32, (200, 33)),
    (12, 128, 16, (4, 32)),
    (16, 384, 60, (12, 32)),
    (16, 384, 24, (12, 32)),
])
def test_split_heuristics(batch, m, concurrency, expected) -> None:
    assert split((batch, m, 64), concurrency) == expected
    # the batch may be spread over several dims
    if batch % 5 == 0:
        assert split((5, batch // 5, m, 64), concurrency) == expected


def test_primes() -> None:
    primes = [n for n in range(60) if is_prime(n)]
    assert primes == [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59]
    assert is_prime(4099) and not is_prime(4097)


def test_order_and_shape_helpers() -> None:
    # the reference's MHASplitMFunction orders after the split
    assert updated_order([0, 2, 1, 3], 1) == [0, 3, 1, 2, 4]  # input Transpose, M at input dim 1
    assert updated_order([0, 2, 1, 3], 2) == [0, 2, 3, 1, 4]  # output Transpose, M at dim rank-2
    assert updated_order([1, 0, 2], 0) == [2, 0, 1, 3]
    assert updated_order([1, 0, 2], 1) == [1, 2, 0, 3]
    assert reshape_m_dim([1, 128, 2, 64], 1, 4, 32) == [1, 4, 32, 2, 64]
    assert reshape_m_dim([1, 1, 1, 64], 2, 4, 32) == [1, 1, 1, 1, 64]  # a unit M broadcasts: only a 1 goes in


def mha_4d(shape: list[int], mask: list[int]) -> Model:
    q, k, v = (sb.parameter(shape, name=n) for n in "qkv")
    m = sb.parameter(mask, name="mask")
    t0 = sb.transpose(q, [0, 2, 1, 3], name="transpose0")
    t1 = sb.transpose(k, [0, 2, 3, 1], name="transpose1")
    sm = sb.softmax(sb.add(sb.matmul(t0, t1, name="matmul0"), m, name="add"), 3, name="softmax")
    mm1 = sb.matmul(sm, sb.transpose(v, [0, 2, 1, 3], name="transpose2"), name="matmul1")
    return sb.model([sb.transpose(mm1, [0, 2, 1, 3], name="transpose3")], [q, k, m, v], name="mha")


def mha_3d(shape: list[int], mask: list[int]) -> Model:
    q, k, v = (sb.parameter(shape, name=n) for n in "qkv")
    m = sb.parameter(mask, name="mask")
    t0 = sb.transpose(q, [1, 0, 2], name="transpose0")
    t1 = sb.transpose(k, [1, 2, 0], name="transpose1")
    sm = sb.softmax(sb.add(sb.matmul(t0, t1, name="matmul0"), m, name="add"), 2, name="softmax")
    mm1 = sb.matmul(sm, sb.transpose(v, [1, 0, 2], name="transpose2"), name="matmul1")
    return sb.model([sb.transpose(mm1, [1, 0, 2], name="transpose3")], [q, k, m, v], name="mha3d")


def numpy_mha(i: dict[str, np.ndarray], rank: int) -> np.ndarray:
    f = [0, 2, 1, 3] if rank == 4 else [1, 0, 2]
    d = [0, 2, 3, 1] if rank == 4 else [1, 2, 0]
    s = np.matmul(np.transpose(i["q"], f).astype(np.float64), np.transpose(i["k"], d)) + i["mask"]
    e = np.exp(s - s.max(-1, keepdims=True))
    return np.transpose((e / e.sum(-1, keepdims=True)) @ np.transpose(i["v"], f), f)


def inputs_for(model: Model, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {p.name: rng.standard_normal(p.shape.to_tuple()).astype(np.float32) for p in model.parameters}


def mha_subgraph(model: Model) -> Subgraph:
    (sg,) = [n for n in model.get_ordered_ops() if isinstance(n, Subgraph) and n.body.count("MatMul")]
    return sg


def const_order(node) -> list[int]:  # type: ignore[no-untyped-def]
    return [int(x) for x in node.inputs[1].source.node.value]


def check_outputs(cm, model: Model, rank: int) -> None:  # type: ignore[no-untyped-def]
    inputs = inputs_for(model)
    want = numpy_mha(inputs, rank)
    (name,) = cm.output_names
    out = cm(inputs)[name]
    assert out.shape == want.shape
    np.testing.assert_allclose(out, want, rtol=2e-4, atol=2e-5)
    lowered = cm.model.clone()
    for sg in (n for n in lowered.get_ordered_ops() if isinstance(n, Subgraph)):
        run_data_flow(sg)
    np.testing.assert_allclose(evaluate_model(lowered, inputs)[name], want, rtol=2e-4, atol=2e-5)


def test_split_m_on_a_4d_mha() -> None:
    # the reference's MHA_4D_SplitDimensionM_static case: 4 threads, batch 1 x 2 heads, M 128 -> (2, 64)
    model = mha_4d([1, 128, 2, 64], [1, 1, 1, 1])
    cm = snippets_core.compile_model(model, target="reference", config={"num_threads": 4})
    sg = mha_subgraph(cm.model)
    assert sg.rt_info[SPLIT_M_RT_INFO] == (2, 64)
    assert [p.shape.to_tuple() for p in sg.body.parameters] == [
        (1, 2, 64, 2, 64), (1, 2, 1, 64, 128), (1, 1, 1, 1, 1), (1, 1, 128, 2, 64)]
    transposes = {n.name: const_order(n) for n in sg.body.get_ordered_ops() if n.type_name == "Transpose"}
    assert transposes == {"transpose0": [0, 3, 1, 2, 4], "transpose2": [0, 3, 1, 2, 4], "transpose3": [0, 2, 3, 1, 4]}
    (softmax,) = [n for n in sg.body.get_ordered_ops() if n.type_name == "Softmax"]
    assert softmax.axis == -1
    mm0 = next(n for n in sg.body.get_ordered_ops() if n.name == "matmul0")
    assert mm0.outputs[0].shape.to_tuple() == (1, 2, 2, 64, 128)
    # 4 Reshapes on the inputs, one on the output, which takes the Subgraph's name
    reshapes = [n for n in cm.model.get_ordered_ops() if n.type_name == "Reshape"]
    assert len(reshapes) == 5 and reshapes[-1].name == "transpose3" and sg.name == "transpose3_original"
    assert cm.model.results[0].inputs[0].shape.to_tuple() == (1, 128, 2, 64)
    check_outputs(cm, model, 4)


def test_split_m_on_a_3d_mha() -> None:
    # MHA_3D_SplitDimensionM_static: [384, 2, 64] with 4 threads -> M 384 = 2 x 192
    model = mha_3d([384, 2, 64], [1, 384, 384])
    cm = snippets_core.compile_model(model, target="reference", config={"num_threads": 4})
    sg = mha_subgraph(cm.model)
    assert sg.rt_info[SPLIT_M_RT_INFO] == (2, 192)
    transposes = {n.name: const_order(n) for n in sg.body.get_ordered_ops() if n.type_name == "Transpose"}
    assert transposes["transpose0"] == [2, 0, 1, 3] and transposes["transpose3"] == [1, 2, 0, 3]
    assert sg.body.parameters[0].shape.to_tuple() == (2, 192, 2, 64)
    check_outputs(cm, model, 3)


@pytest.mark.parametrize("threads, split_expected", [(1, False), (2, False), (3, True), (8, True)])
def test_split_m_follows_the_thread_count(threads, split_expected) -> None:
    model = mha_4d([1, 96, 2, 16], [1, 2, 96, 96])
    cm = snippets_core.compile_model(model, target="reference", config={"num_threads": threads})
    assert (SPLIT_M_RT_INFO in mha_subgraph(cm.model).rt_info) is split_expected
    check_outputs(cm, model, 4)


def test_split_m_can_be_disabled() -> None:
    model = mha_4d([1, 128, 2, 64], [1, 1, 1, 128])
    for config in ({"num_threads": 4, "split_m_dimension": False},
                   {"num_threads": 4, "disabled_passes": ["split-dimension-m"]}):
        cm = snippets_core.compile_model(model, target="reference", config=config)
        assert SPLIT_M_RT_INFO not in mha_subgraph(cm.model).rt_info
        assert not any(n.type_name == "Reshape" for n in cm.model.get_ordered_ops())
        check_outputs(cm, model, 4)


def test_split_m_runs_once_and_reports_can_be_optimized() -> None:
    model = mha_4d([1, 128, 2, 64], [1, 2, 128, 128])
    cm = snippets_core.compile_model(model, target="reference", config={"num_threads": 4})
    sg = mha_subgraph(cm.model)
    assert not SplitDimensionM(4).run(sg)
    mm0 = next(n for n in model.get_ordered_ops() if n.name == "matmul0")
    assert can_be_optimized(mm0, 4) and not can_be_optimized(mm0, 2)
    check_outputs(cm, model, 4)


def test_split_m_updates_a_broadcast_between_the_matmuls() -> None:
    q, k, v = (sb.parameter([1, 2, 64, 16], name=n) for n in "qkv")
    cond = sb.parameter([1, 2, 1, 1], "boolean", name="cond")
    scores = sb.matmul(q, sb.transpose(k, [0, 1, 3, 2]), name="matmul0")
    sel = sb.select(sb.broadcast(cond, [1, 2, 64, 64], name="broadcast"), np.float32(-3.0), scores, name="select")
    out = sb.matmul(sb.softmax(sel, 3), v, name="matmul1")
    model = sb.model([out], [q, k, cond, v], name="select_mha")
    cm = snippets_core.compile_model(model, target="reference", config={"num_threads": 4})
    sg = mha_subgraph(cm.model)
    assert sg.rt_info[SPLIT_M_RT_INFO] == (2, 32)
    (bc,) = [n for n in sg.body.get_ordered_ops() if n.type_name == "Broadcast"]
    assert const_order(bc) == [1, 2, 2, 32, 64]
    rng = np.random.default_rng(3)
    inputs = {n: rng.standard_normal([1, 2, 64, 16]).astype(np.float32) for n in "qkv"}
    inputs["cond"] = np.array([True, False]).reshape(1, 2, 1, 1)
    s = np.where(inputs["cond"], -3.0, np.matmul(inputs["q"].astype(np.float64), np.swapaxes(inputs["k"], -1, -2)))
    e = np.exp(s - s.max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True)) @ inputs["v"]
    np.testing.assert_allclose(cm(inputs)["matmul1_out0"], want, rtol=2e-4, atol=2e-5)


def test_split_m_on_a_matmul_with_bias() -> None:
    # an eltwise MatMul Subgraph is domain-sensitive too: batch 2 x 3 (broadcast), M 64 -> (2, 32)
    a, b = sb.parameter([2, 1, 64, 5], name="a"), sb.parameter([1, 3, 5, 7], name="b")
    bias = sb.parameter([1, 1, 1, 7], name="bias")
    model = sb.model([sb.add(sb.matmul(a, b, name="matmul"), bias, name="add")], name="matmul_bias")
    cm = snippets_core.compile_model(model, target="reference",
                                     config={"num_threads": 4, "snippets_mode": "IgnoreCallback"})
    sg = mha_subgraph(cm.model)
    assert sg.rt_info[SPLIT_M_RT_INFO] == (2, 32)
    assert [p.shape.to_tuple() for p in sg.body.parameters] == [(2, 1, 2, 32, 5), (1, 3, 1, 5, 7), (1, 1, 1, 1, 7)]
    inputs = inputs_for(model)
    want = np.matmul(inputs["a"].astype(np.float64), inputs["b"]) + inputs["bias"]
    np.testing.assert_allclose(cm(inputs)["add_out0"], want, rtol=1e-5, atol=1e-5)


def test_split_m_leaves_bodies_with_reshapes_alone() -> None:
    # with SoftmaxReshapeElimination disabled the Reshape pair stays; its target shapes cannot follow a split
    q, k, v = (sb.parameter([1, 2, 64, 16], name=n) for n in "qkv")
    s = sb.reshape(sb.matmul(q, sb.transpose(k, [0, 1, 3, 2]), name="matmul0"), [128, 64])
    out = sb.matmul(sb.reshape(sb.softmax(s, 1), [1, 2, 64, 64]), v, name="matmul1")
    model = sb.model([out], name="reshaped_softmax")
    config = {"num_threads": 4, "disabled_passes": ["softmax-reshape-elimination"]}
    cm = snippets_core.compile_model(model, target="reference", config=config)
    sg = mha_subgraph(cm.model)
    assert SPLIT_M_RT_INFO not in sg.rt_info and sg.body.count("Reshape") == 2
    rng = np.random.default_rng(5)
    inputs = {n: rng.standard_normal([1, 2, 64, 16]).astype(np.float32) for n in "qkv"}
    x = np.matmul(inputs["q"].astype(np.float64), np.swapaxes(inputs["k"], -1, -2))
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(cm(inputs)["matmul1_out0"], (e / e.sum(-1, keepdims=True)) @ inputs["v"],
                               rtol=2e-4, atol=2e-5)
    cm = snippets_core.compile_model(model, target="reference", config={"num_threads": 4})
    assert mha_subgraph(cm.model).rt_info[SPLIT_M_RT_INFO] == (2, 32)


def test_split_m_on_self_attention_with_one_input() -> None:
    # Q, K and V are the same tensor: each use is its own body Parameter, reshaped for its side
    x = sb.parameter([1, 128, 2, 16], name="x")
    t0 = sb.transpose(x, [0, 2, 1, 3], name="transpose0")
    t1 = sb.transpose(x, [0, 2, 1, 3], name="transpose1")
    scores = sb.matmul(t0, t1, transpose_b=True, name="matmul0")
    out = sb.matmul(sb.softmax(scores, 3), sb.transpose(x, [0, 2, 1, 3], name="transpose2"), name="matmul1")
    model = sb.model([sb.transpose(out, [0, 2, 1, 3], name="transpose3")], name="self_attention")
    cm = snippets_core.compile_model(model, target="reference", config={"num_threads": 4})
    sg = mha_subgraph(cm.model)
    assert sg.rt_info[SPLIT_M_RT_INFO] == (2, 64) and len(sg.inputs) == 3
    rng = np.random.default_rng(7)
    xv = rng.standard_normal([1, 128, 2, 16]).astype(np.float32)
    h = np.transpose(xv, (0, 2, 1, 3)).astype(np.float64)
    s = h @ np.swapaxes(h, -1, -2)
    e = np.exp(s - s.max(-1, keepdims=True))
    want = np.transpose((e / e.sum(-1, keepdims=True)) @ h, (0, 2, 1, 3))
    np.testing.assert_allclose(cm({"x": xv})["transpose3_out0"], want, rtol=2e-4, atol=2e-5)

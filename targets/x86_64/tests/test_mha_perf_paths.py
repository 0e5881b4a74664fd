"""The MHA performance paths of x86_64_avx512, against numpy (float64).

BrgemmCopyB: the Keys' Transpose that puts D innermost on Kᵀ's rows (``[0,1,3,2]`` for [B,H,S,D] inputs,
``[0,2,3,1]`` for [B,S,H,D]) stays in the Subgraph and is repacked in the kernel, so the whole attention is one
x86 kernel with no Transpose left outside. Shapes cover the 16 x 16 register transpose's tails in both dims
(S and D not multiples of 16), heads split over threads, a MatMul with ``transpose_b``, the opt-in bf16 precision,
and a Buffer-sharing case the repacked B exposed.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from snippets_core.frontends import builder as sb
from snippets_core.ir.evaluate import evaluate_model
from snippets_core.ir.model import Model
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.passes.matmul_to_brgemm import MatMulToBrgemm
from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64.brgemm_copy_b import InsertBrgemmCopyB
from snippets_x86_64.cpu import cpu_features
from snippets_x86_64.runtime import FALLBACK_KEY

TARGET = "x86_64_avx512"
pytestmark = pytest.mark.avx512
F = np.float64


def attention(layout: str, b: int, h: int, s: int, d: int) -> Model:
    """softmax(Q·Kᵀ·0.125 + mask)·V as exporters write it: bhsd inputs with ``Transpose(K, [0,1,3,2])``, or bshd
    inputs with Transposes Q/V [0,2,1,3], K [0,2,3,1] and the output transposed back."""
    shape = (b, h, s, d) if layout == "bhsd" else (b, s, h, d)
    q, k, v = (sb.parameter(shape, name=n) for n in ("q", "k", "v"))
    mask = sb.parameter((b, 1, 1, s), name="mask")
    if layout == "bhsd":
        qq, kt, vv = q, sb.transpose(k, [0, 1, 3, 2], name="kt"), v
    else:
        qq, vv = sb.transpose(q, [0, 2, 1, 3], name="qt"), sb.transpose(v, [0, 2, 1, 3], name="vt")
        kt = sb.transpose(k, [0, 2, 3, 1], name="kt")
    x = sb.multiply(sb.matmul(qq, kt, name="matmul0"), sb.constant(np.float32(0.125)), name="scale")
    x = sb.softmax(sb.add(x, mask, name="add_mask"), 3, name="softmax")
    y = sb.matmul(x, vv, name="matmul1")
    if layout == "bshd":
        y = sb.transpose(y, [0, 2, 1, 3], name="out")
    return sb.model([y], [q, k, v, mask], name=f"attention_{layout}")


def attention_oracle(layout: str, ins: dict[str, np.ndarray]) -> np.ndarray:
    q, k, v = (ins[n].astype(F) for n in ("q", "k", "v"))
    if layout == "bshd":
        q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
    s = q @ k.transpose(0, 1, 3, 2) * 0.125 + ins["mask"].astype(F)
    e = np.exp(s - s.max(-1, keepdims=True))
    y = (e / e.sum(-1, keepdims=True)) @ v
    return y.transpose(0, 2, 1, 3) if layout == "bshd" else y


def inputs_for(model: Model, seed: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ins = {p.name: rng.standard_normal(p.shape.to_tuple()).astype(np.float32) for p in model.parameters}
    ins["mask"] = np.where(rng.random(ins["mask"].shape) < 0.2, -10000.0, 0.0).astype(np.float32)
    return ins


def compile_one_kernel(model: Model, threads: int = 1):  # type: ignore[no-untyped-def]
    """Compile for x86 and check that everything runs in one x86 kernel (no Transpose outside, no fallback)."""
    cm = compile_model(model, target=TARGET, config={"num_threads": threads})
    placement = cm.placement()
    assert [(op, where) for _, op, where in placement] == [("Subgraph", TARGET)], placement
    sg = next(n for n in cm.model.get_ordered_ops() if n.type_name == "Subgraph")
    assert sg.rt_info.get(FALLBACK_KEY) is None, sg.rt_info.get(FALLBACK_KEY)
    return cm


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("h, s, d", [(2, 32, 16), (2, 40, 20), (3, 70, 8), (1, 384, 64), (2, 17, 33)])
def test_attention_with_keys_transpose_is_one_kernel(layout, h, s, d) -> None:
    model = attention(layout, 1, h, s, d)
    cm = compile_one_kernel(model)
    ins = inputs_for(model)
    (out,) = cm(ins).values()
    np.testing.assert_allclose(out, attention_oracle(layout, ins), rtol=2e-5, atol=3e-5)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_attention_with_keys_transpose_two_threads(layout) -> None:
    model = attention(layout, 2, 3, 50, 24)
    cm = compile_one_kernel(model, threads=2)
    ins = inputs_for(model, seed=5)
    (out,) = cm(ins).values()
    np.testing.assert_allclose(out, attention_oracle(layout, ins), rtol=2e-5, atol=3e-5)


def test_matmul0_transpose_b_through_copy_b() -> None:
    # MatMul0 with transpose_b: ExplicitTransposeMatMulInputs makes it a [0,1,3,2] Transpose, repacked in the kernel
    a, b = sb.parameter((1, 2, 45, 24), name="a"), sb.parameter((1, 2, 37, 24), name="b")
    c = sb.parameter((1, 2, 37, 20), name="c")
    x = sb.softmax(sb.matmul(a, b, transpose_b=True, name="mm0"), 3, name="sm")
    model = sb.model([sb.matmul(x, c, name="mm1")], [a, b, c], name="mm_tb")
    cm = compile_one_kernel(model)
    ins = inputs_for_plain(model)
    (out,) = cm(ins).values()
    s = ins["a"].astype(F) @ np.swapaxes(ins["b"].astype(F), -1, -2)
    e = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(-1, keepdims=True) @ ins["c"].astype(F), rtol=2e-5, atol=3e-5)


def inputs_for_plain(model: Model) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    return {p.name: rng.standard_normal(p.shape.to_tuple()).astype(np.float32) for p in model.parameters}


def test_insert_brgemm_copy_b_pass_keeps_the_values() -> None:
    # data-flow level: Brgemm(a, Transpose(k, [0,2,3,1])) -> Brgemm(a, BrgemmCopyB(k)), same values as numpy
    a_p, k_p = Parameter("f32", [1, 2, 5, 8], name="a"), Parameter("f32", [1, 7, 2, 8], name="k")
    mm = sb.matmul(a_p, sb.transpose(k_p, [0, 2, 3, 1], name="kt"), name="mm")
    body = Model([Result(mm, name="y")], [a_p, k_p], name="body")
    MatMulToBrgemm().run(body)
    assert InsertBrgemmCopyB().run(body)
    kinds = [n.type_name for n in body.get_ordered_ops()]
    assert "Transpose" not in kinds and kinds.count("BrgemmCopyB") == 1
    rng = np.random.default_rng(2)
    ins = {
        "a": rng.standard_normal((1, 2, 5, 8)).astype(np.float32),
        "k": rng.standard_normal((1, 7, 2, 8)).astype(np.float32),
    }
    (got,) = evaluate_model(body, ins).values()
    want = ins["a"].astype(F) @ ins["k"].astype(F).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not InsertBrgemmCopyB().run(body)  # nothing left to repack


def test_planar_b_gets_no_copy() -> None:
    a_p, b_p = Parameter("f32", [1, 2, 5, 8], name="a"), Parameter("f32", [1, 2, 8, 6], name="b")
    body = Model([Result(sb.matmul(a_p, b_p, name="mm"), name="y")], [a_p, b_p], name="body")
    MatMulToBrgemm().run(body)
    assert not InsertBrgemmCopyB().run(body)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_repacked_b_buffer_is_not_reused_by_the_scores(layout) -> None:
    # M block == D makes the repacked Kᵀ (D x S) and the scores block (M block x S) the same size: the Brgemm that
    # reads one and writes the other must not get them in one memory (it reads Kᵀ again in every M iteration)
    model = attention(layout, 1, 2, 96, 32)
    cm = compile_model(model, target=TARGET, config={"num_threads": 1, "target_options": {"brgemm_m_block": 32}})
    ins = inputs_for(model, seed=7)
    (out,) = cm(ins).values()
    np.testing.assert_allclose(out, attention_oracle(layout, ins), rtol=2e-5, atol=3e-5)


def _bf16(x: np.ndarray) -> np.ndarray:
    return x.astype(ml_dtypes.bfloat16).astype(F)


@pytest.mark.skipif("avx512_bf16" not in cpu_features(), reason="needs AVX512_BF16")
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_bf16_attention_through_the_repacked_keys(layout) -> None:
    # the repacked Kᵀ is rounded to bf16 on its way to the Brgemm: the result is that of bf16-rounded Q, K, P, V
    model = attention(layout, 1, 2, 40, 24)
    cm = compile_model(
        model, target=TARGET, config={"num_threads": 1, "target_options": {"inference_precision": "bf16"}}
    )
    assert [where for _, _, where in cm.placement()] == [TARGET]
    ins = inputs_for(model, seed=9)
    (out,) = cm(ins).values()
    rounded = {n: (_bf16(ins[n]) if n != "mask" else ins[n]) for n in ins}
    q, k, v = (rounded[n] for n in ("q", "k", "v"))
    if layout == "bshd":
        q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
    s = q @ k.transpose(0, 1, 3, 2) * 0.125 + ins["mask"].astype(F)
    e = np.exp(s - s.max(-1, keepdims=True))
    y = _bf16(e / e.sum(-1, keepdims=True)) @ v
    want = y.transpose(0, 2, 1, 3) if layout == "bshd" else y
    np.testing.assert_allclose(out, want, rtol=2e-2, atol=2e-2)
    assert np.abs(out - attention_oracle(layout, ins)).max() > 1e-5  # it did round: bf16 really ran


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_repacked_keys_with_split_dimension_m(layout) -> None:
    # one head on two threads: SplitDimensionM splits M, each kernel call repacks its head's Kᵀ (inserted dim of 1)
    model = attention(layout, 1, 1, 128, 32)
    cm = compile_model(model, target=TARGET, config={"num_threads": 2})
    assert [where for _, op, where in cm.placement() if op == "Subgraph"] == [TARGET]
    assert "Transpose" not in [op for _, op, _ in cm.placement()]
    ins = inputs_for(model, seed=13)
    (out,) = cm(ins).values()
    np.testing.assert_allclose(out, attention_oracle(layout, ins), rtol=2e-5, atol=3e-5)

"""MHA and MatMul on x86_64_avx512 through the Brgemm micro-kernel, against numpy (float64).

Covers the reference's MHA variants (4D with Transposes [0,2,1,3], Multiply, Add mask, Select, 3D, transposed-B
MatMul0, eltwise after MatMul1), MatMul alone and with a bias, shapes whose M, N, K are not multiples of the blocks,
tuned blocks, the opt-in bf16 precision (its accuracy against f32 measured, and its exactness against a numpy
oracle that rounds the same inputs to bf16), and the MHA tokenization callback's reasons.
"""

from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from snippets_core.config import CompileConfig
from snippets_core.frontends import builder as sb
from snippets_core.ir.ops.io import Parameter
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.runtime.compiled_model import compile_model
from snippets_core.runtime.targets import resolve_target
from snippets_x86_64.cpu import cpu_features
from snippets_x86_64.runtime import FALLBACK_KEY
from snippets_x86_64.runtime import compile_subgraph as x86_compile_subgraph
from snippets_x86_64.tokenization_callback import mha_callback

# the model builders and float64 oracles shared with the interpreter's tests (importlib mode: add the folder)
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "lowered"))
from mha_cases import matmul, mha_3d, mha_4d, mha_transposed_b, random_inputs, softmax

TARGET = "x86_64_avx512"
pytestmark = pytest.mark.avx512
HAS_BF16 = "avx512_bf16" in cpu_features()


def _compile(model, target_options=None, threads=1, disabled=()):  # type: ignore[no-untyped-def]
    config = {"target_options": dict(target_options or {}), "num_threads": threads, "disabled_passes": list(disabled)}
    cm = compile_model(model, target=TARGET, config=config)
    sgs = [n for n in cm.model.get_ordered_ops() if n.type_name == "Subgraph"]
    assert sgs, "the MHA was not tokenized"
    for sg in sgs:
        assert sg.rt_info.get(FALLBACK_KEY) is None, sg.rt_info.get(FALLBACK_KEY)
    return cm


def _check(model, oracle, rtol=2e-5, atol=3e-5, **kw):  # type: ignore[no-untyped-def]
    cm = _compile(model, **kw)
    ins = random_inputs(model)
    (out,) = cm(ins).values()
    np.testing.assert_allclose(out, oracle(ins), rtol=rtol, atol=atol)
    return cm


@pytest.mark.parametrize("shape", [(1, 16, 2, 8), (1, 40, 1, 8), (2, 100, 2, 8), (1, 130, 1, 70), (1, 33, 1, 600)])
@pytest.mark.parametrize("threads", [1, 2])
def test_mha_4d_transposes_and_mask(shape, threads):
    model, oracle = mha_4d(*shape)
    _check(model, oracle, threads=threads)


def test_mha_4d_without_split_m():
    model, oracle = mha_4d(1, 100, 2, 24)
    _check(model, oracle, disabled=("split-dimension-m",))


def test_mha_with_multiply_scale():
    model, oracle = mha_4d(1, 50, 2, 16, scale=0.125)
    _check(model, oracle)


def test_mha_with_select():
    model, oracle = mha_4d(1, 45, 2, 8, select=True)
    _check(model, oracle)


@pytest.mark.parametrize("shape", [(1, 70, 1, 8), (1, 70, 1, 70)])
def test_mha_eltwise_after_matmul1(shape):
    model, oracle = mha_4d(*shape, post_eltwise=True)
    _check(model, oracle)


@pytest.mark.parametrize("dims", [(2, 16, 8, 16, 8), (1, 70, 20, 100, 12), (3, 33, 65, 129, 5)])
def test_mha_3d_without_transposes(dims):
    model, oracle = mha_3d(*dims)
    _check(model, oracle)


def test_mha_transposed_b():
    model, oracle = mha_transposed_b(1, 70, 2, 16)
    _check(model, oracle)


def _as_subgraph(model):  # type: ignore[no-untyped-def]
    return Subgraph(*[Parameter(p.element_type, p.shape, name=p.name) for p in model.parameters], body=model.clone())


def _run_subgraph(model, target_options=None):  # type: ignore[no-untyped-def]
    """The whole model as one Subgraph on this target (the tokenizers take a MatMul only inside an MHA)."""
    cfg = CompileConfig.from_mapping({"target_options": dict(target_options or {}), "num_threads": 1})
    sg = _as_subgraph(model)
    run = x86_compile_subgraph(sg, cfg, resolve_target(TARGET, cfg).host)
    assert run is not None and sg.rt_info.get(FALLBACK_KEY) is None, sg.rt_info.get(FALLBACK_KEY)
    ins = random_inputs(model)
    (out,) = run([ins[p.name] for p in model.parameters])
    return ins, out


@pytest.mark.parametrize(
    "shapes",
    [
        ((2, 70, 33), (2, 33, 100)),
        ((1, 3, 130, 600), (1, 1, 600, 65)),
        ((5, 7), (7, 3)),
        ((1, 40, 1100), (1, 1100, 20)),
        ((1, 1, 17), (1, 17, 1)),
    ],
)
def test_matmul_alone(shapes):
    model, oracle = matmul(*shapes)
    ins, out = _run_subgraph(model)
    np.testing.assert_allclose(out, oracle(ins), rtol=5e-5, atol=1e-4)


def test_matmul_with_bias():
    model, oracle = matmul((2, 40, 24), (2, 24, 70), bias=True)
    ins, out = _run_subgraph(model)
    np.testing.assert_allclose(out, oracle(ins), rtol=2e-5, atol=5e-5)


@pytest.mark.parametrize(
    "blocks",
    [{"brgemm_m_block": 8, "brgemm_n_block": 16, "brgemm_k_block": 16}, {"brgemm_m_block": 64, "brgemm_n_block": 128}],
)
def test_tuned_blocks(blocks):
    model, oracle = mha_4d(1, 100, 2, 40)
    _check(model, oracle, target_options=blocks)


def test_bad_knobs_are_input_errors():
    from snippets_core.errors import InputError
    from snippets_x86_64.brgemm import brgemm_positioned_passes

    with pytest.raises(InputError, match="inference_precision"):
        brgemm_positioned_passes({"inference_precision": "f8"})
    with pytest.raises(InputError, match="positive"):
        brgemm_positioned_passes({"brgemm_m_block": -1})


# --- bf16 --------------------------------------------------------------------------------------------------------


def _bf16(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


@pytest.mark.skipif(not HAS_BF16, reason="needs AVX512_BF16")
@pytest.mark.parametrize(
    "shapes", [((1, 8, 33), (1, 33, 16)), ((2, 40, 64), (2, 64, 100)), ((1, 40, 600), (1, 600, 70))]
)
def test_bf16_matmul_is_exact_on_bf16_inputs(shapes):
    """With both inputs rounded to bf16 the products are exact in f32: the kernel matches numpy on the rounded
    inputs up to f32 accumulation, whatever the tails (odd K pairs with a zero, N tails are masked)."""
    model, _ = matmul(*shapes)
    ins, out = _run_subgraph(model, {"inference_precision": "bf16"})
    expected = _bf16(ins["a"]) @ _bf16(ins["b"])
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)
    f32_error = np.abs(out - ins["a"].astype(np.float64) @ ins["b"]).max()
    assert f32_error > 0  # it did round: bf16 really ran


@pytest.mark.skipif(not HAS_BF16, reason="needs AVX512_BF16")
@pytest.mark.parametrize("dims", [(2, 16, 8, 16, 8), (1, 64, 64, 384, 64)])
def test_bf16_mha_accuracy_against_f32(dims):
    """bf16 MHA (3D, planar) against the float64 oracle: the error is what rounding Q, K, the probabilities and V
    to bf16 (8-bit mantissa) gives; f32 on the same inputs is 1000x closer."""
    model, oracle = mha_3d(*dims)
    ins = random_inputs(model)
    ref = oracle(ins)
    (f32_out,) = _compile(model).__call__(ins).values()
    (bf16_out,) = _compile(model, {"inference_precision": "bf16"}).__call__(ins).values()
    err_f32 = np.abs(f32_out - ref).max()
    err_bf16 = np.abs(bf16_out - ref).max()
    # the same computation on bf16-rounded operands, in float64: what the kernel must approximate
    probs = _bf16(softmax(_bf16(ins["a"]) @ _bf16(ins["b"])))
    rounded = probs @ _bf16(ins["c"])
    np.testing.assert_allclose(bf16_out, rounded, rtol=2e-2, atol=2e-2)
    assert err_bf16 < 0.05 * np.abs(ref).max()
    assert err_f32 < err_bf16 / 100


@pytest.mark.skipif(not HAS_BF16, reason="needs AVX512_BF16")
@pytest.mark.parametrize("shape", [(1, 40, 2, 16), (2, 100, 2, 24)])
def test_bf16_mha_with_transposes(shape):
    """Q and V read through folded Transposes [0,2,1,3] are converted in planar order (a vector LoadReorder),
    then multiplied in bf16; the output is written back transposed."""
    model, oracle = mha_4d(*shape)
    ins = random_inputs(model)
    ref = oracle(ins)
    (out,) = _compile(model, {"inference_precision": "bf16"})(ins).values()
    q, v = np.swapaxes(_bf16(ins["q"]), 1, 2), np.swapaxes(_bf16(ins["v"]), 1, 2)
    rounded = np.swapaxes(_bf16(softmax(q @ _bf16(ins["kt"]) + ins["mask"])) @ v, 1, 2)
    np.testing.assert_allclose(out, rounded, rtol=2e-2, atol=2e-2)
    assert 0 < np.abs(out - ref).max() < 0.05 * np.abs(ref).max()


# --- the MHA tokenization callback ---------------------------------------------------------------------------------


def _matmul0(a_type="f32", transpose_a=False, batch=(1, 12), m=384):  # type: ignore[no-untyped-def]
    a = sb.parameter((*batch, 64, m) if transpose_a else (*batch, m, 64), a_type, name="a")
    b = sb.parameter((*batch, 64, m), a_type, name="b")
    mm0 = sb.matmul(a, b, transpose_a=transpose_a, name="mm0")
    if a_type in ("f32", "bf16"):
        y = sb.matmul(sb.softmax(mm0, len(batch) + 1), sb.parameter((*batch, m, 64), a_type), name="mm1")
        sb.model([y])
    return mm0.node


def test_mha_callback_reasons():
    avx512 = frozenset({"avx512f"})
    assert mha_callback(_matmul0(), concurrency=2, features=avx512) is None
    assert "transposes A" in mha_callback(_matmul0(transpose_a=True), concurrency=2, features=avx512)
    assert "needs avx512_bf16" in mha_callback(_matmul0("bf16"), concurrency=2, features=avx512)
    assert mha_callback(_matmul0("bf16"), concurrency=2, features=avx512 | {"avx512_bf16"}) is None
    assert "no Brgemm kernel" in mha_callback(_matmul0("i8"), concurrency=2, features=avx512)
    # parallel work 1 (batch dims) below 8 threads, and M = 37 is prime: SplitDimensionM cannot help
    assert "parallel work" in mha_callback(_matmul0(batch=(1,), m=37), concurrency=8, features=avx512)
    assert mha_callback(_matmul0(batch=(1,), m=384), concurrency=8, features=avx512) is None


def test_dynamic_mha_gets_a_kernel_per_shape():
    q, kt = sb.parameter((1, 2, None, 16), name="q"), sb.parameter((1, 2, 16, None), name="kt")
    v = sb.parameter((1, 2, None, 16), name="v")
    model = sb.model([sb.matmul(sb.softmax(sb.matmul(q, kt), 3), v)], [q, kt, v])
    assert mha_callback(model.get_ordered_ops()[3], concurrency=1) is None
    cm = _compile(model)
    rng = np.random.default_rng(0)
    for s in (40, 100):
        ins = {
            "q": rng.standard_normal((1, 2, s, 16)).astype(np.float32),
            "kt": rng.standard_normal((1, 2, 16, s)).astype(np.float32),
            "v": rng.standard_normal((1, 2, s, 16)).astype(np.float32),
        }
        (out,) = cm(ins).values()
        expected = softmax(ins["q"].astype(np.float64) @ ins["kt"]) @ ins["v"]
        np.testing.assert_allclose(out, expected, rtol=2e-5, atol=3e-5)


# --- layouts: a decomposed Transpose (LoadReorder) ------------------------------------------------------------------


class _DecomposeTransposes:
    """A plugin that adds TransposeDecomposition (not in the default pipeline) for this target."""

    from snippets_core.plugins import hookimpl

    @hookimpl
    def snippets_positioned_passes(self, target_name, config):  # type: ignore[no-untyped-def]
        from snippets_core.passes.pass_manager import PassPosition, PositionedPass
        from snippets_core.passes.transpose_decomposition import TransposeDecomposition

        return [PositionedPass(TransposeDecomposition(), PassPosition("softmax-decomposition"))]


@pytest.mark.parametrize(
    ("shape", "order"), [((2, 3, 5, 7), [0, 2, 3, 1]), ((2, 3, 5, 37), [3, 2, 1, 0]), ((19, 5), [1, 0])]
)
def test_load_reorder_layouts_become_strides(shape, order):
    """LoadReorder is a plain Load on x86: its order lives in the pointer increments (InitLoops) and the kernel's
    planar data offsets (PropagateLayout)."""
    p = sb.parameter(shape, name="x")
    model = sb.model([sb.relu(sb.transpose(p, order))], [p])
    cfg = CompileConfig.from_mapping({"num_threads": 1})
    host = resolve_target(TARGET, cfg).host
    if host.pm.get_plugin("decompose-transposes") is None:
        host.register(_DecomposeTransposes(), "decompose-transposes")
    try:
        sg = _as_subgraph(model)
        run = x86_compile_subgraph(sg, cfg, host)
        assert run is not None, sg.rt_info.get(FALLBACK_KEY)
    finally:
        host.pm.unregister(name="decompose-transposes")
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (y,) = run([x])
    np.testing.assert_array_equal(y, np.maximum(np.transpose(x, order), 0))

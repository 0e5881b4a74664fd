"""Models that ask for bf16 (bfloat16 tensors in the ONNX file) on x86-64: FullyConnected on ``vdpbf16ps`` with the
weight packed once as k-pairs, eltwise/Softmax/LayerNorm Subgraphs that load bf16, compute f32 and store bf16, a
bf16 transformer block with its MHA, the autocast and bf16-stored-weight patterns.

Oracles: numpy float64 on the bf16 inputs (a product of two bf16 is exact in f32, so the f32-accumulated FC
differs from float64 only by the f32 sums and the final rounding to bf16), and onnx's reference evaluator, which
computes bf16 through ml_dtypes. onnxruntime has no CPU kernel for bf16 MatMul/Gemm/Softmax (it raises
NOT_IMPLEMENTED), so it is not an oracle here.
"""

from __future__ import annotations

import math
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh

import snippets_core
from snippets_core.config import CompileConfig
from snippets_core.errors import InputError
from snippets_core.frontends.onnx_bf16 import model_to_bf16
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.runtime.pipeline import run_tokenization
from snippets_core.runtime.targets import resolve_target
from snippets_core.tokenization import FULLY_CONNECTED
from snippets_x86_64.bf16_pack import pack_b_pairs
from snippets_x86_64.cpu import cpu_features
from snippets_x86_64.fc_executor import PackedWeightExecutor
from snippets_x86_64.guarded import guarded_copy
from snippets_x86_64.runtime import FALLBACK_KEY
from snippets_x86_64.runtime import compile_subgraph as x86_compile_subgraph

pytestmark = [pytest.mark.avx512,
              pytest.mark.skipif("avx512_bf16" not in cpu_features(), reason="needs AVX512_BF16 (vdpbf16ps)")]
TARGET = "x86_64_avx512"
BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(20261126)
#: one bf16 step relative to the value (8 bits of mantissa): the rounding of an f32 result to bf16 is half of it
BF16_EPS = 2.0 ** -7
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _bf16_init(name: str, value: np.ndarray) -> onnx.TensorProto:
    v = np.asarray(value).astype(BF16)
    return oh.make_tensor(name, TP.BFLOAT16, v.shape, v.view(np.uint16).tobytes(), raw=True)


def _model(nodes: list, inputs: list, outputs: list, inits: list) -> onnx.ModelProto:
    graph = oh.make_graph(nodes, "bf16", inputs, outputs, inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def _compile(proto: onnx.ModelProto, threads: int = 1, options: dict | None = None):  # type: ignore[no-untyped-def]
    config = {"num_threads": threads, "target_options": dict(options or {})}
    return snippets_core.compile_model(snippets_core.read_onnx(proto), target=TARGET, config=config)


def _subgraphs(cm) -> list[Subgraph]:  # type: ignore[no-untyped-def]
    return [n for n in cm.model.get_ordered_ops() if isinstance(n, Subgraph)]


def _all_on_target(cm) -> None:  # type: ignore[no-untyped-def]
    for sg in _subgraphs(cm):
        assert sg.rt_info.get(FALLBACK_KEY) is None, sg.rt_info.get(FALLBACK_KEY)


def _close_to_bf16_rounding(y: np.ndarray, ref: np.ndarray, steps: float = 1.0, atol: float = 0.0) -> None:
    """``y`` (bf16) within ``steps`` bf16 steps of the float64 ``ref`` (the rounding of the f32 result is half a
    step; the f32 sums add far less)."""
    assert y.dtype == BF16
    err = np.abs(y.astype(np.float64) - ref)
    bound = steps * BF16_EPS * np.abs(ref) + atol
    assert np.all(err <= bound), f"max error {err.max()} (worst excess {(err - bound).max()})"


def _fc_model(m: int, k: int, n: int, w: np.ndarray, b: np.ndarray, gemm: bool) -> onnx.ModelProto:
    if gemm:  # torch's Linear: Gemm with transB, the weight stored [N, K]
        nodes = [oh.make_node("Gemm", ["x", "W", "b"], ["g"], transB=1), oh.make_node("Relu", ["g"], ["y"])]
        inits = [_bf16_init("W", w.T), _bf16_init("b", b)]
    else:
        nodes = [oh.make_node("MatMul", ["x", "W"], ["mm"]), oh.make_node("Add", ["mm", "b"], ["g"]),
                 oh.make_node("Relu", ["g"], ["y"])]
        inits = [_bf16_init("W", w), _bf16_init("b", b)]
    return _model(nodes, [oh.make_tensor_value_info("x", TP.BFLOAT16, [m, k])],
                  [oh.make_tensor_value_info("y", TP.BFLOAT16, [m, n])], inits)


def _weights(k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    w = (RNG.standard_normal((k, n)) / math.sqrt(k)).astype(BF16)
    return w, RNG.standard_normal(n).astype(BF16)


def test_pack_b_pairs_layout() -> None:
    """Panels of 64 columns, rows interleaved in k-pairs, an odd K's last row alone: checked element by element."""
    k, n = 5, 70
    w = np.arange(k * n, dtype=np.float32).reshape(k, n).astype(BF16)
    packed = pack_b_pairs(w, 64)
    assert packed.size == k * n
    first = packed[: k * 64]
    pairs = first[: 2 * 2 * 64].reshape(2, 64, 2)
    assert (pairs[1, 3] == w[2:4, 3]).all() and (pairs[0, 63] == w[0:2, 63]).all()
    assert (first[4 * 64:] == w[4, :64]).all()
    second = packed[k * 64:]
    assert (second[: 2 * 2 * 6].reshape(2, 6, 2)[1, 5] == w[2:4, 69]).all() and (second[-6:] == w[4, 64:]).all()


@pytest.mark.parametrize("m, k, n", [(24, 100, 72), (7, 37, 130), (64, 256, 256), (1, 3, 17), (33, 1, 64)])
@pytest.mark.parametrize("gemm", [False, True])
def test_bf16_fc_against_float64(m: int, k: int, n: int, gemm: bool) -> None:
    """x @ W + b, Relu, all bf16: one FC Subgraph on the packed-weight vdpbf16ps kernel (odd K, N tails, one row,
    K of 1), within one bf16 step of float64 on the bf16 values, and equal to onnx's reference evaluator's bf16
    result but for its own roundings."""
    w, b = _weights(k, n)
    proto = _fc_model(m, k, n, w, b, gemm)
    cm = _compile(proto)
    (sg,) = _subgraphs(cm)
    assert sg.rt_info.get(FULLY_CONNECTED)
    _all_on_target(cm)
    x = RNG.standard_normal((m, k)).astype(BF16)
    y = cm({"x": x})["y"]
    ref = np.maximum(x.astype(np.float64) @ w.astype(np.float64) + b.astype(np.float64), 0)
    # the MatMul's result is rounded to bf16 before the bias Add (the model's own types), the Add once more
    _close_to_bf16_rounding(y, ref, steps=2.0, atol=BF16_EPS * np.abs(x.astype(np.float64)) @ np.abs(w.astype(
        np.float64)))
    from onnx.reference import ReferenceEvaluator

    ev = ReferenceEvaluator(proto).run(None, {"x": x})[0].astype(np.float64)
    _close_to_bf16_rounding(y, ev, steps=2.0, atol=1e-2)


@pytest.mark.parametrize("at", ["end", "start"])
@pytest.mark.parametrize("m, k, n", [(9, 37, 75), (20, 64, 130)])
def test_bf16_fc_against_guard_pages(m: int, k: int, n: int, at: str) -> None:
    """x, the weight packed once as bf16 k-pairs, the bias and the output flush against a PROT_NONE page: the
    masked N tail, the lone last row of an odd K and the A pair loads never touch a byte outside."""
    w, b = _weights(k, n)
    model = snippets_core.read_onnx(_fc_model(m, k, n, w, b, gemm=False))
    cfg = CompileConfig.from_mapping({"num_threads": 1})
    run_tokenization(model, resolve_target(TARGET, cfg), cfg)
    (sg,) = [n for n in model.get_ordered_ops() if isinstance(n, Subgraph)]
    ex = x86_compile_subgraph(sg, cfg, resolve_target(TARGET, cfg).host)
    assert isinstance(ex, PackedWeightExecutor), sg.rt_info.get(FALLBACK_KEY)
    (i,) = ex.packed
    assert ex.packed[i].dtype == BF16
    ex.packed[i] = guarded_copy(ex.packed[i], at)
    args = [guarded_copy(np.asarray(src.node.value), at) if src.node.type_name == "Constant" else None
            for src in (inp.source for inp in sg.inputs)]
    xs = RNG.standard_normal((m, k)).astype(BF16)
    args = [guarded_copy(xs, at) if a is None else a for a in args]
    out = guarded_copy(np.zeros((m, n), BF16), at)
    ex(args, [out])
    ref = np.maximum(xs.astype(np.float64) @ w.astype(np.float64) + b.astype(np.float64), 0)
    _close_to_bf16_rounding(out, ref, steps=2.0, atol=BF16_EPS * np.abs(xs.astype(np.float64)) @ np.abs(
        w.astype(np.float64)))


def test_bf16_fc_on_two_threads_and_dynamic_rows() -> None:
    """A dynamic M (batch x sequence) on two threads: the rows run on the bf16 kernel of each shape."""
    k, n = 96, 160
    w, b = _weights(k, n)
    proto = _fc_model(1, k, n, w, b, gemm=False)
    for vi in (*proto.graph.input, *proto.graph.output):
        vi.type.tensor_type.shape.dim[0].dim_param = "M"
    cm = _compile(proto, threads=2)
    for m in (1, 40, 77):
        x = RNG.standard_normal((m, k)).astype(BF16)
        y = cm({"x": x})["y"]
        ref = np.maximum(x.astype(np.float64) @ w.astype(np.float64) + b.astype(np.float64), 0)
        _close_to_bf16_rounding(y, ref, steps=2.0, atol=BF16_EPS * np.abs(x.astype(np.float64)) @ np.abs(
            w.astype(np.float64)))


def test_bf16_eltwise_softmax_layernorm() -> None:
    """bf16 Softmax, LayerNormalization and an eltwise chain: each a Subgraph on x86 (bf16 loads widened to f32,
    reductions accumulated in f32, stores rounded to bf16), against float64 and the reference evaluator."""
    rows, cols = 20, 77
    gamma, beta = RNG.standard_normal(cols).astype(BF16), RNG.standard_normal(cols).astype(BF16)
    nodes = [oh.make_node("Softmax", ["x"], ["s"], axis=-1),
             oh.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], axis=-1, epsilon=1e-5),
             oh.make_node("Sigmoid", ["x"], ["sg"]), oh.make_node("Mul", ["x", "sg"], ["sw"])]
    outs = [oh.make_tensor_value_info(nm, TP.BFLOAT16, [rows, cols]) for nm in ("s", "ln", "sw")]
    proto = _model(nodes, [oh.make_tensor_value_info("x", TP.BFLOAT16, [rows, cols])], outs,
                   [_bf16_init("g", gamma), _bf16_init("b", beta)])
    cm = _compile(proto)
    assert len(_subgraphs(cm)) >= 2
    _all_on_target(cm)
    assert "[reference]" not in cm.describe()
    x = (RNG.standard_normal((rows, cols)) * 3).astype(BF16)
    got = cm({"x": x})
    xd = x.astype(np.float64)
    e = np.exp(xd - xd.max(-1, keepdims=True))
    mu, var = xd.mean(-1, keepdims=True), xd.var(-1, keepdims=True)
    refs = {"s": e / e.sum(-1, keepdims=True),
            "ln": (xd - mu) / np.sqrt(var + 1e-5) * gamma.astype(np.float64) + beta.astype(np.float64),
            "sw": xd / (1 + np.exp(-xd))}
    from onnx.reference import ReferenceEvaluator

    evs = dict(zip(("s", "ln", "sw"), ReferenceEvaluator(proto).run(None, {"x": x})))
    for name, ref in refs.items():
        _close_to_bf16_rounding(got[name], ref, steps=2.0, atol=1e-2)
        _close_to_bf16_rounding(got[name], evs[name].astype(np.float64), steps=2.0, atol=2e-2)


def _rounded_f32(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The f32 model with its float initializers rounded to bf16: the values the bf16 copy holds, in f32."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    for t in out.graph.initializer:
        if t.data_type == TP.FLOAT:
            arr = onnx.numpy_helper.to_array(t).astype(BF16).astype(np.float32)
            t.CopyFrom(onnx.numpy_helper.from_array(arr, t.name))
    return out


def _transformer_bf16() -> onnx.ModelProto:
    return model_to_bf16(onnx.load(str(EXAMPLES / "transformer_block.onnx")))


def test_bf16_transformer_block_with_mha() -> None:
    """examples/transformer_block.onnx in bf16 (what ``model.to(torch.bfloat16)`` exports): every Subgraph,
    the MHA's included, runs on x86 bf16 kernels; the result is within a few bf16 steps of the f32 model run in
    float64 on the same (bf16) inputs and weights, as close as onnx's reference evaluator in bf16 is."""
    proto = _transformer_bf16()
    cm = _compile(proto, threads=2)
    _all_on_target(cm)
    sgs = _subgraphs(cm)
    assert any(sg.rt_info.get(FULLY_CONNECTED) for sg in sgs)
    assert any("Softmax" in [n.type_name for n in sg.body.get_ordered_ops()] or
               "MatMul" in [n.type_name for n in sg.body.get_ordered_ops()] and not sg.rt_info.get(FULLY_CONNECTED)
               for sg in sgs)
    shapes = {i.name: [d.dim_value or 1 for d in i.type.tensor_type.shape.dim] for i in proto.graph.input}
    ins = {"x": RNG.standard_normal(shapes["x"]).astype(BF16)}
    if "mask" in shapes:
        ins["mask"] = np.zeros(shapes["mask"], BF16)
    y = next(iter(cm(ins).values()))
    assert y.dtype == BF16
    from onnx.reference import ReferenceEvaluator

    ev = ReferenceEvaluator(proto).run(None, ins)[0].astype(np.float64)
    # the oracle: the f32 model with the bf16-rounded weights, on the same inputs
    f32 = _rounded_f32(onnx.load(str(EXAMPLES / "transformer_block.onnx")))
    r64 = ReferenceEvaluator(f32).run(None, {k: v.astype(np.float32) for k, v in ins.items()})[0].astype(np.float64)
    err, ev_err = np.abs(y.astype(np.float64) - r64).max(), np.abs(ev - r64).max()
    # a whole block of bf16 roundings: ours must be no worse than the bf16 reference evaluator's (plus a step)
    assert err <= ev_err + BF16_EPS * np.abs(r64).max(), (err, ev_err)


def test_autocast_pattern_and_bf16_stored_weight() -> None:
    """Cast(f32->bf16) -> MatMul(bf16 weight) -> Cast(bf16->f32) runs the bf16 FC kernel, the Cast back to f32 in
    it (the Cast to bf16 is an eltwise Subgraph of its own: the Brgemm reads A from memory); a bf16 initializer
    Cast to f32 before an f32 MatMul is folded into an f32 weight (the model computes in f32: rounding the
    activation to bf16 would change its result), exact against float64."""
    m, k, n = 24, 100, 72
    w = RNG.standard_normal((k, n)).astype(BF16)
    autocast = _model([oh.make_node("Cast", ["x"], ["xb"], to=TP.BFLOAT16), oh.make_node("MatMul", ["xb", "W"], ["yb"]),
                       oh.make_node("Cast", ["yb"], ["y"], to=TP.FLOAT)],
                      [oh.make_tensor_value_info("x", TP.FLOAT, [m, k])],
                      [oh.make_tensor_value_info("y", TP.FLOAT, [m, n])], [_bf16_init("W", w)])
    stored = _model([oh.make_node("Cast", ["W"], ["Wf"], to=TP.FLOAT), oh.make_node("MatMul", ["x", "Wf"], ["y"])],
                    [oh.make_tensor_value_info("x", TP.FLOAT, [m, k])],
                    [oh.make_tensor_value_info("y", TP.FLOAT, [m, n])], [_bf16_init("W", w)])
    x = RNG.standard_normal((m, k)).astype(np.float32)
    wd = w.astype(np.float64)
    cm = _compile(autocast)
    _all_on_target(cm)
    (fc,) = [sg for sg in _subgraphs(cm) if sg.rt_info.get(FULLY_CONNECTED)]
    assert fc.inputs[0].element_type.value == "bf16" and fc.outputs[0].element_type.value == "f32"
    assert [n.type_name for n in fc.body_ops] == ["MatMul", "Convert"]  # the Cast back to f32 is a post-op
    y = cm({"x": x})["y"]
    ref = x.astype(BF16).astype(np.float64) @ wd
    np.testing.assert_allclose(y, ref.astype(np.float32).astype(BF16).astype(np.float32), rtol=BF16_EPS,
                               atol=1e-6 * np.abs(ref).max())
    cm = _compile(stored)
    _all_on_target(cm)
    np.testing.assert_allclose(cm({"x": x})["y"], x.astype(np.float64) @ wd, rtol=1e-5, atol=1e-4)


def test_bf16_model_fed_f32_is_a_typed_error() -> None:
    w, b = _weights(16, 32)
    cm = _compile(_fc_model(4, 16, 32, w, b, gemm=False))
    with pytest.raises(InputError, match="'x'.*bf16"):
        cm({"x": np.zeros((4, 16), np.float32)})


def test_low_precision_op_left_to_numpy_says_why() -> None:
    """An f16 FC (no f16 kernel) and a bf16 MatMul of two activations run on numpy; describe() names each and
    the reason, never silently."""
    w = np.ones((64, 32), np.float16)
    f16 = _model([oh.make_node("MatMul", ["x", "W"], ["y"])], [oh.make_tensor_value_info("x", TP.FLOAT16, [8, 64])],
                 [oh.make_tensor_value_info("y", TP.FLOAT16, [8, 32])], [onnx.numpy_helper.from_array(w, "W")])
    text = _compile(f16).describe()
    assert "[reference] MatMul 'MatMul_0': f16 MatMul left to numpy: it multiplies f16; FullyConnected takes" in text
    two = _model([oh.make_node("MatMul", ["x", "w"], ["y"])],
                 [oh.make_tensor_value_info("x", TP.BFLOAT16, [8, 64]),
                  oh.make_tensor_value_info("w", TP.BFLOAT16, [64, 32])],
                 [oh.make_tensor_value_info("y", TP.BFLOAT16, [8, 32])], [])
    assert "bf16 MatMul left to numpy: its weight (input 1) comes from Parameter 'w'" in _compile(two).describe()


def test_bf16_cnn_convolutions_in_f32_say_so() -> None:
    """examples/cnn_block.onnx in bf16: each Conv runs on the f32 conv primitive between Converts (its weight
    converted at compile time) and describe() says so; what stays on numpy (the bf16 MaxPool, a bf16 Reorder) says
    why. Checked against the f32 model on the same bf16 values (onnx's reference evaluator in bf16 is no oracle
    here: its GlobalAveragePool sums 1024 values in bf16 and is off by ~1)."""
    from onnx.reference import ReferenceEvaluator

    f32 = onnx.load(str(EXAMPLES / "cnn_block.onnx"))
    proto = model_to_bf16(f32)
    cm = _compile(proto)
    text = cm.describe()
    assert text.count("bf16 Convolution computed in f32") == 2, text
    assert "MaxPool 'pool1': it pools bf16" in text
    convs = [sg for sg in _subgraphs(cm) if "Convolution" in [n.type_name for n in sg.body_ops]]
    assert len(convs) == 2 and all(sg.rt_info.get(FALLBACK_KEY) is None for sg in convs)
    x = RNG.standard_normal((1, 3, 64, 64)).astype(BF16)
    y = next(iter(cm({"x": x}).values()))
    assert y.dtype == BF16
    want = ReferenceEvaluator(_rounded_f32(f32)).run(None, {"x": x.astype(np.float32)})[0].astype(np.float64)
    # every op of the block rounds to bf16 once: a few steps of the largest logit
    assert np.abs(y.astype(np.float64) - want).max() <= 4 * BF16_EPS * np.abs(want).max()


def _round_bf16(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32).astype(BF16).astype(np.float64)


FC_CASES = [
    ([2, 64, 96], 96, 128, 2),      # batch dims, rows split between the threads
    ([1, 1, 768], 768, 768, 2),     # one row: N split into panels per thread (SplitNExecutor)
    ([1, 200, 64], 64, 256, 2),     # rows SplitDimensionM cannot split evenly
    ([3, 7, 33], 33, 64, 1),        # odd K, N one whole panel
]


def _fc_residual(x_shape: list[int], k: int, n: int, threads: int, options: dict):  # type: ignore[no-untyped-def]
    """x @ W + b + r in bf16 on the target: (y, x, W, b, r) as float64."""
    w = (RNG.standard_normal((k, n)) / math.sqrt(k)).astype(BF16)
    b = RNG.standard_normal(n).astype(BF16)
    out_shape = [*x_shape[:-1], n]
    nodes = [oh.make_node("MatMul", ["x", "W"], ["mm"]), oh.make_node("Add", ["mm", "b"], ["a"]),
             oh.make_node("Add", ["a", "r"], ["y"])]
    proto = _model(nodes, [oh.make_tensor_value_info("x", TP.BFLOAT16, x_shape),
                           oh.make_tensor_value_info("r", TP.BFLOAT16, out_shape)],
                   [oh.make_tensor_value_info("y", TP.BFLOAT16, out_shape)], [_bf16_init("W", w), _bf16_init("b", b)])
    cm = _compile(proto, threads=threads, options=options)
    _all_on_target(cm)
    x = RNG.standard_normal(x_shape).astype(BF16)
    r = RNG.standard_normal(out_shape).astype(BF16)
    y = cm({"x": x, "r": r})["y"].astype(np.float64)
    return y, *(v.astype(np.float64) for v in (x, w, b, r))


@pytest.mark.parametrize("x_shape, k, n, threads", FC_CASES)
def test_bf16_fc_matches_the_bf16_rounding_chain(x_shape: list[int], k: int, n: int, threads: int) -> None:
    """With ``bf16_intermediate: bf16``, x @ W + b + residual in bf16 is the float64 result rounded to bf16 after
    each op (the model's types): our kernel rounds the f32 sum of exact bf16 products after the MatMul, then after
    each Add. Matches it element for element but where the f32 summation order decides a tie (at most 0.1% of the
    elements, by a step or two of the intermediates)."""
    y, x, w, b, r = _fc_residual(x_shape, k, n, threads, {"bf16_intermediate": "bf16"})
    mm = _round_bf16(x @ w)
    a = _round_bf16(mm + b)
    want = _round_bf16(a + r)
    off = y != want
    assert off.sum() <= max(2, y.size // 1000), off.sum()
    # a tie decided the other way moves an intermediate by one step, and the next rounding can meet a tie again
    # (seen: mm 164.49999 steps -> f32 sum 164.5 -> even, then a at 128.5 steps -> even: two steps at the end)
    scale = np.maximum(np.abs(mm), np.maximum(np.abs(a), np.abs(want)))
    assert np.all(np.abs(y - want)[off] <= 2.0**-6 * scale[off])


@pytest.mark.parametrize("x_shape, k, n, threads", FC_CASES)
def test_bf16_fc_rounds_once_by_default(x_shape: list[int], k: int, n: int, threads: int) -> None:
    """By default (``bf16_intermediate: f32``, what OpenVINO does with a bf16 model) the MatMul and both Adds run
    in f32 and only the stored result is rounded: the float64 ``x @ W + b + r`` rounded to bf16 once, element for
    element but where the f32 sums land on the other side of a tie (one step, at most 0.1% of the elements). The
    per-op chain differs from it in far more elements (the test would fail if the intermediates were rounded)."""
    y, x, w, b, r = _fc_residual(x_shape, k, n, threads, {})
    exact = x @ w + b + r
    want = _round_bf16(exact)
    off = y != want
    assert off.sum() <= max(2, y.size // 1000), off.sum()
    # an element that differs is one bf16 step off, plus what the f32 sum of k + 2 terms may err by (it matters where
    # the terms cancel: an element near 0 made of terms near 1); the data depends on the tests run before (RNG)
    f32_sum = (k + 2) * 2.0**-24 * (np.abs(x) @ np.abs(w) + np.abs(b) + np.abs(r))
    assert np.all(np.abs(y - want)[off] <= (2.0**-7 * np.maximum(np.abs(want), np.abs(y)) + f32_sum)[off])
    chain = _round_bf16(_round_bf16(_round_bf16(x @ w) + b) + r)
    assert (chain != want).sum() > 10 * max(2, y.size // 1000)


def test_inference_precision_bf16_runs_f32_fcs_in_bf16() -> None:
    """``target_options.inference_precision: bf16`` on an f32 model: each FC is a bf16 FC Subgraph (weight rounded
    and packed once, activation rounded by a Convert, f32 bias after the Convert back), describe() says so; the
    result is the float64 product of the bf16-rounded operands, rounded to bf16, plus the f32 bias. A bf16-stored
    weight Cast to f32 is read back exactly. Without the option the same model stays f32 (exact)."""
    from snippets_core.passes.convert_fc_to_bf16 import ConvertFCToBF16

    m, k, n = 48, 96, 160
    w = RNG.standard_normal((k, n)).astype(BF16)
    b = RNG.standard_normal(n).astype(np.float32)
    nodes = [oh.make_node("Cast", ["W"], ["Wf"], to=TP.FLOAT), oh.make_node("MatMul", ["x", "Wf"], ["mm"]),
             oh.make_node("Add", ["mm", "b"], ["y"])]
    proto = _model(nodes, [oh.make_tensor_value_info("x", TP.FLOAT, [m, k])],
                   [oh.make_tensor_value_info("y", TP.FLOAT, [m, n])],
                   [_bf16_init("W", w), onnx.numpy_helper.from_array(b, "b")])
    x = RNG.standard_normal((m, k)).astype(np.float32)
    cm = _compile(proto, options={"inference_precision": "bf16"})
    _all_on_target(cm)
    assert "f32 MatMul computed in bf16" in cm.describe()
    (fc,) = [sg for sg in _subgraphs(cm) if sg.rt_info.get(FULLY_CONNECTED)]
    assert [n.type_name for n in fc.body_ops] == ["MatMul", "Convert", "Add"]
    assert fc.inputs[0].element_type.value == "bf16"
    got = cm({"x": x})["y"].astype(np.float64)
    mm = _round_bf16(x) @ w.astype(np.float64)
    want = _round_bf16(mm) + b
    # equal but where the f32 sum lands on the other side of a tie: one bf16 step of the product
    off = np.abs(got - want) > 1e-5 * np.abs(want) + 1e-6
    assert off.sum() <= max(2, got.size // 1000), off.sum()
    assert np.all(np.abs(got - want) <= 2.0**-7 * np.abs(mm) + 1e-5)  # a tie flipped: one bf16 step
    exact = _compile(proto)({"x": x})["y"]
    np.testing.assert_allclose(exact, x.astype(np.float64) @ w.astype(np.float64) + b, rtol=1e-5, atol=1e-4)
    # a target that has no bf16 FC kernel vetoes the rewrite: nothing changes
    model = snippets_core.read_onnx(proto)
    assert not ConvertFCToBF16(accept=lambda node: False).run(model)
    assert [n.type_name for n in model.get_ordered_ops() if n.type_name == "MatMul"] == ["MatMul"]

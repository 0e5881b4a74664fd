"""The int8 batched MatMul on x86_64_avx512 (TokenizeInt8MatMulSnippets + Int8MatMulExecutor): MatMuls of two
quantized activations, as the attention of a static QDQ model has them, compared with the dequantized float64 math
and with onnxruntime on the same file; u8/s8 grids with zero points, odd K (the kernel's K tail), dynamic sequence
lengths (1, 7, 17, 128, 129), batches split between 2 threads, the executor under guard pages."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import snippets_core as sc
from snippets_core.tokenization.tokenize_int8_fc_snippets import INT8_FC_REJECT_REASON_KEY
from snippets_core.tokenization.tokenize_int8_matmul_snippets import is_int8_matmul
from snippets_x86_64.cpu import cpu_features

ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.skipif("avx512_vnni" not in cpu_features(), reason="the int8 Brgemm needs AVX512_VNNI")

TARGET = "x86_64_avx512"
#: the attention MatMuls become int8 batched MatMuls only when asked (off by default: slower than the f32 MHA)
INT8_MATMUL = {"tokenization": {"int8_matmul": True}}
SEQS = (1, 7, 17, 128, 129)
#: (signed, scale, zero point) of A's and B's grids
GRIDS = {"u8": (False, 0.037, 123), "u8zp0": (False, 0.0039, 0), "s8": (True, 0.05, -3), "s8zp0": (True, 0.02, 0)}


def _qdq(name: str, grid: tuple[bool, float, int]) -> tuple[list, list]:
    signed, scale, zp = grid
    inits = [nh.from_array(np.float32(scale), f"{name}s"), nh.from_array(np.asarray(zp, np.int8 if signed else
                                                                                   np.uint8), f"{name}z")]
    nodes = [h.make_node("QuantizeLinear", [name, f"{name}s", f"{name}z"], [f"{name}q"]),
             h.make_node("DequantizeLinear", [f"{name}q", f"{name}s", f"{name}z"], [f"{name}d"])]
    return nodes, inits


def qk_model(k: int, ga: str, gb: str, heads: int = 2) -> bytes:
    """Q x K^T of a head split: a, b [1, s, heads, K] -> Q->DQ -> Transposes -> MatMul -> y [1, heads, s, s]."""
    na, ia = _qdq("a", GRIDS[ga])
    nb, ib = _qdq("b", GRIDS[gb])
    nodes = [*na, *nb, h.make_node("Transpose", ["ad"], ["at"], perm=[0, 2, 1, 3]),
             h.make_node("Transpose", ["bd"], ["bt"], perm=[0, 2, 3, 1]), h.make_node("MatMul", ["at", "bt"], ["y"])]
    ins = [h.make_tensor_value_info(n, T.FLOAT, [1, "s", heads, k]) for n in "ab"]
    g = h.make_graph(nodes, "qk", ins, [h.make_tensor_value_info("y", T.FLOAT, None)], [*ia, *ib])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 19)]).SerializeToString()


def pv_model(d: int, gb: str, heads: int = 3) -> bytes:
    """softmax(a) x V: a [1, heads, s, s] -> Softmax -> Q->DQ (u8, zero point 0) -> MatMul(., Transpose(DQ(Q(b))))."""
    na, ia = _qdq("p", GRIDS["u8zp0"])
    nb, ib = _qdq("b", GRIDS[gb])
    nodes = [h.make_node("Softmax", ["a"], ["p"], axis=-1), *na, *nb,
             h.make_node("Transpose", ["bd"], ["bt"], perm=[0, 2, 1, 3]), h.make_node("MatMul", ["pd", "bt"], ["y"])]
    ins = [h.make_tensor_value_info("a", T.FLOAT, [1, heads, "s", "s"]),
           h.make_tensor_value_info("b", T.FLOAT, [1, "s", heads, d])]
    g = h.make_graph(nodes, "pv", ins, [h.make_tensor_value_info("y", T.FLOAT, None)], [*ia, *ib])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 19)]).SerializeToString()


def _q(x: np.ndarray, grid: tuple[bool, float, int]) -> np.ndarray:
    """QuantizeLinear then DequantizeLinear (round half to even, saturate): ``x / scale`` in float32 as the
    operator computes it (onnxruntime, onnx's reference), the rest in float64."""
    signed, scale, zp = grid
    lo, hi = (-128, 127) if signed else (0, 255)
    q = np.clip(np.rint((x.astype(np.float32) / np.float32(scale)).astype(np.float64)) + zp, lo, hi)
    return (q - zp) * np.float64(np.float32(scale))


def _compile(model: bytes, threads: int = 1, **options: Any) -> Any:
    cm = sc.compile_model(model, TARGET, {"num_threads": threads, "target_options": options, **INT8_MATMUL})
    assert sum(is_int8_matmul(sg) for sg in cm.subgraphs) == 1, cm.describe()
    assert "int8 batched MatMul on the VNNI Brgemm" in cm.describe()
    return cm


def _ort(model: bytes, feeds: dict[str, np.ndarray]) -> np.ndarray:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _close_to_onnxruntime(got: np.ndarray, want: np.ndarray, tol: float) -> None:
    """onnxruntime's QuantizeLinear rounds x / scale its own way (float64 agrees with us): an input element on a
    rounding boundary lands on the next step there, which moves one row or column of the product; at most 1% of the
    outputs may differ."""
    assert got.shape == want.shape and got.dtype == want.dtype
    bad = np.abs(got - want) > tol + 1e-5 * np.abs(want)
    assert bad.mean() <= 0.01, f"{int(bad.sum())} of {bad.size} differ from onnxruntime"


def _feeds(s: int, k: int, heads: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: (rng.standard_normal((1, s, heads, k)) * 2).astype(np.float32) for n in "ab"}


def _want_qk(f: dict[str, np.ndarray], ga: str, gb: str) -> np.ndarray:
    a = _q(f["a"], GRIDS[ga]).transpose(0, 2, 1, 3)
    b = _q(f["b"], GRIDS[gb]).transpose(0, 2, 3, 1)
    return np.einsum("bhmk,bhkn->bhmn", a, b)


@pytest.mark.parametrize(("ga", "gb"), [("u8", "u8"), ("s8", "u8"), ("u8zp0", "s8"), ("s8zp0", "s8zp0")])
@pytest.mark.parametrize("k", [1, 7, 17, 64])
def test_qk_matches_float64_and_onnxruntime_at_every_sequence_length(k: int, ga: str, gb: str) -> None:
    model = qk_model(k, ga, gb)
    cm = _compile(model)
    for s in SEQS:
        f = _feeds(s, k, 2, s)
        got = cm(f)["y"]
        want = _want_qk(f, ga, gb)
        assert got.shape == want.shape == (1, 2, s, s) and got.dtype == np.float32
        tol = 1e-5 * float(np.abs(want).max(initial=1.0))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=tol)
        _close_to_onnxruntime(got, _ort(model, f), tol)


@pytest.mark.parametrize("gb", ["u8", "s8"])
@pytest.mark.parametrize("d", [16, 17])
def test_softmax_times_v_matches_float64_and_onnxruntime(d: int, gb: str) -> None:
    model = pv_model(d, gb)
    cm = _compile(model)
    for s in SEQS:
        rng = np.random.default_rng(s)
        f = {"a": (rng.standard_normal((1, 3, s, s)) * 3).astype(np.float32),
             "b": (rng.standard_normal((1, s, 3, d)) * 2).astype(np.float32)}
        got = cm(f)["y"]
        e = np.exp(f["a"].astype(np.float64) - f["a"].max(-1, keepdims=True))
        p = _q(e / e.sum(-1, keepdims=True), GRIDS["u8zp0"])
        want = np.einsum("bhmk,bhkn->bhmn", p, _q(f["b"], GRIDS[gb]).transpose(0, 2, 1, 3))
        tol = 1e-5 * float(np.abs(want).max(initial=1.0))
        # the softmax may land its f32 probability on the other side of a rounding boundary: one step of p, once
        # in a while, moves y by at most p's step times |b|
        bound = GRIDS["u8zp0"][1] * float(np.abs(f["b"]).max()) * 1.01
        diff = np.abs(got - want)
        assert diff.max() <= bound and (diff > tol).mean() <= 0.01, float(diff.max())
        _close_to_onnxruntime(got, _ort(model, f), tol)


def test_batches_split_between_two_threads() -> None:
    """parallel_min_ns 0: every call is split; the result is the float64 math still."""
    model = qk_model(17, "u8", "s8", heads=5)
    cm = _compile(model, threads=2, parallel_min_ns=0)
    assert "batches split over 2 threads" in cm.describe()
    for s in (1, 17, 129):
        f = _feeds(s, 17, 5, s)
        want = _want_qk(f, "u8", "s8")
        np.testing.assert_allclose(cm(f)["y"], want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


@pytest.mark.parametrize("at", ["start", "end"])
@pytest.mark.parametrize(("s", "k"), [(1, 1), (7, 17), (17, 3), (129, 64)])
def test_executor_stays_inside_its_arrays(at: str, s: int, k: int) -> None:
    """The operands, the output, the quantized A and B, the packed B and the post-op vectors next to PROT_NONE
    pages: no fault, the float64 result."""
    from snippets_x86_64.brgemm_copy_b_int8 import PackedB, repack_b_int8
    from snippets_x86_64.guarded import guarded_array, guarded_copy
    from snippets_x86_64.int8_matmul_executor import Int8MatMulExecutor

    cm = _compile(qk_model(k, "u8", "s8"))
    (sg,) = [sg for sg in cm.subgraphs if is_int8_matmul(sg)]
    ex = Int8MatMulExecutor(sg, 2, 0)
    ex.empty = lambda shape, dtype: guarded_array(shape if isinstance(shape, tuple) else (shape,), dtype, at)

    def repack(b: np.ndarray) -> PackedB:
        pk = repack_b_int8(b)
        return PackedB(data=guarded_copy(pk.data, at), k=pk.k, n=pk.n, colsum=pk.colsum)

    ex.repack = repack
    f = _feeds(s, k, 2, 3)
    # the inputs already in the order the MatMul reads them (no Transpose copy): A [1, 2, s, k], B [1, 2, k, s]
    spec = ex.spec
    a = guarded_copy(np.ascontiguousarray(f["a"].transpose(spec.a.perm)).transpose(np.argsort(spec.a.perm)), at)
    b = guarded_copy(f["b"], at)
    args: list[Any] = [None] * len(sg.inputs)
    args[spec.a.index], args[spec.b.index] = a, b
    out = guarded_array((1, 2, s, s), np.float32, at)
    (got,) = ex(args, [out])
    assert got is out
    want = _want_qk(f, "u8", "s8")
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_a_matmul_with_one_quantized_input_stays_f32_and_says_why() -> None:
    na, ia = _qdq("a", GRIDS["u8"])
    nodes = [*na, h.make_node("MatMul", ["ad", "b"], ["y"])]
    ins = [h.make_tensor_value_info("a", T.FLOAT, [2, 4, 8]), h.make_tensor_value_info("b", T.FLOAT, [2, 8, 5])]
    g = h.make_graph(nodes, "one", ins, [h.make_tensor_value_info("y", T.FLOAT, None)], ia)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 19)]).SerializeToString()
    cm = sc.compile_model(model, TARGET, INT8_MATMUL)
    assert not any(is_int8_matmul(sg) for sg in cm.subgraphs)
    reasons = [n.rt_info.get(INT8_FC_REJECT_REASON_KEY) for n in cm.model.get_ordered_ops() if n.type_name == "MatMul"]
    assert any(r and "input 1" in r for r in reasons), reasons
    rng = np.random.default_rng(0)
    f = {"a": rng.standard_normal((2, 4, 8)).astype(np.float32), "b": rng.standard_normal((2, 8, 5)).astype(np.float32)}
    np.testing.assert_allclose(cm(f)["y"], _ort(model, f), rtol=1e-5, atol=1e-5)


def _attention(rng: np.random.Generator, d: int = 32, heads: int = 2, batch: int | str = 1) -> onnx.ModelProto:
    """A BERT-like attention with a dynamic sequence axis (and a dynamic batch if ``batch`` is a name): projections,
    head split, softmax(QK^T/sqrt(dh))V, merge, output projection."""
    dh = d // heads
    w = {n: nh.from_array((rng.standard_normal((d, d)) * 0.2).astype(np.float32), n) for n in ("wq", "wk", "wv", "wo")}
    inits = [*w.values(), nh.from_array(np.asarray([0, -1, heads, dh], np.int64), "split"),
             nh.from_array(np.asarray([0, -1, d], np.int64), "merge"),
             nh.from_array(np.asarray(1.0 / np.sqrt(dh), np.float32), "sc")]
    nodes = [h.make_node("MatMul", ["x", n], [n + "o"]) for n in ("wq", "wk", "wv")]
    nodes += [h.make_node("Reshape", [n + "o", "split"], [n + "r"]) for n in ("wq", "wk", "wv")]
    nodes += [h.make_node("Transpose", ["wqr"], ["qt"], perm=[0, 2, 1, 3]),
              h.make_node("Transpose", ["wkr"], ["kt"], perm=[0, 2, 3, 1]),
              h.make_node("Transpose", ["wvr"], ["vt"], perm=[0, 2, 1, 3]),
              h.make_node("MatMul", ["qt", "kt"], ["s0"]), h.make_node("Mul", ["s0", "sc"], ["s1"]),
              h.make_node("Softmax", ["s1"], ["p"], axis=-1), h.make_node("MatMul", ["p", "vt"], ["c"]),
              h.make_node("Transpose", ["c"], ["ct"], perm=[0, 2, 1, 3]), h.make_node("Reshape", ["ct", "merge"], ["cm"]),
              h.make_node("MatMul", ["cm", "wo"], ["y"])]
    g = h.make_graph(nodes, "attention", [h.make_tensor_value_info("x", T.FLOAT, [batch, "s", d])],
                     [h.make_tensor_value_info("y", T.FLOAT, [batch, "s", d])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


class _Calibration:
    def __init__(self) -> None:
        rng = np.random.default_rng(1)
        self._data = iter([{"x": rng.standard_normal((1, 16, 32)).astype(np.float32)} for _ in range(4)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._data, None)


def test_onnxruntime_quantized_attention_runs_int8_at_dynamic_sequence_lengths(tmp_path: Path) -> None:
    """onnxruntime's static QDQ quantizer on an attention with a dynamic sequence axis: both attention MatMuls run
    as int8 batched MatMuls; the output (a DequantizeLinear) is at most one step off onnxruntime's on 1% of its
    elements, the rest on the same step, at every sequence length."""
    q = pytest.importorskip("onnxruntime.quantization")
    src, dst = os.fspath(tmp_path / "f32.onnx"), os.fspath(tmp_path / "qdq.onnx")
    onnx.save(_attention(np.random.default_rng(0)), src)
    q.quantize_static(src, dst, _Calibration(), quant_format=q.QuantFormat.QDQ, per_channel=True,
                      activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8)
    m = onnx.load(dst)
    producer = {o: n for n in m.graph.node for o in n.output}["y"]
    assert producer.op_type == "DequantizeLinear"
    step = float(nh.to_array({t.name: t for t in m.graph.initializer}[producer.input[1]]))
    assert not any(is_int8_matmul(sg) for sg in sc.compile_model(dst, TARGET).subgraphs)  # off by default
    cm = sc.compile_model(dst, TARGET, INT8_MATMUL)
    assert sum(is_int8_matmul(sg) for sg in cm.subgraphs) == 2, cm.describe()
    assert cm.describe().count("int8 batched MatMul on the VNNI Brgemm") == 2
    # basic optimizations: the QDQ graph as written (ORT's full level fuses it into its own integer kernels,
    # which requantize differently: up to 3 steps from the QDQ math, from onnx's reference evaluator as from us)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    sess = ort.InferenceSession(dst, so, providers=["CPUExecutionProvider"])
    off = total = 0
    for s in SEQS:
        x = np.random.default_rng(s).standard_normal((1, s, 32)).astype(np.float32)
        got, want = cm({"x": x})["y"], sess.run(None, {"x": x})[0]
        assert got.shape == want.shape == (1, s, 32)
        steps = np.abs(np.rint(got.astype(np.float64) / step) - np.rint(want.astype(np.float64) / step))
        assert steps.max() <= 1, f"s={s}: {int(steps.max())} steps off"
        off, total = off + int((steps > 0).sum()), total + steps.size
    assert off <= 0.01 * total, f"{off} of {total} outputs one step off"

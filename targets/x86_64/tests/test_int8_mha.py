"""The int8 MHA (snippets_x86_64.int8_mha): a QDQ attention in one MHA Subgraph on int8 Brgemms, against a float64
model of the quantized math and onnxruntime on the same file: grids u8/s8 with zero points, odd head dims, odd
sequence lengths, a mask branch, 2 threads, the executor under guard pages, and the reasons it stays f32."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import snippets_core as sc
from snippets_x86_64.cpu import cpu_features
from snippets_x86_64.int8_mha_executor import Int8MHAExecutor
from snippets_x86_64.runtime import INT8_MHA_REJECT_REASON_KEY

ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.skipif("avx512_vnni" not in cpu_features(), reason="the int8 MHA needs AVX512_VNNI")

TARGET = "x86_64_avx512"
#: (signed, scale, zero point) of each grid of the attention; scales as a calibration makes them (not round
#: decimals, whose products put exact ties on the next grid that float32 and float64 break differently)
GRIDS = {
    "q": (False, 0.030137, 128), "k": (False, 0.024871, 120), "v": (False, 0.020213, 131),
    "s0": (False, 0.251093, 128), "s1": (False, 0.034917, 128), "m": (False, 10000.0 / 255, 255),
    "s2": (False, 0.050311, 200), "p": (False, 1.0 / 255, 0), "o": (False, 0.010037, 128),
}
SIGNED = {"q": (True, 0.030137, -3), "k": (True, 0.024871, 0), "v": (True, 0.020213, 5), "p": (True, 1.0 / 255, -128)}


def _qdq(name: str, grid: tuple[bool, float, int]) -> tuple[list, list, str]:
    signed, scale, zp = grid
    inits = [nh.from_array(np.float32(scale), f"{name}_s"),
             nh.from_array(np.asarray(zp, np.int8 if signed else np.uint8), f"{name}_z")]
    nodes = [h.make_node("QuantizeLinear", [name, f"{name}_s", f"{name}_z"], [f"{name}_q"]),
             h.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_dq"])]
    return nodes, inits, f"{name}_dq"


def attention_model(d: int, grids: dict[str, tuple[bool, float, int]], heads: int = 2, out_transpose: bool = False
                    ) -> bytes:
    """q, k, v [1, s, heads, d] and mask [1, 1, 1, s] (1 keep, 0 pad) -> QDQ everywhere, as onnxruntime's static
    quantizer writes an attention: softmax(QDQ(QDQ(QDQ(Q K^T) / sqrt(d)) + QDQ((1 - mask) * -10000))) V."""
    nodes: list = []
    inits: list = [nh.from_array(np.float32(np.sqrt(d)), "sqrt_d"), nh.from_array(np.float32(1.0), "one"),
                   nh.from_array(np.float32(-10000.0), "big")]

    def qdq(x: str, g: str) -> str:
        n, i, y = _qdq(x, grids[g])
        nodes.extend(n)
        inits.extend(i)
        return y

    q, k, v = qdq("q", "q"), qdq("k", "k"), qdq("v", "v")
    nodes += [h.make_node("Transpose", [q], ["qt"], perm=[0, 2, 1, 3]),
              h.make_node("Transpose", [k], ["kt"], perm=[0, 2, 3, 1]),
              h.make_node("Transpose", [v], ["vt"], perm=[0, 2, 1, 3]),
              h.make_node("MatMul", ["qt", "kt"], ["s0"]),
              h.make_node("Sub", ["one", "mask"], ["m0"]), h.make_node("Mul", ["m0", "big"], ["m"])]
    nodes.append(h.make_node("Div", [qdq("s0", "s0"), "sqrt_d"], ["s1"]))
    nodes.append(h.make_node("Add", [qdq("s1", "s1"), qdq("m", "m")], ["s2"]))
    nodes.append(h.make_node("Softmax", [qdq("s2", "s2")], ["p"], axis=-1))
    nodes.append(h.make_node("MatMul", [qdq("p", "p"), "vt"], ["o"]))
    y = qdq("o", "o")
    if out_transpose:
        nodes.append(h.make_node("Transpose", [y], ["ot"], perm=[0, 2, 1, 3]))
        y = "ot"
    nodes.append(h.make_node("Identity", [y], ["y"]))
    ins = [h.make_tensor_value_info(n, T.FLOAT, ["b", "s", heads, d]) for n in "qkv"]
    ins.append(h.make_tensor_value_info("mask", T.FLOAT, ["b", 1, 1, "s"]))
    g = h.make_graph(nodes, "qdq_attention", ins, [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 19)]).SerializeToString()


def _q(x: np.ndarray, grid: tuple[bool, float, int]) -> np.ndarray:
    """QuantizeLinear then DequantizeLinear (round half to even, saturate), stored as the float32 tensor the
    graph holds: ``x / scale`` in float32 as the operator computes it (onnxruntime, onnx's reference), the rest in
    float64."""
    signed, scale, zp = grid
    lo, hi = (-128, 127) if signed else (0, 255)
    s = np.float64(np.float32(scale))
    q = np.rint((np.asarray(x, np.float32) / np.float32(scale)).astype(np.float64))
    return ((np.clip(q + zp, lo, hi) - zp) * s).astype(np.float32)


def _f32(x: np.ndarray) -> np.ndarray:
    """An op's float64 result stored in the graph's float32 tensor."""
    return np.asarray(x, np.float64).astype(np.float32)


def want_float64(f: dict[str, np.ndarray], grids: dict[str, tuple[bool, float, int]], out_transpose: bool
                 ) -> np.ndarray:
    """The quantized attention in float64, op by op as the QDQ graph says, each result stored in float32 (the
    graph's tensors; a quantization step then falls where the graph puts it)."""
    q = _q(f["q"], grids["q"]).transpose(0, 2, 1, 3).astype(np.float64)
    k = _q(f["k"], grids["k"]).transpose(0, 2, 3, 1).astype(np.float64)
    v = _q(f["v"], grids["v"]).transpose(0, 2, 1, 3).astype(np.float64)
    s = _f32(np.einsum("bhmd,bhdn->bhmn", q, k))
    s = _f32(_q(s, grids["s0"]).astype(np.float64) / np.float64(np.float32(np.sqrt(q.shape[-1]))))
    m = _q(_f32((1.0 - f["mask"].astype(np.float64)) * -10000.0), grids["m"])
    s = _q(_f32(_q(s, grids["s1"]).astype(np.float64) + m), grids["s2"]).astype(np.float64)
    e = np.exp(s - s.max(-1, keepdims=True))
    p = _q(_f32(e / e.sum(-1, keepdims=True)), grids["p"]).astype(np.float64)
    o = _q(_f32(np.einsum("bhms,bhsd->bhmd", p, v)), grids["o"])
    return o.transpose(0, 2, 1, 3) if out_transpose else o


def feeds(s: int, d: int, heads: int = 2, seed: int = 0, masked: int = 0, batch: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    f = {n: rng.standard_normal((batch, s, heads, d)).astype(np.float32) for n in "qkv"}
    mask = np.ones((batch, 1, 1, s), np.float32)
    for i in range(batch):  # each sentence of the batch padded differently
        if masked:
            mask[i, ..., s - masked + i :] = 0.0
    f["mask"] = mask
    return f


def compile_int8(model: bytes, threads: int = 1) -> Any:
    cm = sc.compile_model(model, TARGET, {"num_threads": threads})
    assert "int8 MHA on the VNNI Brgemm" in cm.describe(), cm.describe()
    return cm


def assert_steps(got: np.ndarray, want: np.ndarray, step: float) -> None:
    """Within the quantization tolerance (issue 13): at most 1% of the elements one output step off, none more.

    Against onnxruntime the kernel computes what onnxruntime computes, rounding where it rounds: QuantizeLinear's
    ``x / scale`` (a multiply with an exact FMA correction, bit for bit a divide), DequantizeLinear's
    ``(q - zp) * scale``, MLAS's softmax (its exp polynomial and its summation order, so every probability is
    onnxruntime's bit for bit). What cannot be matched: onnxruntime's two MatMuls sum float32 products in
    float32 (MLAS's SGEMM order), the kernel sums the integers exactly; where a score or an output lies within
    that float32 error (~1e-6 relative) of a rounding tie of the next requantization the two land on
    neighbouring steps (a score one step off moves its row of probabilities by at most a step, an output one step
    off is one step). Measured: no output differs from onnxruntime on this file's attentions, seeds and lengths
    (1.9 million outputs), nor from the float64 model (float64 sums and exp; x / scale in float32, as the
    operator defines it)."""
    assert got.shape == want.shape
    steps = np.abs(np.rint(got.astype(np.float64) / step) - np.rint(want.astype(np.float64) / step))
    assert steps.max() <= 1, f"{int(steps.max())} steps off"
    assert (steps > 0).mean() <= 0.01, f"{int((steps > 0).sum())} of {steps.size} off"


def _ort(model: bytes, f: dict[str, np.ndarray]) -> np.ndarray:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC  # the QDQ graph as written
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, f)[0]


@pytest.mark.parametrize("signed", ["", "q", "k", "v", "p", "qkvp"])
@pytest.mark.parametrize("d", [7, 64])
def test_grids_match_float64_and_onnxruntime(d: int, signed: str) -> None:
    grids = {**GRIDS, **{g: SIGNED[g] for g in signed}}
    model = attention_model(d, grids)
    cm = compile_int8(model)
    for s, masked in ((1, 0), (17, 3), (128, 16)):
        f = feeds(s, d, seed=s + d, masked=masked)
        got = cm(f)["y"]
        assert_steps(got, want_float64(f, grids, False), grids["o"][1])
        assert_steps(got, _ort(model, f), grids["o"][1])


@pytest.mark.parametrize("s", [2, 31, 32, 33, 63, 129, 200])
def test_odd_sequence_lengths_and_output_transpose(s: int) -> None:
    """One kernel per length (blocks of 32 rows and a tail, softmax tails under a mask), the output written
    through the merge-heads Transpose."""
    model = attention_model(16, GRIDS, heads=3, out_transpose=True)
    cm = compile_int8(model)
    f = feeds(s, 16, heads=3, seed=s, masked=s // 3)
    got = cm(f)["y"]
    assert got.shape == (1, s, 3, 16)
    assert_steps(got, want_float64(f, GRIDS, True), GRIDS["o"][1])
    assert_steps(got, _ort(model, f), GRIDS["o"][1])


@pytest.mark.parametrize("threads", [1, 2])
def test_batch_of_sentences_with_their_own_masks(threads: int) -> None:
    """Batch 3 (the mask differs per sentence: one side vector per batch), the heads of every sentence split
    between threads, one compiled model for two sequence lengths."""
    model = attention_model(32, GRIDS, heads=3)
    cm = compile_int8(model, threads=threads)
    for s in (40, 17):
        f = feeds(s, 32, heads=3, seed=s, masked=5, batch=3)
        got = cm(f)["y"]
        assert got.shape == (3, 3, s, 32)
        assert_steps(got, want_float64(f, GRIDS, False), GRIDS["o"][1])
        assert_steps(got, _ort(model, f), GRIDS["o"][1])


def test_mask_changes_between_calls_and_two_threads() -> None:
    """The mask branch is recomputed when the mask changes; the heads split between 2 threads."""
    model = attention_model(64, GRIDS, heads=4)
    cm = compile_int8(model, threads=2)
    for masked in (0, 40, 5):
        f = feeds(128, 64, heads=4, seed=masked, masked=masked)
        got = cm(f)["y"]
        assert_steps(got, want_float64(f, GRIDS, False), GRIDS["o"][1])
        assert_steps(got, _ort(model, f), GRIDS["o"][1])


@pytest.mark.parametrize("threads", [1, 2])
def test_matches_onnxruntime_at_every_length_batch_and_thread_count(threads: int) -> None:
    """One compiled model (dynamic batch and sequence) against onnxruntime on the same QDQ file: lengths from 1
    to 384 (blocks of 32 rows, groups of 64 columns and their tails), batch 1 and 2 (a mask per sentence), heads
    split between 1 or 2 threads, u8 and s8 grids: at most 1% one step off, none more (measured: none off)."""
    for grids in (GRIDS, {**GRIDS, **SIGNED}):
        model = attention_model(64, grids, heads=4)
        cm = compile_int8(model, threads=threads)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        for s, batch in ((1, 2), (7, 1), (64, 2), (77, 2), (128, 1), (129, 2), (384, 2)):
            f = feeds(s, 64, heads=4, seed=s + batch, masked=s // 5, batch=batch)
            assert_steps(cm(f)["y"], sess.run(None, f)[0], grids["o"][1])


def test_off_by_config_and_unquantized_v_stays_f32_with_reason() -> None:
    model = attention_model(8, GRIDS)
    cm = sc.compile_model(model, TARGET, {"tokenization": {"int8_mha": False}})
    assert "int8 MHA" not in cm.describe()
    # V not quantized: the MHA stays on the f32 kernel and says why
    model = _without_v_qdq(8, GRIDS)
    cm = sc.compile_model(model, TARGET)
    assert "int8 MHA" not in cm.describe()
    reasons = [sg.rt_info.get(INT8_MHA_REJECT_REASON_KEY) for sg in cm.subgraphs]
    assert any(r and "V" in r for r in reasons), reasons
    f = feeds(9, 8)
    np.testing.assert_allclose(cm(f)["y"], _ort(model, f), rtol=1e-5, atol=1e-5)


def _without_v_qdq(d: int, grids: dict[str, tuple[bool, float, int]]) -> bytes:
    import onnx

    m = onnx.load_from_string(attention_model(d, grids))
    keep = [n for n in m.graph.node if not (n.output[0] in ("v_q", "v_dq"))]
    for n in keep:
        n.input[:] = ["v" if i == "v_dq" else i for i in n.input]
    del m.graph.node[:]
    m.graph.node.extend(keep)
    return m.SerializeToString()


@pytest.mark.parametrize("at", ["start", "end"])
@pytest.mark.parametrize(("s", "d"), [(1, 7), (33, 16), (129, 64)])
def test_executor_stays_inside_its_arrays(at: str, s: int, d: int) -> None:
    """The inputs, the output, the quantized bytes, the packed K^T and V, the mask vectors and the per-thread
    scratch next to PROT_NONE pages: no fault, the float64 result."""
    from snippets_x86_64.guarded import guarded_array, guarded_copy
    from snippets_x86_64.int8_mha import plan_int8_mha

    cm = compile_int8(attention_model(d, GRIDS, heads=2))
    (sg,) = [sg for sg in cm.subgraphs if "SnippetsInt8MHAInputGrids" in sg.rt_info]
    f = feeds(s, d, seed=s, masked=s // 4)
    seen: list[list[np.ndarray]] = []
    call = Int8MHAExecutor.__call__

    def spy(self: Int8MHAExecutor, args: Any, outs: Any = None) -> Any:
        seen.append([np.array(a) for a in args])
        return call(self, args, outs)

    Int8MHAExecutor.__call__ = spy  # type: ignore[method-assign]
    try:
        cm(f)
    finally:
        Int8MHAExecutor.__call__ = call  # type: ignore[method-assign]
    ex = Int8MHAExecutor(sg, plan_int8_mha(sg.body, sg.rt_info["SnippetsInt8MHAInputGrids"]), 2, 0)
    ex.empty = lambda shape, dtype: guarded_array(shape if isinstance(shape, tuple) else (shape,), dtype, at)
    out = guarded_array((1, 2, s, d), np.float32, at)
    (got,) = ex([guarded_copy(a, at) for a in seen[0]], [out])
    assert got is out
    assert_steps(out, want_float64(f, GRIDS, False), GRIDS["o"][1])


def assert_same_bits(chain: tuple[Any, ...], short: tuple[Any, ...], x: np.ndarray) -> None:
    """Two row-op chains give the same float32 bits on ``x`` (as the kernel computes each op)."""
    from snippets_x86_64.int8_mha import _f32_op

    a, b = x, x
    for op in chain:
        a = _f32_op(op, a)
    for op in short:
        b = _f32_op(op, b)
    np.testing.assert_array_equal(a.view(np.int32), b.view(np.int32))


def test_chain_simplification_is_bit_exact() -> None:
    """The clamps moved and merged, the power-of-two divide made a multiply: the same float32 bits as the chain
    as written (three decomposed FakeQuantizes, a divide by 8), on values across and beyond the grids."""
    from snippets_x86_64.int8_mha import RowOp, simplify

    def fq(lo: float, hi: float, levels: int = 256) -> list[RowOp]:
        scale = (levels - 1) / (hi - lo)
        return [RowOp("Maximum", lo), RowOp("Minimum", hi), RowOp("Multiply", scale), RowOp("Subtract", lo * scale),
                RowOp("Round"), RowOp("Multiply", 1 / scale), RowOp("Add", lo), RowOp("Maximum", lo),
                RowOp("Minimum", hi)]

    chain = (*fq(-41.7, 41.5), RowOp("Divide", 8.0), *fq(-5.2, 5.1), RowOp("Subtract", 0.3), *fq(-3.0, 2.0, 255))
    short = simplify(chain)
    assert len(short) < len(chain) and not any(op.op == "Divide" for op in short)
    x = np.concatenate([np.linspace(-60, 60, 200_001), np.random.default_rng(0).standard_normal(10_000) * 30]
                       ).astype(np.float32)
    assert_same_bits(chain, short, x)


class _Calibration:
    def __init__(self, d: int) -> None:
        rng = np.random.default_rng(1)
        self._data = iter([{"x": rng.standard_normal((1, 48, d)).astype(np.float32)} for _ in range(4)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._data, None)


def test_one_kernel_for_every_sequence_length_of_a_quantized_bert_attention(tmp_path: Any, monkeypatch: Any) -> None:
    """onnxruntime's static QDQ quantizer on a BERT-like attention with dynamic batch and sequence axes: after the
    first call, new sequence lengths (and a new batch) compile no int8 MHA kernel (every JIT function is counted
    where it is assembled); each result against onnxruntime on the same file, and the executor again with every
    array against a PROT_NONE page."""
    import os

    import onnx

    from snippets_x86_64.asm.function import Function
    from snippets_x86_64.guarded import guarded_array, guarded_copy
    from snippets_x86_64.int8_mha import plan_int8_mha

    monkeypatch.syspath_prepend(os.path.dirname(__file__))  # importlib mode: the sibling module's model builder
    from test_int8_matmul import _attention

    q = pytest.importorskip("onnxruntime.quantization")
    d = 128
    src, dst = os.fspath(tmp_path / "f32.onnx"), os.fspath(tmp_path / "qdq.onnx")
    onnx.save(_attention(np.random.default_rng(0), d, heads=2, batch="b"), src)
    q.quantize_static(src, dst, _Calibration(d), quant_format=q.QuantFormat.QDQ, per_channel=True,
                      activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8)
    m = onnx.load(dst)
    producer = {o: n for n in m.graph.node for o in n.output}["y"]
    step = float(nh.to_array({t.name: t for t in m.graph.initializer}[producer.input[1]]))
    compiled: list[str] = []
    finalize = Function.finalize

    def counted(self: Function, *args: Any, **kwargs: Any) -> Any:
        compiled.append(self.name)
        return finalize(self, *args, **kwargs)

    monkeypatch.setattr(Function, "finalize", counted)
    cm = compile_int8(dst)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    sess = ort.InferenceSession(dst, so, providers=["CPUExecutionProvider"])
    (sg,) = [sg for sg in cm.subgraphs if "SnippetsInt8MHAInputGrids" in sg.rt_info]
    seen: list[tuple[list[np.ndarray], np.ndarray]] = []
    call = Int8MHAExecutor.__call__

    def spy(self: Int8MHAExecutor, args: Any, outs: Any = None) -> Any:
        got = call(self, args, outs)
        seen.append(([np.array(a) for a in args], np.array(got[0])))
        return got

    monkeypatch.setattr(Int8MHAExecutor, "__call__", spy)
    for i, (b, s) in enumerate([(1, 16), (1, 1), (1, 17), (2, 33), (1, 129), (1, 200), (1, 384)]):
        x = np.random.default_rng(s).standard_normal((b, s, d)).astype(np.float32)
        compiled.clear()
        got = cm({"x": x})["y"]
        if i:
            assert "int8_mha" not in compiled, f"(b, s) = ({b}, {s}) compiled {compiled}"
        else:
            assert "int8_mha" in compiled
        assert_steps(got, sess.run(None, {"x": x})[0], step)
    monkeypatch.setattr(Int8MHAExecutor, "__call__", call)
    # the executor alone, every array (the scratch and its parameter block included) flush against a guard page,
    # one executor for every length: the attention outputs of the calls checked against onnxruntime above
    grids = sg.rt_info["SnippetsInt8MHAInputGrids"]
    for at in ("start", "end"):
        ex = Int8MHAExecutor(sg, plan_int8_mha(sg.body, grids), 2, 0)
        ex.empty = lambda shape, dtype, at=at: guarded_array(shape if isinstance(shape, tuple) else (shape,), dtype,
                                                             at)
        for args, w in seen:
            out = guarded_array(w.shape, np.float32, at)
            ex([guarded_copy(a, at) for a in args], [out])
            np.testing.assert_array_equal(out, w)


@pytest.mark.parametrize(("m", "s"), [(1, 200), (40, 3), (33, 65), (96, 64), (7, 129)])
def test_query_rows_and_sequence_differ(m: int, s: int) -> None:
    """Q with its own row count (the runtime block's rows: a last block ending on row M, fewer than 32 rows copied
    into the scratch) against K and V of another length, one compiled model for all of them."""
    import onnx

    proto = onnx.load_from_string(attention_model(16, GRIDS, heads=2))
    proto.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "m"
    model = proto.SerializeToString()
    cm = compile_int8(model)
    f = feeds(s, 16, seed=m + s, masked=s // 3)
    f["q"] = np.random.default_rng(m).standard_normal((1, m, 2, 16)).astype(np.float32)
    got = cm(f)["y"]
    assert got.shape == (1, 2, m, 16)
    assert_steps(got, want_float64(f, GRIDS, False), GRIDS["o"][1])
    assert_steps(got, _ort(model, f), GRIDS["o"][1])


def _divide_function(c: float, corrected: bool, bounded: bool = True) -> Any:
    """f(x, y, vectors): y = x / c on 16-float vectors, by the chain's corrected multiply or by vdivps."""
    import ctypes

    from snippets_x86_64.asm import Function, zmm0, zmm1
    from snippets_x86_64.emitters.base import f32
    from snippets_x86_64.emitters.math import emit_divide

    fn = Function("divide", args=("x", "y", "n"))
    x, y, n = fn.args
    top = fn.label("divide.top")
    fn.vmovups(zmm0, x + 0)
    if not corrected or not emit_divide(fn, zmm0, zmm1, c, bounded):
        fn.vdivps(zmm0, zmm0, f32(fn, c))
    fn.vmovups(y + 0, zmm0)
    fn.add(x, 64)
    fn.add(y, 64)
    fn.dec(n)
    fn.jnz(top)
    return fn.finalize(None, (ctypes.c_void_p,) * 3)


def _divide(c: float, x: np.ndarray, corrected: bool, bounded: bool = True) -> np.ndarray:
    x = np.ascontiguousarray(x, np.float32)
    y = np.empty_like(x)
    _divide_function(c, corrected, bounded)(x.ctypes.data, y.ctypes.data, x.size // 16)
    return y


@pytest.mark.parametrize("bounded", [True, False])
def test_corrected_multiply_divides_as_vdivps_on_every_tie(bounded: bool) -> None:
    """The chain's ``x / c`` (a multiply by 1/c and Markstein's FMA correction, in place of vdivps) is the
    correctly rounded quotient, bit for bit vdivps's, on the values where it matters: each tie ``(k + 0.5) c`` of
    the grids (k in [-600, 600]) and its 8 float neighbours each side, for the tests' scales, onnxruntime-like
    calibration scales and random ones, plus random values of every magnitude; unbounded (after a mask), +-inf
    and +-float_max too."""
    rng = np.random.default_rng(0)
    scales = [g[1] for g in GRIDS.values()] + [g[1] for g in SIGNED.values()] + [1 / 255, 0.1, 0.3, 3.0, 1 / 3]
    scales += list(rng.uniform(1e-4, 1.0, 40)) + list(np.exp(rng.uniform(-12, 8, 40)))
    k = np.arange(-600, 601, dtype=np.float64) + 0.5
    for c in scales:
        c = float(np.float32(c))
        ties = (k * c).astype(np.float32)
        near = [ties]
        up, down = ties, ties
        for _ in range(8):
            up, down = np.nextafter(up, np.float32(np.inf)), np.nextafter(down, np.float32(-np.inf))
            near += [up, down]
        near.append((rng.standard_normal(4096) * np.exp(rng.uniform(-20, 20, 4096))).astype(np.float32))
        x = np.concatenate(near)
        x = np.concatenate([x, np.zeros(-x.size % 16, np.float32)])
        want = _divide(c, x, corrected=False)
        np.testing.assert_array_equal(_divide(c, x, True, bounded).view(np.int32), want.view(np.int32),
                                      err_msg=f"scale {c!r}")
    if not bounded:
        x = np.array([-np.inf, np.inf, np.finfo(np.float32).min, np.finfo(np.float32).max] * 4, np.float32)
        for c in (0.05, 1 / 255, 40.0, 1.0000001):
            np.testing.assert_array_equal(_divide(c, x, True, False), _divide(c, x, False))


def test_probabilities_skip_their_clamp_only_when_every_probability_lands_inside_the_grid() -> None:
    """The kernel drops the u8/s8 clamp of the probabilities' integers when [0, 1 + 2^-23] maps inside the grid
    (1/255 u8 and s8: 0..255, -128..127), and keeps it for a scale that would wrap in vpmovdb (1/300) or a grid
    whose zero point pushes 1.0 past its top."""
    from snippets_x86_64.int8_mha import RowOp, probabilities_in_range

    chain = (RowOp("Divide", const=float(np.float32(1 / 255))), RowOp("Round"))
    assert probabilities_in_range(chain, (0, 0, 255)) and probabilities_in_range(chain, (-128, -128, 127))
    assert not probabilities_in_range((RowOp("Divide", const=float(np.float32(1 / 300))), RowOp("Round")),
                                      (0, 0, 255))
    assert not probabilities_in_range(chain, (10, 0, 255))
    assert not probabilities_in_range((RowOp("Multiply", const=-1.0), RowOp("Round")), (0, -255, 255))


@pytest.mark.parametrize("d", [7, 64])
def test_requantization_between_rounds_folds_bit_exactly(d: int) -> None:
    """fold_requantize makes ``Round, * s0, (/ sqrt(d)), / s1, Round`` one multiply: the scores chain up to the mask,
    folded and not, give the same float32 bits on values across and far beyond the grids (the first Round's
    integers from -2^20 to 2^20 and between)."""
    from snippets_x86_64.int8_mha import RowOp, fold_requantize, plan_int8_mha, simplify

    cm = compile_int8(attention_model(d, GRIDS))
    (sg,) = [sg for sg in cm.subgraphs if "SnippetsInt8MHAInputGrids" in sg.rt_info]
    plan = plan_int8_mha(sg.body, sg.rt_info["SnippetsInt8MHAInputGrids"])
    assert sum(op.op == "Divide" for op in plan.scores) == 2  # s1's divide folded away (s0's, s2's remain)
    # the chain as written, simplified but not folded: s0's QuantizeLinear .. s1's clamp
    body = [op for op in plan.scores]
    head = body[: next(i for i, op in enumerate(body) if op.side >= 0)]
    unfolded: list[RowOp] = []
    scale_s1 = GRIDS["s1"][1]
    for op in head:  # rebuild: the folded multiply is * s0 / sqrt(d) / s1 before the fold
        if op.op == "Multiply" and unfolded and unfolded[-1].op == "Round" and len(unfolded) == 2:
            unfolded += [RowOp("Multiply", const=float(np.float32(GRIDS["s0"][1]))),
                         RowOp("Divide", const=float(np.float32(np.sqrt(d)))),
                         RowOp("Divide", const=float(np.float32(scale_s1)))]
        else:
            unfolded.append(op)
    unfolded_t = simplify(tuple(unfolded))
    assert fold_requantize(unfolded_t) == tuple(head)
    rng = np.random.default_rng(d)
    x = np.concatenate([np.linspace(-300, 300, 400_001), rng.standard_normal(100_000) * 50,
                        np.arange(-(1 << 20), 1 << 20, 7) * np.float64(GRIDS["s0"][1])]).astype(np.float32)
    assert_same_bits(unfolded_t, tuple(head), x)

"""Attention with a dynamic batch and sequence length on ONE x86-64 kernel: the Brgemms read M, N, K, row strides
and buffer offsets from the runtime-parameter block (brgemm.py's ``_DynamicEmission``), BrgemmCopyB its N, and the
scores buffers sit at offsets the configurator computes per shape. Every sequence length 1..70 (each tail of the
M block 32, the N block 64, the copy's 16 columns and the 6-row register tile) and 127, 128, 129, 384, 511, random
batches, inputs and outputs flush against inaccessible pages; oracle: numpy float64. No shape compiles a kernel of
its own (``generate_subgraph`` is counted)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import snippets_x86_64.runtime as x86_runtime
from snippets_core.config import CompileConfig
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.matmul import MatMul
from snippets_core.ir.ops.shape_ops import Transpose
from snippets_core.ir.ops.softmax import Softmax
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.shape import Shape, SymDim
from snippets_core.plugins.host import get_host
from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64.guarded import guarded_array, guarded_copy
from snippets_x86_64.runtime import DynamicKernelExecutor

pytestmark = pytest.mark.avx512
RNG = np.random.default_rng(2026)
B, S = SymDim.of("batch"), SymDim.of("seq")
HEADS, HEAD = 2, 64
SEQS = [*range(1, 71), 127, 128, 129, 384, 511]
#: (layout of q/k/v/out, how K is stored): "bhsd" with K stored [b, h, d, s] (read in place) or [b, h, s, d]
#: (transposed by [0, 1, 3, 2]: BrgemmCopyB repacks it), "bshd" as torch exports it (every operand transposed, K
#: by [0, 2, 3, 1])
CASES = [("bhsd", "kt"), ("bhsd", "k"), ("bshd", "k")]


def _t(x: Any, order: list[int]) -> Transpose:
    return Transpose(x, Constant(np.array(order, dtype=np.int64)))


def _stored(layout: str, kstore: str, batch: Any, seq: Any) -> dict[str, tuple[Any, ...]]:
    if layout == "bshd":
        qv = (batch, seq, HEADS, HEAD)
        return {"q": qv, "k": qv, "v": qv}
    qv = (batch, HEADS, seq, HEAD)
    return {"q": qv, "k": (batch, HEADS, HEAD, seq) if kstore == "kt" else qv, "v": qv}


def _mha_model(layout: str, kstore: str, mask: bool) -> Model:
    """softmax(q·kᵀ (+ mask)) · v, heads of 64, batch and seq dynamic (named, as an ONNX export names them)."""
    shapes = _stored(layout, kstore, B, S)
    if mask:
        shapes["mask"] = (B, 1, 1, S)
    params = {n: Parameter("f32", Shape(s), name=n) for n, s in shapes.items()}
    q, k, v = params["q"], params["k"], params["v"]
    if layout == "bshd":
        q, k, v = _t(q, [0, 2, 1, 3]), _t(k, [0, 2, 3, 1]), _t(v, [0, 2, 1, 3])
    elif kstore == "k":
        k = _t(k, [0, 1, 3, 2])
    scores: Any = MatMul(q, k)
    if mask:
        scores = Add(scores, params["mask"])
    out: Any = MatMul(Softmax(scores, axis=3), v)
    if layout == "bshd":
        out = _t(out, [0, 2, 1, 3])
    return Model([Result(out, name="y")], list(params.values()))


def _inputs(layout: str, kstore: str, mask: bool, batch: int, seq: int) -> list[np.ndarray]:
    ins = [RNG.standard_normal(s).astype(np.float32) for s in _stored(layout, kstore, batch, seq).values()]
    if mask:
        m = np.zeros((batch, 1, 1, seq), np.float32)
        m[..., seq - int(RNG.integers(0, seq // 3 + 1)):] = -1e4  # padded keys, as a tokenizer's mask has them
        m[..., 0] = 0.0
        ins.append(m)
    return ins


def _reference(layout: str, kstore: str, ins: list[np.ndarray]) -> np.ndarray:
    q, k, v = (x.astype(np.float64) for x in ins[:3])
    if layout == "bshd":
        q, k, v = q.transpose(0, 2, 1, 3), k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3)
    elif kstore == "k":
        k = k.transpose(0, 1, 3, 2)
    scores = q @ k
    if len(ins) > 3:
        scores = scores + ins[3]
    e = np.exp(scores - scores.max(-1, keepdims=True))
    out = (e / e.sum(-1, keepdims=True)) @ v
    return out.transpose(0, 2, 1, 3) if layout == "bshd" else out


def _compile(layout: str, kstore: str, mask: bool, monkeypatch: pytest.MonkeyPatch, **config: Any) -> tuple:
    """The model compiled whole (tokenization and the common optimizations fold the Transposes into the Brgemms'
    layouts), its one Subgraph's executor, and the list of kernels generated since (True: lowered for every
    shape)."""
    generated: list[Any] = []
    real = x86_runtime.generate_subgraph

    def counting(*args: Any, **kw: Any) -> Any:
        generated.append(kw.get("symbolic"))
        return real(*args, **kw)

    monkeypatch.setattr(x86_runtime, "generate_subgraph", counting)
    cm = compile_model(_mha_model(layout, kstore, mask), target="x86_64_avx512", config=config)
    runs = [st.run for st in cm._steps if isinstance(st.node, Subgraph)]
    assert len(runs) == 1, cm.describe()
    assert isinstance(runs[0], DynamicKernelExecutor), cm.describe()
    names = [p.name for p in cm.model.parameters]

    def call(arrays: list[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
        return cm(dict(zip(names, arrays)), None if out is None else {"y": out})["y"]

    return call, runs[0], generated


@pytest.mark.parametrize("mask", [True, False])
@pytest.mark.parametrize(("layout", "kstore"), CASES)
def test_one_mha_kernel_runs_every_sequence_length_under_guard_pages(layout, kstore, mask, monkeypatch):
    call, run, generated = _compile(layout, kstore, mask, monkeypatch)
    for i, seq in enumerate(SEQS):
        batch = int(RNG.integers(1, 4))
        ins = _inputs(layout, kstore, mask, batch, seq)
        at = "end" if i % 2 else "start"
        guarded = [guarded_copy(a, at) for a in ins]
        want = _reference(layout, kstore, ins)
        out = guarded_array(want.shape, np.float32, at)
        assert call(guarded, out) is out
        np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5, err_msg=f"batch {batch} seq {seq}")
    # one kernel (or none: the kernel cache may hold it from an earlier test), never one per shape
    assert generated in ([], [True]) and run.per_shape_kernels == 0
    assert run.new_shapes == len(SEQS)


def test_a_dynamic_mha_on_two_threads_splits_the_batch_and_heads(monkeypatch):
    call, run, generated = _compile("bshd", "k", True, monkeypatch, num_threads=2,
                                    target_options={"parallel_min_bytes": 0})
    for batch, seq in [(3, 129), (1, 5), (4, 64), (2, 200)]:
        ins = _inputs("bshd", "k", True, batch, seq)
        out = call(ins)
        np.testing.assert_allclose(out, _reference("bshd", "k", ins), rtol=2e-5, atol=2e-5)
    assert generated in ([], [True]) and run.per_shape_kernels == 0


def test_the_dynamic_mha_kernel_reads_its_extents_from_the_block(monkeypatch):
    _, run, _ = _compile("bshd", "k", True, monkeypatch)
    names = " ".join(n for n, _ in run.kernel.info.runtime_params)
    # the Brgemms' M tail rows, N and K, the copy's N tiles, and a buffer offset: all runtime parameters
    for part in ("m_left", "n_vectors", "k_steps", "n_tiles", "buffer_offset"):
        assert part in names, (part, names)
    assert run.kernel.info.scratchpad_slot >= 0  # the scratchpad size too


_PROPERTY: dict[str, Any] = {}


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 4), seq=st.integers(1, 300), mask=st.booleans(), at=st.sampled_from(["start", "end"]))
def test_property_random_shapes_match_numpy_under_guard_pages(batch, seq, mask, at):
    if mask not in _PROPERTY:
        cm = compile_model(_mha_model("bshd", "k", mask), target="x86_64_avx512")
        _PROPERTY[mask] = cm
    cm = _PROPERTY[mask]
    ins = _inputs("bshd", "k", mask, batch, seq)
    want = _reference("bshd", "k", ins)
    out = guarded_array(want.shape, np.float32, at)
    names = [p.name for p in cm.model.parameters]
    cm({n: guarded_copy(a, at) for n, a in zip(names, ins)}, {"y": out})
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    (run,) = [s.run for s in cm._steps if isinstance(s.node, Subgraph)]
    assert isinstance(run, DynamicKernelExecutor) and run.per_shape_kernels == 0


@pytest.mark.parametrize("dims", ["MN", "K", "MNK"])
def test_one_brgemm_kernel_runs_every_m_n_k_under_guard_pages(dims):
    # every remainder of the row tile (alone and paired with the last whole tile), every N tail variant (1..4
    # vectors) and odd and even K, on one kernel
    m_, n_, k_ = (SymDim.of(d) if d in dims else v for d, v in zip("MNK", (37, 70, 100)))
    shapes = [(2, m_, k_), (2, k_, n_)]
    outer = [Parameter("f32", Shape(s), name=f"o{i}") for i, s in enumerate(shapes)]
    inner = [Parameter("f32", Shape(s), name=f"p{i}") for i, s in enumerate(shapes)]
    sg = Subgraph(*outer, body=Model([Result(MatMul(*inner), name="y")], inner))
    run = x86_runtime.compile_subgraph(sg, CompileConfig.from_mapping({}), get_host())
    assert isinstance(run, DynamicKernelExecutor), getattr(run, "why_per_shape", run)
    for i in range(40):
        m = int(RNG.integers(1, 80)) if "M" in dims else 37
        n = int(RNG.integers(1, 150)) if "N" in dims else 70
        k = int(RNG.integers(1, 300)) if "K" in dims else 100
        a = RNG.standard_normal((2, m, k)).astype(np.float32)
        b = RNG.standard_normal((2, k, n)).astype(np.float32)
        at = "end" if i % 2 else "start"
        out = guarded_array((2, m, n), np.float32, at)
        run([guarded_copy(a, at), guarded_copy(b, at)], [out])
        # the worst-case f32 dot-product bound (k * eps * |a| @ |b|): a fixed atol was exceeded by an output near
        # zero at k ~ 300 in one suite run; a wrong element (a bad offset or mask) is off by O(1), far past it
        bound = k * np.finfo(np.float32).eps * (np.abs(a.astype(np.float64)) @ np.abs(b)) + 1e-6
        err = np.abs(out - a.astype(np.float64) @ b)
        assert (err <= bound).all(), f"{m}x{n}x{k}: max error {err.max():.3g}, bound there {bound.flat[err.argmax()]:.3g}"
    assert run.per_shape_kernels == 0


def _model_zoo() -> Any:
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "bench" / "model_zoo.py"
    spec = importlib.util.spec_from_file_location("snippets_bench_model_zoo", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_model_zoo_bert_layer_attention_compiles_once_for_every_shape(monkeypatch):
    # bench/model_zoo.py's BERT layer (dynamic batch and sequence as exported, an int64 attention mask expanded by
    # Shape/Gather/Unsqueeze), narrowed to 2 heads; oracle: onnx's reference evaluator
    from onnx.reference import ReferenceEvaluator

    zm = _model_zoo().bert_layer(64, batch=1, hidden=128, heads=2, ffn=256)
    generated: list[Any] = []
    real = x86_runtime.generate_subgraph
    monkeypatch.setattr(x86_runtime, "generate_subgraph", lambda *a, **kw: generated.append(kw) or real(*a, **kw))
    cm = compile_model(zm.proto.SerializeToString(), target="x86_64_avx512")
    attention = [s.run for s in cm._steps if isinstance(s.node, Subgraph) and "Softmax" in
                 [op.type_name for op in s.node.body_ops]]
    assert len(attention) == 1 and isinstance(attention[0], DynamicKernelExecutor), cm.describe()
    compiled = len(generated)
    ref = ReferenceEvaluator(zm.proto)
    x_name = next(n for n in zm.feeds if n != "attention_mask")
    for batch, seq in [(1, 5), (2, 77), (3, 129), (1, 64), (2, 33)]:
        mask = np.ones((batch, seq), np.int64)
        mask[:, seq - seq // 8:] = 0
        feeds = {x_name: RNG.standard_normal((batch, seq, 128), dtype=np.float32), "attention_mask": mask}
        (got,) = cm(feeds).values()
        np.testing.assert_allclose(got, ref.run(None, feeds)[0], rtol=1e-4, atol=1e-4, err_msg=f"{batch}x{seq}")
    assert len(generated) == compiled, "a new shape compiled a kernel"
    assert attention[0].new_shapes == 5 and attention[0].per_shape_kernels == 0

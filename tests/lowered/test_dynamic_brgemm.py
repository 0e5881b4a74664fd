"""Brgemms of a dynamic M, N or K lowered once for every shape (``Config.symbolic_dims``).

A dynamic dim the frontend named (``Shape.syms``) keeps its name through Transpose and MatMul, so the LinearIR
names M, N and K apart; BrgemmBlocking loops over a dynamic M or N with its static block and the tail block is a
runtime value, a dynamic K stays whole. Oracles: numpy float64 for the interpreter's kernel (one kernel for every
shape, bounds-checked accesses), and the static compile for the configurator: the M, N, K of every Brgemm block a
static lowering of a shape bakes in are the ones the symbolic lowering's block evaluates to.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from snippets_core.codegen.interpreter import InterpreterTarget
from snippets_core.codegen.subgraph_codegen import generate_subgraph
from snippets_core.frontends import builder as sb
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.matmul import MatMul
from snippets_core.ir.ops.shape_ops import Transpose
from snippets_core.ir.ops.softmax import Softmax
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.shape import Shape, SymDim
from snippets_core.lowered.brgemm_utils import brgemm_geometry
from snippets_core.lowered.linear_ir import Config
from snippets_core.lowered.runtime_configurator import RuntimeConfigurator
from snippets_core.lowered.symbolic import DynamicShapeError, is_dynamic

RNG = np.random.default_rng(5)
S, M, N, K = (SymDim.of(x) for x in "SMNK")
_KERNELS: dict = {}  # type: ignore[type-arg]  # kernels shared by the parametrized cases


def _matmul(shape_a, shape_b):  # type: ignore[no-untyped-def]
    a, b = sb.parameter(shape_a, name="a"), sb.parameter(shape_b, name="b")
    return sb.model([sb.matmul(a, b)], [a, b])


def _transpose(x, order):  # type: ignore[no-untyped-def]
    return Transpose(x, Constant(np.array(order, dtype=np.int64)))


def _mha(seq, transposed: bool, mask: bool, softmax: bool = True):  # type: ignore[no-untyped-def]
    """softmax(q @ k^T + mask) @ v over 2 heads of 16 (``softmax=False``: the scores q @ k^T + mask). Keys are
    stored (1, 2, 16, seq). ``transposed``: q is stored (1, seq, 2, 16) and transposed to heads first in the body
    (a Transpose that moves the dynamic dim, folded into the Brgemm's layout), else stored (1, 2, seq, 16)."""
    q = Parameter("f32", Shape((1, seq, 2, 16) if transposed else (1, 2, seq, 16)), name="q")
    k = Parameter("f32", Shape((1, 2, 16, seq)), name="k")
    v = Parameter("f32", Shape((1, 2, seq, 16)), name="v")
    params = [q, k]
    scores: Any = MatMul(_transpose(q, [0, 2, 1, 3]) if transposed else q, k)
    if mask:
        bias = Parameter("f32", Shape((1, 1, 1, seq)), name="mask")
        params.append(bias)
        scores = Add(scores, bias)
    if not softmax:
        return Model([Result(scores, name="y")], params)
    return Model([Result(MatMul(Softmax(scores, axis=3), v), name="y")], [*params[:2], v, *params[2:]])


def _mha_inputs(seq: int, transposed: bool, mask: bool, softmax: bool = True) -> list[np.ndarray]:
    q = RNG.standard_normal((1, seq, 2, 16) if transposed else (1, 2, seq, 16)).astype(np.float32)
    ins = [q, RNG.standard_normal((1, 2, 16, seq)).astype(np.float32)]
    if softmax:
        ins.append(RNG.standard_normal((1, 2, seq, 16)).astype(np.float32))
    if mask:
        ins.append(RNG.standard_normal((1, 1, 1, seq)).astype(np.float32))
    return ins


def _mha_reference(ins: list[np.ndarray], transposed: bool, softmax: bool = True) -> np.ndarray:
    q, k = (x.astype(np.float64) for x in ins[:2])
    scores = (q.transpose(0, 2, 1, 3) if transposed else q) @ k
    if len(ins) > 2 + softmax:
        scores = scores + ins[2 + softmax]
    if not softmax:
        return scores
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ ins[2].astype(np.float64)


def _generate(body):  # type: ignore[no-untyped-def]
    sg = Subgraph(*[Parameter("f32", p.shape, name=f"o{i}") for i, p in enumerate(body.parameters)], body=body)
    return generate_subgraph(sg, InterpreterTarget(16),
                             lowering_config=Config(symbolic_dims=True, need_fill_tail_register=True))


def test_a_named_dim_keeps_its_name_through_transpose_and_matmul():
    gen = _generate(_mha(S, transposed=True, mask=False, softmax=False))
    brgemms = [e for e in gen.linear_ir.exprs if e.type_name == "Brgemm"]
    assert brgemms, "the MatMuls became Brgemms"
    # every dynamic extent is an expression of the one sequence symbol, never a positional d<k>
    symbols = {s for e in brgemms for d in (lambda g: (g.m, g.n, g.k))(brgemm_geometry(e)) if is_dynamic(d)
               for s in d.symbols()}
    assert symbols == {"s_S"}


def test_a_dynamic_dim_without_a_name_still_gets_a_kernel_per_shape():
    with pytest.raises(DynamicShapeError, match="dynamic M, N or K"):
        _generate(_mha(None, transposed=False, mask=False))


@pytest.mark.parametrize(("m", "n"), [(1, 1), (31, 63), (32, 64), (33, 65), (70, 130), (64, 128), (5, 200)])
def test_one_kernel_for_a_dynamic_m_and_n_runs_every_tail(m, n):
    kernel = _KERNELS.setdefault("mn", _generate(_matmul((2, M, 600), (2, 600, N))).kernel)  # K 600: 512 + 88
    a = RNG.standard_normal((2, m, 600)).astype(np.float32)
    b = RNG.standard_normal((2, 600, n)).astype(np.float32)
    (c,) = kernel.run([a, b])
    np.testing.assert_allclose(c.reshape(2, m, n), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k", [1, 7, 16, 511, 512, 513, 1100])
def test_one_kernel_for_a_dynamic_k_keeps_k_whole(k):
    gen = _KERNELS.setdefault("k", _generate(_matmul((1, 40, K), (1, K, 70))))
    assert {brgemm_geometry(e).beta for e in gen.linear_ir.exprs if e.type_name == "Brgemm"} == {0.0}
    a = RNG.standard_normal((1, 40, k)).astype(np.float32)
    b = RNG.standard_normal((1, k, 70)).astype(np.float32)
    (c,) = gen.kernel.run([a, b])
    np.testing.assert_allclose(c.reshape(1, 40, 70), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)





@pytest.mark.parametrize("transposed", [True, False])
@pytest.mark.parametrize("mask", [True, False])
def test_one_attention_scores_kernel_runs_every_sequence_length(transposed, mask):
    kernel = _generate(_mha(S, transposed, mask, softmax=False)).kernel
    for seq in [*range(1, 71, 3), 32, 64, 65, 70]:  # tails of the M (32) and N (64) blocks and whole blocks
        ins = _mha_inputs(seq, transposed, mask, softmax=False)
        (out,) = kernel.run(ins)
        np.testing.assert_allclose(out.reshape(1, 2, seq, seq), _mha_reference(ins, transposed, softmax=False),
                                   rtol=1e-5, atol=1e-5, err_msg=f"seq {seq}")
    assert kernel.configurator.computed >= 20  # one kernel, a block per sequence length


@pytest.mark.parametrize("transposed", [True, False])
@pytest.mark.parametrize("mask", [True, False])
def test_one_whole_mha_kernel_runs_every_sequence_length(transposed, mask):
    # the scores between its products live in scratchpad buffers of dynamic size (one M block x seq columns): the
    # clusters after the first sit at offsets known only at run time, read from the block like the extents
    gen = _generate(_mha(S, transposed, mask))
    offsets = [e.offset for e in gen.linear_ir.get_buffers()]
    assert any(is_dynamic(o) for o in offsets), "no buffer at a dynamic offset: the test would prove nothing"
    for seq in [1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 70]:
        ins = _mha_inputs(seq, transposed, mask)
        (out,) = gen.kernel.run(ins)
        np.testing.assert_allclose(out.reshape(1, 2, seq, 16), _mha_reference(ins, transposed), rtol=1e-5,
                                   atol=1e-5, err_msg=f"seq {seq}")


def _blocks(gen) -> list[tuple[object, object, object, float]]:  # type: ignore[no-untyped-def]
    return [(g.m, g.n, g.k, g.beta) for g in map(brgemm_geometry, (e for e in gen.linear_ir.exprs
                                                                   if e.type_name == "Brgemm"))]


@pytest.mark.parametrize("transposed", [True, False])
def test_the_configurator_computes_the_brgemm_blocks_a_static_compile_bakes_in(transposed):
    sym = _generate(_mha(S, transposed, mask=True, softmax=False))
    blocks = _blocks(sym)
    codes = [d.code() for b in blocks for d in b[:3] if is_dynamic(d)]
    assert codes, "no dynamic Brgemm extent: the test would prove nothing"
    inputs = [tuple(d.code() if is_dynamic(d) else d for d in p.output_descs[0].shape) for p in sym.linear_ir.parameters]
    configurator = RuntimeConfigurator(inputs, [], codes, ())
    for seq in (2, 31, 33, 64, 65, 70, 100):
        static = _generate(_mha(seq, transposed, mask=True, softmax=False))
        shapes = [tuple(p.output_descs[0].shape) for p in static.linear_ir.parameters]
        values = iter(configurator.configure(shapes).values)
        evaluated = [tuple(next(values) if is_dynamic(d) else d for d in b[:3]) + (b[3],) for b in blocks]
        # the symbolic kernel has every block a shape may need (a tail that is 0 runs no iteration)
        assert set(_blocks(static)) <= set(evaluated), seq
        assert {b for b in evaluated if 0 not in b[:3]} <= set(_blocks(static)) | {
            b for b in evaluated if b[0] == 32 and seq < 32 or b[1] == 64 and seq < 64}, seq


@pytest.mark.parametrize("transposed", [True, False])
def test_the_configurator_places_the_whole_mha_buffers_a_static_compile_sizes(transposed):
    # per sequence length, the configurator's Brgemm blocks are the static compile's, and the buffers of dynamic size
    # (offsets and the scratchpad size from the block) are disjoint clusters inside the scratchpad, which is at
    # least as large as the static compile's (that one shares memory between clusters alive at different times)
    sym = _generate(_mha(S, transposed, mask=True))
    ir = sym.linear_ir
    blocks = _blocks(sym)
    bufs = {b.cluster_id: (b.offset, b.allocation_size) for b in ir.get_buffers()}
    values = [*(d for b in blocks for d in b[:3]), *(v for ob in bufs.values() for v in ob),
              ir.static_buffer_scratchpad_size]
    codes = [v.code() for v in values if is_dynamic(v)]
    assert sum(is_dynamic(o) for o, _ in bufs.values()) >= 1, "no buffer at a dynamic offset"
    inputs = [tuple(d.code() if is_dynamic(d) else d for d in p.output_descs[0].shape) for p in ir.parameters]
    configurator = RuntimeConfigurator(inputs, [], codes, ())
    for seq in (1, 2, 31, 33, 64, 65, 100):
        static = _generate(_mha(seq, transposed, mask=True))
        shapes = [tuple(p.output_descs[0].shape) for p in static.linear_ir.parameters]
        block = iter(configurator.configure(shapes).values)
        got = [next(block) if is_dynamic(v) else v for v in values]
        n_dims = 3 * len(blocks)
        evaluated = {tuple(got[3 * i:3 * i + 3]) + (blocks[i][3],) for i in range(len(blocks))}
        assert set(_blocks(static)) <= evaluated, seq
        # clusters of dynamic size never share memory (static ones may, when alive at different times)
        sized = [i for i, (_, size) in enumerate(bufs.values()) if is_dynamic(size)]
        spans = sorted((got[n_dims + 2 * i], got[n_dims + 2 * i] + got[n_dims + 2 * i + 1]) for i in sized)
        scratchpad = got[-1]
        assert all(lo >= 0 and lo % 64 == 0 for lo, _ in spans), spans
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])) and spans[-1][1] <= scratchpad, (seq, spans)
        assert static.linear_ir.static_buffer_scratchpad_size <= scratchpad, seq

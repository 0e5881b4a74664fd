"""BrgemmBlocking, SplitLoops and the buffers between two Brgemms, checked on the LinearIR's structure.

Expected numbers come from the blocking rules (M 32, N 64, K 512 / 1024 when K > 1024, a dim no larger than its
block is processed whole, loops M -> N -> K from outside in), not from running the passes.
"""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.codegen.interpreter import InterpreterTarget
from snippets_core.codegen.subgraph_codegen import generate_subgraph
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.ir.ops.matmul import MatMul
from snippets_core.ir.ops.softmax import Softmax
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.lowered.brgemm_utils import BRGEMM_BETA, brgemm_geometry
from snippets_core.lowered.linear_ir import Config, LinearIR
from snippets_core.lowered.loop_info import LoopPortType
from snippets_core.lowered.passes.brgemm_blocking import BrgemmBlocking
from snippets_core.lowered.passes.mark_loops import MarkLoops
from snippets_core.lowered.pipeline import control_flow_pipeline
from snippets_core.lowered.port_descriptor import FULL_DIM
from snippets_core.passes.data_flow_pipeline import DataFlowConfig, data_flow_pipeline


def _body(model: Model) -> Model:
    body = model.clone()
    data_flow_pipeline(DataFlowConfig.for_body(body), []).run(body)
    return body


def _matmul(m: int, k: int, n: int) -> Model:
    a, b = Parameter("f32", (1, m, k), name="a"), Parameter("f32", (1, k, n), name="b")
    return Model([Result(MatMul(a, b), name="c")], [a, b])


def _mha(m: int, k: int, n: int, d: int) -> Model:
    q, kt = Parameter("f32", (1, m, k), name="q"), Parameter("f32", (1, k, n), name="kt")
    v, bias = Parameter("f32", (1, n, d), name="v"), Parameter("f32", (1, 1, n), name="bias")
    y = MatMul(Softmax(Add(MatMul(q, kt), bias), axis=-1), v)
    return Model([Result(y, name="y")], [q, kt, v, bias])


def _blocked(model: Model, **blocks: int) -> LinearIR:
    ir = LinearIR(_body(model), Config(vector_size=16))
    ir.loop_depth = 2
    MarkLoops(16).run(ir)
    BrgemmBlocking(**blocks).run(ir)
    return ir


def _loops_of(ir: LinearIR, expr) -> list[tuple[int, int, int]]:  # type: ignore[no-untyped-def]
    lm = ir.loop_manager
    return [(lm.get_loop_info(i).work_amount, lm.get_loop_info(i).increment, lm.get_loop_info(i).dim_idx)
            for i in expr.loop_ids]


def _brgemms(ir: LinearIR) -> list:  # type: ignore[type-arg]
    return [e for e in ir.exprs if e.type_name == "Brgemm"]


@pytest.mark.parametrize(("mkn", "loops"), [
    ((32, 512, 64), []),                                             # every dim fits its block
    ((33, 8, 8), [(33, 32, 1)]),                                     # M only
    ((100, 600, 130), [(100, 32, 1), (130, 64, 0), (600, 512, 0)]),  # M -> N -> K, outside in
    ((8, 1100, 8), [(1100, 1024, 0)]),                               # K > 1024 -> block 1024
    ((8, 1024, 65), [(65, 64, 0), (1024, 512, 0)]),                  # K = 1024 is not > 1024
])
def test_default_blocks_and_loop_order(mkn, loops):
    ir = _blocked(_matmul(*mkn))
    (brgemm,) = _brgemms(ir)
    assert _loops_of(ir, brgemm) == loops


def test_subtensors_are_the_blocks_and_full_dims_stay_full():
    ir = _blocked(_matmul(100, 16, 130))
    (brgemm,) = _brgemms(ir)
    assert brgemm.input_descs[0].subtensor == (32, FULL_DIM)
    assert brgemm.input_descs[1].subtensor == (FULL_DIM, 64)
    assert brgemm.output_descs[0].subtensor == (32, 64)
    g = brgemm_geometry(brgemm)
    assert (g.m, g.n, g.k) == (32, 64, 16)
    assert (g.a.row_stride, g.b.row_stride, g.c.row_stride) == (16, 130, 130)


def test_loop_ports_follow_the_operands():
    ir = _blocked(_matmul(100, 600, 130))
    (brgemm,) = _brgemms(ir)
    m_loop, n_loop, k_loop = (ir.loop_manager.get_loop_info(i) for i in brgemm.loop_ids)
    types = [[(p.type, p.dim_idx) for p in info.all_ports()] for info in (m_loop, n_loop, k_loop)]
    inc, keep = LoopPortType.INCREMENTED, LoopPortType.NOT_INCREMENTED
    assert types[0] == [(inc, 1), (keep, 1), (inc, 1)]   # M: rows of A and C
    assert types[1] == [(keep, 0), (inc, 0), (inc, 0)]   # N: columns of B and C
    assert types[2] == [(inc, 0), (inc, 1), (keep, 0)]   # K: columns of A, rows of B; C accumulates
    assert brgemm.node.rt_info[BRGEMM_BETA] == 1.0


def test_custom_blocks():
    ir = _blocked(_matmul(100, 600, 130), m_block=16, n_block=48, k_block=256)
    (brgemm,) = _brgemms(ir)
    assert _loops_of(ir, brgemm) == [(100, 16, 1), (130, 48, 0), (600, 256, 0)]


def test_split_loops_share_the_m_loop_and_buffers_hold_one_block():
    ir = LinearIR(_body(_mha(100, 16, 40, 8)), Config(vector_size=16))
    ir.loop_depth = 2
    control_flow_pipeline(ir.config).run(ir)
    b0, b1 = _brgemms(ir)
    assert b0.loop_ids[0] == b1.loop_ids[0]  # one M-block loop around both products
    outer = ir.loop_manager.get_loop_info(b0.loop_ids[0])
    assert (outer.work_amount, outer.increment) == (100, 32)
    # every op between the products is inside the shared M loop
    first, last = ir.index(b0), ir.index(b1)
    assert all(e.loop_ids[:1] == b0.loop_ids[:1] for e in ir.exprs[first:last + 1] if e.type_name != "LoopEnd")
    # the buffers next to a Brgemm hold one M block of the scores (32 rows x 40 columns of f32), not the
    # whole matrix; the ones inside the softmax one row
    next_to_brgemm = [b for b in ir.get_buffers()
                      if b.input_expr(0).type_name == "Brgemm" or any(c.expr.type_name == "Brgemm" for c in b.consumers(0))]
    assert [b.allocation_size for b in next_to_brgemm] == [32 * 40 * 4] * 2
    assert {b.allocation_size for b in ir.get_buffers()} - {32 * 40 * 4} == {40 * 4}


def test_blocking_disabled_keeps_whole_matrices():
    ir = LinearIR(_body(_mha(100, 16, 40, 8)), Config(vector_size=16))
    ir.loop_depth = 2
    pipeline = control_flow_pipeline(ir.config)
    pipeline.disable("brgemm-blocking")
    pipeline.run(ir)
    b0, b1 = _brgemms(ir)
    assert brgemm_geometry(b0).m == 100 and brgemm_geometry(b1).m == 100
    assert max(b.allocation_size for b in ir.get_buffers()) == 100 * 40 * 4  # the whole scores matrix


def test_tail_iterations_shrink_blocks_and_first_k_block_writes():
    a, b = Parameter("f32", (1, 40, 600), name="a"), Parameter("f32", (1, 600, 100), name="b")
    sg = Subgraph(Parameter("f32", (1, 40, 600)), Parameter("f32", (1, 600, 100)),
                  body=Model([Result(MatMul(a, b), name="c")], [a, b]))
    gen = generate_subgraph(sg, InterpreterTarget(16))
    blocks = [(g.m, g.n, g.k, g.beta) for g in map(brgemm_geometry, _brgemms(gen.linear_ir))]
    # M 40 = 32 + 8, N 100 = 64 + 36, K 600 = 512 (beta 0) + 88 (beta 1): every combination once
    expected = sorted((m, n, k, beta) for m in (32, 8) for n in (64, 36) for k, beta in ((512, 0.0), (88, 1.0)))
    assert sorted(blocks) == expected
    rng = np.random.default_rng(3)
    xa, xb = rng.standard_normal((1, 40, 600)).astype(np.float32), rng.standard_normal((1, 600, 100)).astype(np.float32)
    (c,) = gen.kernel.run([xa, xb])
    np.testing.assert_allclose(c.reshape(1, 40, 100), xa.astype(np.float64) @ xb, rtol=1e-4, atol=1e-4)


def test_tuned_blocking_placed_before_the_default_wins():
    from snippets_core.lowered.passes.brgemm_blocking import blocking_from_options

    a, b = Parameter("f32", (1, 40, 600), name="a"), Parameter("f32", (1, 600, 100), name="b")
    sg = Subgraph(Parameter("f32", (1, 40, 600)), Parameter("f32", (1, 600, 100)),
                  body=Model([Result(MatMul(a, b), name="c")], [a, b]))
    passes = blocking_from_options({"brgemm_m_block": 16, "brgemm_n_block": 48, "brgemm_k_block": 256})
    gen = generate_subgraph(sg, InterpreterTarget(16), positioned_passes=passes)
    blocks = {(g.m, g.n, g.k) for g in map(brgemm_geometry, _brgemms(gen.linear_ir))}
    # M 40 = 16 + 16 + 8, N 100 = 48 + 48 + 4, K 600 = 256 + 256 + 88
    assert {m for m, _, _ in blocks} == {16, 8} and {n for _, n, _ in blocks} == {48, 4}
    assert {k for _, _, k in blocks} == {256, 88}

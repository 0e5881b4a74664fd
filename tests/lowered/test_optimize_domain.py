"""OptimizeDomain against the 16 vectors of OpenVINO's lowered/pass/optimize_domain.cpp (reference §4.4)."""

from __future__ import annotations

import pytest

from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.lowered.linear_ir import Config, LinearIR
from snippets_core.lowered.passes.optimize_domain import OptimizeDomain

# (min_jit_work_amount, min_parallel_work_amount, input shapes, expected master shape, expected loop depth)
VECTORS = [
    (256, 4, [(14, 15, 1, 17), (14, 15, 1, 17)], (1, 1, 14, 255), 1),
    (256, 4, [(14, 15, 16, 1), (14, 15, 16, 1)], (1, 1, 14, 240), 1),
    (256, 18, [(14, 15, 1, 17), (14, 15, 1, 17)], (1, 14, 15, 17), 1),
    (256, 18, [(14, 15, 16, 1), (14, 15, 16, 1)], (1, 14, 15, 16), 1),
    (256, 4, [(14, 15, 16, 17), (14, 15, 16, 17)], (1, 14, 15, 272), 2),
    (16, 4, [(14, 15, 16, 17), (14, 15, 16, 17)], (14, 15, 16, 17), 2),
    (256, 18, [(14, 15, 16, 17), (14, 15, 16, 17)], (1, 14, 15, 272), 1),
    (256, 4, [(14, 15, 16, 1), (14, 15, 1, 17)], (14, 15, 16, 17), 2),
    (256, 4, [(14, 15, 1, 17), (14, 15, 16, 17)], (14, 15, 16, 17), 2),
    (256, 4, [(14, 15, 16, 16), (16, 16)], (1, 14, 15, 256), 2),
    (256, 18, [(4, 5, 6, 7), (4, 5, 6, 7)], (1, 4, 5, 42), 1),
    (256, 32, [(4, 5, 6, 7), (4, 5, 6, 7)], (4, 5, 6, 7), 1),
    (256, 2, [(256, 256, 3), (3,)], (256, 256, 3), 2),
    (256, 32, [(4, 5), (4, 5)], (4, 5), 1),
    (256, 32, [(5,), (5,)], (5,), 1),
    (256, 1, [(4, 1, 6, 7), (4, 1, 6, 7)], (1, 1, 1, 168), 1),
]


@pytest.mark.parametrize("min_jit, min_par, shapes, master, depth", VECTORS)
def test_optimize_domain_vectors(min_jit, min_par, shapes, master, depth):
    p0, p1 = Parameter("f32", shapes[0], name="p0"), Parameter("f32", shapes[1], name="p1")
    body = Model([Result(Add(p0, p1), name="r")], [p0, p1])
    ir = LinearIR(body, Config(min_kernel_work_amount=min_jit, min_parallel_work_amount=min_par))
    OptimizeDomain().run(ir)
    assert ir.get_master_shape() == master
    assert ir.loop_depth == depth


def test_collapsed_shapes_reach_every_port():
    p0, p1 = Parameter("f32", (4, 5, 6, 7), name="p0"), Parameter("f32", (4, 5, 6, 7), name="p1")
    body = Model([Result(Add(p0, p1), name="r")], [p0, p1])
    ir = LinearIR(body, Config(min_parallel_work_amount=18))
    assert OptimizeDomain().run(ir)
    for e in ir.exprs:
        for d in e.input_descs + e.output_descs:
            assert d.shape == (1, 4, 5, 42)


def test_disabled_optimization_means_tile_rank_two():
    p0 = Parameter("f32", (4, 5, 6, 7), name="p0")
    body = Model([Result(Add(p0, p0), name="r")], [p0])
    ir = LinearIR(body, Config(enable_domain_optimization=False))
    assert not OptimizeDomain().run(ir)
    assert ir.loop_depth == 2 and ir.get_master_shape() == (4, 5, 6, 7)


def test_whole_dim_ops_keep_the_domain():
    """A last-axis reduction sees whole rows: merging dims would change them, so no collapse, tile rank 2."""
    from snippets_core.ir.ops.snippets import SnippetsReduceSum
    from snippets_core.passes.graph_utils import set_reduce_subtensors

    p0 = Parameter("f32", (10, 2, 2), name="p0")
    red = SnippetsReduceSum(p0, axis=-1)
    set_reduce_subtensors(red)
    ir = LinearIR(Model([Result(red, name="r")], [p0]), Config(min_parallel_work_amount=1))
    assert not OptimizeDomain().run(ir)
    assert ir.get_master_shape() == (10, 2, 1) and ir.loop_depth == 2

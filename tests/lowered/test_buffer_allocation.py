"""AllocateBuffers on OpenVINO's lowered/pass/buffer_allocation.cpp case (reference §6.1):
``Add -> Buffer -> Relu -> Buffer -> Exp`` on [1,3,100,100], loop depth 2, vector size 16:
non-optimized 80000 bytes / 2 register groups / 2 clusters, optimized 40000 / 1 / 1.
The LinearIR is built with explicit Buffers and subtensors, and the pipeline is the test's own."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.codegen.generator import Generator
from snippets_core.codegen.interpreter import InterpreterTarget
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.ir.ops.snippets import Buffer
from snippets_core.ir.ops.unary import Exp, Relu
from snippets_core.lowered.linear_ir import Config, LinearIR
from snippets_core.lowered.passes.allocate_buffers import AllocateBuffers
from snippets_core.lowered.passes.clean_repeated_data_pointer_shifts import CleanRepeatedDataPointerShifts
from snippets_core.lowered.passes.fuse_loops import FuseLoops
from snippets_core.lowered.passes.init_loops import InitLoops
from snippets_core.lowered.passes.insert_buffers import InsertBuffers
from snippets_core.lowered.passes.insert_load_store import InsertLoadStore
from snippets_core.lowered.passes.insert_loops import InsertLoops
from snippets_core.lowered.passes.mark_loops import MarkLoops
from snippets_core.lowered.passes.reduce_decomposition import ReduceDecomposition
from snippets_core.lowered.pipeline import pre_generation_pipeline, validation_pipeline
from snippets_core.lowered.port_descriptor import FULL_DIM, set_port_descriptor
from snippets_core.passes.pass_manager import PassPipeline

VECTOR = 16
SHAPE = (1, 3, 100, 100)


def _mark(node, subtensor):
    for i in range(len(node.inputs)):
        set_port_descriptor(node, "in", i, subtensor=subtensor)
    for i in range(len(node.outputs)):
        set_port_descriptor(node, "out", i, subtensor=subtensor)


def _lowered(optimized: bool, vector: int = VECTOR, shape=SHAPE) -> LinearIR:
    p0, p1 = Parameter("f32", shape, name="p0"), Parameter("f32", shape, name="p1")
    add = Add(p0, p1)
    b0 = Buffer(add)
    relu = Relu(b0)
    b1 = Buffer(relu)
    exp = Exp(b1)
    body = Model([Result(exp, name="r")], [p0, p1])
    for n in (add, relu, exp):
        _mark(n, (1, vector))
    for n in (b0, b1):
        _mark(n, (FULL_DIM, FULL_DIM))
    ir = LinearIR(body, Config(vector_size=vector, loop_depth=2))
    PassPipeline("buffer-allocation-test", [
        MarkLoops(vector), ReduceDecomposition(vector), FuseLoops(), InsertBuffers(), InsertLoadStore(vector),
        InitLoops(), InsertLoops(), AllocateBuffers(optimized)]).run(ir)
    return ir


@pytest.mark.parametrize("optimized, size, groups, clusters", [(False, 80000, 2, 2), (True, 40000, 1, 1)])
def test_eltwise_buffer_allocation(optimized, size, groups, clusters):
    ir = _lowered(optimized)
    bufs = ir.get_buffers()
    assert len(bufs) == 2
    assert ir.static_buffer_scratchpad_size == size
    assert len({b.reg_group for b in bufs}) == groups
    assert len({b.cluster_id for b in bufs}) == clusters


@pytest.mark.parametrize("optimized", [False, True])
@pytest.mark.parametrize("width, shape", [(4, (1, 3, 10, 10)), (8, (2, 3, 7, 13)), (16, (1, 2, 5, 33))])
def test_buffered_body_runs_like_numpy(optimized, width, shape):
    """Shared registers and in-place memory still compute exp(relu(a + b))."""
    ir = _lowered(optimized, width, shape)
    CleanRepeatedDataPointerShifts().run(ir)  # buffers sharing a register are moved once per loop
    target = InterpreterTarget(width)
    validation_pipeline().run(ir)
    pre_generation_pipeline(target).run(ir)
    kernel = Generator(target).generate(ir)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    (out,) = kernel.run([a, b])
    np.testing.assert_allclose(out.reshape(shape), np.exp(np.maximum(a.astype(np.float64) + b, 0)), rtol=1e-6)

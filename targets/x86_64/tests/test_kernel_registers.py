"""Register pressure in x86-64 kernels: aux registers taken from values live across an emitter are spilled to
the stack and restored; RegSpillBegin/End save and restore the live registers around an expression; a body
needing more than 32 vector registers falls back. Numpy (float64) is the oracle; iced's disassembly shows the
spill code."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.codegen.generator import Generator
from snippets_core.config import CompileConfig
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add, Multiply
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.ops.unary import Exp, Tanh
from snippets_core.lowered.pipeline import lower
from snippets_core.passes.data_flow_pipeline import run_data_flow
from snippets_core.plugins.host import get_host
from snippets_x86_64.runtime import FALLBACK_KEY, KernelExecutor, compile_subgraph, lowering_config
from snippets_x86_64.target_machine import X86_64TargetMachine

pytestmark = pytest.mark.avx512
SHAPE = (4, 37)


def wide_body(n):  # type: ignore[no-untyped-def]
    """n values x * c_k all live across tanh(exp(0.01 * sum)), then sum_k s * v_k."""
    x = Parameter("f32", SHAPE, name="x")
    vals = [Multiply(x, Constant(np.float32(1 + k / 8))) for k in range(n)]
    total = vals[0]
    for v in vals[1:]:
        total = Add(total, v)
    s = Tanh(Exp(Multiply(total, Constant(np.float32(0.01)))))
    acc = Multiply(s, vals[0])
    for v in vals[1:]:
        acc = Add(acc, Multiply(s, v))
    return Model([Result(acc, name="y")], [x])


def wide_ref(x, n):  # type: ignore[no-untyped-def]
    vs = [x.astype(np.float64) * np.float32(1 + k / 8) for k in range(n)]
    s = np.tanh(np.exp(sum(vs) * 0.01))
    return sum(s * v for v in vs)


def generate(body, tm):  # type: ignore[no-untyped-def]
    run_data_flow(body)
    ir = lower(body, lowering_config(body, 1), tm)
    return Generator(tm).generate(ir)


def run(kernel, x):  # type: ignore[no-untyped-def]
    return KernelExecutor(kernel, [(np.float32, SHAPE)], [(np.float32, SHAPE)], 1)([x])[0]


@pytest.mark.parametrize("n", [4, 28, 29])
def test_aux_registers_spill_live_values_under_pressure(n):
    kernel = generate(wide_body(n), X86_64TargetMachine())
    spills = sum("[rsp" in line for line in kernel.disassemble().splitlines())
    assert (spills > 0) == (n >= 28)  # with few live values there is no spill at all
    x = np.random.default_rng(n).standard_normal(SHAPE).astype(np.float32)
    np.testing.assert_allclose(run(kernel, x), wide_ref(x, n), rtol=2e-5, atol=1e-5)


def test_more_live_values_than_vector_registers_falls_back():
    outer = Parameter("f32", SHAPE, name="x")
    sg = Subgraph(outer, body=wide_body(31))
    assert compile_subgraph(sg, CompileConfig.from_mapping({}), get_host()) is None
    assert "not enough vec registers" in sg.rt_info[FALLBACK_KEY]


class CallingExpTarget(X86_64TargetMachine):
    """Treats Exp as if its emitter called out of the kernel, so InsertRegSpills wraps it in RegSpills."""

    def abi_call_ops(self) -> frozenset[str]:
        return frozenset({"Exp"})


def test_reg_spill_begin_and_end_save_and_restore_the_live_registers():
    kernel = generate(wide_body(6), CallingExpTarget())
    lines = kernel.disassemble().splitlines()
    saves = [line for line in lines if "vmovups [rsp" in line]
    restores = [line for line in lines if "vmovups zmm" in line and "[rsp" in line]
    assert len(saves) >= 6 and len(restores) == len(saves)  # the six live values at least, each restored
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    np.testing.assert_allclose(run(kernel, x), wide_ref(x, 6), rtol=2e-5, atol=1e-5)

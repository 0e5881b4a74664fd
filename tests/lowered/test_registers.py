"""Register assignment: values whose live ranges do not overlap share registers, values that are
live at the same time never do, data pointers follow the kernel ABI order, and a pool that is too
small is a typed error naming the expression."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.codegen.interpreter import InterpreterTarget, run_body
from snippets_core.errors import CodegenError
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add, Multiply
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.ir.ops.unary import Abs, Exp, Negative, Relu, Sigmoid, Tanh
from snippets_core.lowered.linear_ir import Config
from snippets_core.lowered.pipeline import lower
from snippets_core.lowered.port_descriptor import RegType

CHAIN = [Relu, Exp, Negative, Abs, Tanh, Sigmoid] * 2


def _chain_body():
    p = Parameter("f32", (4, 21), name="x")
    y = p
    for op in CHAIN:
        y = op(y)
    q = Parameter("f32", (4, 21), name="w")
    return Model([Result(Add(y, q), name="y"), Result(Multiply(p, q), name="z")], [p, q])


def _vec_values(ir):
    """(producer position, last consumer position, register) of every vector value, recomputed from
    the final LinearIR: a value used in a loop that does not contain its producer lives to the loop end."""
    pos = {id(e): i for i, e in enumerate(ir.exprs)}
    loop_end = {e.node.loop_id: i for i, e in enumerate(ir.exprs) if e.type_name == "LoopEnd"}
    out = []
    for e in ir.exprs:
        for j, conn in enumerate(e.output_connectors):
            reg = e.output_descs[j].reg
            if reg is None or reg.type != RegType.vec or not conn.get_consumers():
                continue
            end = pos[id(e)]
            for c in conn.get_consumers():
                end = max(end, pos[id(c.expr)])
                for lp in c.expr.loop_ids:
                    if lp not in e.loop_ids:
                        end = max(end, loop_end[lp])
            out.append((pos[id(e)], end, reg))
    return out


def test_non_overlapping_live_ranges_share_registers():
    ir = lower(_chain_body(), Config(vector_size=8), InterpreterTarget(8))
    values = _vec_values(ir)
    regs = {r for _, _, r in values}
    assert len(values) > 2 * len(regs)  # 12 chained values and loads in a handful of registers
    assert len(regs) <= 4


def test_overlapping_live_ranges_never_share():
    ir = lower(_chain_body(), Config(vector_size=8), InterpreterTarget(8))
    values = _vec_values(ir)
    for i, (s1, e1, r1) in enumerate(values):
        for s2, e2, r2 in values[i + 1:]:
            if r1 == r2:
                assert e1 < s2 or e2 < s1, f"{r1} holds two values live at once: [{s1},{e1}] and [{s2},{e2}]"


def test_chain_still_computes():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((4, 21)).astype(np.float32), rng.standard_normal((4, 21)).astype(np.float32)
    y = x.astype(np.float64)
    for f in [lambda v: np.maximum(v, 0), np.exp, np.negative, np.abs, np.tanh, lambda v: 1 / (1 + np.exp(-v))] * 2:
        y = f(y)
    outs = run_body(_chain_body(), [x, w], vector_size=8)
    np.testing.assert_allclose(outs[0], y + w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs[1], x.astype(np.float64) * w, rtol=1e-6)


def test_data_pointers_follow_the_kernel_abi_order():
    ir = lower(_chain_body(), Config(vector_size=8), InterpreterTarget(8))
    regs = [p.output_descs[0].reg for p in ir.parameters] + [r.input_descs[0].reg for r in ir.results]
    assert [(r.type, r.idx) for r in regs] == [(RegType.gpr, i) for i in range(4)]


def test_too_few_vector_registers_is_a_codegen_error():
    with pytest.raises(CodegenError, match="not enough vec registers at expression"):
        lower(_chain_body(), Config(vector_size=8), InterpreterTarget(8, vecs=1))


def test_too_few_gprs_for_data_pointers():
    with pytest.raises(CodegenError, match="data pointers"):
        lower(_chain_body(), Config(vector_size=8), InterpreterTarget(8, gprs=3))


def test_reg_spills_around_calls_hold_the_live_registers():
    """Registers live across a 'call' (here Exp, declared an ABI call) are saved around it; the
    expression's own registers are not."""
    from snippets_core.codegen.generator import Generator

    class CallingTarget(InterpreterTarget):
        def abi_call_ops(self):
            return frozenset({"Exp"})

    target = CallingTarget(8)
    ir = lower(_chain_body(), Config(vector_size=8), target)
    exps = [i for i, e in enumerate(ir.exprs) if e.type_name == "Exp"]
    assert exps
    for i in exps:
        begin, exp, end = ir.exprs[i - 1], ir.exprs[i], ir.exprs[i + 1]
        assert (begin.type_name, end.type_name) == ("RegSpillBegin", "RegSpillEnd")
        own = {d.reg for d in exp.input_descs + exp.output_descs}
        spilled = set(begin.node.regs_to_spill)
        assert spilled and not (spilled & own)
        assert {r for r in exp.live_regs if r not in own} == spilled
        assert any(r.type == RegType.gpr for r in spilled)  # at least the data pointers
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((4, 21)).astype(np.float32), rng.standard_normal((4, 21)).astype(np.float32)
    outs = Generator(target).generate(ir).run([x, w])
    np.testing.assert_allclose(outs[1].reshape(4, 21), x.astype(np.float64) * w, rtol=1e-6)

"""Symbolic lowering and the RuntimeConfigurator.

The oracle of the configurator is the static compile: for many shapes X, the loop infos (work amounts,
increments, pointer increments, finalization offsets), the data offsets and the parallel domain of a LinearIR
lowered once with symbolic dims, evaluated for X by the RuntimeConfigurator, equal the numbers a static
lowering of X bakes in. The interpreter runs the symbolic LinearIR with the configurator's block against numpy
float64, under its bounds checks.
"""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.codegen.interpreter import InterpreterTarget
from snippets_core.codegen.subgraph_codegen import generate_subgraph
from snippets_core.errors import InputError
from snippets_core.frontends import builder as sb
from snippets_core.ir.ops.io import Parameter
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.shape import Shape
from snippets_core.lowered.linear_ir import Config
from snippets_core.lowered.loop_info import UnifiedLoopInfo
from snippets_core.lowered.pipeline import lower
from snippets_core.lowered.runtime_configurator import RuntimeConfigurator
from snippets_core.lowered.symbolic import DynamicShapeError, SymInt, dim_symbol, is_dynamic, loop_iterations, low_mask
from snippets_core.passes.data_flow_pipeline import DataFlowConfig, data_flow_pipeline

RNG = np.random.default_rng(11)
D0, D1 = dim_symbol(0), dim_symbol(1)


# --- SymInt --------------------------------------------------------------------------------------------------------


def test_symint_normal_form_folds_what_the_passes_compute():
    fin = -(D0 * D1) * 4
    assert fin // 4 == -(D1 * D0) and fin % 2 == 0 and (D0 * 16) // 16 == D0
    assert str(D0 % 16) == "((d0) % 16)" and (D0 - D0) == 0 and D0 + 0 == D0
    assert (D0 // 16 * 16).evaluate({"d0": 37}) == 32 and (D0 % 16).evaluate({"d0": 37}) == 5
    assert low_mask(D0 % 16).evaluate({"d0": 19}) == 0b111 and low_mask(3) == 0b111
    tail = D0 % 16
    assert loop_iterations(tail, tail).evaluate({"d0": 32}) == 0 and loop_iterations(tail, tail).evaluate({"d0": 33}) == 1
    assert loop_iterations(D0 // 16 * 16, 16) == D0 // 16


def test_symint_decides_only_what_holds_for_every_shape():
    assert D0 != 1 and D0 == dim_symbol(0) and not (D0 < 0) and D0 >= 0
    with pytest.raises(DynamicShapeError, match="known only at run time"):
        bool(D0 % 16)
    with pytest.raises(DynamicShapeError, match="ordering"):
        _ = D0 < 16
    with pytest.raises(DynamicShapeError, match="number"):
        int(D0)
    with pytest.raises(DynamicShapeError, match="division by the dynamic value"):
        _ = 16 // D0


# --- the configurator against a static compile ---------------------------------------------------------------------


def _eltwise(shape_x, shape_y):  # type: ignore[no-untyped-def]
    x, y = sb.parameter(shape_x, name="x"), sb.parameter(shape_y, name="y")
    return sb.model([sb.multiply(sb.add(sb.relu(x), y), x)], [x, y])


def _softmax(shape):  # type: ignore[no-untyped-def]
    x = sb.parameter(shape, name="x")
    return sb.model([sb.softmax(sb.exp(x), -1)], [x])


def _mha(batch):  # type: ignore[no-untyped-def]
    q, kt = sb.parameter((batch, 2, 37, 16), name="q"), sb.parameter((batch, 2, 16, 37), name="kt")
    v = sb.parameter((batch, 2, 37, 16), name="v")
    return sb.model([sb.matmul(sb.softmax(sb.matmul(q, kt), 3), v)], [q, kt, v])


def _lowered(body, shapes=None):  # type: ignore[no-untyped-def]
    """(loop infos after InitLoops, final kernel data offsets + scratchpad size, domain) of ``body``, symbolic mode."""
    body = body.clone()
    if shapes is not None:
        for p, s in zip(body.parameters, shapes):
            p.shape = Shape(s)
        body.validate()
    data_flow_pipeline(DataFlowConfig.for_body(body)).run(body)
    loops: list = []

    def snapshot(p, ir, changed):  # type: ignore[no-untyped-def]
        if p.name == "init-loops":
            for _, info in ir.loop_manager:
                assert isinstance(info, UnifiedLoopInfo)
                ports = [(d.ptr_increment, d.finalization_offset, d.data_size) for d in info.port_descs()]
                loops.append((info.work_amount, info.increment, info.dim_idx, ports))

    target = InterpreterTarget(16)
    ir = lower(body, Config(symbolic_dims=True, need_fill_tail_register=True), target, after_pass=[snapshot])
    kernel = target.make_kernel_emitter(ir)
    offsets = [*kernel.data_offsets, [ir.static_buffer_scratchpad_size]]
    return loops, offsets, kernel.parallel_domain, [p.output_descs[0].shape for p in ir.parameters]


def _flatten(x):  # type: ignore[no-untyped-def]
    if isinstance(x, (list, tuple)):
        return [v for item in x for v in _flatten(item)]
    return [x]


def _codes(shape):  # type: ignore[no-untyped-def]
    return tuple(d.code() if is_dynamic(d) else d for d in shape)


@pytest.mark.parametrize(
    ("make", "dynamic", "shapes"),
    [
        (_eltwise, ((None, None), (None, 1)), [((r, c), (r, 1)) for r, c in [(3, 37), (2, 16), (2, 3), (5, 40)]]),
        (_eltwise, ((None, 7, None), (1, 7, None)), [((b, 7, c), (1, 7, c)) for b, c in [(2, 17), (4, 2), (3, 33)]]),
        (_softmax, ((None, 24),), [((n, 24),) for n in (2, 3, 9)]),
        (_softmax, ((None, None),), [((n, c),) for n, c in [(2, 3), (3, 16), (2, 37), (4, 100)]]),
        (_softmax, ((None, None, 19),), [((a, b, 19),) for a, b in [(2, 2), (2, 5), (3, 4)]]),
        (_mha, (None,), [((b, 2, 37, 16), (b, 2, 16, 37), (b, 2, 37, 16)) for b in (2, 3)]),
    ],
)
def test_the_configurator_computes_what_a_static_compile_bakes_in(make, dynamic, shapes):
    # dynamic dims are not 1 here: a static dim of 1 is a broadcast dim whose strides are 0, a dynamic one that is 1
    # at run time keeps its stride, which is never applied (its only index is 0, its loop runs once); the
    # interpreter tests below run dims of 1 against numpy
    sym_loops, sym_offsets, sym_domain, sym_inputs = _lowered(make(*dynamic))
    values = _flatten([sym_loops, sym_offsets, list(sym_domain)])
    dynamic_values = [v.code() for v in values if is_dynamic(v)]
    assert dynamic_values, "the body has no dynamic value: the test would prove nothing"
    configurator = RuntimeConfigurator([_codes(s) for s in sym_inputs], [], dynamic_values, ())
    for shape_set in shapes:
        static = _flatten(_lowered(make(*dynamic), shape_set)[:3])
        block = iter(configurator.configure(shape_set).values)
        evaluated = [next(block) if is_dynamic(v) else v for v in values]
        assert evaluated == static, shape_set


def test_the_configurator_rejects_contradicting_shapes_with_typed_errors():
    configurator = RuntimeConfigurator([("d1", "d0"), ("d1", 1)], [("d1", "d0")], ["4*d0"], ("d1",))
    cfg = configurator.configure([(3, 5), (3, 1)])
    assert cfg.values == (20,) and cfg.parallel_domain == (3,) and cfg.output_shapes == ((3, 5),)
    with pytest.raises(InputError, match=r"input 0 dim 0 is 3 and input 1 dim 0 is 4.*d1"):
        configurator.configure([(3, 5), (4, 1)])
    with pytest.raises(DynamicShapeError, match="broadcasting decided at run time"):
        configurator.configure([(1, 5), (4, 1)])
    with pytest.raises(InputError, match=r"input 1 must have shape \['\?', 1\]"):
        configurator.configure([(3, 5), (3, 2)])
    with pytest.raises(InputError, match="takes 2 inputs"):
        configurator.configure([(3, 5)])


def test_the_configurator_caches_a_bounded_number_of_shapes():
    configurator = RuntimeConfigurator([("d0",)], [("d0",)], ["d0 // 16", "((d0) % 16)"], (), max_cached=4)
    for n in range(10):
        assert configurator.configure([(n,)]).values == (n // 16, n % 16)
    assert configurator.configure([(9,)]) is configurator.configure([(9,)])
    assert configurator.describe()["cached_shapes"] == 4 and configurator.computed == 10


# --- the interpreter runs the symbolic LinearIR ------------------------------------------------------------------


def _generate(body):  # type: ignore[no-untyped-def]
    shape = body.parameters[0].shape
    sg = Subgraph(*[Parameter("f32", p.shape, name=f"o{i}") for i, p in enumerate(body.parameters)], body=body)
    assert not shape.is_static
    return generate_subgraph(sg, InterpreterTarget(16),
                             lowering_config=Config(symbolic_dims=True, need_fill_tail_register=True))


@pytest.mark.parametrize("cols", [*range(1, 41), 0])
def test_one_interpreted_kernel_runs_every_tail(cols):
    kernel = _KERNELS.setdefault("eltwise", _generate(_eltwise((None, None), (None, 1))).kernel)
    rows = int(RNG.integers(1, 4))
    x = RNG.standard_normal((rows, cols)).astype(np.float32)
    y = RNG.standard_normal((rows, 1)).astype(np.float32)
    (out,) = kernel.run([x, y])
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(out, (np.maximum(x64, 0) + y) * x64, rtol=1e-6, atol=1e-7)


def test_one_interpreted_softmax_kernel_runs_every_batch():
    kernel = _generate(_softmax((None, None, 21))).kernel
    for shape in [(1, 1, 21), (2, 3, 21), (3, 0, 21), (1, 7, 21)]:
        x = RNG.standard_normal(shape).astype(np.float32)
        (out,) = kernel.run([x])
        e = np.exp(np.exp(x.astype(np.float64)) - np.exp(x.astype(np.float64)).max(-1, keepdims=True))
        np.testing.assert_allclose(out.reshape(shape), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_one_interpreted_mha_kernel_runs_every_batch():
    kernel = _generate(_mha(None)).kernel
    for b in (1, 3):
        q, kt, v = (RNG.standard_normal(s).astype(np.float32) for s in [(b, 2, 37, 16), (b, 2, 16, 37), (b, 2, 37, 16)])
        (out,) = kernel.run([q, kt, v])
        scores = q.astype(np.float64) @ kt
        e = np.exp(scores - scores.max(-1, keepdims=True))
        np.testing.assert_allclose(out.reshape(b, 2, 37, 16), (e / e.sum(-1, keepdims=True)) @ v, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cols", [*range(1, 41), 0])
def test_a_softmax_over_a_dynamic_row_keeps_it_in_a_buffer_of_dynamic_size(cols):
    # the row's Buffer is d0 elements: the scratchpad size is a runtime parameter, the Fill of the tail too
    kernel = _KERNELS.setdefault("softmax", _generate(_softmax((None, None))).kernel)
    x = RNG.standard_normal((2, cols)).astype(np.float32)
    (out,) = kernel.run([x])
    if cols:
        e = np.exp(np.exp(x.astype(np.float64)) - np.exp(x.astype(np.float64)).max(-1, keepdims=True))
        np.testing.assert_allclose(out.reshape(2, cols), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


_KERNELS: dict = {}
assert isinstance(D0, SymInt)


def test_compile_model_on_the_interpreter_lowers_a_dynamic_subgraph_once():
    from snippets_core.runtime.compiled_model import compile_model

    x = sb.parameter((None, None), name="x")
    m = sb.model([sb.multiply(sb.exp(x), x)], [x])
    cm = compile_model(m, target="interpreter", config={"snippets_mode": "IgnoreCallback"})
    (step,) = [s for s in cm._steps if s.where == "interpreter"]
    for shape in [(2, 19), (1, 1), (3, 40)]:
        xv = RNG.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(cm({"x": xv})[cm.output_names[0]],
                                   np.exp(xv.astype(np.float64)) * xv, rtol=1e-6)
    assert step.run._execute.__name__ == "execute_dynamic"  # lowered once (inside the placement reporter)

"""Zero-size tensors (a dim of 0): the Subgraph compiles to a kernel whose zero work amount loops run no
iteration (InsertSpecificIterations keeps them as an empty main body), on x86_64_avx512 and on the LinearIR
interpreter. An empty output comes back empty with the right shape and dtype; a reduction over an empty axis
gives numpy's identity (sum 0, max -inf) in a non-empty output. Oracle: numpy."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.config import CompileConfig
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add, Multiply
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.reduce import ReduceMax, ReduceSum
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.ops.unary import Abs, Exp
from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64.runtime import FALLBACK_KEY, compile_subgraph

EMPTY_SHAPES = [(2, 0, 4), (3, 0), (0, 5), (0,), (0, 37), (4, 0, 19)]
RNG = np.random.default_rng(3)


def x86_executor(body: Model):  # type: ignore[no-untyped-def]
    """The x86 executor of a Subgraph around ``body`` (the core pipeline and this target only); must be a kernel."""
    outer = [Parameter(p.outputs[0].element_type, p.outputs[0].shape.to_tuple(), name=f"in{i}")
             for i, p in enumerate(body.parameters)]
    sg = Subgraph(*outer, body=body)
    executor = compile_subgraph(sg, CompileConfig.from_mapping({}), None)
    assert executor is not None, sg.rt_info.get(FALLBACK_KEY)
    return executor


def interpreter_run(body: Model, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """The body compiled for the LinearIR interpreter target; every Subgraph must run there."""
    cm = compile_model(body.clone(), target="interpreter", config={"snippets_mode": "IgnoreCallback"})
    subgraphs = [where for _, op, where in cm.placement() if op == "Subgraph"]
    assert subgraphs and set(subgraphs) == {"interpreter"}, cm.placement()
    out = cm({p.name: a for p, a in zip(body.parameters, arrays)})
    return [out[r.name] for r in body.results]


def eltwise_body(shape: tuple[int, ...]) -> Model:
    p, q = Parameter("f32", shape, name="p"), Parameter("f32", shape[-1:], name="q")
    return Model([Result(Exp(Add(Abs(p), q)), name="r"), Result(Multiply(p, p), name="sq")], [p, q])


def reduce_body(shape: tuple[int, ...]) -> Model:
    p = Parameter("f32", shape, name="p")
    axis = Constant(np.array([-1], np.int64))
    return Model([Result(ReduceMax(p, axis, keep_dims=True), name="mx"),
                  Result(ReduceSum(Abs(p), Constant(np.array([-1], np.int64)), keep_dims=True), name="s")], [p])


def eltwise_want(p: np.ndarray, q: np.ndarray) -> list[np.ndarray]:
    return [np.exp(np.abs(p) + q), p * p]


def reduce_want(p: np.ndarray) -> list[np.ndarray]:
    return [np.max(p, axis=-1, keepdims=True, initial=-np.inf), np.sum(np.abs(p), axis=-1, keepdims=True)]


def check(outs: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(outs) == len(want)
    for got, w in zip(outs, want):
        assert got.shape == w.shape and got.dtype == w.dtype
        np.testing.assert_allclose(got, w, rtol=1e-6)


@pytest.mark.avx512
@pytest.mark.parametrize("shape", EMPTY_SHAPES, ids=str)
def test_x86_empty_inputs_and_outputs(shape) -> None:  # type: ignore[no-untyped-def]
    p, q = np.zeros(shape, np.float32), np.zeros(shape[-1:], np.float32)
    check(x86_executor(eltwise_body(shape))([p, q]), eltwise_want(p, q))


@pytest.mark.avx512
@pytest.mark.parametrize("shape", EMPTY_SHAPES, ids=str)
def test_x86_reduction_over_empty_axis_gives_identity(shape) -> None:  # type: ignore[no-untyped-def]
    """(3, 0) reduced over its last axis is (3, 1) of -inf / 0; (0, 5) gives an empty (0, 1)."""
    p = np.zeros(shape, np.float32)
    check(x86_executor(reduce_body(shape))([p]), reduce_want(p))


@pytest.mark.avx512
def test_x86_empty_narrow_int_output() -> None:
    a, b = Parameter("i8", (0, 7), name="a"), Parameter("i8", (7,), name="b")
    body = Model([Result(Add(a, b), name="r")], [a, b])
    (out,) = x86_executor(body)([np.zeros((0, 7), np.int8), np.zeros((7,), np.int8)])
    assert out.shape == (0, 7) and out.dtype == np.int8


@pytest.mark.avx512
def test_x86_max_of_minus_infinity_rows_is_minus_infinity() -> None:
    """The ReduceMax accumulator starts at -inf (its identity), not at the lowest finite f32."""
    p = np.full((3, 21), -np.inf, np.float32)
    p[1, 5] = np.nan
    p[2, 20] = -3.0e38
    check(x86_executor(reduce_body(p.shape))([p]), reduce_want(p))


@pytest.mark.parametrize("shape", EMPTY_SHAPES, ids=str)
def test_interpreter_empty_inputs_and_outputs(shape) -> None:  # type: ignore[no-untyped-def]
    p, q = np.zeros(shape, np.float32), np.zeros(shape[-1:], np.float32)
    check(interpreter_run(eltwise_body(shape), [p, q]), eltwise_want(p, q))


@pytest.mark.parametrize("shape", EMPTY_SHAPES, ids=str)
def test_interpreter_reduction_over_empty_axis_gives_identity(shape) -> None:  # type: ignore[no-untyped-def]
    p = np.zeros(shape, np.float32)
    check(interpreter_run(reduce_body(shape), [p]), reduce_want(p))


def test_interpreter_max_of_minus_infinity_rows_is_minus_infinity() -> None:
    p = RNG.standard_normal((2, 19)).astype(np.float32)
    p[0] = -np.inf
    check(interpreter_run(reduce_body(p.shape), [p]), reduce_want(p))

"""Random eltwise graphs (hypothesis): chains of up to 12 ops over 1..3 inputs that broadcast against each
other, compiled for x86_64_avx512 and checked against the reference runtime (every node on its numpy
reference) with float64 as the judge of how close is close enough."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add, Maximum, Minimum, Multiply, Subtract
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.unary import Abs, Exp, Negative, Relu, Sigmoid, Tanh
from snippets_core.runtime.compiled_model import compile_model

pytestmark = pytest.mark.avx512

UNARY = {"relu": Relu, "sigmoid": Sigmoid, "tanh": Tanh, "abs": Abs, "neg": Negative, "exp_tanh": None}
BINARY = {"add": Add, "sub": Subtract, "mul": Multiply, "max": Maximum, "min": Minimum}


@st.composite
def graphs(draw):  # type: ignore[no-untyped-def]
    rank = draw(st.integers(1, 4))
    master = draw(st.lists(st.integers(1, 21), min_size=rank, max_size=rank))
    n_inputs = draw(st.integers(1, 3))
    shapes = []
    for _ in range(n_inputs):
        drop = draw(st.integers(0, rank - 1))
        ones = draw(st.lists(st.booleans(), min_size=rank, max_size=rank))
        shapes.append(tuple(1 if one else d for d, one in zip(master, ones))[drop:])
    n_ops = draw(st.integers(1, 12))
    steps = []
    for k in range(n_ops):
        if draw(st.booleans()):
            steps.append(("u", draw(st.sampled_from(sorted(UNARY))), draw(st.integers(0, n_inputs + k - 1))))
        else:
            a = draw(st.integers(0, n_inputs + k - 1))
            b = draw(st.integers(-1, n_inputs + k - 1))  # -1: a scalar constant
            steps.append(("b", draw(st.sampled_from(sorted(BINARY))), a, b, draw(st.floats(-2, 2, width=32))))
    outputs = draw(st.lists(st.integers(n_inputs, n_inputs + n_ops - 1), min_size=1, max_size=3, unique=True))
    return shapes, steps, outputs


def build(shapes, steps, outputs):  # type: ignore[no-untyped-def]
    params = [Parameter("f32", s, name=f"p{i}") for i, s in enumerate(shapes)]
    values = list(params)
    for step in steps:
        if step[0] == "u":
            _, op, a = step
            x = values[a]
            values.append(Exp(Tanh(x)) if op == "exp_tanh" else UNARY[op](x))
        else:
            _, op, a, b, c = step
            other = Constant(np.float32(c)) if b < 0 else values[b]
            values.append(BINARY[op](values[a], other))
    results = [Result(values[i], name=f"r{j}") for j, i in enumerate(outputs)]
    return Model(results, params)


@settings(
    max_examples=int(os.environ.get("SNIPPETS_RANDOM_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(graphs(), st.integers(0, 2**31 - 1), st.sampled_from([1, 2]))
def test_random_eltwise_graphs_match_the_reference_runtime(graph, seed, threads):
    shapes, steps, outputs = graph
    rng = np.random.default_rng(seed)
    inputs = {f"p{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    model = build(shapes, steps, outputs)
    config = {"num_threads": threads, "target_options": {"parallel_min_bytes": 0}}
    cm = compile_model(model, target="x86_64_avx512", config=config)
    assert cm.subgraphs, cm.describe()
    for sg in cm.subgraphs:
        assert "SnippetsFallbackReason" not in sg.rt_info, sg.rt_info["SnippetsFallbackReason"]
    ref = compile_model(model, target="reference")(inputs)
    got = cm(inputs)
    for name, r in ref.items():
        assert got[name].shape == r.shape and got[name].dtype == r.dtype
        # the transcendental emitters are accurate to a few ulp; chains amplify that by their magnitudes
        np.testing.assert_allclose(got[name], r, rtol=2e-5, atol=2e-5 * max(1.0, float(np.abs(r).max(initial=0))))

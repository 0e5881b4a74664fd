"""``compile_model(model, target="interpreter")``: tokenized Subgraphs run as their final LinearIR."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add, Multiply
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.softmax import Softmax
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.ops.unary import Exp, Relu
from snippets_core.runtime.compiled_model import compile_model


@pytest.mark.parametrize("width", [4, 8, 16])
def test_eltwise_and_softmax_model(width):
    p0, p1 = Parameter("f32", (2, 3, 5, 7), name="p0"), Parameter("f32", (2, 1, 5, 1), name="p1")
    a = Add(p0, p1)
    s = Softmax(Exp(Multiply(Relu(a), Constant(np.float32(0.5)))), axis=-1)
    model = Model([Result(s, name="y"), Result(Exp(a), name="z")], [p0, p1])
    cm = compile_model(model, target="interpreter", config={"target_options": {"vector_size": width}})
    assert any(isinstance(n, Subgraph) for n in cm.model.get_ordered_ops())
    rng = np.random.default_rng(5)
    x0 = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    x1 = rng.standard_normal((2, 1, 5, 1)).astype(np.float32)
    out = cm({"p0": x0, "p1": x1})
    t = np.exp(np.maximum(x0.astype(np.float64) + x1, 0) * 0.5)
    e = np.exp(t - t.max(-1, keepdims=True))
    np.testing.assert_allclose(out["y"], e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out["z"], np.exp(x0.astype(np.float64) + x1), rtol=1e-6)


def test_dynamic_body_runs_on_one_kernel_for_every_input_shape():
    from snippets_core.codegen.interpreter import compile_subgraph

    p0, p1 = Parameter("f32", (None, 7), name="a"), Parameter("f32", (1, 7), name="b")
    body = Model([Result(Exp(Add(p0, p1)), name="y")], [p0, p1])
    outer0, outer1 = Parameter("f32", (None, 7), name="a"), Parameter("f32", (1, 7), name="b")
    sg = Subgraph(outer0, outer1, body=body)
    run = compile_subgraph(sg, vector_size=4)
    assert run.__name__ == "execute_dynamic"  # lowered once, with symbolic dims
    rng = np.random.default_rng(2)
    b = rng.standard_normal((1, 7)).astype(np.float32)
    for rows in (1, 5, 3):
        a = rng.standard_normal((rows, 7)).astype(np.float32)
        (y,) = run([a, b])
        np.testing.assert_allclose(y, np.exp(a.astype(np.float64) + b), rtol=1e-6)

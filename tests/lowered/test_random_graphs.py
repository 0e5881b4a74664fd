"""Random eltwise graphs (fixed seeds): random ranks, shapes broadcast on random axes, several
outputs, intermediates used twice, scalars. The numpy reference evaluation of the original body is
the oracle; the final LinearIR must agree at every vector width, with and without domain
optimization. This is what shakes out loop-port bookkeeping in MarkLoops/FuseLoops/InsertBuffers/
InsertLoadStore."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.codegen.interpreter import run_body
from snippets_core.ir.evaluate import evaluate_model
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add, Maximum, Minimum, Multiply, Subtract
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.ir.ops.snippets import Scalar, SnippetsReduceMax, SnippetsReduceSum
from snippets_core.ir.ops.softmax import Softmax
from snippets_core.ir.ops.unary import Abs, Negative, Relu, Tanh
from snippets_core.lowered.linear_ir import Config
from snippets_core.passes.data_flow_pipeline import run_data_flow
from snippets_core.passes.graph_utils import set_reduce_subtensors

UNARY = (Relu, Abs, Negative, Tanh)
BINARY = (Add, Multiply, Subtract, Maximum, Minimum)


def random_body(rng: np.random.Generator) -> Model:
    rank = int(rng.integers(1, 5))
    master = [int(rng.integers(1, 12)) for _ in range(rank)]
    params = []
    for i in range(int(rng.integers(1, 4))):
        shape = [d if rng.random() < 0.6 else 1 for d in master]
        keep = int(rng.integers(max(1, rank - 1), rank + 1))
        params.append(Parameter("f32", shape[rank - keep:], name=f"p{i}"))
    values = list(params)
    for _ in range(int(rng.integers(1, 8))):
        pick = values[int(rng.integers(len(values)))]
        r = rng.random()
        if r < 0.4:
            values.append(UNARY[int(rng.integers(len(UNARY)))](pick))
        elif r < 0.5:
            values.append(Multiply(pick, Scalar(np.float32(rng.standard_normal()))))
        else:
            values.append(BINARY[int(rng.integers(len(BINARY)))](pick, values[int(rng.integers(len(values)))]))
    computed = [v for v in values if v not in params]
    outs = list(dict.fromkeys([computed[-1]] + [v for v in computed[:-1] if rng.random() < 0.3]))
    return Model([Result(o, name=f"r{j}") for j, o in enumerate(outs)], params)


@pytest.mark.parametrize("seed", range(40))
def test_random_eltwise_graph(seed):
    rng = np.random.default_rng(1000 + seed)
    body = random_body(rng)
    inputs = [rng.standard_normal(p.shape.to_tuple()).astype(np.float32) for p in body.parameters]
    ref = evaluate_model(body.clone(), {p.name: a for p, a in zip(body.parameters, inputs)})
    for width in (4, 8, 16):
        for domain_opt in (True, False):
            cfg = Config(enable_domain_optimization=domain_opt, min_parallel_work_amount=int(rng.integers(1, 9)))
            outs = run_body(body, inputs, vector_size=width, config=cfg)
            for r, o in zip(body.results, outs):
                np.testing.assert_allclose(o, ref[r.name], rtol=1e-5, atol=1e-6,
                                           err_msg=f"{r.name}, width {width}, domain optimization {domain_opt}")


def random_reduce_body(rng: np.random.Generator) -> Model:
    """Eltwise ops mixed with last-axis reductions and softmaxes (decomposed by the data-flow passes)."""
    rank = int(rng.integers(2, 4))
    master = [int(rng.integers(1, 12)) for _ in range(rank)]
    params = [Parameter("f32", [d if rng.random() < 0.7 else 1 for d in master], name=f"p{i}")
              for i in range(int(rng.integers(1, 3)))]
    values = list(params)
    for _ in range(int(rng.integers(2, 8))):
        pick = values[int(rng.integers(len(values)))]
        r = rng.random()
        if r < 0.3:
            values.append(UNARY[int(rng.integers(len(UNARY)))](pick))
        elif r < 0.45:
            red = (SnippetsReduceMax if rng.random() < 0.5 else SnippetsReduceSum)(pick, axis=-1)
            set_reduce_subtensors(red)
            values.append(red)
        elif r < 0.55:
            values.append(Softmax(pick, axis=-1))
        else:
            values.append(BINARY[int(rng.integers(len(BINARY)))](pick, values[int(rng.integers(len(values)))]))
    computed = [v for v in values if v not in params]
    outs = list(dict.fromkeys([computed[-1]] + [v for v in computed[:-1] if rng.random() < 0.3]))
    return Model([Result(o, name=f"r{j}") for j, o in enumerate(outs)], params)


@pytest.mark.parametrize("seed", range(24))
def test_random_graph_with_reductions_and_softmax(seed):
    rng = np.random.default_rng(2000 + seed)
    body = random_reduce_body(rng)
    inputs = [rng.standard_normal(p.shape.to_tuple()).astype(np.float32) for p in body.parameters]
    ref = evaluate_model(body.clone(), {p.name: a for p, a in zip(body.parameters, inputs)})
    run_data_flow(body)
    for width in (4, 8, 16):
        for domain_opt in (True, False):
            outs = run_body(body, inputs, vector_size=width, config=Config(enable_domain_optimization=domain_opt))
            for r, o in zip(body.results, outs):
                np.testing.assert_allclose(o, ref[r.name], rtol=1e-4, atol=1e-5,
                                           err_msg=f"{r.name}, width {width}, domain optimization {domain_opt}")

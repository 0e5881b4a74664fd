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
from snippets_core.ir.ops.snippets import Scalar
from snippets_core.ir.ops.unary import Abs, Negative, Relu, Tanh
from snippets_core.lowered.linear_ir import Config

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

"""Random DAGs of tokenizable and untokenizable ops: tokenization never makes a cycle, never changes a
result, and every merged Subgraph fits the data-pointer budget."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from snippets_core.frontends import builder as sb
from snippets_core.ir import Model, Output
from snippets_core.tokenization import TokenizationConfig, set_skipped_by_plugin

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: make the sibling helper module importable
from tok_helpers import tokenize_and_compare

SHAPES = ([2, 3], [1, 3], [2, 1])
TOKENIZABLE_UNARY = (sb.relu, sb.abs, sb.tanh, sb.sigmoid, sb.negative)
OTHER_UNARY = (sb.sin, sb.cos)  # not tokenizable: they cut Subgraphs and make paths around them
BINARY = (sb.add, sb.multiply, sb.maximum, sb.subtract)


def random_model(rng: np.random.Generator, n_nodes: int) -> Model:
    values: list[Output] = [sb.parameter(SHAPES[i % 3], name=f"p{i}") for i in range(int(rng.integers(1, 4)))]
    for k in range(n_nodes):
        r = rng.random()
        a = values[int(rng.integers(len(values)))]
        if r < 0.35:
            v = TOKENIZABLE_UNARY[int(rng.integers(len(TOKENIZABLE_UNARY)))](a, name=f"n{k}")
        elif r < 0.5:
            v = OTHER_UNARY[int(rng.integers(len(OTHER_UNARY)))](a, name=f"n{k}")
        elif r < 0.65:
            # scalar constants go inside, non-scalar ones become inputs
            const = np.float32(rng.standard_normal()) if rng.random() < 0.5 else \
                rng.standard_normal((1, 3)).astype(np.float32)
            v = BINARY[int(rng.integers(len(BINARY)))](a, sb.constant(const), name=f"n{k}")
        else:
            b = values[int(rng.integers(len(values)))]
            v = BINARY[int(rng.integers(len(BINARY)))](a, b, name=f"n{k}")
        if rng.random() < 0.1:
            set_skipped_by_plugin(v.node)
        values.append(v)
    # The last value and a few random ones are outputs (several Results make the one-Result rule bite).
    outs = {id(values[-1]): values[-1]}
    for _ in range(int(rng.integers(0, 3))):
        v = values[int(rng.integers(len(values)))]
        if v.node.type_name != "Parameter":
            outs.setdefault(id(v), v)
    return sb.model(list(outs.values()))


@pytest.mark.parametrize("seed", range(60))
def test_random_graph(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = random_model(rng, int(rng.integers(4, 30)))
    budget = int(rng.integers(3, 12))
    sgs = tokenize_and_compare(m, TokenizationConfig(data_ptr_gpr_count=budget), seed=seed)
    for sg in sgs:
        if len(sg.body_ops) > 1:  # a single node is wrapped whatever its size, as in the reference
            assert len(sg.inputs) + len(sg.outputs) <= budget, sg.name
        # Every output of a Subgraph is used: dead values are not kept as outputs.
        assert all(o.targets for o in sg.outputs[:-1]), sg.name

"""MHA and MatMul bodies lowered with Brgemm blocking and run on the LinearIR interpreter, against numpy (float64).

The interpreter bounds-checks every access, so a wrong stride, block, tail or buffer size shows up as an
OutOfBoundsAccessError or a wrong number; the shapes below are chosen so that M, N and K are smaller than,
equal to, multiples of and not multiples of the blocks (M 32, N 64, K 512 by default).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from snippets_core.codegen.interpreter import compile_subgraph
from snippets_core.ir.ops.io import Parameter
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.runtime.compiled_model import compile_model

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: make the sibling module importable
from mha_cases import matmul, mha_3d, mha_4d, mha_transposed_b, random_inputs, subgraph_count


def _run(model, oracle, vector_size=8, disabled=(), seed=0, rtol=2e-5, atol=2e-5, subgraphs=1):
    cm = compile_model(model, target="interpreter",
                       config={"target_options": {"vector_size": vector_size}, "disabled_passes": list(disabled)})
    assert subgraph_count(cm) == subgraphs
    placement = [where for _, _, where in cm.placement()] if hasattr(cm, "placement") else []
    assert "interpreter" in " ".join(map(str, placement)) or not placement
    ins = random_inputs(model, seed)
    (out,) = cm(ins).values()
    np.testing.assert_allclose(out, oracle(ins), rtol=rtol, atol=atol)
    return cm


# (B, S, H, D): S is M, N of MatMul0 and K of MatMul1; D is K of MatMul0 and N of MatMul1
SHAPES_4D = [
    (1, 16, 2, 8),      # nothing blocked
    (1, 64, 1, 16),     # M two whole blocks, N exactly one block
    (1, 40, 1, 8),      # M tail
    (2, 100, 2, 8),     # M and N tails (N 100 = 64 + 36)
    (1, 130, 1, 70),    # M, N tails on both Brgemms; N of MatMul1 blocked too
    (1, 33, 1, 600),    # K of MatMul0 blocked (512 + 88 tail): beta 0 then 1
]


@pytest.mark.parametrize("shape", SHAPES_4D)
@pytest.mark.parametrize("split_m", [True, False])
def test_mha_4d_transposes_and_mask(shape, split_m):
    model, oracle = mha_4d(*shape)
    _run(model, oracle, disabled=() if split_m else ("split-dimension-m",))


@pytest.mark.parametrize("vector_size", [4, 16])
def test_mha_4d_vector_sizes(vector_size):
    model, oracle = mha_4d(1, 70, 2, 24)
    _run(model, oracle, vector_size=vector_size)


def test_mha_with_multiply_scale():
    model, oracle = mha_4d(1, 50, 2, 16, scale=0.125)
    _run(model, oracle)


def test_mha_with_select():
    model, oracle = mha_4d(1, 45, 2, 8, select=True)
    _run(model, oracle)


@pytest.mark.parametrize("shape", [(1, 70, 1, 8), (1, 70, 1, 70)])
def test_mha_eltwise_after_matmul1(shape):
    """MatMul1 writes a Buffer; with D = 70 its N is blocked, and the tail block's copy must find that Buffer."""
    model, oracle = mha_4d(*shape, post_eltwise=True)
    _run(model, oracle)


def test_mha_cross_attention_lengths():
    model, oracle = mha_4d(1, 37, 2, 8, kv_len=90)
    _run(model, oracle)


@pytest.mark.parametrize("dims", [(2, 16, 8, 16, 8), (1, 70, 20, 100, 12), (3, 33, 65, 129, 5)])
def test_mha_3d_without_transposes(dims):
    model, oracle = mha_3d(*dims)
    _run(model, oracle)


@pytest.mark.parametrize("shape", [(1, 16, 2, 8), (1, 70, 1, 16)])
def test_mha_transposed_b(shape):
    model, oracle = mha_transposed_b(*shape)
    # the transpose_b flag becomes a Transpose that moves the last dim: it runs outside the MHA Subgraph
    cm = _run(model, oracle)
    outside = [n.type_name for n in cm.model.get_ordered_ops() if n.type_name == "Transpose"]
    assert outside == ["Transpose"]


def _as_subgraph(model):
    """The whole model as one Subgraph (the tokenizers fuse a MatMul only inside an MHA)."""
    outer = [Parameter(p.element_type, p.shape, name=p.name) for p in model.parameters]
    return Subgraph(*outer, body=model.clone())


@pytest.mark.parametrize("shapes", [((2, 70, 33), (2, 33, 100)), ((1, 3, 130, 600), (1, 1, 600, 65)),
                                    ((5, 7), (7, 3)), ((1, 40, 1100), (1, 1100, 20))])
def test_matmul_alone(shapes):
    model, oracle = matmul(*shapes)
    run = compile_subgraph(_as_subgraph(model), vector_size=16)
    ins = random_inputs(model)
    (out,) = run([ins[p.name] for p in model.parameters])
    np.testing.assert_allclose(out, oracle(ins), rtol=5e-5, atol=1e-4)


def test_matmul_with_bias():
    model, oracle = matmul((2, 40, 24), (2, 24, 70), bias=True)
    run = compile_subgraph(_as_subgraph(model), vector_size=8)
    ins = random_inputs(model)
    (out,) = run([ins[p.name] for p in model.parameters])
    np.testing.assert_allclose(out, oracle(ins), rtol=2e-5, atol=5e-5)


def test_blocking_disabled_gives_the_same_numbers():
    model, oracle = mha_4d(1, 100, 2, 8)
    _run(model, oracle, disabled=("brgemm-blocking",))


def test_seeds_differ():
    """The oracle is sensitive: another input gives another output (the comparison is not vacuous)."""
    model, oracle = mha_4d(1, 40, 1, 8)
    a = oracle(random_inputs(model, 0))
    b = oracle(random_inputs(model, 1))
    assert np.abs(a - b).max() > 1e-2


@pytest.mark.parametrize("blocks", [{"brgemm_m_block": 8, "brgemm_n_block": 16, "brgemm_k_block": 16},
                                    {"brgemm_m_block": 64, "brgemm_n_block": 128}])
def test_blocks_from_target_options(blocks):
    from snippets_core.lowered.passes.brgemm_blocking import blocking_from_options

    (pp,) = blocking_from_options(blocks)
    assert (pp.pass_.m_block, pp.pass_.n_block) == (blocks["brgemm_m_block"], blocks["brgemm_n_block"])
    model, oracle = mha_4d(1, 100, 2, 40)
    cm = compile_model(model, target="interpreter", config={"target_options": {"vector_size": 8, **blocks}})
    ins = random_inputs(model)
    (out,) = cm(ins).values()
    np.testing.assert_allclose(out, oracle(ins), rtol=2e-5, atol=2e-5)

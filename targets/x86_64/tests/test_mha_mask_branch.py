"""MHA with an attention-mask branch of one to three eltwise ops pulled into the Subgraph, against numpy float64.

The branch is computed into a Buffer before the M loop and read by every row; DefineBufferClusters once let the
Softmax's per-row Buffers share that Buffer's memory, so every row after the first saw the wrong mask.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import snippets_core
from snippets_x86_64.guarded import guarded_copy

B, H, S, D = 2, 2, 32, 16
# op -> (its constant, its float64 meaning)
_OPS = {"Sub": (1.0, lambda x, c: x - c), "Mul": (-30.0, lambda x, c: x * c), "Add": (0.25, lambda x, c: x + c)}


def _mha_with_mask(mask_ops: tuple[str, ...], mask_shape: list[int]) -> bytes:
    nodes = [helper.make_node("MatMul", ["q", "k"], ["scores"])]
    prev = "m"
    for i, op in enumerate(mask_ops):
        nodes.append(helper.make_node(op, [prev, f"c_{op}"], [f"b{i}"]))
        prev = f"b{i}"
    nodes += [helper.make_node("Add", ["scores", prev], ["t"]), helper.make_node("Softmax", ["t"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["y"])]
    shapes = {"q": [B, H, S, D], "k": [B, H, D, S], "v": [B, H, S, D], "m": mask_shape}
    graph = helper.make_graph(
        nodes, "mha_mask",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, sh) for n, sh in shapes.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, H, S, D])],
        initializer=[numpy_helper.from_array(np.array(c, np.float32), f"c_{op}") for op, (c, _) in _OPS.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("target", ["interpreter", "x86_64_avx512"])
@pytest.mark.parametrize("mask_shape", [[B, 1, 1, S], [B, 1, S, S], [1, 1, S, S]])
@pytest.mark.parametrize("mask_ops", [("Mul",), ("Sub", "Mul"), ("Sub", "Mul", "Add")])
def test_whole_mask_branch_joins_the_mha_and_matches_numpy(target: str, mask_shape: list[int],
                                                           mask_ops: tuple[str, ...]) -> None:
    cm = snippets_core.compile_model(_mha_with_mask(mask_ops, mask_shape), target=target,
                                     config={"num_threads": 1})
    mha = [sg for sg in cm.subgraphs if "MatMul" in [o.type_name for o in sg.body_ops]]
    assert len(mha) == 1, cm.describe()
    names = [o.type_name for o in mha[0].body_ops]
    # the tokenizer takes the whole scalar-weight chain, as the reference does
    assert all(names.count({"Sub": "Subtract", "Mul": "Multiply", "Add": "Add"}[op]) >= mask_ops.count(op)
               for op in mask_ops), names
    assert len(cm.subgraphs) == 1, cm.describe()

    rng = np.random.default_rng(11)
    feeds = {"q": rng.standard_normal((B, H, S, D)), "k": rng.standard_normal((B, H, D, S)),
             "v": rng.standard_normal((B, H, S, D)), "m": (rng.random(mask_shape) > 0.3).astype(np.float64)}
    feeds32 = {n: guarded_copy(a.astype(np.float32)) for n, a in feeds.items()}
    branch = feeds32["m"].astype(np.float64)
    for op in mask_ops:
        c, f = _OPS[op]
        branch = f(branch, c)
    t = feeds32["q"].astype(np.float64) @ feeds32["k"].astype(np.float64) + branch
    e = np.exp(t - t.max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True)) @ feeds32["v"].astype(np.float64)
    np.testing.assert_allclose(cm(feeds32)["y"], want, rtol=1e-4, atol=5e-5)

"""TokenizeFCSnippets: which MatMuls become FullyConnected Subgraphs, which post-ops they take, and why a MatMul
was left out (``rt_info`` and ``snippets inspect``). Oracles: the expected op lists and numpy float64 for the
results (run on the reference target, which evaluates each Subgraph's body)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from snippets_core.cli import main
from snippets_core.frontends import builder as sb
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.runtime.compiled_model import compile_model
from snippets_core.tokenization import (
    FC_REJECT_REASON_KEY,
    FULLY_CONNECTED,
    SnippetsMode,
    TokenizationConfig,
    TokenizeFCSnippets,
    TokenizeSnippets,
    is_completed,
)
from snippets_core.tokenization.tokenize_fc_snippets import FC_WEIGHT

RNG = np.random.default_rng(7)
W = RNG.standard_normal((8, 16)).astype(np.float32)
B = RNG.standard_normal(16).astype(np.float32)


def _subgraphs(model):  # type: ignore[no-untyped-def]
    return [n for n in model.get_ordered_ops() if isinstance(n, Subgraph)]


def _fused(sg: Subgraph) -> list[str]:
    return [n.type_name for n in sg.body.get_ordered_ops() if n.type_name not in ("Parameter", "Result", "Constant")]


def _tokenize(model, callback=None):  # type: ignore[no-untyped-def]
    TokenizeFCSnippets(TokenizationConfig(), callback=callback).run(model)
    return _subgraphs(model)


def _erf_gelu(y):  # type: ignore[no-untyped-def]
    return sb.multiply(sb.multiply(y, sb.add(sb.erf(sb.divide(y, np.float32(math.sqrt(2)))), np.float32(1.0))),
                       np.float32(0.5))


def test_fc_takes_bias_activation_and_residual():
    x = sb.parameter([4, 8], "f32", name="x")
    res = sb.parameter([4, 16], "f32", name="res")
    model = sb.model([sb.add(sb.relu(sb.add(sb.matmul(x, W), B)), res)], name="m")
    (sg,) = _tokenize(model)
    assert _fused(sg) == ["MatMul", "Add", "Relu", "Add"]
    assert sg.rt_info[FULLY_CONNECTED] and is_completed(sg)
    weights = [p for p in sg.body.parameters if p.rt_info.get(FC_WEIGHT)]
    assert len(weights) == 1 and weights[0].outputs[0].shape.to_tuple() == (8, 16)


def test_erf_gelu_with_two_consumers_is_taken_whole():
    x = sb.parameter([4, 8], "f32", name="x")
    model = sb.model([_erf_gelu(sb.add(sb.matmul(x, W), B))], name="m")
    (sg,) = _tokenize(model)
    assert sorted(_fused(sg)) == sorted(["MatMul", "Add", "Divide", "Erf", "Add", "Multiply", "Multiply"])
    assert [n.type_name for n in model.get_ordered_ops()] == ["Parameter", "Constant", "Constant", "Subgraph",
                                                                "Result"]


def test_region_with_two_outputs_is_cut_back():
    """The bias Add feeds both Relu and a second Result: the FC stops at the Add (one output per Subgraph)."""
    x = sb.parameter([4, 8], "f32", name="x")
    y = sb.add(sb.matmul(x, W), B)
    model = sb.model([sb.relu(y), sb.exp(y)], name="m")
    (sg,) = _tokenize(model)
    assert _fused(sg) == ["MatMul", "Add"]


def test_post_op_that_broadcasts_the_main_path_is_not_taken():
    x = sb.parameter([4, 8], "f32", name="x")
    wide = sb.parameter([3, 4, 16], "f32", name="wide")
    model = sb.model([sb.add(sb.matmul(x, W), wide)], name="m")
    (sg,) = _tokenize(model)
    assert _fused(sg) == ["MatMul"]


def test_input_computed_from_the_fc_output_is_not_taken():
    """Add(fc, f(fc)) with f outside the post-op ops (ReduceSum): taking the Add would make a cycle."""
    x = sb.parameter([4, 8], "f32", name="x")
    y = sb.matmul(x, W)
    model = sb.model([sb.add(y, sb.reduce_sum(y, [1], keep_dims=True))], name="m")
    (sg,) = _tokenize(model)
    assert _fused(sg) == ["MatMul"]


@pytest.mark.parametrize("case, reason", [
    ("parameter_weight", "not a Constant"),
    ("transpose_a", "transpose_a"),
    ("rank3_weight", "static rank-2"),
    ("int8", "takes f32"),
])
def test_rejected_matmuls_keep_their_reason(case, reason):
    x = sb.parameter([4, 8], "f32", name="x")
    if case == "parameter_weight":
        mm = sb.matmul(x, sb.parameter([8, 16], "f32", name="w"))
    elif case == "transpose_a":
        mm = sb.matmul(sb.parameter([8, 4], "f32", name="xt"), W, transpose_a=True)
    elif case == "rank3_weight":
        mm = sb.matmul(x, np.ones((2, 8, 16), np.float32))
    else:
        mm = sb.matmul(sb.parameter([4, 8], "i8", name="xi"), np.ones((8, 16), np.int8))
    model = sb.model([mm], name="m")
    assert _tokenize(model) == []
    assert reason in mm.node.rt_info[FC_REJECT_REASON_KEY]


def test_target_veto_and_ignore_callback():
    x = sb.parameter([4, 8], "f32", name="x")
    mm = sb.matmul(x, W)
    model = sb.model([mm], name="m")
    assert _tokenize(model, callback=lambda n: "no FC here") == []
    assert mm.node.rt_info[FC_REJECT_REASON_KEY] == "vetoed by the target: no FC here"
    cfg = TokenizationConfig(snippets_mode=SnippetsMode.IgnoreCallback)
    assert TokenizeFCSnippets(cfg, callback=lambda n: "no FC here").run(model)


def test_eltwise_tokenizer_does_not_grow_an_fc():
    x = sb.parameter([4, 8], "f32", name="x")
    y = sb.add(sb.matmul(x, W), B)
    out = sb.exp(sb.reduce_sum(y, [1], keep_dims=True))
    model = sb.model([out], name="m")
    _tokenize(model)
    TokenizeSnippets(TokenizationConfig()).run(model)
    fcs = [sg for sg in _subgraphs(model) if sg.rt_info.get(FULLY_CONNECTED)]
    assert len(fcs) == 1 and _fused(fcs[0]) == ["MatMul", "Add"]


@pytest.mark.parametrize("target", ["reference", "interpreter"])
def test_non_constant_weight_still_runs_correctly(target):
    x = sb.parameter([4, 8], "f32", name="x")
    w = sb.parameter([8, 16], "f32", name="w")
    model = sb.model([sb.relu(sb.add(sb.matmul(x, w), B))], name="m")
    cm = compile_model(model, target=target)
    xs = RNG.standard_normal((4, 8)).astype(np.float32)
    ws = RNG.standard_normal((8, 16)).astype(np.float32)
    (out,) = cm({"x": xs, "w": ws}).values()
    np.testing.assert_allclose(out, np.maximum(xs.astype(np.float64) @ ws + B, 0), rtol=1e-5, atol=1e-5)


def test_fc_runs_on_the_interpreter():
    x = sb.parameter([2, 5, 8], "f32", name="x")
    model = sb.model([_erf_gelu(sb.add(sb.matmul(x, W), B))], name="m")
    cm = compile_model(model, target="interpreter")
    assert any(sg.rt_info.get(FULLY_CONNECTED) for sg in _subgraphs(cm.model))
    xs = RNG.standard_normal((2, 5, 8)).astype(np.float32)
    (out,) = cm({"x": xs}).values()
    lin = xs.astype(np.float64) @ W + B
    want = 0.5 * lin * (1 + np.vectorize(math.erf)(lin / math.sqrt(2)))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_inspect_shows_why_a_matmul_is_not_an_fc(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="linear"),
             helper.make_node("Relu", ["y"], ["out"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8]),
                                           helper.make_tensor_value_info("w", TensorProto.FLOAT, [8, 16])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [4, 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    assert main(["inspect", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    outside = {n["name"]: n for n in info["outside"]}
    assert "not fused as FullyConnected" in outside["linear"]["why"]
    assert "not a Constant" in outside["linear"]["why"]

"""The example models and the demo: deterministic files, reference results that match onnx's evaluator."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

import snippets_core

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NAMES = ["transformer_block", "cnn_block", "activation_head"]


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"examples_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_make_examples_reproduces_the_committed_files(tmp_path: Path) -> None:
    assert _load_script("make_examples").main(["--out", str(tmp_path)]) == 0
    for name in NAMES:
        fresh = (tmp_path / f"{name}.onnx").read_bytes()
        assert fresh == (EXAMPLES / f"{name}.onnx").read_bytes(), name
        assert len(fresh) < 2 * 1024 * 1024


def test_transformer_block_has_the_exported_patterns() -> None:
    ops = [n.op_type for n in onnx.load(EXAMPLES / "transformer_block.onnx").graph.node]
    for op, count in {
        "MatMul": 8,
        "Softmax": 1,
        "Erf": 1,
        "LayerNormalization": 2,
        "Transpose": 4,
        "Reshape": 4,
    }.items():
        assert ops.count(op) == count, op


@pytest.mark.parametrize("name", NAMES)
def test_reference_target_matches_onnx_reference_evaluator(name: str) -> None:
    path = EXAMPLES / f"{name}.onnx"
    proto = onnx.load(path)
    rng = np.random.default_rng(11)
    inputs = {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
        for i in proto.graph.input
    }
    expected = ReferenceEvaluator(proto).run(None, inputs)
    got = snippets_core.compile_model(path, target="reference")(inputs)
    for out, want in zip(proto.graph.output, expected):
        np.testing.assert_allclose(got[out.name], want, rtol=1e-4, atol=1e-5)


def test_demo_reports_fusion_placement_time_and_error(capsys: pytest.CaptureFixture[str]) -> None:
    demo = _load_script("demo")
    assert demo.main(["--repeat", "1", "--targets", "reference,no_such_target"]) == 0
    out = capsys.readouterr().out
    assert out.count("== ") == len(NAMES)
    assert "Subgraph" in out and "ms per run" in out and "max abs err 0," in out
    assert "[no_such_target] skipped: no target named 'no_such_target'" in out
    assert "vs onnx.reference.ReferenceEvaluator" in out

"""The ONNX backend model tests shipped inside the onnx package, run through SnippetsBackend.

- ``real``: the light real models (alexnet, densenet121, inception v1/v2, resnet50, shufflenet,
  squeezenet, vgg19, zfnet512). Each ``data/real/<test>/data.json`` names a model in ``data/light``; as in
  ``onnx.backend.test.runner`` the input is ``arange(n).reshape(shape) / n`` (float32, unknown dims = 1)
  and the expected output is ``light_<model>_output_0.pb``.
- ``pytorch-converted``, ``pytorch-operator``, ``simple``: ``model.onnx`` with ``test_data_set_*``.

Tolerances are the test's own (data.json) or the runner's defaults (rtol 1e-3, atol 1e-7).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from snippets_core.frontends.onnx import SUPPORTED_OPS
from snippets_core.runtime.onnx_backend import SnippetsBackend

# conftest.py loads suite.py once as this module (test files are not importable by name here)
suite = sys.modules["snippets_onnx_suite"]
EXCL = suite.load_exclusions()
DATA = suite.ONNX_DATA
REAL = sorted(p.parent for p in (DATA / "real").glob("*/data.json"))
DIR_KINDS = ("pytorch-converted", "pytorch-operator", "simple")


def _dummy_input(vi: onnx.ValueInfoProto) -> np.ndarray:
    """onnx.backend.test.runner.Runner.generate_dummy_data(random=False)."""
    assert vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


@pytest.mark.parametrize("test_dir", REAL, ids=[p.name for p in REAL])
def test_light_real_model(test_dir: Path) -> None:
    spec = json.loads((test_dir / "data.json").read_text())
    model_path = DATA / "light" / Path(spec["url"]).name
    model = onnx.load(str(model_path))
    inits = {t.name for t in model.graph.initializer}
    inputs = [_dummy_input(vi) for vi in model.graph.input if vi.name not in inits]
    refs = [onnx.numpy_helper.to_array(onnx.load_tensor(str(model_path.with_suffix("")) + f"_output_{i}.pb"))
            for i in range(len(model.graph.output))]
    outputs = SnippetsBackend.prepare(model, "CPU").run(inputs)
    suite.assert_similar_outputs(refs, list(outputs), spec["rtol"], spec["atol"])


def _dir_cases() -> list[tuple[str, Path, str]]:
    """(id, directory, exclusion reason or '') for every model test directory of DIR_KINDS."""
    supported = frozenset(SUPPORTED_OPS)
    out = []
    for kind in DIR_KINDS:
        for d in sorted((DATA / kind).glob("*/model.onnx")):
            ops = sorted({n.op_type for n in onnx.load(str(d), load_external_data=False).graph.node})
            missing = [op for op in ops if op not in supported]
            reason = "; ".join(f"{op}: {EXCL.EXCLUDED_OPS.get(op, 'UNCLASSIFIED')}" for op in missing)
            out.append((f"{kind}/{d.parent.name}", d.parent, reason))
    return out


DIR_CASES = _dir_cases()
DIR_INCLUDED = [(i, d) for i, d, reason in DIR_CASES if not reason]


@pytest.mark.parametrize("test_dir", [d for _, d in DIR_INCLUDED], ids=[i for i, _ in DIR_INCLUDED])
def test_model_directory(test_dir: Path) -> None:
    model = onnx.load(str(test_dir / "model.onnx"))
    rep = SnippetsBackend.prepare(model, "CPU")
    data_sets = sorted(test_dir.glob("test_data_set_*"))
    assert data_sets
    for ds in data_sets:
        inputs = [onnx.numpy_helper.to_array(onnx.load_tensor(str(ds / f"input_{i}.pb")))
                  for i in range(len(list(ds.glob("input_*.pb"))))]
        refs = [onnx.numpy_helper.to_array(onnx.load_tensor(str(ds / f"output_{i}.pb")))
                for i in range(len(list(ds.glob("output_*.pb"))))]
        suite.assert_similar_outputs(refs, list(rep.run(inputs)), 1e-3, 1e-7)


def test_model_directories_are_classified(pytestconfig: pytest.Config) -> None:
    unclassified = [i for i, _, reason in DIR_CASES if "UNCLASSIFIED" in reason]
    assert not unclassified, unclassified
    suite.record_summary(pytestconfig, f"light real models: {len(REAL)} included")
    suite.record_summary(pytestconfig, f"model directories ({', '.join(DIR_KINDS)}): {len(DIR_CASES)} found, "
                                       f"{len(DIR_INCLUDED)} included, {len(DIR_CASES) - len(DIR_INCLUDED)} "
                                       "excluded (sequence, string or gradient ops)")
    assert len(REAL) == 9


def test_light_squeezenet_with_random_weights_matches_onnx_reference() -> None:
    """The light models' constant-filled weights make their outputs almost uniform; with random weights the
    convolution/pooling/concat numerics of a whole network are checked against onnx's ReferenceEvaluator.
    The comparison stops before the final Softmax: for opset 9 on a 4-D input the evaluator applies the
    opset-13 semantics (last axis), not the flatten-at-axis rule of the spec."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    model = onnx.load(str(DATA / "light" / "light_squeezenet.onnx"))
    rng = np.random.default_rng(0)
    shapes = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    nodes, inits = [], list(model.graph.initializer)
    for n in model.graph.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in shapes:
            shape = tuple(int(d) for d in shapes[n.input[0]])
            w = rng.standard_normal(shape) / np.sqrt(max(int(np.prod(shape[1:])), 1))
            inits.append(onnx.numpy_helper.from_array(w.astype(np.float32), n.output[0]))
        else:
            nodes.append(n)
    softmax = next(n for n in nodes if n.op_type == "Softmax")
    nodes.remove(softmax)
    logits = helper.make_tensor_value_info(softmax.input[0], onnx.TensorProto.FLOAT, [1, 1000, 1, 1])
    graph = helper.make_graph(nodes, "squeezenet_random", list(model.graph.input), [logits], initializer=inits)
    proto = helper.make_model(graph, opset_imports=model.opset_import)
    proto.ir_version = 4  # initializers need not be listed as inputs
    inits_names = {t.name for t in inits}
    feed_vi = next(vi for vi in model.graph.input if vi.name not in inits_names)
    x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    expected = ReferenceEvaluator(proto).run(None, {feed_vi.name: x})[0]
    (got,) = SnippetsBackend.prepare(proto, "CPU").run([x])
    assert np.abs(expected).max() > 1e-3  # the check means something
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-5)

"""The nine light CNNs of the onnx package's backend data, end to end on x86_64_avx512: every 2-D Convolution,
MaxPool and AveragePool runs as a primitive kernel, and the output matches the stored one (constant-filled
weights) or onnxruntime's (random weights, where the constant fill would hide wrong indexing)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from snippets_core.runtime.compiled_model import compile_model

pytestmark = pytest.mark.avx512
DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
          "vgg19", "zfnet512"]
TARGET = "x86_64_avx512"


def _feed(model: onnx.ModelProto) -> onnx.ValueInfoProto:
    inits = {t.name for t in model.graph.initializer}
    return next(vi for vi in model.graph.input if vi.name not in inits)


def _reorders(cm) -> list[tuple[str, str, str]]:  # type: ignore[no-untyped-def]
    """(from, to, the consumer's op) of each reorder AssignLayouts inserted."""
    return [(sg.body_ops[0].src, sg.body_ops[0].dst, *{t.node.type_name for t in sg.outputs[0].targets})
            for sg in cm.subgraphs if sg.rt_info.get("SnippetsReorder")]


def _placed_on_kernels(cm) -> None:  # type: ignore[no-untyped-def]
    left = [(name, op) for name, op, where in cm.placement() if op in ("Convolution", "MaxPool", "AvgPool")]
    assert not left, f"left to the reference: {left}"


@pytest.mark.parametrize("name", MODELS)
def test_light_model_matches_stored_output(name: str) -> None:
    spec = json.loads((DATA / "real" / f"test_{name}" / "data.json").read_text())
    path = DATA / "light" / f"light_{name}.onnx"
    model = onnx.load(str(path))
    vi = _feed(model)
    shape = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
    x = (np.arange(int(np.prod(shape))).reshape(shape) / np.prod(shape)).astype(np.float32)
    want = numpy_helper.to_array(onnx.load_tensor(str(path.with_suffix("")) + "_output_0.pb"))
    cm = compile_model(model, TARGET, {"num_threads": 2})
    got = next(iter(cm({vi.name: x}).values()))
    np.testing.assert_allclose(got, want, rtol=spec["rtol"], atol=max(spec["atol"], 1e-6))
    _placed_on_kernels(cm)
    # NHWC from the input to the output: the stems read the image planar, LRN, pools, concats, shuffles and global
    # pools read and write NHWC, so no reorder between primitives; none at the edges either: the classifier's
    # [N, C, 1, 1] is the same memory in both layouts, and AlexNet's, ZFNet's and VGG's flattened feature maps are
    # read as they lie by their first Gemm (its weight rows put in NHWC order at compile time)
    assert _reorders(cm) == []


def _randomized(name: str) -> onnx.ModelProto:
    """The light model with random weights (its ConstantOfShape fills replaced), up to the logits."""
    model = onnx.load(str(DATA / "light" / f"light_{name}.onnx"))
    rng = np.random.default_rng(0)
    shapes = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    nodes, inits = [], list(model.graph.initializer)
    for n in model.graph.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in shapes:
            shape = tuple(int(d) for d in shapes[n.input[0]])
            w = rng.standard_normal(shape) / np.sqrt(max(int(np.prod(shape[1:])), 1))
            if len(shape) == 1:  # BatchNormalization's scale and variance must stay positive
                w = rng.uniform(0.5, 1.5, shape)
            inits.append(numpy_helper.from_array(w.astype(np.float32), n.output[0]))
        else:
            nodes.append(n)
    softmax = [n for n in nodes if n.op_type == "Softmax"][-1]
    nodes.remove(softmax)
    out = onnx.ValueInfoProto()
    out.CopyFrom(model.graph.output[0])
    out.name = softmax.input[0]
    proto = helper.make_model(helper.make_graph(nodes, name, list(model.graph.input), [out], initializer=inits),
                              opset_imports=model.opset_import)
    proto.ir_version = 4  # initializers need not be listed as inputs
    return proto


@pytest.mark.parametrize("name", ["inception_v1", "shufflenet", "resnet50"])
def test_light_model_with_random_weights_matches_onnxruntime(name: str) -> None:
    ort = pytest.importorskip("onnxruntime")
    proto = _randomized(name)
    vi = _feed(proto)
    shape = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    data = proto.SerializeToString()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    want = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, {vi.name: x})[0]
    cm = compile_model(data, TARGET, {"num_threads": 2})
    got = next(iter(cm({vi.name: x}).values()))
    assert np.abs(want).max() > 1e-2  # the check means something
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    _placed_on_kernels(cm)

"""A ShuffleNet exported with dynamic N, H and W (torch's channel_shuffle: Reshape targets from Shape/Gather/
floor_divide/Concat chains) keeps H and W symbolic, so its channel shuffles run on the JIT channel permute and its
convs on the conv kernels, with no reference fallback; outputs match onnxruntime on random shapes and no new shape
builds a kernel. The other dynamic models of the survey (tests/onnx/test_symbolic_survey.py) show no fallback
caused by a lost dim either."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from snippets_core.runtime.compiled_model import compile_model

pytestmark = pytest.mark.avx512
ort = pytest.importorskip("onnxruntime")
ROOT = Path(__file__).resolve().parents[3]


def _load(name: str, path: Path) -> Any:
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[name] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    return sys.modules[name]


tlm = _load("snippets_torch_like_models", ROOT / "tests" / "onnx" / "torch_like_models.py")
mz = _load("model_zoo", ROOT / "bench" / "model_zoo.py")


def _shuffles(cm: Any) -> list[Any]:
    return [sg for sg in cm.subgraphs if sg.rt_info.get("SnippetsChannelShuffle")]


def _reference_lines(cm: Any) -> list[str]:
    return [line for line in cm.describe().splitlines() if "[reference]" in line]


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_dynamic_shufflenet_v2_runs_on_kernels_and_matches_onnxruntime(exporter: str) -> None:
    proto = tlm.shufflenet_v2(exporter)
    cm = compile_model(proto, "x86_64_avx512")
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    assert _reference_lines(cm) == []
    shuffles = _shuffles(cm)
    assert len(shuffles) == 4  # one per block
    in_kernels = [op.type_name for sg in cm.subgraphs for op in sg.body_ops]
    assert in_kernels.count("Convolution") == sum(n.op_type == "Conv" for n in proto.graph.node) == 18
    rng = np.random.default_rng(7)
    shapes = [(1, 64, 64), *((int(rng.integers(1, 4)), int(rng.integers(9, 90)), int(rng.integers(9, 90)))
                             for _ in range(6))]
    for n, h, w in shapes:
        x = rng.standard_normal((n, 3, h, w)).astype(np.float32)
        (want,) = sess.run(None, {"input": x})
        (got,) = cm({"input": x}).values()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{exporter} at {(n, 3, h, w)}")
    # no primitive builds a kernel for a later shape: the permutes, and the depthwise convs and pools, whose border
    # code covers every size, the tiny maps of the last stages included
    built = [line for line in cm.describe().splitlines() if "kernel(s) built after the first shape" in line]
    assert built and all(" 0 kernel(s) built" in line for line in built), built
    permutes = [line for line in cm.describe().splitlines() if "one channel permute kernel for every N, H, W" in line]
    assert permutes == [f"      one channel permute kernel for every N, H, W: {len(set(shapes))} shape(s) kept, 0 kernel(s) "
                        "built after the first shape"] * 4


def test_dynamic_light_shufflenet_runs_its_shuffles_on_the_permute_kernel() -> None:
    """onnx's light ShuffleNet (v1, groups of 4, 16 shuffles) as torch would export it with dynamic axes."""
    proto = tlm.dynamic_cnn(mz.light_cnn("shufflenet").proto, "torchscript")
    cm = compile_model(proto, "x86_64_avx512")
    assert _reference_lines(cm) == [] and len(_shuffles(cm)) == 16
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    for n, h, w in [(1, 224, 224), (2, 200, 215)]:  # the classifier wants 7x7 after the last stage
        x = rng.standard_normal((n, 3, h, w)).astype(np.float32)
        (want,) = sess.run(None, {"gpu_0/data_0": x})
        (got,) = cm({"gpu_0/data_0": x}).values()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert cm.describe().count("2 shape(s) kept, 0 kernel(s) built after the first shape") >= 16


@pytest.mark.parametrize("name", ["mobilenet_v2", "squeezenet", "inception_v1", "bert", "gpt2"])
def test_dynamic_models_have_no_fallback_from_a_lost_dim(name: str) -> None:
    """No op falls back to a reference kernel because a dim became unknown (``?``) on the way."""
    proto = {"mobilenet_v2": lambda: tlm.dynamic_cnn(mz.mobilenet_v2(64).proto),
             "squeezenet": lambda: tlm.dynamic_cnn(mz.light_cnn("squeezenet").proto, "dynamo"),
             "inception_v1": lambda: tlm.dynamic_cnn(mz.light_cnn("inception_v1").proto),
             "bert": lambda: tlm.bert_encoder_layer("dynamo"),
             "gpt2": lambda: tlm.gpt2_block("torchscript")}[name]()
    cm = compile_model(proto, "x86_64_avx512")
    assert not [line for line in _reference_lines(cm) if "?" in line or "dynamic rank" in line]
    assert not [line for line in cm.describe().splitlines() if "fallback" in line]

"""What a process imports: ``import snippets_core`` stays light, and an x86-64 compile imports no other target, no
blob format, no ONNX reference evaluator and no test library (each is imported by the path that needs it). A cold
compile pays for every module it imports (docs/conv.md "Compile time"); the checks run in fresh interpreters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

#: modules neither ``import snippets_core`` nor an x86-64 compile may load
NEVER_FOR_X86 = ("snippets_shave", "flatbuffers", "onnx.reference", "hypothesis", "pytest", "onnxruntime",
                 "openvino", "scipy", "torch")
#: and besides, ``import snippets_core`` alone
NOT_AT_IMPORT = ("numpy", "onnx", "iced_x86", "snippets_x86_64", "pluggy", "snippets_core.ir",
                 "snippets_core.runtime.compiled_model")


def _loaded(code: str) -> list[str]:
    """The names in sys.modules after ``code`` runs in a fresh interpreter (this one's path and environment)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    script = textwrap.dedent(code) + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True, env=env,
                         timeout=120).stdout
    return json.loads(out.strip().splitlines()[-1])


def _hits(loaded: list[str], names: tuple[str, ...]) -> list[str]:
    return [m for m in loaded if any(m == n or m.startswith(n + ".") for n in names)]


def test_import_snippets_core_is_light() -> None:
    loaded = _loaded("import snippets_core")
    assert "snippets_core" in loaded
    assert _hits(loaded, NEVER_FOR_X86 + NOT_AT_IMPORT) == []


def test_hits_sees_submodules() -> None:
    # the check above would pass vacuously if _hits missed a package's submodules
    assert _hits(["onnx.reference.op_run", "onnxx", "numpy"], ("onnx.reference", "numpy")) == [
        "onnx.reference.op_run", "numpy"]


@pytest.mark.avx512
def test_x86_compile_imports_nothing_of_other_paths() -> None:
    loaded = _loaded("""
        import numpy as np
        from onnx import TensorProto, helper, numpy_helper

        from snippets_core import compile_model

        w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 16, 3, 3)).astype(np.float32), "w")
        g = helper.make_graph(
            [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
            "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])], [w])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        cm = compile_model(model.SerializeToString(), "x86_64_avx512")
        cm({"x": np.ones((1, 16, 8, 8), np.float32)})
        assert any(sg.rt_info.get("SnippetsConvolution") for sg in cm.subgraphs)
    """)
    assert "snippets_x86_64" in loaded and "iced_x86" in loaded  # the compile did run on the target
    assert _hits(loaded, NEVER_FOR_X86) == []

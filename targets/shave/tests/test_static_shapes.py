"""Dynamic input dims and the shave target: a blob is static, so compiling a dynamic model is a StaticShapeError
that names the inputs and the fix, and `snippets compile --shape` (snippets_core.fix_input_shapes) fixes the dims
before compiling; the simulated blob then agrees with numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import snippets_core
from snippets_core import compile_model
from snippets_core.cli import main
from snippets_core.errors import InputError, UnsupportedOpError
from snippets_shave.errors import StaticShapeError


def _swish_model(path: Path, *, reshape: bool = False) -> Path:
    """y = r * Sigmoid(r), r = Relu(x), x [batch,3,16]; with ``reshape`` r is first reshaped to [batch,48] through
    the Shape -> Slice -> Concat chain torch.onnx exports for a dynamic batch."""
    nodes = [helper.make_node("Relu", ["x"], ["r0"], name="relu")]
    inits = []
    out_shape: list[int | str] = ["batch", 3, 16]
    if reshape:
        inits += [numpy_helper.from_array(np.array([0], np.int64), "zero"),
                  numpy_helper.from_array(np.array([1], np.int64), "one"),
                  numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
        nodes += [helper.make_node("Shape", ["x"], ["shp"], name="shape"),
                  helper.make_node("Slice", ["shp", "zero", "one"], ["b"], name="slice"),
                  helper.make_node("Concat", ["b", "minus1"], ["new_shape"], name="concat", axis=0),
                  helper.make_node("Reshape", ["r0", "new_shape"], ["r"], name="reshape")]
        out_shape = ["batch", 48]
    else:
        nodes[0].output[0] = "r"
    nodes += [helper.make_node("Sigmoid", ["r"], ["s"], name="sigmoid"), helper.make_node("Mul", ["r", "s"], ["y"])]
    graph = helper.make_graph(nodes, "swish", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def _numpy(x: np.ndarray) -> np.ndarray:
    r = np.maximum(x.astype(np.float64), 0.0)
    return r / (1.0 + np.exp(-r))


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_dynamic_model_is_a_typed_error_saying_why_and_how_to_fix(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = _swish_model(tmp_path / "m.onnx")
    code, _, err = _cli(capsys, "compile", str(path), "-t", "shave", "-o", str(tmp_path / "m.blob"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "'x' [?,3,16]" in err and "isStatic = 1" in err and "--shape x=N,3,16" in err
    assert not (tmp_path / "m.blob").exists()
    with pytest.raises(StaticShapeError, match="fix_input_shapes") as e:
        compile_model(str(path), target="shave")
    assert isinstance(e.value, UnsupportedOpError)  # what callers caught before the dedicated class


@pytest.mark.parametrize("reshape", [False, True])
def test_shape_option_fixes_the_dims_and_the_blob_matches_numpy(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                reshape: bool) -> None:
    path = _swish_model(tmp_path / "m.onnx", reshape=reshape)
    blob = tmp_path / "m.blob"
    code, out, err = _cli(capsys, "compile", str(path), "-t", "shave", "--shape", "x=5,3,16", "-o", str(blob))
    assert code == 0, err
    assert f"wrote {blob}" in out
    x = np.random.default_rng(7).uniform(-3, 3, (5, 3, 16)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    code, _, err = _cli(capsys, "simulate", str(blob), "--inputs", str(tmp_path / "in.npz"), "--outputs",
                        str(tmp_path / "out.npz"))
    assert code == 0, err
    y = np.load(tmp_path / "out.npz")["y"]
    expected = _numpy(x).reshape(5, 48) if reshape else _numpy(x)
    assert y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_fix_input_shapes_from_python_matches_the_cli(tmp_path: Path) -> None:
    path = _swish_model(tmp_path / "m.onnx")
    proto = onnx.load(path)
    before = proto.SerializeToString()
    cm = compile_model(snippets_core.fix_input_shapes(proto, {"x": (2, 3, 16)}), target="shave")
    assert proto.SerializeToString() == before  # the caller's proto is not changed
    x = np.random.default_rng(1).standard_normal((2, 3, 16)).astype(np.float32)
    np.testing.assert_allclose(cm({"x": x})["y"], _numpy(x), rtol=1e-5, atol=1e-6)
    # a Model (read with its dynamic dims) takes the same shapes; the original keeps its dynamic dim
    model = snippets_core.read_onnx(path)
    fixed = snippets_core.fix_input_shapes(model, {"x": [2, 3, 16]})
    assert fixed.results[0].outputs[0].shape.dims == (2, 3, 16)
    assert model.parameters[0].shape.dims == (None, 3, 16)


@pytest.mark.parametrize(("shape", "message"), [
    ("x=5,4,16", "does not fit the declared shape [?,3,16] of input 'x'"),
    ("x=5,3", "does not fit the declared shape [?,3,16] of input 'x'"),
    ("q=5,3,16", "no input named 'q'; the model's inputs are: x"),
    ("x=5,-3,16", "--shape 'x=5,-3,16': expected NAME=D0,D1,..."),
])
def test_bad_shapes_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], shape: str,
                                        message: str) -> None:
    path = _swish_model(tmp_path / "m.onnx")
    code, _, err = _cli(capsys, "compile", str(path), "-t", "shave", "--shape", shape, "-o", str(tmp_path / "b"))
    assert code == 2 and message in err, err
    with pytest.raises(InputError):
        snippets_core.fix_input_shapes(str(path), {"x": (5, 4, 16)})


def test_the_shape_chain_folds_on_a_model_too(tmp_path: Path) -> None:
    model = snippets_core.read_onnx(_swish_model(tmp_path / "m.onnx", reshape=True))
    # dynamic batch: the target [batch, -1] copies the input's own batch, so it loads as the Constant [0, -1]
    assert model.count("ShapeOf") == 0
    assert str(model.results[0].outputs[0].shape) == "[batch,48]"
    fixed = snippets_core.fix_input_shapes(model, {"x": (4, 3, 16)})
    assert [fixed.count(t) for t in ("ShapeOf", "Slice", "Concat")] == [0, 0, 0]
    assert fixed.results[0].outputs[0].shape.dims == (4, 48)
    x = np.random.default_rng(2).standard_normal((4, 3, 16)).astype(np.float32)
    np.testing.assert_allclose(compile_model(fixed, target="shave")({"x": x})["y"], _numpy(x).reshape(4, 48),
                               rtol=1e-5, atol=1e-6)


def test_an_inference_session_with_a_free_dimension_override_runs_on_shave(tmp_path: Path) -> None:
    """onnxruntime's way of fixing a dim (add_free_dimension_override_by_name) makes the model static for shave."""
    path = str(_swish_model(tmp_path / "m.onnx", reshape=True))
    with pytest.raises(StaticShapeError):
        snippets_core.InferenceSession(path, providers=["shave"])
    opts = snippets_core.SessionOptions()
    opts.add_free_dimension_override_by_name("batch", 2)
    sess = snippets_core.InferenceSession(path, opts, providers=["shave"])
    assert [o.shape for o in sess.get_outputs()] == [[2, 48]]
    x = np.random.default_rng(4).standard_normal((2, 3, 16)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], _numpy(x).reshape(2, 48), rtol=1e-5, atol=1e-6)

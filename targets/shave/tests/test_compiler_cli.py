"""`snippets compile` / `snippets inspect` / `snippets simulate` with the shave target, on ONNX models made with
onnx.helper; the simulated outputs agree with the reference runtime and with numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from snippets_core import compile_model
from snippets_core.cli import main


def _model(path: Path) -> Path:
    """y = Softmax(Relu(x * s + b), axis -1); z = Sigmoid(x) (two outputs, broadcast constants)."""
    b = np.linspace(-0.5, 0.5, 6, dtype=np.float32).reshape(1, 6, 1)
    nodes = [
        helper.make_node("Mul", ["x", "s"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "b"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=-1),
        helper.make_node("Sigmoid", ["x"], ["z"], name="sigmoid"),
    ]
    graph = helper.make_graph(
        nodes,
        "softmax_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6, 17])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6, 17]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 6, 17]),
        ],
        [numpy_helper.from_array(np.array(1.5, dtype=np.float32), "s"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def _numpy(x: np.ndarray) -> dict[str, np.ndarray]:
    r = np.maximum(x.astype(np.float64) * 1.5 + np.linspace(-0.5, 0.5, 6).reshape(1, 6, 1), 0)
    e = np.exp(r - r.max(-1, keepdims=True))
    return {"y": e / e.sum(-1, keepdims=True), "z": 1 / (1 + np.exp(-x.astype(np.float64)))}


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_compile_inspect_simulate_agree_with_the_reference(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    onnx_path = _model(tmp_path / "m.onnx")
    blob = tmp_path / "m.blob"
    code, out, err = _cli(capsys, "compile", str(onnx_path), "--target", "shave", "-o", str(blob))
    assert code == 0, err
    assert f"wrote {blob}" in out and blob.read_bytes()[4:8] == b"ASHV"

    code, out, err = _cli(capsys, "inspect", str(blob))
    assert code == 0, err
    assert "VPURT.TaskList @ACT_SHAVE" in out and "VPUIP.SW.Kernel.run" in out and "VPURT.Graph" in out

    x = np.random.default_rng(3).uniform(-2, 2, (4, 6, 17)).astype(np.float32)
    inputs, outputs = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inputs, x=x)
    code, out, err = _cli(
        capsys,
        "simulate",
        str(blob),
        "--inputs",
        str(inputs),
        "--outputs",
        str(outputs),
        "--seed",
        "2",
        "--check-races",
    )
    assert code == 0, err
    assert "output y: float32[4, 6, 17]" in out
    with np.load(outputs) as npz:
        got = {k: npz[k] for k in npz.files}
    reference = compile_model(onnx_path, target="reference")({"x": x})
    want = _numpy(x)
    assert sorted(got) == ["y", "z"]
    for name in ("y", "z"):
        np.testing.assert_allclose(got[name], reference[name], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
    # the same blob, compiled in process, gives the same bytes and the same outputs
    cm = compile_model(onnx_path, target="shave")
    assert cm.target_artifact == blob.read_bytes()
    for name, value in cm({"x": x}).items():
        assert value.tobytes() == got[name].tobytes()


def test_run_with_the_shave_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    onnx_path = _model(tmp_path / "m.onnx")
    code, out, err = _cli(capsys, "run", str(onnx_path), "-t", "shave", "--check")
    assert code == 0, err
    assert "compiled for target 'shave'" in out and "vs reference" in out


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = helper.make_graph(
        [
            helper.make_node("CumSum", ["x", "axis"], ["c"], name="cumsum"),
            helper.make_node("Relu", ["c"], ["y"], name="relu"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        [numpy_helper.from_array(np.array(1, dtype=np.int64), "axis")],
    )
    path = tmp_path / "cumsum.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    code, _, err = _cli(capsys, "compile", str(path), "-t", "shave", "-o", str(tmp_path / "x.blob"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "cumsum (CumSum)" in err

    not_blob = tmp_path / "notes.blob"
    not_blob.write_bytes(b"this is not a blob at all")
    np.savez(tmp_path / "in.npz", x=np.zeros((2, 8), np.float32))
    code, _, err = _cli(capsys, "simulate", str(not_blob), "--inputs", str(tmp_path / "in.npz"))
    assert code == 2 and "not an artifact of any installed target" in err

    code, _, err = _cli(capsys, "compile", str(path), "-t", "reference", "-o", str(tmp_path / "r.blob"))
    assert code == 2 and "writes no artifact" in err


@pytest.mark.parametrize("command", ["compile", "simulate"])
def test_new_commands_have_help_with_examples(capsys: pytest.CaptureFixture[str], command: str) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    assert "examples:" in capsys.readouterr().out


def test_bad_blobs_and_inputs_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    onnx_path = _model(tmp_path / "m.onnx")
    blob = tmp_path / "m.blob"
    assert _cli(capsys, "compile", str(onnx_path), "-t", "shave", "-o", str(blob))[0] == 0
    truncated = tmp_path / "cut.blob"
    truncated.write_bytes(blob.read_bytes()[:200])
    for argv in (["inspect", str(truncated)], ["simulate", str(truncated), "--inputs", str(tmp_path / "x.npz")]):
        code, _, err = _cli(capsys, *argv)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    np.savez(tmp_path / "wrong.npz", x=np.zeros((4, 6, 16), np.float32))
    code, _, err = _cli(capsys, "simulate", str(blob), "--inputs", str(tmp_path / "wrong.npz"))
    assert code == 2 and "input 'x'" in err and len(err.strip().splitlines()) == 1


def test_inspect_lir_and_asm_of_the_shave_kernels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    onnx_path = _model(tmp_path / "m.onnx")
    code, out, err = _cli(capsys, "inspect", str(onnx_path), "-t", "shave", "--lir", "--asm")
    assert code == 0, err
    assert "final LinearIR (target shave)" in out and "kernel disassembly (target shave)" in out
    assert "VEXP2.f32" in out and "RET" in out  # the softmax kernel's exponentials, and its return

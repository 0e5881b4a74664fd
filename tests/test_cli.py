"""The `snippets` command line: help texts, targets, inspect, run, and one-line errors with exit code 2.

Oracles: numpy for numbers, importlib.metadata for what is installed, onnx.helper for the models.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from snippets_core.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def cumsum_model(path: Path, batch: int | str = 2) -> Path:
    """x -> Relu -> CumSum(axis 1) -> y = z * Sigmoid(z) + c: CumSum is an op the Tokenizer does not fuse."""
    c = np.linspace(-1.0, 1.0, 8, dtype=np.float32)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("CumSum", ["r", "axis"], ["z"], name="cumsum"),
        helper.make_node("Sigmoid", ["z"], ["s"], name="sigmoid"),
        helper.make_node("Mul", ["z", "s"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "c"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "cumsum_swish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8])],
        [numpy_helper.from_array(np.array(1, dtype=np.int64), "axis"), numpy_helper.from_array(c, "c")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def numpy_cumsum_model(x: np.ndarray) -> np.ndarray:
    z = np.cumsum(np.maximum(x.astype(np.float64), 0.0), axis=1)
    return z / (1.0 + np.exp(-z)) + np.linspace(-1.0, 1.0, 8)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("snippets: error: ")
    assert "Traceback" not in err
    for f in fragments:
        assert f in lines[0], (f, lines[0])


# --- help and version ----------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [[], ["targets"], ["plugins"], ["inspect"], ["run"]])
def test_every_command_has_help_with_an_example(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main([*command, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "example" in out
    assert f"snippets {command[0]}" in out if command else "snippets targets" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    # the first line is the core; targets and plugins follow (tests/test_cli_plugins.py checks them)
    assert capsys.readouterr().out.splitlines()[0] == f"snippets-core {metadata.version('snippets-core')}"


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys)
    assert code == 2 and "usage: snippets" in out


def test_console_script_entry_runs() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "snippets_core.cli", "targets"], check=False, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "reference" in proc.stdout


# --- targets ---------------------------------------------------------------------------------------------
def test_targets_lists_installed_and_builtin(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "targets")
    assert code == 0
    rows = [line.split() for line in out.strip().splitlines()]
    assert rows[0] == ["name", "distribution", "version"]
    names = [r[0] for r in rows[1:]]
    installed = sorted(ep.name for ep in metadata.entry_points(group="snippets.targets"))
    assert names == installed + ["reference", "interpreter"]
    for ep in metadata.entry_points(group="snippets.targets"):
        row = rows[1 + names.index(ep.name)]
        assert row[1:] == [ep.dist.metadata["Name"], ep.dist.version]


# --- inspect ---------------------------------------------------------------------------------------------
def test_inspect_shows_unsupported_op_outside_subgraphs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = cumsum_model(tmp_path / "m.onnx")
    code, out, err = run_cli(capsys, "inspect", str(path), "--json")
    assert code == 0, err
    info = json.loads(out)
    outside = {n["name"]: n for n in info["outside"]}
    assert "cumsum" in outside and outside["cumsum"]["type"] == "CumSum"
    assert "CumSum" in outside["cumsum"]["why"]
    fused = [op["type"] for sg in info["subgraphs"] for op in sg["ops"]]
    assert "CumSum" not in fused
    assert sorted(fused) == ["Add", "Multiply", "Relu", "Sigmoid"]
    for sg in info["subgraphs"]:
        assert sg["inputs"] and sg["outputs"]
        assert all(o["shape"] == "[2,8]" and o["type"] == "f32" for o in sg["outputs"])
    assert info["inputs"] == [{"name": "x", "type": "f32", "shape": "[2,8]"}]


def test_inspect_text_and_mermaid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = cumsum_model(tmp_path / "m.onnx")
    mmd = tmp_path / "g.mmd"
    code, out, err = run_cli(capsys, "inspect", str(path), "--mermaid", str(mmd))
    assert code == 0, err
    assert "outside Subgraphs" in out and "CumSum (cumsum)" in out
    assert out.count("Subgraph ") >= 1
    text = mmd.read_text()
    assert text.startswith("flowchart TD") and "subgraph " in text and "CumSum" in text
    assert text.count("subgraph ") == text.count("\n  end")


def test_inspect_reports_plugin_veto(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from snippets_core.plugins import hookimpl, reset_hosts
    from snippets_core.plugins.host import get_host

    class NoSigmoid:
        @hookimpl
        def snippets_tokenization_callback(self, node, target_name):
            return "sigmoid stays out" if node.type_name == "Sigmoid" else None

    reset_hosts()
    try:
        get_host({"block_plugins": []}).register(NoSigmoid(), "no_sigmoid")
        code, out, err = run_cli(capsys, "inspect", str(cumsum_model(tmp_path / "m.onnx")), "--json")
    finally:
        reset_hosts()
    assert code == 0, err
    outside = {n["name"]: n["why"] for n in json.loads(out)["outside"]}
    assert outside["sigmoid"] == "vetoed by no_sigmoid: sigmoid stays out"


def test_inspect_shows_why_an_mha_was_not_fused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A MatMul the MHA tokenizer turned down shows its reason (recorded in rt_info) in `snippets inspect`."""
    from snippets_core.plugins import hookimpl, reset_hosts
    from snippets_core.plugins.host import get_host

    q = helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 8, 16])
    k = helper.make_tensor_value_info("k", TensorProto.FLOAT, [1, 16, 8])
    v = helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, 8, 16])
    o = helper.make_tensor_value_info("o", TensorProto.FLOAT, [1, 8, 16])
    nodes = [
        helper.make_node("MatMul", ["q", "k"], ["s"], name="mm0"),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1, name="sm"),
        helper.make_node("MatMul", ["p", "v"], ["o"], name="mm1"),
    ]
    path = tmp_path / "mha.onnx"
    onnx.save(helper.make_model(helper.make_graph(nodes, "mha", [q, k, v], [o]),
                                opset_imports=[helper.make_opsetid("", 17)]), path)

    class NoMHA:
        @hookimpl
        def snippets_tokenization_callback(self, node, target_name, tokenizer):
            return "attention stays on numpy here" if tokenizer == "mha" else None

    reset_hosts()
    try:
        get_host({"block_plugins": []}).register(NoMHA(), "no_mha")
        code, out, err = run_cli(capsys, "inspect", str(path), "--json")
    finally:
        reset_hosts()
    assert code == 0, err
    outside = {n["name"]: n["why"] for n in json.loads(out)["outside"]}
    assert "not fused as MHA" in outside["mm0"] and "attention stays on numpy here" in outside["mm0"]


# --- run -------------------------------------------------------------------------------------------------------
def test_run_gives_the_numpy_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = cumsum_model(tmp_path / "m.onnx")
    x = np.random.default_rng(7).standard_normal((2, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    code, out, err = run_cli(
        capsys,
        "run",
        str(path),
        "--target",
        "reference",
        "--inputs",
        str(tmp_path / "in.npz"),
        "--outputs",
        str(tmp_path / "out.npz"),
    )
    assert code == 0, err
    with np.load(tmp_path / "out.npz") as data:
        assert data.files == ["y"]
        np.testing.assert_allclose(data["y"], numpy_cumsum_model(x), rtol=1e-5, atol=1e-5)
    assert "Subgraph" in out and "CumSum" in out and "ms" in out


def test_run_random_inputs_are_reproducible(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = cumsum_model(tmp_path / "m.onnx")
    outs = []
    for seed, name in ((3, "a"), (3, "b"), (4, "c")):
        code, _, err = run_cli(
            capsys, "run", str(path), "-t", "reference", "--seed", str(seed), "--outputs", str(tmp_path / f"{name}.npz")
        )
        assert code == 0, err
        with np.load(tmp_path / f"{name}.npz") as data:
            outs.append(data["y"])
    np.testing.assert_array_equal(outs[0], outs[1])
    assert not np.array_equal(outs[0], outs[2])


def test_run_dynamic_dims_need_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = cumsum_model(tmp_path / "dyn.onnx", batch="batch")
    code, _, err = run_cli(capsys, "run", str(path), "-t", "reference")
    assert_one_line_error(code, err, "'x'", "--shape")
    code, _, err = run_cli(
        capsys, "run", str(path), "-t", "reference", "--shape", "x=3,8", "--outputs", str(tmp_path / "o.npz")
    )
    assert code == 0, err
    with np.load(tmp_path / "o.npz") as data:
        assert data["y"].shape == (3, 8)
    code, _, err = run_cli(capsys, "run", str(path), "-t", "reference", "--shape", "x=3,9")
    assert_one_line_error(code, err, "x=3,9")


def test_run_check_compares_with_reference(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "run", str(cumsum_model(tmp_path / "m.onnx")), "-t", "reference", "--check")
    assert code == 0, err
    assert "vs reference: max abs err 0, max rel err 0" in out


# --- errors ------------------------------------------------------------------------------------------------------
def test_missing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.onnx"
    for argv in (["inspect", str(missing)], ["run", str(missing), "-t", "reference"]):
        code, _, err = run_cli(capsys, *argv)
        assert_one_line_error(code, err, "nope.onnx")


def test_garbage_and_truncated_files_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    code, _, err = run_cli(capsys, "inspect", str(garbage))
    assert_one_line_error(code, err, "garbage.onnx")
    whole = (EXAMPLES / "cnn_block.onnx").read_bytes()
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(whole[: len(whole) // 2])
    code, _, err = run_cli(capsys, "run", str(truncated), "-t", "reference")
    assert_one_line_error(code, err, "truncated.onnx")


def test_unknown_onnx_op_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = helper.make_graph(
        [helper.make_node("FrobnicateTensor", ["x"], ["y"], name="frob")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    path = tmp_path / "unknown_op.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    code, _, err = run_cli(capsys, "inspect", str(path))
    assert_one_line_error(code, err, "FrobnicateTensor")


def test_unknown_target_lists_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "run", str(cumsum_model(tmp_path / "m.onnx")), "-t", "no_such_target")
    assert_one_line_error(code, err, "'no_such_target'", "reference", "interpreter")


def test_bad_inputs_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(cumsum_model(tmp_path / "m.onnx"))
    np.savez(tmp_path / "wrong_name.npz", z=np.zeros((2, 8), np.float32))
    np.savez(tmp_path / "wrong_shape.npz", x=np.zeros((2, 9), np.float32))
    np.savez(tmp_path / "wrong_dtype.npz", x=np.zeros((2, 8), np.float64))
    (tmp_path / "not_npz.npz").write_text("hello")
    cases = {
        "wrong_name.npz": "'z'",
        "wrong_shape.npz": "'x'",
        "wrong_dtype.npz": "'x'",
        "not_npz.npz": "not_npz.npz",
        "absent.npz": "absent.npz",
    }
    for fname, fragment in cases.items():
        code, _, err = run_cli(capsys, "run", path, "-t", "reference", "--inputs", str(tmp_path / fname))
        assert_one_line_error(code, err, fragment)
    code, _, err = run_cli(capsys, "run", path, "-t", "reference", "--shape", "x=two")
    assert_one_line_error(code, err, "x=two")
    code, _, err = run_cli(capsys, "run", path, "-t", "reference", "--config", "novalue")
    assert_one_line_error(code, err, "novalue")


# --- models onnxruntime loads, and bad input of every kind (issue 9) ------------------------------------------
def _swish_model(path: Path, x_shape: Any = (2, 8), y_shape: Any = None, reverse: bool = False) -> Path:
    """x -> x * Sigmoid(x) -> y, its output declared without a shape (the make_tensor_value_info(..., None) idiom)."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
             helper.make_node("Mul", ["x", "s"], ["y"], name="mul")]
    graph = helper.make_graph(
        nodes[::-1] if reverse else nodes,
        "swish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _onnxruntime(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("target", ["reference", "x86_64_avx512"])
def test_run_model_with_shapeless_output_matches_onnxruntime(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    if target != "reference":
        pytest.importorskip("snippets_x86_64")
    path = _swish_model(tmp_path / "shapeless.onnx")
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    code, out, err = run_cli(capsys, "run", str(path), "-t", target, "--inputs", str(tmp_path / "in.npz"),
                             "--outputs", str(tmp_path / "out.npz"))
    assert code == 0, err
    assert "output y: float32[2, 8]" in out
    with np.load(tmp_path / "out.npz") as got:
        np.testing.assert_allclose(got["y"], _onnxruntime(path, {"x": x})[0], rtol=1e-6, atol=1e-6)


def test_run_shapeless_and_unsorted_models_in_a_subprocess(tmp_path: Path) -> None:
    shapeless_in = _swish_model(tmp_path / "in.onnx", x_shape=None)
    unsorted = _swish_model(tmp_path / "unsorted.onnx", reverse=True)
    x = np.linspace(-3, 3, 16, dtype=np.float32).reshape(2, 8)
    np.savez(tmp_path / "x.npz", x=x)
    for path in (shapeless_in, unsorted):
        out = tmp_path / f"{path.stem}.npz"
        proc = subprocess.run([sys.executable, "-m", "snippets_core.cli", "run", str(path), "-t", "reference",
                               "--inputs", str(tmp_path / "x.npz"), "--outputs", str(out)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        with np.load(out) as got:
            np.testing.assert_allclose(got["y"], _onnxruntime(path, {"x": x})[0], rtol=1e-6, atol=1e-6)


def test_closed_stdout_pipe_is_not_an_internal_error(tmp_path: Path) -> None:
    path = str(cumsum_model(tmp_path / "m.onnx"))
    for argv in (["inspect", path, "--json"], ["ops"]):
        proc = subprocess.Popen([sys.executable, "-m", "snippets_core.cli", *argv], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # no reader left: the first write fails with EPIPE, as behind `| head` once it quits
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 2, err
        assert "internal error" not in err and "Traceback" not in err and "Exception ignored" not in err, err


def test_ops_lists_the_supported_onnx_ops(capsys: pytest.CaptureFixture[str]) -> None:
    from snippets_core.frontends.onnx import SUPPORTED_OPS

    code, out, _ = run_cli(capsys, "ops")
    assert code == 0
    assert out.splitlines()[0].startswith(f"{len(SUPPORTED_OPS)} ONNX ops")
    words = out.split()
    assert "Relu" in words and "Attention*" in words and "Det" not in words
    code, out, _ = run_cli(capsys, "ops", "--json")
    listed = json.loads(out)
    assert [e["op"] for e in listed] == list(SUPPORTED_OPS)
    assert {"op": "Attention", "via": "function body"} in listed


def test_several_unsupported_ops_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = [helper.make_node("Det", ["x"], ["a"], name="d1"), helper.make_node("Det", ["x"], ["b"], name="d2"),
             helper.make_node("Frob", ["a"], ["y"], name="f"), helper.make_node("Relu", ["b"], ["z"], name="r")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "z")])
    path = tmp_path / "unsupported.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    code, _, err = run_cli(capsys, "inspect", str(path))
    assert_one_line_error(code, err, "2 op types in 3 nodes", "Det x2 ('d1', 'd2')", "Frob x1 ('f')", "snippets ops")


def test_bad_files_and_options_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(cumsum_model(tmp_path / "m.onnx"))
    np.save(tmp_path / "x.npy", np.zeros((2, 8), np.float32))
    (tmp_path / "adir").mkdir()
    (tmp_path / "text.npz").write_text("x,y\n1,2\n")
    empty = helper.make_graph([], "empty", [], [])
    onnx.save(helper.make_model(empty, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "empty.onnx")
    no_out = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "no_out",
                               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])], [])
    onnx.save(helper.make_model(no_out, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "no_out.onnx")
    run = ["run", path, "-t", "reference"]
    cases = [
        (run + ["--inputs", str(tmp_path / "x.npy")], ["x.npy", "a single array (.npy)", ".npz"]),
        (run + ["--inputs", str(tmp_path / "adir")], ["adir", "is a directory"]),
        (run + ["--inputs", str(tmp_path / "text.npz")], ["text.npz", "not an .npz file"]),
        (run + ["--outputs", str(tmp_path / "adir")], ["adir", "cannot write outputs"]),
        (run + ["--seed", "-1"], ["--seed -1"]),
        (run + ["-c", "target_options=5"], ["target_options must be a mapping", "int 5"]),
        (run + ["-c", "tokenization=[1]"], ["tokenization must be a mapping"]),
        (["run", path, "-t", "interpreter", "-c", 'target_options={"vector_size": "x"}'],
         ["target_options.vector_size must be an integer", "'x'"]),
        (["inspect", path, "-t", "interpreter", "--lir", "-c", 'target_options={"vector_size": 0}'],
         ["target_options.vector_size must be at least 1"]),
        (["run", path, "-t", "interpreter", "-c", 'target_options={"brgemm_m_block": "big"}'],
         ["target_options.brgemm_m_block must be an integer"]),
        (["run", str(tmp_path / "adir"), "-t", "reference"], ["adir"]),
        (["run", str(tmp_path / "empty.onnx"), "-t", "reference"], ["empty.onnx", "no outputs"]),
        (["inspect", str(tmp_path / "no_out.onnx")], ["no_out.onnx", "no outputs"]),
        (["run", str(_swish_model(tmp_path / "huge.onnx", x_shape=[1 << 20, 1 << 20])), "-t", "reference"],
         ["input 'x'", "does not fit in memory"]),
    ]
    for argv, fragments in cases:
        code, _, err = run_cli(capsys, *argv)
        assert_one_line_error(code, err, *fragments)


def test_outputs_are_written_to_the_exact_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "result.bin"  # np.savez alone would write result.bin.npz
    code, stdout, err = run_cli(capsys, "run", str(cumsum_model(tmp_path / "m.onnx")), "-t", "reference",
                                "--outputs", str(out))
    assert code == 0, err
    assert f"wrote {out}" in stdout and out.is_file() and not (tmp_path / "result.bin.npz").exists()
    with np.load(out) as data:
        assert data["y"].shape == (2, 8)


def test_non_ascii_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "модели ü"
    folder.mkdir()
    path = cumsum_model(folder / "модель.onnx")
    code, out, err = run_cli(capsys, "run", str(path), "-t", "reference", "--outputs", str(folder / "выход.npz"))
    assert code == 0, err
    code, _, err = run_cli(capsys, "run", str(folder / "нет.onnx"), "-t", "reference")
    assert_one_line_error(code, err, "нет.onnx")


def test_simulate_npy_inputs_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("snippets_shave")
    blob = tmp_path / "m.blob"
    code, _, err = run_cli(capsys, "compile", str(_swish_model(tmp_path / "m.onnx")), "-t", "shave", "-o", str(blob))
    assert code == 0, err
    np.save(tmp_path / "x.npy", np.zeros((2, 8), np.float32))
    code, _, err = run_cli(capsys, "simulate", str(blob), "--inputs", str(tmp_path / "x.npy"))
    assert_one_line_error(code, err, "x.npy", ".npz")
    np.savez(tmp_path / "in.npz", x=np.zeros((2, 8), np.float32))
    code, _, err = run_cli(capsys, "simulate", str(blob), "--inputs", str(tmp_path / "in.npz"), "--outputs",
                           str(tmp_path / "nowhere" / "out.npz"))
    assert_one_line_error(code, err, "out.npz", "cannot write outputs")


def test_debug_shows_the_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["--debug", "inspect", str(tmp_path / "nope.onnx")],
        ["inspect", str(tmp_path / "nope.onnx"), "--debug"],
    ):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2
        assert "Traceback" in err and "ModelFormatError" in err

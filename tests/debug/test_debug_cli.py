"""`snippets inspect --lir/--asm` and `snippets run --perf` on the interpreter target (onnx.helper builds
the model; the expected lines are those of the lowering the issue describes: loops around loads and stores)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from onnx import TensorProto, helper, save

from snippets_core.cli import main


def eltwise_model(path: Path) -> Path:
    shape = [2, 3, 5, 37]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, shape)
    nodes = [
        helper.make_node("Add", ["x", "y"], ["s"]),
        helper.make_node("Exp", ["s"], ["e"]),
        helper.make_node("Relu", ["e"], ["out"]),
    ]
    graph = helper.make_graph(nodes, "eltwise", [x, y], [out])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_inspect_lir_prints_the_final_linear_ir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(eltwise_model(tmp_path / "m.onnx"))
    code, out, err = run_cli(
        capsys, "inspect", path, "--target", "interpreter", "--lir", "-c", 'target_options={"vector_size": 8}'
    )
    assert code == 0, err
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.endswith("final LinearIR (target interpreter)"))
    lir = [line.strip() for line in lines[start + 1 :]]
    assert lir[0].startswith("LinearIR master_shape=")
    ops = [re.match(r"%\d+ = (\w+)\(", line).group(1) for line in lir if line.startswith("%")]
    # two inputs loaded, Add/Exp/Relu, one store, inside LoopBegin/LoopEnd (37 = 4*8 + 5: a main loop and a tail)
    assert ops.count("LoopBegin") == ops.count("LoopEnd") == 2
    for body in (
        ops[ops.index("LoopBegin") : ops.index("LoopEnd")],
        ops[len(ops) - 1 - ops[::-1].index("LoopBegin") :],
    ):
        assert body[1:6] == ["Load", "Load", "Add", "Exp", "Relu"] and "Store" in body
    assert "{count=8 offset=0}" in "\n".join(lir) and "{count=5 offset=0}" in "\n".join(lir)
    assert any(line.startswith("loop 0 (expanded main): work_amount=32 increment=8") for line in lir)


def test_inspect_lir_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(eltwise_model(tmp_path / "m.onnx"))
    code, out, _ = run_cli(capsys, "inspect", path, "--target", "interpreter", "--lir", "--json")
    assert code == 0
    (sg,) = json.loads(out)["subgraphs"]
    assert sg["linear_ir"].startswith("LinearIR master_shape=") and "= Store(" in sg["linear_ir"]


@pytest.mark.parametrize(
    ("target", "fragment"), [("interpreter", "does not generate machine code"), ("reference", "generates no code")]
)
def test_inspect_asm_needs_a_machine_code_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, fragment: str
) -> None:
    path = str(eltwise_model(tmp_path / "m.onnx"))
    code, _, err = run_cli(capsys, "inspect", path, "--target", target, "--asm")
    assert code == 2 and len(err.strip().splitlines()) == 1 and fragment in err


def test_run_perf_prints_calls_total_mean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(eltwise_model(tmp_path / "m.onnx"))
    code, out, err = run_cli(capsys, "run", path, "--target", "interpreter", "--repeat", "3", "--perf")
    assert code == 0, err
    lines = out.splitlines()
    head = lines.index("perf counters:")
    assert lines[head + 1].split() == ["subgraph", "region", "calls", "total", "mean", "unit"]
    name, region, calls, total, mean, unit = lines[head + 2].split()
    described = next(line for line in lines if "] Subgraph " in line)  # cm.describe(): "[where] Subgraph NAME: ops"
    assert described.split("] Subgraph ")[1].split(":")[0] == name
    assert region == "kernel" and unit == "ns"
    assert int(calls) > 0 and int(calls) % 3 == 0 and int(total) > 0
    assert float(mean) == pytest.approx(int(total) / int(calls), abs=0.1)

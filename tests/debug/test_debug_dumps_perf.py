"""LinearIR dumps at chosen passes and perf counters, through the interpreter target.

Oracles: xml.etree parses the XML dumps back; file names follow the documented pattern; perf counters are
bounded by the wall clock measured around the calls and count one call per parallel-domain index."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from snippets_core.codegen.interpreter import InterpreterTarget, compile_subgraph
from snippets_core.codegen.subgraph_codegen import generate_subgraph
from snippets_core.debug.config import DebugConfig, DebugConfigError, LirDumpConfig
from snippets_core.debug.perf_count import format_perf, perf_counters, subgraph_counters
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.ops.unary import Exp, Relu
from snippets_core.lowered.linear_ir import Config
from snippets_core.runtime.compiled_model import compile_model

SHAPE = (2, 3, 5, 37)


def _subgraph(name: str = "sg0") -> Subgraph:
    p0, p1 = Parameter("f32", SHAPE, name="a"), Parameter("f32", SHAPE, name="b")
    body = Model([Result(Relu(Exp(Add(p0, p1))), name="y")], [p0, p1])
    return Subgraph(Parameter("f32", SHAPE, name="a"), Parameter("f32", SHAPE, name="b"), body=body, name=name)


def _model() -> Model:
    p0, p1 = Parameter("f32", SHAPE, name="a"), Parameter("f32", SHAPE, name="b")
    return Model([Result(Relu(Exp(Add(p0, p1))), name="y")], [p0, p1])


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return rng.standard_normal(SHAPE).astype(np.float32), rng.standard_normal(SHAPE).astype(np.float32)


def test_dumps_after_named_passes_and_the_final_linear_ir(tmp_path: Path) -> None:
    debug = DebugConfig(
        dump_lir=LirDumpConfig(
            str(tmp_path), ("text", "xml", "xml_data_flow", "mermaid"), ("InsertLoops", "assign-registers")
        )
    )
    gen = generate_subgraph(_subgraph("my/sg"), InterpreterTarget(8), debug=debug)
    names = sorted(p.name for p in tmp_path.iterdir())
    stems = sorted({n.split(".")[0] for n in names})
    # <subgraph>_<index>_<pass>: the subgraph name made file-safe, the index counting every LinearIR pass
    assert len(stems) == 3 and stems[-1] == "my_sg_final"
    loops_stem = next(s for s in stems if s.endswith("_insert-loops"))
    regs_stem = next(s for s in stems if s.endswith("_assign-registers"))
    assert loops_stem.startswith("my_sg_") and regs_stem.startswith("my_sg_")
    assert int(loops_stem.split("_")[2]) < int(regs_stem.split("_")[2])
    for stem in stems:
        assert {f"{stem}.txt", f"{stem}.xml", f"{stem}.df.xml", f"{stem}.mmd"} <= set(names)

    # the final text dump is the final LinearIR; the XML dumps parse back to the same expressions
    final_text = (tmp_path / "my_sg_final.txt").read_text()
    assert final_text.splitlines()[0] == gen.linear_ir.to_text().splitlines()[0]
    types = [e.type_name for e in gen.linear_ir.exprs]
    cf = ET.parse(tmp_path / "my_sg_final.xml").getroot()
    assert [layer.get("type") for layer in cf.iter("layer")] == types
    df = ET.parse(tmp_path / "my_sg_final.df.xml").getroot()
    assert [layer.get("type") for layer in df.iter("layer")] == [t for t in types if t not in ("LoopBegin", "LoopEnd")]
    n_layers = len(list(df.iter("layer")))
    for edge in df.iter("edge"):
        assert 0 <= int(edge.get("from-layer")) < n_layers and 0 <= int(edge.get("to-layer")) < n_layers
    # InsertLoops is the pass that brings LoopBegin/LoopEnd in: its dump has them, registers are not assigned yet
    after_loops = (tmp_path / f"{loops_stem}.txt").read_text()
    assert "= LoopBegin()" in after_loops and "reg=" not in after_loops
    assert "reg=vec[" in (tmp_path / f"{regs_stem}.txt").read_text()
    mmd = (tmp_path / "my_sg_final.mmd").read_text().splitlines()
    assert mmd[0] == "flowchart TD"
    assert sum(1 for line in mmd if line.strip().startswith("e") and '"%' in line) == len(types)


def test_unknown_pass_name_is_a_typed_error(tmp_path: Path) -> None:
    debug = DebugConfig(dump_lir=LirDumpConfig(str(tmp_path), ("text",), ("insert-lops",)))
    with pytest.raises(DebugConfigError, match="insert-lops|insertlops"):
        generate_subgraph(_subgraph(), InterpreterTarget(8), debug=debug)


def test_dumps_from_the_environment_through_compile_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SNIPPETS_DUMP_LIR", f"dir:{tmp_path},format:xml,passes:final")
    cm = compile_model(_model(), target="interpreter")
    (sg,) = cm.subgraphs
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [f"{sg.name}_final.xml".replace("/", "_")]
    ET.parse(tmp_path / files[0])


@pytest.mark.parametrize("runs", [1, 3])
def test_interpreter_perf_counters_count_each_kernel_call(runs: int) -> None:
    sg = _subgraph()
    debug = DebugConfig(perf_count="chrono")
    # no domain optimization: a 2D tile, so the parallel domain is the master shape without its last two
    # dims, 2*3 kernel calls per run
    run = compile_subgraph(sg, 8, config=Config(enable_domain_optimization=False), debug=debug)
    a, b = _inputs()
    t0 = time.perf_counter_ns()
    for _ in range(runs):
        (y,) = run([a, b])
    elapsed = time.perf_counter_ns() - t0
    np.testing.assert_allclose(y, np.maximum(np.exp(a.astype(np.float64) + b), 0), rtol=1e-6)
    (counters,) = subgraph_counters(sg)
    assert counters.unit == "ns" and counters.label == "kernel"
    assert counters.calls == runs * 2 * 3
    assert 0 < counters.total <= elapsed


def test_perf_counters_in_the_final_linear_ir_wrap_the_body() -> None:
    gen = generate_subgraph(_subgraph(), InterpreterTarget(8), debug=DebugConfig(perf_count="default"))
    types = [e.type_name for e in gen.linear_ir.exprs]
    begin, end = types.index("PerfCountBegin"), types.index("PerfCountEnd")
    last_param = max(i for i, t in enumerate(types) if t == "Parameter")
    first_result = types.index("Result")
    assert begin == last_param + 1 and end == first_result - 1
    assert types.index("LoopBegin") > begin and max(i for i, t in enumerate(types) if t == "LoopEnd") < end
    assert not gen.linear_ir.exprs[begin].loop_ids


def test_compile_model_perf_report_and_rdtsc_refused_by_the_interpreter() -> None:
    cm = compile_model(_model(), target="interpreter", config={"target_options": {"debug": {"perf_count": "1"}}})
    a, b = _inputs()
    cm({"a": a, "b": b})
    cm({"a": a, "b": b})
    (row,) = perf_counters(cm)
    assert row.subgraph == cm.subgraphs[0].name and row.unit == "ns" and row.calls > 0 and row.calls % 2 == 0
    assert row.mean == row.total / row.calls
    report = format_perf(perf_counters(cm))
    assert row.subgraph in report and str(row.calls) in report
    with pytest.raises(DebugConfigError, match="rdtsc"):
        compile_model(_model(), target="interpreter", config={"target_options": {"debug": {"perf_count": "rdtsc"}}})


def test_a_target_without_perf_clocks_refuses_perf_counters() -> None:
    class NoClock(InterpreterTarget):
        perf_clocks = ()

    with pytest.raises(DebugConfigError, match="no perf-counter emitters"):
        generate_subgraph(_subgraph(), NoClock(8), debug=DebugConfig(perf_count="default"))


def test_outer_loops_get_their_own_regions_inside_the_kernel_region() -> None:
    from snippets_core.ir.ops.softmax import Softmax

    p0, p1 = Parameter("f32", (4, 8, 77), name="a"), Parameter("f32", (4, 8, 77), name="b")
    model = Model([Result(Softmax(Exp(Add(p0, p1)), axis=-1), name="y")], [p0, p1])
    cm = compile_model(model, target="interpreter", config={"target_options": {"debug": {"perf_count": "1+loops"}}})
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((4, 8, 77)).astype(np.float32) for _ in range(2))
    y = cm({"a": a, "b": b})["y"]
    t = np.exp(a.astype(np.float64) + b)
    e = np.exp(t - t.max(-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    rows = perf_counters(cm)
    assert len(rows) >= 2 and rows[0].region == "kernel"
    assert all(r.region.startswith("outer loop ") for r in rows[1:])
    kernel = rows[0]
    # every outer loop runs once per kernel call, and all of them run inside the kernel region
    assert all(r.calls == kernel.calls for r in rows[1:])
    assert sum(r.total for r in rows[1:]) <= kernel.total

"""x86-64 debug capabilities: rdtsc perf counters, the segfault detector, generation for inspect --lir/--asm.

Oracles: numpy for the kernels' results, the iced decoder's text for the instrumented code, the kernel's
parallel domain for the number of calls, and the final LinearIR's text for the faulting expression."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np
import pytest

from snippets_core.cli import main
from snippets_core.config import CompileConfig
from snippets_core.debug.perf_count import perf_counters, subgraph_counters
from snippets_core.debug.segfault import KernelFaultError
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.ops.unary import Exp, Relu
from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64.debug_caps import IsolatedKernelExecutor
from snippets_x86_64.runtime import compile_subgraph
from snippets_x86_64.target import X86_64Target

pytestmark = pytest.mark.avx512

SHAPE = (6, 3, 5, 37)


def _body() -> Model:
    p0, p1 = Parameter("f32", SHAPE, name="a"), Parameter("f32", SHAPE, name="b")
    return Model([Result(Relu(Exp(Add(p0, p1))), name="y")], [p0, p1])


def _subgraph(name: str) -> Subgraph:
    return Subgraph(Parameter("f32", SHAPE, name="a"), Parameter("f32", SHAPE, name="b"), body=_body(), name=name)


def _config(threads: int = 1, **debug: object) -> CompileConfig:
    return CompileConfig.from_mapping(
        {"num_threads": threads, "target_options": {"parallel_min_bytes": 0, "debug": debug}}
    )


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    return rng.standard_normal(SHAPE).astype(np.float32), rng.standard_normal(SHAPE).astype(np.float32)


def _expected(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(np.exp(a.astype(np.float64) + b), 0)


@pytest.mark.parametrize("threads", [1, 2])
def test_rdtsc_perf_counters_count_every_kernel_call(threads: int) -> None:
    sg = _subgraph("perf")
    ex = compile_subgraph(sg, _config(threads, perf_count="rdtsc"), None)
    assert ex is not None, sg.rt_info
    a, b = _inputs()
    runs = 4
    for _ in range(runs):
        (y,) = ex([a, b])
    np.testing.assert_allclose(y, _expected(a, b), rtol=2e-6)
    (counters,) = subgraph_counters(sg)
    assert counters.unit == "cycles"
    # the harness calls the kernel once per index of the parallel domain; the locked adds lose none across threads
    assert counters.calls == runs * math.prod(ex.kernel.info.parallel_domain)
    assert counters.total > 0
    text = ex.kernel.disassemble()
    assert len(re.findall(r"\brdtsc\b", text)) == 2
    assert len(re.findall(r"\block add (qword ptr )?\[rcx(\+8)?\]", text)) == 2


def test_perf_counters_through_compile_model_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SNIPPETS_PERF_COUNT", "1")
    cm = compile_model(_body(), target="x86_64_avx512", config={"num_threads": 1, "snippets_mode": "IgnoreCallback"})
    a, b = _inputs()
    cm({"a": a, "b": b})
    (row,) = perf_counters(cm)
    assert row.unit == "cycles" and row.calls > 0 and row.total > 0


def test_segfault_detector_names_the_faulting_load_and_store() -> None:
    sg = _subgraph("broken")
    ex = compile_subgraph(sg, _config(segfault_detector=True), None)
    assert isinstance(ex, IsolatedKernelExecutor)
    a, b = _inputs()
    (y,) = ex([a, b])  # a good call runs in the child and its outputs come back
    np.testing.assert_allclose(y, _expected(a, b), rtol=2e-6)
    out = np.empty(SHAPE, np.float32)
    bogus = 0x10  # in the never-mapped first page
    parent = os.getpid()
    with pytest.raises(KernelFaultError) as info:
        ex.run_pointers([a.ctypes.data, bogus, out.ctypes.data])  # input 1 corrupted
    err = info.value
    assert os.getpid() == parent  # the test process survived: only the child died
    assert err.subgraph == "broken" and err.signal_name == "SIGSEGV" and err.op == "Load"
    assert re.match(rf"%{err.expr_index} = Load\(%1\)", err.lir_line), err.lir_line
    assert f"%{err.expr_index} Load" in str(err) and "broken" in str(err)
    with pytest.raises(KernelFaultError) as info:
        ex.run_pointers([a.ctypes.data, b.ctypes.data, bogus])  # the output corrupted
    assert info.value.op == "Store" and re.match(rf"%{info.value.expr_index} = Store\(", info.value.lir_line)
    (y2,) = ex([a, b])  # and the kernel still works afterwards
    np.testing.assert_array_equal(y2, y)


def test_segfault_detector_and_perf_counters_together() -> None:
    sg = _subgraph("both")
    ex = compile_subgraph(sg, _config(segfault_detector=True, perf_count="rdtsc"), None)
    a, b = _inputs()
    outs = [np.empty(SHAPE, np.float32)]
    ex([a, b], outs)  # preallocated outputs are filled from the child's shared memory
    np.testing.assert_allclose(outs[0], _expected(a, b), rtol=2e-6)
    (counters,) = subgraph_counters(sg)
    # the counters live in shared memory: the calls made in the child count in the parent
    assert counters.calls == math.prod(ex.kernel.info.parallel_domain) and counters.total > 0


def test_generate_subgraph_gives_the_final_linear_ir_and_the_kernel() -> None:
    gen = X86_64Target().generate_subgraph(_subgraph("gen"), _config(), None)
    types = [e.type_name for e in gen.linear_ir.exprs]
    assert {"LoopBegin", "Load", "Add", "Exp", "Relu", "Store", "LoopEnd"} <= set(types)
    assert "vaddps" in gen.kernel.disassemble()


def test_cli_inspect_asm_and_lir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from onnx import TensorProto, helper, save

    dims = list(SHAPE)
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "y"], ["s"]),
            helper.make_node("Exp", ["s"], ["e"]),
            helper.make_node("Relu", ["e"], ["out"]),
        ],
        "eltwise",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims) for n in ("x", "y")],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, dims)],
    )
    path = tmp_path / "m.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    code = main(
        ["inspect", str(path), "--target", "x86_64_avx512", "--lir", "--asm", "-c", "snippets_mode=IgnoreCallback"]
    )
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    lir = lines.index(next(line for line in lines if line.endswith("final LinearIR (target x86_64_avx512)")))
    asm = lines.index(next(line for line in lines if line.endswith("kernel disassembly (target x86_64_avx512)")))
    assert lir < asm
    assert any(re.match(r"\s+%\d+ = Load\(%0\) \{count=16 offset=0\}", line) for line in lines[lir:asm])
    assert any(re.match(r"\s+%\d+ = LoopEnd\(", line) for line in lines[lir:asm])
    body = lines[asm + 1 :]
    assert all(re.match(r"\s+[0-9a-f]+: \S", line) for line in body if line.strip())
    assert any("vaddps" in line for line in body) and any("vmovups" in line for line in body)


def test_rdtsc_outer_loop_regions_nest_in_the_kernel_region() -> None:
    sg = _subgraph("loops")
    ex = compile_subgraph(sg, _config(2, perf_count="rdtsc+loops"), None)
    a, b = _inputs()
    for _ in range(3):
        (y,) = ex([a, b])
    np.testing.assert_allclose(y, _expected(a, b), rtol=2e-6)
    kernel, *loops = subgraph_counters(sg)
    assert kernel.label == "kernel" and loops and all(c.label.startswith("outer loop ") for c in loops)
    calls = 3 * math.prod(ex.kernel.info.parallel_domain)
    assert kernel.calls == calls and all(c.calls == calls for c in loops)
    assert 0 < sum(c.total for c in loops) <= kernel.total


@pytest.mark.avx512
def test_perf_counter_memory_lives_as_long_as_the_executor(monkeypatch):
    """The kernel writes its cycle counts into memory the LinearIR's PerfCountBegin owns: an executor kept
    after its Subgraph (and the Subgraph's rt_info) is gone must keep that memory alive."""
    import gc
    import weakref

    import numpy as np

    from snippets_core import compile_model
    from snippets_core.debug.perf_count import SUBGRAPH_PERF_COUNTERS
    from snippets_core.frontends import builder as sb

    monkeypatch.setenv("SNIPPETS_PERF_COUNT", "rdtsc")
    x = sb.parameter([4, 64], "f32", name="x")
    cm = compile_model(sb.model([sb.relu(sb.add(x, 1.0))]), target="x86_64_avx512")
    (step,) = cm._steps
    executor = step.run
    counters = weakref.ref(cm.subgraphs[0].rt_info[SUBGRAPH_PERF_COUNTERS][0])
    del cm, step
    gc.collect()
    assert counters() is not None
    a = np.linspace(-2, 2, 256, dtype=np.float32).reshape(4, 64)
    for _ in range(3):
        (out,) = executor([a])
        np.testing.assert_array_equal(out, np.maximum(a + 1, 0))
    del executor
    gc.collect()
    assert counters() is None

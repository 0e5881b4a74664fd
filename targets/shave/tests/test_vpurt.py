"""The VPURT IR: blob <-> IR <-> text round trips, the scratchpad labelled as an output, and the physical
barrier mapping (random task graphs under a small limit, checked against the simulator's trace), with its
error cases in the compiler, the loader and the simulator."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from snippets_core import compile_model
from snippets_core.frontends import builder as sb
from snippets_shave import reference_kernels as rk
from snippets_shave.blob import Blob, Executor, Target, write_blob
from snippets_shave.constants import MAX_BARRIERS, DType
from snippets_shave.errors import BarrierLimitError, DeadlockError, UnproducedBarrierError
from snippets_shave.schedule import ScheduleBuilder
from snippets_shave.sim import load_blob, simulate
from snippets_shave.vpurt.ir import SwKernelOp
from snippets_shave.vpurt.parser import VpurtParseError, parse_module
from snippets_shave.vpurt.printer import print_module
from snippets_shave.vpurt.serialize import module_from_blob

RNG = np.random.default_rng(7)


def _softmax_add_model():
    x = sb.parameter([4, 3, 37], "f32", name="x")
    return sb.model([sb.add(sb.softmax(x, -1), x)], name="softmax_add")


def test_compiled_model_round_trips_and_labels_the_scratchpad_an_output() -> None:
    cm = compile_model(_softmax_add_model(), target="shave")
    module = module_from_blob(cm.loaded.blob)
    assert parse_module(cm.schedule()) == module
    ops = [t.op for _, t in module.tasks() if isinstance(t.op, SwKernelOp)]
    assert ops and all(len(op.inputs) == 2 and len(op.outputs) == 2 for op in ops)
    assert all(op.outputs[1].tensor is not None and op.outputs[1].tensor.name.endswith(".scratch") for op in ops)
    line = next(line for line in cm.schedule().splitlines() if "VPUIP.SW.Kernel @" in line)
    ins, outs = line.split(" outputs(")
    assert ".scratch" not in ins and '.scratch", 192xui8' in outs


def test_parsed_text_equals_but_carries_no_code() -> None:
    cm = compile_model(_softmax_add_model(), target="shave")
    parsed = parse_module(cm.schedule())
    assert parsed.kernels[0].code.data == b"" and parsed.kernels[0].code.size > 0
    with pytest.raises(Exception, match="no kernel code attached"):
        from snippets_shave.vpurt.serialize import module_to_blob

        module_to_blob(parsed)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace("VPURT.Graph", "VPURT.Graf"), "line"),
        (lambda t: t.replace("%arg1)", "%arg7)", 1), "arg"),
        (lambda t: t.replace("@VPU.SW::@snippet_", "@VPU.SW::@nope_", 1), "not declared"),
        (lambda t: t + "}", "end of the text"),
    ],
)
def test_bad_text_is_a_typed_parse_error(edit, message: str) -> None:  # type: ignore[no-untyped-def]
    text = compile_model(_softmax_add_model(), target="shave").schedule()
    with pytest.raises(VpurtParseError, match=message):
        parse_module(edit(text))


# -- physical barriers ------------------------------------------------------------------------------------------
def _random_graph(seed: int, units: int = 10, limit: int = 6) -> tuple[ScheduleBuilder, dict[str, np.ndarray]]:
    """``units`` chains (DMA in, relu on a SHAVE, DMA out) on random queues, each chain's DMA-in also waiting
    on random tasks of the two chains before it; every task updates a barrier of its own."""
    rng = random.Random(seed)
    b = ScheduleBuilder(f"graph{seed}", target=Target(tiles=2, shaves_per_tile=2, max_barriers=limit))
    n = 16
    x, y = b.add_input("x", (units * n,), DType.F32), b.add_output("y", (units * n,), DType.F32)
    k = b.add_kernel(rk.relu("f32"))
    done: list[list[int]] = []
    for u in range(units):
        tile = rng.randrange(2)
        c_in = b.cmx(tile, b.cmx_workspace_start + 128 * u, (n,), DType.F32, f"in{u}")
        c_out = b.cmx(tile, b.cmx_workspace_start + 128 * (units + u), (n,), DType.F32, f"out{u}")
        extra = [bar for prev in done[-2:] for bar in prev if rng.random() < 0.4]
        b_in, b_act, b_out = b.new_barrier(), b.new_barrier(), b.new_barrier()
        b.dma(b.view(x, u * n, n), c_in, engine=rng.randrange(2), wait=extra, update=[b_in], name=f"in{u}")
        b.act(k, tile, [c_in, c_out], wait=[b_in], update=[b_act], name=f"relu{u}")
        b.dma(c_out, b.view(y, u * n, n), engine=rng.randrange(2), wait=[b_act], update=[b_out], name=f"out{u}")
        done.append([b_in, b_act, b_out])
    b.prune_barriers()
    return b, {"x": RNG.uniform(-2, 2, units * n).astype(np.float32)}


def _check_trace_order(blob: Blob, trace: list) -> None:  # type: ignore[type-arg]
    """No task starts before every producer of every barrier it waits on has ended."""
    producers: dict[int, list[str]] = {}
    for tl in blob.task_lists:
        for t in tl.tasks:
            for bar in t.update:
                producers.setdefault(bar, []).append(t.name)
    when = {(e.task, e.event): i for i, e in enumerate(trace)}
    for tl in blob.task_lists:
        for t in tl.tasks:
            for bar in t.wait:
                for p in producers[bar]:
                    assert when[(p, "end")] < when[(t.name, "start")], f"{t.name} started before {p} ended"


@pytest.mark.parametrize("seed", range(6))
def test_random_graphs_mapped_under_a_small_limit_keep_their_order(seed: int) -> None:
    b, inputs = _random_graph(seed)
    blob = b.build()
    physical = [bar.real_id for bar in blob.barriers]
    assert len(blob.barriers) > 6 and 0 <= min(physical) and max(physical) < 6  # reuse happened
    for s in (None, 1, 2, 3):
        res = simulate(write_blob(blob), inputs, seed=s)
        np.testing.assert_array_equal(res.outputs["y"], np.maximum(inputs["x"], 0))
        _check_trace_order(blob, res.trace)


def test_too_few_physical_barriers_is_a_typed_error_naming_barrier_and_task() -> None:
    b, _ = _random_graph(3, limit=1)
    with pytest.raises(BarrierLimitError, match=r"barrier %b\d+ .* at task '\w+' \(id \d+\), but all 1 "):
        b.build()


def test_platform_limits_are_the_presets() -> None:
    assert Target().max_barriers == MAX_BARRIERS["37xx"] == 64 and Target.lnl().max_barriers == MAX_BARRIERS["40xx"]


def test_compiler_maps_a_model_onto_few_barriers_and_rejects_too_few() -> None:
    x = sb.parameter([16, 8, 33], "f32", name="x")
    model = sb.model([sb.relu(sb.add(x, x))], name="few")
    value = RNG.uniform(-2, 2, (16, 8, 33)).astype(np.float32)
    cm = compile_model(model, target="shave", config={"target_options": {"slots_per_tile": 4, "max_barriers": 6}})
    assert len(cm.loaded.blob.barriers) > 6 and {b.real_id for b in cm.loaded.blob.barriers} <= set(range(6))
    np.testing.assert_array_equal(cm({"x": value})[cm.output_names[0]], np.maximum(value + value, 0))
    with pytest.raises(BarrierLimitError, match="all 1 of the target"):
        compile_model(model, target="shave", config={"target_options": {"slots_per_tile": 4, "max_barriers": 1}})


def _unproduced() -> ScheduleBuilder:
    b = ScheduleBuilder("orphan")
    x, y = b.add_input("x", (4,), DType.F32), b.add_output("y", (4,), DType.F32)
    c = b.cmx(0, b.cmx_workspace_start, (4,), DType.F32)
    b.dma(x, c, name="copy_in")
    b.dma(c, y, engine=1, wait=[b.new_barrier()], name="copy_out")
    return b


def test_a_waited_barrier_nobody_produces_is_rejected_by_compiler_and_loader() -> None:
    with pytest.raises(UnproducedBarrierError, match=r"task 'copy_out' \(id 1\) waits on barrier %b0"):
        _unproduced().build()
    with pytest.raises(UnproducedBarrierError, match=r"barriers\[0\]: task 'copy_out' \(id 1\) waits on it"):
        load_blob(write_blob(_unproduced().build(physical=False)))


def test_loader_rejects_a_physical_id_beyond_the_limit() -> None:
    b, _ = _random_graph(0)
    blob = b.build()
    bad = dataclasses.replace(blob.barriers[2], real_id=blob.header.target.max_barriers)
    blob = dataclasses.replace(blob, barriers=(*blob.barriers[:2], bad, *blob.barriers[3:]))
    with pytest.raises(BarrierLimitError, match=r"barriers\[2\].real_id = 6: the target has physical barriers 0..5"):
        load_blob(write_blob(blob))


def test_simulator_holds_a_task_until_its_physical_barrier_is_free() -> None:
    """Two live barriers forced onto one physical id: the second cannot be configured while the first is
    pending, and the task waiting on both can never start."""
    b = ScheduleBuilder("clash")
    x, y = b.add_input("x", (4,), DType.F32), b.add_output("y", (4,), DType.F32)
    k = b.add_kernel(rk.eltwise_binary("add", "f32"))
    c0, c1, c2 = (b.cmx(0, b.cmx_workspace_start + 64 * i, (4,), DType.F32) for i in range(3))
    b0, b1, b2 = b.new_barrier(), b.new_barrier(), b.new_barrier()
    b.dma(x, c0, update=[b0], name="in0")
    b.dma(x, c1, engine=1, update=[b1], name="in1")
    b.act(k, 0, [c0, c1, c2], wait=[b0, b1], update=[b2], name="add")
    b.dma(c2, y, wait=[b2], name="out")
    blob = b.build()
    assert blob.barriers[0].real_id != blob.barriers[1].real_id
    np.testing.assert_array_equal(simulate(blob, {"x": np.ones(4, np.float32)}).outputs["y"], 2 * np.ones(4))
    clash = tuple(dataclasses.replace(bar, real_id=0 if bar.id < 2 else 1) for bar in blob.barriers)
    with pytest.raises(DeadlockError, match="in1"):
        simulate(dataclasses.replace(blob, barriers=clash), {"x": np.ones(4, np.float32)})


def test_executors_in_the_printed_task_lists() -> None:
    b, _ = _random_graph(1)
    module = b.build_module()
    assert {tl.executor for tl in module.task_lists} == {Executor.DMA, Executor.ACT_SHAVE}
    text = print_module(module)
    assert text.count("VPURT.ConfigurePhysicalBarrier <0>") > 1 and "VPURT.DeclareVirtualBarrier" not in text
    assert "VPURT.DeclareVirtualBarrier" in print_module(b.build_module(physical=False))

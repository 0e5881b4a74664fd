"""Bad blobs and bad kernels: every failure is a typed error naming the field, task or address."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from snippets_core.errors import BlobFormatError, InputError
from snippets_shave import reference_kernels as rk
from snippets_shave.abi import SOFTMAX_PARAMS, MemRef
from snippets_shave.asm import Assembler
from snippets_shave.blob import Barrier, Target, Version, write_blob
from snippets_shave.constants import WIN_D, WIN_F, DType
from snippets_shave.elf import write_kernel_elf
from snippets_shave.errors import BarrierCountError, BarrierCycleError, DeadlockError, KernelTrap, StepLimitExceeded, WindowFault
from snippets_shave.schedule import ScheduleBuilder
from snippets_shave.sim import run


def _one_kernel(text: bytes, target: Target | None = None, n: int = 8) -> tuple[bytes, dict[str, np.ndarray]]:
    """One unary invocation of ``text`` on tile 0 with DMA in and out."""
    elf = write_kernel_elf("k", text, params_signature="mm:", params_size=80)
    sb = ScheduleBuilder("one", target=target or Target())
    x, y = sb.add_input("x", (n,), DType.F32), sb.add_output("y", (n,), DType.F32)
    k = sb.add_kernel(elf)
    base = sb.cmx_workspace_start
    cin, cout = sb.cmx(0, base, (n,), DType.F32), sb.cmx(0, base + 64, (n,), DType.F32)
    b0, b1 = sb.new_barrier(), sb.new_barrier()
    sb.dma(x, cin, update=[b0])
    sb.act(k, 0, [cin, cout], wait=[b0], update=[b1], name="kernel")
    sb.dma(cout, y, wait=[b1])
    return write_blob(sb.build()), {"x": np.zeros(n, np.float32)}


def _asm(source: str) -> bytes:
    a = Assembler()
    a.text(source)
    return a.assemble()


def test_read_outside_the_windows_is_a_window_fault() -> None:
    blob, x = _one_kernel(_asm("LD32 r2, r0, 100000\nRET"))
    with pytest.raises(WindowFault, match="task 'kernel'.*past the .* mapped bytes of WIN_E"):
        run(blob, x)
    blob, x = _one_kernel(_asm("MOVI r2, 0x100\nLD32 r3, r2, 0\nRET"))
    with pytest.raises(WindowFault, match="outside every window"):
        run(blob, x)


def test_write_to_code_window_is_a_window_fault() -> None:
    blob, x = _one_kernel(_asm(f"MOVI r2, {WIN_D}\nST32 r2, r2, 0\nRET"))
    with pytest.raises(WindowFault, match="read-only WIN_D"):
        run(blob, x)


def test_vector_store_past_cmx_is_a_window_fault() -> None:
    target = Target(cmx_bytes_per_tile=64 * 1024)
    blob, x = _one_kernel(_asm(f"MOVI r2, {WIN_F + 64 * 1024 - 8}\nVST.f32 v0, r2, 0\nRET"), target)
    with pytest.raises(WindowFault, match="WIN_F"):
        run(blob, x)


def test_runaway_loop_hits_the_step_limit() -> None:
    blob, x = _one_kernel(_asm("loop:\nJMP loop"))
    with pytest.raises(StepLimitExceeded, match="more than 1000 instructions"):
        run(blob, x, step_limit=1000)


def test_trap_and_falling_off_the_code() -> None:
    blob, x = _one_kernel(_asm("TRAP 7"))
    with pytest.raises(KernelTrap, match="TRAP 7"):
        run(blob, x)
    blob, x = _one_kernel(_asm("NOP"))
    with pytest.raises(KernelTrap, match="ran past the last instruction"):
        run(blob, x)
    blob, x = _one_kernel(_asm("MOVI r31, 12\nRET"))
    with pytest.raises(KernelTrap, match="not an instruction"):
        run(blob, x)


def test_softmax_on_a_wrong_axis_traps() -> None:
    sb = ScheduleBuilder("sm")
    x, y = sb.add_input("x", (2, 4), DType.F32), sb.add_output("y", (2, 4), DType.F32)
    k = sb.add_kernel(rk.softmax_last_axis_f32())
    base = sb.cmx_workspace_start
    cin, cout = sb.cmx(0, base, (2, 4), DType.F32), sb.cmx(0, base + 64, (2, 4), DType.F32)
    b0, b1 = sb.new_barrier(), sb.new_barrier()
    sb.dma(x, cin, update=[b0])
    sb.act(k, 0, [cin, cout], {"axis": 0}, wait=[b0], update=[b1], layout=SOFTMAX_PARAMS, name="softmax")
    sb.dma(cout, y, wait=[b1])
    with pytest.raises(KernelTrap, match="task 'softmax'.*TRAP 1"):
        run(write_blob(sb.build()), {"x": np.zeros((2, 4), np.float32)})


def test_barrier_that_can_never_be_released_is_a_deadlock() -> None:
    sb = ScheduleBuilder("dead")
    x, y = sb.add_input("x", (4,), DType.F32), sb.add_output("y", (4,), DType.F32)
    c = sb.cmx(0, sb.cmx_workspace_start, (4,), DType.F32)
    b = sb.new_barrier()
    # the consumer sits in front of its only producer in the same in-order DMA queue
    sb.dma(c, y, engine=0, wait=[b], name="copy_out")
    sb.dma(x, c, engine=0, update=[b], name="copy_in")
    with pytest.raises(BarrierCycleError, match="copy_in"):  # the compiler's barrier mapping finds no task order
        sb.build()
    with pytest.raises(DeadlockError, match=r"DMA0: task 'copy_out' .* waits b0 \(P=1\)"):
        run(write_blob(sb.build(physical=False)), {"x": np.zeros(4, np.float32)})


def test_head_of_line_blocking_on_a_single_shave_tile_deadlocks() -> None:
    target = Target(tiles=1, shaves_per_tile=1)
    sb = ScheduleBuilder("hol", target=target)
    x, y = sb.add_input("x", (4,), DType.F32), sb.add_output("y", (4,), DType.F32)
    k = sb.add_kernel(rk.relu("f32"))
    base = 16384  # above the stacks of one or two SHAVEs
    c0, c1, c2 = (sb.cmx(0, base + 64 * i, (4,), DType.F32) for i in range(3))
    b_in, b_mid, b_out = sb.new_barrier(), sb.new_barrier(), sb.new_barrier()
    sb.dma(x, c0, update=[b_in])
    sb.act(k, 0, [c1, c2], wait=[b_mid], update=[b_out], name="second")  # queued first, needs "first"
    sb.act(k, 0, [c0, c1], wait=[b_in], update=[b_mid], name="first")
    sb.dma(c2, y, wait=[b_out])
    with pytest.raises(BarrierCycleError, match="second"):  # the FIFO order contradicts the barriers
        sb.build()
    blob = write_blob(sb.build(physical=False))
    with pytest.raises(DeadlockError, match="tile0.shave0: task 'second'"):
        run(blob, {"x": np.zeros(4, np.float32)})
    # with two SHAVEs the second one pops "first" and the schedule completes
    sb2 = dataclasses.replace(sb, target=Target(tiles=1, shaves_per_tile=2))
    out = run(write_blob(sb2.build(physical=False)), {"x": np.arange(-2, 2, dtype=np.float32)})["y"]
    np.testing.assert_array_equal(out, [0, 0, 0, 1])


def test_wrong_barrier_counts_are_rejected_before_running() -> None:
    blob_bytes, x = _one_kernel(_asm("RET"))
    from snippets_shave.blob import read_blob

    blob = read_blob(blob_bytes)
    bad = dataclasses.replace(blob, barriers=(Barrier(0, 2, 1), *blob.barriers[1:]))
    with pytest.raises(BarrierCountError, match=r"barriers\[0\]: producers/consumers 2/1"):
        run(write_blob(bad), x)


def test_wrong_version_is_rejected() -> None:
    blob_bytes, x = _one_kernel(_asm("RET"))
    from snippets_shave.blob import read_blob

    blob = read_blob(blob_bytes)
    newer = dataclasses.replace(blob, header=dataclasses.replace(blob.header, version=Version(2, 0, 0)))
    with pytest.raises(BlobFormatError, match="header.version"):
        run(write_blob(newer), x)


def test_memref_outside_the_cmx_workspace_is_rejected() -> None:
    elf = rk.relu("f32")
    sb = ScheduleBuilder("oob")
    _x, _y = sb.add_input("x", (4,), DType.F32), sb.add_output("y", (4,), DType.F32)
    k = sb.add_kernel(elf)
    sb.act(k, 0, [MemRef(WIN_F + 16, (4,), DType.F32), MemRef(WIN_F + 4096 * 4, (4,), DType.F32)], name="relu")
    with pytest.raises(BlobFormatError, match=r"task 'relu'.*params.m0.dataAddr = 0x1f000010"):
        run(write_blob(sb.build()), {"x": np.zeros(4, np.float32)})


def test_dma_into_the_stack_area_is_rejected() -> None:
    sb = ScheduleBuilder("stack")
    x, _y = sb.add_input("x", (4,), DType.F32), sb.add_output("y", (4,), DType.F32)
    sb.dma(x, sb.cmx(0, 0, (4,), DType.F32), name="into_stack")
    with pytest.raises(BlobFormatError, match=r"task 'into_stack'.*dst: bytes \[0, 16\) outside CMX #0"):
        run(write_blob(sb.build()), {"x": np.zeros(4, np.float32)})


def test_inputs_of_the_wrong_shape_or_name() -> None:
    blob, _x = _one_kernel(_asm("RET"))
    with pytest.raises(InputError, match="input 'x': expected float32 \\(8,\\)"):
        run(blob, {"x": np.zeros(9, np.float32)})
    with pytest.raises(InputError, match="takes inputs"):
        run(blob, {"z": np.zeros(8, np.float32)})


def test_strided_dma_descriptor_against_numpy_slicing() -> None:
    """A 2-D descriptor gathers columns 2..7 of each row into dense CMX, then a flat DMA copies them out."""
    from snippets_shave.blob import DmaDescriptor, TensorRef

    sb = ScheduleBuilder("gather")
    x, y = sb.add_input("x", (4, 10), DType.F32), sb.add_output("y", (4, 6), DType.F32)
    c = sb.cmx(1, sb.cmx_workspace_start, (4, 6), DType.F32)
    window = TensorRef("x[:, 2:8]", DType.F32, (4, 6), x.location, x.index, offset=8, strides_bits=(320, 32))
    b = sb.new_barrier()
    sb.dma(window, c, update=[b], descriptor=DmaDescriptor(96, 24, 40, 0, 96, 96, 0, 1))
    sb.dma(c, y, engine=1, wait=[b])
    value = np.arange(40, dtype=np.float32).reshape(4, 10)
    np.testing.assert_array_equal(run(write_blob(sb.build()), {"x": value})["y"], value[:, 2:8])


def test_simulate_files_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from snippets_shave.sim import simulate_files

    blob = tmp_path / "relu.ashvb"
    sb = ScheduleBuilder("relu")
    x, y = sb.add_input("x", (5,), DType.F32), sb.add_output("y", (5,), DType.F32)
    k = sb.add_kernel(rk.relu("f32"))
    cin, cout = (
        sb.cmx(0, sb.cmx_workspace_start, (5,), DType.F32),
        sb.cmx(0, sb.cmx_workspace_start + 64, (5,), DType.F32),
    )
    b0, b1 = sb.new_barrier(), sb.new_barrier()
    sb.dma(x, cin, update=[b0])
    sb.act(k, 0, [cin, cout], wait=[b0], update=[b1])
    sb.dma(cout, y, wait=[b1])
    blob.write_bytes(write_blob(sb.build()))
    value = np.array([-1, 2, -3, 4, 0.5], np.float32)
    np.savez(tmp_path / "in.npz", x=value)
    simulate_files(blob, tmp_path / "in.npz", tmp_path / "out.npz")
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_array_equal(out["y"], np.maximum(value, 0))
    with pytest.raises(BlobFormatError, match="cannot read blob"):
        simulate_files(tmp_path / "missing.ashvb", tmp_path / "in.npz")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(InputError, match="bad.npz: not an .npz file"):
        simulate_files(blob, tmp_path / "bad.npz")


def test_invocation_tensors_must_agree_with_the_memrefs() -> None:
    from snippets_shave.blob import read_blob

    blob_bytes, x = _one_kernel(_asm("RET"))
    blob = read_blob(blob_bytes)
    act_list = next(i for i, tl in enumerate(blob.task_lists) if tl.executor.name == "ACT_SHAVE")
    task = blob.task_lists[act_list].tasks[0]
    inv = task.payload.invocation
    moved = dataclasses.replace(inv.inputs[0], offset=inv.inputs[0].offset + 64)
    bad_task = dataclasses.replace(
        task, payload=dataclasses.replace(task.payload, invocation=dataclasses.replace(inv, inputs=(moved,)))
    )
    lists = list(blob.task_lists)
    lists[act_list] = dataclasses.replace(lists[act_list], tasks=(bad_task,))
    with pytest.raises(BlobFormatError, match=r"task 'kernel'.*invocation tensor 0 .* disagrees with params.m0"):
        run(write_blob(dataclasses.replace(blob, task_lists=tuple(lists))), x)

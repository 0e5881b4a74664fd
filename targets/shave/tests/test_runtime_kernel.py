"""The Runtime Kernel: its ELF (read with pyelftools), its program (decoder round trip), the blob that carries
it, the simulator running it against the Python SHAVE loop on random task graphs, and its typed errors."""

from __future__ import annotations

import dataclasses
import io
import random

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

from snippets_shave import reference_kernels as rk
from snippets_shave.asm import Assembler, assemble_text
from snippets_shave.blob import Blob, Executor, KernelKind, Target, TensorRef, read_blob, write_blob
from snippets_shave.constants import (
    ISA_VERSION,
    RUNTIME_CODE_BUFFER,
    RUNTIME_FRAME_BYTES,
    RUNTIME_VERSION,
    WIN_C,
    WIN_D,
    DType,
)
from snippets_shave.elf import write_kernel_elf
from snippets_shave.errors import (
    BarrierLimitError,
    BlobFormatError,
    DeadlockError,
    ElfFormatError,
    KernelTrap,
    RuntimeKernelError,
    StepLimitExceeded,
)
from snippets_shave.isa import INSTRUCTIONS, decode_program, disassemble_one
from snippets_shave.runtime_kernel import RECORDS_BASE, RUNTIME_NAME, runtime_kernel_elf, runtime_kernel_program
from snippets_shave.schedule import ScheduleBuilder
from snippets_shave.sim import load_blob, simulate
from snippets_shave.sim.checker import PythonShaveLoop
from snippets_shave.vpurt.ir import Payload
from snippets_shave.vpurt.serialize import declare_kernel, module_to_blob

SYSTEM = sorted(m for m, d in INSTRUCTIONS.items() if d.unit == "SYS")


# -- the ELF and the program ----------------------------------------------------------------------------------
def test_runtime_kernel_elf_read_with_pyelftools() -> None:
    elf = ELFFile(io.BytesIO(runtime_kernel_elf()))
    assert elf.elfclass == 32 and elf.little_endian and elf["e_type"] == "ET_EXEC"
    assert elf["e_flags"] == ISA_VERSION and elf["e_entry"] == WIN_C
    text = elf.get_section_by_name(".text")
    assert text["sh_addr"] == WIN_C and text["sh_flags"] & 0x4 and text["sh_size"] <= RUNTIME_CODE_BUFFER
    assert elf.get_section_by_name(".data")["sh_size"] == 0  # no WIN_E image: its arguments are registers
    entry = [s for s in elf.get_section_by_name(".symtab").iter_symbols() if s["st_info"]["bind"] == "STB_GLOBAL"]
    assert [(s.name, s["st_info"]["type"], s["st_value"]) for s in entry] == [(RUNTIME_NAME, "STT_FUNC", WIN_C)]
    loads = [seg for seg in elf.iter_segments() if seg["p_type"] == "PT_LOAD"]
    assert loads[0]["p_vaddr"] == WIN_C and loads[0]["p_filesz"] >= text["sh_size"]


def test_runtime_kernel_program_round_trips_through_the_decoder() -> None:
    code = runtime_kernel_program().assemble()
    program = decode_program(code)
    listing = "\n".join(disassemble_one(ins) for ins in program)
    assert assemble_text(listing) == code
    assert {ins.mnemonic for ins in program} >= set(SYSTEM)  # it uses every system instruction
    assert runtime_kernel_elf() == runtime_kernel_elf.__wrapped__()  # same bytes every time


def test_compute_kernels_cannot_reach_the_runtime_hardware() -> None:
    blob = _one_relu(kernel=assemble_text("MOVI r2, 0\nBWAIT r2\nRET"))
    with pytest.raises(KernelTrap, match="task 'relu'.*BWAIT at word 1: only the runtime kernel"):
        simulate(blob, {"x": np.zeros(8, np.float32)})


# -- the blob -------------------------------------------------------------------------------------------------
def _one_relu(runtime: bytes | None = None, kernel: bytes | None = None, stack_size: int = 4096) -> Blob:
    sb = ScheduleBuilder("relu", target=Target(tiles=1, shaves_per_tile=1), stack_size=stack_size)
    x, y = sb.add_input("x", (8,), DType.F32), sb.add_output("y", (8,), DType.F32)
    elf = rk.relu("f32") if kernel is None else write_kernel_elf("k", kernel, params_signature="mm:", params_size=80)
    k = sb.add_kernel(elf)
    base = sb.cmx_workspace_start
    cin, cout = sb.cmx(0, base, (8,), DType.F32), sb.cmx(0, base + 64, (8,), DType.F32)
    b0, b1 = sb.new_barrier(), sb.new_barrier()
    sb.dma(x, cin, update=[b0], name="in")
    sb.act(k, 0, [cin, cout], wait=[b0], update=[b1], name="relu")
    sb.dma(cout, y, wait=[b1], name="out")
    module = sb.build_module()
    if runtime is not None:
        decl = declare_kernel(RUNTIME_NAME, ":", Payload.of(runtime), 0, 1, KernelKind.COMPUTE, [])
        module = dataclasses.replace(module, graph=dataclasses.replace(module.graph, runtime=decl))
    return module_to_blob(module)


def test_the_blob_carries_the_runtime_kernel_and_the_stack_configuration() -> None:
    blob = read_blob(write_blob(_one_relu(stack_size=2048)))
    rt = blob.header.act_runtime
    assert rt.kernel is not None and rt.kernel.name == RUNTIME_NAME and rt.runtime_version == RUNTIME_VERSION
    assert blob.kernel_data[rt.kernel.elf.index] == runtime_kernel_elf()
    assert rt.stack_size_per_tile == (2048,)
    loaded = load_blob(blob)
    assert loaded.runtime.elf.entry == WIN_C and loaded.runtime.image == loaded.runtime.elf.text
    table, addresses = loaded.records[0]
    assert addresses == (RECORDS_BASE,) and len(table) % 8 == 0
    res = simulate(blob, {"x": np.arange(-4, 4, dtype=np.float32)})
    np.testing.assert_array_equal(res.outputs["y"], np.maximum(np.arange(-4, 4), 0))
    assert res.runtime_instructions > 30 and res.instructions > 0


def _rt(source: str) -> bytes:
    a = Assembler()
    a.text(source)
    return write_kernel_elf(RUNTIME_NAME, a.assemble(), params_signature=":", base=WIN_C)


@pytest.mark.parametrize(
    ("runtime", "stack", "error", "message"),
    [
        (write_kernel_elf(RUNTIME_NAME, assemble_text("HALT"), params_signature=":"), 4096, ElfFormatError,
         "must be executable PROGBITS at 0x1c000000"),  # linked at WIN_D
        (write_kernel_elf(RUNTIME_NAME, assemble_text("HALT"), params_signature="m:", base=WIN_C), 4096,
         BlobFormatError, "params_signature"),
        (write_kernel_elf(RUNTIME_NAME, assemble_text("HALT"), params_signature=":", base=WIN_C,
                          rodata=bytes(RUNTIME_CODE_BUFFER)), 4096, BlobFormatError, "does not fit the"),
        (write_kernel_elf(RUNTIME_NAME, assemble_text("HALT"), params_signature=":", base=WIN_C, data=b"x" * 8),
         4096, BlobFormatError, "has a .data section"),
        (None, RUNTIME_FRAME_BYTES, BlobFormatError, "stack_size_per_tile\\[0\\] = 16 invalid"),
    ],
)  # fmt: skip
def test_loader_rejects_a_bad_runtime_kernel(  # type: ignore[no-untyped-def]
    runtime, stack: int, error: type, message: str
) -> None:
    blob = _one_relu()
    if runtime is not None:  # swap the Runtime Kernel's bytes in the blob (the compiler would refuse to write it)
        k = blob.header.act_runtime.kernel
        assert k is not None
        data = list(blob.kernel_data)
        data[k.elf.index] = runtime
        section = ELFFile(io.BytesIO(runtime)).get_section_by_name(".text")
        text = dataclasses.replace(k.text, offset=section["sh_offset"], size=section["sh_size"])
        k = dataclasses.replace(k, elf=dataclasses.replace(k.elf, size=len(runtime)), text=text)
        blob = dataclasses.replace(blob, kernel_data=tuple(data))
    else:
        k = blob.header.act_runtime.kernel
    rt = dataclasses.replace(blob.header.act_runtime, kernel=k, stack_size_per_tile=(stack,))
    blob = dataclasses.replace(blob, header=dataclasses.replace(blob.header, act_runtime=rt))
    with pytest.raises(error, match=message):
        load_blob(read_blob(write_blob(blob)))


def test_loader_rejects_a_missing_runtime_kernel_and_an_entry_outside_the_code() -> None:
    blob = _one_relu()
    rt = dataclasses.replace(blob.header.act_runtime, kernel=None)
    with pytest.raises(BlobFormatError, match="act_runtime.kernel is missing"):
        load_blob(dataclasses.replace(blob, header=dataclasses.replace(blob.header, act_runtime=rt)))
    k = dataclasses.replace(blob.header.act_runtime.kernel, entry=8 * 4096)  # type: ignore[arg-type]
    rt = dataclasses.replace(blob.header.act_runtime, kernel=k)
    with pytest.raises(BlobFormatError, match="entry = 32768, but the ELF's e_entry is 0x1c000000"):
        load_blob(dataclasses.replace(blob, header=dataclasses.replace(blob.header, act_runtime=rt)))


# -- typed errors of a bad runtime kernel ---------------------------------------------------------------------
def test_a_runaway_runtime_kernel_is_a_step_limit_naming_the_task() -> None:
    blob = _one_relu(_rt("FIFOPOP r2\nloop:\nJMP loop"))
    with pytest.raises(StepLimitExceeded, match=r"tile0.shave0 \(task 'relu' .*\): the Runtime Kernel ran more than"):
        simulate(blob, {"x": np.zeros(8, np.float32)}, runtime_step_limit=10_000)
    spin = _one_relu(_rt("loop:\nFIFOPOP r2\nJMP loop"))  # spins on the FIFO: each step reaches a system op
    with pytest.raises(StepLimitExceeded, match="runaway runtime kernel"):
        simulate(spin, {"x": np.zeros(8, np.float32)}, runtime_step_limit=10_000)


def test_a_runtime_kernel_that_halts_early_leaves_a_deadlock() -> None:
    with pytest.raises(DeadlockError, match="tile0: 1 more invocations queued behind blocked or halted SHAVEs"):
        simulate(_one_relu(_rt("HALT")), {"x": np.zeros(8, np.float32)})


def test_a_runtime_kernel_that_miscounts_barriers_is_a_typed_error() -> None:
    blob = _one_relu(_rt("MOVI r2, 1\nBPROD r2\nBPROD r2\nHALT"))
    with pytest.raises(RuntimeKernelError, match="tile0.shave0: Runtime Kernel: word 2: barrier b1 has no producer"):
        simulate(blob, {"x": np.zeros(8, np.float32)})
    blob = _one_relu(_rt("MOVI r2, 9\nBWAIT r2\nHALT"))
    with pytest.raises(RuntimeKernelError, match="barrier 9, but the blob has 2"):
        simulate(blob, {"x": np.zeros(8, np.float32)})
    blob = _one_relu(_rt(f"FIFOPOP r2\nMOVI r9, {WIN_D}\nLAUNCH r9\nHALT"))
    with pytest.raises(RuntimeKernelError, match="LAUNCH at word 2 before WINSET"):
        simulate(blob, {"x": np.zeros(8, np.float32)})


def test_a_runtime_kernel_that_skips_the_barrier_wait_is_caught_by_the_order_check() -> None:
    """No BWAIT: on some interleavings the kernel runs before its input DMA ended, which the order check (the
    constraints the Python loop keeps) reports."""
    source = runtime_kernel_program()
    listing = "\n".join(disassemble_one(ins) for ins in source.instructions()).replace("BWAIT r8", "NOP")
    blob = _one_relu(_rt(listing))
    x = np.ones(8, np.float32)
    broken = 0
    for seed in range(12):
        res = simulate(blob, {"x": x}, seed=seed)
        try:
            _check_order(blob, res.trace)
        except AssertionError:
            broken += 1
    assert broken


# -- the Runtime Kernel against the Python loop on random task graphs -----------------------------------------
def _random_graph(seed: int) -> tuple[Blob, dict[str, np.ndarray], np.ndarray]:
    """Random units (DMA in, a kernel, DMA out) on random queues of a random target, under a small physical
    barrier limit: a unit's kernel is a relu, or adds the previous result of its tile (a chain through CMX);
    a unit's DMA-in also waits on random barriers of earlier units. Returns the blob, inputs and numpy's y."""
    rng = random.Random(seed)
    target = Target(
        tiles=rng.choice((1, 2)), shaves_per_tile=rng.choice((1, 2)), dma_engines=rng.choice((1, 2)),
        max_barriers=rng.choice((6, 10, 64)),
    )  # fmt: skip
    b = ScheduleBuilder(f"random{seed}", target=target)
    n, units = 12, rng.randrange(4, 12)
    x, y = b.add_input("x", (units * n,), DType.F32), b.add_output("y", (units * n,), DType.F32)
    relu, add = b.add_kernel(rk.relu("f32")), b.add_kernel(rk.eltwise_binary("add", "f32"))
    xs = np.random.default_rng(seed).uniform(-2, 2, units * n).astype(np.float32)
    expected = np.zeros_like(xs)
    last: dict[int, tuple[TensorRef, int, np.ndarray]] = {}  # tile -> (its last output buffer, barrier, value)
    done: list[list[int]] = []
    for u in range(units):
        tile = rng.randrange(target.tiles)
        c_in = b.cmx(tile, b.cmx_workspace_start + 64 * u, (n,), DType.F32, f"in{u}")
        c_out = b.cmx(tile, b.cmx_workspace_start + 64 * (units + u), (n,), DType.F32, f"out{u}")
        extra = sorted({bar for prev in done for bar in prev if rng.random() < 0.15})
        b_in, b_act, b_out = b.new_barrier(), b.new_barrier(), b.new_barrier()
        b.dma(b.view(x, u * n, n), c_in, engine=rng.randrange(target.dma_engines), wait=extra, update=[b_in],
              name=f"in{u}")  # fmt: skip
        value = xs[u * n : (u + 1) * n]
        if tile in last and rng.random() < 0.5:
            prev, prev_bar, prev_value = last[tile]
            b.act(add, tile, [c_in, prev, c_out], wait=[b_in, prev_bar], update=[b_act], name=f"add{u}")
            value = value + prev_value
        else:
            b.act(relu, tile, [c_in, c_out], wait=[b_in], update=[b_act], name=f"relu{u}")
            value = np.maximum(value, 0)
        b.dma(c_out, b.view(y, u * n, n), engine=rng.randrange(target.dma_engines), wait=[b_act], update=[b_out],
              name=f"out{u}")  # fmt: skip
        last[tile] = (c_out, b_act, value)
        expected[u * n : (u + 1) * n] = value
        done.append([b_in, b_act, b_out])
    b.prune_barriers()
    try:
        blob = b.build()
    except BarrierLimitError:  # more barriers pending at once than the small limit: the platform's limit then
        blob = dataclasses.replace(b, target=dataclasses.replace(target, max_barriers=64)).build()
    return blob, {"x": xs}, expected


def _check_order(blob: Blob, trace: list) -> None:  # type: ignore[type-arg]
    """The constraints any correct runtime keeps: each task starts and ends once; a waiter starts after every
    producer of its barriers ended; a DMA engine starts its list in order; a task touching an instance of a
    physical barrier starts after the earlier instances' producers ended; a one-SHAVE tile runs its FIFO in
    order. (A SHAVE consumes its barriers before its kernel's "start" event, so consumption is not in the trace.)"""
    when = {(e.task, e.event): i for i, e in enumerate(trace)}
    tasks = [(tl, t) for tl in blob.task_lists for t in tl.tasks]
    assert len(trace) == 2 * len(tasks) == len(when)
    producers: dict[int, list[str]] = {}
    for _, t in tasks:
        for bar in t.update:
            producers.setdefault(bar, []).append(t.name)
    earlier: dict[int, list[int]] = {}
    seen: dict[int, list[int]] = {}
    for bar in blob.barriers:
        earlier[bar.id] = list(seen.get(bar.real_id, []))
        seen.setdefault(bar.real_id, []).append(bar.id)
    for tl, t in tasks:
        start = when[(t.name, "start")]
        assert when[(t.name, "end")] > start
        for bar in t.wait:
            assert all(when[(p, "end")] < start for p in producers[bar]), f"{t.name} ran before b{bar} was released"
        for bar in (*t.wait, *t.update):
            for e in earlier[bar]:
                assert all(when[(p, "end")] < start for p in producers.get(e, [])), f"{t.name} reused b{e} early"
    for tl in blob.task_lists:
        if tl.executor == Executor.DMA or blob.header.target.shaves_per_tile == 1:
            starts = [when[(t.name, "start")] for t in tl.tasks]
            assert starts == sorted(starts), f"{tl.executor.name} {tl.queue} ran out of order"


@pytest.mark.parametrize("seed", range(16))
def test_random_task_graphs_agree_with_the_python_loop(seed: int) -> None:
    blob, inputs, expected = _random_graph(seed)
    data = write_blob(blob)
    for s in (None, seed, seed + 100):
        kernel = simulate(data, inputs, seed=s)
        python = simulate(data, inputs, seed=s, shave=PythonShaveLoop)
        np.testing.assert_array_equal(kernel.outputs["y"], python.outputs["y"])
        np.testing.assert_allclose(kernel.outputs["y"], expected, rtol=1e-6)
        for res in (kernel, python):
            _check_order(blob, res.trace)
        assert kernel.instructions == python.instructions  # the same invocations ran
        assert kernel.runtime_instructions > 0 and python.runtime_instructions == 0


def test_python_loop_and_runtime_kernel_report_the_same_deadlock() -> None:
    target = Target(tiles=1, shaves_per_tile=1)
    sb = ScheduleBuilder("hol", target=target)
    x, y = sb.add_input("x", (4,), DType.F32), sb.add_output("y", (4,), DType.F32)
    k = sb.add_kernel(rk.relu("f32"))
    c0, c1, c2 = (sb.cmx(0, sb.cmx_workspace_start + 64 * i, (4,), DType.F32) for i in range(3))
    b_in, b_mid, b_out = sb.new_barrier(), sb.new_barrier(), sb.new_barrier()
    sb.dma(x, c0, update=[b_in])
    sb.act(k, 0, [c1, c2], wait=[b_mid], update=[b_out], name="second")
    sb.act(k, 0, [c0, c1], wait=[b_in], update=[b_mid], name="first")
    sb.dma(c2, y, wait=[b_out])
    blob = write_blob(sb.build(physical=False))
    for shave in (PythonShaveLoop, None):
        kwargs = {} if shave is None else {"shave": shave}
        with pytest.raises(DeadlockError, match=r"tile0.shave0: task 'second' .* waits b1 \(P=1\)"):
            simulate(blob, {"x": np.zeros(4, np.float32)}, **kwargs)  # type: ignore[arg-type]


# -- the loader validates every field `snippets inspect` prints --------------------------------------------------
def _header(blob: Blob, **fields: object) -> Blob:
    return dataclasses.replace(blob, header=dataclasses.replace(blob.header, **fields))


def _first_task(blob: Blob, executor: Executor, **fields: object) -> Blob:
    lists = list(blob.task_lists)
    i = next(i for i, tl in enumerate(lists) if tl.executor == executor)
    tasks = list(lists[i].tasks)
    tasks[0] = dataclasses.replace(tasks[0], **fields)
    lists[i] = dataclasses.replace(lists[i], tasks=tuple(tasks))
    return dataclasses.replace(blob, task_lists=tuple(lists))


@pytest.mark.parametrize(
    ("edit", "error", "message"),
    [
        (lambda b: _header(b, target=dataclasses.replace(b.header.target, name="99xx")), BlobFormatError,
         "target.name = '99xx': not a platform"),
        (lambda b: _header(b, target=dataclasses.replace(b.header.target, max_barriers=65)), BarrierLimitError,
         "max_barriers = 65: 37xx has 64"),
        (lambda b: _header(b, name=""), BlobFormatError, "header.name is empty"),
        (lambda b: _first_task(b, Executor.DMA, name="relu"), BlobFormatError, "name empty or repeated"),
        (lambda b: _first_task(b, Executor.DMA, payload=dataclasses.replace(
            b.task_lists[0].tasks[0].payload, src=dataclasses.replace(b.header.inputs[0], order=0x11))),
         BlobFormatError, "src.order: dimsOrder 0x11 is not a permutation"),
        (lambda b: dataclasses.replace(b, kernels=(dataclasses.replace(b.kernels[0], name=""),)), BlobFormatError,
         r"kernels\[0\].name is empty"),
    ],
)  # fmt: skip
def test_loader_validates_the_printed_fields(edit, error: type, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=message):
        load_blob(read_blob(write_blob(edit(_one_relu()))))


def test_invocation_tensors_must_agree_with_the_memref_strides() -> None:
    blob = _one_relu()
    act = next(tl for tl in blob.task_lists if tl.executor == Executor.ACT_SHAVE).tasks[0]
    inv = act.payload.invocation  # type: ignore[union-attr]
    bad_in = dataclasses.replace(inv.inputs[0], strides_bits=(64,))
    payload = dataclasses.replace(act.payload, invocation=dataclasses.replace(inv, inputs=(bad_in,)))
    with pytest.raises(BlobFormatError, match="invocation tensor 0 .* disagrees with params.m0"):
        load_blob(_first_task(blob, Executor.ACT_SHAVE, payload=payload))


def test_the_compiler_refuses_more_barriers_than_the_platform_has() -> None:
    from snippets_core.errors import ConfigError
    from snippets_shave.compiler import ShaveOptions

    with pytest.raises(ConfigError, match="max_barriers 65: 37xx has 64"):
        ShaveOptions.from_mapping({"max_barriers": 65})
    with pytest.raises(ConfigError, match="stack_size 16 must be a multiple of 16 above"):
        ShaveOptions.from_mapping({"stack_size": 16})


def test_winset_takes_only_the_switchable_windows() -> None:
    from snippets_shave.errors import AssemblyError, InstructionDecodeError
    from snippets_shave.isa import Instruction, decode, encode

    assert decode(encode(Instruction("WINSET", None, (2, 9)))).operands == (2, 9)
    for window in (0, 3):  # WIN_C and WIN_F are set once, at boot
        with pytest.raises(AssemblyError, match=f"window {window} is not switchable"):
            encode(Instruction("WINSET", None, (window, 1)))
        with pytest.raises(InstructionDecodeError, match=f"window {window} is not switchable"):
            decode((INSTRUCTIONS["WINSET"].opcode << 56) | (1 << 42) | window)

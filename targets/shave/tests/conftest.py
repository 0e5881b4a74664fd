"""Schedules for the simulator tests: a tensor split into chunks over the tiles, DMA in, kernel, DMA out."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import pytest

from snippets_shave.blob import Blob, Target, TensorRef, read_blob, write_blob
from snippets_shave.constants import DTYPE_TO_NUMPY, dtype_of
from snippets_shave.schedule import ScheduleBuilder
from snippets_shave.vpurt.ir import Module
from snippets_shave.vpurt.parser import parse_module
from snippets_shave.vpurt.printer import print_module
from snippets_shave.vpurt.serialize import module_from_blob, module_to_blob


def build_tiled(
    kernel_elf: bytes,
    n_inputs: int,
    shape: tuple[int, ...],
    dtype: np.dtype | type,
    target: Target,
    *,
    scalars: dict[str, float | int] | None = None,
    row_len: int | None = None,
    chunks: int | None = None,
    order_seed: int | None = None,
    layout=None,  # type: ignore[no-untyped-def]
    slots_per_tile: int | None = None,
    war_barriers: bool = True,
    physical_barriers: bool = True,
) -> Blob:
    """Split the flat tensor into ``chunks`` uneven pieces of whole rows (``row_len`` elements each; CMX
    chunks are then 2-D ``(rows, row_len)``, else 1-D), give
    chunk i to tile i % tiles, and add its tasks (DMA in on every input, the kernel, DMA out) in an order
    shuffled by ``order_seed``. Each chunk has its own barriers; its CMX buffers are its own, or with
    ``slots_per_tile`` one of a ring of buffer sets per tile, reused once the previous chunk in that slot
    has been copied out (its DMA-in waits on that chunk's "done" barrier: a write-after-read dependency;
    ``war_barriers=False`` leaves that wait out, a racy schedule; ``physical_barriers=False`` keeps the barriers
    virtual, since the physical reuse would order such a schedule)."""
    dt = dtype_of(dtype)
    esize = DTYPE_TO_NUMPY[dt].itemsize
    sb = ScheduleBuilder("tiled", target=target)
    ins = [sb.add_input(f"x{i}", shape, dt) for i in range(n_inputs)]
    out = sb.add_output("y", shape, dt)
    kernel = sb.add_kernel(kernel_elf)
    dims_of = (lambda count: (count,)) if row_len is None else (lambda count: (count, row_len))
    row_len = row_len or 1
    units = int(np.prod(shape)) // row_len
    pieces = [p for p in np.array_split(np.arange(units), chunks or 2 * target.tiles) if len(p)]
    order = list(range(len(pieces)))
    if order_seed is not None:
        random.Random(order_seed).shuffle(order)
    next_free = [sb.cmx_workspace_start] * target.tiles

    def alloc(tile: int, dims: tuple[int, ...]) -> TensorRef:
        ref = sb.cmx(tile, next_free[tile], dims, dt)
        next_free[tile] = (next_free[tile] + ref.nbytes + 63) // 64 * 64
        return ref

    def ddr(ref: TensorRef, start: int, dims: tuple[int, ...]) -> TensorRef:
        return TensorRef(f"{ref.name}@{start}", dt, dims, ref.location, ref.index, start * row_len * esize)

    biggest = dims_of(max(len(p) for p in pieces))
    slots: list[list[list[TensorRef]]] = [
        [[alloc(t, biggest) for _ in range(n_inputs + 1)] for _ in range(slots_per_tile or 0)]
        for t in range(target.tiles)
    ]
    slot_done: dict[tuple[int, int], int] = {}
    used = [0] * target.tiles
    for i in order:
        tile = i % target.tiles
        start, count = int(pieces[i][0]), len(pieces[i])
        dims = dims_of(count)
        b_in, b_out, b_done = sb.new_barrier(), sb.new_barrier(), sb.new_barrier()
        in_wait: list[int] = []
        if slots_per_tile:
            slot = used[tile] % slots_per_tile
            bufs = [
                TensorRef(f"slot{slot}.{k}", dt, dims, b.location, b.index, b.offset)
                for k, b in enumerate(slots[tile][slot])
            ]
            if (tile, slot) in slot_done and war_barriers:
                in_wait = [slot_done[(tile, slot)]]
            slot_done[(tile, slot)] = b_done
        else:
            bufs = [alloc(tile, dims) for _ in range(n_inputs + 1)]
        used[tile] += 1
        cmx_in, cmx_out = bufs[:-1], bufs[-1]
        for j, (src, dst) in enumerate(zip(ins, cmx_in, strict=True)):
            engine = (i + j) % target.dma_engines
            sb.dma(ddr(src, start, dims), dst, engine=engine, wait=in_wait, update=[b_in], name=f"in{j}.{i}")
        sb.act(kernel, tile, [*cmx_in, cmx_out], scalars, wait=[b_in], update=[b_out], name=f"k{i}", layout=layout)
        sb.dma(
            cmx_out, ddr(out, start, dims), engine=i % target.dma_engines, wait=[b_out], update=[b_done], name=f"out{i}"
        )
    return sb.build(physical_barriers)


@pytest.fixture
def tiled() -> Callable[..., Blob]:
    return build_tiled


def assert_vpurt_round_trip(module: Module) -> None:
    """The blob serialized from ``module`` reads back into an equal module, and so does its printed text."""
    back = module_from_blob(read_blob(write_blob(module_to_blob(module))))
    assert back == module
    assert parse_module(print_module(back)) == module


@pytest.fixture(autouse=True)
def _vpurt_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every schedule a shave test builds, by hand or through compile_model, goes through the IR round trip."""
    build_module = ScheduleBuilder.build_module

    def checked(self: ScheduleBuilder, physical: bool = True) -> Module:
        module = build_module(self, physical)
        assert_vpurt_round_trip(module)
        return module

    monkeypatch.setattr(ScheduleBuilder, "build_module", checked)

"""Blob writer/reader: round trip through our reader, and an independent read with flatc's object API."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from snippets_core.errors import BlobFormatError
from snippets_shave import reference_kernels as rk
from snippets_shave._generated import ashv_generated as fb
from snippets_shave.abi import CLAMP_PARAMS
from snippets_shave.blob import (
    ActKernelTask,
    DmaDescriptor,
    DmaTask,
    Executor,
    KernelKind,
    Location,
    Target,
    Version,
    read_blob,
    write_blob,
)
from snippets_shave.constants import DType
from snippets_shave.elf import read_kernel_elf
from snippets_shave.schedule import ScheduleBuilder


def _blob():  # type: ignore[no-untyped-def]
    sb = ScheduleBuilder("clamp_net", target=Target.lnl())
    x = sb.add_input("x", (2, 40), DType.F16)
    y = sb.add_output("y", (2, 40), DType.F16)
    c = sb.add_constant("c", np.arange(6, dtype=np.float32))
    scratch = sb.alloc_scratch("s", (160,), DType.F16)
    k = sb.add_kernel(rk.clamp("f16"))
    assert sb.add_kernel(rk.clamp("f16")) == k  # deduplicated
    base = sb.cmx_workspace_start
    cin, cout = sb.cmx(3, base, (80,), DType.F16), sb.cmx(3, base + 256, (80,), DType.F16)
    b0, b1 = sb.new_barrier(), sb.new_barrier()
    sb.dma(sb.view(x, 0, 80), cin, engine=1, update=[b0], name="in")
    sb.act(k, 3, [cin, cout], {"min": 0.0, "max": 6.0}, wait=[b0], update=[b1], name="clamp", layout=CLAMP_PARAMS)
    desc = DmaDescriptor(160, 160, 160, 0, 32, 64, 0, 1)
    sb.dma(cout, scratch, wait=[b1], update=[], name="strided", descriptor=desc)
    sb.dma(c, sb.cmx(0, base, (6,), DType.F32), name="const")
    return sb.build(), y


def test_round_trip_through_our_reader() -> None:
    blob, _ = _blob()
    data = write_blob(blob)
    assert data[4:8] == b"ASHV"
    assert read_blob(data) == blob
    assert write_blob(read_blob(data)) == data  # deterministic


def test_second_reader_object_api_agrees() -> None:
    blob, _ = _blob()
    data = write_blob(blob)
    assert fb.Blob.BlobBufferHasIdentifier(data, 0)
    obj = fb.BlobT.InitFromPackedBuf(bytearray(data), 0)
    h = obj.header
    assert (h.version.major, h.version.minor, h.version.patch) == (1, 3, 0)
    assert (h.target.tiles, h.target.shavesPerTile, h.target.cmxBytesPerTile) == (6, 2, 2 * 1024 * 1024)
    assert h.name == "clamp_net" and [t.name for t in h.inputs] == ["x"] and [t.name for t in h.outputs] == ["y"]
    assert list(h.inputs[0].dims) == [2, 40] and h.inputs[0].dtype == fb.DType.F16
    assert list(h.actRuntime.stackSizePerTile) == [4096] * 6
    assert [(b.id, b.producers, b.consumers, b.realId) for b in obj.barriers] == [(0, 1, 1, 0), (1, 1, 1, 1)]  # physical ids assigned
    # kernel data: the ELF bytes are exactly those we put in, and the kernel's text view is its .text
    kernel = obj.kernels[0]
    elf = bytes(obj.kernelData[kernel.elf.index].data)
    assert elf == rk.clamp("f16")
    assert kernel.name == "clamp_f16" and kernel.paramsSignature == "mm:ff" and kernel.kind == fb.KernelKind.COMPUTE
    text = elf[kernel.text.offset : kernel.text.offset + kernel.text.size]
    assert text == read_kernel_elf(elf).text
    lists = {(tl.executor, tl.queue): tl for tl in obj.taskLists}
    assert sorted(lists) == [(fb.Executor.DMA, 0), (fb.Executor.DMA, 1), (fb.Executor.ACT_SHAVE, 3)]
    act = lists[(fb.Executor.ACT_SHAVE, 3)].tasks[0]
    assert act.payloadType == fb.TaskPayload.ActKernelTask and act.name == "clamp"
    assert list(act.barriers.wait) == [0] and list(act.barriers.update) == [1]
    inv = act.payload.invocation
    assert inv.tile == 3 and inv.kernel == 0 and inv.argsSize == CLAMP_PARAMS.size
    window = bytes(obj.kernelData[inv.dataWindow.index].data)
    assert np.frombuffer(window[inv.argsOffset + 80 : inv.argsOffset + 88], "<f4").tolist() == [0.0, 6.0]
    strided = lists[(fb.Executor.DMA, 0)].tasks[0]
    assert strided.payloadType == fb.TaskPayload.DmaTask
    d = strided.payload.descriptor
    assert (d.len, d.srcWidth, d.dstWidth, d.dstStride, d.numPlanes) == (160, 160, 32, 64, 1)
    assert bytes(obj.constants[0].data) == np.arange(6, dtype=np.float32).tobytes()


def test_kernel_data_is_64_byte_aligned() -> None:
    blob, _ = _blob()
    data = write_blob(blob)
    root = fb.Blob.GetRootAs(data, 0)
    for i in range(root.KernelDataLength()):
        kd = root.KernelData(i)
        start = kd._tab.Vector(kd._tab.Offset(4))  # position of the first data byte
        assert start % 64 == 0, f"kernel_data[{i}] starts at {start}"


def test_enums_match_the_schema() -> None:
    for ours, theirs in (
        (Location, fb.Location),
        (Executor, fb.Executor),
        (KernelKind, fb.KernelKind),
        (DType, fb.DType),
    ):
        for member in ours:
            assert getattr(theirs, member.name) == member.value


def test_payload_kinds_survive() -> None:
    blob, _ = _blob()
    back = read_blob(write_blob(blob))
    kinds = [type(t.payload) for tl in back.task_lists for t in tl.tasks]
    assert kinds.count(DmaTask) == 3 and kinds.count(ActKernelTask) == 1


def test_bad_identifier_and_version() -> None:
    blob, _ = _blob()
    data = bytearray(write_blob(blob))
    data[4:8] = b"BLOB"
    with pytest.raises(BlobFormatError, match="file identifier"):
        read_blob(bytes(data))
    old_major = dataclasses.replace(blob, header=dataclasses.replace(blob.header, version=Version(0, 9, 0)))
    with pytest.raises(BlobFormatError, match=r"header.version: blob version 0.9.0"):
        read_blob(write_blob(old_major))
    with pytest.raises(BlobFormatError, match="too short"):
        read_blob(b"\x00\x00")

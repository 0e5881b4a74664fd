"""The ASHV blob (schemas/ashv.fbs) as frozen Python objects, with a writer and a bounded reader.

``write_blob(Blob) -> bytes`` and ``read_blob(bytes) -> Blob`` are thin layers over the committed flatc
output in :mod:`snippets_shave._generated`. The reader never trusts the bytes: every vector length is checked
against the buffer before it is iterated, absent required tables and unknown enum values are reported, and
any low-level failure while walking the buffer becomes a :class:`BlobFormatError` naming the field path.
Deeper semantic checks (offsets into kernel data, windows, barrier counts) are the simulator loader's job.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import flatbuffers
import numpy as np

from snippets_shave._generated import ashv_generated as fb
from snippets_shave.constants import (
    BLOB_VERSION,
    DTYPE_TO_NUMPY,
    KERNEL_ABI_VERSION,
    MAX_BARRIERS,
    RUNTIME_VERSION,
    DType,
)
from snippets_shave.errors import BlobFormatError, ChecksumError

FILE_IDENTIFIER = b"ASHV"
KERNEL_DATA_ALIGN = 64


class Location(IntEnum):
    """Where a TensorRef's bytes live (schema enum ``ashv.Location``)."""

    NONE = 0
    NET_INPUT = 1
    NET_OUTPUT = 2
    DDR_SCRATCH = 3
    CONSTANT = 4
    CMX = 5


class Executor(IntEnum):
    """Which engine a task list feeds (schema enum ``ashv.Executor``)."""

    DMA = 0
    ACT_SHAVE = 1
    DPU = 2


class DpuOp(IntEnum):
    """What an NCE variant computes (schema enum ``ashv.DpuOp``; docs/dpu.md)."""

    MATMUL = 0
    CONV = 1
    MAXPOOL = 2
    AVGPOOL = 3
    ADD = 4
    MUL = 5


class KernelKind(IntEnum):
    COMPUTE = 0
    NOP = 1


@dataclass(frozen=True)
class Version:
    major: int = BLOB_VERSION[0]
    minor: int = BLOB_VERSION[1]
    patch: int = BLOB_VERSION[2]
    producer: str = "snippets"


@dataclass(frozen=True)
class Target:
    """The hardware a schedule is made for; the defaults model 37XX (MTL)."""

    name: str = "37xx"
    tiles: int = 2
    shaves_per_tile: int = 2
    cmx_bytes_per_tile: int = 2 * 1024 * 1024
    dma_engines: int = 2
    max_barriers: int = MAX_BARRIERS["37xx"]
    dpus_per_tile: int = 1

    @property
    def dpus(self) -> int:
        """DPUs of the platform: one DPU task list each."""
        return self.tiles * self.dpus_per_tile

    @staticmethod
    def lnl() -> Target:
        """The 40XX (LNL) preset: 6 tiles, 96 barriers."""
        return Target("40xx", tiles=6, max_barriers=MAX_BARRIERS["40xx"])


@dataclass(frozen=True)
class TensorRef:
    """A tensor in DDR (network input/output, scratch, constant) or in a tile's CMX."""

    name: str
    dtype: DType
    dims: tuple[int, ...]
    location: Location
    index: int = 0
    offset: int = 0
    strides_bits: tuple[int, ...] = ()
    order: int = 0

    def with_dims(self, dims: tuple[int, ...]) -> TensorRef:
        """The same bytes seen with other (dense) dims."""
        return TensorRef(self.name, self.dtype, tuple(dims), self.location, self.index, self.offset)

    @property
    def nbytes(self) -> int:
        """Bytes the tensor spans (dense unless strides are given)."""
        size = DTYPE_TO_NUMPY[self.dtype].itemsize
        if any(d == 0 for d in self.dims):
            return 0
        if not self.strides_bits:
            return int(np.prod(self.dims, dtype=np.int64)) * size
        return (sum((d - 1) * s for d, s in zip(self.dims, self.strides_bits, strict=True)) + 8 * size) // 8


@dataclass(frozen=True)
class KernelDataRef:
    """A sub-view ``[offset, offset + size)`` of ``Blob.kernel_data[index]``."""

    name: str
    index: int
    offset: int
    size: int


@dataclass(frozen=True)
class ActKernel:
    name: str
    elf: KernelDataRef
    text: KernelDataRef
    entry: int = 0
    abi_version: int = KERNEL_ABI_VERSION
    params_signature: str = ""
    kind: KernelKind = KernelKind.COMPUTE


@dataclass(frozen=True)
class ActKernelInvocation:
    kernel: int
    data_window: KernelDataRef
    args_offset: int
    args_size: int
    tile: int
    inputs: tuple[TensorRef, ...] = ()
    outputs: tuple[TensorRef, ...] = ()


@dataclass(frozen=True)
class ActKernelTask:
    invocation: ActKernelInvocation


@dataclass(frozen=True)
class DmaDescriptor:
    len: int
    src_width: int
    src_stride: int
    src_plane_stride: int
    dst_width: int
    dst_stride: int
    dst_plane_stride: int
    num_planes: int = 1


@dataclass(frozen=True)
class DmaTask:
    src: TensorRef
    dst: TensorRef
    engine: int = 0
    descriptor: DmaDescriptor | None = None


@dataclass(frozen=True)
class DpuTask:
    """One variant (DPU workload) of an NCE task: its op, its operand slices in CMX and the window geometry."""

    op: DpuOp
    input: TensorRef
    output: TensorRef
    weights: TensorRef | None = None
    kernel: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    pads: tuple[int, ...] = ()
    dilations: tuple[int, ...] = ()
    transpose_b: bool = False
    exclude_pad: bool = False
    layer: str = ""
    variant: int = 0
    variants: int = 1


@dataclass(frozen=True)
class Task:
    """A schedulable unit: a payload plus the virtual barriers it waits on and updates."""

    id: int
    name: str
    payload: DmaTask | ActKernelTask | DpuTask
    wait: tuple[int, ...] = ()
    update: tuple[int, ...] = ()


@dataclass(frozen=True)
class TaskList:
    executor: Executor
    queue: int
    tasks: tuple[Task, ...]


@dataclass(frozen=True)
class Barrier:
    id: int
    producers: int
    consumers: int
    real_id: int = -1


@dataclass(frozen=True)
class ActKernelRuntime:
    stack_size_per_tile: tuple[int, ...]
    runtime_version: int = RUNTIME_VERSION
    kernel: ActKernel | None = None


@dataclass(frozen=True)
class Header:
    name: str
    target: Target
    inputs: tuple[TensorRef, ...]
    outputs: tuple[TensorRef, ...]
    act_runtime: ActKernelRuntime
    scratch_bytes: int = 0
    version: Version = field(default_factory=Version)


@dataclass(frozen=True)
class Blob:
    header: Header
    task_lists: tuple[TaskList, ...]
    barriers: tuple[Barrier, ...]
    kernels: tuple[ActKernel, ...]
    kernel_data: tuple[bytes, ...]
    constants: tuple[bytes, ...] = ()


# ------------------------------------------------------------------------------------------------- writer


class _Writer:
    def __init__(self) -> None:
        self.b = flatbuffers.Builder(1 << 16)

    def string(self, s: str) -> int:
        return self.b.CreateString(s)

    def numpy(self, values: Any, dtype: str) -> int:
        return self.b.CreateNumpyVector(np.asarray(values, dtype=dtype))

    def bytes_aligned(self, data: bytes) -> int:
        # Prep first so the vector's payload (not its length prefix) starts on a 64-byte boundary.
        self.b.Prep(KERNEL_DATA_ALIGN, len(data))
        return self.b.CreateNumpyVector(np.frombuffer(data, dtype=np.uint8))

    def offsets(self, start: Any, items: list[int]) -> int:
        start(self.b, len(items))
        for off in reversed(items):
            self.b.PrependUOffsetTRelative(off)
        return self.b.EndVector()

    def tensor(self, t: TensorRef) -> int:
        name = self.string(t.name)
        dims = self.numpy(t.dims, "<u4")
        strides = self.numpy(t.strides_bits, "<u8") if t.strides_bits else None
        b = self.b
        fb.TensorRefStart(b)
        fb.TensorRefAddName(b, name)
        fb.TensorRefAddDtype(b, int(t.dtype))
        fb.TensorRefAddDims(b, dims)
        if strides is not None:
            fb.TensorRefAddStridesBits(b, strides)
        fb.TensorRefAddOrder(b, t.order)
        fb.TensorRefAddLocation(b, int(t.location))
        fb.TensorRefAddIndex(b, t.index)
        fb.TensorRefAddOffset(b, t.offset)
        return fb.TensorRefEnd(b)

    def tensors(self, start: Any, ts: tuple[TensorRef, ...]) -> int:
        return self.offsets(start, [self.tensor(t) for t in ts])

    def kdr(self, r: KernelDataRef) -> int:
        name = self.string(r.name)
        fb.KernelDataRefStart(self.b)
        fb.KernelDataRefAddName(self.b, name)
        fb.KernelDataRefAddIndex(self.b, r.index)
        fb.KernelDataRefAddOffset(self.b, r.offset)
        fb.KernelDataRefAddSize(self.b, r.size)
        return fb.KernelDataRefEnd(self.b)

    def kernel(self, k: ActKernel) -> int:
        name, sig = self.string(k.name), self.string(k.params_signature)
        elf, text = self.kdr(k.elf), self.kdr(k.text)
        b = self.b
        fb.ActKernelStart(b)
        fb.ActKernelAddKind(b, int(k.kind))
        fb.ActKernelAddName(b, name)
        fb.ActKernelAddElf(b, elf)
        fb.ActKernelAddText(b, text)
        fb.ActKernelAddEntry(b, k.entry)
        fb.ActKernelAddAbiVersion(b, k.abi_version)
        fb.ActKernelAddParamsSignature(b, sig)
        return fb.ActKernelEnd(b)

    def dpu(self, p: DpuTask) -> int:
        b = self.b
        ins, out = self.tensor(p.input), self.tensor(p.output)
        weights = self.tensor(p.weights) if p.weights is not None else None
        vectors = [self.numpy(v, "<u4") for v in (p.kernel, p.strides, p.pads, p.dilations)]
        layer = self.string(p.layer)
        fb.DpuTaskStart(b)
        fb.DpuTaskAddOp(b, int(p.op))
        fb.DpuTaskAddInput(b, ins)
        if weights is not None:
            fb.DpuTaskAddWeights(b, weights)
        fb.DpuTaskAddOutput(b, out)
        for add, vec in zip(
            (fb.DpuTaskAddKernel, fb.DpuTaskAddStrides, fb.DpuTaskAddPads, fb.DpuTaskAddDilations), vectors, strict=True
        ):
            add(b, vec)
        fb.DpuTaskAddTransposeB(b, p.transpose_b)
        fb.DpuTaskAddExcludePad(b, p.exclude_pad)
        fb.DpuTaskAddLayer(b, layer)
        fb.DpuTaskAddVariant(b, p.variant)
        fb.DpuTaskAddVariants(b, p.variants)
        return fb.DpuTaskEnd(b)

    def payload(self, p: DmaTask | ActKernelTask | DpuTask) -> tuple[int, int]:
        b = self.b
        if isinstance(p, DpuTask):
            return fb.TaskPayload.DpuTask, self.dpu(p)
        if isinstance(p, DmaTask):
            src, dst = self.tensor(p.src), self.tensor(p.dst)
            fb.DmaTaskStart(b)
            fb.DmaTaskAddSrc(b, src)
            fb.DmaTaskAddDst(b, dst)
            fb.DmaTaskAddEngine(b, p.engine)
            if p.descriptor is not None:
                d = p.descriptor
                fb.DmaTaskAddDescriptor(
                    b,
                    fb.CreateDmaDescriptor(
                        b, d.len, d.src_width, d.src_stride, d.src_plane_stride,
                        d.dst_width, d.dst_stride, d.dst_plane_stride, d.num_planes,
                    ),
                )  # fmt: skip
            return fb.TaskPayload.DmaTask, fb.DmaTaskEnd(b)
        inv = p.invocation
        window = self.kdr(inv.data_window)
        inputs = self.tensors(fb.ActKernelInvocationStartInputsVector, inv.inputs)
        outputs = self.tensors(fb.ActKernelInvocationStartOutputsVector, inv.outputs)
        fb.ActKernelInvocationStart(b)
        fb.ActKernelInvocationAddKernel(b, inv.kernel)
        fb.ActKernelInvocationAddDataWindow(b, window)
        fb.ActKernelInvocationAddArgsOffset(b, inv.args_offset)
        fb.ActKernelInvocationAddArgsSize(b, inv.args_size)
        fb.ActKernelInvocationAddTile(b, inv.tile)
        fb.ActKernelInvocationAddInputs(b, inputs)
        fb.ActKernelInvocationAddOutputs(b, outputs)
        inv_off = fb.ActKernelInvocationEnd(b)
        fb.ActKernelTaskStart(b)
        fb.ActKernelTaskAddInvocation(b, inv_off)
        return fb.TaskPayload.ActKernelTask, fb.ActKernelTaskEnd(b)

    def task(self, t: Task) -> int:
        name = self.string(t.name)
        wait, update = self.numpy(t.wait, "<u2"), self.numpy(t.update, "<u2")
        b = self.b
        fb.BarrierRefStart(b)
        fb.BarrierRefAddWait(b, wait)
        fb.BarrierRefAddUpdate(b, update)
        barriers = fb.BarrierRefEnd(b)
        ptype, payload = self.payload(t.payload)
        fb.TaskStart(b)
        fb.TaskAddId(b, t.id)
        fb.TaskAddName(b, name)
        fb.TaskAddBarriers(b, barriers)
        fb.TaskAddPayloadType(b, ptype)
        fb.TaskAddPayload(b, payload)
        return fb.TaskEnd(b)

    def kernel_data(self, start: Any, items: tuple[bytes, ...]) -> int:
        offs = []
        for data in items:
            vec = self.bytes_aligned(bytes(data))
            fb.KernelDataStart(self.b)
            fb.KernelDataAddData(self.b, vec)
            offs.append(fb.KernelDataEnd(self.b))
        return self.offsets(start, offs)

    def header(self, h: Header) -> int:
        b = self.b
        producer = self.string(h.version.producer)
        fb.VersionStart(b)
        fb.VersionAddMajor(b, h.version.major)
        fb.VersionAddMinor(b, h.version.minor)
        fb.VersionAddPatch(b, h.version.patch)
        fb.VersionAddProducer(b, producer)
        version = fb.VersionEnd(b)
        tname = self.string(h.target.name)
        fb.TargetStart(b)
        fb.TargetAddName(b, tname)
        fb.TargetAddTiles(b, h.target.tiles)
        fb.TargetAddShavesPerTile(b, h.target.shaves_per_tile)
        fb.TargetAddCmxBytesPerTile(b, h.target.cmx_bytes_per_tile)
        fb.TargetAddDmaEngines(b, h.target.dma_engines)
        fb.TargetAddMaxBarriers(b, h.target.max_barriers)
        fb.TargetAddDpusPerTile(b, h.target.dpus_per_tile)
        target = fb.TargetEnd(b)
        rt = h.act_runtime
        rt_kernel = self.kernel(rt.kernel) if rt.kernel is not None else None
        stacks = self.numpy(rt.stack_size_per_tile, "<u4")
        fb.ActKernelRuntimeStart(b)
        if rt_kernel is not None:
            fb.ActKernelRuntimeAddKernel(b, rt_kernel)
        fb.ActKernelRuntimeAddStackSizePerTile(b, stacks)
        fb.ActKernelRuntimeAddRuntimeVersion(b, rt.runtime_version)
        runtime = fb.ActKernelRuntimeEnd(b)
        name = self.string(h.name)
        inputs = self.tensors(fb.HeaderStartInputsVector, h.inputs)
        outputs = self.tensors(fb.HeaderStartOutputsVector, h.outputs)
        fb.HeaderStart(b)
        fb.HeaderAddVersion(b, version)
        fb.HeaderAddTarget(b, target)
        fb.HeaderAddName(b, name)
        fb.HeaderAddInputs(b, inputs)
        fb.HeaderAddOutputs(b, outputs)
        fb.HeaderAddScratchBytes(b, h.scratch_bytes)
        fb.HeaderAddActRuntime(b, runtime)
        b.ForceDefaults(True)  # a zero placeholder that write_blob overwrites with the CRC (seal_checksum)
        fb.HeaderAddChecksum(b, 0)
        b.ForceDefaults(False)
        return fb.HeaderEnd(b)

    def blob(self, blob: Blob) -> bytes:
        b = self.b
        b.Prep(KERNEL_DATA_ALIGN, 0)  # minalign 64: the finished buffer's length is a multiple of 64
        # Big byte payloads first: they end up at the end of the buffer, after every table.
        kernel_data = self.kernel_data(fb.BlobStartKernelDataVector, blob.kernel_data)
        constants = self.kernel_data(fb.BlobStartConstantsVector, blob.constants)
        kernels = self.offsets(fb.BlobStartKernelsVector, [self.kernel(k) for k in blob.kernels])
        barrier_offs = []
        for bar in blob.barriers:
            fb.BarrierStart(b)
            fb.BarrierAddId(b, bar.id)
            fb.BarrierAddProducers(b, bar.producers)
            fb.BarrierAddConsumers(b, bar.consumers)
            fb.BarrierAddRealId(b, bar.real_id)
            barrier_offs.append(fb.BarrierEnd(b))
        barriers = self.offsets(fb.BlobStartBarriersVector, barrier_offs)
        list_offs = []
        for tl in blob.task_lists:
            tasks = self.offsets(fb.TaskListStartTasksVector, [self.task(t) for t in tl.tasks])
            fb.TaskListStart(b)
            fb.TaskListAddExecutor(b, int(tl.executor))
            fb.TaskListAddQueue(b, tl.queue)
            fb.TaskListAddTasks(b, tasks)
            list_offs.append(fb.TaskListEnd(b))
        task_lists = self.offsets(fb.BlobStartTaskListsVector, list_offs)
        header = self.header(blob.header)
        fb.BlobStart(b)
        fb.BlobAddHeader(b, header)
        fb.BlobAddTaskLists(b, task_lists)
        fb.BlobAddBarriers(b, barriers)
        fb.BlobAddKernels(b, kernels)
        fb.BlobAddKernelData(b, kernel_data)
        fb.BlobAddConstants(b, constants)
        b.Finish(fb.BlobEnd(b), file_identifier=FILE_IDENTIFIER)
        return bytes(b.Output())


def write_blob(blob: Blob) -> bytes:
    """Serialize a :class:`Blob` (deterministic: the same object gives the same bytes), sealed with its CRC."""
    return seal_checksum(_Writer().blob(blob))


_CHECKSUM_SLOT = 18  # vtable offset of Header.checksum (field 7): 4 + 2 * 7


def _checksum_position(buf: bytes) -> int | None:
    """Where ``header.checksum``'s 4 bytes are, or None when the header has no such field."""
    header = fb.Blob.GetRootAs(buf, 0).Header()
    if header is None:
        return None
    o = header._tab.Offset(_CHECKSUM_SLOT)
    return header._tab.Pos + o if o else None


def blob_checksum(buf: bytes, position: int) -> int:
    """CRC-32 of the whole buffer with the 4 checksum bytes at ``position`` taken as zero."""
    return zlib.crc32(buf[position + 4 :], zlib.crc32(bytes(4), zlib.crc32(buf[:position])))


def seal_checksum(data: bytes) -> bytes:
    """``data`` with ``header.checksum`` recomputed: the writer's last step (and how a test re-seals a blob it
    mutated on purpose, to reach the deeper checks)."""
    buf = bytearray(data)
    try:
        position = _checksum_position(bytes(buf))
    except _LOW_LEVEL_ERRORS as exc:
        raise BlobFormatError(f"blob header cannot be located to seal its checksum ({type(exc).__name__})") from None
    if position is None or position + 4 > len(buf):
        raise BlobFormatError("blob header has no checksum field to seal")
    struct.pack_into("<I", buf, position, blob_checksum(bytes(buf), position))
    return bytes(buf)


def _verify_checksum(buf: bytes) -> None:
    position = _checksum_position(buf)
    if position is None or position + 4 > len(buf):
        version = fb.Blob.GetRootAs(buf, 0).Header().Version()
        if version is not None and (version.Major(), version.Minor()) == (1, 0):
            return  # blobs of schema 1.0 predate the checksum
        raise ChecksumError("blob header has no checksum (required since schema 1.1): the blob is corrupt")
    stored = struct.unpack_from("<I", buf, position)[0]
    computed = blob_checksum(buf, position)
    if stored != computed:
        raise ChecksumError(
            f"blob checksum mismatch: header.checksum = {stored:#010x}, the content gives {computed:#010x} "
            "(the blob was corrupted after it was written)"
        )


# ------------------------------------------------------------------------------------------------- reader

_LOW_LEVEL_ERRORS = (struct.error, IndexError, ValueError, TypeError, UnicodeDecodeError, OverflowError, AttributeError)


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf = buf

    def fail(self, path: str, why: str) -> BlobFormatError:
        return BlobFormatError(f"blob field {path}: {why}")

    def length(self, obj: Any, field_name: str, path: str, elem_size: int) -> int:
        n = getattr(obj, f"{field_name}Length")()
        if n * elem_size > len(self.buf):
            raise self.fail(path, f"vector of {n} elements does not fit in a {len(self.buf)}-byte blob")
        return n

    def required(self, value: Any, path: str) -> Any:
        if value is None:
            raise self.fail(path, "required table is missing")
        return value

    def string(self, value: bytes | None) -> str:
        return "" if value is None else value.decode("utf-8")

    def numbers(self, obj: Any, field_name: str, path: str, elem_size: int) -> tuple[int, ...]:
        if getattr(obj, f"{field_name}IsNone")():
            return ()
        self.length(obj, field_name, path, elem_size)
        return tuple(int(x) for x in getattr(obj, f"{field_name}AsNumpy")())

    def enum(self, cls: type[IntEnum], value: int, path: str) -> Any:
        try:
            return cls(value)
        except ValueError:
            raise self.fail(path, f"{value} is not a valid {cls.__name__}") from None

    def tensor(self, t: Any, path: str) -> TensorRef:
        t = self.required(t, path)
        return TensorRef(
            name=self.string(t.Name()),
            dtype=self.enum(DType, t.Dtype(), f"{path}.dtype"),
            dims=self.numbers(t, "Dims", f"{path}.dims", 4),
            location=self.enum(Location, t.Location(), f"{path}.location"),
            index=t.Index(),
            offset=t.Offset(),
            strides_bits=self.numbers(t, "StridesBits", f"{path}.strides_bits", 8),
            order=t.Order(),
        )

    def tensors(self, obj: Any, field_name: str, path: str) -> tuple[TensorRef, ...]:
        n = self.length(obj, field_name, path, 4)
        getter = getattr(obj, field_name)
        return tuple(self.tensor(getter(i), f"{path}[{i}]") for i in range(n))

    def kdr(self, r: Any, path: str) -> KernelDataRef:
        r = self.required(r, path)
        return KernelDataRef(self.string(r.Name()), r.Index(), r.Offset(), r.Size())

    def kernel(self, k: Any, path: str) -> ActKernel:
        k = self.required(k, path)
        return ActKernel(
            name=self.string(k.Name()),
            elf=self.kdr(k.Elf(), f"{path}.elf"),
            text=self.kdr(k.Text(), f"{path}.text"),
            entry=k.Entry(),
            abi_version=k.AbiVersion(),
            params_signature=self.string(k.ParamsSignature()),
            kind=self.enum(KernelKind, k.Kind(), f"{path}.kind"),
        )

    def task(self, t: Any, path: str) -> Task:
        t = self.required(t, path)
        bars = self.required(t.Barriers(), f"{path}.barriers")
        ptype = t.PayloadType()
        table = self.required(t.Payload(), f"{path}.payload")
        payload: DmaTask | ActKernelTask | DpuTask
        if ptype == fb.TaskPayload.DpuTask:
            d = fb.DpuTask()
            d.Init(table.Bytes, table.Pos)
            ppath = f"{path}.payload"
            payload = DpuTask(
                op=self.enum(DpuOp, d.Op(), f"{ppath}.op"),
                input=self.tensor(d.Input(), f"{ppath}.input"),
                output=self.tensor(d.Output(), f"{ppath}.output"),
                weights=self.tensor(d.Weights(), f"{ppath}.weights") if d.Weights() is not None else None,
                kernel=self.numbers(d, "Kernel", f"{ppath}.kernel", 4),
                strides=self.numbers(d, "Strides", f"{ppath}.strides", 4),
                pads=self.numbers(d, "Pads", f"{ppath}.pads", 4),
                dilations=self.numbers(d, "Dilations", f"{ppath}.dilations", 4),
                transpose_b=bool(d.TransposeB()),
                exclude_pad=bool(d.ExcludePad()),
                layer=self.string(d.Layer()),
                variant=d.Variant(),
                variants=d.Variants(),
            )
        elif ptype == fb.TaskPayload.DmaTask:
            d = fb.DmaTask()
            d.Init(table.Bytes, table.Pos)
            desc = d.Descriptor()
            descriptor = None
            if desc is not None:
                descriptor = DmaDescriptor(
                    desc.Len(), desc.SrcWidth(), desc.SrcStride(), desc.SrcPlaneStride(),
                    desc.DstWidth(), desc.DstStride(), desc.DstPlaneStride(), desc.NumPlanes(),
                )  # fmt: skip
            payload = DmaTask(
                self.tensor(d.Src(), f"{path}.payload.src"),
                self.tensor(d.Dst(), f"{path}.payload.dst"),
                d.Engine(),
                descriptor,
            )
        elif ptype == fb.TaskPayload.ActKernelTask:
            a = fb.ActKernelTask()
            a.Init(table.Bytes, table.Pos)
            ipath = f"{path}.payload.invocation"
            inv = self.required(a.Invocation(), ipath)
            payload = ActKernelTask(
                ActKernelInvocation(
                    kernel=inv.Kernel(),
                    data_window=self.kdr(inv.DataWindow(), f"{ipath}.data_window"),
                    args_offset=inv.ArgsOffset(),
                    args_size=inv.ArgsSize(),
                    tile=inv.Tile(),
                    inputs=self.tensors(inv, "Inputs", f"{ipath}.inputs"),
                    outputs=self.tensors(inv, "Outputs", f"{ipath}.outputs"),
                )
            )
        else:
            raise self.fail(f"{path}.payload_type", f"{ptype} is not a TaskPayload")
        return Task(
            id=t.Id(),
            name=self.string(t.Name()),
            payload=payload,
            wait=self.numbers(bars, "Wait", f"{path}.barriers.wait", 2),
            update=self.numbers(bars, "Update", f"{path}.barriers.update", 2),
        )

    def kernel_data(self, obj: Any, field_name: str, path: str) -> tuple[bytes, ...]:
        n = self.length(obj, field_name, path, 4)
        out = []
        for i in range(n):
            kd = self.required(getattr(obj, field_name)(i), f"{path}[{i}]")
            if kd.DataIsNone():
                out.append(b"")
                continue
            self.length(kd, "Data", f"{path}[{i}].data", 1)
            out.append(kd.DataAsNumpy().tobytes())
        return tuple(out)

    def header(self, h: Any) -> Header:
        h = self.required(h, "header")
        v = self.required(h.Version(), "header.version")
        version = Version(v.Major(), v.Minor(), v.Patch(), self.string(v.Producer()))
        if version.major != BLOB_VERSION[0] or version.minor > BLOB_VERSION[1]:
            raise self.fail(
                "header.version",
                f"blob version {version.major}.{version.minor}.{version.patch} is not readable by "
                f"{BLOB_VERSION[0]}.{BLOB_VERSION[1]}.{BLOB_VERSION[2]} (same major, minor <= ours)",
            )
        t = self.required(h.Target(), "header.target")
        target = Target(
            self.string(t.Name()), t.Tiles(), t.ShavesPerTile(), t.CmxBytesPerTile(), t.DmaEngines(), t.MaxBarriers(),
            t.DpusPerTile(),
        )
        rt = self.required(h.ActRuntime(), "header.act_runtime")
        rt_kernel = rt.Kernel()
        runtime = ActKernelRuntime(
            stack_size_per_tile=self.numbers(rt, "StackSizePerTile", "header.act_runtime.stack_size_per_tile", 4),
            runtime_version=rt.RuntimeVersion(),
            kernel=self.kernel(rt_kernel, "header.act_runtime.kernel") if rt_kernel is not None else None,
        )
        return Header(
            name=self.string(h.Name()),
            target=target,
            inputs=self.tensors(h, "Inputs", "header.inputs"),
            outputs=self.tensors(h, "Outputs", "header.outputs"),
            act_runtime=runtime,
            scratch_bytes=h.ScratchBytes(),
            version=version,
        )

    def blob(self) -> Blob:
        root = fb.Blob.GetRootAs(self.buf, 0)
        header = self.header(root.Header())
        task_lists = []
        for i in range(self.length(root, "TaskLists", "task_lists", 4)):
            tl = self.required(root.TaskLists(i), f"task_lists[{i}]")
            n = self.length(tl, "Tasks", f"task_lists[{i}].tasks", 4)
            tasks = tuple(self.task(tl.Tasks(j), f"task_lists[{i}].tasks[{j}]") for j in range(n))
            task_lists.append(
                TaskList(self.enum(Executor, tl.Executor(), f"task_lists[{i}].executor"), tl.Queue(), tasks)
            )
        barriers = []
        for i in range(self.length(root, "Barriers", "barriers", 4)):
            bar = self.required(root.Barriers(i), f"barriers[{i}]")
            barriers.append(Barrier(bar.Id(), bar.Producers(), bar.Consumers(), bar.RealId()))
        n_kernels = self.length(root, "Kernels", "kernels", 4)
        kernels = tuple(self.kernel(root.Kernels(i), f"kernels[{i}]") for i in range(n_kernels))
        return Blob(
            header=header,
            task_lists=tuple(task_lists),
            barriers=tuple(barriers),
            kernels=kernels,
            kernel_data=self.kernel_data(root, "KernelData", "kernel_data"),
            constants=self.kernel_data(root, "Constants", "constants"),
        )


def read_blob(data: bytes) -> Blob:
    """Parse a blob; every malformation raises :class:`BlobFormatError` naming the field."""
    buf = bytes(data)
    if len(buf) < 8:
        raise BlobFormatError(f"blob of {len(buf)} bytes is too short for a FlatBuffers header")
    if len(buf) % KERNEL_DATA_ALIGN:
        # The writer pads every blob to a multiple of 64 bytes, so any other length means it was truncated.
        raise BlobFormatError(f"blob length {len(buf)} is not a multiple of {KERNEL_DATA_ALIGN}: truncated")
    if buf[4:8] != FILE_IDENTIFIER:
        raise BlobFormatError(f"blob file identifier {buf[4:8]!r}, expected {FILE_IDENTIFIER!r}")
    reader = _Reader(buf)
    try:
        _verify_checksum(buf)
        return reader.blob()
    except BlobFormatError:
        raise
    except _LOW_LEVEL_ERRORS as exc:
        raise BlobFormatError(f"blob is malformed or truncated ({type(exc).__name__}: {exc})") from None

"""Load and validate a blob before anything runs (shave_blob.md §5.6 step 1).

Every offset, size, window address and barrier count is checked here, so the runtime loop only meets
errors a valid blob can cause (window faults from kernel code, deadlocks from a bad task order, traps).
Errors name the field or the task: ``task 'x' (task_lists[1].tasks[0])``.
"""

from __future__ import annotations

from dataclasses import dataclass

from snippets_shave.abi import DecodedParams, ParamsLayout, dims_order_from_code, unpack_params
from snippets_shave.blob import (
    ActKernel,
    ActKernelTask,
    Blob,
    DmaDescriptor,
    DmaTask,
    DpuTask,
    Executor,
    KernelDataRef,
    KernelKind,
    Location,
    Task,
    TensorRef,
    read_blob,
)
from snippets_shave.constants import (
    DTYPE_TO_NUMPY,
    KERNEL_ABI_VERSION,
    MAX_BARRIERS,
    MAX_DATA_WINDOW,
    MAX_ND_DIMS,
    RUNTIME_CODE_BUFFER,
    RUNTIME_FRAME_BYTES,
    RUNTIME_VERSION,
    WIN_C,
    WIN_D,
    WIN_E,
    WIN_F,
    WINDOW_SIZE,
    MemLocation,
)
from snippets_shave.elf import KernelElf, read_kernel_elf
from snippets_shave.errors import (
    BarrierCountError,
    BarrierLimitError,
    BlobFormatError,
    KernelAbiError,
    SnippetsError,
    UnproducedBarrierError,
)
from snippets_shave.runtime_kernel import RUNTIME_SIGNATURE, InvocationRecord, pack_records
from snippets_shave.sim.interp import Program, compile_program

MAX_TILES = 64
MAX_SHAVES_PER_TILE = 16
MAX_DMA_ENGINES = 16
MAX_DPUS_PER_TILE = 8
MAX_CMX_BYTES = 16 * 1024 * 1024  # one WIN_F window
MAX_DDR_BYTES = 1 << 30
WRITABLE_LOCATIONS = (Location.NET_OUTPUT, Location.DDR_SCRATCH, Location.CMX)


@dataclass(frozen=True)
class LoadedKernel:
    ref: ActKernel
    elf: KernelElf
    program: Program
    layout: ParamsLayout
    image: bytes  # WIN_D contents

    @property
    def entry_index(self) -> int:
        return self.elf.entry_offset // 8


@dataclass(frozen=True)
class Region:
    """A validated byte range of one memory: ``key`` is (Location, index)."""

    key: tuple[Location, int]
    offset: int
    size: int


@dataclass(frozen=True)
class LoadedTask:
    task: Task
    where: str  # "task 'name' (task_lists[i].tasks[j])"
    executor: Executor
    queue: int
    # DMA
    src: Region | None = None
    dst: Region | None = None
    descriptor: DmaDescriptor | None = None
    # ACT
    kernel: int = -1
    window: bytes = b""
    args_offset: int = 0
    params: DecodedParams | None = None
    # DPU: the regions of input, weights (if any) and output, the output last
    regions: tuple[Region, ...] = ()


@dataclass(frozen=True)
class LoadedBlob:
    """A blob that passed every static check, ready for :class:`~snippets_shave.sim.runtime.Simulator`."""

    blob: Blob
    kernels: tuple[LoadedKernel, ...]
    dma_queues: tuple[tuple[LoadedTask, ...], ...]  # per engine
    tile_queues: tuple[tuple[LoadedTask, ...], ...]  # per tile
    stack_sizes: tuple[int, ...]  # per tile, bytes per SHAVE
    cmx_reserved: tuple[int, ...]  # per tile: stacks live below this offset
    memory_sizes: dict[tuple[Location, int], int]
    runtime: LoadedKernel  # the Runtime Kernel (linked at WIN_C)
    records: tuple[tuple[bytes, tuple[int, ...]], ...]  # per tile: its invocation records and their addresses
    dpu_queues: tuple[tuple[LoadedTask, ...], ...] = ()  # per DPU (tile * dpus_per_tile + dpu)

    @property
    def target(self):  # type: ignore[no-untyped-def]
        return self.blob.header.target


def _kernel_bytes(blob: Blob, ref: KernelDataRef, path: str) -> bytes:
    if ref.index >= len(blob.kernel_data):
        raise BlobFormatError(f"{path}.index = {ref.index}: only {len(blob.kernel_data)} kernel_data entries")
    data = blob.kernel_data[ref.index]
    if ref.offset + ref.size > len(data):
        raise BlobFormatError(
            f"{path}: [{ref.offset}, {ref.offset + ref.size}) is outside kernel_data[{ref.index}] ({len(data)} bytes)"
        )
    return data[ref.offset : ref.offset + ref.size]


def _load_kernel(blob: Blob, k: ActKernel, path: str, base: int = WIN_D) -> LoadedKernel:
    elf_bytes = _kernel_bytes(blob, k.elf, f"{path}.elf")
    text = _kernel_bytes(blob, k.text, f"{path}.text")
    elf = read_kernel_elf(elf_bytes, f"{path} ({k.name!r}) ELF", base)
    if text != elf.text:
        raise BlobFormatError(f"{path}.text does not hold the bytes of the ELF's .text section")
    if k.entry + base != elf.entry:
        raise BlobFormatError(f"{path}.entry = {k.entry}, but the ELF's e_entry is {elf.entry:#x}")
    if not k.name:
        raise BlobFormatError(f"{path}.name is empty")
    if k.abi_version != KERNEL_ABI_VERSION:
        raise BlobFormatError(f"{path}.abi_version = {k.abi_version}, expected {KERNEL_ABI_VERSION}")
    if k.params_signature != elf.note.params_signature:
        raise BlobFormatError(
            f"{path}.params_signature {k.params_signature!r} != ELF note {elf.note.params_signature!r}"
        )
    layout = ParamsLayout.from_signature(k.params_signature, k.name)
    if elf.note.params_size != layout.size:
        raise BlobFormatError(
            f"{path}: note params_size {elf.note.params_size} != {layout.size} for {layout.signature}"
        )
    if k.text.index != k.elf.index or k.text.offset != k.elf.offset + elf.text_file_offset:
        raise BlobFormatError(f"{path}.text is not the sub-view of {path}.elf at its .text section")
    if k.kind not in (KernelKind.COMPUTE, KernelKind.NOP):
        raise BlobFormatError(f"{path}.kind = {k.kind} is not a kernel kind")
    try:
        program = compile_program(elf.text, base)
    except BlobFormatError as exc:
        raise type(exc)(f"{path} ({k.name!r}): {exc}") from None
    return LoadedKernel(k, elf, program, layout, elf.text_image)


def _load_runtime(blob: Blob) -> LoadedKernel:
    """The Runtime Kernel: required (this simulator runs the blob's own), linked at WIN_C, its code inside the
    code buffer, no arguments but the entry registers."""
    path = "header.act_runtime.kernel"
    k = blob.header.act_runtime.kernel
    if k is None:
        raise BlobFormatError(f"{path} is missing: a blob carries its Runtime Kernel (runtime_version 2)")
    if k.params_signature != RUNTIME_SIGNATURE:
        raise BlobFormatError(f"{path}.params_signature = {k.params_signature!r}, expected {RUNTIME_SIGNATURE!r}")
    loaded = _load_kernel(blob, k, path, WIN_C)
    if len(loaded.image) > RUNTIME_CODE_BUFFER:
        raise BlobFormatError(
            f"{path}: code of {len(loaded.image)} bytes does not fit the {RUNTIME_CODE_BUFFER}-byte code buffer"
        )
    if loaded.elf.data:
        raise BlobFormatError(f"{path}: the Runtime Kernel has no WIN_E image, but its ELF has a .data section")
    return loaded


class _Validator:
    def __init__(self, blob: Blob) -> None:
        self.blob = blob
        h = blob.header
        self.target = h.target
        self.sizes: dict[tuple[Location, int], int] = {}

    def check_header(self) -> None:
        h, t = self.blob.header, self.target
        limits = (
            ("tiles", t.tiles, MAX_TILES),
            ("shaves_per_tile", t.shaves_per_tile, MAX_SHAVES_PER_TILE),
            ("dma_engines", t.dma_engines, MAX_DMA_ENGINES),
            ("dpus_per_tile", t.dpus_per_tile, MAX_DPUS_PER_TILE),
            ("cmx_bytes_per_tile", t.cmx_bytes_per_tile, MAX_CMX_BYTES),
        )
        for name, value, limit in limits:
            if not 1 <= value <= limit:
                raise BlobFormatError(f"header.target.{name} = {value} outside 1..{limit}")
        if t.name not in MAX_BARRIERS:
            raise BlobFormatError(f"header.target.name = {t.name!r}: not a platform ({', '.join(MAX_BARRIERS)})")
        if not 1 <= t.max_barriers <= MAX_BARRIERS[t.name]:
            raise BarrierLimitError(
                f"header.target.max_barriers = {t.max_barriers}: {t.name} has {MAX_BARRIERS[t.name]} physical barriers"
            )
        if not h.name:
            raise BlobFormatError("header.name is empty (the module's symbol)")
        rt = h.act_runtime
        if rt.runtime_version != RUNTIME_VERSION:
            raise BlobFormatError(
                f"header.act_runtime.runtime_version = {rt.runtime_version}, expected {RUNTIME_VERSION}"
            )
        if len(rt.stack_size_per_tile) != t.tiles:
            raise BlobFormatError(
                f"header.act_runtime.stack_size_per_tile has {len(rt.stack_size_per_tile)} entries for {t.tiles} tiles"
            )
        for i, size in enumerate(rt.stack_size_per_tile):
            if size <= RUNTIME_FRAME_BYTES or size % 16 or size * t.shaves_per_tile >= t.cmx_bytes_per_tile:
                raise BlobFormatError(
                    f"header.act_runtime.stack_size_per_tile[{i}] = {size} invalid for this CMX (a multiple of 16 "
                    f"above the Runtime Kernel's {RUNTIME_FRAME_BYTES}-byte frame)"
                )
        self.runtime = _load_runtime(self.blob)
        if h.scratch_bytes > MAX_DDR_BYTES:
            raise BlobFormatError(f"header.scratch_bytes = {h.scratch_bytes} exceeds {MAX_DDR_BYTES}")
        self.sizes[(Location.DDR_SCRATCH, 0)] = h.scratch_bytes
        for kind, refs, location in (
            ("inputs", h.inputs, Location.NET_INPUT),
            ("outputs", h.outputs, Location.NET_OUTPUT),
        ):
            names = set()
            for i, ref in enumerate(refs):
                path = f"header.{kind}[{i}]"
                if ref.location != location or ref.index != i or ref.offset != 0:
                    raise BlobFormatError(f"{path}: must be {location.name} #{i} at offset 0")
                if ref.name in names or not ref.name:
                    raise BlobFormatError(f"{path}: name {ref.name!r} empty or duplicated")
                names.add(ref.name)
                self.sizes[(location, i)] = self.nbytes(ref, path)
        for i, data in enumerate(self.blob.constants):
            self.sizes[(Location.CONSTANT, i)] = len(data)
        for tile in range(t.tiles):
            self.sizes[(Location.CMX, tile)] = t.cmx_bytes_per_tile

    def nbytes(self, ref: TensorRef, path: str) -> int:
        if ref.dtype not in DTYPE_TO_NUMPY:
            raise BlobFormatError(f"{path}.dtype = {ref.dtype.name} has no element size")
        if ref.strides_bits and len(ref.strides_bits) != len(ref.dims):
            raise BlobFormatError(f"{path}: {len(ref.strides_bits)} strides for {len(ref.dims)} dims")
        if len(ref.dims) > MAX_ND_DIMS:
            raise BlobFormatError(f"{path}: {len(ref.dims)} dims, at most {MAX_ND_DIMS}")
        if ref.order:
            try:
                dims_order_from_code(ref.order, len(ref.dims))
            except KernelAbiError as exc:
                raise BlobFormatError(f"{path}.order: {exc}") from None
        size = ref.nbytes
        if size > MAX_DDR_BYTES:
            raise BlobFormatError(f"{path}: {size} bytes is larger than any memory")
        return size

    def region(self, ref: TensorRef, path: str, extent: int | None = None) -> Region:
        key = (ref.location, ref.index)
        if key not in self.sizes:
            raise BlobFormatError(f"{path}: location {ref.location.name} #{ref.index} does not exist")
        size = self.nbytes(ref, path) if extent is None else extent
        low = self.reserved[ref.index] if ref.location == Location.CMX else 0
        if ref.offset < low or ref.offset + size > self.sizes[key]:
            raise BlobFormatError(
                f"{path}: bytes [{ref.offset}, {ref.offset + size}) outside {ref.location.name} #{ref.index} "
                f"([{low}, {self.sizes[key]}))"
            )
        return Region(key, ref.offset, size)

    @staticmethod
    def descriptor_extents(d: DmaDescriptor, path: str) -> tuple[int, int]:
        fields = (d.len, d.src_width, d.dst_width, d.num_planes)
        if min(fields) == 0 or d.len * d.num_planes > MAX_DDR_BYTES:
            raise BlobFormatError(f"{path}: len/src_width/dst_width/num_planes must be positive and bounded")

        def extent(width: int, stride: int, plane_stride: int) -> int:
            last_line = (d.len - 1) // width
            end = last_line * stride + (d.len - last_line * width)
            if last_line:
                end = max(end, (last_line - 1) * stride + width)
            return (d.num_planes - 1) * plane_stride + end

        return (
            extent(d.src_width, d.src_stride, d.src_plane_stride),
            extent(d.dst_width, d.dst_stride, d.dst_plane_stride),
        )

    def dma(self, task: Task, p: DmaTask, where: str, queue: int) -> LoadedTask:
        if p.engine != queue:
            raise BlobFormatError(f"{where}: engine {p.engine} in the task list of DMA engine {queue}")
        if p.dst.location not in WRITABLE_LOCATIONS:
            raise BlobFormatError(f"{where}: DMA destination {p.dst.location.name} is read-only")
        if p.descriptor is None:
            src = self.region(p.src, f"{where}.src")
            dst = self.region(p.dst, f"{where}.dst")
            if src.size != dst.size or src.size == 0:
                raise BlobFormatError(f"{where}: flat DMA of {src.size} bytes into {dst.size} bytes")
        else:
            src_extent, dst_extent = self.descriptor_extents(p.descriptor, f"{where}.descriptor")
            src = self.region(p.src, f"{where}.src", src_extent)
            dst = self.region(p.dst, f"{where}.dst", dst_extent)
        return LoadedTask(task, where, Executor.DMA, queue, src=src, dst=dst, descriptor=p.descriptor)

    def dpu(self, task: Task, p: DpuTask, where: str, queue: int) -> LoadedTask:
        from snippets_shave.sim.dpu import check_dpu_task

        check_dpu_task(p, f"{where}.payload")
        tile = queue // self.target.dpus_per_tile
        if p.input.index != tile:
            raise BlobFormatError(f"{where}: operands in the CMX of tile {p.input.index}, the DPU is on tile {tile}")
        refs = [("input", p.input)] + ([("weights", p.weights)] if p.weights is not None else [])
        regions = [self.region(ref, f"{where}.payload.{name}") for name, ref in (*refs, ("output", p.output))]
        out = regions[-1]
        for (name, _), r in zip(refs, regions, strict=False):
            if r.offset < out.offset + out.size and out.offset < r.offset + r.size:
                raise BlobFormatError(f"{where}: the output overlaps the {name} (a DPU does not compute in place)")
        return LoadedTask(task, where, Executor.DPU, queue, regions=tuple(regions))

    def act(
        self, task: Task, p: ActKernelTask, where: str, queue: int, kernels: tuple[LoadedKernel, ...]
    ) -> LoadedTask:
        inv = p.invocation
        if inv.tile != queue:
            raise BlobFormatError(f"{where}: invocation.tile {inv.tile} in the ACT_SHAVE list of tile {queue}")
        if inv.kernel >= len(kernels):
            raise BlobFormatError(f"{where}: invocation.kernel {inv.kernel} but the blob has {len(kernels)} kernels")
        kernel = kernels[inv.kernel]
        window = _kernel_bytes(self.blob, inv.data_window, f"{where}.invocation.data_window")
        if len(window) > MAX_DATA_WINDOW:
            raise BlobFormatError(f"{where}: WIN_E image of {len(window)} bytes exceeds {MAX_DATA_WINDOW}")
        if inv.args_size != kernel.layout.size or inv.args_offset + inv.args_size > len(window):
            raise BlobFormatError(
                f"{where}: args [{inv.args_offset}, +{inv.args_size}) vs a {len(window)}-byte image and a "
                f"{kernel.layout.size}-byte {kernel.layout.signature} params struct"
            )
        data = kernel.elf.data
        if window[: len(data)] != data or inv.args_offset < len(data):
            raise BlobFormatError(f"{where}: WIN_E image does not start with the kernel's .data section")
        params = unpack_params(window, inv.args_offset, kernel.layout, f"{where} params")
        for s, kind in kernel.layout.scalars:
            if kind == "b" and params.scalars[s] not in (0, 1):
                raise KernelAbiError(f"{where} params.{s} = {params.scalars[s]}: a bool scalar is 0 or 1")
        cmx = self.target.cmx_bytes_per_tile
        for name, m in params.memrefs.items():
            off = m.data_addr - WIN_F
            if m.location != MemLocation.NN_CMX or not m.is_static:
                raise BlobFormatError(f"{where} params.{name}: only static CMX MemRefs are supported")
            if off < self.reserved[queue] or off + m.extent_bytes() > cmx:
                raise BlobFormatError(
                    f"{where} params.{name}.dataAddr = {m.data_addr:#x}: {m.extent_bytes()} bytes outside the "
                    f"CMX workspace [{self.reserved[queue]}, {cmx}) of tile {queue}"
                )
        described = (*inv.inputs, *inv.outputs)
        if described:
            if len(described) != len(params.memrefs):
                raise BlobFormatError(
                    f"{where}: invocation lists {len(described)} input/output tensors for {len(params.memrefs)} MemRefs"
                )
            for i, (ref, (name, m)) in enumerate(zip(described, params.memrefs.items(), strict=True)):
                self.nbytes(ref, f"{where}.invocation tensor {i}")
                same = (
                    ref.location == Location.CMX and ref.index == queue and WIN_F + ref.offset == m.data_addr
                    and tuple(ref.dims) == m.dims and ref.dtype == m.dtype
                    and (not ref.strides_bits or tuple(ref.strides_bits) == m.strides_bits)
                )  # fmt: skip
                if not same:
                    raise BlobFormatError(f"{where}: invocation tensor {i} ({ref.name!r}) disagrees with params.{name}")
        return LoadedTask(
            task, where, Executor.ACT_SHAVE, queue, kernel=inv.kernel, window=window,
            args_offset=inv.args_offset, params=params,
        )  # fmt: skip

    def load(self) -> LoadedBlob:
        self.check_header()
        t = self.target
        stacks = self.blob.header.act_runtime.stack_size_per_tile
        self.reserved = tuple((t.shaves_per_tile * s + 63) // 64 * 64 for s in stacks)
        kernels = tuple(_load_kernel(self.blob, k, f"kernels[{i}]") for i, k in enumerate(self.blob.kernels))
        nbar = len(self.blob.barriers)
        producers, consumers = [0] * nbar, [0] * nbar
        dma: list[list[LoadedTask]] = [[] for _ in range(t.dma_engines)]
        tiles: list[list[LoadedTask]] = [[] for _ in range(t.tiles)]
        dpus: list[list[LoadedTask]] = [[] for _ in range(t.tiles * t.dpus_per_tile)]
        limits = {Executor.DMA: t.dma_engines, Executor.ACT_SHAVE: t.tiles, Executor.DPU: len(dpus)}
        seen_lists: set[tuple[int, int]] = set()
        seen_ids: set[int] = set()
        seen_names: set[str] = set()
        for i, tl in enumerate(self.blob.task_lists):
            limit = limits[tl.executor]
            if tl.queue >= limit or (int(tl.executor), tl.queue) in seen_lists:
                raise BlobFormatError(f"task_lists[{i}]: {tl.executor.name} queue {tl.queue} invalid or repeated")
            seen_lists.add((int(tl.executor), tl.queue))
            for j, task in enumerate(tl.tasks):
                where = f"task {task.name!r} (task_lists[{i}].tasks[{j}])"
                if task.id in seen_ids:
                    raise BlobFormatError(f"{where}: id {task.id} repeated")
                seen_ids.add(task.id)
                if not task.name or task.name in seen_names:  # errors and traces name tasks
                    raise BlobFormatError(f"{where}: name empty or repeated")
                seen_names.add(task.name)
                for kind, ids, counts in (("wait", task.wait, consumers), ("update", task.update, producers)):
                    if len(set(ids)) != len(ids):
                        raise BlobFormatError(f"{where}: barriers.{kind} lists a barrier twice")
                    for b in ids:
                        if b >= nbar:
                            raise BlobFormatError(f"{where}: barriers.{kind} names barrier {b}; the blob has {nbar}")
                        counts[b] += 1
                if tl.executor == Executor.DMA:
                    if not isinstance(task.payload, DmaTask):
                        raise BlobFormatError(f"{where}: a DMA task list holds a non-DMA task")
                    dma[tl.queue].append(self.dma(task, task.payload, where, tl.queue))
                elif tl.executor == Executor.DPU:
                    if not isinstance(task.payload, DpuTask):
                        raise BlobFormatError(f"{where}: a DPU task list holds a non-DPU task")
                    dpus[tl.queue].append(self.dpu(task, task.payload, where, tl.queue))
                else:
                    if not isinstance(task.payload, ActKernelTask):
                        raise BlobFormatError(f"{where}: an ACT_SHAVE task list holds a non-kernel task")
                    tiles[tl.queue].append(self.act(task, task.payload, where, tl.queue, kernels))
        check_variants(dpus)
        for b, bar in enumerate(self.blob.barriers):
            if bar.id != b:
                raise BlobFormatError(f"barriers[{b}].id = {bar.id}: virtual barrier ids must equal their index")
            if not -1 <= bar.real_id < t.max_barriers:
                raise BarrierLimitError(
                    f"barriers[{b}].real_id = {bar.real_id}: the target has physical barriers 0..{t.max_barriers - 1}"
                )
            if consumers[b] and not producers[b]:
                waiter = next(task for tl in self.blob.task_lists for task in tl.tasks if b in task.wait)
                raise UnproducedBarrierError(
                    f"barriers[{b}]: task {waiter.name!r} (id {waiter.id}) waits on it, but no task updates it"
                )
            if (bar.producers, bar.consumers) != (producers[b], consumers[b]):
                raise BarrierCountError(
                    f"barriers[{b}]: producers/consumers {bar.producers}/{bar.consumers}, but the task lists have "
                    f"{producers[b]} updating and {consumers[b]} waiting tasks"
                )
        return LoadedBlob(
            self.blob, kernels, tuple(map(tuple, dma)), tuple(map(tuple, tiles)), tuple(stacks), self.reserved,
            dict(self.sizes), self.runtime, tuple(self.records(q, kernels) for q in tiles), tuple(map(tuple, dpus)),
        )  # fmt: skip

    @staticmethod
    def records(queue: list[LoadedTask], kernels: tuple[LoadedKernel, ...]) -> tuple[bytes, tuple[int, ...]]:
        """What the host writes after the Runtime Kernel's code for one tile: a record per ACT_SHAVE task."""
        recs = [
            InvocationRecord(
                lt.task.id, lt.kernel, kernels[lt.kernel].elf.entry, j, WIN_E + lt.args_offset,
                kernels[lt.kernel].layout.size, lt.task.wait, lt.task.update,
            )
            for j, lt in enumerate(queue)
        ]  # fmt: skip
        table, addresses = pack_records(recs)
        if RUNTIME_CODE_BUFFER + len(table) > WINDOW_SIZE:
            raise BlobFormatError(f"{len(queue)} invocation records of one tile do not fit WIN_C after the code")
        return table, addresses


def earlier_instances(blob: Blob) -> list[list[int]]:
    """Per virtual barrier, the barriers configured before it on the same physical id: barriers sharing a
    physical id are its successive instances in increasing virtual id, and one is current once those drained."""
    earlier: list[list[int]] = [[] for _ in blob.barriers]
    last_on: dict[int, int] = {}
    for bar in blob.barriers:
        if bar.real_id >= 0:
            if bar.real_id in last_on:
                earlier[bar.id] = [*earlier[last_on[bar.real_id]], last_on[bar.real_id]]
            last_on[bar.real_id] = bar.id
    return earlier


def check_variants(dpus: list[list[LoadedTask]]) -> None:
    """The variants of each NCE task (layer) are numbered 0..variants-1, each once, all with the same count."""
    seen: dict[str, tuple[int, list[int], str]] = {}
    for q in dpus:
        for t in q:
            p = t.task.payload
            assert isinstance(p, DpuTask)
            count, indices, _ = seen.setdefault(p.layer, (p.variants, [], t.where))
            if p.variants != count:
                raise BlobFormatError(f"{t.where}: layer {p.layer!r} has {count} variants elsewhere, {p.variants} here")
            indices.append(p.variant)
    for layer, (count, indices, where) in seen.items():
        if sorted(indices) != list(range(count)):
            raise BlobFormatError(f"{where}: layer {layer!r} has variants {sorted(indices)} of {count}")


def load_blob(data: bytes | Blob) -> LoadedBlob:
    """Parse (if bytes) and validate a blob; raises BlobFormatError (or a subclass) naming the field or task."""
    blob = data if isinstance(data, Blob) else read_blob(data)
    try:
        return _Validator(blob).load()
    except SnippetsError:
        raise
    except (ValueError, KeyError, OverflowError) as exc:  # e.g. an enum value no table knows
        raise BlobFormatError(f"blob failed validation: {type(exc).__name__}: {exc}") from None

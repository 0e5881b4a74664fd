"""Building the VPURT IR (and from it a :class:`~snippets_shave.blob.Blob`) from kernels, DMA copies and
kernel invocations.

:class:`ScheduleBuilder` is what a compiler (or a test) uses: it deduplicates kernel ELFs into ``@VPU.SW``
declarations, checks each invocation's arguments against the kernel arguments contract, keeps one task
list per DMA engine and per tile in the order tasks were added, and counts every barrier's producers and
consumers from the tasks that update and wait on it, so the counts are right by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from snippets_shave.abi import MemRef, ParamsLayout, build_data_window
from snippets_shave.blob import Blob, DmaDescriptor, DpuTask, Executor, KernelKind, Location, Target, TensorRef
from snippets_shave.constants import DEFAULT_STACK_SIZE, DTYPE_TO_NUMPY, KERNEL_ABI_VERSION, WIN_F, dtype_of
from snippets_shave.elf import KernelElf, read_kernel_elf
from snippets_shave.errors import KernelAbiError
from snippets_shave.runtime_kernel import RUNTIME_NAME, RUNTIME_SIGNATURE, runtime_kernel_elf
from snippets_shave.vpurt.assign_physical_barriers import AssignPhysicalBarriers
from snippets_shave.vpurt.ir import (
    BarrierDecl,
    DmaOp,
    GraphConfig,
    KernelArg,
    KernelDecl,
    Module,
    Payload,
    SwKernelOp,
    TaskListOp,
    VpurtTask,
)
from snippets_shave.vpurt.serialize import (
    declare_kernel,
    explicit_memref,
    first_use_dtypes,
    module_to_blob,
    normalize_scalar,
    unique_name,
    with_arg_types,
)


def runtime_kernel_decl() -> KernelDecl:
    """``@VPU.SW::@runtime``: the Runtime Kernel every schedule carries (``VPURT.Graph``'s ``runtime``)."""
    return declare_kernel(
        RUNTIME_NAME, RUNTIME_SIGNATURE, Payload.of(runtime_kernel_elf()), 0, KERNEL_ABI_VERSION, KernelKind.COMPUTE,
        [],
    )  # fmt: skip


def cmx_reserved_bytes(target: Target, stack_size: int) -> int:
    """Bytes at the bottom of each CMX slice holding the SHAVE stacks; the workspace starts there."""
    return (target.shaves_per_tile * stack_size + 63) // 64 * 64


def cmx_memref(ref: TensorRef) -> MemRef:
    """The kernel-side view (a WIN_F MemRef) of a CMX TensorRef."""
    if ref.location != Location.CMX:
        raise KernelAbiError(f"tensor {ref.name!r}: kernels only address CMX, not {ref.location.name}")
    return MemRef(WIN_F + ref.offset, ref.dims, ref.dtype, strides_bits=ref.strides_bits or None)


@dataclass
class _Kernel:
    index: int
    elf: KernelElf
    layout: ParamsLayout


@dataclass
class ScheduleBuilder:
    """Accumulates tensors, kernels, tasks and barriers as VPURT IR; ``build_module()`` returns the
    :class:`~snippets_shave.vpurt.ir.Module` and ``build()`` the Blob serialized from it."""

    name: str
    target: Target = field(default_factory=Target)
    stack_size: int = DEFAULT_STACK_SIZE
    inputs: list[TensorRef] = field(default_factory=list)
    outputs: list[TensorRef] = field(default_factory=list)
    constants: list[bytes] = field(default_factory=list)
    scratch_bytes: int = 0
    kernels: list[KernelDecl] = field(default_factory=list)
    tasks: list[tuple[Executor, int, VpurtTask]] = field(default_factory=list)
    num_barriers: int = 0
    _by_elf: dict[bytes, _Kernel] = field(default_factory=dict)
    _names: set[str] = field(default_factory=lambda: {RUNTIME_NAME})  # @runtime is the Runtime Kernel

    @property
    def cmx_workspace_start(self) -> int:
        return cmx_reserved_bytes(self.target, self.stack_size)

    # -- tensors ----------------------------------------------------------------------------------------
    def add_input(self, name: str, dims: tuple[int, ...] | list[int], dtype: object) -> TensorRef:
        ref = TensorRef(name, dtype_of(dtype), tuple(dims), Location.NET_INPUT, len(self.inputs))
        self.inputs.append(ref)
        return ref

    def add_output(self, name: str, dims: tuple[int, ...] | list[int], dtype: object) -> TensorRef:
        ref = TensorRef(name, dtype_of(dtype), tuple(dims), Location.NET_OUTPUT, len(self.outputs))
        self.outputs.append(ref)
        return ref

    def add_constant(self, name: str, value: np.ndarray) -> TensorRef:
        value = np.ascontiguousarray(value)
        ref = TensorRef(name, dtype_of(value.dtype), value.shape, Location.CONSTANT, len(self.constants))
        self.constants.append(value.tobytes())
        return ref

    def alloc_scratch(self, name: str, dims: tuple[int, ...] | list[int], dtype: object) -> TensorRef:
        """A DDR scratch buffer (64-byte aligned)."""
        offset = (self.scratch_bytes + 63) // 64 * 64
        ref = TensorRef(name, dtype_of(dtype), tuple(dims), Location.DDR_SCRATCH, 0, offset)
        self.scratch_bytes = offset + ref.nbytes
        return ref

    @staticmethod
    def cmx(tile: int, offset: int, dims: tuple[int, ...] | list[int], dtype: object, name: str = "") -> TensorRef:
        """A tensor at byte ``offset`` of tile ``tile``'s CMX slice (offsets count from the slice start)."""
        return TensorRef(name or f"cmx{tile}@{offset}", dtype_of(dtype), tuple(dims), Location.CMX, tile, offset)

    @staticmethod
    def view(ref: TensorRef, start: int, count: int, name: str = "") -> TensorRef:
        """Elements ``[start, start + count)`` of a dense tensor, as a flat 1-D TensorRef."""
        size = DTYPE_TO_NUMPY[ref.dtype].itemsize
        return TensorRef(
            name or f"{ref.name}[{start}:{start + count}]", ref.dtype, (count,), ref.location, ref.index,
            ref.offset + start * size,
        )  # fmt: skip

    # -- kernels and barriers ---------------------------------------------------------------------------
    def add_kernel(self, elf_bytes: bytes) -> int:
        """Declare a kernel ELF (deduplicated by content) and return its index in the ``@VPU.SW`` module."""
        known = self._by_elf.get(elf_bytes)
        if known is not None:
            return known.index
        elf = read_kernel_elf(elf_bytes, "kernel ELF")
        layout = ParamsLayout.from_signature(elf.note.params_signature, elf.name)
        decl = declare_kernel(
            unique_name(elf.name, self._names), elf.note.params_signature, Payload.of(elf_bytes),
            elf.entry_offset, KERNEL_ABI_VERSION, KernelKind.COMPUTE, [],
        )  # fmt: skip
        self.kernels.append(decl)
        self._by_elf[elf_bytes] = _Kernel(len(self.kernels) - 1, elf, layout)
        return len(self.kernels) - 1

    def new_barrier(self) -> int:
        self.num_barriers += 1
        return self.num_barriers - 1

    # -- tasks ------------------------------------------------------------------------------------------
    def _add(  # type: ignore[no-untyped-def]
        self, executor: Executor, queue: int, name: str | None, op: DmaOp | SwKernelOp | DpuTask, wait, update
    ) -> VpurtTask:
        task = VpurtTask(len(self.tasks), name or f"task{len(self.tasks)}", op, tuple(wait), tuple(update))
        self.tasks.append((executor, queue, task))
        return task

    def dma(
        self,
        src: TensorRef,
        dst: TensorRef,
        *,
        engine: int = 0,
        wait: tuple[int, ...] | list[int] = (),
        update: tuple[int, ...] | list[int] = (),
        name: str | None = None,
        descriptor: DmaDescriptor | None = None,
    ) -> VpurtTask:
        return self._add(Executor.DMA, engine, name, DmaOp(src, dst, engine, descriptor), wait, update)

    def dpu(
        self,
        task: DpuTask,
        dpu: int,
        *,
        wait: tuple[int, ...] | list[int] = (),
        update: tuple[int, ...] | list[int] = (),
        name: str | None = None,
    ) -> VpurtTask:
        """One NCE variant on DPU ``dpu`` (of ``target.dpus``; its operands in the CMX of that DPU's tile)."""
        if not 0 <= dpu < self.target.dpus:
            raise KernelAbiError(f"DPU {dpu}: the target has {self.target.dpus}")
        return self._add(Executor.DPU, dpu, name, task, wait, update)

    def act(
        self,
        kernel: int,
        tile: int,
        memrefs: list[MemRef] | list[TensorRef],
        scalars: dict[str, float | int | bool] | None = None,
        *,
        wait: tuple[int, ...] | list[int] = (),
        update: tuple[int, ...] | list[int] = (),
        name: str | None = None,
        layout: ParamsLayout | None = None,
        outputs: int = 1,
    ) -> VpurtTask:
        """Invoke ``kernel`` on ``tile``; ``memrefs`` may be CMX TensorRefs (converted with :func:`cmx_memref`).

        Scalars are named as in ``layout`` (default: the generic ``s0, s1, ...`` of the kernel's signature).
        The last ``outputs`` MemRefs are the ones the kernel writes (by default only the last one).
        """
        k = next(v for v in self._by_elf.values() if v.index == kernel)
        layout = layout or k.layout
        if layout.signature != k.layout.signature:
            raise KernelAbiError(f"kernel {k.elf.name}: layout {layout.signature} != ELF note {k.layout.signature}")
        refs = [explicit_memref(m if isinstance(m, MemRef) else cmx_memref(m)) for m in memrefs]
        named = all(isinstance(m, TensorRef) for m in memrefs)
        # The window is packed now too, so a bad argument list is reported at the call that made it.
        build_data_window(layout, refs, scalars, data_section=k.elf.data)
        if not 1 <= outputs <= len(layout.memrefs):
            raise KernelAbiError(f"kernel {k.elf.name}: {outputs} outputs of {len(layout.memrefs)} MemRefs")
        n_in = len(layout.memrefs) - outputs
        args = [
            KernelArg(r, m if named else None)  # type: ignore[arg-type]
            for r, m in zip(refs, memrefs, strict=True)
        ]
        given = dict(scalars or {})
        values = tuple(normalize_scalar(kind, given[s]) for s, kind in layout.scalars)
        op = SwKernelOp(self.kernels[kernel].name, tile, tuple(args[:n_in]), tuple(args[n_in:]), values)
        return self._add(Executor.ACT_SHAVE, tile, name, op, wait, update)

    def prune_barriers(self) -> None:
        """Drop the barriers no task waits on (nobody observes their producers) and renumber the others in
        order, so a compiler may give every task the barriers it might need and prune once at the end."""
        waited = sorted({b for _, _, task in self.tasks for b in task.waits})
        new_id = {b: i for i, b in enumerate(waited)}
        self.tasks = [
            (executor, queue, replace(
                task, waits=tuple(new_id[b] for b in task.waits),
                updates=tuple(new_id[b] for b in task.updates if b in new_id),
            ))
            for executor, queue, task in self.tasks
        ]  # fmt: skip
        self.num_barriers = len(waited)

    # -- result -----------------------------------------------------------------------------------------
    def barrier_counts(self) -> list[BarrierDecl]:
        producers = [0] * self.num_barriers
        consumers = [0] * self.num_barriers
        for _, _, task in self.tasks:
            for b in task.updates:
                producers[b] += 1
            for b in task.waits:
                consumers[b] += 1
        return [BarrierDecl(i, producers[i], consumers[i]) for i in range(self.num_barriers)]

    def build_module(self, physical: bool = True) -> Module:
        """The schedule as a VPURT module; its virtual barriers mapped onto the target's physical ones unless
        ``physical`` is false (:class:`~snippets_shave.vpurt.assign_physical_barriers.AssignPhysicalBarriers`)."""
        queues: dict[tuple[int, int], list[VpurtTask]] = {}
        for executor, queue, task in self.tasks:
            queues.setdefault((int(executor), queue), []).append(task)
        task_lists = tuple(TaskListOp(Executor(e), q, tuple(ts)) for (e, q), ts in sorted(queues.items()))
        dtypes = first_use_dtypes(task_lists)
        kernels = tuple(with_arg_types(k, dtypes.get(k.name, [])) for k in self.kernels)
        module = Module(
            name=self.name,
            target=self.target,
            inputs=tuple(self.inputs),
            outputs=tuple(self.outputs),
            kernels=kernels,
            constants=tuple(Payload.of(c) for c in self.constants),
            barriers=tuple(self.barrier_counts()),
            task_lists=task_lists,
            graph=GraphConfig(tuple([self.stack_size] * self.target.tiles), runtime_kernel_decl()),
            scratch_bytes=self.scratch_bytes,
        )
        return AssignPhysicalBarriers(self.target.max_barriers).run(module) if physical else module

    def build(self, physical: bool = True) -> Blob:
        """The blob serialized from :meth:`build_module` (``physical=False``: virtual barriers only, as a test of
        the simulator's own deadlock and race detection needs, since physical reuse adds ordering)."""
        return module_to_blob(self.build_module(physical))

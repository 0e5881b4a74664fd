"""Building a :class:`~snippets_shave.blob.Blob` from kernels, DMA copies and kernel invocations.

:class:`ScheduleBuilder` is what a compiler (or a test) uses: it deduplicates kernel ELFs into
``kernel_data``, packs each invocation's WIN_E image through the kernel arguments contract, keeps one task
list per DMA engine and per tile in the order tasks were added, and counts every barrier's producers and
consumers from the tasks that update and wait on it, so the counts are right by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from snippets_shave.abi import MemRef, ParamsLayout, build_data_window
from snippets_shave.blob import (
    ActKernel,
    ActKernelInvocation,
    ActKernelRuntime,
    ActKernelTask,
    Barrier,
    Blob,
    DmaDescriptor,
    DmaTask,
    Executor,
    Header,
    KernelDataRef,
    Location,
    Target,
    Task,
    TaskList,
    TensorRef,
)
from snippets_shave.constants import DEFAULT_STACK_SIZE, DTYPE_TO_NUMPY, WIN_F, dtype_of
from snippets_shave.elf import KernelElf, read_kernel_elf
from snippets_shave.errors import KernelAbiError


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
    """Accumulates tensors, kernels, tasks and barriers, then ``build()`` returns the Blob."""

    name: str
    target: Target = field(default_factory=Target)
    stack_size: int = DEFAULT_STACK_SIZE
    inputs: list[TensorRef] = field(default_factory=list)
    outputs: list[TensorRef] = field(default_factory=list)
    constants: list[bytes] = field(default_factory=list)
    scratch_bytes: int = 0
    kernel_data: list[bytes] = field(default_factory=list)
    kernels: list[ActKernel] = field(default_factory=list)
    tasks: list[tuple[Executor, int, Task]] = field(default_factory=list)
    num_barriers: int = 0
    _by_elf: dict[bytes, _Kernel] = field(default_factory=dict)

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
        """Register a kernel ELF (deduplicated by content) and return its index in ``Blob.kernels``."""
        known = self._by_elf.get(elf_bytes)
        if known is not None:
            return known.index
        elf = read_kernel_elf(elf_bytes, "kernel ELF")
        layout = ParamsLayout.from_signature(elf.note.params_signature, elf.name)
        data_index = len(self.kernel_data)
        self.kernel_data.append(elf_bytes)
        kernel = ActKernel(
            name=elf.name,
            elf=KernelDataRef(f"{elf.name}.elf", data_index, 0, len(elf_bytes)),
            text=KernelDataRef(f"{elf.name}.text", data_index, elf.text_file_offset, len(elf.text)),
            entry=elf.entry_offset,
            params_signature=elf.note.params_signature,
        )
        self.kernels.append(kernel)
        self._by_elf[elf_bytes] = _Kernel(len(self.kernels) - 1, elf, layout)
        return len(self.kernels) - 1

    def new_barrier(self) -> int:
        self.num_barriers += 1
        return self.num_barriers - 1

    # -- tasks ------------------------------------------------------------------------------------------
    def _add(self, executor: Executor, queue: int, name: str | None, payload, wait, update) -> Task:  # type: ignore[no-untyped-def]
        task = Task(len(self.tasks), name or f"task{len(self.tasks)}", payload, tuple(wait), tuple(update))
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
    ) -> Task:
        return self._add(Executor.DMA, engine, name, DmaTask(src, dst, engine, descriptor), wait, update)

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
    ) -> Task:
        """Invoke ``kernel`` on ``tile``; ``memrefs`` may be CMX TensorRefs (converted with :func:`cmx_memref`).

        Scalars are named as in ``layout`` (default: the generic ``s0, s1, ...`` of the kernel's signature).
        The last ``outputs`` MemRefs are the ones the kernel writes (by default only the last one).
        """
        k = self._by_elf[self.kernel_data[self.kernels[kernel].elf.index]]
        layout = layout or k.layout
        if layout.signature != k.layout.signature:
            raise KernelAbiError(f"kernel {k.elf.name}: layout {layout.signature} != ELF note {k.layout.signature}")
        refs = [m if isinstance(m, MemRef) else cmx_memref(m) for m in memrefs]
        tensors = [m for m in memrefs if isinstance(m, TensorRef)]
        window = build_data_window(layout, refs, scalars, data_section=k.elf.data)
        self.kernel_data.append(window.image)
        data_ref = KernelDataRef(f"{name or 'act'}.win_e", len(self.kernel_data) - 1, 0, len(window.image))
        if not 1 <= outputs <= len(layout.memrefs):
            raise KernelAbiError(f"kernel {k.elf.name}: {outputs} outputs of {len(layout.memrefs)} MemRefs")
        n_in = len(layout.memrefs) - outputs
        invocation = ActKernelInvocation(
            kernel, data_ref, window.args_offset, window.args_size, tile,
            inputs=tuple(tensors[:n_in]) if len(tensors) == len(refs) else (),
            outputs=tuple(tensors[n_in:]) if len(tensors) == len(refs) else (),
        )  # fmt: skip
        return self._add(Executor.ACT_SHAVE, tile, name, ActKernelTask(invocation), wait, update)

    def prune_barriers(self) -> None:
        """Drop the barriers no task waits on (nobody observes their producers) and renumber the others in
        order, so a compiler may give every task the barriers it might need and prune once at the end."""
        waited = sorted({b for _, _, task in self.tasks for b in task.wait})
        new_id = {b: i for i, b in enumerate(waited)}
        self.tasks = [
            (executor, queue, replace(
                task, wait=tuple(new_id[b] for b in task.wait), update=tuple(new_id[b] for b in task.update if b in new_id)
            ))
            for executor, queue, task in self.tasks
        ]  # fmt: skip
        self.num_barriers = len(waited)

    # -- result -----------------------------------------------------------------------------------------
    def barrier_counts(self) -> list[Barrier]:
        producers = [0] * self.num_barriers
        consumers = [0] * self.num_barriers
        for _, _, task in self.tasks:
            for b in task.update:
                producers[b] += 1
            for b in task.wait:
                consumers[b] += 1
        return [Barrier(i, producers[i], consumers[i]) for i in range(self.num_barriers)]

    def build(self) -> Blob:
        queues: dict[tuple[int, int], list[Task]] = {}
        for executor, queue, task in self.tasks:
            queues.setdefault((int(executor), queue), []).append(task)
        task_lists = tuple(TaskList(Executor(e), q, tuple(ts)) for (e, q), ts in sorted(queues.items()))
        header = Header(
            name=self.name,
            target=self.target,
            inputs=tuple(self.inputs),
            outputs=tuple(self.outputs),
            act_runtime=ActKernelRuntime(tuple([self.stack_size] * self.target.tiles)),
            scratch_bytes=self.scratch_bytes,
        )
        return Blob(
            header=header,
            task_lists=task_lists,
            barriers=tuple(self.barrier_counts()),
            kernels=tuple(self.kernels),
            kernel_data=tuple(self.kernel_data),
            constants=tuple(self.constants),
        )

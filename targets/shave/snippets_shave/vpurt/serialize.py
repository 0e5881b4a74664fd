"""VPURT IR <-> blob: the blob is serialized from the IR (``module_to_blob``), and read back into it
(``module_from_blob``) for ``snippets inspect`` and the round-trip tests.

Serialization is the HLD's "Kernel Serialization": every ``@VPU.SW`` function's ELF goes to ``kernel_data``
(then one WIN_E image per ``VPUIP.SW.Kernel``, packed from its ``.run`` operands through the kernel arguments
contract), each ``VPURT.Task`` becomes a blob ``Task`` with its barriers, each barrier declaration a ``Barrier``
(``real_id`` = its physical id) and ``VPURT.Graph`` the ``ActKernelRuntime``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from snippets_shave.abi import MemRef, ParamsLayout, build_data_window, unpack_params
from snippets_shave.blob import (
    ActKernel,
    ActKernelInvocation,
    ActKernelRuntime,
    ActKernelTask,
    Barrier,
    Blob,
    DmaTask,
    DpuTask,
    Header,
    KernelDataRef,
    Task,
    TaskList,
)
from snippets_shave.constants import WIN_C, WIN_D, DType
from snippets_shave.elf import read_kernel_elf
from snippets_shave.errors import BlobFormatError, KernelAbiError
from snippets_shave.vpurt.ir import (
    BarrierDecl,
    DmaOp,
    GraphConfig,
    KernelArg,
    KernelDecl,
    MemRefArg,
    Module,
    Payload,
    ScalarArg,
    SwKernelOp,
    TaskListOp,
    VpurtTask,
)


def explicit_memref(m: MemRef) -> MemRef:
    """``m`` with its memory order and strides spelled out, as a MemRefData read back from a WIN_E image."""
    return MemRef(m.data_addr, tuple(m.dims), m.dtype, m.memory_order, m.strides(), m.is_static, m.location)


def normalize_scalar(kind: str, value: float | int | bool) -> float | int:
    """The value a params struct field of ``kind`` holds (f32 rounding, bools as 0/1)."""
    if kind == "f":
        return float(np.float32(value))
    return int(bool(value)) if kind == "b" else int(value)


def declare_kernel(
    name: str, signature: str, code: Payload, entry: int, abi_version: int, kind: object, dtypes: list[DType]
) -> KernelDecl:
    """A ``@VPU.SW`` declaration from a params signature; ``dtypes`` are the memref element types an
    invocation uses (empty: not invoked, the element type stays unknown)."""
    layout = ParamsLayout.from_signature(signature, name)
    memrefs = tuple(MemRefArg(m) for m in layout.memrefs)
    scalars = tuple(ScalarArg(s, k) for s, k in layout.scalars)
    decl = KernelDecl(name, memrefs, scalars, code, entry, abi_version, kind)  # type: ignore[arg-type]
    return with_arg_types(decl, dtypes)


def with_arg_types(decl: KernelDecl, dtypes: list[DType]) -> KernelDecl:
    """``decl`` with its memref element types taken from an invocation's operands."""
    memrefs = tuple(
        replace(m, dtype=dtypes[i] if i < len(dtypes) else DType.UNDEFINED) for i, m in enumerate(decl.memrefs)
    )
    return replace(decl, memrefs=memrefs)


def first_use_dtypes(task_lists: tuple[TaskListOp, ...]) -> dict[str, list[DType]]:
    """Per kernel, the element types of its first invocation's memrefs (a declaration's ``memref<*xT>``)."""
    seen: dict[str, list[DType]] = {}
    for tl in task_lists:
        for task in tl.tasks:
            if isinstance(task.op, SwKernelOp) and task.op.kernel not in seen:
                seen[task.op.kernel] = [a.memref.dtype for a in (*task.op.inputs, *task.op.outputs)]
    return seen


def unique_name(name: str, taken: set[str]) -> str:
    """``name``, or ``name_1``, ``name_2``... so that symbol references stay unambiguous."""
    candidate, n = name, 0
    while candidate in taken:
        n += 1
        candidate = f"{name}_{n}"
    taken.add(candidate)
    return candidate


# -- IR -> blob -----------------------------------------------------------------------------------------------
def _act_kernel(decl: KernelDecl, index: int, base: int = WIN_D) -> ActKernel:
    elf = read_kernel_elf(decl.code.data, f"@VPU.SW::@{decl.name}", base)
    return ActKernel(
        name=decl.name,
        elf=KernelDataRef(f"{decl.name}.elf", index, 0, len(decl.code.data)),
        text=KernelDataRef(f"{decl.name}.text", index, elf.text_file_offset, len(elf.text)),
        entry=decl.entry_offset,
        abi_version=decl.abi_version,
        params_signature=decl.params_signature,
        kind=decl.kind,
    )


def module_to_blob(module: Module) -> Blob:
    """Serialize a VPURT module into the blob's tables (``write_blob`` then gives the bytes)."""
    kernel_data: list[bytes] = []
    kernels: list[ActKernel] = []
    index: dict[str, int] = {}
    elf_data: dict[str, bytes] = {}
    for decl in module.kernels:
        if not decl.code.data:
            raise BlobFormatError(f"@VPU.SW::@{decl.name}: no kernel code attached (a parsed module has none)")
        index[decl.name] = len(kernels)
        kernels.append(_act_kernel(decl, len(kernel_data)))
        kernel_data.append(decl.code.data)
        elf_data[decl.name] = read_kernel_elf(decl.code.data, decl.name).data
    runtime_kernel = None
    if module.graph.runtime is not None:
        runtime_kernel = _act_kernel(module.graph.runtime, len(kernel_data), WIN_C)
        kernel_data.append(module.graph.runtime.code.data)
    task_lists = []
    for tl in module.task_lists:
        tasks = []
        for t in tl.tasks:
            if isinstance(t.op, DmaOp):
                payload: DmaTask | ActKernelTask | DpuTask = DmaTask(t.op.src, t.op.dst, t.op.engine, t.op.descriptor)
            elif isinstance(t.op, DpuTask):
                payload = t.op
            else:
                op = t.op
                if op.kernel not in index:
                    raise KernelAbiError(f"task {t.name!r}: kernel @VPU.SW::@{op.kernel} is not declared")
                decl = module.kernels[index[op.kernel]]
                layout = ParamsLayout.from_signature(decl.params_signature, decl.name)
                args = (*op.inputs, *op.outputs)
                scalars = dict(zip((s for s, _ in layout.scalars), op.scalars, strict=True))
                window = build_data_window(layout, [a.memref for a in args], scalars, data_section=elf_data[decl.name])
                kernel_data.append(window.image)
                ref = KernelDataRef(f"{t.name}.win_e", len(kernel_data) - 1, 0, len(window.image))
                named = all(a.tensor is not None for a in args)
                payload = ActKernelTask(
                    ActKernelInvocation(
                        index[op.kernel], ref, window.args_offset, window.args_size, op.tile,
                        inputs=tuple(a.tensor for a in op.inputs) if named else (),  # type: ignore[misc]
                        outputs=tuple(a.tensor for a in op.outputs) if named else (),  # type: ignore[misc]
                    )
                )  # fmt: skip
            tasks.append(Task(t.id, t.name, payload, t.waits, t.updates))
        task_lists.append(TaskList(tl.executor, tl.queue, tuple(tasks)))
    g = module.graph
    header = Header(
        name=module.name,
        target=module.target,
        inputs=module.inputs,
        outputs=module.outputs,
        act_runtime=ActKernelRuntime(g.stack_configuration, g.runtime_version, runtime_kernel),
        scratch_bytes=module.scratch_bytes,
        version=module.version,
    )
    return Blob(
        header=header,
        task_lists=tuple(task_lists),
        barriers=tuple(Barrier(b.id, b.producers, b.consumers, b.physical) for b in module.barriers),
        kernels=tuple(kernels),
        kernel_data=tuple(kernel_data),
        constants=tuple(c.data for c in module.constants),
    )


# -- blob -> IR -----------------------------------------------------------------------------------------------
def _slice(blob: Blob, ref: KernelDataRef, what: str) -> bytes:
    if ref.index >= len(blob.kernel_data) or ref.offset + ref.size > len(blob.kernel_data[ref.index]):
        raise BlobFormatError(f"{what}: kernel_data[{ref.index}][{ref.offset}:+{ref.size}] is out of range")
    return blob.kernel_data[ref.index][ref.offset : ref.offset + ref.size]


def module_from_blob(blob: Blob) -> Module:
    """Read a blob back into the VPURT IR (what ``snippets inspect`` prints)."""
    taken: set[str] = {"runtime"}  # the runtime kernel's symbol
    names = [unique_name(k.name, taken) for k in blob.kernels]
    task_lists = []
    for i, tl in enumerate(blob.task_lists):
        tasks = []
        for j, task in enumerate(tl.tasks):
            where = f"task_lists[{i}].tasks[{j}] ({task.name!r})"
            if isinstance(task.payload, DmaTask):
                p = task.payload
                op: DmaOp | SwKernelOp | DpuTask = DmaOp(p.src, p.dst, p.engine, p.descriptor)
            elif isinstance(task.payload, DpuTask):
                op = task.payload
            else:
                inv = task.payload.invocation
                if inv.kernel >= len(blob.kernels):
                    raise BlobFormatError(f"{where}: kernel {inv.kernel}; the blob has {len(blob.kernels)}")
                kernel = blob.kernels[inv.kernel]
                layout = ParamsLayout.from_signature(kernel.params_signature, kernel.name)
                window = _slice(blob, inv.data_window, f"{where}.data_window")
                params = unpack_params(window, inv.args_offset, layout, f"{where} params")
                refs = [
                    MemRef(m.data_addr, m.dims, m.dtype, m.order, m.strides_bits, m.is_static, m.location)
                    for m in params.memrefs.values()
                ]
                named = len(inv.inputs) + len(inv.outputs) == len(refs) and len(inv.outputs) > 0
                n_out = len(inv.outputs) if named else 1
                tensors = [*inv.inputs, *inv.outputs] if named else [None] * len(refs)
                args = [KernelArg(m, t) for m, t in zip(refs, tensors, strict=True)]
                n_in = len(args) - n_out
                op = SwKernelOp(names[inv.kernel], inv.tile, tuple(args[:n_in]), tuple(args[n_in:]),
                                tuple(params.scalars.values()))  # fmt: skip
            tasks.append(VpurtTask(task.id, task.name, op, task.wait, task.update))
        task_lists.append(TaskListOp(tl.executor, tl.queue, tuple(tasks)))
    dtypes = first_use_dtypes(tuple(task_lists))
    kernels = tuple(
        declare_kernel(
            names[i], k.params_signature, Payload.of(_slice(blob, k.elf, f"kernels[{i}].elf")), k.entry,
            k.abi_version, k.kind, dtypes.get(names[i], []),
        )
        for i, k in enumerate(blob.kernels)
    )  # fmt: skip
    rt = blob.header.act_runtime
    runtime = None
    if rt.kernel is not None:
        code = Payload.of(_slice(blob, rt.kernel.elf, "header.act_runtime.kernel.elf"))
        runtime = declare_kernel("runtime", rt.kernel.params_signature or ":", code, rt.kernel.entry,
                                 rt.kernel.abi_version, rt.kernel.kind, [])  # fmt: skip
    h = blob.header
    return Module(
        name=h.name,
        target=h.target,
        inputs=h.inputs,
        outputs=h.outputs,
        kernels=kernels,
        constants=tuple(Payload.of(c) for c in blob.constants),
        barriers=tuple(BarrierDecl(b.id, b.producers, b.consumers, b.real_id) for b in blob.barriers),
        task_lists=tuple(task_lists),
        graph=GraphConfig(tuple(rt.stack_size_per_tile), runtime, rt.runtime_version),
        scratch_bytes=h.scratch_bytes,
        version=h.version,
    )

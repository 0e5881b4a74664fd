"""Print a blob's schedule in the MLIR-like text of the Software Layers HLD (for ``snippets inspect``).

The output names the kernel declarations (``module @VPU.SW``), the barriers, one ``VPURT.TaskList`` per DMA
engine and per tile with ``VPURT.Task waits(...) updates(...)``, each kernel invocation as
``VPUIP.SW.Kernel ... { VPUIP.SW.Kernel.run(...) }`` with its scalar arguments decoded from the WIN_E image,
and ``VPURT.Graph`` with the runtime and stack configuration. Deterministic: the same blob, the same text.
"""

from __future__ import annotations

from snippets_shave.abi import DecodedMemRef, ParamsLayout, unpack_params
from snippets_shave.blob import ActKernelTask, Blob, DmaTask, Executor, Location, TensorRef, read_blob
from snippets_shave.constants import WIN_F, DType
from snippets_shave.errors import BlobFormatError

_TYPE_NAMES = {
    DType.F32: "f32", DType.F16: "f16", DType.BF16: "bf16", DType.I32: "si32", DType.I16: "si16",
    DType.I8: "si8", DType.U8: "ui8", DType.I64: "si64", DType.UNDEFINED: "?",
}  # fmt: skip
_SCALAR_TYPES = {"f": "f32", "i": "i64", "b": "i1"}
_MEMORY = {
    Location.NET_INPUT: "@NetworkInput", Location.NET_OUTPUT: "@NetworkOutput", Location.DDR_SCRATCH: "@DDR",
    Location.CONSTANT: "@Constant", Location.CMX: "@CMX_NN", Location.NONE: "@None",
}  # fmt: skip


def _shape(dims: tuple[int, ...], dtype: DType) -> str:
    return "x".join([*(str(d) for d in dims), _TYPE_NAMES[dtype]])


def _tensor(ref: TensorRef) -> str:
    where = f"[{_MEMORY[ref.location]}, {ref.index}]"
    return f"memref<{_shape(ref.dims, ref.dtype)}, {where} + {ref.offset}>"


def _memref(m: DecodedMemRef, tile: int) -> str:
    return f"memref<{_shape(m.dims, m.dtype)}, [@CMX_NN, {tile}] + {m.data_addr - WIN_F}>"


def _declarations(blob: Blob) -> list[str]:
    first_types: dict[int, list[str]] = {}
    for tl in blob.task_lists:
        for task in tl.tasks:
            if isinstance(task.payload, ActKernelTask):
                inv = task.payload.invocation
                if inv.kernel in first_types or inv.kernel >= len(blob.kernels):
                    continue
                layout = ParamsLayout.from_signature(blob.kernels[inv.kernel].params_signature)
                window = blob.kernel_data[inv.data_window.index][inv.data_window.offset :][: inv.data_window.size]
                params = unpack_params(window, inv.args_offset, layout)
                first_types[inv.kernel] = [
                    f"memref<*x{_TYPE_NAMES[m.dtype]}, @CMX_NN>" for m in params.memrefs.values()
                ]
    lines = ["  module @VPU.SW {"]
    for i, k in enumerate(blob.kernels):
        layout = ParamsLayout.from_signature(k.params_signature)
        args = first_types.get(i, ["memref<*x?, @CMX_NN>"] * len(layout.memrefs))
        args = args + [_SCALAR_TYPES[kind] for _, kind in layout.scalars]
        lines.append(
            f"    func.func private @{k.name}({', '.join(args)}) attributes {{VPU.kernel_code = "
            f'"kernel_data[{k.elf.index}]", VPU.kernel_entry = "{k.name}", VPU.entry_offset = {k.entry}}}'
        )
    runtime = blob.header.act_runtime.kernel
    code = f'"kernel_data[{runtime.elf.index}]"' if runtime is not None else '"native"'
    lines.append(f"    func.func private @runtime() attributes {{VPU.kernel_code = {code}}}")
    lines.append("  }")
    return lines


def _barriers(ids: tuple[int, ...]) -> str:
    return ", ".join(f"%b{b}" for b in ids)


def _task_head(waits: tuple[int, ...], updates: tuple[int, ...]) -> str:
    head = "VPURT.Task"
    if waits:
        head += f" waits({_barriers(waits)})"
    if updates:
        head += f" updates({_barriers(updates)})"
    return head


def _act(blob: Blob, payload: ActKernelTask) -> list[str]:
    inv = payload.invocation
    kernel = blob.kernels[inv.kernel]
    layout = ParamsLayout.from_signature(kernel.params_signature)
    window = blob.kernel_data[inv.data_window.index][inv.data_window.offset :][: inv.data_window.size]
    params = unpack_params(window, inv.args_offset, layout)
    refs = list(params.memrefs.values())
    n_in = len(refs) - 1
    ins = ", ".join(f"{_memref(m, inv.tile)} as %arg{i}" for i, m in enumerate(refs[:n_in]))
    outs = ", ".join(f"{_memref(m, inv.tile)} as %arg{n_in + i}" for i, m in enumerate(refs[n_in:]))
    attrs = ", ".join(repr(v) for v in params.scalars.values())
    run = f"VPUIP.SW.Kernel.run {{attrs = [{attrs}]}}" if attrs else "VPUIP.SW.Kernel.run"
    return [
        f"VPUIP.SW.Kernel @VPU.SW::@{kernel.name} on tile {inv.tile} inputs({ins}) outputs({outs}) {{",
        f"  {run}({', '.join(f'%arg{i}' for i in range(len(refs)))})",
        "}",
    ]


def _dma(payload: DmaTask) -> list[str]:
    line = f"VPUIP.DMA {{port = {payload.engine}}} inputs({_tensor(payload.src)}) outputs({_tensor(payload.dst)})"
    d = payload.descriptor
    if d is not None:
        line += (
            f" descriptor(len = {d.len}, src = [{d.src_width}, {d.src_stride}, {d.src_plane_stride}], "
            f"dst = [{d.dst_width}, {d.dst_stride}, {d.dst_plane_stride}], planes = {d.num_planes})"
        )
    return [line]


def format_schedule(data: bytes | Blob) -> str:
    """The schedule of a blob as HLD-style MLIR text."""
    blob = data if isinstance(data, Blob) else read_blob(data)
    h = blob.header
    try:
        lines = [f'module @{h.name or "network"} attributes {{VPU.arch = "{h.target.name}"}} {{']
        lines += _declarations(blob)
        ins = ", ".join(f"%{r.name}: memref<{_shape(r.dims, r.dtype)}, @NetworkInput>" for r in h.inputs)
        outs = ", ".join(f"memref<{_shape(r.dims, r.dtype)}, @NetworkOutput>" for r in h.outputs)
        lines.append(f"  func.func @main({ins}) -> ({outs}) {{")
        for b in blob.barriers:
            lines.append(
                f"    %b{b.id} = VPURT.DeclareVirtualBarrier {{producers = {b.producers}, consumers = {b.consumers}}}"
            )
        for tl in blob.task_lists:
            where = f"engine {tl.queue}" if tl.executor == Executor.DMA else f"tile {tl.queue}"
            lines.append(f"    VPURT.TaskList @{tl.executor.name} [{where}] {{")
            for task in tl.tasks:
                lines.append(f"      {_task_head(task.wait, task.update)} {{  // {task.name} (id {task.id})")
                body = _dma(task.payload) if isinstance(task.payload, DmaTask) else _act(blob, task.payload)
                lines += [f"        {line}" for line in body]
                lines.append("      }")
            lines.append("    }")
        lines.append("  }")
        stacks = ", ".join(str(s) for s in h.act_runtime.stack_size_per_tile)
        lines += [
            "  VPURT.Graph {",
            f"    act_shaves : {{runtime: @VPU.SW::@runtime, stack_configuration: [{stacks}]}}",
            (
                f"    target : {{tiles = {h.target.tiles}, shaves_per_tile = {h.target.shaves_per_tile}, "
                f"cmx_bytes_per_tile = {h.target.cmx_bytes_per_tile}, dma_engines = {h.target.dma_engines}}}"
            ),
            "  }",
            "}",
        ]
    except (IndexError, KeyError, ValueError) as exc:
        raise BlobFormatError(f"blob {h.name!r} cannot be printed: {type(exc).__name__}: {exc}") from None
    return "\n".join(lines) + "\n"

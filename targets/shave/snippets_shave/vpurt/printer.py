"""Print a VPURT module as the Software Layers HLD's MLIR-like text (what ``snippets inspect`` shows).

Every field of the IR is printed, so :func:`snippets_shave.vpurt.parser.parse_module` reads the text back into
an equal module; byte payloads (kernel ELFs, constants) are printed as their digest and size.
"""

from __future__ import annotations

import json
import re

from snippets_shave.abi import MemRef
from snippets_shave.blob import DmaDescriptor, DpuTask, Executor, Location, TensorRef
from snippets_shave.constants import WIN_F, DType, MemLocation
from snippets_shave.schedule import cmx_memref
from snippets_shave.vpurt.ir import BarrierDecl, DmaOp, KernelArg, KernelDecl, Module, SwKernelOp, VpurtTask
from snippets_shave.vpurt.serialize import explicit_memref

TYPE_NAMES = {
    DType.F32: "f32", DType.F16: "f16", DType.BF16: "bf16", DType.I32: "si32", DType.I16: "si16",
    DType.I8: "si8", DType.U8: "ui8", DType.I64: "si64", DType.UNDEFINED: "unknown",
}  # fmt: skip
SCALAR_TYPES = {"f": "f32", "i": "i64", "b": "i1"}
MEMORY = {
    Location.NET_INPUT: "@NetworkInput", Location.NET_OUTPUT: "@NetworkOutput", Location.DDR_SCRATCH: "@DDR",
    Location.CONSTANT: "@Constant", Location.CMX: "@CMX_NN", Location.NONE: "@None",
}  # fmt: skip
_BARE = re.compile(r"[A-Za-z_][\w$]*\Z")


def symbol(name: str) -> str:
    """``@name``, quoted when it is not a bare identifier (MLIR's ``@"..."``)."""
    return "@" + (name if _BARE.match(name) else json.dumps(name))


def shape(dims: tuple[int, ...], dtype: DType) -> str:
    return "x".join([*(str(d) for d in dims), TYPE_NAMES[dtype]])


def _ints(values: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def tensor(ref: TensorRef) -> str:
    """``ref<"name", 2x40xf16, @CMX_NN[1] + 8192>`` (+ strides and order when not the defaults)."""
    where = f"{MEMORY[ref.location]}[{ref.index}] + {ref.offset}"
    text = f"ref<{json.dumps(ref.name)}, {shape(ref.dims, ref.dtype)}, {where}"
    if ref.strides_bits:
        text += f", strides = {_ints(ref.strides_bits)}"
    if ref.order:
        text += f", order = {ref.order}"
    return text + ">"


def memref(m: MemRef) -> str:
    """A kernel's MemRefData: WIN_F offset, dims, strides (bits) and memory order, all explicit."""
    text = f"memref<{shape(m.dims, m.dtype)}, @CMX_NN + {m.data_addr - WIN_F}, strides = {_ints(m.strides())}"
    text += f", order = {_ints(m.memory_order)}"
    if not m.is_static:
        text += ", dynamic"
    if m.location != MemLocation.NN_CMX:
        text += f", location = {m.location.name}"
    return text + ">"


def _arg(arg: KernelArg, i: int) -> str:
    if arg.tensor is None:
        return f"{memref(arg.memref)} as %arg{i}"
    if arg.tensor.location == Location.CMX and explicit_memref(cmx_memref(arg.tensor)) == arg.memref:
        return f"{tensor(arg.tensor)} as %arg{i}"  # the MemRef is the tensor's CMX view
    return f"{memref(arg.memref)} of {tensor(arg.tensor)} as %arg{i}"


def _scalar(kind: str, value: float | int) -> str:
    return repr(float(value)) if kind == "f" else str(int(value))


def declaration(decl: KernelDecl) -> str:
    args = [f"%{m.name}: memref<*x{TYPE_NAMES[m.dtype]}, @CMX_NN>" for m in decl.memrefs]
    args += [f"%{s.name}: {SCALAR_TYPES[s.kind]}" for s in decl.scalars]
    return (
        f"func.func private {symbol(decl.name)}({', '.join(args)}) attributes {{VPU.kernel_code = "
        f"{json.dumps(decl.code.digest)}, VPU.code_size = {decl.code.size}, VPU.entry_offset = {decl.entry_offset}, "
        f'VPU.abi_version = {decl.abi_version}, VPU.kind = "{decl.kind.name}"}}'
    )


def _barrier(b: BarrierDecl) -> str:
    op = "VPURT.DeclareVirtualBarrier" if b.physical < 0 else f"VPURT.ConfigurePhysicalBarrier <{b.physical}>"
    return f"%b{b.id} = {op} {{producers = {b.producers}, consumers = {b.consumers}}}"


def _descriptor(d: DmaDescriptor) -> str:
    return (
        f" descriptor(len = {d.len}, src = [{d.src_width}, {d.src_stride}, {d.src_plane_stride}], "
        f"dst = [{d.dst_width}, {d.dst_stride}, {d.dst_plane_stride}], planes = {d.num_planes})"
    )


#: the word before a task list's queue number
QUEUE_WORDS = {Executor.DMA: "engine", Executor.ACT_SHAVE: "tile", Executor.DPU: "dpu"}


def _dpu(op: DpuTask) -> str:
    attrs = (
        f"op = {json.dumps(op.op.name)}, layer = {json.dumps(op.layer)}, variant = {op.variant}, "
        f"variants = {op.variants}, kernel = {_ints(op.kernel)}, strides = {_ints(op.strides)}, "
        f"pads = {_ints(op.pads)}, dilations = {_ints(op.dilations)}, transpose_b = {int(op.transpose_b)}, "
        f"exclude_pad = {int(op.exclude_pad)}"
    )
    weights = f" weights({tensor(op.weights)})" if op.weights is not None else ""
    return f"VPUIP.NCE.DPUTask {{{attrs}}} inputs({tensor(op.input)}){weights} outputs({tensor(op.output)})"


def _op(module: Module, op: DmaOp | SwKernelOp | DpuTask) -> list[str]:
    if isinstance(op, DpuTask):
        return [_dpu(op)]
    if isinstance(op, DmaOp):
        line = f"VPUIP.DMA {{port = {op.engine}}} inputs({tensor(op.src)}) outputs({tensor(op.dst)})"
        return [line + (_descriptor(op.descriptor) if op.descriptor is not None else "")]
    decl = module.kernel(op.kernel)
    n_in = len(op.inputs)
    ins = ", ".join(_arg(a, i) for i, a in enumerate(op.inputs))
    outs = ", ".join(_arg(a, n_in + i) for i, a in enumerate(op.outputs))
    consts = [
        f"  %{s.name} = arith.constant {_scalar(s.kind, v)} : {SCALAR_TYPES[s.kind]}"
        for s, v in zip(decl.scalars, op.scalars, strict=True)
    ]
    operands = [f"%arg{i}" for i in range(n_in + len(op.outputs))] + [f"%{s.name}" for s in decl.scalars]
    return [
        f"VPUIP.SW.Kernel @VPU.SW::{symbol(op.kernel)} on tile {op.tile} inputs({ins}) outputs({outs}) {{",
        *consts,
        f"  VPUIP.SW.Kernel.run({', '.join(operands)})",
        "}",
    ]


def _task(module: Module, task: VpurtTask) -> list[str]:
    head = f"VPURT.Task {{id = {task.id}, name = {json.dumps(task.name)}}}"
    if task.waits:
        head += f" waits({', '.join(f'%b{b}' for b in task.waits)})"
    if task.updates:
        head += f" updates({', '.join(f'%b{b}' for b in task.updates)})"
    return [head + " {", *(f"  {line}" for line in _op(module, task.op)), "}"]


def print_module(module: Module) -> str:
    """The module as MLIR-like text; deterministic (same module, same text)."""
    v, t, g = module.version, module.target, module.graph
    lines = [
        f"module {symbol(module.name)} attributes {{VPU.arch = {json.dumps(t.name)}, VPU.version = "
        f'"{v.major}.{v.minor}.{v.patch}", VPU.producer = {json.dumps(v.producer)}}} {{',
        "  module @VPU.SW {",
        *(f"    {declaration(k)}" for k in module.kernels),
        "    " + (declaration(g.runtime) if g.runtime is not None else
                  'func.func private @runtime() attributes {VPU.kernel_code = "native"}'),
        "  }",
    ]  # fmt: skip
    lines += [
        f"  const.Declare @cst{i} {{size = {c.size}, digest = {json.dumps(c.digest)}}}"
        for i, c in enumerate(module.constants)
    ]
    ins = ", ".join(tensor(r) for r in module.inputs)
    outs = ", ".join(tensor(r) for r in module.outputs)
    lines.append(f"  func.func @main({ins}) -> ({outs}) attributes {{VPU.scratch_bytes = {module.scratch_bytes}}} {{")
    lines += [f"    {_barrier(b)}" for b in module.barriers]
    for tl in module.task_lists:
        where = QUEUE_WORDS[tl.executor]
        lines.append(f"    VPURT.TaskList @{tl.executor.name} [{where} {tl.queue}] {{")
        for task in tl.tasks:
            lines += [f"      {line}" for line in _task(module, task)]
        lines.append("    }")
    lines += [
        "  }",
        "  VPURT.Graph {",
        f"    act_shaves : {{runtime = @VPU.SW::@runtime, stack_configuration = {_ints(g.stack_configuration)}, "
        f"runtime_version = {g.runtime_version}}}",
        f"    target : {{tiles = {t.tiles}, shaves_per_tile = {t.shaves_per_tile}, cmx_bytes_per_tile = "
        f"{t.cmx_bytes_per_tile}, dma_engines = {t.dma_engines}, max_barriers = {t.max_barriers}, dpus_per_tile = "
        f"{t.dpus_per_tile}}}",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"

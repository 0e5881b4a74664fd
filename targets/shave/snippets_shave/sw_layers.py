"""SW kernel layers: a node the Tokenizer left outside the Subgraphs runs as its own ACT SHAVE kernel.

The real compiler lowers such ops to ``VPU.SW`` kernels of its runtime library; here each becomes one
invocation of a :mod:`snippets_shave.sw_kernels` kernel, with its geometry (dims, strides, eps, 1/n) in the
params struct. :func:`plan` turns a node into a :class:`SwLayer` (or says why it cannot run);
:func:`compile_layer` schedules it in the blob being built: the whole tensors are DMAed into one CMX slot,
the kernel runs, the output is DMAed back (the slot and barrier bookkeeping is the compiler's).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from snippets_core.errors import CodegenError
from snippets_core.ir.element_type import ElementType
from snippets_shave import sw_kernels as swk
from snippets_shave.abi import ParamsLayout
from snippets_shave.constants import DType, dtype_of

if TYPE_CHECKING:
    from snippets_core.ir.node import Node, Output

#: node type -> map-kernel op (eltwise over strided operands)
MAP_NODES = {
    "Erf": "erf",
    "Log": "log",
    "SoftPlus": "softplus",
    "Select": "select",
    "Transpose": "copy",
    "Equal": "equal",
    "NotEqual": "not_equal",
    "Greater": "greater",
    "GreaterEqual": "greater_equal",
    "Less": "less",
    "LessEqual": "less_equal",
}
#: node type -> axis-kernel kind
AXIS_NODES = {
    "Softmax": "softmax",
    "ReduceSum": "sum",
    "ReduceMean": "mean",
    "ReduceMax": "max",
    "ReduceMin": "min",
    "ReduceProd": "prod",
    "ReduceL1": "l1",
    "ReduceL2": "l2",
    "ReduceSumSquare": "sum_square",
}
SW_LAYER_OPS = frozenset({*MAP_NODES, *AXIS_NODES, "Gelu", "LayerNormalization"})
_TYPES = {ElementType.f32: "f32", ElementType.f16: "f16", ElementType.boolean: "u8"}
_FLOAT = ("f32", "f16")


class SwLayerError(CodegenError):
    """A node that a SW kernel layer cannot run (the message says why)."""


@dataclass(frozen=True)
class Split:
    """How a layer's work splits over SHAVEs: ``total`` indices of one dim, the params scalar that holds the
    count, and per operand (inputs, then the output) the byte stride of that dim (0: the operand does not vary
    along it) and the bytes one index spans. With ``rows`` (a split of the innermost dim, columns), operand k is
    ``rows[k]`` rows of ``extents[k]`` bytes and an invocation copies its columns of every row (a 2-D DMA)."""

    total: int
    scalar: str
    strides: tuple[int, ...]
    extents: tuple[int, ...]
    rows: tuple[int, ...] | None = None

    def window(self, k: int, start: int, count: int, nbytes: int) -> tuple[int, int, int, int, int]:
        """(lo, rows, row bytes, row stride, shift): operand ``k``'s ``rows`` runs of ``row bytes`` from ``lo``
        every ``row stride`` bytes hold indices ``[start, start + count)``, the first at ``shift`` in the copy.
        An operand whose indices interleave (a transposed input) is copied whole."""
        step, extent = self.strides[k], self.extents[k]
        if self.rows is not None:
            return start * step, self.rows[k], count * step, extent, 0
        if step == 0:
            return 0, 1, extent, 0, 0
        if step >= extent:
            lo = start * step
            return lo, 1, (count - 1) * step + extent, 0, 0
        return 0, 1, nbytes, 0, start * step


@dataclass(frozen=True)
class SwLayer:
    """One SW kernel layer: its ELF, params layout, the node inputs it reads, its scalars, its split."""

    elf: bytes
    layout: ParamsLayout
    inputs: tuple[int, ...]  # indices of the node inputs passed as MemRefs, in order
    scalars: dict[str, float | int | bool]
    split: Split | None = None
    #: a second way to split (the columns of Softmax/Reduce), chosen when it gives more parallel work
    column_split: Split | None = None
    #: the dims of this layer's result (a stage of a multi-stage reduction writes a scratch value of these dims)
    out_dims: tuple[int, ...] = ()


def storage_dtype(et: ElementType) -> DType:
    """The blob DType of a model value: booleans are stored as u8 0/1."""
    return DType.U8 if et == ElementType.boolean else dtype_of(et)


def _type(out: Output, node: Node, what: str) -> str:
    t = _TYPES.get(out.element_type)
    if t is None:
        raise SwLayerError(
            f"{node.name} ({node.type_name}): {what} is {out.element_type.value}; SW kernels take f32, f16"
        )
    return t


def _dense_strides(dims: tuple[int, ...], itemsize: int) -> list[int]:
    strides, step = [], itemsize
    for d in reversed(dims):
        strides.append(step)
        step *= d
    return strides[::-1]


def _broadcast_strides(shape: tuple[int, ...], out: tuple[int, ...], itemsize: int) -> list[int]:
    dense = _dense_strides(shape, itemsize)
    pad = len(out) - len(shape)
    return [0] * pad + [0 if d == 1 and o != 1 else s for d, s, o in zip(shape, dense, out[pad:], strict=True)]


def merge_dims(dims: tuple[int, ...], strides: list[list[int]]) -> tuple[list[int], list[list[int]]] | None:
    """``dims`` and every operand's byte strides with unit dims dropped and neighbours merged where every
    operand steps through both as one dim; padded in front to 4 dims, or None when more than 4 remain."""
    keep = [i for i, d in enumerate(dims) if d != 1]
    out_dims: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    for i in keep:
        if out_dims and all(s[-1] == st[i] * dims[i] for s, st in zip(out_strides, strides, strict=True)):
            out_dims[-1] *= dims[i]
            for s, st in zip(out_strides, strides, strict=True):
                s[-1] = st[i]
            continue
        out_dims.append(dims[i])
        for s, st in zip(out_strides, strides, strict=True):
            s.append(st[i])
    if len(out_dims) > swk.MAP_RANK:
        return None
    pad = swk.MAP_RANK - len(out_dims)
    return [1] * pad + out_dims, [[0] * pad + s for s in out_strides]


@cache
def _map_elf(op: str, types: tuple[str, ...], gathered: tuple[bool, ...]) -> bytes:
    return swk.map_kernel(op, types, gathered)


@cache
def _axis_elf(kind: str, t_in: str, t_out: str) -> bytes:
    return swk.axis_kernel(kind, t_in, t_out)


@cache
def _norm_elf(t: str, scale: bool, bias: bool) -> bytes:
    return swk.norm_kernel(t, scale, bias)


def _const_ints(node: Node, index: int, what: str) -> list[int]:
    src = node.inputs[index].source.node
    if src.type_name != "Constant":
        raise SwLayerError(f"{node.name} ({node.type_name}): {what} must be a Constant")
    return [int(v) for v in np.asarray(src.value).reshape(-1)]  # type: ignore[attr-defined]


def _map_layer(node: Node, op: str, data_inputs: tuple[int, ...]) -> SwLayer:
    out = node.outputs[0]
    out_dims = out.shape.to_tuple()
    types = [_type(node.inputs[i].source, node, f"input {i}") for i in data_inputs] + [_type(out, node, "output")]
    strides = []
    for k, i in enumerate(data_inputs):
        size = swk.ITEMSIZE[types[k]]
        in_dims = node.inputs[i].source.shape.to_tuple()
        if node.type_name == "Transpose":
            perm = _const_ints(node, 1, "the order") or list(range(len(in_dims)))[::-1]
            dense = _dense_strides(in_dims, size)
            strides.append([dense[p] for p in perm])
        else:
            strides.append(_broadcast_strides(in_dims, out_dims, size))
    strides.append(_dense_strides(out_dims, swk.ITEMSIZE[types[-1]]))
    merged = merge_dims(out_dims, strides)
    if merged is None:
        raise SwLayerError(f"{node.name} ({node.type_name}): more than {swk.MAP_RANK} dims remain after merging")
    dims, strides = merged
    if op == "select" and types[0] != "u8" or op != "select" and any(t == "u8" for t in types[:-1]):
        raise SwLayerError(f"{node.name} ({node.type_name}): unexpected boolean or non-boolean operand {types}")
    if op in swk.MASK_OPS and types[-1] != "u8" or op not in swk.MASK_OPS and types[-1] == "u8":
        raise SwLayerError(f"{node.name} ({node.type_name}): output type {types[-1]}")
    # dense float operands move 4 lanes per step; a broadcast, strided or boolean one is gathered lane by lane
    gathered = tuple(t == "u8" or s[-1] != swk.ITEMSIZE[t] for t, s in zip(types, strides, strict=True))
    if dims[-1] == 1:
        gathered = tuple(False if t != "u8" else True for t in types)
    scalars: dict[str, float | int | bool] = {f"d{i}": d for i, d in enumerate(dims)}
    for k, s in enumerate(strides):
        scalars.update({f"s{k}_{i}": v for i, v in enumerate(s)})
    elf = _map_elf(op, tuple(types), gathered)
    level = next((i for i in range(swk.MAP_RANK - 1) if dims[i] > 1), None)
    split = None
    if level is not None:
        extents = tuple(
            sum((d - 1) * st for d, st in zip(dims[level + 1 :], s[level + 1 :], strict=True)) + swk.ITEMSIZE[t]
            for s, t in zip(strides, types, strict=True)
        )
        split = Split(dims[level], f"d{level}", tuple(s[level] for s in strides), extents)
    return SwLayer(elf, swk.map_layout(len(data_inputs)), data_inputs, scalars, split)


#: the kind of a later stage of a reduction over several runs of axes (the earlier stages' results combine so)
_LATER_STAGE = {
    "sum": "sum", "mean": "mean", "max": "max", "min": "min", "prod": "prod", "l1": "sum", "sum_square": "sum",
}  # fmt: skip


def _axis_layers(node: Node, kind: str) -> list[SwLayer]:
    """Softmax or a reduction: one stage per run of contiguous reduced axes (unit dims do not break a run),
    innermost first, each reducing ``[outer, n, inner]`` of the previous stage's result (a mean of means over
    equal counts is the mean; l1 and sum-square stages are followed by sums)."""
    src = node.inputs[0].source
    dims = src.shape.to_tuple()
    rank = len(dims)
    if kind == "softmax":
        axis = node.axis + rank if node.axis < 0 else node.axis  # type: ignore[attr-defined]
        axes = [axis]
    else:
        axes = sorted({a + rank if a < 0 else a for a in _const_ints(node, 1, "the axes")}) or list(range(rank))
    runs: list[list[int]] = []
    in_run = False
    for i in range(rank):
        if dims[i] == 1:
            continue
        if i in axes and not in_run:
            runs.append([])
        if i in axes:
            runs[-1].append(i)
        in_run = i in axes
    runs = runs or [[]]
    if kind == "l2" and len(runs) > 1:
        raise SwLayerError(f"{node.name} ({node.type_name}): axes {axes} of {list(dims)} are not contiguous")
    t_in, t_out = _type(src, node, "input 0"), _type(node.outputs[0], node, "output")
    if t_in not in _FLOAT or t_out != t_in:
        raise SwLayerError(f"{node.name} ({node.type_name}): {t_in} -> {t_out}; SW kernels take f32, f16")
    layers = []
    current = list(dims)
    for step, run in enumerate(reversed(runs)):
        first, last = (run[0], run[-1]) if run else (rank, rank - 1)
        outer = int(np.prod(current[:first], dtype=np.int64))
        n = int(np.prod(current[first : last + 1], dtype=np.int64)) if run else 1
        inner = int(np.prod(current[last + 1 :], dtype=np.int64))
        stage = kind if step == 0 else _LATER_STAGE[kind]
        if stage != "softmax":
            current[first : last + 1] = [1] * (last + 1 - first)
        scalars = {"outer": outer, "n": n, "inner": inner, "scale": 1.0 / n}
        row_in = n * inner * swk.ITEMSIZE[t_in]
        row_out = (n if stage == "softmax" else 1) * inner * swk.ITEMSIZE[t_out]
        split = Split(outer, "outer", (row_in, row_out), (row_in, row_out))
        es = (swk.ITEMSIZE[t_in], swk.ITEMSIZE[t_out])
        rows = (outer * n, outer * (n if stage == "softmax" else 1))
        columns = Split(inner, "inner", es, (inner * es[0], inner * es[1]), rows)
        elf = _axis_elf(stage, t_in, t_out)
        layers.append(SwLayer(elf, swk.AXIS_LAYOUT, (0,), scalars, split, columns, tuple(current)))
    return layers


def _norm_layer(node: Node) -> SwLayer:
    src = node.inputs[0].source
    dims = src.shape.to_tuple()
    axis = node.axis + len(dims) if node.axis < 0 else node.axis  # type: ignore[attr-defined]
    n = int(np.prod(dims[axis:], dtype=np.int64))
    outer = int(np.prod(dims[:axis], dtype=np.int64))
    t = _type(src, node, "input 0")
    for i in range(1, len(node.inputs)):
        p = node.inputs[i].source
        if _type(p, node, f"input {i}") != t or int(np.prod(p.shape.to_tuple(), dtype=np.int64)) != n:
            raise SwLayerError(
                f"{node.name} ({node.type_name}): input {i} must be {n} {t} values (the normalized axes), got "
                f"{p.element_type.value}{list(p.shape.to_tuple())}"
            )
    bias = len(node.inputs) > 2
    eps = float(node.epsilon)  # type: ignore[attr-defined]
    scalars = {"outer": outer, "n": n, "inv_n": 1.0 / n, "eps": eps, "eps_outside": False, "normalize": True}
    inputs = (0, 1, 2) if bias else (0, 1)
    row = n * swk.ITEMSIZE[t]
    # the scale and bias rows are the same for every row: stride 0
    split = Split(outer, "outer", (row, 0, *((0,) if bias else ()), row), (row,) * (len(inputs) + 1))
    return SwLayer(_norm_elf(t, True, bias), swk.norm_layout(True, bias), inputs, scalars, split)


def plan(node: Node) -> list[SwLayer]:
    """The SW kernel layers of ``node`` (a :data:`SW_LAYER_OPS` type with static shapes), run in order (more than
    one for a reduction over separate runs of axes), or a SwLayerError."""
    if not all(o.shape.is_static for o in [*(i.source for i in node.inputs), *node.outputs]):
        raise SwLayerError(f"{node.name} ({node.type_name}): dynamic shapes; a SHAVE blob is compiled for static ones")
    t = node.type_name
    if t in AXIS_NODES:
        return _axis_layers(node, AXIS_NODES[t])
    if t == "LayerNormalization":
        return [_norm_layer(node)]
    if t == "Gelu":
        return [_map_layer(node, "gelu_" + node.approximation_mode, (0,))]  # type: ignore[attr-defined]
    data = (0, 1, 2) if t == "Select" else (0, 1) if t in MAP_NODES and swk.MAP_OPS[MAP_NODES[t]].arity == 2 else (0,)
    return [_map_layer(node, MAP_NODES[t], data)]


def sw_layer_reason(node: Node) -> str | None:
    """Why ``node`` cannot run as a SW kernel layer, or None when it can."""
    if node.type_name not in SW_LAYER_OPS:
        return f"{node.type_name} has no SW kernel"
    try:
        plan(node)
    except SwLayerError as exc:
        return str(exc)
    return None


def compile_layer(compiler: Any, node: Node) -> None:
    """Schedule ``node``'s SW kernel layer in ``compiler`` (the shave ``_Compiler``): its outermost dim is split
    into at least one invocation per SHAVE (more when a slot cannot hold the work); each invocation DMAs the
    bytes its indices read into a CMX slot (after the slot's previous user is done and the inputs are ready),
    runs the kernel and DMAs its part of the output to the output's DDR home."""
    from snippets_shave.compiler import _Value

    layers = plan(node)
    b = compiler.b
    ins = []
    for i in layers[0].inputs:
        out = node.inputs[i].source
        if compiler.key(out) not in compiler.values and out.node.type_name == "Constant":
            ref = b.add_constant(out.node.name, np.ascontiguousarray(out.node.value))  # type: ignore[attr-defined]
            compiler.values[compiler.key(out)] = _Value(ref)
        ins.append(compiler.value(out))
    compiler.placement.append((node.name, node.type_name, "shave-sw"))
    for s, layer in enumerate(layers):
        if s == len(layers) - 1:
            value = place_output(compiler, node.outputs[0])
        else:  # a stage's result in DDR scratch, ready for the next stage
            dtype = ins[0].ref.dtype
            value = _Value(b.alloc_scratch(f"{node.name}:stage{s}", layer.out_dims, dtype), b.new_barrier())
        if value.ref.nbytes:
            name = node.name if len(layers) == 1 else f"{node.name}.stage{s}"
            _layer(compiler, name, f"{node.name} ({node.type_name})", layer, [*ins, value])
        ins = [value]


def _layer(compiler: Any, name: str, what: str, layer: SwLayer, values: list[Any]) -> None:
    b, hw = compiler.b, compiler.hw
    kidx = b.add_kernel(layer.elf)
    shaves = hw.tiles * hw.shaves_per_tile
    candidates = [c for c in (layer.split, layer.column_split) if c is not None] or [None]
    if len(candidates) > 1 and candidates[0].total < shaves:  # type: ignore[union-attr]
        candidates.sort(key=lambda c: -c.total)  # type: ignore[union-attr]
    for split in candidates:  # the first that fits a slot
        total = split.total if split is not None else 1
        n_inv = min(total, shaves)
        while True:
            bounds = np.linspace(0, total, n_inv + 1).astype(int).tolist()
            need = max(_slot_bytes(split, values, s, e - s) for s, e in zip(bounds, bounds[1:], strict=False))
            if need <= compiler.slot_bytes or n_inv == total:
                break
            n_inv = min(total, n_inv * 2)
        if need <= compiler.slot_bytes:
            break
    else:
        raise SwLayerError(
            f"{what}: one SW kernel invocation needs {need} bytes of CMX, a slot has {compiler.slot_bytes}"
        )
    for j, (start, end) in enumerate(zip(bounds, bounds[1:], strict=False)):
        _invocation(compiler, name, layer, split, kidx, values, start, end - start, j)


def _windows(split: Split | None, values: list[Any], start: int, count: int) -> list[tuple[int, int, int, int, int]]:
    if split is None:
        return [(0, 1, v.ref.nbytes, 0, 0) for v in values]
    return [split.window(k, start, count, v.ref.nbytes) for k, v in enumerate(values)]


def _slot_bytes(split: Split | None, values: list[Any], start: int, count: int) -> int:
    from snippets_shave.compiler import _align

    return sum(_align(rows * size) for _, rows, size, _, _ in _windows(split, values, start, count))


def _dma(b: Any, src: Any, dst: Any, lo: int, rows: int, size: int, stride: int, to_cmx: bool, **kw: Any) -> None:
    """Copy ``rows`` runs of ``size`` bytes, every ``stride`` bytes from byte ``lo`` of the DDR tensor, into the
    dense CMX region (or back): one flat DMA, or a 2-D descriptor DMA for several rows."""
    from snippets_shave.blob import DmaDescriptor
    from snippets_shave.compiler import _flat

    ddr, cmx = (src, dst) if to_cmx else (dst, src)
    extent = (rows - 1) * stride + size
    ddr = _flat(ddr.ref, lo, extent, cmx.dtype, ddr.ref.name)
    descriptor = None
    if rows > 1:
        total = rows * size
        descriptor = (
            DmaDescriptor(total, size, stride, 0, size, size, 0, 1)
            if to_cmx
            else DmaDescriptor(total, size, size, 0, size, stride, 0, 1)
        )
    b.dma(*((ddr, cmx) if to_cmx else (cmx, ddr)), descriptor=descriptor, **kw)


def _invocation(
    compiler: Any,
    name: str,
    layer: SwLayer,
    split: Split | None,
    kidx: int,
    values: list[Any],
    start: int,
    count: int,
    j: int,
) -> None:
    from snippets_shave.blob import TensorRef
    from snippets_shave.compiler import _align

    b, hw = compiler.b, compiler.hw
    g = compiler.invocations
    compiler.invocations += 1
    tile, slot = g % hw.tiles, (g // hw.tiles) % compiler.slots_per_tile
    cursor = b.cmx_workspace_start + slot * compiler.slot_bytes
    free = compiler.slot_free.get((tile, slot))
    b_in, b_out, b_free = b.new_barrier(), b.new_barrier(), b.new_barrier()
    tag = f"{name}.{j}"
    memrefs, out_copy = [], None
    for k, (v, (lo, rows, size, stride, shift)) in enumerate(
        zip(values, _windows(split, values, start, count), strict=True)
    ):
        dtype = v.ref.dtype
        item = v.ref.nbytes // max(1, int(np.prod(v.ref.dims)))
        role = "out" if k == len(values) - 1 else f"in{k}"
        region = b.cmx(tile, cursor, (rows * size // item,), dtype, f"{tag}.{role}")
        cursor = _align(cursor + rows * size)
        memrefs.append(TensorRef(region.name, dtype, ((rows * size - shift) // item,), region.location, tile,
                                 region.offset + shift))  # fmt: skip
        if k == len(values) - 1:
            out_copy = (region, lo, rows, size, stride)
            continue
        wait = [x for x in (free, v.ready) if x is not None]
        _dma(b, v, region, lo, rows, size, stride, True, engine=0, wait=wait, update=[b_in], name=f"{tag}.dma_in{k}")
    scalars = dict(layer.scalars)
    if split is not None:
        scalars[split.scalar] = count
    b.act(kidx, tile, memrefs, scalars, wait=[b_in], update=[b_out], name=tag, layout=layer.layout)
    region, lo, rows, size, stride = out_copy  # type: ignore[misc]
    value = values[-1]
    update = [b_free] + ([value.ready] if value.ready is not None else [])
    _dma(b, region, value, lo, rows, size, stride, False, engine=1 % hw.dma_engines, wait=[b_out], update=update,
         name=f"{tag}.dma_out")  # fmt: skip
    compiler.slot_free[(tile, slot)] = b_free


def place_output(compiler: Any, out: Output) -> Any:
    """The compiler's ``place_output`` for a SW layer's value (booleans stored as u8)."""
    from snippets_shave.compiler import _Value

    if out.element_type != ElementType.boolean:
        return compiler.place_output(out)
    ref = compiler.b.alloc_scratch(f"{out.node.name}:{out.index}", out.shape.to_tuple(), DType.U8)
    value = _Value(ref, compiler.b.new_barrier())
    compiler.values[compiler.key(out)] = value
    return value

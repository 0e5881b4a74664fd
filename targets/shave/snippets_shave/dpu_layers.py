"""DPU (NCE) layers of the whole-model compiler: MatMul/FullyConnected, Convolution, MaxPool/AvgPool.

A layer the tokenizer leaves outside the Subgraphs and the NCE can run becomes one NCE task split into
variants (DPU workloads), scheduled as the Software Layers HLD's last section proposes (docs/dpu.md):

* **operands in f16**: a constant operand is rounded to f16 at compile time; an f32 activation is converted by
  an ACT SHAVE ``Convert`` Subgraph into DDR scratch first (the NCE reads f16/int8 only);
* **variants**: the output is cut into ``dpus * variants_per_dpu`` pieces (MatMul: rows of one batch;
  Convolution and pools: output channels of one image); consecutive variants go to the same DPU, so a tile's
  variants read one contiguous slice. Each tile DMAs the operand bytes its variants read into its DPU region of
  CMX (once per tile), each variant computes its slice into CMX;
* **per-variant barriers**: each variant updates its own barrier; the ACT SHAVE kernel that post-processes the
  variant's output (the f16 -> f32 ``Convert`` back to the model's type, on the same tile, CMX to CMX) waits on
  that barrier only, and its output DMA writes the variant's bytes to the value's DDR home. With
  ``dpu_barriers="shared"`` every variant updates one barrier instead (the scheme of the HLD's "Issues" section),
  so no post-processing starts before the last variant ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, prod
from typing import TYPE_CHECKING, Any

import numpy as np

from snippets_core.errors import CodegenError, UnsupportedOpError
from snippets_shave.blob import DmaDescriptor, DpuOp, DpuTask, TensorRef
from snippets_shave.constants import DType
from snippets_shave.sim.dpu import window_out

if TYPE_CHECKING:
    from snippets_core.ir.node import Node, Output
    from snippets_shave.target_machine import ShaveKernel

DPU_LAYER_OPS = ("MatMul", "Convolution", "MaxPool", "AvgPool")
_ALIGN = 64
_F16 = 2


def _align(value: int) -> int:
    return (value + _ALIGN - 1) // _ALIGN * _ALIGN


def _is_constant(out: Output) -> bool:
    return out.node.type_name == "Constant"


def dpu_layer_reason(node: Node) -> str | None:
    """Why the NCE cannot run ``node`` (None: it can)."""
    from snippets_core.ir.element_type import ElementType

    types = {i.element_type for i in node.inputs[:2]} | {o.element_type for o in node.outputs}
    if not types <= {ElementType.f32, ElementType.f16}:
        return f"the NCE layers of the shave compiler take f32/f16 values, got {sorted(t.value for t in types)}"
    if not all(o.shape.is_static for o in node.outputs) or not all(i.shape.is_static for i in node.inputs):
        return "it has dynamic shapes; a blob is compiled for static shapes"
    if node.type_name == "MatMul":
        a, b = node.inputs[0], node.inputs[1]
        if a.shape.rank < 2 or b.shape.rank < 2:
            return "a MatMul with a 1-D operand (the NCE multiplies matrices)"
        if node.transpose_a and not _is_constant(a.source):  # type: ignore[attr-defined]
            return "MatMul transpose_a of a computed value (the NCE reads A row by row)"
        return None
    rank = node.inputs[0].shape.rank
    if rank != 4:
        return f"{node.type_name} of a rank-{rank} tensor (the NCE runs 2-D windows over NCHW)"
    if node.type_name == "Convolution":
        if not _is_constant(node.inputs[1].source):
            return "Convolution weights that are not a Constant"
        group = node.group  # type: ignore[attr-defined]
        if group != 1:
            return f"Convolution with group {group} (only group 1 is lowered to the NCE)"
    if node.type_name == "MaxPool" and len(node.outputs) > 1 and node.outputs[1].targets:
        return "MaxPool indices output"
    return None


@dataclass(frozen=True)
class _Piece:
    """Bytes ``[offset, offset + nbytes)`` of a DDR value that a tile's variants read; with ``stride``, the
    piece is ``dims[0]`` lines of ``nbytes / dims[0]`` bytes, ``stride`` bytes apart (a column block)."""

    value: Any  # compiler _Value
    offset: int
    nbytes: int
    dims: tuple[int, ...]
    stride: int = 0

    @property
    def key(self) -> tuple[int, int, int, int]:
        return (id(self.value), self.offset, self.nbytes, self.stride)


@dataclass
class _Variant:
    inputs: list[_Piece]  # input, then weights (if any)
    out_dims: tuple[int, ...]
    out_offset: int  # element offset of the variant's slice in the layer's output
    geometry: dict[str, Any]
    out_stride: int = 0  # elements between the rows of a column block of the output (0: contiguous)


def _gather(nbytes: int, width: int, stride: int) -> DmaDescriptor:
    """A DMA reading ``nbytes`` as lines of ``width`` bytes ``stride`` apart, written back to back (a column
    block of a matrix gathered into CMX)."""
    return DmaDescriptor(nbytes, width, stride, 0, nbytes, nbytes, 0, 1)


def _chunks(total: int, parts: int) -> list[tuple[int, int]]:
    bounds = np.linspace(0, total, min(parts, total) + 1).astype(int).tolist()
    return list(zip(bounds, bounds[1:], strict=False))


class DpuLayerCompiler:
    """Schedules the DPU layers of one model into a shave ``_Compiler``'s ScheduleBuilder (see the module
    docstring). ``region`` is each tile's DPU region of CMX: ``[start, start + size)``."""

    def __init__(self, compiler: Any, start: int, size: int) -> None:
        self.c = compiler
        self.start = start
        self.size = size
        self.free: dict[int, int] = {}  # tile -> barrier: the region's last users are done
        self._post_kernels: dict[int, ShaveKernel] = {}
        self._f16: dict[tuple[int, int], Any] = {}  # f16 copies of f32 activations, made once per value

    # -- operands ----------------------------------------------------------------------------------------------
    def f16_value(self, out: Output, name: str, transpose: bool = False) -> Any:
        """The f16 DDR copy of a layer operand: a constant rounded at compile time, an f16 value as it is, an f32
        value through an ACT SHAVE Convert Subgraph."""
        from snippets_core.ir.element_type import ElementType
        from snippets_shave.compiler import _Value

        c = self.c
        if _is_constant(out):
            value = np.asarray(out.node.value, dtype=np.float32)  # type: ignore[attr-defined]
            if transpose:
                value = np.swapaxes(value, -1, -2)
            return _Value(c.b.add_constant(f"{name}.f16", np.ascontiguousarray(value.astype(np.float16))))
        if transpose:
            raise CodegenError(f"{name}: a transposed computed operand reached the DPU lowering")
        if out.element_type == ElementType.f16:
            return c.value(out)
        key = c.key(out)
        if key not in self._f16:  # e.g. the Q, K and V projections read one f16 copy of x
            self._f16[key] = self._convert(out, ElementType.f16, f"{name}/to_f16")
        return self._f16[key]

    def _convert(self, out: Output, et: Any, name: str) -> Any:
        from snippets_core.ir.model import Model
        from snippets_core.ir.ops.convert import Convert
        from snippets_core.ir.ops.io import Parameter, Result
        from snippets_core.ir.ops.subgraph import Subgraph

        p = Parameter(out.element_type, out.shape.to_tuple(), name=f"{name}/in")
        body = Model([Result(Convert(p, destination_type=et, name=name), name=f"{name}/out")], [p], name=name)
        sg = Subgraph(out, body=body, name=name)
        Result(sg.outputs[0], name=f"{name}/reader")  # a reader outside the model: the value gets a ready barrier
        self.c.subgraph(sg)
        return self.c.value(sg.outputs[0])

    def post_kernel(self, elems: int) -> ShaveKernel:
        """The ACT SHAVE kernel converting ``elems`` f16 values to f32 in one call (cached by length)."""
        from snippets_core.ir.element_type import ElementType
        from snippets_core.ir.model import Model
        from snippets_core.ir.ops.convert import Convert
        from snippets_core.ir.ops.io import Parameter, Result
        from snippets_core.ir.ops.subgraph import Subgraph
        from snippets_shave.compiler import generate_kernel

        if elems not in self._post_kernels:
            name = f"dpu_post_f16_to_f32_{elems}"
            p = Parameter(ElementType.f16, (elems,), name="x")
            body = Model([Result(Convert(p, destination_type=ElementType.f32), name="y")], [p], name=name)
            sg = Subgraph(Parameter(ElementType.f16, (elems,), name="x").outputs[0], body=body, name=name)
            kernel = generate_kernel(sg, self.c.config, self.c.host, name=name, parallel_work=1 << 62)
            blocks = (*kernel.inputs, *kernel.outputs)
            if any(b.block_elems * kernel.calls != elems for b in blocks):
                raise CodegenError(f"{name}: the Convert kernel does not cover {elems} values in order")
            self._post_kernels[elems] = kernel
        return self._post_kernels[elems]

    # -- the layers --------------------------------------------------------------------------------------------
    def variants_wanted(self) -> int:
        return self.c.hw.dpus * self.c.options.variants_per_dpu

    def plan(self, n: Node) -> tuple[DpuOp, list[_Variant]]:
        if n.type_name == "MatMul":
            return DpuOp.MATMUL, self._matmul(n)
        return self._window(n)

    def _matmul(self, n: Node) -> list[_Variant]:
        a_out, b_out = n.inputs[0].source, n.inputs[1].source
        ta, tb = n.transpose_a, n.transpose_b  # type: ignore[attr-defined]
        a_shape, b_shape = list(a_out.shape.to_tuple()), list(b_out.shape.to_tuple())
        if ta:
            a_shape[-2:] = a_shape[-1], a_shape[-2]
        b_const = _is_constant(b_out)
        if tb and b_const:
            b_shape[-2:] = b_shape[-1], b_shape[-2]
        m, k = a_shape[-2:]
        nn = b_shape[-2] if (tb and not b_const) else b_shape[-1]
        a = self.f16_value(a_out, f"{n.name}.a", ta)
        b = self.f16_value(b_out, f"{n.name}.b", tb and b_const)
        out_shape = n.outputs[0].shape.to_tuple()
        batch = tuple(out_shape[:-2])
        nb = prod(batch)
        a_batch = np.broadcast_to(np.arange(prod(a_shape[:-2])).reshape(a_shape[:-2]), batch).reshape(-1)
        b_batch = np.broadcast_to(np.arange(prod(b_shape[:-2])).reshape(b_shape[:-2]), batch).reshape(-1)
        b_dims = (nn, k) if (tb and not b_const) else (k, nn)
        per_batch = max(1, ceil(self.variants_wanted() / max(nb, 1)))
        geometry = {"transpose_b": bool(tb and not b_const)}
        out = []
        for i in range(nb):
            a_at, b_at = int(a_batch[i]) * m * k * _F16, int(b_batch[i]) * k * nn * _F16
            if m >= per_batch or nn < per_batch:  # rows of A: each variant reads all of B
                for m0, m1 in _chunks(m, per_batch):
                    a_piece = _Piece(a, a_at + m0 * k * _F16, (m1 - m0) * k * _F16, (m1 - m0, k))
                    b_piece = _Piece(b, b_at, k * nn * _F16, b_dims)
                    out.append(_Variant([a_piece, b_piece], (m1 - m0, nn), (i * m + m0) * nn, dict(geometry)))
                continue
            # few rows (a fully connected layer on one sample): output channels, each variant a column block of B
            for n0, n1 in _chunks(nn, per_batch):
                a_piece = _Piece(a, a_at, m * k * _F16, (m, k))
                if geometry["transpose_b"]:  # B is [N, K]: the block is rows n0..n1
                    b_piece = _Piece(b, b_at + n0 * k * _F16, (n1 - n0) * k * _F16, (n1 - n0, k))
                else:  # B is [K, N]: K lines of n1 - n0 values
                    b_piece = _Piece(b, b_at + n0 * _F16, k * (n1 - n0) * _F16, (k, n1 - n0), stride=nn * _F16)
                stride = nn if m > 1 else 0
                out.append(_Variant([a_piece, b_piece], (m, n1 - n0), i * m * nn + n0, dict(geometry), stride))
        return out

    def _window(self, n: Node) -> tuple[DpuOp, list[_Variant]]:
        x_out = n.inputs[0].source
        nb, ch, h, w = x_out.shape.to_tuple()
        out_shape = n.outputs[0].shape.to_tuple()
        if n.type_name == "Convolution":
            weights = np.asarray(n.inputs[1].source.node.value)  # type: ignore[attr-defined]
            kernel = tuple(int(d) for d in weights.shape[2:])
            op = DpuOp.CONV
        else:
            kernel = tuple(n.kernel)  # type: ignore[attr-defined]
            op = DpuOp.MAXPOOL if n.type_name == "MaxPool" else DpuOp.AVGPOOL
        geo = n._geometry(kernel)  # type: ignore[attr-defined]
        outs, pbs, pes = geo.resolve((h, w))
        strides = tuple(int(s) for s in (n.strides or (1, 1)))  # type: ignore[attr-defined]
        dil = tuple(int(d) for d in (getattr(n, "dilations", None) or (1, 1)))
        pads = (int(pbs[0]), int(pbs[1]), int(pes[0]), int(pes[1]))
        got = [window_out(s, kk, st, lo, hi, dd) for s, kk, st, lo, hi, dd in zip(
            (h, w), kernel, strides, pads[:2], pads[2:], dil, strict=True)]  # fmt: skip
        if got != list(outs) or tuple(out_shape[2:]) != tuple(outs):
            raise UnsupportedOpError(f"{n.name} ({n.type_name}): output {list(outs)} is not the NCE's floor window")
        x = self.f16_value(x_out, f"{n.name}.x")
        wv = self.f16_value(n.inputs[1].source, f"{n.name}.w") if op == DpuOp.CONV else None
        out_ch = out_shape[1]
        geometry = {"kernel": kernel, "strides": strides, "pads": pads, "dilations": dil if op == DpuOp.CONV else ()}
        if op == DpuOp.AVGPOOL:
            geometry["exclude_pad"] = not n.count_include_pad  # type: ignore[attr-defined]
        per_image = max(1, ceil(self.variants_wanted() / max(nb, 1)))
        plane_out = out_shape[2] * out_shape[3]
        variants = []
        for i in range(nb):
            for c0, c1 in _chunks(out_ch, per_image):
                if op == DpuOp.CONV:
                    inputs = [
                        _Piece(x, i * ch * h * w * _F16, ch * h * w * _F16, (1, ch, h, w)),
                        _Piece(wv, c0 * ch * prod(kernel) * _F16, (c1 - c0) * ch * prod(kernel) * _F16,
                               (c1 - c0, ch, *kernel)),
                    ]  # fmt: skip
                else:
                    inputs = [_Piece(x, (i * ch + c0) * h * w * _F16, (c1 - c0) * h * w * _F16, (1, c1 - c0, h, w))]
                dims = (1, c1 - c0, *out_shape[2:])
                variants.append(_Variant(inputs, dims, (i * out_ch + c0) * plane_out, dict(geometry)))
        return op, variants

    def compile(self, n: Node) -> None:
        """Schedule ``n`` (a node :func:`dpu_layer_reason` accepts) as one NCE task of variants."""
        c, hw = self.c, self.c.hw
        op, variants = self.plan(n)
        value = c.place_output(n.outputs[0])
        shared = c.b.new_barrier() if c.options.dpu_barriers == "shared" else None
        c.placement.append((n.name, n.type_name, "dpu"))
        by_tile: dict[int, list[tuple[int, int, _Variant]]] = {}
        for j, var in enumerate(variants):
            dpu = j * hw.dpus // len(variants)  # consecutive variants on one DPU: one contiguous slice per tile
            by_tile.setdefault(dpu // hw.dpus_per_tile, []).append((j, dpu, var))
        for tile, items in sorted(by_tile.items()):
            region = _Region(self, n, tile)
            b_in, b_free = c.b.new_barrier(), c.b.new_barrier()
            placed = self._load(n, region, [v for _, _, v in items], b_in)
            for j, dpu, var in items:
                refs = [placed[p.key].with_dims(p.dims) for p in var.inputs]
                out = region.alloc(var.out_dims, DType.F16, f"{n.name}.v{j}.out")
                weights = refs[1] if len(refs) > 1 else None
                task = DpuTask(op, refs[0], out, weights, layer=n.name, variant=j, variants=len(variants), **var.geometry)
                b_var = shared if shared is not None else c.b.new_barrier()
                c.b.dpu(task, dpu, wait=[b_in], update=[b_var], name=f"{n.name}.v{j}")
                self._store(n, region, j, var, out, value, wait=b_var, update=[b_free])
            self.free[tile] = b_free

    def _load(self, n: Node, region: _Region, variants: list[_Variant], b_in: int) -> dict[tuple[int, int, int], Any]:
        """DMA the operand bytes a tile's variants read into its DPU region, each piece once; they update ``b_in``
        after the region's previous layer is done with it and their value is ready."""
        b = self.c.b
        placed: dict[tuple[int, int, int], Any] = {}
        for piece in (p for v in variants for p in v.inputs):
            if piece.key in placed:
                continue
            name = f"{n.name}.t{region.tile}.in{len(placed)}"
            placed[piece.key] = dst = region.alloc((piece.nbytes // _F16,), DType.F16, name)
            src = piece.value.ref
            src = TensorRef(src.name, DType.F16, dst.dims, src.location, src.index, src.offset + piece.offset)
            wait = [x for x in (self.free.get(region.tile), piece.value.ready) if x is not None]
            descriptor = _gather(piece.nbytes, piece.nbytes // piece.dims[0], piece.stride) if piece.stride else None
            b.dma(src, dst, engine=0, wait=wait, update=[b_in], descriptor=descriptor,
                  name=f"{n.name}.t{region.tile}.dma_in{len(placed) - 1}")  # fmt: skip
        return placed

    def _store(
        self, n: Node, region: _Region, j: int, var: _Variant, out: TensorRef, value: Any, wait: int, update: list[int]
    ) -> None:
        """Variant ``j``'s output to its place in the value's DDR home: straight from CMX for an f16 value, for an
        f32 one through the ACT SHAVE post-processing (f16 -> f32, CMX to CMX, on the variant's tile)."""
        from snippets_core.ir.element_type import ElementType

        b, hw = self.c.b, self.c.hw
        elems = prod(var.out_dims)
        out_f32 = n.outputs[0].element_type == ElementType.f32
        size = 4 if out_f32 else _F16
        home = value.ref
        dst = TensorRef(home.name, DType.F32 if out_f32 else DType.F16, (elems,), home.location, home.index,
                        home.offset + var.out_offset * size)  # fmt: skip
        update = update + ([value.ready] if value.ready is not None else [])
        src = out.with_dims((elems,))
        if out_f32:
            kernel = self.post_kernel(elems)
            rows = (kernel.calls, kernel.inputs[0].block_elems)
            post_out = region.alloc(rows, DType.F32, f"{n.name}.v{j}.post_out")
            memrefs = [out.with_dims(rows), post_out]
            if kernel.scratchpad_size:
                memrefs.append(region.alloc((kernel.scratchpad_size,), DType.U8, f"{n.name}.v{j}.scratch"))
            b_post = b.new_barrier()
            b.act(b.add_kernel(kernel.elf), region.tile, memrefs, wait=[wait], update=[b_post],
                  name=f"{n.name}.v{j}.post", outputs=len(memrefs) - 1)  # fmt: skip
            src, wait = post_out.with_dims((elems,)), b_post
        # a column block goes row by row (one flat DMA each: the race checker sees exactly the bytes written)
        rows, width = (var.out_dims[0], var.out_dims[-1]) if var.out_stride else (1, elems)
        for r in range(rows):
            piece = TensorRef(src.name, src.dtype, (width,), src.location, src.index, src.offset + r * width * size)
            at = dst.offset + r * var.out_stride * size
            target = TensorRef(dst.name, dst.dtype, (width,), dst.location, dst.index, at)
            suffix = f".{r}" if rows > 1 else ""
            b.dma(piece, target, engine=1 % hw.dma_engines, wait=[wait], update=update,
                  name=f"{n.name}.v{j}.dma_out{suffix}")  # fmt: skip


class _Region:
    """A bump allocator over one tile's DPU region for one layer; running out is a CodegenError naming it."""

    def __init__(self, layers: DpuLayerCompiler, n: Node, tile: int) -> None:
        self.layers, self.node, self.tile = layers, n, tile
        self.cursor = layers.start

    def alloc(self, dims: tuple[int, ...], dtype: DType, name: str) -> TensorRef:
        ref = self.layers.c.b.cmx(self.tile, self.cursor, dims, dtype, name)
        self.cursor = _align(self.cursor + ref.nbytes)
        used, size = self.cursor - self.layers.start, self.layers.size
        if used > size:
            n = self.node
            raise CodegenError(
                f"{n.name} ({n.type_name}): its variants on tile {self.tile} need more than {size} bytes of CMX, "
                f"the size of the DPU region (target_options variants_per_dpu splits the work finer)"
            )
        return ref

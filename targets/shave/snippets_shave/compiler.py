"""The whole-model compiler of the shave target: Subgraph kernels, CMX tiling, DMA, barriers, one blob.

``compile_model(model, config, host)`` takes a tokenized Model (the core ran the Tokenizer for ``shave``) and
returns a :class:`ShaveCompiledModel` holding one blob for the whole model:

* every Subgraph goes through the core pipeline (``generate_subgraph``: data-flow passes, LinearIR, Generator
  with the :class:`~snippets_shave.target_machine.ShaveTargetMachine`) into one kernel ELF. A body with row ops
  (Softmax, Reduce) first gets a unit dim before its last dim, so that one kernel call is one row; when one call
  does not fit a slot, the kernel is generated again with a one-dim tile, then (eltwise bodies) with its rows
  cut into pieces;
* its parallel domain (one kernel call per index, see :mod:`snippets_shave.target_machine`) is split into
  invocations that fit a CMX *slot*: each tile's workspace is cut into ``slots_per_tile`` equal slots, and
  invocation ``g`` of the model runs on tile ``g % tiles`` in slot ``(g // tiles) % slots_per_tile``. There are
  at least as many invocations as SHAVEs (when the domain allows), more when a slot cannot hold the work;
* per invocation (per-invocation barriers, as the HLD proposes): the input DMAs (engine 0) wait for the slot to
  be free (barrier ``free`` of its previous user) and for their tensor to be ready (barrier ``ready`` of the
  producing Subgraph), and update ``in``; the kernel waits ``in`` and updates ``out``; the output DMAs (engine 1)
  wait ``out`` and update ``free`` (and ``ready`` of their tensor when something reads it later). The producer
  and consumer counts are counted from the tasks by the ScheduleBuilder;
* a DMA gathers each input's blocks for the invocation's calls into CMX, so broadcast inputs are expanded by
  DMA (a repeated run is one descriptor DMA with a zero source stride); an input that is the same block for
  every call is copied once;
* values between Subgraphs live in DDR scratch; Reshape/Squeeze/Unsqueeze/Flatten outside Subgraphs are views
  of their input's bytes; a Result of a model input or constant is a DDR-to-DDR DMA.

Any other node outside the Subgraphs is an :class:`UnsupportedOpError` listing them: a blob cannot run the
reference kernels. Hardware knobs come from ``config.target_options`` (:class:`ShaveOptions`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from math import ceil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from snippets_core.config import ConfigError
from snippets_core.errors import CodegenError, InputError, UnsupportedOpError
from snippets_core.runtime.inputs import as_input_array, expect_output_arrays
from snippets_shave.blob import DmaDescriptor, Target, TensorRef, write_blob
from snippets_shave.constants import (
    DEFAULT_STACK_SIZE,
    DTYPE_TO_NUMPY,
    MAX_BARRIERS,
    RUNTIME_FRAME_BYTES,
    DType,
    dtype_of,
)
from snippets_shave.dpu_layers import DPU_LAYER_OPS, DpuLayerCompiler, dpu_layer_reason
from snippets_shave.errors import StaticShapeError
from snippets_shave.schedule import ScheduleBuilder

if TYPE_CHECKING:
    from snippets_core.codegen.subgraph_codegen import GeneratedSubgraph
    from snippets_core.config import CompileConfig
    from snippets_core.ir.model import Model
    from snippets_core.ir.node import Node, Output
    from snippets_core.ir.ops.subgraph import Subgraph
    from snippets_shave.target_machine import ShaveKernel, TensorBlock

TARGET_NAME = "shave"
#: ops outside Subgraphs that only reinterpret their input's bytes
VIEW_OPS = ("Reshape", "Squeeze", "Unsqueeze", "Flatten")
_ALIGN = 64
#: ops that compute over whole rows (the last axis, as the tokenization veto requires)
ROW_OPS = ("Softmax", "ReduceMax", "ReduceSum")


def _align(value: int, alignment: int = _ALIGN) -> int:
    return (value + alignment - 1) // alignment * alignment


@dataclass(frozen=True)
class ShaveOptions:
    """``config.target_options`` of the shave target. ``preset`` picks the defaults ("37xx": 2 tiles, "40xx":
    6 tiles, 96 barriers); the other keys override them."""

    preset: str = "37xx"
    tiles: int | None = None
    shaves_per_tile: int | None = None
    cmx_bytes_per_tile: int | None = None
    dma_engines: int | None = None
    #: physical barriers (default: the preset's, constants.MAX_BARRIERS); the compiler maps virtual ones onto them
    max_barriers: int | None = None
    stack_size: int = DEFAULT_STACK_SIZE
    #: CMX slots per tile (default: one per SHAVE)
    slots_per_tile: int | None = None
    #: DPUs per tile (default: the preset's, 1)
    dpus_per_tile: int | None = None
    #: NCE variants (DPU workloads) per DPU of each DPU layer
    variants_per_dpu: int = 2
    #: "per_variant": each variant updates its own barrier (the HLD's proposal); "shared": one per NCE task
    dpu_barriers: str = "per_variant"
    #: simulator: a seeded random interleaving of the executors on every call (None: round-robin)
    seed: int | None = None
    #: simulator: run the static race checker before every call
    check_races: bool = False

    @staticmethod
    def from_mapping(options: Mapping[str, Any]) -> ShaveOptions:
        known = {f.name for f in fields(ShaveOptions)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigError(f"unknown target_options {unknown} for target 'shave'; known: {sorted(known)}")
        opts = ShaveOptions(**dict(options))
        if opts.preset not in ("37xx", "40xx"):
            raise ConfigError(f"target_options preset {opts.preset!r}: one of '37xx', '40xx'")
        for name in (
            "tiles", "shaves_per_tile", "cmx_bytes_per_tile", "dma_engines", "max_barriers", "slots_per_tile",
            "stack_size", "dpus_per_tile", "variants_per_dpu",
        ):  # fmt: skip
            value = getattr(opts, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(f"target_options {name} must be a positive integer, got {value!r}")
        if opts.seed is not None and (not isinstance(opts.seed, int) or isinstance(opts.seed, bool)):
            raise ConfigError(f"target_options seed must be an integer, got {opts.seed!r}")
        if not isinstance(opts.check_races, bool):
            raise ConfigError(f"target_options check_races must be true or false, got {opts.check_races!r}")
        if opts.dpu_barriers not in ("per_variant", "shared"):
            raise ConfigError(f"target_options dpu_barriers {opts.dpu_barriers!r}: one of 'per_variant', 'shared'")
        if opts.stack_size % 16 or opts.stack_size <= RUNTIME_FRAME_BYTES:
            raise ConfigError(
                f"target_options stack_size {opts.stack_size} must be a multiple of 16 above the Runtime Kernel's "
                f"{RUNTIME_FRAME_BYTES}-byte frame"
            )
        if opts.max_barriers is not None and opts.max_barriers > MAX_BARRIERS[opts.preset]:
            raise ConfigError(
                f"target_options max_barriers {opts.max_barriers}: {opts.preset} has {MAX_BARRIERS[opts.preset]}"
            )
        return opts

    def hardware(self) -> Target:
        base = Target() if self.preset == "37xx" else Target.lnl()
        return Target(
            name=base.name,
            tiles=self.tiles or base.tiles,
            shaves_per_tile=self.shaves_per_tile or base.shaves_per_tile,
            cmx_bytes_per_tile=self.cmx_bytes_per_tile or base.cmx_bytes_per_tile,
            dma_engines=self.dma_engines or base.dma_engines,
            max_barriers=self.max_barriers or base.max_barriers,
            dpus_per_tile=self.dpus_per_tile or base.dpus_per_tile,
        )


# --- kernels --------------------------------------------------------------------------------------------------


def _kernel_name(sg: Subgraph) -> str:
    return "snippet_" + re.sub(r"[^A-Za-z0-9_]", "_", sg.name)


def _row_shape(dims: tuple[int, ...]) -> tuple[int, ...]:
    return dims if not dims else (*dims[:-1], 1, dims[-1])


def reshape_body(body: Model, shape_of: Callable[[tuple[int, ...]], tuple[int, ...]]) -> Model:
    """A copy of a body with every Parameter and Constant reshaped by ``shape_of`` (the other shapes follow by
    inference). Row ops (Softmax, ReduceMax/ReduceSum, which the tokenization veto keeps on the last axis) get
    axis -1; axes Constants are not reshaped. ``shape_of`` must keep the bytes and numpy broadcasting."""
    from snippets_core.ir.model import Model as _Model
    from snippets_core.ir.ops.io import Constant, Parameter
    from snippets_core.ir.ops.softmax import Softmax

    mapping: dict[int, Node] = {}
    for n in body.get_ordered_ops():
        ins = [mapping[i.source.node.id].outputs[i.source.index] for i in n.inputs]
        if isinstance(n, Parameter):
            new: Node = Parameter(n.element_type, shape_of(n.outputs[0].shape.to_tuple()), name=n.name)
        elif isinstance(n, Constant):
            axes_only = n.outputs[0].targets and all(
                t.node.type_name in ROW_OPS and t.index == 1 for t in n.outputs[0].targets
            )
            value = np.asarray(n.value)
            value = np.array([-1], dtype=value.dtype) if axes_only else value.reshape(shape_of(value.shape))
            new = Constant(value, n.outputs[0].element_type, name=n.name)
        elif isinstance(n, Softmax):
            new = Softmax(ins[0], axis=-1, name=n.name)
        else:
            new = n.clone_with_new_inputs(ins)
        new.rt_info = dict(n.rt_info)
        mapping[n.id] = new
    return _Model([mapping[r.id] for r in body.results], [mapping[p.id] for p in body.parameters], name=body.name)


def split_rows(body: Model) -> Model:
    """A unit dim before the last dim of every tensor of a body with row ops: the same values in the same bytes,
    but the kernel's tile (the last two dims, for a body with row ops) becomes one row, so the rows form the
    parallel domain and can be spread over SHAVEs and split to fit CMX."""
    return reshape_body(body, _row_shape)


def widen_f16(body: Model) -> Model:
    """A copy of a body with row ops whose f16 values are computed on f32 lanes: every f16 Parameter is
    converted to f32 on load, f16 Constants become f32 (exactly), and every f16 Result is converted back from
    f32 once on store. The max, the subtraction, the exp, the sum, the reciprocal and the product of a
    softmax (and the sum of a ReduceSum) then run and accumulate in f32, so the result is numpy's f32
    computation rounded to f16 once, not a sum of f16 roundings. A value the body itself rounds to f16 (an
    explicit Convert) keeps that rounding and is widened again after it. The kernel's MemRefs stay f16."""
    from snippets_core.ir.element_type import ElementType
    from snippets_core.ir.model import Model as _Model
    from snippets_core.ir.ops.convert import Convert
    from snippets_core.ir.ops.io import Constant, Parameter, Result

    f16, f32 = ElementType.f16, ElementType.f32
    outputs: dict[tuple[int, int], Output] = {}
    params: list[Node] = []
    results: list[Node] = []
    for n in body.get_ordered_ops():
        ins = [outputs[(i.source.node.id, i.source.index)] for i in n.inputs]
        if isinstance(n, Parameter):
            new: Node = Parameter(n.element_type, n.outputs[0].shape, name=n.name)
            params.append(new)
        elif isinstance(n, Constant) and n.outputs[0].element_type == f16:
            new = Constant(np.asarray(n.value).astype(np.float32), f32, name=n.name)
        elif isinstance(n, Result):
            x = ins[0]
            if n.inputs[0].source.element_type == f16 and x.element_type == f32:
                x = Convert(x, destination_type=f16, name=f"{n.name}/to_f16").outputs[0]
            new = Result(x, name=n.name)
            results.append(new)
        else:
            new = n.clone_with_new_inputs(ins)
        new.rt_info = dict(n.rt_info)
        for j, out in enumerate(new.outputs):
            widened = not isinstance(new, Result) and out.element_type == f16
            outputs[(n.id, j)] = (
                Convert(out, destination_type=f32, name=f"{new.name}/to_f32").outputs[0] if widened else out
            )
    return _Model(results, params, name=body.name)


def split_last_dim(body: Model, length: int, factor: int) -> Model:
    """An eltwise body whose last dim ``length`` becomes ``[length // factor, factor]`` in every tensor that has
    it (a last dim of 1 becomes ``[1, 1]``), so one kernel call can be a ``factor``-element piece of a row."""

    def shape_of(dims: tuple[int, ...]) -> tuple[int, ...]:
        if not dims:
            return dims
        last = dims[-1]
        return (*dims[:-1], length // factor, factor) if last == length else (*dims[:-1], 1, last)

    return reshape_body(body, shape_of)


def generate_kernel(
    sg: Subgraph,
    config: CompileConfig,
    host: Any,
    name: str | None = None,
    parallel_work: int = 4,
    split_factor: int | None = None,
) -> ShaveKernel:
    """``sg``'s SHAVE kernel (see :func:`generate`)."""
    return generate(sg, config, host, name, parallel_work, split_factor).kernel


def generate(
    sg: Subgraph,
    config: CompileConfig,
    host: Any,
    name: str | None = None,
    parallel_work: int = 4,
    split_factor: int | None = None,
) -> GeneratedSubgraph:
    """``sg`` through the core's per-Subgraph pipeline (``generate_subgraph``: data-flow passes, lowering,
    Generator) into a SHAVE kernel and its final LinearIR. A body with row ops is first given its row dim
    (:func:`split_rows`), an eltwise body with ``split_factor`` its rows cut into pieces of that many elements
    (:func:`split_last_dim`). ``parallel_work`` is the lowering's min_parallel_work_amount (a huge value keeps
    the tile to one dim)."""
    from snippets_core.codegen.subgraph_codegen import generate_subgraph
    from snippets_core.ir.element_type import ElementType
    from snippets_core.ir.ops.io import Parameter
    from snippets_core.ir.ops.subgraph import Subgraph as _Subgraph
    from snippets_core.lowered.linear_ir import Config
    from snippets_core.passes.graph_utils import has_domain_sensitive_ops
    from snippets_shave.target_machine import ShaveTargetMachine

    ops = sg.body.get_ordered_ops()
    if not all(o.shape.is_static for n in ops for o in n.outputs):
        raise CodegenError(f"Subgraph '{sg.name}' has dynamic shapes; a SHAVE blob is compiled for static shapes")
    body = None
    rows = any(n.type_name in ROW_OPS for n in ops)
    if rows:
        body = split_rows(sg.body)
    elif split_factor is not None:
        body = split_last_dim(sg.body, int(sg.outputs[0].shape.to_tuple()[-1]), split_factor)
    if rows and any(o.element_type == ElementType.f16 for n in ops for o in n.outputs):
        body = widen_f16(body)
    if body is not None:
        # the same Subgraph over row-shaped inputs (a throwaway node: only its body and input shapes are read)
        ins = [Parameter(p.element_type, p.outputs[0].shape, name=p.name) for p in body.parameters]
        sg = _Subgraph(*ins, body=body, name=sg.name)
    # 8 f16 lanes when every value is f16, else 4 lanes (f32, or f16 in the low half of a register)
    types = {o.element_type for n in sg.body.get_ordered_ops() for o in n.outputs if n.type_name != "Result"}
    lanes = 8 if types == {ElementType.f16} else 4
    sensitive = has_domain_sensitive_ops(sg.body)
    lcfg = Config(
        vector_size=lanes,
        loop_depth=1,
        enable_domain_optimization=not sensitive,
        min_parallel_work_amount=max(1, parallel_work),
        min_kernel_work_amount=256,
        need_fill_tail_register=sensitive,
    )
    positioned = list(host.positioned_passes(TARGET_NAME, config)) if host is not None else []
    plugin_emitters = host.register_emitters(TARGET_NAME) if host is not None else {}
    tm = ShaveTargetMachine(lanes, name or _kernel_name(sg), plugin_emitters)
    return generate_subgraph(sg, tm, positioned_passes=positioned, disabled_passes=config.disabled_passes, lowering_config=lcfg)


def kernel_row_bytes(kernel: ShaveKernel) -> int:
    """Bytes of one call that grow with the call's length: every block but the invariant inputs'."""
    return sum(b.block_bytes for b in kernel.inputs if not b.invariant) + sum(b.block_bytes for b in kernel.outputs)


# --- DMA planning -----------------------------------------------------------------------------------------------


def block_runs(block: TensorBlock, domain: tuple[int, ...], start: int, count: int) -> list[tuple[int, int, int]]:
    """The source blocks of calls ``[start, start + count)`` as ``(first block, run length, repeats)``: a run of
    consecutive blocks, the same run ``repeats`` times in a row (a broadcast over an outer dim)."""
    k = np.arange(start, start + count, dtype=np.int64)
    idx = np.unravel_index(k, domain) if domain else ()
    offsets = np.zeros(count, dtype=np.int64)
    for i, step in zip(idx, block.domain_offsets, strict=True):
        offsets += i.astype(np.int64) * step
    blocks = offsets // block.block_bytes
    runs: list[tuple[int, int]] = []
    for b in blocks.tolist():
        if runs and b == runs[-1][0] + runs[-1][1]:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((b, 1))
    merged: list[tuple[int, int, int]] = []
    for first, length in runs:
        if merged and merged[-1][0] == first and merged[-1][1] == length:
            merged[-1] = (first, length, merged[-1][2] + 1)
        else:
            merged.append((first, length, 1))
    return merged


def _flat(ref: TensorRef, byte_offset: int, nbytes: int, dtype: DType, name: str) -> TensorRef:
    """Bytes ``[byte_offset, byte_offset + nbytes)`` of ``ref`` as a flat tensor of ``dtype`` (a DMA end)."""
    size = DTYPE_TO_NUMPY[dtype].itemsize
    return TensorRef(name, dtype, (nbytes // size,), ref.location, ref.index, ref.offset + byte_offset)


# --- the schedule -----------------------------------------------------------------------------------------------


@dataclass
class _Value:
    """Where a value of the model lives in DDR, and the barrier its writers update (None: nothing to wait)."""

    ref: TensorRef
    ready: int | None = None


class _Compiler:
    def __init__(self, model: Model, config: CompileConfig, host: Any, options: ShaveOptions) -> None:
        self.model = model
        self.config = config
        self.host = host
        self.options = options
        self.hw = options.hardware()
        self.b = ScheduleBuilder(model.name or "model", target=self.hw, stack_size=options.stack_size)
        self.values: dict[tuple[int, int], _Value] = {}
        self.slot_free: dict[tuple[int, int], int] = {}
        self.invocations = 0
        self.slots_per_tile = options.slots_per_tile or self.hw.shaves_per_tile
        workspace = self.hw.cmx_bytes_per_tile - self.b.cmx_workspace_start
        self.dpu_layers = None
        if any(n.type_name in DPU_LAYER_OPS for n in model.get_ordered_ops()):
            # the top quarter of each tile's workspace is the DPU region (operands, variant outputs, post-processing);
            # the SHAVE slots keep the rest, as the SW layers of a transformer need
            dpu_bytes = workspace // 4 // _ALIGN * _ALIGN
            workspace -= dpu_bytes
            self.dpu_layers = DpuLayerCompiler(self, self.b.cmx_workspace_start + workspace, dpu_bytes)
        self.slot_bytes = workspace // self.slots_per_tile // _ALIGN * _ALIGN
        if self.slot_bytes <= 0:
            raise ConfigError(
                f"target_options: {self.hw.cmx_bytes_per_tile} bytes of CMX leave no workspace after the stacks of "
                f"{self.hw.shaves_per_tile} SHAVEs ({options.stack_size} bytes each)"
            )
        self.kernels: dict[str, ShaveKernel] = {}
        self.placement: list[tuple[str, str, str]] = []

    # -- values -----------------------------------------------------------------------------------------------
    @staticmethod
    def key(out: Output) -> tuple[int, int]:
        return (out.node.id, out.index)

    def value(self, out: Output) -> _Value:
        return self.values[self.key(out)]

    def check_supported(self, order: list[Node]) -> None:
        from snippets_shave.sw_layers import SW_LAYER_OPS, sw_layer_reason
        from snippets_shave.tokenization_callback import tokenization_callback

        outside = []
        for n in order:
            if n.type_name in ("Parameter", "Result", "Constant", "Subgraph") or n.type_name in VIEW_OPS:
                continue
            if n.type_name in DPU_LAYER_OPS:
                reason = dpu_layer_reason(n)
                if reason is None:
                    continue
            elif n.type_name in SW_LAYER_OPS:  # not fused: its own SW kernel layer, when its kernel can run it
                reason = sw_layer_reason(n)
                if reason is None:
                    continue
            else:
                reason = tokenization_callback(n) or "it was not fused into a Subgraph"
            outside.append(f"{n.name} ({n.type_name}): {reason}")
        if outside:
            raise UnsupportedOpError(
                f"model '{self.model.name}': the shave target runs only fused Subgraphs (a blob has no reference "
                f"kernels); {len(outside)} op(s) outside them: " + "; ".join(outside)
            )

    def _consumers(self, out: Output) -> list[Node]:
        return [t.node for t in out.targets]

    def place_output(self, out: Output) -> _Value:
        """DDR home of a computed value: the first Result reading it, else DDR scratch; a ready barrier when a
        Subgraph or another Result reads it afterwards."""
        consumers = self._consumers(out)
        results = [c for c in consumers if c.id in self.result_refs]
        et = out.element_type
        dims = out.shape.to_tuple()
        if results:
            ref = self.result_refs[results[0].id]
        else:
            ref = self.b.alloc_scratch(f"{out.node.name}:{out.index}", dims, et)
        needs_ready = len(results) > 1 or any(c.id not in self.result_refs for c in consumers)
        value = _Value(ref, self.b.new_barrier() if needs_ready else None)
        self.values[self.key(out)] = value
        return value

    # -- the model --------------------------------------------------------------------------------------------
    def compile(self) -> tuple[bytes, dict[str, ShaveKernel], list[tuple[str, str, str]]]:
        from snippets_core.ir.ops.subgraph import Subgraph
        from snippets_shave.sw_layers import SW_LAYER_OPS, compile_layer, storage_dtype

        model = self.model
        order = model.get_ordered_ops()
        self.check_supported(order)
        for p in model.parameters:
            ref = self.b.add_input(p.name, p.outputs[0].shape.to_tuple(), storage_dtype(p.outputs[0].element_type))
            self.values[self.key(p.outputs[0])] = _Value(ref)
        self.result_refs: dict[int, TensorRef] = {}
        by_name: dict[str, Node] = {}
        for r in model.results:
            out = r.outputs[0]
            first = by_name.setdefault(r.name, r)
            if first is not r:  # the same output listed twice is one blob output; two values of one name are not
                if first.inputs[0].source is not r.inputs[0].source:
                    raise CodegenError(f"model '{model.name}' has two different outputs named {r.name!r}")
                self.result_refs[r.id] = self.result_refs[first.id]
                continue
            self.result_refs[r.id] = self.b.add_output(r.name, out.shape.to_tuple(), storage_dtype(out.element_type))
        for n in order:
            if n.type_name == "Constant":
                # only data read by a Subgraph, a Result or a view goes into the blob (not a view's shape input)
                readers = [
                    t
                    for t in n.outputs[0].targets
                    if t.node.type_name in ("Subgraph", "Result") or (t.node.type_name in VIEW_OPS and t.index == 0)
                ]
                if readers:
                    value = np.ascontiguousarray(n.value)  # type: ignore[attr-defined]
                    self.values[self.key(n.outputs[0])] = _Value(self.b.add_constant(n.name, value))
            elif n.type_name in VIEW_OPS or (n.type_name == "Result" and n.id not in self.result_refs):
                src = self.value(n.inputs[0].source)
                out = n.outputs[0]
                ref = TensorRef(
                    n.name, src.ref.dtype, out.shape.to_tuple(), src.ref.location, src.ref.index, src.ref.offset
                )
                self.values[self.key(out)] = _Value(ref, src.ready)
            elif isinstance(n, Subgraph):
                self.subgraph(n)
            elif n.type_name in DPU_LAYER_OPS:
                self.dpu_layers.compile(n)
            elif n.type_name in SW_LAYER_OPS:
                compile_layer(self, n)
            elif n.type_name == "Result":
                self.result(n)
        self.b.prune_barriers()  # the free barriers of the last user of each slot
        blob = write_blob(self.b.build())
        return blob, self.kernels, self.placement

    def result(self, r: Node) -> None:
        """A Result whose value is not already written into it by a Subgraph's output DMAs: copy it."""
        src_out = r.inputs[0].source
        src = self.value(src_out)
        dst = self.result_refs[r.id]
        if src.ref == dst:
            return
        nbytes = dst.nbytes
        if nbytes == 0:
            return
        self.b.dma(
            _flat(src.ref, 0, nbytes, src.ref.dtype, f"{r.name}.src"),
            _flat(dst, 0, nbytes, dst.dtype, r.name),
            engine=0,
            wait=[src.ready] if src.ready is not None else [],
            name=f"copy_{r.name}",
        )
        self.placement.append((r.name, "Result", "dma"))

    def max_calls(self, kernel: ShaveKernel) -> tuple[int, int]:
        """(calls one slot can hold, bytes of one call plus the fixed part) for ``kernel``."""
        blocks = (*kernel.inputs, *kernel.outputs)
        # an invariant input is one block whatever the calls; outputs have one block per call
        fixed = sum(_align(b.block_bytes) for b in kernel.inputs if b.invariant)
        fixed += _align(kernel.scratchpad_size)
        per_call = sum(b.block_bytes for b in kernel.inputs if not b.invariant)
        per_call += sum(b.block_bytes for b in kernel.outputs)
        room = self.slot_bytes - fixed - _ALIGN * len(blocks)
        return (room // per_call if room > 0 and per_call else 0), per_call + fixed

    def subgraph(self, sg: Subgraph) -> None:
        """Generate ``sg``'s kernel and its invocations; any error names the Subgraph (the blob has no fallback)."""
        from snippets_core.runtime.placement import subgraph_error

        try:
            self._subgraph(sg)
        except Exception as exc:
            error = subgraph_error(exc, sg.name, TARGET_NAME)
            if error is exc:
                raise
            raise error from exc

    def _subgraph(self, sg: Subgraph) -> None:
        hw = self.hw
        total_shaves = hw.tiles * hw.shaves_per_tile
        kernel = generate_kernel(sg, self.config, self.host, parallel_work=total_shaves)
        max_calls, need = self.max_calls(kernel)
        if max_calls < 1 and kernel.calls:
            # the lowering merged dims into a call too large for a slot: again with a one-dim tile, unmerged
            kernel = generate_kernel(sg, self.config, self.host, parallel_work=1 << 62)
            max_calls, need = self.max_calls(kernel)
        length = sg.outputs[0].shape.to_tuple()[-1] if sg.outputs[0].shape.rank else 1
        if max_calls < 1 and kernel.calls and length > 1 and not any(n.type_name in ROW_OPS for n in sg.body_ops):
            # one row is too long: cut every row into pieces (an eltwise op does not care where a row ends)
            room = self.slot_bytes - (need - kernel_row_bytes(kernel)) - _ALIGN * len(kernel.inputs + kernel.outputs)
            fitting = max(1, length * max(room, 0) // max(kernel_row_bytes(kernel), 1))
            for factor in sorted((f for f in range(1, length) if length % f == 0 and f <= fitting), reverse=True):
                kernel = generate_kernel(sg, self.config, self.host, parallel_work=1 << 62, split_factor=factor)
                max_calls, need = self.max_calls(kernel)
                if max_calls >= 1:
                    break
        if max_calls < 1 and kernel.calls:
            raise CodegenError(
                f"Subgraph '{sg.name}': one kernel call needs {need} bytes of CMX, a slot has "
                f"{self.slot_bytes} ({self.slots_per_tile} slots per tile of {hw.cmx_bytes_per_tile} bytes)"
            )
        self.kernels[sg.name] = kernel
        self.placement.append((sg.name, "Subgraph", TARGET_NAME))
        kidx = self.b.add_kernel(kernel.elf)
        ins = [self.value(i.source) for i in sg.inputs]
        outs = [self.place_output(o) for o in sg.outputs]
        calls = kernel.calls
        if calls == 0 or not any(b.block_bytes for b in kernel.outputs):
            return  # nothing to compute: empty tensors
        n_inv = max(ceil(calls / max_calls), min(calls, total_shaves))
        base, extra = divmod(calls, n_inv)
        start = 0
        for j in range(n_inv):
            count = base + (1 if j < extra else 0)
            self.invocation(sg, kernel, kidx, ins, outs, start, count, j)
            start += count

    def invocation(
        self,
        sg: Subgraph,
        kernel: ShaveKernel,
        kidx: int,
        ins: list[_Value],
        outs: list[_Value],
        start: int,
        count: int,
        j: int,
    ) -> None:
        hw, b = self.hw, self.b
        g = self.invocations
        self.invocations += 1
        tile = g % hw.tiles
        slot = (g // hw.tiles) % self.slots_per_tile
        base = b.cmx_workspace_start + slot * self.slot_bytes
        free = self.slot_free.get((tile, slot))
        tag = f"{sg.name}.{j}"
        # CMX layout of the slot: every input, every output, the scratchpad
        cursor = base
        cmx_refs: list[TensorRef] = []
        for i, block in enumerate((*kernel.inputs, *kernel.outputs)):
            rows = 1 if block.invariant and i < len(kernel.inputs) else count
            dtype = dtype_of(block.element_type)
            role = f"in{i}" if i < len(kernel.inputs) else f"out{i - len(kernel.inputs)}"
            cmx_refs.append(b.cmx(tile, cursor, (rows, block.block_elems), dtype, f"{tag}.{role}"))
            cursor = _align(cursor + rows * block.block_bytes)
        if kernel.scratchpad_size:
            cmx_refs.append(b.cmx(tile, cursor, (kernel.scratchpad_size,), DType.U8, f"{tag}.scratch"))
            cursor = _align(cursor + kernel.scratchpad_size)
        assert cursor <= base + self.slot_bytes, "slot overflow"
        domain = kernel.parallel_domain
        b_in = b.new_barrier()
        n_in_dmas = 0
        in_engine = 0
        out_engine = 1 % hw.dma_engines
        for i, (block, value) in enumerate(zip(kernel.inputs, ins, strict=True)):
            wait = [x for x in (free, value.ready) if x is not None]
            dst = cmx_refs[i]
            if block.invariant:
                runs = [(0, 1, 1)]
            else:
                runs = block_runs(block, domain, start, count)
            at = 0
            for first, length, repeats in runs:
                nbytes = length * block.block_bytes
                src = _flat(value.ref, first * block.block_bytes, nbytes, dst.dtype, f"{value.ref.name}")
                dst_ref = _flat(dst, at, nbytes * repeats, dst.dtype, dst.name)
                descriptor = None
                if repeats > 1:
                    total = nbytes * repeats
                    descriptor = DmaDescriptor(total, nbytes, 0, 0, total, 0, 0, 1)
                b.dma(
                    src,
                    dst_ref,
                    engine=in_engine,
                    wait=wait,
                    update=[b_in],
                    descriptor=descriptor,
                    name=f"{tag}.dma_in{i}" + (f".{n_in_dmas}" if len(runs) > 1 else ""),
                )
                n_in_dmas += 1
                at += nbytes * repeats
        b_out = b.new_barrier()
        act_wait = [b_in] if n_in_dmas else ([free] if free is not None else [])
        n_act_outputs = len(kernel.outputs) + (1 if kernel.scratchpad_size else 0)
        b.act(kidx, tile, cmx_refs, wait=act_wait, update=[b_out], name=tag, outputs=n_act_outputs)
        b_free = b.new_barrier()
        for o, (block, value) in enumerate(zip(kernel.outputs, outs, strict=True)):
            src = cmx_refs[len(kernel.inputs) + o]
            runs = block_runs(block, domain, start, count)
            at = 0
            for first, length, repeats in runs:
                if repeats != 1:
                    raise CodegenError(f"Subgraph '{sg.name}': output {o} is written twice by one invocation")
                nbytes = length * block.block_bytes
                update = [b_free] + ([value.ready] if value.ready is not None else [])
                b.dma(
                    _flat(src, at, nbytes, src.dtype, src.name),
                    _flat(value.ref, first * block.block_bytes, nbytes, src.dtype, value.ref.name),
                    engine=out_engine,
                    wait=[b_out],
                    update=update,
                    name=f"{tag}.dma_out{o}",
                )
                at += nbytes
        self.slot_free[(tile, slot)] = b_free


# --- the compiled model -----------------------------------------------------------------------------------------


class ShaveCompiledModel:
    """A model compiled into one SHAVE blob; calling it runs the blob in the simulator.

    ``cm(inputs)`` returns a dict of arrays by output name (``outputs=`` fills preallocated arrays);
    ``cm.target_artifact`` is the blob's bytes, ``cm.save_blob(path)`` writes it, ``cm.schedule()`` prints it
    in the HLD's MLIR-like text. ``seed`` (constructor or call) picks a random interleaving of the executors in
    the simulator; ``check_races`` runs the static race checker before each run.
    """

    target_name = TARGET_NAME

    def __init__(
        self,
        model: Model,
        config: CompileConfig,
        blob: bytes,
        kernels: dict[str, ShaveKernel],
        placement: list[tuple[str, str, str]],
        *,
        seed: int | None = None,
        check_races: bool = False,
        target: Any = None,
    ) -> None:
        from snippets_core.ir.ops.subgraph import Subgraph
        from snippets_core.runtime.compiled_model import RunStats
        from snippets_shave.sim import load_blob

        self.model = model
        self.config = config
        #: the ResolvedTarget (name, plugin host, target object), as a core CompiledModel has it
        self.target = target
        self.target_artifact = blob
        self.kernels = kernels
        self.subgraphs: list[Subgraph] = [n for n in model.get_ordered_ops() if isinstance(n, Subgraph)]
        self._placement = placement
        self.seed = seed
        self.check_races = check_races
        self.last_run_stats = RunStats()
        #: the timing model's schedule of the last run (:mod:`snippets_shave.sim.timing`)
        self.last_timing: Any = None
        self.loaded = load_blob(blob)
        header = self.loaded.blob.header
        self._inputs = [(ref.name, DTYPE_TO_NUMPY[ref.dtype], tuple(ref.dims)) for ref in header.inputs]
        self._outputs = [ref.name for ref in header.outputs]

    @property
    def input_names(self) -> list[str]:
        return [name for name, _, _ in self._inputs]

    @property
    def output_names(self) -> list[str]:
        return list(self._outputs)

    def save_blob(self, path: str | Path) -> None:
        try:
            Path(path).write_bytes(self.target_artifact)
        except OSError as exc:
            raise InputError(f"cannot write the blob to {str(path)!r}: {exc.strerror}") from None

    def schedule(self) -> str:
        from snippets_shave.inspect import format_schedule

        return format_schedule(self.loaded.blob)

    def _check_inputs(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        if not isinstance(inputs, Mapping):
            raise InputError(
                f"inputs must be a dict of arrays by name ({', '.join(self.input_names)}), got {type(inputs).__name__}"
            )
        unknown = [k for k in inputs if k not in self.input_names]
        if unknown:
            raise InputError(f"unknown input {unknown[0]!r}; the model's inputs are: {', '.join(self.input_names)}")
        out = {}
        for name, dtype, dims in self._inputs:
            if name not in inputs:
                raise InputError(f"missing input {name!r}; the model's inputs are: {', '.join(self.input_names)}")
            a = inputs[name]
            a = as_input_array(name, a, dtype) if not isinstance(a, np.ndarray) else a
            if a.dtype != dtype:
                raise InputError(f"input {name!r} must be {dtype}, got {a.dtype}")
            if a.shape != dims:
                raise InputError(f"input {name!r} must have shape {list(dims)}, got {list(a.shape)}")
            out[name] = np.ascontiguousarray(a)
        return out

    def __call__(
        self, inputs: Mapping[str, Any], outputs: Mapping[str, np.ndarray] | None = None, *, seed: int | None = None
    ) -> dict[str, np.ndarray]:
        from snippets_core.runtime.compiled_model import RunStats
        from snippets_shave.sim import simulate

        arrays = self._check_inputs(inputs)
        t0 = time.perf_counter()
        result = simulate(self.loaded, arrays, seed=self.seed if seed is None else seed, check_races=self.check_races)
        elapsed = time.perf_counter() - t0
        self.last_timing = result.timing
        self.last_run_stats = RunStats([(self.model.name, "Blob", "shave-simulator", elapsed)])
        values = {name: np.array(v) for name, v in result.outputs.items()}
        if outputs is not None:
            expect_output_arrays(outputs, list(values))
            for name, dst in outputs.items():
                if name not in values:
                    raise InputError(f"unknown output {name!r}; the model's outputs are: {', '.join(values)}")
                v = values[name]
                if (not isinstance(dst, np.ndarray) or dst.shape != v.shape or dst.dtype != v.dtype
                        or not dst.flags.writeable):
                    raise InputError(f"output array {name!r} must be a writeable {v.dtype}{list(v.shape)}")
                np.copyto(dst, v)
                values[name] = dst
        return values

    run = __call__

    def placement(self) -> list[tuple[str, str, str]]:
        """(node name, op type, where it runs) for the Subgraphs (``shave``) and Result copies (``dma``)."""
        return list(self._placement)

    def describe(self) -> str:
        blob = self.loaded.blob
        n_dma = sum(len(tl.tasks) for tl in blob.task_lists if tl.executor.name == "DMA")
        n_act = sum(len(tl.tasks) for tl in blob.task_lists if tl.executor.name == "ACT_SHAVE")
        n_dpu = sum(len(tl.tasks) for tl in blob.task_lists if tl.executor.name == "DPU")
        hw = blob.header.target
        lines = [
            f"model '{self.model.name}' compiled for target 'shave' into one blob of {len(self.target_artifact)} bytes",
            (
                f"  {hw.name}: {hw.tiles} tiles x {hw.shaves_per_tile} SHAVEs, {hw.cmx_bytes_per_tile} bytes of CMX "
                f"per tile; {len(blob.kernels)} kernel(s), {n_act} invocation(s), {n_dpu} DPU variant(s), "
                f"{n_dma} DMA task(s), "
                f"{len(blob.barriers)} barrier(s)"
            ),
            (
                f"  Runtime Kernel: {len(self.loaded.runtime.program)} SHVX instructions at WIN_C, stacks "
                f"{list(blob.header.act_runtime.stack_size_per_tile)} bytes per SHAVE"
            ),
        ]
        for sg in self.subgraphs:
            ops = ", ".join(op.type_name for op in sg.body_ops)
            lines.append(f"  [shave] Subgraph {sg.name}: {ops}")
        lines += [f"  [shave-sw] {op} {name}: its own SW kernel layer" for name, op, where in self._placement
                  if where == "shave-sw"]  # fmt: skip
        lines += [f"  [dpu] {op} {name}: an NCE task in per-DPU variants" for name, op, where in self._placement
                  if where == "dpu"]  # fmt: skip
        if self.last_timing is not None:
            t = self.last_timing
            lines.append(
                f"  simulated NPU time of the last run: {t.total_us:.1f} us ({t.total_cycles} cycles, timing model)"
            )
        return "\n".join(lines)


def check_static_inputs(model: Model) -> None:
    """A StaticShapeError naming every input with a dynamic dim, why a blob needs static ones and how to fix them.

    A blob is static by construction: each kernel argument is a MemRefData with ``isStatic = 1`` (dims and
    strides written at compile time), and the DMA descriptors, the tiling over SHAVEs and the CMX buffer
    offsets are planned for those sizes. Kernels taking ``isStatic = 0`` arguments would also need the schedule
    re-planned per shape at inference, which the runtime does not do; so the shapes are fixed before compiling.
    """
    dynamic = [p for p in model.parameters if not p.shape.is_static]
    if not dynamic:
        return

    def fmt(dims: Any, unknown: str) -> str:
        return "[...]" if dims is None else ",".join(unknown if d is None else str(d) for d in dims)

    listed = ", ".join(f"{p.name!r} [{fmt(p.shape.dims, '?')}]" for p in dynamic)
    flags = " ".join(f"--shape {p.name}={fmt(p.shape.dims, 'N')}" for p in dynamic)
    raise StaticShapeError(
        f"model '{model.name}': a shave blob is compiled for static shapes (its kernels' MemRefData are "
        f"isStatic = 1, and the DMA, tiling and CMX buffers are planned for those sizes at compile time), but "
        f"input(s) {listed} have dynamic dims. Fix them before compiling: `snippets compile MODEL -t shave {flags} "
        f"-o MODEL.blob` (N: the sizes you will run with), or from Python "
        f"compile_model(snippets_core.fix_input_shapes(model, {{...}}), target='shave')"
    )


def compile_model(model: Model, config: CompileConfig, host: Any, target: Any = None) -> ShaveCompiledModel:
    """Compile a tokenized model into one blob (see the module docstring). ``target`` is the ShaveTarget
    object (a new one by default), kept with the plugin host as ``cm.target`` for tools such as inspect."""
    from snippets_core.runtime.targets import ResolvedTarget
    from snippets_shave.target import ShaveTarget

    options = ShaveOptions.from_mapping(dict(config.target_options))
    check_static_inputs(model)
    blob, kernels, placement = _Compiler(model, config, host, options).compile()
    resolved = ResolvedTarget(TARGET_NAME, host, target if target is not None else ShaveTarget())
    return ShaveCompiledModel(
        model,
        config,
        blob,
        kernels,
        placement,
        seed=options.seed,
        check_races=options.check_races,
        target=resolved,
    )


def generate_subgraph(sg: Subgraph, config: CompileConfig, host: Any) -> GeneratedSubgraph:
    """``sg``'s kernel and final LinearIR for the configured hardware (``snippets inspect --lir/--asm``)."""
    hw = ShaveOptions.from_mapping(dict(config.target_options)).hardware()
    return generate(sg, config, host, parallel_work=hw.tiles * hw.shaves_per_tile)

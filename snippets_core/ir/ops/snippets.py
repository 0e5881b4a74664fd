"""The snippets op set: the ops that live inside Subgraph bodies after the data-flow passes and in the LinearIR.

Type names follow OpenVINO's ``ov::snippets::op`` opset, with two exceptions to avoid clashing with
graph ops of the same name in :data:`~snippets_core.ir.node.OPS`:

* the snippets reductions (attribute ``axis``, keep-dims) are ``SnippetsReduceMax`` / ``SnippetsReduceSum``;
  the graph reductions (``ReduceMax(data, axes, keep_dims)``) keep the plain names;
* the snippets reshape (a shape-only op, data untouched) is ``SnippetsReshape``.

Reference evaluation. Every data op has a numpy ``evaluate`` so a body still runs on the reference
interpreter after the data-flow passes. Memory-access ops act on "the vector of values" and are the
identity there (Load, Store, BroadcastLoad, ...). Ops whose meaning depends on registers, lanes or a
whole LinearIR cannot be evaluated at graph level and raise :class:`UnsupportedOpError` naming the op:
``Kernel``, ``RegSpillBegin``/``RegSpillEnd`` and a ``Buffer`` of new memory (its content is undefined).
Control ops (``LoopBegin``/``LoopEnd``, ``PerfCountBegin``/``PerfCountEnd``, ``Nop``) pass their data
inputs through and give an empty array on their control edge.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from snippets_core.errors import ShapeInferenceError, UnsupportedOpError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.base import UnaryEltwise, same_dtype
from snippets_core.ir.ops.io import Constant
from snippets_core.ir.shape import Dim, SDim, Shape, as_shape, broadcast_shapes, normalize_axis

#: type of the edges that only order control ops (LoopBegin -> LoopEnd, PerfCountBegin -> PerfCountEnd)
CONTROL_TYPE = ElementType.dynamic
CONTROL_SHAPE = Shape([])


def _num(v: Any) -> Any:
    """An int attribute of a lowering op; a value the lowering keeps symbolic (a dim known only at run time, see
    snippets_core.lowered.symbolic) is kept as it is, so this IR package needs no import of it."""
    return v if hasattr(v, "terms") else int(v)


def _control_value() -> np.ndarray:
    return np.zeros((), dtype=np.uint8)


def _not_evaluable(node: Node, why: str) -> UnsupportedOpError:
    return UnsupportedOpError(f"op {node.type_name} (node '{node.name}') cannot be evaluated at graph level: {why}")


def _one_input(node: Node) -> None:
    if len(node.inputs) != 1:
        raise ShapeInferenceError(f"{node.type_name} takes 1 input, got {len(node.inputs)}")


class _OneInput(Node):
    """One data input, one output: the base of the reductions and shape-only ops (not element-wise, so
    passes and tokenizers that look for ``UnaryEltwise`` do not take them for one)."""

    _abstract = True

    def __init__(self, x: Output | Node, *, name: str | None = None) -> None:
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        _one_input(self)
        return [(self.input_type(0), self.input_shape(0))]


def _check_order(order: Sequence[int], rank: int, what: str) -> tuple[int, ...]:
    order = tuple(int(o) for o in order)
    if sorted(order) != list(range(rank)):
        raise ShapeInferenceError(f"{what} {list(order)} is not a permutation of {rank} dims")
    return order


# --- element-type conversion ------------------------------------------------------------------------------

def _int_range(et: ElementType) -> tuple[int, int]:
    info = np.iinfo(et.numpy)
    return int(info.min), int(info.max)


def convert_truncation(x: np.ndarray, dst: ElementType) -> np.ndarray:
    """``ConvertTruncation`` reference: C-style conversion, integers wrap around.

    float -> int rounds toward zero into a 32-bit integer (64-bit for u32/i64/u64 destinations), as
    ``cvttps2dq`` does; NaN and values out of that range give the "integer indefinite" INT_MIN, and the
    result then keeps the destination's low bits (wrap-around). int -> int wraps; -> float rounds to
    nearest even; -> boolean is ``x != 0``.
    """
    x = np.asarray(x)
    dt = dst.numpy
    if x.dtype == dt:
        return x.copy()
    if dst is ElementType.boolean:
        return x != 0
    src = ElementType.from_numpy(x.dtype)
    if src.is_real and dst.is_integral:
        wide = np.int64 if dst in (ElementType.u32, ElementType.i64, ElementType.u64) else np.int32
        info = np.iinfo(wide)
        t = np.trunc(x.astype(np.float64))
        bad = np.isnan(t) | (t < info.min) | (t > info.max)
        ints = np.where(bad, 0.0, t).astype(np.int64)
        ints = np.where(bad, info.min, ints)
        return ints.astype(wide).astype(dt)  # int -> narrower int wraps (keeps the low bits)
    return x.astype(dt)


def convert_saturation(x: np.ndarray, dst: ElementType) -> np.ndarray:
    """``ConvertSaturation`` reference: values are clamped to the destination range.

    float -> int rounds to nearest even (``cvtps2dq`` under the default MXCSR), then clamps to the
    destination's [min, max]; NaN gives the destination's minimum for signed and 0 for unsigned
    types (what the x86 sequence cvtps2dq + vpmovsdb / vpmaxsd 0 + vpmovusdb yields). int -> int clamps;
    -> float rounds to nearest even (overflow gives inf); -> boolean is ``x != 0``.
    """
    x = np.asarray(x)
    dt = dst.numpy
    if x.dtype == dt:
        return x.copy()
    if dst is ElementType.boolean:
        return x != 0
    src = ElementType.from_numpy(x.dtype)
    if dst.is_integral:
        lo, hi = _int_range(dst)
        if src.is_real:
            r = np.rint(x.astype(np.float64))
            nan = np.isnan(r)
            r = np.clip(np.where(nan, 0.0, r), lo, hi)
            out = r.astype(dt)
            if dst.is_signed:
                out = np.where(nan, np.asarray(lo, dtype=dt), out).astype(dt)
            return out
        if src is ElementType.boolean:
            return x.astype(dt)
        wide = x.astype(np.uint64) if src in (ElementType.u64,) else x.astype(np.int64)
        if src is ElementType.u64:
            return np.minimum(wide, np.uint64(hi)).astype(dt)
        return np.clip(wide, lo, hi).astype(dt)
    return x.astype(dt)


class _ConvertBase(Node):
    """One input converted to ``destination_type``; subclasses differ in out-of-range semantics."""

    _abstract = True
    ATTRS = ("destination_type",)

    def __init__(self, x: Output | Node, *, destination_type: ElementType | str, name: str | None = None) -> None:
        self.destination_type = ElementType.parse(destination_type)
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        _one_input(self)
        return [(self.destination_type, self.input_shape(0))]


class ConvertTruncation(_ConvertBase):
    """Element-type conversion with wrap-around (every original ``Convert`` becomes one)."""

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        return [convert_truncation(x, self.destination_type)]


class ConvertSaturation(_ConvertBase):
    """Element-type conversion that clamps to the destination range (converts the passes insert)."""

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        return [convert_saturation(x, self.destination_type)]


# --- memory access ----------------------------------------------------------------------------------------

class MemoryAccess:
    """Mixin of ops that read or write memory through pointer registers (OpenVINO ``modifier::MemoryAccess``).

    ``MEMORY_ACCESS_INPUTS`` / ``MEMORY_ACCESS_OUTPUTS`` list the port indices that access memory; the
    per-port ``count`` and ``offset`` are plain attributes of the op (``count``/``offset`` for ops with
    one such port, ``offset_a``/... for Brgemm), updated in place by the LinearIR passes.
    """

    MEMORY_ACCESS_INPUTS: ClassVar[tuple[int, ...]] = ()
    MEMORY_ACCESS_OUTPUTS: ClassVar[tuple[int, ...]] = ()

    def is_memory_access_input_port(self, i: int) -> bool:
        return i in self.MEMORY_ACCESS_INPUTS

    def is_memory_access_output_port(self, i: int) -> bool:
        return i in self.MEMORY_ACCESS_OUTPUTS


class _CountedAccess(MemoryAccess, Node):
    """Load and Store: ``count`` elements at ``offset`` (elements); at graph level the values pass through."""

    _abstract = True
    ATTRS = ("count", "offset")

    def __init__(self, x: Output | Node, *, count: int = 1, offset: int = 0, name: str | None = None) -> None:
        self.count = _num(count)
        self.offset = int(offset)
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        _one_input(self)
        # a dynamic count (a tail of a dim known only at run time, copied when an outer loop is expanded) is not
        # an int and never below 1 where it runs
        if isinstance(self.count, int) and self.count < 1:
            raise ShapeInferenceError(f"count must be >= 1, got {self.count}")
        return [(self.input_type(0), self.input_shape(0))]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        return [x]


class Load(_CountedAccess):
    """Load ``count`` elements at ``offset`` (elements) from a pointer register into a vector register."""

    MEMORY_ACCESS_INPUTS = (0,)


class LoadReorder(Load):
    """A Load whose input is read in the permuted ``order`` (a Transpose folded into the access):
    output dim ``i`` is input dim ``order[i]``."""

    ATTRS = ("count", "offset", "order")

    def __init__(self, x: Output | Node, *, count: int = 1, offset: int = 0, order: Sequence[int] = (),
                 name: str | None = None) -> None:
        self.order = tuple(int(o) for o in order)
        super().__init__(x, count=count, offset=offset, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        et, shape = super().infer()[0]
        if not shape.rank_is_static:
            return [(et, Shape.dynamic(len(self.order)))]
        order = _check_order(self.order, shape.rank, "LoadReorder order")
        return [(et, Shape([shape.sym(o) for o in order]))]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        return [np.ascontiguousarray(np.transpose(x, self.order))]


class Store(_CountedAccess):
    """Store ``count`` elements of a vector register to memory at ``offset`` (elements)."""

    MEMORY_ACCESS_OUTPUTS = (0,)


def _broadcast_last(shape: Shape, dim: Dim) -> Shape:
    if not shape.rank_is_static:
        return shape
    if shape.rank == 0:
        return Shape([dim])
    last = shape[-1]
    if last not in (1, None) and dim is not None and last != dim:
        raise ShapeInferenceError(f"cannot broadcast last dim {last} of {shape} to {dim}")
    return Shape(list(shape.dims[:-1]) + [dim])


def _evaluate_broadcast_last(x: np.ndarray, dim: Dim) -> np.ndarray:
    if dim is None:  # the size is known only from the consumer: numpy broadcasting there does the same
        return x
    if x.ndim == 0:
        return np.broadcast_to(x, (dim,)).copy()
    return np.broadcast_to(x, x.shape[:-1] + (dim,)).copy()


class BroadcastLoad(MemoryAccess, Node):
    """Load one element and broadcast it to all lanes: the last dim becomes ``broadcast_dim``."""

    ATTRS = ("broadcast_dim", "offset")
    MEMORY_ACCESS_INPUTS = (0,)

    def __init__(self, x: Output | Node, *, broadcast_dim: Dim, offset: int = 0, name: str | None = None) -> None:
        self.broadcast_dim = None if broadcast_dim is None else int(broadcast_dim)
        self.offset = int(offset)
        self.count = 1
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        _one_input(self)
        return [(self.input_type(0), _broadcast_last(self.input_shape(0), self.broadcast_dim))]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        return [_evaluate_broadcast_last(x, self.broadcast_dim)]


class BroadcastMove(Node):
    """Broadcast lane 0 of a vector register to all lanes: the last dim becomes ``broadcast_dim``."""

    ATTRS = ("broadcast_dim",)

    def __init__(self, x: Output | Node, *, broadcast_dim: Dim, name: str | None = None) -> None:
        self.broadcast_dim = None if broadcast_dim is None else int(broadcast_dim)
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        _one_input(self)
        return [(self.input_type(0), _broadcast_last(self.input_shape(0), self.broadcast_dim))]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        return [_evaluate_broadcast_last(x, self.broadcast_dim)]


class Buffer(Node):
    """Memory inside the kernel (the buffer scratchpad).

    * IntermediateMemory: ``Buffer(parent)`` - holds the parent's values; shape and type from the parent.
    * NewMemory: ``Buffer(shape=[...], element_type=u8)`` - no parent, memory the kernel uses as scratch.

    ``reg_group``, ``cluster_id`` and ``offset`` are filled by buffer allocation (-1 = not yet).
    """

    ATTRS = ("shape", "element_type", "reg_group", "cluster_id", "offset")

    def __init__(self, *parent: Output | Node, shape: Shape | Sequence[Dim] | None = None,
                 element_type: ElementType | str | None = None, reg_group: int = -1, cluster_id: int = -1,
                 offset: int = -1, name: str | None = None) -> None:
        if len(parent) > 1:
            raise ShapeInferenceError(f"Buffer takes at most 1 parent, got {len(parent)}")
        self.shape = None if shape is None else as_shape(shape)
        self.element_type = None if element_type is None else ElementType.parse(element_type)
        if not parent:
            if self.shape is None:
                raise ShapeInferenceError("a Buffer without a parent (NewMemory) needs a shape")
            if self.element_type is None:
                self.element_type = ElementType.u8
        self.reg_group = int(reg_group)
        self.cluster_id = int(cluster_id)
        self.offset = _num(offset)
        super().__init__(*parent, name=name)

    @property
    def is_new_memory(self) -> bool:
        return not self.inputs

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if self.inputs:
            return [(self.input_type(0), self.input_shape(0))]
        return [(self.element_type, self.shape)]  # type: ignore[list-item]

    def allocation_size(self) -> int | None:
        """Bytes this buffer needs, or None while its shape is dynamic."""
        out = self.outputs[0]
        if not out.shape.is_static:
            return None
        return out.shape.size * out.element_type.size

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        if not args:
            raise _not_evaluable(self, "a new-memory buffer has no defined content")
        return [args[0]]


# --- loops, kernel and other control ops ------------------------------------------------------------------

class LoopBegin(Node):
    """Start of an explicit loop region. Its data inputs (if any) pass through; its last output is the
    control edge to the matching :class:`LoopEnd`."""

    def infer(self) -> list[tuple[ElementType, Shape]]:
        return [(i.element_type, i.shape) for i in self.inputs] + [(CONTROL_TYPE, CONTROL_SHAPE)]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        return list(args) + [_control_value()]


class LoopEnd(Node):
    """End of an explicit loop region: its last input is the LoopBegin control edge; data inputs pass through.

    ``ptr_increments``, ``finalization_offsets``, ``element_type_sizes`` and ``is_incremented`` have one
    entry per loop port (``input_num`` inputs then ``output_num`` outputs). ``loop_id`` is the LoopManager
    id (OpenVINO's ``id``; renamed because ``Node.id`` is the node's unique number).
    """

    ATTRS = ("work_amount", "increment", "is_incremented", "ptr_increments", "finalization_offsets",
             "element_type_sizes", "input_num", "output_num", "loop_id", "evaluate_once")

    def __init__(self, *inputs: Output | Node, work_amount: Dim = None, increment: int = 1,
                 is_incremented: Sequence[bool] = (), ptr_increments: Sequence[int] = (),
                 finalization_offsets: Sequence[int] = (), element_type_sizes: Sequence[int] = (),
                 input_num: int = 0, output_num: int = 0, loop_id: int = 0, evaluate_once: bool = False,
                 name: str | None = None) -> None:
        self.work_amount = None if work_amount is None else _num(work_amount)
        self.increment = _num(increment)
        self.is_incremented = tuple(bool(b) for b in is_incremented)
        self.ptr_increments = tuple(_num(v) for v in ptr_increments)
        self.finalization_offsets = tuple(_num(v) for v in finalization_offsets)
        self.element_type_sizes = tuple(int(v) for v in element_type_sizes)
        self.input_num = int(input_num)
        self.output_num = int(output_num)
        self.evaluate_once = bool(evaluate_once)
        self.loop_id = int(loop_id)
        super().__init__(*inputs, name=name)

    @property
    def loop_begin(self) -> Node:
        return self.inputs[-1].source.node

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if not self.inputs or not isinstance(self.inputs[-1].source.node, LoopBegin):
            raise ShapeInferenceError("the last input of LoopEnd must be a LoopBegin control edge")
        ports = self.input_num + self.output_num
        for field_name in ("is_incremented", "ptr_increments", "finalization_offsets", "element_type_sizes"):
            values = getattr(self, field_name)
            if values and len(values) != ports:
                raise ShapeInferenceError(f"{field_name} has {len(values)} entries for {ports} loop ports")
        # a dynamic increment (the tail of a loop over a dim known only at run time, copied when an outer
        # loop is expanded) is not an int and is >= 0 by construction
        if isinstance(self.increment, int) and self.increment < 1:
            raise ShapeInferenceError(f"increment must be >= 1, got {self.increment}")
        return [(i.element_type, i.shape) for i in self.inputs[:-1]]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        return list(args[:-1])


class Kernel(Node):
    """The whole kernel region of a LinearIR (``Kernel::make_kernel``); ``region`` is that LinearIR and
    ``compile_params`` what the generator passes on. Only code generation reads it."""

    ATTRS = ("region", "compile_params")

    def __init__(self, *, region: Any = None, compile_params: Any = None, name: str | None = None) -> None:
        self.region = region
        self.compile_params = compile_params
        super().__init__(name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        return []

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        raise _not_evaluable(self, "a kernel runs a LinearIR, not graph values")


class Nop(Node):
    """A placeholder whose outputs are its inputs."""

    def infer(self) -> list[tuple[ElementType, Shape]]:
        return [(i.element_type, i.shape) for i in self.inputs]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        return list(args)


class PerfCountBegin(Node):
    """Debug timestamp at the start of a measured region; the output is the edge to its PerfCountEnd."""

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if self.inputs:
            raise ShapeInferenceError("PerfCountBegin takes no inputs")
        return [(CONTROL_TYPE, CONTROL_SHAPE)]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        self.rt_info["start_ns"] = time.perf_counter_ns()
        return [_control_value()]


class PerfCountEnd(Node):
    """Debug timestamp at the end of a measured region: accumulates the time and the iteration count."""

    def __init__(self, begin: Output | Node, *, name: str | None = None) -> None:
        self.accumulation_ns = 0
        self.iterations = 0
        super().__init__(begin, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if len(self.inputs) != 1 or not isinstance(self.inputs[0].source.node, PerfCountBegin):
            raise ShapeInferenceError("PerfCountEnd takes the PerfCountBegin edge as its only input")
        return []

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        begin = self.inputs[0].source.node
        self.accumulation_ns += time.perf_counter_ns() - begin.rt_info.get("start_ns", time.perf_counter_ns())
        self.iterations += 1
        return []


class RegSpillBegin(Node):
    """Save ``regs_to_spill`` (register names) before a region; the output is the edge to its RegSpillEnd."""

    ATTRS = ("regs_to_spill",)

    def __init__(self, *, regs_to_spill: Sequence[Any] = (), name: str | None = None) -> None:
        self.regs_to_spill = tuple(regs_to_spill)
        super().__init__(name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        return [(CONTROL_TYPE, CONTROL_SHAPE)]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        raise _not_evaluable(self, "register spills exist only in generated code")


class RegSpillEnd(Node):
    """Restore the registers its RegSpillBegin saved."""

    def __init__(self, begin: Output | Node, *, name: str | None = None) -> None:
        super().__init__(begin, name=name)

    @property
    def regs_to_spill(self) -> tuple[Any, ...]:
        return self.inputs[0].source.node.regs_to_spill  # type: ignore[attr-defined]

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if len(self.inputs) != 1 or not isinstance(self.inputs[0].source.node, RegSpillBegin):
            raise ShapeInferenceError("RegSpillEnd takes the RegSpillBegin edge as its only input")
        return []

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        raise _not_evaluable(self, "register spills exist only in generated code")


# --- values baked into the kernel and vector-register ops ---------------------------------------------------

class Scalar(Constant):
    """A one-element Constant baked into the kernel and broadcast to a whole vector by its emitter."""

    def __init__(self, value: Any, element_type: ElementType | str | None = None, *, name: str | None = None) -> None:
        super().__init__(value, element_type, name=name)
        if self.value.size != 1:
            raise ShapeInferenceError(f"Scalar '{self.name}' must hold one element, got shape {self.value.shape}")

    @property
    def scalar(self) -> float | int | bool:
        return self.value.reshape(-1)[0].item()

    def clone_with_new_inputs(self, inputs: Sequence[Output | Node]) -> Node:
        new = Scalar(self.value, name=self.name)
        new.rt_info = dict(self.rt_info)
        return new


class PowerStatic(UnaryEltwise):
    """``x ** power`` with the exponent known at compile time."""

    ATTRS = ("power",)

    def __init__(self, x: Output | Node, *, power: float, name: str | None = None) -> None:
        self.power = float(power)
        super().__init__(x, name=name)

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        if ElementType.from_numpy(x.dtype).is_real:
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                return [same_dtype(np.power(x, np.asarray(self.power, dtype=x.dtype)), x)]
        return [same_dtype(np.power(x.astype(np.float64), self.power), x)]


class Fill(Node):
    """Overwrite lanes ``[offset, lanes)`` of a vector with the 32-bit pattern ``fill_value``.

    At graph level the "vector" is the last axis: elements from ``offset`` on take the pattern
    reinterpreted in the input's (4-byte) element type, e.g. 0xff7fffff = lowest f32.
    """

    ATTRS = ("offset", "fill_value")

    def __init__(self, x: Output | Node, *, offset: int, fill_value: int, name: str | None = None) -> None:
        self.offset = _num(offset)
        self.fill_value = int(fill_value) & 0xFFFFFFFF
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        _one_input(self)
        if self.offset < 0:
            raise ShapeInferenceError(f"offset must be >= 0, got {self.offset}")
        return [(self.input_type(0), self.input_shape(0))]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        if x.dtype.itemsize != 4:
            raise UnsupportedOpError(f"Fill '{self.name}': a 32-bit pattern cannot fill {x.dtype} elements")
        out = np.array(x, copy=True)
        if out.ndim == 0:
            out = out.reshape(1)
        out[..., self.offset:] = np.asarray(self.fill_value, dtype=np.uint32).view(out.dtype)
        return [out.reshape(np.shape(x))]


class _Horizon(_OneInput):
    """Reduce all lanes of a vector; at graph level, the last axis (the output's last dim is 1)."""

    _abstract = True
    REDUCE: ClassVar[Any] = None

    def infer(self) -> list[tuple[ElementType, Shape]]:
        et, shape = super().infer()[0]
        if shape.rank_is_static and shape.rank > 0:
            shape = Shape(list(shape.dims[:-1]) + [1])
        return [(et, shape)]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        if x.ndim == 0:
            return [x.copy()]
        return [same_dtype(type(self).REDUCE(x, axis=-1, keepdims=True), x)]


class HorizonMax(_Horizon):
    """Horizontal max across the lanes of a vector register."""

    REDUCE = staticmethod(np.max)


class HorizonSum(_Horizon):
    """Horizontal sum across the lanes of a vector register."""

    REDUCE = staticmethod(np.sum)


class VectorBuffer(Node):
    """A scratch vector register (an accumulator), initialised by a Fill."""

    ATTRS = ("element_type",)

    def __init__(self, *, element_type: ElementType | str = ElementType.f32, name: str | None = None) -> None:
        self.element_type = ElementType.parse(element_type)
        super().__init__(name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        return [(self.element_type, Shape([1]))]

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        return [np.zeros((1,), dtype=self.element_type.numpy)]


# --- reductions and shape-only ops --------------------------------------------------------------------------

class _SnippetsReduce(_OneInput):
    """Reduction over one ``axis`` that keeps the reduced dim as 1 (decomposed on the LinearIR)."""

    _abstract = True
    ATTRS = ("axis",)
    REDUCE: ClassVar[Any] = None

    def __init__(self, x: Output | Node, *, axis: int, name: str | None = None) -> None:
        self.axis = int(axis)
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        et, shape = super().infer()[0]
        if not shape.rank_is_static:
            return [(et, shape)]
        axis = normalize_axis(self.axis, shape.rank)
        dims = list(shape.sym_dims)  # a named dynamic dim keeps its name (Shape.syms)
        dims[axis] = 1
        return [(et, Shape(dims))]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        return [same_dtype(type(self).REDUCE(x, axis=self.axis, keepdims=True), x)]


#: rt_info key on a SnippetsReduceMax whose consumers make a NaN of its input reach the result by another path
#: (Softmax: ``x - max(x)`` is NaN where x is): its maximum may drop NaN lanes (one ``vmaxps`` a step instead of a
#: NaN-propagating compare-and-blend), carried by ReduceDecomposition onto the Maximum and HorizonMax it makes
MAX_MAY_DROP_NAN = "snippets.max_may_drop_nan"


class SnippetsReduceMax(_SnippetsReduce):
    """snippets ``ReduceMax`` (OpenVINO ``ov::snippets::op::ReduceMax``)."""

    REDUCE = staticmethod(np.max)


class SnippetsReduceSum(_SnippetsReduce):
    """snippets ``ReduceSum`` (OpenVINO ``ov::snippets::op::ReduceSum``)."""

    REDUCE = staticmethod(np.sum)


class RankNormalization(_OneInput):
    """Prepend ``num_prepend`` ones and append ``num_append`` (0 or 1) ones to the shape; data untouched."""

    ATTRS = ("num_prepend", "num_append")

    def __init__(self, x: Output | Node, *, num_prepend: int = 0, num_append: int = 0, name: str | None = None) -> None:
        self.num_prepend = int(num_prepend)
        self.num_append = int(num_append)
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        et, shape = super().infer()[0]
        if self.num_prepend < 0 or self.num_append not in (0, 1):
            raise ShapeInferenceError(f"num_prepend must be >= 0 and num_append 0 or 1, got "
                                      f"{self.num_prepend}, {self.num_append}")
        if not shape.rank_is_static:
            return [(et, shape)]
        return [(et, Shape([1] * self.num_prepend + list(shape.dims) + [1] * self.num_append))]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        return [x.reshape((1,) * self.num_prepend + x.shape + (1,) * self.num_append)]


def resolve_reshape(in_dims: Sequence[Dim], target: Sequence[int]) -> list[Dim]:
    """Output dims of a SnippetsReshape: ``0`` copies the input dim at that index, ``-1`` takes the rest."""
    out: list[Dim] = []
    for i, t in enumerate(target):
        if t == 0:
            if i >= len(in_dims):
                raise ShapeInferenceError(f"target dim {i} copies an input dim, but the input has rank {len(in_dims)}")
            out.append(in_dims[i])
        else:
            out.append(t)
    if -1 in out:
        known = [d for d in out if d != -1]
        if all(d is not None for d in in_dims) and all(d is not None for d in known):
            total = int(np.prod(in_dims, dtype=np.int64))
            rest = int(np.prod(known, dtype=np.int64))
            if rest == 0 or total % rest:
                raise ShapeInferenceError(f"cannot reshape {list(in_dims)} to {list(target)}")
            out[out.index(-1)] = total // rest
        else:
            out[out.index(-1)] = None
    return out


class SnippetsReshape(_OneInput):
    """snippets ``Reshape``: a new shape over the same data (OpenVINO ``ov::snippets::op::Reshape``).

    ``target_shape`` holds positive dims plus two shape-agnostic markers, so the op works on dynamic
    shapes: ``0`` copies the input dim at the same index, ``-1`` (at most once) is whatever remains.
    """

    ATTRS = ("target_shape",)

    def __init__(self, x: Output | Node, *, target_shape: Sequence[int], name: str | None = None) -> None:
        self.target_shape = tuple(int(d) for d in target_shape)
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        et, shape = super().infer()[0]
        if self.target_shape.count(-1) > 1 or any(d < -1 for d in self.target_shape):
            raise ShapeInferenceError(f"bad target shape {list(self.target_shape)}")
        if not shape.rank_is_static:
            if 0 in self.target_shape:
                return [(et, Shape.dynamic(len(self.target_shape)))]
            return [(et, Shape([None if d == -1 else d for d in self.target_shape]))]
        out = resolve_reshape(shape.dims, self.target_shape)  # type: ignore[arg-type]
        if shape.is_static and all(d is not None for d in out) and int(np.prod(out, dtype=np.int64)) != shape.size:
            raise ShapeInferenceError(f"cannot reshape {shape} to {list(self.target_shape)}")
        return [(et, Shape(out))]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        return [x.reshape(tuple(resolve_reshape(x.shape, self.target_shape)))]  # type: ignore[arg-type]


class Reorder(_OneInput):
    """Shape-only permutation: output dim ``i`` is input dim ``order[i]``; the data layout in memory is
    described by the port descriptor, so at graph level the values are transposed."""

    ATTRS = ("order",)

    def __init__(self, x: Output | Node, *, order: Sequence[int], name: str | None = None) -> None:
        self.order = tuple(int(o) for o in order)
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        et, shape = super().infer()[0]
        if not shape.rank_is_static:
            return [(et, Shape.dynamic(len(self.order)))]
        order = _check_order(self.order, shape.rank, "Reorder order")
        return [(et, Shape([shape[o] for o in order]))]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        return [np.ascontiguousarray(np.transpose(x, self.order))]


# --- Brgemm --------------------------------------------------------------------------------------------------

#: (type of A, type of B) families -> output type (OpenVINO ``Brgemm::get_output_type``)
BRGEMM_OUTPUT_TYPES: dict[tuple[ElementType, ElementType], ElementType] = {
    (ElementType.f32, ElementType.f32): ElementType.f32,
    (ElementType.bf16, ElementType.bf16): ElementType.f32,
    (ElementType.f16, ElementType.f16): ElementType.f32,
    (ElementType.i8, ElementType.i8): ElementType.i32,
    (ElementType.u8, ElementType.i8): ElementType.i32,
    (ElementType.i8, ElementType.u8): ElementType.i32,
    (ElementType.u8, ElementType.u8): ElementType.i32,
}


def _planar(shape: Shape, layout: tuple[int, ...], what: str) -> Shape:
    if not layout or not shape.rank_is_static:
        return shape
    order = _check_order(layout, shape.rank, what)
    return Shape([shape.sym(o) for o in order])  # a named dynamic dim keeps its name (Shape.syms)


class Brgemm(MemoryAccess, Node):
    """Batch-reduced GEMM ``C = A @ B`` on the last two (planar) dims, batch dims numpy-broadcast.

    ``layout_a``/``layout_b`` say how the stored input is read (planar dim ``i`` = stored dim
    ``layout[i]``, a folded Transpose); ``layout_c`` how the planar result is stored (stored dim
    ``layout_c[i]`` = planar dim ``i``). Empty layouts are planar. f32 x f32 and bf16/f16 give f32,
    int8 x int8 gives i32 (:data:`BRGEMM_OUTPUT_TYPES`); other pairs are a ShapeInferenceError.
    """

    ATTRS = ("offset_a", "offset_b", "offset_c", "layout_a", "layout_b", "layout_c")
    MEMORY_ACCESS_INPUTS = (0, 1)
    MEMORY_ACCESS_OUTPUTS = (0,)

    def __init__(self, a: Output | Node, b: Output | Node, *, offset_a: int = 0, offset_b: int = 0,
                 offset_c: int = 0, layout_a: Sequence[int] = (), layout_b: Sequence[int] = (),
                 layout_c: Sequence[int] = (), name: str | None = None) -> None:
        self.offset_a, self.offset_b, self.offset_c = int(offset_a), int(offset_b), int(offset_c)
        self.layout_a = tuple(int(v) for v in layout_a)
        self.layout_b = tuple(int(v) for v in layout_b)
        self.layout_c = tuple(int(v) for v in layout_c)
        super().__init__(a, b, name=name)

    @staticmethod
    def output_type(ta: ElementType, tb: ElementType) -> ElementType:
        try:
            return BRGEMM_OUTPUT_TYPES[(ta, tb)]
        except KeyError:
            raise ShapeInferenceError(f"Brgemm does not support inputs {ta} x {tb}") from None

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if len(self.inputs) != 2:
            raise ShapeInferenceError(f"Brgemm takes 2 inputs, got {len(self.inputs)}")
        et = self.output_type(self.input_type(0), self.input_type(1))
        sa = _planar(self.input_shape(0), self.layout_a, "Brgemm layout_a")
        sb = _planar(self.input_shape(1), self.layout_b, "Brgemm layout_b")
        if not (sa.rank_is_static and sb.rank_is_static):
            return [(et, Shape.dynamic())]
        if sa.rank < 2 or sb.rank < 2:
            raise ShapeInferenceError(f"Brgemm inputs need rank >= 2, got {sa} and {sb}")
        k_a, k_b = sa[-1], sb[-2]
        if k_a is not None and k_b is not None and k_a != k_b:
            raise ShapeInferenceError(f"K dims differ: A {sa} and B {sb}")
        batch = broadcast_shapes(sa[:-2], sb[:-2])
        # sym dims: a named dynamic M or N keeps its name (Shape.syms) for a shape-agnostic lowering
        planar_c = Shape(list(batch.sym_dims) + [sa.sym(-2), sb.sym(-1)])
        if self.layout_c:
            order = _check_order(self.layout_c, planar_c.rank, "Brgemm layout_c")
            stored: list[SDim] = [None] * planar_c.rank
            for i, o in enumerate(order):
                stored[o] = planar_c.sym(i)
            planar_c = Shape(stored)
        return [(et, planar_c)]

    def evaluate(self, a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
        et = self.outputs[0].element_type
        acc = np.float32 if et is ElementType.f32 else np.int32
        if self.layout_a:
            a = np.transpose(a, self.layout_a)
        if self.layout_b:
            b = np.transpose(b, self.layout_b)
        c = np.matmul(a.astype(acc), b.astype(acc))
        if self.layout_c:
            c = np.transpose(c, np.argsort(self.layout_c))
        return [np.ascontiguousarray(c.astype(et.numpy))]


__all__ = [
    "BRGEMM_OUTPUT_TYPES", "Brgemm", "BroadcastLoad", "BroadcastMove", "Buffer", "ConvertSaturation",
    "ConvertTruncation", "Fill", "HorizonMax", "HorizonSum", "Kernel", "Load", "LoadReorder", "LoopBegin",
    "LoopEnd", "MemoryAccess", "Nop", "PerfCountBegin", "PerfCountEnd", "PowerStatic", "RankNormalization",
    "RegSpillBegin", "RegSpillEnd", "Reorder", "Scalar", "SnippetsReduceMax", "SnippetsReduceSum",
    "SnippetsReshape", "Store", "VectorBuffer", "convert_saturation", "convert_truncation", "resolve_reshape",
]

"""Base classes shared by op families (element-wise unary and binary ops) and the checks every op uses."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.node import Node, Output
from snippets_core.ir.shape import SDim, Shape, SymValue, broadcast_shapes, normalize_axis, sdim

# --- element-type kinds ---------------------------------------------------------------------------
# An op declares which kind of element type its inputs accept; the check lives here, once.
_KINDS = {
    "any": lambda et: True,
    "numeric": lambda et: et.is_real or (et.is_integral and et is not ElementType.boolean),
    "real": lambda et: et.is_real,
    "integral": lambda et: et.is_integral and et is not ElementType.boolean,
    "boolean": lambda et: et is ElementType.boolean,
    "integral_or_boolean": lambda et: et.is_integral,
    "index": lambda et: et in (ElementType.i64, ElementType.i32, ElementType.u64, ElementType.u32,
                               ElementType.i16, ElementType.u16, ElementType.i8, ElementType.u8),
}


def check_input_count(node: Node, lo: int, hi: int | None = None) -> None:
    """Raise unless the node has between ``lo`` and ``hi`` inputs (``hi=None`` means exactly ``lo``)."""
    hi = lo if hi is None else hi
    n = len(node.inputs)
    if not lo <= n <= hi:
        want = str(lo) if lo == hi else f"{lo} to {hi}"
        raise ShapeInferenceError(f"{node.type_name} takes {want} inputs, got {n}")


def check_kind(node: Node, i: int, kind: str, what: str | None = None) -> ElementType:
    """Raise unless input ``i`` has an element type of ``kind`` (see ``_KINDS``); dynamic passes."""
    et = node.input_type(i)
    if et is not ElementType.dynamic and not _KINDS[kind](et):
        words = kind.replace("_", " ")
        article = "an" if words[0] in "aeiou" else "a"
        raise ShapeInferenceError(f"{what or f'input {i}'} must have {article} {words} element type, got {et}")
    return et


def check_same_types(node: Node, indices: Sequence[int], what: str = "inputs") -> ElementType:
    """Raise unless the given inputs share one element type; returns it (dynamic if all are dynamic)."""
    types = [node.input_type(i) for i in indices]
    known = [t for t in types if t is not ElementType.dynamic]
    if any(t != known[0] for t in known):
        raise ShapeInferenceError(f"{what} must have equal element types, got " + ", ".join(str(t) for t in types))
    return known[0] if known else ElementType.dynamic


def check_rank(node: Node, i: int, ranks: Sequence[int], what: str | None = None) -> None:
    """Raise unless input ``i`` has a rank in ``ranks`` (a dynamic rank passes)."""
    s = node.input_shape(i)
    if s.rank_is_static and s.rank not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ShapeInferenceError(f"{what or f'input {i}'} must have rank {want}, got shape {s}")


def known_ints(node: Node, i: int, what: str) -> list[int] | None:
    """The value of a shape-like input (axes, order, target shape) as ints, or None when unknown.

    Checks that the input has an integer element type and rank 0 or 1.
    """
    from snippets_core.ir.const_eval import constant_value, shape_value_ints  # they evaluate ops: import late

    check_kind(node, i, "index", what)
    check_rank(node, i, (0, 1), what)
    v = constant_value(node.inputs[i].source)
    if v is None:
        return shape_value_ints(node.inputs[i].source)  # e.g. a Gather of a static dim of a dynamic shape
    return [int(a) for a in np.asarray(v).reshape(-1)]


def known_dims(node: Node, i: int, what: str) -> list[SDim] | None:
    """Like :func:`known_ints` for a target shape, but entries may be symbolic dims (``[B, S, 12, 64]`` from a
    Concat of Gathers of ``Shape(x)``) or None (unknown entries of a vector of known length)."""
    from snippets_core.ir.const_eval import shape_value

    ints = known_ints(node, i, what)
    if ints is not None:
        return list(ints)
    v = shape_value(node.inputs[i].source)
    return None if v is None else list(v)


def normalize_axes(axes: Sequence[int], rank: int, what: str = "axis") -> list[int]:
    """Normalize negative axes against ``rank``; raise on out-of-range or repeated axes."""
    out = [normalize_axis(a, rank, what) for a in axes]
    if len(set(out)) != len(out):
        raise ShapeInferenceError(f"{what} values {list(axes)} repeat an axis")
    return out


# --- numpy helpers ----------------------------------------------------------------------------------
_UPCAST = {np.dtype(np.float16): np.dtype(np.float32)}
try:
    _UPCAST[ElementType.bf16.numpy] = np.dtype(np.float32)
except ValueError:  # pragma: no cover - bf16 comes with ml_dtypes
    pass


def upcast(x: np.ndarray) -> np.ndarray:
    """f16/bf16 math runs in f32 and is rounded back once, as a real backend does; others unchanged."""
    x = np.asarray(x)
    target = _UPCAST.get(x.dtype)
    return x.astype(target) if target is not None else x


def same_dtype(result: np.ndarray, like: np.ndarray | np.dtype) -> np.ndarray:
    """Cast a numpy result back to the input's dtype (numpy promotes f16 math, ints, ...)."""
    dtype = like.dtype if isinstance(like, np.ndarray) else np.dtype(like)
    return np.asarray(result).astype(dtype, copy=False)


# --- element-wise bases -------------------------------------------------------------------------------
class UnaryEltwise(Node):
    """One input, one output of the same type and shape.

    Subclasses set ``INPUT_KIND`` (see ``check_kind``) and define :meth:`compute`, the math on an array
    whose f16/bf16 values were upcast to f32; :meth:`evaluate` casts the result back.
    """

    _abstract = True
    INPUT_KIND: ClassVar[str] = "any"

    def __init__(self, x: Output | Node, *, name: str | None = None) -> None:
        super().__init__(x, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if len(self.inputs) != 1:
            raise ShapeInferenceError(f"{self.type_name} takes 1 input, got {len(self.inputs)}")
        check_kind(self, 0, self.INPUT_KIND)
        return [(self.input_type(0), self.input_shape(0))]

    def compute(self, x: np.ndarray) -> np.ndarray:
        """The element-wise math (abstract: each concrete op defines it)."""
        raise NotImplementedError(f"{self.type_name} has no reference evaluation")

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        x = np.asarray(args[0])
        with np.errstate(all="ignore"):  # inf/nan results (also from rounding back to f16) are values here
            return [same_dtype(self.compute(upcast(x)), x)]


class BinaryEltwise(Node):
    """Two inputs of one element type, numpy-broadcast (``auto_broadcast='numpy'``) or equal
    shapes (``'none'``). ``LOGICAL_OUTPUT`` ops (comparisons) return booleans.

    Subclasses set ``INPUT_KIND`` and define :meth:`compute` on upcast arrays, like :class:`UnaryEltwise`.
    """

    _abstract = True
    ATTRS = ("auto_broadcast",)
    LOGICAL_OUTPUT: ClassVar[bool] = False
    INPUT_KIND: ClassVar[str] = "any"

    def __init__(self, a: Output | Node, b: Output | Node, *, auto_broadcast: str = "numpy",
                 name: str | None = None) -> None:
        self.auto_broadcast = auto_broadcast
        super().__init__(a, b, name=name)

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if len(self.inputs) != 2:
            raise ShapeInferenceError(f"{self.type_name} takes 2 inputs, got {len(self.inputs)}")
        if self.auto_broadcast not in ("numpy", "none"):
            raise ShapeInferenceError(f"auto_broadcast must be 'numpy' or 'none', got {self.auto_broadcast!r}")
        ta, tb = self.input_type(0), self.input_type(1)
        if ta != tb and ElementType.dynamic not in (ta, tb):
            raise ShapeInferenceError(f"element types differ: {ta} and {tb}")
        check_kind(self, 0, self.INPUT_KIND)
        check_kind(self, 1, self.INPUT_KIND)
        sa, sb = self.input_shape(0), self.input_shape(1)
        if self.auto_broadcast == "none":
            if not sa.compatible(sb):
                raise ShapeInferenceError(f"shapes {sa} and {sb} must be equal (auto_broadcast none)")
            shape = sa
        else:
            shape = broadcast_shapes(sa, sb)
        return [(ElementType.boolean if self.LOGICAL_OUTPUT else ta, shape)]

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The element-wise math (abstract: each concrete op defines it)."""
        raise NotImplementedError(f"{self.type_name} has no reference evaluation")

    def sym_rule(self, a: SDim, b: SDim) -> SDim:
        """The op on one pair of shape-vector entries, ints or symbolic (None: unknown). Ops that appear in
        the shape arithmetic of exported models (Add, Subtract, Multiply, Divide, Equal) define it."""
        return None

    def sym_value(self, value: Callable[[int], SymValue | None]) -> SymValue | None:
        a, b = value(0), value(1)
        if a is None or b is None or (len(a) != len(b) and 1 not in (len(a), len(b))):
            return None
        n = max(len(a), len(b))
        a, b = (a * n if len(a) == 1 else a), (b * n if len(b) == 1 else b)
        if all(isinstance(x, int) for x in a + b):  # plain numbers: the reference says it exactly
            dt = self.input_type(0).numpy
            (r,) = self.evaluate(np.asarray(a, dt), np.asarray(b, dt))
            return tuple(int(x) for x in np.asarray(r).reshape(-1))
        return tuple(sdim(self.sym_rule(x, y)) for x, y in zip(a, b))

    def evaluate(self, *args: np.ndarray) -> list[np.ndarray]:
        a, b = np.asarray(args[0]), np.asarray(args[1])
        with np.errstate(all="ignore"):
            return [same_dtype(self.compute(upcast(a), upcast(b)), np.bool_ if self.LOGICAL_OUTPUT else a.dtype)]

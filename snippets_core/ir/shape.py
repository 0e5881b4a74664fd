"""Shapes with static or dynamic dims, and numpy broadcasting over them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from snippets_core.errors import ShapeInferenceError

Dim = int | None
"""A dimension: a non-negative int, or ``None`` when it is only known at run time."""


@dataclass(frozen=True)
class Shape:
    """A tensor shape. ``dims`` is a tuple of dims, or ``None`` when even the rank is unknown."""

    dims: tuple[Dim, ...] | None

    def __init__(self, dims: Iterable[Dim] | None = ()) -> None:
        if dims is not None:
            dims = tuple(None if d is None or (isinstance(d, int) and d < 0) else int(d) for d in dims)
        object.__setattr__(self, "dims", dims)

    @staticmethod
    def dynamic(rank: int | None = None) -> Shape:
        return Shape(None if rank is None else (None,) * rank)

    @property
    def rank_is_static(self) -> bool:
        return self.dims is not None

    @property
    def rank(self) -> int:
        if self.dims is None:
            raise ShapeInferenceError("the rank of this shape is dynamic")
        return len(self.dims)

    @property
    def is_static(self) -> bool:
        return self.dims is not None and all(d is not None for d in self.dims)

    @property
    def is_dynamic(self) -> bool:
        return not self.is_static

    def to_tuple(self) -> tuple[int, ...]:
        """The dims as ints; an error if any is dynamic."""
        if not self.is_static:
            raise ShapeInferenceError(f"shape {self} is not static")
        return self.dims  # type: ignore[return-value]

    @property
    def size(self) -> int:
        n = 1
        for d in self.to_tuple():
            n *= d
        return n

    def __iter__(self) -> Iterator[Dim]:
        if self.dims is None:
            raise ShapeInferenceError("cannot iterate a shape of dynamic rank")
        return iter(self.dims)

    def __len__(self) -> int:
        return self.rank

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        if self.dims is None:
            raise ShapeInferenceError("cannot index a shape of dynamic rank")
        if isinstance(i, slice):
            return Shape(self.dims[i])
        return self.dims[i]

    def compatible(self, other: Shape) -> bool:
        """True if the two shapes may describe the same tensor."""
        if self.dims is None or other.dims is None:
            return True
        if len(self.dims) != len(other.dims):
            return False
        return all(a is None or b is None or a == b for a, b in zip(self.dims, other.dims))

    def __str__(self) -> str:
        if self.dims is None:
            return "[...]"
        return "[" + ",".join("?" if d is None else str(d) for d in self.dims) + "]"

    def __repr__(self) -> str:
        return f"Shape({self})"


def as_shape(s: Shape | Sequence[Dim] | None) -> Shape:
    if isinstance(s, Shape):
        return s
    return Shape(s)


def broadcast_dim(a: Dim, b: Dim) -> Dim:
    """Numpy broadcasting of one pair of dims; raises on a mismatch of two static dims."""
    if a == 1:
        return b
    if b == 1:
        return a
    if a is None:
        return b if b is not None and b != 1 else None
    if b is None:
        return a
    if a != b:
        raise ShapeInferenceError(f"dims {a} and {b} do not broadcast")
    return a


def broadcast_shapes(*shapes: Shape) -> Shape:
    """Numpy broadcasting of several shapes (dynamic dims stay dynamic unless the other is > 1)."""
    if any(s.dims is None for s in shapes):
        return Shape.dynamic()
    rank = max((len(s.dims) for s in shapes), default=0)  # type: ignore[arg-type]
    out: list[Dim] = [1] * rank
    for s in shapes:
        dims = (1,) * (rank - len(s.dims)) + s.dims  # type: ignore[operator]
        try:
            out = [broadcast_dim(a, b) for a, b in zip(out, dims)]
        except ShapeInferenceError:
            raise ShapeInferenceError(
                "shapes " + ", ".join(str(x) for x in shapes) + " are not numpy-broadcastable"
            ) from None
    return Shape(out)


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise ShapeInferenceError(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis

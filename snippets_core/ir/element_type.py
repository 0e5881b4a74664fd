"""Element types of tensors and their numpy counterparts."""

from __future__ import annotations

from enum import Enum

import numpy as np

try:  # bf16 has no native numpy dtype; ml_dtypes (an onnx dependency) provides one.
    import ml_dtypes as _ml_dtypes

    _BF16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes comes with onnx
    _BF16 = None


def is_float_dtype(dtype: np.dtype) -> bool:
    """A floating-point numpy dtype, bf16 included (ml_dtypes' bfloat16 has kind 'V', not 'f')."""
    return dtype.kind == "f" or (_BF16 is not None and dtype == _BF16)


class ElementType(Enum):
    """The element type of a tensor; ``value`` is the short name used in dumps."""

    f64 = "f64"
    f32 = "f32"
    f16 = "f16"
    bf16 = "bf16"
    i64 = "i64"
    i32 = "i32"
    i16 = "i16"
    i8 = "i8"
    u64 = "u64"
    u32 = "u32"
    u16 = "u16"
    u8 = "u8"
    boolean = "boolean"
    string = "string"
    dynamic = "dynamic"

    def __repr__(self) -> str:
        return self.value

    __str__ = __repr__

    @property
    def is_real(self) -> bool:
        return self in (ElementType.f64, ElementType.f32, ElementType.f16, ElementType.bf16)

    @property
    def is_integral(self) -> bool:
        return self in _INTEGRAL

    @property
    def is_signed(self) -> bool:
        return self.is_real or self in (ElementType.i64, ElementType.i32, ElementType.i16, ElementType.i8)

    @property
    def size(self) -> int:
        """Size of one element in bytes."""
        if self in (ElementType.string, ElementType.dynamic):
            raise ValueError(f"element type {self} has no fixed size")
        return self.numpy.itemsize

    @property
    def bitwidth(self) -> int:
        return self.size * 8

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype that holds values of this type."""
        try:
            return _TO_NUMPY[self]
        except KeyError:
            raise ValueError(f"element type {self} has no numpy dtype") from None

    @staticmethod
    def from_numpy(dtype: np.dtype | type) -> ElementType:
        dt = np.dtype(dtype)
        try:
            return _FROM_NUMPY[dt]
        except KeyError:
            if dt.kind in ("U", "S", "O"):
                return ElementType.string
            raise ValueError(f"numpy dtype {dt} has no snippets element type") from None

    @staticmethod
    def parse(name: str | ElementType | np.dtype | type) -> ElementType:
        """Accept an ElementType, its short name ('f32'), a numpy dtype or a numpy type."""
        if isinstance(name, ElementType):
            return name
        if isinstance(name, str):
            key = name.lower()
            aliases = {"float32": "f32", "float": "f32", "float16": "f16", "half": "f16", "float64": "f64",
                       "double": "f64", "bfloat16": "bf16", "int64": "i64", "int32": "i32", "int16": "i16",
                       "int8": "i8", "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
                       "bool": "boolean"}
            key = aliases.get(key, key)
            try:
                return ElementType(key)
            except ValueError:
                raise ValueError(f"unknown element type {name!r}") from None
        return ElementType.from_numpy(name)


_INTEGRAL = frozenset({ElementType.i64, ElementType.i32, ElementType.i16, ElementType.i8, ElementType.u64,
                       ElementType.u32, ElementType.u16, ElementType.u8, ElementType.boolean})

_TO_NUMPY: dict[ElementType, np.dtype] = {
    ElementType.f64: np.dtype(np.float64),
    ElementType.f32: np.dtype(np.float32),
    ElementType.f16: np.dtype(np.float16),
    ElementType.i64: np.dtype(np.int64),
    ElementType.i32: np.dtype(np.int32),
    ElementType.i16: np.dtype(np.int16),
    ElementType.i8: np.dtype(np.int8),
    ElementType.u64: np.dtype(np.uint64),
    ElementType.u32: np.dtype(np.uint32),
    ElementType.u16: np.dtype(np.uint16),
    ElementType.u8: np.dtype(np.uint8),
    ElementType.boolean: np.dtype(np.bool_),
    ElementType.string: np.dtype(object),
}
if _BF16 is not None:
    _TO_NUMPY[ElementType.bf16] = _BF16

_FROM_NUMPY: dict[np.dtype, ElementType] = {v: k for k, v in _TO_NUMPY.items() if k is not ElementType.string}

f64 = ElementType.f64
f32 = ElementType.f32
f16 = ElementType.f16
bf16 = ElementType.bf16
i64 = ElementType.i64
i32 = ElementType.i32
i16 = ElementType.i16
i8 = ElementType.i8
u64 = ElementType.u64
u32 = ElementType.u32
u16 = ElementType.u16
u8 = ElementType.u8
boolean = ElementType.boolean
dynamic = ElementType.dynamic

"""ONNX element types -> snippets element types. Apart from ``onnx.py`` so that the op converters
(``onnx_converters.py``, which ``onnx.py`` imports) use it without importing ``onnx.py`` back.
"""

from __future__ import annotations

from snippets_core.errors import UnsupportedOpError
from snippets_core.ir.element_type import ElementType

try:
    import onnx
    from onnx import TensorProto
except ImportError:  # pragma: no cover - onnx is a dependency of snippets-core
    onnx = None  # type: ignore[assignment]

_ONNX_TO_ET: dict[int, ElementType] = {}
if onnx is not None:
    _ONNX_TO_ET = {
        TensorProto.FLOAT: ElementType.f32, TensorProto.DOUBLE: ElementType.f64, TensorProto.FLOAT16: ElementType.f16,
        TensorProto.BFLOAT16: ElementType.bf16, TensorProto.INT64: ElementType.i64, TensorProto.INT32: ElementType.i32,
        TensorProto.INT16: ElementType.i16, TensorProto.INT8: ElementType.i8, TensorProto.UINT64: ElementType.u64,
        TensorProto.UINT32: ElementType.u32, TensorProto.UINT16: ElementType.u16, TensorProto.UINT8: ElementType.u8,
        TensorProto.BOOL: ElementType.boolean,
    }


def element_type_of(data_type: int, what: str) -> ElementType:
    """The snippets element type of an ONNX ``TensorProto.DataType``; UnsupportedOpError for others."""
    try:
        return _ONNX_TO_ET[data_type]
    except KeyError:
        name = TensorProto.DataType.Name(data_type) if data_type in TensorProto.DataType.values() else str(data_type)
        raise UnsupportedOpError(f"{what} has ONNX element type {name}, which snippets does not support") from None

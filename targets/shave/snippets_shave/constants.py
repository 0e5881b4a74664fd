"""Fixed numbers shared by the ISA, ELF writer, kernel ABI, blob and simulator.

Window bases follow the Software Layers HLD and the 37XX link scripts (shave_blob.md §3): each window is
16 MiB; WIN_D holds kernel code and read-only data, WIN_E an invocation's arguments and RW data, WIN_F the
tile-local CMX slice.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

WIN_C = 0x1C000000  # the Runtime Kernel's code, then the tile's invocation records (runtime_kernel.py)
WIN_D = 0x1D000000  # kernel .text + .rodata
WIN_E = 0x1E000000  # invocation .data copy + params + dims/strides
WIN_F = 0x1F000000  # CMX slice of the tile the kernel runs on
WINDOW_SIZE = 1 << 24
WINDOW_BASES = (WIN_C, WIN_D, WIN_E, WIN_F)

ISA_VERSION = 1  # SHVX ISA version, stored in ELF e_flags and in the .note.ashv
KERNEL_ABI_VERSION = 1  # kernel arguments contract version (docs/kernel_abi.md)
RUNTIME_VERSION = 2  # the host <-> Runtime Kernel contract: record layout, FIFO, entry registers (runtime_kernel.py)
RUNTIME_CODE_BUFFER = 1 << 20  # WIN_C bytes for the Runtime Kernel's code (37XX: a 1 MiB code buffer)
RUNTIME_FRAME_BYTES = 16  # the Runtime Kernel's own frame at the top of each SHAVE stack
# Schema version written by this package; readers accept the same major and a minor <= ours.
# 1.1 adds header.checksum, 1.2 DPU tasks, 1.3 the Runtime Kernel in act_runtime.kernel (required).
BLOB_VERSION = (1, 3, 0)

MAX_DATA_WINDOW = 64 * 1024  # cap on one invocation's WIN_E image
MAX_ND_DIMS = 15
DEFAULT_STACK_SIZE = 4096  # bytes per SHAVE, as the compiler's default stack_configuration

# Hardware barriers per platform. 37XX (MTL) has 64 and 40XX (LNL) 96, the counts the NPU compiler's
# getNumAvailableBarriers gives for those architectures; virtual barriers are mapped onto these ids with reuse.
MAX_BARRIERS = {"37xx": 64, "40xx": 96}


class DType(IntEnum):
    """Element types; the same numbering is used in the blob schema and in ``MemRefData.dataType``."""

    UNDEFINED = 0
    F32 = 1
    F16 = 2
    BF16 = 3
    I32 = 4
    I16 = 5
    I8 = 6
    U8 = 7
    I64 = 8


def _bf16() -> np.dtype:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


DTYPE_TO_NUMPY: dict[DType, np.dtype] = {
    DType.F32: np.dtype(np.float32),
    DType.F16: np.dtype(np.float16),
    DType.BF16: _bf16(),
    DType.I32: np.dtype(np.int32),
    DType.I16: np.dtype(np.int16),
    DType.I8: np.dtype(np.int8),
    DType.U8: np.dtype(np.uint8),
    DType.I64: np.dtype(np.int64),
}
NUMPY_TO_DTYPE: dict[np.dtype, DType] = {v: k for k, v in DTYPE_TO_NUMPY.items()}


_SHORT_NAMES: dict[str, DType] = {
    "f32": DType.F32, "f16": DType.F16, "bf16": DType.BF16, "i32": DType.I32,
    "i16": DType.I16, "i8": DType.I8, "u8": DType.U8, "i64": DType.I64,
}  # fmt: skip


def dtype_of(value: object) -> DType:
    """The :class:`DType` of a numpy dtype, an ``ElementType``, a short name (``"f32"``) or a ``DType``."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str) and value in _SHORT_NAMES:
        return _SHORT_NAMES[value]
    np_dtype = getattr(value, "numpy", None)  # snippets_core ElementType
    if np_dtype is not None and not callable(np_dtype):
        value = np_dtype
    return NUMPY_TO_DTYPE[np.dtype(value)]  # type: ignore[arg-type]


class MemLocation(IntEnum):
    """``MemRefData.location`` (the shipped kernel headers' enum)."""

    NONE = 0
    DDR = 1
    NN_CMX = 2

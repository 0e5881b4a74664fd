"""The kernel arguments contract between the compiler and SHVX kernels (docs/kernel_abi.md).

A kernel is entered with ``r0 = argsAddr`` (a WIN_E address) and ``r1 = argsSize``. ``argsAddr`` points at a
packed params struct: one :data:`MEMREF_DTYPE` per buffer argument, then the scalars in declaration order
(floats as f32, ints and bools as i64). Its shape is named by a *params signature* such as ``"mm:ff"``
(two MemRefs, two f32), which is also stored in the kernel ELF's note so the loader can check ``args_size``.

Each invocation gets its own WIN_E image::

    [0, ds)          copy of the kernel's .data   (ds = .data size rounded up to 64)
    [ds, ds + P)     the params struct            (args_offset = ds, args_size = P)
    [ds + P, ...)    per MemRef: dims (int32[numDims]) then strides in bits (int64[numDims]), innermost first

Layouts are numpy structured dtypes with explicit offsets, so they are the single definition of each struct.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from snippets_shave.constants import (
    DTYPE_TO_NUMPY,
    MAX_DATA_WINDOW,
    MAX_ND_DIMS,
    WIN_E,
    WIN_F,
    WINDOW_SIZE,
    DType,
    MemLocation,
)
from snippets_shave.errors import KernelAbiError

MEMREF_FIELDS = (
    ("dataAddr", "<u4", 0),  # WIN_F address of element 0
    ("isStatic", "<u4", 4),  # 1: dims/strides are fixed; 0: the kernel writes them (dynamic shapes)
    ("numDims", "<u4", 8),
    ("dimsAddr", "<u4", 12),  # WIN_E address of int32[numDims], innermost first
    ("stridesAddr", "<u4", 16),  # WIN_E address of int64[numDims], in bits, innermost first
    ("dataType", "<u4", 20),  # snippets_shave.constants.DType
    ("dimsOrder", "<u8", 24),  # nibble-packed memory order (see dims_order_code)
    ("location", "<u4", 32),  # MemLocation
    ("reserved", "<u4", 36),
)
MEMREF_DTYPE = np.dtype(
    {
        "names": [f[0] for f in MEMREF_FIELDS],
        "formats": [f[1] for f in MEMREF_FIELDS],
        "offsets": [f[2] for f in MEMREF_FIELDS],
        "itemsize": 40,
    }
)
MEMREF_SIZE = MEMREF_DTYPE.itemsize
SCALAR_FORMATS: dict[str, str] = {"f": "<f4", "i": "<i8", "b": "<i8"}  # f32 floats, i64 ints, i64 0/1 bools


def dims_order_code(order: tuple[int, ...]) -> int:
    """Pack a memory order (logical dim indices, outermost first) into the inverted nibble code.

    Identity orders give 0x21, 0x321, 0x4321 (NCHW); NHWC = (0, 2, 3, 1) gives 0x2431, like the real headers.
    """
    code = 0
    for i, dim in enumerate(order):
        code |= (dim + 1) << (4 * i)
    return code


def dims_order_from_code(code: int, rank: int) -> tuple[int, ...]:
    """Inverse of :func:`dims_order_code`; raises :class:`KernelAbiError` unless it is a permutation."""
    order = tuple(((code >> (4 * i)) & 0xF) - 1 for i in range(rank))
    if sorted(order) != list(range(rank)) or code >> (4 * rank):
        raise KernelAbiError(f"dimsOrder {code:#x} is not a permutation of {rank} dims")
    return order


@dataclass(frozen=True)
class MemRef:
    """A buffer argument as the compiler describes it: where its data is and how it is laid out."""

    data_addr: int  # WIN_F address
    dims: tuple[int, ...]  # logical order
    dtype: DType
    order: tuple[int, ...] | None = None  # memory order, outermost first; None = identity
    strides_bits: tuple[int, ...] | None = None  # logical order; None = dense in memory order
    is_static: bool = True
    location: MemLocation = MemLocation.NN_CMX

    @staticmethod
    def cmx(offset: int, dims: tuple[int, ...] | list[int], dtype: DType) -> MemRef:
        """A dense buffer at byte ``offset`` of the tile's CMX slice."""
        return MemRef(WIN_F + offset, tuple(int(d) for d in dims), DType(dtype))

    @property
    def memory_order(self) -> tuple[int, ...]:
        return self.order if self.order is not None else tuple(range(len(self.dims)))

    @property
    def element_bits(self) -> int:
        return DTYPE_TO_NUMPY[self.dtype].itemsize * 8

    def strides(self) -> tuple[int, ...]:
        """Strides in bits, logical order (dense in memory order unless given)."""
        if self.strides_bits is not None:
            return self.strides_bits
        strides = [0] * len(self.dims)
        step = self.element_bits
        for dim in reversed(self.memory_order):
            strides[dim] = step
            step *= self.dims[dim]
        return tuple(strides)

    def extent_bytes(self) -> int:
        """Bytes from element 0 to one past the last element."""
        if any(d == 0 for d in self.dims):
            return 0
        last = sum((d - 1) * s for d, s in zip(self.dims, self.strides(), strict=True))
        return (last + self.element_bits) // 8


@dataclass(frozen=True)
class ParamsLayout:
    """A per-kernel params struct: named MemRefs, then named scalars of kind ``f``/``i``/``b``."""

    name: str
    memrefs: tuple[str, ...]
    scalars: tuple[tuple[str, str], ...] = ()

    @property
    def signature(self) -> str:
        return "m" * len(self.memrefs) + ":" + "".join(kind for _, kind in self.scalars)

    @staticmethod
    def from_signature(signature: str, name: str = "Params") -> ParamsLayout:
        head, sep, tail = signature.partition(":")
        if not sep or set(head) - {"m"} or set(tail) - set(SCALAR_FORMATS):
            raise KernelAbiError(f"params signature {signature!r} is not of the form 'm...:[fib]...'")
        return ParamsLayout(
            name, tuple(f"m{i}" for i in range(len(head))), tuple((f"s{i}", k) for i, k in enumerate(tail))
        )

    @property
    def dtype(self) -> np.dtype:
        names, formats, offsets = [], [], []
        offset = 0
        for m in self.memrefs:
            names.append(m)
            formats.append(MEMREF_DTYPE)
            offsets.append(offset)
            offset += MEMREF_SIZE
        for s, kind in self.scalars:
            names.append(s)
            formats.append(SCALAR_FORMATS[kind])
            offsets.append(offset)
            offset += np.dtype(SCALAR_FORMATS[kind]).itemsize
        return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": offset})

    @property
    def size(self) -> int:
        return self.dtype.itemsize

    def offset_of(self, field: str) -> int:
        """Byte offset of a MemRef or scalar inside the struct (what an emitter loads from r0)."""
        return int(self.dtype.fields[field][1])  # type: ignore[index]


# The params structs of the kernels this target knows (names follow sw_runtime_kernels' param_*.h).
ELTWISE_UNARY_PARAMS = ParamsLayout("UnaryParams", ("input", "output"))
ELTWISE_BINARY_PARAMS = ParamsLayout("EltwiseParams", ("input0", "input1", "output"))
CLAMP_PARAMS = ParamsLayout("ClampParams", ("input", "output"), (("min", "f"), ("max", "f")))
SOFTMAX_PARAMS = ParamsLayout("SoftmaxParams", ("input", "output"), (("axis", "i"),))
REDUCE_PARAMS = ParamsLayout("ReduceParams", ("input", "output"), (("axis", "i"),))


@dataclass(frozen=True)
class DataWindow:
    """One invocation's WIN_E image and where its params struct sits in it."""

    image: bytes
    args_offset: int
    args_size: int

    @property
    def args_addr(self) -> int:
        return WIN_E + self.args_offset


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def build_data_window(
    layout: ParamsLayout,
    memrefs: list[MemRef] | tuple[MemRef, ...],
    scalars: dict[str, float | int | bool] | None = None,
    data_section: bytes = b"",
) -> DataWindow:
    """Pack the params struct and its dims/strides arrays into a WIN_E image (docs/kernel_abi.md)."""
    scalars = dict(scalars or {})
    if len(memrefs) != len(layout.memrefs):
        raise KernelAbiError(f"{layout.name}: expects {len(layout.memrefs)} MemRefs, got {len(memrefs)}")
    missing = [s for s, _ in layout.scalars if s not in scalars]
    extra = sorted(set(scalars) - {s for s, _ in layout.scalars})
    if missing or extra:
        raise KernelAbiError(f"{layout.name}: scalars missing {missing}, unexpected {extra}")
    ds = _align(len(data_section), 64)
    args_offset = ds
    params = np.zeros((), dtype=layout.dtype)
    arrays = bytearray()
    array_base = args_offset + layout.size
    for name, ref in zip(layout.memrefs, memrefs, strict=True):
        rank = len(ref.dims)
        if rank > MAX_ND_DIMS:
            raise KernelAbiError(f"{layout.name}.{name}: {rank} dims, at most {MAX_ND_DIMS}")
        order = ref.memory_order
        strides = ref.strides()
        mem = list(reversed(order))  # innermost first, like the real compiler
        dims_arr = np.array([ref.dims[d] for d in mem], dtype="<i4").tobytes()
        strides_arr = np.array([strides[d] for d in mem], dtype="<i8").tobytes()
        arrays += bytes(_align(len(arrays), 8) - len(arrays))
        dims_addr = WIN_E + array_base + len(arrays)
        arrays += dims_arr
        arrays += bytes(_align(len(arrays), 8) - len(arrays))
        strides_addr = WIN_E + array_base + len(arrays)
        arrays += strides_arr
        params[name] = (
            ref.data_addr, int(ref.is_static), rank, dims_addr, strides_addr,
            int(ref.dtype), dims_order_code(order), int(ref.location), 0,
        )  # fmt: skip
    for name, kind in layout.scalars:
        value = scalars[name]
        params[name] = int(bool(value)) if kind == "b" else value
    image = bytes(data_section) + bytes(ds - len(data_section)) + params.tobytes() + bytes(arrays)
    if len(image) > MAX_DATA_WINDOW:
        raise KernelAbiError(f"{layout.name}: WIN_E image of {len(image)} bytes exceeds {MAX_DATA_WINDOW}")
    return DataWindow(image, args_offset, layout.size)


@dataclass(frozen=True)
class DecodedMemRef:
    """A MemRefData read back from a WIN_E image, with its arrays resolved."""

    data_addr: int
    is_static: bool
    dims: tuple[int, ...]  # logical order
    strides_bits: tuple[int, ...]  # logical order
    dtype: DType
    order: tuple[int, ...]
    location: MemLocation

    def extent_bytes(self) -> int:
        if any(d == 0 for d in self.dims):
            return 0
        bits = DTYPE_TO_NUMPY[self.dtype].itemsize * 8
        return (sum((d - 1) * s for d, s in zip(self.dims, self.strides_bits, strict=True)) + bits) // 8


@dataclass(frozen=True)
class DecodedParams:
    memrefs: dict[str, DecodedMemRef]
    scalars: dict[str, float | int]


def _window_slice(image: bytes, addr: int, size: int, what: str) -> bytes:
    off = addr - WIN_E
    if not (WIN_E <= addr < WIN_E + WINDOW_SIZE) or off + size > len(image):
        raise KernelAbiError(f"{what} = {addr:#x}: {size} bytes are not inside the WIN_E image ({len(image)} bytes)")
    return image[off : off + size]


def unpack_params(image: bytes, args_offset: int, layout: ParamsLayout, what: str = "params") -> DecodedParams:
    """Read a params struct back from a WIN_E image, checking every address and enum (for the loader)."""
    raw = _window_slice(image, WIN_E + args_offset, layout.size, f"{what} ({layout.signature})")
    params = np.frombuffer(raw, dtype=layout.dtype)[0]
    memrefs: dict[str, DecodedMemRef] = {}
    for name in layout.memrefs:
        m = params[name]
        where = f"{what}.{name}"
        rank = int(m["numDims"])
        if rank > MAX_ND_DIMS:
            raise KernelAbiError(f"{where}.numDims = {rank} exceeds {MAX_ND_DIMS}")
        try:
            dtype = DType(int(m["dataType"]))
            location = MemLocation(int(m["location"]))
        except ValueError:
            raise KernelAbiError(
                f"{where}: dataType {int(m['dataType'])} / location {int(m['location'])} unknown"
            ) from None
        if dtype not in DTYPE_TO_NUMPY:
            raise KernelAbiError(f"{where}.dataType = {dtype.name} has no element size")
        order = dims_order_from_code(int(m["dimsOrder"]), rank)
        dims_mem = np.frombuffer(_window_slice(image, int(m["dimsAddr"]), 4 * rank, f"{where}.dimsAddr"), "<i4")
        strides_mem = np.frombuffer(
            _window_slice(image, int(m["stridesAddr"]), 8 * rank, f"{where}.stridesAddr"), "<i8"
        )
        if (dims_mem < 0).any() or (strides_mem < 0).any():
            raise KernelAbiError(f"{where}: negative dims or strides")
        dims = [0] * rank
        strides = [0] * rank
        for k, d in enumerate(reversed(order)):
            dims[d] = int(dims_mem[k])
            strides[d] = int(strides_mem[k])
        memrefs[name] = DecodedMemRef(
            int(m["dataAddr"]), bool(m["isStatic"]), tuple(dims), tuple(strides), dtype, order, location
        )
    scalars = {s: (float(params[s]) if kind == "f" else int(params[s])) for s, kind in layout.scalars}
    return DecodedParams(memrefs, scalars)

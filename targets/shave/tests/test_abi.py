"""Kernel arguments contract: byte layout against struct.pack, and pack/unpack round trips."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from snippets_shave.abi import (
    CLAMP_PARAMS,
    ELTWISE_BINARY_PARAMS,
    MEMREF_DTYPE,
    SOFTMAX_PARAMS,
    MemRef,
    ParamsLayout,
    build_data_window,
    dims_order_code,
    dims_order_from_code,
    unpack_params,
)
from snippets_shave.constants import WIN_E, WIN_F, DType, MemLocation
from snippets_shave.errors import KernelAbiError


def test_memref_layout_is_the_documented_40_bytes() -> None:
    assert MEMREF_DTYPE.itemsize == 40
    rec = np.zeros((), MEMREF_DTYPE)
    rec[()] = (0x1F000100, 1, 4, 0x1E000080, 0x1E000090, int(DType.F16), 0x4321, 2, 0)
    assert rec.tobytes() == struct.pack("<IIIIIIQII", 0x1F000100, 1, 4, 0x1E000080, 0x1E000090, 2, 0x4321, 2, 0)


def test_dims_order_codes_match_the_real_headers() -> None:
    assert dims_order_code((0, 1, 2, 3)) == 0x4321  # NCHW
    assert dims_order_code((0, 2, 3, 1)) == 0x2431  # NHWC
    assert dims_order_code((0, 1)) == 0x21
    assert dims_order_from_code(0x2431, 4) == (0, 2, 3, 1)
    with pytest.raises(KernelAbiError, match="not a permutation"):
        dims_order_from_code(0x1121, 4)


def test_clamp_params_window_matches_struct_pack() -> None:
    src = MemRef.cmx(0x4000, (2, 3, 5), DType.F32)
    dst = MemRef.cmx(0x8000, (2, 3, 5), DType.F32)
    win = build_data_window(CLAMP_PARAMS, [src, dst], {"min": -1.5, "max": 6.0}, data_section=b"\x07" * 10)
    assert win.args_offset == 64 and win.args_size == 2 * 40 + 8 == CLAMP_PARAMS.size
    assert win.image[:10] == b"\x07" * 10 and win.image[10:64] == bytes(54)
    params = win.image[64 : 64 + 88]
    arrays = 64 + 88
    # first memref: dims at arrays (aligned to 8), strides after (int64)
    d0, s0 = WIN_E + arrays, WIN_E + arrays + 16  # 3 int32 = 12 bytes, padded to 16
    expect = struct.pack("<IIIIIIQII", WIN_F + 0x4000, 1, 3, d0, s0, int(DType.F32), 0x321, 2, 0)
    assert params[:40] == expect
    assert params[80:] == struct.pack("<ff", -1.5, 6.0)
    assert win.image[arrays : arrays + 12] == struct.pack("<iii", 5, 3, 2)  # innermost first
    assert win.image[arrays + 16 : arrays + 40] == struct.pack("<qqq", 32, 160, 480)  # bits


@pytest.mark.parametrize("layout", [ELTWISE_BINARY_PARAMS, CLAMP_PARAMS, SOFTMAX_PARAMS], ids=lambda p: p.name)
def test_round_trip(layout: ParamsLayout) -> None:
    refs = [MemRef(WIN_F + 64 * i, (2, 4, 3, 5), DType.F16, order=(0, 2, 3, 1)) for i in range(len(layout.memrefs))]
    scalars = {name: (0.25 if kind == "f" else -3) for name, kind in layout.scalars}
    win = build_data_window(layout, refs, scalars)
    back = unpack_params(win.image, win.args_offset, layout)
    assert back.scalars == scalars
    for name, ref in zip(layout.memrefs, refs, strict=True):
        got = back.memrefs[name]
        assert got.dims == ref.dims and got.order == ref.order and got.strides_bits == ref.strides()
        assert got.data_addr == ref.data_addr and got.dtype == DType.F16 and got.location == MemLocation.NN_CMX
        assert got.extent_bytes() == 2 * 4 * 3 * 5 * 2
    assert ParamsLayout.from_signature(layout.signature).size == layout.size


def test_bad_windows_raise_typed_errors() -> None:
    win = build_data_window(SOFTMAX_PARAMS, [MemRef.cmx(0, (4,), DType.F32)] * 2, {"axis": 0})
    with pytest.raises(KernelAbiError, match="not inside the WIN_E image"):
        unpack_params(win.image[:-4], win.args_offset, SOFTMAX_PARAMS)
    with pytest.raises(KernelAbiError, match="expects 2 MemRefs"):
        build_data_window(SOFTMAX_PARAMS, [], {"axis": 0})
    with pytest.raises(KernelAbiError, match="missing"):
        build_data_window(SOFTMAX_PARAMS, [MemRef.cmx(0, (4,), DType.F32)] * 2)
    with pytest.raises(KernelAbiError, match="not of the form"):
        ParamsLayout.from_signature("mx:f")

"""Conversions between register forms, bit-exact against the core's numpy references (convert_truncation,
convert_saturation, convert_array) for every pair of f32, f16, bf16, i32, i16, u16, i8, u8 and boolean."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from snippets_core.ir.element_type import ElementType
from snippets_core.ir.ops.convert import convert_array
from snippets_core.ir.ops.snippets import convert_saturation, convert_truncation
from snippets_x86_64.emitters.convert import emit_convert, register_form
from snippets_x86_64.emitters.testing import expected_writable, run_eltwise, written_registers

pytestmark = pytest.mark.avx512

TYPES = [ElementType.f32, ElementType.f16, ElementType.bf16, ElementType.i32, ElementType.i16, ElementType.u16,
         ElementType.i8, ElementType.u8, ElementType.boolean]  # fmt: skip
REFERENCES = {"truncation": convert_truncation, "saturation": convert_saturation, "convert": convert_array}

_EDGES = [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 0.49999997, 126.5, 127.0, 127.5, 128.0, -128.5, -129.0, 254.5,
          255.0, 255.5, 256.0, -1.0, 1e-45, -1e-45, 1e-40, 65504.0, 65520.0, 1e5, -1e5, 32767.5, -32768.5,
          2147483520.0, 2147483648.0, -2147483648.0, -2147483904.0, 3e9, -3e9, 1e30, -1e30, 3.4028235e38,
          np.inf, -np.inf, np.nan, -np.nan, 1.00390625, 1.01171875, 3.3895314e38]  # fmt: skip


def source_values(et: ElementType) -> np.ndarray:
    rng = np.random.default_rng(7)
    if et.is_real:
        x = np.concatenate(
            [_EDGES, rng.standard_normal(3000) * 300, rng.standard_normal(1000) * 1e6, rng.uniform(-3, 3, 1000)]
        ).astype(np.float32)
        with np.errstate(all="ignore"):
            return x.astype(et.numpy)
    if et is ElementType.boolean:
        return rng.integers(0, 2, 300).astype(bool)
    info = np.iinfo(et.numpy)
    edges = np.array([info.min, info.max, 0, 1, -1 if info.min < 0 else 2, 127, 128, 255, 256, -128, -129],
                     dtype=np.int64)  # fmt: skip
    edges = edges[(edges >= info.min) & (edges <= info.max)]
    x = np.concatenate([edges, rng.integers(info.min, info.max, 3000, endpoint=True, dtype=np.int64)])
    return x.astype(et.numpy)


def lanes(x: np.ndarray, et: ElementType) -> np.ndarray:
    """The register form of values of ``et``: f32 or i32 lanes."""
    return x.astype(np.float32 if register_form(et) == "f32" else np.int32)


@pytest.mark.parametrize("mode", sorted(REFERENCES))
@pytest.mark.parametrize("src,dst", list(itertools.product(TYPES, TYPES)), ids=lambda t: str(t))
def test_convert_matches_the_core_reference(mode, src, dst):
    x = source_values(src)
    with np.errstate(all="ignore"):
        want = lanes(REFERENCES[mode](x, dst), dst)
    got = run_eltwise(emit_convert, lanes(x, src), out_dtype=want.dtype, src_type=src, dst_type=dst, mode=mode)
    if want.dtype.kind == "f":
        same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    else:
        same = got == want
    assert same.all(), list(zip(x[~same][:8], got[~same][:8], want[~same][:8]))


@pytest.mark.parametrize(
    "src,dst",
    [
        (ElementType.f32, ElementType.u8),
        (ElementType.f32, ElementType.i32),
        (ElementType.i32, ElementType.bf16),
        (ElementType.f32, ElementType.boolean),
    ],
)
def test_convert_in_place(src, dst):
    x = lanes(source_values(src), src)
    for mode in REFERENCES:
        kw = {"src_type": src, "dst_type": dst, "mode": mode}
        out_dtype = np.float32 if register_form(dst) == "f32" else np.int32
        a = run_eltwise(emit_convert, x, out_dtype=out_dtype, **kw)
        b = run_eltwise(emit_convert, x, out_dtype=out_dtype, alias=0, **kw)
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
        assert written_registers(emit_convert, 1, 0, **kw) <= expected_writable(emit_convert, 1, 0)


def test_bf16_rounding_keeps_denormals_and_nan_payload_quiet():
    bits = np.array([0x0000_8001, 0x0001_8000, 0x0000_7FFF, 0x7F7F_FFFF, 0x7F80_0001, 0xFF80_0000, 0x3F80_8000,
                     0x3F81_8000], dtype=np.uint32)  # fmt: skip
    x = bits.view(np.float32)
    got = run_eltwise(emit_convert, x, src_type=ElementType.f32, dst_type=ElementType.bf16, mode="truncation")
    with np.errstate(all="ignore"):
        want = x.astype(ElementType.bf16.numpy).astype(np.float32)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), [hex(v) for v in got.view(np.uint32)]

"""Select, Convert and FakeQuantize."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.errors import ShapeInferenceError
from snippets_core.frontends import builder as sb
from snippets_core.ir import ElementType, Shape
from snippets_core.ir.ops.convert import Convert
from snippets_core.ir.ops.fake_quantize import FakeQuantize
from snippets_core.ir.ops.io import Constant, Parameter
from snippets_core.ir.ops.select import Select


# --- Select -----------------------------------------------------------------------------------------
def test_select_broadcasts_all_three():
    node = Select(Parameter("boolean", [2, 1, 4]), Parameter("f16", [3, 1]), Parameter("f16", []))
    assert node.outputs[0].shape == Shape([2, 3, 4])
    assert node.outputs[0].element_type is ElementType.f16
    c = np.array([[[True, False, True, False]], [[False, False, True, True]]])
    a = np.array([[1], [2], [3]], np.float16)
    b = np.array(-1, np.float16)
    (y,) = node.evaluate(c, a, b)
    assert y.dtype == np.float16 and y.shape == (2, 3, 4)
    for i in range(2):
        for j in range(3):
            for k in range(4):
                assert y[i, j, k] == (a[j, 0] if c[i, 0, k] else b)


def test_select_errors():
    with pytest.raises(ShapeInferenceError, match="condition must have a boolean"):
        Select(Parameter("f32", [2]), Parameter("f32", [2]), Parameter("f32", [2]))
    with pytest.raises(ShapeInferenceError, match="equal element types"):
        Select(Parameter("boolean", [2]), Parameter("f32", [2]), Parameter("i32", [2]))
    with pytest.raises(ShapeInferenceError, match="broadcastable"):
        Select(Parameter("boolean", [3]), Parameter("f32", [2]), Parameter("f32", [2]))


# --- Convert ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("src", "dst", "x", "expected"), [
    ("f32", "i32", [-1.7, -0.5, 1.7, 2.5, 3.0], [-1, 0, 1, 2, 3]),  # truncation toward zero
    ("f32", "i8", [300.0, -300.0, np.nan, 127.9, -128.9], [127, -128, 0, 127, -128]),  # saturates, NaN -> 0
    ("f32", "u8", [-5.0, 255.9, 256.0, 1.5], [0, 255, 255, 1]),
    ("f32", "i64", [1e19, -1e19, 2.0**40 + 0.5], [2**63 - 1, -(2**63), 2**40]),
    ("i32", "i8", [129, -129, 255, 7], [-127, 127, -1, 7]),  # integers wrap around
    ("f32", "boolean", [0.0, -0.0, 0.1, -3.0], [False, False, True, True]),
    ("i32", "boolean", [0, 5, -1, 0], [False, True, True, False]),
    ("boolean", "f32", [True, False], [1.0, 0.0]),
    ("u8", "f16", [0, 255, 17], [0.0, 255.0, 17.0]),
    ("f16", "f32", [0.5, -2.25, 65504.0], [0.5, -2.25, 65504.0]),
    ("f32", "f16", [1e6, 0.1], [np.inf, 0.0999755859375]),
    ("i32", "bf16", [3, -256, 257], [3.0, -256.0, 256.0]),  # 257 needs 9 mantissa bits: ties to even
])
def test_convert_values(src, dst, x, expected):
    xs = np.array(x).astype(ElementType.parse(src).numpy)
    node = Convert(Parameter(src, [len(x)]), destination_type=dst)
    assert node.outputs[0].element_type is ElementType.parse(dst)
    (y,) = node.evaluate(xs)
    assert y.dtype == ElementType.parse(dst).numpy
    np.testing.assert_array_equal(np.asarray(y, np.float64), np.asarray(expected, np.float64))


def test_convert_to_bf16_rounds_to_nearest_even():
    one = 1.0
    ulp = 2.0**-7  # bf16 keeps 7 explicit mantissa bits
    x = np.array([one + ulp / 2, one + 3 * ulp / 2, one + ulp / 2 + 2.0**-20, -one - ulp / 2], np.float32)
    (y,) = Convert(Parameter("f32", [4]), destination_type="bf16").evaluate(x)
    np.testing.assert_array_equal(y.astype(np.float64), [one, one + 2 * ulp, one + ulp, -one])


def test_convert_rejects_string_and_dynamic():
    with pytest.raises(ShapeInferenceError, match="cannot convert to dynamic"):
        Convert(Parameter("f32", [2]), destination_type="dynamic")


# --- FakeQuantize -----------------------------------------------------------------------------------
def fq_spec(x, il, ih, ol, oh, levels):
    """The OpenVINO FakeQuantize definition, one element at a time (Python's round is half-to-even)."""
    x, il, ih, ol, oh = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in (x, il, ih, ol, oh)))
    out = np.empty(x.shape)
    for i in np.ndindex(x.shape):
        if x[i] <= min(il[i], ih[i]):
            out[i] = ol[i]
        elif x[i] > max(il[i], ih[i]):
            out[i] = oh[i]
        else:
            q = round((x[i] - il[i]) / (ih[i] - il[i]) * (levels - 1))
            out[i] = q / (levels - 1) * (oh[i] - ol[i]) + ol[i]
    return out


def fq_decomposed(x, il, ih, ol, oh, levels):
    """The data-flow decomposition (inventory 3.1): clamp, scale + shift, round half-to-even, dequantize."""
    x, il, ih, ol, oh = (np.asarray(v, np.float64) for v in (x, il, ih, ol, oh))
    isc = (levels - 1) / (ih - il)
    ish = il * isc
    osc = (oh - ol) / (levels - 1)
    return np.rint(np.minimum(np.maximum(x, il), ih) * isc - ish) * osc + ol


@pytest.mark.parametrize("levels", [256, 255, 16, 2])
def test_fake_quantize_per_tensor(levels, real_type, close):
    dt = ElementType.parse(real_type).numpy
    x = np.linspace(-1.5, 2.5, 2 * 3 * 8).reshape(2, 3, 8).astype(dt)
    il, ih, ol, oh = (np.asarray(v, dt) for v in (-1.0, 2.0, -0.5, 0.5))
    node = FakeQuantize(Parameter(real_type, [2, 3, 8]), *(Constant(v) for v in (il, ih, ol, oh)), levels=levels)
    assert node.outputs[0].shape == Shape([2, 3, 8])
    (y,) = node.evaluate(x, il, ih, ol, oh)
    close(y, fq_spec(x, il, ih, ol, oh, levels), real_type)
    np.testing.assert_allclose(fq_spec(x, il, ih, ol, oh, levels), fq_decomposed(x, il, ih, ol, oh, levels),
                               atol=1e-12)


def test_fake_quantize_per_channel_u8_range(close):
    rng = np.random.default_rng(1)
    x = rng.uniform(-4, 4, (1, 3, 4, 4)).astype(np.float32)
    il = np.array([-1.0, -2.0, 0.0], np.float32).reshape(1, 3, 1, 1)
    ih = np.array([1.0, 3.0, 0.5], np.float32).reshape(1, 3, 1, 1)
    ol, oh = np.float32(0), np.float32(255)
    node = FakeQuantize(Parameter("f32", [1, 3, 4, 4]), *(Constant(v) for v in (il, ih, ol, oh)), levels=256)
    (y,) = node.evaluate(x, il, ih, ol, oh)
    expected = fq_spec(x, il, ih, ol, oh, 256)
    close(y, expected, "f32")
    assert np.allclose(expected, np.round(expected))  # an integer grid 0..255, as int8 quantization needs


def test_fake_quantize_errors():
    p = Parameter("f32", [2, 3])
    c = Constant(np.float32(0))
    with pytest.raises(ShapeInferenceError, match="levels"):
        FakeQuantize(p, c, c, c, c, levels=1)
    with pytest.raises(ShapeInferenceError, match="equal element types"):
        FakeQuantize(p, c, Constant(np.float16(1)), c, c, levels=256)
    with pytest.raises(ShapeInferenceError, match="broadcastable"):
        FakeQuantize(p, Constant(np.zeros(4, np.float32)), c, c, c, levels=256)
    with pytest.raises(ShapeInferenceError, match="real element type"):
        FakeQuantize(Parameter("i32", [2]), *(Constant(np.int32(0)),) * 4, levels=256)


def test_builder_select_convert_fq():
    x = sb.parameter([2, 3], "f16")
    s = sb.select(sb.less(x, 0), 0.0, x)
    assert s.element_type is ElementType.f16 and s.node.inputs[1].source.element_type is ElementType.f16
    c = sb.convert(x, "i8")
    assert c.element_type is ElementType.i8 and c.node.destination_type is ElementType.i8
    fq = sb.fake_quantize(x, 0.0, 1.0, 0.0, 1.0, 256)
    assert fq.node.levels == 256
    assert all(i.source.element_type is ElementType.f16 for i in fq.node.inputs)

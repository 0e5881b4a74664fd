"""LayerNormalization (ONNX semantics) and GroupNormalization (OpenVINO v12 semantics)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from snippets_core.errors import ShapeInferenceError
from snippets_core.frontends import builder as sb
from snippets_core.ir import ElementType, Shape
from snippets_core.ir.ops.io import Parameter
from snippets_core.ir.ops.normalization import GroupNormalization, LayerNormalization


def normalize(values: list[float], eps: float) -> list[float]:
    mean = math.fsum(values) / len(values)
    var = math.fsum((v - mean) ** 2 for v in values) / len(values)
    return [(v - mean) / math.sqrt(var + eps) for v in values]


@pytest.mark.parametrize(("axis", "with_bias"), [(-1, True), (1, True), (2, False)])
def test_layer_norm(axis, with_bias, real_type, close):
    dt = ElementType.parse(real_type).numpy
    rng = np.random.default_rng(5)
    x = rng.normal(1.0, 2.0, (2, 3, 4)).astype(dt)
    norm_shape = x.shape[axis:]
    scale = rng.uniform(0.5, 1.5, norm_shape).astype(dt)
    bias = rng.uniform(-1, 1, norm_shape).astype(dt)
    inputs = [Parameter(real_type, [2, 3, 4]), Parameter(real_type, list(norm_shape))]
    if with_bias:
        inputs.append(Parameter(real_type, list(norm_shape)))
    node = LayerNormalization(*inputs, axis=axis, epsilon=1e-3)
    assert node.outputs[0].shape == Shape([2, 3, 4])
    (y,) = node.evaluate(x, scale, *([bias] if with_bias else []))
    a = axis % 3
    expected = np.empty(x.shape)
    for lead in np.ndindex(*x.shape[:a]):
        block = np.asarray(x[lead], np.float64)
        n = normalize([float(v) for v in block.ravel()], 1e-3)
        out = np.array(n).reshape(block.shape) * scale.astype(np.float64)
        if with_bias:
            out = out + bias.astype(np.float64)
        expected[lead] = out
    close(y, expected, real_type)


def test_layer_norm_errors():
    with pytest.raises(ShapeInferenceError, match="does not broadcast to the data shape"):
        LayerNormalization(Parameter("f32", [2, 4]), Parameter("f32", [2, 2, 4]))
    with pytest.raises(ShapeInferenceError, match="axis 2 is out of range"):
        LayerNormalization(Parameter("f32", [2, 4]), Parameter("f32", [4]), axis=2)
    with pytest.raises(ShapeInferenceError, match="equal element types"):
        LayerNormalization(Parameter("f32", [2, 4]), Parameter("f16", [4]))


def test_group_norm(real_type, close):
    dt = ElementType.parse(real_type).numpy
    rng = np.random.default_rng(6)
    n, c, h, w, g = 2, 6, 3, 2, 3
    x = rng.normal(0.5, 1.5, (n, c, h, w)).astype(dt)
    scale = rng.uniform(0.5, 1.5, c).astype(dt)
    bias = rng.uniform(-1, 1, c).astype(dt)
    node = GroupNormalization(Parameter(real_type, [n, c, h, w]), Parameter(real_type, [c]),
                              Parameter(real_type, [c]), num_groups=g, epsilon=1e-4)
    assert node.outputs[0].shape == Shape([n, c, h, w])
    (y,) = node.evaluate(x, scale, bias)
    expected = np.empty(x.shape)
    per = c // g
    for b in range(n):
        for gi in range(g):
            block = x[b, gi * per:(gi + 1) * per].astype(np.float64)
            normed = np.array(normalize([float(v) for v in block.ravel()], 1e-4)).reshape(block.shape)
            for k in range(per):
                ch = gi * per + k
                expected[b, ch] = normed[k] * float(scale[ch]) + float(bias[ch])
    close(y, expected, real_type)


def test_group_norm_errors():
    with pytest.raises(ShapeInferenceError, match="6 channels do not divide into 4 groups"):
        GroupNormalization(Parameter("f32", [1, 6, 2]), Parameter("f32", [6]), Parameter("f32", [6]), num_groups=4)
    with pytest.raises(ShapeInferenceError, match=r"scale has shape \[4\], expected \[6\]"):
        GroupNormalization(Parameter("f32", [1, 6, 2]), Parameter("f32", [4]), Parameter("f32", [6]), num_groups=2)
    with pytest.raises(ShapeInferenceError, match="rank >= 2"):
        GroupNormalization(Parameter("f32", [6]), Parameter("f32", [6]), Parameter("f32", [6]), num_groups=2)
    assert GroupNormalization(Parameter("f32", [None, None, 5]), Parameter("f32", [6]), Parameter("f32", [6]),
                              num_groups=2).outputs[0].shape == Shape([None, None, 5])


def test_builder_normalization():
    x = sb.parameter([2, 8, 16], "f16")
    ln = sb.layer_normalization(x, np.ones(16), np.zeros(16), axis=-1, epsilon=1e-6)
    assert ln.node.epsilon == 1e-6 and ln.node.inputs[1].source.element_type is ElementType.f16
    assert len(sb.layer_normalization(x, np.ones(16)).node.inputs) == 2
    gn = sb.group_normalization(x, np.ones(8), np.zeros(8), num_groups=4)
    assert gn.node.num_groups == 4 and gn.shape == Shape([2, 8, 16])

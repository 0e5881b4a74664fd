"""GeluFusion: the written-out Gelu of torch (erf) and GPT-2 (tanh), in the orders and groupings exporters write,
becomes one Gelu op; a form with an intermediate read elsewhere or another constant stays as it is. Values against
numpy float64 of the formula."""

from __future__ import annotations

import math

import numpy as np
import pytest

from snippets_core.frontends import builder as sb
from snippets_core.ir.evaluate import evaluate_model
from snippets_core.passes.gelu_fusion import GeluFusion

RNG = np.random.default_rng(20261128)
S2 = np.float32(math.sqrt(2.0))
C = math.sqrt(2.0 / math.pi)


def _erf(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(C * (x + 0.044715 * x**3)))


def _one_plus_erf(x, by_mul=False):  # type: ignore[no-untyped-def]
    u = sb.multiply(x, np.float32(1 / math.sqrt(2.0))) if by_mul else sb.divide(x, S2)
    return sb.add(sb.erf(u), np.float32(1.0))


def _one_plus_tanh(x, pow_cube=True):  # type: ignore[no-untyped-def]
    cube = sb.power(x, np.float32(3.0)) if pow_cube else sb.multiply(sb.multiply(x, x), x)
    inner = sb.multiply(sb.add(x, sb.multiply(cube, np.float32(0.044715))), np.float32(C))
    return sb.add(np.float32(1.0), sb.tanh(inner))


FORMS = {
    # torch.onnx: (x * (1 + erf(x / sqrt2))) * 0.5
    "erf_torch": (lambda x: sb.multiply(sb.multiply(x, _one_plus_erf(x)), np.float32(0.5)), _erf, "erf"),
    "erf_half_x_first": (lambda x: sb.multiply(sb.multiply(x, np.float32(0.5)), _one_plus_erf(x, True)), _erf, "erf"),
    "erf_half_inside": (lambda x: sb.multiply(x, sb.multiply(_one_plus_erf(x), np.float32(0.5))), _erf, "erf"),
    "tanh_gpt2": (lambda x: sb.multiply(sb.multiply(x, np.float32(0.5)), _one_plus_tanh(x)), _tanh, "tanh"),
    "tanh_cube_by_mul": (lambda x: sb.multiply(np.float32(0.5), sb.multiply(x, _one_plus_tanh(x, False))), _tanh,
                         "tanh"),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_written_out_gelu_becomes_one_op(form):
    graph, oracle, mode = FORMS[form]
    x = sb.parameter([3, 40], "f32", name="x")
    model = sb.model([sb.relu(graph(sb.add(x, np.float32(0.25))))], name="gelu")
    assert GeluFusion().run(model)
    ops = [n.type_name for n in model.get_ordered_ops() if n.type_name not in ("Parameter", "Result", "Constant")]
    assert ops == ["Add", "Gelu", "Relu"]
    (gelu,) = [n for n in model.get_ordered_ops() if n.type_name == "Gelu"]
    assert gelu.approximation_mode == mode
    (x_node,) = model.parameters
    assert len(x_node.outputs[0].targets) == 1  # the written-out ops are gone, not left reading x
    xs = (3 * RNG.standard_normal((3, 40))).astype(np.float32)
    (out,) = evaluate_model(model, {"x": xs}).values()
    np.testing.assert_allclose(out, np.maximum(oracle(xs.astype(np.float64) + 0.25), 0), rtol=1e-5, atol=1e-6)


def test_an_intermediate_read_elsewhere_keeps_the_form():
    x = sb.parameter([4, 16], "f32", name="x")
    one_plus = _one_plus_erf(x)
    model = sb.model([sb.multiply(sb.multiply(x, one_plus), np.float32(0.5)), one_plus], name="gelu_shared")
    assert not GeluFusion().run(model)
    assert "Gelu" not in [n.type_name for n in model.get_ordered_ops()]


@pytest.mark.parametrize("half, scale", [(0.6, S2), (0.5, np.float32(2.0))])
def test_other_constants_keep_the_form(half, scale):
    x = sb.parameter([4, 16], "f32", name="x")
    one_plus = sb.add(sb.erf(sb.divide(x, scale)), np.float32(1.0))
    model = sb.model([sb.multiply(sb.multiply(x, one_plus), np.float32(half))], name="not_gelu")
    assert not GeluFusion().run(model)

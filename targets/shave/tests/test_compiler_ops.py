"""Every op the shave target fuses, through compile_model(target="shave") and the simulator, against numpy.

Tolerances (docs/kernel_abi.md, "Generated kernels"): add, sub, mul, div, max, min, abs, neg, sqrt, relu,
clamp, prelu, squared difference, hswish, hsigmoid and reduce-max are bit-exact in f32, and in f16 equal to
numpy's float16 of the f32 result; exp-based ops (exp, log, sigmoid, tanh, elu, swish, softplus, powers)
are within rtol 1e-5 / atol 1e-6 of float64 in f32 and 2 f16 ulps (rtol 2e-3) in f16; softmax and
reduce-sum are within rtol 1e-5 in f32, and in f16 are computed and accumulated on f32 lanes and rounded once:
within 1 f16 ulp of float64 (rtol 1e-3, atol 2**-24; measured at most 0.5003 ulp).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from snippets_core import compile_model
from snippets_core.config import CompileConfig
from snippets_core.frontends import builder as sb
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_shave.compiler import compile_model as shave_compile_model

F32_TOL = {"rtol": 1e-5, "atol": 1e-6}
F16_TOL = {"rtol": 2e-3, "atol": 2e-3}
F16_SUM_TOL = {"rtol": 1e-3, "atol": 2.0**-24}


def _f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-_f64(x)))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(_f64(x) - _f64(x).max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _inputs(shapes: list[tuple[int, ...]], dtype: type, seed: int = 0, positive: bool = False) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for s in shapes:
        a = rng.uniform(0.05, 4.0, s) if positive else rng.uniform(-4.0, 4.0, s)
        arrays.append(a.astype(dtype))
    return arrays


#: ops the shave target has emitters for but the core Tokenizer does not fuse (as in OpenVINO): the tests
#: wrap them in a Subgraph themselves and call the shave compiler on that model
NOT_TOKENIZED = ("hsigmoid", "log", "softplus")


def _run(
    build: Callable[..., object], arrays: list[np.ndarray], config: dict | None = None, tokenize: bool = True
) -> np.ndarray:
    et = "f32" if arrays[0].dtype == np.float32 else "f16"
    params = [sb.parameter(list(a.shape), et, name=f"x{i}") for i, a in enumerate(arrays)]
    out = build(*params)
    model = sb.model([out], name="op")
    if tokenize:
        cm = compile_model(model, target="shave", config=config)
    else:
        outer = [sb.parameter(list(a.shape), et, name=f"x{i}") for i, a in enumerate(arrays)]
        sg = Subgraph(*outer, body=model, name="op_subgraph")
        cm = shave_compile_model(sb.model([sg.outputs[0]], outer, name="op"), CompileConfig.from_mapping(config), None)
    assert len(cm.subgraphs) == 1, "the op must be fused (the shave target runs only Subgraphs)"
    result = cm({f"x{i}": a for i, a in enumerate(arrays)})
    (value,) = result.values()
    return value


# op name -> (builder, numpy on the f32/f16 arrays, number of inputs, positive inputs)
EXACT: dict[str, tuple[Callable[..., object], Callable[..., np.ndarray], int]] = {
    "add": (sb.add, lambda a, b: a + b, 2),
    "sub": (sb.subtract, lambda a, b: a - b, 2),
    "mul": (sb.multiply, lambda a, b: a * b, 2),
    "div": (sb.divide, lambda a, b: a / b, 2),
    "max": (sb.maximum, np.maximum, 2),
    "min": (sb.minimum, np.minimum, 2),
    "abs": (sb.abs, np.abs, 1),
    "neg": (sb.negative, np.negative, 1),
    "relu": (sb.relu, lambda a: np.maximum(a, 0), 1),
    "clamp": (lambda x: sb.clamp(x, -1.25, 2.5), lambda a: np.clip(a, a.dtype.type(-1.25), a.dtype.type(2.5)), 1),
    "prelu": (sb.prelu, lambda a, s: np.where(a < 0, a * s, a), 2),
    "squared_difference": (sb.squared_difference, lambda a, b: (a - b) * (a - b), 2),
    "hswish": (sb.hswish, lambda a: a * np.clip(a + a.dtype.type(3), 0, 6) / a.dtype.type(6), 1),
    "hsigmoid": (sb.hsigmoid, lambda a: np.clip(a + a.dtype.type(3), 0, 6) / a.dtype.type(6), 1),
}


@pytest.mark.parametrize("op", sorted(EXACT))
def test_exact_ops_f32(op: str) -> None:
    build, ref, n = EXACT[op]
    arrays = _inputs([(3, 5, 11)] * n, np.float32, seed=len(op))
    got = _run(build, arrays, tokenize=op not in NOT_TOKENIZED)
    assert got.dtype == np.float32 and got.shape == (3, 5, 11)
    np.testing.assert_array_equal(got, ref(*arrays))


@pytest.mark.parametrize("op", sorted(EXACT))
def test_exact_ops_f16_as_numpy_float16(op: str) -> None:
    build, ref, n = EXACT[op]
    arrays = _inputs([(2, 3, 21)] * n, np.float16, seed=len(op))
    got = _run(build, arrays, tokenize=op not in NOT_TOKENIZED)
    # numpy computes float16 ops in float32 and rounds once: the same as the reference for a chain
    want = ref(*[a.astype(np.float32) for a in arrays]).astype(np.float16)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want)


def test_sqrt_is_correctly_rounded() -> None:
    (a,) = _inputs([(4, 9)], np.float32, positive=True)
    np.testing.assert_array_equal(_run(sb.sqrt, [a]), np.sqrt(a))
    (h,) = _inputs([(4, 9)], np.float16, positive=True)
    np.testing.assert_array_equal(_run(sb.sqrt, [h]), np.sqrt(h.astype(np.float32)).astype(np.float16))


TRANSCENDENTAL: dict[str, tuple[Callable[..., object], Callable[..., np.ndarray], bool]] = {
    "exp": (sb.exp, lambda a: np.exp(_f64(a)), False),
    "log": (sb.log, lambda a: np.log(_f64(a)), True),
    "sigmoid": (sb.sigmoid, _sigmoid, False),
    "tanh": (sb.tanh, lambda a: np.tanh(_f64(a)), False),
    "elu": (lambda x: sb.elu(x, 0.7), lambda a: np.where(a > 0, _f64(a), 0.7 * np.expm1(_f64(a))), False),
    "swish": (sb.swish, lambda a: _f64(a) * _sigmoid(a), False),
    "softplus": (sb.softplus, lambda a: np.logaddexp(0.0, _f64(a)), False),
    "power_m1": (lambda x: sb.power(x, -1.0), lambda a: 1.0 / _f64(a), True),
    "power_half": (lambda x: sb.power(x, 0.5), lambda a: np.sqrt(_f64(a)), True),
    "power_m_half": (lambda x: sb.power(x, -0.5), lambda a: 1.0 / np.sqrt(_f64(a)), True),
    "power_3": (lambda x: sb.power(x, 3.0), lambda a: _f64(a) ** 3, False),
    "power_1_7": (lambda x: sb.power(x, 1.7), lambda a: _f64(a) ** 1.7, True),
}


@pytest.mark.parametrize("op", sorted(TRANSCENDENTAL))
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_transcendental_ops_within_tolerance(op: str, dtype: type) -> None:
    build, ref, positive = TRANSCENDENTAL[op]
    (a,) = _inputs([(3, 17)], dtype, seed=7, positive=positive)
    got = _run(build, [a], tokenize=op not in NOT_TOKENIZED)
    assert got.dtype == dtype
    tol = F32_TOL if dtype == np.float32 else F16_TOL
    np.testing.assert_allclose(_f64(got), ref(a), **tol)


def test_swish_with_beta() -> None:
    (a,) = _inputs([(2, 13)], np.float32, seed=3)
    got = _run(lambda x: sb.swish(x, sb.constant(np.float32(1.5))), [a])
    np.testing.assert_allclose(_f64(got), _f64(a) * _sigmoid(1.5 * _f64(a)), **F32_TOL)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(4, 13), (2, 3, 10), (3, 4)])
def test_softmax_last_axis(dtype: type, shape: tuple[int, ...]) -> None:
    (a,) = _inputs([shape], dtype, seed=11)
    got = _run(lambda x: sb.softmax(x, -1), [a])
    tol = F32_TOL if dtype == np.float32 else F16_SUM_TOL
    np.testing.assert_allclose(_f64(got), _softmax(a), **tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_reductions_last_axis(dtype: type) -> None:
    keep_dims = True  # the Tokenizer fuses reductions that keep their dims, as in OpenVINO
    (a,) = _inputs([(2, 5, 19)], dtype, seed=5)
    got_max = _run(lambda x: sb.reduce_max(x, [-1], keep_dims=keep_dims), [a])
    np.testing.assert_array_equal(got_max, a.max(-1, keepdims=keep_dims))
    got_sum = _run(lambda x: sb.reduce_sum(x, [-1], keep_dims=keep_dims), [a])
    tol = F32_TOL if dtype == np.float32 else F16_SUM_TOL
    np.testing.assert_allclose(_f64(got_sum), _f64(a).sum(-1, keepdims=keep_dims), **tol)


def _f16_ulps(got: np.ndarray, want: np.ndarray) -> float:
    """The largest error of ``got`` in units of the f16 spacing at the exact value ``want`` (float64)."""
    spacing = np.spacing(np.abs(want).astype(np.float16)).astype(np.float64)
    return float(np.max(np.abs(_f64(got) - want) / spacing))


@pytest.mark.parametrize("shape", [(8, 256), (3, 1000), (2, 3, 19)])
def test_f16_softmax_and_reduce_sum_round_once(shape: tuple[int, ...]) -> None:
    # long rows: accumulating in f16 would be ~10 ulps off; on f32 lanes the result is float64's within
    # rounding, i.e. at most one f16 ulp from float64 rounded to f16
    (a,) = _inputs([shape], np.float16, seed=len(shape))
    softmax = _run(lambda x: sb.softmax(x, -1), [a])
    assert softmax.dtype == np.float16
    assert _f16_ulps(softmax, _softmax(a)) <= 0.51
    np.testing.assert_allclose(_f64(softmax), _softmax(a), **F16_SUM_TOL)
    total = _run(lambda x: sb.reduce_sum(x, [-1], keep_dims=True), [a])
    want = _f64(a).sum(-1, keepdims=True)
    assert total.dtype == np.float16
    assert _f16_ulps(total, want) <= 0.51
    np.testing.assert_allclose(_f64(total), want, **F16_SUM_TOL)


@pytest.mark.parametrize("saturate", [False, True])
def test_convert_f32_f16(saturate: bool) -> None:
    a = np.array([[0.1, -2.5, 7e4, -1e5, 3.0, 65519.0, 1e-8]], dtype=np.float32)
    build = (
        (lambda x: sb.make("ConvertSaturation", x, destination_type="f16"))
        if saturate
        else (lambda x: sb.convert(x, "f16"))
    )
    # ConvertSaturation is what passes insert; the Tokenizer fuses only Convert, so it gets a Subgraph of its own
    got = _run(lambda x: sb.relu(build(sb.multiply(x, 1.0))), [a], tokenize=not saturate)
    with np.errstate(over="ignore"):
        want = a.astype(np.float16) if not saturate else np.clip(a, -65504, 65504).astype(np.float16)
    np.testing.assert_array_equal(got, np.maximum(want, 0))
    h = np.array([[0.1, -2.5, 3.0, 65504.0, 6e-8]], dtype=np.float16)
    got32 = _run(lambda x: sb.multiply(sb.convert(x, "f32"), 2.0), [h])
    np.testing.assert_array_equal(got32, h.astype(np.float32) * 2)

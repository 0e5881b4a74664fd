"""compile_model / CompiledModel on the reference target: numerics against numpy, typed errors."""

from __future__ import annotations

import numpy as np
import pytest

import snippets_core as sc
from snippets_core.config import ConfigError
from snippets_core.errors import InputError, SnippetsError, TargetNotFoundError
from snippets_core.frontends import builder as sb


def _model():
    x = sb.parameter([2, 3, 8], "f32", name="x")
    y = sb.parameter([1, 3, 1], "f32", name="y")
    a = sb.relu(sb.add(x, y))
    b = sb.sigmoid(sb.multiply(a, 2.0))
    s = sb.make("Log", b)  # no tokenizer takes Log: it stays outside the Subgraph
    return sb.model([s], name="m")


def _numpy(x, y):
    b = 1 / (1 + np.exp(-2 * np.maximum(x + y, 0).astype(np.float64)))
    return np.log(b)


@pytest.fixture
def inputs():
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((2, 3, 8), dtype=np.float32),
            "y": rng.standard_normal((1, 3, 1), dtype=np.float32)}


def test_matches_numpy_and_lists_subgraphs(inputs):
    cm = sc.compile_model(_model(), target="reference")
    (out,) = cm(inputs).values()
    np.testing.assert_allclose(out, _numpy(inputs["x"], inputs["y"]), rtol=1e-5, atol=1e-6)
    assert out.dtype == np.float32
    assert len(cm.subgraphs) == 1
    assert [op.type_name for op in cm.subgraphs[0].body_ops] == ["Add", "Relu", "Multiply", "Sigmoid"]
    placement = cm.placement()
    assert [p[1] for p in placement] == ["Subgraph", "Log"]
    text = cm.describe()
    assert "Add, Relu, Multiply, Sigmoid" in text and "Log x1" in text


def test_user_model_is_not_modified(inputs):
    m = _model()
    before = m.to_text()
    sc.compile_model(m)
    assert m.to_text() == before
    assert m.count("Subgraph") == 0


def test_preallocated_outputs_are_written(inputs):
    cm = sc.compile_model(_model())
    name = cm.output_names[0]
    dst = np.full((2, 3, 8), np.nan, dtype=np.float32)
    res = cm(inputs, outputs={name: dst})
    assert res[name] is dst
    np.testing.assert_allclose(dst, _numpy(inputs["x"], inputs["y"]), rtol=1e-5, atol=1e-6)
    with pytest.raises(InputError, match="must be a writeable C-contiguous float32\\[2, 3, 8\\], got float32\\[2, 3\\]"):
        cm(inputs, outputs={name: np.zeros((2, 3), np.float32)})
    with pytest.raises(InputError, match="unknown output 'nope'"):
        cm(inputs, outputs={"nope": dst})


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("y"), "missing input 'y'"),
        (lambda d: d.update(z=np.zeros(1)), "unknown input 'z'"),
        (lambda d: d.update(x=d["x"].astype(np.float64)), "input 'x' must be f32 \\(float32\\), got float64"),
        (lambda d: d.update(x=d["x"][:, :, :4]), "input 'x' must have shape \\[2,3,8\\], got \\[2, 3, 4\\]"),
        (lambda d: d.update(y=d["y"][0]), "input 'y' must have shape \\[1,3,1\\], got \\[3, 1\\]"),
    ],
)
def test_bad_inputs_are_typed_errors(inputs, mutate, message):
    cm = sc.compile_model(_model())
    mutate(inputs)
    with pytest.raises(InputError, match=message):
        cm(inputs)


def test_inputs_must_be_a_mapping(inputs):
    cm = sc.compile_model(_model())
    with pytest.raises(InputError, match="dict of arrays by name"):
        cm([inputs["x"], inputs["y"]])


def test_dynamic_dims_accept_any_size():
    x = sb.parameter([None, 4], "f32", name="x")
    m = sb.model([sb.exp(sb.abs(x))])
    cm = sc.compile_model(m)
    for n in (1, 5):
        a = np.linspace(-1, 1, n * 4, dtype=np.float32).reshape(n, 4)
        (out,) = cm({"x": a}).values()
        np.testing.assert_allclose(out, np.exp(np.abs(a)), rtol=1e-6)


def test_unknown_target_lists_installed_and_builtin():
    with pytest.raises(TargetNotFoundError) as e:
        sc.compile_model(_model(), target="no-such-target")
    assert "no target named 'no-such-target'" in str(e.value)
    assert "reference" in str(e.value) and "interpreter" in str(e.value)


def test_unknown_config_key_is_a_typed_error():
    with pytest.raises(ConfigError, match="unknown config key 'bogus'"):
        sc.compile_model(_model(), config={"bogus": 1})
    with pytest.raises(ConfigError, match="num_threads"):
        sc.compile_model(_model(), config={"num_threads": 0})
    assert issubclass(ConfigError, SnippetsError)


def test_snippets_mode_disable_fuses_nothing(inputs):
    cm = sc.compile_model(_model(), config={"snippets_mode": "Disable"})
    assert cm.subgraphs == []
    (out,) = cm(inputs).values()
    np.testing.assert_allclose(out, _numpy(inputs["x"], inputs["y"]), rtol=1e-5, atol=1e-6)


def test_run_stats_time_every_step(inputs):
    cm = sc.compile_model(_model())
    cm(inputs)
    st = cm.last_run_stats
    assert [s[1] for s in st.steps] == ["Subgraph", "Log"]
    assert st.total >= 0 and set(st.by_where()) == {"reference"}


def test_preallocated_outputs_go_straight_to_an_executor_that_takes_them(inputs):
    """A Subgraph whose output is a model output gets the caller's array (no copy) when its executor
    accepts ``outs``; checked with a spy executor standing in for a target kernel."""
    from snippets_core.runtime import compiled_model as cmod

    x = sb.parameter([4, 8], "f32", name="x")
    m = sb.model([sb.relu(sb.add(x, 1.0))])
    cm = sc.compile_model(m)
    (step,) = cm._steps
    seen = {}

    def kernel(args, outs=None):
        seen["outs"] = outs
        out = outs[0] if outs and outs[0] is not None else np.empty((4, 8), np.float32)
        np.maximum(args[0] + 1.0, 0, out=out)
        return [out]

    assert cmod._accepts_outs(kernel) and not cmod._accepts_outs(lambda args: args)
    cm2 = cmod.CompiledModel(cm.model, cm.target, cm.config, {step.node.id: (kernel, "spy")})
    name = cm2.output_names[0]
    a = np.linspace(-2, 2, 32, dtype=np.float32).reshape(4, 8)
    dst = np.empty((4, 8), np.float32)
    res = cm2({"x": a}, outputs={name: dst})
    assert seen["outs"][0] is dst and res[name] is dst
    np.testing.assert_array_equal(dst, np.maximum(a + 1, 0))
    with pytest.raises(InputError, match="writeable C-contiguous"):
        cm2({"x": a}, outputs={name: np.empty((8, 4), np.float32).T})


@pytest.mark.parametrize("target", ["interpreter", "x86_64_avx512"])
def test_fused_convert_and_fake_quantize_agree_with_the_unfused_ops(target):
    """CommonOptimizations runs on every Subgraph (FakeQuantize decomposed) and a fused Convert keeps
    the graph Convert's semantics, out-of-range values included; numpy formulas are the oracle."""
    from snippets_core.plugins.targets import load_target, target_names

    if target != "interpreter":
        if target not in target_names():
            pytest.skip(f"{target} is not installed")
        reason = load_target(target).available()
        if reason:
            pytest.skip(reason)
    x = sb.parameter([2, 37], "f32", name="x")
    conv = sb.convert(sb.multiply(x, 300.0), "i8")  # many values out of i8 range
    fq = sb.fake_quantize(sb.add(x, 0.5), -1.0, 1.0, -1.0, 1.0, 255)
    m = sb.model([conv, fq], name="q")
    a = np.random.default_rng(3).standard_normal((2, 37)).astype(np.float32)
    cm = sc.compile_model(m, target=target)
    assert len(cm.subgraphs) == 2 and all(st[2] == target for st in cm.placement())
    fused = [op.type_name for sg in cm.subgraphs for op in sg.body_ops]
    assert "FakeQuantize" not in fused and "Round" in fused
    out = cm({"x": a})
    conv_name, fq_name = cm.output_names
    # Convert: truncate toward zero, saturate to the i8 range
    expected_conv = np.clip(np.trunc(a.astype(np.float64) * np.float32(300.0)), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(out[conv_name], expected_conv)
    v = a.astype(np.float64) + 0.5
    step = 2.0 / 254
    expected_fq = np.where(v <= -1, -1.0, np.where(v > 1, 1.0, np.round((v + 1) / step) * step - 1))
    np.testing.assert_allclose(out[fq_name], expected_fq, atol=2e-7)


@pytest.mark.parametrize("target", ["interpreter", "x86_64_avx512"])
def test_inputs_of_different_ranks_are_aligned_before_lowering(target):
    """A rank-0 scalar input beside ranked ones (as ONNX Clip/Where tests have) compiles: the body's
    inputs are rank-aligned by Canonicalization instead of failing the LinearIR shape check."""
    from snippets_core.plugins.targets import load_target, target_names

    if target != "interpreter" and (target not in target_names() or load_target(target).available()):
        pytest.skip(f"{target} is not available here")
    x = sb.parameter([2, 3], "f32", name="x")
    s = sb.parameter([], "f32", name="s")
    v = sb.parameter([3], "f32", name="v")
    m = sb.model([sb.maximum(sb.add(x, v), s)])
    rng = np.random.default_rng(1)
    xi, vi = rng.random((2, 3), dtype=np.float32), rng.random(3, dtype=np.float32)
    cm = sc.compile_model(m, target=target, config={"snippets_mode": "IgnoreCallback"})
    assert [p[2] for p in cm.placement()] == [target]
    (out,) = cm({"x": xi, "s": np.array(1.2, np.float32), "v": vi}).values()
    np.testing.assert_array_equal(out, np.maximum(xi + vi, np.float32(1.2)))


def test_interpreter_runs_the_transformer_example_like_onnx_reference():
    """The attention block's body keeps the Keys' Transpose; the interpreter decomposes it into reordered
    loads, so the whole example compiles and matches onnx's own ReferenceEvaluator."""
    from pathlib import Path

    import onnx
    from onnx.reference import ReferenceEvaluator

    path = Path(__file__).resolve().parents[2] / "examples" / "transformer_block.onnx"
    proto = onnx.load(str(path))
    cm = sc.compile_model(str(path), target="interpreter")
    assert any("MatMul" in [op.type_name for op in sg.body_ops] for sg in cm.subgraphs)
    assert all(where != "reference" for _, t, where in cm.placement() if t == "Subgraph")
    rng = np.random.default_rng(0)
    feeds = {}
    for i in proto.graph.input:
        dims = [d.dim_value for d in i.type.tensor_type.shape.dim]
        feeds[i.name] = rng.standard_normal(dims).astype(np.float32)
    (expected,) = ReferenceEvaluator(proto).run(None, feeds)
    (got,) = cm(feeds).values()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)

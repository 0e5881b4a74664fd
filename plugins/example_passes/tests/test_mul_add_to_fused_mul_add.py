"""MulAddToFusedMulAdd, FusedMulAdd and their emitters, with the plugin registered by hand (nothing installed).

Oracles: expected IR text for the pass, numpy for the numbers. ``two_product_inputs`` makes the fusion visible
in the numbers alone: with ``c = -fl32(a * b)`` the unfused ops give exactly 0 and a fused multiply-add gives
the rounding error of the product, ``a * b - fl32(a * b)``, which float64 computes exactly.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from snippets_core.errors import PassPositionError, ShapeInferenceError
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add, Multiply
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.ops.unary import Relu
from snippets_core.passes.data_flow_pipeline import DataFlowConfig, data_flow_pipeline
from snippets_core.passes.pass_manager import PassPipeline, PassPosition, PositionedPass
from snippets_core.plugins import ENV_BLOCK, ENV_DISABLE_AUTOLOAD, PluginHost, get_host, reset_hosts
from snippets_core.runtime.compiled_model import compile_model
from snippets_example_passes import plugin as example
from snippets_example_passes.fused_mul_add import FusedMulAdd
from snippets_example_passes.mul_add_to_fused_mul_add import MulAddToFusedMulAdd

X86 = "x86_64_avx512"


@pytest.fixture
def host() -> PluginHost:
    h = PluginHost(autoload=False)
    assert h.register(example, "example_passes") == "example_passes"
    return h


@pytest.fixture
def shared_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginHost]:
    """The host compile_model uses, without autoloading, with only this plugin registered by hand."""
    monkeypatch.setenv(ENV_DISABLE_AUTOLOAD, "1")
    monkeypatch.delenv(ENV_BLOCK, raising=False)
    reset_hosts()
    h = get_host()
    h.register(example, "example_passes")
    yield h
    reset_hosts()


# --- the position -------------------------------------------------------------------------------------------
def test_pass_is_placed_right_after_its_anchor(host: PluginHost) -> None:
    passes = host.positioned_passes("interpreter", {})
    assert passes == [PositionedPass(MulAddToFusedMulAdd(), PassPosition("convert-power-to-power-static", after=True))]
    assert data_flow_pipeline(DataFlowConfig(), passes).names() == [
        "layer-norm-decomposition",
        "graph-reduce-decomposition",
        "broadcast-to-move-broadcast",
        "reduce-to-snippets-reduce",
        "convert-constants-to-scalars",
        "convert-power-to-power-static",
        "mul-add-to-fused-mul-add",
        "constant-folding",
        "convert-constants-to-scalars",
    ]
    # With a precision table (as x86-64 passes) the fused op comes before PropagatePrecision, which then sees it.
    with_precisions = DataFlowConfig(supported_precisions={})
    names = data_flow_pipeline(with_precisions, host.positioned_passes(X86, {})).names()
    assert names[names.index("convert-power-to-power-static") :][:3] == [
        "convert-power-to-power-static",
        "mul-add-to-fused-mul-add",
        "propagate-precision",
    ]


def test_only_targets_with_an_emitter_get_the_pass(host: PluginHost) -> None:
    for name in ("reference", "shave", "some_other_target"):
        assert host.positioned_passes(name, {}) == []
        assert host.register_emitters(name) == {}
    assert list(host.register_emitters("interpreter")) == ["FusedMulAdd"]


def test_unknown_anchor_is_a_pass_position_error() -> None:
    bad = PositionedPass(MulAddToFusedMulAdd(), PassPosition("convert-power-to-powerstatic", after=True))
    with pytest.raises(PassPositionError, match="'mul-add-to-fused-mul-add' after convert-power-to-powerstatic"):
        data_flow_pipeline(DataFlowConfig(), [bad])
    pipeline = PassPipeline("data-flow", [MulAddToFusedMulAdd()])
    with pytest.raises(PassPositionError, match="no pass\\(es\\) named 'convert-power-to-powerstatic'"):
        pipeline.register_positioned(bad)
    assert pipeline.names() == ["mul-add-to-fused-mul-add"]  # nothing appended


# --- the pass -----------------------------------------------------------------------------------------------
def _body() -> Model:
    """Four Multiply+Add pairs: product on input 1, on input 0, a product with a second consumer, and i32."""
    a = Parameter("f32", [2, 8], name="a")
    b = Parameter("f32", [2, 8], name="b")
    c = Parameter("f32", [2, 1], name="c")
    i = Parameter("i32", [2, 8], name="i")
    fused_rhs = Add(c, Multiply(a, b, name="mul"), name="add")
    fused_lhs = Add(Multiply(c, a, name="mul2"), b, name="add2")
    shared = Multiply(a, c, name="shared")
    kept = Add(shared, b, name="add3")
    ints = Add(Multiply(i, i, name="imul"), i, name="iadd")
    results = [
        Result(Relu(fused_rhs, name="relu"), name="y"),
        Result(fused_lhs, name="z"),
        Result(kept, name="w"),
        Result(shared, name="s"),
        Result(ints, name="n"),
    ]
    return Model(results, [a, b, c, i], name="body")


EXPECTED_AFTER = """\
model body
  a = Parameter() {element_type=f32, shape=[2,8]} -> f32[2,8]
  b = Parameter() {element_type=f32, shape=[2,8]} -> f32[2,8]
  c = Parameter() {element_type=f32, shape=[2,1]} -> f32[2,1]
  i = Parameter() {element_type=i32, shape=[2,8]} -> i32[2,8]
  add = FusedMulAdd(a:0, b:0, c:0) -> f32[2,8]
  relu = Relu(add:0) -> f32[2,8]
  y = Result(relu:0) -> f32[2,8]
  add2 = FusedMulAdd(c:0, a:0, b:0) -> f32[2,8]
  z = Result(add2:0) -> f32[2,8]
  shared = Multiply(a:0, c:0) {auto_broadcast=numpy} -> f32[2,8]
  add3 = Add(shared:0, b:0) {auto_broadcast=numpy} -> f32[2,8]
  w = Result(add3:0) -> f32[2,8]
  s = Result(shared:0) -> f32[2,8]
  imul = Multiply(i:0, i:0) {auto_broadcast=numpy} -> i32[2,8]
  iadd = Add(imul:0, i:0) {auto_broadcast=numpy} -> i32[2,8]
  n = Result(iadd:0) -> i32[2,8]"""


def test_pass_fuses_single_consumer_f32_products() -> None:
    body = _body()
    assert MulAddToFusedMulAdd().run(body) is True
    assert body.to_text() == EXPECTED_AFTER
    body.validate()
    assert MulAddToFusedMulAdd().run(body) is False  # nothing left to fuse
    # The fused Multiply is gone from its inputs' consumers too: 'a' feeds the two FusedMulAdds and 'shared'.
    a = body.parameters[0]
    assert sorted(t.node.name for t in a.outputs[0].targets) == ["add", "add2", "shared"]


def test_pass_runs_on_a_subgraph_body() -> None:
    x = Parameter("f32", [4, 3], name="x")
    y = Parameter("f32", [3], name="y")
    inner_x = Parameter("f32", [4, 3], name="bx")
    inner_y = Parameter("f32", [3], name="by")
    body = Model(
        [Result(Add(Multiply(inner_x, inner_y, name="m"), inner_x, name="s"), name="r")],
        [inner_x, inner_y],
        name="sg_body",
    )
    sg = Subgraph(x, y, body=body, name="sg")
    assert MulAddToFusedMulAdd().run(sg) is True
    assert [n.type_name for n in sg.body.get_ordered_ops()] == ["Parameter", "Parameter", "FusedMulAdd", "Result"]


# --- the op -------------------------------------------------------------------------------------------------
def test_fused_mul_add_infers_broadcast_shapes_and_rejects_mixed_types() -> None:
    a, b, c = Parameter("f32", [3, 1, 5], name="a"), Parameter("f32", [4, 1], name="b"), Parameter("f32", [5], name="c")
    node = FusedMulAdd(a, b, c, name="f")
    assert (str(node.outputs[0].element_type), node.outputs[0].shape.to_tuple()) == ("f32", (3, 4, 5))
    with pytest.raises(ShapeInferenceError, match="element types"):
        FusedMulAdd(a, b, Parameter("f16", [5], name="h"))
    with pytest.raises(ShapeInferenceError, match="broadcastable"):
        FusedMulAdd(a, Parameter("f32", [4, 2], name="d"), c)


def two_product_inputs(shape: tuple[int, ...], seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.uniform(1.0, 2.0, shape).astype(np.float32)
    b = rng.uniform(1.0, 2.0, shape).astype(np.float32)
    return a, b, -(a * b)  # numpy's f32 product, rounded


def exact_product_error(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a * b - fl32(a * b)``: exact in float64 and representable in f32 (the TwoProduct error term)."""
    return (a.astype(np.float64) * b.astype(np.float64) - (a * b).astype(np.float64)).astype(np.float32)


def test_fused_mul_add_reference_rounds_once() -> None:
    a, b, c = two_product_inputs((1000,), seed=1)
    got = FusedMulAdd(Parameter("f32", [1000]), Parameter("f32", [1000]), Parameter("f32", [1000])).evaluate(a, b, c)
    assert got[0].dtype == np.float32
    assert np.array_equal(got[0], exact_product_error(a, b))
    assert np.count_nonzero(got[0]) > 900  # the unfused a * b + c is 0 everywhere
    ints = [np.array([7, -3], np.int32), np.array([6, 5], np.int32), np.array([1, 2], np.int32)]
    assert np.array_equal(FusedMulAdd(*(Parameter("i32", [2]) for _ in range(3))).evaluate(*ints)[0], [43, -13])


# --- compiled: interpreter and x86-64 -----------------------------------------------------------------------
SHAPES = [  # (a, b, c): tails, broadcasting on every input and axis
    ((2, 37), (2, 37), (2, 37)),
    ((3, 1), (1, 20), (3, 20)),
    ((5, 17), (17,), (5, 1)),
    ((1,), (4, 33), (33,)),
]


def _model(shapes: tuple[tuple[int, ...], ...]) -> Model:
    a, b, c = (Parameter("f32", list(s), name=n) for n, s in zip("abc", shapes))
    return Model([Result(Relu(Add(Multiply(a, b), c)), name="y")], [a, b, c], name="mad")


def _random_inputs(shapes: tuple[tuple[int, ...], ...], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in zip("abc", shapes)}


def _check_within_one_rounding(got: np.ndarray, ins: dict[str, np.ndarray]) -> None:
    a, b, c = (ins[n].astype(np.float64) for n in "abc")
    ref = np.maximum(a * b + c, 0.0)
    # one rounding to f32 (plus the reference's own double rounding): at most one f32 ulp of the result
    assert np.all(np.abs(got.astype(np.float64) - ref) <= np.spacing(np.abs(ref).astype(np.float32)))


def _compile_checked(target: str, shapes: tuple[tuple[int, ...], ...], config: dict | None = None):  # type: ignore[no-untyped-def]
    cm = compile_model(_model(shapes), target=target, config=config)
    assert [(t, where) for _, t, where in cm.placement()] == [("Subgraph", target)]  # no fallback to the reference
    return cm


@pytest.mark.parametrize("shapes", SHAPES)
def test_interpreter_matches_numpy_within_fma_rounding(shared_host: PluginHost, shapes) -> None:  # type: ignore[no-untyped-def]
    cm = _compile_checked("interpreter", shapes)
    ins = _random_inputs(shapes, seed=len(shapes[1]))
    _check_within_one_rounding(cm(ins)["y"], ins)


def test_interpreter_body_holds_fused_mul_add(shared_host: PluginHost) -> None:
    from snippets_core.codegen.interpreter import InterpreterTarget
    from snippets_core.codegen.subgraph_codegen import generate_subgraph

    cm = _compile_checked("interpreter", SHAPES[0])
    sg = cm.subgraphs[0]
    gen = generate_subgraph(
        sg,
        InterpreterTarget(16, plugin_emitters=shared_host.register_emitters("interpreter")),
        positioned_passes=shared_host.positioned_passes("interpreter", {}),
    )
    assert [n.type_name for n in gen.body.get_ordered_ops() if n.type_name in ("FusedMulAdd", "Multiply", "Add")] == [
        "FusedMulAdd"
    ]
    assert "FusedMulAdd" in [e.type_name for e in gen.linear_ir.exprs]
    a, b, c = two_product_inputs((2, 37), seed=2)
    got = gen.kernel.run([a, b, c])[0].reshape(2, 37)
    assert np.array_equal(got, np.maximum(exact_product_error(a, b), 0))


def test_disabled_pass_and_blocked_plugin_leave_the_ops_unfused(shared_host: PluginHost) -> None:
    a, b, c = two_product_inputs((3, 20), seed=3)
    ins = {"a": a, "b": b, "c": c}
    fused = _compile_checked("interpreter", ((3, 20),) * 3)(ins)["y"]
    assert np.array_equal(fused, np.maximum(exact_product_error(a, b), 0)) and np.count_nonzero(fused) > 0
    off = _compile_checked("interpreter", ((3, 20),) * 3, {"disabled_passes": ["mul-add-to-fused-mul-add"]})
    assert not np.any(off(ins)["y"])  # numpy's unfused a * b + c: exactly 0
    blocked = _compile_checked("interpreter", ((3, 20),) * 3, {"block_plugins": ["example_passes"]})
    assert not np.any(blocked(ins)["y"])


def _x86_or_skip(host: PluginHost) -> None:
    pytest.importorskip("snippets_x86_64", reason="the x86-64 target (snippets-target-x86-64) is not installed")
    from snippets_core.plugins import load_target

    reason = load_target(X86, host).available()
    if reason is not None:
        pytest.skip(f"the x86-64 target cannot run here: {reason}")


@pytest.mark.parametrize("shapes", SHAPES)
def test_x86_64_matches_numpy_within_fma_rounding(shared_host: PluginHost, shapes) -> None:  # type: ignore[no-untyped-def]
    _x86_or_skip(shared_host)
    cm = _compile_checked(X86, shapes)
    ins = _random_inputs(shapes, seed=len(shapes[0]))
    _check_within_one_rounding(cm(ins)["y"], ins)


def test_x86_64_kernel_uses_vfmadd(shared_host: PluginHost) -> None:
    _x86_or_skip(shared_host)
    from snippets_core.config import CompileConfig
    from snippets_x86_64.target import X86_64Target

    a, b, c = two_product_inputs((4, 100), seed=4)
    cm = _compile_checked(X86, ((4, 100),) * 3)
    assert np.array_equal(cm({"a": a, "b": b, "c": c})["y"], np.maximum(exact_product_error(a, b), 0))
    generated = X86_64Target().generate_subgraph(cm.subgraphs[0], CompileConfig(), shared_host)
    text = generated.kernel.disassemble()  # iced-x86's formatter
    assert "vfmadd" in text and "vmulps" not in text

"""The target object and its hooks, on small graphs built with the core IR."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add, Multiply, Subtract
from snippets_core.ir.ops.convert import Convert
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.matmul import MatMul
from snippets_core.ir.ops.nn import Convolution
from snippets_core.ir.ops.reduce import ReduceSum
from snippets_core.ir.ops.select import Select
from snippets_core.ir.ops.shape_ops import Transpose
from snippets_core.ir.ops.softmax import Softmax
from snippets_core.ir.ops.unary import Exp, Gelu, Mish, Relu, Sigmoid, Swish, Tanh
from snippets_core.plugins import PluginHost, load_target
from snippets_core.tokenization.marks import is_skipped_by_plugin
from snippets_x86_64 import cpu
from snippets_x86_64.target import X86_64Target

NAME = "x86_64_avx512"


def callback(node, tokenizer="eltwise"):
    return X86_64Target().snippets_tokenization_callback(node=node, target_name=NAME, tokenizer=tokenizer)


def f32(*shape, name=None):
    return Parameter("f32", list(shape), name=name)


# -- machine facts and availability --------------------------------------------------------------------------


def test_entry_point_loads_the_target():
    target = load_target(NAME)
    assert isinstance(target, X86_64Target)
    assert target.name == NAME and target.description


def test_machine_constants():
    t = X86_64Target()
    assert (t.lanes_f32, t.vector_registers, t.mask_registers, t.gpr_pool, t.data_ptr_gpr_count) == (16, 32, 8, 15, 11)


def test_available_matches_the_cpu_flags():
    with open("/proc/cpuinfo") as f:
        flags = set(f.read().split())
    has = all(flag in flags for flag in cpu.REQUIRED_FEATURES)
    assert (X86_64Target().available() is None) == has


def test_available_gives_the_reason_on_a_cpu_without_avx512(monkeypatch):
    monkeypatch.setattr(cpu, "cpu_features", lambda: frozenset({"avx2"}))
    reason = X86_64Target().available()
    assert reason is not None and "lacks avx512f" in reason


# -- tokenization callback -----------------------------------------------------------------------------------


def test_plain_eltwise_is_allowed():
    x = f32(1, 3, 8, 8)
    assert callback(Relu(x)) is None
    assert callback(Relu(Parameter("f32", [1, None, 8]))) is None  # dynamic dims: one kernel for every shape
    assert callback(Add(x, Constant(np.float32(1.0)))) is None
    assert callback(Swish(x, Constant(np.float32(1.5)))) is None


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: Mish(f32(2, 3)), "Mish"),
        (lambda: Swish(f32(2, 3), Parameter("f32", [])), "non-Constant beta"),
        (
            lambda: Add(Constant(np.ones(4, np.float32)), Constant(np.ones(4, np.float32))),
            "all its inputs are Constants",
        ),
        (lambda: Relu(f32(1, 1, 1, 1, 1, 1, 2)), "rank 7"),
        (lambda: Relu(Parameter("i32", [4])), "input 0 is i32"),
        (lambda: Exp(Parameter("f64", [4])), "input 0 is f64"),
        (lambda: MatMul(f32(1, 2, 4, 8), f32(1, 2, 8, 4)), "only inside complex patterns"),
        (lambda: Transpose(f32(2, 8), Constant(np.array([1, 0], np.int64))), "own JIT transpose kernel"),
    ],
)
def test_callback_rejects_with_a_reason(make, reason):
    node = make()
    answer = callback(node)
    assert answer is not None and reason in answer


@pytest.mark.parametrize("axes_type", [np.int32, np.int64])
def test_index_inputs_may_be_i32_or_i64_but_data_may_not(axes_type):
    reduce = ReduceSum(f32(2, 8), Constant(np.array([1], axes_type)), keep_dims=True)
    assert callback(reduce) is None
    convert = Convert(Parameter("i32", [4]), destination_type="f32")
    assert "input 0 is i32" in callback(convert)


def test_ops_openvino_runs_natively_are_fused_here():
    # the CPU plugin keeps these out because it has its own kernels; here the alternative is numpy
    assert callback(Softmax(f32(2, 8), axis=1)) is None
    assert callback(ReduceSum(f32(2, 8), Constant(np.array([1], np.int64)), keep_dims=True)) is None
    assert callback(Select(Parameter("boolean", [2, 8]), f32(2, 8), f32(2, 8))) is None


def test_the_transpose_tokenizer_takes_4_and_2_byte_transposes_of_rank_up_to_6():
    order = Constant(np.array([1, 0], np.int64))
    assert callback(Transpose(f32(2, 8), order), "transpose") is None
    assert callback(Transpose(Parameter("i32", [2, 8]), order), "transpose") is None
    assert callback(Transpose(Parameter("f16", [2, 8]), order), "transpose") is None
    assert callback(Transpose(Parameter("bf16", [2, 8]), order), "transpose") is None
    assert "4-byte" in callback(Transpose(Parameter("f64", [2, 8]), order), "transpose")
    assert "2-byte" in callback(Transpose(Parameter("i8", [2, 8]), order), "transpose")
    big = Transpose(f32(*[1] * 7), Constant(np.arange(7)[::-1].copy()))
    assert "at most rank 6" in callback(big, "transpose")


def test_callback_answers_only_for_its_own_target():
    answer = X86_64Target().snippets_tokenization_callback(node=Mish(f32(2)), target_name="shave", tokenizer="eltwise")
    assert answer is None


def test_callback_through_the_core_plugin_host():
    host = PluginHost(autoload=False)
    host.register_target(X86_64Target(), NAME)
    assert "Mish" in host.tokenization_callback(Mish(f32(2, 3)), NAME)
    assert host.tokenization_callback(Relu(f32(2, 3)), NAME) is None


# -- SnippetsMarkSkipped -------------------------------------------------------------------------------------


def conv(x, channels_out=4):
    w = Constant(np.ones((channels_out, x.outputs[0].shape.to_tuple()[1], 3, 3), np.float32))
    return Convolution(x, w, pads=[1, 1, 1, 1])


def mark(model):
    X86_64Target(mark_fused_post_ops=True).snippets_mark_skipped(model=model, target_name=NAME)
    return {n.name for n in model.get_ordered_ops() if is_skipped_by_plugin(n)}


def test_convolution_post_op_chain_is_skipped():
    x = f32(1, 3, 8, 8, name="x")
    y = f32(1, 4, 8, 8, name="y")
    c = conv(x)
    bias = Add(c, Constant(np.ones((1, 4, 1, 1), np.float32)), name="bias")
    act = Relu(bias, name="relu")
    scale = Multiply(act, Constant(np.float32(2.0)), name="scale")
    sig = Sigmoid(scale, name="sigmoid")
    join = Add(sig, y, name="join")  # the other input is a Parameter: not a per-channel post-op
    after = Tanh(join, name="tanh")
    model = Model([Result(after)], [x, y])
    assert mark(model) == {"bias", "relu", "scale", "sigmoid"}


def test_a_convolution_output_with_two_consumers_is_not_fused():
    x = f32(1, 3, 8, 8, name="x")
    c = conv(x)
    model = Model([Result(Relu(c, name="a")), Result(Sigmoid(c, name="b"))], [x])
    assert mark(model) == set()


def test_a_spatially_varying_constant_ends_the_chain():
    x = f32(1, 3, 8, 8, name="x")
    c = conv(x)
    add = Add(c, Constant(np.ones((1, 4, 8, 8), np.float32)), name="not_per_channel")
    model = Model([Result(Relu(add, name="relu"))], [x])
    assert mark(model) == set()


def test_matmul_with_constant_weights_takes_bias_and_activation():
    x = f32(2, 16, name="x")
    y = f32(2, 8, name="y")
    mm = MatMul(x, Constant(np.ones((16, 8), np.float32)))
    bias = Add(mm, Constant(np.ones(8, np.float32)), name="bias")
    act = Gelu(bias, name="gelu")
    shift = Subtract(act, Constant(np.ones((1, 8), np.float32)), name="shift")
    model = Model([Result(Relu(Add(shift, y, name="join"), name="after"))], [x, y])
    assert mark(model) == {"bias", "gelu", "shift"}


def test_matmul_with_runtime_weights_is_left_to_the_tokenizer():
    x = f32(2, 16, name="x")
    w = f32(16, 8, name="w")
    model = Model([Result(Relu(Add(MatMul(x, w), Constant(np.ones(8, np.float32)), name="bias"), name="r"))], [x, w])
    assert mark(model) == set()


def test_compressed_weights_through_convert_count_as_constant():
    x = f32(2, 16, name="x")
    w = Convert(Constant(np.ones((16, 8), np.float16)), destination_type="f32")
    model = Model([Result(Relu(MatMul(x, w), name="relu"))], [x])
    assert mark(model) == {"relu"}


def test_mark_skipped_ignores_other_targets():
    x = f32(1, 3, 8, 8, name="x")
    model = Model([Result(Relu(conv(x), name="relu"))], [x])
    X86_64Target(mark_fused_post_ops=True).snippets_mark_skipped(model=model, target_name="shave")
    assert not any(is_skipped_by_plugin(n) for n in model.get_ordered_ops())


def test_post_op_chains_stay_fusable_by_default(monkeypatch):
    """The reference Convolution fuses nothing, so by default its post-ops are left to the Tokenizer."""
    monkeypatch.delenv("SNIPPETS_X86_MARK_FUSED_POST_OPS", raising=False)
    x = f32(1, 3, 8, 8, name="x")
    model = Model([Result(Relu(conv(x), name="relu"))], [x])
    X86_64Target().snippets_mark_skipped(model=model, target_name=NAME)
    assert not any(is_skipped_by_plugin(n) for n in model.get_ordered_ops())
    monkeypatch.setenv("SNIPPETS_X86_MARK_FUSED_POST_OPS", "1")
    X86_64Target().snippets_mark_skipped(model=model, target_name=NAME)
    assert {n.name for n in model.get_ordered_ops() if is_skipped_by_plugin(n)} == {"relu"}


# -- through the core's compile pipeline ---------------------------------------------------------------------


@pytest.fixture
def post_op_marking(monkeypatch):
    """The shared plugin host keeps one target object: give this test one with post-op marking on, and
    leave a default one behind for the tests that follow."""
    from snippets_core.plugins.host import get_host

    def fresh() -> None:
        host = get_host()
        if host.pm.get_plugin("target:" + NAME) is not None:
            host.unregister("target:" + NAME)

    monkeypatch.setenv("SNIPPETS_X86_MARK_FUSED_POST_OPS", "1")
    fresh()
    yield
    monkeypatch.delenv("SNIPPETS_X86_MARK_FUSED_POST_OPS")
    fresh()


@pytest.mark.avx512
def test_compile_model_applies_the_hooks(post_op_marking):
    from snippets_core import compile_model
    from snippets_core.ir.evaluate import evaluate_model

    x = f32(1, 3, 8, 8, name="x")
    y = f32(1, 4, 8, 8, name="y")
    post = Sigmoid(Relu(conv(x), name="conv_relu"), name="conv_sigmoid")  # fused into the convolution
    chain = Tanh(Exp(Add(y, Constant(np.float32(0.5)), name="add"), name="exp"), name="tanh")  # tokenized
    mish = Mish(y, name="mish")  # vetoed by the callback
    model = Model([Result(Add(post, chain, name="join"), name="out"), Result(mish, name="m")], [x, y])
    cm = compile_model(model, target=NAME)
    eltwise = [sg for sg in cm.subgraphs if not sg.rt_info.get("SnippetsConvolution")]
    fused = sorted(n.type_name for sg in eltwise for n in sg.body.get_ordered_ops())
    assert "Exp" in fused and "Tanh" in fused
    assert "Mish" not in fused and "Relu" not in fused and "Sigmoid" not in fused
    # the post-ops the hook kept out of the eltwise Tokenizer are applied inside the convolution primitive,
    # and so is the join with the eltwise chain (a residual Add)
    prim = [sg for sg in cm.subgraphs if sg.rt_info.get("SnippetsConvolution")]
    assert [n.type_name for n in prim[0].body_ops] == ["Convolution", "Relu", "Sigmoid", "Add"]
    rng = np.random.default_rng(0)
    inputs = {
        "x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32),
        "y": rng.standard_normal((1, 4, 8, 8)).astype(np.float32),
    }
    expected = evaluate_model(model, inputs)
    got = cm(inputs)
    for name in ("out", "m"):
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-6)


def test_unknown_target_options_and_a_cache_dir_that_is_a_file_are_config_errors(tmp_path):
    """A misspelt knob is never silently ignored; a cache_dir that is a file is said as such (it was an internal
    FileExistsError)."""
    from snippets_core import compile_model
    from snippets_core.errors import ConfigError
    from snippets_core.frontends import builder as sb

    x = sb.parameter([4, 16], "f32", name="x")
    model = sb.model([sb.relu(x)], [x])
    with pytest.raises(ConfigError, match=r"unknown target_options 'parallel_min_byte'.*parallel_min_bytes"):
        compile_model(model, target="x86_64_avx512", config={"target_options": {"parallel_min_byte": 0}})
    afile = tmp_path / "not_a_dir"
    afile.write_text("x")
    with pytest.raises(ConfigError, match="is not a directory"):
        compile_model(model, target="x86_64_avx512", config={"target_options": {"cache_dir": str(afile)}})
    compile_model(model, target="x86_64_avx512", config={"target_options": {"cache_dir": str(tmp_path / "c"),
                                                                              "debug": {}}})

"""Call-time checks of inputs against symbolic and fixed dims, zero-sized dims, and a property test of
random shapes on a symbolic-dim model against onnx's reference evaluator."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from snippets_core.errors import InputError
from snippets_core.ir import Model
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.ir.ops.shape_ops import Concat
from snippets_core.ir.shape import Shape, SymDim
from snippets_core.plugins.targets import load_target, target_names
from snippets_core.runtime.compiled_model import compile_model

tlm = sys.modules["snippets_torch_like_models"]  # loaded by conftest.py


@pytest.fixture(scope="module")
def bert():  # type: ignore[no-untyped-def]
    proto = tlm.bert_encoder_layer("torchscript")
    return proto, compile_model(proto, "reference")


def test_symbolic_dims_must_agree_across_inputs(bert) -> None:  # type: ignore[no-untyped-def]
    _, cm = bert
    feeds = {"hidden_states": np.zeros((2, 128, 32), np.float32), "attention_mask": np.ones((2, 129), np.int64)}
    with pytest.raises(InputError) as e:
        cm(feeds)
    msg = str(e.value)
    assert "'hidden_states'" in msg and "'attention_mask'" in msg and "sequence_length" in msg
    assert "128" in msg and "129" in msg
    feeds["attention_mask"] = np.ones((3, 128), np.int64)
    with pytest.raises(InputError, match="batch_size"):
        cm(feeds)


def test_fixed_dims_are_checked_with_the_symbolic_shape_shown(bert) -> None:  # type: ignore[no-untyped-def]
    _, cm = bert
    feeds = {"hidden_states": np.zeros((2, 8, 16), np.float32), "attention_mask": np.ones((2, 8), np.int64)}
    with pytest.raises(InputError, match=r"'hidden_states' must have shape \[batch_size,sequence_length,32\], "
                                         r"got \[2, 8, 16\]: dim 2 is 16 where the model fixes 32"):
        cm(feeds)
    feeds["hidden_states"] = np.zeros((2, 8), np.float32)
    with pytest.raises(InputError, match="rank 2 instead of 3"):
        cm(feeds)


def test_related_symbolic_dims_are_checked() -> None:
    """An input declared [S+1] next to one declared [S] (a model built in Python) must be one longer."""
    s = SymDim.of("S")
    a = Parameter("f32", Shape([s]), name="a")
    b = Parameter("f32", Shape([s + 1]), name="b")
    cat = Concat(a, b, axis=0)
    assert str(cat.outputs[0].shape) == "[2*S+1]"
    cm = compile_model(Model([Result(cat)], [a, b]), "reference")
    (out,) = cm({"a": np.ones(3, np.float32), "b": np.ones(4, np.float32)}).values()
    assert out.shape == (7,)
    with pytest.raises(InputError, match=r"input 'b' has dim 0 of size 3, but the model declares it S\+1 = 4 "
                                         r"\(S = 3 in 'a'\)"):
        cm({"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)})


def test_inputs_without_shared_symbols_pay_no_symbol_check() -> None:
    a = Parameter("f32", Shape([SymDim.of("N")]), name="a")
    b = Parameter("f32", Shape([None]), name="b")
    cm = compile_model(Model([Result(a), Result(b)], [a, b]), "reference")
    assert cm._symbol_checks == ()
    cm({"a": np.ones(2, np.float32), "b": np.ones(5, np.float32)})


@pytest.mark.parametrize("target", ["reference", "interpreter"])
@pytest.mark.parametrize(("kind", "exporter"), [("bert", "dynamo"), ("gpt2", "torchscript")])
@pytest.mark.parametrize(("batch", "seq"), [(0, 5), (2, 0)])
def test_zero_sized_dims_work(kind: str, exporter: str, target: str, batch: int, seq: int) -> None:
    proto = tlm.BUILDERS[kind](exporter)
    feeds = {k: v[:batch, :seq] for k, v in tlm.random_inputs(proto, 2, 5).items()}
    (out,) = compile_model(proto, target)(feeds).values()
    assert out.shape == (batch, seq, 32)


# --- property test ----------------------------------------------------------------------------------
def _symbolic_model():  # type: ignore[no-untyped-def]
    """x [B, S, 8] + bias [S, 8] (numpy broadcasting), reshaped through Shape(x) to [B, S*8], times
    mask [B, 1] cast to float: three inputs sharing B and S."""
    nodes = [
        helper.make_node("Add", ["x", "bias"], ["s"]),
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Slice", ["shape", "zero", "one", "zero"], ["b"]),
        helper.make_node("Concat", ["b", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["s", "target"], ["flat"]),
        helper.make_node("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["flat", "maskf"], ["y"]),
    ]
    inits = [helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
             helper.make_tensor("one", TensorProto.INT64, [1], [1]),
             helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1])]
    graph = helper.make_graph(nodes, "sym", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", 8]),
        helper.make_tensor_value_info("bias", TensorProto.FLOAT, ["S", 8]),
        helper.make_tensor_value_info("mask", TensorProto.INT64, ["B", 1]),
    ], [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", None])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)


_PROTO = _symbolic_model()
_COMPILED: dict[str, object] = {}


def _property_targets() -> list[str]:
    """The core targets, and x86_64_avx512 where it runs (its dynamic kernels get random shapes too)."""
    if "x86_64_avx512" in target_names() and load_target("x86_64_avx512").available() is None:
        return ["reference", "interpreter", "x86_64_avx512"]
    return ["reference", "interpreter"]


@settings(max_examples=40, deadline=None)
@given(b=st.integers(0, 4), s=st.integers(0, 6), s_bias=st.integers(0, 6), b_mask=st.integers(0, 4),
       target=st.sampled_from(_property_targets()), seed=st.integers(0, 2**16))
def test_random_shapes_match_the_reference_evaluator(b: int, s: int, s_bias: int, b_mask: int, target: str,
                                                     seed: int) -> None:
    cm = _COMPILED.get(target) or _COMPILED.setdefault(target, compile_model(_PROTO, target))
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.standard_normal((b, s, 8)).astype(np.float32),
             "bias": rng.standard_normal((s_bias, 8)).astype(np.float32),
             "mask": rng.integers(0, 2, (b_mask, 1)).astype(np.int64)}
    if s != s_bias or b != b_mask:
        symbol = "S" if s != s_bias else "B"
        with pytest.raises(InputError, match=f"disagree on the symbolic dim {symbol}"):
            cm(feeds)  # type: ignore[operator]
        return
    (got,) = cm(feeds).values()  # type: ignore[operator]
    if b == 0:  # the evaluator's numpy reshape(0, -1) is ambiguous; ONNX's 0 copies the (empty) batch dim
        assert got.shape == (0, s * 8)
        return
    (want,) = ReferenceEvaluator(_PROTO).run(None, feeds)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


# --- the command line -------------------------------------------------------------------------------
def test_inspect_and_run_show_symbolic_dims(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    import onnx

    from snippets_core.cli import main

    path = tmp_path / "gpt2.onnx"
    onnx.save(tlm.gpt2_block("torchscript"), str(path))
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "input_ids i64[batch_size,sequence_length], attention_mask i64[batch_size,sequence_length]" in out
    assert "outputs: hidden f32[batch_size,sequence_length,32]" in out
    # one --shape names batch_size and sequence_length: the mask that shares them is sized from it
    assert main(["run", str(path), "-t", "reference", "--shape", "input_ids=2,7"]) == 0
    assert main(["run", str(path), "-t", "reference"]) == 2
    assert "has dynamic dims [batch_size,sequence_length]" in capsys.readouterr().err

"""The shave target object: entry point, availability, and the tokenization veto on small graphs."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.ir.ops.binary import Add, Equal, Multiply
from snippets_core.ir.ops.convert import Convert
from snippets_core.ir.ops.io import Constant, Parameter
from snippets_core.ir.ops.matmul import MatMul
from snippets_core.ir.ops.reduce import ReduceMax, ReduceSum
from snippets_core.ir.ops.softmax import Softmax
from snippets_core.ir.ops.unary import Clamp, Gelu, Mish, Relu, Sigmoid
from snippets_core.plugins import PluginHost, list_targets, load_target
from snippets_shave.target import ShaveTarget

NAME = "shave"


def callback(node):  # type: ignore[no-untyped-def]
    return ShaveTarget().snippets_tokenization_callback(node=node, target_name=NAME)


def p(et: str, *shape: int | None) -> Parameter:
    return Parameter(et, list(shape))


def test_entry_point_loads_the_target() -> None:
    assert any(t.name == NAME and t.distribution == "snippets-target-shave" for t in list_targets())
    target = load_target(NAME)
    assert isinstance(target, ShaveTarget)
    assert target.name == NAME and target.description and target.available() is None
    hw = target.default_hardware()
    assert (hw.tiles, hw.shaves_per_tile, hw.cmx_bytes_per_tile) == (2, 2, 2 * 1024 * 1024)


@pytest.mark.parametrize("et", ["f32", "f16"])
def test_supported_ops_pass(et: str) -> None:
    x, y = p(et, 2, 8), p(et, 2, 8)
    for node in (Add(x, y), Multiply(x, y), Relu(x), Sigmoid(x), Clamp(x, min=0.0, max=6.0), Softmax(x, axis=-1)):
        assert callback(node) is None, node.type_name
    assert callback(Softmax(x, axis=1)) is None
    assert callback(ReduceMax(x, Constant(np.array([1], np.int64)), keep_dims=True)) is None
    assert callback(ReduceSum(x, Constant(np.array([-1], np.int32)))) is None


def test_vetoes_name_the_reason() -> None:
    x = p("f32", 2, 8)
    assert "Gelu has no SHAVE kernel" in callback(Gelu(x))
    assert "MatMul has no SHAVE kernel" in callback(MatMul(x, p("f32", 8, 4)))
    assert "input 0 is i32" in callback(Relu(p("i32", 4)))
    assert "Equal has no SHAVE kernel" in callback(Equal(x, x))
    assert "output 0 is i32" in callback(Convert(x, destination_type="i32"))
    assert "input 0 is i32" in callback(Convert(p("i32", 4), destination_type="f32"))
    assert callback(Convert(p("f16", 4), destination_type="f32")) is None
    assert "dynamic shapes" in callback(Relu(p("f32", None, 8)))
    assert "on the last axis" in callback(Softmax(x, axis=0))
    assert "last axis only" in callback(ReduceSum(x, Constant(np.array([0], np.int64))))
    assert "dynamic shapes" in callback(ReduceSum(x, p("i64", 1)))  # unknown axes: unknown output shape


def test_callback_answers_only_for_its_own_target() -> None:
    assert ShaveTarget().snippets_tokenization_callback(node=Mish(p("f32", 2)), target_name="x86_64_avx512") is None


def test_callback_through_the_core_plugin_host() -> None:
    host = PluginHost(autoload=False)
    host.register_target(ShaveTarget(), NAME)
    assert "Mish" in host.tokenization_callback(Mish(p("f32", 2, 3)), NAME)
    assert host.tokenization_callback(Relu(p("f32", 2, 3)), NAME) is None

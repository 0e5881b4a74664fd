"""The example plugin, registered by hand (nothing installed): its hooks and their effect."""

from __future__ import annotations

import pytest

from snippets_core.ir.model import Model
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.plugins import PluginHost
from snippets_example_passes import plugin as example

ENVS = (example.ENV_SKIP_OPS, example.ENV_VETO_NODES)


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> PluginHost:
    for var in ENVS:
        monkeypatch.delenv(var, raising=False)
    h = PluginHost(autoload=False)
    assert h.register(example, "example_passes") == "example_passes"
    return h


def test_veto_by_node_name_pattern(host: PluginHost, monkeypatch: pytest.MonkeyPatch) -> None:
    q = Parameter("f32", [2, 3], name="layer0/attention/q")
    ffn = Parameter("f32", [2, 3], name="layer0/ffn/x")
    assert host.tokenization_callback(q, "reference") is None  # nothing set: nothing vetoed
    monkeypatch.setenv(example.ENV_VETO_NODES, "*/ffn/*, */attention/*")
    assert host.tokenization_callback(q, "reference") == (
        "example_passes: node name matches SNIPPETS_EXAMPLE_VETO_NODES pattern '*/attention/*'"
    )
    assert "'*/ffn/*'" in host.tokenization_callback(ffn, "x86_64_avx512")
    assert host.tokenization_callback(Parameter("f32", [1], name="layer0/Attention/q"), "t") is None


def test_mark_skipped_without_setting_changes_nothing(host: PluginHost) -> None:
    p = Parameter("f32", [4], name="x")
    model = Model([Result(p, name="y")])
    before = model.to_text(), {n.name: dict(n.rt_info) for n in model.get_ordered_ops()}
    host.mark_skipped(model, "reference")
    assert (model.to_text(), {n.name: dict(n.rt_info) for n in model.get_ordered_ops()}) == before


def test_blocking_the_plugin_removes_its_effect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(example.ENV_VETO_NODES, "*")
    blocked = PluginHost(autoload=False, block=["example_passes"])
    assert blocked.register(example, "example_passes") is None
    assert blocked.tokenization_callback(Parameter("f32", [1], name="n"), "t") is None


def test_mark_skipped_marks_listed_op_types(host: PluginHost, monkeypatch: pytest.MonkeyPatch) -> None:
    from snippets_core.ir.ops import unary as eltwise
    from snippets_core.tokenization.marks import is_skipped_by_plugin

    x = Parameter("f32", [2, 3], name="x")
    erf = eltwise.Erf(x, name="erf")
    relu = eltwise.Relu(erf, name="relu")
    mish = eltwise.Mish(relu, name="mish")
    model = Model([Result(mish, name="y")])
    monkeypatch.setenv(example.ENV_SKIP_OPS, "Mish, Erf")
    host.mark_skipped(model, "reference")
    assert {n.name: is_skipped_by_plugin(n) for n in (x, erf, relu, mish)} == {
        "x": False,
        "erf": True,
        "relu": False,
        "mish": True,
    }

"""Loud plugin errors: an out-of-tree plugin (installed by entry point, as a user would) with a bad anchor, a pass
that raises, a pass class without a name or a misspelt hook is an error naming the plugin, on every target; block
lists and disabled_passes take one name or a list and reject unknown names, listing the known ones.

The plugin is a real distribution (``*.dist-info`` with ``entry_points.txt``, see the ``site`` fixture) loaded by
the plugin host's autoload; ``snippets run`` runs in this process and its exit code is the oracle.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from snippets_core import compile_model
from snippets_core.cli import main
from snippets_core.config import CompileConfig, ConfigError
from snippets_core.errors import PassError, PassPositionError, PluginError
from snippets_core.frontends import builder as sb
from snippets_core.plugins import ENV_BLOCK, get_host, load_target

PLUGIN = "tiny_plugin"

PLUGIN_SRC = """
    from dataclasses import dataclass
    from typing import ClassVar
    from snippets_core.passes.pass_manager import Pass, PassPosition, PositionedPass
    from snippets_core.plugins import hookimpl

    @dataclass(frozen=True)
    class TinyPass(Pass):
        name: ClassVar[str] = "tiny-pass"
        kind: ClassVar[str] = "control-flow"
        def run(self, ir):
            if {raises}:
                raise ZeroDivisionError("tiny pass divided by zero")
            return False

    @dataclass(frozen=True)
    class Nameless(Pass):
        kind: ClassVar[str] = "control-flow"
        def run(self, ir):
            return False

    @hookimpl
    def snippets_positioned_passes(target_name, config):
        return [PositionedPass({cls}(), PassPosition("{anchor}", after=True))]
"""


def install(site, anchor: str = "insert-loops", raises: bool = False, cls: str = "TinyPass", extra: str = "") -> None:  # type: ignore[no-untyped-def]
    site("tiny-plugin", {"snippets.plugins": {PLUGIN: "tiny_plugin_mod"}},
         {"tiny_plugin_mod": PLUGIN_SRC.format(anchor=anchor, raises=raises, cls=cls) + extra})


pytestmark = pytest.mark.usefixtures("clean_plugin_env")


def available(target: str) -> bool:
    if target == "interpreter":
        return True
    try:
        return load_target(target).available() is None
    except Exception:  # noqa: BLE001 - not installed here
        return False


TARGETS = [pytest.param(t, marks=pytest.mark.skipif(not available(t), reason=f"target {t} cannot run here"))
           for t in ("x86_64_avx512", "interpreter", "shave")]


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Exp", ["r"], ["y"])]
    path = tmp_path_factory.mktemp("model") / "relu_exp.onnx"
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)]),
              str(path))
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


@pytest.mark.parametrize("target", TARGETS)
def test_bad_anchor_exits_2_naming_plugin_pass_and_anchor(site, onnx_model, capsys, target: str) -> None:  # type: ignore[no-untyped-def]
    install(site, anchor="no-such-pass")
    code, err = run(capsys, "run", str(onnx_model), "-t", target)
    assert code == 2, err
    assert f"plugin '{PLUGIN}'" in err and "'tiny-pass'" in err and "no-such-pass" in err and "Subgraph '" in err


@pytest.mark.parametrize("target", TARGETS)
def test_a_raising_pass_exits_2_naming_plugin_and_pass(site, onnx_model, capsys, target: str) -> None:  # type: ignore[no-untyped-def]
    install(site, raises=True)
    code, err = run(capsys, "run", str(onnx_model), "-t", target)
    assert code == 2, err
    assert f"plugin '{PLUGIN}': pass 'tiny-pass' (after insert-loops) raised ZeroDivisionError" in err


def test_a_good_plugin_pass_runs_and_can_be_disabled_by_one_name(site, onnx_model, capsys) -> None:  # type: ignore[no-untyped-def]
    install(site, raises=True)
    code, err = run(capsys, "run", str(onnx_model), "-t", "interpreter", "-c", "disabled_passes=tiny-pass")
    assert code == 0, err
    assert run(capsys, "run", str(onnx_model), "-t", "interpreter", "-c", f"block_plugins={PLUGIN}")[0] == 0


def test_a_pass_class_without_a_name_is_an_error(site) -> None:  # type: ignore[no-untyped-def]
    install(site, cls="Nameless")
    x = sb.Parameter("f32", (4, 32), name="x")
    with pytest.raises(PluginError, match=f"plugin '{PLUGIN}': pass class Nameless has no name"):
        compile_model(sb.Model([sb.Result(sb.exp(sb.relu(x)), name="y")], [x]), target="interpreter")


def test_a_misspelt_hook_is_an_error_naming_the_plugin(site) -> None:  # type: ignore[no-untyped-def]
    typo = """
    @hookimpl
    def snippets_positioned_pass(target_name, config):
        return []
"""
    install(site, extra=typo)
    with pytest.raises(PluginError, match=f"plugin '{PLUGIN}' implements a hook .*snippets_positioned_pass.*"
                                          "the hooks are: .*snippets_positioned_passes"):
        get_host()


def test_names_take_one_name_or_a_list() -> None:
    assert CompileConfig.from_mapping({"disabled_passes": "fuse-loops"}).disabled_passes == ("fuse-loops",)
    assert CompileConfig.from_mapping({"block_plugins": "a, b"}).block_plugins == ("a", "b")
    assert CompileConfig.from_mapping({"block_plugins": ["example_passes"]}).block_plugins == ("example_passes",)
    with pytest.raises(ConfigError, match="disabled_passes must be a name or a list of names"):
        CompileConfig.from_mapping({"disabled_passes": 3})


def test_unknown_names_are_errors_listing_the_known_ones(site, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    install(site)
    x = sb.Parameter("f32", (4, 32), name="x")
    m = sb.Model([sb.Result(sb.exp(sb.relu(x)), name="y")], [x])
    with pytest.raises(PluginError, match=f"block_plugins: unknown plugin name.* 'tiny_plugn'.*known plugins: .*{PLUGIN}"):
        compile_model(m, target="interpreter", config={"block_plugins": "tiny_plugn"})
    with pytest.raises(ConfigError, match="unknown pass name.* 'fuse-loop'.*known passes: .*fuse-loops.*tiny-pass"):
        compile_model(m, target="interpreter", config={"disabled_passes": "fuse-loop"})
    monkeypatch.setenv(ENV_BLOCK, "nobody")
    with pytest.raises(PluginError, match=f"{ENV_BLOCK}: unknown plugin name"):
        compile_model(m, target="interpreter")
    monkeypatch.setenv(ENV_BLOCK, PLUGIN)
    out = compile_model(m, target="interpreter", config={"disabled_passes": ["fuse-loops"]})({"x": np.ones((4, 32), np.float32)})
    np.testing.assert_allclose(out["y"], np.exp(np.ones((4, 32))), rtol=1e-6)


def test_core_pass_bug_is_a_pass_error_naming_the_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    from snippets_core.lowered.passes.insert_loops import InsertLoops

    def broken(self, ir):  # type: ignore[no-untyped-def]
        raise IndexError("loop bug")

    monkeypatch.setattr(InsertLoops, "run", broken)
    x = sb.Parameter("f32", (4, 32), name="x")
    with pytest.raises(PassError, match="Subgraph '.*' on target 'interpreter': pass 'insert-loops' of the "
                                        "control-flow pipeline raised IndexError: loop bug"):
        compile_model(sb.Model([sb.Result(sb.exp(sb.relu(x)), name="y")], [x]), target="interpreter")


def test_an_unknown_pipeline_kind_is_an_error_naming_the_plugin() -> None:
    from snippets_core.codegen.interpreter import InterpreterTarget
    from snippets_core.lowered.linear_ir import Config
    from snippets_core.lowered.passes.fuse_loops import FuseLoops
    from snippets_core.lowered.pipeline import lower
    from snippets_core.passes.pass_manager import PassPosition, PositionedPass

    pp = PositionedPass(FuseLoops(), PassPosition.pipeline_end(), pipeline="control_flow", plugin="p")
    with pytest.raises(PassPositionError, match="plugin 'p': pass 'fuse-loops' .*unknown pipeline 'control_flow'"):
        lower(sb.Model([], []), Config(), InterpreterTarget(), [pp])

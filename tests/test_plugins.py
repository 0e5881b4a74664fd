"""The plugin system: hook order, firstresult, autoload, block list, target lookup by entry point.

Installed plugins and targets are simulated with real distribution metadata (a ``*.dist-info`` folder
with ``entry_points.txt`` on sys.path), so importlib.metadata is the oracle for what is installed.
"""

from __future__ import annotations

import subprocess
import sys
import types
from importlib import metadata

import pytest

from snippets_core.errors import PluginError, SnippetsError, TargetNotFoundError
from snippets_core.passes.pass_manager import Pass, PassPosition, PositionedPass
from snippets_core.plugins import (
    ENV_BLOCK,
    ENV_DISABLE_AUTOLOAD,
    PluginHost,
    get_host,
    hookimpl,
    list_targets,
    load_target,
)


class Named(Pass):
    """A pass that only carries a label, so positioned-pass order is visible."""

    def __init__(self, label: str) -> None:
        self.label = label

    def run(self, ir: object) -> bool:
        return False

    def __repr__(self) -> str:
        return self.label


class PassPlugin:
    def __init__(self, *labels: str) -> None:
        self.labels = labels

    @hookimpl
    def snippets_positioned_passes(self, target_name: str, config: dict) -> list[PositionedPass]:
        return [PositionedPass(Named(lbl), PassPosition.pipeline_end()) for lbl in self.labels]


class VetoPlugin:
    def __init__(self, reason: str | None) -> None:
        self.reason = reason
        self.calls = 0

    @hookimpl
    def snippets_tokenization_callback(self, node: object, target_name: str) -> str | None:
        self.calls += 1
        return self.reason


class EmitterPlugin:
    def __init__(self, table: dict[str, object]) -> None:
        self.table = table

    @hookimpl
    def snippets_register_emitters(self, target_name: str) -> dict[str, object]:
        return self.table


class FakeTarget:
    def __init__(self, name: str = "faketarget") -> None:
        self.name = name
        self.description = "a target for tests"

    def available(self) -> str | None:
        return None

    @hookimpl
    def snippets_positioned_passes(self, target_name: str, config: dict) -> list[PositionedPass]:
        return [PositionedPass(Named(f"{self.name}-pass"), PassPosition.pipeline_start())]


def labels(host: PluginHost, target: str = "t") -> list[str]:
    return [repr(pp.pass_) for pp in host.positioned_passes(target, {})]


pytestmark = pytest.mark.usefixtures("clean_plugin_env")


PLUGIN_SRC = """
    from snippets_core.plugins import hookimpl
    @hookimpl
    def snippets_tokenization_callback(node, target_name):
        return "{reason}"
"""

TARGET_SRC = """
    from snippets_core.plugins import hookimpl
    class T:
        name = "{name}"
        description = "fake"
        def available(self):
            return None
        @hookimpl
        def snippets_tokenization_callback(self, node, target_name):
            return "target {name} vetoes"
"""


# --- ordering --------------------------------------------------------------------------------------------
def test_positioned_passes_ordered_by_plugin_name_then_given_order() -> None:
    forward = PluginHost(autoload=False)
    forward.register(PassPlugin("a1", "a2"), "alpha")
    forward.register(PassPlugin("b1", "b2"), "beta")
    backward = PluginHost(autoload=False)
    backward.register(PassPlugin("b1", "b2"), "beta")
    backward.register(PassPlugin("a1", "a2"), "alpha")
    assert labels(forward) == ["a1", "a2", "b1", "b2"]
    assert labels(backward) == ["a1", "a2", "b1", "b2"]


def test_target_hooks_come_first_and_only_for_their_target() -> None:
    host = PluginHost(autoload=False)
    host.register(PassPlugin("p"), "aaa")
    host.register_target(FakeTarget("zzz"), "zzz")
    assert labels(host, "zzz") == ["zzz-pass", "p"]
    assert labels(host, "other") == ["p"]
    assert host.plugin_names() == ["aaa", "target:zzz"]


def test_positioned_passes_receive_config_as_dict() -> None:
    from snippets_core.config import CompileConfig

    seen: list[dict] = []

    class Recorder:
        @hookimpl
        def snippets_positioned_passes(self, target_name, config):
            seen.append(config)
            return []

    host = PluginHost(autoload=False)
    host.register(Recorder(), "rec")
    host.positioned_passes("t", {"a": 1})
    host.positioned_passes("t", CompileConfig.from_mapping({"num_threads": 3}))
    host.positioned_passes("t")
    assert seen[0] == {"a": 1} and seen[1]["num_threads"] == 3 and seen[2] == {}
    assert all(type(c) is dict for c in seen)


def test_positioned_passes_type_is_checked() -> None:
    class Bad:
        @hookimpl
        def snippets_positioned_passes(self, target_name, config):
            return ["not a pass"]

    host = PluginHost(autoload=False)
    host.register(Bad(), "bad")
    with pytest.raises(PluginError, match="plugin 'bad'.*str"):
        host.positioned_passes("t", {})


# --- firstresult -------------------------------------------------------------------------------------------
def test_tokenization_callback_first_non_none_wins_and_stops() -> None:
    host = PluginHost(autoload=False)
    silent, first, second = VetoPlugin(None), VetoPlugin("too wide"), VetoPlugin("never asked")
    host.register(second, "c")
    host.register(first, "b")
    host.register(silent, "a")
    assert host.tokenization_callback(object(), "t") == "b: too wide"
    assert (silent.calls, first.calls, second.calls) == (1, 1, 0)


def test_tokenization_callback_none_when_all_allow() -> None:
    host = PluginHost(autoload=False)
    host.register(VetoPlugin(None), "a")
    assert host.tokenization_callback(object(), "t") is None
    assert PluginHost(autoload=False).tokenization_callback(object(), "t") is None


def test_tokenization_callback_rejects_non_string() -> None:
    host = PluginHost(autoload=False)
    host.register(VetoPlugin(42), "num")  # type: ignore[arg-type]
    with pytest.raises(PluginError, match="plugin 'num'.*int"):
        host.tokenization_callback(object(), "t")


# --- emitters and mark_skipped -------------------------------------------------------------------------------
def test_register_emitters_merges_and_names_both_on_conflict() -> None:
    host = PluginHost(autoload=False)
    host.register(EmitterPlugin({"Relu": "r", "Exp": "e"}), "one")
    host.register(EmitterPlugin({"Tanh": "t"}), "two")
    assert host.register_emitters("t") == {"Exp": "e", "Relu": "r", "Tanh": "t"}
    host.register(EmitterPlugin({"Relu": "r2"}), "three")
    with pytest.raises(PluginError) as e:
        host.register_emitters("t")
    assert "'Relu'" in str(e.value) and "'one'" in str(e.value) and "'three'" in str(e.value)


def test_mark_skipped_calls_every_plugin_in_name_order() -> None:
    seen: list[str] = []

    class Marker:
        def __init__(self, tag: str) -> None:
            self.tag = tag

        @hookimpl
        def snippets_mark_skipped(self, model, target_name):
            seen.append(f"{self.tag}:{target_name}:{model}")

    host = PluginHost(autoload=False)
    host.register(Marker("z"), "zed")
    host.register(Marker("m"), "em")
    host.mark_skipped("M", "cpu")
    assert seen == ["m:cpu:M", "z:cpu:M"]


def test_plugin_exception_becomes_plugin_error_naming_it() -> None:
    class Broken:
        @hookimpl
        def snippets_mark_skipped(self, model, target_name):
            raise KeyError("boom")

    host = PluginHost(autoload=False)
    host.register(Broken(), "broken")
    with pytest.raises(PluginError, match="plugin 'broken' failed in snippets_mark_skipped: KeyError"):
        host.mark_skipped(None, "t")


def test_hookimpl_with_unknown_argument_is_rejected() -> None:
    class Wrong:
        @hookimpl
        def snippets_mark_skipped(self, model, target_name, extra):
            pass

    with pytest.raises(PluginError, match="plugin 'wrong'"):
        PluginHost(autoload=False).register(Wrong(), "wrong")


def test_addhooks_is_historic_and_adds_specs() -> None:
    spec_mod = types.ModuleType("extra_specs")
    from snippets_core.plugins import hookspec

    @hookspec
    def snippets_extra_hook(x: int) -> int:
        """A hook a plugin brings along."""

    spec_mod.snippets_extra_hook = snippets_extra_hook  # type: ignore[attr-defined]

    class Adder:
        @hookimpl
        def snippets_addhooks(self, pluginmanager):
            pluginmanager.add_hookspecs(spec_mod)

    host = PluginHost(autoload=False)  # the historic call was made before this registration
    host.register(Adder(), "adder")
    assert hasattr(host.pm.hook, "snippets_extra_hook")
    assert host.pm.hook.snippets_extra_hook.spec is not None


# --- autoload and blocking --------------------------------------------------------------------------------------
def test_autoload_loads_entry_points_sorted(site) -> None:
    site(
        "fake-plugins",
        {"snippets.plugins": {"zz_plug": "zz_plug_mod", "aa_plug": "aa_plug_mod"}},
        {"zz_plug_mod": PLUGIN_SRC.format(reason="zz"), "aa_plug_mod": PLUGIN_SRC.format(reason="aa")},
    )
    host = PluginHost()
    assert {"aa_plug", "zz_plug"} <= set(host.plugin_names())
    assert host.tokenization_callback(object(), "t") == "aa_plug: aa"


def test_autoload_disabled_by_env(site, monkeypatch: pytest.MonkeyPatch) -> None:
    site(
        "fake-plugins", {"snippets.plugins": {"aa_plug": "aa_plug_mod"}}, {"aa_plug_mod": PLUGIN_SRC.format(reason="x")}
    )
    monkeypatch.setenv(ENV_DISABLE_AUTOLOAD, "1")
    host = PluginHost()
    assert host.plugin_names() == []
    assert "aa_plug_mod" not in sys.modules
    host.register(VetoPlugin("explicit"), "mine")
    assert host.tokenization_callback(object(), "t") == "mine: explicit"


def test_block_list_from_env_and_config(site, monkeypatch: pytest.MonkeyPatch) -> None:
    site(
        "fake-plugins",
        {"snippets.plugins": {"aa_plug": "aa_plug_mod", "bb_plug": "bb_plug_mod"}},
        {"aa_plug_mod": PLUGIN_SRC.format(reason="aa"), "bb_plug_mod": PLUGIN_SRC.format(reason="bb")},
    )
    monkeypatch.setenv(ENV_BLOCK, "aa_plug")
    host = get_host()
    assert "aa_plug" not in host.plugin_names() and "bb_plug" in host.plugin_names()
    assert host.tokenization_callback(object(), "t") == "bb_plug: bb"
    both = get_host({"block_plugins": ["bb_plug"]})
    assert not {"aa_plug", "bb_plug"} & set(both.plugin_names())
    assert both.tokenization_callback(object(), "t") is None
    assert get_host() is host  # shared per (autoload, block list)
    assert both.register(VetoPlugin("x"), "bb_plug") is None  # a blocked name stays out when registered by hand


def test_plugin_that_fails_to_import_is_named(site) -> None:
    site(
        "fake-broken",
        {"snippets.plugins": {"broken_plug": "broken_plug_mod"}},
        {"broken_plug_mod": "raise ImportError('needs libfoo')\n"},
    )
    with pytest.raises(PluginError, match="plugin 'broken_plug' .*needs libfoo"):
        PluginHost()
    assert "broken_plug" not in PluginHost(block=["broken_plug"]).plugin_names()


# --- targets --------------------------------------------------------------------------------------------------
def test_list_targets_reads_metadata_without_importing(site) -> None:
    site(
        "fake-target-dist",
        {"snippets.targets": {"fake_tgt": "fake_tgt_mod:T"}},
        {"fake_tgt_mod": TARGET_SRC.format(name="fake_tgt")},
    )
    infos = {t.name: t for t in list_targets()}
    assert infos["fake_tgt"].distribution == "fake-target-dist"
    assert infos["fake_tgt"].version == "1.2.3"
    assert infos["fake_tgt"].value == "fake_tgt_mod:T"
    # Other tests in this process may have imported real targets, so the "listing imports nothing"
    # check runs in a fresh interpreter.
    assert "fake_tgt_mod" not in sys.modules
    probe = (
        "import sys\n"
        "from snippets_core.plugins.targets import list_targets\n"
        "mods = [t.value.split(':')[0] for t in list_targets()]\n"
        "assert mods, 'no targets listed'\n"
        "print(','.join(m for m in mods if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
    expected = sorted(ep.name for ep in metadata.entry_points(group="snippets.targets"))
    assert [t.name for t in list_targets()] == expected


def test_load_target_registers_its_hooks(site) -> None:
    site(
        "fake-target-dist",
        {"snippets.targets": {"fake_tgt": "fake_tgt_mod:T"}},
        {"fake_tgt_mod": TARGET_SRC.format(name="fake_tgt")},
    )
    host = PluginHost(autoload=False)
    target = load_target("fake_tgt", host)
    assert target.name == "fake_tgt" and target.available() is None
    assert load_target("fake_tgt", host) is target
    assert host.tokenization_callback(object(), "fake_tgt") == "target:fake_tgt: target fake_tgt vetoes"
    assert host.tokenization_callback(object(), "another") is None


def test_unknown_target_lists_installed_and_builtin_names(site) -> None:
    site(
        "fake-target-dist",
        {"snippets.targets": {"fake_tgt": "fake_tgt_mod:T"}},
        {"fake_tgt_mod": TARGET_SRC.format(name="fake_tgt")},
    )
    with pytest.raises(TargetNotFoundError) as e:
        load_target("no_such_target", PluginHost(autoload=False))
    msg = str(e.value)
    assert "'no_such_target'" in msg and "fake_tgt" in msg and "reference" in msg and "interpreter" in msg
    for ep in metadata.entry_points(group="snippets.targets"):
        assert ep.name in msg
    assert isinstance(e.value, SnippetsError)


def test_target_without_protocol_members_is_plugin_error(site) -> None:
    site(
        "fake-bad-target",
        {"snippets.targets": {"bad_tgt": "bad_tgt_mod:T"}},
        {"bad_tgt_mod": "class T:\n    name = 'bad_tgt'\n"},
    )
    with pytest.raises(PluginError, match="target 'bad_tgt'.*Target protocol"):
        load_target("bad_tgt", PluginHost(autoload=False))

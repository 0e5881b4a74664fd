"""`snippets plugins` and `snippets --version`: what is installed (oracle: importlib.metadata), the hooks each
plugin implements (oracle: the plugin module's own functions), and a target's pass pipelines with the example
plugin's MulAddToFusedMulAdd right after its anchor."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from importlib import metadata

import pytest

from snippets_core.cli import main

EXAMPLE = "example_passes"
EXAMPLE_PASS = "mul-add-to-fused-mul-add"


def _example_installed() -> bool:
    return any(ep.name == EXAMPLE for ep in metadata.entry_points(group="snippets.plugins"))


needs_example = pytest.mark.skipif(not _example_installed(), reason="the example_passes plugin is not installed")


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_version_lists_core_targets_and_plugins_from_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == f"snippets-core {metadata.version('snippets-core')}"
    for group, kind in (("snippets.targets", "target"), ("snippets.plugins", "plugin")):
        for ep in metadata.entry_points(group=group):
            assert f"{kind} {ep.name}: {ep.dist.metadata['Name']} {ep.dist.version}" in lines
    assert "target reference: snippets-core (built in) " + metadata.version("snippets-core") in lines


def test_plugins_lists_components_with_their_hooks(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "plugins", "--json")
    assert code == 0, err
    rows = {(r["kind"], r["name"]): r for r in json.loads(out)["components"]}
    for group, kind in (("snippets.targets", "target"), ("snippets.plugins", "plugin")):
        for ep in metadata.entry_points(group=group):
            row = rows[(kind, ep.name)]
            assert (row["distribution"], row["version"], row["entry_point"]) == (
                ep.dist.metadata["Name"], ep.dist.version, ep.value)
            if kind == "target":  # not asked for: not imported, so its hooks are not known
                assert row["hooks"].startswith("not loaded")
    if _example_installed():
        import snippets_example_passes.plugin as plugin

        implemented = sorted(n for n in vars(plugin) if n.startswith("snippets_") and callable(getattr(plugin, n)))
        assert rows[("plugin", EXAMPLE)]["hooks"] == ", ".join(implemented)


def test_listing_imports_only_the_target_asked_for() -> None:
    """STYLE rule 9, checked in a fresh interpreter: `plugins` imports no target, `plugins -t shave` only shave."""
    code = textwrap.dedent("""
        import contextlib, io, sys
        from snippets_core.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["plugins"]) == 0
        assert not any(m in sys.modules for m in ("snippets_x86_64", "snippets_shave")), sorted(sys.modules)
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["plugins", "--target", "shave"]) == 0
        assert "snippets_shave" in sys.modules and "snippets_x86_64" not in sys.modules
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def _pipeline(capsys: pytest.CaptureFixture[str], target: str, *extra: str) -> list[dict[str, str]]:
    code, out, err = run_cli(capsys, "plugins", "--target", target, "--json", *extra)
    assert code == 0, err
    return json.loads(out)["pipelines"]


@needs_example
@pytest.mark.parametrize("target", ["interpreter", "x86_64_avx512"])
def test_the_example_pass_sits_right_after_its_anchor(capsys: pytest.CaptureFixture[str], target: str) -> None:
    from snippets_example_passes.plugin import POSITION

    if target not in {ep.name for ep in metadata.entry_points(group="snippets.targets")} | {"interpreter"}:
        pytest.skip(f"{target} is not installed")
    entries = _pipeline(capsys, target)
    assert [e["pipeline"] for e in entries] == sorted(
        (e["pipeline"] for e in entries), key=["data-flow", "control-flow", "validation", "pre-generation"].index)
    data_flow = [e for e in entries if e["pipeline"] == "data-flow"]
    names = [e["name"] for e in data_flow]
    i = names.index(EXAMPLE_PASS)
    assert names[i - 1] == POSITION.anchor and POSITION.after
    assert data_flow[i]["origin"] == EXAMPLE and data_flow[i]["cls"] == "MulAddToFusedMulAdd"
    assert data_flow[i]["position"] == f"after {POSITION.anchor}"
    # the core passes are the ones the data-flow and lowering pipelines hold, each marked core
    assert {e["origin"] for e in entries} <= {"core", EXAMPLE, f"target:{target}"}
    assert [e["name"] for e in entries if e["pipeline"] == "pre-generation"][:2] == ["init-live-ranges",
                                                                                      "assign-registers"]


@needs_example
def test_a_blocked_plugin_contributes_no_pass(capsys: pytest.CaptureFixture[str]) -> None:
    entries = _pipeline(capsys, "interpreter", "-c", f"block_plugins=[\"{EXAMPLE}\"]")
    assert EXAMPLE_PASS not in [e["name"] for e in entries]
    code, out, _ = run_cli(capsys, "plugins", "-c", f"block_plugins=[\"{EXAMPLE}\"]")
    assert code == 0 and any(line.split()[:2] == ["plugin", EXAMPLE] and line.endswith("blocked")
                             for line in out.splitlines())


def test_text_output_marks_plugin_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "plugins", "--target", "interpreter")
    assert code == 0, err
    assert "pass pipelines for target interpreter" in out and "pre-generation:" in out
    if _example_installed():
        line = next(x for x in out.splitlines() if EXAMPLE_PASS in x)
        assert f"[{EXAMPLE}] after convert-power-to-power-static" in line


def test_unknown_target_and_reference_are_one_line_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "plugins", "--target", "bogus")
    assert code == 2 and "no target named 'bogus'" in err
    code, _, err = run_cli(capsys, "plugins", "--target", "reference")
    assert code == 2 and "no pass pipeline" in err
    code, _, err = run_cli(capsys, "plugins", "-c", "no_such_key=1")
    assert code == 2 and "unknown config key 'no_such_key'" in err


@needs_example
def test_a_pass_with_an_unknown_anchor_names_its_plugin() -> None:
    from snippets_core.codegen.pass_pipelines import effective_pipelines
    from snippets_core.errors import PluginError
    from snippets_core.passes.pass_manager import PassPosition, PositionedPass
    from snippets_core.plugins import PluginHost, hookimpl
    from snippets_example_passes.mul_add_to_fused_mul_add import MulAddToFusedMulAdd

    class BadAnchor:
        @hookimpl
        def snippets_positioned_passes(self, target_name, config):  # type: ignore[no-untyped-def]
            return [PositionedPass(MulAddToFusedMulAdd(), PassPosition("no-such-pass", after=True))]

    host = PluginHost(autoload=False)
    host.register(BadAnchor(), "bad_anchor")
    with pytest.raises(PluginError, match="plugin 'bad_anchor'.*mul-add-to-fused-mul-add.*no-such-pass"):
        effective_pipelines("interpreter", host)

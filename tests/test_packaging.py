"""Packaging contracts: the core imports no target and no encoder; distributions declare their entry points."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "snippets_core"
FORBIDDEN = ("iced_x86", "flatbuffers", "snippets_x86_64", "snippets_shave")


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module name an import statement or an importlib.import_module("...") call in ``path`` names."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def test_core_sources_import_no_target_or_encoder() -> None:
    files = sorted(CORE.rglob("*.py"))
    assert len(files) > 10  # the walk found the package
    offenders = [
        f"{f.relative_to(ROOT)}:{line}: {mod}"
        for f in files
        for line, mod in _imported_modules(f)
        if mod.split(".")[0] in FORBIDDEN
    ]
    assert offenders == []


def test_the_import_check_sees_every_form(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import iced_x86\nfrom flatbuffers import Builder\nimport importlib\n"
        "def f():\n    import snippets_shave.blob\n    return importlib.import_module('snippets_x86_64')\n"
    )
    assert sorted(m for _, m in _imported_modules(sample)) == sorted(
        ["iced_x86", "flatbuffers", "importlib", "snippets_shave.blob", "snippets_x86_64"]
    )


def test_cli_and_target_listing_load_no_target_module() -> None:
    code = (
        "import sys\n"
        "from snippets_core.cli import main\n"
        "assert main(['targets']) == 0\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})\n"
        "print('LOADED', bad)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "LOADED []" in proc.stdout


def _pyproject(path: Path) -> dict:
    return tomllib.loads(path.read_text())


def test_example_plugin_distribution_declares_its_entry_point() -> None:
    meta = _pyproject(ROOT / "plugins" / "example_passes" / "pyproject.toml")
    assert meta["project"]["name"] == "snippets-example-passes"
    eps = meta["project"]["entry-points"]["snippets.plugins"]
    assert eps == {"example_passes": "snippets_example_passes.plugin"}
    module = ROOT / "plugins" / "example_passes" / "snippets_example_passes" / "plugin.py"
    assert module.is_file()


@pytest.mark.parametrize("folder, ep_name", [("targets/x86_64", "x86_64_avx512"), ("targets/shave", "shave")])
def test_target_distributions_declare_their_entry_point(folder: str, ep_name: str) -> None:
    path = ROOT / folder / "pyproject.toml"
    if not path.is_file():
        pytest.skip(f"{folder} has no pyproject.toml in this tree")
    eps = _pyproject(path)["project"]["entry-points"]["snippets.targets"]
    assert list(eps) == [ep_name]
    module = eps[ep_name].split(":")[0]
    assert (ROOT / folder / Path(*module.split("."))).with_suffix(".py").is_file()


def test_core_distribution_has_console_script_and_test_extra() -> None:
    meta = _pyproject(ROOT / "pyproject.toml")
    assert meta["project"]["scripts"]["snippets"] == "snippets_core.cli:main"
    assert any(req.startswith("pytest") for req in meta["project"]["optional-dependencies"]["test"])


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_makefile_installs_every_distribution_of_the_tree() -> None:
    proc = subprocess.run(
        ["make", "-n", "-B", "install"], cwd=ROOT, check=False, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    install = [line for line in proc.stdout.splitlines() if "pip install" in line]
    assert len(install) == 1
    dists = ["."] + sorted(
        str(p.parent.relative_to(ROOT))
        for p in ROOT.glob("*/*/pyproject.toml")
        if p.parent.parent.name in ("plugins", "targets")
    )
    for d in dists:
        assert f'-e "{d}[test]"' in install[0], d

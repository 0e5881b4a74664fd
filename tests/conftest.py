"""Fixtures shared by the core tests."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest


@pytest.fixture
def clean_plugin_env(monkeypatch: pytest.MonkeyPatch):
    """No plugin environment variables, and fresh shared plugin hosts before and after the test."""
    from snippets_core.plugins import ENV_BLOCK, ENV_DISABLE_AUTOLOAD, reset_hosts

    monkeypatch.delenv(ENV_DISABLE_AUTOLOAD, raising=False)
    monkeypatch.delenv(ENV_BLOCK, raising=False)
    reset_hosts()
    yield
    reset_hosts()


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Install fake distributions: ``site(dist, {group: {name: value}}, {module: source})``."""
    monkeypatch.syspath_prepend(str(tmp_path))
    created: list[str] = []

    def install(dist: str, entry_points: dict[str, dict[str, str]], modules: dict[str, str]) -> None:
        info = tmp_path / f"{dist.replace('-', '_')}-1.2.3.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.2.3\n")
        lines = []
        for group, eps in entry_points.items():
            lines.append(f"[{group}]")
            lines += [f"{k} = {v}" for k, v in eps.items()]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        for mod, src in modules.items():
            (tmp_path / f"{mod}.py").write_text(textwrap.dedent(src))
            created.append(mod)

    yield install
    for mod in created:
        sys.modules.pop(mod, None)

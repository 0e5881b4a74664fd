"""The ONNX conformance tests print their included/excluded counts in the terminal summary."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest


def _load(name: str, file: str):  # type: ignore[no-untyped-def]
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / file)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[name] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    return sys.modules[name]


def _suite():  # type: ignore[no-untyped-def]
    return _load("snippets_onnx_suite", "suite.py")


# Loaded before the test modules of this folder, which take them from sys.modules (test folders are not
# packages under --import-mode=importlib).
_suite()
_load("snippets_torch_like_models", "torch_like_models.py")
_load("snippets_onnx_targets", "targets.py")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    lines = config.stash.get(_suite().SUMMARY_KEY, [])
    if lines:
        terminalreporter.section("ONNX backend conformance")
        for line in lines:
            terminalreporter.write_line(line)

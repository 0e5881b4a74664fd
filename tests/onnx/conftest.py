"""The ONNX conformance tests print their included/excluded counts in the terminal summary."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest


def _suite():  # type: ignore[no-untyped-def]
    name = "snippets_onnx_suite"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / "suite.py")
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[name] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    return sys.modules[name]


_suite()  # loaded before the test modules of this folder, which take it from sys.modules


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    lines = config.stash.get(_suite().SUMMARY_KEY, [])
    if lines:
        terminalreporter.section("ONNX backend conformance")
        for line in lines:
            terminalreporter.write_line(line)

"""Tests marked ``avx512`` are skipped, with the reason, on a machine that cannot run AVX-512 code."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from snippets_x86_64.cpu import REQUIRED_FEATURES, is_x86_64, missing_features

    if not is_x86_64():
        reason = "not an x86-64 machine"
    else:
        missing = missing_features()
        reason = f"CPU/OS lacks {', '.join(missing)} (needs {', '.join(REQUIRED_FEATURES)})" if missing else ""
    if not reason:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "avx512" in item.keywords:
            item.add_marker(skip)

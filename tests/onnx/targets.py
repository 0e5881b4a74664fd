"""The targets the model tests of this folder run on: the core's two, and x86_64_avx512 where it is installed
and the CPU runs it (marked ``avx512``, skipped with the reason otherwise)."""

from __future__ import annotations

import pytest

from snippets_core.plugins.targets import load_target, target_names


def x86_unavailable() -> str | None:
    """Why x86_64_avx512 cannot run here, or None."""
    if "x86_64_avx512" not in target_names():
        return "target x86_64_avx512 is not installed"
    return load_target("x86_64_avx512").available()


X86 = pytest.param("x86_64_avx512", marks=[pytest.mark.avx512, pytest.mark.skipif(x86_unavailable() is not None,
                                                                                   reason=str(x86_unavailable()))])
TARGETS = ["reference", "interpreter", X86]

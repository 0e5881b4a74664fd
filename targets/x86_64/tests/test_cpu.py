"""The CPUID/XGETBV feature check, against the kernel's own view in /proc/cpuinfo."""

from __future__ import annotations

import re

import pytest

from snippets_core.errors import SnippetsError
from snippets_x86_64 import cpu
from snippets_x86_64.cpu import UnsupportedCpuError, cpu_features, missing_features, require_avx512

pytestmark = pytest.mark.skipif(not cpu.is_x86_64(), reason="CPUID exists only on x86-64")


def proc_cpuinfo_flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        match = re.search(r"^flags\s*:(.*)$", f.read(), re.MULTILINE)
    assert match, "no flags line in /proc/cpuinfo"
    return set(match.group(1).split())


def test_features_agree_with_proc_cpuinfo():
    # Linux reports a flag when CPUID has it and the kernel enabled the state (XCR0), our rule too
    flags = proc_cpuinfo_flags()
    known = set(cpu._CPUID_BITS)
    assert sorted(cpu_features()) == sorted(known & flags)


def test_missing_features_lists_what_is_not_there():
    assert missing_features(("avx512f", "no_such_feature")) == (
        [] if "avx512f" in proc_cpuinfo_flags() else ["avx512f"]
    ) + ["no_such_feature"]


def test_require_avx512_raises_a_typed_error_naming_the_missing_feature():
    with pytest.raises(UnsupportedCpuError, match="lacks no_such_feature") as info:
        require_avx512(("avx512f", "no_such_feature") if "avx512f" in proc_cpuinfo_flags() else ("no_such_feature",))
    assert isinstance(info.value, SnippetsError)


@pytest.mark.avx512
def test_require_avx512_passes_on_an_avx512_machine():
    require_avx512()


def test_require_avx512_on_a_machine_without_it(monkeypatch):
    monkeypatch.setattr(cpu, "cpu_features", lambda: frozenset({"avx2", "fma"}))
    with pytest.raises(UnsupportedCpuError, match="lacks avx512f, avx512bw, avx512dq, avx512vl"):
        require_avx512()

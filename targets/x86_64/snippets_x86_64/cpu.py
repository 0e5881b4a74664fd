"""What this CPU and OS can run: CPUID feature bits, checked against XGETBV for the OS saving the state.

CPUID says what the core implements; the register state (ymm, zmm, opmask, AMX tiles) is usable only if the
OS enabled saving it on context switches, which XCR0 (read by XGETBV) says. A feature is reported only when
both agree. Feature names follow the Linux ``/proc/cpuinfo`` flags (avx512f, avx512_bf16, amx_tile, ...).
CPUID and XGETBV run as a tiny JIT-compiled function written with this package's own assembly DSL.
"""

from __future__ import annotations

import ctypes
import platform
from functools import cache

from snippets_core.errors import SnippetsError

#: What the target's kernels need: AVX-512 F, BW, DQ and VL (oneDNN's "avx512_core"; every AVX-512 CPU
#: except the Xeon Phi line has them).
REQUIRED_FEATURES: tuple[str, ...] = ("avx512f", "avx512bw", "avx512dq", "avx512vl")

# (leaf, subleaf, register index eax=0 ebx=1 ecx=2 edx=3, bit) -> feature
_CPUID_BITS: dict[str, tuple[int, int, int, int]] = {
    "sse4_1": (1, 0, 2, 19), "sse4_2": (1, 0, 2, 20), "fma": (1, 0, 2, 12), "f16c": (1, 0, 2, 29),
    "avx": (1, 0, 2, 28),
    "bmi1": (7, 0, 1, 3), "avx2": (7, 0, 1, 5), "bmi2": (7, 0, 1, 8),
    "avx512f": (7, 0, 1, 16), "avx512dq": (7, 0, 1, 17), "avx512ifma": (7, 0, 1, 21), "avx512cd": (7, 0, 1, 28),
    "avx512bw": (7, 0, 1, 30), "avx512vl": (7, 0, 1, 31),
    "avx512vbmi": (7, 0, 2, 1), "avx512_vbmi2": (7, 0, 2, 6), "gfni": (7, 0, 2, 8), "avx512_vnni": (7, 0, 2, 11),
    "avx512_bitalg": (7, 0, 2, 12), "avx512_vpopcntdq": (7, 0, 2, 14),
    "avx512_vp2intersect": (7, 0, 3, 8), "amx_bf16": (7, 0, 3, 22), "avx512_fp16": (7, 0, 3, 23),
    "amx_tile": (7, 0, 3, 24), "amx_int8": (7, 0, 3, 25),
    "avx_vnni": (7, 1, 0, 4), "avx512_bf16": (7, 1, 0, 5),
}  # fmt: skip

# XCR0 state components the OS must save for each family of features
_XCR0_AVX = 0b110  # SSE + AVX (ymm upper halves)
_XCR0_AVX512 = 0b1110_0110  # + opmask, zmm0-15 upper halves, zmm16-31
_XCR0_AMX = 0b11 << 17  # XTILECFG + XTILEDATA
_OSXSAVE = (1, 0, 2, 27)


class UnsupportedCpuError(SnippetsError):
    """The CPU (or the OS) cannot run this target's code, e.g. it lacks AVX-512F."""


class _Cpuid:
    """``cpuid(leaf, subleaf) -> (eax, ebx, ecx, edx)`` and ``xgetbv(0)``, as two JIT-compiled functions."""

    def __init__(self) -> None:
        from snippets_x86_64.asm import Function, eax, ebx, ecx, edi, edx, esi, r8, rax, rdx

        fn = Function("cpuid", args=("leaf", "subleaf", "out"))
        fn.mov(eax, edi)
        fn.mov(ecx, esi)
        fn.mov(r8, fn.arg("out"))  # cpuid overwrites rdx (and rbx, which the prologue saves)
        fn.cpuid()
        for i, reg in enumerate((eax, ebx, ecx, edx)):
            fn.mov(r8 + 4 * i, reg)
        self._cpuid = fn.finalize(None, (ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p))

        fn = Function("xgetbv", args=("index",))
        fn.mov(ecx, edi)
        fn.xgetbv()  # edx:eax
        fn.shl(rdx, 32)
        fn.or_(rax, rdx)
        self._xgetbv = fn.finalize(ctypes.c_uint64, (ctypes.c_uint32,))

    def cpuid(self, leaf: int, subleaf: int = 0) -> tuple[int, int, int, int]:
        out = (ctypes.c_uint32 * 4)()
        self._cpuid(leaf, subleaf, ctypes.addressof(out))
        return tuple(out)  # type: ignore[return-value]

    def xgetbv(self, index: int = 0) -> int:
        return self._xgetbv(index)


def is_x86_64() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


@cache
def cpu_features() -> frozenset[str]:
    """The features this CPU has and the OS enabled (empty on a machine that is not x86-64)."""
    if not is_x86_64():
        return frozenset()
    probe = _Cpuid()
    max_leaf = probe.cpuid(0)[0]
    leaves: dict[tuple[int, int], tuple[int, int, int, int]] = {(1, 0): probe.cpuid(1)}
    if max_leaf >= 7:
        leaves[(7, 0)] = probe.cpuid(7, 0)
        if leaves[(7, 0)][0] >= 1:
            leaves[(7, 1)] = probe.cpuid(7, 1)

    def has(bit: tuple[int, int, int, int]) -> bool:
        leaf, sub, reg, pos = bit
        return (leaf, sub) in leaves and bool(leaves[(leaf, sub)][reg] >> pos & 1)

    # XGETBV faults unless the OS turned on OSXSAVE; without it no AVX state is usable anyway
    xcr0 = probe.xgetbv(0) if has(_OSXSAVE) else 0
    os_avx = xcr0 & _XCR0_AVX == _XCR0_AVX
    os_avx512 = xcr0 & _XCR0_AVX512 == _XCR0_AVX512
    os_amx = xcr0 & _XCR0_AMX == _XCR0_AMX

    def os_ok(name: str) -> bool:
        if name.startswith("avx512"):
            return os_avx512
        if name.startswith("amx"):
            return os_amx
        if name.startswith(("avx", "fma", "f16c")):
            return os_avx
        return True

    return frozenset(name for name, bit in _CPUID_BITS.items() if has(bit) and os_ok(name))


def missing_features(required: tuple[str, ...] = REQUIRED_FEATURES) -> list[str]:
    """The required features this machine lacks, in the order asked."""
    have = cpu_features()
    return [name for name in required if name not in have]


def require_avx512(required: tuple[str, ...] = REQUIRED_FEATURES) -> None:
    """Raise :class:`UnsupportedCpuError` naming what is missing unless AVX-512 (F, BW, DQ, VL) is usable."""
    if not is_x86_64():
        raise UnsupportedCpuError(
            f"the x86_64_avx512 target needs an x86-64 CPU with AVX-512, this machine is {platform.machine()!r}"
        )
    missing = missing_features(required)
    if missing:
        raise UnsupportedCpuError(
            f"the x86_64_avx512 target needs a CPU (and OS) with {', '.join(required)}; "
            f"this one lacks {', '.join(missing)} (it has: {', '.join(sorted(cpu_features())) or 'none of them'})"
        )

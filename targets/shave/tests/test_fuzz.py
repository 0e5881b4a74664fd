"""Mutated blobs (seeded byte flips and truncations) raise typed errors: never another exception, never a hang.

Any flip breaks the header's CRC-32 (a ChecksumError); to reach the deeper checks behind it, most cases re-seal
the mutated bytes with a fresh checksum first, as a corrupting writer would."""

from __future__ import annotations

import random
import signal
import time

import numpy as np
import pytest

from snippets_core.errors import SnippetsError
from snippets_shave import reference_kernels as rk
from snippets_shave.abi import SOFTMAX_PARAMS
from snippets_shave.blob import Target, seal_checksum, write_blob
from snippets_shave.constants import WIN_C
from snippets_shave.elf import read_kernel_elf
from snippets_shave.runtime_kernel import runtime_kernel_elf
from snippets_shave.sim import run

CASE_SECONDS = 20  # a case slower than this is a hang


class _Hang(Exception):
    pass


def _base_blobs(tiled) -> list[tuple[bytes, dict[str, np.ndarray]]]:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    add = write_blob(tiled(rk.eltwise_binary("add", "f32"), 2, (2, 37), np.float32, Target(), chunks=3))
    add_in = {f"x{i}": rng.standard_normal((2, 37)).astype(np.float32) for i in range(2)}
    sm = tiled(
        rk.softmax_last_axis_f32(), 1, (3, 9), np.float32, Target.lnl(), scalars={"axis": 1}, row_len=9,
        layout=SOFTMAX_PARAMS, chunks=2,
    )  # fmt: skip
    sm_in = {"x0": rng.standard_normal((3, 9)).astype(np.float32)}
    return [(add, add_in), (write_blob(sm), sm_in)]


def _run_case(data: bytes, inputs: dict[str, np.ndarray]) -> str:
    """'ok' or the typed error's class name; any other exception fails the test."""
    try:
        run(data, inputs, step_limit=100_000, runtime_step_limit=100_000)
    except SnippetsError as exc:
        return type(exc).__name__
    return "ok"


@pytest.fixture
def alarm():  # type: ignore[no-untyped-def]
    def on_alarm(signum, frame):  # type: ignore[no-untyped-def]
        raise _Hang()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


def _resealed(data: bytes) -> bytes:
    """``data`` with a checksum that matches it, or as is when its header is too broken to find the field."""
    try:
        return seal_checksum(data)
    except SnippetsError:
        return data


def _guarded(data: bytes, inputs: dict[str, np.ndarray], what: str) -> str:
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        return _run_case(data, inputs)
    except _Hang:
        pytest.fail(f"{what}: simulator did not finish within {CASE_SECONDS}s")
    except Exception as exc:  # noqa: BLE001 - the point of the test is that nothing untyped escapes
        pytest.fail(f"{what}: untyped {type(exc).__name__}: {exc}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def test_base_blobs_run(tiled) -> None:  # type: ignore[no-untyped-def]
    for data, inputs in _base_blobs(tiled):
        assert _run_case(data, inputs) == "ok"


def test_byte_flips(tiled, alarm) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(2024)
    outcomes: dict[str, int] = {}
    start = time.perf_counter()
    for case in range(300):
        data, inputs = _base_blobs(tiled)[case % 2]
        mutated = bytearray(data)
        for _ in range(rng.choice([1, 1, 2, 4, 16])):
            pos = rng.randrange(len(mutated))
            mutated[pos] = rng.randrange(256) if rng.random() < 0.5 else mutated[pos] ^ (1 << rng.randrange(8))
        result = _guarded(_resealed(bytes(mutated)), inputs, f"flip case {case}")
        outcomes[result] = outcomes.get(result, 0) + 1
    # flips that land in tensor payloads or padding legitimately run; most must be caught as typed errors
    assert sum(v for k, v in outcomes.items() if k != "ok") > 100, outcomes
    assert time.perf_counter() - start < 300


def test_truncations_always_raise(tiled, alarm) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(7)
    for case in range(150):
        data, inputs = _base_blobs(tiled)[case % 2]
        cut = rng.randrange(len(data))
        result = _guarded(data[:cut], inputs, f"truncation case {case} at {cut}")
        assert result != "ok", f"truncated blob ({cut} of {len(data)} bytes) ran"


def test_flipped_kernel_code_is_caught_or_runs(tiled, alarm) -> None:  # type: ignore[no-untyped-def]
    """Flips aimed at kernel instruction words: bad encodings, wild branches and runaway loops stay typed."""
    rng = random.Random(99)
    data, inputs = _base_blobs(tiled)[1]
    elf = rk.softmax_last_axis_f32()
    at = data.find(elf)
    assert at > 0
    text_start = at + read_kernel_elf(elf).text_file_offset
    outcomes: dict[str, int] = {}
    for case in range(150):
        mutated = bytearray(data)
        pos = text_start + rng.randrange(8 * 100)
        mutated[pos] ^= 1 << rng.randrange(8)
        result = _guarded(_resealed(bytes(mutated)), inputs, f"code flip case {case}")
        outcomes[result] = outcomes.get(result, 0) + 1
    assert outcomes.get("InstructionDecodeError", 0) > 20, outcomes


def test_flipped_runtime_kernel_code_is_caught_or_runs(tiled, alarm) -> None:  # type: ignore[no-untyped-def]
    """Flips aimed at the Runtime Kernel's words: bad encodings, wild branches, barrier ids out of range, runaway
    or halted runtimes all stay typed (decode errors, RuntimeKernelError, StepLimitExceeded, DeadlockError)."""
    rng = random.Random(5)
    data, inputs = _base_blobs(tiled)[0]
    elf = runtime_kernel_elf()
    at = data.find(elf)
    assert at > 0
    text_start = at + read_kernel_elf(elf, base=WIN_C).text_file_offset
    words = len(read_kernel_elf(elf, base=WIN_C).text) // 8
    outcomes: dict[str, int] = {}
    for case in range(120):
        mutated = bytearray(data)
        pos = text_start + 8 * rng.randrange(words) + rng.randrange(8)
        mutated[pos] ^= 1 << rng.randrange(8)
        result = _guarded(_resealed(bytes(mutated)), inputs, f"runtime code flip case {case}")
        outcomes[result] = outcomes.get(result, 0) + 1
    assert outcomes.get("InstructionDecodeError", 0) > 20 and len(outcomes) > 2, outcomes


def test_any_flipped_byte_is_caught_by_the_checksum(tiled, alarm) -> None:  # type: ignore[no-untyped-def]
    """Without re-sealing, one flipped bit or byte anywhere (payloads and padding too) never runs."""
    rng = random.Random(31)
    outcomes: dict[str, int] = {}
    for case in range(200):
        data, inputs = _base_blobs(tiled)[case % 2]
        mutated = bytearray(data)
        pos = rng.randrange(len(mutated))
        mutated[pos] ^= (1 << rng.randrange(8)) if case % 2 else rng.randrange(1, 256)
        result = _guarded(bytes(mutated), inputs, f"unsealed flip case {case} at {pos}")
        assert result != "ok", f"flip at byte {pos} of {len(data)} ran"
        outcomes[result] = outcomes.get(result, 0) + 1
    assert outcomes.get("ChecksumError", 0) > 150, outcomes

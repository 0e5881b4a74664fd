"""The native worker pool (snippets_x86_64.native_pool) driven directly with a small DSL harness that writes
``2 * i + 1`` to ``out[i]`` for its chunk of indices (numpy computes the expected array).

Every call that could hang runs on a helper thread joined with a timeout, so a lost hand-over fails the test
instead of blocking the run."""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from snippets_core.errors import CodegenError
from snippets_x86_64 import native_pool as np_mod
from snippets_x86_64.asm import Function, r8, rax, rcx, rdi, rdx, rsi
from snippets_x86_64.native_pool import DONE, PAGE, POSTED, SEQ, NativePool, native_pool

pytestmark = pytest.mark.avx512  # the pool runs JIT code; the tests share the x86-64 skip rule
TIMEOUT = 30.0


def _build_fill() -> Any:
    """``fill(delay, out, start, count)``: ``out[i] = 2 * i + 1`` for i in [start, start + count), each store
    after ``delay`` idle iterations (to keep a worker busy for a while)."""
    fn = Function("fill", args=("delay", "out", "start", "count"))
    fn.test(rcx, rcx)
    fn.jz(fn.exit)
    loop = fn.label("loop")
    fn.mov(r8, rdi)
    write = fn.new_label("write")
    spin = fn.label("spin")
    fn.test(r8, r8)
    fn.jz(write)
    fn.dec(r8)
    fn.jmp(spin)
    fn.bind(write)
    fn.mov(rax, rdx)
    fn.add(rax, rax)
    fn.inc(rax)
    fn.mov(rsi + rdx * 8, rax)
    fn.inc(rdx)
    fn.dec(rcx)
    fn.jnz(loop)
    return fn.finalize(None, (ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64))


FILL = _build_fill()


def _split(n: int, parts: int) -> list[tuple[int, int]]:
    base, extra = divmod(n, parts)
    out, start = [], 0
    for t in range(parts):
        c = base + (1 if t < extra else 0)
        out.append((start, c))
        start += c
    return out


def _job(n: int, parts: int, delay: int = 0) -> tuple[np.ndarray, list[tuple[int, int, int, int, int]], Callable]:
    """An output array, the workers' chunks and the caller's chunk for ``parts`` threads over ``n`` indices."""
    out = np.zeros(n, np.int64)
    addr = out.ctypes.data
    chunks = _split(n, parts)
    own_start, own_count = chunks[0]
    posted = [(FILL.address, delay, addr, s, c) for s, c in chunks[1:]]
    return out, posted, lambda: FILL(delay, addr, own_start, own_count)


def _expected(n: int) -> np.ndarray:
    return 2 * np.arange(n, dtype=np.int64) + 1


def _in_thread(fn: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
    """``fn()`` on a daemon thread; fails the test if it has not returned within ``timeout`` seconds."""
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"the pool call did not return within {timeout} s (a lost hand-over)"
    if "error" in box:
        raise box["error"]
    return box.get("value")


@pytest.mark.parametrize("parts", [1, 2, 3, 4])
def test_chunks_run_on_the_workers_and_the_caller(parts: int) -> None:
    pool = NativePool()
    try:
        for n in (1, 7, 1000):
            out, chunks, own = _job(n, parts)
            _in_thread(lambda chunks=chunks, own=own: pool.run(chunks, own))
            np.testing.assert_array_equal(out, _expected(n))
    finally:
        pool.close()


def test_a_closed_pool_runs_every_chunk_on_the_caller() -> None:
    """close() (the atexit hook) makes the workers leave; a later call used to post to a worker that was gone
    and wait for it forever."""
    pool = NativePool()
    out, chunks, own = _job(100, 3)
    _in_thread(lambda: pool.run(chunks, own))
    pool.close()
    assert not any(t.is_alive() for t in pool._threads)
    out, chunks, own = _job(100, 3)
    _in_thread(lambda: pool.run(chunks, own))
    np.testing.assert_array_equal(out, _expected(100))
    assert pool.closed


def test_a_sequence_word_changed_behind_the_callers_back_is_reported() -> None:
    """If anything but the caller writes a worker's sequence word, the worker runs and reports that number;
    the caller waited forever for its own. Now it raises, naming the block's words."""
    pool = NativePool()
    try:
        out, chunks, own = _job(64, 2)
        _in_thread(lambda: pool.run(chunks, own))  # the worker exists
        np.testing.assert_array_equal(out, _expected(64))
        block = pool._blocks[0]
        seq_word = ctypes.c_uint32.from_address(block + SEQ)
        done_word = ctypes.c_uint32.from_address(block + DONE)
        posted = ctypes.c_uint32.from_address(block + POSTED)  # the number the caller posts, in the block
        kept, chunks, own = _job(64, 2)  # kept alive: the chunks write into it
        stray = (posted.value + 1 + 7) & 0xFFFF_FFFF

        def own_and_stray_write() -> None:
            own()
            while done_word.value != posted.value:  # the worker finished the posted chunk
                pass
            seq_word.value = stray  # a stray write, then the worker's wake-up for it
            np_mod._syscall(np_mod.SYS_FUTEX, block + SEQ, np_mod.FUTEX_WAKE_PRIVATE, 1, None)
            while done_word.value != stray:
                pass

        with pytest.raises(CodegenError, match=rf"native worker 0 cannot finish .*'seq': {stray}\b"):
            _in_thread(lambda: pool.run(chunks, own_and_stray_write))
        np.testing.assert_array_equal(kept, _expected(64))  # the chunk ran (twice: the stray number too)
    finally:
        pool.close()


def test_an_error_in_the_callers_chunk_waits_for_the_workers() -> None:
    pool = NativePool()
    try:
        out, chunks, own = _job(3000, 3, delay=2000)

        def failing() -> None:
            raise ValueError("the caller's chunk failed")

        with pytest.raises(ValueError, match="caller's chunk failed"):
            _in_thread(lambda: pool.run(chunks, failing))
        # the workers' chunks completed before run returned
        start = _split(3000, 3)[1][0]
        np.testing.assert_array_equal(out[start:], _expected(3000)[start:])
        out, chunks, own = _job(3000, 3)
        _in_thread(lambda: pool.run(chunks, own))
        np.testing.assert_array_equal(out, _expected(3000))
    finally:
        pool.close()


def _child_status(body: Callable[[], None]) -> int:
    """Run ``body`` in a forked child (exit 0 on success, 1 on an exception); returns the raw wait status."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            faulthandler.disable()  # an expected fault is reported by the parent, not dumped by the child
            signal.alarm(int(TIMEOUT))
            body()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return status


@pytest.mark.parametrize("offset", [-8, PAGE])
def test_control_blocks_sit_between_guard_pages(offset: int) -> None:
    """A stray linear write just before or after a control block's page faults instead of landing in it."""
    pool = NativePool()
    try:
        pool._grow(1)
        block = pool._blocks[0]
        status = _child_status(lambda: setattr(ctypes.c_uint64.from_address(block + offset), "value", 1))
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSEGV, status
    finally:
        pool.close()


def test_fork_while_a_worker_is_mid_chunk() -> None:
    """The child of a fork taken while the parent's worker runs a chunk builds its own pool; both finish."""
    pool = native_pool()
    out, chunks, own = _job(4000, 2, delay=20_000)
    with pool.lock:
        parent = threading.Thread(target=lambda: pool.run(chunks, own), daemon=True)
        parent.start()

        def child() -> None:
            assert native_pool() is not pool
            c_out, c_chunks, c_own = _job(999, 3)
            native_pool().run(c_chunks, c_own)
            if not np.array_equal(c_out, _expected(999)):
                raise AssertionError("wrong bytes in the child")

        status = _child_status(child)
        parent.join(TIMEOUT)
        assert not parent.is_alive()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    np.testing.assert_array_equal(out, _expected(4000))


def test_several_threads_and_forks_share_the_process_pool() -> None:
    """Python threads take turns on the process pool (a busy pool: the chunks run on the caller), with forks
    in between; every call gives the right bytes and none waits forever."""
    pool = native_pool()
    errors: list[BaseException] = []
    calls = [0] * 3

    def caller(k: int) -> None:
        rng = np.random.default_rng(k)
        try:
            for _ in range(300):
                n, parts = int(rng.integers(1, 3000)), int(rng.integers(1, 4))
                out, chunks, own = _job(n, parts)
                if pool.lock.acquire(blocking=False):
                    try:
                        pool.run(chunks, own)
                    finally:
                        pool.lock.release()
                else:
                    own()
                    for _, delay, addr, s, c in chunks:
                        FILL(delay, addr, s, c)
                if not np.array_equal(out, _expected(n)):
                    raise AssertionError(f"wrong bytes for n={n} parts={parts}")
                calls[k] += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(k,), daemon=True) for k in range(3)]
    for t in threads:
        t.start()

    def child() -> None:
        out, chunks, own = _job(500, 3)
        _in_thread(lambda: native_pool().run(chunks, own))
        if not np.array_equal(out, _expected(500)):
            raise AssertionError("wrong bytes in the child")

    for _ in range(5):
        status = _child_status(child)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    for t in threads:
        t.join(TIMEOUT * 2)
    assert not any(t.is_alive() for t in threads), "a caller did not finish"
    assert not errors, errors
    assert calls == [300, 300, 300]


def test_a_deferred_call_finishes_at_the_next_use_of_the_pool() -> None:
    """``run_deferred`` returns after the caller's chunk; ``sync``, a later ``run_job`` or ``close`` waits for the
    workers' chunks (slowed down here, so they are still running when the call returns)."""
    pool = NativePool()
    try:
        n = 4000
        first, chunks, _ = _job(n, 2, delay=2000)
        job = np_mod.Job([(FILL.address, 0, first.ctypes.data, *_split(n, 2)[0]), *chunks])
        with pool.lock:
            _in_thread(lambda: pool.run_deferred(job, (first,)))
            assert pool.pending is not None and pool.pending[1] == (first,)  # held until the workers are done
            _in_thread(pool.sync)
        assert pool.pending is None
        np.testing.assert_array_equal(first, _expected(n))
        # a deferred call, then an ordinary one: the ordinary one waits for the first's workers
        first[:] = 0
        second, more, own = _job(n, 2)
        with pool.lock:
            _in_thread(lambda: pool.run_deferred(job, (first,)))
            _in_thread(lambda: pool.run_job(np_mod.Job([(FILL.address, 0, second.ctypes.data, *_split(n, 2)[0]),
                                                        *more])))
        assert pool.pending is None
        np.testing.assert_array_equal(first, _expected(n))
        np.testing.assert_array_equal(second, _expected(n))
        # close() lets a deferred call finish before the workers leave
        first[:] = 0
        with pool.lock:
            _in_thread(lambda: pool.run_deferred(job, (first,)))
        _in_thread(pool.close)
        np.testing.assert_array_equal(first, _expected(n))
    finally:
        pool.close()


def test_chunks_rewritten_in_place_run_inline_as_rewritten() -> None:
    """``SplitCall._set_chunks`` (a dynamic primitive's new shape) rewrites the Job's words only; a closed pool's
    inline run reads the chunks from them: the new ranges run, not the ones the Job was made with."""
    call = np_mod.SplitCall(FILL, 64, [(0, 32), (32, 32)])  # FILL(0, block, start, count) fills the argument block
    call._set_chunks([(0, 10), (10, 30)])
    block, job = call._state
    job.run_inline()
    got = np.ctypeslib.as_array(block).astype(np.int64)
    np.testing.assert_array_equal(got[:40], _expected(40))
    assert not got[40:].any()


def test_one_chunk_rewritten_in_place_runs_as_rewritten() -> None:
    """A one-thread primitive's new shape: ``_set_chunks`` stores its one (start, count) as a slice of the words."""
    call = np_mod.SplitCall(FILL, 64, [(0, 64)])
    call._set_chunks([(8, 20)])
    block, job = call._state
    job.run_inline()
    got = np.ctypeslib.as_array(block).astype(np.int64)
    np.testing.assert_array_equal(got[8:28], _expected(28)[8:])
    assert not got[:8].any() and not got[28:].any()

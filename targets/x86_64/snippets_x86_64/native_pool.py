"""Worker threads that wait and run harness chunks in native code: a parallel call costs a few microseconds.

Each worker is a Python thread that enters one JIT function, ``worker(ctrl)``, through ctypes and stays in it
(the GIL is released for its whole life). It waits for its control block's sequence number to change, runs the
posted ``harness(kernel, call_args, start, count)``, publishes the sequence number as done, and waits again.

Waiting spins first, then sleeps, as OpenMP's and oneTBB's workers do: a worker spins (``pause`` + ``rdtsc``)
for ``SPIN_US`` after its last chunk, then sets its SLEEPING word and sleeps in ``futex``. Waking a sleeping
thread costs 20-60 us on a virtual machine (an idle vCPU is halted by the hypervisor), more than a small
kernel's whole run: measured on transformer_block's FC kernels (20-100 us), a worker that slept made 2 threads
slower than 1, one that spun made them 1.3-1.8x faster. ``spin_us=0`` (or ``SNIPPETS_SPIN_US=0``) sleeps at
once, for a machine shared with other work.

The caller's side is native too: :func:`build_dispatch` posts every worker's chunk (a few stores, and a
``FUTEX_WAKE`` only for a worker whose SLEEPING word is set: a Dekker handshake with ``mfence`` on both sides),
runs the caller's own chunk, and spins until the workers' done words hold their sequence numbers, in one ctypes
call. A chunk whose worker has not claimed it by then (``lock cmpxchg`` on the block's CLAIM word: the worker was
not scheduled, the machine has more runnable threads than cores) is claimed and run by the caller, so a late
worker never makes a call slower than one thread. Only if a worker is still busy with a chunk it claimed after
``WAIT_SPIN_US`` does the caller go back to Python and sleep on the
done word (its WAITING word asks the worker for a ``FUTEX_WAKE``), every ``CHECK_NS`` checking that the worker
thread is alive and that its block still holds the posted number: a broken hand-over raises
:class:`CodegenError` with the block's words instead of hanging.

The sequence number a caller posts lives in the block (POSTED), not in Python: the number the caller waits for
is always the one the worker was given. Control blocks live in anonymous memory that is never unmapped, each
on its own page between two ``PROT_NONE`` guard pages, and the worker code is kept mapped at interpreter exit
(an atexit hook tells the workers to leave), so a worker can never touch freed memory. After ``fork`` the child
has no workers: the pool is rebuilt on first use there. A closed pool (after that hook) runs every chunk on the
caller. One caller at a time: callers take :attr:`NativePool.lock`.
"""

from __future__ import annotations

import atexit
import ctypes
import mmap
import os
import threading
import time
from typing import TYPE_CHECKING, Any

from snippets_core.errors import CodegenError
from snippets_x86_64.asm import (
    Function,
    dword,
    eax,
    ecx,
    edi,
    edx,
    qword,
    r8d,
    r9d,
    r11,
    r12,
    r12d,
    r13,
    r14,
    r15,
    rax,
    rbx,
    rcx,
    rdi,
    rdx,
    rsi,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from snippets_x86_64.asm import Assembler
    from snippets_x86_64.jit import JitFunction

SYS_FUTEX, SYS_SCHED_YIELD = 202, 24
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129
#: how long a worker spins after its last chunk before it sleeps (microseconds; ``SNIPPETS_SPIN_US`` overrides):
#: the gaps between a model's parallel kernels are shorter, so a worker is awake when the next chunk comes
SPIN_US = 100.0
#: how long the caller spins (in native code) on the workers' done words before it sleeps on one
WAIT_SPIN_US = 200.0
#: a spinning thread (worker or caller) calls ``sched_yield`` this often: when the machine has more runnable
#: threads than cores (tests, other processes), the thread it waits for may need this core to run at all
YIELD_US = 20.0
#: the caller's sleeps on a done word last at most this long (ns) before it checks the worker and the block
CHECK_NS = 1_000_000_000
#: workers per pool (the dispatch table's size)
MAX_WORKERS = 255

# control block layout, bytes (what the caller writes and what the worker writes on separate cache lines)
# SEQ: the number of the job posted last; SLEEPING: the worker is (about to be) asleep on SEQ; POSTED: the
# caller's count of jobs posted (SEQ's value); CLAIM: the number of the job taken last, by the worker or by the
# caller (``lock cmpxchg`` from the number before it: whoever swaps first runs the chunk); DONE: the number of the job finished last; WAITING: the caller
# sleeps on DONE; TAKEN: the number of the job the worker took last (diagnostics); SPIN_TICKS: TSC ticks to spin
SEQ, SLEEPING, POSTED, CLAIM = 0, 4, 8, 12
DONE, WAITING = 64, 68
HARNESS, KERNEL, ARGS, START, COUNT = 128, 136, 144, 152, 160
QUIT, SYSCALL, TAKEN, SPIN_TICKS, YIELD_TICKS = 192, 200, 208, 216, 224
BLOCK = 256
PAGE = mmap.PAGESIZE
PROT_NONE = 0
#: a job: word 0 the number of chunks (the caller's first), then per chunk (harness, kernel, args, start, count)
#: and a state word that dispatch sets when the chunk is finished (done by its worker or run by the caller)
CHUNK_WORDS = 6
#: dispatch modes (bits)
POST, RUN_OWN, WAIT = 1, 2, 4

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_syscall.argtypes = (ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)
_SYSCALL_ADDR = ctypes.cast(_libc.syscall, ctypes.c_void_p).value
_mmap = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_mprotect = _libc.mprotect
_mprotect.restype = ctypes.c_int
_mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


_CHECK_TIMEOUT = _Timespec(CHECK_NS // 1_000_000_000, CHECK_NS % 1_000_000_000)
_CHECK_TIMEOUT_ADDR = ctypes.addressof(_CHECK_TIMEOUT)


def _read_tsc(a: Assembler) -> None:
    """rax = the time-stamp counter (clobbers rdx)."""
    a.rdtsc()
    a.shl(rdx, 32)
    a.or_(rax, rdx)


def _futex(a: Assembler, word: Any, op: int, value: Any, syscall: Any) -> None:
    """``syscall(SYS_futex, word, op, value, NULL)`` through libc (``word``: a register holding the address,
    ``syscall``: a memory operand holding libc's ``syscall``). Clobbers the caller-saved registers."""
    a.mov(edi, SYS_FUTEX)
    a.mov(rsi, word)
    a.mov(edx, op)
    a.mov(ecx, value)
    a.xor(r8d, r8d)
    a.xor(r9d, r9d)
    a.mov(r11, syscall)
    a.xor(eax, eax)  # a variadic call: no vector arguments
    a.call(r11)


def _lock_last(a: Assembler) -> None:
    """Give the instruction just emitted a ``lock`` prefix (the DSL has no lock form; iced encodes the flag)."""
    a.lock_last()


def _chunk_address(a: Assembler, job: Any, index: Any, out: Any) -> None:
    """``out`` = the address of chunk ``index`` of the job at ``job`` (six words per chunk after the count)."""
    a.lea(out, index + index * 2)
    a.add(out, out)
    a.lea(out, job + out * 8 + 8)


def _sched_yield(a: Assembler, syscall: Any) -> None:
    """``syscall(SYS_sched_yield)`` through libc. Clobbers the caller-saved registers."""
    a.mov(edi, SYS_SCHED_YIELD)
    a.mov(r11, syscall)
    a.xor(eax, eax)
    a.call(r11)


def _pause_or_yield(a: Assembler, again: Any, deadline: Any, timeout: Any, next_yield: Any, period: Any,
                    syscall: Any) -> None:
    """One step of a spin-wait: ``pause``; past ``deadline`` (TSC) jump to ``timeout``; past ``next_yield`` call
    ``sched_yield`` and move ``next_yield`` on by ``period``; then jump to ``again``."""
    a.pause()  # yields the core's pipeline to a hyperthread sibling, and saves power
    _read_tsc(a)
    a.cmp(rax, deadline)
    a.jae(timeout)
    a.cmp(rax, next_yield)
    a.jb(again)
    _sched_yield(a, syscall)
    _read_tsc(a)
    a.add(rax, period)
    a.mov(next_yield, rax)
    a.jmp(again)


def build_worker() -> Function:
    """``worker(ctrl)``: wait (spin, then sleep) for a new sequence number, run the posted harness chunk, report
    it done; leave when the QUIT word is set."""
    fn = Function("worker", args=("ctrl",))
    job, top, spin, awake = fn.new_label("job"), fn.new_label("top"), fn.new_label("spin"), fn.new_label("awake")
    fn.mov(rbx, rdi)
    # the last sequence number seen: 0, the value of a fresh block (reading it instead would miss a job
    # posted before this thread got to run)
    fn.xor(r12d, r12d)
    sleep = fn.new_label("sleep")
    fn.bind(top)
    _read_tsc(fn)
    fn.mov(r15, rax)
    fn.add(r15, qword[rbx + YIELD_TICKS])  # the next sched_yield
    fn.add(rax, qword[rbx + SPIN_TICKS])
    fn.mov(r13, rax)  # spin until the TSC passes this
    fn.bind(spin)
    fn.mov(eax, dword[rbx + SEQ])
    fn.cmp(eax, r12d)
    fn.jne(job)
    _pause_or_yield(fn, spin, r13, sleep, r15, qword[rbx + YIELD_TICKS], qword[rbx + SYSCALL])
    fn.bind(sleep)
    # sleep: SLEEPING = 1, then look at SEQ once more (a poster stores SEQ, then reads SLEEPING: with a fence
    # on both sides, at least one of us sees the other's store)
    fn.mov(dword[rbx + SLEEPING], 1)
    fn.mfence()
    fn.mov(eax, dword[rbx + SEQ])
    fn.cmp(eax, r12d)
    fn.jne(awake)
    # futex(&seq, FUTEX_WAIT_PRIVATE, last, NULL): sleeps only while seq still equals last
    fn.lea(r14, rbx + SEQ)
    _futex(fn, r14, FUTEX_WAIT_PRIVATE, r12d, qword[rbx + SYSCALL])
    fn.bind(awake)
    fn.mov(dword[rbx + SLEEPING], 0)
    fn.jmp(top)
    fn.bind(job)
    fn.mov(r12d, eax)
    fn.mov(dword[rbx + TAKEN], r12d)
    fn.cmp(qword[rbx + QUIT], 0)
    fn.jne(fn.exit)
    # claim the job (CLAIM: number - 1 -> number); a caller that found it unclaimed has run it already
    publish = fn.new_label("publish")
    fn.mov(edx, r12d)
    fn.mov(eax, r12d)
    fn.dec(eax)
    fn.cmpxchg(dword[rbx + CLAIM], edx)
    _lock_last(fn)
    fn.jne(publish)
    fn.mov(rdi, qword[rbx + KERNEL])
    fn.mov(rsi, qword[rbx + ARGS])
    fn.mov(rdx, qword[rbx + START])
    fn.mov(rcx, qword[rbx + COUNT])
    fn.mov(r11, qword[rbx + HARNESS])
    fn.call(r11)
    fn.bind(publish)
    fn.mov(dword[rbx + DONE], r12d)  # stores are not reordered on x86: the chunk's outputs are written
    # a caller asleep on the done word set WAITING before it slept (the same handshake as SLEEPING)
    fn.mfence()
    fn.cmp(dword[rbx + WAITING], 0)
    fn.je(top)
    fn.lea(r14, rbx + DONE)
    _futex(fn, r14, FUTEX_WAKE_PRIVATE, 1, qword[rbx + SYSCALL])
    fn.jmp(top)
    return fn


def build_dispatch() -> Function:
    """``dispatch(table, job, mode) -> int``: with POST, give chunk ``i`` (i >= 1) of ``job`` to the worker of
    block ``table[i]`` (waking it only if it sleeps); with RUN_OWN, run chunk 0 here; with WAIT, finish every
    posted chunk: a chunk its worker has not claimed yet (the worker has not been scheduled, on a machine with
    more runnable threads than cores) is claimed and run here, so a late worker never makes the call slower than
    one thread; a claimed one is waited for, spinning at most ``table[-1]`` TSC ticks and calling
    ``sched_yield`` every ``table[0]`` ticks. Returns 0, or the index of a chunk its worker is still running
    (the caller then sleeps on its done word in Python and calls WAIT again)."""
    fn = Function("dispatch", args=("table", "job", "mode"))
    post, wake, next_wake, run_own = fn.new_label("post"), fn.new_label("wake"), fn.new_label("next_wake"), \
        fn.new_label("run_own")
    wait, wait_next, spin, busy, done = fn.new_label("wait"), fn.new_label("wait_next"), fn.new_label("spin"), \
        fn.new_label("busy"), fn.new_label("done")
    give_up, finished, next_chunk = fn.new_label("give_up"), fn.new_label("finished"), fn.new_label("next_chunk")
    fn.mov(rbx, rdi)
    fn.mov(r12, rsi)
    fn.mov(r13, rdx)
    fn.test(r13, POST)
    fn.jz(run_own)
    fn.mov(r14, 1)
    fn.bind(post)
    fn.cmp(r14, qword[r12])
    fn.jae(wake)
    fn.mov(r15, qword[rbx + r14 * 8])  # the worker's block
    _chunk_address(fn, r12, r14, rcx)
    for k, off in enumerate((HARNESS, KERNEL, ARGS, START, COUNT)):
        fn.mov(rdx, qword[rcx + 8 * k])
        fn.mov(qword[r15 + off], rdx)
    fn.mov(qword[rcx + 40], 0)  # not finished
    fn.mov(eax, dword[r15 + POSTED])
    fn.inc(eax)
    fn.mov(dword[r15 + POSTED], eax)
    fn.mov(dword[r15 + SEQ], eax)  # after the chunk's words: a worker that sees SEQ sees them
    fn.inc(r14)
    fn.jmp(post)
    fn.bind(wake)
    fn.mfence()  # SEQ stores before the SLEEPING loads (the worker's side of the handshake: see build_worker)
    fn.mov(r14, 1)
    fn.bind(next_wake)
    fn.cmp(r14, qword[r12])
    fn.jae(run_own)
    fn.mov(r15, qword[rbx + r14 * 8])
    fn.inc(r14)
    fn.cmp(dword[r15 + SLEEPING], 0)
    fn.je(next_wake)
    _futex(fn, r15, FUTEX_WAKE_PRIVATE, 1, qword[r15 + SYSCALL])  # SEQ is at offset 0 of the block
    fn.jmp(next_wake)
    fn.bind(run_own)
    fn.test(r13, RUN_OWN)
    fn.jz(wait)
    fn.mov(rdi, qword[r12 + 16])
    fn.mov(rsi, qword[r12 + 24])
    fn.mov(rdx, qword[r12 + 32])
    fn.mov(rcx, qword[r12 + 40])
    fn.mov(r11, qword[r12 + 8])
    fn.call(r11)
    fn.bind(wait)
    fn.test(r13, WAIT)
    fn.jz(done)
    next_yield = fn.stack_slot(8)
    _read_tsc(fn)
    fn.mov(rdx, rax)
    fn.add(rdx, qword[rbx])
    fn.mov(next_yield, rdx)
    fn.add(rax, qword[rbx - 8])
    fn.mov(r13, rax)  # the spin deadline
    fn.mov(r14, 1)
    fn.bind(wait_next)
    fn.cmp(r14, qword[r12])
    fn.jae(done)
    fn.mov(r15, qword[rbx + r14 * 8])
    _chunk_address(fn, r12, r14, rcx)
    fn.cmp(qword[rcx + 40], 0)
    fn.jne(next_chunk)  # finished in an earlier WAIT
    fn.mov(edx, dword[r15 + POSTED])
    fn.cmp(dword[r15 + DONE], edx)
    fn.je(finished)
    # unclaimed (CLAIM still holds the number before it)? then it is ours to run
    fn.mov(eax, edx)
    fn.dec(eax)
    fn.cmpxchg(dword[r15 + CLAIM], edx)
    _lock_last(fn)
    fn.jne(spin)  # its worker has it
    fn.mov(qword[rcx + 40], 1)
    fn.mov(r11, qword[rcx])
    fn.mov(rdi, qword[rcx + 8])
    fn.mov(rsi, qword[rcx + 16])
    fn.mov(rdx, qword[rcx + 24])
    fn.mov(rcx, qword[rcx + 32])
    fn.call(r11)
    fn.jmp(next_chunk)
    fn.bind(spin)
    fn.mov(eax, dword[r15 + DONE])
    fn.cmp(eax, dword[r15 + POSTED])
    fn.jne(busy)
    _chunk_address(fn, r12, r14, rcx)
    fn.bind(finished)
    fn.mov(qword[rcx + 40], 1)
    fn.bind(next_chunk)
    fn.inc(r14)
    fn.jmp(wait_next)
    fn.bind(busy)
    _pause_or_yield(fn, spin, r13, give_up, next_yield, qword[rbx], qword[r15 + SYSCALL])
    fn.bind(give_up)
    fn.mov(rax, r14)
    fn.jmp(fn.exit)
    fn.bind(done)
    fn.xor(eax, eax)
    return fn


#: a call list's entry: (function, four integer arguments, whether a nonzero return means "a chunk is still running")
ENTRY_WORDS = 6


def build_call_list() -> Function:
    """``run_calls(entries, start, stop, ticks) -> int``: call ``entries[k].fn(a0, a1, a2, a3)`` for k in
    ``[start, stop)``, in turn, each a six-word entry (:data:`ENTRY_WORDS`: the function, its four arguments, a
    check flag), storing the TSC before each call in ``ticks[k]`` and after the last in ``ticks[stop]``. An entry with
    the check flag is a :func:`build_dispatch` call: its nonzero return (a chunk whose worker still runs it) stops the
    list there and returns ``(k << 16) | busy``, for the caller to wait in Python and go on from ``k + 1``; 0 when
    every call ran. One ctypes call runs a model's whole run of kernels: no Python between them."""
    fn = Function("run_calls", args=("entries", "start", "stop", "ticks"))
    top, done, next_entry = fn.new_label("top"), fn.new_label("done"), fn.new_label("next")
    fn.mov(rbx, rdi)
    fn.mov(r14, rsi)
    fn.mov(r12, rdx)
    fn.mov(r13, rcx)
    fn.bind(top)
    fn.cmp(r14, r12)
    fn.jae(done)
    _read_tsc(fn)
    fn.mov(qword[r13 + r14 * 8], rax)
    fn.lea(r15, r14 + r14 * 2)  # the entry: 48 bytes = (3 * k) * 16
    fn.shl(r15, 4)
    fn.add(r15, rbx)
    fn.mov(rdi, qword[r15 + 8])
    fn.mov(rsi, qword[r15 + 16])
    fn.mov(rdx, qword[r15 + 24])
    fn.mov(rcx, qword[r15 + 32])
    fn.mov(r11, qword[r15])
    fn.call(r11)
    fn.cmp(qword[r15 + 40], 0)
    fn.je(next_entry)
    fn.test(rax, rax)
    fn.jz(next_entry)
    fn.shl(r14, 16)
    fn.or_(rax, r14)
    fn.jmp(fn.exit)
    fn.bind(next_entry)
    fn.inc(r14)
    fn.jmp(top)
    fn.bind(done)
    _read_tsc(fn)
    fn.mov(qword[r13 + r12 * 8], rax)
    fn.xor(eax, eax)
    return fn


_RUN_CALLS: JitFunction | None = None


def run_calls_function() -> JitFunction:
    """The process's ``run_calls`` (:func:`build_call_list`), made on first use and never unmapped."""
    global _RUN_CALLS
    if _RUN_CALLS is None:
        with _POOL_LOCK:
            if _RUN_CALLS is None:
                made = build_call_list().finalize(ctypes.c_int64, (ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                                                   ctypes.c_void_p))
                made.memory._finalizer.detach()
                _RUN_CALLS = made
    return _RUN_CALLS


class CallList:
    """Native calls run in turn by one ctypes call (:func:`build_call_list`): per entry a harness-style call of one
    chunk on the caller, or the native pool's dispatch of a :class:`Job` (chunk 0 on the caller, the others on the
    workers, joined before the next entry). The entries' argument blocks are the caller's (fixed addresses: the
    caller rewrites their data words between runs). ``ticks`` holds the TSC before each entry and after the last,
    for per-step times (``seconds``)."""

    def __init__(self, entries: list[tuple[int, int, int, int, int]], jobs: list[Job | None], pool: NativePool) -> None:
        self.n = len(entries)
        self.pool = pool
        #: per entry, the Job its dispatch runs (None: a plain call), for ``NativePool._finish`` on a busy return
        self.jobs = jobs
        words = [v & 0xFFFF_FFFF_FFFF_FFFF for e, job in zip(entries, jobs) for v in (*e, job is not None)]
        self.words = (ctypes.c_uint64 * max(len(words), 1))(*words)
        self.address = ctypes.addressof(self.words)
        self.ticks = (ctypes.c_uint64 * (self.n + 1))()
        self._ticks_address = ctypes.addressof(self.ticks)
        self._run = run_calls_function().cfunc
        if jobs and any(j is not None for j in jobs):
            need = max(j.n for j in jobs if j is not None) - 1
            if len(pool._blocks) < need:
                pool._grow(need)

    @staticmethod
    def call(fn: int, a0: int = 0, a1: int = 0, a2: int = 0, a3: int = 0,
             ) -> tuple[tuple[int, int, int, int, int], None]:
        """An entry calling ``fn(a0, a1, a2, a3)`` on the caller."""
        return (fn, a0, a1, a2, a3), None

    @staticmethod
    def dispatch(pool: NativePool, job: Job) -> tuple[tuple[int, int, int, int, int], Job]:
        """An entry running ``job`` on ``pool`` (waiting for every chunk)."""
        return (pool._dispatch.address, pool._table_addr, job.address, POST | RUN_OWN | WAIT, 0), job

    def run(self) -> None:
        """Every entry, in turn (the caller holds the pool's lock and has synced its pending call)."""
        pool = self.pool
        got = self._run(self.address, 0, self.n, self._ticks_address)
        while got:
            k, busy = got >> 16, got & 0xFFFF
            pool._finish(self.jobs[k], busy)  # type: ignore[arg-type]
            got = self._run(self.address, k + 1, self.n, self._ticks_address)

    def seconds(self, k0: int, k1: int) -> float:
        """Seconds from the start of entry ``k0`` to the start of entry ``k1`` (``n``: the end) in the last run."""
        return (self.ticks[k1] - self.ticks[k0]) / (_ticks_per_us() * 1e6)


def _build_tsc() -> JitFunction:
    fn = Function("tsc")
    _read_tsc(fn)
    return fn.finalize(ctypes.c_uint64, ())


_TICKS_PER_US: float | None = None


def _ticks_per_us() -> float:
    """The TSC rate, measured against ``perf_counter`` over about a millisecond (only the spin budgets use it), once
    per process (a forked child inherits it)."""
    global _TICKS_PER_US
    if _TICKS_PER_US is None:
        _TICKS_PER_US = _measure_ticks_per_us()
    return _TICKS_PER_US


def _measure_ticks_per_us() -> float:
    tsc = _build_tsc()
    try:
        t0, c0 = time.perf_counter(), tsc()
        while time.perf_counter() - t0 < 1e-3:
            pass
        t1, c1 = time.perf_counter(), tsc()
    finally:
        tsc.close()
    return max((c1 - c0) / ((t1 - t0) * 1e6), 1.0)


def _spin_us_from_env() -> float:
    raw = os.environ.get("SNIPPETS_SPIN_US")
    if raw is None:
        return SPIN_US
    try:
        value = float(raw)
    except ValueError:
        raise CodegenError(f"SNIPPETS_SPIN_US must be a number of microseconds, got {raw!r}") from None
    if not value >= 0:
        raise CodegenError(f"SNIPPETS_SPIN_US must not be negative, got {raw!r}")
    return value


def build_thunk(target: int, args: tuple[int, ...]) -> JitFunction:
    """A function of no arguments that calls ``target(*args)`` (at most four integer arguments, baked in as
    immediates) and returns its ``rax``: ctypes calls it for a third of the cost of passing the four arguments
    (about 0.4 us instead of 1.2 us per kernel call, on a path where the kernels take 5-50 us)."""
    fn = Function("thunk")
    for reg, value in zip((rdi, rsi, rdx, rcx), args):
        fn.mov(reg, value & 0xFFFF_FFFF_FFFF_FFFF)
    fn.mov(rax, target)
    fn.jmp(rax)  # a tail call: target returns to our caller
    return fn.finalize(ctypes.c_int64, ())


#: calls of a Job or chunk before it gets a thunk (the busy path makes throw-away call states: no page for them)
THUNK_AFTER = 2


class Job:
    """The chunks of one parallel call in the layout ``dispatch`` reads: ``(harness, kernel, args, start, count)``
    per chunk, the caller's first. Made once per call state and reused for every call."""

    def __init__(self, chunks: list[tuple[int, int, int, int, int]], thunk_after: int = THUNK_AFTER) -> None:
        self.n = len(chunks)
        #: calls before the thunk is made (a call state made per shape waits longer: runtime.DYNAMIC_THUNK_AFTER)
        self.thunk_after = thunk_after
        words = [self.n] + [v & 0xFFFF_FFFF_FFFF_FFFF for c in chunks for v in (*c, 0)]
        self.words = (ctypes.c_uint64 * len(words))(*words)
        self.address = ctypes.addressof(self.words)
        #: the chunks as made (None once ``SplitCall._set_chunks`` rewrote them in ``words``)
        self.chunks: list[tuple[int, int, int, int, int]] | None = chunks
        #: per dispatch mode, (the pool, a thunk calling its dispatch on this job): a pool rebuilt after fork gets a
        #: new one; POST | RUN_OWN | WAIT for a call, POST | RUN_OWN for a deferred one (``NativePool.run_deferred``)
        self._thunks: dict[int, tuple[NativePool, JitFunction]] = {}
        self._calls = 0

    def entry(self, pool: NativePool, mode: int = POST | RUN_OWN | WAIT) -> Callable[[], int]:
        """A no-argument callable running this job on ``pool`` (dispatch with the ``mode`` bits: every one by
        default; without WAIT it returns once chunk 0, the caller's, is done)."""
        thunk = self._thunks.get(mode)
        if thunk is not None and thunk[0] is pool:
            return thunk[1].cfunc
        self._calls += 1
        if self._calls < self.thunk_after:
            return lambda: pool._call(pool._table_addr, self.address, mode)
        made = build_thunk(pool._dispatch.address, (pool._table_addr, self.address, mode))
        self._thunks[mode] = (pool, made)
        return made.cfunc

    def run_inline(self) -> None:
        """Every chunk on the calling thread (a closed pool)."""
        chunks = self.chunks
        if chunks is None:  # rewritten in place (``SplitCall._set_chunks``): the words hold them
            words = self.words
            chunks = [tuple(words[1 + 6 * i:6 + 6 * i]) for i in range(self.n)]
        for harness, kernel, args, start, count in chunks:
            _HARNESS_TYPE(harness)(kernel, args, start, count)


def split_items(items: int, num_threads: int) -> list[tuple[int, int]]:
    """(start, count) of each thread's contiguous range of work items."""
    threads = max(1, min(num_threads, items))
    bounds = [items * t // threads for t in range(threads + 1)]
    return [(bounds[t], bounds[t + 1] - bounds[t]) for t in range(threads)]


class SplitCall:
    """A harness kernel ``kernel(0, args, start, count)`` called over fixed ``chunks`` with an argument block of its
    own: ``run(words)`` writes the call's words into the block, runs chunk 0 here and the others on the native
    pool's workers. The block's address never changes, so the :class:`Job` is made once and gets its thunk after
    :data:`THUNK_AFTER` calls: a two-thread call costs ~0.5 us of dispatch instead of ~4.5 us for a Job (a ctypes
    array and two ctypes calls) made per call. A call that finds the block in use (another Python thread runs the
    same executor) gets a block and Job of its own."""

    def __init__(self, kernel: JitFunction, n_words: int, chunks: list[tuple[int, int]]) -> None:
        self.kernel = kernel
        self.n_words = n_words
        self.chunks = list(chunks)
        self._state = self._new_state()
        self._busy = threading.Lock()

    def _new_state(self, chunks: list[tuple[int, int]] | None = None) -> tuple[Any, Job]:
        block = (ctypes.c_uint64 * self.n_words)()
        addr = ctypes.addressof(block)
        return block, Job([(self.kernel.address, 0, addr, s, c) for s, c in (chunks or self.chunks)])

    def run_chunks(self, chunks: list[tuple[int, int]], words: list[int], keep: tuple | None = None) -> None:
        """``run`` over ``chunks`` (as many as this call's): a dynamic primitive's shapes share one call, so one Job
        and one thunk, the chunks rewritten in place in the Job's words when they are not the last call's (the
        thunk holds the Job's address, the pool reads the words at each dispatch). With ``keep`` (the arrays the
        kernel reads and writes) the call returns once the caller's chunk is done and the workers' may still run:
        ``NativePool.run_deferred``; the next use of the pool waits for them."""
        if keep is not None and len(chunks) > 1 and self._busy.acquire(blocking=False):
            try:
                if chunks is not self.chunks:
                    self._set_chunks(chunks)
                block, job = self._state
                pool = native_pool()
                with pool.lock:
                    pool.sync()
                    block[:] = words  # (after the sync: the previous call of this block may be the pending one)
                    pool.run_deferred(job, keep)
            finally:
                self._busy.release()
            return
        if self._busy.acquire(blocking=False):
            try:
                if chunks is not self.chunks:
                    self._set_chunks(chunks)
                self._run(self._state, words)
            finally:
                self._busy.release()
        else:
            self._run(self._new_state(chunks), words)

    def _set_chunks(self, chunks: list[tuple[int, int]]) -> None:
        """Rewrite the Job's chunks in place (the caller holds ``_busy``): its words only, which the dispatch reads
        (its ``chunks`` list, which only a closed pool's inline run reads, then comes from them: a new shape's call
        makes no list of tuples)."""
        job = self._state[1]
        words = job.words  # 6 a chunk: harness, kernel, args, start, count, 0
        if len(chunks) == 1:  # (one thread: one slice store)
            words[4:6] = chunks[0]
        else:
            for i, (start, count) in enumerate(chunks):
                words[4 + 6 * i] = start
                words[5 + 6 * i] = count
        job.chunks = None
        self.chunks = chunks

    @property
    def threads(self) -> int:
        """Threads one call uses (one per chunk)."""
        return len(self.chunks)

    def run(self, words: list[int]) -> None:
        """Write ``words`` (the whole block, in the kernel's argument order) and run every chunk."""
        if self._busy.acquire(blocking=False):
            try:
                self._run(self._state, words)
            finally:
                self._busy.release()
        else:
            self._run(self._new_state(), words)

    def _run(self, state: tuple[Any, Job], words: list[int]) -> None:
        block, job = state
        pool = native_pool()
        if pool.pending is not None:  # a deferred call's workers may still read this block or write our input
            with pool.lock:
                pool.sync()
        block[:] = words
        if job.n == 1 and not pool.closed:  # posts nothing: no worker, no lock (the thunk: 0.3 us less than ctypes)
            job.entry(pool)()
            return
        with pool.lock:
            pool.run_job(job)


class SplitCalls:
    """The dispatch calls of one primitive's executors of every input shape, by (kernel, argument words, chunk
    count): a new shape reuses the call (its chunks rewritten in place by :meth:`SplitCall.run_chunks`) instead of
    making an argument block, a :class:`Job` and, on its second call, a JIT dispatch thunk."""

    def __init__(self) -> None:
        self.calls: dict[tuple[int, int, int], SplitCall] = {}

    def get(self, kernel: JitFunction, n_words: int, chunks: list[tuple[int, int]]) -> SplitCall:
        """The call of ``kernel`` with ``n_words`` argument words over as many chunks as ``chunks``."""
        key = (kernel.address, n_words, len(chunks))
        call = self.calls.get(key)
        if call is None:
            call = self.calls[key] = SplitCall(kernel, n_words, chunks)
        return call

    def __len__(self) -> int:
        return len(self.calls)

    def __getitem__(self, key: tuple[int, int, int]) -> SplitCall:
        return self.calls[key]


class NativePool:
    """Native worker threads (see the module docstring). ``run(chunks, own)`` runs ``own()`` on the caller and the
    chunks on workers; ``run_job(job)`` runs a :class:`Job` (chunk 0 on the caller) in one native call. Each chunk
    is ``(harness, kernel, call_args, start, count)`` addresses/values. Not re-entrant: callers take :attr:`lock`
    (a busy pool means another thread is using it)."""

    def __init__(self, spin_us: float | None = None) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self._worker: JitFunction = build_worker().finalize(None, (ctypes.c_void_p,))
        self._dispatch: JitFunction = build_dispatch().finalize(
            ctypes.c_int64, (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
        )
        # a worker may still run this code after the pool object is gone (a close() whose join timed out, the
        # interpreter shutting down): never unmap it (a page or two per pool, and a process has one pool)
        self._worker.memory._finalizer.detach()
        self._dispatch.memory._finalizer.detach()
        self._call = self._dispatch.cfunc
        self._ticks_per_us = _ticks_per_us()
        self._spin_ticks = int(self._ticks_per_us * (_spin_us_from_env() if spin_us is None else spin_us))
        self._yield_ticks = int(self._ticks_per_us * YIELD_US)
        #: word 0: the caller's spin budget, word 1: its yield period (TSC ticks); word i >= 2: the block of
        #: worker i - 2
        self._table = (ctypes.c_uint64 * (MAX_WORKERS + 2))(int(self._ticks_per_us * WAIT_SPIN_US),
                                                             self._yield_ticks)
        self._table_addr = ctypes.addressof(self._table) + 8  # chunk i's block at [table + 8 * i]
        self._blocks: list[int] = []
        self._threads: list[threading.Thread] = []
        self._grow_lock = threading.Lock()
        self._closed = False
        #: a deferred call whose workers may still run (``run_deferred``): its Job and the arrays it reads and writes
        #: (kept alive: a step after it may free its input while a worker reads it)
        self.pending: tuple[Job, tuple] | None = None

    @property
    def spin_us(self) -> float:
        """How long an idle worker spins before it sleeps (microseconds)."""
        return self._spin_ticks / self._ticks_per_us

    def set_spin_us(self, us: float) -> None:
        """Change how long idle workers spin (0: sleep at once); running workers take it on their next wait."""
        if not us >= 0:
            raise CodegenError(f"spin time must be a non-negative number of microseconds, got {us!r}")
        self._spin_ticks = int(self._ticks_per_us * us)
        for block in self._blocks:
            ctypes.c_uint64.from_address(block + SPIN_TICKS).value = self._spin_ticks

    def _grow(self, n: int) -> None:
        if n > MAX_WORKERS:
            raise CodegenError(f"the native pool has at most {MAX_WORKERS} workers, {n} were asked for")
        with self._grow_lock:
            while len(self._blocks) < n:
                block = _new_block()
                ctypes.c_uint64.from_address(block + SYSCALL).value = _SYSCALL_ADDR
                ctypes.c_uint64.from_address(block + SPIN_TICKS).value = self._spin_ticks
                ctypes.c_uint64.from_address(block + YIELD_TICKS).value = self._yield_ticks
                t = threading.Thread(
                    target=self._worker.cfunc,
                    args=(block,),
                    daemon=True,
                    name=f"snippets-x86-native-{len(self._blocks)}",
                )
                t.start()  # published only once its worker runs: a failed start leaves no block without one
                self._table[len(self._blocks) + 2] = block
                self._blocks.append(block)
                self._threads.append(t)

    def run_deferred(self, job: Job, keep: tuple) -> None:
        """Post ``job``'s chunks to the workers and run chunk 0 here, then return while the workers may still run
        theirs: the caller's Python work before the next kernel (its output array, its argument words) overlaps
        their tail. Every later use of the pool first waits for them (:meth:`sync`), so the caller may hand the
        output only to code that reads it through the pool's kernels (``conv_subgraph``: a convolution whose
        consumers are all convolutions). ``keep``: the arrays the job reads and writes, held until then. The caller
        holds :attr:`lock` and has synced."""
        if self.closed:
            job.run_inline()
            return
        if len(self._blocks) < job.n - 1:
            self._grow(job.n - 1)
        job.entry(self, POST | RUN_OWN)()
        self.pending = (job, keep)

    def sync(self) -> None:
        """Wait for the workers of the pending deferred call (the caller holds :attr:`lock`); WAIT also runs a chunk
        no worker has claimed yet."""
        pending = self.pending
        if pending is not None:
            job = pending[0]
            busy = self._call(self._table_addr, job.address, WAIT)
            if busy:
                self._finish(job, busy)
            self.pending = None

    def run_job(self, job: Job) -> None:
        """Run ``job``: chunk 0 on the caller, chunk i on worker i - 1 (the caller holds :attr:`lock`)."""
        if self.pending is not None:
            self.sync()
        if self.closed:  # the workers have left (interpreter exit): the caller runs every chunk
            job.run_inline()
            return
        if len(self._blocks) < job.n - 1:
            self._grow(job.n - 1)
        busy = job.entry(self)()
        if busy:
            self._finish(job, busy)

    def run(self, chunks: list[tuple[int, int, int, int, int]], own: Callable[[], Any]) -> None:
        """Post ``chunks`` to workers 0.., run ``own()`` (the caller's chunk, which may raise) meanwhile, wait for
        the workers (also when ``own`` raised: they write into the caller's arrays)."""
        job = Job([(0, 0, 0, 0, 0), *chunks])
        if self.pending is not None:
            self.sync()
        if self.closed:
            own()
            job.chunks = chunks
            job.run_inline()
            return
        if len(self._blocks) < len(chunks):
            self._grow(len(chunks))
        self._call(self._table_addr, job.address, POST)
        try:
            own()
        finally:
            busy = self._call(self._table_addr, job.address, WAIT)
            if busy:
                self._finish(job, busy)

    def _finish(self, job: Job, busy: int) -> None:
        """Sleep on the done word of chunk ``busy`` (its worker still runs it) until it changes, then WAIT again
        (which also takes the chunks no worker has claimed), until every chunk is finished."""
        while busy:
            w = busy - 1
            block = self._blocks[w]
            seq = ctypes.c_uint32.from_address(block + POSTED).value
            done = ctypes.c_uint32.from_address(block + DONE)
            waiting = ctypes.c_uint32.from_address(block + WAITING)
            if (now := done.value) != seq:
                waiting.value = 1
                try:
                    # sleeps only while the done word is still ``now`` (the syscall orders WAITING's store before
                    # that read: the worker's store of DONE comes after, and it then reads WAITING = 1)
                    if _syscall(SYS_FUTEX, block + DONE, FUTEX_WAIT_PRIVATE, now, _CHECK_TIMEOUT_ADDR) != 0:
                        self._check(w, seq)
                finally:
                    waiting.value = 0
            busy = self._call(self._table_addr, job.address, WAIT)

    def _check(self, w: int, seq: int) -> None:
        """Raise if worker ``w`` can no longer publish ``seq`` as done: its thread has left, or its block's
        sequence word no longer holds ``seq`` (written by someone else: the worker would report that number)."""
        block = self._blocks[w]
        words = {
            name: ctypes.c_uint32.from_address(block + off).value
            for name, off in (("seq", SEQ), ("posted", POSTED), ("claim", CLAIM), ("taken", TAKEN), ("done", DONE),
                              ("sleeping", SLEEPING))
        }
        if words["done"] == seq:
            return
        alive = self._threads[w].is_alive()
        if alive and words["seq"] == seq:
            return  # a long chunk: keep waiting
        raise CodegenError(
            f"native worker {w} cannot finish the chunk posted as {seq}: thread "
            f"{'alive' if alive else 'gone'}, control block at {block:#x} holds {words}"
        )

    @property
    def closed(self) -> bool:
        """True once :meth:`close` asked the workers to leave."""
        return self._closed

    def close(self) -> None:
        """Ask every worker to leave (at interpreter exit). Later calls of :meth:`run` use the caller only."""
        # a caller still in run (a daemon thread at exit) keeps its lock; waiting for it could block exit
        locked = self.lock.acquire(timeout=1.0)
        try:
            if locked:  # a deferred call's chunks finish before the workers are told to leave
                self.sync()
            self._closed = True
            for block in self._blocks:
                ctypes.c_uint64.from_address(block + QUIT).value = 1
                posted = ctypes.c_uint32.from_address(block + POSTED)
                posted.value = (posted.value + 1) & 0xFFFF_FFFF
                ctypes.c_uint32.from_address(block + SEQ).value = posted.value
                _syscall(SYS_FUTEX, block + SEQ, FUTEX_WAKE_PRIVATE, 1, None)
        finally:
            if locked:
                self.lock.release()
        for t in self._threads:
            t.join(timeout=0.5)


_HARNESS_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


def _new_block() -> int:
    """A zeroed control block on its own page, between two PROT_NONE guard pages (never unmapped)."""
    base = _mmap(None, 3 * PAGE, PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if base in (None, ctypes.c_void_p(-1).value):
        raise CodegenError(f"mmap of a worker control block failed (errno {ctypes.get_errno()})")
    if _mprotect(base + PAGE, PAGE, mmap.PROT_READ | mmap.PROT_WRITE) != 0:
        raise CodegenError(f"mprotect of a worker control block failed (errno {ctypes.get_errno()})")
    return int(base) + PAGE


_POOL: NativePool | None = None
_POOL_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    # another thread of the parent may have held the lock at the fork: the child's copy would stay locked
    global _POOL_LOCK, _POOL
    _POOL_LOCK = threading.Lock()
    # the child inherits no threads: its pool is made on first use (so a call needs no getpid, 0.4 us)
    _POOL = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def native_pool() -> NativePool:
    """The process's native pool (a new one in a forked child, which inherits no threads)."""
    global _POOL
    pool = _POOL
    if pool is None:
        with _POOL_LOCK:
            if _POOL is None or _POOL.pid != os.getpid():
                _POOL = NativePool()
            pool = _POOL
    return pool


@atexit.register
def _close() -> None:
    if _POOL is not None and _POOL.pid == os.getpid():
        _POOL.close()

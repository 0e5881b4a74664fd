"""Worker threads that wait and run harness chunks in native code: a parallel call costs a few microseconds.

Each worker is a Python thread that enters one JIT function, ``worker(ctrl)``, through ctypes and stays in it
(the GIL is released for its whole life). It waits for its control block's sequence number to change (a
bounded spin, then ``futex`` wait through libc's ``syscall``), runs the posted ``harness(kernel, call_args,
start, count)``, publishes the sequence number as done, and waits again. The caller posts a chunk with a few
memory writes and a ``FUTEX_WAKE``, runs its own chunk, and spins (in Python, on a memory word) until the
workers are done. With Python queues instead, waking a worker and handing it the GIL costs tens of
microseconds per call.

Control blocks live in anonymous memory that is never unmapped, and the worker code is kept mapped at
interpreter exit (an atexit hook tells the workers to leave), so a worker can never touch freed memory. After
``fork`` the child has no workers: the pool is rebuilt on first use there. A closed pool (after that hook) runs
every chunk on the caller instead of posting it to a worker that has left.

Each control block sits on its own page between two ``PROT_NONE`` guard pages, so a stray linear write from a
neighbouring mapping faults instead of silently changing a sequence or done word. The caller never sleeps
unboundedly on a done word: every ``CHECK_NS`` it checks that the worker thread is alive and that the block still
holds the sequence number it posted, and raises :class:`CodegenError` with the block's words otherwise, so a
broken hand-over is reported instead of hanging the process (a long chunk just keeps waiting).
"""

from __future__ import annotations

import atexit
import ctypes
import mmap
import os
import threading
from typing import TYPE_CHECKING

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
    r12d,
    r13,
    rbx,
    rcx,
    rdi,
    rdx,
    rsi,
)

if TYPE_CHECKING:
    from snippets_x86_64.jit import JitFunction

SYS_FUTEX = 202
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129
#: worker spin iterations before sleeping in futex (a few microseconds): back-to-back calls find it awake,
#: and on a loaded machine an idle worker does not take a core from anyone
SPIN = 20_000
#: the caller's polls of a worker's done word before it sleeps on it
WAIT_SPIN = 200
#: the caller's sleeps on a done word last at most this long (ns) before it checks the worker and the block
CHECK_NS = 1_000_000_000

# control block layout, bytes (the sequence number and the done word on separate cache lines)
# TAKEN: the sequence number of the job the worker took last (diagnostics)
SEQ, DONE, HARNESS, KERNEL, ARGS, START, COUNT, QUIT, SYSCALL, TAKEN = 0, 64, 128, 136, 144, 152, 160, 192, 200, 208
BLOCK = 256
PAGE = mmap.PAGESIZE
PROT_NONE = 0

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


def build_worker() -> Function:
    """``worker(ctrl)``: wait for a new sequence number, run the posted harness chunk, report it done."""
    fn = Function("worker", args=("ctrl",))
    job, top, spin = fn.new_label("job"), fn.new_label("top"), fn.new_label("spin")
    fn.mov(rbx, rdi)
    # the last sequence number seen: 0, the value of a fresh block (reading it instead would miss a job
    # posted before this thread got to run)
    fn.xor(r12d, r12d)
    fn.bind(top)
    fn.mov(r13, SPIN)
    fn.bind(spin)
    fn.mov(eax, dword[rbx + SEQ])
    fn.cmp(eax, r12d)
    fn.jne(job)
    fn.dec(r13)
    fn.jnz(spin)
    # futex(&seq, FUTEX_WAIT_PRIVATE, last, NULL): sleeps only while seq still equals last
    fn.mov(edi, SYS_FUTEX)
    fn.mov(rsi, rbx)
    fn.mov(edx, FUTEX_WAIT_PRIVATE)
    fn.mov(ecx, r12d)
    fn.xor(r8d, r8d)
    fn.xor(r9d, r9d)
    fn.mov(r11, qword[rbx + SYSCALL])
    fn.xor(eax, eax)  # a variadic call: no vector arguments
    fn.call(r11)
    fn.jmp(top)
    fn.bind(job)
    fn.mov(r12d, eax)
    fn.mov(dword[rbx + TAKEN], r12d)
    fn.cmp(qword[rbx + QUIT], 0)
    fn.jne(fn.exit)
    fn.mov(rdi, qword[rbx + KERNEL])
    fn.mov(rsi, qword[rbx + ARGS])
    fn.mov(rdx, qword[rbx + START])
    fn.mov(rcx, qword[rbx + COUNT])
    fn.mov(r11, qword[rbx + HARNESS])
    fn.call(r11)
    fn.mov(dword[rbx + DONE], r12d)  # stores are not reordered on x86: the chunk's outputs are written
    # futex(&done, FUTEX_WAKE_PRIVATE, 1): the caller may sleep on the done word
    fn.mov(edi, SYS_FUTEX)
    fn.lea(rsi, rbx + DONE)
    fn.mov(edx, FUTEX_WAKE_PRIVATE)
    fn.mov(ecx, 1)
    fn.xor(r8d, r8d)
    fn.xor(r9d, r9d)
    fn.mov(r11, qword[rbx + SYSCALL])
    fn.xor(eax, eax)
    fn.call(r11)
    fn.jmp(top)
    return fn


class NativePool:
    """Native worker threads (see the module docstring). ``run(chunks)`` runs ``chunks[0]`` on the caller and
    the others on workers; each chunk is ``(harness, kernel, call_args, start, count)`` addresses/values.
    Not re-entrant: callers take :attr:`lock` (a busy pool means another thread is using it)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self._worker: JitFunction = build_worker().finalize(None, (ctypes.c_void_p,))
        # a worker may still run this code after the pool object is gone (a close() whose join timed out, the
        # interpreter shutting down): never unmap it (one page per pool, and a process has one pool)
        self._worker.memory._finalizer.detach()
        self._blocks: list[int] = []
        self._seq: list[int] = []
        self._threads: list[threading.Thread] = []
        self._grow_lock = threading.Lock()
        self._closed = False

    def _grow(self, n: int) -> None:
        with self._grow_lock:
            while len(self._blocks) < n:
                block = _new_block()
                ctypes.c_uint64.from_address(block + SYSCALL).value = _SYSCALL_ADDR
                t = threading.Thread(
                    target=self._worker.cfunc,
                    args=(block,),
                    daemon=True,
                    name=f"snippets-x86-native-{len(self._blocks)}",
                )
                t.start()  # published only once its worker runs: a failed start leaves no block without one
                self._blocks.append(block)
                self._seq.append(0)
                self._threads.append(t)

    def run(self, chunks: list[tuple[int, int, int, int, int]], own: object) -> None:
        """Post ``chunks`` to workers 0.., run ``own()`` (the caller's chunk) meanwhile, wait for the workers."""
        if self.closed:  # the workers have left (interpreter exit): the caller runs every chunk
            own()  # type: ignore[operator]
            for harness, kernel, args, start, count in chunks:
                _HARNESS_TYPE(harness)(kernel, args, start, count)
            return
        if len(self._blocks) < len(chunks):
            self._grow(len(chunks))
        posted = []
        for w, (harness, kernel, args, start, count) in enumerate(chunks):
            block = self._blocks[w]
            slots = (ctypes.c_uint64 * 5).from_address(block + HARNESS)
            slots[:] = (harness, kernel, args, start, count)
            seq = (self._seq[w] + 1) & 0xFFFF_FFFF
            self._seq[w] = seq
            ctypes.c_uint32.from_address(block + SEQ).value = seq
            _syscall(SYS_FUTEX, block + SEQ, FUTEX_WAKE_PRIVATE, 1, None)
            posted.append((w, ctypes.c_uint32.from_address(block + DONE), seq))
        try:
            own()  # type: ignore[operator]
        finally:
            for w, done, seq in posted:
                for _ in range(WAIT_SPIN):
                    if done.value == seq:
                        break
                while (now := done.value) != seq:
                    # sleeps only while the done word is still ``now`` (ctypes releases the GIL meanwhile)
                    if _syscall(SYS_FUTEX, ctypes.addressof(done), FUTEX_WAIT_PRIVATE, now, _CHECK_TIMEOUT_ADDR) != 0:
                        self._check(w, seq)

    def _check(self, w: int, seq: int) -> None:
        """Raise if worker ``w`` can no longer publish ``seq`` as done: its thread has left, or its block's
        sequence word no longer holds ``seq`` (written by someone else: the worker would report that number)."""
        block = self._blocks[w]
        words = {
            name: ctypes.c_uint32.from_address(block + off).value
            for name, off in (("seq", SEQ), ("taken", TAKEN), ("done", DONE))
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
            self._closed = True
            for w, block in enumerate(self._blocks):
                ctypes.c_uint64.from_address(block + QUIT).value = 1
                seq = (self._seq[w] + 1) & 0xFFFF_FFFF
                self._seq[w] = seq
                ctypes.c_uint32.from_address(block + SEQ).value = seq
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


def native_pool() -> NativePool:
    """The process's native pool (a new one in a forked child, which inherits no threads)."""
    global _POOL
    pool = _POOL
    if pool is None or pool.pid != os.getpid():
        with _POOL_LOCK:
            if _POOL is None or _POOL.pid != os.getpid():
                _POOL = NativePool()
            pool = _POOL
    return pool


@atexit.register
def _close() -> None:
    if _POOL is not None and _POOL.pid == os.getpid():
        _POOL.close()

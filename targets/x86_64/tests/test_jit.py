"""JIT memory: real functions called through ctypes and checked against numpy; pages are never writable
and executable at once; the memory goes away with the function."""

from __future__ import annotations

import ctypes
import gc
import mmap
import threading

import numpy as np
import pytest

from snippets_core.errors import CodegenError
from snippets_x86_64.asm import Function, bcst, cl, eax, k1, rax, rcx, rdi, rdx, rsi, zmm0, zmm1
from snippets_x86_64.jit import ExecutableMemory, JitFunction


def mapping_permissions(address: int) -> str | None:
    """The permissions /proc/self/maps lists for the mapping that contains ``address``."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            span, perms = line.split()[:2]
            start, end = (int(x, 16) for x in span.split("-"))
            if start <= address < end:
                return perms
    return None


def make_add() -> JitFunction:
    fn = Function("add", args=("a", "b"))
    fn.mov(rax, fn.arg("a"))
    fn.add(rax, fn.arg("b"))
    return fn.finalize(ctypes.c_int64, (ctypes.c_int64, ctypes.c_int64))


def test_int64_add_matches_numpy():
    add = make_add()
    rng = np.random.default_rng(1)
    a = rng.integers(-(2**62), 2**62, size=200, dtype=np.int64)
    b = rng.integers(-(2**62), 2**62, size=200, dtype=np.int64)
    assert [add(int(x), int(y)) for x, y in zip(a, b)] == (a + b).tolist()


def test_pages_are_read_execute_only_after_finalize():
    add = make_add()
    perms = mapping_permissions(add.address)
    assert perms is not None and perms.startswith("r-x"), perms


def test_closing_unmaps_and_calling_a_closed_function_raises():
    add = make_add()
    address = add.address
    add.close()
    assert mapping_permissions(address) != "r-xp"
    with pytest.raises(CodegenError, match="was closed"):
        add(1, 2)
    add.close()  # idempotent


def test_garbage_collection_unmaps():
    memory = ExecutableMemory(b"\xc3")
    address = memory.address
    assert mapping_permissions(address) == "r-xp"
    del memory
    gc.collect()
    # the address may be reused by a later mapping, but not as our executable page
    assert mapping_permissions(address) != "r-xp"


def test_context_manager_closes():
    with make_add() as add:
        assert add(2, 3) == 5
    assert add.memory.closed


def test_empty_code_is_rejected():
    with pytest.raises(CodegenError, match="no machine code"):
        ExecutableMemory(b"")


def test_disassembly_uses_real_addresses():
    add = make_add()
    lines = add.disassemble().splitlines()
    assert lines[0].strip().startswith(f"{add.address:x}: mov rax, rdi")
    assert [line.split(": ", 1)[1] for line in lines] == ["mov rax, rdi", "add rax, rsi", "ret"]


def make_vector_add() -> JitFunction:
    """out[i] = a[i] + b[i] for float32, 16 lanes per step, the tail under a mask."""
    fn = Function("vadd", args=("a", "b", "out", "n"))
    a, b, out, n = fn.args
    tail = fn.new_label("tail")
    fn.cmp(n, 16)
    fn.jl(tail)
    loop = fn.label("loop")
    fn.vmovups(zmm0, a + 0)
    fn.vaddps(zmm0, zmm0, b + 0)
    fn.vmovups(out + 0, zmm0)
    for reg in (a, b, out):
        fn.add(reg, 64)
    fn.sub(n, 16)
    fn.cmp(n, 16)
    fn.jge(loop)
    fn.bind(tail)
    fn.test(n, n)
    fn.jz(fn.exit)
    assert n == rcx  # the count is the 4th argument, so cl holds it for the shift
    fn.mov(eax, 1)
    fn.shl(eax, cl)
    fn.dec(eax)
    fn.kmovw(k1, eax)
    fn.vmovups(zmm0.mask(k1).z, a + 0)
    fn.vaddps(zmm0.mask(k1).z, zmm0, b + 0)
    fn.vmovups((out + 0).mask(k1), zmm0)
    return fn.finalize(None, (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64))


@pytest.mark.avx512
@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 31, 32, 33, 1000, 1023])
def test_avx512_vector_add_with_masked_tail(n):
    vadd = make_vector_add()
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    # a guard element after the output: the masked tail must not write it
    out = np.full(n + 1, 7.0, dtype=np.float32)
    vadd(a.ctypes.data, b.ctypes.data, out.ctypes.data, n)
    np.testing.assert_array_equal(out[:n], a + b)
    assert out[n] == 7.0


@pytest.mark.avx512
def test_masked_tail_never_touches_the_next_page():
    # arrays that end exactly at a page boundary followed by a page with no access: a read or write past
    # the end would fault (and kill the test run)
    vadd = make_vector_add()
    page = mmap.PAGESIZE
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    base = libc.mmap(None, 2 * page, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    try:
        assert libc.mprotect(base + page, page, 0) == 0  # the guard page: no access at all
        for n in (1, 5, 16, 21, 37):
            end = base + page
            src = np.frombuffer((ctypes.c_float * n).from_address(end - 4 * n), dtype=np.float32)
            src[:] = np.arange(n, dtype=np.float32)
            dst = np.zeros(n, dtype=np.float32)
            vadd(src.ctypes.data, src.ctypes.data, dst.ctypes.data, n)
            np.testing.assert_array_equal(dst, 2 * np.arange(n, dtype=np.float32))
            vadd(src.ctypes.data, src.ctypes.data, src.ctypes.data, n)  # in place, store ends at the guard
            np.testing.assert_array_equal(src, 2 * np.arange(n, dtype=np.float32))
    finally:
        libc.munmap(base, 2 * page)


@pytest.mark.avx512
def test_calls_release_the_gil_and_run_from_threads():
    vadd = make_vector_add()
    n = 1 << 16
    rng = np.random.default_rng(5)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    outs = [np.empty(n, dtype=np.float32) for _ in range(4)]
    threads = [threading.Thread(target=vadd, args=(a.ctypes.data, b.ctypes.data, out.ctypes.data, n)) for out in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for out in outs:
        np.testing.assert_array_equal(out, a + b)


@pytest.mark.avx512
def test_broadcast_operand_at_run_time():
    fn = Function("scale", args=("x", "s", "out"))
    fn.vmovups(zmm1, rdi + 0)
    fn.vmulps(zmm1, zmm1, bcst(rsi + 0))
    fn.vmovups(rdx + 0, zmm1)
    f = fn.finalize()
    x = np.arange(16, dtype=np.float32)
    s = np.array([2.5], dtype=np.float32)
    out = np.empty(16, dtype=np.float32)
    f(x.ctypes.data, s.ctypes.data, out.ctypes.data)
    np.testing.assert_array_equal(out, x * s[0])

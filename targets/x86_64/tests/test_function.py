"""The System V function builder: prologue and epilogue as iced decodes them, and what they do at run time."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from snippets_core.errors import CodegenError
from snippets_x86_64.asm import (
    Function,
    bcst,
    eax,
    ecx,
    r12,
    r13,
    r14,
    r15,
    rax,
    rbp,
    rbx,
    rdi,
    rsi,
    zmm0,
    zmm1,
    zmm31,
)


def lines(fn: Function) -> list[str]:
    return [line.split(": ", 1)[1] for line in fn.disassemble().splitlines()]


def test_leaf_function_has_no_prologue():
    fn = Function("add", args=("a", "b"))
    fn.mov(rax, fn.arg("a"))
    fn.add(rax, fn.arg("b"))
    assert lines(fn) == ["mov rax, rdi", "add rax, rsi", "ret"]


def test_callee_saved_registers_used_are_pushed_and_popped_in_reverse():
    fn = Function("clobber", args=("p",))
    fn.mov(r12, rdi)
    fn.mov(rbx, r12 + 8)
    fn.vmovups(zmm0, rdi + 0)
    assert lines(fn) == [
        "push rbx",
        "push r12",
        "mov r12, rdi",
        "mov rbx, [r12+8]",
        "vmovups zmm0, [rdi]",
        "pop r12",
        "pop rbx",
        "vzeroupper",
        "ret",
    ]


def test_implicit_register_writes_count():
    fn = Function("id")
    fn.xor(eax, eax)
    fn.cpuid()  # writes ebx
    assert lines(fn) == ["push rbx", "xor eax, eax", "cpuid", "pop rbx", "ret"]


def test_stack_slots_make_an_aligned_frame():
    fn = Function("spill")
    a = fn.stack_slot(64)
    b = fn.stack_slot(4)
    c = fn.stack_slot(64)
    assert (a.disp, b.disp, c.disp) == (0, 64, 128)
    fn.vmovaps(c, zmm31)
    fn.vmovaps(zmm31, c)
    assert lines(fn) == [
        "mov r11, rsp",
        "and rsp, 0xffffffffffffffc0",
        "sub rsp, 0x100",
        "mov [rsp+0xc0], r11",
        "vmovaps [rsp+0x80], zmm31",
        "vmovaps zmm31, [rsp+0x80]",
        "mov rsp, [rsp+0xc0]",
        "vzeroupper",
        "ret",
    ]


def test_early_exit_jumps_to_the_epilogue():
    fn = Function("early", args=("x",))
    fn.test(rdi, rdi)
    fn.jz(fn.exit)
    fn.mov(rbx, 1)
    fn.mov(rax, rbx)
    assert lines(fn) == ["push rbx", "test rdi, rdi", "je 0x10", "mov rbx, 1", "mov rax, rbx", "pop rbx", "ret"]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda fn: fn.ret(), "`ret` in the body"),
        (lambda fn: fn.arg("nope"), "has no argument 'nope'"),
        (lambda fn: fn.stack_slot(0), "must be positive"),
        (lambda fn: fn.stack_slot(8, align=3), "power of two"),
    ],
)
def test_function_misuse_raises(build, message):
    fn = Function("f", args=("x",))
    with pytest.raises(CodegenError, match=message):
        build(fn)
        fn.encode()


def test_more_than_six_arguments_is_an_error():
    with pytest.raises(CodegenError, match="at most 6"):
        Function("f", args=tuple("abcdefg"))


# -- run time ------------------------------------------------------------------------------------------------


def test_every_callee_saved_register_survives_a_call():
    fn = Function("trash", args=("x",))
    for reg in (rbx, rbp, r12, r13, r14, r15):
        fn.mov(reg, -1)
    fn.lea(rax, rdi + 1)
    f = fn.finalize(ctypes.c_int64, (ctypes.c_int64,))
    # the interpreter keeps state in callee-saved registers: surviving many calls means they were restored
    assert [f(i) for i in range(1000)] == list(range(1, 1001))


@pytest.mark.avx512
def test_zmm_spill_slots_are_64_byte_aligned_at_run_time():
    # vmovaps faults on a misaligned address, so a wrong frame would crash rather than pass
    fn = Function("spill", args=("src", "dst"))
    slot_a = fn.stack_slot(4)
    slot_b = fn.stack_slot(64)
    fn.mov(eax, 7)
    fn.mov(slot_a, eax)
    fn.vmovups(zmm0, rdi + 0)
    fn.vmovaps(slot_b, zmm0)
    fn.vpxord(zmm0, zmm0, zmm0)
    fn.vmovaps(zmm1, slot_b)
    fn.vaddps(zmm1, zmm1, bcst(rdi + 0))
    fn.vmovups(rsi + 0, zmm1)
    fn.mov(ecx, slot_a)
    fn.mov(rsi + 64, ecx)
    f = fn.finalize()
    src = np.arange(16, dtype=np.float32) + 0.5
    dst = np.zeros(17, dtype=np.float32)
    f(src.ctypes.data, dst.ctypes.data)
    np.testing.assert_array_equal(dst[:16], src + src[0])
    assert dst[16:].view(np.int32)[0] == 7


def test_function_with_loop_and_arguments():
    # sum of int64 array: checks labels, loops and argument registers against numpy
    fn = Function("sum", args=("p", "n"))
    fn.xor(eax, eax)
    fn.test(rsi, rsi)
    fn.jz(fn.exit)
    top = fn.label("top")
    fn.add(rax, rdi + 0)
    fn.add(rdi, 8)
    fn.dec(rsi)
    fn.jnz(top)
    f = fn.finalize(ctypes.c_int64, (ctypes.c_void_p, ctypes.c_int64))
    data = np.random.default_rng(0).integers(-(10**9), 10**9, size=1001, dtype=np.int64)
    for n in (0, 1, 2, 17, 1001):
        assert f(data.ctypes.data, n) == int(data[:n].sum())


def test_a_body_that_calls_out_gets_an_aligned_frame():
    fn = Function("caller", args=("f", "x"))
    fn.mov(rax, rdi)
    fn.mov(rdi, rsi)
    fn.call(rax)
    assert lines(fn) == [
        "mov r11, rsp",
        "and rsp, 0xffffffffffffffc0",
        "sub rsp, 0x40",
        "mov [rsp], r11",
        "mov rax, rdi",
        "mov rdi, rsi",
        "call rax",
        "mov rsp, [rsp]",
        "ret",
    ]


def test_calling_back_into_python_through_the_aligned_frame():
    # libffi's callback thunk and the interpreter rely on the ABI's 16-byte stack alignment at the call;
    # pushes in the body itself would break it (the README says so), the prologue's own pushes do not
    callback_type = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)
    seen = []

    def square(v: int) -> int:
        seen.append(v)
        return v * v

    callback = callback_type(square)
    fn = Function("caller", args=("f", "x"))
    fn.mov(rbx, rdi)  # a callee-saved register: one push before the frame, which realigns anyway
    fn.mov(rdi, rsi)
    fn.call(rbx)
    f = fn.finalize(ctypes.c_int64, (ctypes.c_void_p, ctypes.c_int64))
    assert [f(ctypes.cast(callback, ctypes.c_void_p), v) for v in (3, -4, 12)] == [9, 16, 144]
    assert seen == [3, -4, 12]

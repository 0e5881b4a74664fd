"""Kernels of the x86-64 target against numpy: memory accesses (masked tails, every element type, broadcast
loads), loops, the kernel prologue and ABI, the harness, and arrays flush against PROT_NONE pages.

The compute of these bodies is one Add, emitted by a two-line emitter written here (``vaddps``/``vpaddd``), so
these tests check the memory, loop and kernel emitters on their own; the arithmetic emitters have their own
tests. Numpy is the oracle; the prologue test reads iced's disassembly.
"""

from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np
import pytest

from snippets_core.codegen.generator import Generator
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.lowered.pipeline import lower
from snippets_core.passes.data_flow_pipeline import run_data_flow
from snippets_x86_64.cpu import cpu_features
from snippets_x86_64.guarded import guarded_array, guarded_copy
from snippets_x86_64.jit_emitter import JitEmitter
from snippets_x86_64.memory_emitters import LANE_FORM, element_type_of_input
from snippets_x86_64.runtime import KernelExecutor, lowering_config
from snippets_x86_64.target_machine import X86_64TargetMachine

pytestmark = pytest.mark.avx512
RNG = np.random.default_rng(11)


class AddEmitter(JitEmitter):
    """x + y on 32-bit lanes: vaddps for float forms, vpaddd for integer forms."""

    def emit(self, a, ins, outs, aux):  # type: ignore[no-untyped-def]
        form = LANE_FORM[element_type_of_input(self.expr)]
        a.emit("vaddps" if form == "f32" else "vpaddd", outs[0].zmm, ins[0].zmm, ins[1].zmm)


TABLE = {"Add": AddEmitter}


def add_body(shape0, shape1, et="f32", same_input=False):  # type: ignore[no-untyped-def]
    p0 = Parameter(et, shape0, name="p0")
    params = [p0] if same_input else [p0, Parameter(et, shape1, name="p1")]
    body = Model([Result(Add(p0, params[-1]), name="r")], params)
    run_data_flow(body)
    return body


def build(body, num_threads=1):  # type: ignore[no-untyped-def]
    tm = X86_64TargetMachine(arithmetic=TABLE)
    ir = lower(body, lowering_config(body, num_threads), tm)
    return Generator(tm).generate(ir)


def executor(body, num_threads=1):  # type: ignore[no-untyped-def]
    ins = [(p.outputs[0].element_type.numpy, p.outputs[0].shape.to_tuple()) for p in body.parameters]
    outs = [(r.outputs[0].element_type.numpy, r.outputs[0].shape.to_tuple()) for r in body.results]
    return KernelExecutor(build(body.clone(), num_threads), ins, outs, num_threads, parallel_min_bytes=0)


def rand(shape, dtype=np.float32):  # type: ignore[no-untyped-def]
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return RNG.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
    return (RNG.standard_normal(shape) * 4).astype(dtype)


def run_guarded(body, inputs, at="end", num_threads=1):  # type: ignore[no-untyped-def]
    """Run with every input and output flush against an inaccessible page."""
    ex = executor(body, num_threads)
    outs = [guarded_array(shape, dtype, at) for dtype, shape in ex.output_specs]
    return ex([guarded_copy(x, at) for x in inputs], outs)


@pytest.mark.parametrize("last", range(1, 41))
@pytest.mark.parametrize("at", ["end", "start"])
def test_every_last_dim_against_guard_pages(last, at):
    shape = (2, 3, last)
    x, y = rand(shape), rand(shape)
    (out,) = run_guarded(add_body(shape, shape), [x, y], at)
    np.testing.assert_array_equal(out, x + y)


@pytest.mark.parametrize("last", [1, 15, 16, 17, 1000, 1023])
def test_long_rows_loop_and_tail(last):
    shape = (3, last)
    x, y = rand(shape), rand(shape)
    (out,) = run_guarded(add_body(shape, shape), [x, y])
    np.testing.assert_array_equal(out, x + y)


TYPES = [np.float32, np.int32, np.float16, ml_dtypes.bfloat16, np.int8, np.uint8, np.int16, np.uint16]


@pytest.mark.parametrize("dtype", TYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("last", [1, 7, 16, 17, 33])
def test_load_widens_and_store_narrows_every_type(dtype, last):
    if np.dtype(dtype) == np.dtype(ml_dtypes.bfloat16) and "avx512_bf16" not in cpu_features():
        pytest.skip("bf16 stores need AVX512_BF16")
    shape = (2, last)
    et = np.dtype(dtype).name
    x = rand(shape, dtype)
    (out,) = run_guarded(add_body(shape, shape, et, same_input=True), [x])
    # x + x is exact in every float type here (a doubling); integers wrap like numpy's
    expected = (x + x).astype(dtype)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out.view(np.uint8), expected.view(np.uint8))


@pytest.mark.parametrize("dtype", TYPES, ids=lambda d: np.dtype(d).name)
def test_broadcast_load_widens(dtype):
    if np.dtype(dtype) == np.dtype(ml_dtypes.bfloat16) and "avx512_bf16" not in cpu_features():
        pytest.skip("bf16 stores need AVX512_BF16")
    s0, s1 = (3, 5, 1), (3, 5, 7)
    et = np.dtype(dtype).name
    x, y = rand(s0, dtype), rand(s1, dtype)
    (out,) = run_guarded(add_body(s0, s1, et), [x, y])
    np.testing.assert_array_equal(out, (x + y).astype(dtype))


# every axis broadcast in one input or the other, ranks 1..4
BROADCASTS = [
    ((3, 5, 7), (1, 5, 7)), ((3, 5, 7), (3, 1, 7)), ((3, 5, 7), (3, 5, 1)), ((3, 5, 7), (7,)),
    ((1, 5, 7), (3, 5, 7)), ((3, 5, 1), (3, 5, 7)), ((3, 1, 1), (1, 5, 9)), ((2, 3, 4, 17), (2, 1, 4, 1)),
    ((2, 3, 4, 17), (1, 3, 1, 17)), ((6, 1), (1, 19)), ((5, 33), (1, 1)), ((2, 1, 4, 1), (1, 3, 1, 17)),
    ((40,), (1,)), ((1,), (37,)), ((4, 300), (300,)), ((64, 3, 1), (1, 1, 270)),
]  # fmt: skip


@pytest.mark.parametrize("s0, s1", BROADCASTS)
def test_broadcasting_on_every_axis(s0, s1):
    x, y = rand(s0), rand(s1)
    (out,) = run_guarded(add_body(s0, s1), [x, y])
    np.testing.assert_array_equal(out, x + y)


def test_prologue_reads_call_args_and_moves_pointers_by_the_indexes():
    """kernel(call_args, indexes): data pointer k from [rdi + 8k], plus data_offsets * indexes per domain dim."""
    # many threads: OptimizeDomain keeps a tile rank of 1, so the domain has two dims
    kernel = build(add_body((4, 6, 300), (6, 300)), num_threads=24)
    assert kernel.info.parallel_domain == (4, 6)
    lines = [line.split(": ", 1)[1] for line in kernel.disassemble().splitlines()]
    row, plane = 300 * 4, 6 * 300 * 4
    assert lines[:13] == [
        "mov r8, [rdi]",
        f"imul r11, [rsi], {plane:#x}",
        "add r8, r11",
        f"imul r11, [rsi+8], {row:#x}",
        "add r8, r11",
        "mov r9, [rdi+8]",  # the second input broadcasts along dim 0: no move for indexes[0]
        f"imul r11, [rsi+8], {row:#x}",
        "add r9, r11",
        "mov r10, [rdi+0x10]",
        f"imul r11, [rsi], {plane:#x}",
        "add r10, r11",
        f"imul r11, [rsi+8], {row:#x}",
        "add r10, r11",
    ]


def test_one_kernel_call_writes_exactly_its_tile():
    shape = (4, 6, 300)
    kernel = build(add_body(shape, shape), num_threads=24)
    assert kernel.info.parallel_domain == (4, 6)
    x, y = rand(shape), rand(shape)
    out = np.full(shape, -7.0, np.float32)
    args = (ctypes.c_uint64 * 3)(x.ctypes.data, y.ctypes.data, out.ctypes.data)
    idx = (ctypes.c_int64 * 2)(2, 5)
    kernel.fn(ctypes.addressof(args), ctypes.addressof(idx))
    expected = np.full(shape, -7.0, np.float32)
    expected[2, 5] = x[2, 5] + y[2, 5]
    np.testing.assert_array_equal(out, expected)


def test_harness_runs_a_chunk_of_the_domain_in_row_major_order():
    shape = (3, 5, 40)
    kernel = build(add_body(shape, shape), num_threads=24)
    assert kernel.info.parallel_domain == (3, 5)
    x, y = rand(shape), rand(shape)
    out = np.zeros(shape, np.float32)
    args = (ctypes.c_uint64 * 3)(x.ctypes.data, y.ctypes.data, out.ctypes.data)
    start = (ctypes.c_int64 * 2)(1, 3)  # linear index 8, then 6 more: (1,3) .. (2,4)
    kernel.harness(kernel.address, ctypes.addressof(args), ctypes.addressof(start), 7)
    written = np.zeros((3, 5), bool)
    written.reshape(-1)[8:15] = True
    np.testing.assert_array_equal(out[written], (x + y)[written])
    assert not out[~written].any()
    assert list(start) == [1, 3]  # the harness steps its own copy of the start index


@pytest.mark.parametrize("shape", [(8, 9, 100), (7, 3, 5, 33), (2, 1000)])
def test_one_and_two_threads_give_identical_bytes(shape):
    body = add_body(shape, shape[-1:])
    x, y = rand(shape), rand(shape[-1:])
    one = executor(body, 1)([x, y])[0]
    two_ex = executor(body, 2)
    assert two_ex.num_threads == 2
    two = two_ex([x, y])[0]
    assert one.tobytes() == two.tobytes()
    np.testing.assert_array_equal(one, x + y)

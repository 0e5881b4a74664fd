"""Instruction semantics of the interpreter, one instruction at a time, against numpy and Python integers."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from snippets_shave.asm import assemble_text
from snippets_shave.constants import WIN_E
from snippets_shave.sim.interp import AddressSpace, CoreState, Window, compile_program, execute

RNG = np.random.default_rng(42)


def run(source: str, memory: bytes = bytes(256), sregs: dict[int, int] | None = None,
        vregs: dict[int, np.ndarray] | None = None) -> tuple[CoreState, bytearray]:  # fmt: skip
    program = compile_program(assemble_text(source + "\nRET"))
    mem = bytearray(memory)
    state = CoreState(AddressSpace([None, None, Window("WIN_E", mem, True), None]), len(program))
    for r, value in (sregs or {}).items():
        state.r[r] = value & 0xFFFFFFFF
    for v, value in (vregs or {}).items():
        state.vb[v] = np.frombuffer(np.ascontiguousarray(value).tobytes(), np.uint8)
    execute(program, 0, state, 10_000)
    return state, mem


def lanes(state: CoreState, v: int, dtype: type) -> np.ndarray:
    return state.vb[v].view(dtype).copy()


U32 = [int(x) for x in RNG.integers(0, 2**32, 12, dtype=np.uint64)] + [0, 1, 2**31, 2**32 - 1, 5]
SCALAR_REFERENCE = {
    "ADD": lambda a, b: (a + b) % 2**32,
    "SUB": lambda a, b: (a - b) % 2**32,
    "MUL": lambda a, b: (a * b) % 2**32,
    "DIVU": lambda a, b: a // b if b else 2**32 - 1,
    "SHL": lambda a, b: (a << (b % 32)) % 2**32,
    "SHR": lambda a, b: a >> (b % 32),
    "SAR": lambda a, b: int(np.int32(np.uint32(a).view(np.int32)) >> (b % 32)) % 2**32,
    "AND": lambda a, b: a & b,
    "OR": lambda a, b: a | b,
    "XOR": lambda a, b: a ^ b,
    "MIN": lambda a, b: min(a, b, key=lambda x: np.uint32(x).view(np.int32)),
    "MAX": lambda a, b: max(a, b, key=lambda x: np.uint32(x).view(np.int32)),
}


@pytest.mark.parametrize("op", sorted(SCALAR_REFERENCE))
def test_scalar_alu(op: str) -> None:
    for a in U32[:8]:
        for b in U32[8:]:
            state, _ = run(f"{op} r3, r1, r2", sregs={1: a, 2: b})
            assert state.r[3] == SCALAR_REFERENCE[op](a, b), (op, a, b)


def test_scalar_immediates_and_branches() -> None:
    state, _ = run("MOVI r1, -5\nADDI r2, r1, 7\nSHLI r3, r2, 30\nSHRI r4, r3, 30", sregs={})
    assert state.r[1:5] == [2**32 - 5, 2, 2**31, 2]
    # signed vs unsigned compare of -1 and 1
    src = "MOVI r1, -1\nMOVI r2, 1\nMOVI r5, 0\nBLT r1, r2, 2\nMOVI r5, 9\nBLTU r1, r2, 2\nADDI r5, r5, 1"
    state, _ = run(src)
    assert state.r[5] == 1
    state, _ = run("MOVI r1, 3\nloop:\nADDI r1, r1, -1\nADDI r2, r2, 10\nBNE r1, r0, loop")
    assert state.r[2] == 30


def test_call_and_ret_use_the_link_register() -> None:
    src = "CALL 3\nADDI r2, r2, 100\nJMP 4\nADDI r2, r2, 1\nRET\nNOP"
    program = compile_program(assemble_text(src + "\nMOVI r31, 0\nRET"))
    state = CoreState(AddressSpace([None, None, None, None]), len(program))
    execute(program, 0, state, 100)
    assert state.r[2] == 101


def test_scalar_loads_and_stores() -> None:
    memory = bytes(RNG.integers(0, 256, 64, dtype=np.uint8))
    base = WIN_E
    formats = {"LD8S": "<b", "LD8U": "<B", "LD16S": "<h", "LD16U": "<H", "LD32": "<I"}
    for op, fmt in formats.items():
        for off in (0, 3, 17):
            state, _ = run(f"{op} r2, r1, {off}", memory, sregs={1: base})
            assert state.r[2] == struct.unpack_from(fmt, memory, off)[0] % 2**32, (op, off)
    mem = struct.pack("<qq", -7, 2**40) + bytes(48)
    state, _ = run("LD64 r2, r1, 0", mem, sregs={1: base})
    assert state.r[2] == 2**32 - 7
    from snippets_shave.errors import KernelTrap

    with pytest.raises(KernelTrap, match="does not fit int32"):
        run("LD64 r2, r1, 8", mem, sregs={1: base})
    _, out = run("ST8 r2, r1, 1\nST16 r2, r1, 4\nST32 r2, r1, 8", sregs={1: base, 2: 0x12345678})
    assert out[:12] == bytes([0, 0x78, 0, 0, 0x78, 0x56, 0, 0, 0x78, 0x56, 0x34, 0x12])


VECTOR_BINARY = {"VADD": np.add, "VSUB": np.subtract, "VMUL": np.multiply, "VMAX": np.maximum, "VMIN": np.minimum}
LANE_TYPES = {"f32": np.float32, "f16": np.float16, "i32": np.int32}


def _random_lanes(t: str) -> np.ndarray:
    n = 16 // np.dtype(LANE_TYPES[t]).itemsize
    if t == "i32":
        return RNG.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    values = RNG.standard_normal(n) * 100
    values[0] = np.nan if t != "i32" else 0
    return values.astype(LANE_TYPES[t])


@pytest.mark.parametrize("t", sorted(LANE_TYPES))
@pytest.mark.parametrize("op", sorted(VECTOR_BINARY))
def test_vector_binary_ops_match_numpy(op: str, t: str) -> None:
    a, b = _random_lanes(t), _random_lanes(t)
    state, _ = run(f"{op}.{t} v3, v1, v2", vregs={1: a, 2: b})
    with np.errstate(all="ignore"):
        expect = VECTOR_BINARY[op](a, b)
    assert lanes(state, 3, LANE_TYPES[t]).tobytes() == expect.tobytes()


@pytest.mark.parametrize("t", ["f32", "f16"])
def test_division_fma_clamp_and_unary(t: str) -> None:
    dt = LANE_TYPES[t]
    a, b, c = (_random_lanes(t) for _ in range(3))
    with np.errstate(all="ignore"):
        cases = {
            f"VDIV.{t} v4, v1, v2": a / b,
            f"VFMA.{t} v4, v1, v2, v3": (a.astype(np.float64) * b + c).astype(dt),
            f"VCLAMP.{t} v4, v1, v2, v3": np.minimum(np.maximum(a, b), c),
            f"VNEG.{t} v4, v1": -a,
            f"VABS.{t} v4, v1": np.abs(a),
        }
    for src, expect in cases.items():
        state, _ = run(src, vregs={1: a, 2: b, 3: c})
        assert lanes(state, 4, dt).tobytes() == np.asarray(expect, dt).tobytes(), src


@pytest.mark.parametrize("t", ["f32", "f16"])
def test_sau_ops_round_once_from_float64(t: str) -> None:
    dt = LANE_TYPES[t]
    x = np.abs(_random_lanes(t)) / 10 + dt(0.5)
    x64 = x.astype(np.float64)
    cases = {
        "VEXP2": np.exp2(x64),
        "VLOG2": np.log2(x64),
        "VRCP": 1.0 / x64,
        "VRSQRT": 1.0 / np.sqrt(x64),
        "VSQRT": np.sqrt(x64),
    }
    for op, expect in cases.items():
        state, _ = run(f"{op}.{t} v2, v1", vregs={1: x})
        with np.errstate(all="ignore"):
            assert lanes(state, 2, dt).tobytes() == expect.astype(dt).tobytes(), op


@pytest.mark.parametrize("t", sorted(LANE_TYPES))
def test_horizontal_ops(t: str) -> None:
    dt = LANE_TYPES[t]
    x = _random_lanes(t)
    if t != "i32":
        x[0] = dt(1.5)
    state, _ = run(f"VSUMX.{t} v2, v1\nVMAXX.{t} v3, v1\nVMINX.{t} v4, v1", vregs={1: x})
    if t == "i32":
        total = int(np.int64(x.astype(np.int64).sum()) % 2**32)
        assert int(lanes(state, 2, np.uint32)[0]) == total
    else:
        assert lanes(state, 2, dt)[0] == dt(math.fsum(float(v) for v in x))
    assert lanes(state, 3, dt)[0] == x.max() and lanes(state, 4, dt)[0] == x.min()
    assert not lanes(state, 2, dt)[1:].any()


def test_compare_select_mask_and_bitwise() -> None:
    a = np.array([1, 5, -3, 7], np.float32)
    b = np.array([2, 5, -4, np.nan], np.float32)
    state, _ = run("VCMPGT.f32 v3, v1, v2\nVCMPGE.f32 v4, v1, v2\nVCMPEQ.f32 v5, v1, v2\nVSEL.f32 v6, v1, v2, v3",
                   vregs={1: a, 2: b})  # fmt: skip
    ones = np.uint32(0xFFFFFFFF)
    assert lanes(state, 3, np.uint32).tolist() == [0, 0, ones, 0]
    assert lanes(state, 4, np.uint32).tolist() == [0, ones, ones, 0]
    assert lanes(state, 5, np.uint32).tolist() == [0, ones, 0, 0]
    np.testing.assert_array_equal(lanes(state, 6, np.float32), np.where(a > b, a, b))
    state, _ = run("MOVI r1, 3\nVMASKN.f16 v1, r1\nVAND.f16 v3, v2, v1\nVOR.i32 v4, v1, v2",
                   vregs={2: np.arange(8, dtype=np.float16)})  # fmt: skip
    assert lanes(state, 1, np.uint16).tolist() == [0xFFFF] * 3 + [0] * 5
    assert lanes(state, 3, np.float16).tolist() == [0, 1, 2, 0, 0, 0, 0, 0]


def test_conversions() -> None:
    f = np.array([1.5, -2.75, 3.0e9, np.nan], np.float32)
    h = np.array([0.5, -1, 2, 65504, -0.0, 3, 7, 9], np.float16)
    i = np.array([7, -8, 2**31 - 1, 16777217], np.int32)
    src = (
        "VCVT.f16 v4, v1, f32, 1\nVCVT.f32 v5, v2, f16, 1\nVCVT.f32 v6, v3, i32, 0\nVCVT.i32 v7, v1, f32, 0\n"
        "VCVT.f16 v8, v1, f32, 0"
    )
    state, _ = run(src, vregs={1: f, 2: h, 3: i, 4: np.zeros(8, np.float16) + np.float16(1)})
    with np.errstate(over="ignore"):  # 3e9 -> f16 inf is the defined result
        f16 = f.astype(np.float16)
    assert lanes(state, 4, np.float16).tobytes() == (np.array([1, 1, 1, 1], np.float16).tobytes() + f16.tobytes())
    assert lanes(state, 5, np.float32).tobytes() == h[4:].astype(np.float32).tobytes()
    assert lanes(state, 6, np.float32).tobytes() == i.astype(np.float32).tobytes()
    assert lanes(state, 7, np.int32).tolist() == [1, -2, 2**31 - 1, 0]  # truncate, saturate, NaN -> 0
    assert lanes(state, 8, np.float16)[:4].tobytes() == f16.tobytes()


def test_broadcast_extract_insert() -> None:
    state, _ = run("MOVI r1, 0x3c00\nVBCAST.f16 v1, r1\nMOVI r2, -1\nVINSERT.f32 v2, r2, 2\nVEXTRACT.f32 r3, v2, 2\n"
                   "VEXTRACT.f16 r4, v1, 7")  # fmt: skip
    assert lanes(state, 1, np.float16).tolist() == [1.0] * 8
    assert lanes(state, 2, np.uint32).tolist() == [0, 0, 0xFFFFFFFF, 0]
    assert state.r[3] == 0xFFFFFFFF and state.r[4] == 0x3C00


@pytest.mark.parametrize("t", sorted(LANE_TYPES))
def test_partial_loads_merge_and_partial_stores_write_only_their_lanes(t: str) -> None:
    dt = LANE_TYPES[t]
    n = 16 // np.dtype(dt).itemsize
    memory = np.arange(1, 2 * n + 1, dtype=dt).tobytes() + bytes(256)
    keep = np.full(n, 9, dt)
    for count in (0, 1, n - 1, n, n + 5):
        state, mem = run(
            f"MOVI r2, {count}\nVLDN.{t} v1, r1, 0, r2\nVSTN.{t} v1, r1, 64, r2", memory, sregs={1: WIN_E},
            vregs={1: keep},
        )  # fmt: skip
        k = min(count, n)
        expect = np.concatenate([np.arange(1, k + 1, dtype=dt), keep[k:]])
        assert lanes(state, 1, dt).tobytes() == expect.tobytes()
        stored = np.frombuffer(bytes(mem[64 : 64 + 16]), dt)
        assert stored[:k].tobytes() == expect[:k].tobytes() and not stored[k:].any()

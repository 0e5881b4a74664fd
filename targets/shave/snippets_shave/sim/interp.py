"""The SHVX interpreter: decode a kernel once into Python closures, then run them over numpy lane views.

Each instruction becomes one closure ``op(state, pc) -> next_pc`` (``-1`` ends the kernel), built from a
per-mnemonic table. Vector registers are one ``(32, 16)`` uint8 array with f32/f16/i32 and unsigned views,
so a vector op is a single numpy call on 4 or 8 lanes. Programs are cached by their ``.text`` bytes.
Numerics follow docs/shvx_isa.md: lane arithmetic is numpy's (f16 as numpy float16 gives), SAU ops are
computed in float64 and rounded once, VFMA rounds once.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from snippets_shave.constants import WIN_D, WINDOW_BASES
from snippets_shave.errors import KernelTrap, StepLimitExceeded, WindowFault
from snippets_shave.isa import LANES, Instruction, decode_program

if TYPE_CHECKING:
    from snippets_shave.sim.runtime import ShaveHardware

M32 = 0xFFFFFFFF
RETURN_ADDRESS = 0  # LR at entry: RET to it hands control back to the runtime
WINDOW_NAMES = ("WIN_C", "WIN_D", "WIN_E", "WIN_F")
_FIRST_WINDOW = WINDOW_BASES[0] >> 24

Op = Callable[["CoreState", int], int]


class Window:
    """One mapped window: a bytearray plus a numpy uint8 view of the same memory."""

    __slots__ = ("ba", "name", "np", "size", "writable")

    def __init__(self, name: str, memory: bytearray, writable: bool) -> None:
        self.name = name
        self.ba = memory
        self.np = np.frombuffer(memory, dtype=np.uint8) if len(memory) else np.zeros(0, np.uint8)
        self.size = len(memory)
        self.writable = writable


class AddressSpace:
    """The four SHAVE windows; every access is translated and bounds-checked here."""

    __slots__ = ("windows",)

    def __init__(self, windows: list[Window | None]) -> None:
        self.windows = windows

    def span(self, addr: int, n: int, write: bool, pc: int) -> tuple[Window, int]:
        w = (addr >> 24) - _FIRST_WINDOW
        if 0 <= w < 4:
            win = self.windows[w]
            off = addr & 0xFFFFFF
            if win is not None and off + n <= win.size and (win.writable or not write):
                return win, off
            if win is not None and write and not win.writable:
                raise WindowFault(f"write of {n} bytes to read-only {win.name} at {addr:#010x} (word {pc})")
            mapped = 0 if win is None else win.size
            raise WindowFault(
                f"{'write' if write else 'read'} of {n} bytes at {addr:#010x} (word {pc}) is past the "
                f"{mapped} mapped bytes of {WINDOW_NAMES[w]}"
            )
        raise WindowFault(
            f"{'write' if write else 'read'} of {n} bytes at {addr:#010x} (word {pc}) is outside every window"
        )


class CoreState:
    """Registers and address space of one SHAVE while it runs one invocation (or its runtime kernel).

    ``hw`` is the SHAVE's FIFO/barrier/window hardware, which only the runtime kernel reaches: for a compute
    kernel it is None and a system instruction traps."""

    __slots__ = ("hw", "lv", "mem", "ncode", "r", "uv", "vb")

    def __init__(self, mem: AddressSpace, ncode: int, hw: ShaveHardware | None = None) -> None:
        self.hw = hw
        self.r = [0] * 32
        self.vb = np.zeros((32, 16), dtype=np.uint8)
        self.lv = {"f32": self.vb.view(np.float32), "f16": self.vb.view(np.float16), "i32": self.vb.view(np.int32)}
        u32 = self.vb.view(np.uint32)
        self.uv = {"f32": u32, "i32": u32, "f16": self.vb.view(np.uint16)}
        self.mem = mem
        self.ncode = ncode


def _s32(x: int) -> int:
    return x - ((x & 0x80000000) << 1)


# -- control ------------------------------------------------------------------------------------------------

_BRANCHES: dict[str, Callable[[int, int], bool]] = {
    "BEQ": lambda a, b: a == b,
    "BNE": lambda a, b: a != b,
    "BLT": lambda a, b: _s32(a) < _s32(b),
    "BGE": lambda a, b: _s32(a) >= _s32(b),
    "BLTU": lambda a, b: a < b,
    "BGEU": lambda a, b: a >= b,
}


def _control(ins: Instruction, i: int, base: int) -> Op:
    m, ops = ins.mnemonic, ins.operands
    if m == "NOP":
        return lambda st, pc: pc + 1
    if m == "RET":

        def ret(st: CoreState, pc: int) -> int:
            target = st.r[31]
            if target == RETURN_ADDRESS:
                return -1
            index, rem = divmod(target - base, 8)
            if rem or not 0 <= index < st.ncode:
                raise KernelTrap(f"RET at word {pc} to {target:#010x}, which is not an instruction of the kernel")
            return index

        return ret
    if m == "TRAP":
        code = ops[0]

        def trap(st: CoreState, pc: int) -> int:
            raise KernelTrap(f"TRAP {code} at word {pc}")

        return trap
    target = i + int(ops[-1])
    if m == "JMP":
        return lambda st, pc: target
    if m == "CALL":

        def call(st: CoreState, pc: int) -> int:
            st.r[31] = base + 8 * (pc + 1)
            return target

        return call
    cmp = _BRANCHES[m]
    a, b = ops[0], ops[1]
    return lambda st, pc: target if cmp(st.r[a], st.r[b]) else pc + 1


# -- scalar ALU ---------------------------------------------------------------------------------------------

_ALU_RR: dict[str, Callable[[int, int], int]] = {
    "ADD": lambda x, y: (x + y) & M32,
    "SUB": lambda x, y: (x - y) & M32,
    "MUL": lambda x, y: (x * y) & M32,
    "DIVU": lambda x, y: x // y if y else M32,
    "SHL": lambda x, y: (x << (y & 31)) & M32,
    "SHR": lambda x, y: x >> (y & 31),
    "SAR": lambda x, y: (_s32(x) >> (y & 31)) & M32,
    "AND": lambda x, y: x & y,
    "OR": lambda x, y: x | y,
    "XOR": lambda x, y: x ^ y,
    "MIN": lambda x, y: x if _s32(x) <= _s32(y) else y,
    "MAX": lambda x, y: x if _s32(x) >= _s32(y) else y,
}
_ALU_RI: dict[str, Callable[[int, int], int]] = {
    "ADDI": lambda x, imm: (x + imm) & M32,
    "SHLI": lambda x, imm: (x << imm) & M32,
    "SHRI": lambda x, imm: x >> imm,
}


def _alu(ins: Instruction, i: int) -> Op:
    m, ops = ins.mnemonic, ins.operands
    if m == "MOVI":
        d, value = ops[0], int(ops[1]) & M32

        def movi(st: CoreState, pc: int) -> int:
            st.r[d] = value
            return pc + 1

        return movi
    if m in _ALU_RI:
        fn, (d, a, imm) = _ALU_RI[m], ops

        def alu_ri(st: CoreState, pc: int) -> int:
            r = st.r
            r[d] = fn(r[a], imm)
            return pc + 1

        return alu_ri
    fn2, (d, a, b) = _ALU_RR[m], ops

    def alu_rr(st: CoreState, pc: int) -> int:
        r = st.r
        r[d] = fn2(r[a], r[b])
        return pc + 1

    return alu_rr


# -- scalar LSU ---------------------------------------------------------------------------------------------

_LOADS = {"LD8S": "<b", "LD8U": "<B", "LD16S": "<h", "LD16U": "<H", "LD32": "<I", "LD64": "<q"}
_STORES = {"ST8": ("<B", 0xFF), "ST16": ("<H", 0xFFFF), "ST32": ("<I", M32)}


def _lsu(ins: Instruction, i: int) -> Op:
    m, (d, a, imm) = ins.mnemonic, ins.operands
    if m in _LOADS:
        fmt = struct.Struct(_LOADS[m])
        size = fmt.size
        wide = m == "LD64"

        def load(st: CoreState, pc: int) -> int:
            r = st.r
            win, off = st.mem.span((r[a] + imm) & M32, size, False, pc)
            value = fmt.unpack_from(win.ba, off)[0]
            if wide and not -(1 << 31) <= value < (1 << 31):
                raise KernelTrap(f"LD64 at word {pc}: value {value} does not fit int32")
            r[d] = value & M32
            return pc + 1

        return load
    sfmt, mask = _STORES[m]
    fmt = struct.Struct(sfmt)
    size = fmt.size

    def store(st: CoreState, pc: int) -> int:
        r = st.r
        win, off = st.mem.span((r[a] + imm) & M32, size, True, pc)
        fmt.pack_into(win.ba, off, r[d] & mask)
        return pc + 1

    return store


# -- vector LSU ---------------------------------------------------------------------------------------------


def _vlsu(ins: Instruction, i: int) -> Op:
    m, t, ops = ins.mnemonic, ins.etype, ins.operands
    assert t is not None
    lanes, esize = LANES[t], 16 // LANES[t]
    d, a, imm = ops[0], ops[1], ops[2]
    if m == "VLD":

        def vld(st: CoreState, pc: int) -> int:
            win, off = st.mem.span((st.r[a] + imm) & M32, 16, False, pc)
            st.vb[d] = win.np[off : off + 16]
            return pc + 1

        return vld
    if m == "VST":

        def vst(st: CoreState, pc: int) -> int:
            win, off = st.mem.span((st.r[a] + imm) & M32, 16, True, pc)
            win.np[off : off + 16] = st.vb[d]
            return pc + 1

        return vst
    c = ops[3]
    write = m == "VSTN"

    def partial(st: CoreState, pc: int) -> int:
        n = min(st.r[c], lanes) * esize
        if n:
            win, off = st.mem.span((st.r[a] + imm) & M32, n, write, pc)
            if write:
                win.np[off : off + n] = st.vb[d, :n]
            else:
                st.vb[d, :n] = win.np[off : off + n]
        return pc + 1

    return partial


# -- VAU / CMU ----------------------------------------------------------------------------------------------

_VBINARY = {
    "VADD": np.add,
    "VSUB": np.subtract,
    "VMUL": np.multiply,
    "VDIV": np.divide,
    "VMAX": np.maximum,
    "VMIN": np.minimum,
}
_ALL_ONES = {"f32": np.uint32(M32), "i32": np.uint32(M32), "f16": np.uint16(0xFFFF)}
_VCOMPARE = {"VCMPGT": np.greater, "VCMPGE": np.greater_equal, "VCMPEQ": np.equal}


def _vau(ins: Instruction, i: int) -> Op:
    m, t, ops = ins.mnemonic, ins.etype, ins.operands
    assert t is not None
    if m in _VBINARY:
        fn, (d, a, b) = _VBINARY[m], ops

        def vbin(st: CoreState, pc: int) -> int:
            v = st.lv[t]
            fn(v[a], v[b], out=v[d])
            return pc + 1

        return vbin
    if m in ("VNEG", "VABS"):
        fn1, (d, a) = (np.negative if m == "VNEG" else np.abs), ops

        def vun(st: CoreState, pc: int) -> int:
            v = st.lv[t]
            fn1(v[a], out=v[d])
            return pc + 1

        return vun
    if m == "VFMA":
        d, a, b, c = ops

        def vfma(st: CoreState, pc: int) -> int:
            v = st.lv[t]
            v[d] = v[a].astype(np.float64) * v[b] + v[c]
            return pc + 1

        return vfma
    if m == "VCLAMP":
        d, a, b, c = ops

        def vclamp(st: CoreState, pc: int) -> int:
            v = st.lv[t]
            v[d] = np.minimum(np.maximum(v[a], v[b]), v[c])
            return pc + 1

        return vclamp
    if m == "VSEL":
        d, a, b, c = ops

        def vsel(st: CoreState, pc: int) -> int:
            u = st.uv[t]
            u[d] = np.where(u[c] != 0, u[a], u[b])
            return pc + 1

        return vsel
    if m in _VCOMPARE:
        cmp, (d, a, b) = _VCOMPARE[m], ops
        ones = _ALL_ONES[t]

        def vcmp(st: CoreState, pc: int) -> int:
            v = st.lv[t]
            mask = cmp(v[a], v[b])
            st.uv[t][d] = np.where(mask, ones, 0)
            return pc + 1

        return vcmp
    bit_fn, (d, a, b) = (np.bitwise_and if m == "VAND" else np.bitwise_or), ops

    def vbit(st: CoreState, pc: int) -> int:
        vb = st.vb
        bit_fn(vb[a], vb[b], out=vb[d])
        return pc + 1

    return vbit


# -- SAU ----------------------------------------------------------------------------------------------------

_SAU: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "VEXP2": np.exp2,
    "VLOG2": np.log2,
    "VRCP": lambda x: 1.0 / x,
    "VRSQRT": lambda x: 1.0 / np.sqrt(x),
    "VSQRT": np.sqrt,
}


def _horizontal(m: str, t: str, lanes: np.ndarray) -> float | int:
    if t == "i32":
        values = [int(x) for x in lanes]
        if m == "VSUMX":
            return _s32(sum(values) & M32)
        return max(values) if m == "VMAXX" else min(values)
    if m == "VSUMX":
        return math.fsum(float(x) for x in lanes)  # exact sum, rounded once to f64, then to the lane type
    return lanes.max() if m == "VMAXX" else lanes.min()  # numpy semantics: NaN propagates


def _sau(ins: Instruction, i: int) -> Op:
    m, t, (d, a) = ins.mnemonic, ins.etype, ins.operands
    assert t is not None
    if m in _SAU:
        fn = _SAU[m]

        def sau(st: CoreState, pc: int) -> int:
            v = st.lv[t]
            v[d] = fn(v[a].astype(np.float64))
            return pc + 1

        return sau

    def reduce(st: CoreState, pc: int) -> int:
        v = st.lv[t]
        value = _horizontal(m, t, v[a])
        v[d] = 0
        v[d, 0] = value
        return pc + 1

    return reduce


# -- moves and conversions ----------------------------------------------------------------------------------

_LANE_MASK = {"f32": M32, "i32": M32, "f16": 0xFFFF}


def _move(ins: Instruction, i: int) -> Op:
    m, t, ops = ins.mnemonic, ins.etype, ins.operands
    assert t is not None
    mask = _LANE_MASK[t]
    if m == "VBCAST":
        d, a = ops

        def vbcast(st: CoreState, pc: int) -> int:
            st.uv[t][d] = st.r[a] & mask
            return pc + 1

        return vbcast
    if m == "VMOV":
        d, a = ops

        def vmov(st: CoreState, pc: int) -> int:
            st.vb[d] = st.vb[a]
            return pc + 1

        return vmov
    if m == "VEXTRACT":
        d, a, lane = ops

        def vextract(st: CoreState, pc: int) -> int:
            st.r[d] = int(st.uv[t][a, lane])
            return pc + 1

        return vextract
    if m == "VINSERT":
        d, a, lane = ops

        def vinsert(st: CoreState, pc: int) -> int:
            st.uv[t][d, lane] = st.r[a] & mask
            return pc + 1

        return vinsert
    if m == "VMASKN":
        d, a = ops
        index = np.arange(LANES[t])
        ones = _ALL_ONES[t]

        def vmaskn(st: CoreState, pc: int) -> int:
            st.uv[t][d] = np.where(index < st.r[a], ones, 0)
            return pc + 1

        return vmaskn
    return _convert(ins)


def _convert(ins: Instruction) -> Op:
    t = ins.etype
    d, a, src, half = ins.operands
    lo = 4 * int(half)
    if (t, src) == ("f16", "f32"):

        def f32_to_f16(st: CoreState, pc: int) -> int:
            value = st.lv["f32"][a].astype(np.float16)
            st.lv["f16"][d, lo : lo + 4] = value
            return pc + 1

        return f32_to_f16
    if (t, src) == ("f32", "f16"):

        def f16_to_f32(st: CoreState, pc: int) -> int:
            st.lv["f32"][d] = st.lv["f16"][a, lo : lo + 4].astype(np.float32)
            return pc + 1

        return f16_to_f32
    if (t, src) == ("f32", "i32"):

        def i32_to_f32(st: CoreState, pc: int) -> int:
            st.lv["f32"][d] = st.lv["i32"][a].astype(np.float32)
            return pc + 1

        return i32_to_f32

    def f32_to_i32(st: CoreState, pc: int) -> int:
        x = np.trunc(st.lv["f32"][a].astype(np.float64))
        x = np.clip(np.nan_to_num(x, nan=0.0), -(2.0**31), 2.0**31 - 1)
        st.lv["i32"][d] = x.astype(np.int32)
        return pc + 1

    return f32_to_i32


# -- system ops (the runtime kernel's FIFO, barrier and window hardware) ----------------------------------


def _hardware(st: CoreState, mnemonic: str, pc: int) -> ShaveHardware:
    if st.hw is None:
        raise KernelTrap(f"{mnemonic} at word {pc}: only the runtime kernel reaches the FIFO/barrier hardware")
    return st.hw


def _sys(ins: Instruction, i: int) -> Op:
    m, ops = ins.mnemonic, ins.operands
    if m == "HALT":

        def halt(st: CoreState, pc: int) -> int:
            _hardware(st, m, pc).halt()
            return -1

        return halt
    if m == "FIFOPOP":
        d = ops[0]

        def fifo_pop(st: CoreState, pc: int) -> int:
            st.r[d] = _hardware(st, m, pc).fifo_pop()
            return pc + 1

        return fifo_pop
    if m == "WINSET":
        win, a = ops

        def winset(st: CoreState, pc: int) -> int:
            _hardware(st, m, pc).set_window(win, st.r[a], st.mem, pc)
            return pc + 1

        return winset
    if m == "LAUNCH":
        a = ops[0]

        def launch(st: CoreState, pc: int) -> int:
            _hardware(st, m, pc).launch(st, st.r[a], pc)
            return pc + 1

        return launch
    a = ops[0]
    if m in ("BWAIT", "BCUR"):
        # The scheduler checks the wait's guard before it steps the SHAVE, so executing it means it holds;
        # reaching one unguarded (a plain run) re-checks it, and a wait that cannot hold is a deadlock there.
        def wait(st: CoreState, pc: int) -> int:
            hw = _hardware(st, m, pc)
            if not hw.barrier_ready(st.r[a], m == "BWAIT", pc):
                hw.stalled(m, st.r[a], pc)
            return pc + 1

        return wait
    produce = m == "BPROD"

    def count(st: CoreState, pc: int) -> int:
        _hardware(st, m, pc).barrier_count(st.r[a], produce, pc)
        return pc + 1

    return count


def _guard(ins: Instruction) -> Callable[[CoreState], bool] | None:
    """The condition a stalling instruction waits for (None: the instruction never stalls)."""
    if ins.mnemonic not in ("BWAIT", "BCUR"):
        return None
    a, producers_done = ins.operands[0], ins.mnemonic == "BWAIT"
    return lambda st: st.hw is not None and st.hw.barrier_ready(st.r[a], producers_done, -1)


_BUILDERS: dict[str, Callable[[Instruction, int], Op]] = {
    "SYS": _sys,
    "ALU": _alu,
    "LSU": _lsu,
    "VLSU": _vlsu,
    "VAU": _vau,
    "CMU": _vau,
    "SAU": _sau,
    "MOVE": _move,
}


@dataclass(frozen=True)
class Program:
    """A decoded kernel: one closure per instruction, plus a trap at the end for falling off the code.

    ``sync[pc]`` marks the system instructions (the points where a runtime kernel meets the other executors)
    and ``guards[pc]`` the condition a stalling one waits for."""

    instructions: tuple[Instruction, ...]
    ops: tuple[Op, ...]
    sync: tuple[bool, ...] = ()
    guards: tuple[Callable[[CoreState], bool] | None, ...] = ()

    def __len__(self) -> int:
        return len(self.instructions)


def _fell_off(st: CoreState, pc: int) -> int:
    raise KernelTrap(f"execution ran past the last instruction (word {pc})")


_CACHE: dict[tuple[bytes, int], Program] = {}
_CACHE_LIMIT = 256


def compile_program(text: bytes, base: int = WIN_D) -> Program:
    """Decode ``.text`` linked at window address ``base`` (WIN_D for kernels, WIN_C for the runtime kernel),
    raising InstructionDecodeError on bad words, and build its closures; cached by bytes and base."""
    cached = _CACHE.get((text, base))
    if cached is not None:
        return cached
    instrs = decode_program(text)
    ops = [
        _control(ins, i, base) if ins.definition.unit == "CTRL" else _BUILDERS[ins.definition.unit](ins, i)
        for i, ins in enumerate(instrs)
    ]
    sync = tuple(ins.definition.unit == "SYS" for ins in instrs)
    program = Program(tuple(instrs), (*ops, _fell_off), (*sync, False), (*map(_guard, instrs), None))
    if len(_CACHE) >= _CACHE_LIMIT:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[(text, base)] = program
    return program


def execute(program: Program, entry_index: int, state: CoreState, step_limit: int) -> int:
    """Run from ``entry_index`` until the kernel returns; return the number of instructions executed."""
    ops = program.ops
    pc = entry_index
    steps = 0
    with np.errstate(all="ignore"):  # IEEE results (inf, nan) are the defined behaviour, not warnings
        while pc >= 0:
            pc = ops[pc](state, pc)
            steps += 1
            if steps > step_limit:
                raise StepLimitExceeded(f"kernel ran more than {step_limit} instructions (last at word {pc})")
    return steps


def run_segment(program: Program, pc: int, state: CoreState, budget: int) -> tuple[int, int]:
    """Run a runtime kernel from ``pc`` (its next system instruction, whose guard holds) up to the next system
    instruction; return that pc (-1: halted) and the instructions executed. More than ``budget`` instructions
    without reaching one is :class:`StepLimitExceeded` (a runaway runtime kernel)."""
    ops, sync = program.ops, program.sync
    steps = 0
    with np.errstate(all="ignore"):
        pc = ops[pc](state, pc)
        steps = 1
        while pc >= 0 and not sync[pc]:
            pc = ops[pc](state, pc)
            steps += 1
            if steps > budget:
                raise StepLimitExceeded(f"runtime kernel ran more than {budget} instructions (last at word {pc})")
    return pc, steps

"""Unrolling the innermost loops of a finished kernel by two (twice: by four), the copies interleaved.

A fused eltwise body (Sigmoid -> Mul -> Tanh...) is one long dependency chain per vector: the out-of-order core
overlaps consecutive iterations only as far as its scheduler reaches, and the FMA units wait on latency.
Two iterations interleaved in one body give it two independent chains side by side (measured: 12 % less time
per vector for the chain of bench row a).

This works on the Assembler's instruction list after every expression has been emitted, so it needs nothing
from the LinearIR. A loop qualifies when it has the LoopBegin/LoopEnd shape ``mov counter, N`` / body /
``add ptr, imm``... / ``dec counter`` / ``jnz body`` with N >= 2, and its body is straight-line vector code:
no branch or label, no general-purpose register written, memory addressed as ``[gpr + disp]`` or
``[rip + constant]``. The second copy gets

* every vector and mask register the body writes renamed to one the body does not touch and that is dead
  where the body starts and where the loop ends (so nothing live can be clobbered: an FC's epilogue loop
  takes its Brgemm's dead accumulators); a register the body writes must not be live where the loop starts
  (a loop-carried value, an accumulator) nor where it ends (read after the loop): a liveness analysis over
  the whole kernel's control flow checks both, and the loop is left alone otherwise;
* each memory displacement moved by its pointer's per-iteration increment (pointers the loop does not move,
  such as a per-channel constant, keep theirs);
* an accumulator (a zmm register that one unmasked ``vaddps``/``vmaxps``/``vminps`` of the body reads and
  writes and no other instruction of the body touches: a reduction's, such as a Softmax row's max and sum) a
  second accumulator of its own, started before the loop (0 for a sum, a copy for max/min) and folded into the
  first after it. The two chains of a row's reduction then run side by side (4 after the second pass); a sum
  is added in another order, as any tree would (deterministic all the same).

The loop then runs N // 2 times with doubled increments; an odd N runs the body once more after it. The
unrolled loop qualifies again (with the first copy's renamed registers taken), which makes four iterations
per trip when N >= 4 and 32 vector registers suffice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from iced_x86 import (
    EncodingKind,
    FlowControl,
    Instruction,
    InstructionInfoFactory,
    Mnemonic,
    OpAccess,
    OpKind,
    Register,
)
from iced_x86 import RegisterExt as RX

from snippets_x86_64.asm import GP64, ZMM, Assembler

#: times a loop is unrolled by two: 2 = four iterations per trip where registers allow (bench row a's kernel
#: 10.0 -> 7.8 ms against two iterations: its chains also wait on memory)
PASSES = 2
#: the KernelEmitter unrolls when True (a switch for tests and measurements; kernels already in the in-memory
#: kernel cache stay as they were built)
ENABLED = True

_READS = frozenset({OpAccess.READ, OpAccess.COND_READ, OpAccess.READ_WRITE, OpAccess.READ_COND_WRITE})
# a conditional (merge-masked) write keeps the old value in some lanes: it reads the register too
_COND_WRITES = frozenset({OpAccess.COND_WRITE, OpAccess.READ_COND_WRITE})
_WRITES = frozenset({OpAccess.WRITE, OpAccess.READ_WRITE}) | _COND_WRITES
_INFO = InstructionInfoFactory()


def _key(reg: int) -> tuple[str, int] | None:
    """A vector register of any width as ("v", number), a mask register as ("k", number); None otherwise."""
    if RX.is_xmm(reg) or RX.is_ymm(reg) or RX.is_zmm(reg):
        return ("v", RX.number(reg))
    if RX.is_k(reg):
        return ("k", RX.number(reg))
    return None


def _bit(key: tuple[str, int]) -> int:
    """A register key as one bit: vector registers 0..31, mask registers 32..39."""
    return 1 << (key[1] + (32 if key[0] == "k" else 0))


class _Facts(NamedTuple):
    """What one instruction does to registers."""

    reads: frozenset  # vector/mask registers read (a merge-masked write reads its destination)
    writes: frozenset  # vector/mask registers fully written
    gpr_writes: frozenset  # general-purpose registers written (full registers)
    cond_writes: frozenset  # vector/mask registers written under a merge mask
    read_mask: int  # reads as bits (see _bit)
    write_mask: int  # writes as bits


def _decode(instr: Instruction) -> _Facts:
    reads: set = set()
    writes: set = set()
    gpr_writes: set = set()
    cond: set = set()
    for use in _INFO.info(instr).used_registers():
        reg, acc = use.register, use.access
        key = _key(reg)
        if key is None:
            if RX.is_gpr(reg) and acc in _WRITES:
                gpr_writes.add(RX.full_register(reg))
            continue
        if acc in _READS or acc in _COND_WRITES:
            reads.add(key)
        if acc in _COND_WRITES:
            cond.add(key)
        if acc in (OpAccess.WRITE, OpAccess.READ_WRITE):
            writes.add(key)
    return _Facts(frozenset(reads), frozenset(writes), frozenset(gpr_writes), frozenset(cond),
                  sum(map(_bit, reads)), sum(map(_bit, writes)))


class _Memo:
    """Facts by instruction: by identity first (most of a kernel's instructions are the Assembler's shared
    templates, and an id hashes faster than iced hashes an instruction), then by value (an unrolled copy equals an
    instruction seen before: a tile's FMAs repeated per K step are decoded once)."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Instruction, _Facts]] = {}  # holds the instruction: its id stays unique
        self._by_value: dict[Instruction, _Facts] = {}

    def facts(self, instr: Instruction) -> _Facts:
        found = self._by_id.get(id(instr))
        if found is not None:
            return found[1]
        facts = self._by_value.get(instr)
        if facts is None:
            facts = self._by_value[instr] = _decode(instr)
        self._by_id[id(instr)] = (instr, facts)
        return facts


def _keys(mask: int) -> set:
    return {("k", b - 32) if b >= 32 else ("v", b) for b in range(40) if mask >> b & 1}


def _liveness(a: Assembler, memo: _Memo) -> dict[int, int]:
    """Vector/mask registers (as bits, see _bit) live on entry to each basic block, by the index of its first
    instruction (the index len = the end: nothing live). Per block, not per instruction: the loops asked about
    start and end at block boundaries, and a fixpoint over the blocks with bit masks keeps this cheap on a kernel
    of thousands of instructions (a BERT layer's compile: 0.88 -> 0.69 s CPU with the memo below)."""
    ins = a._instructions
    n = len(ins)
    target = {i: a._labels[label] for i, label in a._branches.items()}
    leaders = {0, n, *a._labels.values()}
    for i in target:
        leaders.add(i + 1)
    for i, instr in enumerate(ins):
        if instr.flow_control in (FlowControl.RETURN, FlowControl.INTERRUPT):
            leaders.add(i + 1)
    starts = sorted(p for p in leaders if p <= n)
    # per block [start, end): upward-exposed uses, definitions, successor block starts
    blocks: list[tuple[int, int, int, list[int]]] = []
    for start, end in zip(starts, starts[1:]):
        use = defs = 0
        for i in range(end - 1, start - 1, -1):
            facts = memo.facts(ins[i])
            use = facts.read_mask | (use & ~facts.write_mask)
            defs |= facts.write_mask
        last = end - 1
        flow = ins[last].flow_control
        if flow == FlowControl.UNCONDITIONAL_BRANCH:
            succ = [target[last]]
        elif flow == FlowControl.CONDITIONAL_BRANCH:
            succ = [target[last], end]
        elif flow in (FlowControl.RETURN, FlowControl.INTERRUPT):
            succ = []
        else:
            succ = [end]
        blocks.append((start, use, defs, succ))
    live = dict.fromkeys(starts, 0)
    changed = True
    while changed:
        changed = False
        for start, use, defs, succ in reversed(blocks):
            out = 0
            for t in succ:
                out |= live[t]
            new = use | (out & ~defs)
            if new != live[start]:
                live[start] = new
                changed = True
    return live


class _KernelFacts:
    """The kernel-wide facts a loop's renaming needs, computed on first use (most loops fail a local check
    first): the liveness at each basic block."""

    def __init__(self, a: Assembler, memo: _Memo) -> None:
        self.a = a
        self.memo = memo
        self._live: dict[int, int] | None = None

    def live(self) -> dict[int, int]:
        if self._live is None:
            self._live = _liveness(self.a, self.memo)
        return self._live


@dataclass
class _Loop:
    mov: int  # index of ``mov counter, N``
    body: tuple[int, int]  # [start, end) of the body
    adds: list[tuple[int, int, int]]  # (index, pointer register, increment)
    jnz: int
    count: int


def _find_loops(a: Assembler) -> list[_Loop]:
    ins = a._instructions
    bound = sorted(a._labels.values())
    loops = []
    for j, label in a._branches.items():
        s = a._labels[label]
        if ins[j].mnemonic != Mnemonic.JNE or s >= j or s < 1:
            continue
        if any(s < p <= j for p in bound) or any(s <= b < j for b in a._branches):
            continue  # a label or branch inside: not a straight-line body
        dec = ins[j - 1]
        if dec.mnemonic != Mnemonic.DEC or dec.op0_kind != OpKind.REGISTER or not RX.is_gpr64(dec.op0_register):
            continue
        counter = dec.op0_register
        t = j - 1
        adds = []
        while t - 1 >= s:
            add = ins[t - 1]
            if (
                add.mnemonic != Mnemonic.ADD
                or add.op0_kind != OpKind.REGISTER
                or add.op1_kind
                not in (
                    OpKind.IMMEDIATE8TO64,
                    OpKind.IMMEDIATE32TO64,
                )
            ):
                break
            inc = add.immediate(1)
            adds.append((t - 1, add.op0_register, inc - 2**64 if inc >= 2**63 else inc))
            t -= 1
        mov = ins[s - 1]
        if (
            mov.mnemonic != Mnemonic.MOV
            or mov.op0_kind != OpKind.REGISTER
            or mov.op0_register != counter
            or mov.op1_kind not in (OpKind.IMMEDIATE32TO64, OpKind.IMMEDIATE64, OpKind.IMMEDIATE32)
        ):
            continue
        count = mov.immediate(1)
        if count >= 2 and t > s:
            loops.append(_Loop(s - 1, (s, t), sorted(adds), j, count))
    return loops


def _net_shifts(loop: _Loop) -> dict[int, int]:
    """Pointer register -> bytes it moves per iteration (a pointer may have several adds: a folded inner loop's
    step and its reset), in the order the adds come."""
    out: dict[int, int] = {}
    for _, reg, inc in sorted(loop.adds):
        out[reg] = out.get(reg, 0) + inc
    return out


def _rename(reg: int, mapping: dict) -> int:
    key = _key(reg)
    if key is None or key not in mapping:
        return reg
    return RX.base(reg) + mapping[key]


def _second_copy(instr: Instruction, mapping: dict, shift: dict[int, int]) -> Instruction:
    c = instr.copy()
    for i in range(c.op_count):
        if c.op_kind(i) == OpKind.REGISTER:
            c.set_op_register(i, _rename(c.op_register(i), mapping))
        elif c.op_kind(i) == OpKind.MEMORY and c.memory_base in shift and shift[c.memory_base]:
            disp = c.memory_displacement
            disp = (disp - 2**64 if disp >= 2**63 else disp) + shift[c.memory_base]
            c.memory_displacement = disp & 0xFFFF_FFFF_FFFF_FFFF
            # iced's 64-bit addressing sizes: 1 (disp8, compressed for EVEX when it can be) or 8 (disp32)
            c.memory_displ_size = 1 if -128 <= disp < 128 else 8
    if c.op_mask != Register.NONE:
        c.op_mask = _rename(c.op_mask, mapping)
    return c


def _plan(a: Assembler, loop: _Loop, kernel: _KernelFacts) -> tuple[dict, dict] | None:
    """The register renaming for the second copy and the body's accumulators (key -> mnemonic), or None when the
    loop does not qualify. The checks local to
    the body come first: the kernel-wide liveness is computed only for a loop that passes them (a Brgemm's K
    loops carry their accumulators, so its kernel never needs it)."""
    ins = a._instructions
    s, t = loop.body
    if any(not -(2**31) <= 2 * inc < 2**31 for inc in _net_shifts(loop).values()):
        return None
    written: set = set()
    exposed: set = set()
    touched: set = set()
    for instr in ins[s:t]:
        if instr.flow_control != FlowControl.NEXT:
            return None
        r, w, gw, cond, _, _ = kernel.memo.facts(instr)
        if gw:
            return None  # a scalar register written in the body (address arithmetic, counters)
        for i in range(instr.op_count):
            if instr.op_kind(i) == OpKind.MEMORY:
                base = instr.memory_base
                if instr.memory_index != Register.NONE or not (base == Register.RIP or RX.is_gpr64(base)):
                    return None
        exposed |= r - written  # read before the body writes it: live where the body starts
        touched |= r | w
        written |= w
        written |= r & cond
    accs = _accumulators(ins[s:t], exposed & written, kernel.memo)
    if accs is None:
        return None  # a loop-carried value other than a reduction's accumulator: live[s] would say so, at a cost
    live = kernel.live()
    acc_mask = sum(_bit(k) for k in accs)
    written_mask = sum(map(_bit, written)) & ~acc_mask
    if written_mask & live[s] or written_mask & live[loop.jnz + 1]:
        return None  # loop-carried or read after the loop
    # the second copy may take any register the body does not touch and that holds nothing live across the loop
    # (dead where the body starts and where the loop ends): an FC's epilogue loop after its Brgemm, which used
    # every register, gets the Brgemm's dead accumulators
    busy = touched | _keys(live[s] | live[loop.jnz + 1])
    free = {kind: [n for n in range(1 if kind == "k" else 0, 8 if kind == "k" else 32) if (kind, n) not in busy]
            for kind in ("v", "k")}  # fmt: skip
    # a VEX-encoded instruction (xmm/ymm forms, e.g. a bf16 store) reaches only registers 0..15: its
    # registers are renamed first, to low free ones
    vex = set()
    for instr in ins[s:t]:
        if instr.encoding == EncodingKind.VEX:
            facts = kernel.memo.facts(instr)
            vex |= {key for key in facts.reads | facts.writes if key[0] == "v"}
    mapping = {}
    for key in sorted(written, key=lambda k: (k not in vex, k)):
        pool = [n for n in free[key[0]] if n < 16 or key not in vex]
        if not pool:
            return None
        free[key[0]].remove(pool[0])
        mapping[key] = pool[0]
    return mapping, accs


#: reductions whose accumulator may be split in two: the mnemonic folds the second into the first after the loop
_REDUCTIONS = (Mnemonic.VADDPS, Mnemonic.VMAXPS, Mnemonic.VMINPS)


def _accumulators(body: list[Instruction], carried: set, memo: _Memo) -> dict | None:
    """key -> mnemonic for each loop-carried register of the body, when every one is a reduction's accumulator:
    a zmm register that exactly one unmasked ``vaddps``/``vmaxps``/``vminps`` both reads (one of its two
    sources) and writes, and that no other instruction of the body reads or writes; None otherwise."""
    accs: dict = {}
    for key in sorted(carried):
        users = [instr for instr in body if key in memo.facts(instr).reads | memo.facts(instr).writes]
        if len(users) != 1 or key[0] != "v":
            return None
        instr = users[0]
        if (
            instr.mnemonic not in _REDUCTIONS
            or instr.op_mask != Register.NONE
            or instr.op_count != 3
            or instr.op0_kind != OpKind.REGISTER
            or not RX.is_zmm(instr.op0_register)
            or _key(instr.op0_register) != key
        ):
            return None
        sources = [_key(instr.op_register(i)) if instr.op_kind(i) == OpKind.REGISTER else None for i in (1, 2)]
        if sources.count(key) != 1:
            return None
        accs[key] = instr.mnemonic
    return accs


def _gp_imm(mnemonic: str, reg: int, value: int) -> Instruction:
    """``mov/add r64, imm`` built by the DSL (it picks the immediate's encoding for the value)."""
    tmp = Assembler()
    getattr(tmp, mnemonic)(GP64[RX.number(reg)], value)
    return tmp._instructions[0]


def unroll_inner_loops(a: Assembler) -> int:
    """Unroll every qualifying innermost loop of ``a`` by two, up to :data:`PASSES` times each (see the module
    docstring); returns how many times a loop was unrolled."""
    done = 0
    seen: dict = {}  # body label -> times looked at: a loop is unrolled at most PASSES times
    memo = _Memo()  # instruction -> its accesses (no instruction is changed in place while unrolling)
    while True:
        kernel = _KernelFacts(a, memo)
        for loop in _find_loops(a):
            label = a._branches[loop.jnz]
            if seen.get(label, 0) >= PASSES:
                continue
            seen[label] = seen.get(label, 0) + 1
            plan = _plan(a, loop, kernel)
            if plan is not None:
                _apply(a, loop, *plan)
                done += 1
                break
        else:
            return done


def _vec_op(mnemonic: str, *regs: int) -> Instruction:
    """A zmm instruction over register numbers, built by the DSL."""
    tmp = Assembler()
    getattr(tmp, mnemonic)(*(ZMM[r] for r in regs))
    return tmp._instructions[0]


_FOLD = {Mnemonic.VADDPS: "vaddps", Mnemonic.VMAXPS: "vmaxps", Mnemonic.VMINPS: "vminps"}


def _apply(a: Assembler, loop: _Loop, mapping: dict, accs: dict) -> None:
    ins = a._instructions
    s, t = loop.body
    shift = _net_shifts(loop)
    # the new region replacing [mov .. jnz]: (instruction, old index it copies: for constants)
    region: list[tuple[Instruction, int | None]] = []
    for key, mnemonic in accs.items():  # the second accumulators start as 0 (a sum) or the first (max, min)
        two = mapping[key]
        if mnemonic == Mnemonic.VADDPS:
            region.append((_vec_op("vpxord", two, two, two), None))
        else:
            region.append((_vec_op("vmovaps", two, key[1]), None))
    head = len(region)
    region.append((_gp_imm("mov", ins[loop.mov].op0_register, loop.count // 2), None))
    first = [(ins[i].copy(), i) for i in range(s, t)]
    second = [(_second_copy(ins[i], mapping, shift), i) for i in range(s, t)]
    for one, two in zip(first, second):
        region += [one, two]
    for reg, inc in shift.items():
        if inc:
            region.append((_gp_imm("add", reg, 2 * inc), None))
    region.append((ins[loop.jnz - 1].copy(), None))  # dec
    jnz_pos = len(region)
    region.append((ins[loop.jnz].copy(), None))
    if loop.count % 2:
        region += [(ins[i].copy(), i) for i in range(s, t)]
        region += [(ins[idx].copy(), None) for idx, _, _ in loop.adds]
    for key, mnemonic in accs.items():
        region.append((_vec_op(_FOLD[mnemonic], key[1], key[1], mapping[key]), None))
    old_len = loop.jnz + 1 - loop.mov
    delta = len(region) - old_len

    def moved(i: int) -> int:
        return i if i <= loop.mov else i + delta

    body_label = a._branches[loop.jnz]
    new_ins = ins[: loop.mov] + [x for x, _ in region] + ins[loop.jnz + 1 :]
    new_labels = {}
    for label, pos in a._labels.items():
        new_labels[label] = loop.mov + head + 1 if label is body_label else moved(pos) if pos > loop.jnz else pos
    new_branches = {moved(i) if i > loop.jnz else i: lb for i, lb in a._branches.items() if i != loop.jnz}
    new_branches[loop.mov + jnz_pos] = body_label
    new_rips = {moved(i) if i > loop.jnz else i: lb for i, lb in a._rip_refs.items() if not loop.mov <= i <= loop.jnz}
    for k, (_, old) in enumerate(region):
        if old is not None and old in a._rip_refs:
            new_rips[loop.mov + k] = a._rip_refs[old]
    a._instructions[:] = new_ins
    a._labels.clear()
    a._labels.update(new_labels)
    a._branches.clear()
    a._branches.update(new_branches)
    a._rip_refs.clear()
    a._rip_refs.update(new_rips)


__all__ = ["unroll_inner_loops"]

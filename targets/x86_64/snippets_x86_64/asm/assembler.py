"""The Assembler: a list of instructions with labels, encoded by iced-x86's BlockEncoder.

Every mnemonic of :data:`~snippets_x86_64.asm.instructions.MNEMONICS` is a method::

    a = Assembler()
    loop = a.label("loop")
    a.vmovups(zmm0, rsi + 0)
    a.vaddps(zmm0, zmm0, bcst(rdx))
    a.vmovups(rdi + 0, zmm0)
    a.add(rsi, 64)
    a.dec(rcx)
    a.jnz(loop)

Labels become iced branch targets: the instruction a label is bound to gets a unique ``ip`` (its index + 1)
and every branch to the label targets that ip; the BlockEncoder turns them into real displacements and widens
short branches whose target is too far.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
from iced_x86 import BlockEncoder, Decoder, Formatter, FormatterSyntax, Instruction

from snippets_core.errors import CodegenError
from snippets_x86_64.asm.instructions import ALIASES, MNEMONICS, _disp_class, build
from snippets_x86_64.asm.operands import Label, Masked, Mem, Operand, _tuple_new

#: the constant pool starts on this boundary (one zmm load), and no constant asks for more
POOL_ALIGN = 64

#: (mnemonic, operands, rc, sae) -> the instruction they make, for instructions without a label or a constant:
#: an emitted instruction is this shared object (never changed in place; the assembler copies the few it
#: changes when it resolves labels), so a repeated instruction costs one dict lookup (ResNet-50's kernels: 13,500
#: instructions, 2,200 distinct)
_TEMPLATES: dict[tuple, Instruction] = {}
#: emptied when it grows past this (a long-lived process compiling many models)
_TEMPLATES_MAX = 1 << 16
#: (mnemonic, operands with the memory operand's displacement reduced to its class, rc, sae) -> an instruction made
#: for one displacement of that class: the same encoding form and displacement size, so another displacement of
#: the class is that instruction with the displacement changed (ResNet-50: 2,200 instructions built, 1,100 copied)
_NEAR: dict[tuple, Instruction] = {}


def _near_key(operands: tuple[Operand, ...]) -> tuple[tuple, int] | None:
    """The operands with their memory operand's displacement replaced by its class (see ``_disp_class``), and
    that displacement; None without a plain memory operand (a constant's, a list's: built as they are)."""
    key: list[object] = []
    disp = None
    for op in operands:
        target = op[0] if type(op) is Masked else op
        if type(target) is Mem:
            base, index, scale, disp, size, bcst, label = target
            if label is not None:
                return None
            mem = (_tuple_new(Mem, (base, index, scale, 0, size, bcst, None)), _disp_class(disp))
            key.append(mem if target is op else (mem, op[1], op[2]))
        elif type(op) is list:
            return None
        else:
            key.append(op)
    return None if disp is None else (tuple(key), disp)


def make_formatter() -> Formatter:
    """The Intel-syntax formatter used for every disassembly text of this package (and its tests)."""
    fmt = Formatter(FormatterSyntax.INTEL)
    fmt.hex_prefix = "0x"
    fmt.hex_suffix = ""
    fmt.uppercase_hex = False
    fmt.space_after_operand_separator = True
    fmt.show_branch_size = False
    fmt.branch_leading_zeros = False
    return fmt


def disassemble(code: bytes, ip: int = 0, code_size: int | None = None) -> str:
    """One line per instruction, ``<address>: <intel syntax>``, decoded from machine code by iced; the
    constant pool after ``code_size`` bytes of code is listed as ``db`` lines of up to 16 bytes."""
    code_size = len(code) if code_size is None else code_size
    fmt = make_formatter()
    lines = []
    for instr in Decoder(64, code[:code_size], ip=ip):
        if instr.is_invalid:
            at = instr.ip - ip
            raise CodegenError(f"undecodable bytes at {instr.ip:#x}: {code[at : at + 15].hex()}")
        lines.append(f"{instr.ip:6x}: {fmt.format(instr)}")
    # the pool starts at the next 64-byte boundary; what lies before it is int3 filler
    for at in range(-(-code_size // POOL_ALIGN) * POOL_ALIGN, len(code), 16):
        lines.append(f"{ip + at:6x}: db " + " ".join(f"{b:02x}" for b in code[at : at + 16]))
    return "\n".join(lines)


class Assembler:
    """A straight list of x86-64 instructions and labels; each mnemonic is a method (``a.vaddps(...)``).

    Constants go to a pool placed after the code (64-byte aligned, deduplicated by value):
    ``a.vmulps(zmm0, zmm0, bcst(a.const_f32(0.5)))`` reads ``[rip+const]{1to16}``.
    """

    def __init__(self) -> None:
        self._instructions: list[Instruction] = []
        # branch instruction index -> the label it jumps to
        self._branches: dict[int, Label] = {}
        # label -> index of the instruction it is bound to (== len(instructions) when bound at the end)
        self._labels: dict[Label, int] = {}
        # instruction index -> the constant-pool label its memory operand reads
        self._rip_refs: dict[int, Label] = {}
        # constant-pool label -> (bytes, alignment); several labels may name equal constants
        self._pool: dict[Label, tuple[bytes, int]] = {}
        self._pool_by_value: dict[tuple[bytes, int], Label] = {}

    # -- emitting ---------------------------------------------------------------------------------------------

    def emit(self, mnemonic: str, *operands: Operand, rc: str | None = None, sae: bool = False) -> None:
        """Append one instruction. ``rc`` ("rn", "rd", "ru", "rz") is EVEX embedded rounding, ``sae``
        suppresses floating-point exceptions; both need register operands and an EVEX form."""
        try:
            instr = _TEMPLATES.get((mnemonic, operands, rc, sae))
        except TypeError:  # an unhashable operand (the PeachPy spelling ``[rsi + 8]``)
            instr = None
        if instr is not None:
            self._instructions.append(instr)
            return
        near = _near_key(operands)
        if near is None:
            instr = build(mnemonic, tuple(operands), rc=rc, sae=sae)
        else:  # the same instruction at another displacement of its class: a copy with the displacement patched
            near_key, disp = (mnemonic, near[0], rc, sae), near[1]
            found = _NEAR.get(near_key)
            if found is None:
                instr = build(mnemonic, tuple(operands), rc=rc, sae=sae)
                if len(_NEAR) >= _TEMPLATES_MAX:
                    _NEAR.clear()
                _NEAR[near_key] = instr
            else:
                instr = found.copy()
                instr.memory_displacement = disp & 0xFFFF_FFFF_FFFF_FFFF
        index = len(self._instructions)
        plain = True  # no label and no constant: the same operands always make this same instruction
        for op in operands:
            target = op.target if isinstance(op, Masked) else op
            if isinstance(target, Label):
                self._branches[index] = target
                plain = False
            elif isinstance(target, Mem) and target.label is not None:
                if target.label not in self._pool:
                    raise CodegenError(f"{mnemonic}: {target} is not a constant of this assembler's pool")
                self._rip_refs[index] = target.label
                plain = False
            elif isinstance(target, list):
                plain = False
        if plain:
            if len(_TEMPLATES) >= _TEMPLATES_MAX:
                _TEMPLATES.clear()
            _TEMPLATES[(mnemonic, operands, rc, sae)] = instr
        self._instructions.append(instr)

    def lock_last(self) -> None:
        """Give the instruction just emitted a ``lock`` prefix (the DSL has no lock form; iced encodes the flag).
        A copy: an emitted instruction may be shared with every other place that emitted the same one."""
        instr = self._instructions[-1].copy()
        instr.has_lock_prefix = True
        self._instructions[-1] = instr

    def new_label(self, name: str = "") -> Label:
        """An unbound label (for a forward jump); bind it later with :meth:`bind`."""
        return Label(name)

    def bind(self, label: Label) -> Label:
        """Bind ``label`` to the next instruction emitted."""
        if label in self._labels:
            raise CodegenError(f"label {label.name!r} is bound twice")
        self._labels[label] = len(self._instructions)
        return label

    def label(self, name: str = "") -> Label:
        """Create a label bound here (a backward-jump target such as a loop head)."""
        return self.bind(Label(name))

    # -- constants --------------------------------------------------------------------------------------------

    def const_data(self, data: bytes, align: int = 4) -> Mem:
        """``[rip + constant]`` for ``data`` placed in the pool at an ``align``-byte boundary (<= 64)."""
        data = bytes(data)
        if not data:
            raise CodegenError("a constant needs at least one byte")
        if align <= 0 or align & (align - 1) or align > POOL_ALIGN:
            raise CodegenError(f"constant alignment must be a power of two <= {POOL_ALIGN}, got {align}")
        key = (data, align)
        label = self._pool_by_value.get(key)
        if label is None:
            label = Label(f"const{len(self._pool_by_value)}")
            self._pool_by_value[key] = label
            self._pool[label] = key
        return Mem(label=label)

    def const_f32(self, value: float) -> Mem:
        """A float32 constant (use ``bcst(...)`` to broadcast it to every lane)."""
        return self.const_data(np.float32(value).tobytes(), 4)

    def const_i32(self, value: int) -> Mem:
        """An int32 (or uint32 bit pattern) constant."""
        if not -(2**31) <= value < 2**32:
            raise CodegenError(f"{value} does not fit in 32 bits")
        return self.const_data((value & 0xFFFF_FFFF).to_bytes(4, "little"), 4)

    def const_array(self, values: np.ndarray, align: int = POOL_ALIGN) -> Mem:
        """A whole array (e.g. a 64-byte permutation table), aligned for full-vector loads."""
        return self.const_data(np.ascontiguousarray(values).tobytes(), align)

    # -- composing --------------------------------------------------------------------------------------------

    def extend(self, other: Assembler) -> None:
        """Append another assembler's instructions, labels and constants (e.g. an emitter's code)."""
        base = len(self._instructions)
        for label, pos in other._labels.items():
            if label in self._labels:
                raise CodegenError(f"label {label.name!r} is bound in both assemblers")
            self._labels[label] = base + pos
        for index, label in other._branches.items():
            self._branches[base + index] = label
        for index, label in other._rip_refs.items():
            self._rip_refs[base + index] = label
        for label, key in other._pool.items():
            self._pool[label] = key
            self._pool_by_value.setdefault(key, label)
        self._instructions.extend(other._instructions)  # shared: instructions are never changed in place

    def __len__(self) -> int:
        return len(self._instructions)

    # -- encoding ---------------------------------------------------------------------------------------------

    def _final(self) -> Assembler:
        """The complete program (a Function adds its prologue and epilogue here)."""
        return self

    def _program(self, ip: int = 0) -> tuple[list[Instruction], int, bytes | None]:
        """Instructions with labels resolved, then the constant pool as data; the code's byte size; and the machine
        code at ``ip`` when it was made on the way (no pool: the encoding that measured the code is the code)."""
        code = _resolve(self._instructions, self._branches, self._labels, self._rip_refs)
        if not self._pool:  # a branch's size depends on its distance, never on the ip
            encoded = _encode(code, ip)
            return code, len(encoded), encoded
        code_size = len(_encode(code, 0))  # RIP-relative operands are rel32 whatever their target
        data: list[Instruction] = []
        offset = code_size
        value_ip: dict[tuple[bytes, int], int] = {}
        for key in self._pool_by_value:  # first-use order: deterministic
            payload, align = key
            # the pool starts on a 64-byte boundary (the code is placed page-aligned)
            pad = (-offset) % (POOL_ALIGN if not data else align)
            data += _declare(b"\xcc" * pad)  # int3 filler, never executed
            offset += pad
            value_ip[key] = len(code) + len(data) + 1
            chunk = _declare(payload)
            chunk[0].ip = value_ip[key]
            data += chunk
            offset += len(payload)
        for index, label in self._rip_refs.items():
            code[index].memory_displacement = value_ip[self._pool[label]]
        return code + data, code_size, None

    def instructions(self) -> list[Instruction]:
        """Copies of the instructions with labels resolved to iced branch targets (ip = index + 1): the caller may
        change them (the assembler's own are shared templates)."""
        return [instr.copy() for instr in self._final()._program()[0]]

    def assemble(self, ip: int = 0) -> tuple[bytes, int]:
        """Machine code as if loaded at ``ip`` (it is position independent), and the size of its code part
        (the constant pool follows)."""
        instructions, code_size, encoded = self._final()._program(ip)
        return (_encode(instructions, ip) if encoded is None else encoded), code_size

    def encode(self, ip: int = 0) -> bytes:
        """Machine code (with the constant pool after the code)."""
        return self.assemble(ip)[0]

    def disassemble(self, ip: int = 0) -> str:
        """The encoded code decoded again by iced, in Intel syntax, then the constant pool as bytes."""
        code, code_size = self.assemble(ip)
        return disassemble(code, ip, code_size)


def _declare(payload: bytes) -> list[Instruction]:
    return [Instruction.create_declare_byte(payload[i : i + 16]) for i in range(0, len(payload), 16)]


def _resolve(instructions: Sequence[Instruction], branches: dict[int, Label], labels: dict[Label, int],
             rip_refs: Iterable[int] = ()) -> list:
    """The instruction list with label ips and branch targets set, on copies of the instructions that change
    (these and the constant reads, whose displacement the caller sets); the others are shared."""
    out = list(instructions)
    for index in {*labels.values(), *branches, *rip_refs}:
        if index < len(out):
            out[index] = out[index].copy()
    for label, pos in labels.items():
        if pos >= len(out):
            raise CodegenError(f"label {label.name!r} is bound after the last instruction")
        out[pos].ip = pos + 1
    for index, label in branches.items():
        if label not in labels:
            raise CodegenError(f"jump to label {label.name!r}, which is never bound")
        out[index].near_branch64 = labels[label] + 1
    return out


def _encode(instructions: Sequence[Instruction], ip: int) -> bytes:
    encoder = BlockEncoder(64)
    encoder.add_many(list(instructions))
    try:
        return encoder.encode(ip)
    except ValueError as exc:
        raise CodegenError(f"iced could not encode the block: {exc}") from exc


def _method(mnemonic: str) -> Callable[..., None]:
    def method(self: Assembler, *operands: Operand, rc: str | None = None, sae: bool = False) -> None:
        # emit's lookup, inlined: most instructions of a kernel repeat one emitted before (an FMA of a block, a
        # load at a displacement seen in another block), and this is the path they all take
        try:
            instr = _TEMPLATES.get((mnemonic, operands, rc, sae))
        except TypeError:
            instr = None
        if instr is not None:
            self._instructions.append(instr)
        else:
            self.emit(mnemonic, *operands, rc=rc, sae=sae)

    method.__name__ = mnemonic
    method.__doc__ = f"Emit ``{mnemonic}``."
    return method


# One method per mnemonic (Python keywords get a trailing underscore: a.and_, a.or_, a.not_).
for _name in (*MNEMONICS, *ALIASES):
    setattr(Assembler, _name + "_" if _name in ("and", "or", "not") else _name, _method(_name))

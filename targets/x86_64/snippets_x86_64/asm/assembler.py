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

from collections.abc import Callable, Sequence

from iced_x86 import BlockEncoder, Decoder, Formatter, FormatterSyntax, Instruction

from snippets_core.errors import CodegenError
from snippets_x86_64.asm.instructions import ALIASES, MNEMONICS, build
from snippets_x86_64.asm.operands import Label, Operand


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


def disassemble(code: bytes, ip: int = 0) -> str:
    """One line per instruction, ``<offset>: <intel syntax>``, decoded from machine code by iced."""
    fmt = make_formatter()
    lines = []
    for instr in Decoder(64, code, ip=ip):
        if instr.is_invalid:
            raise CodegenError(f"undecodable bytes at {instr.ip:#x}: {code[instr.ip - ip : instr.ip - ip + 15].hex()}")
        lines.append(f"{instr.ip:6x}: {fmt.format(instr)}")
    return "\n".join(lines)


class Assembler:
    """A straight list of x86-64 instructions and labels; each mnemonic is a method (``a.vaddps(...)``)."""

    def __init__(self) -> None:
        self._instructions: list[Instruction] = []
        # branch instruction index -> the label it jumps to
        self._branches: dict[int, Label] = {}
        # label -> index of the instruction it is bound to (== len(instructions) when bound at the end)
        self._labels: dict[Label, int] = {}

    # -- emitting ---------------------------------------------------------------------------------------------

    def emit(self, mnemonic: str, *operands: Operand, rc: str | None = None, sae: bool = False) -> None:
        """Append one instruction. ``rc`` ("rn", "rd", "ru", "rz") is EVEX embedded rounding, ``sae``
        suppresses floating-point exceptions; both need register operands and an EVEX form."""
        instr = build(mnemonic, tuple(operands), rc=rc, sae=sae)
        label = next((op for op in operands if isinstance(op, Label)), None)
        if label is not None:
            self._branches[len(self._instructions)] = label
        self._instructions.append(instr)

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

    def extend(self, other: Assembler) -> None:
        """Append another assembler's instructions and labels (e.g. an emitter's code into a kernel)."""
        base = len(self._instructions)
        for label, pos in other._labels.items():
            if label in self._labels:
                raise CodegenError(f"label {label.name!r} is bound in both assemblers")
            self._labels[label] = base + pos
        for index, label in other._branches.items():
            self._branches[base + index] = label
        self._instructions.extend(instr.copy() for instr in other._instructions)

    def __len__(self) -> int:
        return len(self._instructions)

    # -- encoding ---------------------------------------------------------------------------------------------

    def instructions(self) -> list[Instruction]:
        """Copies of the instructions with labels resolved to iced branch targets (ip = index + 1)."""
        return _resolve(self._instructions, self._branches, self._labels)

    def encode(self, ip: int = 0) -> bytes:
        """Machine code, as if loaded at address ``ip`` (the code is position independent)."""
        return _encode(self.instructions(), ip)

    def disassemble(self, ip: int = 0) -> str:
        """The encoded code decoded again by iced, in Intel syntax."""
        return disassemble(self.encode(ip), ip)


def _resolve(instructions: Sequence[Instruction], branches: dict[int, Label], labels: dict[Label, int]) -> list:
    out = [instr.copy() for instr in instructions]
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
        self.emit(mnemonic, *operands, rc=rc, sae=sae)

    method.__name__ = mnemonic
    method.__doc__ = f"Emit ``{mnemonic}``."
    return method


# One method per mnemonic (Python keywords get a trailing underscore: a.and_, a.or_, a.not_).
for _name in (*MNEMONICS, *ALIASES):
    setattr(Assembler, _name + "_" if _name in ("and", "or", "not") else _name, _method(_name))

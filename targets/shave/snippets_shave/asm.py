"""A small SHVX assembler: a Python DSL with labels, and a text front end, both over :mod:`snippets_shave.isa`.

Assembly written in Python reads like assembly::

    a = Assembler()
    a.LD32(r4, r0, 8)           # numDims of the first MemRef
    a.label("loop")
    a.VLD(v0, r5, 0, t="f32")
    a.VADD(v2, v0, v1, t="f32")
    a.BLT(r6, r7, "loop")
    a.RET()
    code = a.assemble()         # bytes of .text

Registers are objects (``r0``..``r31``, ``v0``..``v31``) so a scalar register cannot be passed where a vector
register is expected. Branch targets are labels (or signed word offsets) and are resolved by ``assemble``.
"""

from __future__ import annotations

from collections.abc import Callable

from snippets_shave.errors import AssemblyError
from snippets_shave.isa import (
    INSTRUCTIONS,
    REGISTER_KINDS,
    VECTOR_KINDS,
    Instruction,
    encode,
    parse_line,
    words_to_bytes,
)


class SReg(int):
    """A scalar register r0..r31."""

    def __repr__(self) -> str:
        return f"r{int(self)}"


class VReg(int):
    """A vector register v0..v31 (128 bits)."""

    def __repr__(self) -> str:
        return f"v{int(self)}"


SREGS: tuple[SReg, ...] = tuple(SReg(i) for i in range(32))
VREGS: tuple[VReg, ...] = tuple(VReg(i) for i in range(32))
(r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15,
 r16, r17, r18, r19, r20, r21, r22, r23, r24, r25, r26, r27, r28, r29, r30, r31) = SREGS  # fmt: skip
(v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15,
 v16, v17, v18, v19, v20, v21, v22, v23, v24, v25, v26, v27, v28, v29, v30, v31) = VREGS  # fmt: skip
SP = r30  # stack pointer at entry: top of this SHAVE's stack in WIN_F
LR = r31  # link register; 0 at entry, so RET from the entry function returns to the runtime


class Assembler:
    """Collects instructions and labels; ``assemble()`` resolves labels and returns the code bytes."""

    def __init__(self) -> None:
        self._items: list[tuple[str, str | None, list[int | str]]] = []
        self.labels: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._items)

    def label(self, name: str) -> None:
        """Bind ``name`` to the next instruction's word index."""
        if name in self.labels:
            raise AssemblyError(f"label {name!r} defined twice")
        self.labels[name] = len(self._items)

    def emit(self, mnemonic: str, *operands: int | str, t: str | None = None) -> None:
        """Append one instruction; registers must be ``SReg``/``VReg`` objects of the right kind."""
        d = INSTRUCTIONS.get(mnemonic)
        if d is None:
            raise AssemblyError(f"unknown mnemonic {mnemonic!r}")
        if len(operands) != len(d.operands):
            raise AssemblyError(f"{mnemonic}: expects operands ({', '.join(d.operands)}), got {len(operands)}")
        for kind, value in zip(d.operands, operands, strict=True):
            if kind in REGISTER_KINDS:
                want = VReg if kind in VECTOR_KINDS else SReg
                if not isinstance(value, want):
                    raise AssemblyError(f"{mnemonic}: operand {kind} must be a {want.__name__}, got {value!r}")
        self._items.append((mnemonic, t, list(operands)))
        # Encode now (with labels as 0) so operand errors point at the offending call, not at assemble().
        self._instruction(len(self._items) - 1, resolve=False)

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.isupper() and name in INSTRUCTIONS:
            return lambda *ops, t=None: self.emit(name, *ops, t=t)
        raise AttributeError(name)

    def text(self, source: str) -> None:
        """Assemble text lines: ``label:``, ``MNEMONIC[.type] operands``; ``#`` starts a comment."""
        for raw in source.splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            if line.endswith(":"):
                self.label(line[:-1].strip())
                continue
            mnemonic, etype, operands = parse_line(line)
            d = INSTRUCTIONS[mnemonic]
            typed = [
                (VReg(v) if k in VECTOR_KINDS else SReg(v)) if k in REGISTER_KINDS else v
                for k, v in zip(d.operands, operands, strict=True)
            ]
            self.emit(mnemonic, *typed, t=etype)

    def _instruction(self, index: int, resolve: bool = True) -> Instruction:
        mnemonic, etype, operands = self._items[index]
        d = INSTRUCTIONS[mnemonic]
        resolved: list[int | str] = []
        for kind, value in zip(d.operands, operands, strict=True):
            if kind == "target" and isinstance(value, str):
                if not resolve:
                    value = 0
                elif value not in self.labels:
                    raise AssemblyError(f"{mnemonic} at word {index}: unknown label {value!r}")
                else:
                    value = self.labels[value] - index
            elif kind in REGISTER_KINDS:
                value = int(value)
            resolved.append(value)
        instr = Instruction(mnemonic, etype, tuple(resolved))
        encode(instr)  # validates operands
        return instr

    def instructions(self) -> list[Instruction]:
        return [self._instruction(i) for i in range(len(self._items))]

    def words(self) -> list[int]:
        return [encode(ins) for ins in self.instructions()]

    def assemble(self) -> bytes:
        """The ``.text`` bytes (little-endian 64-bit words)."""
        return words_to_bytes(self.words())


def assemble_text(source: str) -> bytes:
    """Assemble a text listing into ``.text`` bytes."""
    a = Assembler()
    a.text(source)
    return a.assemble()

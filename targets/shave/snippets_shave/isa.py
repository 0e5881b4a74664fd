"""SHVX, the model SHAVE vector ISA: the one instruction table that the assembler and the decoder share.

Every instruction is one 64-bit little-endian word (docs/shvx_isa.md):

    [63:56] opcode  [55:52] element type  [51:47] rd  [46:42] ra  [41:37] rb  [36:32] rc  [31:0] imm32 (signed)

``INSTRUCTIONS`` maps each mnemonic to its opcode, its operand list (which field each operand lives in) and
the element types it accepts. :func:`encode` and :func:`decode` are driven only by that table, and the
decoder is strict: an unknown opcode, a type the instruction does not accept, or a non-zero field the
instruction does not use raises :class:`InstructionDecodeError`, so random words never decode silently.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from snippets_shave.errors import AssemblyError, InstructionDecodeError

WORD_BYTES = 8
VECTOR_BYTES = 16

# Element-type codes of the type field (§5.5 of the reference); the ISA implements f32, f16 and i32 lanes.
TYPE_CODES: dict[str, int] = {"i32": 0, "u32": 1, "i16": 2, "u16": 3, "i8": 4, "u8": 5, "f32": 6, "f16": 7, "bf16": 8}
CODE_TYPES: dict[int, str] = {v: k for k, v in TYPE_CODES.items()}
LANE_DTYPES: dict[str, np.dtype] = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "i32": np.dtype(np.int32)}
LANES: dict[str, int] = {name: VECTOR_BYTES // dt.itemsize for name, dt in LANE_DTYPES.items()}

VT = ("f32", "f16", "i32")  # vector ops on every lane type
FT = ("f32", "f16")  # floating-point only
NO_TYPE: tuple[str, ...] = ()  # scalar/control ops: type field must be 0

# Operand kinds: the field they occupy and how they print.
#   v* vector register, r* scalar register (rs = store source, kept in the rd field),
#   imm signed 32-bit, target PC-relative word offset, shamt 0..31, lane 0..lanes-1, half 0..1,
#   stype a source element type kept in the rc field, win a switchable window (1 = WIN_D, 2 = WIN_E).
_FIELD_OF_KIND: dict[str, str] = {
    "vd": "rd", "va": "ra", "vb": "rb", "vc": "rc", "vs": "rd",
    "rd": "rd", "ra": "ra", "rb": "rb", "rc": "rc", "rs": "rd",
    "imm": "imm", "target": "imm", "shamt": "imm", "lane": "imm", "half": "imm",
    "stype": "rc", "win": "imm",
}  # fmt: skip
REGISTER_KINDS = frozenset({"vd", "va", "vb", "vc", "vs", "rd", "ra", "rb", "rc", "rs"})
VECTOR_KINDS = frozenset({"vd", "va", "vb", "vc", "vs"})

# Windows the runtime kernel re-points per invocation (WINSET): WIN_C and WIN_F are set once, at boot.
SWITCHABLE_WINDOWS = (1, 2)

# Conversions VCVT accepts: (destination type, source type).
CVT_PAIRS = frozenset({("f16", "f32"), ("f32", "f16"), ("f32", "i32"), ("i32", "f32")})


@dataclass(frozen=True)
class InstrDef:
    """One row of the instruction table."""

    mnemonic: str
    opcode: int
    operands: tuple[str, ...]
    types: tuple[str, ...]
    unit: str  # CTRL, ALU, LSU, VLSU, VAU, SAU, MOVE, SYS: the SHAVE unit the opcode group models
    summary: str


def _defs() -> dict[str, InstrDef]:
    rows = [
        # control 0x00-0x0F
        ("NOP", 0x00, (), NO_TYPE, "CTRL", "no operation"),
        ("RET", 0x01, (), NO_TYPE, "CTRL", "pc = r31; returning to address 0 ends the kernel"),
        ("CALL", 0x02, ("target",), NO_TYPE, "CTRL", "r31 = address of next instruction; pc += target"),
        ("JMP", 0x03, ("target",), NO_TYPE, "CTRL", "pc += target"),
        ("BEQ", 0x04, ("ra", "rb", "target"), NO_TYPE, "CTRL", "if ra == rb: pc += target"),
        ("BNE", 0x05, ("ra", "rb", "target"), NO_TYPE, "CTRL", "if ra != rb: pc += target"),
        ("BLT", 0x06, ("ra", "rb", "target"), NO_TYPE, "CTRL", "if ra < rb (signed): pc += target"),
        ("BGE", 0x07, ("ra", "rb", "target"), NO_TYPE, "CTRL", "if ra >= rb (signed): pc += target"),
        ("BLTU", 0x08, ("ra", "rb", "target"), NO_TYPE, "CTRL", "if ra < rb (unsigned): pc += target"),
        ("BGEU", 0x09, ("ra", "rb", "target"), NO_TYPE, "CTRL", "if ra >= rb (unsigned): pc += target"),
        ("TRAP", 0x0A, ("imm",), NO_TYPE, "CTRL", "stop the kernel with a KernelTrap carrying imm"),
        # scalar ALU 0x10-0x1F (32-bit, wrapping)
        ("MOVI", 0x10, ("rd", "imm"), NO_TYPE, "ALU", "rd = imm"),
        ("ADD", 0x11, ("rd", "ra", "rb"), NO_TYPE, "ALU", "rd = ra + rb"),
        ("ADDI", 0x12, ("rd", "ra", "imm"), NO_TYPE, "ALU", "rd = ra + imm"),
        ("SUB", 0x13, ("rd", "ra", "rb"), NO_TYPE, "ALU", "rd = ra - rb"),
        ("MUL", 0x14, ("rd", "ra", "rb"), NO_TYPE, "ALU", "rd = low 32 bits of ra * rb"),
        ("DIVU", 0x15, ("rd", "ra", "rb"), NO_TYPE, "ALU", "rd = ra // rb (unsigned); rb == 0 gives 0xFFFFFFFF"),
        ("SHL", 0x16, ("rd", "ra", "rb"), NO_TYPE, "ALU", "rd = ra << (rb & 31)"),
        ("SHLI", 0x17, ("rd", "ra", "shamt"), NO_TYPE, "ALU", "rd = ra << shamt"),
        ("SHR", 0x18, ("rd", "ra", "rb"), NO_TYPE, "ALU", "rd = ra >> (rb & 31) (logical)"),
        ("SHRI", 0x19, ("rd", "ra", "shamt"), NO_TYPE, "ALU", "rd = ra >> shamt (logical)"),
        ("SAR", 0x1A, ("rd", "ra", "rb"), NO_TYPE, "ALU", "rd = ra >> (rb & 31) (arithmetic)"),
        ("AND", 0x1B, ("rd", "ra", "rb"), NO_TYPE, "ALU", "rd = ra & rb"),
        ("OR", 0x1C, ("rd", "ra", "rb"), NO_TYPE, "ALU", "rd = ra | rb"),
        ("XOR", 0x1D, ("rd", "ra", "rb"), NO_TYPE, "ALU", "rd = ra ^ rb"),
        ("MIN", 0x1E, ("rd", "ra", "rb"), NO_TYPE, "ALU", "rd = min(ra, rb) (signed)"),
        ("MAX", 0x1F, ("rd", "ra", "rb"), NO_TYPE, "ALU", "rd = max(ra, rb) (signed)"),
        # scalar LSU 0x20-0x2F: address = ra + imm
        ("LD8S", 0x20, ("rd", "ra", "imm"), NO_TYPE, "LSU", "rd = sign-extended byte"),
        ("LD8U", 0x21, ("rd", "ra", "imm"), NO_TYPE, "LSU", "rd = zero-extended byte"),
        ("LD16S", 0x22, ("rd", "ra", "imm"), NO_TYPE, "LSU", "rd = sign-extended halfword"),
        ("LD16U", 0x23, ("rd", "ra", "imm"), NO_TYPE, "LSU", "rd = zero-extended halfword"),
        ("LD32", 0x24, ("rd", "ra", "imm"), NO_TYPE, "LSU", "rd = word"),
        ("LD64", 0x25, ("rd", "ra", "imm"), NO_TYPE, "LSU", "rd = signed 64-bit value; traps unless it fits int32"),
        ("ST8", 0x28, ("rs", "ra", "imm"), NO_TYPE, "LSU", "byte at ra + imm = low 8 bits of rs"),
        ("ST16", 0x29, ("rs", "ra", "imm"), NO_TYPE, "LSU", "halfword at ra + imm = low 16 bits of rs"),
        ("ST32", 0x2A, ("rs", "ra", "imm"), NO_TYPE, "LSU", "word at ra + imm = rs"),
        # vector LSU 0x30-0x3F: 16 bytes at ra + imm; N forms move only the first rc lanes
        ("VLD", 0x30, ("vd", "ra", "imm"), VT, "VLSU", "vd = 16 bytes at ra + imm"),
        ("VST", 0x31, ("vs", "ra", "imm"), VT, "VLSU", "16 bytes at ra + imm = vs"),
        ("VLDN", 0x32, ("vd", "ra", "imm", "rc"), VT, "VLSU", "lanes [0, rc) of vd loaded; the others unchanged"),
        ("VSTN", 0x33, ("vs", "ra", "imm", "rc"), VT, "VLSU", "lanes [0, rc) of vs stored; nothing else written"),
        # VAU / CMU 0x40-0x4F: lane-wise
        ("VADD", 0x40, ("vd", "va", "vb"), VT, "VAU", "vd = va + vb"),
        ("VSUB", 0x41, ("vd", "va", "vb"), VT, "VAU", "vd = va - vb"),
        ("VMUL", 0x42, ("vd", "va", "vb"), VT, "VAU", "vd = va * vb"),
        ("VDIV", 0x43, ("vd", "va", "vb"), FT, "VAU", "vd = va / vb"),
        ("VFMA", 0x44, ("vd", "va", "vb", "vc"), FT, "VAU", "vd = va * vb + vc, rounded once"),
        ("VMAX", 0x45, ("vd", "va", "vb"), VT, "CMU", "vd = numpy.maximum(va, vb)"),
        ("VMIN", 0x46, ("vd", "va", "vb"), VT, "CMU", "vd = numpy.minimum(va, vb)"),
        ("VCLAMP", 0x47, ("vd", "va", "vb", "vc"), VT, "CMU", "vd = minimum(maximum(va, vb), vc)"),
        ("VNEG", 0x48, ("vd", "va"), VT, "VAU", "vd = -va"),
        ("VABS", 0x49, ("vd", "va"), VT, "VAU", "vd = |va|"),
        ("VSEL", 0x4A, ("vd", "va", "vb", "vc"), VT, "CMU", "vd = va where lane of vc != 0 else vb"),
        ("VCMPGT", 0x4B, ("vd", "va", "vb"), VT, "CMU", "vd lane = all ones if va > vb else 0"),
        ("VCMPGE", 0x4C, ("vd", "va", "vb"), VT, "CMU", "vd lane = all ones if va >= vb else 0"),
        ("VCMPEQ", 0x4D, ("vd", "va", "vb"), VT, "CMU", "vd lane = all ones if va == vb else 0"),
        ("VAND", 0x4E, ("vd", "va", "vb"), VT, "CMU", "vd = va & vb (bitwise)"),
        ("VOR", 0x4F, ("vd", "va", "vb"), VT, "CMU", "vd = va | vb (bitwise)"),
        # SAU 0x50-0x5F: computed in float64, rounded once to the lane type
        ("VEXP2", 0x50, ("vd", "va"), FT, "SAU", "vd = 2 ** va"),
        ("VLOG2", 0x51, ("vd", "va"), FT, "SAU", "vd = log2(va)"),
        ("VRCP", 0x52, ("vd", "va"), FT, "SAU", "vd = 1 / va"),
        ("VRSQRT", 0x53, ("vd", "va"), FT, "SAU", "vd = 1 / sqrt(va)"),
        ("VSQRT", 0x54, ("vd", "va"), FT, "SAU", "vd = sqrt(va)"),
        ("VSUMX", 0x55, ("vd", "va"), VT, "SAU", "vd lane 0 = sum of va lanes; other lanes 0"),
        ("VMAXX", 0x56, ("vd", "va"), VT, "SAU", "vd lane 0 = max of va lanes; other lanes 0"),
        ("VMINX", 0x57, ("vd", "va"), VT, "SAU", "vd lane 0 = min of va lanes; other lanes 0"),
        # moves and conversions 0x60-0x6F
        ("VBCAST", 0x60, ("vd", "ra"), VT, "MOVE", "every lane of vd = low lane-width bits of ra"),
        ("VCVT", 0x61, ("vd", "va", "stype", "half"), ("f32", "f16", "i32"), "MOVE", "vd = convert(va); see docs"),
        ("VMOV", 0x62, ("vd", "va"), VT, "MOVE", "vd = va"),
        ("VEXTRACT", 0x63, ("rd", "va", "lane"), VT, "MOVE", "rd = bits of lane (zero-extended)"),
        ("VINSERT", 0x64, ("vd", "ra", "lane"), VT, "MOVE", "lane of vd = low lane-width bits of ra"),
        ("VMASKN", 0x65, ("vd", "ra"), VT, "MOVE", "vd lane i = all ones if i < ra (unsigned) else 0"),
        # runtime-kernel system ops 0x70-0x7F (the FIFO, barrier and window hardware; docs/shvx_isa.md):
        # a compute kernel that executes one traps. The waits stall the SHAVE until their condition holds.
        ("HALT", 0x70, (), NO_TYPE, "SYS", "stop this SHAVE's runtime kernel: no more work"),
        ("FIFOPOP", 0x71, ("rd",), NO_TYPE, "SYS", "rd = address of the tile's next invocation record, 0 if none"),
        ("BWAIT", 0x72, ("ra",), NO_TYPE, "SYS", "stall until barrier ra is current and its producer count is 0"),
        ("BCUR", 0x73, ("ra",), NO_TYPE, "SYS", "stall until barrier ra is the current instance of its physical id"),
        ("BCONS", 0x74, ("ra",), NO_TYPE, "SYS", "consumer count of barrier ra -= 1"),
        ("BPROD", 0x75, ("ra",), NO_TYPE, "SYS", "producer count of barrier ra -= 1"),
        ("WINSET", 0x76, ("win", "ra"), NO_TYPE, "SYS", "map window win (1 WIN_D, 2 WIN_E) to image handle ra"),
        ("LAUNCH", 0x77, ("ra",), NO_TYPE, "SYS", "call the kernel at WIN_D address ra (r0, r1, SP); resume after it"),
    ]
    table: dict[str, InstrDef] = {}
    for mnemonic, opcode, operands, types, unit, summary in rows:
        table[mnemonic] = InstrDef(mnemonic, opcode, operands, types, unit, summary)
    return table


INSTRUCTIONS: dict[str, InstrDef] = _defs()
BY_OPCODE: dict[int, InstrDef] = {d.opcode: d for d in INSTRUCTIONS.values()}
assert len(BY_OPCODE) == len(INSTRUCTIONS), "duplicate opcode in the SHVX table"


@dataclass(frozen=True)
class Instruction:
    """A decoded (or to-be-encoded) instruction: mnemonic, lane type (None for scalar ops) and operands.

    ``operands`` follow the order of the table row: register numbers, signed immediates, or for ``stype``
    the source type name.
    """

    mnemonic: str
    etype: str | None
    operands: tuple[int | str, ...]

    @property
    def definition(self) -> InstrDef:
        return INSTRUCTIONS[self.mnemonic]

    def __str__(self) -> str:
        return disassemble_one(self)


def _signed32(value: int) -> int:
    return value - (1 << 32) if value & 0x80000000 else value


def _check_operand(d: InstrDef, kind: str, value: int | str, etype: str | None, err: type[Exception]) -> int:
    """Validate one operand of ``d`` and return its raw field value."""
    if kind == "stype":
        if not isinstance(value, str) or value not in TYPE_CODES:
            raise err(f"{d.mnemonic}: source type {value!r} is not an element type")
        if (etype, value) not in CVT_PAIRS:
            raise err(f"{d.mnemonic}: conversion {value} -> {etype} is not supported")
        return TYPE_CODES[value]
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise err(f"{d.mnemonic}: operand {kind} must be an integer, got {value!r}")
    value = int(value)
    if kind in REGISTER_KINDS:
        if not 0 <= value < 32:
            raise err(f"{d.mnemonic}: register {kind}={value} out of range 0..31")
        return value
    if kind == "shamt":
        if not 0 <= value < 32:
            raise err(f"{d.mnemonic}: shift amount {value} out of range 0..31")
        return value
    if kind == "lane":
        assert etype is not None
        if not 0 <= value < LANES[etype]:
            raise err(f"{d.mnemonic}.{etype}: lane {value} out of range 0..{LANES[etype] - 1}")
        return value
    if kind == "half":
        if not 0 <= value < 2:
            raise err(f"{d.mnemonic}: half {value} must be 0 or 1")
        return value
    if kind == "win":
        if value not in SWITCHABLE_WINDOWS:
            raise err(f"{d.mnemonic}: window {value} is not switchable (1 = WIN_D, 2 = WIN_E)")
        return value
    # imm / target: signed 32-bit; MOVI also takes an unsigned 32-bit bit pattern (e.g. float bits)
    low = -(1 << 31)
    high = (1 << 32) if d.mnemonic == "MOVI" else (1 << 31)
    if not low <= value < high:
        raise err(f"{d.mnemonic}: immediate {value} does not fit 32 bits")
    return value & 0xFFFFFFFF


def _check_type(d: InstrDef, etype: str | None, err: type[Exception]) -> None:
    if d.types:
        if etype not in d.types:
            raise err(f"{d.mnemonic}: element type {etype!r} not accepted (one of {', '.join(d.types)})")
    elif etype is not None:
        raise err(f"{d.mnemonic}: takes no element type, got {etype!r}")


def _check_half(d: InstrDef, etype: str | None, fields: dict[str, int], err: type[Exception]) -> None:
    """VCVT's half selector is only meaningful between f16 and f32 (8 lanes vs 4)."""
    if d.mnemonic != "VCVT":
        return
    src = CODE_TYPES.get(fields["rc"])
    if fields["imm"] and "f16" not in (etype, src):
        raise err(f"VCVT {src} -> {etype}: half must be 0")


def encode(instr: Instruction) -> int:
    """Encode one instruction into its 64-bit word; raises :class:`AssemblyError` on bad operands."""
    d = INSTRUCTIONS.get(instr.mnemonic)
    if d is None:
        raise AssemblyError(f"unknown mnemonic {instr.mnemonic!r}")
    _check_type(d, instr.etype, AssemblyError)
    if len(instr.operands) != len(d.operands):
        raise AssemblyError(
            f"{d.mnemonic}: expects {len(d.operands)} operands ({', '.join(d.operands)}), got {len(instr.operands)}"
        )
    fields = {"rd": 0, "ra": 0, "rb": 0, "rc": 0, "imm": 0}
    for kind, value in zip(d.operands, instr.operands, strict=True):
        fields[_FIELD_OF_KIND[kind]] = _check_operand(d, kind, value, instr.etype, AssemblyError)
    _check_half(d, instr.etype, fields, AssemblyError)
    type_code = TYPE_CODES[instr.etype] if instr.etype is not None else 0
    return (
        (d.opcode << 56)
        | (type_code << 52)
        | (fields["rd"] << 47)
        | (fields["ra"] << 42)
        | (fields["rb"] << 37)
        | (fields["rc"] << 32)
        | fields["imm"]
    )


def decode(word: int, pc: int | None = None) -> Instruction:
    """Decode one 64-bit word; raises :class:`InstructionDecodeError` naming the word and its position."""
    where = f" at word {pc}" if pc is not None else ""
    opcode = (word >> 56) & 0xFF
    d = BY_OPCODE.get(opcode)
    if d is None:
        raise InstructionDecodeError(f"word {word:#018x}{where}: unknown opcode {opcode:#04x}")
    fields = {
        "rd": (word >> 47) & 31,
        "ra": (word >> 42) & 31,
        "rb": (word >> 37) & 31,
        "rc": (word >> 32) & 31,
        "imm": word & 0xFFFFFFFF,
    }
    type_code = (word >> 52) & 0xF
    if d.types:
        etype = CODE_TYPES.get(type_code)
        if etype not in d.types:
            raise InstructionDecodeError(
                f"word {word:#018x}{where}: {d.mnemonic} does not accept type code {type_code}"
            )
    else:
        etype = None
        if type_code:
            raise InstructionDecodeError(f"word {word:#018x}{where}: {d.mnemonic} has a non-zero type field")
    used = {_FIELD_OF_KIND[k] for k in d.operands}
    for name in ("rd", "ra", "rb", "rc", "imm"):
        if name not in used and fields[name]:
            raise InstructionDecodeError(f"word {word:#018x}{where}: {d.mnemonic} has a non-zero unused {name} field")
    operands: list[int | str] = []
    for kind in d.operands:
        raw = fields[_FIELD_OF_KIND[kind]]
        if kind == "stype":
            src = CODE_TYPES.get(raw)
            if src is None or (etype, src) not in CVT_PAIRS:
                raise InstructionDecodeError(f"word {word:#018x}{where}: VCVT source type code {raw} -> {etype}")
            operands.append(src)
            continue
        value = _signed32(raw) if kind in ("imm", "target") else raw
        if kind in ("shamt", "lane", "half", "win"):
            try:
                _check_operand(d, kind, value, etype, InstructionDecodeError)
            except InstructionDecodeError as exc:
                raise InstructionDecodeError(f"word {word:#018x}{where}: {exc}") from None
        operands.append(value)
    try:
        _check_half(d, etype, fields, InstructionDecodeError)
    except InstructionDecodeError as exc:
        raise InstructionDecodeError(f"word {word:#018x}{where}: {exc}") from None
    return Instruction(d.mnemonic, etype, tuple(operands))


def words_to_bytes(words: list[int]) -> bytes:
    """Little-endian bytes of a list of instruction words."""
    return np.asarray(words, dtype="<u8").tobytes()


def bytes_to_words(code: bytes) -> list[int]:
    """Instruction words of a code image; its length must be a multiple of 8."""
    if len(code) % WORD_BYTES:
        raise InstructionDecodeError(f"code size {len(code)} is not a multiple of {WORD_BYTES}")
    return [int(w) for w in np.frombuffer(code, dtype="<u8")]


def decode_program(code: bytes) -> list[Instruction]:
    """Decode a whole ``.text`` image, checking every branch target lands inside it."""
    instrs = [decode(w, i) for i, w in enumerate(bytes_to_words(code))]
    for i, ins in enumerate(instrs):
        d = ins.definition
        if "target" in d.operands:
            target = i + int(ins.operands[d.operands.index("target")])
            if not 0 <= target < len(instrs):
                raise InstructionDecodeError(f"{ins.mnemonic} at word {i}: branch target {target} outside the code")
    return instrs


# ---------------------------------------------------------------------------------------------------------
# Text form: "VADD.f32 v2, v0, v1", "LD32 r3, r0, 8", "VCVT.f16 v1, v0, f32, 0". Branch targets print as
# signed word offsets; the assembler also accepts labels there.


def _format_operand(kind: str, value: int | str) -> str:
    if kind in VECTOR_KINDS:
        return f"v{value}"
    if kind in REGISTER_KINDS:
        return f"r{value}"
    return str(value)


def disassemble_one(instr: Instruction) -> str:
    d = INSTRUCTIONS[instr.mnemonic]
    head = d.mnemonic + (f".{instr.etype}" if instr.etype else "")
    ops = ", ".join(_format_operand(k, v) for k, v in zip(d.operands, instr.operands, strict=True))
    return f"{head} {ops}" if ops else head


def disassemble(code: bytes) -> str:
    """One line per instruction: word index, then the text form."""
    return "\n".join(f"{i:5d}: {ins}" for i, ins in enumerate(decode(w, i) for i, w in enumerate(bytes_to_words(code))))


def parse_operand(kind: str, text: str, mnemonic: str) -> int | str:
    """Parse one textual operand; labels are left to the assembler (returned as the raw string)."""
    text = text.strip()
    if kind == "stype":
        return text
    if kind in REGISTER_KINDS:
        prefix = "v" if kind in VECTOR_KINDS else "r"
        if not (text.startswith(prefix) and text[1:].isdigit()):
            raise AssemblyError(f"{mnemonic}: operand {kind} must be a {prefix}-register, got {text!r}")
        return int(text[1:])
    try:
        return int(text, 0)
    except ValueError:
        if kind == "target":
            return text  # a label
        raise AssemblyError(f"{mnemonic}: operand {kind} must be an integer, got {text!r}") from None


def parse_line(line: str) -> tuple[str, str | None, list[int | str]]:
    """Split ``MNEMONIC[.type] op, op`` into its parts (operands parsed by kind)."""
    head, _, rest = line.strip().partition(" ")
    mnemonic, _, etype = head.partition(".")
    mnemonic = mnemonic.upper()
    d = INSTRUCTIONS.get(mnemonic)
    if d is None:
        raise AssemblyError(f"unknown mnemonic {mnemonic!r} in {line!r}")
    parts = [p for p in rest.split(",")] if rest.strip() else []
    if len(parts) != len(d.operands):
        raise AssemblyError(f"{mnemonic}: expects operands ({', '.join(d.operands)}), got {line!r}")
    return mnemonic, (etype or None), [parse_operand(k, p, mnemonic) for k, p in zip(d.operands, parts, strict=True)]


def pack_f32(value: float) -> int:
    """The bits of an f32 constant, for ``MOVI`` + ``VBCAST.f32``."""
    return struct.unpack("<I", struct.pack("<f", value))[0]


def pack_f16(value: float) -> int:
    """The bits of an f16 constant, for ``MOVI`` + ``VBCAST.f16``."""
    return int(np.array(value, dtype=np.float16).view(np.uint16))

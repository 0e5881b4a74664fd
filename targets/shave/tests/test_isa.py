"""SHVX encoding: every instruction round-trips, and random words decode or raise a typed error."""

from __future__ import annotations

import random

import numpy as np
import pytest

from snippets_shave.asm import Assembler, assemble_text, r0, r1, r2, v0, v1, v2
from snippets_shave.errors import AssemblyError, InstructionDecodeError
from snippets_shave.isa import (
    CVT_PAIRS,
    INSTRUCTIONS,
    LANES,
    REGISTER_KINDS,
    Instruction,
    decode,
    decode_program,
    disassemble,
    encode,
)


def _samples(mnemonic: str, rng: random.Random) -> list[Instruction]:
    """Several valid instructions of one mnemonic, with extreme and random operand values."""
    d = INSTRUCTIONS[mnemonic]
    types = d.types or (None,)
    out = []
    for etype in types:
        for pick in ("low", "high", "rand", "rand"):
            ops: list[int | str] = []
            for kind in d.operands:
                if kind in REGISTER_KINDS:
                    ops.append({"low": 0, "high": 31}.get(pick, rng.randrange(32)))
                elif kind in ("imm", "target"):
                    ops.append({"low": -(1 << 31), "high": (1 << 31) - 1}.get(pick, rng.randrange(-5000, 5000)))
                elif kind == "shamt":
                    ops.append({"low": 0, "high": 31}.get(pick, rng.randrange(32)))
                elif kind == "lane":
                    ops.append({"low": 0, "high": LANES[etype] - 1}.get(pick, rng.randrange(LANES[etype])))
                elif kind == "stype":
                    srcs = sorted(s for dst, s in CVT_PAIRS if dst == etype)
                    ops.append(srcs[0] if pick == "low" else srcs[-1])
                elif kind == "win":
                    ops.append({"low": 1, "high": 2}.get(pick, rng.choice((1, 2))))
                elif kind == "half":
                    ops.append(1 if pick == "high" and "f16" in (etype, ops[-1]) else 0)
            out.append(Instruction(mnemonic, etype, tuple(ops)))
    return out


@pytest.mark.parametrize("mnemonic", sorted(INSTRUCTIONS))
def test_every_instruction_round_trips(mnemonic: str) -> None:
    rng = random.Random(mnemonic)
    d = INSTRUCTIONS[mnemonic]
    for ins in _samples(mnemonic, rng):
        word = encode(ins)
        assert word >> 56 == d.opcode
        back = decode(word)
        assert back == ins
        # text form: disassemble, re-assemble, same word
        assert assemble_text(str(back)) == int(word).to_bytes(8, "little")


def test_field_layout_matches_the_documented_bits() -> None:
    word = encode(Instruction("VFMA", "f16", (3, 5, 7, 9)))
    assert word == (0x44 << 56) | (7 << 52) | (3 << 47) | (5 << 42) | (7 << 37) | (9 << 32)
    word = encode(Instruction("ADDI", None, (1, 2, -8)))
    assert word == (0x12 << 56) | (1 << 47) | (2 << 42) | 0xFFFFFFF8


def test_random_words_decode_or_raise_typed_errors() -> None:
    rng = random.Random(1234)
    decoded = 0
    for _ in range(20000):
        # bias the opcode towards valid ones so the field checks are exercised, not only the opcode check
        word = rng.getrandbits(64)
        if rng.random() < 0.7:
            opcode = rng.choice([d.opcode for d in INSTRUCTIONS.values()])
            word = (word & ((1 << 56) - 1)) | (opcode << 56)
            if rng.random() < 0.5:  # keep only some fields random, so unused-field checks pass sometimes
                word &= ~((1 << 52) - 1)
                word |= rng.getrandbits(52) & rng.choice([0, (1 << 32) - 1, ((1 << 20) - 1) << 32, (1 << 52) - 1])
        try:
            ins = decode(word)
        except InstructionDecodeError:
            continue
        decoded += 1
        assert encode(ins) == word  # whatever decodes re-encodes to the same word
    assert decoded > 100


def test_assembler_labels_and_operand_checks() -> None:
    a = Assembler()
    a.MOVI(r0, 0)
    a.label("loop")
    a.ADDI(r0, r0, 1)
    a.BLT(r0, r1, "loop")
    a.VADD(v2, v0, v1, t="f32")
    a.RET()
    words = a.words()
    assert decode(words[2]).operands == (0, 1, -1)
    assert "VADD.f32 v2, v0, v1" in disassemble(a.assemble())
    with pytest.raises(AssemblyError, match="must be a VReg"):
        a.VADD(r2, v0, v1, t="f32")
    with pytest.raises(AssemblyError, match="not accepted"):
        a.VEXP2(v0, v1, t="i32")
    with pytest.raises(AssemblyError, match="lane 4 out of range"):
        a.VEXTRACT(r1, v0, 4, t="f32")
    b = Assembler()
    b.JMP("nowhere")
    with pytest.raises(AssemblyError, match="unknown label"):
        b.assemble()


def test_decode_program_rejects_branches_outside_the_code() -> None:
    code = assemble_text("JMP 5\nRET")
    with pytest.raises(InstructionDecodeError, match="branch target 5"):
        decode_program(code)
    with pytest.raises(InstructionDecodeError, match="multiple of 8"):
        decode_program(code[:-3])
    assert len(decode_program(assemble_text("JMP 1\nRET"))) == 2


def test_words_are_little_endian_64_bit() -> None:
    code = assemble_text("MOVI r1, 0x3f800000")
    assert np.frombuffer(code, "<u8")[0] == (0x10 << 56) | (1 << 47) | 0x3F800000

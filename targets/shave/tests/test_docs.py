"""docs/shvx_isa.md documents exactly the instruction table the assembler and decoder use."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from snippets_shave.isa import INSTRUCTIONS

DOC = Path(__file__).resolve().parents[3] / "docs" / "shvx_isa.md"


def test_isa_doc_table_matches_the_instruction_table() -> None:
    if not DOC.exists():
        pytest.skip(f"{DOC} is not present (installed without the source tree)")
    rows = re.findall(
        r"^\| `([A-Z0-9]+)` \| 0x([0-9A-F]{2}) \| (\w+) \| ([^|]+) \| ([^|]+) \|", DOC.read_text(), re.MULTILINE
    )
    documented = {m: (int(op, 16), unit, ops.strip(), types.strip()) for m, op, unit, ops, types in rows}
    actual = {
        d.mnemonic: (d.opcode, d.unit, ", ".join(d.operands) or "—", ", ".join(d.types) or "—")
        for d in INSTRUCTIONS.values()
    }
    assert documented == actual

"""Kernel ELF writer, read back with pyelftools (the outside oracle) and with our own loader."""

from __future__ import annotations

import io
import struct

import pytest
from elftools.elf.elffile import ELFFile

from snippets_shave.asm import Assembler, r0, r1
from snippets_shave.constants import ISA_VERSION, KERNEL_ABI_VERSION, WIN_D, WIN_E
from snippets_shave.elf import NT_ASHV_KERNEL, read_kernel_elf, write_kernel_elf
from snippets_shave.errors import ElfFormatError


def _kernel() -> tuple[bytes, dict[str, int]]:
    a = Assembler()
    a.NOP()
    a.label("entry")
    a.MOVI(r1, 3)
    a.label("loop")
    a.ADDI(r1, r1, -1)
    a.BNE(r1, r0, "loop")
    a.RET()
    return a.assemble(), dict(a.labels)


def _elf() -> bytes:
    text, labels = _kernel()
    return write_kernel_elf(
        "clamp_f32",
        text,
        rodata=b"\x01\x02\x03",
        data=bytes(range(20)),
        entry_offset=8 * labels["entry"],
        params_signature="mm:ff",
        params_size=88,
        labels=labels,
    )


def test_pyelftools_reads_sections_symbols_and_note() -> None:
    text, labels = _kernel()
    elf = ELFFile(io.BytesIO(_elf()))
    assert elf.elfclass == 32 and elf.little_endian
    assert elf.header["e_type"] == "ET_EXEC" and elf.header["e_machine"] == "EM_NONE"
    assert elf.header["e_flags"] == ISA_VERSION
    assert elf.header["e_entry"] == WIN_D + 8
    sec = {s.name: s for s in elf.iter_sections()}
    assert sec[".text"]["sh_addr"] == WIN_D and sec[".text"].data() == text
    assert sec[".text"]["sh_flags"] == 0x6  # SHF_ALLOC | SHF_EXECINSTR
    assert sec[".rodata"]["sh_addr"] == WIN_D + 48 and sec[".rodata"].data() == b"\x01\x02\x03"
    assert sec[".data"]["sh_addr"] == WIN_E and sec[".data"]["sh_flags"] == 0x3
    assert sec[".data"].data() == bytes(range(20))
    symtab = sec[".symtab"]
    entry = symtab.get_symbol_by_name("clamp_f32")[0]
    assert entry["st_value"] == WIN_D + 8 and entry["st_info"]["type"] == "STT_FUNC"
    assert entry["st_info"]["bind"] == "STB_GLOBAL" and entry["st_size"] == len(text)
    loop = symtab.get_symbol_by_name("loop")[0]
    assert loop["st_value"] == WIN_D + 8 * labels["loop"] and loop["st_info"]["bind"] == "STB_LOCAL"
    notes = list(sec[".note.ashv"].iter_notes())
    assert len(notes) == 1 and notes[0]["n_name"] == "ASHV" and notes[0]["n_type"] == NT_ASHV_KERNEL
    desc = notes[0]["n_desc"]
    desc = desc if isinstance(desc, bytes) else desc.encode("latin-1")
    isa, abi, size, sig_len = struct.unpack_from("<IIII", desc)
    assert (isa, abi, size, desc[16 : 16 + sig_len]) == (ISA_VERSION, KERNEL_ABI_VERSION, 88, b"mm:ff")
    segments = [s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
    assert [s["p_vaddr"] for s in segments] == [WIN_D, WIN_E]
    assert segments[0].data()[: len(text)] == text and segments[0].data()[48:] == b"\x01\x02\x03"


def test_own_loader_agrees_with_pyelftools() -> None:
    text, labels = _kernel()
    k = read_kernel_elf(_elf())
    assert k.name == "clamp_f32" and k.text == text and k.entry_offset == 8
    assert k.rodata == b"\x01\x02\x03" and k.rodata_addr == WIN_D + 48
    assert k.text_image == text + bytes(48 - len(text)) + b"\x01\x02\x03"
    assert k.data == bytes(range(20))
    assert k.note.params_signature == "mm:ff" and k.note.params_size == 88
    assert k.symbols["loop"] == WIN_D + 8 * labels["loop"]


def test_loader_rejects_damaged_files() -> None:
    good = _elf()
    with pytest.raises(ElfFormatError, match="shorter than an ELF header"):
        read_kernel_elf(good[:20])
    with pytest.raises(ElfFormatError, match="past the end"):
        read_kernel_elf(good[:-50])
    bad_flags = bytearray(good)
    bad_flags[36] = 99  # e_flags
    with pytest.raises(ElfFormatError, match="ISA version"):
        read_kernel_elf(bytes(bad_flags))
    bad_magic = b"\x7fELG" + good[4:]
    with pytest.raises(ElfFormatError, match="not a little-endian ELF32"):
        read_kernel_elf(bad_magic)


def test_writer_rejects_bad_code() -> None:
    with pytest.raises(ElfFormatError, match="multiple of 8"):
        write_kernel_elf("k", b"\0" * 12)
    with pytest.raises(ElfFormatError, match="entry offset"):
        write_kernel_elf("k", b"\0" * 16, entry_offset=16)

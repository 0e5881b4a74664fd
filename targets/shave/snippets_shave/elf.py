"""Kernel ELF objects: a small ELF32 writer and the bounded loader the simulator uses.

One ELF per kernel (shave_blob.md §5.3), little-endian ``ELFCLASS32``, ``ET_EXEC``, ``e_machine = EM_NONE``
(as Intel's blobs; there is no registered machine number for SHAVE) and ``e_flags`` = the SHVX ISA version:

* ``.text``   ``SHF_ALLOC|SHF_EXECINSTR`` at WIN_D (0x1D000000), 16-byte aligned (the runtime kernel's at WIN_C,
  0x1C000000, as the real runtime link script places it);
* ``.rodata`` ``SHF_ALLOC`` right after ``.text`` (16-byte aligned) inside WIN_D: the constants pool;
* ``.data``   ``SHF_ALLOC|SHF_WRITE`` at WIN_E (0x1E000000): copied into each invocation's WIN_E image;
* ``.note.ashv`` (``SHT_NOTE``, owner ``ASHV``, type ``NT_ASHV_KERNEL``): ISA version, kernel ABI version,
  params size and params signature;
* ``.symtab``/``.strtab``: local labels (``STT_NOTYPE``), then the entry point (``STT_FUNC``, ``STB_GLOBAL``);
  ``e_entry`` equals the entry symbol's value.

Program headers (two ``PT_LOAD`` and one ``PT_NOTE``) make the file loadable by a generic loader too. There
are no relocations: every address is a window address fixed at link time.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from snippets_shave.constants import ISA_VERSION, KERNEL_ABI_VERSION, WIN_D, WIN_E, WINDOW_SIZE
from snippets_shave.errors import ElfFormatError

EM_NONE = 0
ET_EXEC = 2
NT_ASHV_KERNEL = 0xA5E0
NOTE_OWNER = b"ASHV"

SHT_NULL, SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_NOTE = 0, 1, 2, 3, 7
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 1, 2, 4
PT_LOAD, PT_NOTE = 1, 4
PF_X, PF_W, PF_R = 1, 2, 4
STB_LOCAL, STB_GLOBAL = 0, 1
STT_NOTYPE, STT_FUNC = 0, 2

_EHDR = struct.Struct("<16sHHIIIIIHHHHHH")  # 52 bytes
_PHDR = struct.Struct("<IIIIIIII")  # 32 bytes
_SHDR = struct.Struct("<IIIIIIIIII")  # 40 bytes
_SYM = struct.Struct("<IIIBBH")  # 16 bytes
_NOTE_HDR = struct.Struct("<III")
_NOTE_DESC = struct.Struct("<IIII")  # isa_version, abi_version, params_size, signature length
MAX_SECTIONS = 64


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


@dataclass(frozen=True)
class KernelNote:
    """Contents of ``.note.ashv``: what the loader checks against the blob and the invocation args."""

    isa_version: int
    abi_version: int
    params_size: int
    params_signature: str


@dataclass(frozen=True)
class KernelElf:
    """A loaded kernel ELF: code, constants and RW data as the windows see them."""

    name: str  # the entry symbol
    text: bytes
    rodata: bytes
    rodata_addr: int
    data: bytes
    entry: int  # window address of the entry point
    note: KernelNote
    symbols: dict[str, int] = field(default_factory=dict)
    text_file_offset: int = 0  # where .text sits in the ELF file (for ActKernel.text, a sub-view of the ELF)
    base: int = WIN_D  # the window .text is linked at (WIN_C for the runtime kernel)

    @property
    def entry_offset(self) -> int:
        """Entry point as an offset from the start of ``.text`` (``ActKernel.entry``)."""
        return self.entry - self.base

    @property
    def text_image(self) -> bytes:
        """The code window's contents: ``.text``, zero padding, ``.rodata``."""
        if not self.rodata:
            return self.text
        return self.text + bytes(self.rodata_addr - self.base - len(self.text)) + self.rodata


def _note_bytes(note: KernelNote) -> bytes:
    sig = note.params_signature.encode("utf-8")
    desc = _NOTE_DESC.pack(note.isa_version, note.abi_version, note.params_size, len(sig)) + sig
    name = NOTE_OWNER + b"\0"
    out = _NOTE_HDR.pack(len(name), len(desc), NT_ASHV_KERNEL)
    out += name + bytes(_align(len(name), 4) - len(name))
    out += desc + bytes(_align(len(desc), 4) - len(desc))
    return out


def write_kernel_elf(
    name: str,
    text: bytes,
    *,
    rodata: bytes = b"",
    data: bytes = b"",
    entry_offset: int = 0,
    params_signature: str = "",
    params_size: int = 0,
    labels: dict[str, int] | None = None,
    base: int = WIN_D,
) -> bytes:
    """Write a kernel ELF. ``labels`` maps local label names to word indices in ``.text`` (for disassembly);
    ``base`` is the window ``.text`` is linked at (WIN_D, or WIN_C for the runtime kernel)."""
    if not text or len(text) % 8:
        raise ElfFormatError(f"kernel {name!r}: .text size {len(text)} must be a positive multiple of 8")
    if not 0 <= entry_offset < len(text) or entry_offset % 8:
        raise ElfFormatError(f"kernel {name!r}: entry offset {entry_offset} outside .text")
    rodata_addr = base + _align(len(text), 16)
    if rodata_addr - base + len(rodata) > WINDOW_SIZE or len(data) > WINDOW_SIZE:
        raise ElfFormatError(f"kernel {name!r}: code or data larger than a 16 MiB window")
    note = _note_bytes(KernelNote(ISA_VERSION, KERNEL_ABI_VERSION, params_size, params_signature))

    # String tables.
    shnames = ["", ".text", ".rodata", ".data", ".note.ashv", ".symtab", ".strtab", ".shstrtab"]
    shstrtab = b"\0"
    shname_off: dict[str, int] = {"": 0}
    for s in shnames[1:]:
        shname_off[s] = len(shstrtab)
        shstrtab += s.encode() + b"\0"
    local = sorted((labels or {}).items(), key=lambda kv: (kv[1], kv[0]))
    strtab = b"\0"
    syms = [_SYM.pack(0, 0, 0, 0, 0, 0)]
    for label, index in local:
        if not 0 <= index * 8 <= len(text):
            raise ElfFormatError(f"kernel {name!r}: label {label!r} outside .text")
        syms.append(_SYM.pack(len(strtab), base + index * 8, 0, (STB_LOCAL << 4) | STT_NOTYPE, 0, 1))
        strtab += label.encode() + b"\0"
    first_global = len(syms)
    syms.append(_SYM.pack(len(strtab), base + entry_offset, len(text), (STB_GLOBAL << 4) | STT_FUNC, 0, 1))
    strtab += name.encode() + b"\0"
    symtab = b"".join(syms)

    # File layout: headers, then WIN_D image (text, pad, rodata) so file offsets mirror addresses, then the rest.
    phnum = 3
    off = _align(_EHDR.size + phnum * _PHDR.size, 16)
    text_off = off
    rodata_off = text_off + (rodata_addr - base)
    off = rodata_off + len(rodata)
    data_off = _align(off, 16)
    note_off = _align(data_off + len(data), 4)
    symtab_off = _align(note_off + len(note), 4)
    strtab_off = symtab_off + len(symtab)
    shstrtab_off = strtab_off + len(strtab)
    shoff = _align(shstrtab_off + len(shstrtab), 4)

    # (name, type, flags, addr, offset, size, link, info, align, entsize)
    sections = [
        ("", SHT_NULL, 0, 0, 0, 0, 0, 0, 0, 0),
        (".text", SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, base, text_off, len(text), 0, 0, 16, 0),
        (".rodata", SHT_PROGBITS, SHF_ALLOC, rodata_addr, rodata_off, len(rodata), 0, 0, 16, 0),
        (".data", SHT_PROGBITS, SHF_ALLOC | SHF_WRITE, WIN_E, data_off, len(data), 0, 0, 16, 0),
        (".note.ashv", SHT_NOTE, 0, 0, note_off, len(note), 0, 0, 4, 0),
        (".symtab", SHT_SYMTAB, 0, 0, symtab_off, len(symtab), 6, first_global, 4, _SYM.size),
        (".strtab", SHT_STRTAB, 0, 0, strtab_off, len(strtab), 0, 0, 1, 0),
        (".shstrtab", SHT_STRTAB, 0, 0, shstrtab_off, len(shstrtab), 0, 0, 1, 0),
    ]
    image_size = rodata_addr - base + len(rodata)
    phdrs = [
        _PHDR.pack(PT_LOAD, text_off, base, base, image_size, image_size, PF_R | PF_X, 16),
        _PHDR.pack(PT_LOAD, data_off, WIN_E, WIN_E, len(data), len(data), PF_R | PF_W, 16),
        _PHDR.pack(PT_NOTE, note_off, 0, 0, len(note), len(note), PF_R, 4),
    ]
    ident = b"\x7fELF" + bytes([1, 1, 1, 0]) + bytes(8)
    ehdr = _EHDR.pack(
        ident, ET_EXEC, EM_NONE, 1, base + entry_offset, _EHDR.size, shoff, ISA_VERSION,
        _EHDR.size, _PHDR.size, phnum, _SHDR.size, len(sections), len(sections) - 1,
    )  # fmt: skip
    out = bytearray(shoff + len(sections) * _SHDR.size)
    out[0 : _EHDR.size] = ehdr
    out[_EHDR.size : _EHDR.size + phnum * _PHDR.size] = b"".join(phdrs)
    for offset, payload in (
        (text_off, text),
        (rodata_off, rodata),
        (data_off, data),
        (note_off, note),
        (symtab_off, symtab),
        (strtab_off, strtab),
        (shstrtab_off, shstrtab),
    ):
        out[offset : offset + len(payload)] = payload
    for i, (sname, *rest) in enumerate(sections):
        out[shoff + i * _SHDR.size : shoff + (i + 1) * _SHDR.size] = _SHDR.pack(shname_off[sname], *rest)
    return bytes(out)


def _cstr(table: bytes, offset: int, what: str) -> str:
    if not 0 <= offset < len(table):
        raise ElfFormatError(f"{what}: string offset {offset} outside its string table")
    end = table.find(b"\0", offset)
    if end < 0:
        raise ElfFormatError(f"{what}: unterminated string at offset {offset}")
    try:
        return table[offset:end].decode("utf-8")
    except UnicodeDecodeError:
        raise ElfFormatError(f"{what}: string at offset {offset} is not UTF-8") from None


def read_kernel_elf(blob: bytes, what: str = "kernel ELF", base: int = WIN_D) -> KernelElf:
    """Parse and validate a kernel ELF linked at window ``base`` (bounded: every offset and size is checked
    before use)."""
    blob = bytes(blob)
    if len(blob) < _EHDR.size:
        raise ElfFormatError(f"{what}: {len(blob)} bytes is shorter than an ELF header")
    (ident, e_type, e_machine, e_version, e_entry, _phoff, shoff, e_flags,
     _ehsize, _phentsize, _phnum, shentsize, shnum, shstrndx) = _EHDR.unpack_from(blob)  # fmt: skip
    if ident[:4] != b"\x7fELF" or ident[4] != 1 or ident[5] != 1 or ident[6] != 1:
        raise ElfFormatError(f"{what}: not a little-endian ELF32 file (e_ident {ident[:7].hex()})")
    if e_type != ET_EXEC or e_machine != EM_NONE or e_version != 1:
        raise ElfFormatError(f"{what}: e_type {e_type} / e_machine {e_machine} / e_version {e_version} unexpected")
    if e_flags != ISA_VERSION:
        raise ElfFormatError(f"{what}: e_flags (ISA version) {e_flags}, this simulator runs SHVX {ISA_VERSION}")
    if shentsize != _SHDR.size or not 0 < shnum <= MAX_SECTIONS or not 0 <= shstrndx < shnum:
        raise ElfFormatError(f"{what}: section header table (entsize {shentsize}, count {shnum}) malformed")
    if shoff + shnum * _SHDR.size > len(blob):
        raise ElfFormatError(f"{what}: section header table at {shoff} runs past the end ({len(blob)} bytes)")
    raw = [_SHDR.unpack_from(blob, shoff + i * _SHDR.size) for i in range(shnum)]
    payloads: list[bytes] = []
    for i, (_n, stype, _f, _a, offset, size, *_rest) in enumerate(raw):
        if stype == SHT_NULL:
            payloads.append(b"")
            continue
        if offset + size > len(blob):
            raise ElfFormatError(f"{what}: section {i} [{offset}, {offset + size}) runs past the end of the file")
        payloads.append(blob[offset : offset + size])
    names = [_cstr(payloads[shstrndx], r[0], f"{what} section {i} name") if i else "" for i, r in enumerate(raw)]
    by_name: dict[str, int] = {}
    for i, n in enumerate(names):
        if i and n in by_name:
            raise ElfFormatError(f"{what}: duplicate section {n!r}")
        by_name[n] = i

    def section(name: str, required: bool = True) -> tuple[tuple[int, ...], bytes] | None:
        index = by_name.get(name)
        if index is None:
            if required:
                raise ElfFormatError(f"{what}: missing section {name!r}")
            return None
        return raw[index], payloads[index]

    text_hdr, text = section(".text")  # type: ignore[misc]
    if text_hdr[3] != base or text_hdr[1] != SHT_PROGBITS or not text_hdr[2] & SHF_EXECINSTR:
        raise ElfFormatError(
            f"{what}: .text must be executable PROGBITS at {base:#x} (sh_addr {text_hdr[3]:#x})"
        )
    if not text or len(text) % 8:
        raise ElfFormatError(f"{what}: .text size {len(text)} must be a positive multiple of 8")
    rodata, rodata_addr = b"", base + _align(len(text), 16)
    got = section(".rodata", required=False)
    if got is not None and got[1]:
        rodata_hdr, rodata = got
        rodata_addr = rodata_hdr[3]
        if rodata_addr < base + len(text) or rodata_addr + len(rodata) > base + WINDOW_SIZE:
            raise ElfFormatError(f"{what}: .rodata at {rodata_addr:#x} must follow .text inside its window")
        if rodata_addr - base - len(text) > 4096:
            raise ElfFormatError(f"{what}: .rodata at {rodata_addr:#x} leaves an unexpected gap after .text")
    data = b""
    got = section(".data", required=False)
    if got is not None and got[1]:
        data_hdr, data = got
        if data_hdr[3] != WIN_E:
            raise ElfFormatError(f"{what}: .data at {data_hdr[3]:#x}, expected WIN_E {WIN_E:#x}")
    note = _read_note(section(".note.ashv")[1], what)  # type: ignore[index]
    symtab_hdr, symtab = section(".symtab")  # type: ignore[misc]
    link = symtab_hdr[6]
    if not 0 < link < shnum or symtab_hdr[9] != _SYM.size or len(symtab) % _SYM.size:
        raise ElfFormatError(f"{what}: .symtab link {link} / entsize {symtab_hdr[9]} malformed")
    strtab = payloads[link]
    symbols: dict[str, int] = {}
    entry_name: str | None = None
    for k in range(1, len(symtab) // _SYM.size):
        st_name, st_value, _size, st_info, _other, _shndx = _SYM.unpack_from(symtab, k * _SYM.size)
        sym = _cstr(strtab, st_name, f"{what} symbol {k}")
        symbols[sym] = st_value
        if st_info == (STB_GLOBAL << 4) | STT_FUNC and st_value == e_entry:
            entry_name = sym
    if entry_name is None:
        raise ElfFormatError(f"{what}: no global function symbol at e_entry {e_entry:#x}")
    if not base <= e_entry < base + len(text) or (e_entry - base) % 8:
        raise ElfFormatError(f"{what}: e_entry {e_entry:#x} is not an instruction of .text")
    return KernelElf(entry_name, text, rodata, rodata_addr, data, e_entry, note, symbols, text_hdr[4], base)


def _read_note(note: bytes, what: str) -> KernelNote:
    if len(note) < _NOTE_HDR.size:
        raise ElfFormatError(f"{what}: .note.ashv truncated")
    namesz, descsz, ntype = _NOTE_HDR.unpack_from(note)
    name_end = _NOTE_HDR.size + namesz
    desc_off = _NOTE_HDR.size + _align(namesz, 4)
    if ntype != NT_ASHV_KERNEL or note[_NOTE_HDR.size : name_end] != NOTE_OWNER + b"\0":
        raise ElfFormatError(f"{what}: .note.ashv has owner/type {note[_NOTE_HDR.size : name_end]!r}/{ntype:#x}")
    if desc_off + descsz > len(note) or descsz < _NOTE_DESC.size:
        raise ElfFormatError(f"{what}: .note.ashv descriptor of {descsz} bytes does not fit")
    isa, abi, params_size, sig_len = _NOTE_DESC.unpack_from(note, desc_off)
    if _NOTE_DESC.size + sig_len > descsz:
        raise ElfFormatError(f"{what}: .note.ashv params signature length {sig_len} does not fit")
    start = desc_off + _NOTE_DESC.size
    try:
        sig = note[start : start + sig_len].decode("ascii")
    except UnicodeDecodeError:
        raise ElfFormatError(f"{what}: .note.ashv params signature is not ASCII") from None
    if isa != ISA_VERSION or abi != KERNEL_ABI_VERSION:
        raise ElfFormatError(f"{what}: note ISA {isa} / ABI {abi}; expected {ISA_VERSION} / {KERNEL_ABI_VERSION}")
    return KernelNote(isa, abi, params_size, sig)

"""The kernels the ShaveTargetMachine generates: ELF files pyelftools reads, the calling convention kept, the
lane width chosen from the body's element types, and plugin emitters taking part."""

from __future__ import annotations

import io

import pytest
from elftools.elf.elffile import ELFFile

from snippets_core.config import CompileConfig
from snippets_core.frontends import builder as sb
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_shave.compiler import generate_kernel
from snippets_shave.constants import WIN_D
from snippets_shave.emitters import DirectEmitter
from snippets_shave.isa import decode_program

CONFIG = CompileConfig.from_mapping({})


def _subgraph(*shapes: tuple[int, ...], et: str = "f32", op=sb.add) -> Subgraph:  # type: ignore[no-untyped-def]
    params = [sb.parameter(list(s), et, name=f"p{i}") for i, s in enumerate(shapes)]
    body = sb.model([op(*params)], name="body")
    outer = [sb.parameter(list(s), et, name=f"x{i}") for i, s in enumerate(shapes)]
    return Subgraph(*outer, body=body, name="sg0")


def test_generated_kernel_is_an_elf_pyelftools_reads() -> None:
    kernel = generate_kernel(_subgraph((3, 7, 9), (1, 7, 1)), CONFIG, None)
    elf = ELFFile(io.BytesIO(kernel.elf))
    assert elf.header.e_machine == "EM_NONE" and elf.elfclass == 32 and elf.little_endian
    text = elf.get_section_by_name(".text")
    assert text.header.sh_addr == WIN_D and text.data() == kernel.text
    symbols = {s.name: s for s in elf.get_section_by_name(".symtab").iter_symbols()}
    assert symbols["snippet_sg0"].entry.st_info.type == "STT_FUNC" and elf.header.e_entry == WIN_D
    note = next(iter(elf.get_section_by_name(".note.ashv").iter_notes()))
    assert b"mmm:" in (note.n_desc if isinstance(note.n_desc, bytes) else note.n_desc.encode("latin-1"))
    assert kernel.params_signature == "mmm:"
    # one call per row of 9: the domain is (3, 7); the bias [1, 7, 1] is one element per call, broadcast over dim 0
    assert kernel.parallel_domain == (3, 7) and kernel.calls == 21
    assert (kernel.inputs[0].block_elems, kernel.inputs[0].domain_offsets) == (9, (7 * 9 * 4, 9 * 4))
    assert (kernel.inputs[1].block_elems, kernel.inputs[1].domain_offsets) == (1, (0, 4))
    assert not kernel.inputs[1].invariant and kernel.scratchpad_size == 0


def test_calling_convention_registers_are_never_written() -> None:
    kernel = generate_kernel(_subgraph((4, 33), op=lambda x: sb.softmax(x, -1)), CONFIG, None)
    for ins in decode_program(kernel.text):
        d = ins.definition
        if "rd" in d.operands:  # a scalar destination
            rd = ins.operands[d.operands.index("rd")]
            assert rd not in (0, 30, 31), f"{ins} writes the args pointer, SP or LR"
    assert decode_program(kernel.text)[-1].mnemonic == "RET"


@pytest.mark.parametrize("et,lanes", [("f32", 4), ("f16", 8)])
def test_lane_width_follows_the_body_types(et: str, lanes: int) -> None:
    kernel = generate_kernel(_subgraph((2, 64), (2, 64), et=et), CONFIG, None)
    loads = [ins for ins in decode_program(kernel.text) if ins.mnemonic == "VLD"]
    assert loads and all(ins.etype == et for ins in loads)  # whole 16-byte vectors: 4 f32 or 8 f16 lanes
    assert kernel.inputs[0].element_type.size * lanes == 16


def test_plugin_emitters_override_builtin_ones() -> None:
    calls: list[str] = []

    class Host:
        def positioned_passes(self, target_name: str, config: object) -> list[object]:
            return []

        def register_emitters(self, target_name: str) -> dict[str, object]:
            def factory(expr, tm):  # type: ignore[no-untyped-def]
                calls.append(expr.type_name)
                return DirectEmitter(expr, tm)

            return {"Add": factory}

    generate_kernel(_subgraph((2, 8), (2, 8)), CONFIG, Host())
    assert calls == ["Add"]

"""The assembler's shortcuts keep every encoding what iced makes of the instruction on its own.

* An emitted instruction is a shared template looked up by its operands: emitting it again, in another assembler,
  after a ``lock_last`` or after label resolution changed a copy, gives the same bytes.
* The encoding form is chosen once per operand *class* (registers by class, displacements by class): every member
  of a class must get the form iced finds shortest for that member itself (the oracle: iced's Encoder lengths over
  every candidate form, computed here per operand tuple without the cache).
"""

from __future__ import annotations

import itertools

import pytest
from iced_x86 import Encoder

from snippets_x86_64.asm import (
    GP8,
    GP32,
    GP64,
    XMM,
    YMM,
    ZMM,
    Assembler,
    bcst,
    dword,
    k1,
    k2,
    qword,
    rax,
    rcx,
    rsi,
    zmm0,
    zmm1,
    zword,
)
from snippets_x86_64.asm.assembler import _encode
from snippets_x86_64.asm.instructions import _candidates, _create, _select, build


def _shortest(mnemonic: str, operands: tuple) -> int:
    """The Code iced encodes shortest (then the lowest Code), from scratch: no cache involved."""
    encoder = Encoder(64)
    forms = _candidates(mnemonic, operands, None, None, False)
    return min(forms, key=lambda f: (encoder.encode(_create(f.code, operands, f), 0), f.code)).code


DISPS = (0, 1, -1, 8, 64, 100, 127, 128, -128, -129, 256, 960, 1024, 4096, 8128, 8192, -8192, 65536, 2**31 - 64)


def _cases() -> list[tuple[str, tuple]]:
    cases: list[tuple[str, tuple]] = []
    for reg in (*GP64, *GP32):
        cases += [("add", (reg, 1)), ("add", (reg, 1000)), ("mov", (reg, 5)), ("imul", (reg, reg, 12))]
        cases += [("mov", (reg.r64, 2**40)), ("test", (reg, reg)), ("dec", (reg,))]
    for reg in GP8:
        cases += [("mov", (reg, 1)), ("test", (reg, reg))]
    for base, disp in itertools.product(GP64, DISPS):
        cases += [("mov", (rax, qword[base + disp])), ("lea", (rcx, base + disp)),
                  ("vmovups", (zmm0, zword[base + disp])), ("vbroadcastss", (zmm1, dword[base + disp])),
                  ("vmovups", (YMM[3], base + disp)), ("vmovups", (XMM[9], base + disp)),
                  ("vfmadd231ps", (zmm0, zmm1, bcst(base + disp)))]
    for index in (rcx, GP64[12], GP64[13], GP64[9]):
        cases += [("mov", (rax, qword[rsi + index * 8 + 64])), ("vmovups", (zmm0, rsi + index * 4 + 128))]
    for a, b, c in itertools.product((0, 7, 8, 15, 16, 31), repeat=3):
        cases += [("vaddps", (XMM[a], XMM[b], XMM[c])), ("vaddps", (YMM[a], YMM[b], YMM[c])),
                  ("vfmadd231ps", (ZMM[a], ZMM[b], ZMM[c]))]
    return cases


@pytest.mark.parametrize("chunk", range(4))
def test_the_form_chosen_per_operand_class_is_each_members_shortest(chunk):
    cases = _cases()
    for mnemonic, operands in cases[chunk::4]:
        assert _select(mnemonic, operands, None, None, False).code == _shortest(mnemonic, operands), (
            mnemonic, operands)


def test_a_repeated_instruction_is_one_template_and_encodes_alike():
    a, b = Assembler(), Assembler()
    for asm in (a, b):
        asm.vfmadd231ps(zmm0, zmm1, zword[rsi + 64])
        asm.vmovups((rsi + 128).mask(k2), zmm0)
    assert a._instructions[0] is b._instructions[0]  # shared, never changed in place
    assert a.encode() == b.encode()


def test_lock_last_changes_a_copy_not_the_template():
    a = Assembler()
    a.add(qword[rsi], 1)
    a.lock_last()
    b = Assembler()
    b.add(qword[rsi], 1)
    assert a.encode() == bytes([0xF0]) + b.encode()  # the lock prefix, on a's instruction only


def test_label_resolution_leaves_the_shared_templates_alone():
    a = Assembler()
    top = a.label("top")
    a.dec(rcx)  # bound to the label: the assembler gives it an ip, on a copy
    a.jnz(top)
    first = a.encode()
    b = Assembler()
    b.dec(rcx)
    assert b._instructions[0] is a._instructions[0] and b._instructions[0].ip == 0
    assert a.encode() == first


def test_an_emitted_instruction_reads_as_iced_decodes_it_whether_built_or_found():
    texts = []
    for _ in range(2):  # the second round finds every instruction among the templates
        a = Assembler()
        a.vmovups(zmm0.mask(k1).z, rsi + 64)
        a.vfmadd231ps(zmm1, zmm0, bcst(rsi + 4))
        a.mov(rax, qword[rsi + rcx * 8 - 8])
        texts.append(a.disassemble())
    assert texts[0] == texts[1]
    assert texts[0].splitlines()[0].endswith("vmovups zmm0{k1}{z}, [rsi+0x40]")


def test_a_displacement_patched_copy_is_the_instruction_built_for_its_displacement():
    a = Assembler()
    expected = []
    for disp in DISPS:  # several displacements per class: all but the first of a class are patched copies
        for mnemonic, operands in (("vmovups", (zmm0, zword[rsi + disp])),
                                   ("mov", (rax, qword[rsi + rcx * 8 + disp])),
                                   ("vmovups", ((rsi + disp).mask(k1), zmm1)),
                                   ("vfmadd231ps", (zmm0, zmm1, bcst(rsi + disp)))):
            a.emit(mnemonic, *operands)
            expected.append(build(mnemonic, operands))  # straight from the instruction table, no cache
    assert a._instructions == expected
    assert a.encode() == _encode(expected, 0)


def test_operands_are_values_that_copy_and_pickle():
    import copy
    import pickle

    for op in (dword[rsi + rcx * 4 + 8], zmm0.mask(k1).z, (rsi + 64).mask(k2), bcst(rsi), qword[rsi]):
        for made in (copy.copy(op), copy.deepcopy(op), pickle.loads(pickle.dumps(op))):
            assert made == op and type(made) is type(op) and str(made) == str(op)
    with pytest.raises(AttributeError):
        (rsi + 8).disp = 16  # frozen

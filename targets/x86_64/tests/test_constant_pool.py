"""Constants in a pool after the code, read RIP-relative: layout as iced decodes it, values at run time."""

from __future__ import annotations

import numpy as np
import pytest
from iced_x86 import Decoder

from snippets_core.errors import CodegenError
from snippets_x86_64.asm import Assembler, Function, bcst, eax, rdi, rsi, zmm0, zmm1


def test_constants_are_deduplicated_and_aligned():
    a = Assembler()
    half = a.const_f32(0.5)
    assert a.const_f32(0.5) == half
    one = a.const_f32(1.0)
    table = a.const_array(np.arange(16, dtype=np.int32))
    a.vmulps(zmm0, zmm0, bcst(half))
    a.vaddps(zmm0, zmm0, bcst(one))
    a.vpermps(zmm0, zmm1, table)
    a.ret()
    code, code_size = a.assemble()
    decoded = list(Decoder(64, code[:code_size]))
    targets = [instr.ip_rel_memory_address for instr in decoded[:3]]
    # the pool starts at the first 64-byte boundary after the code; the table gets its own 64-byte slot
    assert targets == [64, 68, 128]
    assert code[64:68] == np.float32(0.5).tobytes() and code[68:72] == np.float32(1.0).tobytes()
    assert code[128:192] == np.arange(16, dtype=np.int32).tobytes()
    assert a.disassemble().splitlines()[:4] == [
        "     0: vmulps zmm0, zmm0, [0x40]{1to16}",
        "     a: vaddps zmm0, zmm0, [0x44]{1to16}",
        "    14: vpermps zmm0, zmm1, [0x80]",
        "    1e: ret",
    ]
    assert a.disassemble().splitlines()[4] == "    40: db 00 00 00 3f 00 00 80 3f cc cc cc cc cc cc cc cc"


def test_extend_merges_pools():
    inner = Assembler()
    inner.vaddps(zmm0, zmm0, bcst(inner.const_f32(3.0)))
    outer = Assembler()
    outer.vmulps(zmm0, zmm0, bcst(outer.const_f32(3.0)))
    outer.extend(inner)
    outer.ret()
    code, code_size = outer.assemble()
    decoded = list(Decoder(64, code[:code_size]))
    # both read the same (deduplicated) constant
    assert decoded[0].ip_rel_memory_address == decoded[1].ip_rel_memory_address == 64
    assert len(code) == 68


def test_constant_operands_take_no_displacement():
    a = Assembler()
    c = a.const_f32(1.0)
    with pytest.raises(CodegenError, match="takes no base, index or displacement"):
        c + 4
    with pytest.raises(CodegenError, match="not a constant of this assembler"):
        Assembler().vaddps(zmm0, zmm0, bcst(c))
    with pytest.raises(CodegenError, match="does not fit in 32 bits"):
        a.const_i32(2**32)


@pytest.mark.avx512
def test_pool_constants_at_run_time():
    fn = Function("affine_reversed", args=("x", "out"))
    fn.vmovups(zmm0, rdi + 0)
    fn.vfmadd213ps(zmm0, zmm0, bcst(fn.const_f32(1.5)))  # x * x + 1.5
    fn.vmovdqu32(zmm1, fn.const_array(np.arange(16, dtype=np.int32)[::-1]))
    fn.vpermps(zmm0, zmm1, zmm0)  # lanes reversed
    fn.vmovups(rsi + 0, zmm0)
    fn.mov(eax, fn.const_i32(-7))
    fn.mov(rsi + 64, eax)
    f = fn.finalize()
    x = np.arange(16, dtype=np.float32)
    out = np.zeros(17, dtype=np.float32)
    f(x.ctypes.data, out.ctypes.data)
    np.testing.assert_array_equal(out[:16], (x * x + 1.5)[::-1])
    assert out[16:].view(np.int32)[0] == -7

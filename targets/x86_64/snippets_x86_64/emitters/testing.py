"""Run one emitter function over numpy arrays: a small JIT loop kernel around it.

``run_eltwise(emit_exp, x)`` compiles ``for each 16 lanes: load, emit_exp, store`` with a masked tail and
calls it, so an emitter function is checked against numpy without the rest of the code generator. Every lane
is 32 bits (the register form of every element type, see ``convert.py``). Used by the tests and by the
accuracy measurements of docs/x86_64_math.md.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
from iced_x86 import InstructionInfoFactory, OpAccess

from snippets_core.errors import CodegenError
from snippets_x86_64.asm import ZMM, Assembler, Function, K, eax, ecx, edi, k1, r9, rcx
from snippets_x86_64.emitters.base import NEEDS, Aux, Needs

LANES = 16
#: registers the harness gives: inputs zmm0.., output zmm8 (unless aliased), aux from zmm16, aux masks from k2
_IN_BASE, _OUT, _AUX_BASE, _MASK_BASE = 0, 8, 16, 2


def aux_for(fn: Callable[..., None], extra_vecs: int = 0) -> Aux:
    """The aux registers the harness hands to ``fn``: exactly as many as it declares (none if it declares
    nothing: a wrapper around an Emitter picks its own registers)."""
    need = NEEDS.get(fn, Needs())
    return Aux(
        tuple(ZMM[_AUX_BASE + i] for i in range(need.vecs + extra_vecs)),
        tuple(K[_MASK_BASE + i] for i in range(need.masks)),
    )


def build_eltwise(
    fn: Callable[..., None], arity: int, alias: int | None = None, attrs: tuple[tuple[str, Any], ...] = ()
) -> Any:
    """A JIT function ``f(n, in0, .., out)`` applying ``fn`` to ``n`` 32-bit lanes per input.

    ``alias`` makes the destination register the same as input ``alias`` (the allocator may do that).
    """
    if arity > 4:
        raise CodegenError(f"the harness takes at most 4 inputs, got {arity}")
    names = ("n", *(f"in{i}" for i in range(arity)), "out")
    f = Function(f"harness_{fn.__name__}", args=names)
    n, *ptrs = f.args
    ins, out = ptrs[:arity], ptrs[arity]
    src = [ZMM[_IN_BASE + i] for i in range(arity)]
    dst = ZMM[_OUT] if alias is None else src[alias]
    aux = aux_for(fn)
    kw = dict(attrs)

    def body(mask: Any) -> None:
        for reg, p in zip(src, ins):
            f.vmovups(reg if mask is None else reg.mask(mask).z, p + 0)
        fn(f, dst, *src, aux, **kw)
        f.vmovups(p_out if mask is None else p_out.mask(mask), dst)

    p_out = out + 0
    tail = f.new_label("tail")
    f.cmp(n, LANES)
    f.jl(tail)
    loop = f.label("loop")
    body(None)
    for p in (*ins, out):
        f.add(p, 4 * LANES)
    f.sub(n, LANES)
    f.cmp(n, LANES)
    f.jge(loop)
    f.bind(tail)
    f.test(n, n)
    f.jz(f.exit)
    f.mov(r9, rcx)  # rcx may hold a pointer; the shift count must be in cl
    f.mov(ecx, edi)
    f.mov(eax, 1)
    f.shl(eax, ecx.r8)
    f.dec(eax)
    f.kmovw(k1, eax)
    f.mov(rcx, r9)
    body(k1)
    return f.finalize(None, (ctypes.c_int64,) + (ctypes.c_void_p,) * (arity + 1))


@lru_cache(maxsize=512)
def _compiled(fn: Callable[..., None], arity: int, alias: int | None, attrs: tuple[tuple[str, Any], ...]) -> Any:
    return build_eltwise(fn, arity, alias, attrs)


def run_eltwise(
    fn: Callable[..., None],
    *inputs: np.ndarray,
    out_dtype: Any = None,
    alias: int | None = None,
    **attrs: Any,
) -> np.ndarray:
    """``fn`` applied to the 32-bit lanes of ``inputs`` (same length); the result viewed as ``out_dtype``
    (default: the first input's dtype)."""
    arrays = [np.ascontiguousarray(x) for x in inputs]
    if any(x.dtype.itemsize != 4 for x in arrays):
        raise CodegenError("the harness works on 32-bit lanes; convert the inputs to their register form first")
    size = arrays[0].size
    if any(x.size != size for x in arrays):
        raise CodegenError("the harness inputs must have the same length")
    out = np.empty(size, dtype=out_dtype or arrays[0].dtype)
    func = _compiled(fn, len(arrays), alias, tuple(sorted(attrs.items())))
    func(size, *(x.ctypes.data for x in arrays), out.ctypes.data)
    return out


def written_registers(fn: Callable[..., None], arity: int, alias: int | None = None, **attrs: Any) -> set[str]:
    """The names of the registers the code of ``fn`` writes (iced's instruction info), for checking that an
    emitter function writes only its destination and its aux registers."""
    a = Assembler()
    src = [ZMM[_IN_BASE + i] for i in range(arity)]
    dst = ZMM[_OUT] if alias is None else src[alias]
    fn(a, dst, *src, aux_for(fn), **attrs)
    factory = InstructionInfoFactory()
    names: set[str] = set()
    from snippets_x86_64.asm.registers import XMM, YMM
    from snippets_x86_64.asm.registers import K as KS

    by_code = {r.code: r.name for r in (*ZMM, *YMM, *XMM, *KS)}
    for instr in a.instructions():
        for use in factory.info(instr).used_registers():
            if use.access in (OpAccess.WRITE, OpAccess.READ_WRITE, OpAccess.COND_WRITE, OpAccess.READ_COND_WRITE):
                names.add(by_code.get(use.register, str(use.register)))
    return names


def expected_writable(fn: Callable[..., None], arity: int, alias: int | None = None) -> set[str]:
    """The register names ``fn`` may write under the harness's register choice."""
    aux = aux_for(fn)
    dst = ZMM[_OUT] if alias is None else ZMM[_IN_BASE + alias]
    names = {dst.name, dst.ymm.name, dst.xmm.name}
    for v in aux.vecs:
        names |= {v.name, v.ymm.name, v.xmm.name}
    names |= {k.name for k in aux.masks}
    return names


def as_lanes(values: Sequence[float] | np.ndarray, dtype: Any = np.float32) -> np.ndarray:
    """A contiguous 1-D array of 32-bit lanes."""
    return np.ascontiguousarray(np.asarray(values, dtype=dtype).reshape(-1))

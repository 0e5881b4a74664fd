"""A function builder with the System V AMD64 calling convention.

The body is written with the Assembler's methods; the prologue and epilogue are made when the function is
encoded, from what the body turned out to use:

* integer/pointer arguments arrive in ``rdi, rsi, rdx, rcx, r8, r9`` (``fn.args`` / ``fn.arg("name")``), the
  result is returned in ``rax``;
* the callee-saved registers the body touches (``rbx, rbp, r12..r15``, also implicit uses such as ``cpuid``
  writing ``rbx``) are pushed in the prologue and popped in the epilogue;
* ``fn.stack_slot(64)`` reserves a spill slot in a stack frame aligned to 64 bytes (so zmm spills are
  aligned); the frame is made only when a slot is asked for or the body calls out (which needs an aligned
  stack). The entry ``rsp`` is kept in the frame, so ``rbp`` stays free for the body;
* ``vzeroupper`` is added before returning when the body used ymm/zmm registers (the caller is C or Python,
  and dirty upper halves slow down its SSE code);
* a body returns by falling off its end or by jumping to ``fn.exit``; a ``ret`` in the body would skip the
  epilogue and is rejected.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from iced_x86 import FlowControl, Instruction, InstructionInfoFactory, Mnemonic, RegisterExt

from snippets_core.errors import CodegenError
from snippets_x86_64.asm.assembler import Assembler
from snippets_x86_64.asm.operands import Label, Mem
from snippets_x86_64.asm.registers import SYSV_ARGS, SYSV_CALLEE_SAVED, GpReg, r11, rsp

if TYPE_CHECKING:
    from snippets_x86_64.jit import JitFunction

_FRAME_ALIGN = 64


def _is_wide_vector(register: int) -> bool:
    return RegisterExt.is_ymm(register) or RegisterExt.is_zmm(register)


_INFO = InstructionInfoFactory()
#: instruction -> _facts(instruction), by value (iced compares every field but the ip)
_FACTS: dict[Instruction, tuple[bool, bool, bool, frozenset[int]]] = {}
_FACTS_MAX = 1 << 16


def _facts(instr: Instruction) -> tuple[bool, bool, bool, frozenset[int]]:
    """(is a ret, is a call, leaves upper vector halves dirty, the full registers it uses)."""
    used = set()
    wide = False
    for use in _INFO.info(instr).used_registers():
        used.add(RegisterExt.full_register(use.register))
        # VEX/EVEX xmm writes clear the upper halves; only ymm/zmm leave them dirty
        wide = wide or _is_wide_vector(use.register)
    calls = instr.flow_control in (FlowControl.CALL, FlowControl.INDIRECT_CALL)
    return instr.mnemonic == Mnemonic.RET, calls, wide, frozenset(used)


class Function(Assembler):
    """An Assembler whose code is a complete System V function: ``fn.finalize()`` makes it callable."""

    def __init__(self, name: str = "function", args: Sequence[str] = ()) -> None:
        super().__init__()
        if len(args) > len(SYSV_ARGS):
            raise CodegenError(f"function {name!r}: {len(args)} arguments, at most {len(SYSV_ARGS)} go in registers")
        self.name = name
        self.arg_names: tuple[str, ...] = tuple(args)
        self.args: tuple[GpReg, ...] = SYSV_ARGS[: len(args)]
        #: jump here to return early (the epilogue starts here)
        self.exit = Label(f"{name}.exit")
        self._slots_size = 0

    def arg(self, name: str) -> GpReg:
        """The register holding the argument called ``name``."""
        try:
            return self.args[self.arg_names.index(name)]
        except ValueError:
            raise CodegenError(f"function {self.name!r} has no argument {name!r} (has {self.arg_names})") from None

    def stack_slot(self, size: int = 64, align: int | None = None) -> Mem:
        """Reserve ``size`` bytes of the stack frame; the slot is addressed ``[rsp + offset]``, aligned to
        ``align`` (default: the size rounded up to a power of two, at most 64). Pushes in the body move
        ``rsp`` and so invalidate slot addresses until the matching pops."""
        if size <= 0:
            raise CodegenError(f"function {self.name!r}: stack slot size must be positive, got {size}")
        if align is None:
            align = min(_FRAME_ALIGN, 1 << (size - 1).bit_length())
        if align <= 0 or align & (align - 1) or align > _FRAME_ALIGN:
            raise CodegenError(f"function {self.name!r}: slot alignment must be a power of two <= 64, got {align}")
        offset = -(-self._slots_size // align) * align
        self._slots_size = offset + size
        return Mem(rsp, disp=offset)

    # -- prologue and epilogue ---------------------------------------------------------------------------------

    def _frame(self, body: list[Instruction]) -> tuple[list[GpReg], bool, bool]:
        """Callee-saved registers the body uses, whether a frame is needed, whether to vzeroupper."""
        used: set[int] = set()
        calls = wide = False
        # each distinct instruction once (a kernel repeats its FMAs and loads; equal instructions are usually the
        # same shared object, see Assembler.emit), its facts read from a memo that outlives the function
        for instr in {id(instr): instr for instr in body}.values():
            facts = _FACTS.get(instr)
            if facts is None:
                facts = _facts(instr)
                if len(_FACTS) >= _FACTS_MAX:
                    _FACTS.clear()
                _FACTS[instr] = facts
            if facts[0]:
                raise CodegenError(f"function {self.name!r}: `ret` in the body skips the epilogue; jump to fn.exit")
            calls = calls or facts[1]
            wide = wide or facts[2]
            used |= facts[3]
        saved = [reg for reg in SYSV_CALLEE_SAVED if reg.code in used]
        return saved, self._slots_size > 0 or calls, wide

    def _final(self) -> Assembler:
        """Prologue, body and epilogue."""
        saved, framed, wide = self._frame(self._instructions)
        slots = -(-self._slots_size // _FRAME_ALIGN) * _FRAME_ALIGN

        prologue = Assembler()
        for reg in saved:
            prologue.push(reg)
        if framed:
            # r11 is a scratch register of the ABI and holds no argument, so it is free before the body runs
            prologue.mov(r11, rsp)
            prologue.and_(rsp, -_FRAME_ALIGN)
            prologue.sub(rsp, slots + _FRAME_ALIGN)
            prologue.mov(rsp + slots, r11)

        epilogue = Assembler()
        if framed:
            epilogue.mov(rsp, rsp + slots)
        for reg in reversed(saved):
            epilogue.pop(reg)
        if wide:
            epilogue.vzeroupper()
        epilogue.ret()

        whole = Assembler()
        whole.extend(prologue)
        whole.extend(self)
        whole.bind(self.exit)
        whole.extend(epilogue)
        return whole

    def finalize(self, restype: Any = None, argtypes: Sequence[Any] | None = None) -> JitFunction:
        """Encode, place in executable memory and return the callable (a :class:`~snippets_x86_64.jit.JitFunction`).
        ``argtypes`` are ctypes types (default: one ``c_void_p`` per argument); ``restype`` too (default none)."""
        import ctypes

        from snippets_x86_64.jit import JitFunction

        if argtypes is None:
            argtypes = (ctypes.c_void_p,) * len(self.args)
        if len(argtypes) != len(self.args):
            raise CodegenError(f"function {self.name!r}: {len(argtypes)} argtypes for {len(self.args)} arguments")
        code, code_size = self.assemble()
        return JitFunction(code, restype=restype, argtypes=tuple(argtypes), name=self.name, code_size=code_size)

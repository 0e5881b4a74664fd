"""ShaveTargetMachine: what the Generator needs to know about the activation SHAVE, and the Kernel it makes.

* 16-byte vectors: 4 f32 or 8 f16 lanes; the lowering runs with ``vector_size`` 8 when every value of the body
  is f16, else 4 (an f16 value then uses the low half of its register);
* register pools: ``r2..r23`` and ``v0..v23`` for the allocator (the rest: calling convention, kernel loop,
  emitter scratch, see :mod:`snippets_shave.emitters`);
* the jitters table :data:`snippets_shave.emitters.EMITTERS`, plus the emitters plugins register for ``shave``;
* the KernelEmitter (:class:`ShaveKernelEmitter`) and the Kernel it produces (:class:`ShaveKernel`), whose
  ``elf`` is a kernel ELF ready for a blob.

Kernel ABI (docs/kernel_abi.md, "generated kernels"): the params struct holds one MemRef per input, one per
output, then one for the buffer scratchpad when the body has Buffers; no scalars. A kernel call of the
LinearIR covers one index of the parallel domain (the master shape without the last ``loop_depth`` dims); an
invocation runs ``calls`` consecutive indices, ``calls`` being read at run time from the first output MemRef,
whose dims are ``[calls, block]``. Each tensor's block of one call is contiguous: in CMX an input holds
``calls`` blocks back to back (``[calls, block]``), or a single block (``[1, block]``) when it is the same for
every index of the domain (it broadcasts over all parallel dims). Call ``k`` points each data pointer at
``dataAddr + k * block_bytes`` (or ``dataAddr`` for a single block) and every buffer at the scratchpad.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING, Any

from snippets_core.codegen.emitter import KernelEmitter, memory_shape
from snippets_core.codegen.target_machine import Jitter, TargetMachine
from snippets_core.errors import CodegenError
from snippets_core.ir.element_type import ElementType
from snippets_core.lowered.port_descriptor import RegType
from snippets_shave.abi import MEMREF_SIZE, ParamsLayout
from snippets_shave.asm import Assembler, r0, r27, r28, r29
from snippets_shave.elf import write_kernel_elf
from snippets_shave.emitters import EMITTERS, GPR_POOL, VEC_POOL, ShaveEmitter, sreg

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR

R_CALLS, R_CALL, R_TMP = r27, r28, r29  # call count, call index, prologue scratch
MAX_DATA_POINTERS = 16  # the tokenizer's data_ptr_gpr_count: leaves gprs for loop counters


@dataclass(frozen=True)
class TensorBlock:
    """How one kernel input or output is laid out for the kernel: the element type, the contiguous block one
    call reads or writes, and the byte offset of each parallel-domain dim in the full tensor (0: broadcast)."""

    element_type: ElementType
    block_elems: int
    domain_offsets: tuple[int, ...]  # bytes per step of each parallel dim, in the full (DDR) tensor

    @property
    def block_bytes(self) -> int:
        return self.block_elems * self.element_type.size

    @property
    def invariant(self) -> bool:
        """The same block for every index of the domain: CMX holds it once."""
        return not any(self.domain_offsets)


@dataclass(frozen=True)
class ShaveKernel:
    """A generated kernel: its ELF, and what the schedule needs to call it."""

    name: str
    elf: bytes
    text: bytes
    inputs: tuple[TensorBlock, ...]
    outputs: tuple[TensorBlock, ...]
    parallel_domain: tuple[int, ...]
    scratchpad_size: int
    params_signature: str

    @property
    def calls(self) -> int:
        """Kernel calls for the whole Subgraph: one per index of the parallel domain."""
        return prod(self.parallel_domain)

    def disassemble(self) -> str:
        """The kernel's SHVX code, one instruction per line (``snippets inspect --asm``)."""
        from snippets_shave.isa import disassemble

        return disassemble(self.text)


class ShaveTargetMachine(TargetMachine):
    """The SHVX TargetMachine (see the module docstring). ``valid_lanes`` is the lowering's vector_size."""

    name = "shave"

    def __init__(
        self, valid_lanes: int = 4, kernel_name: str = "snippet", plugin_emitters: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__()
        if valid_lanes not in (4, 8):
            raise CodegenError(f"the shave target runs 4 (f32) or 8 (f16) lanes, not {valid_lanes}")
        self.valid_lanes = valid_lanes
        self.kernel_name = kernel_name
        self.asm = Assembler()
        self._labels = 0
        for op in sorted(EMITTERS):
            self.jitters[op] = Jitter(self._bind(EMITTERS[op]), self._precisions(op))
        # a plugin's factory is called as factory(expr, target_machine) and overrides a built-in emitter
        for op in sorted(plugin_emitters or {}):
            factory = (plugin_emitters or {})[op]
            self.jitters[op] = factory if isinstance(factory, Jitter) else Jitter(self._bind(factory))

    def _bind(self, cls: type[ShaveEmitter]) -> Any:
        return lambda expr: cls(expr, self)

    @staticmethod
    def _precisions(op: str) -> Any:
        # memory, loop and conversion ops take any of the lane types; arithmetic takes one type for all inputs
        if op in ("Convert", "ConvertSaturation", "ConvertTruncation"):
            return lambda expr: [(ElementType.f32,), (ElementType.f16,)]
        if op in EMITTERS and EMITTERS[op].__name__ in ("DirectEmitter", "CompositeEmitter"):
            return lambda expr: [(et,) * len(expr.input_connectors) for et in (ElementType.f32, ElementType.f16)]
        return lambda expr: ()

    def new_label_id(self) -> int:
        self._labels += 1
        return self._labels

    # --- machine facts ------------------------------------------------------------------------------------------
    def lanes(self, element_type: ElementType) -> int:
        return 16 // max(element_type.size, 1)

    @property
    def vector_size(self) -> int:
        return self.valid_lanes

    def reg_pool(self, reg_type: RegType) -> tuple[int, ...]:
        return {RegType.gpr: GPR_POOL, RegType.vec: VEC_POOL}.get(reg_type, ())

    # --- code generation ----------------------------------------------------------------------------------------
    def make_kernel_emitter(self, ir: LinearIR, compile_params: Any = None) -> ShaveKernelEmitter:
        return ShaveKernelEmitter(ir, self, compile_params)

    def get_snippet(self, kernel_emitter: KernelEmitter) -> ShaveKernel:
        assert isinstance(kernel_emitter, ShaveKernelEmitter)
        self.asm = Assembler()
        self._labels = 0
        return kernel_emitter.kernel


def _right_aligned(shape: tuple[int, ...], rank: int) -> tuple[int, ...]:
    return (1,) * (rank - len(shape)) + tuple(shape)


class ShaveKernelEmitter(KernelEmitter):
    """The call loop around the body (see the module docstring), then ``RET``; wraps the code in an ELF."""

    def __init__(self, ir: LinearIR, tm: ShaveTargetMachine, compile_params: Any = None) -> None:
        super().__init__(ir, compile_params)
        self.tm = tm
        master = ir.get_master_shape()
        rank = len(master)
        depth = rank - len(self.parallel_domain)
        shapes = [memory_shape(p) for p in ir.parameters] + [r.input_descs[0].preordered_shape for r in ir.results]
        types = [p.node.outputs[0].element_type for p in ir.parameters]
        for r in ir.results:
            src = r.input_connectors[0].source
            types.append(src.expr.node.outputs[src.index].element_type)
        blocks = []
        for shape, et, offsets in zip(shapes, types, self.data_offsets, strict=True):
            inner = _right_aligned(tuple(int(d) for d in shape), rank)[rank - depth :] if depth else ()
            blocks.append(TensorBlock(et, prod(inner), tuple(offsets[: len(self.parallel_domain)])))
        n_in = len(ir.parameters)
        self.inputs = tuple(blocks[:n_in])
        self.outputs = tuple(blocks[n_in:])
        if not self.outputs:
            raise CodegenError("a SHAVE kernel needs at least one output")
        if any(b.invariant for b in self.outputs) and prod(self.parallel_domain) > 1:
            raise CodegenError("an output of the kernel is written by every call of the domain")
        n_mem = len(blocks) + (1 if self.buffer_regs else 0)
        self.layout = ParamsLayout(tm.kernel_name, tuple(f"m{i}" for i in range(n_mem)))

    def emit_code(self, in_regs: Any = None, out_regs: Any = None, aux: Any = None) -> None:
        a = self.tm.asm
        n_data = len(self.inputs) + len(self.outputs)
        # calls = dims[1] of the first output MemRef (dims are stored innermost first: [block, calls])
        a.LD32(R_TMP, r0, len(self.inputs) * MEMREF_SIZE + 12)
        a.LD32(R_CALLS, R_TMP, 4)
        a.MOVI(R_CALL, 0)
        a.label("calls")
        a.BGE(R_CALL, R_CALLS, "done")
        for i, (reg, block) in enumerate(zip(self.data_ptr_regs, (*self.inputs, *self.outputs), strict=True)):
            if reg is None:
                continue
            ptr = sreg(reg, f"data pointer {i}")
            a.LD32(ptr, r0, i * MEMREF_SIZE)
            if not block.invariant and block.block_bytes:
                a.MOVI(R_TMP, block.block_bytes)
                a.MUL(R_TMP, R_TMP, R_CALL)
                a.ADD(ptr, ptr, R_TMP)
        for reg in self.buffer_regs:
            if reg is not None:
                a.LD32(sreg(reg, "buffer pointer"), r0, n_data * MEMREF_SIZE)
        for expr in self.ir.exprs:
            expr.emitter.emit_code(expr.emitter.in_regs, expr.emitter.out_regs)
        a.ADDI(R_CALL, R_CALL, 1)
        a.JMP("calls")
        a.label("done")
        a.RET()
        text = a.assemble()
        layout = self.layout
        elf = write_kernel_elf(
            self.tm.kernel_name, text, params_signature=layout.signature, params_size=layout.size, labels=a.labels
        )
        self.kernel = ShaveKernel(
            name=self.tm.kernel_name,
            elf=elf,
            text=text,
            inputs=self.inputs,
            outputs=self.outputs,
            parallel_domain=tuple(int(d) for d in self.parallel_domain),
            scratchpad_size=int(self.scratchpad_size) if self.buffer_regs else 0,
            params_signature=layout.signature,
        )

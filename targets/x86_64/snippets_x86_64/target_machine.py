"""X86_64TargetMachine: what the Generator needs to know about x86-64 with AVX-512.

* 16 lanes (64-byte zmm vectors) for every element type: each lane is 32 bits (f16/bf16 are held as f32,
  narrow integers as i32; the Loads widen and the Stores narrow);
* register pools in hardware numbers: 15 gprs (all but ``rsp``), ordered so that the data pointers (which
  AssignRegisters hands out first) never land on ``rdi``/``rsi``, the two kernel arguments the prologue
  reads while it sets the pointers up; 32 zmm; op-masks k1..k7 (k0 means "no mask" as a write mask);
* the jitters table: this module's memory and control-flow emitters (:class:`JitEmitter` s, built as
  ``cls(expr, target_machine)``), the arithmetic ``EMITTERS`` of :mod:`snippets_x86_64.emitters.table` (built
  as ``cls(expr, target_machine.asm)``, their input precisions checked), and the emitters plugins register
  for ``x86_64_avx512`` (a factory called as ``factory(expr, target_machine)``, or a core Emitter class built
  on the Assembler like the arithmetic ones; a plugin overrides a built-in emitter of the same op);
* the KernelEmitter (:class:`~snippets_x86_64.kernel.X86_64KernelEmitter`) and the Kernel it produces.

One TargetMachine generates one kernel at a time: ``asm`` is the Function being written, replaced by a fresh
one when ``get_snippet`` has taken the finished kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from snippets_core.codegen.emitter import Emitter
from snippets_core.codegen.target_machine import Jitter, TargetMachine
from snippets_core.errors import CodegenError
from snippets_core.ir.element_type import ElementType
from snippets_core.lowered.port_descriptor import RegType
from snippets_core.lowered.symbolic import is_dynamic
from snippets_x86_64.asm import (
    ZMM,
    Function,
    Mem,
    qword,
    r8,
    r9,
    r10,
    r11,
    r12,
    r13,
    r14,
    r15,
    rax,
    rbp,
    rbx,
    rcx,
    rdi,
    rdx,
    rsi,
)
from snippets_x86_64.brgemm import BrgemmEmitter
from snippets_x86_64.brgemm_copy_b import BrgemmCopyBEmitter
from snippets_x86_64.jit_emitter import JitEmitter, NopEmitter
from snippets_x86_64.loop_emitters import (
    LoopBeginEmitter,
    LoopEndEmitter,
    RegSpillBeginEmitter,
    RegSpillEndEmitter,
)
from snippets_x86_64.memory_emitters import BroadcastLoadEmitter, LoadEmitter, StoreEmitter, TailFillEmitter

if TYPE_CHECKING:
    from snippets_core.codegen.emitter import KernelEmitter
    from snippets_core.ir.node import Node
    from snippets_core.lowered.expression import Expression
    from snippets_core.lowered.linear_ir import LinearIR
    from snippets_x86_64.asm import GpReg, VecReg
    from snippets_x86_64.kernel import Kernel, X86_64KernelEmitter

#: gprs in the order AssignRegisters hands them out: scratch registers first (no push/pop), callee-saved
#: next, the kernel arguments rsi (indexes) and rdi (call_args) last
GPR_ORDER = (r8, r9, r10, r11, rax, rcx, rdx, rbx, rbp, r12, r13, r14, r15, rsi, rdi)
KERNEL_ARGS = ("call_args", "indexes")
LANES = 16

#: ops that generate no code
NOP_OPS = (
    "Parameter",
    "Result",
    "Buffer",
    "RankNormalization",
    "SnippetsReshape",
    "Reorder",
    "Nop",
    "VectorBuffer",
    "PerfCountBegin",
    "PerfCountEnd",
)
#: memory and control-flow emitters of this module, by op type name
CONTROL_EMITTERS: dict[str, type[JitEmitter]] = {
    **{op: NopEmitter for op in NOP_OPS},
    "Load": LoadEmitter,
    "LoadReorder": LoadEmitter,  # its permutation is in the pointer increments and data offsets
    "BroadcastLoad": BroadcastLoadEmitter,
    "Store": StoreEmitter,
    "LoopBegin": LoopBeginEmitter,
    "LoopEnd": LoopEndEmitter,
    "RegSpillBegin": RegSpillBeginEmitter,
    "RegSpillEnd": RegSpillEndEmitter,
    "Brgemm": BrgemmEmitter,
    "BrgemmCopyB": BrgemmCopyBEmitter,
}

EmitterFactory = Callable[..., "Emitter"]


def arithmetic_emitters() -> Mapping[str, type[Emitter]]:
    """The arithmetic emitters table of :mod:`snippets_x86_64.emitters.table` (op type name -> Emitter class)."""
    try:
        from snippets_x86_64.emitters.table import EMITTERS
    except ImportError as exc:  # a broken or partial install: the Subgraphs fall back to their references
        raise CodegenError(f"the x86-64 arithmetic emitter table cannot be imported: {exc}") from exc
    return EMITTERS


def arithmetic_precisions() -> Callable[[Node], Sequence[tuple[ElementType, ...]]]:
    """Input element types the arithmetic emitters take, per node (for PropagatePrecision and the jitters)."""
    from snippets_x86_64.emitters.table import supported_precisions

    return supported_precisions


#: ops whose own semantics PropagatePrecision may change the type of: they convert by definition
_CONVERTS = frozenset({"Convert", "ConvertSaturation", "ConvertTruncation"})
_WIDE_INT = (ElementType.i32, ElementType.boolean)
#: reductions ReduceDecomposition lowers into f32 accumulations (they have no emitter of their own)
_LOWERED_REDUCTIONS = frozenset({"SnippetsReduceMax", "SnippetsReduceSum"})
_NARROW_FLOATS = (ElementType.bf16, ElementType.f16)

#: narrow integer types the i32 emitters compute on -> (bits, signed). In a register such a value is its i32
#: form, sign- or zero-extended, so it is always within its type's range; ops that keep that range need nothing
#: more, the others wrap their i32 result back into it (see :class:`WrapNarrowEmitter`).
NARROW_INTS: dict[ElementType, tuple[int, bool]] = {
    ElementType.i8: (8, True),
    ElementType.u8: (8, False),
    ElementType.i16: (16, True),
    ElementType.u16: (16, False),
}
#: ops whose i32 emitter gives numpy's result on narrow integers (in range), and whether that i32 result can
#: leave the type's range (True: numpy wraps around, e.g. ``i8 100 + 100 == -56``, ``i8 -128 / -1 == -128``,
#: ``abs(i8 -128) == -128``; the i32 result is wrapped back). Checked bit for bit against numpy over every
#: pair of i8/u8 values (targets/x86_64/tests/test_narrow_int.py).
NARROW_OPS: dict[str, bool] = {
    "Add": True,
    "Subtract": True,
    "Multiply": True,
    "Divide": True,
    "SquaredDifference": True,
    "PRelu": True,
    "Negative": True,
    "Abs": True,
    "Maximum": False,
    "Minimum": False,
    "FloorMod": False,
    "Mod": False,
    "Relu": False,
    "Sign": False,
    "Select": False,
    "Equal": False,
    "NotEqual": False,
    "Greater": False,
    "GreaterEqual": False,
    "Less": False,
    "LessEqual": False,
}


def _narrow_combos(node: Node, supported: Sequence[tuple[ElementType, ...]]) -> list[tuple[ElementType, ...]]:
    """The narrow-integer forms of the i32 combinations of ``supported`` that match ``node``'s input types
    (Select: (boolean, i8, i8) from (boolean, i32, i32)); empty for ops outside :data:`NARROW_OPS`."""
    if node.type_name not in NARROW_OPS:
        return []
    types = tuple(inp.element_type for inp in node.inputs)
    narrow = [t for t in types if t in NARROW_INTS]
    if not narrow or any(t != narrow[0] for t in narrow):
        return []
    out = []
    for combo in supported:
        if ElementType.i32 in combo:
            candidate = tuple(narrow[0] if t == ElementType.i32 else t for t in combo)
            if candidate == types:
                out.append(candidate)
    return out


def jitter_precisions(node: Node) -> Sequence[tuple[ElementType, ...]]:
    """Input element types an arithmetic emitter takes in the kernel: the table's, plus the narrow integers
    of :data:`NARROW_OPS` (computed in their i32 form)."""
    supported = list(arithmetic_precisions()(node))
    return supported + _narrow_combos(node, supported)


def propagation_precisions(node: Node) -> Sequence[tuple[ElementType, ...]]:
    """The table PropagatePrecision gets: the emitters' precisions, except where its conversions would change
    the result. It wraps an op in ``ConvertSaturation`` s; numpy (the reference) wraps narrow integers on
    overflow instead of saturating, and integer division truncates where a float division converted back
    rounds. Ops of :data:`NARROW_OPS` on narrow integers get exactly their input types (nothing is converted:
    the kernel computes them in i32 and wraps like numpy); other ops on narrow integers get no entry ("leave
    it"), so the jitters' own check keeps them off this target and the Subgraph falls back to its reference
    instead of computing something else."""
    supported = arithmetic_precisions()(node)
    if node.type_name in _LOWERED_REDUCTIONS and node.inputs and node.inputs[0].element_type in _NARROW_FLOATS:
        # decomposed in the LinearIR into Fill/Maximum/HorizonMax on f32 lanes: a bf16/f16 row reduces in f32
        return [(ElementType.f32,)]
    if node.type_name in _CONVERTS or not supported:
        return supported
    types = [inp.element_type for inp in node.inputs]
    ints = [t for t in types if not t.is_real]
    if any(t not in _WIDE_INT for t in ints):
        # offered only when the inputs already are narrow: a ConvertSaturation(i8 -> f32) input that
        # PropagatePrecision drops before choosing makes the op i32 (exact), never i8 (wrapping)
        return _narrow_combos(node, supported)
    if ints and not any(all(not t.is_real for t in combo) for combo in supported):
        return []  # integers would be computed in float (Divide, FloorMod, ...)
    return supported


class WrapNarrowEmitter(Emitter):
    """An arithmetic emitter of a narrow-integer op whose i32 result can leave the type's range (see
    :data:`NARROW_OPS`), followed by the wrap back into it: the low bits, sign- or zero-extended again
    (``vpslld`` + ``vpsrad``/``vpsrld``), numpy's wrap-around. Consumers in registers (comparisons, min/max,
    division, converts) rely on narrow values being in range; a Store alone would not need it (it truncates),
    so an op whose only consumers are Stores is not wrapped (see :meth:`X86_64TargetMachine._bind`)."""

    def __init__(self, inner: Emitter, bits: int, signed: bool) -> None:
        super().__init__(inner.expr)
        self.inner = inner
        self.shift = 32 - bits
        self.signed = signed
        self.aux_gprs, self.aux_vecs, self.aux_masks = inner.aux_gprs, inner.aux_vecs, inner.aux_masks  # type: ignore[misc]

    def emit_code(self, in_regs: list[Any], out_regs: list[Any], aux: Any = None) -> Any:
        a = self.inner.emit_code(in_regs, out_regs, aux)
        dst = ZMM[int(out_regs[0].idx) if hasattr(out_regs[0], "idx") else int(out_regs[0])]
        a.vpslld(dst, dst, self.shift)
        if self.signed:
            a.vpsrad(dst, dst, self.shift)
        else:
            a.vpsrld(dst, dst, self.shift)
        return a

    def emit_data(self) -> None:
        self.inner.emit_data()


def _wrapped(build: Callable[[Expression], Emitter]) -> Callable[[Expression], Emitter]:
    """``build`` followed, where needed, by the wrap of a narrow-integer result (:class:`WrapNarrowEmitter`)."""

    def factory(expr: Expression) -> Emitter:
        emitter = build(expr)
        out = expr.node.outputs[0].element_type if expr.node.outputs else None
        if out not in NARROW_INTS or not NARROW_OPS.get(expr.type_name, False):
            return emitter
        consumers = expr.output_connectors[0].get_consumers()
        if consumers and all(c.expr.type_name == "Store" for c in consumers):
            return emitter  # the Store keeps the low bits: the same bytes
        bits, signed = NARROW_INTS[out]  # type: ignore[index]
        return WrapNarrowEmitter(emitter, bits, signed)

    return factory


class X86_64TargetMachine(TargetMachine):
    """The x86-64 AVX-512 TargetMachine (see the module docstring)."""

    name = "x86_64_avx512"

    def __init__(
        self, plugin_emitters: Mapping[str, Any] | None = None, arithmetic: Mapping[str, EmitterFactory] | None = None
    ) -> None:
        super().__init__()
        if arithmetic is None:
            arithmetic, precisions = arithmetic_emitters(), jitter_precisions
        else:
            precisions = None
        rows: dict[str, Jitter] = {}
        for op, factory in arithmetic.items():
            checked = (lambda expr: precisions(expr.node)) if precisions is not None else (lambda expr: ())
            rows[op] = Jitter(_wrapped(self._bind(factory)), checked)
        for op, cls in CONTROL_EMITTERS.items():
            rows[op] = Jitter(self._bind(cls))
        for op, factory in (plugin_emitters or {}).items():
            rows[op] = factory if isinstance(factory, Jitter) else Jitter(self._bind(factory))
        if "Fill" in rows:  # a Fill of a tail of dynamic size reads its mask from the runtime-parameter block
            static_fill = rows["Fill"]
            rows["Fill"] = Jitter(
                lambda expr: TailFillEmitter(expr, self) if is_dynamic(expr.node.offset) else static_fill.factory(expr),
                static_fill.supported_precisions,
            )
        self.jitters.update((op, rows[op]) for op in sorted(rows))
        self.asm: Function = self.new_function()
        self._new_runtime_params()
        from snippets_x86_64.cpu import cpu_features

        #: CPUID features of this machine (emitters choose instructions by them)
        self.cpu_features: frozenset[str] = cpu_features()

    def _bind(self, factory: EmitterFactory) -> Callable[[Expression], Emitter]:
        """``factory(expr, self)``; Emitter classes of the arithmetic table (which are not JitEmitters) are
        built on the kernel's Assembler instead: ``cls(expr, self.asm)``."""
        if isinstance(factory, type) and issubclass(factory, Emitter) and not issubclass(factory, JitEmitter):
            return lambda expr: factory(expr, self.asm)
        return lambda expr: factory(expr, self)

    # --- machine facts ------------------------------------------------------------------------------------------
    def lanes(self, element_type: ElementType) -> int:
        """16 for every element type: each lane is 32 bits, narrower types are widened by the Loads."""
        return LANES

    def reg_pool(self, reg_type: RegType) -> tuple[int, ...]:
        if reg_type == RegType.gpr:
            return tuple(r.number for r in GPR_ORDER)
        if reg_type == RegType.vec:
            return tuple(range(32))
        if reg_type == RegType.mask:
            return tuple(range(1, 8))
        return ()

    def is_supported(self) -> bool:
        from snippets_x86_64.cpu import missing_features

        return not missing_features()

    # --- code generation ----------------------------------------------------------------------------------------
    @staticmethod
    def new_function() -> Function:
        return Function("kernel", args=KERNEL_ARGS)

    def make_kernel_emitter(self, ir: LinearIR, compile_params: Any = None) -> X86_64KernelEmitter:
        from snippets_x86_64.kernel import X86_64KernelEmitter

        return X86_64KernelEmitter(ir, self, compile_params)

    def get_snippet(self, kernel_emitter: KernelEmitter) -> Kernel:
        from snippets_x86_64.kernel import X86_64KernelEmitter

        assert isinstance(kernel_emitter, X86_64KernelEmitter)
        kernel = kernel_emitter.kernel
        self.asm = self.new_function()
        self._new_runtime_params()
        return kernel

    # --- runtime parameters (a kernel lowered for every shape) -----------------------------------------------
    def _new_runtime_params(self) -> None:
        from snippets_core.codegen.runtime_params import RuntimeParams

        #: the dynamic values of the kernel being built (snippets_core.codegen.runtime_params)
        self.runtime_params = RuntimeParams()
        #: slot index -> the stack slot the kernel prologue copies it to (emitters address it there)
        self.runtime_slots: dict[int, Mem] = {}

    def runtime_value(self, name: str, value: Any) -> Any:
        """``value`` itself when static (an immediate), else the qword stack slot holding it at run time."""
        from snippets_core.lowered.symbolic import is_dynamic

        if not is_dynamic(value):
            return value
        k = self.runtime_params.add(name, value)
        slot = self.runtime_slots.get(k)
        if slot is None:
            slot = self.runtime_slots[k] = qword[self.asm.stack_slot(8)]
        return slot

    # --- spill helpers (RegSpill and the KernelEmitter's aux spills) -------------------------------------------
    @staticmethod
    def save(a: Function, reg: GpReg | VecReg, slot: Mem) -> None:
        if reg.kind == "vec":
            a.vmovups(slot, reg.zmm)
        else:
            a.mov(slot, reg)

    @staticmethod
    def restore(a: Function, reg: GpReg | VecReg, slot: Mem) -> None:
        if reg.kind == "vec":
            a.vmovups(reg.zmm, slot)
        else:
            a.mov(reg, slot)

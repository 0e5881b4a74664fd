"""The x86-64 KernelEmitter, the kernel ABI, the Kernel object and the harness that runs a chunk of the domain.

Kernel ABI (System V)::

    struct call_args {                    // one int64/pointer slot each
        void* data_ptrs[n_inputs + n_outputs];   // inputs then outputs, in the Subgraph's order
        void* buffer_scratchpad_ptr;             // this thread's scratchpad (absent when no Buffer)
    };
    void kernel(const call_args* args, const int64_t* indexes);

``indexes`` holds one index per dim of the parallel domain (the master shape without the last
``loop_depth`` dims). The prologue loads each data pointer and moves it by ``data_offsets[i][j] *
indexes[j]`` bytes for every domain dim ``j`` that is not 1 (and where the tensor is not broadcast); every
Buffer register group starts at the scratchpad pointer (buffers add their compiled offsets). Then comes the
body, expression by expression, then the Function's epilogue.

The harness ``void harness(kernel, const call_args*, const int64_t* start, int64_t count)`` calls the kernel
``count`` times from the multi-index ``start`` on, stepping the multi-index in row-major order (an odometer
unrolled over the domain dims), so one ctypes call (which releases the GIL) runs a whole chunk.
"""

from __future__ import annotations

import ctypes
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from snippets_core.codegen.emitter import KernelEmitter
from snippets_core.errors import CodegenError
from snippets_core.lowered.port_descriptor import Reg, RegType
from snippets_core.lowered.symbolic import is_dynamic
from snippets_x86_64.asm import GP64, ZMM, Function, K, qword, r12, r13, r14, rbx, rdi, rsi
from snippets_x86_64 import unroll
from snippets_x86_64.jit import JitFunction
from snippets_x86_64.jit_emitter import AuxRegs, JitEmitter, to_asm

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR
    from snippets_x86_64.asm import Mem
    from snippets_x86_64.target_machine import X86_64TargetMachine


def live_across(ir: LinearIR, always: set[Reg]) -> list[frozenset[Reg]]:
    """For each expression, the registers whose values must survive it (defined before, read after).

    A value read inside a loop that does not contain its definition stays live to that loop's end (every
    iteration reads it). ``always`` (the data pointers) is live everywhere.
    """
    exprs = ir.exprs
    pos = {id(e): i for i, e in enumerate(exprs)}
    loops = []
    for i, e in enumerate(exprs):
        if e.type_name == "LoopEnd":
            loops.append((pos[id(e.input_connectors[-1].source.expr)], i))
    intervals: list[tuple[int, int, Reg]] = []
    for d, e in enumerate(exprs):
        for j, conn in enumerate(e.output_connectors):
            reg = e.output_descs[j].reg
            if reg is None or reg in always:
                continue
            end = d
            for c in conn.get_consumers():
                u = pos[id(c.expr)]
                end = max(end, u)
                for b, le in loops:
                    if d < b < u <= le:
                        end = max(end, le)
            intervals.append((d, end, reg))
    live: list[frozenset[Reg]] = []
    for i in range(len(exprs)):
        live.append(frozenset(always) | frozenset(r for d, end, r in intervals if d < i < end))
    return live


@dataclass(frozen=True)
class KernelInfo:
    """What the host needs to call a kernel (JSON-serializable, stored with the code in the disk cache).

    A kernel lowered for every shape has a runtime-parameter block (``runtime_params``: per slot its names and
    expression, see snippets_core.codegen.runtime_params) read from the call arguments after the scratchpad
    pointer; ``domain_slots[j]`` is the slot of parallel-domain dim ``j`` when it is dynamic (-1 otherwise, and
    ``parallel_domain[j]`` holds it); ``input_dims``/``output_dims`` are the kernel's tensor dims, a dynamic dim
    as its expression (what the RuntimeConfigurator binds and evaluates)."""

    n_inputs: int
    n_outputs: int
    parallel_domain: tuple[int, ...]
    scratchpad_size: int
    has_scratchpad: bool
    runtime_params: tuple[tuple[str, str], ...] = ()
    domain_slots: tuple[int, ...] = ()
    input_dims: tuple[tuple[int | str, ...], ...] = ()
    output_dims: tuple[tuple[int | str, ...], ...] = ()
    #: the slot of a scratchpad size known only at run time (-1: ``scratchpad_size`` is it)
    scratchpad_slot: int = -1

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> KernelInfo:
        def dims(rows: Any) -> tuple[tuple[int | str, ...], ...]:
            return tuple(tuple(x if isinstance(x, str) else int(x) for x in r) for r in rows)

        return KernelInfo(
            int(d["n_inputs"]),
            int(d["n_outputs"]),
            tuple(int(x) for x in d["parallel_domain"]),
            int(d["scratchpad_size"]),
            bool(d["has_scratchpad"]),
            tuple((str(n), str(c)) for n, c in d.get("runtime_params", ())),
            tuple(int(x) for x in d.get("domain_slots", ())),
            dims(d.get("input_dims", ())),
            dims(d.get("output_dims", ())),
            int(d.get("scratchpad_slot", -1)),
        )

    @property
    def is_dynamic(self) -> bool:
        return bool(self.runtime_params)

    @property
    def params_base(self) -> int:
        """The call-argument slot of the first runtime parameter."""
        return self.n_inputs + self.n_outputs + (1 if self.has_scratchpad else 0)

    @property
    def call_args_len(self) -> int:
        return self.params_base + len(self.runtime_params)

    def domain_codes(self) -> tuple[int | str, ...]:
        """Per parallel-domain dim: its size, or the expression of its slot."""
        slots = self.domain_slots or (-1,) * len(self.parallel_domain)
        return tuple(self.runtime_params[k][1] if k >= 0 else d for d, k in zip(self.parallel_domain, slots))


class Kernel:
    """A compiled kernel: its machine code in executable memory, the harness, and the calling metadata."""

    def __init__(self, code: bytes, code_size: int, info: KernelInfo, lir_text: str | None = None) -> None:
        self.code = bytes(code)
        self.code_size = code_size
        self.info = info
        #: the final LinearIR the kernel was generated from (``snippets inspect --lir``), as text
        self.lir_text = lir_text
        #: the kernel cache key it is stored under (set by the runtime)
        self.cache_key: str | None = None
        self.fn = JitFunction(self.code, None, (ctypes.c_void_p, ctypes.c_void_p), name="kernel", code_size=code_size)
        self.harness = harness_for(info.parallel_domain, info.domain_slots, info.params_base)

    @property
    def address(self) -> int:
        return self.fn.address

    def disassemble(self) -> str:
        """The kernel's machine code decoded by iced (Intel syntax)."""
        return self.fn.disassemble()

    def close(self) -> None:
        self.fn.close()


# --- the KernelEmitter -----------------------------------------------------------------------------------------


class X86_64KernelEmitter(KernelEmitter):
    """Emits the prologue (data pointers), every expression with its aux registers, and finishes the Kernel."""

    def __init__(self, ir: LinearIR, h: X86_64TargetMachine, compile_params: Any = None) -> None:
        super().__init__(ir, compile_params)
        self.h = h
        self.kernel: Kernel | None = None
        self._slots: dict[str, list[Mem]] = {"gpr": [], "vec": []}

    def emit_code(self, in_regs: Any = None, out_regs: Any = None, aux: Any = None) -> None:  # type: ignore[override]
        a = self.h.asm
        ptr_regs = self._check_pointers()
        self._prologue(a, ptr_regs)
        live = live_across(self.ir, set(ptr_regs))
        for i, e in enumerate(self.ir.exprs):
            em = e.emitter
            needs = em.aux_needs() if hasattr(em, "aux_needs") else (em.aux_gprs, em.aux_vecs, em.aux_masks)
            own = {r for r in e.in_regs + e.out_regs if r is not None}
            aux_regs, spills = self._aux(needs, live[i], own, e)
            for reg, slot in spills:
                self.h.save(a, reg, slot)
            if isinstance(em, JitEmitter):
                em.emit_code(e.in_regs, e.out_regs, aux_regs)
            else:  # the arithmetic table's emitters take aux register numbers by class
                numbers = {
                    "gpr": [r.number for r in aux_regs.gprs],
                    "vec": [r.number for r in aux_regs.vecs],
                    "mask": [r.number for r in aux_regs.masks],
                }
                em.emit_code(e.in_regs, e.out_regs, numbers)
            for reg, slot in reversed(spills):
                self.h.restore(a, reg, slot)
        if unroll.ENABLED:  # two iterations of each innermost straight-line loop side by side (unroll.py)
            unroll.unroll_inner_loops(a)
        code, code_size = a.assemble()
        params = self.h.runtime_params
        domain_slots = tuple(params.add(f"domain[{j}]", d) if is_dynamic(d) else -1
                             for j, d in enumerate(self.parallel_domain))
        # a scratchpad of a size known only at run time: the host reads it from the block (the kernel does not)
        scratchpad_slot = params.add("scratchpad_size", self.scratchpad_size) if is_dynamic(self.scratchpad_size) else -1
        dynamic = len(params) > 0
        info = KernelInfo(
            len(self.ir.parameters),
            len(self.ir.results),
            tuple(0 if is_dynamic(d) else d for d in self.parallel_domain),
            0 if scratchpad_slot >= 0 else int(self.scratchpad_size),
            bool(self.buffer_regs),
            params.layout(),
            domain_slots if dynamic else (),
            tuple(_dim_codes(p.output_descs[0].shape) for p in self.ir.parameters) if dynamic else (),
            tuple(_dim_codes(r.input_descs[0].shape) for r in self.ir.results) if dynamic else (),
            scratchpad_slot,
        )
        self.kernel = Kernel(code, code_size, info, self.ir.to_text())

    # --- prologue ----------------------------------------------------------------------------------------------
    def _check_pointers(self) -> list[Reg]:
        # inputs/outputs with layouts (PropagateLayout) come with planar data offsets from the core KernelEmitter
        regs = [r for r in self.data_ptr_regs if r is not None] + [r for r in self.buffer_regs if r is not None]
        if len(set(regs)) != len(regs):
            raise CodegenError(
                "two data pointers of the kernel share one register (an output that is also an "
                "input or another output); the x86-64 kernel ABI needs one pointer each"
            )
        banned = {rdi.number, rsi.number}
        if any(r.type != RegType.gpr or r.idx in banned for r in regs):
            raise CodegenError(f"{len(regs)} data pointers do not fit in the gprs the kernel prologue leaves free")
        return regs

    def _prologue(self, a: Function, ptr_regs: list[Reg]) -> None:
        taken = {r.idx for r in ptr_regs} | {rdi.number, rsi.number}
        tmp = next((GP64[n] for n in self.h.reg_pool(RegType.gpr) if n not in taken), None)
        call_args, indexes = a.args
        base = len(self.data_ptr_regs) + (1 if self.buffer_regs else 0)
        # the runtime parameters the body reads: from the call arguments to their stack slots (the body may use
        # every gpr, the call-arguments register included)
        for k, slot in sorted(self.h.runtime_slots.items()):
            if tmp is None:
                raise CodegenError("no scratch gpr left for the kernel prologue")
            a.mov(tmp, qword[call_args + 8 * (base + k)])
            a.mov(slot, tmp)
        for k, (reg, offsets) in enumerate(zip(self.data_ptr_regs, self.data_offsets)):
            if reg is None:
                continue
            ptr = GP64[reg.idx]
            a.mov(ptr, qword[call_args + 8 * k])
            for j, dim in enumerate(self.parallel_domain):
                off = offsets[j]
                if dim == 1 or off == 0:
                    continue
                if tmp is None:
                    raise CodegenError("no scratch gpr left for the kernel prologue")
                if is_dynamic(off):  # a stride known only at run time: from the block
                    slot = self.h.runtime_params.add(f"offset[{k}][{j}]", off)
                    a.mov(tmp, qword[indexes + 8 * j])
                    a.imul(tmp, qword[call_args + 8 * (base + slot)])
                elif -(2**31) <= off < 2**31:
                    a.imul(tmp, qword[indexes + 8 * j], off)
                else:
                    a.mov(tmp, off)
                    a.imul(tmp, qword[indexes + 8 * j])
                a.add(ptr, tmp)
        scratch = 8 * len(self.data_ptr_regs)
        for g, (reg, start) in enumerate(zip(self.buffer_regs, self.buffer_bases)):
            if reg is not None:
                a.mov(GP64[reg.idx], qword[call_args + scratch])
                if is_dynamic(start):  # the group's buffers sit at an offset known only at run time
                    slot = self.h.runtime_params.add(f"buffer_base[{g}]", start)
                    a.add(GP64[reg.idx], qword[call_args + 8 * (base + slot)])

    # --- aux registers ---------------------------------------------------------------------------------------
    def _slot(self, kind: str, n: int) -> Mem:
        slots = self._slots[kind]
        while len(slots) <= n:
            slots.append(self.h.asm.stack_slot(64 if kind == "vec" else 8))
        return slots[n]

    def _aux(
        self, needs: tuple[int, int, int], live: frozenset[Reg], own: set[Reg], expr: Any
    ) -> tuple[AuxRegs, list[tuple[Any, Mem]]]:
        n_gpr, n_vec, n_mask = needs
        spills: list[tuple[Any, Mem]] = []
        chosen: dict[RegType, list[int]] = {}
        for rtype, n, kind in ((RegType.gpr, n_gpr, "gpr"), (RegType.vec, n_vec, "vec")):
            pool = self.h.reg_pool(rtype)
            busy = {r.idx for r in live | own if r.type == rtype}
            free = [x for x in pool if x not in busy]
            if len(free) < n:
                # spill live values that this expression does not touch, restore them right after it
                owned = {r.idx for r in own if r.type == rtype}
                victims = [x for x in pool if x in busy and x not in owned][: n - len(free)]
                if len(free) + len(victims) < n:
                    raise CodegenError(
                        f"{expr.type_name} '{expr.name}' needs {n} aux {kind} registers; "
                        f"{len(free) + len(victims)} can be freed"
                    )
                for m, x in enumerate(victims):
                    spills.append((to_asm(Reg(rtype, x)), self._slot(kind, m)))
                free += victims
            chosen[rtype] = free[:n]
        if n_mask > 7:
            raise CodegenError(f"{expr.type_name} '{expr.name}' needs {n_mask} aux mask registers; k1..k7 exist")
        aux = AuxRegs(
            tuple(GP64[x] for x in chosen[RegType.gpr]),
            tuple(ZMM[x] for x in chosen[RegType.vec]),
            tuple(K[x] for x in range(1, 1 + n_mask)),
        )
        return aux, spills


# --- the harness -------------------------------------------------------------------------------------------------

_HARNESSES: dict[tuple[tuple[int, ...], tuple[int, ...], int], JitFunction] = {}


def build_harness(domain: tuple[int, ...], slots: tuple[int, ...] = (), base: int = 0) -> Function:
    """``harness(kernel, call_args, start, count)``: ``count`` kernel calls from multi-index ``start`` on. A dim
    with a runtime-parameter slot (``slots[d] >= 0``) is read from the call arguments (``base + slot``)."""
    fn = Function("harness", args=("kernel", "call_args", "start", "count"))
    kernel, call_args, start, count = fn.args
    nd = max(len(domain), 1)
    idx = fn.stack_slot(8 * nd, align=8)
    # callee-saved registers survive the kernel calls
    a = fn
    a.mov(rbx, kernel)
    a.mov(r12, call_args)
    a.mov(r13, count)
    for d in range(nd):
        if d < len(domain):
            a.mov(r14, qword[start + 8 * d])
        else:
            a.xor(r14.r32, r14.r32)
        a.mov(qword[idx + 8 * d], r14)
    a.test(r13, r13)
    a.jz(fn.exit)
    loop = a.label("harness.loop")
    a.mov(rdi, r12)
    a.lea(rsi, idx)
    a.call(rbx)
    stepped = a.new_label("harness.stepped")
    for d in reversed(range(len(domain))):
        slot = qword[idx + 8 * d]
        a.inc(slot)
        if d == 0:
            break  # the outermost dim never wraps within the chunk
        if slots and slots[d] >= 0:
            a.mov(r14, qword[r12 + 8 * (base + slots[d])])
            a.cmp(slot, r14)
        else:
            a.cmp(slot, domain[d])
        a.jl(stepped)
        a.mov(slot, 0)
    a.bind(stepped)
    a.dec(r13)
    a.jnz(loop)
    return fn


def harness_for(domain: tuple[int, ...], slots: tuple[int, ...] = (), base: int = 0) -> JitFunction:
    """The harness JIT function for a parallel domain (one per distinct domain, shared by kernels)."""
    key = (domain, slots, base if slots else 0)
    fn = _HARNESSES.get(key)
    if fn is None:
        fn = build_harness(domain, slots, base).finalize(
            None, (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
        )
        _HARNESSES[key] = fn
    return fn


def _dim_codes(shape: tuple[Any, ...]) -> tuple[int | str, ...]:
    return tuple(d.code() if is_dynamic(d) else int(d) for d in shape)

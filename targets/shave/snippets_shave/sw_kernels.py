"""SW kernels: the SHVX kernels of the ops the compiler runs as their own ACT SHAVE layer (not fused).

The real compiler runs Softmax, Gelu, MVN, Select, comparisons, reductions and Transpose as `VPU.SW` kernels
of a library. These are their model-ISA versions, generated per (op, element types, access modes) by three
families, each a loop nest whose sizes and strides come from the per-layer params struct (docs/kernel_abi.md,
"SW kernels"), and whose constant tables (erf coefficients, log2 e, ...) live in `.rodata`:

* :func:`map_kernel` - an eltwise op over a 4-D index space (the output's dims after merging), every operand
  with its own byte strides: broadcasting (stride 0), Transpose (permuted strides), boolean masks (u8);
* :func:`axis_kernel` - Softmax and the reductions over a ``[outer, n, inner]`` view (any axis: the
  reduced axis is the middle one, 4 ``inner`` columns per vector);
* :func:`norm_kernel` - MVN / LayerNorm over contiguous rows (mean and variance of the last axes).

All arithmetic runs on f32 lanes: f16 data is widened on load (exact) and rounded once on store.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from snippets_shave.abi import MEMREF_SIZE, ParamsLayout
from snippets_shave.asm import Assembler, SReg, VReg
from snippets_shave.constants import WIN_D
from snippets_shave.elf import write_kernel_elf
from snippets_shave.isa import pack_f32

#: element type name -> bytes; "u8" holds booleans (0/1), read as "lane != 0"
ITEMSIZE = {"f32": 4, "f16": 2, "u8": 1}
#: the erfc(z) = t * exp(-z^2 + P(t)) fit of Numerical Recipes (erfcc), t = 1 / (1 + z / 2): fractional
#: error below 1.2e-7 for every z >= 0; P's coefficients from the highest power down
ERFC_COEFFS = (
    0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807,
    -0.18628806, 0.09678418, 0.37409196, 1.00002368, -1.26551223,
)  # fmt: skip
#: erf(x) = x * S(x^2) for |x| < 0.5 (Maclaurin series, 2/sqrt(pi) folded in; next term 2.6e-8 relative):
#: 1 - erfc(x) loses the relative accuracy of erf near 0. S's coefficients from the highest power down
ERF_SERIES = tuple(
    2 / math.sqrt(math.pi) * (-1) ** k / (math.factorial(k) * (2 * k + 1)) for k in range(5, -1, -1)
)
#: every constant a SW kernel may need, by name; a kernel's .rodata holds the ones it uses, in this order
CONSTANTS: dict[str, float] = {
    "zero": 0.0,
    "one": 1.0,
    "two": 2.0,
    "half": 0.5,
    "log2e": math.log2(math.e),
    "ln2": math.log(2.0),
    "neg_inf": -math.inf,
    "pos_inf": math.inf,
    "rsqrt2": 1.0 / math.sqrt(2.0),
    "gelu_k": math.sqrt(2.0 / math.pi),
    "gelu_c": 0.044715,
    **{f"erfc{i}": c for i, c in enumerate(ERFC_COEFFS)},
    **{f"erfs{i}": c for i, c in enumerate(ERF_SERIES)},
    "erf_small": 0.5,
}
_FIRST_CONST = 16  # resident constants live in v16..v29, the others pass through v30/v31

# scalar registers shared by the three families
r0 = SReg(0)
_RO, _CNT, _FOUR, _T0, _T1, _T2 = SReg(27), SReg(18), SReg(19), SReg(20), SReg(21), SReg(22)
_TMP = VReg(5)  # the narrow (f16) half of a load or store


class Consts:
    """The kernel's `.rodata` constants: the first 14 are broadcast into v16..v29 once at entry, the others are
    loaded from `.rodata` (r27 holds its address) into v30/v31, in turn, where an instruction reads them."""

    RESIDENT = 14

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.asm: Assembler | None = None
        self._turn = 0

    def __call__(self, name: str) -> VReg:
        i = self.names.index(name)
        if i < self.RESIDENT:
            return VReg(_FIRST_CONST + i)
        assert self.asm is not None
        reg = VReg(30 + self._turn)
        self._turn ^= 1
        self.asm.LD32(_T0, _RO, 4 * i)
        self.asm.VBCAST(reg, _T0, t="f32")
        return reg

    @property
    def rodata(self) -> bytes:
        return b"".join(pack_f32(CONSTANTS[n]).to_bytes(4, "little") for n in self.names)


def _assemble(name: str, layout: ParamsLayout, consts: Consts, emit: Callable[[Assembler], None]) -> bytes:
    """The ELF of ``emit``'s code after a prologue that broadcasts the `.rodata` constants. The code is
    assembled twice: `.rodata` follows `.text`, so its address is known once the text's length is."""
    rodata_addr = 0
    for _ in range(2):
        a = Assembler()
        consts.asm = a
        if consts.names:
            a.MOVI(_RO, rodata_addr)
            for i, n in enumerate(consts.names[: consts.RESIDENT]):
                a.LD32(_T0, _RO, 4 * i)
                a.VBCAST(consts(n), _T0, t="f32")
        emit(a)
        text = a.assemble()
        rodata_addr = WIN_D + (len(text) + 15) // 16 * 16
    return write_kernel_elf(
        name,
        text,
        rodata=consts.rodata,
        params_signature=layout.signature,
        params_size=layout.size,
        labels=a.labels,
    )


def vload(a: Assembler, dst: VReg, ptr: SReg, t: str) -> None:
    """Lanes [0, cnt) of ``dst`` (as f32) from dense ``t`` data at ``ptr``."""
    if t == "f32":
        a.VLDN(dst, ptr, 0, _CNT, t="f32")
    else:
        a.VLDN(_TMP, ptr, 0, _CNT, t="f16")
        a.VCVT(dst, _TMP, "f16", 0, t="f32")


def vstore(a: Assembler, src: VReg, ptr: SReg, t: str) -> None:
    """Lanes [0, cnt) of the f32 ``src`` to dense ``t`` data at ``ptr`` (rounded once to f16)."""
    if t == "f32":
        a.VSTN(src, ptr, 0, _CNT, t="f32")
    else:
        a.VCVT(_TMP, src, "f32", 0, t="f16")
        a.VSTN(_TMP, ptr, 0, _CNT, t="f16")


def _min_cnt(a: Assembler, total: SReg, done: SReg) -> None:
    """cnt = min(4, total - done): the lanes of this step (a tail is a partial VLDN/VSTN)."""
    a.SUB(_CNT, total, done)
    a.MIN(_CNT, _CNT, _FOUR)


# --- map: eltwise over a strided 4-D index space -----------------------------------------------------------

Body = Callable[[Assembler, list[VReg], VReg, Consts], None]


def _erfc_parts(a: Assembler, x: VReg, c: Consts) -> tuple[VReg, VReg]:
    """(erfc(|x|), mask of x >= 0) in v12 / v13; uses v9..v13."""
    z, t, p, e, m = VReg(9), VReg(10), VReg(11), VReg(12), VReg(13)
    a.VABS(z, x, t="f32")
    a.VFMA(t, z, c("half"), c("one"), t="f32")
    a.VRCP(t, t, t="f32")
    a.VMOV(p, c("erfc0"), t="f32")
    for i in range(1, len(ERFC_COEFFS)):
        a.VFMA(p, p, t, c(f"erfc{i}"), t="f32")
    a.VNEG(e, z, t="f32")
    a.VFMA(p, e, z, p, t="f32")  # -z^2 + P(t)
    a.VMUL(p, p, c("log2e"), t="f32")
    a.VEXP2(p, p, t="f32")
    a.VMUL(e, t, p, t="f32")
    a.VCMPGE(m, x, c("zero"), t="f32")
    return e, m


def _erf(a: Assembler, ins: list[VReg], out: VReg, c: Consts) -> None:
    x, s, x2 = ins[0], VReg(8), VReg(7)
    e, m = _erfc_parts(a, x, c)
    a.VSUB(e, c("one"), e, t="f32")  # erf(|x|)
    a.VNEG(VReg(14), e, t="f32")
    a.VSEL(out, e, VReg(14), m, t="i32")
    a.VMUL(x2, x, x, t="f32")
    a.VMOV(s, c("erfs0"), t="f32")
    for i in range(1, len(ERF_SERIES)):
        a.VFMA(s, s, x2, c(f"erfs{i}"), t="f32")
    a.VMUL(s, s, x, t="f32")
    a.VABS(x2, x, t="f32")
    a.VCMPGT(m, c("erf_small"), x2, t="f32")
    a.VSEL(out, s, out, m, t="i32")


def _gelu_erf(a: Assembler, ins: list[VReg], out: VReg, c: Consts) -> None:
    # 1 + erf(x / sqrt 2) is 2 - erfc(u) for u >= 0 and erfc(-u) below: no cancellation in the negative tail
    u = VReg(8)
    a.VMUL(u, ins[0], c("rsqrt2"), t="f32")
    e, m = _erfc_parts(a, u, c)
    a.VSUB(VReg(14), c("two"), e, t="f32")
    a.VSEL(e, VReg(14), e, m, t="i32")
    a.VMUL(e, e, c("half"), t="f32")
    a.VMUL(out, e, ins[0], t="f32")


def _gelu_tanh(a: Assembler, ins: list[VReg], out: VReg, c: Consts) -> None:
    # 0.5 x (1 + tanh u) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3)
    x, u = ins[0], VReg(8)
    a.VMUL(u, x, x, t="f32")
    a.VFMA(u, u, c("gelu_c"), c("one"), t="f32")
    a.VMUL(u, u, x, t="f32")
    a.VMUL(u, u, c("gelu_k"), t="f32")
    a.VMUL(u, u, c("log2e"), t="f32")
    a.VMUL(u, u, c("two"), t="f32")
    a.VNEG(u, u, t="f32")
    a.VEXP2(u, u, t="f32")
    a.VADD(u, u, c("one"), t="f32")
    a.VDIV(out, x, u, t="f32")


def _log(a: Assembler, ins: list[VReg], out: VReg, c: Consts) -> None:
    a.VLOG2(out, ins[0], t="f32")
    a.VMUL(out, out, c("ln2"), t="f32")


def _softplus(a: Assembler, ins: list[VReg], out: VReg, c: Consts) -> None:
    # max(x, 0) + log(1 + exp(-|x|)): exp never overflows
    x, e = ins[0], VReg(8)
    a.VABS(e, x, t="f32")
    a.VMUL(e, e, c("log2e"), t="f32")
    a.VNEG(e, e, t="f32")
    a.VEXP2(e, e, t="f32")
    a.VADD(e, e, c("one"), t="f32")
    a.VLOG2(e, e, t="f32")
    a.VMUL(e, e, c("ln2"), t="f32")
    a.VMAX(out, x, c("zero"), t="f32")
    a.VADD(out, out, e, t="f32")


def _copy(a: Assembler, ins: list[VReg], out: VReg, c: Consts) -> None:
    a.VMOV(out, ins[0], t="f32")


def _select(a: Assembler, ins: list[VReg], out: VReg, c: Consts) -> None:
    a.VSEL(out, ins[1], ins[2], ins[0], t="i32")


def _compare(mnemonic: str, swap: bool = False, invert: bool = False) -> Body:
    def body(a: Assembler, ins: list[VReg], out: VReg, c: Consts) -> None:
        x, y = (ins[1], ins[0]) if swap else (ins[0], ins[1])
        getattr(a, mnemonic)(out, x, y, t="f32")
        if invert:  # all-ones lanes become 0 and zero lanes all ones
            a.VCMPEQ(out, out, c("zero"), t="i32")

    return body


@dataclass(frozen=True)
class MapOp:
    """An eltwise SW op: its body on f32 (or mask) lanes and the constants it reads."""

    arity: int
    body: Body
    consts: tuple[str, ...] = ()


_ERFC = ("zero", "one", "half", "log2e", *(f"erfc{i}" for i in range(len(ERFC_COEFFS))))
MAP_OPS: dict[str, MapOp] = {
    "copy": MapOp(1, _copy),
    "erf": MapOp(1, _erf, (*_ERFC, "erf_small", *(f"erfs{i}" for i in range(len(ERF_SERIES))))),
    "gelu_erf": MapOp(1, _gelu_erf, (*_ERFC, "two", "rsqrt2")),
    "gelu_tanh": MapOp(1, _gelu_tanh, ("one", "two", "log2e", "gelu_k", "gelu_c")),
    "log": MapOp(1, _log, ("ln2",)),
    "softplus": MapOp(1, _softplus, ("zero", "one", "log2e", "ln2")),
    "select": MapOp(3, _select),
    "equal": MapOp(2, _compare("VCMPEQ")),
    "not_equal": MapOp(2, _compare("VCMPEQ", invert=True), ("zero",)),
    "greater": MapOp(2, _compare("VCMPGT")),
    "greater_equal": MapOp(2, _compare("VCMPGE")),
    "less": MapOp(2, _compare("VCMPGT", swap=True)),
    "less_equal": MapOp(2, _compare("VCMPGE", swap=True)),
}
#: ops whose output is a boolean mask
MASK_OPS = frozenset({"equal", "not_equal", "greater", "greater_equal", "less", "less_equal"})
MAP_RANK = 4


def map_layout(arity: int) -> ParamsLayout:
    """``ins..., output`` then the dims d0..d3 (d3 innermost) and every operand's byte strides per dim."""
    operands = arity + 1
    scalars = [(f"d{i}", "i") for i in range(MAP_RANK)]
    scalars += [(f"s{k}_{i}", "i") for k in range(operands) for i in range(MAP_RANK)]
    return ParamsLayout("MapParams", (*(f"input{k}" for k in range(arity)), "output"), tuple(scalars))


def _gather(a: Assembler, dst: VReg, ptr: SReg, stride: SReg, t: str, label: str) -> None:
    """Lanes [0, cnt) of ``dst`` from ``ptr`` with a byte ``stride`` (0: broadcast), one lane at a time;
    ``ptr`` ends ``cnt`` strides further."""
    lane_t = {"f32": "f32", "f16": "f16", "u8": "i32"}[t]
    into = _TMP if t == "f16" else dst
    load = {"f32": "LD32", "f16": "LD16U", "u8": "LD8U"}[t]
    for lane in range(4):
        if lane:
            a.MOVI(_T0, lane)
            a.BGE(_T0, _CNT, label)
        getattr(a, load)(_T1, ptr, 0)
        a.VINSERT(into, _T1, lane, t=lane_t)
        a.ADD(ptr, ptr, stride)
    a.label(label)
    if t == "f16":
        a.VCVT(dst, _TMP, "f16", 0, t="f32")


def _scatter(a: Assembler, src: VReg, ptr: SReg, stride: SReg, t: str, label: str) -> None:
    """Lanes [0, cnt) of ``src`` (f32, or a mask for u8: stored as 0/1) to ``ptr`` with a byte ``stride``."""
    if t == "f16":
        a.VCVT(_TMP, src, "f32", 0, t="f16")
    lane_t, src = {"f32": ("f32", src), "f16": ("f16", _TMP), "u8": ("i32", src)}[t]
    store = {"f32": "ST32", "f16": "ST16", "u8": "ST8"}[t]
    a.MOVI(_T2, 1)
    for lane in range(4):
        if lane:
            a.MOVI(_T0, lane)
            a.BGE(_T0, _CNT, label)
        a.VEXTRACT(_T1, src, lane, t=lane_t)
        if t == "u8":
            a.AND(_T1, _T1, _T2)
        getattr(a, store)(_T1, ptr, 0)
        a.ADD(ptr, ptr, stride)
    a.label(label)


def map_kernel(op: str, types: tuple[str, ...], gathered: tuple[bool, ...]) -> bytes:
    """The SW kernel of eltwise ``op``: ``types`` and ``gathered`` per operand (inputs, then the output).

    A gathered operand is read or written one lane at a time with its innermost stride (a broadcast, a
    transposed input, a boolean); the others are dense along d3 and move 4 lanes per step."""
    spec = MAP_OPS[op]
    operands = spec.arity + 1
    assert len(types) == len(gathered) == operands
    layout = map_layout(spec.arity)
    consts = Consts(list(spec.consts))
    dims = [SReg(2 + i) for i in range(MAP_RANK)]
    idx = [SReg(6 + i) for i in range(MAP_RANK)]
    ptrs = [SReg(10 + k) for k in range(operands)]
    inner = [SReg(14 + k) for k in range(operands)]

    def emit(a: Assembler) -> None:
        a.MOVI(_FOUR, 4)
        for i, d in enumerate(dims):
            a.LD64(d, r0, layout.offset_of(f"d{i}"))
        a.MOVI(idx[0], 0)
        a.label("l0")
        a.BGE(idx[0], dims[0], "done")
        a.MOVI(idx[1], 0)
        a.label("l1")
        a.BGE(idx[1], dims[1], "n0")
        a.MOVI(idx[2], 0)
        a.label("l2")
        a.BGE(idx[2], dims[2], "n1")
        for k in range(operands):  # ptr_k = data_k + i0*s0 + i1*s1 + i2*s2
            a.LD32(ptrs[k], r0, k * MEMREF_SIZE)
            for i in range(MAP_RANK - 1):
                a.LD64(_T0, r0, layout.offset_of(f"s{k}_{i}"))
                a.MUL(_T0, _T0, idx[i])
                a.ADD(ptrs[k], ptrs[k], _T0)
            if gathered[k]:
                a.LD64(inner[k], r0, layout.offset_of(f"s{k}_{MAP_RANK - 1}"))
        a.MOVI(idx[3], 0)
        a.label("l3")
        a.BGE(idx[3], dims[3], "n2")
        _min_cnt(a, dims[3], idx[3])
        ins = [VReg(k) for k in range(spec.arity)]
        for k, v in enumerate(ins):
            if gathered[k]:
                _gather(a, v, ptrs[k], inner[k], types[k], f"g{k}")
            else:
                vload(a, v, ptrs[k], types[k])
                a.ADDI(ptrs[k], ptrs[k], 4 * ITEMSIZE[types[k]])
        out = VReg(4)
        spec.body(a, ins, out, consts)
        if gathered[-1]:
            _scatter(a, out, ptrs[-1], inner[-1], types[-1], "st")
        else:
            vstore(a, out, ptrs[-1], types[-1])
            a.ADDI(ptrs[-1], ptrs[-1], 4 * ITEMSIZE[types[-1]])
        a.ADDI(idx[3], idx[3], 4)
        a.JMP("l3")
        for level in (2, 1, 0):
            a.label(f"n{level}")
            a.ADDI(idx[level], idx[level], 1)
            a.JMP(f"l{level}")
        a.label("done")
        a.RET()

    modes = "".join("g" if g else "v" for g in gathered)
    return _assemble(f"sw_{op}_{'_'.join(types)}_{modes}", layout, consts, emit)


# --- axis: softmax and reductions over [outer, n, inner] ---------------------------------------------------

AXIS_LAYOUT = ParamsLayout(
    "AxisParams", ("input", "output"), (("outer", "i"), ("n", "i"), ("inner", "i"), ("scale", "f"))
)
#: reduction -> (initial value, step mnemonic); mean multiplies by ``scale`` (1/n), l2 takes the sqrt
REDUCTIONS: dict[str, tuple[str, str]] = {
    "sum": ("zero", "VADD"),
    "mean": ("zero", "VADD"),
    "max": ("neg_inf", "VMAX"),
    "min": ("pos_inf", "VMIN"),
    "prod": ("one", "VMUL"),
    "l1": ("zero", "l1"),
    "l2": ("zero", "l2"),
    "sum_square": ("zero", "l2"),
}


def axis_kernel(kind: str, t_in: str, t_out: str) -> bytes:
    """Softmax (``kind == "softmax"``) or a reduction of :data:`REDUCTIONS` along the middle axis of
    ``[outer, n, inner]``; the output is ``[outer, n, inner]`` (softmax) or ``[outer, inner]``."""
    softmax = kind == "softmax"
    names = ["zero", "neg_inf", "log2e"] if softmax else sorted({REDUCTIONS[kind][0]})
    consts = Consts(names)
    outer, n, inner, o, i, k = (SReg(r) for r in (2, 3, 4, 5, 6, 7))
    row_in, row_out, p, q, rs_in, rs_out, col_in, col_out = (SReg(r) for r in range(8, 16))
    x, acc, total, scale, y = VReg(0), VReg(6), VReg(7), VReg(15), VReg(4)
    es_in, es_out = ITEMSIZE[t_in], ITEMSIZE[t_out]
    lay = AXIS_LAYOUT

    def rows(a: Assembler, name: str, body: Callable[[], None], out_too: bool = False) -> None:
        """for k in n: body() with p (and q) at row k of the current column block."""
        a.ADDI(p, col_in, 0)
        a.ADDI(q, col_out, 0)
        a.MOVI(k, 0)
        a.label(name)
        a.BGE(k, n, f"{name}_end")
        body()
        a.ADD(p, p, rs_in)
        if out_too:
            a.ADD(q, q, rs_out)
        a.ADDI(k, k, 1)
        a.JMP(name)
        a.label(f"{name}_end")

    def emit(a: Assembler) -> None:
        a.MOVI(_FOUR, 4)
        a.LD64(outer, r0, lay.offset_of("outer"))
        a.LD64(n, r0, lay.offset_of("n"))
        a.LD64(inner, r0, lay.offset_of("inner"))
        a.LD32(_T0, r0, lay.offset_of("scale"))
        a.VBCAST(scale, _T0, t="f32")
        a.LD32(row_in, r0, 0)
        a.LD32(row_out, r0, MEMREF_SIZE)
        a.MOVI(_T0, es_in)
        a.MUL(rs_in, inner, _T0)
        a.MOVI(_T0, es_out)
        a.MUL(rs_out, inner, _T0)
        a.MOVI(o, 0)
        a.label("outer")
        a.BGE(o, outer, "done")
        a.ADDI(col_in, row_in, 0)
        a.ADDI(col_out, row_out, 0)
        a.MOVI(i, 0)
        a.label("cols")
        a.BGE(i, inner, "cols_end")
        _min_cnt(a, inner, i)
        if softmax:
            a.VMOV(acc, consts("neg_inf"), t="f32")

            def run_max() -> None:
                vload(a, x, p, t_in)
                a.VMAX(acc, acc, x, t="f32")

            def exp_row() -> None:
                vload(a, x, p, t_in)
                a.VSUB(x, x, acc, t="f32")
                a.VMUL(x, x, consts("log2e"), t="f32")
                a.VEXP2(x, x, t="f32")

            def run_sum() -> None:
                exp_row()
                a.VADD(total, total, x, t="f32")

            def run_out() -> None:
                exp_row()
                a.VMUL(y, x, total, t="f32")
                vstore(a, y, q, t_out)

            rows(a, "max", run_max)
            a.VMOV(total, consts("zero"), t="f32")
            rows(a, "sum", run_sum)
            a.VRCP(total, total, t="f32")
            rows(a, "out", run_out, out_too=True)
        else:
            init, step = REDUCTIONS[kind]
            a.VMOV(acc, consts(init), t="f32")

            def run_reduce() -> None:
                vload(a, x, p, t_in)
                if step == "l1":
                    a.VABS(x, x, t="f32")
                    a.VADD(acc, acc, x, t="f32")
                elif step == "l2":
                    a.VFMA(acc, x, x, acc, t="f32")
                else:
                    getattr(a, step)(acc, acc, x, t="f32")

            rows(a, "red", run_reduce)
            if kind == "mean":
                a.VMUL(acc, acc, scale, t="f32")
            elif kind == "l2":
                a.VSQRT(acc, acc, t="f32")
            vstore(a, acc, col_out, t_out)
        a.ADDI(col_in, col_in, 4 * es_in)
        a.ADDI(col_out, col_out, 4 * es_out)
        a.ADDI(i, i, 4)
        a.JMP("cols")
        a.label("cols_end")
        a.MUL(_T0, rs_in, n)
        a.ADD(row_in, row_in, _T0)
        if softmax:
            a.MUL(_T0, rs_out, n)
            a.ADD(row_out, row_out, _T0)
        else:
            a.ADD(row_out, row_out, rs_out)
        a.ADDI(o, o, 1)
        a.JMP("outer")
        a.label("done")
        a.RET()

    return _assemble(f"sw_{kind}_{t_in}_{t_out}", lay, consts, emit)


# --- norm: MVN / LayerNorm over contiguous rows ------------------------------------------------------------


def norm_layout(scale: bool, bias: bool) -> ParamsLayout:
    """``input, [scale], [bias], output``; rows, row length, 1/n, eps, eps outside the sqrt, normalize variance."""
    memrefs = ("input", *(("scale",) if scale else ()), *(("bias",) if bias else ()), "output")
    scalars = (("outer", "i"), ("n", "i"), ("inv_n", "f"), ("eps", "f"), ("eps_outside", "b"), ("normalize", "b"))
    return ParamsLayout("MvnParams", memrefs, scalars)


def norm_kernel(t: str, scale: bool = False, bias: bool = False) -> bytes:
    """``(x - mean) * rstd [* scale] [+ bias]`` per row of ``n`` contiguous elements: mean, then the variance
    of ``x - mean`` (two passes, f32 lanes, tails masked out of the sums), then ``rstd = 1/sqrt(var + eps)``
    or ``1/(sqrt(var) + eps)`` (``eps_outside``), or 1 when ``normalize`` is 0. ``scale``/``bias`` are
    ``n``-element rows of type ``t`` shared by every row."""
    lay = norm_layout(scale, bias)
    consts = Consts(["zero", "one"])
    outer, n, o, j, row, p, ps, pb, q, stride = (SReg(r) for r in (2, 3, 4, 5, 6, 7, 8, 9, 10, 11))
    x, mask, mean, var, inv_n, eps, y, sv, bv = (VReg(r) for r in (0, 1, 6, 7, 14, 15, 4, 2, 3))
    es = ITEMSIZE[t]
    out_index = len(lay.memrefs) - 1

    def sweep(a: Assembler, name: str, body: Callable[[], None], affine: bool = False) -> None:
        a.ADDI(p, row, 0)
        a.MOVI(j, 0)
        if affine:
            a.MUL(_T0, o, stride)
            a.LD32(q, r0, out_index * MEMREF_SIZE)
            a.ADD(q, q, _T0)
            if scale:
                a.LD32(ps, r0, MEMREF_SIZE)
            if bias:
                a.LD32(pb, r0, (2 if scale else 1) * MEMREF_SIZE)
        a.label(name)
        a.BGE(j, n, f"{name}_end")
        _min_cnt(a, n, j)
        body()
        a.ADDI(p, p, 4 * es)
        for ptr, used in ((q, affine), (ps, affine and scale), (pb, affine and bias)):
            if used:
                a.ADDI(ptr, ptr, 4 * es)
        a.ADDI(j, j, 4)
        a.JMP(name)
        a.label(f"{name}_end")

    def masked_load(a: Assembler) -> None:
        vload(a, x, p, t)
        a.VMASKN(mask, _CNT, t="i32")
        a.VAND(x, x, mask, t="i32")

    def horizontal(a: Assembler, v: VReg) -> None:
        """v = broadcast(sum of v's lanes) / n."""
        a.VSUMX(v, v, t="f32")
        a.VEXTRACT(_T0, v, 0, t="f32")
        a.VBCAST(v, _T0, t="f32")
        a.VMUL(v, v, inv_n, t="f32")

    def emit(a: Assembler) -> None:
        a.MOVI(_FOUR, 4)
        a.LD64(outer, r0, lay.offset_of("outer"))
        a.LD64(n, r0, lay.offset_of("n"))
        for reg, field in ((inv_n, "inv_n"), (eps, "eps")):
            a.LD32(_T0, r0, lay.offset_of(field))
            a.VBCAST(reg, _T0, t="f32")
        a.MOVI(_T0, es)
        a.MUL(stride, n, _T0)
        a.LD32(row, r0, 0)
        a.MOVI(o, 0)
        a.label("rows")
        a.BGE(o, outer, "done")
        a.VMOV(mean, consts("zero"), t="f32")

        def add_x() -> None:
            masked_load(a)
            a.VADD(mean, mean, x, t="f32")

        sweep(a, "mean", add_x)
        horizontal(a, mean)
        a.LD64(_T1, r0, lay.offset_of("normalize"))
        a.VMOV(var, consts("one"), t="f32")
        a.BEQ(_T1, SReg(31), "scaled")  # r31 is 0 (the link register of a leaf kernel)
        a.VMOV(var, consts("zero"), t="f32")

        def add_sq() -> None:
            masked_load(a)
            a.VSUB(x, x, mean, t="f32")
            a.VAND(x, x, mask, t="i32")
            a.VFMA(var, x, x, var, t="f32")

        sweep(a, "var", add_sq)
        horizontal(a, var)
        a.LD64(_T1, r0, lay.offset_of("eps_outside"))
        a.BNE(_T1, SReg(31), "outside")
        a.VADD(var, var, eps, t="f32")
        a.VRSQRT(var, var, t="f32")
        a.JMP("scaled")
        a.label("outside")
        a.VSQRT(var, var, t="f32")
        a.VADD(var, var, eps, t="f32")
        a.VRCP(var, var, t="f32")
        a.label("scaled")

        def write() -> None:
            vload(a, x, p, t)
            a.VSUB(x, x, mean, t="f32")
            a.VMUL(y, x, var, t="f32")
            if scale:
                vload(a, sv, ps, t)
                a.VMUL(y, y, sv, t="f32")
            if bias:
                vload(a, bv, pb, t)
                a.VADD(y, y, bv, t="f32")
            vstore(a, y, q, t)

        sweep(a, "write", write, affine=True)
        a.ADD(row, row, stride)
        a.ADDI(o, o, 1)
        a.JMP("rows")
        a.label("done")
        a.RET()

    suffix = ("_scale" if scale else "") + ("_bias" if bias else "")
    return _assemble(f"sw_mvn_{t}{suffix}", lay, consts, emit)

"""BrgemmCopyB: a transposed B (Kᵀ in attention) repacked into planar rows inside the kernel.

The Brgemm micro-kernel reads B as contiguous rows of N. A B read through a Transpose that moves its innermost
dim (``Transpose(K, [0,1,3,2])``, the ``[0,2,3,1]`` of the ``[B,S,H,D]`` layout, a MatMul ``transpose_b``) has
its K dim innermost in memory instead, so the data-flow pass :class:`InsertBrgemmCopyB` puts a ``BrgemmCopyB``
between that input and the Brgemm (OpenVINO's ``BrgemmCopyB`` in its transposed mode, reference §5.3). Its
whole-matrix output goes to a Buffer of ``K x N`` f32 that the Brgemm reads planar. It sits outside the
blocking loops: the Brgemm's M loop (shared with Softmax and the second Brgemm) reuses the repacked matrix, so
each batch index (head) transposes its B once.

The emitter transposes 16 x 16 tiles in registers: 16 rows of 16 contiguous K values are loaded, transposed
with four stages of in-lane and cross-lane shuffles (``vunpcklps/vunpckhps``, ``vshufps``, ``vshuff32x4``
twice; 64 shuffles per tile) and stored as 16 rows of 16 N values. N tiles run in a counted loop (the N tail
stores masked, its missing rows are never stored), K tiles are unrolled (a K tail loads masked). A dynamic N (a
sequence length) reads its tile count, tail and output row stride from the runtime-parameter block: one kernel
for every length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from snippets_core.errors import CodegenError, ShapeInferenceError, UnsupportedByTarget
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node
from snippets_core.ir.ops.io import Constant
from snippets_core.ir.ops.snippets import MemoryAccess
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.shape import Shape
from snippets_core.lowered.brgemm_utils import _access
from snippets_core.lowered.port_descriptor import FULL_DIM, set_port_descriptor
from snippets_core.lowered.port_descriptor import RT_INFO_KEY as PORT_DESCRIPTORS
from snippets_core.lowered.symbolic import DynamicShapeError, is_dynamic, low_mask
from snippets_core.passes.graph_utils import body_of, make, nodes_of_type, replace_output
from snippets_core.passes.matmul_to_brgemm import init_brgemm_ports
from snippets_core.passes.pass_manager import Pass
from snippets_x86_64.asm import Assembler, word, yword
from snippets_x86_64.jit_emitter import AuxRegs, JitEmitter, lea_runtime

if TYPE_CHECKING:
    from snippets_core.lowered.expression import Expression
    from snippets_x86_64.target_machine import X86_64TargetMachine

LANES = 16
#: the element types BrgemmCopyB copies: f32, and bf16 (each row of 16 words widened to dwords for the dword
#: transpose and narrowed back, as the JIT Transpose's 2-byte tile kernel does)
COPY_TYPES = (ElementType.f32, ElementType.bf16)


class BrgemmCopyB(MemoryAccess, Node):
    """``y = transpose(x, layout)`` written planar: the B operand of a Brgemm repacked so that its rows (N) are
    contiguous. ``layout`` says how the stored input is read (planar dim ``i`` = stored dim ``layout[i]``)."""

    ATTRS = ("layout",)
    MEMORY_ACCESS_INPUTS = (0,)
    MEMORY_ACCESS_OUTPUTS = (0,)

    def __init__(self, x: object, *, layout: Sequence[int] = (), name: str | None = None) -> None:
        self.layout = tuple(int(v) for v in layout)
        super().__init__(x, name=name)  # type: ignore[arg-type]

    def infer(self) -> list[tuple[ElementType, Shape]]:
        if len(self.inputs) != 1:
            raise ShapeInferenceError(f"BrgemmCopyB '{self.name}' takes 1 input, got {len(self.inputs)}")
        et, shape = self.input_type(0), self.input_shape(0)
        if not self.layout or not shape.rank_is_static:
            return [(et, shape)]
        if sorted(self.layout) != list(range(shape.rank)):
            raise ShapeInferenceError(
                f"BrgemmCopyB '{self.name}': layout {list(self.layout)} is not a permutation of {shape.rank} dims"
            )
        return [(et, Shape([shape.sym(o) for o in self.layout]))]

    def evaluate(self, x: np.ndarray) -> list[np.ndarray]:
        return [np.ascontiguousarray(np.transpose(x, self.layout) if self.layout else x)]


def _compose(outer: tuple[int, ...], inner: Sequence[int]) -> tuple[int, ...]:
    """The read order through a Transpose (``inner``) and then a Brgemm layout (``outer``)."""
    return tuple(inner) if not outer else tuple(inner[o] for o in outer)


def _constant_order(node: Node) -> list[int] | None:
    if node.type_name != "Transpose" or not isinstance(node.inputs[1].source.node, Constant):
        return None
    return [int(v) for v in np.asarray(node.inputs[1].source.node.value).reshape(-1)]


@dataclass(frozen=True)
class InsertBrgemmCopyB(Pass):
    """Data-flow pass after FuseTransposeBrgemm: a Brgemm whose B is read with its K dim innermost in memory
    (``layout_b`` or a Transpose on a Parameter that moves the last dim and puts K last) gets a
    :class:`BrgemmCopyB` that repacks B planar, and reads that copy. Only an f32 or bf16 B on a Parameter: the
    copy is a transpose of the kernel input, once per batch index (a bf16 model's Keys: the Transpose is no
    kernel of its own before the attention)."""

    name: ClassVar[str] = "insert-brgemm-copy-b"

    def run(self, ir: Model | Subgraph) -> bool:
        body = body_of(ir)
        changed = False
        for brgemm in nodes_of_type(body, "Brgemm"):
            if brgemm.rt_info.get(PACKED_B):
                continue  # a constant weight: repacked once at compile time, transposed or not
            src = brgemm.inputs[1].source
            layout = tuple(brgemm.layout_b)  # type: ignore[attr-defined]
            removed = None
            order = _constant_order(src.node)
            if order is not None and len(src.targets) == 1:
                removed = src.node
                layout = _compose(layout, order)
                src = src.node.inputs[0].source
            rank = src.shape.rank if src.shape.rank_is_static else 0
            if rank < 2 or src.node.type_name != "Parameter" or src.element_type not in COPY_TYPES:
                continue
            # only a B whose stored innermost dim is its K (planar row) dim: N columns are then strided
            if not layout or layout[-2] != rank - 1:
                continue
            copy = make("BrgemmCopyB", src, layout=layout, name=f"{brgemm.name}/copy_b")
            full = (FULL_DIM, FULL_DIM)
            set_port_descriptor(copy, "in", 0, subtensor=full, layout=layout)
            set_port_descriptor(copy, "out", 0, subtensor=full)
            new = make(
                "Brgemm",
                brgemm.inputs[0].source,
                copy,
                offset_a=brgemm.offset_a,  # type: ignore[attr-defined]
                offset_b=brgemm.offset_b,
                offset_c=brgemm.offset_c,  # type: ignore[attr-defined]
                layout_a=brgemm.layout_a,
                layout_c=brgemm.layout_c,
                name=brgemm.name,
            )  # type: ignore[attr-defined]
            new.rt_info = {k: v for k, v in brgemm.rt_info.items() if k != PORT_DESCRIPTORS}
            init_brgemm_ports(new)
            replace_output(brgemm.outputs[0], new.outputs[0])
            brgemm.disconnect()
            if removed is not None:
                removed.disconnect()
            changed = True
        return changed


# --- the 16 x 16 register transpose ---------------------------------------------------------------------------
#: the four shuffle stages: (op, imm of the low half, imm of the high half, pairs of register slots)
_STAGES: tuple[tuple[str, int, int, tuple[tuple[int, int], ...]], ...] = (
    ("unpck", 0, 0, tuple((2 * i, 2 * i + 1) for i in range(8))),
    ("vshufps", 0x44, 0xEE, tuple((4 * i + j, 4 * i + j + 2) for i in range(4) for j in range(2))),
    ("vshuff32x4", 0x88, 0xDD, tuple((8 * i + j, 8 * i + j + 4) for i in range(2) for j in range(4))),
    ("vshuff32x4", 0x88, 0xDD, tuple((j, j + 8) for j in range(8))),
)


def _shuffle(op: str, imm: int, hi: bool, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """numpy model of one shuffle on 16-lane vectors (for planning where each transposed row ends up)."""
    out = np.empty_like(x)
    if op == "unpck":
        for lane in range(4):
            b = 4 * lane + (2 if hi else 0)
            out[4 * lane : 4 * lane + 4] = [x[b], y[b], x[b + 1], y[b + 1]]
    elif op == "vshufps":
        for lane in range(4):
            b = 4 * lane
            out[b : b + 4] = [
                x[b + (imm & 3)],
                x[b + ((imm >> 2) & 3)],
                y[b + ((imm >> 4) & 3)],
                y[b + ((imm >> 6) & 3)],
            ]
    else:  # vshuff32x4
        sel = [(imm >> (2 * i)) & 3 for i in range(4)]
        src = [x, x, y, y]
        for lane in range(4):
            out[4 * lane : 4 * lane + 4] = src[lane][4 * sel[lane] : 4 * sel[lane] + 4]
    return out


def _plan_transpose() -> list[int]:
    """``slot[j]``: which register slot holds column j of the 16 loaded rows after the stages (each stage
    writes its low half to the first slot of a pair and its high half to the second)."""
    regs = [np.array([r * 16 + c for c in range(16)]) for r in range(16)]  # element (row r, col c)
    for op, imm_lo, imm_hi, pairs in _STAGES:
        for p, q in pairs:
            regs[p], regs[q] = (
                _shuffle(op, imm_lo, False, regs[p], regs[q]),
                _shuffle(op, imm_hi, True, regs[p], regs[q]),
            )
    slot = [-1] * 16
    for s, v in enumerate(regs):
        col = int(v[0] % 16)
        if not np.array_equal(v, np.arange(16) * 16 + col):
            raise AssertionError(f"transpose plan: slot {s} holds {v}")
        slot[col] = s
    return slot


#: output row j of a tile is in register slot TRANSPOSE_SLOT[j]
TRANSPOSE_SLOT = _plan_transpose()


def emit_transpose_16x16(a: Assembler, regs: list) -> list:
    """Transpose the 16 x 16 (32-bit) tile in ``regs[:16]`` (``regs[16]`` is the spare each shuffle writes into);
    returns the registers by slot: output row j is in ``result[TRANSPOSE_SLOT[j]]``."""
    regs = list(regs)
    for op, imm_lo, imm_hi, pairs in _STAGES:
        for p, q in pairs:
            spare = regs[16]
            x, y = regs[p], regs[q]
            if op == "unpck":
                a.vunpcklps(spare, x, y)
                a.vunpckhps(y, x, y)
            else:
                getattr(a, op)(spare, x, y, imm_lo)
                getattr(a, op)(y, x, y, imm_hi)
            regs[p], regs[16] = spare, x
    return regs


class BrgemmCopyBEmitter(JitEmitter):
    """Writes B planar (``K x N``, rows contiguous) from a stored matrix whose K dim is innermost: f32, or bf16
    (rows loaded widened to dwords with ``vpmovzxwd``, the same dword transpose, rows stored narrowed with
    ``vpmovdw``, under the same masks)."""

    def __init__(self, expr: Expression, h: X86_64TargetMachine) -> None:
        super().__init__(expr, h)
        et = expr.node.inputs[0].element_type
        if et not in COPY_TYPES:
            raise UnsupportedByTarget(f"BrgemmCopyB '{expr.name}' copies f32 or bf16, got {et}")
        #: bytes per element (f32 4, bf16 2): a register lane is a dword either way
        self.es = et.size
        src = _access(expr.get_input_port(0), et, 0)
        dst = _access(expr.get_output_port(0), et, 0)
        if src.row_stride != 1 or dst.col_stride != 1:
            raise CodegenError(
                f"BrgemmCopyB '{expr.name}' needs K innermost in its input and a planar output, "
                f"got strides {src.row_stride}/{dst.col_stride}"
            )
        shape = expr.output_descs[0].preordered_shape
        if is_dynamic(shape[-2]) or is_dynamic(src.col_stride):
            raise DynamicShapeError(f"BrgemmCopyB '{expr.name}': the x86-64 copy unrolls its K tiles, K {shape[-2]} "
                                    "must be known at compile time")
        self.k, self.n = int(shape[-2]), shape[-1]
        self.src, self.dst = src, dst
        #: a dynamic N (a sequence length): the N tile count, the tail's rows, its mask, the output row stride in
        #: bytes and the output's buffer offset are read from the runtime-parameter block (stack slots)
        self.dynamic = is_dynamic(self.n)
        if is_dynamic(dst.offset_bytes):  # registered now: the kernel prologue copies what is registered before it
            h.runtime_value(f"{expr.name}.dst_offset", dst.offset_bytes)
        if self.dynamic:
            rt = h.runtime_value
            name = expr.name
            self.full_slot = rt(f"{name}.n_tiles", self.n // LANES)
            self.tail_slot = rt(f"{name}.n_tail", self.n % LANES)
            self.mask_slot = rt(f"tail_mask({self.n % LANES})", low_mask(self.n % LANES))
            self.row_slot = rt(f"{name}.dst_row_bytes", self.n * self.es)

    def aux_needs(self) -> tuple[int, int, int]:
        return 4 if self.dynamic else 3, 17, 2

    def emit(self, a: Assembler, ins: list, outs: list, aux: AuxRegs) -> None:
        if self.dynamic:
            self._emit_dynamic(a, ins, outs, aux)
            return
        ps, pd, cnt = aux.gprs[:3]
        vecs = [v.zmm for v in aux.vecs[:17]]
        kmask, nmask = aux.masks[:2]
        k_tail, n_tail = self.k % LANES, self.n % LANES
        if k_tail:
            a.kmovw(kmask, word[a.const_data(((1 << k_tail) - 1).to_bytes(2, "little"), 2)])
        a.lea(ps, ins[0] + self.src.offset_bytes)
        lea_runtime(a, self.h, pd, outs[0], self.dst.offset_bytes, f"{self.expr.name}.dst_offset")
        full = self.n // LANES
        if full:
            a.mov(cnt, full)
            top = a.label(f"copy_b.{self.expr.name}.n")
            self._tile_column(a, ps, pd, vecs, kmask, LANES, None)
            a.add(ps, LANES * self.src.col_stride * self.es)
            a.add(pd, LANES * self.es)
            a.dec(cnt)
            a.jnz(top)
        if n_tail:
            a.kmovw(nmask, word[a.const_data(((1 << n_tail) - 1).to_bytes(2, "little"), 2)])
            self._tile_column(a, ps, pd, vecs, kmask, n_tail, nmask)

    def _emit_dynamic(self, a: Assembler, ins: list, outs: list, aux: AuxRegs) -> None:
        """The same copy for an N known only at run time: a counted loop over the whole N tiles (count from the
        block), then the tail tile when ``N % 16`` is not 0: its rows are loaded while they exist (a compare per
        row), its columns stored under the runtime mask; output rows are ``4 N`` bytes apart (a running pointer)."""
        ps, pd, cnt, pt = aux.gprs[:4]
        vecs = [v.zmm for v in aux.vecs[:17]]
        kmask, nmask = aux.masks[:2]
        if self.k % LANES:
            a.kmovw(kmask, word[a.const_data(((1 << (self.k % LANES)) - 1).to_bytes(2, "little"), 2)])
        a.lea(ps, ins[0] + self.src.offset_bytes)
        lea_runtime(a, self.h, pd, outs[0], self.dst.offset_bytes, f"{self.expr.name}.dst_offset")
        done = a.new_label(f"copy_b.{self.expr.name}.done")
        tail = a.new_label(f"copy_b.{self.expr.name}.tail")
        a.mov(cnt, self.full_slot)
        a.test(cnt, cnt)
        a.jz(tail)
        top = a.label(f"copy_b.{self.expr.name}.n")
        self._tile_column(a, ps, pd, vecs, kmask, LANES, None, pt)
        a.add(ps, LANES * self.src.col_stride * self.es)
        a.add(pd, LANES * self.es)
        a.dec(cnt)
        a.jnz(top)
        a.bind(tail)
        a.mov(cnt, self.tail_slot)
        a.test(cnt, cnt)
        a.jz(done)
        a.kmovw(nmask, word[self.mask_slot])
        self._tile_column(a, ps, pd, vecs, kmask, LANES, nmask, pt, rows_reg=cnt)
        a.bind(done)

    def _tile_column(self, a: Assembler, ps, pd, vecs, kmask, rows: int, nmask, pt=None,  # type: ignore[no-untyped-def]
                     rows_reg=None) -> None:
        """All K tiles of one column of 16 (or ``rows``) N: load ``rows`` rows of up to 16 K, transpose, store.
        With ``pt`` (a dynamic N) the output rows are addressed through that running pointer, ``row_slot`` bytes
        apart; with ``rows_reg`` only that many rows are loaded (the others are garbage never stored)."""
        cs, n = self.src.col_stride, self.n
        if pt is not None:
            a.mov(pt, pd)
        for k0 in range(0, self.k, LANES):
            kb = min(LANES, self.k - k0)
            regs = list(vecs)  # slots 0..15 hold data, the 17th is the spare each shuffle writes into
            loaded = a.new_label(f"copy_b.{self.expr.name}.loaded{k0}") if rows_reg is not None else None
            for i in range(LANES):
                if loaded is not None and i:
                    a.cmp(rows_reg, i)
                    a.jbe(loaded)  # rows past the tail are never loaded (their lanes are never stored)
                if i < rows:
                    addr = ps + (i * cs + k0) * self.es
                    reg = regs[i].mask(kmask).z if kb < LANES else regs[i]
                    if self.es == 4:
                        a.vmovups(reg, addr)
                    else:
                        a.vpmovzxwd(reg, yword[addr])
                else:
                    a.vxorps(regs[i], regs[i], regs[i])  # rows past the N tail: lanes never stored
            if loaded is not None:
                a.bind(loaded)
            regs = emit_transpose_16x16(a, regs)
            for j in range(kb):
                if pt is not None:
                    dst = pt + 0
                else:
                    dst = pd + ((k0 + j) * n) * self.es
                if self.es == 2:
                    dst = yword[dst]
                dst = dst.mask(nmask) if nmask is not None else dst
                if self.es == 4:
                    a.vmovups(dst, regs[TRANSPOSE_SLOT[j]])
                else:
                    a.vpmovdw(dst, regs[TRANSPOSE_SLOT[j]])
                if pt is not None:
                    a.add(pt, self.row_slot)




# --- a constant B (FullyConnected weight) repacked once, at compile time ------------------------------------------
#: rt_info key on a Brgemm whose B is a compile-time packed weight: the panel width (columns per panel)
PACKED_B = "snippets.x86_64.packed_b"
#: columns per panel of a packed weight: the micro-kernel's widest register tile (4 zmm of f32)
PANEL = 4 * LANES
#: the name of the data-flow pass that makes the Brgemms read packed weights (disabling it disables packing)
MARK_PACKED_PASS = "mark-packed-weight-brgemm"


def pack_b_panels(w: np.ndarray, panel: int = PANEL) -> np.ndarray:
    """BrgemmCopyB run on a constant: the planar ``[K, N]`` weight as consecutive panels of ``panel`` columns,
    each ``K x width`` with contiguous rows (the last panel is ``N % panel`` wide; nothing is padded, so the packed
    copy has exactly K * N elements). A Brgemm reads one panel as a dense block: its rows are ``width`` apart
    instead of N, so a panel is a few contiguous pages rather than K pages (DTLB) and streams from L2/L3."""
    k, n = w.shape
    parts = [np.ascontiguousarray(w[:, p : p + panel], dtype=np.float32).reshape(-1) for p in range(0, n, panel)]
    return np.concatenate(parts) if parts else np.empty(0, np.float32)


def _reads_transposed(node: Node) -> bool:
    """A MatMul's transpose_b, or a Brgemm whose B layout swaps the last two dims (what MatMulToBrgemm makes of it)."""
    if node.type_name == "MatMul":
        return bool(node.transpose_b)  # type: ignore[attr-defined]
    layout = tuple(node.layout_b)  # type: ignore[attr-defined]
    return bool(layout) and layout[-1] != len(layout) - 1


#: ops between a weight Parameter and its Brgemm that only add leading unit dims (the data is unchanged)
_UNIT_DIM_OPS = ("RankNormalization",)


def _users_through_rank_normalization(p: Node) -> list:
    """The inputs that read ``p``, looking through ops that only add leading unit dims."""
    users = []
    for t in p.outputs[0].targets:
        users += _users_through_rank_normalization(t.node) if t.node.type_name in _UNIT_DIM_OPS else [t]
    return users


def weight_source(brgemm: Node) -> Node:
    """The node a Brgemm's B comes from, past the ops that only add leading unit dims."""
    src = brgemm.inputs[1].source.node
    while src.type_name in _UNIT_DIM_OPS:
        src = src.inputs[0].source.node
    return src


def packed_weight_body_inputs(body: Model) -> dict[int, bool]:
    """Body Parameter index -> whether B is read transposed, for each FullyConnected weight Parameter that MatMuls
    (or the Brgemms made of them) read directly as B, all the same way (the Brgemms ``MarkPackedWeightBrgemm``
    marks)."""
    from snippets_core.tokenization.tokenize_fc_snippets import FC_WEIGHT

    found: dict[int, bool] = {}
    for i, p in enumerate(body.parameters):
        if not p.rt_info.get(FC_WEIGHT):
            continue
        users = _users_through_rank_normalization(p)
        if users and all(t.node.type_name in ("MatMul", "Brgemm") and t.index == 1 for t in users):
            flags = {_reads_transposed(t.node) for t in users}
            if len(flags) == 1:
                found[i] = flags.pop()
    return found


def _constant_value(src: Node) -> np.ndarray | None:
    """The value behind a Subgraph input: a Constant, possibly through the shape-only ops SplitDimensionM adds."""
    node = src
    while node.type_name in ("Reshape", "Unsqueeze", "Squeeze"):
        node = node.inputs[0].source.node
    return np.asarray(node.value) if isinstance(node, Constant) else None  # type: ignore[attr-defined]


def _packers() -> dict[np.dtype, Any]:
    """Weight dtype -> its panel packing: f32 rows, bf16 k-pairs for ``vdpbf16ps``."""
    import ml_dtypes

    from snippets_x86_64.bf16_pack import pack_b_pairs

    return {np.dtype(np.float32): pack_b_panels, np.dtype(ml_dtypes.bfloat16): pack_b_pairs}


def packed_weights(sg: Subgraph) -> dict[int, np.ndarray]:
    """Subgraph input index -> its packed copy (same shape as the input, panel order inside), for every constant
    FullyConnected weight of ``sg``; computed here, at compile time, with numpy."""
    packed: dict[int, np.ndarray] = {}
    packers = _packers()
    for i, transposed in packed_weight_body_inputs(sg.body).items():
        value = _constant_value(sg.inputs[i].source.node)
        shape = sg.body.parameters[i].outputs[0].shape
        if value is None or not shape.is_static or value.dtype not in packers:
            continue
        stored = value.reshape(shape.to_tuple())
        if int(np.prod(stored.shape[:-2], dtype=np.int64)) != 1:
            continue  # one weight matrix per FC (SplitDimensionM only adds unit dims)
        w = stored.reshape(stored.shape[-2:])
        packed[i] = packers[value.dtype](w.T if transposed else w, PANEL).reshape(stored.shape)
    return packed


__all__ = [
    "PACKED_B", "PANEL", "TRANSPOSE_SLOT", "BrgemmCopyB", "BrgemmCopyBEmitter", "InsertBrgemmCopyB", "MARK_PACKED_PASS",
    "pack_b_panels", "packed_weights", "weight_source",
]

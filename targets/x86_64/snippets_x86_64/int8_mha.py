"""The int8 attention kernel: one MHA Subgraph of a QDQ model on the VNNI Brgemm (the MHA guide's INT8 path).

An MHA Subgraph whose Q, K and V inputs lie on per-tensor u8/i8 grids (MarkInt8MHA recorded them) computes::

    scores = chain0(dequantize(sum_d (q - q_zp)(k - k_zp)))      chain0: the FakeQuantizes, the scale, the mask
    p      = quantize_p(chain1(softmax(scores)))                  the probabilities on their u8/i8 grid
    out    = chain2(dequantize(sum_s (p - p_zp)(v - v_zp)))        chain2: the output's FakeQuantize

:func:`plan_int8_mha` reads that from the (decomposed) body: the operands' Transposes, the eltwise chains (ops with
a scalar constant, or a per-column vector such as the attention mask, whose branch is evaluated per call), the
probabilities' grid, the output Transpose. Anything else is a reason (:class:`Int8MHAReject`) and the Subgraph
stays on the f32 MHA kernel.

:class:`Int8MHAKernel` emits one function per (head dims, strides) that runs one head, block of ``MB`` rows by
block, all in one call, for every sequence length and batch: the rows of Q and the sequence S are read from a
runtime-parameter block at the start of the scratch (:meth:`MHAGeometry.params`), and the S-sized buffers are laid
out in groups of 64 columns so that no stride depends on S:

1. ``Q_blk x K'`` on the int8 Brgemm, s32 scores into a per-thread scratch. ``K' = k - 128`` (u8 K, s8 bytes)
   comes repacked with one more column of ones, so column S of the scores is ``sum_d (q - q_zp)``: the row term of
   K's zero point. Q's zero point is the compensation ``q_zp * colsum(K')``, itself a Brgemm of a row of ``q_zp``
   bytes by ``K'``, once per head;
2. per row: the row term added, dequantized, chain0 applied (max kept), ``exp``, the sum (onnxruntime's MLAS
   exp and summation order: :func:`emit_softmax_exp`, :func:`_hsum_mlas`), chain1, the probabilities requantized
   to their integers in registers (``vcvtps2dq``), stored as bytes, their row sum kept;
3. ``P_blk x V'`` on the int8 Brgemm (V' = v - 128), then per row the row term of V's zero point
   (``(128 - v_zp) * sum_s (p - p_zp)``), dequantized, chain2, stored f32 where the output's layout wants it.

Every f32 step rounds where onnxruntime's kernels round on the same QDQ file: the chains' Q->DQ pairs arrive as
QuantizeLinear's ``x / s``, round, clamp, ``* s`` (FakeQuantizeDecomposition), the divides are a multiply with an
exact FMA correction (:func:`emit_divide`, bit for bit ``vdivps``), so the outputs are onnxruntime's but where its
float32 MatMul sums put a value across a rounding tie that the exact integer sums do not.

The Brgemms are :class:`~snippets_x86_64.brgemm_int8.BrgemmInt8Kernel` (``vpdpbusd``, u8 x s8; an s8 A is shifted
by 128 and compensated); K' and V' are repacked per call by :mod:`~snippets_x86_64.int8_mha_executor`.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import cache

import numpy as np

from snippets_core.errors import SnippetsError, UnsupportedByTarget
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.quantize import QUANTIZATION_GRID, QuantGrid
from snippets_x86_64.asm import (ZMM, Function, dword, k1, k2, k3, k5, k6, k7, qword, r10, r11, r12, r13, r14, r15,
                                rax, rbp, rbx, word)
from snippets_x86_64.brgemm_copy_b_int8 import K_GROUP, LANES, N_BLOCK, S8_SHIFT
from snippets_x86_64.brgemm_int8 import VEC_BUDGET, BrgemmInt8Kernel, Int8Geometry, Int8Regs
from snippets_x86_64.emitters.base import f32, i32
from snippets_x86_64.emitters.math import emit_divide

#: rows of Q per block: the scores of a block (MB x S s32) stay in L2 between the Brgemm and the softmax
MB = 32
#: the eltwise ops a chain may hold, with the instruction of each (Round: half to even)
CHAIN_OPS = {"Maximum": "vmaxps", "Minimum": "vminps", "Multiply": "vmulps", "Add": "vaddps", "Subtract": "vsubps",
             "Divide": "vdivps"}
_MOVES = ("Reshape", "Squeeze", "Unsqueeze")


class Int8MHAReject(SnippetsError):
    """Why an MHA Subgraph does not run on the int8 kernel (it stays on the f32 MHA kernel)."""


@dataclass(frozen=True)
class RowOp:
    """One eltwise op of a chain on a row of values ``x``: ``op(x, c)`` with ``c`` a scalar constant, or the
    per-column side vector ``side`` (>= 0); ``swapped``: the chain value is the right operand (``c - x``)."""

    op: str
    const: float = 0.0
    side: int = -1
    swapped: bool = False


@dataclass(frozen=True)
class Int8Operand:
    """Q, K or V: which Subgraph input, the planar order (planar dim i = the input's dim ``perm[i]``), the grid."""

    index: int
    perm: tuple[int, ...]
    scale: float
    zero_point: int
    signed: bool


@dataclass(frozen=True, eq=False)
class Int8MHAPlan:
    """What an int8 MHA Subgraph computes (module docstring). Planar operands: Q [b, h, m, d], K^T [b, h, d, n],
    V [b, h, s, e]; ``out_perm``: the output is the planar [b, h, m, e] through that Transpose (None: none)."""

    q: Int8Operand
    k: Int8Operand
    v: Int8Operand
    scores: tuple[RowOp, ...]
    probs: tuple[RowOp, ...]
    p_grid: QuantGrid
    out: tuple[RowOp, ...]
    out_perm: tuple[int, ...] | None
    #: the body nodes computing the side vectors (topological order) and the values the chains read
    side_nodes: tuple[Node, ...]
    side_values: tuple[Output, ...]
    #: Subgraph input index of each body Parameter
    param_index: dict[int, int]
    #: the probabilities' integers are ``clamp(r + offset, lo, hi)`` of the chain's last Round ``r`` (None: the
    #: chain's value is requantized, ``rint(y / scale) + zero_point``)
    p_tail: tuple[int, int, int] | None = None

    @property
    def p_signed(self) -> bool:
        return self.p_grid.qtype.name == "i8"

    def describe(self) -> str:
        ts = {False: "u8", True: "s8"}
        return (f"int8 MHA on the VNNI Brgemm: Q {ts[self.q.signed]} x K^T {ts[self.k.signed]}, softmax in f32, "
                f"P requantized to {ts[self.p_signed]} in registers, x V {ts[self.v.signed]}; K^T and V repacked "
                f"per call")


def _perm(node: Node) -> tuple[int, ...]:
    src = node.inputs[1].source.node
    if src.type_name != "Constant":
        raise Int8MHAReject(f"Transpose '{node.name}' has a computed order")
    return tuple(int(v) for v in np.asarray(src.value).reshape(-1))  # type: ignore[attr-defined]


def _operand(out: Output, grids: tuple[QuantGrid | None, ...], index: dict[int, int], what: str) -> Int8Operand:
    """The operand a MatMul input reads: a body Parameter on a grid, through Transposes."""
    perm: tuple[int, ...] | None = None
    node = out.node
    while node.type_name == "Transpose":
        p = _perm(node)
        perm = p if perm is None else tuple(p[j] for j in perm)
        node = node.inputs[0].source.node
    if node.type_name != "Parameter":
        raise Int8MHAReject(f"{what} is computed in the body ({node.type_name} '{node.name}'), not an input")
    grid = grids[index[node.id]]
    if grid is None:
        raise Int8MHAReject(f"{what} (input {index[node.id]}) is not on a per-tensor u8/i8 quantization grid")
    rank = node.outputs[0].shape.rank
    if rank != 4:
        raise Int8MHAReject(f"{what} has rank {rank}; the int8 MHA takes rank 4")
    return Int8Operand(index[node.id], perm if perm is not None else tuple(range(rank)), float(grid.scale),
                       int(grid.zero_point), grid.qtype.name == "i8")


def _scalar(node: Node) -> float | None:
    if node.type_name != "Constant":
        return None
    v = np.asarray(node.value)  # type: ignore[attr-defined]
    return float(v.reshape(-1)[0]) if v.size == 1 else None


def _chain(start: Output, stop: set[str], side: dict[int, int], order: list[Node]) -> tuple[tuple[RowOp, ...], Node]:
    """The row ops from ``start`` (one consumer each) up to the first node whose type is in ``stop``."""
    ops: list[RowOp] = []
    x = start
    while True:
        targets = [t.node for t in x.targets]
        if len(targets) != 1:
            raise Int8MHAReject(f"'{x.node.name}' feeds {len(targets)} ops inside the attention")
        node = targets[0]
        if node.type_name in stop:
            return tuple(ops), node
        if node.type_name == "Round":
            if getattr(node, "mode", "half_to_even") != "half_to_even":
                raise Int8MHAReject(f"Round '{node.name}' rounds {node.mode}")  # type: ignore[attr-defined]
            ops.append(RowOp("Round"))
        elif node.type_name in CHAIN_OPS and len(node.inputs) == 2:
            i = 0 if node.inputs[0].source == x else 1
            other = node.inputs[1 - i].source
            c = _scalar(other.node)
            if c is not None:
                ops.append(RowOp(node.type_name, const=c, swapped=i == 1))
            elif other.node.id in side:
                shape = other.shape
                if not shape.rank_is_static or any(d != 1 for d in list(shape)[1:-1]):
                    raise Int8MHAReject(f"'{node.name}' reads '{other.node.name}' of shape {shape}: only a value per "
                                        "column (and batch) joins the rows")
                ops.append(RowOp(node.type_name, side=side[other.node.id], swapped=i == 1))
            else:
                raise Int8MHAReject(f"'{node.name}' reads '{other.node.name}', neither a scalar nor a mask branch")
        else:
            raise Int8MHAReject(f"{node.type_name} '{node.name}' in the attention has no int8 row emitter")
        x = node.outputs[0]


def plan_int8_mha(body: Model, grids: tuple[QuantGrid | None, ...]) -> Int8MHAPlan:
    """Read an MHA body as an int8 attention (module docstring), or raise :class:`Int8MHAReject` saying why."""
    order = body.get_ordered_ops()
    index = {p.id: i for i, p in enumerate(body.parameters)}
    matmuls = [n for n in order if n.type_name == "MatMul"]
    softmax = [n for n in order if n.type_name == "Softmax"]
    if len(matmuls) != 2 or len(softmax) != 1:
        raise Int8MHAReject("the body is not one attention (two MatMuls around a Softmax)")
    mm0, mm1 = matmuls
    if mm0.transpose_a or mm1.transpose_a or mm1.transpose_b:  # type: ignore[attr-defined]
        raise Int8MHAReject("a MatMul transposes an operand the int8 MHA reads as is")
    q = _operand(mm0.inputs[0].source, grids, index, "Q")
    k = _operand(mm0.inputs[1].source, grids, index, "K")
    if mm0.transpose_b:  # type: ignore[attr-defined]
        k = Int8Operand(k.index, (*k.perm[:-2], k.perm[-1], k.perm[-2]), k.scale, k.zero_point, k.signed)
    v = _operand(mm1.inputs[1].source, grids, index, "V")
    if q.perm[-1] != 3:
        raise Int8MHAReject(f"Q's head dim is not its innermost (order {list(q.perm)}): its rows are not contiguous")
    sm = softmax[0]
    if sm.axis not in (-1, sm.outputs[0].shape.rank - 1):  # type: ignore[attr-defined]
        raise Int8MHAReject(f"the Softmax is over axis {sm.axis}, not the last")  # type: ignore[attr-defined]
    # the side branch: ops computed from the other inputs and constants only (the attention mask)
    attention = {mm0.id}
    for n in order:
        if any(i.source.node.id in attention for i in n.inputs):
            attention.add(n.id)
    qkv = {p.id for p in body.parameters if index[p.id] in (q.index, k.index, v.index)}
    side_nodes = tuple(n for n in order if n.id not in attention and n.type_name not in ("Parameter", "Constant")
                       and n.type_name != "Transpose" and not _reaches_only_operands(n, qkv))
    side: dict[int, int] = {}
    side_values: list[Output] = []
    for n in side_nodes:
        if any(t.node.id in attention for t in n.outputs[0].targets):
            side[n.id] = len(side_values)
            side_values.append(n.outputs[0])
    for p in body.parameters:  # a mask read as it comes
        if p.id not in qkv and any(t.node.id in attention for t in p.outputs[0].targets):
            side[p.id] = len(side_values)
            side_values.append(p.outputs[0])
    scores, at = _chain(mm0.outputs[0], {"Softmax"}, side, order)
    if at is not sm:
        raise Int8MHAReject("the scores do not reach the Softmax")
    probs, at = _chain(sm.outputs[0], {"MatMul"}, {}, order)
    if at is not mm1 or mm1.inputs[0].source.node.id == mm1.inputs[1].source.node.id:
        raise Int8MHAReject("the probabilities do not reach the second MatMul as its A")
    p_grid = mm1.inputs[0].source.node.rt_info.get(QUANTIZATION_GRID)
    if p_grid is None or p_grid.qtype.name not in ("u8", "i8"):
        raise Int8MHAReject("the probabilities are not requantized to a per-tensor u8/i8 grid before P x V")
    out, at = _chain(mm1.outputs[0], {"Result", "Transpose"}, {}, order)
    out_perm = None
    if at.type_name == "Transpose":
        out_perm = _perm(at)
        if out_perm[-1] != 3:
            raise Int8MHAReject(f"the output Transpose {list(out_perm)} moves the innermost dim")
        nxt = [t.node for t in at.outputs[0].targets]
        if len(nxt) != 1 or nxt[0].type_name != "Result":
            raise Int8MHAReject("the output Transpose feeds more than the Result")
    if len(body.results) != 1:
        raise Int8MHAReject("the body has more than one output")
    probs, p_tail = integer_tail(simplify(probs), p_grid)
    return Int8MHAPlan(q, k, v, fold_requantize(simplify(scores)), probs, p_grid, simplify(out), out_perm, side_nodes,
                       tuple(side_values), index, p_tail)


def _f32_op(op: RowOp, x: np.ndarray) -> np.ndarray:
    """``op`` on f32 values as the kernel computes it (IEEE f32, round to nearest; Round half to even)."""
    with np.errstate(all="ignore"):
        if op.op == "Round":
            return np.rint(x)
        c = np.float32(op.const)
        a, b = (c, x) if op.swapped else (x, c)
        fn = {"Maximum": np.maximum, "Minimum": np.minimum, "Multiply": np.multiply, "Add": np.add,
              "Subtract": np.subtract, "Divide": np.divide}[op.op]
        return fn(a, b).astype(np.float32)


def _monotone(op: RowOp) -> bool:
    """Whether ``op`` is a non-decreasing function of the chain value (a clamp commutes with it)."""
    if op.side >= 0:
        return False
    if op.op in ("Round", "Add"):
        return True
    if op.op == "Subtract":
        return not op.swapped
    if op.op == "Multiply":
        return op.const > 0
    return op.op == "Divide" and not op.swapped and op.const > 0


def _pow2(c: float) -> bool:
    """Whether ``c`` is a power of two (a multiply by it is exact where nothing under- or overflows)."""
    m, _ = np.frexp(np.float32(c))
    return bool(np.isfinite(c) and abs(float(m)) == 0.5)


def _exact_reciprocal(op: RowOp) -> RowOp:
    """``x / c`` as ``x * (1 / c)`` when ``c`` is a power of two (both are the correctly rounded x 2^-k; a divide
    costs the vector unit ~5 multiplies)."""
    if op.op != "Divide" or op.swapped or op.side >= 0 or op.const == 0 or not np.isfinite(op.const):
        return op
    m, _ = np.frexp(np.float32(op.const))
    inv = np.float32(1.0) / np.float32(op.const)
    if abs(float(m)) != 0.5 or not np.isfinite(inv) or inv == 0 or abs(inv) < np.finfo(np.float32).tiny:
        return op
    return RowOp("Multiply", const=float(inv))


def simplify(ops: tuple[RowOp, ...]) -> tuple[RowOp, ...]:
    """The same chain with fewer ops, bit for bit: a constant clamp (Maximum/Minimum) moves after the
    non-decreasing ops behind it (``f(max(x, c)) = max(f(x), f(c))``, ``f(c)`` computed in f32 as the kernel would),
    where it meets the next one and the two merge (a FakeQuantize's input clamp and its saturation become one)."""
    out = [_exact_reciprocal(op) for op in ops]
    changed = True
    while changed:
        changed = False
        for i in range(len(out) - 1):
            a, b = out[i], out[i + 1]
            if a.op in ("Maximum", "Minimum") and a.side < 0 and _monotone(b):
                c = float(_f32_op(b, np.array([a.const], np.float32))[0])
                if not np.isnan(c):
                    out[i : i + 2] = [b, RowOp(a.op, const=c)]
                    changed = True
                    break
            if (a.op, b.op) == ("Multiply", "Multiply") and i and out[i - 1].op == "Round" and a.side < 0 \
                    and b.side < 0 and _pow2(b.const) and 2.0**-60 < abs(a.const * b.const) < 2.0**60 \
                    and 2.0**-60 < abs(a.const) < 2.0**60:
                # integers r: (r a) 2^k = r (a 2^k), both exact scalings of the one rounding (DequantizeLinear's
                # * scale, then the attention's / sqrt(d) made * 2^-k)
                out[i : i + 2] = [RowOp("Multiply", const=float(np.float32(a.const) * np.float32(b.const)))]
                changed = True
                break
            if a.op == b.op and a.op in ("Maximum", "Minimum") and a.side < 0 and b.side < 0:
                pick = max if a.op == "Maximum" else min
                out[i : i + 2] = [RowOp(a.op, const=pick(a.const, b.const))]
                changed = True
                break
            if i + 2 < len(out):
                c3 = out[i + 2]
                if (a.op, b.op, c3.op) == ("Maximum", "Minimum", "Maximum") and a.side < 0 and b.side < 0 \
                        and c3.side < 0 and a.const <= b.const and c3.const <= b.const:
                    # max(clamp(x, lo, hi), c) = clamp(x, max(lo, c), hi) when c <= hi
                    out[i : i + 3] = [RowOp("Maximum", const=max(a.const, c3.const)), b]
                    changed = True
                    break
    return tuple(out)


#: the integers a requantization between two Rounds is checked on (beyond, both sides are saturated)
_FOLD_RANGE = 1 << 16


def fold_requantize(ops: tuple[RowOp, ...]) -> tuple[RowOp, ...]:
    """The chain with each requantization between two Rounds, ``Round, * a, / b, Round`` (a dequantize, the
    attention's scale and the next QuantizeLinear), made ``Round, * k, Round`` where one float32 ``k`` gives the
    same result, checked on every integer the first Round can give that the clamp after the second does not
    saturate: the ops from the second Round to the next side op or Round, applied to ``rint(r a / b)`` and to
    ``rint(r k)`` for r in [-2^16, 2^16], equal, and saturated at both ends (both sides are non-decreasing in r, so
    they stay saturated beyond). Candidates: ``k`` = a / b rounded, and its 4 float neighbours each side."""
    out = list(ops)
    i = 0
    while i < len(out):
        j = next((n for n in range(i + 1, len(out)) if out[n].op == "Round"), None)
        if out[i].op != "Round" or j is None or j - i < 3:
            i += 1
            continue
        mid = out[i + 1 : j]
        if not all(op.side < 0 and not op.swapped and op.op in ("Multiply", "Divide") and op.const > 0
                   for op in mid):
            i += 1
            continue
        end = next((n for n in range(j + 1, len(out)) if out[n].side >= 0 or out[n].op == "Round"), len(out))
        after = out[j + 1 : end]
        if not all(_monotone(op) or (op.op in ("Maximum", "Minimum") and op.side < 0) for op in after):
            i += 1
            continue
        r = np.arange(-_FOLD_RANGE, _FOLD_RANGE + 1).astype(np.float32)
        ends = np.array([-(1 << 24), 1 << 24], np.float32)

        def value(head: tuple[RowOp, ...], x: np.ndarray) -> np.ndarray:
            for op in (*head, RowOp("Round"), *after):
                x = _f32_op(op, x)
            return x

        want, want_ends = value(mid, r), value(mid, ends)
        if not (want[0] == want_ends[0] and want[-1] == want_ends[1]):  # not saturated within the range
            i += 1
            continue
        ratio = np.float32(np.float64(1.0))
        for op in mid:
            ratio = np.float64(ratio) * op.const if op.op == "Multiply" else np.float64(ratio) / op.const
        k0 = np.float32(ratio)
        cands = [k0]
        up = down = k0
        for _ in range(4):
            up, down = np.nextafter(up, np.float32(np.inf)), np.nextafter(down, np.float32(0))
            cands += [up, down]
        for k in cands:
            fold = (RowOp("Multiply", const=float(k)),)
            got, got_ends = value(fold, r), value(fold, ends)
            if np.array_equal(got, want) and np.array_equal(got_ends, want_ends):
                out[i + 1 : j] = list(fold)
                break
        i += 1
    return tuple(out)


#: the integers a Round before the probabilities' requantization is checked on (beyond, the tail is monotone)
_TAIL_RANGE = 4096


def integer_tail(ops: tuple[RowOp, ...], grid: QuantGrid) -> tuple[tuple[RowOp, ...], tuple[int, int, int] | None]:
    """Split the probabilities' chain at its last Round when what follows it, and the requantization to ``grid``,
    is ``clamp(r + offset, lo, hi)`` on integers: checked on every integer of [-4096, 4096] (the tail is monotone,
    so the ends hold beyond). Returns (the ops up to the Round, (offset, lo, hi)), or (the ops, None)."""
    rounds = [i for i, op in enumerate(ops) if op.op == "Round"]
    if not rounds or not all(_monotone(op) or op.op in ("Maximum", "Minimum") for op in ops[rounds[-1] + 1 :]):
        return ops, None
    head, tail = ops[: rounds[-1] + 1], ops[rounds[-1] + 1 :]
    r = np.arange(-_TAIL_RANGE, _TAIL_RANGE + 1).astype(np.float32)
    y = r
    for op in tail:
        y = _f32_op(op, y)
    qmin, qmax = (-128, 127) if grid.qtype.name == "i8" else (0, 255)
    with np.errstate(all="ignore"):
        q = np.rint((y / np.float32(grid.scale)).astype(np.float32)) + grid.zero_point  # as the kernel
    if not np.all(np.isfinite(q)):
        return ops, None
    offset = int(q[_TAIL_RANGE])  # the integer r = 0 lands on
    lo, hi = max(qmin, int(q.min())), min(qmax, int(q.max()))
    expect = np.clip(np.arange(-_TAIL_RANGE, _TAIL_RANGE + 1) + offset, lo, hi)
    if not np.array_equal(q, expect):
        return ops, None
    return head, (offset, int(expect.min()), int(expect.max()))


def probabilities_in_range(ops: tuple[RowOp, ...], tail: tuple[int, int, int]) -> bool:
    """Whether the probabilities' integers need no clamp: ``ops`` (ending on the Round) non-decreasing and mapping
    every probability ``e * (1 / sum)`` in [0, 1 + 2^-23] (the f32 product of an exp and the rounded reciprocal of a
    sum that holds it) into [lo - offset, hi - offset]."""
    if not all(_monotone(op) for op in ops):
        return False
    y = np.array([0.0, np.nextafter(np.float32(1.0), np.float32(2.0))], np.float32)
    for op in ops:
        y = _f32_op(op, y)
    offset, lo, hi = tail
    return bool(np.all(np.isfinite(y)) and lo <= y[0] + offset and y[1] + offset <= hi)


def _reaches_only_operands(node: Node, qkv: set[int]) -> bool:
    """Whether ``node`` is computed from Q/K/V (their Transposes), not from the mask branch."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n.id in qkv:
            return True
        if n.id in seen:
            continue
        seen.add(n.id)
        stack.extend(i.source.node for i in n.inputs)
    return False


def evaluate_side(plan: Int8MHAPlan, args: list[np.ndarray]) -> list[np.ndarray]:
    """The side values (the mask branch) for these Subgraph inputs, on the ops' numpy references."""
    from snippets_core.ir.evaluate import evaluate_node

    env: dict[tuple[int, int], np.ndarray] = {}
    for p_id, i in plan.param_index.items():
        env[(p_id, 0)] = np.asarray(args[i])

    def value(o: Output) -> np.ndarray:
        key = (o.node.id, o.index)
        if key not in env and o.node.type_name == "Constant":
            env[key] = np.asarray(o.node.value)  # type: ignore[attr-defined]
        return env[key]

    for n in plan.side_nodes:
        outs = evaluate_node(n, [value(i.source) for i in n.inputs])
        for j, o in enumerate(outs):
            env[(n.id, j)] = o
    return [value(o) for o in plan.side_values]


# --- the kernel --------------------------------------------------------------------------------------------------


def pad(x: int, to: int) -> int:
    return -(-x // to) * to


#: the runtime-parameter block at the start of the scratch: one int64 per name (what depends on the rows M of Q
#: and the sequence S; MHAGeometry.params computes it per shape)
PARAMS = ("kblocks", "ktail", "ktiles", "krem", "vgroups", "vrem", "qblocks", "row0", "qsmall", "ones", "s",
          "sgroups", "tailv", "tmask", "kchunks", "krest", "a_compk", "a_kpack", "a_vpack", "a_scores", "a_probs")
PARAM_AT = {name: 8 * i for i, name in enumerate(PARAMS)}
#: bytes of the block (a cache line multiple)
PARAM_BYTES = pad(8 * len(PARAMS), 64)
#: columns of a group: the softmax, the scores, the probabilities and the side vectors are stored in blocks of 64
#: columns (``[group][row][64]``), so every stride in the kernel is a constant whatever S is
COLS = 64
#: bytes from one group of 64 columns to the next, in the scores (s32) and the probabilities (bytes): a block of
#: 32 rows plus a skew, so that the same column of consecutive groups is not 4 KiB apart (a load of the next group
#: would wait on the store just made to this one: 4K aliasing)
SCORES_GROUP = MB * COLS * 4 + COLS * 4
PROBS_GROUP = MB * COLS + COLS


@dataclass(frozen=True)
class MHAGeometry:
    """The static sizes of one kernel: head dims ``d`` (Q, K) and ``e`` (V), Q's row stride in bytes, the output's
    row stride in floats, side vectors, K's and V's row strides in bytes. The rows of Q and the sequence S are
    runtime parameters (:meth:`params`), so one kernel serves every sequence length and batch."""

    d: int
    e: int
    lda_q: int
    ldo: int
    n_side: int
    #: row strides (bytes) of the quantized K and V of one head (the copy-B reads them in place)
    ldk: int = 0
    ldv: int = 0

    @property
    def ep(self) -> int:
        return pad(self.e, LANES)

    @property
    def kp(self) -> int:
        """Bytes of a column of the packed K'^T (the head dim padded to a K group)."""
        return pad(self.d, K_GROUP)

    def static_layout(self) -> dict[str, int]:
        """Byte offsets of the scratch areas whose size does not depend on S (after the parameter block), and
        their end under ``"size"``."""
        sizes = {"rowsum": MB * 4, "compv": self.ep * 4, "acc": MB * self.ep * 4, "qpad": MB * self.lda_q,
                 "kstage": LANES * pad(self.d, 64)}
        out, at = {}, PARAM_BYTES
        for name, size in sizes.items():
            out[name] = at
            at += pad(size, 64)
        out["size"] = at
        return out

    def scratch_size(self, s: int) -> int:
        """Bytes of one thread's scratch for a sequence of ``s``."""
        return self.static_layout()["size"] + sum(pad(x, 64) for x in self._dynamic_sizes(s))

    def _dynamic_sizes(self, s: int) -> tuple[int, ...]:
        nk = -(-(s + 1) // COLS)  # column groups of the scores (S and the ones column)
        return (nk * COLS * 4, nk * COLS * self.kp, pad(s, K_GROUP) * self.ep, nk * SCORES_GROUP,
                -(-s // COLS) * PROBS_GROUP)

    def params(self, m: int, s: int, base: int) -> np.ndarray:
        """The runtime-parameter block for ``m`` rows of Q and a sequence of ``s``, the scratch at address
        ``base`` (its S-sized areas follow the static ones)."""
        blocks = -(-m // MB)
        rem = s - COLS * ((s - 1) // COLS)  # softmax columns of the last group, 1..64
        v = {"kblocks": (s + 1) // COLS, "ktail": -(-((s + 1) % COLS) // LANES), "ktiles": s // LANES,
             "krem": s % LANES, "vgroups": s // K_GROUP, "vrem": s % K_GROUP, "qblocks": blocks,
             "row0": MB * blocks - m, "qsmall": m if m < MB else 0,
             "ones": (s // COLS) * SCORES_GROUP + (s % COLS) * 4, "s": s, "sgroups": (s - 1) // COLS,
             "tailv": -(-rem // LANES), "tmask": (1 << (rem - LANES * ((rem - 1) // LANES))) - 1,
             "kchunks": s // COLS, "krest": -(-(s % COLS) // K_GROUP)}
        at = base + self.static_layout()["size"]
        for name, size in zip(("a_compk", "a_kpack", "a_vpack", "a_scores", "a_probs"), self._dynamic_sizes(s),
                              strict=True):
            v[name] = at
            at += pad(size, 64)
        return np.array([v[name] for name in PARAMS], np.int64)


#: onnxruntime's softmax exp (MLAS, ``MlasComputeSumExpF32Kernel`` on AVX-512): x clamped below, m = round(x / ln2)
#: by the 1.5 * 2^23 bias, x - m ln2 in two FMAs, a degree-6 polynomial whose last two coefficients are 1, then
#: ``vscalefps``; the same constants and order, so every exp and every probability is onnxruntime's bit for bit
MLAS_EXP = {"lower": -88.3762626647949, "bias": 12582912.0, "log2e": 1.44269504088896341, "ln2_hi": -6.93145752e-1,
            "ln2_lo": -1.42860677e-6}
MLAS_EXP_POLY = (float.fromhex("0x1.694000p-10"), float.fromhex("0x1.125edcp-7"), float.fromhex("0x1.555b5ap-5"),
                 float.fromhex("0x1.555450p-3"), float.fromhex("0x1.fffff6p-2"), 1.0, 1.0)


def emit_softmax_exp(a, x, m, p) -> None:  # type: ignore[no-untyped-def]
    """``x = exp(x)`` for ``x = score - max <= 0`` as onnxruntime's softmax computes it (:data:`MLAS_EXP`);
    ``m`` and ``p`` are clobbered."""
    k = MLAS_EXP
    a.vmaxps(x, x, f32(a, k["lower"]))
    a.vbroadcastss(m, a.const_f32(k["log2e"]))
    a.vfmadd213ps(m, x, f32(a, k["bias"]))  # x / ln2 + bias: rounded to an integer by the bias
    a.vsubps(m, m, f32(a, k["bias"]))
    a.vfmadd231ps(x, m, f32(a, k["ln2_hi"]))
    a.vfmadd231ps(x, m, f32(a, k["ln2_lo"]))
    a.vbroadcastss(p, a.const_f32(MLAS_EXP_POLY[0]))
    for c in MLAS_EXP_POLY[1:]:
        a.vfmadd213ps(p, x, f32(a, c))
    a.vscalefps(x, p, m)


def _hsum_mlas(a: Function, v, t) -> None:  # type: ignore[no-untyped-def]
    """Every lane of ``v`` = the sum of its 16 lanes in MLAS's order (its softmax sum: the two 256-bit halves
    added, then ``vhaddps`` twice, then the two 128-bit lanes), so the sum and 1 / sum are onnxruntime's."""
    for ins, imm in (("vshuff32x4", 0x4E), ("vpermilps", 0xB1), ("vpermilps", 0x4E), ("vshuff32x4", 0xB1)):
        if ins == "vshuff32x4":
            a.emit(ins, t, v, v, imm)
        else:
            a.emit(ins, t, v, imm)
        a.vaddps(v, v, t)


def _hreduce(a: Function, op: str, v, t) -> None:  # type: ignore[no-untyped-def]
    """Every lane of ``v`` = ``op`` over its 16 lanes (``op``: vmaxps, vaddps, vpaddd)."""
    for ins, imm in (("vshuff32x4", 0x4E), ("vshuff32x4", 0xB1)):
        a.emit(ins, t, v, v, imm)
        a.emit(op, v, v, t)
    for imm in (0x4E, 0xB1):
        a.vpermilps(t, v, imm)
        a.emit(op, v, v, t)


#: column vectors whose chains are emitted interleaved, op by op (independent work for the out-of-order core:
#: one vector's chain is a serial dependency of ~20 ops)
GROUP = 4


class _Recorder:
    """Stands for the Assembler while one vector's code is written: constants go to the real pool, instructions
    are kept to be interleaved with the other vectors' (:func:`_interleaved`)."""

    def __init__(self, fn: Function) -> None:
        self.fn = fn
        self.ops: list[tuple[str, tuple, dict]] = []

    def const_f32(self, value: float):  # type: ignore[no-untyped-def]
        return self.fn.const_f32(value)

    def const_i32(self, value: int):  # type: ignore[no-untyped-def]
        return self.fn.const_i32(value)

    def const_data(self, data: bytes, align: int = 4):  # type: ignore[no-untyped-def]
        return self.fn.const_data(data, align)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return lambda *args, **kwargs: self.ops.append((name, args, kwargs))


def _interleaved(fn: Function, n: int, body) -> None:  # type: ignore[no-untyped-def]
    """``body(a, j, x, t, aux)`` for the column vectors ``j < n``, GROUP at a time with their own registers
    (x: zmm i, t: zmm 4 + i, two exp aux: zmm 8 + 2i, 9 + 2i), their instructions interleaved."""
    for j0 in range(0, n, GROUP):
        recs = []
        for i, j in enumerate(range(j0, min(n, j0 + GROUP))):
            rec = _Recorder(fn)
            body(rec, j, ZMM[i], ZMM[GROUP + i], (ZMM[2 * GROUP + 2 * i], ZMM[2 * GROUP + 2 * i + 1]))
            recs.append(rec)
        for k in range(max(len(r.ops) for r in recs)):
            for r in recs:
                if k < len(r.ops):
                    name, args, kwargs = r.ops[k]
                    getattr(fn, name)(*args, **kwargs)


def _dispatch(fn: Function, value, variants: dict) -> None:  # type: ignore[no-untyped-def]
    """``variants[v]()`` for the runtime value ``v`` at ``value`` (a compare chain; nothing for other values)."""
    end = fn.new_label("int8_mha.dispatch_end")
    labels = {v: fn.new_label(f"int8_mha.case{v}") for v in variants}
    fn.mov(rax, value)
    for v, label in labels.items():
        fn.cmp(rax, v)
        fn.je(label)
    fn.jmp(end)
    for v, label in labels.items():
        fn.bind(label)
        variants[v]()
        fn.jmp(end)
    fn.bind(end)


def _counted(fn: Function, count, body, name: str) -> None:  # type: ignore[no-untyped-def]
    """``body()`` ``count`` times (a register the body leaves alone); a count of 0 runs it not at all."""
    skip = fn.new_label(f"int8_mha.{name}_skip")
    fn.test(count, count)
    fn.jz(skip)
    top = fn.label(f"int8_mha.{name}")
    body()
    fn.dec(count)
    fn.jnz(top)
    fn.bind(skip)


class Int8MHAKernel:
    """Emits the function ``f(q, k, v, out, side, scratch)`` running one head (module docstring); the rows of Q
    and the sequence length are read from the parameter block at the start of ``scratch``."""

    def __init__(self, plan: Int8MHAPlan, g: MHAGeometry) -> None:
        self.plan, self.g = plan, g
        self.lay = g.static_layout()

    def _chain(self, a: Function, ops: tuple[RowOp, ...], x, t, side, j: int) -> None:  # type: ignore[no-untyped-def]
        """Apply ``ops`` to the vector ``x`` (vector ``j`` of a group of 64 columns; ``side``: the group's side
        vectors); ``t`` is a free register."""
        bounded = True  # the values are finite integer sums times constants until a side vector (a mask) joins
        for op in ops:
            if op.op == "Round":
                a.vrndscaleps(x, x, 0x08)
                continue
            if op.op == "Divide" and op.side < 0 and not op.swapped and emit_divide(a, x, t, op.const, bounded):
                continue
            bounded = bounded and op.side < 0
            ins = CHAIN_OPS[op.op]
            if op.side >= 0:
                operand = side + (op.side * COLS + j * LANES) * 4
            else:
                operand = f32(a, op.const)
            if op.swapped:
                if op.side >= 0:
                    a.vmovups(t, operand)
                else:
                    a.vbroadcastss(t, a.const_f32(op.const))
                a.emit(ins, x, t, x)
            else:
                a.emit(ins, x, x, operand)

    def _tile_k(self, fn: Function, src, stride: int, dst) -> None:  # type: ignore[no-untyped-def]
        """16 rows of K' at ``src`` (``stride`` bytes apart) -> 16 columns of the packed K'^T at ``dst``: 16 x 16
        words transposed in registers (BrgemmCopyB's stages); a row's bytes past d are loaded as zeros."""
        from snippets_x86_64.brgemm_copy_b import TRANSPOSE_SLOT, emit_transpose_16x16

        g = self.g
        gk = g.kp // K_GROUP
        regs = list(ZMM[:17])
        for w0 in range(0, gk, LANES):
            valid = min(64, g.d - w0 * K_GROUP)  # bytes of a row in this chunk
            if valid < 64:
                fn.kmovq(k5, qword[fn.const_data(((1 << valid) - 1).to_bytes(8, "little"), 8)])
            for i in range(LANES):
                fn.vmovdqu8(regs[i].mask(k5).z if valid < 64 else regs[i], src + (i * stride + w0 * K_GROUP))
            rows = emit_transpose_16x16(fn, regs)
            for j in range(min(LANES, gk - w0)):
                fn.vmovdqu32(dst + (w0 + j) * COLS * 4, rows[TRANSPOSE_SLOT[j]])

    def _copy_k(self, fn: Function, src, prm) -> None:  # type: ignore[no-untyped-def]
        """K' [S, d] -> the packed K'^T [Kp, 64-column blocks] with the column of ones at n = S: the whole tiles of
        16 rows in a runtime loop, then the last (its rows, the ones row, zeros) staged in the scratch."""
        g, scr = self.g, prm.base
        dp = pad(g.d, 64)
        fn.mov(r10, prm["a_kpack"])
        fn.mov(r11, src)
        fn.xor(r12, r12)
        fn.mov(r13, prm["ktiles"])

        def tile() -> None:
            self._tile_k(fn, r11, g.ldk, r10)
            fn.add(r11, LANES * g.ldk)
            fn.add(r10, LANES * 4)
            fn.inc(r12)
            same = fn.new_label("int8_mha.kblock")
            fn.test(r12, 3)
            fn.jnz(same)
            fn.add(r10, COLS * g.kp - COLS * 4)  # the next block of 64 columns
            fn.bind(same)

        _counted(fn, r13, tile, "copy_k")
        stage = self.lay["kstage"]
        fn.vpxord(ZMM[0], ZMM[0], ZMM[0])
        for i in range(LANES * dp // 64):
            fn.vmovdqu64(scr + (stage + i * 64), ZMM[0])
        fn.lea(r14, scr + stage)
        fn.mov(r13, prm["krem"])

        def row() -> None:
            for c in range(0, g.d, 64):
                valid = min(64, g.d - c)
                fn.kmovq(k5, qword[fn.const_data(((1 << valid) - 1).to_bytes(8, "little"), 8)])
                fn.vmovdqu8(ZMM[0].mask(k5).z, r11 + c)
                fn.vmovdqu8(r14 + c, ZMM[0])
            fn.add(r11, g.ldk)
            fn.add(r14, dp)

        _counted(fn, r13, row, "stage_k")
        for c in range(0, g.d, 64):  # the ones row: Q's row sums
            valid = min(64, g.d - c)
            fn.vmovdqu8(ZMM[0], fn.const_data(bytes([1] * valid + [0] * (64 - valid)), 64))
            fn.vmovdqu8(r14 + c, ZMM[0])
        fn.lea(r11, scr + stage)
        self._tile_k(fn, r11, dp, r10)

    def _copy_v(self, fn: Function, src, prm) -> None:  # type: ignore[no-untyped-def]
        """V' [S, e] -> the packed V' [pad4(S) / 4 groups][ep x 4 bytes]: per 4 rows and 64 columns the bytes
        interleaved into words (``vpunpck{l,h}bw``, ``vpunpck{l,h}wd``), the 128-bit lanes transposed
        (``vshuff32x4``); the last rows (S % 4) in a variant per count, zeros after them."""
        g = self.g
        r, t, u = ZMM[0:4], ZMM[4:8], ZMM[8:12]
        fn.mov(r10, prm["a_vpack"])
        fn.mov(r11, src)

        def group(rows: int) -> None:
            for c0 in range(0, g.ep, N_BLOCK):
                width = min(N_BLOCK, g.ep - c0)
                valid = min(64, g.e - c0)
                if valid < 64:
                    fn.kmovq(k6, qword[fn.const_data(((1 << valid) - 1).to_bytes(8, "little"), 8)])
                for i in range(K_GROUP):
                    if i < rows:
                        fn.vmovdqu8(r[i].mask(k6).z if valid < 64 else r[i], r11 + (i * g.ldv + c0))
                    else:
                        fn.vpxord(r[i], r[i], r[i])
                fn.vpunpcklbw(t[0], r[0], r[1])
                fn.vpunpckhbw(t[1], r[0], r[1])
                fn.vpunpcklbw(t[2], r[2], r[3])
                fn.vpunpckhbw(t[3], r[2], r[3])
                fn.vpunpcklwd(u[0], t[0], t[2])  # lane L: columns 16L + 0..3
                fn.vpunpckhwd(u[1], t[0], t[2])  # 16L + 4..7
                fn.vpunpcklwd(u[2], t[1], t[3])  # 16L + 8..11
                fn.vpunpckhwd(u[3], t[1], t[3])  # 16L + 12..15
                fn.vshuff32x4(t[0], u[0], u[1], 0x44)
                fn.vshuff32x4(t[1], u[0], u[1], 0xEE)
                fn.vshuff32x4(t[2], u[2], u[3], 0x44)
                fn.vshuff32x4(t[3], u[2], u[3], 0xEE)
                outs = [(t[0], t[2], 0x88), (t[0], t[2], 0xDD), (t[1], t[3], 0x88), (t[1], t[3], 0xDD)]
                for j in range(width // LANES):  # output vector j: columns c0 + 16j .. + 15
                    x, y, imm = outs[j]
                    fn.vshuff32x4(r[j], x, y, imm)
                    fn.vmovdqu32(r10 + (c0 + j * LANES) * 4, r[j])
            fn.add(r11, K_GROUP * g.ldv)
            fn.add(r10, g.ep * 4)

        fn.mov(r13, prm["vgroups"])
        _counted(fn, r13, lambda: group(K_GROUP), "copy_v")
        _dispatch(fn, prm["vrem"], {n: (lambda n=n: group(n)) for n in range(1, K_GROUP)})

    def build(self):  # type: ignore[no-untyped-def]
        p, g, lay = self.plan, self.g, self.lay
        fn = Function("int8_mha", args=("q", "k", "v", "out", "side", "scratch"))
        q, kp, vp, out, side, scr = fn.args
        prm = _Params(scr)
        # K'^T and V' of this head into the VNNI layout in the scratch (the int8 copy-B), then read from there
        self._copy_k(fn, kp, prm)
        self._copy_v(fn, vp, prm)
        fn.mov(kp, prm["a_kpack"])
        fn.mov(vp, prm["a_vpack"])
        z = ZMM
        blocks_left, row0 = qword[fn.stack_slot(8)], qword[fn.stack_slot(8)]
        n_left = qword[fn.stack_slot(8)]
        q_shift = S8_SHIFT if p.q.signed else 0
        p_shift = S8_SHIFT if p.p_signed else 0
        comp_q = p.q.zero_point + q_shift  # the byte of the row that makes Q's compensation
        comp_p = p.p_grid.zero_point + p_shift
        k_shift = 0 if p.k.signed else S8_SHIFT
        v_shift = 0 if p.v.signed else S8_SHIFT
        ne = -(-g.e // LANES)
        fn.kmovw(k3, word[scr + PARAM_AT["tmask"]])  # the lanes of the last softmax vector
        if g.e % LANES:
            fn.kmovw(k7, word[fn.const_data(((1 << (g.e % LANES)) - 1).to_bytes(2, "little"), 2)])

        def regs(a_reg, b_reg, c_reg, comp_reg, k_chunks=None, k_rest=None):  # type: ignore[no-untyped-def]
            return Int8Regs(a_reg, b_reg, c_reg, comp_reg, comp_reg, comp_reg, pa=rax, pb=r10, cnt=r11, arow=r12,
                            crow=r13, mcnt=r14, vecs=ZMM[:VEC_BUDGET], n_mask=k1, k_mask=k2, k_chunks=k_chunks,
                            k_rest=k_rest)

        def scores_brgemm(rows: int, a_reg, lda: int, a_signed: bool, comp: bool, c_at,  # type: ignore[no-untyped-def]
                          c_step: int) -> None:
            """``A [rows] x K'`` over the runtime columns S + 1: whole blocks of 64 in a loop, then the variant of
            the vectors left. rbx walks K', r15 the s32 C, rbp the compensation."""
            fn.mov(rbx, kp)
            fn.mov(r15, c_at)
            if comp:
                fn.mov(rbp, prm["a_compk"])

            def emit(n: int) -> None:
                BrgemmInt8Kernel(Int8Geometry(rows, n, g.d, lda=lda, ldc=COLS, a_signed=a_signed,
                                              compensation=comp, b_group=COLS * 4)).emit(fn, regs(a_reg, rbx, r15, rbp))

            def block() -> None:
                emit(COLS)
                fn.add(rbx, COLS * g.kp)
                fn.add(r15, c_step)
                if comp:
                    fn.add(rbp, COLS * 4)
                fn.dec(n_left)

            fn.mov(rax, prm["kblocks"])
            fn.mov(n_left, rax)
            skip = fn.new_label("int8_mha.kblocks_skip")
            fn.test(rax, rax)
            fn.jz(skip)
            top = fn.label("int8_mha.kblocks")
            block()
            fn.jnz(top)
            fn.bind(skip)
            _dispatch(fn, prm["ktail"], {nv: (lambda nv=nv: emit(nv * LANES)) for nv in range(1, 5)})

        def pv_brgemm(rows: int, a_reg, lda: int, a_signed: bool, comp: bool,  # type: ignore[no-untyped-def]
                      a_chunk: int, c_reg) -> None:
            """``A [rows] x V'`` over the runtime K = S: chunks of 64, then the groups of 4 left (V' and the
            probabilities are zero past S)."""
            BrgemmInt8Kernel(Int8Geometry(rows, g.e, COLS, lda=lda, ldc=g.ep, a_signed=a_signed, compensation=comp,
                                          b_group=g.ep * 4, b_block=N_BLOCK * 4, k_chunk=COLS,
                                          a_chunk_stride=a_chunk)).emit(fn, regs(a_reg, vp, c_reg, rbp,
                                                                                 prm["kchunks"], prm["krest"]))

        # Q's rows when fewer than a block: copied to the bottom of a block in the scratch (the Brgemm reads 32)
        small = fn.new_label("int8_mha.q_full")
        fn.mov(r13, prm["qsmall"])
        fn.test(r13, r13)
        fn.jz(small)
        fn.lea(r14, scr + (lay["qpad"] + MB * g.lda_q))
        fn.imul(rax, r13, g.lda_q)
        fn.sub(r14, rax)
        fn.mov(r10, r14)

        def q_row() -> None:
            for c in range(0, g.d, 64):
                valid = min(64, g.d - c)
                fn.kmovq(k2, qword[fn.const_data(((1 << valid) - 1).to_bytes(8, "little"), 8)])
                fn.vmovdqu8(ZMM[0].mask(k2).z, q + c)
                fn.vmovdqu8((r14 + c).mask(k2), ZMM[0])
            fn.add(q, g.lda_q)
            fn.add(r14, g.lda_q)

        top = fn.label("int8_mha.q_copy")
        q_row()
        fn.dec(r13)
        fn.jnz(top)
        fn.mov(q, r10)
        fn.bind(small)
        # the compensations of Q's and P's zero points: a row of that byte times K' and V', once per head
        if comp_q:
            fn.lea(rbp, fn.const_data(bytes([comp_q]) * pad(g.d, 64), 64))
            scores_brgemm(1, rbp, pad(g.d, 64), False, False, prm["a_compk"], COLS * 4)
        if comp_p:
            fn.lea(rbx, fn.const_data(bytes([comp_p]) * COLS, 64))
            fn.lea(r15, scr + lay["compv"])
            pv_brgemm(1, rbx, COLS, False, False, 0, r15)
        scale_qk = float(np.float32(p.q.scale) * np.float32(p.k.scale))
        scale_pv = float(np.float32(p.p_grid.scale) * np.float32(p.v.scale))
        xmax, xsum, rrow, t = z[28], z[29], z[30], z[27]

        def scores(last: int):  # type: ignore[no-untyped-def]
            def body(a, j: int, x, tj, aux) -> None:  # type: ignore[no-untyped-def]
                masked = j == last
                a.vpaddd(x, rrow, r13 + j * 64)
                a.vcvtdq2ps(x, x)
                a.vmulps(x, x, f32(a, scale_qk))
                self._chain(a, p.scores, x, tj, r14, j)
                a.vmaxps(xmax.mask(k3) if masked else xmax, xmax, x)
                a.vmovups(r13 + j * 64, x)
            return body

        def exps(last: int):  # type: ignore[no-untyped-def]
            def body(a, j: int, x, tj, aux) -> None:  # type: ignore[no-untyped-def]
                masked = j == last
                a.vmovups(x, r13 + j * 64)
                a.vsubps(x, x, xmax)
                emit_softmax_exp(a, x, *aux)
                if masked:
                    a.vmovaps(x.mask(k3).z, x)
                a.vaddps(xsum, xsum, x)
                a.vmovups(r13 + j * 64, x)
            return body

        p_in_range = p.p_tail is not None and probabilities_in_range(p.probs, p.p_tail)

        def probs(last: int):  # type: ignore[no-untyped-def]
            def body(a, j: int, x, tj, aux) -> None:  # type: ignore[no-untyped-def]
                masked = j == last
                a.vmulps(x, xsum, r13 + j * 64)
                self._chain(a, p.probs if p.p_tail is None else p.probs[:-1], x, tj, r14, j)
                if p.p_tail is None:  # QuantizeLinear: x / scale, rounded half to even
                    if not emit_divide(a, x, tj, p.p_grid.scale):
                        a.vdivps(x, x, f32(a, p.p_grid.scale))
                    a.emit("vcvtps2dq", x, x, rc="rn")
                    a.vpaddd(x, x, i32(a, p.p_grid.zero_point))
                else:  # the chain ended on a Round (vcvtps2dq {rn} is that Round): its integers, moved, clamped
                    offset, lo, hi = p.p_tail
                    a.emit("vcvtps2dq", x, x, rc="rn")
                    if offset:
                        a.vpaddd(x, x, i32(a, offset))
                    if not p_in_range:
                        a.vpmaxsd(x, x, i32(a, lo))
                        a.vpminsd(x, x, i32(a, hi))
                if masked:  # zero bytes past S: the P x V Brgemm reads whole groups of 4
                    a.vmovdqa32(x.mask(k3).z, x)
                a.vpaddd(rrow, rrow, x)
                a.vpmovdb(r12 + j * LANES, x)
            return body

        def groups(make, name: str, step_side: bool, step_probs: bool) -> None:  # type: ignore[no-untyped-def]
            """One pass over the row's groups of 64 columns: the whole ones in a loop, then the variant of the last
            group's vectors (1..4, the last one under the lane mask)."""
            fn.mov(r13, r15)
            if step_side:
                fn.mov(r14, side)
            if step_probs:
                fn.mov(r12, rbx)

            def group() -> None:
                _interleaved(fn, 4, make(-1))
                fn.add(r13, SCORES_GROUP)
                if step_side:
                    fn.add(r14, g.n_side * COLS * 4)
                if step_probs:
                    fn.add(r12, PROBS_GROUP)

            fn.mov(r10, prm["sgroups"])
            _counted(fn, r10, group, name)
            _dispatch(fn, prm["tailv"], {n: (lambda n=n: _interleaved(fn, n, make(n - 1))) for n in range(1, 5)})

        fn.mov(rax, prm["qblocks"])
        fn.mov(blocks_left, rax)
        fn.mov(row0, 0)
        block_top = fn.label("int8_mha.block")
        # the last block ends on row M: it starts row0 rows back and its first row0 rows are not computed again
        body = fn.new_label("int8_mha.block_body")
        fn.cmp(blocks_left, 1)
        fn.jne(body)
        fn.mov(rax, prm["row0"])
        fn.mov(row0, rax)
        fn.imul(r10, rax, g.lda_q)
        fn.sub(q, r10)
        fn.imul(r10, rax, g.ldo * 4)
        fn.sub(out, r10)
        fn.bind(body)
        # 1. scores (s32) = Q_blk x K' - q_zp colsum(K'), in groups of 64 columns
        scores_brgemm(MB, q, g.lda_q, p.q.signed, bool(comp_q), prm["a_scores"], SCORES_GROUP)
        # 2. softmax rows row0..MB: r15 walks the scores rows, rbx the probabilities rows, rbp the row sums
        fn.mov(r15, prm["a_scores"])
        fn.mov(rbx, prm["a_probs"])
        fn.lea(rbp, scr + lay["rowsum"])
        fn.mov(rax, row0)
        fn.lea(rbp, rbp + rax * 4)
        fn.mov(r11, MB)
        fn.sub(r11, rax)
        fn.shl(rax, 6)
        fn.add(rbx, rax)
        fn.shl(rax, 2)
        fn.add(r15, rax)
        top = fn.label("int8_mha.rows")
        fn.mov(rax, prm["ones"])
        fn.mov(rax.r32, dword[r15 + rax])
        fn.imul(rax.r32, rax.r32, k_shift - p.k.zero_point)
        fn.vpbroadcastd(rrow, rax.r32)
        fn.vbroadcastss(xmax, fn.const_f32(-np.inf))
        groups(scores, "scores", True, False)
        _hreduce(fn, "vmaxps", xmax, t)
        fn.vxorps(xsum, xsum, xsum)
        groups(exps, "exps", False, False)
        _hsum_mlas(fn, xsum, t)
        fn.vbroadcastss(t, fn.const_f32(1.0))
        fn.vdivps(xsum, t, xsum)
        fn.vpxord(rrow, rrow, rrow)  # the row sum of the probabilities' integers
        groups(probs, "probs", True, True)
        _hreduce(fn, "vpaddd", rrow, t)
        fn.vmovd(dword[rbp], rrow.xmm)
        fn.add(r15, COLS * 4)
        fn.add(rbx, COLS)
        fn.add(rbp, 4)
        fn.dec(r11)
        fn.jnz(top)
        # 3. acc (s32) = P_blk x V' - p_zp colsum(V')
        fn.mov(r15, prm["a_probs"])
        fn.lea(rbx, scr + lay["acc"])
        fn.lea(rbp, scr + lay["compv"])
        pv_brgemm(MB, r15, COLS, p.p_signed, bool(comp_p), PROBS_GROUP, rbx)
        # 4. out rows row0..MB: + (v_shift - v_zp) sum_s (p - p_zp), dequantized, chain2
        fn.mov(rax, row0)
        fn.lea(rbp, scr + lay["rowsum"])
        fn.lea(rbp, rbp + rax * 4)
        fn.mov(r11, MB)
        fn.sub(r11, rax)
        fn.imul(r10, rax, g.ep * 4)
        fn.lea(rbx, scr + lay["acc"])
        fn.add(rbx, r10)
        fn.imul(r10, rax, g.ldo * 4)
        fn.add(r10, out)
        fn.mov(r12, prm["s"])
        fn.imul(r12, r12, p.p_grid.zero_point)
        top = fn.label("int8_mha.out_rows")
        fn.mov(rax.r32, dword[rbp])
        fn.sub(rax.r32, r12.r32)
        fn.imul(rax.r32, rax.r32, v_shift - p.v.zero_point)
        fn.vpbroadcastd(rrow, rax.r32)

        def outs(a, j: int, x, tj, aux) -> None:  # type: ignore[no-untyped-def]
            a.vpaddd(x, rrow, rbx + j * 64)
            a.vcvtdq2ps(x, x)
            a.vmulps(x, x, f32(a, scale_pv))
            self._chain(a, p.out, x, tj, side, j)
            a.vmovups((r10 + j * 64).mask(k7) if g.e % LANES and j == ne - 1 else r10 + j * 64, x)

        _interleaved(fn, ne, outs)
        fn.add(rbx, g.ep * 4)
        fn.add(rbp, 4)
        fn.add(r10, g.ldo * 4)
        fn.dec(r11)
        fn.jnz(top)
        fn.add(q, MB * g.lda_q)
        fn.add(out, MB * g.ldo * 4)
        fn.dec(blocks_left)
        fn.jnz(block_top)
        return fn.finalize(None, (ctypes.c_void_p,) * 6)


class _Params:
    """The runtime-parameter block at ``base`` (the scratch): ``prm["s"]`` is its qword operand."""

    def __init__(self, base) -> None:  # type: ignore[no-untyped-def]
        self.base = base

    def __getitem__(self, name: str):  # type: ignore[no-untyped-def]
        return qword[self.base + PARAM_AT[name]]


@cache
def int8_mha_function(plan: Int8MHAPlan, g: MHAGeometry):  # type: ignore[no-untyped-def]
    """The compiled kernel of ``plan`` for the static sizes ``g`` (one for every sequence length and batch)."""
    from snippets_x86_64.cpu import cpu_features

    if "avx512_vnni" not in cpu_features():
        raise UnsupportedByTarget("the int8 MHA needs AVX512_VNNI (vpdpbusd); this CPU lacks it")
    return Int8MHAKernel(plan, g).build()


__all__ = ["MB", "PARAMS", "Int8MHAKernel", "Int8MHAPlan", "Int8MHAReject", "MHAGeometry", "RowOp", "evaluate_side",
           "int8_mha_function", "plan_int8_mha"]

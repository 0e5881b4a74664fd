"""TokenizeInt8MatMulSnippets: a MatMul of two quantized activations becomes one int8 batched-MatMul Subgraph.

The attention of a statically quantized (QDQ) transformer multiplies two activations that each went through a
per-tensor u8/i8 Q->DQ pair (ConvertQDQToFakeQuantize made them FakeQuantize): ``Q x K^T`` and ``softmax(..) x V``.
Their f32 values lie on the grids of those pairs, maybe moved by Transposes (the head split), so the product is
``a_scale * b_scale * sum_k (qa - a_zp)(qb - b_zp)`` with ``qa``, ``qb`` the integers the values come from::

    x (f32, on grid a) [-> Transpose] -> MatMul(., .) <- [Transpose <-] y (f32, on grid b)          f32 out

The Subgraph holds the Transposes that alone feed the MatMul and the MatMul; its inputs are the on-grid values
(the FakeQuantize that made them stays with the eltwise ops before it, e.g. the softmax). A target with an int8
kernel quantizes both operands back to their integers (exactly: they are on the grid) at run time, repacks B per
batch and runs the int8 Brgemm with the dequantization as a post-op; any other target evaluates the body as before.
Runs with the ``int8_fc`` and ``int8_matmul`` tokenization knobs (the second off by default), after TokenizeInt8FCSnippets (which takes the MatMuls with a constant
int8 weight). A MatMul of two grid-valued activations left alone keeps why in ``rt_info[INT8_FC_REJECT_REASON_KEY]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from snippets_core.ir.model import Model
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.quantize import QUANTIZATION_GRID
from snippets_core.ir.pass_manager import Pass
from snippets_core.tokenization.config import TokenizationConfig
from snippets_core.tokenization.tokenize_int8_fc_snippets import _ACTIVATION_TYPES, INT8_FC_REJECT_REASON_KEY, \
    Int8Reject
from snippets_core.tokenization.tokenize_mha_snippets import LiveNodes, _build_subgraph, _live_ids, _targets

#: rt_info key on an int8 batched-MatMul Subgraph: its Int8MatMulSpec
INT8_BATCHED_MATMUL = "SnippetsInt8BatchedMatMul"


@dataclass(frozen=True)
class Int8Operand:
    """One quantized operand: its grid, the Transpose applied to the Subgraph input before the MatMul (None: none)
    and which Subgraph input it is."""

    signed: bool
    scale: float
    zero_point: int
    perm: tuple[int, ...] | None
    index: int = 0

    def describe(self) -> str:
        return "s8" if self.signed else "u8"


@dataclass(frozen=True)
class Int8MatMulSpec:
    """``out[.., m, n] = a.scale * b.scale * sum_k (qa[.., m, k] - a.zero_point) * (qb[.., k, n] - b.zero_point)``
    with ``qa``, ``qb`` the integers of the (transposed) inputs; ``transpose_b``: the MatMul reads B as [.., N, K]."""

    a: Int8Operand
    b: Int8Operand
    transpose_b: bool

    def describe(self) -> str:
        t = "^T" if self.transpose_b else ""
        return f"{self.a.describe()} x {self.b.describe()}{t} (both activations quantized per call), f32 out"


def _const_perm(node: Node) -> tuple[int, ...] | None:
    src = node.inputs[1].source.node if len(node.inputs) > 1 else None
    if src is None or src.type_name != "Constant":
        return None
    return tuple(int(v) for v in np.asarray(src.value).reshape(-1))  # type: ignore[attr-defined]


def _operand(matmul: Node, i: int, live: set[int]) -> tuple[list[Node], Output, Int8Operand]:
    """(the Transposes to take in, the on-grid f32 value the Subgraph reads, the operand) of ``matmul``'s input
    ``i``: a value on a per-tensor u8/i8 grid, maybe through Transposes that feed nothing else."""
    src = matmul.inputs[i].source
    moves: list[Node] = []
    while src.node.type_name == "Transpose" and len(_targets(src, live)) == 1 and _const_perm(src.node) is not None:
        moves.insert(0, src.node)
        src = src.node.inputs[0].source
    g = src.node
    walk = g
    while walk.type_name in ("Transpose", "Reshape", "Squeeze", "Unsqueeze") and QUANTIZATION_GRID not in walk.rt_info:
        walk = walk.inputs[0].source.node
    grid = walk.rt_info.get(QUANTIZATION_GRID)
    if grid is None or grid.qtype not in _ACTIVATION_TYPES:
        raise Int8Reject(f"its input {i} comes from {g.type_name} '{g.name}', not a per-tensor u8/i8 Q->DQ pair")
    if g.type_name == "Constant":
        raise Int8Reject(f"its input {i} is a constant (an int8 FullyConnected's weight)")
    perm: tuple[int, ...] | None = None
    for t in moves:
        p = _const_perm(t)
        assert p is not None
        perm = p if perm is None else tuple(perm[j] for j in p)
    return moves, src, Int8Operand(_ACTIVATION_TYPES[grid.qtype], float(grid.scale), int(grid.zero_point), perm)


@dataclass(frozen=True)
class TokenizeInt8MatMulSnippets(Pass):
    """Wrap each MatMul of two quantized activations into a Completed int8 batched-MatMul Subgraph (see the module
    docstring)."""

    name: ClassVar[str] = "tokenize-int8-matmul-snippets"
    config: TokenizationConfig = field(default_factory=TokenizationConfig)

    def run(self, model: Model) -> bool:
        if not self.config.enabled or not self.config.int8_fc or not self.config.int8_matmul:
            return False
        changed = False
        live = LiveNodes(model)
        for node in model.get_ordered_ops():
            if node.type_name != "MatMul":
                continue
            if node.id not in live.ids():
                continue
            try:
                chain, spec, xs = self._match(node, live.ids())
            except Int8Reject as e:
                if any(QUANTIZATION_GRID in i.source.node.rt_info for i in node.inputs):
                    node.rt_info.setdefault(INT8_FC_REJECT_REASON_KEY, str(e))
                continue
            node.rt_info.pop(INT8_FC_REJECT_REASON_KEY, None)
            sg = _build_subgraph(chain, 0, _live_ids(model))
            index = [next(j for j, i in enumerate(sg.inputs) if i.source == x) for x in xs]
            sg.rt_info[INT8_BATCHED_MATMUL] = Int8MatMulSpec(
                Int8Operand(spec.a.signed, spec.a.scale, spec.a.zero_point, spec.a.perm, index[0]),
                Int8Operand(spec.b.signed, spec.b.scale, spec.b.zero_point, spec.b.perm, index[1]), spec.transpose_b)
            changed = True
            live.changed()
        return changed

    @staticmethod
    def _match(matmul: Node, live: set[int]) -> tuple[list[Node], Int8MatMulSpec, list[Output]]:
        if matmul.transpose_a:  # type: ignore[attr-defined]
            raise Int8Reject("it has transpose_a")
        moves_a, xa, a = _operand(matmul, 0, live)
        moves_b, xb, b = _operand(matmul, 1, live)
        if xa == xb:
            raise Int8Reject("both inputs are the same value")
        for x in (xa, xb):
            if not x.shape.rank_is_static or x.shape.rank < 3:
                raise Int8Reject(f"an input has shape {x.shape}; the int8 batched MatMul takes rank >= 3")
        return [*moves_a, *moves_b, matmul], Int8MatMulSpec(a, b, bool(matmul.transpose_b)), [xa, xb]  # type: ignore[attr-defined]


def is_int8_matmul(node: Node) -> bool:
    """Whether ``node`` is an int8 batched-MatMul Subgraph (TokenizeInt8MatMulSnippets)."""
    return INT8_BATCHED_MATMUL in node.rt_info


__all__ = ["INT8_BATCHED_MATMUL", "Int8MatMulSpec", "Int8Operand", "TokenizeInt8MatMulSnippets", "is_int8_matmul"]

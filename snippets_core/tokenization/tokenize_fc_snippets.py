"""TokenizeFCSnippets: FullyConnected (a MatMul with a constant weight) and its post-ops into one Subgraph.

A linear layer, ``y = act(x @ W + b) (+ residual)``, is matched from every MatMul whose weight (input 1) is a
Constant of rank 2 (``[K, N]``, or ``[N, K]`` with ``transpose_b``, as Gemm's ``transB`` exports it)::

                  x [.., M, K]     W Constant [K, N]
                          \\        /
                            MatMul                  no transpose_a, f32 x f32 or bf16 x bf16, K and N static
                              |
        post-ops: a DAG of eltwise ops fed only by the MatMul's result, Constants and other tensors that
        broadcast to the MatMul's output shape (bias Add, Gemm's alpha/beta Multiply, Relu, Gelu, the Erf
        form x*0.5*(1+erf(x/sqrt2)) and the tanh form as exported, Sigmoid, Swish, Mul by a scalar,
        residual Add, ...; a bf16 FC's Convert to f32, autocast's Cast after the MatMul, and f32 ops after it)

The post-op region grows in topological order while every op's inputs are inside the region or outside
tensors that cannot depend on it; it is cut back to the largest prefix that has exactly one output (the
Erf Gelu's ``x`` has two consumers, so the region is only accepted once both have been taken).

Runs after TokenizeMHASnippets (an MHA's MatMuls never have constant weights, but an MHA match must win)
and before the eltwise Tokenizer. The Subgraph is marked Completed and ``FULLY_CONNECTED``; the body keeps
the MatMul (MatMulToBrgemm lowers it) and marks the weight's body Parameter with ``FC_WEIGHT`` so a target
can repack it once at compile time. Only M (the rows of x) depends on the input shape: K and N come from the
weight. A MatMul that is not an FC keeps the reason in ``rt_info[FC_REJECT_REASON_KEY]`` for
``snippets inspect``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.pass_manager import Pass
from snippets_core.tokenization.config import TokenizationCallback, TokenizationConfig, ask_callback
from snippets_core.tokenization.marks import is_completed, is_skipped_by_plugin
from snippets_core.tokenization.tokenization_utils import constant_goes_inside
from snippets_core.tokenization.tokenize_mha_snippets import REJECT_REASON_KEY, LiveNodes, _build_subgraph, _targets
from snippets_core.tokenization.tokenize_snippets import BINARY_ELTWISE, UNARY_ELTWISE, appropriate_for_subgraph

#: rt_info key on a MatMul that could not start a FullyConnected Subgraph: why (read by ``snippets inspect``)
FC_REJECT_REASON_KEY = "SnippetsFCRejectReason"
#: rt_info key on a FullyConnected Subgraph (value True)
FULLY_CONNECTED = "SnippetsFullyConnected"
#: rt_info key on the body Parameter that stands for the constant weight (value True)
FC_WEIGHT = "SnippetsFCWeight"

#: eltwise ops a post-op region may hold (comparisons and logic would change the output type)
FC_UNARY_OPS = UNARY_ELTWISE - {"LogicalNot"}
FC_BINARY_OPS = frozenset({"Add", "Subtract", "Multiply", "Divide", "Maximum", "Minimum", "Power", "PRelu",
                           "SquaredDifference"}) & BINARY_ELTWISE
#: element types of the weight and the activations the FC takes (both the same; bf16 when the model asks for it)
FC_ELEMENT_TYPES = frozenset({ElementType.f32, ElementType.bf16})
#: at most this many tensors from outside (besides x and W) feed the post-ops: each is a data pointer
MAX_POST_OP_INPUTS = 6


class FCReject(Exception):
    """Internal: why the MatMul does not start a FullyConnected Subgraph."""


def constant_weight(matmul: Node) -> Node | None:
    """The Constant feeding ``matmul``'s input 1, or None."""
    src = matmul.inputs[1].source.node
    return src if src.type_name == "Constant" else None


def is_fc_matmul(matmul: Node) -> str | None:
    """None if ``matmul`` is a FullyConnected the Tokenizer can take, else why not."""
    if matmul.type_name != "MatMul":
        return f"{matmul.type_name} is not a MatMul"
    if constant_weight(matmul) is None:
        return (f"its weight (input 1) comes from {matmul.inputs[1].source.node.type_name} "
                f"'{matmul.inputs[1].source.node.name}', not a Constant")
    if matmul.transpose_a:  # type: ignore[attr-defined]
        return "it has transpose_a; the Brgemm reads A row by row"
    w, x = matmul.inputs[1], matmul.inputs[0]
    if not w.shape.is_static or w.shape.rank != 2:
        return f"its weight has shape {w.shape}; a FullyConnected weight is a static rank-2 tensor"
    if not x.shape.rank_is_static or x.shape.rank < 2:
        return f"its input has shape {x.shape}; a FullyConnected input has rank 2 or more"
    k = w.shape[0] if not matmul.transpose_b else w.shape[1]  # type: ignore[attr-defined]
    if x.shape[-1] is not None and x.shape[-1] != k:
        return f"its input's last dim {x.shape[-1]} is not the weight's K {k}"
    for port in (x, w):
        if port.element_type not in FC_ELEMENT_TYPES:
            return f"it multiplies {port.element_type.value}; FullyConnected takes f32 or bf16"
    if x.element_type != w.element_type:
        return f"it multiplies {x.element_type.value} by {w.element_type.value}; FullyConnected takes one type"
    return None


def _is_widening(node: Node) -> bool:
    """A Convert of a bf16/f16 result to f32: the end of torch's autocast pattern, Cast(bf16 -> f32) after the
    MatMul (and of ConvertFCToBF16's rewrite). The post-ops after it are f32."""
    return (node.type_name == "Convert" and node.inputs[0].element_type in (ElementType.bf16, ElementType.f16)
            and node.outputs[0].element_type == ElementType.f32)


def _is_post_op(node: Node) -> bool:
    return (node.type_name in FC_UNARY_OPS or node.type_name in FC_BINARY_OPS or _is_widening(node)) \
        and appropriate_for_subgraph(node) and not is_skipped_by_plugin(node) and len(node.outputs) == 1


def _descendants(start: Node, live: set[int]) -> set[int]:
    """Ids of every live node reachable from ``start``'s outputs (an outside input must not be among them)."""
    seen: set[int] = set()
    stack = [start]
    while stack:
        n = stack.pop()
        for out in n.outputs:
            for t in _targets(out, live):
                if t.node.id not in seen:
                    seen.add(t.node.id)
                    stack.append(t.node)
    return seen


@dataclass(frozen=True)
class TokenizeFCSnippets(Pass):
    """Wrap each FullyConnected (MatMul with a constant weight, plus its post-ops) into a Completed Subgraph,
    in place (see the module docstring). ``callback`` is the target's FC veto, asked about the MatMul (not in
    IgnoreCallback mode); it returns a reason or None."""

    name: ClassVar[str] = "tokenize-fc-snippets"
    config: TokenizationConfig = field(default_factory=TokenizationConfig)
    callback: TokenizationCallback | None = None

    def run(self, model: Model) -> bool:
        if not self.config.enabled:
            return False
        changed = False
        live = LiveNodes(model)
        for node in model.get_ordered_ops():
            if node.type_name != "MatMul":
                continue
            if node.id not in live.ids():
                continue  # taken by an earlier Subgraph
            try:
                ordered = self._match(node, live.ids())
            except FCReject as e:
                node.rt_info[FC_REJECT_REASON_KEY] = str(e)
                continue
            node.rt_info.pop(FC_REJECT_REASON_KEY, None)
            node.rt_info.pop(REJECT_REASON_KEY, None)  # not an MHA, but fused: the MHA reason no longer matters
            sg = _build_subgraph(ordered, 0, live.ids())
            sg.rt_info[FULLY_CONNECTED] = True
            _mark_weight(sg)
            changed = True
            live.changed()
        return changed

    def _veto(self, node: Node) -> str | None:
        return ask_callback(self.callback, self.config, node, "FC")

    def _match(self, matmul: Node, live: set[int]) -> list[Node]:
        why = is_fc_matmul(matmul)
        if why is not None:
            raise FCReject(why)
        veto = self._veto(matmul)
        if veto is not None:
            raise FCReject(f"vetoed by the target: {veto}")
        return [matmul, *self._post_ops(matmul, live)]

    def _post_ops(self, matmul: Node, live: set[int]) -> list[Node]:
        """The largest topologically ordered post-op region after ``matmul`` with a single output."""
        out_shape = matmul.outputs[0].shape
        region: dict[int, Node] = {matmul.id: matmul}
        downstream = _descendants(matmul, live)
        added: list[Node] = []
        types = {matmul.outputs[0].element_type}  # the element types a post-op may produce
        outside: set[tuple[int, int]] = set()
        best = 0
        grew = True
        while grew:
            grew = False
            frontier = [t.node for n in [matmul, *added] for t in _targets(n.outputs[0], live)]
            for cand in frontier:
                if cand.id in region or not _is_post_op(cand) or isinstance(cand, Subgraph) or is_completed(cand):
                    continue
                if cand.outputs[0].shape != out_shape or (
                        cand.outputs[0].element_type not in types and not _is_widening(cand)):
                    continue  # the post-ops keep the FC's iteration domain: no broadcasting of the main path
                extra = set()
                ok = True
                for inp in cand.inputs:
                    src = inp.source
                    if src.node.id in region:
                        continue
                    if src.node.id in downstream:  # would make a cycle through the Subgraph
                        ok = False
                        break
                    if not constant_goes_inside(cand, src):
                        extra.add((src.node.id, src.index))
                if not ok or len(outside | extra) > MAX_POST_OP_INPUTS:
                    continue
                region[cand.id] = cand
                added.append(cand)
                if _is_widening(cand):  # after the Convert to f32, f32 post-ops (a bf16 FC's bias in f32)
                    types = {ElementType.f32}
                outside |= extra
                grew = True
                if self._single_output(matmul, added, region, live):
                    best = len(added)
                break  # recompute the frontier in topological order
        return added[:best]

    @staticmethod
    def _single_output(matmul: Node, added: list[Node], region: dict[int, Node], live: set[int]) -> bool:
        """Only the last node of the region is read from outside it."""
        for n in [matmul, *added[:-1]]:
            if any(t.node.id not in region for t in _targets(n.outputs[0], live)):
                return False
        return True


def _mark_weight(sg: Subgraph) -> None:
    """Mark the body Parameter that the MatMul reads as its weight."""
    for node in sg.body.get_ordered_ops():
        if node.type_name == "MatMul":
            src = node.inputs[1].source.node
            if src.type_name == "Parameter":
                src.rt_info[FC_WEIGHT] = True


__all__ = ["FC_REJECT_REASON_KEY", "FC_WEIGHT", "FULLY_CONNECTED", "TokenizeFCSnippets", "constant_weight",
           "is_fc_matmul"]

"""TokenizeMHASnippets: the MHA Tokenizer (the reference's ``mha_tokenization.cpp``).

Finds the Multi-Head-Attention skeleton and wraps it into one Subgraph marked Completed::

         Transpose0   Transpose1                 (optional, fusion order [0,2,1,3] rank-equivalent)
               \\       /
                MatMul0
                   |
     [Eltwise | Select | FakeQuantize]*           (branch inputs pulled in: scalar-weight chains, Broadcast)
                   |
              [Reshape] -> Softmax(last axis) -> [Reshape]    (Reshapes only as a pair)
                   |
     [Eltwise | Select | FakeQuantize]*   Transpose2
                          \\              /
                             MatMul1
                                |
               [Eltwise | Select | FakeQuantize]* or Transpose3

Runs before the eltwise Tokenizer. The body keeps the original ops (MatMul, Transpose, Softmax, ...); the
common optimizations and the data-flow pipeline lower them later. When a MatMul cannot start an MHA, the
reason is stored in its ``rt_info[REJECT_REASON_KEY]`` so ``snippets inspect`` can show it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.ir.ops.snippets import BRGEMM_OUTPUT_TYPES
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.pass_manager import Pass
from snippets_core.ir.shape import Shape, broadcast_shapes, normalize_axis
from snippets_core.tokenization.config import TokenizationCallback, TokenizationConfig, ask_callback
from snippets_core.tokenization.marks import (
    ORIGINAL_LAYERS_NAMES,
    SNIPPETS_NODE_TYPE,
    is_skipped_by_plugin,
    mark_completed,
    set_virtual_port_count,
)
from snippets_core.tokenization.tokenization_utils import (
    _body_result,
    _copy_constant,
    _input_name,
    _make_body,
    constant_goes_inside,
    fq_non_scalar_constant_count,
)
from snippets_core.tokenization.tokenize_snippets import (
    SUPPORTED_ELEMENT_TYPES,
    UNARY_ELTWISE,
    appropriate_for_subgraph,
)

#: rt_info key on a MatMul that could not start an MHA Subgraph: why (read by ``snippets inspect``)
REJECT_REASON_KEY = "SnippetsRejectReason"

#: ranks of the tensors around the MHA MatMuls
MHA_RANKS = (3, 4)
#: the reference takes only the "arithmetic" eltwise ops between the MatMuls (no comparisons, no logic)
MHA_UNARY_OPS = UNARY_ELTWISE - {"LogicalNot", "Mish", "Swish"}
MHA_BINARY_OPS = frozenset({
    "Add", "Divide", "FloorMod", "Maximum", "Minimum", "Mod", "Multiply", "Power", "SquaredDifference", "Subtract",
})
MHA_INTERMEDIATE_OPS = MHA_UNARY_OPS | MHA_BINARY_OPS | {"FakeQuantize", "Select"}
#: the data-pointer cap while growing the chain after MatMul1 (a plugin limit in the reference)
MAX_OPS_AFTER_MATMUL1_IO = 12
#: above this many inputs/outputs one more register goes to the M loop that SplitLoops adds
IO_COUNT_RESERVING_M_LOOP_REG = 5


class MHAReject(Exception):
    """Internal: why the pattern starting at a MatMul is not an MHA (stored as the reject reason)."""


# --- orders -------------------------------------------------------------------------------------------------
def rank_equivalent_order(default_order: Sequence[int], rank: int) -> list[int]:
    """``default_order`` (of the last dims) extended to ``rank`` with leading identity dims."""
    if rank <= 2:
        raise ValueError(f"a Transpose order for MHA tokenization needs rank > 2, got {rank}")
    diff = rank - len(default_order)
    return list(range(diff)) + [o + diff for o in default_order]


def get_fusion_transpose_order(rank: int) -> list[int]:
    """The order a Brgemm can fold into its strides: {1,0,2} rank-equivalent ([0,2,1,3] for 4D)."""
    return rank_equivalent_order((1, 0, 2), rank)


def get_decomposed_transpose_order(rank: int) -> list[int]:
    """The order TransposeDecomposition handles for MHA inputs: {1,2,0} rank-equivalent ([0,2,3,1] for 4D)."""
    return rank_equivalent_order((1, 2, 0), rank)


# --- small predicates --------------------------------------------------------------------------------------
def _live_ids(model: Model) -> set[int]:
    return {n.id for n in model.get_ordered_ops()}


class LiveNodes:
    """The ids of a model's live nodes for a tokenizer's walk: computed on first use and again only after the walk
    changed the model (built a Subgraph); a rejected match changes nothing, so the rejections between two Subgraphs
    share one topological sort."""

    def __init__(self, model: Model) -> None:
        self._model = model
        self._ids: set[int] | None = None

    def ids(self) -> set[int]:
        if self._ids is None:
            self._ids = _live_ids(self._model)
        return self._ids

    def changed(self) -> None:
        self._ids = None


def _targets(out: Output, live: set[int]) -> list:
    # consumers that no Result depends on are not part of the model
    return [t for t in out.targets if t.node.id in live]


def _single_consumer(node: Node, live: set[int]) -> Node | None:
    ts = _targets(node.outputs[0], live)
    return ts[0].node if len(ts) == 1 else None


def _constant_ints(node: Node, i: int) -> list[int] | None:
    src = node.inputs[i].source.node
    if src.type_name != "Constant":
        return None
    return [int(v) for v in np.asarray(src.value).reshape(-1)]  # type: ignore[attr-defined]


def is_supported_tensor(shape: Shape) -> bool:
    return shape.rank_is_static and shape.rank in MHA_RANKS


def brgemm_output_type(a: ElementType, b: ElementType) -> ElementType | None:
    return BRGEMM_OUTPUT_TYPES.get((a, b))


def is_matmul0_supported(matmul: Node, live: set[int] | None = None) -> str | None:
    """None if ``matmul`` can start an MHA, else why not (the reference's ``is_matmul0_supported``)."""
    if matmul.type_name != "MatMul":
        return f"{matmul.type_name} is not a MatMul"
    n_consumers = len(matmul.outputs[0].targets if live is None else _targets(matmul.outputs[0], live))
    if n_consumers != 1:
        return f"MatMul0 has {n_consumers} consumers; MHA needs exactly one"
    if matmul.transpose_a:  # type: ignore[attr-defined]
        return "MatMul0 has transpose_a"
    for i in (0, 1):
        if not is_supported_tensor(matmul.inputs[i].shape):
            return f"MatMul0 input {i} has shape {matmul.inputs[i].shape}; MHA takes ranks 3 and 4"
    ta, tb = matmul.inputs[0].element_type, matmul.inputs[1].element_type
    if brgemm_output_type(ta, tb) is None:
        return f"MatMul0 inputs {ta} x {tb} have no Brgemm precision"
    return None


def are_weights_scalar(node: Node) -> bool:
    """Every input but the first is a static one-element tensor (ExplicitTransposeMatMulInputs' rule)."""
    return all(i.shape.is_static and i.shape.size == 1 for i in node.inputs[1:])


def is_supported_intermediate_op(node: Node) -> bool:
    return node.type_name in MHA_INTERMEDIATE_OPS and appropriate_for_subgraph(node)


def is_valid_transpose(node: Node | None, supported_ranks: Sequence[int], expected: Sequence[int],
                       live: set[int]) -> bool:
    """A Transpose with one consumer, a Constant ``expected`` order of a supported rank, and a rank-3/4
    input of a supported element type."""
    if node is None or node.type_name != "Transpose" or len(_targets(node.outputs[0], live)) != 1:
        return False
    order = _constant_ints(node, 1)
    if order is None or order != list(expected) or len(order) not in supported_ranks:
        return False
    return is_supported_tensor(node.inputs[0].shape) and node.inputs[0].element_type in SUPPORTED_ELEMENT_TYPES


def _potential_body_params(op: Node) -> int:
    """Inputs after the first that will become body Parameters (Constants that go inside do not)."""
    return sum(1 for inp in op.inputs[1:] if not constant_goes_inside(op, inp.source))


def _has_dynamic_shapes(node: Node) -> bool:
    return any(not i.shape.is_static for i in node.inputs) or any(not o.shape.is_static for o in node.outputs)


# --- the matcher --------------------------------------------------------------------------------------------
class _Match:
    """The state of one match attempt from MatMul0 (the counters of the reference's matcher callback)."""

    def __init__(self, live: set[int]) -> None:
        self.live = live
        self.ordered: list[Node] = []
        # Queries + Keys + Values: the three inputs every MHA has
        self.potential_body_params = 3
        # non-scalar Constants that FakeQuantize decomposition will add to the body
        self.hidden_virtual_ports = 0
        # pointer groups of Buffers: one after MatMul0 always
        self.unique_buffer_reg_groups = 1

    def contains(self, node: Node) -> bool:
        return any(n is node for n in self.ordered)

    def tokenize_broadcast(self, interm: Node) -> None:
        """Pull Broadcast inputs of ``interm`` in when they do not change its output's non-last dims."""
        merged = Shape([1])
        broadcasts: list[Node] = []
        try:
            for inp in interm.inputs:
                src = inp.source.node
                shape = inp.shape
                if (src.type_name == "Broadcast" and src.mode == "numpy"  # type: ignore[attr-defined]
                        and len(_targets(src.outputs[0], self.live)) == 1):
                    if src.inputs[1].source.node.type_name != "Constant":
                        continue
                    broadcasts.append(src)
                    shape = src.inputs[0].shape
                if shape.rank_is_static and shape.rank > 2:
                    merged = broadcast_shapes(merged, Shape(shape.dims[:-1]))  # type: ignore[index]
        except ShapeInferenceError:
            return
        out = interm.outputs[0].shape
        if broadcasts and out.rank_is_static and merged == Shape(out.dims[:-1]):  # type: ignore[index]
            self.ordered.extend(broadcasts)

    def update_intermediate_ops(self, interm: Node | None) -> Node | None:
        """Append the supported eltwise chain starting at ``interm``; return the first node after it."""
        while interm is not None and is_supported_intermediate_op(interm):
            consumer = _single_consumer(interm, self.live)
            if consumer is None:
                raise MHAReject(f"{interm.type_name} '{interm.name}' inside the MHA chain has several consumers")
            if len(interm.inputs) > 1:
                self.tokenize_broadcast(interm)
                self.hidden_virtual_ports += fq_non_scalar_constant_count(interm)
                for inp in interm.inputs:
                    shift = len(self.ordered)
                    parent = inp.source.node
                    while (is_supported_intermediate_op(parent) and not is_skipped_by_plugin(parent)
                           and not self.contains(parent)):
                        if len(_targets(parent.outputs[0], self.live)) != 1 or not are_weights_scalar(parent):
                            break
                        self.ordered.insert(shift, parent)
                        if not parent.inputs:
                            break
                        parent = parent.inputs[0].source.node
            self.potential_body_params += _potential_body_params(interm)
            self.ordered.append(interm)
            interm = consumer
        return interm

    def tokenize_reshape(self, interm: Node | None) -> tuple[Node | None, Node | None]:
        """(the Reshape taken or None, the node after it)."""
        if interm is None or interm.type_name != "Reshape":
            return None, interm
        if interm.inputs[1].source.node.type_name != "Constant":
            raise MHAReject(f"Reshape '{interm.name}' around Softmax has a non-Constant target shape")
        sin, sout = interm.inputs[0].shape, interm.outputs[0].shape
        if not (sin.rank_is_static and sout.rank_is_static) or sin.rank == 0 or sout.rank == 0:
            raise MHAReject(f"Reshape '{interm.name}' around Softmax has a dynamic rank")
        if sin[-1] is None or sout[-1] is None or sin[-1] != sout[-1]:
            raise MHAReject(f"Reshape '{interm.name}' around Softmax changes the last dim")
        consumer = _single_consumer(interm, self.live)
        if consumer is None:
            raise MHAReject(f"Reshape '{interm.name}' around Softmax has several consumers")
        self.ordered.append(interm)
        return interm, consumer


def _fail(cond: bool, reason: str) -> None:
    if cond:
        raise MHAReject(reason)


@dataclass(frozen=True)
class TokenizeMHASnippets(Pass):
    """Wrap each MHA pattern of a Model into a Completed Subgraph, in place (see the module docstring).

    ``config`` gives the register budget (``data_ptr_gpr_count``), the Transpose knobs, dynamic-MHA gating
    and the snippets mode (nothing happens in Disable). ``callback`` is the target's MHA veto, asked about
    MatMul0 once the skeleton matched (not asked in IgnoreCallback mode); it returns a reason or None.
    The eltwise Tokenizer's ``config.callback`` is not asked here: it speaks for single nodes, and targets
    typically veto a lone MatMul there while they want it inside an MHA (the runtime passes the plugin
    hook with ``tokenizer="mha"``).
    """

    name: ClassVar[str] = "tokenize-mha-snippets"
    config: TokenizationConfig = field(default_factory=TokenizationConfig)
    callback: TokenizationCallback | None = None

    def run(self, model: Model) -> bool:
        if not self.config.enabled:
            return False
        changed = False
        consumed: set[int] = set()
        live = LiveNodes(model)
        for node in model.get_ordered_ops():
            if node.type_name != "MatMul" or node.id in consumed:
                continue
            if node.id not in live.ids():
                continue
            try:
                ordered, hidden = self._match(node, live.ids())
            except MHAReject as e:
                node.rt_info[REJECT_REASON_KEY] = str(e)
                continue
            node.rt_info.pop(REJECT_REASON_KEY, None)
            _build_subgraph(ordered, hidden, live.ids())
            consumed.update(n.id for n in ordered)
            changed = True
            live.changed()
        return changed

    def _veto(self, node: Node) -> str | None:
        return ask_callback(self.callback, self.config, node, "MHA")

    def _match(self, matmul0: Node, live: set[int]) -> tuple[list[Node], int]:
        cfg = self.config
        why = is_matmul0_supported(matmul0, live)
        _fail(why is not None, why or "")
        st = _Match(live)
        st.ordered.append(matmul0)
        pattern_rank = matmul0.outputs[0].shape.rank

        interm = st.update_intermediate_ops(_single_consumer(matmul0, live))
        reshape0, interm = st.tokenize_reshape(interm)

        _fail(interm is None or interm.type_name != "Softmax",
              f"no Softmax after MatMul0 (found {interm.type_name if interm else 'nothing'})")
        softmax: Node = interm  # type: ignore[assignment]
        rank = softmax.inputs[0].shape.rank if softmax.inputs[0].shape.rank_is_static else None
        _fail(rank is None or rank == 0, f"Softmax '{softmax.name}' has a dynamic rank")
        try:
            axis = normalize_axis(softmax.axis, rank)  # type: ignore[attr-defined, arg-type]
        except ShapeInferenceError:
            axis = -1
        _fail(axis != rank - 1, f"Softmax '{softmax.name}' is not over the last axis")  # type: ignore[operator]
        after_softmax = _single_consumer(softmax, live)
        _fail(after_softmax is None, f"Softmax '{softmax.name}' has several consumers")
        st.ordered.append(softmax)

        reshape1, interm = st.tokenize_reshape(after_softmax)
        _fail((reshape0 is None) != (reshape1 is None), "a Reshape around Softmax without its pair")
        if reshape0 is not None and reshape1 is not None:
            _fail(reshape0.inputs[0].shape != reshape1.outputs[0].shape,
                  "the Reshapes around Softmax do not restore the shape")

        interm = st.update_intermediate_ops(interm)
        _fail(interm is None or interm.type_name != "MatMul",
              f"no MatMul1 after Softmax (found {interm.type_name if interm else 'nothing'})")
        matmul1: Node = interm  # type: ignore[assignment]
        _fail(matmul1.transpose_a or matmul1.transpose_b, "MatMul1 has a transpose flag")  # type: ignore[attr-defined]
        mm1_type = brgemm_output_type(matmul1.inputs[0].element_type, matmul1.inputs[1].element_type)
        _fail(mm1_type is None, f"MatMul1 inputs {matmul1.inputs[0].element_type} x "
                                f"{matmul1.inputs[1].element_type} have no Brgemm precision")
        for i in (0, 1):
            _fail(not is_supported_tensor(matmul1.inputs[i].shape),
                  f"MatMul1 input {i} has shape {matmul1.inputs[i].shape}; MHA takes ranks 3 and 4")

        veto = self._veto(matmul0)
        _fail(veto is not None, f"vetoed by the target: {veto}")

        # Softmax -> MatMul1 is one loop with one Buffer; a different precision needs its own pointer.
        mm0_type = brgemm_output_type(matmul0.inputs[0].element_type, matmul0.inputs[1].element_type)
        if matmul1.inputs[0].element_type.size != mm0_type.size:  # type: ignore[union-attr]
            st.unique_buffer_reg_groups += 1

        # --- Transposes on MatMul0 inputs, on MatMul1's B input and after MatMul1 ---
        ranks = cfg.mha_supported_transpose_ranks
        fusion = get_fusion_transpose_order(pattern_rank) if pattern_rank > 2 else []

        def expected(transposed: bool) -> list[int]:
            order = list(fusion)
            if transposed and len(order) >= 2:
                order[-1], order[-2] = order[-2], order[-1]
            return order

        def transpose_of(out: Output) -> Node | None:
            return out.node if out.node.type_name == "Transpose" else None

        t0 = transpose_of(matmul0.inputs[0].source)
        t1 = transpose_of(matmul0.inputs[1].source)
        t2 = transpose_of(matmul1.inputs[1].source)
        front: list[Node] = []
        # Queries before Keys, so the body's Parameters come in the model's usual Q, K, V order
        if is_valid_transpose(t0, ranks, expected(matmul0.transpose_a), live):  # type: ignore[attr-defined]
            front.append(t0)  # type: ignore[arg-type]
        # a target that repacks a transposed B (BrgemmCopyB, ``mha_transposed_b_in_subgraph``) also takes the
        # Keys' Transpose that puts D innermost on B's rows: [0,2,3,1] (the reference's decomposed order) and
        # [0,1,3,2] (Kᵀ of a [B,H,S,D] tensor) rank-equivalent
        t1_orders = [expected(matmul0.transpose_b)]  # type: ignore[attr-defined]
        if cfg.mha_transposed_b_in_subgraph and pattern_rank > 2 and not matmul0.transpose_b:  # type: ignore[attr-defined]
            t1_orders += [get_decomposed_transpose_order(pattern_rank), rank_equivalent_order((1, 0), pattern_rank)]
        if any(is_valid_transpose(t1, ranks, order, live) for order in t1_orders):
            front.append(t1)  # type: ignore[arg-type]
        st.ordered[:0] = front
        if is_valid_transpose(t2, ranks, expected(matmul1.transpose_b), live):  # type: ignore[attr-defined]
            st.ordered.append(t2)  # type: ignore[arg-type]
        st.ordered.append(matmul1)

        # --- ops after MatMul1 ---
        mm1_targets = _targets(matmul1.outputs[0], live)
        can_take_after = len(mm1_targets) == 1
        child = mm1_targets[0].node if can_take_after else None
        ops_after = False
        took_after = False
        while can_take_after and child is not None and is_supported_intermediate_op(child):
            ops_after = True
            child_targets = _targets(child.outputs[0], live)
            if len(child_targets) != 1:
                break
            st.hidden_virtual_ports += fq_non_scalar_constant_count(child)
            st.potential_body_params += _potential_body_params(child)
            if (st.potential_body_params + len(child_targets) + st.hidden_virtual_ports
                    + st.unique_buffer_reg_groups > MAX_OPS_AFTER_MATMUL1_IO):
                break
            st.ordered.append(child)
            child = child_targets[0].node
            took_after = True
        if took_after:
            st.unique_buffer_reg_groups += 1
        # Nothing may sit between MatMul1 and Transpose3 (strided output of the Brgemm).
        if (can_take_after and not ops_after and cfg.mha_token_enable_transpose_on_output and pattern_rank > 2
                and is_valid_transpose(child, ranks, fusion, live)
                and child.inputs[0].element_type == mm1_type):  # type: ignore[union-attr]
            st.ordered.append(child)  # type: ignore[arg-type]

        # --- register budget ---
        last = st.ordered[-1]
        io_count = st.potential_body_params + len(last.outputs) + st.hidden_virtual_ports
        data_count = io_count + st.unique_buffer_reg_groups
        available = cfg.data_ptr_gpr_count
        if io_count > IO_COUNT_RESERVING_M_LOOP_REG:
            available -= 1  # the M loop shared by both Brgemms (SplitLoops) needs its own work-amount register
        _fail(data_count > available,
              f"needs {data_count} data pointers (inputs/outputs {io_count}, buffers "
              f"{st.unique_buffer_reg_groups}) but only {available} registers are available")

        if not cfg.is_dynamic_mha_token_enabled:
            _fail(any(_has_dynamic_shapes(op) for op in st.ordered),
                  "dynamic shapes and dynamic MHA tokenization is disabled")
        return st.ordered, st.hidden_virtual_ports


# --- building the Subgraph --------------------------------------------------------------------------------
def _build_subgraph(ordered: list[Node], hidden: int, live: set[int]) -> Subgraph:
    """Replace ``ordered`` (producers first, the last node is the output) by one Completed Subgraph."""
    inside = {n.id for n in ordered}
    mapping: dict[tuple[int, int], Output] = {}
    params: list[Parameter] = []
    sg_inputs: list[Output] = []
    for op in ordered:
        new_inputs: list[Output] = []
        for inp in op.inputs:
            src = inp.source
            key = (src.node.id, src.index)
            if src.node.id in inside:
                assert key in mapping, f"MHA ops out of order at {op.name}"
                new_inputs.append(mapping[key])
            elif constant_goes_inside(op, src):
                new_inputs.append(_copy_constant(src.node).outputs[0])
            else:
                # One Parameter per use, as the reference: SplitDimensionM reshapes each by its own consumer
                # (the same tensor can be an A-side and a B-side input, as in self-attention).
                p = Parameter(src.element_type, src.shape, name=_input_name(src))
                params.append(p)
                sg_inputs.append(src)
                new_inputs.append(p.outputs[0])
        clone = op.clone_with_new_inputs(new_inputs)
        clone.rt_info.pop(SNIPPETS_NODE_TYPE, None)
        clone.rt_info.pop(REJECT_REASON_KEY, None)
        for o_old, o_new in zip(op.outputs, clone.outputs):
            mapping[(op.id, o_old.index)] = o_new
    last = ordered[-1]
    results: list[Result] = [_body_result(mapping[(last.id, o.index)]) for o in last.outputs]
    body = _make_body(results, params, last.name)
    sg = Subgraph(*sg_inputs, body=body, name=last.name)
    for o_old, o_new in zip(last.outputs, sg.outputs):
        o_new.names |= o_old.names
        for t in _targets(o_old, live):
            t.replace_source(o_new)
    for op in ordered:
        op.disconnect()
    sg.rt_info = {k: v for k, v in last.rt_info.items() if k not in (SNIPPETS_NODE_TYPE, REJECT_REASON_KEY)}
    sg.rt_info[ORIGINAL_LAYERS_NAMES] = ",".join(op.name for op in ordered)
    set_virtual_port_count(sg, hidden)
    mark_completed(sg)
    return sg


__all__ = [
    "MHA_INTERMEDIATE_OPS", "REJECT_REASON_KEY", "TokenizeMHASnippets", "are_weights_scalar",
    "get_decomposed_transpose_order", "get_fusion_transpose_order", "is_matmul0_supported",
    "is_supported_intermediate_op", "is_valid_transpose", "rank_equivalent_order",
]

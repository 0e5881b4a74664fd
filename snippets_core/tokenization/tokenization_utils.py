"""Building and growing Subgraphs: the reference's ``tokenization_utils.cpp`` and the Subgraph helpers it uses.

:func:`tokenize_node` puts one node into a Subgraph: alone (no Subgraph parents), or merged with the
Subgraphs that feed it when that is legal (no cycle, at most one Result child, the data-pointer budget,
outputs that broadcast together). Ops are told apart by ``type_name`` so this module does not depend on
which op modules are imported.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from snippets_core.errors import ShapeInferenceError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.node import Input, Node, Output, replace_node
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.shape import broadcast_shapes
from snippets_core.tokenization.config import TokenizationConfig
from snippets_core.tokenization.marks import (
    ORIGINAL_LAYERS_NAMES,
    SNIPPETS_NODE_TYPE,
    SNIPPETS_SUBGRAPH_TYPE,
    get_fused_names,
    get_topological_order,
    get_virtual_port_count,
    has_topological_order,
    is_completed,
    set_topological_order,
    set_virtual_port_count,
)

#: ops whose Constant inputs (order, target shape) stay inside the body: they shape the loops, not the data
CONSTANT_INPUTS_INSIDE_BODY = frozenset({"Transpose", "Broadcast", "Reshape"})
#: ops that change the iteration domain and so may need Buffers between loops
DOMAIN_SENSITIVE_OPS = frozenset({"Transpose", "Softmax", "MatMul", "Broadcast", "GroupNormalization", "Reshape"})


# --- Subgraph helpers (op::Subgraph statics in the reference) -------------------------------------------
def is_subgraph(node: Node) -> bool:
    return node.type_name == "Subgraph"


def is_domain_sensitive_op(node: Node) -> bool:
    return node.type_name in DOMAIN_SENSITIVE_OPS


def has_domain_sensitive_ops(subgraph: Subgraph) -> bool:
    return any(is_domain_sensitive_op(n) for n in subgraph.body.get_ordered_ops())


def constant_input_should_be_inside_body(node: Node) -> bool:
    return node.type_name in CONSTANT_INPUTS_INSIDE_BODY


def constant_goes_inside(node: Node, src: Output) -> bool:
    """A Constant input goes into the body when it is a scalar, feeds a FakeQuantize (its ranges are folded
    after decomposition) or is the order/shape input of Transpose/Broadcast/Reshape; else it is an input."""
    return src.node.type_name == "Constant" and (
        src.node.is_scalar  # type: ignore[attr-defined]
        or node.type_name == "FakeQuantize"
        or constant_input_should_be_inside_body(node))


def _has_result_consumer(output: Output) -> bool:
    return any(t.node.type_name == "Result" for t in output.targets)


def has_result_child(node: Node) -> bool:
    return any(_has_result_consumer(o) for o in node.outputs)


def num_result_children(node: Node) -> int:
    return sum(1 for o in node.outputs for t in o.targets if t.node.type_name == "Result")


def estimated_buffer_count(ops: Iterable[Node]) -> int:
    """How many distinct Buffers (each needing its own data pointer) the ops may need once lowered.

    Transposes away from Parameter->Result boundaries, Softmax (two in-place f32 Buffers, counted once) and
    MatMul (unique Buffers around it) push the element size they need; equal sizes in a row share one.
    """
    sizes: list[int] = []

    def push(size: int) -> None:
        if not sizes or sizes[-1] != size:
            sizes.append(size)

    for op in ops:
        t = op.type_name
        if t == "Transpose":
            # No Buffer when the Transpose reads a Parameter and writes a Result.
            feeds_result = _has_result_consumer(op.outputs[0])
            reads_param = op.inputs[0].source.node.type_name == "Parameter"
            if not feeds_result or not reads_param:
                push(op.outputs[0].element_type.size)
        elif t == "Softmax":
            push(ElementType.f32.size)
        elif t == "MatMul":
            # Buffers around a MatMul are never in place: append without merging equal sizes.
            for i in (0, 1):
                if op.inputs[i].source.node.type_name != "Parameter":
                    sizes.append(op.inputs[i].element_type.size)
            if not _has_result_consumer(op.outputs[0]):
                sizes.append(op.outputs[0].element_type.size)
    return len(sizes)


# --- FakeQuantize ------------------------------------------------------------------------------------------
def _constant_array(node: Node, i: int) -> np.ndarray | None:
    src = node.inputs[i].source.node
    return np.asarray(src.value, dtype=np.float64) if src.type_name == "Constant" else None  # type: ignore[attr-defined]


def is_supported_fq(fq: Node) -> bool:
    """FakeQuantize that the decomposition handles: not binarization (levels 2), Constant ranges,
    numpy/none broadcast and in_low <= in_high everywhere."""
    if fq.type_name != "FakeQuantize" or fq.levels == 2:  # type: ignore[attr-defined]
        return False
    if any(fq.inputs[i].source.node.type_name != "Constant" for i in range(1, 5)):
        return False
    if fq.auto_broadcast not in ("numpy", "none"):  # type: ignore[attr-defined]
        return False
    il, ih = _constant_array(fq, 1), _constant_array(fq, 2)
    try:
        return not bool(np.any(np.greater(il, ih)))
    except ValueError:  # ranges that do not broadcast: the op itself would reject them
        return False


def _fq_scales(fq: Node) -> tuple[bool, bool]:
    """(is_optimized, only_quantized) of the FakeQuantize decomposition.

    The decomposition computes ``round(x * isc + ish) * osc + osh`` with ``isc = (levels-1)/(ih-il)``,
    ``ish = -il*isc``, ``osc = (oh-ol)/(levels-1)``, ``osh = ol``. It is "optimized" (only the input scale
    survives) for u8 outputs with il == 0, and for i8 outputs whose crop range maps onto [-128, 127];
    dequantization disappears when osc == 1 and osh == 0.
    """
    il, ih, ol, oh = (_constant_array(fq, i) for i in range(1, 5))
    levels = float(fq.levels - 1)  # type: ignore[attr-defined]
    with np.errstate(all="ignore"):
        isc = levels / (ih - il)
        ish = -il * isc
        osc = (oh - ol) / levels
        osh = np.broadcast_to(ol, np.broadcast_shapes(ol.shape, oh.shape))
    out_type = fq.outputs[0].element_type
    optimized = False
    if out_type is ElementType.u8:
        optimized = bool(np.all(il == 0) and np.all(ish == 0) and np.all(osc == 1) and np.all(osh == 0))
    elif out_type is ElementType.i8:
        thr = 1e-4
        optimized = bool(np.all(np.abs(ish - 128.0) < thr) and np.all(osc == 1)
                         and np.all(np.abs(osh + 128.0) < thr)
                         and np.all(np.abs(il * isc + 128.0) <= thr) and np.all(np.abs(ih * isc - 127.0) <= thr))
    only_quantized = optimized or bool(np.all(osc == 1) and np.all(osh == 0))
    return optimized, only_quantized


def fq_non_scalar_constant_count(fq: Node) -> int:
    """Non-scalar Constants a FakeQuantize leaves in the body after decomposition and constant folding
    (they become extra data pointers of the kernel)."""
    if fq.type_name != "FakeQuantize" or any(fq.inputs[i].source.node.type_name != "Constant" for i in range(1, 5)):
        return 0
    optimized, only_quantized = _fq_scales(fq)

    def non_scalar(i: int) -> bool:
        return fq.inputs[i].source.node.value.size != 1  # type: ignore[attr-defined]

    il, ih = non_scalar(1), non_scalar(2)
    ol = not only_quantized and non_scalar(3)
    oh = not only_quantized and non_scalar(4)
    # Optimized: ih, il (for Min/Max) and isc remain. Otherwise ih, il, isc, ish, osc and osh; which of
    # them are non-scalar follows from which of the four ranges are.
    if optimized:
        return 3 if il and ih else 2 if il or ih else 0
    if ol and il and ih:
        return 6
    if (ol and (il or ih)) or (il and ih and oh):
        return 5
    if (il and oh) or (ih and oh) or (il and ih):
        return 4
    if il or ih:
        return 3
    if ol:
        return 2
    if oh:
        return 1
    return 0


# --- building bodies -----------------------------------------------------------------------------------------
def _input_name(src: Output) -> str:
    """The name of a body Parameter that stands for ``src`` (the producer's name, as the reference does)."""
    return src.node.name if len(src.node.outputs) == 1 else f"{src.node.name}.{src.index}"


def _copy_constant(c: Node) -> Node:
    """A private copy of a Constant for a body, so the outer Constant keeps only its outer consumers."""
    return c.clone_with_new_inputs([])


def _make_body(results: Sequence[Result], params: Sequence[Parameter], name: str) -> Model:
    """A body Model whose Parameter names and Result names are unique (the interpreter maps by name)."""
    for group in (params, results):
        seen: dict[str, int] = {}
        for n in group:
            base = n.name
            if base in seen:
                seen[base] += 1
                while f"{base}_{seen[base]}" in seen:
                    seen[base] += 1
                n.name = f"{base}_{seen[base]}"
            seen.setdefault(n.name, 0)
    return Model(list(results), list(params), name=name)


def _body_result(out: Output) -> Result:
    return Result(out, name=out.node.name if len(out.node.outputs) == 1 else f"{out.node.name}.{out.index}")


def _subgraph_rt_info(sources: Sequence[Node]) -> dict:
    """rt_info for a new Subgraph: what the replaced nodes carry, later ones winning, minus the marks that
    describe a node rather than a Subgraph."""
    rt: dict = {}
    for n in sources:
        rt.update(n.rt_info)
    for key in (SNIPPETS_NODE_TYPE, SNIPPETS_SUBGRAPH_TYPE):
        rt.pop(key, None)
    return rt


def wrap_node_as_subgraph(node: Node) -> Subgraph:
    """A new Subgraph holding a copy of ``node`` alone (not yet connected in place of ``node``)."""
    params: list[Parameter] = []
    body_inputs: list[Output] = []
    sg_inputs: list[Output] = []
    for inp in node.inputs:
        src = inp.source
        if constant_goes_inside(node, src):
            body_inputs.append(_copy_constant(src.node).outputs[0])
        else:
            p = Parameter(src.element_type, src.shape, name=_input_name(src))
            params.append(p)
            body_inputs.append(p.outputs[0])
            sg_inputs.append(src)
    body_node = node.clone_with_new_inputs(body_inputs)
    body = _make_body([_body_result(o) for o in body_node.outputs], params, node.name)
    sg = Subgraph(*sg_inputs, body=body, name=node.name)
    set_virtual_port_count(sg, fq_non_scalar_constant_count(node))
    return sg


def create_single_node_subgraph(node: Node) -> Subgraph:
    """Replace ``node`` in its graph by a Subgraph that holds only it."""
    sg = wrap_node_as_subgraph(node)
    hidden = get_virtual_port_count(sg)
    sg.rt_info = _subgraph_rt_info([node])
    sg.rt_info[ORIGINAL_LAYERS_NAMES] = get_fused_names(node) + node.name
    set_virtual_port_count(sg, hidden)
    replace_node(node, sg)
    return sg


def outputs_are_not_broadcastable(node: Node) -> bool:
    """True if the outputs of ``node`` do not numpy-broadcast together (a kernel has one iteration domain)."""
    if len(node.outputs) <= 1:
        return False
    try:
        broadcast_shapes(*(o.shape for o in node.outputs))
    except ShapeInferenceError:
        return True
    return False


# --- tokenize_node -----------------------------------------------------------------------------------------
class _Bounds:
    """The topological-order window (max order of the outside parents, min order of the outside children) of
    the set being merged. A merge is legal while the window stays open: then no outside child can lie on a
    path back to an outside parent, so the merged Subgraph cannot close a cycle."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.max_parent = -1
        self.min_child = math.inf

    def introduces_cycle(self, examined: Node) -> bool:
        """Widen the window by ``examined``'s parents and children; True (window unchanged) if it closes."""
        max_parent = self.max_parent
        for inp in examined.inputs:
            p = inp.source.node
            if p.type_name not in ("Constant", "Parameter"):
                max_parent = max(max_parent, get_topological_order(p))
        min_child = self.min_child
        for c in examined.consumers():
            if c.type_name != "Result" and c is not self.node:
                min_child = min(min_child, get_topological_order(c))
        if max_parent < min_child:
            self.max_parent, self.min_child = max_parent, min_child
            return False
        return True


def _same_output(a: Output, b: Output) -> bool:
    return a.node is b.node and a.index == b.index


def _index_of(outputs: Sequence[Output], out: Output) -> int:
    for i, o in enumerate(outputs):
        if _same_output(o, out):
            return i
    return -1


def tokenize_node(node: Node, config: TokenizationConfig) -> Subgraph:
    """Put ``node`` into a Subgraph, merging the Subgraphs that feed it when that is legal; returns the
    Subgraph that now holds it. ``node`` must carry a topological order (see EnumerateNodes)."""
    input_values = [i.source for i in node.inputs]

    # Parent Subgraphs are copied: a merge may be abandoned after their bodies were rewired.
    clones: dict[int, Model] = {}
    for src in input_values:
        p = src.node
        if is_subgraph(p) and not is_completed(p) and p.id not in clones:
            clones[p.id] = p.body.clone()  # type: ignore[attr-defined]
    if not clones:
        return create_single_node_subgraph(node)

    subgraph_name = node.name
    fused_names = ""
    n_result_children = 0
    bounds = _Bounds(node)
    bounds.introduces_cycle(node)  # the node alone never closes the window: it only seeds it

    input_subgraphs: dict[int, Subgraph] = {}
    body_parameters: list[Parameter] = []
    external_inputs: list[Output] = []  # inputs of the merged Subgraph
    internal_inputs: list[Output] = []  # inputs of the node's copy inside the body
    replaced: list[Node] = []

    def is_recurrent(out: Output) -> bool:
        return any(_same_output(v, out) for v in input_values)

    for src in input_values:
        p = src.node
        if p.id in clones and (p.id in input_subgraphs or not bounds.introduces_cycle(p)):
            sg: Subgraph = p  # type: ignore[assignment]
            if p.id not in input_subgraphs:
                input_subgraphs[p.id] = sg
                replaced.append(sg)
                fused_names += get_fused_names(sg)
                if has_result_child(sg):
                    # The merged Subgraph keeps the name of the one that fed a Result.
                    subgraph_name = sg.name
                    n_result_children += 1
                body = clones[p.id]
                for i, bp in enumerate(list(body.parameters)):
                    ext = sg.inputs[i].source
                    found = _index_of(external_inputs, ext)
                    if found >= 0:
                        # Shared input of several parents: one body Parameter for it.
                        for t in bp.outputs[0].targets:
                            t.replace_source(body_parameters[found].outputs[0])
                    elif is_recurrent(ext) and ext.node.id in clones:
                        # The parent reads another parent Subgraph that the node reads too: wire the
                        # producer inside that Subgraph's body directly.
                        other = ext.node
                        if other.id not in input_subgraphs and bounds.introduces_cycle(other):
                            return create_single_node_subgraph(node)
                        producer = clones[other.id].results[ext.index].inputs[0].source
                        for t in bp.outputs[0].targets:
                            t.replace_source(producer)
                    else:
                        external_inputs.append(ext)
                        body_parameters.append(bp)
            # Stitch: the node's copy reads what the parent's body Result read.
            internal_inputs.append(clones[p.id].results[src.index].inputs[0].source)
        elif constant_goes_inside(node, src):
            internal_inputs.append(_copy_constant(p).outputs[0])
        else:
            external_inputs.append(src)
            param = Parameter(src.element_type, src.shape, name=_input_name(src))
            body_parameters.append(param)
            internal_inputs.append(param.outputs[0])

    fused_names += node.name
    n_result_children += num_result_children(node)
    if n_result_children > 1:
        return create_single_node_subgraph(node)

    body_node = node.clone_with_new_inputs(internal_inputs)

    # Non-scalar constants that FakeQuantize decomposition will add count against the pointer budget.
    hidden = fq_non_scalar_constant_count(node)
    body_results: list[Result] = []
    result_targets: list[list[Input]] = []  # outside consumers of each output of the merged Subgraph
    result_names: list[set[str]] = []
    ops_for_buffer_count: list[Node] = []
    for sg in input_subgraphs.values():
        hidden += get_virtual_port_count(sg)
        # Only bodies with domain-sensitive ops can hold Buffers.
        if has_domain_sensitive_ops(sg):
            ops_for_buffer_count.extend(sg.body.get_ordered_ops())
        for out in sg.outputs:
            outside = [t for t in out.targets if t.node.id not in input_subgraphs and t.node is not node]
            if outside:
                # Consumed outside the merge too: the value becomes an extra output of the merged Subgraph.
                body_results.append(_body_result(clones[sg.id].results[out.index].inputs[0].source))
                result_targets.append(outside)
                result_names.append(set(out.names))
    if is_domain_sensitive_op(node):
        ops_for_buffer_count.append(node)
    for out, body_out in zip(node.outputs, body_node.outputs):
        body_results.append(_body_result(body_out))
        result_targets.append(out.targets)
        result_names.append(set(out.names))

    io_count = len(body_parameters) + len(body_results) + hidden
    if io_count + estimated_buffer_count(ops_for_buffer_count) > config.data_ptr_gpr_count:
        return create_single_node_subgraph(node)

    body = _make_body(body_results, body_parameters, node.name)
    subgraph = Subgraph(*external_inputs, body=body, name=subgraph_name)
    if outputs_are_not_broadcastable(subgraph):
        subgraph.disconnect()
        return create_single_node_subgraph(node)

    for i, targets in enumerate(result_targets):
        subgraph.outputs[i].names |= result_names[i]
        for t in targets:
            t.replace_source(subgraph.outputs[i])
    # The node and the merged parents are gone from the graph now; so are the parents' old body Results,
    # which would otherwise still count as consumers inside the new body.
    node.disconnect()
    for sg in input_subgraphs.values():
        sg.disconnect()
        for r in clones[sg.id].results:
            r.disconnect()

    subgraph.rt_info = _subgraph_rt_info(replaced + [node])
    subgraph.rt_info[ORIGINAL_LAYERS_NAMES] = fused_names
    set_virtual_port_count(subgraph, hidden)
    if has_topological_order(node):
        # The merged Subgraph sits where the node was: after every merged parent.
        set_topological_order(subgraph, get_topological_order(node))
    return subgraph

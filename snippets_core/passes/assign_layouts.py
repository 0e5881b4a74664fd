"""AssignLayouts: give every edge of a tokenized model a memory layout, with explicit reorders where needed.

Backend-neutral: the target says which layout each node prefers (``preferred`` is the target's
``preferred_layout`` hook; None or ``plain`` for a node it has no preference for), and, optionally, another
layout one input of a node may be read in (``preferred_input``, the target's ``preferred_input_layout`` hook: e.g.
a conv kernel that reads a 3-channel image planar while writing NHWC), taken where the value already lies in it
(it saves the reorder; elsewhere the node's own layout is as cheap to reach), and this pass

* writes the layout of every output (``rt_info[OUTPUT_LAYOUTS]``) and the layout each input is read in
  (``rt_info[INPUT_LAYOUTS]``): a node with a preference reads and writes its tensors of a fitting rank in that
  layout; an element-wise Subgraph is layout-agnostic (see :func:`is_layout_agnostic`) and keeps the layout its
  inputs share (inputs like ``[N, C, 1, 1]``, the same in every layout, do not count); everything else (shape
  ops, reductions, the model's Results) reads and writes ``plain``;
* inserts a ``Reorder`` (one Subgraph marked ``REORDER`` holding it, so a target compiles it like any other
  kernel) where an edge's layout and its consumer's differ, one per (edge, layout) however many consumers read
  it, and none where the two layouts lie the same in memory for that shape (NCHW and NHWC when ``H * W == 1``);
* lets a Reshape that flattens ``[N, C, H, W]`` for a MatMul with a Constant weight read its input in the layout
  it lies in, with the weight's rows put in that order once (:func:`permute_flattened_weight`).

So consecutive conv/pool primitives read each other's layout directly, and a model whose primitives all prefer
one layout reorders only at its inputs and outputs (and where a plain-layout consumer sits in between).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.ir.layout import INPUT_LAYOUTS, LAYOUTS, OUTPUT_LAYOUTS, PLAIN, Layout, layout_named, same_memory
from snippets_core.ir.model import Model
from snippets_core.ir.node import Input, Node, Output
from snippets_core.ir.ops.base import BinaryEltwise, UnaryEltwise
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.reorder import Reorder
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.pass_manager import Pass

#: rt_info key on a Subgraph that holds one Reorder (value True)
REORDER = "SnippetsReorder"
#: body ops besides Unary/BinaryEltwise that compute each output element from the input elements at its index
_ELEMENTWISE_TYPES = frozenset({"Convert", "Select", "Clamp"})


def _static(out: Output) -> tuple[int, ...] | None:
    return out.shape.to_tuple() if out.shape.is_static else None


def _dims(out: Output) -> tuple[int | None, ...] | None:
    """The dims of ``out``, None for a dynamic one (``same_memory`` takes it for a dim that may exceed 1)."""
    return out.shape.dims if out.shape.rank_is_static else None


def is_layout_agnostic(sg: Subgraph) -> bool:
    """A Subgraph of element-wise ops only (numpy broadcasting between them) whose inputs and outputs are static
    rank-4 tensors (inputs from Constants: rank 4 or less, as the body's constants): it computes the same thing in
    any dim order once its inputs and constants are put in that order, so it can run on its inputs' layout (its
    PropagateLayout at the model level: :func:`snippets_core.runtime.layout_steps.physical_subgraph`)."""
    ports = [i.source for i in sg.inputs if not _is_constant(i.source)] + list(sg.outputs)
    if not ports or any(_static(o) is None or o.shape.rank != 4 for o in ports):
        return False
    if any(_is_constant(i.source) and i.source.shape.rank > 4 for i in sg.inputs):
        return False
    for op in sg.body.get_ordered_ops():
        if isinstance(op, (Parameter, Result)):
            continue
        if isinstance(op, Constant):
            if np.ndim(op.value) > 4:  # type: ignore[attr-defined]
                return False
            continue
        if not isinstance(op, (UnaryEltwise, BinaryEltwise)) and op.type_name not in _ELEMENTWISE_TYPES:
            return False
    return True


def _is_constant(out: Output) -> bool:
    return isinstance(out.node, Constant)


def layout_free(shape: tuple[int, ...] | None) -> bool:
    """A tensor of ``shape`` lies the same in memory in every layout that fits it (``[N, C, 1, 1]``)."""
    return shape is not None and all(same_memory(layout, PLAIN, shape) for layout in LAYOUTS.values()
                                     if layout.fits(len(shape)))


def make_reorder(src: Output, from_layout: Layout, to_layout: Layout) -> Subgraph:
    """A Subgraph holding ``Reorder(src)``, marked ``REORDER``, with its layouts written (not yet connected to
    any consumer)."""
    from snippets_core.tokenization.marks import mark_completed
    from snippets_core.tokenization.tokenization_utils import _body_result, _input_name, _make_body

    name = f"{src.node.name}{'' if len(src.node.outputs) == 1 else f':{src.index}'}/reorder_{to_layout}"
    p = Parameter(src.element_type, src.shape, name=_input_name(src))
    op = Reorder(p, src=from_layout.name, dst=to_layout.name, name=name)
    sg = Subgraph(src, body=_make_body([_body_result(op.outputs[0])], [p], name), name=name)
    sg.rt_info[REORDER] = True
    sg.rt_info[INPUT_LAYOUTS] = (from_layout.name,)
    sg.rt_info[OUTPUT_LAYOUTS] = (to_layout.name,)
    mark_completed(sg)
    return sg


@dataclass(frozen=True)
class AssignLayouts(Pass):
    """Assign a layout to every edge and insert the reorders (see the module docstring). ``preferred(node)`` is
    the target's choice for ``node``: a Layout, or None for plain; ``preferred_input(node, index)`` is another
    layout one input of a node with a preference may be read in, taken where its value already lies in it."""

    name: ClassVar[str] = "assign-layouts"
    preferred: Callable[[Node], Layout | None] = lambda node: None
    preferred_input: Callable[[Node, int], Layout | None] = lambda node, index: None

    def run(self, model: Model) -> bool:
        layout_of: dict[tuple[int, int], Layout] = {}  # (node id, output index) -> the layout it is written in
        reorders: dict[tuple[int, int, str], Output] = {}  # (node id, output index, layout) -> the reordered edge
        changed = False
        for node in model.get_ordered_ops():
            if REORDER in node.rt_info:  # inserted by an earlier run of this pass
                layout_of[(node.id, 0)] = layout_named(node.rt_info[OUTPUT_LAYOUTS][0])
                continue
            flattened = self._flatten_in_place(node, layout_of, reorders)
            if flattened is not None:
                changed |= flattened
                continue
            want = self._node_layout(node, layout_of)
            agnostic = isinstance(node, Subgraph) and is_layout_agnostic(node)
            reads: list[str] = []
            for inp in node.inputs:
                rank = inp.shape.rank if inp.shape.rank_is_static else None
                need = self._input_layout(inp, want, agnostic, layout_of)
                need = need if need.fits(rank) else PLAIN
                if isinstance(node, Result) or (agnostic and _is_constant(inp.source)):
                    need = PLAIN  # an agnostic Subgraph's constant inputs are laid out at compile time
                changed |= self._connect(inp, need, layout_of, reorders)
                reads.append(need.name)
            outs = [want if want.fits(o.shape.rank if o.shape.rank_is_static else None) else PLAIN
                    for o in node.outputs]
            for o, layout in zip(node.outputs, outs):
                layout_of[(node.id, o.index)] = layout
            node.rt_info[INPUT_LAYOUTS] = tuple(reads)
            node.rt_info[OUTPUT_LAYOUTS] = tuple(layout.name for layout in outs)
        return changed

    def _node_layout(self, node: Node, layout_of: dict[tuple[int, int], Layout]) -> Layout:
        """The layout ``node`` reads and writes its fitting tensors in."""
        if isinstance(node, (Parameter, Constant, Result)):
            return PLAIN
        if isinstance(node, Subgraph) and is_layout_agnostic(node):
            # the layouts of the inputs whose memory depends on it; mixed ones: plain (only reorders agree them)
            seen = {layout_of.get((i.source.node.id, i.source.index), PLAIN) for i in node.inputs
                    if not layout_free(_dims(i.source)) and not _is_constant(i.source)}
            return seen.pop() if len(seen) == 1 else PLAIN
        return self.preferred(node) or PLAIN

    def _input_layout(self, inp: Input, want: Layout, agnostic: bool,
                      layout_of: dict[tuple[int, int], Layout]) -> Layout:
        """The layout ``inp`` is read in: the target's per-input choice (for a node with a preference) where the
        value already lies in it, else the node's own (an agnostic Subgraph follows its inputs: no per-input
        choice). A value in neither would need a reorder either way, so the node's layout keeps its own kernel."""
        if want == PLAIN or agnostic:
            return want
        alt = self.preferred_input(inp.node, inp.index)
        src = inp.source
        if alt is None or not same_memory(layout_of.get((src.node.id, src.index), PLAIN), alt, _dims(src)):
            return want
        return alt

    def _flatten_in_place(self, node: Node, layout_of: dict[tuple[int, int], Layout],
                          reorders: dict[tuple[int, int, str], Output]) -> bool | None:
        """A Reshape flattening ``[N, C, H, W]`` to ``[N, C*H*W]`` for a MatMul with a Constant weight (a
        classifier after a conv stack) reads its input in the layout it lies in when that weight's rows can be put
        in the same order (:func:`permute_flattened_weight`): the weight is reordered once, here, instead of the
        activation on every call. The runtime's view flattens the input's memory (``shape_steps.view_executor``).
        None when ``node`` is no such Reshape, else whether this changed the model."""
        if node.type_name not in ("Reshape", "Flatten"):
            return None
        src = node.inputs[0].source
        have = layout_of.get((src.node.id, src.index), PLAIN)
        done = node.rt_info.get(INPUT_LAYOUTS, (PLAIN.name,))[0] == have.name != PLAIN.name  # by an earlier run
        if not done and (have.is_plain or have.order[0] != 0  # type: ignore[index]
                         or not permute_flattened_weight(node, have)):
            return None
        for inp in node.inputs[1:]:
            self._connect(inp, PLAIN, layout_of, reorders)
        layout_of[(node.id, 0)] = PLAIN
        node.rt_info[INPUT_LAYOUTS] = (have.name, *(PLAIN.name for _ in node.inputs[1:]))
        node.rt_info[OUTPUT_LAYOUTS] = (PLAIN.name,)
        return not done

    @staticmethod
    def _connect(inp: Input, need: Layout, layout_of: dict[tuple[int, int], Layout],
                 reorders: dict[tuple[int, int, str], Output]) -> bool:
        """Make ``inp`` read its value in ``need``: directly, or through a (shared) reorder. True if one was made."""
        src = inp.source
        have = layout_of.get((src.node.id, src.index), PLAIN)
        if same_memory(have, need, _dims(src)):
            return False
        key = (src.node.id, src.index, need.name)
        made = key not in reorders
        if made:
            sg = make_reorder(src, have, need)
            reorders[key] = sg.outputs[0]
            layout_of[(sg.id, 0)] = need
        inp.replace_source(reorders[key])
        return made


def permute_flattened_weight(reshape: Node, layout: Layout) -> bool:
    """If ``reshape`` flattens a static ``[N, C, H, W]`` into ``[N, C*H*W]`` read only as the first input of one
    MatMul (a node, or inside a Subgraph) whose other input is a Constant read only there, put that weight's K rows
    in ``layout``'s order of (C, H, W) and return True: the MatMul then takes the flattened memory of a tensor in
    ``layout`` (same result); else change nothing and return False."""
    x, out = reshape.inputs[0].shape, reshape.outputs[0]
    if not (x.is_static and x.rank == 4 and out.shape.is_static and len(out.targets) == 1):
        return False
    dims = x.to_tuple()
    k = dims[1] * dims[2] * dims[3]
    if out.shape.to_tuple() != (dims[0], k):
        return False
    found = _flattened_weight(out.targets[0])
    if found is None:
        return False
    const, transposed = found
    w = np.asarray(const.value)  # type: ignore[attr-defined]
    if w.ndim != 2 or w.shape[1 if transposed else 0] != k:
        return False
    order = [d - 1 for d in layout.order[1:]]  # type: ignore[index]  # (C, H, W) in memory order
    if transposed:  # [M, K]
        w = w.reshape(w.shape[0], *dims[1:]).transpose(0, *(d + 1 for d in order)).reshape(w.shape)
    else:  # [K, M]
        w = w.reshape(*dims[1:], w.shape[1]).transpose(*order, 3).reshape(w.shape)
    const.value = np.ascontiguousarray(w)  # type: ignore[attr-defined]
    return True


def _flattened_weight(target: Input) -> tuple[Node, bool] | None:
    """(the Constant weight, whether the MatMul reads it transposed) of the MatMul that reads ``target``'s value as
    its first input, not transposed, directly or through a Subgraph's Parameter; None when the value or the
    weight has another reader."""
    node, index = target.node, target.index
    if isinstance(node, Subgraph):
        param = node.body.parameters[index].outputs[0]
        if len(param.targets) != 1:
            return None
        node, index = param.targets[0].node, param.targets[0].index
    else:
        param = None
    if node.type_name != "MatMul" or index != 0 or node.transpose_a:  # type: ignore[attr-defined]
        return None
    b = node.inputs[1].source
    if len(b.targets) != 1:
        return None
    if param is not None and isinstance(b.node, Parameter):  # a weight ExtractConstants moved out of the body
        sg = target.node
        b = sg.inputs[sg.body.parameters.index(b.node)].source  # type: ignore[attr-defined]
        if len(b.targets) != 1:
            return None
    if not isinstance(b.node, Constant):
        return None
    return b.node, bool(node.transpose_b)  # type: ignore[attr-defined]


def reorder_count(model: Model) -> int:
    """The Reorder Subgraphs AssignLayouts inserted into ``model``."""
    return sum(1 for n in model.get_ordered_ops() if n.rt_info.get(REORDER))


__all__ = ["REORDER", "AssignLayouts", "is_layout_agnostic", "layout_free", "make_reorder", "reorder_count"]

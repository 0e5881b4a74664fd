"""TokenizeConvSnippets: a 2-D Convolution and its post-op chain into one Completed Subgraph (a conv primitive).

Runs only for a target whose tokenization defaults set ``conv_primitives`` (it runs such Subgraphs as one
JIT convolution with the post-ops applied in registers), after the pattern tokenizers and before the eltwise
one, which would otherwise take the post-ops. From every ``Convolution`` with a Constant weight (and the
per-channel ops and Relu right before it, see ``_pre_op_chain``)::

        x [N, C, H, W] (static)     W Constant [M, C/group, KH, KW]
                    \\              /
                     Convolution           f32, 2-D
                          |
    a chain, each link the single consumer of the previous one:
      Add/Multiply by a per-channel Constant ([M,1,1], [1,M,1,1] or a scalar; Subtract/Divide with the
      Constant second): bias, BatchNormalization as the frontend folds it (Multiply, Add);
      Relu, Clamp, PRelu with a scalar or per-channel Constant slope, HSwish, Sigmoid, Swish, x * Sigmoid(x);
      one Add of a tensor of the output's shape (the residual of a ResNet block);
      last, a 2-D MaxPool/AvgPool (one ``pool_reject_reason`` accepts), pooled in the kernel where it can, or a
      global pool (``global_pool_chain``: a classifier head's GlobalAveragePool)

A ``ConvolutionBackpropData`` (ONNX ConvTranspose) with a Constant weight is taken the same way, with its post-op
chain but no pre-ops. Constants stay in the body (the target packs the weight and folds the per-channel ops into it
once, at compile time); the Subgraph's inputs are ``x`` and the residual, if any. The Subgraph carries
``rt_info[CONVOLUTION]``.
A Convolution that is not taken keeps the reason in ``rt_info[CONV_REJECT_REASON_KEY]`` (``describe()`` and
``snippets inspect`` show it): it then runs on its reference kernel, with the post-ops left to the eltwise
Tokenizer.

2-D MaxPool (without the indices output) and AvgPool on static f32 inputs, and LRN on static 4-D f32 inputs,
become single-op Subgraphs marked ``POOLING``, so they run on the same layout as the convolutions around them; a
Concat along the channels of their outputs becomes a ``CONCAT`` Subgraph that keeps that layout (Inception, DenseNet),
and a channel shuffle of a primitive's output (Reshape, Transpose, Reshape that only permute the channels: ShuffleNet)
a ``CHANNEL_SHUFFLE`` Subgraph, a permutation within each pixel in that layout; a ReduceMean/ReduceMax over H and W
of a primitive's output (GlobalAveragePool, GlobalMaxPool) a ``POOLING`` Subgraph that reads that layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.io import Parameter
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.pass_manager import Pass
from snippets_core.tokenization.config import TokenizationCallback, TokenizationConfig, ask_callback
from snippets_core.tokenization.marks import ORIGINAL_LAYERS_NAMES, SNIPPETS_NODE_TYPE, mark_completed
from snippets_core.tokenization.tokenization_utils import _body_result, _copy_constant, _input_name, _make_body

#: rt_info key on a conv-primitive Subgraph (value True)
CONVOLUTION = "SnippetsConvolution"
#: rt_info key on a pooling primitive Subgraph (a MaxPool or AvgPool alone; value True)
POOLING = "SnippetsPooling"
#: rt_info key on a channel Concat of primitives' outputs (value True): it keeps their NHWC layout
CONCAT = "SnippetsConcat"
#: rt_info key on a channel shuffle after a primitive (Reshape, Transpose, Reshape permuting the channels; value
#: True): a permutation within each pixel in NHWC, so it keeps the primitives' layout
CHANNEL_SHUFFLE = "SnippetsChannelShuffle"
#: rt_info of a CHANNEL_SHUFFLE Subgraph: the source channel of each output channel (:func:`channel_permutation`)
CHANNEL_PERMUTATION = "SnippetsChannelPermutation"
#: rt_info key on a Convolution left to its reference kernel: why
CONV_REJECT_REASON_KEY = "SnippetsConvRejectReason"
#: per-channel ops (with a Constant) and the element-wise activations a conv primitive applies
CONV_CHANNEL_OPS = frozenset({"Add", "Subtract", "Multiply", "Divide"})
CONV_ACTIVATIONS = frozenset({"Relu", "Clamp", "PRelu", "HSwish", "Sigmoid", "Swish"})


def constant_value(out: Output) -> np.ndarray | None:
    """The value of ``out`` when a Constant node produces it, else None."""
    node = out.node
    return np.asarray(node.value) if node.type_name == "Constant" else None  # type: ignore[attr-defined]


def per_channel(value: np.ndarray, channels: int) -> bool:
    """A scalar or a ``[M, 1, 1]`` / ``[1, M, 1, 1]`` vector along the channel axis of an NCHW output."""
    if value.size == 1:
        return value.ndim <= 4
    shape = (1,) * (4 - value.ndim) + value.shape if value.ndim <= 4 else None
    return shape is not None and shape[0] == 1 and shape[1] == channels and shape[2:] == (1, 1)


def is_primitive(node: Node) -> bool:
    """A Subgraph this Tokenizer made: a target runs it as one conv or pooling kernel."""
    return any(node.rt_info.get(k) for k in (CONVOLUTION, POOLING, CONCAT, CHANNEL_SHUFFLE))


def is_channel_concat_of_primitives(node: Node) -> bool:
    """A Concat along the channels of rank-4 f32 tensors (static channels), at least one made by a conv/pool
    primitive (the others: anything but Constants); it then writes each input into its channel slice of an NHWC
    output."""
    if node.type_name != "Concat":
        return False
    out = node.outputs[0].shape
    if not out.rank_is_static or out.rank != 4 or out[1] is None:
        return False
    if node.axis not in (1, -3) or node.outputs[0].element_type is not ElementType.f32:  # type: ignore[attr-defined]
        return False
    srcs = [i.source.node for i in node.inputs]
    return all(s.type_name != "Constant" for s in srcs) and any(is_primitive(s) for s in srcs)


def channel_shuffle_chain(node: Node) -> list[Node] | None:
    """``[Reshape, Transpose, Reshape]`` from ``node`` when they only permute the channels of an f32
    ``[N, C, H, W]`` made by a primitive (ShuffleNet: split C into groups, swap the group axes, merge them back),
    each read only by the next; else None. C must be static; N, H and W may be symbolic (a model exported with
    dynamic axes: the Reshape targets read them from ``Shape(x)``). :func:`channel_permutation` gives the
    permutation."""
    x = node.inputs[0] if node.type_name == "Reshape" else None
    if x is None or not x.shape.rank_is_static or x.shape.rank != 4 or x.element_type is not ElementType.f32:
        return None
    if not isinstance(x.shape[1], int) or any(d is None for d in x.shape.sym_dims):
        return None
    if not is_primitive(x.source.node):
        return None
    chain = [node]
    for want in ("Transpose", "Reshape"):
        out = chain[-1].outputs[0]
        if len(out.targets) != 1 or out.targets[0].node.type_name != want:
            return None
        chain.append(out.targets[0].node)
    if chain[2].outputs[0].shape.sym_dims != x.shape.sym_dims or constant_value(chain[1].inputs[1].source) is None:
        return None
    return chain if channel_permutation(chain) is not None else None


def channel_permutation(chain: list[Node]) -> tuple[int, ...] | None:
    """The source channel of each output channel of a Reshape-Transpose-Reshape ``chain`` on ``[N, C, H, W]``,
    or None when it is not a permutation within each pixel (the Reshape must split only C, the Transpose must
    keep N, H and W in place)."""
    n, c, h, w = chain[0].inputs[0].shape.sym_dims  # N, H, W: ints or the same symbols on both sides
    split = chain[0].outputs[0].shape
    if not split.rank_is_static:
        return None
    dims = split.sym_dims
    groups = dims[1:-2]
    if len(dims) < 4 or dims[0] != n or dims[-2:] != (h, w) or not all(isinstance(d, int) for d in groups) or \
            int(np.prod(groups)) != c or n is None or h is None or w is None:
        return None
    order = [int(a) % len(dims) for a in constant_value(chain[1].inputs[1].source).reshape(-1)]
    last = len(dims) - 1
    if order[0] != 0 or order[-2:] != [last - 1, last]:
        return None
    mid = [a - 1 for a in order[1:-2]]
    return tuple(int(s) for s in np.arange(c).reshape(groups).transpose(mid).reshape(-1))


def _targets_from_input(chain: list[Node]) -> list[Node]:
    """The ops to wrap for a channel shuffle ``chain``: the chain itself when its Reshape targets are Constants;
    with a dynamic N, H or W (targets computed from ``Shape(x)`` by the exporter), targets read from the shuffle's
    own input (``Concat(Gather(ShapeOf(x), [0]), [g, C/g], Gather(ShapeOf(x), [2, 3]))`` and ``ShapeOf(x)``) and
    wrapped with it, so the body keeps N, H and W symbolic and the Subgraph's output shape is its input's."""
    from snippets_core.ir.ops.io import Constant
    from snippets_core.ir.ops.misc import ShapeOf
    from snippets_core.ir.ops.shape_ops import Concat, Gather

    split, _, merge = chain
    if all(r.inputs[1].source.node.type_name == "Constant" for r in (split, merge)):
        return chain
    x = split.inputs[0].source
    shape = ShapeOf(x, name=f"{split.name}/shape")
    axis = Constant(np.array(0, np.int64))
    groups = [d for d in split.outputs[0].shape.dims[1:-2]]  # type: ignore[index]
    target = Concat(Gather(shape, Constant(np.array([0], np.int64)), axis), Constant(np.array(groups, np.int64)),
                    Gather(shape, Constant(np.array([2, 3], np.int64)), axis), axis=0, name=f"{split.name}/target")
    split.inputs[1].replace_source(target.outputs[0])
    merge.inputs[1].replace_source(shape.outputs[0])
    return [shape, *(t.source.node for t in target.inputs if t.source.node.type_name == "Gather"), target, *chain]


GLOBAL_REDUCTIONS = ("ReduceMean", "ReduceMax")


def global_pool_chain(node: Node, after_primitive: bool = True) -> list[Node] | None:
    """The ops of a mean or maximum over the H and W axes of a non-empty ``[N, C, H, W]`` f32 tensor (C static, N
    known or named, H and W may be dynamic) made by a primitive (GlobalAveragePool/GlobalMaxPool as the frontend
    spells them), starting at ``node``: a
    ReduceMean/ReduceMax over axes 2, 3; or, as MoveReductionAxesLast rewrites it, Reshape to ``[N, C, H*W]``,
    the reduction over the last axis, Reshape to ``[N, C, 1, 1]`` or ``[N, C]``, each read only by the next. They
    become a pooling primitive that reads NHWC (or, ``after_primitive`` False, end a conv's chain). None when ``node``
    starts no such chain."""
    x = node.inputs[0] if node.inputs else None
    if x is None or not x.shape.rank_is_static or x.shape.rank != 4 or x.element_type is not ElementType.f32:
        return None
    dims = x.shape.sym_dims  # ints, or named dims; H, W may be unknown (a conv's output of a dynamic image)
    n, c, h, w = dims
    if 0 in dims or n is None or c is None or (after_primitive and not _after_primitive(x.source)):
        return None
    if node.type_name in GLOBAL_REDUCTIONS:
        return [node] if _reduces(node, [2, 3]) else None
    # [N, C, ?] keeps N and C: its last dim holds the H*W pixels, whatever they are
    flat = node.outputs[0].shape
    if node.type_name != "Reshape" or not flat.rank_is_static or flat.sym_dims[:2] != (n, c) or flat.rank != 3:
        return None
    chain = [node]
    for want in (GLOBAL_REDUCTIONS, ("Reshape",)):
        out = chain[-1].outputs[0]
        if len(out.targets) != 1 or out.targets[0].node.type_name not in want:
            return None
        chain.append(out.targets[0].node)
    red, back = chain[1], chain[2].outputs[0].shape
    if not _reduces(red, [2]) or not back.rank_is_static or back.sym_dims not in ((n, c, 1, 1), (n, c)):
        return None
    return chain


def _after_primitive(out: Output) -> bool:
    """``out`` is made by a primitive, or from one through per-channel ops and activations (DenseNet's last
    BatchNormalization-Relu): the eltwise Subgraph they become runs in the primitive's layout, so a global pool
    reading ``out`` reads that layout too (were they left plain, AssignLayouts would insert the reorder)."""
    node = out.node
    while not is_primitive(node) and not _is_int8_conv(node):
        if node.type_name not in CONV_CHANNEL_OPS | CONV_ACTIVATIONS or len(node.outputs) != 1:
            return False
        main = [i.source for i in node.inputs if constant_value(i.source) is None]
        if len(main) != 1 or main[0].shape != out.shape:
            return False
        node = main[0].node
    return True


def _is_int8_conv(node: Node) -> bool:
    """An int8 convolution Subgraph (TokenizeInt8FCSnippets, which runs first): its kernel writes NHWC too."""
    from snippets_core.tokenization.tokenize_int8_fc_snippets import INT8_FULLY_CONNECTED

    spec = node.rt_info.get(INT8_FULLY_CONNECTED)
    return spec is not None and spec.conv is not None


def _reduces(red: Node, axes: list[int]) -> bool:
    """``red`` reduces exactly ``axes`` (normalized) of its input, with Constant axes."""
    value = constant_value(red.inputs[1].source)
    rank = red.inputs[0].shape.rank
    return value is not None and value.size > 0 and sorted({int(a) % rank for a in value.reshape(-1)}) == axes


def pool_reject_reason(pool: Node) -> str | None:
    """None if a MaxPool/AvgPool can be a pooling primitive (2-D, f32, static channels, no indices output), else why
    not."""
    x = pool.inputs[0]
    if len(pool.kernel) != 2:  # type: ignore[attr-defined]
        return f"it is a {len(pool.kernel)}-D pooling; the JIT kernel is 2-D"  # type: ignore[attr-defined]
    if x.element_type is not ElementType.f32:
        return f"it pools {x.element_type.value}; the JIT kernel takes f32"
    if not x.shape.rank_is_static or x.shape.rank != 4 or x.shape[1] is None:
        return f"its input shape {x.shape} has no static channel count (N, H and W may be dynamic)"
    if len(pool.outputs) != 1:
        return "it also returns the indices of the maxima"
    return None


def lrn_reject_reason(lrn: Node) -> str | None:
    """None if an LRN can be a primitive ([N, C, H, W] f32, C static: channels across the NHWC vector lanes)."""
    x = lrn.inputs[0]
    if x.element_type is not ElementType.f32:
        return f"it normalizes {x.element_type.value}; the JIT kernel takes f32"
    if not x.shape.rank_is_static or x.shape.rank != 4 or x.shape[1] is None:
        return f"its input shape {x.shape} is not an [N, C, H, W] with static C"
    return None


def conv_reject_reason(conv: Node) -> str | None:
    """None if ``conv`` can be a conv primitive, else why not."""
    x, w = conv.inputs[0], conv.inputs[1]
    if constant_value(w.source) is None:
        return f"its weight comes from {w.source.node.type_name} '{w.source.node.name}', not a Constant"
    if w.shape.rank != 4:
        return f"it is a {w.shape.rank - 2}-D convolution; the JIT kernel is 2-D"
    if x.element_type is not ElementType.f32 or w.element_type is not ElementType.f32:
        return f"it convolves {x.element_type.value}; the JIT kernel takes f32"
    if not x.shape.rank_is_static or x.shape.rank != 4 or x.shape[1] is None:
        return f"its input shape {x.shape} has no static channel count"
    return None


@dataclass(frozen=True)
class TokenizeConvSnippets(Pass):
    """Wrap each 2-D Convolution with a Constant weight and its post-op chain into a Completed Subgraph marked
    ``CONVOLUTION`` (see the module docstring). ``callback`` is the target's veto (``tokenizer="conv"``)."""

    name: ClassVar[str] = "tokenize-conv-snippets"
    config: TokenizationConfig = field(default_factory=TokenizationConfig)
    callback: TokenizationCallback | None = None

    def run(self, model: Model) -> bool:
        if not self.config.enabled or not self.config.conv_primitives:
            return False
        changed = False
        for node in model.get_ordered_ops():
            if is_channel_concat_of_primitives(node):  # in topological order: its producers are wrapped already
                _wrap([node], CONCAT)
                changed = True
                continue
            shuffle = channel_shuffle_chain(node) if node.type_name == "Reshape" else None
            if shuffle is not None:
                perm = channel_permutation(shuffle)
                _wrap(_targets_from_input(shuffle), CHANNEL_SHUFFLE).rt_info[CHANNEL_PERMUTATION] = perm
                changed = True
                continue
            global_pool = global_pool_chain(node)
            if global_pool is not None:
                _wrap(global_pool, POOLING)
                changed = True
                continue
            if node.type_name in ("MaxPool", "AvgPool", "LRN"):
                why = lrn_reject_reason(node) if node.type_name == "LRN" else pool_reject_reason(node)
                if why is not None:
                    node.rt_info[CONV_REJECT_REASON_KEY] = why
                else:
                    _wrap([node], POOLING)
                    changed = True
                continue
            if node.type_name not in ("Convolution", "ConvolutionBackpropData"):
                continue
            why = conv_reject_reason(node)
            if why is None:
                veto = ask_callback(self.callback, self.config, node, "conv")
                why = None if veto is None else f"vetoed by the target: {veto}"
            if why is not None:
                node.rt_info[CONV_REJECT_REASON_KEY] = why
                continue
            node.rt_info.pop(CONV_REJECT_REASON_KEY, None)
            chain = _post_op_chain(node)
            # a ConvTranspose takes no pre-ops: its target kernel reads a zero-padded copy it does not transform
            pre = _pre_op_chain(node) if node.type_name == "Convolution" else []
            _wrap([*pre, node, *chain], CONVOLUTION)
            changed = True
        return changed


def _post_op_chain(conv: Node) -> list[Node]:
    """The longest chain of post-ops after ``conv``, each the single consumer of the previous one."""
    channels = conv.outputs[0].shape[1]
    shape = conv.outputs[0].shape
    chain: list[Node] = []
    current = conv.outputs[0]
    residual = False
    while True:
        silu = _silu_pair(current)
        if silu is not None:
            chain.extend(silu)
            current = silu[1].outputs[0]
            continue
        if len(current.targets) != 1:
            break
        cand = current.targets[0].node
        if len(cand.outputs) != 1 or cand.outputs[0].shape != shape or cand.outputs[0].element_type != ElementType.f32:
            break
        others = [i.source for i in cand.inputs if i.source is not current]
        t = cand.type_name
        if t in ("Relu", "HSwish", "Sigmoid") and not others:
            pass
        elif t == "Swish" and all(constant_value(o) is not None and constant_value(o).size == 1 for o in others):
            pass
        elif t == "Clamp":
            pass
        elif t == "PRelu" and cand.inputs[0].source is current:
            slope = constant_value(cand.inputs[1].source)
            if slope is None or not per_channel(slope, channels):
                break
        elif t in CONV_CHANNEL_OPS and len(cand.inputs) == 2 and len(others) == 1:
            value = constant_value(others[0])
            first = cand.inputs[0].source is current
            if value is not None:
                if not per_channel(value, channels) or (t in ("Subtract", "Divide") and not first):
                    break
            elif t == "Add" and not residual and others[0].shape == shape and others[0].element_type == ElementType.f32:
                residual = True
            else:
                break
        else:
            break
        chain.append(cand)
        current = cand.outputs[0]
    # a MaxPool/AvgPool read only by the chain ends it: the target pools in the kernel's epilogue (a stem's
    # conv + pool stores the pooled map only) or runs its pool kernel on the output, in the same step; dynamic N, H,
    # W too (the target's epilogue reads the pooled rows from its work table)
    pool = current.targets[0].node if len(current.targets) == 1 else None
    if pool is not None and pool.type_name in ("MaxPool", "AvgPool") and pool_reject_reason(pool) is None:
        chain.append(pool)
    elif pool is not None:  # a global pool (GlobalAveragePool of a classifier head) likewise, as its epilogue
        chain.extend(global_pool_chain(pool, after_primitive=False) or [])
    return chain


def _pre_op_chain(conv: Node) -> list[Node]:
    """Per-channel Multiply/Add/Subtract/Divide by Constants and Relu right before ``conv`` (a pre-activation
    block's BatchNormalization-Relu), each read only by the next: producers first. The target applies them while
    it copies the input into its padded buffer (the padding stays zero, as the convolution pads their result)."""
    channels = conv.inputs[0].shape[1]
    pre: list[Node] = []
    cur = conv.inputs[0].source
    while len(cur.targets) == 1 and len(cur.node.outputs) == 1 and cur.element_type == ElementType.f32:
        node = cur.node
        if node.type_name == "Relu":
            main = node.inputs[0].source
        elif node.type_name in CONV_CHANNEL_OPS and len(node.inputs) == 2:
            consts = [constant_value(i.source) for i in node.inputs]
            k = 1 if consts[1] is not None else 0
            if consts[k] is None or consts[1 - k] is not None or not per_channel(consts[k], channels):
                break
            if k == 0 and node.type_name in ("Subtract", "Divide"):
                break
            main = node.inputs[1 - k].source
        else:
            break
        if main.shape != cur.shape:
            break
        pre.insert(0, node)
        cur = main
    return pre


def _silu_pair(x: Output) -> tuple[Node, Node] | None:
    """``Sigmoid(x)`` and ``Multiply(x, Sigmoid(x))`` when they are ``x``'s only consumers (SiLU as exported)."""
    if len(x.targets) != 2:
        return None
    nodes = [t.node for t in x.targets]
    sig = next((n for n in nodes if n.type_name == "Sigmoid"), None)
    mul = next((n for n in nodes if n.type_name == "Multiply"), None)
    if sig is None or mul is None or len(sig.outputs[0].targets) != 1 or sig.outputs[0].targets[0].node is not mul:
        return None
    if mul.outputs[0].shape != x.shape:
        return None
    return sig, mul


def _wrap(ordered: list[Node], kind: str) -> Subgraph:
    """Replace ``ordered`` (the Convolution first) by one Completed Subgraph; Constants go into the body."""
    inside = {n.id for n in ordered}
    mapping: dict[tuple[int, int], Output] = {}
    params: list[Parameter] = []
    sg_inputs: list[Output] = []
    for op in ordered:
        new_inputs: list[Output] = []
        for inp in op.inputs:
            src = inp.source
            if src.node.id in inside:
                new_inputs.append(mapping[(src.node.id, src.index)])
            elif src.node.type_name == "Constant":
                new_inputs.append(_copy_constant(src.node).outputs[0])
            elif (src.node.id, src.index) in mapping:  # read twice (a channel shuffle's data and its ShapeOf)
                new_inputs.append(mapping[(src.node.id, src.index)])
            else:
                p = Parameter(src.element_type, src.shape, name=_input_name(src))
                params.append(p)
                sg_inputs.append(src)
                new_inputs.append(p.outputs[0])
                mapping[(src.node.id, src.index)] = p.outputs[0]
        clone = op.clone_with_new_inputs(new_inputs)
        clone.rt_info.pop(SNIPPETS_NODE_TYPE, None)
        mapping[(op.id, 0)] = clone.outputs[0]
    last = ordered[-1]
    body = _make_body([_body_result(mapping[(last.id, 0)])], params, last.name)
    sg = Subgraph(*sg_inputs, body=body, name=last.name)
    sg.outputs[0].names |= last.outputs[0].names
    for t in list(last.outputs[0].targets):
        t.replace_source(sg.outputs[0])
    for op in ordered:
        op.disconnect()
    for op in ordered:
        for inp in op.inputs:
            src = inp.source.node
            if src.type_name == "Constant" and not src.outputs[0].targets:
                # read only by the wrapped ops: the node is dead, but its value (the weight: the body's copy shares
                # it, and the target releases that one once packed) would stay until the cyclic GC finds the
                # node (ResNet-50: 89 MiB more peak RSS without it). A zero-stride stand-in of the same shape
                value = src.value  # type: ignore[attr-defined]
                src.value = np.broadcast_to(np.zeros((), value.dtype), value.shape)  # type: ignore[attr-defined]
    sg.rt_info = {k: v for k, v in last.rt_info.items() if k != SNIPPETS_NODE_TYPE}
    sg.rt_info[ORIGINAL_LAYERS_NAMES] = ",".join(op.name for op in ordered)
    sg.rt_info[kind] = True
    mark_completed(sg)
    return sg


__all__ = [
    "CHANNEL_PERMUTATION", "CHANNEL_SHUFFLE", "CONCAT", "CONVOLUTION", "CONV_ACTIVATIONS", "CONV_CHANNEL_OPS", "CONV_REJECT_REASON_KEY",
    "POOLING",
    "TokenizeConvSnippets", "channel_permutation", "channel_shuffle_chain", "conv_reject_reason",
    "global_pool_chain", "is_channel_concat_of_primitives", "is_primitive", "per_channel",
    "pool_reject_reason",
]

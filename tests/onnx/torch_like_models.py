"""Small ONNX models in the shapes torch's two exporters give transformer layers with dynamic axes.

``torch.onnx.export(..., dynamic_axes=...)`` (TorchScript) names the axes after the user's words
(``batch_size``, ``sequence_length``), reads dims one at a time (``Shape -> Gather -> Unsqueeze``), builds
Reshape targets with ``Concat`` of those and constants, expands with ``-1`` through
``Where(Equal(shape, -1), ones, shape)``, decomposes LayerNorm (opset 14) and slices a causal mask out of a
constant buffer. The dynamo exporter (``torch.onnx.export(..., dynamo=True)``) names them ``s0``, ``s1``, reads
dims with ``Shape(start, end)``, uses LayerNormalization (opset 18) and builds the causal mask with
``ConstantOfShape -> Trilu -> Expand -> Slice``. The builders here reproduce those graphs with onnx.helper
and small hidden sizes, so tests (and benchmarks) need no torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: dim_params each exporter writes for the batch and sequence axes
DIM_NAMES = {"torchscript": ("batch_size", "sequence_length"), "dynamo": ("s0", "s1")}
OPSETS = {"torchscript": 14, "dynamo": 18}
_F32_MIN = float(np.finfo(np.float32).min)


class _Graph:
    """A tiny graph builder: each op gets a fresh output name; constants become initializers."""

    def __init__(self, exporter: str, seed: int) -> None:
        if exporter not in DIM_NAMES:
            raise ValueError(f"exporter must be one of {sorted(DIM_NAMES)}, got {exporter!r}")
        self.exporter = exporter
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.rng = np.random.default_rng(seed)
        self._n = 0

    def _name(self, base: str) -> str:
        self._n += 1
        return f"{base}_{self._n}"

    def const(self, value: Any, dtype: Any = None, base: str = "const") -> str:
        name = self._name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def i64(self, *values: int) -> str:
        return self.const(list(values), np.int64)

    def weight(self, *shape: int, scale: float = 0.2) -> str:
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), base="weight")

    def op(self, op_type: str, *inputs: str, n_out: int = 1, **attrs: Any) -> Any:
        outs = [self._name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self._name(op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    # --- the exporters' idioms ------------------------------------------------------------------------
    def dim(self, x: str, i: int) -> str:
        """Dim ``i`` of ``x`` as a 1-element vector, the way each exporter reads it."""
        if self.exporter == "dynamo":
            return self.op("Shape", x, start=i, end=i + 1)
        return self.op("Unsqueeze", self.op("Gather", self.op("Shape", x), self.const(i, np.int64), axis=0),
                       self.i64(0))

    def scalar_dim(self, x: str, i: int) -> str:
        return self.op("Gather", self.op("Shape", x), self.const(i, np.int64), axis=0)

    def linear(self, x: str, n_in: int, n_out: int) -> str:
        return self.op("Add", self.op("MatMul", x, self.weight(n_in, n_out)), self.weight(n_out, scale=0.1))

    def layer_norm(self, x: str, hidden: int) -> str:
        gamma = self.const(1.0 + self.rng.standard_normal(hidden).astype(np.float32) * 0.1)
        beta = self.weight(hidden, scale=0.1)
        if self.exporter == "dynamo":
            return self.op("LayerNormalization", x, gamma, beta, axis=-1, epsilon=1e-5)
        mean = self.op("ReduceMean", x, axes=[-1])
        d = self.op("Sub", x, mean)
        var = self.op("ReduceMean", self.op("Pow", d, self.const(2.0, np.float32)), axes=[-1])
        std = self.op("Sqrt", self.op("Add", var, self.const(1e-5, np.float32)))
        return self.op("Add", self.op("Mul", self.op("Div", d, std), gamma), beta)

    def split_heads(self, x: str, heads: int, head_dim: int) -> str:
        """[B, S, H] -> [B, heads, S, D] through a Reshape whose target is computed from Shape(x)."""
        target = self.op("Concat", self.dim(x, 0), self.dim(x, 1), self.i64(heads, head_dim), axis=0)
        return self.op("Transpose", self.op("Reshape", x, target), perm=[0, 2, 1, 3])

    def merge_heads(self, x: str, hidden: int) -> str:
        """[B, heads, S, D] -> [B, S, H]."""
        t = self.op("Transpose", x, perm=[0, 2, 1, 3])
        if self.exporter == "dynamo":  # x.size()[:-2] + (hidden,): a Slice of the whole shape vector
            lead = self.op("Slice", self.op("Shape", t), self.i64(0), self.i64(-2), self.i64(0), self.i64(1))
            target = self.op("Concat", lead, self.i64(hidden), axis=0)
        else:
            target = self.op("Concat", self.dim(t, 0), self.dim(t, 1), self.i64(hidden), axis=0)
        return self.op("Reshape", t, target)

    def extended_mask(self, mask: str, fill: float) -> str:
        """``(1 - mask[:, None, None, :].float()) * fill``: the additive attention mask of HF models."""
        m = self.op("Cast", self.op("Unsqueeze", mask, self.i64(1, 2)), to=TensorProto.FLOAT)
        return self.op("Mul", self.op("Sub", self.const(1.0, np.float32), m), self.const(fill, np.float32))

    def model(self, name: str, inputs: list[Any], outputs: list[Any]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSETS[self.exporter])],
                              producer_name=f"torch-like-{self.exporter}")
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def bert_encoder_layer(exporter: str = "torchscript", hidden: int = 32, heads: int = 2, ffn: int = 64,
                       seed: int = 0) -> onnx.ModelProto:
    """A BERT encoder layer: inputs ``hidden_states [B, S, H]`` (f32) and ``attention_mask [B, S]`` (i64)."""
    g = _Graph(exporter, seed)
    b, s = DIM_NAMES[exporter]
    d = hidden // heads
    x, mask = "hidden_states", "attention_mask"
    ext = g.extended_mask(mask, -10000.0 if exporter == "torchscript" else _F32_MIN)
    q = g.split_heads(g.linear(x, hidden, hidden), heads, d)
    k = g.split_heads(g.linear(x, hidden, hidden), heads, d)
    v = g.split_heads(g.linear(x, hidden, hidden), heads, d)
    kt = g.op("Transpose", k, perm=[0, 1, 3, 2])
    scores = g.op("Div", g.op("MatMul", q, kt), g.const(np.sqrt(d), np.float32))
    probs = g.op("Softmax", g.op("Add", scores, ext), axis=-1)
    ctx = g.merge_heads(g.op("MatMul", probs, v), hidden)
    h = g.layer_norm(g.op("Add", g.linear(ctx, hidden, hidden), x), hidden)
    up = g.linear(h, hidden, ffn)
    erf = g.op("Erf", g.op("Div", up, g.const(np.sqrt(2.0), np.float32)))
    gelu = g.op("Mul", g.op("Mul", up, g.const(0.5, np.float32)), g.op("Add", erf, g.const(1.0, np.float32)))
    out = g.layer_norm(g.op("Add", g.linear(gelu, ffn, hidden), h), hidden)
    g.nodes.append(helper.make_node("Identity", [out], ["last_hidden_state"]))
    return g.model(f"bert_layer_{exporter}",
                   [helper.make_tensor_value_info(x, TensorProto.FLOAT, [b, s, hidden]),
                    helper.make_tensor_value_info(mask, TensorProto.INT64, [b, s])],
                   [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [b, s, hidden])])


def _causal_mask(g: _Graph, q: str, k: str, ids: str, max_pos: int) -> str:
    """The boolean causal mask ``[.., S, S]`` each exporter builds."""
    if g.exporter == "torchscript":
        # HF GPT-2: bias[:, :, key_len - query_len:key_len, :key_len] of a constant lower-triangular buffer.
        bias = g.const(np.tril(np.ones((max_pos, max_pos), bool)).reshape(1, 1, max_pos, max_pos))
        q_len = g.op("Unsqueeze", g.scalar_dim(q, 2), g.i64(0))
        k_len = g.op("Unsqueeze", g.scalar_dim(k, 2), g.i64(0))
        rows = g.op("Slice", bias, g.op("Sub", k_len, q_len), k_len, g.i64(2), g.i64(1))
        return g.op("Slice", rows, g.i64(0), k_len, g.i64(3), g.i64(1))
    # dynamo: tril(ones(S, S)) expanded to [B, 1, S, S], then causal_mask[:, :, :, :S]
    s = g.dim(ids, 1)
    ones = g.op("ConstantOfShape", g.op("Concat", s, s, axis=0),
                value=numpy_helper.from_array(np.ones(1, np.float32)))
    tri = g.op("Cast", g.op("Trilu", ones, upper=0), to=TensorProto.BOOL)
    target = g.op("Concat", g.dim(ids, 0), g.i64(1), s, s, axis=0)
    full = g.op("Expand", g.op("Unsqueeze", tri, g.i64(0, 1)), target)
    # dynamo writes each ``:`` of ``causal_mask[:, :, :, :S]`` as its own Slice to INT64_MAX
    for axis in (0, 1, 2):
        full = g.op("Slice", full, g.i64(0), g.i64(np.iinfo(np.int64).max), g.i64(axis), g.i64(1))
    return g.op("Slice", full, g.i64(0), s, g.i64(3), g.i64(1))


def _position_ids(g: _Graph, ids: str) -> str:
    """``arange(S)[None].expand(B, S)``."""
    s = g.scalar_dim(ids, 1) if g.exporter == "torchscript" else g.op("Squeeze", g.dim(ids, 1), g.i64(0))
    pos = g.op("Unsqueeze", g.op("Range", g.const(0, np.int64), s, g.const(1, np.int64)), g.i64(0))
    target = g.op("Concat", g.dim(ids, 0), g.dim(ids, 1), axis=0)
    if g.exporter == "torchscript":  # expand(-1, S) as the TorchScript exporter writes it
        ones = g.op("ConstantOfShape", g.op("Shape", target), value=numpy_helper.from_array(np.ones(1, np.int64)))
        target = g.op("Where", g.op("Equal", target, g.i64(-1)), ones, target)
    return g.op("Expand", pos, target)


def gpt2_block(exporter: str = "torchscript", vocab: int = 50, max_pos: int = 64, hidden: int = 32, heads: int = 2,
               seed: int = 0) -> onnx.ModelProto:
    """Embeddings, one GPT-2 decoder block and the final LayerNorm: inputs ``input_ids [B, S]`` and
    ``attention_mask [B, S]`` (i64), output ``hidden [B, S, H]``. ``S`` must not exceed ``max_pos``."""
    g = _Graph(exporter, seed)
    b, s = DIM_NAMES[exporter]
    d = hidden // heads
    ids, mask = "input_ids", "attention_mask"
    x = g.op("Add", g.op("Gather", g.weight(vocab, hidden), ids, axis=0),
             g.op("Gather", g.weight(max_pos, hidden), _position_ids(g, ids), axis=0))
    qkv = g.linear(g.layer_norm(x, hidden), hidden, 3 * hidden)
    q, k, v = g.op("Split", qkv, g.i64(hidden, hidden, hidden), axis=2, n_out=3)
    q, k, v = (g.split_heads(t, heads, d) for t in (q, k, v))
    kt = g.op("Transpose", k, perm=[0, 1, 3, 2])
    scores = g.op("Div", g.op("MatMul", q, kt), g.const(np.sqrt(d), np.float32))
    scores = g.op("Where", _causal_mask(g, q, k, ids, max_pos), scores, g.const(_F32_MIN, np.float32))
    scores = g.op("Add", scores, g.extended_mask(mask, -10000.0))
    ctx = g.merge_heads(g.op("MatMul", g.op("Softmax", scores, axis=-1), v), hidden)
    h = g.op("Add", g.linear(ctx, hidden, hidden), x)
    up = g.linear(g.layer_norm(h, hidden), hidden, 4 * hidden)
    # gelu_new: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
    cube = g.op("Mul", g.const(0.044715, np.float32), g.op("Pow", up, g.const(3.0, np.float32)))
    inner = g.op("Mul", g.const(np.sqrt(2 / np.pi), np.float32), g.op("Add", up, cube))
    half = g.op("Mul", g.const(0.5, np.float32), up)
    gelu = g.op("Mul", half, g.op("Add", g.const(1.0, np.float32), g.op("Tanh", inner)))
    out = g.layer_norm(g.op("Add", g.linear(gelu, 4 * hidden, hidden), h), hidden)
    g.nodes.append(helper.make_node("Identity", [out], ["hidden"]))
    return g.model(f"gpt2_block_{exporter}",
                   [helper.make_tensor_value_info(ids, TensorProto.INT64, [b, s]),
                    helper.make_tensor_value_info(mask, TensorProto.INT64, [b, s])],
                   [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [b, s, hidden])])


def random_inputs(model: onnx.ModelProto, batch: int, seq: int, seed: int = 0,
                  vocab: int = 50) -> dict[str, np.ndarray]:
    """Inputs for one of the models above: random hidden states or token ids, and an attention mask with
    right padding (every row keeps at least its first position)."""
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    for r in range(batch):
        mask[r, rng.integers(1, seq + 1):] = 0
    feeds: dict[str, np.ndarray] = {"attention_mask": mask}
    for vi in model.graph.input:
        if vi.name == "hidden_states":
            hidden = vi.type.tensor_type.shape.dim[2].dim_value
            feeds[vi.name] = rng.standard_normal((batch, seq, hidden)).astype(np.float32)
        elif vi.name == "input_ids":
            feeds[vi.name] = rng.integers(0, vocab, (batch, seq)).astype(np.int64)
    return feeds


BUILDERS = {"bert": bert_encoder_layer, "gpt2": gpt2_block}


# --- CNNs with dynamic N, H, W ------------------------------------------------------------------------------
#: dim_params each exporter writes for a CNN's batch, height and width
CNN_DIM_NAMES = {"torchscript": ("batch_size", "height", "width"), "dynamo": ("s0", "s1", "s2")}
CNN_OPSETS = {"torchscript": 17, "dynamo": 18}


def _floor_divide(g: _Graph, a: str, b: str) -> str:
    """``a // b`` on int64 scalars as the TorchScript exporter writes ``aten::floor_divide`` (opset >= 11): a
    truncating Div, then one less where the signs differ and the division is not exact."""
    div = g.op("Div", a, b)
    zero = g.const(0, np.int64)
    negative = g.op("Xor", g.op("Less", a, zero), g.op("Less", b, zero))
    mod = g.op("Mod", a, b, fmod=0)
    fixup_mask = g.op("And", negative, g.op("Not", g.op("Equal", mod, zero)))
    return g.op("Where", fixup_mask, g.op("Sub", div, g.const(1, np.int64)), div)


def _view_target(g: _Graph, x: str, target: list[int], in_rank: int) -> str:
    """The shape vector each exporter computes for a ``view`` in a CNN's forward, from the static export's constant
    ``target``: ShuffleNet's ``x.view(b, g, c // g, h, w)`` (4-D in, 5-D out) and ``x.view(b, -1, h, w)`` (back),
    and the classifier's ``x.view(b, -1)``. TorchScript reads every size from ``x.size()`` (c // g through
    floor_divide); dynamo writes the sizes it knows statically as constants."""
    u = lambda v: g.op("Unsqueeze", v, g.i64(0))  # noqa: E731
    if in_rank == 4 and len(target) == 5:  # channel shuffle: split C into groups
        groups, per_group = target[1], target[2]
        if g.exporter == "dynamo":
            parts = [g.dim(x, 0), g.i64(groups, per_group), g.dim(x, 2), g.dim(x, 3)]
        else:
            c = g.scalar_dim(x, 1)
            parts = [g.dim(x, 0), g.i64(groups), u(_floor_divide(g, c, g.const(groups, np.int64))),
                     g.dim(x, 2), g.dim(x, 3)]
    elif in_rank == 5 and len(target) == 4:  # channel shuffle: merge the groups back; b, h, w are the Python
        # variables read from the shuffle's input before its first view (``x`` here), not sizes of the 5-D tensor
        parts = [g.dim(x, 0), g.i64(target[1] if g.exporter == "dynamo" else -1), g.dim(x, 2), g.dim(x, 3)]
    elif len(target) == 2:  # flatten for the classifier
        parts = [g.dim(x, 0), g.i64(-1)]
    else:
        raise ValueError(f"no torch view idiom for a rank-{in_rank} input reshaped to {target}")
    return g.op("Concat", *parts, axis=0)


def dynamic_cnn(proto: onnx.ModelProto, exporter: str = "torchscript") -> onnx.ModelProto:
    """A static CNN export (onnx's light models) as torch exports the same module with dynamic N, H and W: the
    input and output dims named, every Reshape's constant target replaced by the shape vector the exporter
    computes for that ``view`` (:func:`_view_target`), at the exporter's opset (onnx's version converter moves the
    rest of the graph there)."""
    from onnx import shape_inference, version_converter

    proto = version_converter.convert_version(proto, CNN_OPSETS[exporter])
    g = _Graph(exporter, 0)
    static = shape_inference.infer_shapes(proto)
    ranks = {vi.name: len(vi.type.tensor_type.shape.dim) for vi in [*static.graph.value_info, *static.graph.input]}
    consts = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    shuffled: dict[str, str] = {}  # a channel shuffle's 5-D tensors -> the 4-D tensor it started from
    for node in proto.graph.node:
        if node.op_type == "Transpose" and node.input[0] in shuffled:
            shuffled[node.output[0]] = shuffled[node.input[0]]
        if node.op_type == "Reshape" and node.input[1] in consts and node.input[0] not in consts:
            target = [int(v) for v in consts[node.input[1]]]
            rank = ranks[node.input[0]]
            if rank == 4 and len(target) == 5:
                shuffled[node.output[0]] = node.input[0]
            new = onnx.NodeProto()
            new.CopyFrom(node)
            new.input[1] = _view_target(g, shuffled.get(node.input[0], node.input[0]), target, rank)
            g.nodes.append(new)
        else:
            g.nodes.append(node)
    n, h, w = CNN_DIM_NAMES[exporter]
    inputs = [onnx.ValueInfoProto() for _ in proto.graph.input]
    for new, old in zip(inputs, proto.graph.input):
        new.CopyFrom(old)
        for d, name in zip(new.type.tensor_type.shape.dim, (n, None, h, w)):
            if name is not None:
                d.dim_param = name
    outputs = [helper.make_tensor_value_info(o.name, o.type.tensor_type.elem_type, None) for o in proto.graph.output]
    graph = helper.make_graph(g.nodes, proto.graph.name, inputs, outputs, [*proto.graph.initializer, *g.inits])
    m = helper.make_model(graph, opset_imports=proto.opset_import, producer_name=f"torch-like-{exporter}")
    m.ir_version = proto.ir_version
    return m


def shufflenet_v2(exporter: str = "torchscript", width: tuple[int, ...] = (16, 32, 64), classes: int = 10,
                  seed: int = 0) -> onnx.ModelProto:
    """torchvision's ShuffleNetV2 at small widths, exported with dynamic N, H, W: a 3x3 stride-2 stem and a
    3x3 stride-2 MaxPool, then per stage a stride-2 block (two branches, concatenated) and a stride-1 block
    (``x.chunk(2, dim=1)``, one half through the branch), each ending in ``channel_shuffle(out, 2)``
    (Shape/Gather/floor_divide/Concat -> Reshape, Transpose, Reshape), a 1x1 conv, ``x.mean([2, 3])`` and the
    classifier. BatchNorm is folded into the convs' biases, as eval-mode exports write it."""
    g = _Graph(exporter, seed)
    u = lambda v: g.op("Unsqueeze", v, g.i64(0))  # noqa: E731

    def conv(x: str, c_in: int, c_out: int, k: int = 1, stride: int = 1, depthwise: bool = False,
             relu: bool = True) -> str:
        group = c_in if depthwise else 1
        w = g.weight(c_out, c_in // group, k, k, scale=float(np.sqrt(2.0 / (c_in // group * k * k))))
        y = g.op("Conv", x, w, g.weight(c_out, scale=0.05), kernel_shape=[k, k], strides=[stride, stride],
                 pads=[k // 2] * 4, group=group)
        return g.op("Relu", y) if relu else y

    def shuffle(x: str, c: int) -> str:
        if exporter == "dynamo":
            parts = [g.dim(x, 0), g.i64(2, c // 2), g.dim(x, 2), g.dim(x, 3)]
            back = [g.dim(x, 0), g.i64(c), g.dim(x, 2), g.dim(x, 3)]
        else:  # batchsize, num_channels, height, width = x.size(); channels_per_group = num_channels // 2
            b, ch, hh, ww = (g.scalar_dim(x, i) for i in range(4))
            parts = [u(b), g.i64(2), u(_floor_divide(g, ch, g.const(2, np.int64))), u(hh), u(ww)]
            back = [u(b), u(ch), u(hh), u(ww)]  # x.view(batchsize, num_channels, height, width)
        y = g.op("Reshape", x, g.op("Concat", *parts, axis=0))
        y = g.op("Transpose", y, perm=[0, 2, 1, 3, 4])
        return g.op("Reshape", y, g.op("Concat", *back, axis=0))

    def block(x: str, c_in: int, c_out: int, stride: int) -> str:
        half = c_out // 2
        if stride == 1:  # x1, x2 = x.chunk(2, dim=1)
            if exporter == "dynamo":
                x1, x2 = g.op("Split", x, axis=1, num_outputs=2, n_out=2)
            else:
                x1, x2 = g.op("Split", x, g.i64(half, half), axis=1, n_out=2)
            b_in = half
        else:
            x1 = conv(conv(x, c_in, c_in, 3, stride, depthwise=True, relu=False), c_in, half)
            x2, b_in = x, c_in
        b2 = conv(conv(conv(x2, b_in, half), half, half, 3, stride, depthwise=True, relu=False), half, half)
        return shuffle(g.op("Concat", x1, b2, axis=1), c_out)

    x = g.op("MaxPool", conv("input", 3, width[0], 3, 2), kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    c = width[0]
    for c_out in width[1:]:
        x = block(block(x, c, c_out, 2), c_out, c_out, 1)
        c = c_out
    x = conv(x, c, 2 * c)
    if exporter == "dynamo":
        x = g.op("ReduceMean", x, g.i64(2, 3), keepdims=0)
    else:
        x = g.op("ReduceMean", x, axes=[2, 3], keepdims=0)
    x = g.op("Gemm", x, g.weight(classes, 2 * c, scale=float(1 / np.sqrt(2 * c))), g.weight(classes, scale=0.1),
             transB=1)
    g.nodes.append(helper.make_node("Identity", [x], ["logits"]))
    n, h, w = CNN_DIM_NAMES[exporter]
    graph = helper.make_graph(g.nodes, f"shufflenet_v2_{exporter}",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [n, 3, h, w])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [n, classes])], g.inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", CNN_OPSETS[exporter])],
                          producer_name=f"torch-like-{exporter}")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m

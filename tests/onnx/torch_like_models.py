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

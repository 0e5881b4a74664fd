"""Whole-model ONNX graphs for bench/models.py, built with onnx.helper in the form torch exports them.

Every builder returns a :class:`ZooModel`: the ModelProto (dynamic ``batch`` / ``sequence`` dim_params on
the inputs, as ``torch.onnx.export(..., dynamic_axes=...)`` writes them), the feeds for the fixed shape the
benchmark runs, and the multiply-add count of its MatMuls (for GFLOP/s). Weights are random from a fixed seed.

What each graph carries, as the exporters write it:

* ``bert_layer``: a BERT-base encoder layer (TorchScript form): Q/K/V/O linear layers as MatMul + Add, heads
  split with Reshape/Transpose, scores scaled by Div, the attention_mask [batch, sequence] (int64) expanded
  through Unsqueeze, Cast, Sub(1, m), Mul(min float), Softmax, the merged heads reshaped with a shape
  computed through Shape/Gather/Unsqueeze/Concat, the residual Add, LayerNorm decomposed (ReduceMean, Sub,
  Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul gamma, Add beta), the FFN with the Erf form of Gelu.
* ``gpt2_block``: a GPT-2 decoder block (pre-LN, LayerNormalization of the dynamo exporter): one QKV MatMul
  split in three, the causal mask sliced from a constant lower-triangular buffer with the sequence length
  read by Shape/Gather, applied with Where(mask, scores, min float), the tanh form of Gelu.
* ``vit_block``: a ViT-B/16 encoder block (pre-LN, LayerNormalization, Erf Gelu, no mask) on 197 tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SEED = 20260601
FLOAT_MIN = float(np.finfo(np.float32).min)
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@dataclass
class ZooModel:
    """One benchmark model: its graph, the feeds at the fixed shape, and its MatMul multiply-adds."""

    name: str
    proto: Any
    feeds: dict[str, np.ndarray]
    macs: int
    description: str
    #: dim_param -> the value it takes in ``feeds`` (what ``--static`` writes into the graph)
    dims: dict[str, int] = field(default_factory=dict)
    #: multiply-adds of the Conv nodes alone (for the conv GFLOP/s column)
    conv_macs: int = 0
    #: the outside oracle of the outputs: onnx's "reference" evaluator, or "onnxruntime" where the reference
    #: evaluator's convolutions would take minutes (the CNNs)
    oracle: str = "reference"
    #: an output is marked WRONG past this fraction of its largest magnitude (f32 models: 1e-3; a quantized model's
    #: contenders each round onto the quantization grids on their own, and land a few output steps apart)
    tol_rel: float = 1e-3


class _Graph:
    """A small builder over onnx.helper: fresh names, initializers from numpy, MACs of each MatMul."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.macs_per_token = 0  # per (batch x sequence) row: every MatMul here is linear in the tokens
        self._n = 0

    def name(self, base: str) -> str:
        self._n += 1
        return f"{base}_{self._n}"

    def const(self, value: np.ndarray, base: str = "c") -> str:
        from onnx import numpy_helper

        n = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def op(self, op_type: str, *inputs: str, outputs: int = 1, **attrs: Any) -> Any:
        from onnx import helper

        outs = [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.name(op_type), **attrs))
        return outs[0] if outputs == 1 else outs

    def linear(self, x: str, n_in: int, n_out: int) -> str:
        """``x @ W + b`` as torch exports nn.Linear (MatMul on the transposed weight, then Add)."""
        w = (self.rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)
        b = (0.02 * self.rng.standard_normal(n_out)).astype(np.float32)
        self.macs_per_token += n_in * n_out
        return self.op("Add", self.op("MatMul", x, self.const(w, "weight")), self.const(b, "bias"))

    def layer_norm_decomposed(self, x: str, hidden: int, eps: float = 1e-12) -> str:
        """TorchScript's LayerNorm: ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul, Add."""
        mean = self.op("ReduceMean", x, axes=[-1], keepdims=1)
        d = self.op("Sub", x, mean)
        var = self.op("ReduceMean", self.op("Pow", d, self.const(np.float32(2.0))), axes=[-1], keepdims=1)
        std = self.op("Sqrt", self.op("Add", var, self.const(np.float32(eps))))
        y = self.op("Div", d, std)
        gamma, beta = self._ln_params(hidden)
        return self.op("Add", self.op("Mul", y, gamma), beta)

    def layer_norm(self, x: str, hidden: int, eps: float = 1e-5) -> str:
        """The dynamo exporter's LayerNormalization op."""
        gamma, beta = self._ln_params(hidden)
        return self.op("LayerNormalization", x, gamma, beta, axis=-1, epsilon=eps)

    def _ln_params(self, hidden: int) -> tuple[str, str]:
        gamma = (1 + 0.1 * self.rng.standard_normal(hidden)).astype(np.float32)
        beta = (0.1 * self.rng.standard_normal(hidden)).astype(np.float32)
        return self.const(gamma, "gamma"), self.const(beta, "beta")

    def gelu_erf(self, x: str) -> str:
        """torch's exact Gelu: x * 0.5 * (1 + erf(x / sqrt 2))."""
        e = self.op("Erf", self.op("Div", x, self.const(np.float32(np.sqrt(2.0)))))
        return self.op("Mul", self.op("Mul", x, self.op("Add", e, self.const(np.float32(1.0)))),
                       self.const(np.float32(0.5)))

    def gelu_tanh(self, x: str) -> str:
        """GPT-2's Gelu: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
        cube = self.op("Pow", x, self.const(np.float32(3.0)))
        inner = self.op("Add", x, self.op("Mul", cube, self.const(np.float32(0.044715))))
        t = self.op("Tanh", self.op("Mul", inner, self.const(np.float32(np.sqrt(2 / np.pi)))))
        half_x = self.op("Mul", x, self.const(np.float32(0.5)))
        return self.op("Mul", half_x, self.op("Add", t, self.const(np.float32(1.0))))

    def dim(self, x: str, axis: int) -> str:
        """Dim ``axis`` of ``x`` as a 1-element int64 tensor: Shape, Gather, Unsqueeze (TorchScript's way)."""
        g = self.op("Gather", self.op("Shape", x), self.const(np.int64(axis)), axis=0)
        return self.op("Unsqueeze", g, self.const(np.array([0], np.int64)))

    def split_heads(self, x: str, heads: int, head_dim: int, perm: list[int]) -> str:
        r = self.op("Reshape", x, self.const(np.array([0, 0, heads, head_dim], np.int64)))
        return self.op("Transpose", r, perm=perm)

    def merge_heads(self, ctx: str, like: str, hidden: int) -> str:
        """[B, H, S, D] -> [B, S, H*D] with the target shape computed from ``like`` (Shape/Gather/Concat)."""
        t = self.op("Transpose", ctx, perm=[0, 2, 1, 3])
        shape = self.op("Concat", self.dim(like, 0), self.dim(like, 1),
                        self.const(np.array([hidden], np.int64)), axis=0)
        return self.op("Reshape", t, shape)

    def attention(self, q: str, k: str, v: str, heads: int, head_dim: int) -> tuple[str, str]:
        """Scores and the context producer: split heads, Q K^T / sqrt(d). Returns (scores, v_heads)."""
        qh = self.split_heads(q, heads, head_dim, [0, 2, 1, 3])
        kh = self.split_heads(k, heads, head_dim, [0, 2, 3, 1])
        vh = self.split_heads(v, heads, head_dim, [0, 2, 1, 3])
        scores = self.op("Div", self.op("MatMul", qh, kh), self.const(np.float32(np.sqrt(head_dim))))
        return scores, vh

    def model(self, name: str, inputs: list[Any], output: str, out_shape: list[Any]) -> Any:
        from onnx import TensorProto, helper

        graph = helper.make_graph(self.nodes, name, inputs,
                                  [helper.make_tensor_value_info(output, TensorProto.FLOAT, out_shape)],
                                  initializer=self.inits)
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="snippets-bench")
        proto.ir_version = 8
        return proto


def _float_input(name: str, hidden: int) -> Any:
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", "sequence", hidden])


def bert_layer(seq: int, batch: int = 1, hidden: int = 768, heads: int = 12, ffn: int = 3072) -> ZooModel:
    """A BERT-base encoder layer as TorchScript exports it (see the module docstring)."""
    from onnx import TensorProto, helper

    g = _Graph(SEED + seq)
    head_dim = hidden // heads
    x = "hidden_states"
    # the extended attention mask: (1 - mask[:, None, None, :]) * finfo.min
    m = g.op("Unsqueeze", "attention_mask", g.const(np.array([1, 2], np.int64)))
    m = g.op("Cast", m, to=TensorProto.FLOAT)
    ext = g.op("Mul", g.op("Sub", g.const(np.float32(1.0)), m), g.const(np.float32(FLOAT_MIN)))
    scores, vh = g.attention(g.linear(x, hidden, hidden), g.linear(x, hidden, hidden), g.linear(x, hidden, hidden),
                             heads, head_dim)
    probs = g.op("Softmax", g.op("Add", scores, ext), axis=-1)
    ctx = g.merge_heads(g.op("MatMul", probs, vh), x, hidden)
    h1 = g.layer_norm_decomposed(g.op("Add", g.linear(ctx, hidden, hidden), x), hidden)
    ff = g.linear(g.gelu_erf(g.linear(h1, hidden, ffn)), ffn, hidden)
    out = g.layer_norm_decomposed(g.op("Add", ff, h1), hidden)
    inputs = [_float_input(x, hidden),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"])]
    proto = g.model(f"bert_layer_s{seq}", inputs, out, ["batch", "sequence", hidden])
    rng = np.random.default_rng(SEED + 1)
    mask = np.ones((batch, seq), np.int64)
    mask[:, seq - seq // 8:] = 0  # padded tail, as a batch of unequal sentences has
    feeds = {x: rng.standard_normal((batch, seq, hidden), dtype=np.float32), "attention_mask": mask}
    macs = g.macs_per_token * batch * seq + 2 * batch * heads * seq * seq * head_dim
    return ZooModel(f"bert_s{seq}", proto, feeds, macs,
                    f"BERT-base encoder layer, seq {seq}: TorchScript LayerNorm, Erf Gelu, attention_mask",
                    {"batch": batch, "sequence": seq})


def gpt2_block(seq: int, batch: int = 1, hidden: int = 768, heads: int = 12, max_positions: int = 1024) -> ZooModel:
    """A GPT-2 decoder block with a causal mask (see the module docstring)."""
    g = _Graph(SEED + 2 * seq)
    head_dim = hidden // heads
    x = "hidden_states"
    h = g.layer_norm(x, hidden)
    qkv = g.linear(h, hidden, 3 * hidden)
    q, k, v = g.op("Split", qkv, g.const(np.array([hidden] * 3, np.int64)), axis=-1, outputs=3)
    scores, vh = g.attention(q, k, v, heads, head_dim)
    # causal mask: bias[:, :, :S, :S] of a constant lower-triangular buffer, S read from the input's shape
    tril = np.tril(np.ones((max_positions, max_positions), bool))[None, None]
    s = g.dim(x, 1)
    zero = g.const(np.array([0, 0], np.int64))
    causal = g.op("Slice", g.const(tril, "causal_bias"), zero, g.op("Concat", s, s, axis=0),
                  g.const(np.array([2, 3], np.int64)))
    masked = g.op("Where", causal, scores, g.const(np.float32(FLOAT_MIN)))
    probs = g.op("Softmax", masked, axis=-1)
    ctx = g.merge_heads(g.op("MatMul", probs, vh), x, hidden)
    h1 = g.op("Add", g.linear(ctx, hidden, hidden), x)
    ff = g.linear(g.gelu_tanh(g.linear(g.layer_norm(h1, hidden), hidden, 4 * hidden)), 4 * hidden, hidden)
    return _block(g, f"gpt2_s{seq}", g.op("Add", ff, h1), (batch, seq, hidden),
                  f"GPT-2 decoder block, seq {seq}: LayerNormalization, causal mask via Slice + Where, tanh Gelu")


def _block(g: _Graph, name: str, out: str, dims: tuple[int, int, int], description: str) -> ZooModel:
    """A block with one input ``hidden_states`` [batch, sequence, hidden] and one output of that shape."""
    batch, seq, hidden = dims
    proto = g.model(name, [_float_input("hidden_states", hidden)], out, ["batch", "sequence", hidden])
    x = np.random.default_rng(SEED + seq).standard_normal((batch, seq, hidden), dtype=np.float32)
    macs = g.macs_per_token * batch * seq + 2 * batch * seq * seq * hidden  # + the two attention MatMuls
    return ZooModel(name, proto, {"hidden_states": x}, macs, description, {"batch": batch, "sequence": seq})


def vit_block(tokens: int = 197, batch: int = 1, hidden: int = 768, heads: int = 12, mlp: int = 3072) -> ZooModel:
    """A ViT-B/16 encoder block (see the module docstring)."""
    g = _Graph(SEED + 3 * tokens)
    head_dim = hidden // heads
    x = "hidden_states"
    h = g.layer_norm(x, hidden, 1e-6)
    scores, vh = g.attention(g.linear(h, hidden, hidden), g.linear(h, hidden, hidden), g.linear(h, hidden, hidden),
                             heads, head_dim)
    ctx = g.merge_heads(g.op("MatMul", g.op("Softmax", scores, axis=-1), vh), x, hidden)
    h1 = g.op("Add", g.linear(ctx, hidden, hidden), x)
    ff = g.linear(g.gelu_erf(g.linear(g.layer_norm(h1, hidden, 1e-6), hidden, mlp)), mlp, hidden)
    return _block(g, f"vit_t{tokens}", g.op("Add", ff, h1), (batch, tokens, hidden),
                  f"ViT-B/16 encoder block, {tokens} tokens: LayerNormalization, Erf Gelu")


def example(name: str) -> ZooModel:
    """One of examples/*.onnx, fed random inputs of its declared (static) shapes."""
    import onnx
    from onnx import numpy_helper  # noqa: F401 - makes onnx.helper.tensor_dtype_to_np_dtype available

    proto = onnx.load(str(EXAMPLES / f"{name}.onnx"))
    rng = np.random.default_rng(SEED + 5)
    feeds: dict[str, np.ndarray] = {}
    init_names = {i.name for i in proto.graph.initializer}
    for inp in proto.graph.input:
        if inp.name in init_names:
            continue
        tt = inp.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        feeds[inp.name] = rng.standard_normal(shape).astype(dtype)
    return ZooModel(f"example:{name}", proto, feeds, _matmul_macs(proto, feeds), f"examples/{name}.onnx")


def _matmul_macs(proto: Any, feeds: dict[str, np.ndarray]) -> int:
    """Multiply-adds of the MatMul/Gemm/Conv nodes, from onnx shape inference at the feeds' shapes."""
    return _op_macs(proto, feeds, ("MatMul", "Gemm", "Conv"))


def _op_macs(proto: Any, feeds: dict[str, np.ndarray], ops: tuple[str, ...]) -> int:
    """Multiply-adds of the nodes of type ``ops`` (MatMul, Gemm, Conv) at the feeds' shapes."""
    import onnx

    p = onnx.ModelProto()
    p.CopyFrom(proto)
    fix_dims(p, {})
    inferred = onnx.shape_inference.infer_shapes(p)
    shapes: dict[str, list[int]] = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        shapes[vi.name] = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    for init in inferred.graph.initializer:
        shapes[init.name] = list(init.dims)
    macs = 0
    for node in (n for n in inferred.graph.node if n.op_type in ops):
        if node.op_type in ("MatMul", "Gemm") and node.input[0] in shapes and node.output[0] in shapes:
            out = shapes[node.output[0]]
            k = shapes[node.input[0]][-1]
            macs += int(np.prod(out, dtype=np.int64)) * k
        elif node.op_type == "Conv" and node.input[1] in shapes and node.output[0] in shapes:
            w = shapes[node.input[1]]
            macs += int(np.prod(shapes[node.output[0]], dtype=np.int64)) * int(np.prod(w[1:], dtype=np.int64))
    return macs


def fix_dims(proto: Any, dims: dict[str, int]) -> Any:
    """Write fixed values for the inputs' dim_params (``--static``): ``dims`` by name, else 1. In place."""
    for inp in proto.graph.input:
        for d in inp.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                d.dim_value = dims.get(d.dim_param, 1)
    for out in proto.graph.output:
        for d in out.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in dims:
                d.dim_value = dims[d.dim_param]
    return proto


#: name -> builder of every model bench/models.py knows
MODELS: dict[str, Any] = {
    "bert_s128": lambda: bert_layer(128),
    "bert_s384": lambda: bert_layer(384),
    "gpt2_s128": lambda: gpt2_block(128),
    "vit_t197": lambda: vit_block(197),
    "transformer_block": lambda: example("transformer_block"),
    "cnn_block": lambda: example("cnn_block"),
    "activation_head": lambda: example("activation_head"),
}


# --- CNNs (issue 12) ---------------------------------------------------------------------------------------
#: the light CNNs of onnx's backend test data (``onnx/backend/test/data/light``, shipped inside the onnx
#: wheel, nothing downloaded; tests/onnx/test_onnx_model_conformance.py and targets/x86_64/tests/
#: test_conv_models.py load them from the same place)
LIGHT_CNNS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
              "vgg19", "zfnet512")


def light_cnn(name: str) -> ZooModel:
    """A light CNN with random weights: the file's ConstantOfShape fills become random initializers (a constant
    fill would let wrong indexing pass and invites constant folding), the input a random image."""
    import onnx
    from onnx import helper, numpy_helper

    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"
    if not path.exists():
        raise FileNotFoundError(f"{path} is not on disk (the onnx wheel ships it; is onnx installed?)")
    model = onnx.load(str(path))
    rng = np.random.default_rng(SEED + 7)
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    nodes, inits = [], list(model.graph.initializer)
    for n in model.graph.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in consts:
            shape = tuple(int(d) for d in consts[n.input[0]])
            w = rng.standard_normal(shape) / np.sqrt(max(int(np.prod(shape[1:])), 1))
            if len(shape) == 1:  # BatchNormalization's scale and variance stay positive
                w = rng.uniform(0.5, 1.5, shape)
            inits.append(numpy_helper.from_array(w.astype(np.float32), n.output[0]))
        else:
            nodes.append(n)
    used = {i for n in nodes for i in n.input}
    inits = [t for t in inits if t.name in used]
    names = {t.name for t in inits}
    inputs = [vi for vi in model.graph.input if vi.name not in names and vi.name in used]
    proto = helper.make_model(helper.make_graph(nodes, name, inputs, list(model.graph.output), initializer=inits),
                              opset_imports=model.opset_import)
    proto.ir_version = 4  # initializers need not be listed as inputs
    shape = tuple(d.dim_value for d in inputs[0].type.tensor_type.shape.dim)
    feeds = {inputs[0].name: np.random.default_rng(SEED + 8).standard_normal(shape).astype(np.float32)}
    return ZooModel(name, proto, feeds, _matmul_macs(proto, feeds), f"onnx backend data light_{name}.onnx, "
                    f"random weights, input {list(shape)}", conv_macs=_op_macs(proto, feeds, ("Conv",)),
                    oracle="onnxruntime")


#: MobileNet-v2's inverted residual stages: (expansion t, output channels c, repeats n, first stride s)
MOBILENET_V2_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1))


def mobilenet_v2(hw: int = 224, classes: int = 1000) -> ZooModel:
    """MobileNet-v2 as torchvision exports it in eval mode (BatchNorm folded into the Conv's bias): a 3x3 s2
    stem, inverted residual blocks (1x1 expand, Relu6 as Clip(0, 6), 3x3 depthwise, 1x1 linear projection,
    a residual Add where stride 1 keeps the channels), a 1x1 to 1280, GlobalAveragePool, Flatten, Gemm."""
    from onnx import TensorProto, helper

    g = _Graph(SEED + 9)
    six = (g.const(np.float32(0.0)), g.const(np.float32(6.0)))

    def conv(x: str, c_in: int, c_out: int, k: int, stride: int, group: int = 1, relu6: bool = True) -> str:
        w = (g.rng.standard_normal((c_out, c_in // group, k, k)) * np.sqrt(2.0 / (c_in // group * k * k)))
        b = 0.05 * g.rng.standard_normal(c_out)
        y = g.op("Conv", x, g.const(w.astype(np.float32), "weight"), g.const(b.astype(np.float32), "bias"),
                 kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=group)
        return g.op("Clip", y, *six) if relu6 else y

    x = conv("input", 3, 32, 3, 2)
    c = 32
    for t, c_out, n, s in MOBILENET_V2_STAGES:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = c * t
            h = conv(x, c, hidden, 1, 1) if t != 1 else x
            h = conv(h, hidden, hidden, 3, stride, group=hidden)
            h = conv(h, hidden, c_out, 1, 1, relu6=False)
            x = g.op("Add", x, h) if stride == 1 and c == c_out else h
            c = c_out
    x = conv(x, c, 1280, 1, 1)
    x = g.op("Flatten", g.op("GlobalAveragePool", x), axis=1)
    fc_w = (g.rng.standard_normal((classes, 1280)) / np.sqrt(1280)).astype(np.float32)
    x = g.op("Gemm", x, g.const(fc_w, "fc_weight"), g.const(np.zeros(classes, np.float32), "fc_bias"), transB=1)
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, hw, hw])
    proto = g.model("mobilenet_v2", [inp], x, [1, classes])
    feeds = {"input": np.random.default_rng(SEED + 10).standard_normal((1, 3, hw, hw)).astype(np.float32)}
    return ZooModel("mobilenet_v2", proto, feeds, _matmul_macs(proto, feeds),
                    f"MobileNet-v2 {hw}x{hw}, built with onnx.helper: depthwise 3x3, Relu6 as Clip, residual Adds",
                    conv_macs=_op_macs(proto, feeds, ("Conv",)), oracle="onnxruntime")


def unet_decoder(hw: int = 28, channels: int = 256) -> ZooModel:
    """A UNet/FCN-style decoder: three upsamplings by 2 from a ``channels`` x ``hw`` x ``hw`` feature map, each a
    ConvTranspose (2x2 stride 2, UNet's up-convolution; 4x4 stride 2 pad 1, FCN's/DCGAN's) with bias and Relu, then
    a 3x3 conv-Relu; a 1x1 conv to 2 classes at the end."""
    from onnx import TensorProto, helper

    g = _Graph(SEED + 11)
    x, c, size, macs = "features", channels, hw, 0
    for k, pad in ((2, 0), (4, 1), (2, 0)):
        w = (g.rng.standard_normal((c, c // 2, k, k)) * np.sqrt(2.0 / (c * k * k / 4))).astype(np.float32)
        b = (0.05 * g.rng.standard_normal(c // 2)).astype(np.float32)
        x = g.op("Relu", g.op("ConvTranspose", x, g.const(w, "up_weight"), g.const(b, "up_bias"), kernel_shape=[k, k],
                              strides=[2, 2], pads=[pad] * 4))
        macs += c * size * size * (c // 2) * k * k  # every input pixel times the whole kernel
        c, size = c // 2, size * 2
        w = (g.rng.standard_normal((c, c, 3, 3)) * np.sqrt(2.0 / (c * 9))).astype(np.float32)
        x = g.op("Relu", g.op("Conv", x, g.const(w, "weight"), g.const(np.zeros(c, np.float32), "bias"),
                              kernel_shape=[3, 3], pads=[1] * 4))
    w = (g.rng.standard_normal((2, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    x = g.op("Conv", x, g.const(w, "head"))
    inp = helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, channels, hw, hw])
    proto = g.model("unet_decoder", [inp], x, [1, 2, size, size])
    feeds = {"features": np.random.default_rng(SEED + 12).standard_normal((1, channels, hw, hw)).astype(np.float32)}
    conv_macs = _op_macs(proto, feeds, ("Conv",)) + macs
    return ZooModel("unet_decoder", proto, feeds, conv_macs,
                    f"UNet-style decoder {channels}x{hw}x{hw} -> 2x{size}x{size}: ConvTranspose 2x2 and 4x4 stride 2, "
                    "3x3 convs", conv_macs=conv_macs, oracle="onnxruntime")


def cnn_models() -> dict[str, Any]:
    """name -> builder of the CNN rows (``--models cnn`` in bench/models.py)."""
    rows: dict[str, Any] = {name: (lambda name=name: light_cnn(name)) for name in LIGHT_CNNS}
    rows["mobilenet_v2"] = mobilenet_v2
    rows["unet_decoder"] = unet_decoder
    return rows


#: the CNN rows: not in the default list (a minute or more each at two thread counts)
CNN_MODELS: dict[str, Any] = cnn_models()
